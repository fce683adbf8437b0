"""
:class:`JSONRPCProtocol`: the JSON-RPC engine as ACP uses it, one message per line
(:class:`acpkit.framing.NDJSONProtocol`) and ``$/cancel_request``.
"""

from __future__ import annotations

from acpkit.framing import NDJSONProtocol
from acpkit.jsonrpc.cancel import ACP_CANCELLATION
from acpkit.jsonrpc.engine import JSONRPCEngine

__all__ = ["CANCEL_REQUEST", "JSONRPCProtocol"]

#: The ACP notification that cancels a request (:data:`acpkit.jsonrpc.ACP_CANCELLATION`).
CANCEL_REQUEST = ACP_CANCELLATION.method


class JSONRPCProtocol(JSONRPCEngine):
    """
    JSON-RPC 2.0 for ACP: the engine holding a newline-delimited framing (one message per
    line, :class:`acpkit.framing.NDJSONProtocol`, in :attr:`framing`), cancelling with
    ``$/cancel_request`` (:data:`acpkit.jsonrpc.cancel.ACP_CANCELLATION`).  Pass
    ``cancellation`` for another dialect over the same framing (MCP over stdio:
    ``MCP_CANCELLATION``).
    """

    cancellation = ACP_CANCELLATION

    def make_framing(self) -> NDJSONProtocol:
        """A new :class:`~acpkit.framing.NDJSONProtocol`."""
        return NDJSONProtocol()
