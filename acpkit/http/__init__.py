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

The names below are importable from here.
"""

from __future__ import annotations

from acpkit.http.http2 import HTTP2Agent, HTTP2Mode
from acpkit.http.sse import SSEParser
from acpkit.http.tls import ClientTLS
from acpkit.http.transport import HTTPTransportBase

__all__ = ["ClientTLS", "HTTP2Agent", "HTTP2Mode", "HTTPTransportBase", "SSEParser"]
