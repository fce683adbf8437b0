"""
Deep JSON never kills a remote connection (issue 22, item 3): the Streamable HTTP
server's POST (a JSON-RPC error body with a JSON content type, never an HTML 500; or
the engine's answer on the stream when the request's id was read) and the WebSocket
server (an error message on the socket, which stays open) driven in memory over any
depth; then acpkit's HTTP and WebSocket clients and MCP's HTTP transport, on loopback,
receiving deep messages from the server.
"""

from __future__ import annotations

import json
import os
from typing import Any

import attrs
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from twisted.internet import reactor
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred, ensureDeferred, maybeDeferred
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import TestCase
from twisted.web.resource import Resource
from twisted.web.server import Request, Site

from acpkit import schema
from acpkit.connection import Agent, AgentConnection, ClientConnection, negotiate_version
from acpkit.errors import InvalidRequest
from acpkit.http.sse import encode_event
from acpkit.jsonrpc import JSONRPCProtocol
from acpkit.jsonrpc.cancel import MCP_CANCELLATION
from acpkit.jsonrpc.jsonbytes import MAX_NESTING_DEPTH
from acpkit.mcp.http import StreamableHTTPTransport
from acpkit.remote.http_client import connect_http
from acpkit.remote.websocket import websocket_resource
from tests.helpers import InteropClient
from tests.jsonrpc.test_deep_json import EXPLICIT_DEPTHS, KINDS, depths, kinds, nested
from tests.mcp.test_mcp_http import INIT_PARAMS, ScriptedMcp, TrackingSite, sse_start
from tests.remote.test_remote_http_client import FakeAcpServer, scripted_agent
from tests.remote.test_remote_server import Server
from tests.remote.test_remote_websocket import _WsBase, until

LIMIT = MAX_NESTING_DEPTH
NEW_SESSION = b'"method":"session/new","params":{"cwd":"/","mcpServers":[]}'


@attrs.frozen
class Place:
    name: str
    template: bytes
    levels: int

    def message(self, depth: int, kind: str) -> bytes:
        return self.template.replace(b"@", nested(depth, kind))


#: Where a deep value goes in what a client sends an ACP agent (initialized, a session
#: "s1" open): the whole message, session/new's params (its _meta), the id, a
#: notification's params, a response to no request of the agent's.
PLACES = {
    p.name: p
    for p in (
        Place("message", b"@", 0),
        Place(
            "params",
            b'{"jsonrpc":"2.0","id":7,"method":"session/new",'
            b'"params":{"cwd":"/","mcpServers":[],"_meta":{"p":@}}}',
            3,
        ),
        Place("id", b'{"jsonrpc":"2.0","id":@,' + NEW_SESSION + b"}", 1),
        Place(
            "notification",
            b'{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1","_meta":{"p":@}}}',
            3,
        ),
        Place("result", b'{"jsonrpc":"2.0","id":4242,"result":@}', 1),
    )
}
place_names = st.sampled_from(sorted(PLACES))


def agent_answer(place: str, depth: int) -> tuple[Any, int | str] | None:
    """What an ACP agent answers (id, error code or "result"), None for nothing."""
    too_deep = depth + PLACES[place].levels > LIMIT
    if place == "message":
        return None, -32700 if too_deep else -32600
    if place == "params":
        return 7, -32602 if too_deep else "result"
    if place == "id":
        if depth == 0:
            return 0, "result"
        return None, -32700 if too_deep else -32600
    if place == "notification":
        return (None, -32700) if too_deep else None
    assert place == "result"
    return (None, -32600) if too_deep else None


def answer_of(message: dict[str, Any]) -> tuple[Any, int | str]:
    if "result" in message:
        return message["id"], "result"
    return message["id"], message["error"]["code"]


NEXT = b'{"jsonrpc":"2.0","id":99,' + NEW_SESSION + b"}"
NEXT_ANSWER = {"jsonrpc": "2.0", "id": 99, "result": {"sessionId": "s1"}}


# -- the Streamable HTTP server (acpkit.remote.server), raw HTTP in memory ------------------


def http_expects(place: str, kind: str, depth: int) -> tuple[int, Any]:
    """The POST's status, and the stream's answer (as agent_answer) or the body's code."""
    too_deep = depth + PLACES[place].levels > LIMIT
    if place == "message":
        if too_deep:
            return 400, -32700  # no id to answer: the POST is refused
        if depth == 0:
            return 400, -32600  # a scalar: not one JSON-RPC message
        if kind != "object":
            return 501, -32600  # an array: a batch
        return 202, (None, -32600)
    if too_deep and place in ("id", "notification"):
        return 400, -32700  # no id read before the deep member
    return 202, agent_answer(place, depth)


