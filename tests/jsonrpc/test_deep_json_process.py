"""
Deep JSON against a real bob (``twistd -n acp-agent``), issue 22 item 3: on stdio, over
Streamable HTTP and over WebSocket (``--listen http:tcp:0``), a 999-deep array and a
request with params too deep are answered, the next ``initialize`` too, and bob keeps
running.  Raw sockets and pipes, every wait bounded by a deadline on a condition.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import attrs
import pytest

from tests.jsonrpc.test_deep_json import EXPLICIT_DEPTHS, nested

ROOT = Path(__file__).parent.parent.parent
TWISTD = ["-c", "from twisted.scripts.twistd import run; run()", "-n", "acp-agent"]
DEADLINE = 60.0

pytestmark = pytest.mark.process


def initialize(request_id: Any, meta: bytes | None = None) -> bytes:
    params = b'{"protocolVersion":1' + (b"" if meta is None else b',"_meta":{"p":' + meta + b"}")
    return b'{"jsonrpc":"2.0","id":%s,"method":"initialize","params":%s}}' % (
        json.dumps(request_id).encode(),
        params,
    )


# -- starting bob: the one place its command line lives ------------------------------------


def start_bob(tmp_path: Path, *args: str) -> subprocess.Popen[bytes]:
    """``twistd -n acp-agent`` with the echo engine and an empty config; stderr to a file
    (``bob.log`` in ``tmp_path``), stdin and stdout piped."""
    config = tmp_path / "agent.toml"
    config.write_text("", encoding="utf-8")
    log = open(tmp_path / "bob.log", "wb")  # (the child keeps its own descriptor)
    try:
        return subprocess.Popen(
            [sys.executable, *TWISTD, "--config", str(config), "--engine", "echo", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=ROOT,
        )
    finally:
        log.close()


@attrs.define
class Listening:
    """A bob serving remote ACP on loopback: its port and the headers a client sends."""

    bob: subprocess.Popen[bytes]
    port: int
    headers: dict[str, str]


TOKEN = "deep-json-token"


def start_listening_bob(tmp_path: Path) -> Listening:
    """
    bob on ``--listen http:tcp:0`` (Streamable HTTP and WebSocket at ``/acp``) with a
    bearer token from an owner-only ``--token-file``: where it listens (read from its
    log) and what a client must send.
    """
    token_file = tmp_path / "bob.token"
    token_file.write_text(TOKEN + "\n", encoding="utf-8")
    token_file.chmod(0o600)
    bob = start_bob(tmp_path, "--listen", "http:tcp:0", "--token-file", str(token_file))
    log = tmp_path / "bob.log"
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline and bob.poll() is None:
        found = re.search(r"listening on .*port=(\d+)", log.read_text(errors="replace"))
        if found:
            return Listening(bob, int(found[1]), {"Authorization": f"Bearer {TOKEN}"})
        time.sleep(0.05)
    stop(bob)
    raise AssertionError(f"bob did not say where it listens: {log.read_text()[-2000:]}")


def stop(bob: subprocess.Popen[bytes]) -> None:
    if bob.poll() is None:
        bob.terminate()
    try:
        bob.wait(DEADLINE)
    except subprocess.TimeoutExpired:
        bob.kill()
        bob.wait(DEADLINE)


# -- reading with a deadline -------------------------------------------------------------


class LineReader:
    """Whole lines from a pipe, waiting at most DEADLINE seconds for each."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self.fd = pipe.fileno()
        self.buffer = b""
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.fd, selectors.EVENT_READ)

    def line(self) -> bytes:
        deadline = time.monotonic() + DEADLINE
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            assert left > 0, f"no line within {DEADLINE} s (got {self.buffer[:200]!r})"
            if self.selector.select(left):
                chunk = os.read(self.fd, 65536)
                assert chunk, f"end of output (got {self.buffer[:200]!r})"
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line


def answer_of(message: dict[str, Any]) -> tuple[Any, int | str]:
    if "result" in message:
        return message["id"], "result"
    return message["id"], message["error"]["code"]


# -- stdio -------------------------------------------------------------------------------------


