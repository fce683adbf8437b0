"""
A deliberately plain Streamable HTTP client (``socket`` and ``http.client``, no reactor),
for the tests that attack a real bob: every header is the test's own choice (a wrong
``Host``, a Basic token, a token in the URL...), and a whole turn (``initialize``,
``session/new``, ``session/prompt`` read from the event stream) runs in any thread.
"""

from __future__ import annotations

import http.client
import json
import queue
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from typing import Any

import attrs

__all__ = ["Answer", "TurnResult", "initialize_body", "post", "raw_exchange", "run_turn"]


@attrs.frozen
class Answer:
    """An HTTP answer: status, headers (lower-case names), body."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@attrs.frozen
class TurnResult:
    """What a whole turn gave: the stop reason, the agent's text, the tools' outputs."""

    stop_reason: str
    text: str
    tool_output: str


def initialize_body(request_id: int = 0) -> dict[str, Any]:
    """An ``initialize`` request."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {"protocolVersion": 1, "clientCapabilities": {}},
    }


def post(
    port: int,
    message: Mapping[str, Any] | bytes,
    headers: Mapping[str, str] | None = None,
    *,
    host: str = "127.0.0.1",
    path: str = "/acp",
    method: str = "POST",
    timeout: float = 30,
    source: str | None = None,
    tls: ssl.SSLContext | None = None,
) -> Answer:
    """
    One request on a new connection (closed after the answer).  ``headers`` may name
    ``Host`` (sent instead of the real one); ``source``: the local address to connect
    from (another loopback address: another peer); ``tls``: over TLS (HTTP/1.1).
    """
    body = message if isinstance(message, bytes) else json.dumps(message).encode()
    given = dict(headers or {})
    source_address = (source, 0) if source else None
    conn: http.client.HTTPConnection
    if tls is None:
        conn = http.client.HTTPConnection(
            host, port, timeout=timeout, source_address=source_address
        )
    else:
        conn = http.client.HTTPSConnection(
            host, port, timeout=timeout, source_address=source_address, context=tls
        )
    try:
        skip_host = any(name.lower() == "host" for name in given)
        conn.putrequest(method, path, skip_host=skip_host, skip_accept_encoding=True)
        if method == "POST":
            given.setdefault("Content-Type", "application/json")
        for name, value in given.items():
            conn.putheader(name, value)
        if method == "POST":
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body if method == "POST" else None)
        response = conn.getresponse()
        data = response.read()
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, data)
    finally:
        conn.close()


def raw_exchange(port: int, data: bytes, *, timeout: float = 15) -> tuple[bytes, bool]:
    """
    Send ``data`` on a new connection and read until the server closes it or ``timeout``
    seconds pass; the bytes read and whether the server closed the connection.
    """
    deadline = time.monotonic() + timeout
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        received = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return received, False
            sock.settimeout(left)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                return received, False
            except ConnectionResetError:
                return received, True
            if not chunk:
                return received, True
            received += chunk


class _EventStream:
    """The connection's event stream, read by a thread into a queue of messages."""

    def __init__(self, port: int, headers: Mapping[str, str], connection_id: str) -> None:
        self.messages: queue.Queue[Any] = queue.Queue()
        self._conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self._conn.request(
            "GET",
            "/acp",
            headers={
                **headers,
                "Accept": "text/event-stream",
                "Acp-Connection-Id": connection_id,
            },
        )
        response = self._conn.getresponse()
        if response.status != 200:
            raise AssertionError(f"event stream: {response.status} {response.read()!r}")
        self._response = response
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        data: list[bytes] = []
        try:
            while True:
                line = self._response.readline()
                if not line:
                    break
                line = line.rstrip(b"\r\n")
                if line.startswith(b"data:"):
                    data.append(line[5:].removeprefix(b" "))
                elif not line and data:
                    self.messages.put(json.loads(b"\n".join(data)))
                    data = []
        except (OSError, ValueError, AttributeError, http.client.HTTPException):
            # AttributeError: http.client reading a response whose connection was closed.
            pass
        self.messages.put(None)

    def close(self) -> None:
        self._conn.close()


def run_turn(
    port: int,
    headers: Mapping[str, str],
    text: str,
    *,
    cwd: str,
    timeout: float = 60,
) -> TurnResult:
    """
    A whole turn against the agent at ``port``: ``initialize`` (200 and a connection
    id, or AssertionError), the event stream, ``session/new``, ``session/prompt`` with
    ``text``; permission requests are allowed.  Ends the connection (``DELETE``).
    """
    answer = post(port, initialize_body(), headers, timeout=timeout)
    if answer.status != 200:
        raise AssertionError(f"initialize: {answer.status} {answer.body!r}")
    connection_id = answer.headers["acp-connection-id"]
    with_id = {**headers, "Acp-Connection-Id": connection_id}
    stream = _EventStream(port, headers, connection_id)
    deadline = time.monotonic() + timeout

    def send(message: Mapping[str, Any], session: str | None = None) -> None:
        extra = {"Acp-Session-Id": session} if session else {}
        sent = post(port, message, {**with_id, **extra}, timeout=timeout)
        if sent.status != 202:
            raise AssertionError(f"{message.get('method')}: {sent.status} {sent.body!r}")

    def answer_to(request_id: int, seen: list[Any]) -> Any:
        while True:
            message = stream.messages.get(timeout=max(0.1, deadline - time.monotonic()))
            if message is None:
                raise AssertionError("the event stream ended before the answer")
            if message.get("id") == request_id and "method" not in message:
                if "error" in message:
                    raise AssertionError(f"error answer: {message['error']}")
                return message["result"]
            if message.get("method") == "session/request_permission":
                options = message["params"]["options"]
                allow = next(o for o in options if o["kind"].startswith("allow"))
                send(
                    {
                        "jsonrpc": "2.0",
                        "id": message["id"],
                        "result": {
                            "outcome": {"outcome": "selected", "optionId": allow["optionId"]}
                        },
                    }
                )
            seen.append(message)

    try:
        seen: list[Any] = []
        send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "session/new",
                "params": {"cwd": cwd, "mcpServers": []},
            }
        )
        session_id = answer_to(1, seen)["sessionId"]
        send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "session/prompt",
                "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]},
            },
            session_id,
        )
        result = answer_to(2, seen)
        post(port, b"", with_id, method="DELETE", timeout=timeout)
    finally:
        stream.close()
    texts: list[str] = []
    outputs: list[str] = []
    for message in seen:
        update = message.get("params", {}).get("update", {})
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk" and update["content"].get("type") == "text":
            texts.append(update["content"]["text"])
        if kind in ("tool_call", "tool_call_update"):
            for item in update.get("content") or []:
                content = item.get("content", {})
                if content.get("type") == "text":
                    outputs.append(content["text"])
            raw = update.get("rawOutput")
            if raw is not None:
                outputs.append(json.dumps(raw))
    return TurnResult(result["stopReason"], "".join(texts), "\n".join(outputs))
