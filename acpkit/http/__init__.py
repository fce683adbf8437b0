"""
HTTP clients for the Streamable HTTP transports (MCP's and ACP's): what they share, and
HTTP/2.

====================================  ===============================================
module                                its job
====================================  ===============================================
:mod:`acpkit.http.transport`          :class:`HTTPTransportBase`: the HTTP side of a
                                      Streamable HTTP client transport (requests over
                                      treq and one pool, bodies, error statuses,
                                      timers, close)
:mod:`acpkit.http.http2`              :class:`HTTP2Agent`: an HTTP/2 client for
                                      Twisted and treq on ``h2`` (ALPN, h2c, HTTP/1.1
                                      fallback)
:mod:`acpkit.http.responses`          reading response bodies, bounded; what a failed
                                      request says
:mod:`acpkit.http.sse`                server-sent events, parsed and written
:mod:`acpkit.http.tls`                :class:`ClientTLS`: what a client trusts, and
                                      its own certificate
:mod:`acpkit.http.tls_errors`         OpenSSL's errors in words a user acts on
====================================  ===============================================

The names below are importable from here; each loads its module on first use, so that
importing one module (``acpkit.http.tls`` for a configuration) does not load treq, h2 and
``twisted.web``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from acpkit.http.http2 import HTTP2Agent, HTTP2Mode
    from acpkit.http.sse import SSEParser
    from acpkit.http.tls import ClientTLS
    from acpkit.http.transport import HTTPTransportBase

__all__ = ["ClientTLS", "HTTP2Agent", "HTTP2Mode", "HTTPTransportBase", "SSEParser"]

_HOMES = {
    "ClientTLS": "acpkit.http.tls",
    "HTTP2Agent": "acpkit.http.http2",
    "HTTP2Mode": "acpkit.http.http2",
    "HTTPTransportBase": "acpkit.http.transport",
    "SSEParser": "acpkit.http.sse",
}


def __getattr__(name: str) -> Any:
    """The public names, each imported from its module on first use."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
