"""
Sessions on disk and ``session/load`` (seed 000: ``initialize`` ``loadSession``, the
``session/new``, ``session/load`` and ``/new`` rows, "Rejeu de session/load"): files written
atomically, format versions, a crash mid-write, unwritable directories, the replay, and a
real agent killed and restarted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from acpkit import codec, schema
from acpkit.errors import RPCError
from acpkit_agent.compaction import summary_message
from acpkit_agent.config import AgentConfig
from acpkit_agent.session import INTERRUPTED_TOOL_OUTPUT, Session
from acpkit_agent.store import (
    FORMAT_VERSION,
    STALE_TEMP_AGE,
    DiskSessionStore,
    atomic_write,
    remove_stale_temporaries,
    session_to_document,
)
from tests.fixtures.agent.harness import Harness, captured_logs, make_harness, scripted

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SESSIONS = ".acpkit/sessions"
TWISTD_RUN = "from twisted.scripts.twistd import run; run()"


@pytest.fixture(autouse=True)
def _no_home_skills(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))


def agent(turns: list[dict[str, Any]] | None = None, **config: Any) -> Harness:
    config.setdefault("sessions_enabled", True)
    engine = scripted({"turn": turns}) if turns is not None else None
    return make_harness(engine, config=AgentConfig(**config))


def session_files(cwd: Path) -> list[str]:
    """The session files of ``cwd`` (not the lock files of attached sessions)."""
    return sorted(name for name in os.listdir(cwd / SESSIONS) if name.endswith(".json"))


def saved(cwd: Path, sid: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((cwd / SESSIONS / f"{sid}.json").read_text())
    return document


def load(h: Harness, sid: str, cwd: Path) -> Any:
    """session/load through the client (which accepts the replay of a session it loads)."""
    response = h.pair.result(
        h.pair.client.load_session(
            schema.LoadSessionRequest(session_id=sid, cwd=str(cwd), mcp_servers=[])
        )
    )
    return codec.encode(response)


def raw_load(h: Harness, sid: str, cwd: Path) -> Any:
    """session/load as a raw request (the client's capability check bypassed)."""
    return h.pair.result(
        h.pair.client.protocol.request(
            "session/load", {"sessionId": sid, "cwd": str(cwd), "mcpServers": []}
        )
    )


def write_session(cwd: Path, sid: str, history: list[dict[str, Any]], **extra: Any) -> Path:
    session = Session(id=sid, cwd=str(cwd), history=history)
    document = {**session_to_document(session), **extra}
    path = cwd / SESSIONS / f"{sid}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return path


# -- files -----------------------------------------------------------------------------------


def test_initialize_advertises_load_session_only_when_enabled() -> None:
    """loadSession is true with sessions.enabled, false without."""
    for enabled in (True, False):
        h = agent(sessions_enabled=enabled)
        raw = h.pair.result(
            h.pair.client.protocol.request(
                "initialize", {"protocolVersion": 1, "clientCapabilities": {}}
            )
        )
        assert raw["agentCapabilities"]["loadSession"] is enabled


def test_file_written_at_new_and_after_each_turn_new_and_compact(tmp_path: Path) -> None:
    """<cwd>/<sessions.dir>/<id>.json at session/new, rewritten after a turn, /compact, /new."""
    h = agent([{"chunks": ["hi"], "usage": {"input": 7, "output": 2}}, {"chunks": ["S"]}])
    sid = h.start(str(tmp_path))
    document = saved(tmp_path, sid)
    assert document["format"] == "acpkit-agent-session"
    assert document["version"] == FORMAT_VERSION
    assert document["id"] == sid and document["cwd"] == str(tmp_path)
    assert [m["role"] for m in document["history"]] == ["system"]
    h.raw_prompt(sid, "hello")
    document = saved(tmp_path, sid)
    assert document["history"][1:] == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi"},
    ]
    assert document["totals"]["inputTokens"] == 7 and document["lastMeasure"] == 9
    h.raw_prompt(sid, "/compact")  # keepLastTurns 4: nothing to compact, file rewritten
    assert len(saved(tmp_path, sid)["history"]) == 3
    h.raw_prompt(sid, "/new")
    assert [m["role"] for m in saved(tmp_path, sid)["history"]] == ["system"]
    leftovers = [p for p in os.listdir(tmp_path / SESSIONS) if p.endswith(".tmp")]
    assert leftovers == []


