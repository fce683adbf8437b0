"""
This process's stdin and stdout as a transport: :func:`serve_stdio` (an agent's side).

The transport always ends with ``connectionLost``, also when the peer closed our stdout
first, and offers ``flushNow()``: the JSON-RPC engine writes what it has to say at once
instead of on the reactor's next turn (most of a round trip over a pipe).  What the
protocol writes while it processes a read is written when the read is processed (or at
``flushNow``), in one write, straight to stdout when nothing else waits to be written.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IProtocol
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure

from acpkit.compat import StandardIO, flush_writer, stdio_writer
from acpkit.io.held_writes import ReadWrites
from acpkit.trace.recording import attach_tracer

__all__ = ["serve_stdio"]


class _StandardIO(StandardIO):
    """
    ``StandardIO`` that always ends with ``connectionLost``, and can flush at once.

    With an ``IHalfCloseableProtocol``, stock ``StandardIO`` never calls
    ``connectionLost`` when stdout is lost first (the peer stopped reading: it died)
    and ``loseConnection`` comes later: the process would then wait forever.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._writes = ReadWrites(lambda: stdio_writer(self))
        super().__init__(*args, **kwargs)

    def childDataReceived(self, fd: str, data: bytes) -> None:
        """
        Deliver a read; what the protocol writes meanwhile is written once after it
        (:class:`~acpkit.io.held_writes.ReadWrites`).
        """
        writes = self._writes
        writes.reading = True
        try:
            super().childDataReceived(fd, data)
        finally:
            writes.reading = False
            writes.release()

    def write(self, data: bytes) -> None:
        if not self._writes.hold([data], len(data)):
            super().write(data)

    def writeSequence(self, data: Any) -> None:
        chunks = list(data)
        if not self._writes.hold(chunks, sum(map(len, chunks))):
            super().writeSequence(chunks)

    def flushNow(self) -> None:
        """Write buffered output now rather than on the reactor's next turn."""
        self._writes.release()
        flush_writer(stdio_writer(self))

    def loseWriteConnection(self) -> None:
        self._writes.release()
        super().loseWriteConnection()

    def loseConnection(self) -> None:
        self._writes.release()
        super().loseConnection()
        if stdio_writer(self) is None and not self.disconnected:
            self.connectionLost(Failure(ConnectionDone("stdout was already closed")))


def serve_stdio(
    protocol: IProtocol | Protocol,
    reactor: Any = None,
    *,
    name: str = "client",
    stdin: int = 0,
    stdout: int = 1,
) -> StandardIO:
    """
    Connect ``protocol`` to this process's stdin and stdout (or the given descriptors).

    When stdin reaches EOF, an ``IHalfCloseableProtocol`` (every framing and
    JSON-RPC protocol of acpkit) gets ``readConnectionLost()`` and may still write its
    last replies; other protocols get ``connectionLost``.  ``loseConnection`` always leads to
    ``connectionLost``, also when stdout was closed by the peer first.  ``name`` is the
    peer name used in traces.
    """
    attach_tracer(protocol, name)
    return _StandardIO(protocol, stdin=stdin, stdout=stdout, reactor=reactor)
