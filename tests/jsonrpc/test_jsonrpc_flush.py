"""
Write-through: transports that offer ``flushNow`` (those of ``acpkit.io``) are
asked to write at once, and only once per processed read.
"""

from __future__ import annotations

from twisted.internet.testing import StringTransport

from acpkit.jsonrpc import JSONRPCProtocol, MethodRegistry
from acpkit.jsonrpc.engine import FLUSH_WHILE_RECEIVING
from tests.helpers import connected


class FlushingTransport(StringTransport):
    """Counts ``flushNow`` calls and how much had been written at each."""

    def __init__(self) -> None:
        super().__init__()
        self.flushes: list[int] = []

    def flushNow(self) -> None:
        self.flushes.append(self.value().count(b"\n"))


def flushing_engine(
    registry: MethodRegistry | None = None,
) -> tuple[JSONRPCProtocol, FlushingTransport]:
    """An engine connected to a transport that records its flushes."""
    proto = JSONRPCProtocol(registry)
    return proto, connected(proto, FlushingTransport())


def test_write_outside_a_read_is_flushed_at_once() -> None:
    """A request or notification sent from application code is flushed right away."""
    proto, transport = flushing_engine()
    proto.notify("session/cancel", {"sessionId": "s"})
    proto.request("session/new", {"cwd": "/", "mcpServers": []})
    assert transport.flushes == [1, 2]


def test_replies_to_one_read_are_flushed_once() -> None:
    """Three requests in one read get three replies and a single flush after them."""
    registry = MethodRegistry()
    registry.add_request("echo", lambda req: req.params)
    proto, transport = flushing_engine(registry)
    proto.dataReceived(
        b"".join(b'{"jsonrpc":"2.0","id":%d,"method":"echo","params":{}}\n' % i for i in range(3))
    )
    assert transport.flushes == [3]


def test_transports_without_flush_are_left_alone() -> None:
    """A plain transport (TCP, StringTransport) keeps Twisted's usual buffering."""
    proto = JSONRPCProtocol()
    transport = StringTransport()
    proto.makeConnection(transport)
    proto.notify("x", {})
    assert transport.value().endswith(b"\n")


def test_a_large_burst_inside_one_read_is_flushed_as_it_grows() -> None:
    """
    Messages written while one read is processed are flushed each
    ``FLUSH_WHILE_RECEIVING`` bytes, not only after the read: a handler (or a client
    resumed by an answer) that writes thousands of messages lets the peer start on the
    first ones before the last is made.
    """
    registry = MethodRegistry()
    line = b'{"jsonrpc":"2.0","method":"tick","params":{"pad":"' + b"x" * 60 + b'"}}'
    count = 3 * FLUSH_WHILE_RECEIVING // len(line)
    proto, transport = flushing_engine(registry)

    def burst(request: object) -> dict[str, int]:
        for _ in range(count):
            proto.write(line)
        return {"sent": count}

    registry.add_request("burst", burst)
    proto.dataReceived(b'{"jsonrpc":"2.0","id":1,"method":"burst","params":{}}\n')
    per_flush = FLUSH_WHILE_RECEIVING // (len(line) + 1) + 1
    assert transport.flushes[:3] == [per_flush, 2 * per_flush, 3 * per_flush]
    assert transport.flushes[-1] == count + 1  # the rest, and the answer, after the read
