"""
Framing: bytes in, whole messages out, in linear time and bounded memory.

=====================================  ==================================================
module                                 what it frames
=====================================  ==================================================
:mod:`acpkit.framing.ndjson`           one message per line (ACP, MCP over stdio):
                                       :class:`NDJSONProtocol`
:mod:`acpkit.framing.content_length`   a ``Content-Length`` header block, then a body
                                       (the LSP base protocol): :class:`ContentLengthProtocol`
:mod:`acpkit.framing.messages`         nothing: the transport carries whole messages
                                       (WebSocket frames, SSE events, HTTP bodies):
                                       :class:`MessageFraming`
:mod:`acpkit.framing.interfaces`       what they share: :class:`IFraming` and the other
                                       interfaces between a framing and its engine, the
                                       size limits
=====================================  ==================================================

Each framing is a Twisted protocol of its own, used subclassed (its hooks, Twisted's
``LineReceiver`` style) or held by an engine (:class:`IFraming`).  The names of every
module are importable from here.
"""

from __future__ import annotations

from acpkit.framing.content_length import (
    DEFAULT_MAX_HEADER_LENGTH,
    ContentLengthProtocol,
    HeaderError,
    parse_headers,
)
from acpkit.framing.interfaces import (
    DEFAULT_MAX_LENGTH,
    OVERSIZED_HEAD,
    IFramedMessageReceiver,
    IFraming,
    IMessageSender,
    ITraced,
    LineTracer,
)
from acpkit.framing.messages import MessageFraming
from acpkit.framing.ndjson import NDJSONProtocol

__all__ = [
    "DEFAULT_MAX_HEADER_LENGTH",
    "DEFAULT_MAX_LENGTH",
    "OVERSIZED_HEAD",
    "ContentLengthProtocol",
    "HeaderError",
    "IFramedMessageReceiver",
    "IFraming",
    "IMessageSender",
    "ITraced",
    "LineTracer",
    "MessageFraming",
    "NDJSONProtocol",
    "parse_headers",
]
