"""
MCP Streamable HTTP client transport (acpkit.mcp.http): against a loopback twisted.web
server scripted per test for the edge cases, and against the real
``@modelcontextprotocol/server-everything`` in ``streamableHttp`` mode.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import reactor, task
from twisted.internet.address import IPv4Address
from twisted.internet.defer import CancelledError, Deferred, ensureDeferred, maybeDeferred
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.error import ConnectError, ConnectionDone
from twisted.internet.protocol import Protocol
from twisted.logger import ILogObserver, formatEvent, globalLogPublisher
from twisted.trial.unittest import TestCase
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site
from zope.interface import implementer

from acpkit.errors import ConnectionLost, MessageTooLarge, RPCError
from acpkit.http.sse import SSEEvent, SSEEventTooLarge, SSEParser
from acpkit.jsonrpc import JSONRPCProtocol, MethodRegistry
from acpkit.jsonrpc.cancel import MCP_CANCELLATION
from acpkit.mcp.client import (
    SUPPORTED_VERSIONS,
    McpClient,
    McpHandshakeError,
    McpHandshakeTimeout,
    McpServerGone,
)
from acpkit.mcp.http import (
    HTTP_TRANSPORT_ERROR,
    McpServerUnreachable,
    McpSessionExpired,
    StreamableHTTPTransport,
    connect_http,
)
from tests.helpers import free_port, wait_until
from tests.real_peers import MCP_EVERYTHING, require_peer

pytest.importorskip("treq")

SECRET = "Bearer s3cret-token-never-logged"
INIT_PARAMS = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "acpkit-test", "version": "0"},
}


# -- the SSE parser -------------------------------------------------------------------


def parse_all(chunks: list[bytes], limit: int = 1 << 20) -> tuple[list[SSEEvent], SSEParser]:
    parser = SSEParser(limit)
    events: list[SSEEvent] = []
    for chunk in chunks:
        events += parser.feed(chunk)
    return events, parser


def test_sse_fields() -> None:
    """Multi-line data joins with LF; comments, unknown fields and empty events are skipped;
    id, retry and event are read; CR, LF and CRLF all end lines."""
    stream = (
        b"\xef\xbb\xbf: keep-alive comment\n"
        b"id: 1\nretry: 250\ndata: \n\n"  # priming: empty data
        b"id: 2\nid: 1\n\n"  # no data field: no event, the id still counts
        b'data: {"a":\r\ndata:  1}\r\n\r\n'
        b"event: other\rdata\rfoo: bar\r\r"
        b"retry: soon\nid: x\x00y\ndata: z\n\n"
        b"data: never dispatched"
    )
    events, parser = parse_all([stream])
    assert events == [
        SSEEvent(b"", "message", "1"),
        SSEEvent(b'{"a":\n 1}', "message", "1"),
        SSEEvent(b"", "other", "1"),
        SSEEvent(b"z", "message", "1"),
    ]
    assert parser.retry == 250


@given(st.data())
def test_sse_chunking_does_not_matter(data: st.DataObject) -> None:
    """Whatever the read sizes (a CRLF split across reads included), the same events come."""
    stream = (
        b"id: 7\r\nretry: 10\r\ndata: first\r\ndata: second\r\n\r\n"
        b': c\r\ndata: {"x": "\xc3\xa9"}\r\n\r\nevent: e\ndata: third\n\n'
    )
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    assert parse_all(chunks)[0] == [
        SSEEvent(b"first\nsecond", "message", "7"),
        SSEEvent(b'{"x": "\xc3\xa9"}', "message", "7"),
        SSEEvent(b"third", "e", "7"),
    ]


_line_text = st.binary(max_size=20).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
_sse_events = st.lists(
    st.tuples(
        st.lists(_line_text, min_size=1, max_size=4),  # data lines
        st.none() | _line_text.filter(lambda b: b"\x00" not in b),  # id
        st.none() | st.text("abcxyz", min_size=1, max_size=5),  # event type
    ),
    max_size=6,
)


@given(_sse_events, st.sampled_from([b"\n", b"\r", b"\r\n"]), st.data())
def test_sse_round_trip(
    events: list[tuple[list[bytes], bytes | None, str | None]], newline: bytes, data: st.DataObject
) -> None:
    """Any events, written with any of the three line ends and cut into reads anywhere,
    parse back to the same data, ids and types."""
    stream = b""
    expected: list[SSEEvent] = []
    last_id: str | None = None
    for lines, event_id, event_type in events:
        if event_id is not None:
            stream += b"id: " + event_id + newline
            last_id = event_id.decode("utf-8", errors="replace")
        if event_type is not None:
            stream += b"event: " + event_type.encode() + newline
        stream += b"".join(b"data: " + line + newline for line in lines) + newline
        expected.append(SSEEvent(b"\n".join(lines), event_type or "message", last_id))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    assert parse_all(chunks)[0] == expected


def test_sse_bounded() -> None:
    """An event's data, or a line without end, longer than the limit raises at once."""
    with pytest.raises(SSEEventTooLarge):
        parse_all([b"data: " + b"x" * 60 + b"\n", b"data: " + b"y" * 60 + b"\n"], limit=100)
    with pytest.raises(SSEEventTooLarge):
        parse_all([b"data: " + b"x" * 101], limit=100)