def test_new_keeps_the_previous_conversation_under_a_new_id(tmp_path: Path) -> None:
    """/new saves the old conversation as another session first (not when it was empty)."""
    with captured_logs() as logs:
        h = agent([{"chunks": ["hi"]}])
        sid = h.start(str(tmp_path))
        h.raw_prompt(sid, "/new")
        assert session_files(tmp_path) == [f"{sid}.json"]
        h.raw_prompt(sid, "hello")
        h.raw_prompt(sid, "/new")
    files = session_files(tmp_path)
    assert len(files) == 2
    kept = next(name[:-5] for name in files if name != f"{sid}.json")
    assert saved(tmp_path, kept)["history"][1:] == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi"},
    ]
    assert f"[acp] session {sid}: previous conversation kept as {kept}" in logs.acp()
    assert [m["role"] for m in saved(tmp_path, sid)["history"]] == ["system"]


def test_atomic_write_failure_before_rename_keeps_the_good_file(tmp_path: Path) -> None:
    """A failure between the write and the rename leaves the old file and no temporary."""
    path = tmp_path / "s" / "a.json"
    atomic_write(str(path), b"good")

    def crash(source: str, target: str) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        atomic_write(str(path), b"new", replace=crash)
    assert path.read_bytes() == b"good"
    assert os.listdir(path.parent) == ["a.json"]


@pytest.mark.process
def test_process_killed_between_write_and_rename_keeps_the_good_file(tmp_path: Path) -> None:
    """A process killed (SIGKILL) after writing the temporary file, before the rename."""
    path = tmp_path / "a.json"
    atomic_write(str(path), b'{"good": true}')
    program = (
        "import os, signal, sys\n"
        "from acpkit_agent.store import atomic_write\n"
        "def die(source, target):\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "atomic_write(sys.argv[1], b'{\"half\": ', replace=die)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", program, str(path)],
        env={**os.environ, "PYTHONPATH": ROOT},
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL
    assert json.loads(path.read_bytes()) == {"good": True}


def test_unwritable_directory_the_turn_still_answers(tmp_path: Path) -> None:
    """A save failing (parent is a file): the turn answers, logged each time, told once."""
    (tmp_path / "blocker").write_text("a file, not a directory")
    with captured_logs() as logs:
        h = agent([{"chunks": ["one"]}, {"chunks": ["two"]}], sessions_dir="blocker/sessions")
        sid = h.start(str(tmp_path))
        first = h.raw_prompt(sid, "a")
        second = h.raw_prompt(sid, "b")
    assert first["stopReason"] == second["stopReason"] == "end_turn"
    warnings = [
        u["content"]["text"]
        for u in h.client.of_kind("agent_message_chunk")
        if u["content"]["text"].startswith("[session not saved:")
    ]
    assert len(warnings) == 1
    assert "Not a directory" in warnings[0] and "blocker/sessions" in warnings[0]
    failures = [line for line in logs.acp() if "cannot save" in line]
    assert len(failures) == 3  # session/new and both turns


# -- session/load ----------------------------------------------------------------------------


def test_load_without_sessions_enabled_is_method_not_found(tmp_path: Path) -> None:
    """Without sessions.enabled, session/load is -32601."""
    h = agent(sessions_enabled=False)
    h.start(str(tmp_path))
    with pytest.raises(RPCError) as caught:
        raw_load(h, "20260101-000000-00000000", tmp_path)
    assert caught.value.code == -32601


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "no saved session"),
        ("{not json", "is not valid JSON"),
        (json.dumps({"format": "other"}), "not an acpkit agent session file"),
        (
            json.dumps({"format": "acpkit-agent-session", "version": 99, "history": []}),
            "written by a newer agent (format version 99; this agent reads version 1)",
        ),
        (
            json.dumps({"format": "acpkit-agent-session", "version": 0, "history": []}),
            "format version 0 is older than any this agent reads",
        ),
        (
            json.dumps({"format": "acpkit-agent-session", "version": 1, "history": [1]}),
            "history is not a list of messages",
        ),
    ],
)
def test_load_errors_are_invalid_params_naming_the_session(
    tmp_path: Path, content: str | None, reason: str
) -> None:
    """Unknown id or unusable file: -32602 naming the sessionId and the error."""
    sid = "20260101-000000-0000beef"
    if content is not None:
        (tmp_path / SESSIONS).mkdir(parents=True)
        (tmp_path / SESSIONS / f"{sid}.json").write_text(content)
    h = agent()
    h.start(str(tmp_path))
    h.client.updates.clear()
    with pytest.raises(RPCError) as caught:
        load(h, sid, tmp_path)
    assert caught.value.code == -32602
    assert caught.value.data["path"] == "$.params.sessionId"
    assert f"cannot load session {sid!r}" in caught.value.data["reason"]
    assert reason in caught.value.data["reason"]
    assert h.client.updates == []


