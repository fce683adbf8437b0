"""
The session file written from each message's text encoded once
(:mod:`acpkit_agent.history_encoding`): the same bytes as encoding the whole document, a
save encodes only the messages it has not seen, and a crash mid-write keeps the last file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acpkit_agent import history_encoding
from acpkit_agent.session import Session, estimate_tokens
from acpkit_agent.store import DiskSessionStore, session_file_chunks, session_to_document

ROOT = Path(__file__).resolve().parent.parent.parent

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool"])},
    optional={"content": json_values, "tool_calls": st.lists(json_values, max_size=2)},
)
#: An edit of the history: append, replace one message, delete a slice, insert.
edits = st.one_of(
    st.tuples(st.just("append"), messages),
    st.tuples(st.just("replace"), st.integers(0, 50), messages),
    st.tuples(st.just("delete"), st.integers(0, 50), st.integers(0, 50)),
    st.tuples(st.just("insert"), st.integers(0, 50), messages),
)


def whole_document_bytes(session: Session) -> bytes:
    """What the store wrote before: the whole document encoded at each save."""
    document = session_to_document(session, updated="2026-12-06T08:00:00+00:00")
    return (json.dumps(document, ensure_ascii=False, indent=1) + "\n").encode("utf-8")


def chunked_bytes(session: Session) -> bytes:
    return b"".join(session_file_chunks(session, updated="2026-12-06T08:00:00+00:00"))


def apply(history: list[dict[str, Any]], edit: tuple[Any, ...]) -> None:
    kind = edit[0]
    if kind == "append":
        history.append(dict(edit[1]))
    elif kind == "replace" and history:
        history[edit[1] % len(history)] = dict(edit[2])
    elif kind == "delete":
        del history[edit[1] : edit[1] + edit[2] % 4]
    elif kind == "insert":
        history.insert(edit[1], dict(edit[2]))


@given(st.lists(edits, max_size=12), st.text())
def test_chunks_are_the_whole_document_bytes(steps: list[tuple[Any, ...]], cwd: str) -> None:
    """
    After any sequence of edits (appends, replacements, deletions, insertions), each save's
    bytes are exactly those of the whole document encoded at once, and the token estimate
    is the one of the whole history.
    """
    session = Session.create("s1", cwd)
    for step in steps:
        apply(session.history, step)
        assert chunked_bytes(session) == whole_document_bytes(session)
        assert session.used_tokens() == estimate_tokens(session.history)


def test_a_save_encodes_only_the_new_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    """After each turn, a save encodes the turn's messages only, not the history before."""
    encoded: list[dict[str, Any]] = []
    real = history_encoding.file_entry

    def counting(message: dict[str, Any]) -> bytes:
        encoded.append(message)
        return real(message)

    monkeypatch.setattr(history_encoding, "file_entry", counting)
    session = Session.create("s1", "/project")
    chunked_bytes(session)
    for turn in range(20):
        encoded.clear()
        question = {"role": "user", "content": f"question {turn}"}
        answer = {"role": "assistant", "content": "x" * 1000}
        session.history += [question, answer]
        session.used_tokens()
        assert chunked_bytes(session) == whole_document_bytes(session)
        assert encoded == [question, answer]


def test_recorded_call_id_reaches_the_file_after_a_save() -> None:
    """
    A live call id recorded after the message was encoded (the token estimate ran) is in
    the next save: the message is replaced, not changed in place.
    """
    session = Session.create("s1", "/project")
    call = {"id": "m1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    session.history.append({"role": "assistant", "content": "", "tool_calls": [call]})
    session.used_tokens()
    chunked_bytes(session)
    session.record_call_id("m1", "call_7")
    saved = json.loads(chunked_bytes(session))
    assert saved["history"][-1]["tool_calls"][0]["acpToolCallId"] == "call_7"
    assert chunked_bytes(session) == whole_document_bytes(session)


def test_store_writes_and_loads_the_same_session(tmp_path: Path) -> None:
    """The store's file loads back to the same history (session/load reads it whole)."""
    store = DiskSessionStore(".sessions")
    session = Session.create("s1", str(tmp_path))
    session.history.append({"role": "user", "content": "é\n" * 10})
    assert store.write(session)
    session.history.append({"role": "assistant", "content": "done"})
    assert store.write(session)
    loaded = store.load("s1", str(tmp_path))
    assert loaded.history == session.history


CRASH_MID_WRITE = """
import os, sys
from acpkit_agent.session import Session
from acpkit_agent.store import DiskSessionStore, atomic_write, session_file_chunks

store = DiskSessionStore(".sessions")
session = Session.create("s1", sys.argv[1])
session.history.append({"role": "user", "content": "kept"})
store.write(session)
session.history.append({"role": "assistant", "content": "lost " * 10000})

def dying(chunks):
    yield chunks[0]
    yield chunks[1]
    os._exit(9)  # the process dies with the new file half written

atomic_write(store.path_for("s1", sys.argv[1]), dying(session_file_chunks(session)))
"""


@pytest.mark.process
def test_a_crash_mid_write_keeps_the_last_saved_file(tmp_path: Path) -> None:
    """
    An agent killed while writing the session file leaves the last saved file whole
    (loadable, without the half-written turn) and only a temporary file beside it.
    """
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(
        [sys.executable, "-c", CRASH_MID_WRITE, str(tmp_path)], env=env, timeout=120, check=False
    )
    assert result.returncode == 9
    directory = tmp_path / ".sessions"
    names = sorted(os.listdir(directory))
    assert names[-1] == "s1.json" and len(names) == 2 and names[0].endswith(".tmp")
    loaded = DiskSessionStore(".sessions").load("s1", str(tmp_path))
    assert [m.get("content") for m in loaded.history[1:]] == ["kept"]
