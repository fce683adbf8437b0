"""
``session/load`` replays tool calls under the ids the client saw live (saved with each
call), unique within the replay; a loaded history whose tool call has no result is
repaired before the model sees it; the model never receives the agent's own keys.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import reactor
from twisted.trial.unittest import TestCase

from acpkit import schema
from acpkit.testing.modelserver import ScriptedModelServer
from acpkit.testing.script import script_of
from acpkit_agent.config import AgentConfig
from acpkit_agent.engines.openai import OpenAIEngine
from acpkit_agent.session import (
    INTERRUPTED_TOOL_OUTPUT,
    LIVE_ID_KEY,
    LIVE_KIND_KEY,
    LIVE_TITLE_KEY,
    Session,
    repair_history,
    tool_results_of,
)
from acpkit_agent.store import session_to_document
from tests.fixtures.agent.harness import Harness, make_harness, scripted
from tests.helpers import wait_until

SESSIONS = Path(".acpkit") / "sessions"


@pytest.fixture(autouse=True)
def _empty_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    monkeypatch.setenv("HOME", str(home))


def agent(turns: list[dict[str, Any]]) -> Harness:
    return make_harness(scripted({"turn": turns}), config=AgentConfig(sessions_enabled=True))


def end(h: Harness) -> None:
    """
    End the connection (its sessions are detached): while it holds a session, a load by
    another process (another runtime) is refused.
    """
    h.pair.close()
    h.pair.advance(0)


def load(h: Harness, sid: str, cwd: Path) -> None:
    h.pair.result(h.pair.client.initialize())
    h.pair.result(
        h.pair.client.load_session(
            schema.LoadSessionRequest(session_id=sid, cwd=str(cwd), mcp_servers=[])
        )
    )


def read_call(path: str, model_id: str = "call_1_1") -> dict[str, Any]:
    """A scripted turn asking for read_file with a fixed model id."""
    return {"tool_calls": [{"id": model_id, "name": "read_file", "arguments": {"path": path}}]}


def tool_call(call_id: str, path: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "read_file", "arguments": json.dumps({"path": path})},
    }


def write_session(cwd: Path, sid: str, history: list[dict[str, Any]]) -> None:
    document = session_to_document(Session(id=sid, cwd=str(cwd), history=history))
    path = cwd / SESSIONS / f"{sid}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))


def started_calls(h: Harness) -> list[dict[str, Any]]:
    return [u for u in h.client.tool_updates() if u["sessionUpdate"] == "tool_call"]


def test_replay_shows_the_live_ids_when_the_model_reuses_its_ids(tmp_path: Path) -> None:
    """Two turns whose model reuses call_1_1: replayed as call_1 and call_2, each its output."""
    (tmp_path / "a.txt").write_text("alpha\n")
    (tmp_path / "b.txt").write_text("beta\n")
    a = agent([read_call("a.txt"), {"chunks": ["A."]}, read_call("b.txt"), {"chunks": ["B."]}])
    sid = a.start(str(tmp_path))
    a.raw_prompt(sid, "read a")
    a.raw_prompt(sid, "read b")
    live = [u["toolCallId"] for u in started_calls(a)]
    assert live == ["call_1", "call_2"]
    calls = [
        call
        for message in json.loads((tmp_path / SESSIONS / f"{sid}.json").read_text())["history"]
        for call in message.get("tool_calls") or []
    ]
    assert [(c["id"], c[LIVE_ID_KEY]) for c in calls] == [
        ("call_1_1", "call_1"),
        ("call_1_1", "call_2"),
    ]
    end(a)
    b = agent([])
    load(b, sid, tmp_path)
    replayed = started_calls(b)
    assert [u["toolCallId"] for u in replayed] == live
    assert [u["rawOutput"]["output"] for u in replayed] == ["alpha\n", "beta\n"]
    assert [u["status"] for u in replayed] == ["completed", "completed"]


def test_a_call_is_saved_with_the_title_and_kind_the_client_saw(tmp_path: Path) -> None:
    """Each saved tool call holds the title and kind of its live ``tool_call``."""
    (tmp_path / "a.txt").write_text("alpha\n")
    a = agent([read_call("a.txt"), {"chunks": ["A."]}])
    sid = a.start(str(tmp_path))
    a.raw_prompt(sid, "read a")
    (live,) = started_calls(a)
    (call,) = [
        call
        for message in json.loads((tmp_path / SESSIONS / f"{sid}.json").read_text())["history"]
        for call in message.get("tool_calls") or []
    ]
    assert (call[LIVE_TITLE_KEY], call[LIVE_KIND_KEY]) == (live["title"], live["kind"])


def test_replay_uses_the_saved_title_and_kind_of_a_tool_not_known_yet(tmp_path: Path) -> None:
    """
    A session/load before bob's MCP servers listed their tools (here: no such server at
    all) replays an MCP tool call with the title and kind the client saw live, not the
    bare tool name as an ``execute`` call.
    """
    sid = "20260916-101530-4f2a9c1e"
    call = {
        "id": "m1",
        "type": "function",
        "function": {"name": "time__get_current_time", "arguments": '{"timezone": "UTC"}'},
        LIVE_ID_KEY: "call_1",
        LIVE_TITLE_KEY: 'time: get_current_time {"timezone": "UTC"}',
        LIVE_KIND_KEY: "read",
    }
    write_session(
        tmp_path,
        sid,
        [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "what time is it?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "m1", "content": "12:00"},
        ],
    )
    b = agent([])
    load(b, sid, tmp_path)
    (replayed,) = started_calls(b)
    assert replayed["title"] == 'time: get_current_time {"timezone": "UTC"}'
    assert replayed["kind"] == "read"
    assert replayed["status"] == "completed"


def test_replay_ids_are_unique_for_a_file_without_live_ids(tmp_path: Path) -> None:
    """A file of an older agent (model ids only, one reused): each replayed id is unique."""
    sid = "20260916-101530-4f2a9c1e"
    write_session(
        tmp_path,
        sid,
        [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": "", "tool_calls": [tool_call("x", "a")]},
            {"role": "tool", "tool_call_id": "x", "content": "first"},
            {"role": "user", "content": "two"},
            {"role": "assistant", "content": "", "tool_calls": [tool_call("x", "b")]},
            {"role": "tool", "tool_call_id": "x", "content": "second"},
        ],
    )
    b = agent([])
    load(b, sid, tmp_path)
    replayed = started_calls(b)
    assert [u["toolCallId"] for u in replayed] == ["x", "x-2"]
    assert [u["rawOutput"]["output"] for u in replayed] == ["first", "second"]


def test_calls_after_a_load_never_repeat_a_replayed_id(tmp_path: Path) -> None:
    """A new process loads a session holding call_1, call_2: its next live call is call_3."""
    (tmp_path / "a.txt").write_text("alpha\n")
    a = agent([read_call("a.txt"), {"chunks": ["A."]}, read_call("a.txt"), {"chunks": ["A."]}])
    sid = a.start(str(tmp_path))
    a.raw_prompt(sid, "read")
    a.raw_prompt(sid, "again")
    end(a)
    b = agent([read_call("a.txt", "m"), {"chunks": ["A."]}])
    load(b, sid, tmp_path)
    b.client.updates.clear()
    b.raw_prompt(sid, "once more")
    assert [u["toolCallId"] for u in started_calls(b)] == ["call_3"]


def test_load_marks_an_unanswered_call_interrupted(tmp_path: Path) -> None:
    """A saved call with no result is replayed failed, then answered in the history."""
    sid = "20260916-101530-4f2a9c1e"
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "read both"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [tool_call("m1", "a"), tool_call("m2", "b")],
        },
        {"role": "tool", "tool_call_id": "m1", "content": "A"},
    ]
    write_session(tmp_path, sid, history)
    b = agent([])
    load(b, sid, tmp_path)
    assert [u["status"] for u in started_calls(b)] == ["completed", "failed"]
    session = b.agent.sessions.get(sid)
    assert session is not None
    assert session.history[1:] == [
        *history[1:],
        {"role": "tool", "tool_call_id": "m2", "content": INTERRUPTED_TOOL_OUTPUT},
    ]


# -- repair_history ------------------------------------------------------------------------

_calls = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3)


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Histories whose assistant tool calls have any subset of their results."""
    history: list[dict[str, Any]] = [{"role": "system", "content": "s"}]
    for _ in range(draw(st.integers(0, 4))):
        history.append({"role": "user", "content": "u"})
        ids = draw(_calls)
        history.append(
            {"role": "assistant", "content": "", "tool_calls": [tool_call(i, "p") for i in ids]}
        )
        for call_id in draw(st.lists(st.sampled_from(ids), max_size=len(ids), unique=True)):
            history.append({"role": "tool", "tool_call_id": call_id, "content": "out"})
        if draw(st.booleans()):
            history.append({"role": "assistant", "content": "text"})
    return history


