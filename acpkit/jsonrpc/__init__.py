"""
JSON-RPC 2.0, untyped: whole messages in, requests, notifications and responses out,
over any framing.

======================================  ==============================================
module                                  its job
======================================  ==============================================
:mod:`acpkit.jsonrpc.engine`            :class:`JSONRPCEngine`, the Twisted protocol on the
                                        transport: holds a framing, answers errors, bounds
                                        sizes, writes, back-pressure, the end of input (its
                                        docstring is the layer's contract)
:mod:`acpkit.jsonrpc.protocol`          :class:`JSONRPCProtocol`: the engine as ACP uses it
                                        (NDJSON, ``$/cancel_request``)
:mod:`acpkit.jsonrpc.content_length`    :class:`ContentLengthJSONRPCProtocol`: the engine
                                        over ``Content-Length`` framing (LSP)
:mod:`acpkit.jsonrpc.registry`          :class:`MethodRegistry`: the methods one side handles
:mod:`acpkit.jsonrpc.receive`           the receive path: one message in, the answer, the
                                        handler or the pending request it calls for
:mod:`acpkit.jsonrpc.oversized`         what the head of an oversized message shows
:mod:`acpkit.jsonrpc.classify`          pure: bytes to a JSON value to one event (request,
                                        notification, response, invalid)
:mod:`acpkit.jsonrpc.dispatch`          inbound: wire order, handler slots, queue,
                                        cancellation, one answer per request
:mod:`acpkit.jsonrpc.handler_errors`    a handler's unexpected exception: its log line, its
                                        -32603 answer (``ACPKIT_DEBUG_ERRORS``)
:mod:`acpkit.jsonrpc.outgoing`          our pending requests: ids, timers, late answers
:mod:`acpkit.jsonrpc.cancel`            the dialects' cancel notifications (ACP, LSP, MCP)
:mod:`acpkit.jsonrpc.jsonbytes`         JSON text to builtins and back (orjson), nesting
                                        bounded
:mod:`acpkit.jsonrpc.asyncio_bridge`    what a handler returns, as a Deferred (or at once,
                                        for a coroutine that does not wait); ``async def``
                                        handlers as asyncio tasks on the asyncio reactor
:mod:`acpkit.jsonrpc.abc_answers`       ``isinstance`` against an ABC, from a per-type
                                        cache (once per message)
======================================  ==============================================

The names below are importable from here; they are loaded on first use, so that a
module that needs only :mod:`~acpkit.jsonrpc.jsonbytes` (the codec) does not load the
engine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from acpkit.jsonrpc.cancel import (
        ACP_CANCELLATION,
        LSP_CANCELLATION,
        MCP_CANCELLATION,
        ICancellationPolicy,
        NotificationCancellation,
    )
    from acpkit.jsonrpc.classify import RequestId, encode_message
    from acpkit.jsonrpc.content_length import ContentLengthJSONRPCProtocol
    from acpkit.jsonrpc.dispatch import CancelledResult, InboundRequest, RequestHandler
    from acpkit.jsonrpc.engine import DEFAULT_MAX_BUFFERED_OUTPUT, JSONRPCEngine
    from acpkit.jsonrpc.protocol import CANCEL_REQUEST, JSONRPCProtocol
    from acpkit.jsonrpc.receive import JUNK_LINE_KEPT
    from acpkit.jsonrpc.registry import MethodRegistry, NotificationHandler

#: Public name -> the module of this package that defines it.
_WHERE = {
    "ACP_CANCELLATION": "cancel",
    "LSP_CANCELLATION": "cancel",
    "MCP_CANCELLATION": "cancel",
    "ICancellationPolicy": "cancel",
    "NotificationCancellation": "cancel",
    "RequestId": "classify",
    "encode_message": "classify",
    "ContentLengthJSONRPCProtocol": "content_length",
    "CancelledResult": "dispatch",
    "InboundRequest": "dispatch",
    "RequestHandler": "dispatch",
    "DEFAULT_MAX_BUFFERED_OUTPUT": "engine",
    "JSONRPCEngine": "engine",
    "CANCEL_REQUEST": "protocol",
    "JSONRPCProtocol": "protocol",
    "JUNK_LINE_KEPT": "receive",
    "MethodRegistry": "registry",
    "NotificationHandler": "registry",
}

__all__ = [
    "ACP_CANCELLATION",
    "CANCEL_REQUEST",
    "DEFAULT_MAX_BUFFERED_OUTPUT",
    "JUNK_LINE_KEPT",
    "LSP_CANCELLATION",
    "MCP_CANCELLATION",
    "CancelledResult",
    "ContentLengthJSONRPCProtocol",
    "ICancellationPolicy",
    "InboundRequest",
    "JSONRPCEngine",
    "JSONRPCProtocol",
    "MethodRegistry",
    "NotificationCancellation",
    "NotificationHandler",
    "RequestHandler",
    "RequestId",
    "encode_message",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's attributes, the lazily imported public names included."""
    return sorted({*globals(), *__all__})
