"""
``JSONRPCProtocol.close()``: close now, keeping what was already written; running inbound
handlers are cancelled and pending outgoing requests fail when the connection goes.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from acpkit.errors import ConnectionLost
from acpkit.jsonrpc import InboundRequest, JSONRPCProtocol, MethodRegistry


def test_close_keeps_written_output_and_loses_the_connection() -> None:
    """What was written stays in the transport; the transport is asked to disconnect."""
    proto = JSONRPCProtocol()
    transport = StringTransport()
    proto.makeConnection(transport)
    proto.notify("session/update", {"sessionId": "s"})
    proto.close()
    assert transport.disconnecting
    assert transport.value().count(b"\n") == 1


def test_close_is_idempotent_and_harmless_once_closed() -> None:
    """A second close, or a close after connectionLost, does nothing."""
    proto = JSONRPCProtocol()
    transport = StringTransport()
    proto.makeConnection(transport)
    proto.close()
    proto.close()
    proto.connectionLost(Failure(ConnectionDone()))
    proto.close()
    assert transport.disconnecting


def test_running_handlers_are_cancelled_and_requests_fail_on_the_loss() -> None:
    """After close, connectionLost cancels a running handler and fails our own request."""
    started: list[Deferred[Any]] = []

    def slow(request: InboundRequest) -> Deferred[Any]:
        d: Deferred[Any] = Deferred()
        started.append(d)
        return d

    registry = MethodRegistry()
    registry.add_request("slow", slow)
    proto = JSONRPCProtocol(registry)
    transport = StringTransport()
    proto.makeConnection(transport)
    proto.dataReceived(b'{"jsonrpc":"2.0","id":1,"method":"slow","params":{}}\n')
    ours = proto.request("session/new", {"cwd": "/", "mcpServers": []})
    failures: list[Failure] = []
    ours.addErrback(failures.append)
    proto.close()
    proto.connectionLost(Failure(ConnectionDone()))
    assert started and started[0].called
    assert failures and failures[0].check(ConnectionLost)