def test_bob_on_stdio_answers_deep_json_and_keeps_running(tmp_path: Path) -> None:
    """
    bob on stdio gets a 999-deep array then initialize: it answers both (-32700, then
    the result) and keeps running; then every depth of the issue, as a whole message
    and in initialize's params (-32602 with its id), each followed by an answered
    initialize; closing stdin ends it with status 0.
    """
    bob = start_bob(tmp_path)
    assert bob.stdin is not None and bob.stdout is not None
    try:
        out = LineReader(bob.stdout)
        bob.stdin.write(nested(999) + b"\n" + initialize(1) + b"\n")
        bob.stdin.flush()
        first, second = json.loads(out.line()), json.loads(out.line())
        assert answer_of(first) == (None, -32700)
        assert "nested deeper than 254 levels" in first["error"]["message"]
        assert answer_of(second) == (1, "result")
        assert bob.poll() is None
        for n, depth in enumerate(EXPLICIT_DEPTHS):
            bob.stdin.write(nested(depth, "mixed") + b"\n")
            bob.stdin.write(initialize(f"deep {n}", nested(depth, "object")) + b"\n")
            bob.stdin.write(initialize(n + 100) + b"\n")
            bob.stdin.flush()
            answers = [answer_of(json.loads(out.line())) for _ in range(3)]
            assert answers == [
                (None, -32700 if depth > 254 else -32600),
                (f"deep {n}", -32602 if depth + 3 > 254 else "result"),
                (n + 100, "result"),
            ]
            assert bob.poll() is None
        bob.stdin.close()
        assert bob.wait(DEADLINE) == 0
    finally:
        stop(bob)


# -- Streamable HTTP ---------------------------------------------------------------------------


