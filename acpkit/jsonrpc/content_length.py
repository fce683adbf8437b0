"""
JSON-RPC 2.0 over ``Content-Length`` framing (the LSP base protocol).

:class:`ContentLengthJSONRPCProtocol` is the same engine as
:class:`acpkit.jsonrpc.JSONRPCProtocol` (ordering, bounded concurrency, cancellation,
back-pressure, error answers) holding a :class:`acpkit.framing.ContentLengthProtocol`
instead of a newline framing, cancelling with LSP's ``$/cancelRequest`` by default
(:data:`acpkit.jsonrpc.cancel.LSP_CANCELLATION`; pass ``cancellation=`` for another dialect).

A malformed header block cannot be resynchronised: the framing reports it to the engine
(``framingFailed``), which answers -32700 with id ``null`` (``malformed header: ...``)
and closes the connection once that is written.
"""

from __future__ import annotations

from acpkit.framing import ContentLengthProtocol
from acpkit.jsonrpc.cancel import LSP_CANCELLATION
from acpkit.jsonrpc.engine import JSONRPCEngine

__all__ = ["ContentLengthJSONRPCProtocol"]


class ContentLengthJSONRPCProtocol(JSONRPCEngine):
    """
    The JSON-RPC engine holding a ``Content-Length`` framing (in :attr:`framing`), LSP
    cancellation by default; the constructor arguments are :class:`JSONRPCEngine`'s.
    """

    cancellation = LSP_CANCELLATION

    def make_framing(self) -> ContentLengthProtocol:
        """A new :class:`~acpkit.framing.ContentLengthProtocol`."""
        return ContentLengthProtocol()
