"""
:class:`ReadWrites`: what a protocol writes while it processes a read, held and written
once at the end of the read, straight to the descriptor when nothing else waits.

Twisted's ``FileDescriptor.write`` registers the descriptor with the reactor for
writing, and once the data is written, unregisters it: two ``epoll_ctl`` calls and their
bookkeeping per message, on top of the write.  A transport that knows when its protocol
processes a read (the stdio transport, a spawned agent's) holds the writes made meanwhile
and writes them at its end, with ``compat.write_now``.  Writes go to the descriptor as
before when it has data waiting (order), when holding them would pass its buffer size (so
that a streaming producer is paused as before), or outside a read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from acpkit.compat import write_now, writer_idle

__all__ = ["ReadWrites"]


class ReadWrites:
    """The writes of one read (see the module docstring); ``writer()`` is the descriptor."""

    def __init__(self, writer: Callable[[], Any]) -> None:
        self._descriptor = writer
        self._held: list[bytes] = []
        self._size = 0
        # The descriptor's buffer size once it was found idle during this read, until
        # the next release (None: not looked at since).  Only this object writes to the
        # descriptor while a read is processed, so it stays idle until then.
        self._limit: int | None = None
        #: True while the protocol processes a read.
        self.reading = False

    def hold(self, chunks: list[bytes], size: int) -> bool:
        """
        Hold ``chunks`` (``size`` bytes) until the read is processed; False when they must
        go to the descriptor now (what is held is then written first, to keep the order).
        """
        if self.reading:
            limit = self._limit
            if limit is None:
                writer = self._descriptor()
                if writer_idle(writer):
                    limit = self._limit = writer.bufferSize
            if limit is not None and self._size + size <= limit:
                self._held.extend(chunks)
                self._size += size
                return True
        self.release()
        return False

    def release(self) -> None:
        """Write what is held: at once when the descriptor is idle."""
        self._limit = None
        if not self._held:
            return
        data = b"".join(self._held)
        self._held.clear()
        self._size = 0
        write_now(self._descriptor(), data)
