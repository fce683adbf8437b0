"""
JSON-RPC 2.0 over ``Content-Length`` framing (the LSP base protocol).

:class:`ContentLengthJSONRPCProtocol` is the same engine as
:class:`acpkit.jsonrpc.JSONRPCProtocol` (ordering, bounded concurrency, cancellation,
back-pressure, error answers) in front of :class:`acpkit.framing_headers.ContentLengthProtocol`
instead of newline framing, cancelling with LSP's ``$/cancelRequest`` by default
(:data:`acpkit.rpc_cancel.LSP_CANCELLATION`; pass ``cancellation=`` for another dialect).

A malformed header block cannot be resynchronised: it is answered -32700 with id
``null`` (``malformed header: ...``) and the connection is closed once that is written.
"""

from __future__ import annotations

from twisted.internet.interfaces import IPushProducer
from zope.interface import implementer

from acpkit.errors import ParseError
from acpkit.framing_headers import ContentLengthProtocol
from acpkit.jsonrpc import JSONRPCEngine
from acpkit.rpc_cancel import LSP_CANCELLATION

__all__ = ["ContentLengthJSONRPCProtocol"]


@implementer(IPushProducer)
class ContentLengthJSONRPCProtocol(JSONRPCEngine, ContentLengthProtocol):
    """The JSON-RPC engine over ``Content-Length`` framing, LSP cancellation by default."""

    cancellation = LSP_CANCELLATION

    def messageReceived(self, body: bytes) -> None:
        """Queue one message for in-order processing."""
        self._frame_received(body)

    def messageLengthExceeded(self, head: bytes) -> None:
        """Queue the head of an oversized message for in-order processing."""
        self._frame_too_large(head)

    sendMessage = ContentLengthProtocol.sendMessage

    def malformedHeader(self, reason: str) -> None:
        """Answer -32700 with id ``null``, then close (nothing after it can be framed)."""
        self._log.error(
            "{peer}: malformed header: {reason}; closing", peer=self.name, reason=reason
        )
        self._undecodable_dropped += 1
        self._send_error(None, ParseError(f"malformed header: {reason}"))
        self.close()
