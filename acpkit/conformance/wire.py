"""
The tester's own raw remote wire: blocking HTTP/1.1 requests, an SSE reader and a minimal
RFC 6455 WebSocket client, with a per-connection cookie jar.

The conformance tester judges what a remote agent puts on the wire (status codes, headers,
one message per SSE event or text frame), so it does not go through acpkit's own remote
client (`acpkit.remote.connect.connect_remote`), which would hide exactly that. Only the
standard library is used: the tester runs wherever acpkit's core runs.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import os
import socket
import ssl
import struct
import threading
import urllib.parse
from collections.abc import Mapping, Sequence
from http.cookies import SimpleCookie

import attrs

from acpkit.conformance.tls import TLSSettings, failure

__all__ = [
    "CookieJar",
    "HTTPAnswer",
    "RemoteURL",
    "WebSocket",
    "WebSocketError",
    "http_request",
    "open_stream",
]

#: The largest SSE event or WebSocket message the tester accepts (bytes).
MAX_MESSAGE = 64 << 20
_WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


@attrs.frozen
class RemoteURL:
    """A parsed ``ws://``, ``wss://``, ``http://`` or ``https://`` agent URL."""

    scheme: str
    host: str
    port: int
    path: str

    @classmethod
    def parse(cls, url: str) -> RemoteURL:
        """Parse ``url``; raises `ValueError` for another scheme or a missing host."""
        parts = urllib.parse.urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("ws", "wss", "http", "https"):
            raise ValueError(f"not a ws://, wss://, http:// or https:// URL: {url!r}")
        if not parts.hostname:
            raise ValueError(f"no host in {url!r}")
        secure = scheme in ("wss", "https")
        port = parts.port or (443 if secure else 80)
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        return cls(scheme, parts.hostname, port, path)

    @property
    def secure(self) -> bool:
        """TLS (``https`` / ``wss``)."""
        return self.scheme in ("https", "wss")

    @property
    def websocket(self) -> bool:
        """A WebSocket URL (``ws`` / ``wss``)."""
        return self.scheme in ("ws", "wss")

    @property
    def host_header(self) -> str:
        """The ``Host`` header value."""
        default = 443 if self.secure else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"

    def display(self) -> str:
        """The URL without user info or query (where a token could hide): safe for a report."""
        scheme = {"ws": "ws", "wss": "wss", "http": "http", "https": "https"}[self.scheme]
        return f"{scheme}://{self.host_header}{self.path.split('?', 1)[0]}"


class CookieJar:
    """The cookies a server set during one connection, sent back on every later request."""

    def __init__(self) -> None:
        self.cookies: dict[str, str] = {}

    def store(self, set_cookie_values: Sequence[str]) -> None:
        """Keep the name=value of every ``Set-Cookie`` header (a Max-Age 0 drops it)."""
        for value in set_cookie_values:
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(value)
            except Exception:
                continue
            for name, morsel in jar.items():
                if morsel["max-age"] in ("0", "-1"):
                    self.cookies.pop(name, None)
                else:
                    self.cookies[name] = morsel.value

    def header(self) -> dict[str, str]:
        """A ``Cookie`` header, or nothing."""
        if not self.cookies:
            return {}
        return {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}


@attrs.frozen
class HTTPAnswer:
    """One HTTP answer: status, headers (lower-case names, every value) and body."""

    status: int
    headers: Mapping[str, tuple[str, ...]]
    body: bytes
    version: str = "HTTP/1.1"

    def header(self, name: str) -> str | None:
        """The first value of header ``name``."""
        values = self.headers.get(name.lower())
        return values[0] if values else None


def _wrap(
    raw: socket.socket, url: RemoteURL, tls: TLSSettings, alpn: Sequence[str]
) -> ssl.SSLSocket:
    """``raw`` after the TLS handshake; raises `TLSFailure` (in words) when it fails."""
    try:
        return tls.context(alpn).wrap_socket(raw, server_hostname=url.host)
    except ssl.SSLError as e:
        raw.close()
        raise failure(e) from None


class _HTTPSConnection(http.client.HTTPConnection):
    """An HTTP/1.1 connection over TLS with the run's `TLSSettings`, its handshake errors
    `TLSFailure` in words."""

    default_port = http.client.HTTPS_PORT

    def __init__(self, url: RemoteURL, timeout: float, tls: TLSSettings) -> None:
        super().__init__(url.host, url.port, timeout=timeout)
        self._url = url
        self._tls = tls

    def connect(self) -> None:
        super().connect()
        assert self.sock is not None
        self.sock = _wrap(self.sock, self._url, self._tls, ("http/1.1",))


