"""
A framing for transports that carry whole messages: WebSocket text frames, server-sent
events, HTTP request and response bodies.

Such a transport has no byte stream to split: it hands the protocol one message per
``dataReceived`` call and takes one message per ``write`` call.
:class:`MessageFraming` is the :class:`~acpkit.framing.IFraming` an engine holds on such a
transport, so the JSON-RPC engine and everything above it (ordering, cancellation,
back-pressure, the typed connections, ``ACPKIT_TRACE``) run unchanged over it::

    protocol = JSONRPCProtocol(registry, framing=MessageFraming())
    protocol.makeConnection(message_transport)   # its write(data) sends one message
    protocol.dataReceived(b'{"jsonrpc":"2.0",...}')  # one whole message

=================================  ================================================
event                              what the framing does
=================================  ================================================
``dataReceived(message)``          one whole message: ``receiver.messageReceived``
                                   (a trailing ``\\n`` or ``\\r\\n`` is dropped)
a message longer than              ``receiver.messageLengthExceeded`` with its first
``MAX_LENGTH``                     ``OVERSIZED_HEAD`` bytes (the engine answers a
                                   request -32600 with its id)
``sendMessage(message)``           one ``transport.write(message)``, no delimiter
``readConnectionLost()``           ``receiver.inputEnded``
an empty message                   ignored (a keep-alive)
``tracer`` set                     sees each message both ways
=================================  ================================================
"""

from __future__ import annotations

from twisted.internet.interfaces import ITransport
from twisted.internet.protocol import connectionDone
from twisted.python.failure import Failure
from zope.interface import implementer

from acpkit.framing.interfaces import (
    DEFAULT_MAX_LENGTH,
    OVERSIZED_HEAD,
    IFramedMessageReceiver,
    IFraming,
    LineTracer,
)

__all__ = ["MessageFraming"]


@implementer(IFraming)
class MessageFraming:
    """One message per ``dataReceived`` and per ``sendMessage`` (see the module docstring)."""

    MAX_LENGTH = DEFAULT_MAX_LENGTH
    #: Records each message both ways when set.
    tracer: LineTracer | None = None
    #: Messages are delivered as they arrive; nothing is held.
    paused = False

    def __init__(self, receiver: IFramedMessageReceiver | None = None) -> None:
        self.receiver = receiver
        self.transport: ITransport | None = None
        self._ended = False

    def makeConnection(self, transport: ITransport) -> None:
        """Send messages with ``transport.write`` from now on."""
        self.transport = transport

    def dataReceived(self, data: bytes) -> None:
        """One whole message."""
        if self._ended:
            return
        if data.endswith(b"\n"):
            data = data[:-2] if data.endswith(b"\r\n") else data[:-1]
        if not data:
            return
        receiver = self.receiver
        if receiver is None:
            raise RuntimeError("MessageFraming has no receiver")
        if self.tracer is not None:
            self.tracer.received(data[: self.MAX_LENGTH])
        if len(data) > self.MAX_LENGTH:
            receiver.messageLengthExceeded(data[:OVERSIZED_HEAD])
        else:
            receiver.messageReceived(data)

    def sendMessage(self, data: bytes, /) -> None:
        """Write ``data`` as one message."""
        if self.transport is None:
            raise RuntimeError("MessageFraming is not connected")
        if self.tracer is not None:
            self.tracer.sent(data)
        self.transport.write(data)

    def readConnectionLost(self) -> None:
        """No more messages will come: tell the receiver once."""
        if not self._ended:
            self._ended = True
            if self.receiver is not None:
                self.receiver.inputEnded()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        """The transport is gone; later messages are ignored."""
        self._ended = True