# -- a scripted loopback server -----------------------------------------------------------


Handler = Callable[[Request, Any], None]


def json_answer(request: Request, message: Any, **headers: str) -> None:
    request.setResponseCode(200)
    request.setHeader(b"content-type", b"application/json")
    for k, v in headers.items():
        request.setHeader(k.replace("_", "-").encode(), v.encode())
    request.write(json.dumps(message).encode())
    request.finish()


def sse_start(request: Request) -> None:
    request.setResponseCode(200)
    request.setHeader(b"content-type", b"text/event-stream")


def sse_event(request: Request, message: Any, event_id: str | None = None) -> None:
    text = "" if event_id is None else f"id: {event_id}\n"
    body = json.dumps(message, indent=1)  # multi-line data: one data field per line
    text += "".join(f"data: {line}\n" for line in body.splitlines()) + "\n"
    request.write(text.encode())


def result(message: Any, value: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message["id"], "result": value}


class ScriptedMcp(Resource):
    """``/mcp``: records every request; ``on_post(request, message)`` answers POSTs."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, dict[str, str], Any]] = []
        self.on_post: dict[str, Handler] = {}
        self.on_get: Handler = lambda request, _: self.status(request, 405)
        self.on_delete: Handler = lambda request, _: self.status(request, 204)
        self.session: str | None = "sess-1"
        self.open: list[Request] = []
        self.uris: list[bytes] = []

    @staticmethod
    def status(request: Request, code: int, body: bytes = b"") -> None:
        request.setResponseCode(code)
        request.write(body)
        request.finish()

    def _record(self, request: Request, message: Any) -> None:
        headers = {
            k.decode().lower(): v[0].decode() for k, v in request.requestHeaders.getAllRawHeaders()
        }
        method = request.method.decode()
        self.seen.append((method, headers, message))
        self.uris.append(request.uri)
        self.open.append(request)
        request.notifyFinish().addBoth(lambda _: self.open.remove(request))

    def render_POST(self, request: Request) -> Any:
        assert request.content is not None
        message = json.loads(request.content.read())
        self._record(request, message)
        method = message.get("method")
        handler = self.on_post.get(method) if method else self.on_post.get("<response>")
        if handler is None:
            if method == "initialize":
                headers = {} if self.session is None else {"mcp_session_id": self.session}
                value = {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "scripted", "version": "1"},
                }
                json_answer(request, result(message, value), **headers)
            elif "id" in message and method is not None:
                json_answer(request, result(message, {}))
            else:
                self.status(request, 202)
        else:
            handler(request, message)
        return NOT_DONE_YET

    def render_GET(self, request: Request) -> Any:
        self._record(request, None)
        self.on_get(request, None)
        return NOT_DONE_YET

    def render_DELETE(self, request: Request) -> Any:
        self._record(request, None)
        self.on_delete(request, None)
        return NOT_DONE_YET

    def posts(self, method: str | None) -> list[tuple[dict[str, str], Any]]:
        """The POSTs of ``method`` messages; ``None``: those holding a response (our
        answers to the server's requests)."""
        return [
            (headers, message)
            for verb, headers, message in self.seen
            if verb == "POST" and isinstance(message, dict) and message.get("method") == method
        ]


class TrackingSite(Site):
    """A Site that knows its open connections, so a test can end them all."""

    def __init__(self, resource: Resource) -> None:
        super().__init__(resource)
        self.connections: dict[Any, Deferred[None]] = {}

    def log(self, request: Any) -> None:
        """No access log: the tests read the client's log lines only."""

    def buildProtocol(self, addr: Any) -> Any:
        proto = super().buildProtocol(addr)
        assert proto is not None
        gone: Deferred[None] = Deferred()
        made, lost = proto.makeConnection, proto.connectionLost

        def make_connection(transport: Any) -> None:
            self.connections[transport] = gone
            made(transport)

        def connection_lost(reason: Any) -> None:
            for transport, waiting in list(self.connections.items()):
                if waiting is gone:
                    del self.connections[transport]
            lost(reason)
            gone.callback(None)

        proto.makeConnection = make_connection
        proto.connectionLost = connection_lost
        return proto


@implementer(ILogObserver)
class LogCapture:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, event: dict[str, Any]) -> None:
        self.lines.append(formatEvent(event) + repr(event))