class HTTPPeer:
    """An initialized connection to the /acp resource with its event stream open."""

    def __init__(self) -> None:
        self.server = Server()
        self.cid = self.server.initialize()
        self.stream = self.server.stream(self.cid)
        self.seen = 0

    def post(self, body: bytes) -> Any:
        headers = {
            "Content-Type": "application/json",
            "Acp-Connection-Id": self.cid,
            "Acp-Session-Id": "s1",
        }
        return self.server.request("POST", headers, body)

    def new_events(self) -> list[Any]:
        events = self.stream.events()
        fresh, self.seen = events[self.seen :], len(events)
        return fresh


def check_http(place: str, kind: str, depth: int) -> None:
    peer = HTTPPeer()
    status, answer = http_expects(place, kind, depth)
    response = peer.post(PLACES[place].message(depth, kind))
    assert response.status == status, response.raw[:300]
    if status == 202:
        assert response.body == b""
        events = peer.new_events()
        assert [answer_of(e) for e in events] == ([] if answer is None else [answer])
    else:
        assert response.header("Content-Type") == "application/json"
        error = response.json()["error"]
        assert error["code"] == answer
        if status == 400 and answer == -32700:
            assert "nested deeper than 254 levels" in error["message"]
        assert peer.new_events() == []
    assert peer.post(NEXT).status == 202
    assert peer.new_events() == [NEXT_ANSWER]


@given(place=place_names, kind=kinds, depth=depths)
@example(place="message", kind="array", depth=999)
@example(place="message", kind="object", depth=970)
@example(place="params", kind="mixed", depth=1000)
@example(place="params", kind="array", depth=LIMIT - 3)
@example(place="params", kind="array", depth=LIMIT - 2)
@example(place="id", kind="array", depth=1024)
@example(place="result", kind="object", depth=1025)
@example(place="notification", kind="array", depth=100_000)
def test_http_post_of_any_depth_is_answered_in_json_and_the_connection_goes_on(
    place: str, kind: str, depth: int
) -> None:
    """
    A POST nested to any depth is answered as JSON-RPC says, never with an HTML 500:
    400 with a -32700 JSON body when no id can be read before the deep member, the
    engine's answer on the event stream when one was (-32602 with the request's id,
    -32600 for a response), as before for what parses (501 for an array, -32600...);
    the next request on the same connection is answered.
    """
    check_http(place, kind, depth)


@pytest.mark.parametrize("depth", EXPLICIT_DEPTHS)
@pytest.mark.parametrize("place", sorted(PLACES))
def test_http_post_at_every_named_depth(place: str, depth: int) -> None:
    """The issue's depths at every place (arrays), as in the property above."""
    check_http(place, "array", depth)


def test_http_initialize_with_params_too_deep_is_answered_in_its_body() -> None:
    """An initialize POST whose params are too deep gets its 200 answer: -32602 with its id."""
    server = Server()
    body = (
        b'{"jsonrpc":"2.0","id":"i","method":"initialize","params":{"protocolVersion":1,'
        b'"_meta":' + nested(5000, "object") + b"}}"
    )
    response = server.request("POST", {"Content-Type": "application/json"}, body)
    assert response.status == 200
    assert response.json()["id"] == "i"
    assert response.json()["error"]["code"] == -32602


# -- the WebSocket server (acpkit.remote.websocket), Autobahn driven in memory -------------


class SessionAgent(Agent):
    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=negotiate_version(params.protocol_version)
        )

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id="s1")


def client_frame(payload: bytes) -> bytes:
    """One masked text frame, as a client sends it (a zero mask: the payload as is)."""
    n = len(payload)
    if n < 126:
        head = bytes([0x81, 0x80 | n])
    elif n < 65536:
        head = bytes([0x81, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x81, 0x80 | 127]) + n.to_bytes(8, "big")
    return head + b"\0\0\0\0" + payload


def server_frames(data: bytes) -> list[tuple[int, bytes]]:
    """The (opcode, payload) of each unmasked frame the server wrote."""
    frames = []
    while data:
        opcode, n, start = data[0] & 0x0F, data[1] & 0x7F, 2
        if n == 126:
            n, start = int.from_bytes(data[2:4], "big"), 4
        elif n == 127:
            n, start = int.from_bytes(data[2:10], "big"), 10
        frames.append((opcode, data[start : start + n]))
        data = data[start + n :]
    return frames