@given(histories())
def test_repair_answers_every_call_and_keeps_every_message(
    history: list[dict[str, Any]],
) -> None:
    """After a repair each call has a result right after its message; nothing is lost."""
    original = [dict(m) for m in history]
    added = repair_history(history)
    assert len(history) == len(original) + added
    kept = iter(history)
    assert all(any(m is n or m == n for n in kept) for m in original)
    for index, message in enumerate(history):
        if message.get("role") == "assistant" and message.get("tool_calls"):
            answered = sorted(r["tool_call_id"] for r in tool_results_of(history, index))
            assert answered == sorted(c["id"] for c in message["tool_calls"])
    assert repair_history(history) == 0


# -- what the openai engine sends ------------------------------------------------------------


class OpenAIAfterLoadTests(TestCase):
    """A loaded session's next turn through the openai engine and a real model server."""

    async def test_repaired_history_and_no_agent_keys_reach_the_server(self) -> None:
        """The server gets a result for the interrupted call and never the live-id key."""
        server = ScriptedModelServer(script_of([{"chunks": ["fine"]}]), reactor=reactor)
        url = await server.start()
        self.addCleanup(server.stop)
        cwd = Path(self.mktemp()).absolute()
        cwd.mkdir()
        sid = "20260916-101530-4f2a9c1e"
        interrupted = {**tool_call("m2", "b"), LIVE_ID_KEY: "call_2"}
        write_session(
            cwd,
            sid,
            [
                {"role": "system", "content": "s"},
                {"role": "user", "content": "read"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{**tool_call("m1", "a"), LIVE_ID_KEY: "call_1"}, interrupted],
                },
                {"role": "tool", "tool_call_id": "m1", "content": "A"},
            ],
        )
        engine = OpenAIEngine(reactor=reactor, base_url=url, timeout=20)
        h = make_harness(engine, config=AgentConfig(sessions_enabled=True), reactor=reactor)
        load(h, sid, cwd)
        d = h.prompt(sid, "go on")

        def answered() -> bool:
            h.pair.pump()
            return d.called

        await wait_until(answered, timeout=30)
        assert h.pair.result(d).stop_reason == schema.StopReason.END_TURN
        messages = server.requests[0]["messages"]
        assert messages[2]["tool_calls"] == [tool_call("m1", "a"), tool_call("m2", "b")]
        assert messages[3:] == [
            {"role": "tool", "tool_call_id": "m1", "content": "A"},
            {"role": "tool", "tool_call_id": "m2", "content": INTERRUPTED_TOOL_OUTPUT},
            {"role": "user", "content": "go on"},
        ]
        assert LIVE_ID_KEY not in json.dumps(server.requests[0])