class StreamableHTTPTests(TestCase):
    """The transport under the MCP engine, against a scripted loopback server."""

    def setUp(self) -> None:
        self.mcp = ScriptedMcp()
        root = Resource()
        root.putChild(b"mcp", self.mcp)
        self.site = TrackingSite(root)
        self.port = reactor.listenTCP(0, self.site, interface="127.0.0.1")  # type: ignore[arg-type]
        address = cast(IPv4Address, self.port.getHost())
        self.url = f"http://127.0.0.1:{address.port}/mcp"
        self.addCleanup(self._stop_server)
        self.log = LogCapture()
        globalLogPublisher.addObserver(self.log)
        self.addCleanup(globalLogPublisher.removeObserver, self.log)

    async def _stop_server_async(self) -> None:
        await maybeDeferred(self.port.stopListening)
        for transport, gone in list(self.site.connections.items()):
            transport.abortConnection()
            await gone

    def _stop_server(self) -> Deferred[None]:
        return ensureDeferred(self._stop_server_async())

    def connect(
        self, registry: MethodRegistry | None = None, **options: Any
    ) -> tuple[JSONRPCProtocol, StreamableHTTPTransport]:
        proto = JSONRPCProtocol(registry, cancellation=MCP_CANCELLATION, name="scripted")
        transport = StreamableHTTPTransport(
            reactor, self.url, {"Authorization": SECRET}, name="scripted", **options
        )
        transport.connect(proto)
        self.addCleanup(self._close, proto)
        return proto, transport

    async def _close_async(self, proto: JSONRPCProtocol) -> None:
        proto.close()
        try:
            await proto.when_closed()
        except Exception:
            pass

    def _close(self, proto: JSONRPCProtocol) -> Deferred[None]:
        return ensureDeferred(self._close_async(proto))

    async def initialize(self, proto: JSONRPCProtocol) -> Any:
        answer = await proto.request("initialize", INIT_PARAMS)
        proto.notify("notifications/initialized")
        return answer

    def test_json_answers_session_and_headers(self) -> Deferred[None]:
        """Every POST carries Accept (both types), Content-Type and the configured headers;
        after initialize, Mcp-Session-Id and the negotiated MCP-Protocol-Version; a
        notification's 202 is accepted."""

        async def run() -> None:
            proto, transport = self.connect()
            answer = await self.initialize(proto)
            assert answer["protocolVersion"] == "2025-06-18"
            assert await proto.request("tools/list", {}) == {}
            await wait_until(lambda: len(self.mcp.posts("notifications/initialized")) == 1)
            ((init_headers, _),) = self.mcp.posts("initialize")
            ((later, _),) = self.mcp.posts("tools/list")
            ((note, _),) = self.mcp.posts("notifications/initialized")
            for headers in (init_headers, later, note):
                assert headers["accept"] == "application/json, text/event-stream"
                assert headers["content-type"] == "application/json"
                assert headers["authorization"] == SECRET
            assert "mcp-session-id" not in init_headers
            assert "mcp-protocol-version" not in init_headers
            for headers in (later, note):
                assert headers["mcp-session-id"] == "sess-1"
                assert headers["mcp-protocol-version"] == "2025-06-18"
            assert transport.session_id == "sess-1"

        return ensureDeferred(run())

    def test_sse_answer_with_interleaved_server_request(self) -> Deferred[None]:
        """A request answered by an SSE stream: a priming event, a notification and a
        server request come before the response; the server request is answered by a
        POST of our response while the stream stays open, and the response then ends it."""
        progress: list[Any] = []
        registry = MethodRegistry()
        registry.add_notification("notifications/progress", lambda p, _: progress.append(p))
        registry.add_request("roots/list", lambda request: {"roots": []}, params_optional=True)

        def on_call(request: Request, message: Any) -> None:
            sse_start(request)
            request.write(b": comment\nid: e0\ndata:\n\n")
            note = {"method": "notifications/progress", "params": {"progress": 1}}
            sse_event(request, {"jsonrpc": "2.0", **note}, "e1")
            sse_event(request, {"jsonrpc": "2.0", "id": "srv-1", "method": "roots/list"}, "e2")

            def on_reply(reply_request: Request, reply: Any) -> None:
                ScriptedMcp.status(reply_request, 202)
                assert reply == {"jsonrpc": "2.0", "id": "srv-1", "result": {"roots": []}}
                sse_event(request, result(message, {"content": []}), "e3")
                request.finish()

            self.mcp.on_post["<response>"] = on_reply

        self.mcp.on_post["tools/call"] = on_call

        async def run() -> None:
            proto, _ = self.connect(registry)
            await self.initialize(proto)
            answer = await proto.request("tools/call", {"name": "x", "arguments": {}})
            assert answer == {"content": []}
            assert progress == [{"progress": 1}]
            (reply_headers, _), *_ = [
                (h, m) for verb, h, m in self.mcp.seen if verb == "POST" and "result" in m
            ]
            assert reply_headers["mcp-session-id"] == "sess-1"

        return ensureDeferred(run())

    def test_session_404_ends_the_connection(self) -> Deferred[None]:
        """A 404 to a request carrying our session id: the pending request fails at once
        with ConnectionLost naming the ended session, and later requests fail too."""

        async def run() -> None:
            proto, _ = self.connect()
            await self.initialize(proto)
            self.mcp.on_post["tools/list"] = lambda request, _: ScriptedMcp.status(request, 404)
            with pytest.raises(ConnectionLost, match="session has ended"):
                await proto.request("tools/list", {})
            with pytest.raises(McpSessionExpired):
                await proto.when_closed()
            with pytest.raises(ConnectionLost):
                await proto.request("ping")

        return ensureDeferred(run())

    def test_get_stream_405_and_open(self) -> Deferred[None]:
        """After notifications/initialized the transport GETs the server's stream; 405
        means there is none; an open stream delivers the server's notifications."""

        async def run() -> None:
            proto, transport = self.connect()
            await self.initialize(proto)
            await wait_until(lambda: transport.get_stream == "none")
            ((_, headers, _),) = [s for s in self.mcp.seen if s[0] == "GET"]
            assert headers["accept"] == "text/event-stream"
            assert headers["mcp-session-id"] == "sess-1"

        return ensureDeferred(run())

    def test_get_stream_delivers_server_notifications(self) -> Deferred[None]:
        """Messages on the GET stream reach the engine's handlers."""
        changed: list[Any] = []
        registry = MethodRegistry()
        registry.add_notification(
            "notifications/tools/list_changed", lambda p, _: changed.append(p), params_optional=True
        )

        def on_get(request: Request, _: Any) -> None:
            sse_start(request)
            sse_event(request, {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})

        self.mcp.on_get = on_get

        async def run() -> None:
            proto, transport = self.connect(registry)
            await self.initialize(proto)
            await wait_until(lambda: len(changed) == 1)
            assert transport.get_stream == "open"

        return ensureDeferred(run())

    def test_oversized_event_fails_only_its_request(self) -> Deferred[None]:
        """An SSE event longer than max_message_size fails that request with
        MessageTooLarge (data.limit); the connection goes on."""

        def on_call(request: Request, message: Any) -> None:
            sse_start(request)
            sse_event(request, result(message, {"text": "x" * 5000}))
            request.finish()

        self.mcp.on_post["tools/call"] = on_call

        async def run() -> None:
            proto, _ = self.connect(max_message_size=2000)
            await self.initialize(proto)
            with pytest.raises(MessageTooLarge) as caught:
                await proto.request("tools/call", {"name": "big"})
            assert caught.value.limit == 2000
            assert await proto.request("ping") == {}

        return ensureDeferred(run())

    def test_oversized_json_body_fails_only_its_request(self) -> Deferred[None]:
        """A JSON body longer than max_message_size: MessageTooLarge, not read further."""

        def on_call(request: Request, message: Any) -> None:
            json_answer(request, result(message, {"text": "x" * 5000}))

        self.mcp.on_post["tools/call"] = on_call

        async def run() -> None:
            proto, _ = self.connect(max_message_size=2000)
            await self.initialize(proto)
            with pytest.raises(MessageTooLarge):
                await proto.request("tools/call", {"name": "big"})
            assert await proto.request("ping") == {}

        return ensureDeferred(run())

    def test_server_disappears_mid_stream(self) -> Deferred[None]:
        """The connection drops in the middle of an SSE answer with no event id: that
        request fails at once, its error saying the stream dropped."""

        def on_call(request: Request, message: Any) -> None:
            sse_start(request)
            request.write(b'data: {"jsonrpc": "2.0", "method": "notifications/message"')
            reactor.callLater(0.05, request.channel.transport.abortConnection)  # type: ignore[union-attr]

        self.mcp.on_post["tools/call"] = on_call

        async def run() -> None:
            proto, _ = self.connect()
            await self.initialize(proto)
            with pytest.raises(RPCError) as caught:
                await proto.request("tools/call", {"name": "x"})
            assert caught.value.code == HTTP_TRANSPORT_ERROR
            assert "dropped" in caught.value.message
            assert "before its response" in caught.value.message

        return ensureDeferred(run())

    def test_stream_resumed_with_last_event_id(self) -> Deferred[None]:
        """A stream that ends before the response after an event id is resumed with GET
        and Last-Event-ID after the server's retry delay; the response comes there."""

        def on_call(request: Request, message: Any) -> None:
            sse_start(request)
            request.write(b"id: ev-1\nretry: 20\ndata:\n\n")
            request.finish()

            def on_get(get: Request, _: Any) -> None:
                if get.getHeader("last-event-id") != "ev-1":
                    ScriptedMcp.status(get, 405)
                    return
                sse_start(get)
                sse_event(get, result(message, {"resumed": True}), "ev-2")
                get.finish()

            self.mcp.on_get = on_get

        self.mcp.on_post["tools/call"] = on_call

        async def run() -> None:
            proto, _ = self.connect()
            await self.initialize(proto)
            assert await proto.request("tools/call", {"name": "x"}) == {"resumed": True}
            gets = [h for verb, h, _ in self.mcp.seen if verb == "GET"]
            assert gets[-1]["last-event-id"] == "ev-1"
            assert gets[-1]["mcp-session-id"] == "sess-1"

        return ensureDeferred(run())

    def test_http_error_status(self) -> Deferred[None]:
        """An error status fails that request with HTTP_TRANSPORT_ERROR, the status in
        data and the server's JSON-RPC error message in the text."""

        def on_call(request: Request, message: Any) -> None:
            body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": "nope"}}
            request.setResponseCode(500)
            request.write(json.dumps(body).encode())
            request.finish()

        self.mcp.on_post["tools/call"] = on_call

        async def run() -> None:
            proto, _ = self.connect()
            await self.initialize(proto)
            with pytest.raises(RPCError) as caught:
                await proto.request("tools/call", {"name": "x"})
            assert caught.value.code == HTTP_TRANSPORT_ERROR
            assert caught.value.data["status"] == 500
            assert "HTTP 500" in caught.value.message and "nope" in caught.value.message
            assert not any(SECRET in line for line in self.log.lines)

        return ensureDeferred(run())

    def test_cancel_posts_notifications_cancelled(self) -> Deferred[None]:
        """Cancelling a request whose stream is open POSTs notifications/cancelled with
        its id, fails it with CancelledError and closes its stream; the connection goes
        on."""

        def on_call(request: Request, message: Any) -> None:
            sse_start(request)
            request.write(b"data:\n\n")

        self.mcp.on_post["tools/call"] = on_call

        async def run() -> None:
            proto, _ = self.connect()
            await self.initialize(proto)
            d = proto.request("tools/call", {"name": "slow"})
            await wait_until(lambda: bool(self.mcp.posts("tools/call")))
            ((_, call),) = self.mcp.posts("tools/call")
            d.cancel()
            with pytest.raises(CancelledError):
                await d
            await wait_until(lambda: bool(self.mcp.posts("notifications/cancelled")))
            ((_, cancel),) = self.mcp.posts("notifications/cancelled")
            assert cancel["params"] == {"requestId": call["id"]}
            # ... and the call's stream is closed by the client.
            await wait_until(lambda: not any(r.method == b"POST" for r in self.mcp.open))
            assert await proto.request("ping") == {}

        return ensureDeferred(run())

    def test_cancelled_before_its_answer_began(self) -> Deferred[None]:
        """A request cancelled before the server began answering: when the answer's SSE
        stream starts, the client closes it at once instead of reading it to the end."""
        held: list[Request] = []
        self.mcp.on_post["tools/call"] = lambda request, _: held.append(request)

        async def run() -> None:
            proto, _ = self.connect()
            await self.initialize(proto)
            d = proto.request("tools/call", {"name": "slow"})
            await wait_until(lambda: bool(held))
            d.cancel()
            with pytest.raises(CancelledError):
                await d
            await wait_until(lambda: bool(self.mcp.posts("notifications/cancelled")))
            sse_start(held[0])
            held[0].write(b"id: 1\ndata:\n\n")
            await wait_until(lambda: held[0] not in self.mcp.open, timeout=5)
            assert await proto.request("ping") == {}

        return ensureDeferred(run())

    def test_delete_on_close(self) -> Deferred[None]:
        """close() sends DELETE with the session id, then the engine's connection ends
        cleanly."""

        async def run() -> None:
            proto, _ = self.connect()
            await self.initialize(proto)
            proto.close()
            with pytest.raises(ConnectionDone):
                await proto.when_closed()
            deletes = [h for verb, h, _ in self.mcp.seen if verb == "DELETE"]
            assert [h["mcp-session-id"] for h in deletes] == ["sess-1"]
            assert deletes[0]["authorization"] == SECRET

        return ensureDeferred(run())

    def test_unreachable_server(self) -> Deferred[None]:
        """Nothing listens at the URL: the request fails at once with ConnectionLost
        saying the server cannot be reached."""

        async def run() -> None:
            await maybeDeferred(self.port.stopListening)
            proto, _ = self.connect()
            with pytest.raises(ConnectionLost, match="cannot reach the MCP server"):
                await proto.request("initialize", INIT_PARAMS)
            with pytest.raises(McpServerUnreachable):
                await proto.when_closed()

        return ensureDeferred(run())

    def test_connect_http_session_expiry_fails_calls_with_server_gone(self) -> Deferred[None]:
        """Through connect_http: a 404 on our session fails the call with McpServerGone
        naming the ended session, and the client's closed says so."""

        async def run() -> None:
            client = await connect_http(reactor, self.url, name="scripted")
            self.addCleanup(client.close)
            self.mcp.on_post["tools/call"] = lambda request, _: ScriptedMcp.status(request, 404)
            with pytest.raises(McpServerGone, match="session has ended"):
                await client.call_tool("x", {})
            closed = await client.when_closed()
            assert "session has ended" in str(closed) and not closed.requested

        return ensureDeferred(run())

    def test_connect_http_unreachable(self) -> Deferred[None]:
        """connect_http to a port where nothing listens: McpHandshakeError naming the URL."""

        async def run() -> None:
            await maybeDeferred(self.port.stopListening)
            with pytest.raises(McpHandshakeError, match="cannot reach the MCP server at http"):
                await connect_http(reactor, self.url, name="nowhere")

        return ensureDeferred(run())

    def test_connect_http_server_hangs(self) -> Deferred[None]:
        """A server that never answers initialize: McpHandshakeTimeout after
        handshake_timeout, and the client's HTTP request is closed (nothing left open)."""
        held: list[Request] = []
        self.mcp.on_post["initialize"] = lambda request, _: held.append(request)

        async def run() -> None:
            with pytest.raises(McpHandshakeTimeout, match="did not answer initialize"):
                await connect_http(reactor, self.url, name="hung", handshake_timeout=0.3)
            await wait_until(lambda: not self.mcp.open, timeout=5)

        return ensureDeferred(run())

    def test_connect_http_bad_url(self) -> Deferred[None]:
        """A URL that is not http(s)://host fails the Deferred with ValueError, no raise."""

        async def run() -> None:
            for url in ("ftp://host/mcp", "http:///mcp", "localhost:3001/mcp"):
                with pytest.raises(ValueError, match="http"):
                    await connect_http(reactor, url, name="bad")

        return ensureDeferred(run())

    def test_connect_http_waits_for_the_server_stream(self) -> Deferred[None]:
        """connect_http fires only once the server has answered the GET for its own
        stream, so a server that drops what it sends while no GET stream is open (the
        TypeScript SDK's does) loses nothing: an elicitation/create it sends on that
        stream during the next tools/call is answered -32601, and the call completes."""
        held: list[Request] = []
        self.mcp.on_get = lambda request, _: held.append(request)
        calls: list[tuple[Request, Any]] = []

        def on_call(request: Request, message: Any) -> None:
            # Like the TypeScript SDK: a request unrelated to the call goes to the GET
            # stream, or nowhere if there is none.
            calls.append((request, message))
            for stream in held:
                sse_event(stream, {"jsonrpc": "2.0", "id": 90, "method": "elicitation/create"})

        def on_response(request: Request, message: Any) -> None:
            ScriptedMcp.status(request, 202)
            call_request, call = calls.pop()
            json_answer(call_request, result(call, {"content": [], "isError": False}))

        self.mcp.on_post["tools/call"] = on_call
        self.mcp.on_post["<response>"] = on_response

        async def run() -> None:
            connecting = connect_http(reactor, self.url, name="scripted")
            await wait_until(
                lambda: bool(held) and bool(self.mcp.posts("notifications/initialized"))
            )
            assert not connecting.called
            sse_start(held[0])
            held[0].write(b": open\n\n")
            client = await connecting
            self.addCleanup(client.close)
            transport = client.protocol.transport
            assert isinstance(transport, StreamableHTTPTransport)
            assert transport.get_stream == "open"
            answer = await client.call_tool("x", {})
            assert answer.is_error is False
            ((_, reply),) = self.mcp.posts(None)
            assert reply["id"] == 90 and reply["error"]["code"] == -32601

        return ensureDeferred(run())

    def test_connect_http_server_stream_never_answered(self) -> Deferred[None]:
        """A server that never answers the GET for its stream does not hold connect_http
        longer than stream_timeout: the client is given then, a warning says what may be
        lost, and calls work."""
        self.mcp.on_get = lambda request, _: None

        async def run() -> None:
            client = await connect_http(reactor, self.url, name="slow", stream_timeout=0.3)
            self.addCleanup(client.close)
            assert any(
                "has not answered the GET for its own stream" in line for line in self.log.lines
            )
            await client.ping()

        return ensureDeferred(run())

    def test_connect_http_server_stream_ends_at_once(self) -> Deferred[None]:
        """A GET answered 200 with an SSE body that ends at once (no event id): the stream
        is "closed", not the connection; connect_http gives the client, and calls work."""

        def on_get(request: Request, _: Any) -> None:
            sse_start(request)
            request.finish()

        self.mcp.on_get = on_get

        async def run() -> None:
            client = await connect_http(reactor, self.url, name="brief")
            self.addCleanup(client.close)
            transport = client.protocol.transport
            assert isinstance(transport, StreamableHTTPTransport)
            await wait_until(lambda: transport.get_stream == "closed")
            await client.ping()

        return ensureDeferred(run())

    def test_connect_http_session_ends_at_the_server_stream(self) -> Deferred[None]:
        """A 404 to the GET for the server's stream (the session is gone already) fails
        connect_http with McpHandshakeError naming the ended session."""
        self.mcp.on_get = lambda request, _: ScriptedMcp.status(request, 404)

        async def run() -> None:
            with pytest.raises(McpHandshakeError, match=r"while its stream opened.*session"):
                await connect_http(reactor, self.url, name="gone")

        return ensureDeferred(run())

    def test_server_stream_answered_before_initialized(self) -> Deferred[None]:
        """Before notifications/initialized no GET was sent: when_server_stream_answered
        fires at once with "unopened"; a 405 later makes it fire with "none"."""

        async def run() -> None:
            proto, transport = self.connect()
            assert await transport.when_server_stream_answered() == "unopened"
            await self.initialize(proto)
            assert await transport.when_server_stream_answered() == "none"

        return ensureDeferred(run())

    def test_url_secrets_never_shown(self) -> Deferred[None]:
        """A URL's query (it may hold a key) appears in no error and no log line; the URL
        is still used as given.  User info in a URL is refused (headers carry credentials)."""
        self.mcp.on_post["tools/call"] = lambda request, _: ScriptedMcp.status(request, 500)
        secret_url = self.url + "?key=s3cret"

        async def run() -> None:
            proto = JSONRPCProtocol(cancellation=MCP_CANCELLATION, name="scripted")
            StreamableHTTPTransport(reactor, secret_url, name="scripted").connect(proto)
            self.addCleanup(self._close, proto)
            await self.initialize(proto)
            with pytest.raises(RPCError) as caught:
                await proto.request("tools/call", {"name": "x"})
            assert self.url in caught.value.message
            shown = [caught.value.message, json.dumps(caught.value.data), *self.log.lines]
            assert not [text for text in shown if "s3cret" in text]
            assert self.mcp.uris[0].endswith(b"/mcp?key=s3cret")
            with pytest.raises(ValueError, match="user info") as refused:
                StreamableHTTPTransport(reactor, self.url.replace("//", "//u:pa55word@"))
            assert "pa55word" not in str(refused.value)

        return ensureDeferred(run())

    def test_response_id_echoed_as_string(self) -> Deferred[None]:
        """A server echoing our integer id as its decimal string: the request gets its
        result (the engine accepts it) and the transport counts it as answered."""

        def on_list(request: Request, message: Any) -> None:
            json_answer(request, {"jsonrpc": "2.0", "id": str(message["id"]), "result": {}})

        self.mcp.on_post["tools/list"] = on_list

        async def run() -> None:
            proto, _ = self.connect()
            await self.initialize(proto)
            assert await proto.request("tools/list", {}) == {}
            assert await proto.request("ping") == {}
            assert not any("held no response" in line for line in self.log.lines)

        return ensureDeferred(run())

    def test_headers_never_logged(self) -> Deferred[None]:
        """The configured headers appear in no log event, whatever failed."""

        def on_call(request: Request, message: Any) -> None:
            ScriptedMcp.status(request, 401, b"unauthorized")

        self.mcp.on_post["tools/call"] = on_call

        async def run() -> None:
            proto, _ = self.connect()
            await self.initialize(proto)
            with pytest.raises(RPCError, match=r"HTTP 401.*check the configured headers"):
                await proto.request("tools/call", {"name": "x"})
            proto.close()
            await wait_until(lambda: proto.closed_reason is not None)
            assert self.log.lines
            assert not any("s3cret" in line for line in self.log.lines)

        return ensureDeferred(run())


