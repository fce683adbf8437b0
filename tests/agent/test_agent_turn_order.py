"""
The order in which bob's turns leave the wire (issue 13): with turns queued on several
sessions, responses leave in the order the turns finish, and each turn's updates precede
its response and follow the previous turn's response.  :class:`TurnLock` is the shared
mechanism: it hands the process-wide turn lock over on the reactor's next iteration.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from twisted.internet.defer import CancelledError
from twisted.internet.task import Clock

from acpkit import schema
from acpkit_agent.turn_lock import TurnLock
from tests.agent.test_agent_backpressure import (
    WORD,
    FlowControlledTransport,
    flow_harness,
    prompt_request,
    send_without_reading,
)
from tests.fixtures.agent.harness import Harness, make_harness, scripted


class AgentWire:
    """Records the agent's outbound lines (``NDJSONProtocol.tracer``)."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        #: The session of each ``session/prompt`` request received, by request id.
        self.prompts: dict[Any, str] = {}

    def received(self, line: bytes) -> None:
        message = json.loads(line)
        if message.get("method") == "session/prompt":
            self.prompts[message["id"]] = message["params"]["sessionId"]

    def sent(self, line: bytes) -> None:
        self.lines.append(json.loads(line))

    def summary(self, names: dict[str, str]) -> list[str]:
        """
        ``"update A"`` for an update of session A, ``"answer A"`` for the response to a
        prompt of session A (``names`` gives each session id its letter).
        """
        out: list[str] = []
        for message in self.lines:
            if message.get("method") == "session/update":
                out.append(f"update {names[message['params']['sessionId']]}")
            elif "method" not in message and message.get("id") in self.prompts:
                out.append(f"answer {names[self.prompts[message['id']]]}")
        return out


def collapse(events: list[str]) -> list[str]:
    """Runs of the same event as one."""
    out: list[str] = []
    for event in events:
        if not out or out[-1] != event:
            out.append(event)
    return out


def two_sessions(h: Harness) -> tuple[str, str, AgentWire]:
    sid_a, sid_b = h.start(), h.start()
    wire = AgentWire()
    h.pair.agent.protocol.tracer = wire
    return sid_a, sid_b, wire


def test_a_queued_turn_is_answered_after_the_turn_before_it() -> None:
    """
    Session A's turn streams slowly, session B's prompt waits for the turn lock: A's
    updates, A's response, then B's updates and B's response (B's engine answers at once,
    which used to let B run and be answered inside A's release of the lock).
    """
    h = make_harness(
        scripted({"turn": [{"chunks": ["a1", "a2"], "delay": 1.0}, {"chunks": ["b1", "b2"]}]})
    )
    sid_a, sid_b, wire = two_sessions(h)
    first = h.pair.client.prompt(prompt_request(sid_a, "one"))
    second = h.pair.client.prompt(prompt_request(sid_b, "two"))
    h.pair.pump()
    h.pair.advance(1.0)
    h.pair.advance(1.0)
    assert h.pair.result(first).stop_reason == schema.StopReason.END_TURN
    assert h.pair.result(second).stop_reason == schema.StopReason.END_TURN
    events = wire.summary({sid_a: "A", sid_b: "B"})
    assert collapse(events) == ["update A", "answer A", "update B", "answer B"]
    texts = [u["content"]["text"] for u in h.client.of_kind("agent_message_chunk")]
    assert texts == ["a1", "a2", "b1", "b2"]


