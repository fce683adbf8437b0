"""
Compaction (seed 000, ``/compact`` row; brief: ``context.compactAt``): how a history is cut
into turns, the summary request and message, cancellation, and automatic compaction.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.defer import CancelledError, Deferred, ensureDeferred
from twisted.python.failure import Failure
from zope.interface import implementer

from acpkit_agent.compaction import (
    SUMMARY_PREFIX,
    compact,
    is_summary,
    split_history,
    summary_message,
    summary_request,
    summary_text,
)
from acpkit_agent.config import AgentConfig
from acpkit_agent.engines.base import IEngine, ModelReply
from acpkit_agent.session import Session
from tests.fixtures.agent.harness import captured_logs, make_harness, scripted

SYSTEM = {"role": "system", "content": "sys"}


@pytest.fixture(autouse=True)
def _no_home_skills(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))


def turn(n: int, tools: int = 0) -> list[dict[str, Any]]:
    """A turn: the question, ``tools`` tool rounds, the answer."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"q{n}"}]
    for t in range(tools):
        call_id = f"c{n}_{t}"
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "bash", "arguments": "{}"},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": "out"})
    messages.append({"role": "assistant", "content": f"a{n}"})
    return messages


histories = st.lists(st.tuples(st.integers(0, 2), st.booleans()), max_size=8).map(
    lambda shape: (
        [SYSTEM]
        + [
            m
            for n, (tools, summary_first) in enumerate(shape)
            for m in ([summary_message(f"s{n}")] if summary_first else []) + turn(n, tools)
        ]
    )
)


@given(history=histories, keep=st.integers(0, 6))
def test_split_keeps_order_and_at_most_k_turns(history: list[dict[str, Any]], keep: int) -> None:
    """head + older + kept is the history; kept holds the last min(K, turns) turns."""
    split = split_history(history, keep)
    assert split.head + split.older + split.kept == history
    assert split.head == [SYSTEM]
    questions = [m for m in history if m["role"] == "user" and not is_summary(m)]
    kept_questions = [m for m in split.kept if m["role"] == "user" and not is_summary(m)]
    expected = 0 if keep == 0 else min(keep, len(questions))
    if keep > 0 and len(questions) <= keep:
        assert split.older == []
    assert len(kept_questions) == expected if keep else split.kept == []
    assert split.older_turns == len(questions) - len(kept_questions)
    if split.kept and keep:
        assert split.kept[0]["role"] == "user" or split.older == []


def test_summary_message_is_marked_user_role() -> None:
    """The summary is a user-role message marked as a compaction summary."""
    message = summary_message("it went well")
    assert message["role"] == "user" and is_summary(message)
    assert message["content"] == SUMMARY_PREFIX + "it went well"
    assert summary_text(message) == "it went well"
    assert not is_summary({"role": "user", "content": SUMMARY_PREFIX + "typed by hand"})


def test_summary_request_renders_the_older_part() -> None:
    """The request is a system instruction and one user message with the transcript."""
    older = [summary_message("before"), *turn(1, tools=1)]
    messages = summary_request(older)
    assert [m["role"] for m in messages] == ["system", "user"]
    transcript = messages[1]["content"]
    for piece in ("EARLIER SUMMARY:\nbefore", "USER:\nq1", "ASSISTANT CALLED bash (c1_0)"):
        assert piece in transcript
    assert "TOOL RESULT (c1_0):\nout" in transcript and "ASSISTANT:\na1" in transcript


@implementer(IEngine)
class HeldEngine:
    """An engine whose one call is held until the test ends it."""

    name = "held"
    description = "held"

    def __init__(self) -> None:
        self.pending: Deferred[ModelReply] | None = None

    def complete(self, messages: Any, tools: Any, sink: Any) -> Deferred[ModelReply]:
        self.pending = Deferred()
        return self.pending

    def context_window(self) -> Deferred[int]:
        return Deferred()


def test_cancelled_compaction_keeps_the_history() -> None:
    """Cancelling during the summary call raises CancelledError; the history is unchanged."""
    engine = HeldEngine()
    session = Session.create("s", "/tmp", "sys")
    session.history.extend(turn(1) + turn(2))
    before = list(session.history)
    d = ensureDeferred(compact(session, engine, 1, lambda: 0.0))
    d.cancel()
    failures: list[Failure] = []
    d.addErrback(failures.append)
    assert failures and failures[0].check(CancelledError)
    assert session.history == before


def test_summary_replaces_an_earlier_summary() -> None:
    """A second compaction folds the first summary into the new one."""
    h = make_harness(
        scripted({"turn": [{"chunks": ["S2"]}]}), config=AgentConfig(keep_last_turns=1)
    )
    sid = h.start()
    session = h.agent.sessions.get(sid)
    assert session is not None
    session.history.extend([summary_message("S1"), *turn(3), *turn(4)])
    h.raw_prompt(sid, "/compact")
    assert [summary_text(m) for m in session.history if is_summary(m)] == ["S2"]
    engine: Any = h.runtime.engine
    assert "EARLIER SUMMARY:\nS1" in engine.received[0].messages[-1]["content"]


def test_summary_alone_is_nothing_to_compact() -> None:
    """An earlier summary and K turns: nothing older than the last K turns."""
    h = make_harness(scripted({"turn": []}), config=AgentConfig(keep_last_turns=1))
    sid = h.start()
    session = h.agent.sessions.get(sid)
    assert session is not None
    session.history.extend([summary_message("S1"), *turn(3)])
    h.raw_prompt(sid, "/compact")
    assert h.client.text() == "🗜️ nothing to compact: 3 message(s), no turn older than the last 1"


def test_automatic_compaction_before_a_turn() -> None:
    """Above compactAt of the window, the history is compacted before the turn, and logged."""
    turns = [
        {"chunks": ["x" * 400]},
        {"chunks": ["y" * 400]},
        {"chunks": ["short summary"]},
        {"chunks": ["answer"]},
    ]
    config = AgentConfig(context_window=300, compact_at=0.5, keep_last_turns=1)
    with captured_logs() as logs:
        h = make_harness(scripted({"turn": turns}), config=config)
        sid = h.start()
        h.raw_prompt(sid, "one")  # above 150 tokens, but no turn older than the last one
        h.raw_prompt(sid, "two")  # the next turn compacts first
        result = h.raw_prompt(sid, "three")
    assert result["stopReason"] == "end_turn"
    session = h.agent.sessions.get(sid)
    assert session is not None
    assert [m["role"] for m in session.history] == [
        "system",
        "user",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert is_summary(session.history[1])
    engine: Any = h.runtime.engine
    assert engine.received[2].tools == ()
    auto = [line for line in logs.acp() if "automatic compaction" in line]
    assert len(auto) == 1
    assert auto[0].startswith(f"[acp] session {sid}: automatic compaction at ")
    assert "/300 tokens — 🗜️ compressed 2 messages → 1 summary + 2 kept" in auto[0]


def test_no_automatic_compaction_below_the_threshold_or_without_a_window() -> None:
    """Below compactAt, or with an unknown window (0), no summary call is made."""
    for config in (
        AgentConfig(context_window=100000, compact_at=0.9),
        AgentConfig(context_window=0, engine_name="scripted"),
    ):
        h = make_harness(scripted({"turn": [{"chunks": ["a"]}, {"chunks": ["b"]}]}), config=config)
        sid = h.start()
        h.raw_prompt(sid, "one")
        h.raw_prompt(sid, "two")
        engine: Any = h.runtime.engine
        assert engine.calls == 2
