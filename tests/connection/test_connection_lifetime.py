"""
A connection's end, through the typed connections' public API: ``close()``, the
``closed`` Deferred (succeeds on a clean close, fails with the reason otherwise),
``closed_reason``, and the ``tracer=`` argument.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from acpkit import schema
from acpkit.connection import Agent, AgentConnection, Client, ClientConnection, negotiate_version
from acpkit.io import AgentExited
from acpkit.testing.pair import connected_pair


class EchoAgent(Agent):
    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=negotiate_version(params.protocol_version)
        )


class Lines:
    """A tracer keeping every line, both ways."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def received(self, line: bytes) -> None:
        self.lines.append(("received", json.loads(line)))

    def sent(self, line: bytes) -> None:
        self.lines.append(("sent", json.loads(line)))


def _lost(conn: AgentConnection | ClientConnection, reason: Exception) -> None:
    conn.protocol.makeConnection(StringTransport())
    conn.protocol.connectionLost(Failure(reason))


class ClosedTests(SynchronousTestCase):
    """``closed``: None for a clean end, the reason's failure otherwise."""

    def test_clean_close_by_the_peer(self) -> None:
        """The client closes the agent's input: both ends' ``closed`` succeed with None."""
        pair = connected_pair(EchoAgent(), Client())
        agent_closed, client_closed = pair.agent.closed, pair.client.closed
        self.assertNoResult(agent_closed)
        pair.close()
        self.assertIsNone(self.successResultOf(agent_closed))
        self.assertIsNone(self.successResultOf(client_closed))
        self.assertTrue(pair.agent.closed_reason is not None)

    def test_close_is_a_clean_close(self) -> None:
        """``conn.close()`` by the agent ends the connection; ``closed`` succeeds."""
        pair = connected_pair(EchoAgent(), Client())
        pair.result(pair.client.initialize())
        closed = pair.agent.closed
        pair.agent.close()
        pair.pump()
        self.assertIsNone(self.successResultOf(closed))
        self.assertIsNone(self.successResultOf(pair.client.closed))
        pair.agent.close()  # closing again does nothing

    def test_broken_connection_fails_with_the_reason(self) -> None:
        """A connection lost otherwise fails ``closed`` with the reason, also afterwards."""
        conn = AgentConnection(EchoAgent())
        closed = conn.closed
        _lost(conn, ConnectionLost("the pipe broke"))
        self.failureResultOf(closed, ConnectionLost)
        self.failureResultOf(conn.closed, ConnectionLost)
        reason = conn.closed_reason
        assert reason is not None
        self.assertIsInstance(reason.value, ConnectionLost)

    def test_agent_exit_status(self) -> None:
        """An agent process exiting 0 is a clean close; another status or a signal is not."""
        for exit_code, sig, clean in [(0, None, True), (3, None, False), (None, 9, False)]:
            conn = ClientConnection(Client())
            closed = conn.closed
            _lost(conn, AgentExited("a", exit_code, sig, ""))
            if clean:
                self.assertIsNone(self.successResultOf(closed))
                self.assertIsNone(self.successResultOf(conn.closed))
            else:
                failure = self.failureResultOf(closed, AgentExited)
                self.assertEqual(failure.value.exit_code, exit_code)
                self.failureResultOf(conn.closed, AgentExited)

    def test_when_closed_still_fires_with_the_reason(self) -> None:
        """``protocol.when_closed()`` keeps its meaning: the reason, even a clean one."""
        conn = AgentConnection(EchoAgent())
        old = conn.protocol.when_closed()
        _lost(conn, ConnectionDone("eof"))
        self.failureResultOf(old, ConnectionDone)
        self.assertIsNone(self.successResultOf(conn.closed))


class TracerTests(SynchronousTestCase):
    """``tracer=`` records the connection's messages both ways."""

    def test_tracer_argument(self) -> None:
        """A tracer given to either connection sees what it sends and receives."""
        agent_lines, client_lines = Lines(), Lines()
        conn = AgentConnection(EchoAgent(), tracer=agent_lines)
        client = ClientConnection(Client(), tracer=client_lines)
        transport = StringTransport()
        client.protocol.makeConnection(transport)
        client.initialize()
        self.assertEqual(client_lines.lines[0][0], "sent")
        self.assertEqual(client_lines.lines[0][1]["method"], "initialize")
        conn.protocol.makeConnection(StringTransport())
        conn.protocol.dataReceived(transport.value())
        self.assertEqual(
            [(way, m.get("method"), m.get("id")) for way, m in agent_lines.lines],
            [("received", "initialize", 1), ("sent", None, 1)],
        )