def test_load_refuses_ids_that_are_not_file_names(tmp_path: Path) -> None:
    """A sessionId like ../x never reaches outside the sessions directory."""
    h = agent()
    h.start(str(tmp_path))
    with pytest.raises(RPCError) as caught:
        load(h, "../../etc/passwd", tmp_path)
    assert caught.value.code == -32602
    assert "is not a session id" in caught.value.data["reason"]


def tool_call(call_id: str, tool: str, **arguments: Any) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": tool, "arguments": json.dumps(arguments)},
    }


def test_load_replays_the_saved_history(tmp_path: Path) -> None:
    """The replay of the seed's table, then available_commands_update, then {}; logged."""
    sid = "20260916-101530-4f2a9c1e"
    marker = tmp_path / "marker"
    history = [
        {"role": "system", "content": "an old system prompt"},
        summary_message("We set things up."),
        {"role": "user", "content": "look around"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                tool_call("call_7", "bash", command=f"touch {marker}"),
                tool_call("call_8", "read_file", path="a.py"),
            ],
        },
        {"role": "tool", "tool_call_id": "call_7", "content": "done\n"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [tool_call("call_9", "read_skill", name="g")],
        },
        {"role": "assistant", "content": "All good."},
    ]
    write_session(
        tmp_path,
        sid,
        history,
        totals={"inputTokens": 5, "outputTokens": 1, "reported": True},
    )
    with captured_logs() as logs:
        h = agent([{"chunks": ["next"]}])
        h.pair.result(h.pair.client.initialize())
        session_before = h.agent.sessions.get(sid)
        assert session_before is None
        result = load(h, sid, tmp_path)
    assert result == {}
    updates = h.client.wire_updates()
    message_ids = [u.pop("messageId") for u in updates if "messageId" in u]
    assert len(message_ids) == 4 and len(set(message_ids)) == 4
    assert updates[:-1] == [
        {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "🗜️ We set things up."},
        },
        {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "look around"}},
        {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "Let me look."},
        },
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "call_7",
            "title": f"bash: touch {marker}",
            "kind": "execute",
            "status": "completed",
            "rawInput": {"command": f"touch {marker}"},
            "rawOutput": {"output": "done\n"},
            "content": [{"type": "content", "content": {"type": "text", "text": "done\n"}}],
        },
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "call_8",
            "title": "read_file: a.py",
            "kind": "read",
            "status": "failed",
            "rawInput": {"path": "a.py"},
            "locations": [{"path": str(tmp_path / "a.py")}],
        },
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "call_9",
            "title": "read_skill: g",
            "kind": "read",
            "status": "failed",
            "rawInput": {"name": "g"},
        },
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "All good."}},
    ]
    assert updates[-1]["sessionUpdate"] == "available_commands_update"
    assert [c["name"] for c in updates[-1]["availableCommands"]] == ["new", "compact"]
    assert not marker.exists()
    line = (
        f"[acp] session {sid} loaded from {tmp_path / SESSIONS}: 6 message(s) replayed, "
        "2 unanswered tool call(s) marked interrupted"
    )
    assert line in logs.acp()
    session = h.agent.sessions.get(sid)
    assert session is not None
    assert session.history[0]["content"].startswith("You are Bob")
    assert str(tmp_path) in session.history[0]["content"]
    # the unanswered calls (call_8, call_9) got a result: servers reject them otherwise
    repaired = [
        *history[1:5],
        {"role": "tool", "tool_call_id": "call_8", "content": INTERRUPTED_TOOL_OUTPUT},
        history[5],
        {"role": "tool", "tool_call_id": "call_9", "content": INTERRUPTED_TOOL_OUTPUT},
        history[6],
    ]
    assert session.history[1:] == repaired
    assert session.remembered == {}
    raw = h.raw_prompt(sid, "and now?")
    assert raw["usage"] == {"totalTokens": 6, "inputTokens": 5, "outputTokens": 1}
    engine: Any = h.runtime.engine
    assert engine.received[0].messages[1:-1] == repaired


