"""
``Content-Length`` framing (the LSP base protocol): a header block, then a body.

Each message is ``Content-Length: N\\r\\n``, optionally ``Content-Type: ...\\r\\n``
(other headers are accepted and ignored), an empty line (``\\r\\n``), then exactly ``N``
bytes of body.  :class:`ContentLengthProtocol` has the same guarantees as
:class:`acpkit.framing.NDJSONProtocol`: linear time whatever the read sizes (each byte
is searched once, bodies are sliced out once), bounded memory (a header block longer
than ``MAX_HEADER_LENGTH`` and a body longer than ``MAX_LENGTH`` are never buffered),
half-close and pause support.

======================================  ==========================================
input                                   what happens
======================================  ==========================================
``Content-Length: 2\\r\\n\\r\\n{}``         ``messageReceived(b"{}")``
header names                            case-insensitive; ``Content-Type`` and
                                        unknown headers are ignored
a message split by reads at any byte    delivered whole, once
a body longer than ``MAX_LENGTH``       never buffered: ``messageLengthExceeded``
                                        is called once with its first bytes (at most
                                        ``OVERSIZED_HEAD``), the rest is skipped, the
                                        next message is delivered as usual
a header block longer than              ``malformedHeader(reason)``: the stream
``MAX_HEADER_LENGTH``, a header line    cannot be resynchronised, so by default the
without ``:``, no ``Content-Length``,   error is logged and the connection closed;
two of them, or one that is not a       nothing after it is delivered
decimal number
the peer closes our input (half-close)  a partial message is dropped (logged), then
                                        ``inputEnded()`` (default: close once queued
                                        output is written); while paused, after the
                                        held messages are delivered
======================================  ==========================================

Like :class:`~acpkit.framing.NDJSONProtocol` it is used either subclassed (the hooks
above) or held by an engine (:class:`acpkit.framing.IFraming`): given a ``receiver``,
bodies go to ``receiver.messageReceived``, oversized heads to
``receiver.messageLengthExceeded``, the end of input to ``receiver.inputEnded``, and a
malformed header block to ``receiver.framingFailed("malformed header: <reason>")``.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.interfaces import IHalfCloseableProtocol
from twisted.internet.protocol import Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from acpkit.framing.interfaces import (
    DEFAULT_MAX_LENGTH,
    OVERSIZED_HEAD,
    IFramedMessageReceiver,
    IFraming,
    LineTracer,
)

__all__ = ["DEFAULT_MAX_HEADER_LENGTH", "ContentLengthProtocol", "HeaderError", "parse_headers"]

#: Default largest accepted header block, in bytes (the blank line included).
DEFAULT_MAX_HEADER_LENGTH = 8192

_CONTENT_LENGTH = b"content-length"
_END_OF_HEADERS = b"\r\n\r\n"


class HeaderError(ValueError):
    """A header block that does not frame a message (see :func:`parse_headers`)."""


def parse_headers(block: bytes) -> int:
    """
    The body length a header block announces (``block`` without its blank line).

    Raises :class:`HeaderError` for a line without ``:``, a missing or repeated
    ``Content-Length``, or one that is not a decimal number.
    """
    length: int | None = None
    for raw in block.split(b"\n"):
        line = raw[:-1] if raw.endswith(b"\r") else raw
        name, colon, value = line.partition(b":")
        if not colon:
            raise HeaderError(f"header line without ':': {line[:80]!r}")
        if name.strip().lower() != _CONTENT_LENGTH:
            continue
        if length is not None:
            raise HeaderError("more than one Content-Length header")
        digits = value.strip()
        if not digits.isdigit() or not digits.isascii() or len(digits) > 20:
            raise HeaderError(f"Content-Length is not a decimal number: {digits[:40]!r}")
        length = int(digits)
    if length is None:
        raise HeaderError("no Content-Length header")
    return length


@implementer(IHalfCloseableProtocol, IFraming)
class ContentLengthProtocol(Protocol):
    """
    Linear-time ``Content-Length`` framing with half-close and pause support.

    Subclasses implement :meth:`messageReceived` (the body bytes) and may override
    :meth:`messageLengthExceeded`, :meth:`malformedHeader` and :meth:`inputEnded`.
    Or, held (:class:`acpkit.framing.IFraming`): given a ``receiver``, every event goes
    to it instead (a malformed header block to its ``framingFailed``).
    """

    MAX_LENGTH = DEFAULT_MAX_LENGTH
    MAX_HEADER_LENGTH = DEFAULT_MAX_HEADER_LENGTH

    #: Records complete message bodies in both directions when set.
    tracer: LineTracer | None = None

    #: True while delivery is paused (messages stay buffered).
    paused = False

    _log = Logger()

    def __init__(self, receiver: IFramedMessageReceiver | None = None) -> None:
        #: Where whole bodies go when set (held framing); else to this object's hooks.
        self.receiver = receiver
        self._clBuffer = bytearray()
        # Length of the body being read, once its header block was parsed.
        self._bodyLength: int | None = None
        # How many leading bytes of the buffer hold no end of header block.
        self._scanned = 0
        # Skipping an oversized body: bytes still to skip; its head, until delivered.
        self._skip = 0
        self._broken = False
        self._inputEnded = False
        self._endWhenResumed = False
        self._busyReceiving = False

    # -- reading -----------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        """Split ``data`` (appended to what is buffered) into messages."""
        if self._broken:
            return
        if self._skip:
            if len(data) <= self._skip:
                self._skip -= len(data)
                return
            data = data[self._skip :]
            self._skip = 0
        self._clBuffer += data
        if self._busyReceiving:
            return
        self._busyReceiving = True
        try:
            self._deliverMessages()
        finally:
            self._busyReceiving = False
        if self._endWhenResumed and not self.paused:
            # The input ended while paused and the held messages are now delivered.
            self._endWhenResumed = False
            self._dropPartial()
            self._endOfInput()

    def _deliverMessages(self) -> None:
        buf = self._clBuffer
        start = 0
        receiver = self.receiver
        deliver: Callable[[bytes], None]
        tooLong: Callable[[bytes], None]
        if receiver is None:
            deliver, tooLong = self.messageReceived, self.messageLengthExceeded
        else:
            deliver, tooLong = receiver.messageReceived, receiver.messageLengthExceeded
        while not self.paused and not self._broken:
            length = self._bodyLength
            if length is None:
                # Search only the new bytes (minus 3: a terminator split by reads), and
                # never further than the header limit: a body is never scanned.
                limit = start + self.MAX_HEADER_LENGTH
                end = buf.find(_END_OF_HEADERS, max(start + self._scanned - 3, start), limit)
                if end == -1:
                    self._scanned = len(buf) - start
                    if self._scanned >= self.MAX_HEADER_LENGTH:
                        self._fail(f"header block longer than {self.MAX_HEADER_LENGTH} bytes")
                    break
                try:
                    length = parse_headers(bytes(buf[start:end]))
                except HeaderError as e:
                    self._fail(str(e))
                    break
                start = end + 4
                self._scanned = 0
                self._bodyLength = length
            if length > self.MAX_LENGTH:
                want = min(length, OVERSIZED_HEAD)
                if len(buf) - start < want:
                    break
                head = bytes(buf[start : start + want])
                available = len(buf) - start
                if available >= length:
                    start += length
                else:
                    self._skip = length - available
                    start = len(buf)
                self._bodyLength = None
                tooLong(head)
            else:
                if len(buf) - start < length:
                    break
                body = bytes(buf[start : start + length])
                start += length
                self._bodyLength = None
                tracer = self.tracer
                if tracer is not None:
                    tracer.received(body)
                deliver(body)
            if self.transport is not None and getattr(self.transport, "disconnecting", False):
                break
        if self._broken:
            buf.clear()
            return
        if start:
            del buf[:start]

    def _fail(self, reason: str) -> None:
        self._broken = True
        self._scanned = 0
        self._bodyLength = None
        self._clBuffer.clear()
        receiver = self.receiver
        if receiver is None:
            self.malformedHeader(reason)
        else:
            receiver.framingFailed(f"malformed header: {reason}")

    def _endOfInput(self) -> None:
        receiver = self.receiver
        if receiver is None:
            self.inputEnded()
        else:
            receiver.inputEnded()

    def messageReceived(self, body: bytes) -> None:
        """One complete message body arrived."""
        raise NotImplementedError

    def messageLengthExceeded(self, head: bytes) -> None:
        """
        A body longer than ``MAX_LENGTH`` was skipped; ``head`` is its first bytes.

        The stream goes on with the next message.
        """
        self._log.warn(
            "discarded an incoming message longer than {limit} bytes (starts {head!r})",
            limit=self.MAX_LENGTH,
            head=head[:80],
        )

    def malformedHeader(self, reason: str) -> None:
        """
        A header block does not frame a message: nothing after it can be read.

        By default: log ``reason`` and close the connection.
        """
        self._log.error("malformed message header: {reason}; closing", reason=reason)
        if self.transport is not None:
            self.transport.loseConnection()

    @property
    def pendingBytes(self) -> int:
        """How many received bytes are buffered (a partial message, or messages held)."""
        return len(self._clBuffer)

    # -- flow control -----------------------------------------------------------------

    def pauseProducing(self) -> None:
        """Hold complete messages in the buffer and pause the transport."""
        self.paused = True
        if self.transport is not None:
            self.transport.pauseProducing()  # type: ignore[attr-defined]

    def resumeProducing(self) -> None:
        """Deliver the messages held by a pause and resume the transport."""
        self.paused = False
        if self.transport is not None and not self._inputEnded:
            self.transport.resumeProducing()  # type: ignore[attr-defined]
        self.dataReceived(b"")

    def stopProducing(self) -> None:
        """Nothing to do: ``connectionLost`` follows."""

    # -- writing -----------------------------------------------------------------

    def sendMessage(self, data: bytes, /) -> None:
        """Write ``data`` with its ``Content-Length`` header (:class:`IMessageSender`)."""
        tracer = self.tracer
        if tracer is not None:
            tracer.sent(data)
        assert self.transport is not None
        self.transport.writeSequence([b"Content-Length: %d\r\n\r\n" % len(data), data])

    # -- end of input --------------------------------------------------------------

    def _dropPartial(self) -> None:
        """Drop a message cut short by the end of the input (complete ones were delivered)."""
        partial = self._bodyLength is not None or self._skip or self._clBuffer
        if partial and not self._broken:
            self._log.warn(
                "the input ended inside a message; {n} buffered bytes dropped",
                n=len(self._clBuffer),
            )
        self._clBuffer.clear()
        self._bodyLength = None
        self._skip = 0
        self._scanned = 0

    def readConnectionLost(self) -> None:
        """The peer closed our input: ``inputEnded`` (after held messages when paused)."""
        if self._inputEnded:
            return
        self._inputEnded = True
        if self.paused:
            self._endWhenResumed = True
            return
        self._dropPartial()
        self._endOfInput()

    def writeConnectionLost(self) -> None:
        """The peer will read nothing more; nothing to do by default."""

    def inputEnded(self) -> None:
        """
        No more input will come: by default, close once queued output is written.  Not
        called when a ``receiver`` is set (its ``inputEnded`` is).
        """
        if self.transport is not None:
            self.transport.loseConnection()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        """The connection is gone: a partial message is dropped."""
        if not self._inputEnded:
            self._inputEnded = True
            self._dropPartial()
