"""
Remote ACP: the Streamable HTTP and WebSocket transports of the RFD "Streamable HTTP &
WebSocket Transport", both sides, over the same JSON-RPC engine as stdio.

Names are imported lazily (``from acpkit.remote import serve_remote`` loads only the
server's modules): each transport's dependencies are only needed when it is used.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> the module that defines it (one line per name; each transport adds its own).
_EXPORTS = {
    "serve_remote": "acpkit.remote.server",
    "ACPResource": "acpkit.remote.server",
    "RemoteLimits": "acpkit.remote.server",
    "InsecureBindError": "acpkit.remote.security",
    "ClientAuthError": "acpkit.remote.security",
    "ClientTLS": "acpkit.remote.tls",
    "connect_websocket": "acpkit.remote.websocket",
    "websocket_resource": "acpkit.remote.websocket",
    "WebSocketConnectError": "acpkit.remote.websocket",
    "WebSocketClosed": "acpkit.remote.websocket",
    "connect_http": "acpkit.remote.http_client",
    "HTTPClientTransport": "acpkit.remote.http_client",
    "RemoteConnectionLost": "acpkit.remote.http_client",
    "connect_remote": "acpkit.remote.connect",
    "connect_resumable": "acpkit.remote.connect",
    "ResumableConnection": "acpkit.remote.reconnect",
    "RetryPolicy": "acpkit.remote.reconnect",
    "TurnInterrupted": "acpkit.remote.reconnect",
    "ReconnectFailed": "acpkit.remote.reconnect",
    "IReconnectObserver": "acpkit.remote.reconnect",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'acpkit.remote' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