def test_echo_turns_queued_behind_back_pressure_leave_in_order() -> None:
    """
    The echo engine: session A's long answer waits for a client that does not read, and
    session B's prompt queues behind it; once the client reads, A's chunks and response
    leave first, then B's.
    """
    h = flow_harness()
    sid_a, sid_b, wire = two_sessions(h)
    first = h.pair.client.prompt(prompt_request(sid_a, WORD * 3000))
    second = h.pair.client.prompt(prompt_request(sid_b, "short"))
    send_without_reading(h.pair)
    transport = h.pair.agent_transport
    assert isinstance(transport, FlowControlledTransport) and transport.paused_producer
    h.pair.pump()  # the client reads: A finishes; B gets the lock on the next iteration
    h.pair.advance(0)
    assert h.pair.result(first).stop_reason == schema.StopReason.END_TURN
    assert h.pair.result(second).stop_reason == schema.StopReason.END_TURN
    events = wire.summary({sid_a: "A", sid_b: "B"})
    assert collapse(events) == ["update A", "answer A", "update B", "answer B"]
    assert h.client.text().endswith("Echo: short")


def test_turns_on_three_sessions_answer_in_the_order_they_finish() -> None:
    """Three queued turns (the first one slow): answered A, B, C, each after its updates."""
    h = make_harness(
        scripted(
            {
                "turn": [
                    {"chunks": ["a1", "a2"], "delay": 1.0},
                    {"chunks": ["b1"]},
                    {"chunks": ["c1"]},
                ]
            }
        )
    )
    sids = [h.start(), h.start(), h.start()]
    wire = AgentWire()
    h.pair.agent.protocol.tracer = wire
    requests = [
        h.pair.client.protocol.request(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "q"}]}
        )
        for sid in sids
    ]
    h.pair.pump()
    h.pair.advance(1.0)
    h.pair.advance(1.0)
    for d in requests:
        assert h.pair.result(d)["stopReason"] == "end_turn"
    events = wire.summary(dict(zip(sids, "ABC", strict=True)))
    assert collapse(events) == [
        "update A",
        "answer A",
        "update B",
        "answer B",
        "update C",
        "answer C",
    ]


# -- TurnLock ------------------------------------------------------------------------


def test_turn_lock_hands_over_on_the_next_reactor_iteration_in_fifo_order() -> None:
    """
    ``release()`` with waiters keeps the lock taken and gives it to the first waiter on the
    reactor's next iteration; without waiters it frees the lock at once.
    """
    clock = Clock()
    lock = TurnLock(clock)
    got: list[str] = []
    lock.acquire().addCallback(lambda _: got.append("first"))
    lock.acquire().addCallback(lambda _: got.append("second"))
    lock.acquire().addCallback(lambda _: got.append("third"))
    assert got == ["first"] and lock.locked
    lock.release()
    assert got == ["first"] and lock.locked  # not inside release()
    clock.advance(0)
    assert got == ["first", "second"]
    lock.release()
    clock.advance(0)
    assert got == ["first", "second", "third"]
    lock.release()
    assert not lock.locked
    assert not clock.getDelayedCalls()


def test_turn_lock_skips_cancelled_waiters() -> None:
    """
    A cancelled ``acquire()`` leaves the queue, also while the lock is being handed over:
    a lock whose waiters all left is free.
    """
    clock = Clock()
    lock = TurnLock(clock)
    lock.acquire()
    gone = lock.acquire()
    errors: list[Any] = []
    gone.addErrback(errors.append)
    gone.cancel()
    assert errors and errors[0].check(CancelledError)
    lock.release()
    assert not lock.locked and not clock.getDelayedCalls()
    lock.acquire()
    leaves = lock.acquire()
    lock.release()  # the hand-over is scheduled…
    leaves.cancel()  # …and its waiter leaves before it
    leaves.addErrback(lambda _: None)
    clock.advance(0)
    assert not lock.locked
    assert lock.acquire().called


def test_turn_lock_release_without_acquire_is_an_error() -> None:
    """
    Releasing a free lock, or releasing again while the lock is being handed over, raises
    ``RuntimeError`` (a bug in the caller) and hands the lock to nobody twice.
    """
    clock = Clock()
    lock = TurnLock(clock)
    with pytest.raises(RuntimeError):
        lock.release()
    lock.acquire()
    second, third = lock.acquire(), lock.acquire()
    lock.release()
    with pytest.raises(RuntimeError):
        lock.release()
    clock.advance(0)
    assert second.called and not third.called