def negotiated_alpn(url: RemoteURL, timeout: float, *, tls: TLSSettings) -> str | None:
    """The ALPN protocol a TLS server picks when offered ``h2`` and ``http/1.1``."""
    raw = socket.create_connection((url.host, url.port), timeout=timeout)
    with _wrap(raw, url, tls, ("h2", "http/1.1")) as sock:
        return sock.selected_alpn_protocol()


def _connection(url: RemoteURL, timeout: float, tls: TLSSettings) -> http.client.HTTPConnection:
    if url.secure:
        return _HTTPSConnection(url, timeout, tls)
    return http.client.HTTPConnection(url.host, url.port, timeout=timeout)


def _headers_of(response: http.client.HTTPResponse) -> dict[str, tuple[str, ...]]:
    headers: dict[str, list[str]] = {}
    for name, value in response.getheaders():
        headers.setdefault(name.lower(), []).append(value)
    return {name: tuple(values) for name, values in headers.items()}


def http_request(
    url: RemoteURL,
    method: str,
    headers: Mapping[str, str],
    body: bytes | None = None,
    *,
    timeout: float,
    tls: TLSSettings,
    jar: CookieJar | None = None,
) -> HTTPAnswer:
    """
    One request on a fresh connection; cookies from and to ``jar``. Raises `OSError`
    (`TLSFailure` when the TLS handshake fails, or the server refuses it after).
    """
    connection = _connection(url, timeout, tls)
    try:
        sent = dict(headers)
        if jar is not None:
            sent.update(jar.header())
        connection.request(method, url.path, body=body, headers=sent)
        response = connection.getresponse()
        found = _headers_of(response)
        content_type = (found.get("content-type") or ("",))[0]
        # an event stream may never end: its status and headers are the answer
        streaming = content_type.split(";")[0].strip().lower() == "text/event-stream"
        data = b"" if streaming else response.read(MAX_MESSAGE)
        answer = HTTPAnswer(response.status, found, data)
    except http.client.HTTPException as e:
        raise OSError(f"bad HTTP answer: {e!r}") from None
    except ssl.SSLError as e:  # TLS 1.3: a refused client certificate is read here
        raise failure(e) from None
    finally:
        connection.close()
    if jar is not None:
        jar.store(answer.headers.get("set-cookie", ()))
    return answer


def open_stream(
    url: RemoteURL,
    headers: Mapping[str, str],
    *,
    timeout: float,
    tls: TLSSettings,
    jar: CookieJar | None = None,
) -> tuple[HTTPAnswer, http.client.HTTPResponse | None, http.client.HTTPConnection]:
    """
    ``GET`` the SSE stream: the answer's status and headers, and when it is a 200 the open
    response to read events from (its socket has no timeout any more). Raises `OSError`
    (`TLSFailure` for TLS).
    """
    connection = _connection(url, timeout, tls)
    sent = dict(headers)
    if jar is not None:
        sent.update(jar.header())
    try:
        connection.request("GET", url.path, headers=sent)
        response = connection.getresponse()
    except http.client.HTTPException as e:
        connection.close()
        raise OSError(f"bad HTTP answer: {e!r}") from None
    except ssl.SSLError as e:
        connection.close()
        raise failure(e) from None
    answer = HTTPAnswer(response.status, _headers_of(response), b"")
    if jar is not None:
        jar.store(answer.headers.get("set-cookie", ()))
    if response.status != 200:
        body = response.read(MAX_MESSAGE)
        connection.close()
        return attrs.evolve(answer, body=body), None, connection
    if connection.sock is not None:
        connection.sock.settimeout(None)
    return answer, response, connection


class WebSocketError(Exception):
    """The WebSocket handshake failed or the peer broke the framing."""