class WebSocketPeer:
    """An ACP agent behind acpkit's WebSocket server, on a StringTransport, initialized."""

    HANDSHAKE = (
        b"GET /acp HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"Sec-WebSocket-Version: 13\r\n\r\n"
    )

    def __init__(self) -> None:
        resource = websocket_resource(
            lambda p: AgentConnection(SessionAgent(), protocol=p),
            auto_ping_interval=None,
            open_timeout=None,
        )
        address = IPv4Address("TCP", "127.0.0.1", 40000)
        websocket = resource.factory.buildProtocol(address)
        assert websocket is not None
        self.websocket: Any = websocket
        self.transport = StringTransport(peerAddress=address)
        self.websocket.makeConnection(self.transport)
        self.websocket.dataReceived(self.HANDSHAKE)
        assert self.transport.value().startswith(b"HTTP/1.1 101 ")
        self.transport.clear()
        self.send(b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}')
        assert self.take()[0]["id"] == 0

    def send(self, message: bytes) -> None:
        self.websocket.dataReceived(client_frame(message))

    def take(self) -> list[Any]:
        frames = server_frames(self.transport.value())
        self.transport.clear()
        assert all(opcode == 1 for opcode, _ in frames), frames  # text, never a close (8)
        return [json.loads(payload) for _, payload in frames]


def check_websocket(place: str, kind: str, depth: int) -> None:
    peer = WebSocketPeer()
    answer = agent_answer(place, depth)
    peer.send(PLACES[place].message(depth, kind))
    assert [answer_of(a) for a in peer.take()] == ([] if answer is None else [answer])
    peer.send(NEXT)
    assert peer.take() == [NEXT_ANSWER]
    assert peer.websocket.state == peer.websocket.STATE_OPEN
    assert not peer.transport.disconnecting


@given(place=place_names, kind=kinds, depth=depths)
@example(place="message", kind="array", depth=999)
@example(place="message", kind="mixed", depth=970)
@example(place="params", kind="object", depth=1000)
@example(place="id", kind="array", depth=1025)
@example(place="result", kind="object", depth=5000)
@example(place="notification", kind="array", depth=100_000)
def test_websocket_message_of_any_depth_gets_an_error_frame_and_the_socket_stays_open(
    place: str, kind: str, depth: int
) -> None:
    """
    A text frame nested to any depth is answered with a JSON-RPC error frame (as on
    stdio); no close frame, the socket stays open, the next request is answered.
    """
    check_websocket(place, kind, depth)


@pytest.mark.parametrize("depth", EXPLICIT_DEPTHS)
@pytest.mark.parametrize("kind", KINDS)
def test_websocket_message_at_every_named_depth(kind: str, depth: int) -> None:
    """The issue's depths, as whole messages and in params, in every shape."""
    check_websocket("message", kind, depth)
    check_websocket("params", kind, depth)


# -- the clients, on loopback: deep messages from the server ---------------------------------


def deep_permission_request(depth: int) -> bytes:
    return (
        b'{"jsonrpc":"2.0","id":"q","method":"session/request_permission","params":'
        b'{"sessionId":"s1","toolCall":{"toolCallId":"c1"},"options":[{"optionId":"allow",'
        b'"name":"Allow","kind":"allow_once"}],"_meta":{"p":' + nested(depth) + b"}}}"
    )


class HTTPClientDeepTests(TestCase):
    """acpkit's Streamable HTTP client (acpkit.remote.http_client) receiving deep JSON from
    a scripted twisted.web server on loopback."""

    timeout = 60

    def setUp(self) -> Deferred[None]:  # type: ignore[override]
        return ensureDeferred(self._start())

    async def _start(self) -> None:
        self.server = FakeAcpServer()
        self.server.answer = scripted_agent
        site = Site(self.server)
        port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(site)
        self.addCleanup(port.stopListening)
        self.url = f"http://127.0.0.1:{port.getHost().port}/acp"

    async def _close(self, conn: ClientConnection) -> None:
        conn.close()
        await conn.closed.addErrback(lambda _: None)

    async def test_deep_server_messages_are_answered_and_the_client_goes_on(self) -> None:
        """
        On the SSE stream, a deep message gets its error POSTed back (-32700/-32600 with
        id null) and a permission request with deep params its -32602 (its id); the
        client's next prompt works, every time.
        """
        conn = await connect_http(reactor, self.url, InteropClient())
        self.addCleanup(self._close, conn)
        await conn.initialize()
        sid = (await conn.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))).session_id
        for depth in EXPLICIT_DEPTHS:
            assert self.server.stream is not None
            posted = self.server.next_post()
            self.server.stream.write(encode_event(nested(depth, "object")))
            answer = await posted
            assert answer["id"] is None
            assert answer["error"]["code"] == (-32600 if depth <= LIMIT else -32700)
            posted = self.server.next_post()
            self.server.stream.write(encode_event(deep_permission_request(depth)))
            answer = await posted
            assert answer["id"] == "q"
            if depth + 4 <= LIMIT:
                assert answer["result"]["outcome"]["outcome"] == "selected"
            else:
                assert answer["error"]["code"] == -32602
            prompt: list[schema.ContentBlock] = [schema.TextContentBlock(text="hi")]
            response = await conn.prompt(schema.PromptRequest(session_id=sid, prompt=prompt))
            self.assertEqual(response.stop_reason, schema.StopReason.END_TURN)


