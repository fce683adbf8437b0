"""
An in-memory agent/client pair: both ends of a real ACP connection, no reactor, no
process, bytes moved explicitly by :meth:`ConnectedPair.pump`.

Use it in your own tests like ``treq.testing``::

    pair = connected_pair(MyAgent, MyClient())
    response = pair.result(pair.client.initialize())
    session = pair.result(pair.client.new_session(NewSessionRequest(cwd="/tmp", mcp_servers=[])))

Everything goes through the real framing, JSON-RPC and codec layers, so what passes
here passes on a pipe.  Pass ``clock`` (a :class:`twisted.internet.task.Clock`) to drive
timeouts deterministically.
"""

from __future__ import annotations

from typing import Any, TypeVar

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from acpkit.connection import AgentConnection, AgentSource, ClientConnection, ClientSource
from acpkit.jsonrpc import JSONRPCProtocol

__all__ = ["ConnectedPair", "MemoryTransport", "PendingError", "connected_pair"]

T = TypeVar("T")


class PendingError(AssertionError):
    """``ConnectedPair.result`` was asked for a Deferred that did not fire."""


class MemoryTransport(StringTransport):
    """A :class:`StringTransport` that also records a half-close of our output."""

    outputClosed = False

    def loseWriteConnection(self) -> None:
        """Close our output only (the peer sees end of input)."""
        self.outputClosed = True


@attrs.define
class ConnectedPair:
    """Both typed ends of one in-memory ACP connection."""

    agent: AgentConnection
    client: ClientConnection
    clock: Clock
    agent_transport: MemoryTransport
    client_transport: MemoryTransport
    _closed: bool = False

    def pump(self) -> None:
        """Deliver every written byte, both ways, until nothing moves."""
        a, c = self.agent_transport, self.client_transport
        for _ in range(100_000):
            moved = False
            data = c.value()
            if data:
                c.clear()
                self.agent.protocol.dataReceived(data)
                moved = True
            data = a.value()
            if data:
                a.clear()
                self.client.protocol.dataReceived(data)
                moved = True
            if not moved:
                break
        self._propagate_close()

    def _propagate_close(self) -> None:
        a, c = self.agent_transport, self.client_transport
        if self._closed:
            return
        if c.outputClosed and not a.disconnecting:
            c.outputClosed = False
            self.agent.protocol.readConnectionLost()
            self.pump()
            return
        if a.outputClosed and not c.disconnecting:
            a.outputClosed = False
            self.client.protocol.readConnectionLost()
            self.pump()
            return
        if a.disconnecting or c.disconnecting:
            self._closed = True
            reason = Failure(ConnectionDone("the in-memory connection was closed"))
            self.agent.protocol.connectionLost(reason)
            self.client.protocol.connectionLost(reason)

    def advance(self, seconds: float) -> None:
        """Move the shared clock forward, then pump."""
        self.clock.advance(seconds)
        self.pump()

    def result(self, d: Deferred[T]) -> T:
        """Pump, then return what ``d`` fired with (raising its failure, if any)."""
        self.pump()
        outcome: list[Any] = []
        d.addBoth(outcome.append)
        if not outcome:
            raise PendingError(f"{d!r} has not fired after pumping")
        value = outcome[0]
        if isinstance(value, Failure):
            value.raiseException()
        return value  # type: ignore[no-any-return]

    def close(self) -> None:
        """Close the connection from the client side, as an editor closing the agent's stdin."""
        self.client_transport.loseConnection()
        self.pump()


def connected_pair(
    agent: AgentSource,
    client: ClientSource,
    *,
    clock: Clock | None = None,
    strict: bool = False,
    max_concurrent_requests: int = 32,
) -> ConnectedPair:
    """
    Connect ``agent`` and ``client`` (providers, or factories taking their connection)
    through the real protocol stack in memory.
    """
    clock = clock if clock is not None else Clock()
    time: IReactorTime = clock
    agent_conn = AgentConnection(
        agent,
        protocol=JSONRPCProtocol(
            clock=time, name="client", max_concurrent_requests=max_concurrent_requests
        ),
        strict=strict,
    )
    client_conn = ClientConnection(
        client,
        protocol=JSONRPCProtocol(
            clock=time, name="agent", max_concurrent_requests=max_concurrent_requests
        ),
        strict=strict,
    )
    agent_transport = MemoryTransport()
    client_transport = MemoryTransport()
    agent_conn.protocol.makeConnection(agent_transport)
    client_conn.protocol.makeConnection(client_transport)
    return ConnectedPair(
        agent=agent_conn,
        client=client_conn,
        clock=clock,
        agent_transport=agent_transport,
        client_transport=client_transport,
    )
