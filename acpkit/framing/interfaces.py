"""
What every framing shares: the interfaces between a framing and the engine that holds it,
and the size limits.

A framing turns what a transport reads into whole messages and writes each message it
is given.  It is used in one of two ways:

- **subclassed** (Twisted's ``LineReceiver`` style): the subclass implements the hooks
  (``lineReceived``...) and is connected to a transport itself;
- **held** (the engine's way, :class:`acpkit.jsonrpc.JSONRPCEngine`): given a
  ``receiver`` (:class:`IFramedMessageReceiver`), it delivers every complete message to
  ``receiver.messageReceived``, the head of an oversized one to
  ``receiver.messageLengthExceeded`` and the end of input to ``receiver.inputEnded``, and
  the holder writes with ``sendMessage``.  That is :class:`IFraming`.
"""

from __future__ import annotations

from typing import Protocol as TypingProtocol

from twisted.internet.interfaces import ITransport
from twisted.python.failure import Failure
from zope.interface import Attribute, Interface

__all__ = [
    "DEFAULT_MAX_LENGTH",
    "OVERSIZED_HEAD",
    "IFramedMessageReceiver",
    "IFraming",
    "IMessageSender",
    "ITraced",
    "LineTracer",
]

#: Default largest accepted line, in raw bytes before decoding (64 MiB: room for images).
DEFAULT_MAX_LENGTH = 64 * 1024 * 1024

#: How many leading bytes of an oversized line are kept for diagnostics.
OVERSIZED_HEAD = 4096


class LineTracer(TypingProtocol):
    """Something that records every complete line in both directions (see ``acpkit.trace``)."""

    def received(self, line: bytes) -> None:
        """A complete inbound line (without its delimiter) was read."""

    def sent(self, line: bytes) -> None:
        """A complete outbound line (without its delimiter) is being written."""


class ITraced(Interface):
    """
    Something whose complete messages, both ways, are recorded by ``tracer`` when it is
    set (``acpkit.io`` gives one the ``ACPKIT_TRACE`` tracer): the framings, and
    the JSON-RPC protocols, which hand it to their framing.
    """

    tracer = Attribute("A LineTracer recording every complete message, or None.")


class IMessageSender(Interface):
    """
    What a message engine needs from a framing to write: one call per message.

    Provided by :class:`NDJSONProtocol` (a line) and
    :class:`acpkit.framing.ContentLengthProtocol` (a header block and a body),
    and by the JSON-RPC protocols, which write through their framing.
    """

    MAX_LENGTH = Attribute("The largest message, in bytes, this framing reads (int).")

    def sendMessage(data: bytes) -> None:
        """Write ``data`` as one framed message."""


class IFramedMessageReceiver(Interface):
    """
    What a held framing (:class:`IFraming`) delivers, whatever its wire format.  The
    JSON-RPC engine (:class:`acpkit.jsonrpc.JSONRPCEngine`) provides it.
    """

    def messageReceived(data: bytes) -> None:
        """One complete message, bytes without framing."""

    def messageLengthExceeded(head: bytes) -> None:
        """A message longer than ``MAX_LENGTH`` was skipped; ``head`` is its first bytes."""

    def inputEnded() -> None:
        """No more input will come (after every complete message was delivered)."""

    def framingFailed(reason: str) -> None:
        """
        The input cannot be framed any more (``Content-Length``: a malformed header
        block, after which no message start can be found); nothing after it is
        delivered.  ``reason`` says why, for the peer (the engine answers -32700 with
        it, then closes).
        """


class IFraming(IMessageSender, ITraced):
    """
    A framing an engine holds (composition, not inheritance): it turns what the
    transport reads into whole messages for its ``receiver`` and writes each message
    the engine gives it.

    The holder (:class:`acpkit.jsonrpc.JSONRPCEngine`) sets ``receiver`` to itself,
    connects the framing to its own transport (``makeConnection``), feeds it each read
    (``dataReceived``) and the end of input (``readConnectionLost``, ``connectionLost``),
    and writes with ``sendMessage``.  The framing calls ``receiver.messageReceived``,
    ``messageLengthExceeded``, ``inputEnded`` and (when the stream breaks)
    ``framingFailed``; while ``paused`` it holds complete messages.

    A framing with no byte stream, such as MCP's Streamable HTTP transport (one POST per
    message, answers as a JSON body or as server-sent events), provides it too: its
    ``sendMessage`` POSTs the message; each message read from a response body or an
    event stream goes to ``receiver.messageReceived`` (one longer than ``MAX_LENGTH`` to
    ``messageLengthExceeded`` with its first bytes), the end of the session to
    ``receiver.inputEnded``; its ``dataReceived`` is never called.  The engine then runs
    on it unchanged: ``JSONRPCEngine(registry, framing=..., cancellation=MCP_CANCELLATION)``,
    connected with ``makeConnection`` to a transport that stands for the HTTP session
    (``loseConnection`` ends the session, then calls the engine's ``connectionLost``).
    """

    receiver = Attribute("The IFramedMessageReceiver messages go to (set by the holder), or None.")
    paused = Attribute("True while complete messages are held undelivered (bool).")

    def makeConnection(transport: ITransport) -> None:
        """Write to ``transport`` from now on."""

    def dataReceived(data: bytes) -> None:
        """Bytes read by the holder's transport."""

    def readConnectionLost() -> None:
        """The peer closed our input: deliver what is complete, then ``inputEnded``."""

    def connectionLost(reason: Failure) -> None:
        """The connection is gone."""
