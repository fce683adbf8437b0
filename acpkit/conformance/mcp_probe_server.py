"""
A minimal MCP server over stdio (standard library only) that the tester hands an agent in
``session/new``'s ``mcpServers``, to see whether the agent connects to it (MCP-002).

``python -m acpkit.conformance.mcp_probe_server MARKER`` (or the file run directly) answers
``initialize``, ``tools/list`` (one tool, ``acpkit_conformance_echo``), ``tools/call`` and
``ping``, ignores notifications, and appends one line per event to the file ``MARKER``:
``started``, then the method of each message it receives. It exits at the end of its input,
or after ten idle minutes, so that it never outlives an agent that forgets it.
"""

from __future__ import annotations

import json
import os
import select
import sys
from typing import Any

IDLE_LIMIT = 600.0
TOOL = {
    "name": "acpkit_conformance_echo",
    "description": "Echo the given text (acpkit-conformance probe server).",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
}


def _answer(request_id: Any, result: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode() + b"\n"


def _error(request_id: Any, code: int, message: str) -> bytes:
    body = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    return json.dumps(body).encode() + b"\n"


def handle(message: Any) -> bytes | None:
    """The answer to one message (``None`` for a notification or junk)."""
    if not isinstance(message, dict) or "id" not in message:
        return None
    method = message.get("method")
    request_id = message["id"]
    given = message.get("params")
    params: dict[str, Any] = given if isinstance(given, dict) else {}
    if method == "initialize":
        version = params.get("protocolVersion") or "2025-06-18"
        return _answer(
            request_id,
            {
                "protocolVersion": version,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "acpkit-conformance-probe", "version": "1"},
            },
        )
    if method == "tools/list":
        return _answer(request_id, {"tools": [TOOL]})
    if method == "tools/call":
        arguments = params.get("arguments")
        text = str(arguments.get("text", "")) if isinstance(arguments, dict) else ""
        return _answer(request_id, {"content": [{"type": "text", "text": text}]})
    if method == "ping":
        return _answer(request_id, {})
    return _error(request_id, -32601, f"Method not found: {method}")


def main(argv: list[str]) -> int:
    """Serve on stdin / stdout, recording events in the marker file ``argv[1]``."""
    marker = argv[1] if len(argv) > 1 else None

    def record(event: str) -> None:
        if marker is not None:
            with open(marker, "a", encoding="utf-8") as f:
                f.write(event + "\n")

    record("started")
    fd = sys.stdin.fileno()
    out = sys.stdout.buffer
    buffer = b""
    while True:
        ready, _, _ = select.select([fd], [], [], IDLE_LIMIT)
        if not ready:
            return 0
        chunk = os.read(fd, 65536)
        if not chunk:
            return 0
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            try:
                message = json.loads(line)
            except (ValueError, RecursionError):  # standard library only: deep text too
                continue
            if isinstance(message, dict) and isinstance(message.get("method"), str):
                record(message["method"])
            answer = handle(message)
            if answer is not None:
                out.write(answer)
                out.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
