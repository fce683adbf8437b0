"""The traffic the conformance checks' tests feed an observer: JSON lines, updates, and
an observer already past initialize and session/new."""

from __future__ import annotations

import json
from typing import Any

from acpkit.conformance.observer import Observer

__all__ = ["json_line", "observer_with_session", "update"]


def json_line(message: dict[str, Any]) -> bytes:
    """``message`` as the bytes of one JSON line (without its newline)."""
    return json.dumps(message).encode("utf-8")


def update(body: dict[str, Any], session: str = "s") -> bytes:
    """A session/update notification of ``session`` carrying ``body``, as a line."""
    return json_line(
        {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": session, "update": body},
        }
    )


def observer_with_session(capabilities: dict[str, Any] | None = None, **result: Any) -> Observer:
    """An observer after initialize (with ``capabilities``) and session/new of ``s`` in /w."""
    observer = Observer()
    params = {"protocolVersion": 1, "clientCapabilities": capabilities or {}}
    observer.sent({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})
    answer = {"protocolVersion": 1, "agentCapabilities": {}, **result}
    observer.received(json_line({"jsonrpc": "2.0", "id": 0, "result": answer}))
    observer.sent(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "session/new",
            "params": {"cwd": "/w", "mcpServers": []},
        }
    )
    observer.received(json_line({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s"}}))
    return observer
