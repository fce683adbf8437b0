"""
Newline-delimited framing for ACP: one JSON-RPC message per line.

:class:`NDJSONProtocol` is a :class:`twisted.protocols.basic.LineReceiver` with the
same names (``delimiter``, ``MAX_LENGTH``, ``lineReceived``, ``lineLengthExceeded``,
``sendLine``) and a ``dataReceived`` that is linear in its input: bytes are appended
to one ``bytearray`` and only the new bytes are searched for the delimiter.  Stock
``LineReceiver`` re-copies and re-scans its whole buffer on every read, which makes a
10 MB line (a base64 image) cost seconds.

Behaviour, in one table:

======================================  ==========================================
input                                   what happens
======================================  ==========================================
``b"...\\n"``                            ``lineReceived(b"...")``
``b"...\\r\\n"``                          one trailing ``\\r`` is stripped
U+2028 / U+2029 inside a line           part of the line (only ``\\n`` splits)
a multi-byte character split by reads   delivered whole: lines stay bytes until
                                        complete, decoding is the caller's job on
                                        whole lines
a line longer than ``MAX_LENGTH``       never buffered past the limit: discarded up
                                        to its newline, ``lineLengthExceeded`` is
                                        called once with its first bytes (at most
                                        ``OVERSIZED_HEAD``, as soon as the limit is
                                        passed), and the lines after it are
                                        delivered as usual
the peer closes our input (half-close)  a last line without newline is delivered,
                                        then ``inputEnded()`` (default: close once
                                        queued output is written)
======================================  ==========================================

Two ways to use a framing
=========================

- **Subclass it** (Twisted's ``LineReceiver`` style): implement ``lineReceived`` and
  connect the subclass to a transport.  The hooks above are called on ``self``.
- **Hold it** (the engine's way, :class:`acpkit.jsonrpc.JSONRPCEngine`): give it a
  ``receiver`` (:class:`IFramedMessageReceiver`) and connect it to the transport the
  holder is connected to; the holder feeds it the bytes it reads (``dataReceived``) and
  the end of input (``readConnectionLost``, ``connectionLost``).  Every complete
  message then goes to ``receiver.messageReceived``, the head of an oversized one to
  ``receiver.messageLengthExceeded`` and the end of input to ``receiver.inputEnded``;
  the framing's own hooks are not called.  The holder writes with ``sendMessage``.
  That is :class:`IFraming`: :class:`NDJSONProtocol` and
  :class:`acpkit.framing.ContentLengthProtocol` provide it, and so can a
  framing that reads no byte stream at all (see :class:`IFraming`).
"""

from __future__ import annotations

from twisted.internet.interfaces import IHalfCloseableProtocol
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.protocols.basic import LineReceiver
from twisted.python.failure import Failure
from zope.interface import implementer

from acpkit.framing.interfaces import (
    DEFAULT_MAX_LENGTH,
    OVERSIZED_HEAD,
    IFramedMessageReceiver,
    IFraming,
    LineTracer,
)

__all__ = ["NDJSONProtocol"]


