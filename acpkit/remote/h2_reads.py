"""
One HTTP/2 frame per read for twisted.web's HTTP/2 server (a guard for a Twisted bug).

twisted.web's ``H2Connection.dataReceived`` gives a whole read to h2, which applies every
frame in it at once, then dispatches the resulting events one by one.  When a request and
its ``RST_STREAM`` come in the same read (a client opening a stream and closing it right
after), the request is rendered while h2 already holds its stream closed, but twisted.web
does not know yet; the response written during ``render`` then fails inside twisted.web
(Twisted 24.7 through 26.10 at least, h2 4.x):

- when a later frame of the same read opened another stream, h2 has already forgotten the
  closed one: ``writeHeaders`` gets ``StreamIDTooLowError`` (it catches only
  ``StreamClosedError``), ``Request.processingFailed`` logs it and writes a 500, whose
  ``writeDataToStream`` raises ``StreamClosedError`` out of ``dataReceived``: the reactor
  logs "Unhandled Error" and drops the TCP connection, with every other stream on it,
  and the rest of that read (a ``DELETE``, a ``POST``) is never served;
- otherwise, when the sending loop was idle, the write wakes it synchronously and
  ``send_data`` on the closed stream raises inside it: the loop is never rescheduled and no
  DATA frame (nor the end of any response) leaves that connection again.

Fed one frame at a time, twisted.web learns of each reset in the same call as h2 applies
it, and a response is never written to a stream it does not know is closed: the reset
request is aborted as twisted.web aborts any request reset mid-way.  Only public API is
used (the transport's ALPN ``negotiatedProtocol`` and the frame layout of RFC 9113 §4.1).
On a connection that is not HTTP/2 the wrapper passes reads through untouched.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.interfaces import IProtocol, ITransport
from twisted.python.failure import Failure
from zope.interface import implementer

__all__ = ["H2FrameReads"]

#: The client connection preface (RFC 9113 §3.4), before the first frame.
PREFACE_LENGTH = len(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
#: Length (3 bytes), type, flags, stream identifier (4 bytes).
FRAME_HEADER_LENGTH = 9
#: ``SETTINGS_MAX_FRAME_SIZE``'s initial value, which twisted.web never raises: a longer
#: frame is refused by h2 (FRAME_SIZE_ERROR), so it is passed on at once, unbuffered.
MAX_FRAME_PAYLOAD = 16_384


@implementer(IProtocol)
class H2FrameReads:
    """
    Wraps the protocol a ``twisted.web`` site builds: on a connection whose ALPN chose
    ``h2``, each ``dataReceived`` it passes on holds one whole frame (the preface first);
    on any other connection, reads go through as they come.  The wrapped protocol gets
    the real transport, so upgrades that take the transport over (WebSocket) bypass this
    wrapper afterwards.  At most one frame (16 KiB and its header) is held.
    """

    def __init__(self, wrapped: IProtocol) -> None:
        self.wrapped = wrapped
        self._transport: ITransport | None = None
        self._split: bool | None = None
        self._buffer = bytearray()
        self._preface_left = PREFACE_LENGTH

    def __getattr__(self, name: str) -> Any:
        # Attributes set on the site's protocol (``site``, ``requestFactory``...) stay
        # readable through the wrapper.
        if name == "wrapped":
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    def makeConnection(self, transport: ITransport) -> None:
        self._transport = transport
        self.wrapped.makeConnection(transport)

    def connectionMade(self) -> None:
        """Called by ``makeConnection`` on the wrapped protocol itself."""

    def dataReceived(self, data: bytes) -> None:
        if self._split is None:
            negotiated = getattr(self._transport, "negotiatedProtocol", None)
            self._split = negotiated == b"h2"
        if not self._split:
            self.wrapped.dataReceived(data)
            return
        self._buffer += data
        while (unit := self._next_unit()) is not None:
            if getattr(self._transport, "disconnecting", False):
                # The server is closing this connection (GOAWAY, a protocol error):
                # nothing read after that is served.
                self._buffer.clear()
                return
            self.wrapped.dataReceived(unit)

    def _next_unit(self) -> bytes | None:
        """The next whole frame (or the preface, or all of it when passing through)."""
        buffer = self._buffer
        if not buffer:
            return None
        if not self._split:
            unit = bytes(buffer)
            buffer.clear()
            return unit
        if self._preface_left:
            size = min(self._preface_left, len(buffer))
            self._preface_left -= size
        else:
            if len(buffer) < FRAME_HEADER_LENGTH:
                return None
            payload = int.from_bytes(buffer[:3], "big")
            if payload > MAX_FRAME_PAYLOAD:
                # h2 refuses it and ends the connection; nothing is held for it.
                self._split = False
                return self._next_unit()
            size = FRAME_HEADER_LENGTH + payload
            if len(buffer) < size:
                return None
        unit = bytes(buffer[:size])
        del buffer[:size]
        return unit

    def connectionLost(self, reason: Failure) -> None:
        self._buffer.clear()
        self.wrapped.connectionLost(reason)
