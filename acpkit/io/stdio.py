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

from acpkit.compat import StandardIO, flush_writer, stdio_writer, write_now, writer_idle
from acpkit.trace.recording import attach_tracer

__all__ = ["serve_stdio"]


class _StandardIO(StandardIO):
    """
    ``StandardIO`` that always ends with ``connectionLost``, and can flush at once.

    With an ``IHalfCloseableProtocol``, stock ``StandardIO`` never calls
    ``connectionLost`` when stdout is lost first (the peer stopped reading: it died)
    and ``loseConnection`` comes later: the process would then wait forever.
    """

    #: Bytes written while a read is processed, waiting for its end (or ``flushNow``).
    _held: list[bytes] | None = None
    _held_size = 0
    #: True while the protocol processes a read.
    _reading = False

    def childDataReceived(self, fd: str, data: bytes) -> None:
        """
        Deliver a read; what the protocol writes meanwhile is held and written once,
        after it (one write, straight to stdout when nothing else waits: no
        registration with the reactor).
        """
        self._reading = True
        try:
            super().childDataReceived(fd, data)
        finally:
            self._reading = False
            self._release()

    def write(self, data: bytes) -> None:
        if self._reading and self._hold([data], len(data)):
            return
        self._release()
        super().write(data)

    def writeSequence(self, data: Any) -> None:
        chunks = list(data)
        if self._reading and self._hold(chunks, sum(len(c) for c in chunks)):
            return
        self._release()
        super().writeSequence(chunks)

    def _hold(self, chunks: list[bytes], size: int) -> bool:
        """
        Hold ``chunks`` until the read is processed; False when they must go to the
        writer now: it is gone or has data waiting (the reactor writes in order), or
        holding them would take more than its buffer (so that a producer is paused as
        it would be).
        """
        writer = stdio_writer(self)
        if not writer_idle(writer) or self._held_size + size > writer.bufferSize:
            return False
        if self._held is None:
            self._held = []
        self._held.extend(chunks)
        self._held_size += size
        return True

    def _release(self) -> None:
        """Write what is held, at once when stdout is idle."""
        held = self._held
        if not held:
            return
        self._held, self._held_size = None, 0
        write_now(stdio_writer(self), b"".join(held))

    def flushNow(self) -> None:
        """Write buffered output now rather than on the reactor's next turn."""
        self._release()
        flush_writer(stdio_writer(self))

    def loseWriteConnection(self) -> None:
        self._release()
        super().loseWriteConnection()

    def loseConnection(self) -> None:
        self._release()
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