def test_conversation_saved_by_one_agent_loads_in_another(tmp_path: Path) -> None:
    """
    A turn with a tool call in agent A; once A's connection ended, agent B (new runtime,
    as another process) replays it the same way.
    """
    (tmp_path / "a.txt").write_text("alpha\n")
    a = agent(
        [
            {
                "chunks": ["Reading."],
                "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}],
            },
            {"chunks": ["It says alpha."]},
        ]
    )
    sid = a.start(str(tmp_path))
    a.raw_prompt(sid, "what is in a.txt?")
    live = a.client.tool_updates()
    a.pair.close()  # while A holds the session, another process's load is refused
    a.pair.advance(0)
    b = agent([])
    b.pair.result(b.pair.client.initialize())
    b.pair.result(
        b.pair.client.load_session(
            schema.LoadSessionRequest(session_id=sid, cwd=str(tmp_path), mcp_servers=[])
        )
    )
    replayed = b.client.tool_updates()
    assert len(replayed) == 1
    call = replayed[0]
    assert (call["title"], call["kind"], call["status"]) == (live[0]["title"], "read", "completed")
    assert call["rawInput"] == live[0]["rawInput"]
    assert call["rawOutput"] == live[-1]["rawOutput"] == {"output": "alpha\n"}
    texts = [
        (u["sessionUpdate"], u["content"]["text"])
        for u in b.client.wire_updates()
        if u["sessionUpdate"].endswith("message_chunk")
    ]
    assert texts == [
        ("user_message_chunk", "what is in a.txt?"),
        ("agent_message_chunk", "Reading."),
        ("agent_message_chunk", "It says alpha."),
    ]


# -- a real agent, killed and restarted ----------------------------------------------------


class _Agent:
    """A ``twistd -n acp-agent`` child spoken to frame by frame."""

    def __init__(self, cwd: str, home: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", TWISTD_RUN, "-n", "acp-agent"],
            cwd=cwd,
            env={**os.environ, "PYTHONPATH": ROOT, "HOME": home},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.received: list[dict[str, Any]] = []

    def request(self, request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a request; read frames until its response (notifications kept)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        frame = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        self.proc.stdin.write(json.dumps(frame).encode() + b"\n")
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            assert line, "the agent closed stdout"
            message: dict[str, Any] = json.loads(line)
            if message.get("id") == request_id and "method" not in message:
                return message
            self.received.append(message)


@pytest.mark.process
def test_real_agent_killed_then_session_load_replays(tmp_path: Path) -> None:
    """Save → SIGKILL the agent → a new agent's session/load replays the same conversation."""
    cwd = tempfile.mkdtemp(prefix="bob-persist-", dir=tmp_path)
    home = str(tmp_path / "home")
    os.makedirs(os.path.join(cwd, ".acpkit"))
    with open(os.path.join(cwd, ".acpkit", "agent.toml"), "w") as stream:
        stream.write("[sessions]\nenabled = true\n")
    init = {"protocolVersion": 1, "clientCapabilities": {}}
    first = _Agent(cwd, home)
    try:
        assert first.request(1, "initialize", init)["result"]["agentCapabilities"]["loadSession"]
        sid = first.request(2, "session/new", {"cwd": cwd, "mcpServers": []})["result"]["sessionId"]
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "run: echo persisted"}]}
        assert first.request(3, "session/prompt", prompt)["result"]["stopReason"] == "end_turn"
    finally:
        first.proc.kill()
        first.proc.wait(timeout=60)
    live = [m["params"]["update"] for m in first.received if m.get("method") == "session/update"]
    second = _Agent(cwd, home)
    try:
        second.request(1, "initialize", init)
        answer = second.request(2, "session/load", {"sessionId": sid, "cwd": cwd, "mcpServers": []})
        assert answer == {"jsonrpc": "2.0", "id": 2, "result": {}}
    finally:
        assert second.proc.stdin is not None
        second.proc.stdin.close()
        second.proc.wait(timeout=60)
    replay = [m["params"]["update"] for m in second.received]
    kinds = [u["sessionUpdate"] for u in replay]
    assert kinds == [
        "user_message_chunk",
        "agent_message_chunk",
        "tool_call",
        "agent_message_chunk",
        "available_commands_update",
    ]
    assert replay[0]["content"]["text"] == "run: echo persisted"
    live_text = "".join(
        u["content"]["text"] for u in live if u["sessionUpdate"] == "agent_message_chunk"
    )
    replay_text = "".join(
        u["content"]["text"] for u in replay if u["sessionUpdate"] == "agent_message_chunk"
    )
    assert replay_text == live_text
    call = replay[2]
    assert call["title"] == "bash: echo persisted" and call["status"] == "completed"
    assert call["rawOutput"]["output"].startswith("persisted")


