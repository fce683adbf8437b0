"""
``JSONRPCEngine.requests_in_progress`` and ``when_requests_answered()``: what a server
that drains its connections waits on before closing one (a ``Clock`` and a
``StringTransport``).
"""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionLost
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from acpkit.jsonrpc import InboundRequest, JSONRPCProtocol, MethodRegistry


class Slow:
    """A protocol whose ``work`` requests wait until the test answers them."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.pending: list[Deferred[Any]] = []
        registry = MethodRegistry()
        registry.add_request("work", self._work)
        registry.add_request("quick", lambda r: "done")
        self.protocol = JSONRPCProtocol(registry, clock=self.clock)
        self.transport = StringTransport()
        self.protocol.makeConnection(self.transport)

    def _work(self, request: InboundRequest) -> Deferred[Any]:
        d: Deferred[Any] = Deferred()
        self.pending.append(d)
        return d

    def send(self, request_id: int, method: str = "work") -> None:
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {}}
        self.protocol.dataReceived(json.dumps(message).encode() + b"\n")


def fired(d: Deferred[None]) -> bool:
    return bool(d.called)


def test_with_no_request_in_progress_it_fires_at_once() -> None:
    """Nothing received, or everything answered already: the Deferred has fired."""
    slow = Slow()
    assert slow.protocol.requests_in_progress == 0
    assert fired(slow.protocol.when_requests_answered())
    slow.send(1, "quick")
    assert slow.protocol.requests_in_progress == 0
    assert fired(slow.protocol.when_requests_answered())


def test_it_fires_on_the_turn_after_the_last_answer() -> None:
    """
    Two requests running: it fires only once both are answered, on a later reactor turn
    (after the answer was written), not from inside the engine.
    """
    slow = Slow()
    slow.send(1)
    slow.send(2)
    assert slow.protocol.requests_in_progress == 2
    settled = slow.protocol.when_requests_answered()
    slow.pending[0].callback("one")
    slow.clock.advance(0)
    assert not fired(settled)
    slow.pending[1].callback("two")
    assert not fired(settled)  # not from inside the engine's answer
    assert b'"id":2' in slow.transport.value()
    slow.clock.advance(0)
    assert fired(settled)


def test_a_request_that_comes_before_that_turn_is_waited_for_too() -> None:
    """A request received between the last answer and the turn it would fire on: waited for."""
    slow = Slow()
    slow.send(1)
    settled = slow.protocol.when_requests_answered()
    slow.pending[0].callback("one")
    slow.send(2)
    slow.clock.advance(0)
    assert not fired(settled)
    slow.pending[1].callback("two")
    slow.clock.advance(0)
    assert fired(settled)


def test_the_end_of_the_connection_settles_it() -> None:
    """The connection lost with a request running: nothing is in progress any more."""
    slow = Slow()
    slow.send(1)
    settled = slow.protocol.when_requests_answered()
    slow.protocol.connectionLost(Failure(ConnectionLost("gone")))
    slow.clock.advance(0)
    assert fired(settled)
    assert slow.protocol.requests_in_progress == 0
    assert fired(slow.protocol.when_requests_answered())