class WebSocket:
    """
    A minimal blocking WebSocket client (RFC 6455): the upgrade, masked frames out,
    fragmented messages in, ping answered, close. `recv` returns ``(opcode, payload)`` for
    text (1) and binary (2) messages, ``None`` once the connection is closed.
    """

    def __init__(self, sock: socket.socket, answer: HTTPAnswer, rest: bytes) -> None:
        self.sock = sock
        self.answer = answer
        self._buffer = bytearray(rest)
        self._lock = threading.Lock()
        self.closed = False

    @classmethod
    def connect(
        cls,
        url: RemoteURL,
        headers: Mapping[str, str],
        *,
        timeout: float,
        tls: TLSSettings,
        jar: CookieJar | None = None,
    ) -> WebSocket:
        """
        Open the upgrade; raises `WebSocketError` (with the answer) or `OSError`
        (`TLSFailure` for TLS).
        """
        raw = socket.create_connection((url.host, url.port), timeout=timeout)
        sock: socket.socket = raw
        if url.secure:
            sock = _wrap(raw, url, tls, ("http/1.1",))
        try:
            return cls._upgrade(sock, url, headers, jar)
        except ssl.SSLError as e:  # TLS 1.3: a refused client certificate is read here
            sock.close()
            raise failure(e) from None

    @classmethod
    def _upgrade(
        cls,
        sock: socket.socket,
        url: RemoteURL,
        headers: Mapping[str, str],
        jar: CookieJar | None,
    ) -> WebSocket:
        key = base64.b64encode(os.urandom(16)).decode("ascii")
        lines = [
            f"GET {url.path} HTTP/1.1",
            f"Host: {url.host_header}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
        ]
        sent = dict(headers)
        if jar is not None:
            sent.update(jar.header())
        lines += [f"{name}: {value}" for name, value in sent.items()]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        data = bytearray()
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                sock.close()
                raise WebSocketError("the server closed the connection during the upgrade")
            data += chunk
            if len(data) > 65536:
                sock.close()
                raise WebSocketError("the upgrade answer's headers exceed 64 KiB")
        head, _, rest = bytes(data).partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        parts = status_line.split(" ", 2)
        status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        found: dict[str, list[str]] = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            found.setdefault(name.strip().lower(), []).append(value.strip())
        answer = HTTPAnswer(status, {k: tuple(v) for k, v in found.items()}, b"")
        if jar is not None:
            jar.store(answer.headers.get("set-cookie", ()))
        if status != 101:
            sock.close()
            raise WebSocketError(f"the upgrade was answered {status}, not 101")
        expected = base64.b64encode(hashlib.sha1(key.encode() + _WS_GUID).digest()).decode()
        if answer.header("sec-websocket-accept") != expected:
            sock.close()
            raise WebSocketError("the upgrade answer's Sec-WebSocket-Accept is wrong")
        sock.settimeout(None)
        return cls(sock, answer, rest)

    def _frame(self, opcode: int, payload: bytes) -> bytes:
        head = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return head + mask + masked

    def send(self, payload: bytes, opcode: int = 1) -> None:
        """Send one message (text by default) in one frame. Raises `OSError` when closed."""
        frame = self._frame(opcode, payload)
        with self._lock:
            if self.closed:
                raise OSError("the WebSocket is closed")
            self.sock.sendall(frame)

    def _exactly(self, n: int) -> bytes:
        while len(self._buffer) < n:
            chunk = self.sock.recv(max(65536, n - len(self._buffer)))
            if not chunk:
                raise EOFError
            self._buffer += chunk
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    def recv(self) -> tuple[int, bytes] | None:
        """The next whole message, or ``None`` at the end. Raises `WebSocketError`."""
        message = bytearray()
        opcode = 0
        try:
            while True:
                b0, b1 = self._exactly(2)
                fin, code, n = b0 & 0x80, b0 & 0x0F, b1 & 0x7F
                if b1 & 0x80:
                    raise WebSocketError("the server masked a frame")
                if n == 126:
                    (n,) = struct.unpack("!H", self._exactly(2))
                elif n == 127:
                    (n,) = struct.unpack("!Q", self._exactly(8))
                if n + len(message) > MAX_MESSAGE:
                    raise WebSocketError(f"a message larger than {MAX_MESSAGE} bytes")
                payload = self._exactly(n)
                if code == 8:
                    self.close()
                    return None
                if code == 9:
                    self.send(payload, 10)
                    continue
                if code == 10:
                    continue
                if code in (1, 2):
                    opcode = code
                elif code != 0:
                    raise WebSocketError(f"unknown opcode {code}")
                message += payload
                if fin:
                    return opcode, bytes(message)
        except (EOFError, OSError):
            self.closed = True
            return None

    def close(self) -> None:
        """Send a close frame (once) and close the socket."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            try:
                self.sock.sendall(self._frame(8, struct.pack("!H", 1000)))
            except OSError:
                pass
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