class WebSocketClientDeepTests(_WsBase):
    """acpkit's WebSocket client (connect_websocket) receiving deep JSON from the server."""

    async def test_deep_server_frames_are_answered_and_the_socket_stays_open(self) -> None:
        """
        Raw deep frames from the server (written past the agent's encoder) get their
        JSON-RPC errors back from the client; the client's next request works.
        """
        url, _resource = self.serve()
        conn, _client = await self.open(url)
        sid = await self.start_session(conn)
        (agent,) = self.agents
        received: list[bytes] = []

        class Tracer:
            def received(self, line: bytes) -> None:
                received.append(line)

            def sent(self, line: bytes) -> None:
                pass

        agent.protocol.tracer = Tracer()
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("hi")
        transport = agent.protocol.transport
        assert transport is not None
        for depth in EXPLICIT_DEPTHS:
            del received[:]
            transport.write(nested(depth, "mixed"))
            transport.write(
                b'{"jsonrpc":"2.0","id":"x","method":"fs/read_text_file","params":'
                b'{"sessionId":"'
                + sid.encode()
                + b'","path":'
                + json.dumps(os.path.abspath(path)).encode()
                + b',"_meta":'
                + nested(depth, "array")
                + b"}}"
            )
            await until(lambda: len(received) >= 2, "the client's answers")
            first, second = (json.loads(line) for line in received[:2])
            assert first["id"] is None
            assert first["error"]["code"] == (-32600 if depth <= LIMIT else -32700)
            assert second["id"] == "x"
            if depth + 3 > LIMIT:
                assert second["error"]["code"] == -32602
            else:
                assert second["result"]["content"] == "hi"
            new = await conn.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))
            assert new.session_id == "ws-session"


class McpHTTPDeepTests(TestCase):
    """MCP's Streamable HTTP transport (acpkit.mcp.http) receiving deep JSON answers from a
    scripted loopback server."""

    timeout = 60

    def setUp(self) -> None:
        self.mcp = ScriptedMcp()
        root = Resource()
        root.putChild(b"mcp", self.mcp)
        self.site = TrackingSite(root)
        self.port = reactor.listenTCP(0, self.site, interface="127.0.0.1")  # type: ignore[arg-type]
        self.url = f"http://127.0.0.1:{self.port.getHost().port}/mcp"  # type: ignore[attr-defined]
        self.addCleanup(self._stop)

    async def _stop(self) -> None:
        await maybeDeferred(self.port.stopListening)
        for transport, gone in list(self.site.connections.items()):
            transport.abortConnection()
            await gone

    def test_a_deep_answer_fails_only_its_request(self) -> Deferred[None]:
        """A tools/call answered with a result nested too deep (a JSON body, then an SSE
        event) fails with InvalidRequest naming the depth; ping still works; a shallow
        enough one is delivered."""
        bodies: list[bytes] = []

        def on_call(request: Request, message: Any) -> None:
            body = bodies.pop(0).replace(b"@ID", json.dumps(message["id"]).encode())
            if body.startswith(b"sse:"):
                sse_start(request)
                request.write(encode_event(body[4:]))
                request.finish()
            else:
                request.setResponseCode(200)
                request.setHeader(b"content-type", b"application/json")
                request.write(body)
                request.finish()

        self.mcp.on_post["tools/call"] = on_call

        async def run() -> None:
            proto = JSONRPCProtocol(cancellation=MCP_CANCELLATION, name="scripted")
            StreamableHTTPTransport(reactor, self.url, {}, name="scripted").connect(proto)
            await proto.request("initialize", INIT_PARAMS)
            proto.notify("notifications/initialized")
            for depth in EXPLICIT_DEPTHS:
                for how in (b"", b"sse:"):
                    bodies.append(
                        how + b'{"jsonrpc":"2.0","id":@ID,"result":' + nested(depth) + b"}"
                    )
                    call = proto.request("tools/call", {"name": "deep"})
                    if depth + 1 <= LIMIT:
                        await call
                    else:
                        with pytest.raises(InvalidRequest, match="nested deeper than 254"):
                            await call
                    assert await proto.request("ping") == {}
            proto.close()
            await proto.when_closed().addErrback(lambda _: None)

        return ensureDeferred(run())