# -- the real server-everything ---------------------------------------------------------------


async def wait_for_port(port: int, timeout: float = 30.0) -> None:
    """Try to connect to 127.0.0.1:port until it accepts (each failed attempt is a
    refused connection; at most ``timeout`` seconds of reactor time)."""
    endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", port, timeout=2)
    waited = 0.0
    while True:
        try:
            proto = await connectProtocol(endpoint, Protocol())
        except ConnectError as e:
            if waited > timeout:
                raise AssertionError(f"nothing listens on port {port} after {timeout} s") from e
            await task.deferLater(reactor, 0.05, lambda: None)
            waited += 0.05
            continue
        assert proto.transport is not None
        proto.transport.loseConnection()
        return


@pytest.mark.process
@pytest.mark.real_agent
class RealEverythingHTTPTests(TestCase):
    """acpkit's MCP client against ``mcp-server-everything streamableHttp``."""

    timeout = 120

    def setUp(self) -> Deferred[None]:  # type: ignore[override]
        server = require_peer(MCP_EVERYTHING)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        log = self.mktemp()
        self.server_log = log
        with open(log, "wb") as out:
            self.server = subprocess.Popen(
                [server, "streamableHttp"],
                env={**os.environ, "PORT": str(self.port)},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.addCleanup(self._stop)
        return ensureDeferred(wait_for_port(self.port))

    def _stop(self) -> None:
        try:
            os.killpg(self.server.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.server.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.server.pid, signal.SIGKILL)
            self.server.wait(10)

    async def connect(self) -> McpClient:
        client = await connect_http(reactor, self.url, {"Authorization": SECRET}, name="everything")
        self.addCleanup(client.close)
        return client

    def test_list_tools_and_echo(self) -> Deferred[None]:
        """initialize over HTTP (a session id given), tools/list, tools/call echo."""

        async def run() -> None:
            client = await self.connect()
            assert client.protocol_version in SUPPORTED_VERSIONS
            transport = client.protocol.transport
            assert isinstance(transport, StreamableHTTPTransport)
            assert transport.session_id
            names = {tool.name for tool in await client.list_tools()}
            assert {"echo", "trigger-long-running-operation"} <= names
            result = await client.call_tool("echo", {"message": "héllo"})
            assert [getattr(c, "text", None) for c in result.content] == ["Echo: héllo"]
            assert not result.is_error
            await client.ping()

        return ensureDeferred(run())

    def test_progress_of_long_running_tool(self) -> Deferred[None]:
        """The long-running tool's progress notifications (on its SSE stream) reach the
        call's progress callback, in order, before its result."""

        async def run() -> None:
            client = await self.connect()
            seen: list[tuple[float, float | None]] = []
            result = await client.call_tool(
                "trigger-long-running-operation",
                {"duration": 1, "steps": 3},
                progress=lambda p, total, _: seen.append((p, total)),
            )
            assert seen == [(1, 3), (2, 3), (3, 3)]
            assert "completed" in result.content[0].text  # type: ignore[union-attr]

        return ensureDeferred(run())

    def test_cancel_mid_call(self) -> Deferred[None]:
        """Cancelling a 30 s call after its first progress: CancelledError at once,
        notifications/cancelled POSTed, and the session goes on (ping, echo)."""

        async def run() -> None:
            client = await self.connect()
            first: Deferred[None] = Deferred()
            d = client.call_tool(
                "trigger-long-running-operation",
                {"duration": 30, "steps": 30},
                progress=lambda *_: None if first.called else first.callback(None),
            )
            await first
            d.cancel()
            with pytest.raises(CancelledError):
                await d
            await client.ping()
            result = await client.call_tool("echo", {"message": "after"})
            assert result.content[0].text == "Echo: after"  # type: ignore[union-attr]

        return ensureDeferred(run())

    def test_server_notifications_on_the_get_stream(self) -> Deferred[None]:
        """The server's own messages come on the GET stream: the simulated-logging tool
        sends a log message unrelated to any request at once, and the client logs it."""

        async def run() -> None:
            logged: list[dict[str, Any]] = []

            @implementer(ILogObserver)
            def observe(event: dict[str, Any]) -> None:
                if "mcp_level" in event:
                    logged.append(event)

            globalLogPublisher.addObserver(observe)
            self.addCleanup(globalLogPublisher.removeObserver, observe)
            client = await self.connect()
            transport = client.protocol.transport
            assert isinstance(transport, StreamableHTTPTransport)
            await client.call_tool("toggle-simulated-logging", {})
            await wait_until(lambda: bool(logged), timeout=10)
            assert transport.get_stream == "open"
            await client.call_tool("toggle-simulated-logging", {})  # stop its timer

        return ensureDeferred(run())

    def test_server_killed_mid_call(self) -> Deferred[None]:
        """The server is killed during a long call: its stream drops after event ids, the
        resumption cannot connect, so the call fails promptly with McpServerGone saying
        the server cannot be reached, and the client is closed."""

        async def run() -> None:
            client = await self.connect()
            first: Deferred[None] = Deferred()
            d = client.call_tool(
                "trigger-long-running-operation",
                {"duration": 30, "steps": 30},
                progress=lambda *_: None if first.called else first.callback(None),
            )
            await first
            os.killpg(self.server.pid, signal.SIGKILL)
            started = reactor.seconds()
            with pytest.raises(McpServerGone, match="cannot reach the MCP server"):
                await d
            assert reactor.seconds() - started < 10
            closed = await client.when_closed()
            assert "cannot reach" in str(closed) and not closed.requested

        return ensureDeferred(run())

    def test_close_deletes_the_session(self) -> Deferred[None]:
        """close() DELETEs the session: the server forgets it (a request with the old
        session id is refused; the server says 400 where the spec asks 404)."""

        async def run() -> None:
            client = await self.connect()
            transport = client.protocol.transport
            assert isinstance(transport, StreamableHTTPTransport)
            session = transport.session_id
            assert session is not None
            await client.close()
            assert client.closed is not None and client.closed.requested
            import treq

            response = await treq.post(
                self.url,
                data=b'{"jsonrpc":"2.0","id":9,"method":"ping"}',
                headers={
                    "Content-Type": "application/json",
                    "Accept": "application/json, text/event-stream",
                    "Mcp-Session-Id": session,
                },
                persistent=False,
            )
            body = await response.text()
            assert response.code == 400, (response.code, body)
            assert "No valid session ID" in body

        return ensureDeferred(run())