def http(
    listening: Listening, body: bytes, cid: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One POST to /acp over HTTP/1.0: status, headers (lower-case names), body."""
    headers = {"Content-Type": "application/json", **listening.headers}
    if cid is not None:
        headers["Acp-Connection-Id"] = cid
    with socket.create_connection(("127.0.0.1", listening.port), timeout=DEADLINE) as sock:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        sock.sendall(
            f"POST /acp HTTP/1.0\r\nHost: 127.0.0.1:{listening.port}\r\n{head}"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    head_text, _, payload = raw.partition(b"\r\n\r\n")
    status_line, *lines = head_text.decode("latin-1").split("\r\n")
    found = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), found, payload


class EventStream:
    """The connection's SSE stream (a GET over HTTP/1.0), read event by event."""

    def __init__(self, listening: Listening, cid: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", listening.port), timeout=DEADLINE)
        head = "".join(f"{k}: {v}\r\n" for k, v in listening.headers.items())
        self.sock.sendall(
            f"GET /acp HTTP/1.0\r\nHost: 127.0.0.1:{listening.port}\r\n{head}"
            f"Accept: text/event-stream\r\nAcp-Connection-Id: {cid}\r\n\r\n".encode()
        )
        self.buffer = b""
        self.read_until(b"\r\n\r\n")

    def read_until(self, mark: bytes) -> bytes:
        while mark not in self.buffer:
            chunk = self.sock.recv(65536)  # (the socket's timeout is the deadline)
            assert chunk, "the event stream ended"
            self.buffer += chunk
        found, _, self.buffer = self.buffer.partition(mark)
        return found

    def next_message(self) -> Any:
        while True:
            block = self.read_until(b"\n\n")
            data = [line[6:] for line in block.split(b"\n") if line.startswith(b"data: ")]
            if data:
                return json.loads(b"\n".join(data))


def test_bob_over_http_answers_deep_json_and_keeps_running(tmp_path: Path) -> None:
    """
    bob with ``--listen http:tcp:0``: a 999-deep POST body is answered 400 with a
    -32700 JSON body (never an HTML 500); a request with params too deep gets 202 and
    its -32602 on the event stream; the next initialize is answered; bob keeps running.
    """
    listening = start_listening_bob(tmp_path)
    try:
        status, headers, body = http(listening, initialize(0))
        assert status == 200, body
        cid = headers["acp-connection-id"]
        stream = EventStream(listening, cid)
        for n, depth in enumerate(EXPLICIT_DEPTHS):
            status, headers, body = http(listening, nested(depth), cid)
            if depth > 254:
                assert (status, headers["content-type"]) == (400, "application/json")
                assert json.loads(body)["error"]["code"] == -32700
            else:
                assert status in (400, 501) and json.loads(body)["error"]["code"] == -32600
            status, _, _ = http(listening, initialize(f"deep {n}", nested(depth, "object")), cid)
            assert status == 202
            assert answer_of(stream.next_message()) == (
                f"deep {n}",
                -32602 if depth + 3 > 254 else "result",
            )
            status, _, _ = http(listening, initialize(n + 100), cid)
            assert status == 202
            assert answer_of(stream.next_message()) == (n + 100, "result")
            assert listening.bob.poll() is None
        stream.sock.close()
    finally:
        stop(listening.bob)


# -- WebSocket ---------------------------------------------------------------------------------


class WebSocket:
    """A minimal WebSocket client: text frames out (masked), frames in."""

    def __init__(self, listening: Listening) -> None:
        self.sock = socket.create_connection(("127.0.0.1", listening.port), timeout=DEADLINE)
        head = "".join(f"{k}: {v}\r\n" for k, v in listening.headers.items())
        self.sock.sendall(
            f"GET /acp HTTP/1.1\r\nHost: 127.0.0.1:{listening.port}\r\n{head}"
            "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n".encode()
        )
        self.buffer = b""
        while b"\r\n\r\n" not in self.buffer:
            self.read(len(self.buffer) + 1)
        head_bytes, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        assert head_bytes.startswith(b"HTTP/1.1 101 "), head_bytes

    def read(self, size: int) -> bytes:
        while len(self.buffer) < size:
            chunk = self.sock.recv(65536)  # (the socket's timeout is the deadline)
            assert chunk, "the socket closed"
            self.buffer += chunk
        return self.buffer[:size]

    def send(self, payload: bytes) -> None:
        n = len(payload)
        if n < 126:
            head = bytes([0x81, 0x80 | n])
        elif n < 65536:
            head = bytes([0x81, 0x80 | 126]) + n.to_bytes(2, "big")
        else:
            head = bytes([0x81, 0x80 | 127]) + n.to_bytes(8, "big")
        self.sock.sendall(head + b"\0\0\0\0" + payload)  # a zero mask: the payload as is

    def message(self) -> Any:
        """The next frame: a text frame's JSON (a close frame fails the test)."""
        first, second = self.read(2)
        n, start = second & 0x7F, 2
        if n == 126:
            n, start = int.from_bytes(self.read(4)[2:4], "big"), 4
        elif n == 127:
            n, start = int.from_bytes(self.read(10)[2:10], "big"), 10
        payload = self.read(start + n)[start:]
        self.buffer = self.buffer[start + n :]
        assert first & 0x0F == 1, f"not a text frame: {first:#x} {payload[:200]!r}"
        return json.loads(payload)


def test_bob_over_websocket_answers_deep_json_and_keeps_running(tmp_path: Path) -> None:
    """
    bob with ``--listen http:tcp:0``, a WebSocket at /acp: a 999-deep array gets a
    -32700 error frame, params too deep a -32602, each then an answered initialize; no
    close frame, the socket stays open, bob keeps running.
    """
    listening = start_listening_bob(tmp_path)
    try:
        ws = WebSocket(listening)
        ws.send(initialize(0))
        assert answer_of(ws.message()) == (0, "result")
        for n, depth in enumerate((999, *EXPLICIT_DEPTHS)):
            ws.send(nested(depth, "array"))
            assert answer_of(ws.message()) == (None, -32700 if depth > 254 else -32600)
            ws.send(initialize(f"deep {n}", nested(depth, "mixed")))
            assert answer_of(ws.message()) == (f"deep {n}", -32602 if depth + 3 > 254 else "result")
            ws.send(initialize(n + 100))
            assert answer_of(ws.message()) == (n + 100, "result")
            assert listening.bob.poll() is None
        ws.sock.close()
    finally:
        stop(listening.bob)
