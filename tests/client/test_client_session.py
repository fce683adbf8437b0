"""An agent window (run + connection + session + conversation) against in-memory agents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred

from acpkit.connection import AgentConnection
from acpkit.errors import RPCError
from acpkit.testing.pair import ConnectedPair, connected_pair
from acpkit_client.agents import AgentStartError, AgentState
from acpkit_client.config import AgentEntry
from acpkit_client.conversation import EntryKind, ToolCallEntry
from acpkit_client.permissions import PermissionPolicy, PolicyPermissionPrompt
from acpkit_client.session import AgentWindow, TurnError
from tests.fixtures.client.tiny_agent import TinyAgent

ENTRY = AgentEntry(name="tiny", command="python", source="test")


def open_window(
    tmp_path: Path, mode: str = "normal", policy: PermissionPolicy = PermissionPolicy.REJECT
) -> tuple[AgentWindow, ConnectedPair, list[TinyAgent]]:
    agents: list[TinyAgent] = []

    def make(conn: AgentConnection) -> TinyAgent:
        agents.append(TinyAgent(conn, mode))
        return agents[-1]

    window = AgentWindow(
        ENTRY, str(tmp_path), permission_prompt=PolicyPermissionPrompt(policy), environ={}
    )
    pair = connected_pair(make, window)
    return window, pair, agents


def start(window: AgentWindow, pair: ConnectedPair) -> str:
    return pair.result(window.open_on(pair.client))


def test_open_announces_fs_and_gets_a_session(tmp_path: Path) -> None:
    """initialize announces fs read/write and no terminal; session/new uses the cwd."""
    window, pair, agents = open_window(tmp_path)
    assert start(window, pair) == "s1"
    assert window.run.state is AgentState.READY
    assert agents[0].cwd == str(tmp_path)
    assert [c.name for c in window.conversation.commands] == ["web", "help"]
    caps = pair.agent.client_capabilities
    assert caps is not None and caps.fs.read_text_file and caps.fs.write_text_file
    assert not caps.terminal
    assert pair.agent.client_info is not None
    assert pair.agent.client_info.name == "acpkit-client"


def test_prompt_with_permission_rejected_by_default(tmp_path: Path) -> None:
    """The default policy rejects: the tool call fails and nothing is written."""
    (tmp_path / "notes.txt").write_text("n\n", encoding="utf-8")
    window, pair, _agents = open_window(tmp_path)
    start(window, pair)
    stop = pair.result(window.send_prompt("read @notes.txt"))
    assert stop == "end_turn"
    tool = window.conversation.tool_call("t1")
    assert tool is not None and tool.status == "failed"
    assert not (tmp_path / "out.txt").exists()
    answer = window.conversation.entries_of(EntryKind.AGENT)[-1]
    uri = (tmp_path / "notes.txt").as_uri()
    assert answer.text == f"echo: read <resource {uri} 2 chars>"
    assert window.conversation.entries[0].text == "read @notes.txt"
    assert not window.conversation.turn_running


def test_prompt_allowed_writes_and_reads_through_fs(tmp_path: Path) -> None:
    """With the allow policy the agent writes out.txt through fs and reads it back."""
    window, pair, _agents = open_window(tmp_path, policy=PermissionPolicy.ALLOW)
    start(window, pair)
    assert pair.result(window.send_prompt("go")) == "end_turn"
    assert (tmp_path / "out.txt").read_text(encoding="utf-8") == "written\n"
    tool = window.conversation.tool_call("t1")
    assert tool is not None and tool.status == "completed"
    assert tool.text.endswith("read back: written")
    plans = window.conversation.entries_of(EntryKind.PLAN)
    assert len(plans) == 1


def test_cancel_marks_tool_calls_and_ends_cancelled(tmp_path: Path) -> None:
    """cancel() sends session/cancel; the turn ends cancelled; its tool calls are cancelled."""
    window, pair, _agents = open_window(tmp_path, mode="slow")
    start(window, pair)
    d = window.send_prompt("wait")
    pair.pump()
    assert window.turn_running and window.conversation.turn_running
    assert window.cancel()
    tool = window.conversation.tool_call("slow1")
    assert isinstance(tool, ToolCallEntry) and tool.status == "cancelled"
    assert pair.result(d) == "cancelled"
    assert not window.turn_running
    assert not window.cancel()


def test_refusal_is_reported(tmp_path: Path) -> None:
    """A refusal stop reason is returned as such."""
    window, pair, _agents = open_window(tmp_path, mode="refuse")
    start(window, pair)
    assert pair.result(window.send_prompt("x")) == "refusal"
    assert window.conversation.last_stop == "refusal"


def test_auth_methods_are_reported_and_auth_required_fails(tmp_path: Path) -> None:
    """-32000 on session/new fails the start, saying a login is needed and naming the
    authMethods the agent listed, the agent's reason and the code once."""
    window, pair, _agents = open_window(tmp_path, mode="auth")
    with pytest.raises(AgentStartError, match="requires a login") as raised:
        start(window, pair)
    assert window.run.needs_login
    assert "Log in with tiny" in str(raised.value)
    assert "log in with `tiny login` first" in str(raised.value)
    assert str(raised.value).count("-32000") == 1
    assert window.run.notes == []
    assert window.run.state is AgentState.FAILED