def test_load_refuses_a_cwd_that_does_not_exist(tmp_path: Path) -> None:
    """
    session/load with a cwd that does not exist answers -32602, data.path $.params.cwd, the
    message naming the path; nothing is created and nothing replayed.
    """
    h = agent()
    h.start(str(tmp_path))
    h.client.updates.clear()
    missing = tmp_path / "gone"
    with pytest.raises(RPCError) as caught:
        raw_load(h, "20260101-000000-0000beef", missing)
    assert caught.value.code == -32602
    assert caught.value.data["path"] == "$.params.cwd"
    assert caught.value.data["reason"] == f"cwd {str(missing)!r} does not exist"
    assert str(missing) in caught.value.message
    assert not missing.exists()
    assert h.client.updates == []


def _leftover(directory: Path, sid: str, age: float) -> Path:
    """A temporary file as atomic_write names them, last changed ``age`` seconds ago."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f".{sid}.json.k3x9_q2z.tmp"
    path.write_bytes(b'{"half": ')
    when = time.time() - age
    os.utime(path, (when, when))
    return path


def test_stale_temporary_files_are_removed_when_the_directory_is_first_used(
    tmp_path: Path,
) -> None:
    """
    The first session created in a cwd removes the temporary files a crash mid-save left in
    its sessions directory (older than STALE_TEMP_AGE), logged; session files, other files
    and a temporary file younger than that (another agent's save in progress) are kept.
    """
    sessions = tmp_path / SESSIONS
    kept = write_session(tmp_path, "20260101-000000-0000beef", [{"role": "system", "content": "s"}])
    stale = _leftover(sessions, "20260101-000000-0000beef", STALE_TEMP_AGE + 3600)
    other_stale = _leftover(sessions, "20260102-000000-0000cafe", STALE_TEMP_AGE + 1)
    fresh = _leftover(sessions, "20260103-000000-0000f00d", 0)
    unrelated = sessions / "notes.tmp"
    unrelated.write_text("not ours")
    with captured_logs() as logs:
        h = agent()
        sid = h.start(str(tmp_path))
    assert not stale.exists() and not other_stale.exists()
    assert kept.exists() and fresh.exists() and unrelated.exists()
    assert (sessions / f"{sid}.json").exists()
    assert f"[acp] removed {stale}, left by a save that did not finish" in logs.acp()
    assert not any(
        name.endswith(".tmp") and name.startswith(f".{sid}") for name in os.listdir(sessions)
    )


def test_stale_temporary_files_are_removed_by_session_load(tmp_path: Path) -> None:
    """session/load cleans the sessions directory of its cwd the same way, then loads."""
    other = tmp_path / "other"
    other.mkdir()
    sid = "20260101-000000-0000beef"
    write_session(
        other, sid, [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
    )
    stale = _leftover(other / SESSIONS, sid, STALE_TEMP_AGE + 3600)
    h = agent()
    h.start(str(tmp_path))
    assert load(h, sid, other) == {}
    assert not stale.exists()
    assert (other / SESSIONS / f"{sid}.json").exists()


def test_remove_stale_temporaries_once_per_directory_with_a_clock(tmp_path: Path) -> None:
    """
    DiskSessionStore cleans a directory the first time it is used only (a later leftover
    stays until the next agent); remove_stale_temporaries compares with the given time.
    """
    store = DiskSessionStore(SESSIONS, clock=lambda: time.time() + STALE_TEMP_AGE + 10)
    sessions = tmp_path / SESSIONS
    first = _leftover(sessions, "20260101-000000-00000001", 0)
    store.add(Session.create("20260101-000000-00000002", str(tmp_path)))
    assert not first.exists()
    later = _leftover(sessions, "20260101-000000-00000003", 3600)
    store.add(Session.create("20260101-000000-00000004", str(tmp_path)))
    assert later.exists()
    assert remove_stale_temporaries(str(sessions), now=time.time()) == [str(later)]
    assert remove_stale_temporaries(str(tmp_path / "missing")) == []