@implementer(IHalfCloseableProtocol, IFraming)
class NDJSONProtocol(LineReceiver):
    """
    Linear-time newline framing with half-close support.

    Subclasses implement :meth:`lineReceived` (bytes, without the delimiter and without
    one trailing ``\\r``) and may override :meth:`lineLengthExceeded` and
    :meth:`inputEnded`.  Or, held (:class:`IFraming`): given a ``receiver``, lines go to
    its ``messageReceived``, oversized heads to ``messageLengthExceeded`` and the end
    of input to ``inputEnded`` instead.
    """

    delimiter = b"\n"
    MAX_LENGTH = DEFAULT_MAX_LENGTH

    #: Records complete lines in both directions when set.
    tracer: LineTracer | None = None

    _log = Logger()

    def __init__(self, receiver: IFramedMessageReceiver | None = None) -> None:
        #: Where whole lines go when set (held framing); else to this object's hooks.
        self.receiver = receiver
        self._ndjsonBuffer = bytearray()
        # How many leading bytes of ``_buffer`` are known to hold no delimiter.
        self._scanned = 0
        # While discarding an oversized line: how many of its bytes were dropped so far.
        self._discarding: int | None = None
        self._inputEnded = False
        # The input ended while paused: call inputEnded on resume.
        self._endWhenResumed = False
        # True while ``dataReceived`` runs (a re-entrant call only appends).
        self._busyReceiving = False

    # -- reading -----------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        """
        Split ``data`` (appended to what is buffered) into lines.

        Each byte is searched for the delimiter once, so the cost of a line is
        proportional to its length whatever the read sizes.  While the protocol is
        paused, complete lines stay buffered and are delivered by :meth:`resumeProducing`.
        A call made from inside :meth:`lineReceived` (for example by ``resumeProducing``
        or by an in-memory peer answering synchronously) only appends: the outer call
        delivers the lines, in order.
        """
        if self._discarding is not None:
            end = data.find(b"\n")
            if end == -1:
                self._discarding += len(data)
                return
            self._discarding = None
            data = data[end + 1 :]
        buf = self._ndjsonBuffer
        buf += data
        if self._busyReceiving:
            return
        self._busyReceiving = True
        try:
            self._deliverLines()
        finally:
            self._busyReceiving = False
        if self._endWhenResumed and not self.paused:
            # The input ended while paused and the held lines are now delivered.
            self._endWhenResumed = False
            self._endOfInput()

    def _deliverLines(self) -> None:
        """Deliver every complete line in the buffer (stopping when paused or closing)."""
        buf = self._ndjsonBuffer
        start = 0
        search = self._scanned
        limit = self.MAX_LENGTH
        receiver = self.receiver
        deliver = self.lineReceived if receiver is None else receiver.messageReceived
        while not self.paused and self.line_mode:
            end = buf.find(b"\n", search)
            if end == -1:
                search = len(buf)
                break
            lineEnd = end - 1 if end > start and buf[end - 1] == 0x0D else end
            if lineEnd - start > limit:
                head = bytes(buf[start : min(lineEnd, start + OVERSIZED_HEAD)])
                start = search = end + 1
                self._tooLong(head)
            else:
                line = bytes(buf[start:lineEnd])
                start = search = end + 1
                tracer = self.tracer
                if tracer is not None:
                    tracer.received(line)
                deliver(line)
            if self.transport is not None and getattr(self.transport, "disconnecting", False):
                # Mirror LineReceiver: deliver nothing more once we are closing.
                break
        if start:
            del buf[:start]
        self._scanned = max(search - start, 0)
        if not self.line_mode:
            rest = bytes(buf)
            buf.clear()
            self._scanned = 0
            if rest:
                self.rawDataReceived(rest)
            return
        if self._scanned > limit + 1:
            # The current line (no delimiter in it yet) is already too long: stop
            # buffering it and drop the rest of it as it arrives.
            head = bytes(buf[:OVERSIZED_HEAD])
            if len(buf) <= OVERSIZED_HEAD and head.endswith(b"\r"):
                head = head[:-1]  # may be the first half of a CRLF
            self._discarding = len(buf)
            buf.clear()
            self._scanned = 0
            self._tooLong(head)

    def _tooLong(self, head: bytes) -> None:
        receiver = self.receiver
        if receiver is None:
            self.lineLengthExceeded(head)
        else:
            receiver.messageLengthExceeded(head)

    def _endOfInput(self) -> None:
        receiver = self.receiver
        if receiver is None:
            self.inputEnded()
        else:
            receiver.inputEnded()

    def lineReceived(self, line: bytes) -> None:
        """One complete line arrived (bytes, delimiter and one trailing ``\\r`` removed)."""
        raise NotImplementedError

    def lineLengthExceeded(self, line: bytes) -> None:
        """
        A line longer than ``MAX_LENGTH`` was discarded; ``line`` is its first bytes.

        Unlike ``LineReceiver`` this does not drop the connection: the stream goes on
        with the next line.  Subclasses report the problem to the peer.
        """
        self._log.warn(
            "discarded an incoming line longer than {limit} bytes (starts {head!r})",
            limit=self.MAX_LENGTH,
            head=line[:80],
        )

    @property
    def pendingBytes(self) -> int:
        """How many received bytes are buffered (an incomplete line, or lines held by a pause)."""
        return len(self._ndjsonBuffer)

    def clearLineBuffer(self) -> bytes:
        """Clear and return what is buffered (lines not delivered yet included)."""
        rest = bytes(self._ndjsonBuffer)
        self._ndjsonBuffer.clear()
        self._scanned = 0
        return rest

    def resumeProducing(self) -> None:
        """
        Deliver the lines that arrived while paused and resume the transport.  If the
        input ended while paused, ``inputEnded`` is called once those lines are delivered
        (by ``dataReceived``, so a subclass's own ``resumeProducing`` that calls
        ``dataReceived(b"")`` gets the same behaviour).
        """
        self.paused = False
        if self.transport is not None and not self._inputEnded:
            self.transport.resumeProducing()  # type: ignore[attr-defined]
        self.dataReceived(b"")

    # -- writing -----------------------------------------------------------------

    def sendLine(self, line: bytes) -> None:
        """Write ``line`` followed by the delimiter.  ``line`` must not contain ``\\n``."""
        self.sendMessage(line)

    def sendMessage(self, data: bytes, /) -> None:
        """
        :class:`IMessageSender`: write ``data`` followed by the delimiter, as one line
        (``data`` must not contain ``\\n``; the engine's encoder never writes one).
        """
        tracer = self.tracer
        if tracer is not None:
            tracer.sent(data)
        assert self.transport is not None
        self.transport.writeSequence([data, self.delimiter])

    # -- end of input --------------------------------------------------------------

    def _flushLastLine(self) -> None:
        """Deliver a final line that ended without a newline."""
        if self._inputEnded:
            return
        self._inputEnded = True
        if self._discarding is not None:
            self._discarding = None
            return
        if self._ndjsonBuffer and self.line_mode and not self._ndjsonBuffer.endswith(b"\n"):
            self.dataReceived(b"\n")

    def readConnectionLost(self) -> None:
        """
        The peer closed our input: deliver a last unterminated line, then ``inputEnded``
        (once; while paused, both wait for :meth:`resumeProducing`).
        """
        if self._inputEnded:
            return
        self._flushLastLine()
        if self.paused:
            self._endWhenResumed = True
            return
        self._endOfInput()

    def writeConnectionLost(self) -> None:
        """The peer will read nothing more; nothing to do by default."""

    def inputEnded(self) -> None:
        """
        No more input will come.  By default, close once queued output is written
        (``loseConnection`` flushes the transport's write buffer first).  Not called
        when a ``receiver`` is set (its ``inputEnded`` is).
        """
        if self.transport is not None:
            self.transport.loseConnection()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        """The connection is gone: a last unterminated line is still delivered."""
        self._flushLastLine()