def test_unknown_protocol_version_is_reported(tmp_path: Path) -> None:
    """An agent answering protocol version 99 is refused and the reason kept."""
    window, pair, _agents = open_window(tmp_path, mode="version")
    with pytest.raises(AgentStartError, match="version 99"):
        start(window, pair)
    assert "version 99" in window.run.problems[0]


def test_undecodable_updates_are_counted(tmp_path: Path) -> None:
    """An update the codec cannot decode is counted with its error; later ones still show."""
    window, pair, _agents = open_window(tmp_path)
    start(window, pair)
    pair.agent.protocol.notify(
        "session/update", {"sessionId": "s1", "update": {"sessionUpdate": "tool_call"}}
    )
    pair.agent.protocol.notify(
        "session/update",
        {"sessionId": "s1", "update": {"sessionUpdate": "future_thing", "x": 1}},
    )
    pair.agent.protocol.notify(
        "session/update",
        {
            "sessionId": "s1",
            "update": {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": "still here"},
            },
        },
    )
    pair.pump()
    ignored = window.conversation.ignored
    assert ignored.count == 2
    assert ignored.last == {"sessionUpdate": "future_thing", "x": 1}
    assert window.conversation.entries[-1].text == "still here"


def test_undecodable_error_is_kept(tmp_path: Path) -> None:
    """The error of an undecodable update names what was wrong."""
    window, pair, _agents = open_window(tmp_path)
    start(window, pair)
    pair.agent.protocol.notify(
        "session/update", {"sessionId": "s1", "update": {"sessionUpdate": "tool_call"}}
    )
    pair.pump()
    assert window.conversation.ignored.last_error is not None
    assert window.conversation.ignored.last_error.startswith("undecodable")


def test_prompt_before_open_and_twice(tmp_path: Path) -> None:
    """A prompt without a session, or while a turn runs, fails with TurnError."""
    window, pair, _agents = open_window(tmp_path, mode="slow")
    d = window.send_prompt("x")
    with pytest.raises(TurnError, match="no open session"):
        pair.result(d)
    start(window, pair)
    first = window.send_prompt("one")
    pair.pump()
    with pytest.raises(TurnError, match="already running"):
        pair.result(window.send_prompt("two"))
    window.cancel()
    assert pair.result(first) == "cancelled"


def test_agent_going_away_fails_the_turn(tmp_path: Path) -> None:
    """When the connection is lost mid-turn the prompt fails with a TurnError."""
    window, pair, _agents = open_window(tmp_path, mode="slow")
    start(window, pair)
    d: Deferred[str] = window.send_prompt("x")
    pair.pump()
    pair.close()
    with pytest.raises(TurnError):
        pair.result(d)
    assert window.conversation.last_stop is not None
    assert window.conversation.last_stop.startswith("error:")


def test_an_elicitation_without_a_form_prompt_is_declined(tmp_path: Path) -> None:
    """
    Without a form prompt an elicitation is answered ``decline`` (the RFD's answer for
    a request the user does not take), not an error.
    """
    from acpkit import codec, schema

    window, pair, _agents = open_window(tmp_path)
    start(window, pair)
    request = codec.decode(
        schema.CreateElicitationRequestUrl,
        {
            "sessionId": "s1",
            "mode": "url",
            "message": "log in",
            "url": "https://x.test/",
            "elicitationId": "e1",
        },
    )
    answer = pair.result(Deferred.fromCoroutine(window.create_elicitation(request)))
    assert codec.encode(answer) == {"action": "decline"}


def test_fs_for_another_session_is_refused(tmp_path: Path) -> None:
    """fs requests naming another session are -32602."""
    from acpkit import schema

    window, pair, _agents = open_window(tmp_path)
    start(window, pair)
    with pytest.raises(RPCError):
        window.read_text_file(
            schema.ReadTextFileRequest(session_id="other", path=str(tmp_path / "x"))
        )


def test_cancel_answers_a_pending_permission_cancelled(tmp_path: Path) -> None:
    """A permission still being asked when the turn is cancelled is answered cancelled."""
    from zope.interface import implementer

    from acpkit_client.interfaces import IPermissionPrompt

    asked: list[Deferred[str | None]] = []

    @implementer(IPermissionPrompt)
    class Waiting:
        def choose(self, request: object) -> Deferred[str | None]:
            asked.append(Deferred())
            return asked[-1]

    agents: list[TinyAgent] = []

    def make(conn: Any) -> TinyAgent:
        agents.append(TinyAgent(conn))
        return agents[-1]

    class Sent:
        lines: list[bytes] = []

        def sent(self, line: bytes) -> None:
            self.lines.append(line)

        def received(self, line: bytes) -> None:
            pass

    window = AgentWindow(ENTRY, str(tmp_path), permission_prompt=Waiting(), environ={})
    pair = connected_pair(make, window)
    sent = Sent()
    pair.client.protocol.tracer = sent
    start(window, pair)
    d = window.send_prompt("go")
    pair.pump()
    assert len(asked) == 1
    window.cancel()
    assert pair.result(d) == "cancelled"
    answers = [json.loads(line) for line in sent.lines if b'"outcome"' in line]
    assert [a["result"] for a in answers] == [{"outcome": {"outcome": "cancelled"}}]
    assert asked[0].called
    assert not (tmp_path / "out.txt").exists()
