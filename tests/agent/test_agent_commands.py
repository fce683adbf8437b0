"""
The ``/new`` and ``/compact`` slash commands (seed 000, "session/prompt" rows ``/new`` and
``/compact``, "Commandes disponibles") through an acpkit client and the scripted engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred, ensureDeferred, succeed
from zope.interface import implementer

from acpkit import schema
from acpkit_agent.compaction import is_summary
from acpkit_agent.config import AgentConfig
from acpkit_agent.engines.base import IEngine, ModelReply, StreamSink, ToolSpec
from acpkit_agent.turn import AgentRuntime
from tests.fixtures.agent.harness import Harness, captured_logs, make_harness, scripted


@pytest.fixture(autouse=True)
def _no_home_skills(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))


def agent(turns: list[dict[str, Any]], **config: Any) -> Harness:
    return make_harness(scripted({"turn": turns}), config=AgentConfig(**config))


def answer(text: str, usage: tuple[int, int] | None = None) -> dict[str, Any]:
    turn: dict[str, Any] = {"chunks": [text]}
    if usage is not None:
        turn["usage"] = {"input": usage[0], "output": usage[1]}
    return turn


def test_new_forgets_the_history_and_keeps_the_session(tmp_path: Path) -> None:
    """/new: chunk, end_turn, usage totals, usage_update, log; id, cwd, remembered kept."""
    cwd = tmp_path / "p"
    cwd.mkdir()
    with captured_logs() as logs:
        h = agent([answer("one", (100, 10)), answer("two", (200, 20))])
        sid = h.start(str(cwd))
        h.raw_prompt(sid, "first")
        h.raw_prompt(sid, "second")
        session = h.agent.sessions.get(sid)
        assert session is not None
        session.remembered["bash"] = True
        assert session.last_measure == 220
        h.client.updates.clear()
        result = h.raw_prompt(sid, "  /new \n")
    engine: Any = h.runtime.engine
    assert engine.calls == 2
    assert result == {
        "stopReason": "end_turn",
        "usage": {"totalTokens": 330, "inputTokens": 300, "outputTokens": 30},
    }
    assert h.client.wire_updates()[0] == {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": "🆕 New session: 4 message(s) forgotten."},
    }
    usage = h.client.of_kind("usage_update")
    assert len(usage) == 1 and usage[0]["used"] == session.used_tokens()
    assert [m["role"] for m in session.history] == ["system"]
    assert session.id == sid and session.cwd == str(cwd)
    assert session.remembered == {"bash": True}
    assert session.last_measure == 0
    assert f"[acp] session {sid}: new session, 4 message(s) forgotten" in logs.acp()
    assert not any("previous conversation kept" in line for line in logs.acp())


def test_new_on_an_empty_session_and_new_with_words_goes_to_the_model() -> None:
    """/new of an empty session forgets 0; "/new please" is not the command."""
    h = agent([answer("ok")])
    sid = h.start()
    h.raw_prompt(sid, "/new")
    assert h.client.text() == "🆕 New session: 0 message(s) forgotten."
    h.raw_prompt(sid, "/new please")
    engine: Any = h.runtime.engine
    assert engine.received[0].messages[-1] == {"role": "user", "content": "/new please"}


def test_compact_nothing_to_compact() -> None:
    """/compact with no turn older than the last K: history unchanged, line and log."""
    with captured_logs() as logs:
        h = agent([answer("a"), answer("b")], keep_last_turns=2)
        sid = h.start()
        h.raw_prompt(sid, "one")
        h.raw_prompt(sid, "two")
        session = h.agent.sessions.get(sid)
        assert session is not None
        before = list(session.history)
        h.client.updates.clear()
        result = h.raw_prompt(sid, "/compact")
    line = "🗜️ nothing to compact: 4 message(s), no turn older than the last 2"
    assert result == {"stopReason": "end_turn"}
    assert h.client.text() == line
    assert session.history == before
    assert f"[acp] session {sid}: /compact — {line}" in logs.acp()
    assert h.client.of_kind("usage_update")


def test_compact_summarises_the_older_turns() -> None:
    """/compact: the engine summarises the older turns; 1 summary + the kept turns remain."""
    turns = [
        answer("a", (10, 1)),
        answer("b", (20, 2)),
        answer("c", (30, 3)),
        {"chunks": ["The user said one and two."], "usage": {"input": 40, "output": 4}},
    ]
    with captured_logs() as logs:
        h = agent(turns, keep_last_turns=1)
        sid = h.start()
        for text in ("one", "two", "three"):
            h.raw_prompt(sid, text)
        session = h.agent.sessions.get(sid)
        assert session is not None
        h.client.updates.clear()
        result = h.raw_prompt(sid, "/compact")
    text = h.client.text()
    assert text.startswith("🗜️ compressed 4 messages → 1 summary + 2 kept (")
    assert text.endswith(" tokens, 0.0s)")
    roles = [m["role"] for m in session.history]
    assert roles == ["system", "user", "user", "assistant"]
    assert is_summary(session.history[1])
    assert session.history[1]["content"].endswith("The user said one and two.")
    assert session.history[2:] == [
        {"role": "user", "content": "three"},
        {"role": "assistant", "content": "c"},
    ]
    assert session.last_measure == 0
    engine: Any = h.runtime.engine
    request = engine.received[3]
    assert request.tools == ()
    assert "USER:\none" in request.messages[-1]["content"]
    assert "three" not in request.messages[-1]["content"]
    assert result["usage"]["totalTokens"] == 110
    assert f"[acp] session {sid}: /compact — {text}" in logs.acp()
    # the summary streamed nothing to the client but the confirmation line
    assert len(h.client.of_kind("agent_message_chunk")) == 1


def test_compact_failure_keeps_the_history() -> None:
    """The engine failing: [compact: failed, history kept: …], end_turn, history unchanged."""
    h = agent([answer("a"), answer("b"), {"error": "model went away"}], keep_last_turns=1)
    sid = h.start()
    h.raw_prompt(sid, "one")
    h.raw_prompt(sid, "two")
    session = h.agent.sessions.get(sid)
    assert session is not None
    before = list(session.history)
    measure = session.last_measure
    h.client.updates.clear()
    result = h.raw_prompt(sid, "/compact")
    assert result["stopReason"] == "end_turn"
    assert h.client.text() == "[compact: failed, history kept: model server error: model went away]"
    assert session.history == before
    assert session.last_measure == measure


def test_compact_of_an_empty_summary_fails() -> None:
    """A model answering nothing is a failure, not an empty summary."""
    h = agent([answer("a"), answer("b"), {"chunks": ["   "]}], keep_last_turns=1)
    sid = h.start()
    h.raw_prompt(sid, "one")
    h.raw_prompt(sid, "two")
    h.client.updates.clear()
    h.raw_prompt(sid, "/compact")
    assert h.client.text() == "[compact: failed, history kept: the model answered an empty summary]"


def test_compact_waits_for_the_running_turn() -> None:
    """/compact sent during a turn runs after it: turns are serialized."""
    turns = [
        answer("a"),
        {"chunks": ["slow ", "answer"], "delay": 1.0},
        {"chunks": ["summary"]},
    ]
    h = agent(turns, keep_last_turns=1)
    sid = h.start()
    h.raw_prompt(sid, "one")
    turn = h.prompt(sid, "two")
    command = h.prompt(sid, "/compact")
    engine: Any = h.runtime.engine
    assert engine.calls == 2 and not command.called
    h.pair.advance(1.0)
    h.pair.advance(1.0)
    assert h.pair.result(turn).stop_reason == schema.StopReason.END_TURN
    assert h.pair.result(command).stop_reason == schema.StopReason.END_TURN
    assert engine.calls == 3
    texts = [u["content"]["text"] for u in h.client.of_kind("agent_message_chunk")]
    assert texts[-1].startswith("🗜️ compressed 2 messages → 1 summary + 2 kept")
    assert texts.index("answer") < len(texts) - 1


def test_compact_keep_zero_turns_summarises_everything() -> None:
    """keepLastTurns = 0: every turn goes into the summary."""
    h = agent([answer("a"), {"chunks": ["all of it"]}], keep_last_turns=0)
    sid = h.start()
    h.raw_prompt(sid, "one")
    h.client.updates.clear()
    h.raw_prompt(sid, "/compact")
    assert h.client.text().startswith("🗜️ compressed 2 messages → 1 summary + 0 kept")
    session = h.agent.sessions.get(sid)
    assert session is not None and [m["role"] for m in session.history] == ["system", "user"]


def test_new_and_compact_advertised_first() -> None:
    """available_commands_update lists new then compact, without input."""
    h = agent([])
    h.start()
    commands = h.client.of_kind("available_commands_update")[0]["availableCommands"]
    assert commands[:2] == [
        {"name": "new", "description": "Clear the history and start a new session"},
        {"name": "compact", "description": "Compress the history now, keeping the last turns"},
    ]


@pytest.mark.parametrize("command", ["/new", "/compact"])
def test_command_before_any_model_call_reports_the_probed_window(command: str) -> None:
    """
    /new or /compact as the first prompt of a session (no model call yet) sends a
    usage_update whose size is the context window the engine's probe gives, not 0.
    """
    h = make_harness(scripted({"turn": [answer("one")], "context_window": 8192}))
    sid = h.start()
    h.client.updates.clear()
    assert h.raw_prompt(sid, command)["stopReason"] == "end_turn"
    [usage] = h.client.of_kind("usage_update")
    assert usage["size"] == 8192
    engine: Any = h.runtime.engine
    assert engine.calls == 0


def test_unknown_window_is_asked_again_and_a_known_one_kept() -> None:
    """The runtime keeps a probed window; a probe that told nothing (0) is asked again."""
    answers = [0, 4096, 9999]
    asked: list[int] = []

    @implementer(IEngine)
    class Probe:
        name = "probe"
        description = "answers context_window() only"

        def complete(
            self, messages: Sequence[Mapping[str, Any]], tools: Sequence[ToolSpec], sink: StreamSink
        ) -> Deferred[ModelReply]:
            raise AssertionError("this runtime only probes the window")

        def context_window(self) -> Deferred[int]:
            asked.append(answers[len(asked)])
            return succeed(asked[-1])

    runtime = AgentRuntime(config=AgentConfig(), engine=Probe(), tools={}, reactor=None)
    seen: list[int] = []
    for _ in range(3):
        ensureDeferred(runtime.window()).addCallback(seen.append)
    assert seen == [0, 4096, 4096]
    assert asked == [0, 4096]
    assert runtime.known_window() == 4096
