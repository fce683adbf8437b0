"""
ACP over WebSocket (acpkit.remote.websocket): acpkit's WebSocket client and server on
loopback, then interop both ways with the official Python SDK's WebSocket transport.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast
from unittest import skipUnless

import pytest
from twisted.internet import reactor
from twisted.internet.address import IPv4Address
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IListeningPort
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import deferLater
from twisted.internet.utils import getProcessOutputAndValue
from twisted.logger import ILogObserver, formatEvent, globalLogPublisher
from twisted.trial.unittest import TestCase
from twisted.web.resource import Resource
from twisted.web.server import Site
from txaio.tx import get_global_log_level, set_global_log_level

from acpkit import schema
from acpkit.connection import Agent, AgentConnection, Client, ClientConnection, negotiate_version
from acpkit.errors import ConnectionLost
from acpkit.io.pem import certificate_options
from acpkit.jsonrpc import JSONRPCProtocol
from acpkit.remote.security import tls_serving_problem
from acpkit.remote.websocket import (
    CONNECTION_ID_HEADER,
    ACPWebSocketResource,
    WebSocketClosed,
    WebSocketConnectError,
    connect_websocket,
    set_cookies,
    websocket_resource,
)
from tests.helpers import InteropClient, cancel_autobahn_timers, child_env, start_port_server

FIXTURES = Path(__file__).parent.parent / "fixtures" / "remote_ws"
ROOT = Path(__file__).parent.parent.parent


def text(s: str) -> schema.AgentMessageChunk:
    return schema.AgentMessageChunk(content=schema.TextContentBlock(text=s))


class WsAgent(Agent):
    """
    Prompt ``wait``: a ``waiting`` chunk, then waits until cancelled (recorded).
    Prompt ``flood N``: N chunks of 1 KiB, each awaiting ``writable()``.
    Prompt ``big N``: one chunk of N bytes.
    Any other text is a file path: three chunks, a permission, a read, a write.
    """

    def __init__(self, conn: AgentConnection, events: list[str]) -> None:
        self.conn = conn
        self.events = events

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=negotiate_version(params.protocol_version)
        )

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id="ws-session")

    async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        sid = params.session_id
        block = params.prompt[0]
        assert isinstance(block, schema.TextContentBlock)
        words = block.text.split()
        if block.text == "wait":
            await self.conn.session_update(sid, text("waiting"))
            try:
                await Deferred()
            except CancelledError:
                self.events.append("turn cancelled")
                raise
        if words[0] == "flood":
            for i in range(int(words[1])):
                await self.conn.session_update(sid, text(f"{i:04d}" + "x" * 1020))
                self.events.append(f"sent {i}")
            return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)
        if words[0] == "big":
            await self.conn.session_update(sid, text("y" * int(words[1])))
            return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)
        path = block.text
        for word in ("one", " two", " three"):
            await self.conn.session_update(sid, text(word))
        permission = await self.conn.request_permission(
            schema.RequestPermissionRequest(
                session_id=sid,
                tool_call=schema.ToolCallUpdate(tool_call_id="call_1", title="read: " + path),
                options=[
                    schema.PermissionOption(
                        option_id="allow", name="Allow", kind=schema.PermissionOptionKind.ALLOW_ONCE
                    )
                ],
            )
        )
        read = await self.conn.read_text_file(schema.ReadTextFileRequest(session_id=sid, path=path))
        outcome = permission.outcome
        chosen = outcome.option_id if isinstance(outcome, schema.SelectedPermissionOutcome) else "-"
        await self.conn.session_update(sid, text(read.content.upper() + chosen))
        return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)


class WsClient(InteropClient):
    """The HTTP client tests' recording client, without fs writes: this module's agents
    only read, and a client that cannot write does not advertise it."""

    # the base method: marked unimplemented, so writeTextFile is not advertised
    write_text_file = Client.write_text_file  # type: ignore[assignment]


async def connect_and_wait(url: str) -> tuple[ClientConnection, WsClient]:
    """A client connected to ``url`` (closed by the caller)."""
    client = WsClient()
    return await connect_websocket(reactor, url, client), client


async def until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Wait, a reactor turn at a time, until ``condition()`` (fails after ``timeout``)."""
    deadline = reactor.seconds() + timeout
    while not condition():
        if reactor.seconds() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await deferLater(reactor, 0.005, lambda: None)


def listen(root: Resource) -> IListeningPort:
    """A web site serving ``root`` on a free loopback port."""
    return reactor.listenTCP(0, cast(Any, Site(root)), interface="127.0.0.1")


def port_number(port: IListeningPort) -> int:
    return cast(IPv4Address, port.getHost()).port


class _WsBase(TestCase):
    """Helpers: an acpkit WebSocket server on loopback, clients of it."""

    timeout = 30

    def setUp(self) -> None:
        self.resources: list[ACPWebSocketResource] = []
        self.addCleanup(self._settle)

    async def _settle(self) -> None:
        """After each test: every server socket closed, then no Autobahn timer left."""
        await until(lambda: not any(r.connections for r in self.resources), "the sockets to close")
        cancel_autobahn_timers()

    def serve(self, **options: Any) -> tuple[str, ACPWebSocketResource]:
        """Mount the WebSocket resource at /acp on a loopback site; returns the URL."""
        self.events: list[str] = []
        self.agents: list[AgentConnection] = []

        def make(protocol: JSONRPCProtocol) -> AgentConnection:
            conn = AgentConnection(lambda c: WsAgent(c, self.events), protocol=protocol)
            self.agents.append(conn)
            return conn

        resource = websocket_resource(make, **options)
        self.resources.append(resource)
        root = Resource()
        root.putChild(b"acp", resource)
        port = listen(root)
        self.addCleanup(port.stopListening)
        return f"ws://127.0.0.1:{port_number(port)}/acp", resource

    async def open(self, url: str, **options: Any) -> tuple[ClientConnection, WsClient]:
        client = WsClient()
        conn = await connect_websocket(reactor, url, client, **options)
        self.addCleanup(self._close, conn)
        return conn, client

    async def _close(self, conn: ClientConnection) -> None:
        conn.close()
        await conn.closed.addErrback(lambda _: None)

    async def start_session(self, conn: ClientConnection) -> str:
        await conn.initialize(
            client_capabilities=schema.ClientCapabilities(
                fs=schema.FileSystemCapabilities(read_text_file=True)
            )
        )
        session = await conn.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))
        return session.session_id

    def prompt(self, conn: ClientConnection, sid: str, words: str) -> Deferred[Any]:
        return conn.prompt(
            schema.PromptRequest(session_id=sid, prompt=[schema.TextContentBlock(text=words)])
        )


class LoopbackTests(_WsBase):
    """acpkit's WebSocket client against acpkit's WebSocket server on loopback."""

    async def _full_scenario(self) -> None:
        url, resource = self.serve()
        conn, client = await self.open(url)
        transport: Any = conn.protocol.transport
        self.assertIn(transport.connection_id, resource.connections)
        sid = await self.start_session(conn)
        self.assertEqual(sid, "ws-session")
        target = Path(self.mktemp())
        target.write_text("hello")
        done = await self.prompt(conn, sid, str(target))
        self.assertEqual(done.stop_reason, schema.StopReason.END_TURN)
        self.assertEqual(client.chunks, ["one", " two", " three", "HELLOallow"])
        self.assertEqual(client.permissions, [f"read: {target}"])
        second = self.prompt(conn, sid, "wait")
        await client.waiting
        conn.cancel(sid)
        cancelled = await second
        self.assertEqual(cancelled.stop_reason, schema.StopReason.CANCELLED)
        conn.close()
        await conn.closed
        await until(lambda: not resource.connections, "the server to forget the connection")
        self.assertTrue(self.agents[0].closed.called)

    def test_full_scenario(self) -> Deferred[None]:
        """
        initialize, session/new, a streamed prompt with a permission round trip and an fs
        read, then a cancelled prompt, over one WebSocket; the 101 names the connection,
        the server keeps it while open and forgets it after a clean close.
        """
        return Deferred.fromCoroutine(self._full_scenario())

    async def _traced(self) -> None:
        from acpkit.trace import read_trace

        path = Path(self.mktemp())
        self.patch(os, "environ", {**os.environ, "ACPKIT_TRACE": str(path)})
        url, _resource = self.serve()
        conn, _client = await self.open(url)
        await self.start_session(conn)
        seen = [
            (r.name, r.sent, r.json().get("method"), r.json().get("id"))
            for r in read_trace(str(path))
        ]
        self.assertEqual(
            seen,
            [
                ("agent", True, "initialize", 1),
                ("ws-server", False, "initialize", 1),
                ("ws-server", True, None, 1),
                ("agent", False, None, 1),
                ("agent", True, "session/new", 2),
                ("ws-server", False, "session/new", 2),
                ("ws-server", True, None, 2),
                ("agent", False, None, 2),
            ],
        )

    def test_acpkit_trace_records_both_sides(self) -> Deferred[None]:
        """With ACPKIT_TRACE set, both ends of a WebSocket trace each message both ways."""
        return Deferred.fromCoroutine(self._traced())

    async def _server_cut(self) -> None:
        url, resource = self.serve()
        conn, client = await self.open(url)
        sid = await self.start_session(conn)
        pending = self.prompt(conn, sid, "wait")
        await client.waiting
        server_ws: Any = self.agents[0].protocol.transport
        server_ws.websocket.transport.abortConnection()
        with self.assertRaises(ConnectionLost) as caught:
            await pending
        self.assertIn("1006", str(caught.exception))
        await until(lambda: "turn cancelled" in self.events, "the turn to be cancelled")
        self.assertEqual(dict(resource.connections), {})

    def test_server_socket_cut_mid_turn_fails_pending_requests(self) -> Deferred[None]:
        """
        The socket cut under a running prompt: the client's pending prompt fails at once
        with ConnectionLost naming code 1006, and the server cancels the turn.
        """
        return Deferred.fromCoroutine(self._server_cut())

    async def _client_cut(self) -> None:
        url, resource = self.serve()
        conn, client = await self.open(url)
        sid = await self.start_session(conn)
        pending = self.prompt(conn, sid, "wait")
        await client.waiting
        transport: Any = conn.protocol.transport
        transport.websocket.transport.abortConnection()
        with self.assertRaises(ConnectionLost):
            await pending
        await until(lambda: "turn cancelled" in self.events, "the turn to be cancelled")
        await until(lambda: not resource.connections, "the server to drop the connection")
        reason = self.agents[0].closed_reason
        assert reason is not None
        self.assertIn("1006", str(reason.value))

    def test_client_socket_cut_cancels_the_sessions_turns(self) -> Deferred[None]:
        """
        The client's socket cut mid-turn: the server ends that connection (its running
        turn is cancelled, it leaves the registry) with a reason naming code 1006.
        """
        return Deferred.fromCoroutine(self._client_cut())

    async def _no_leak(self) -> None:
        url, resource = self.serve()

        def open_fds() -> int:
            return len(os.listdir("/proc/self/fd"))

        # A first connection makes what the reactor creates once (its resolver's thread).
        first, _ = await connect_and_wait(url)
        first.close()
        await first.closed
        await until(lambda: not resource.connections, "the first connection to end")
        before = open_fds()
        for round_ in range(10):
            conn, client = await connect_and_wait(url)
            sid = await self.start_session(conn)
            pending = self.prompt(conn, sid, "wait")
            await client.waiting
            transport: Any = conn.protocol.transport
            if round_ % 2:
                transport.websocket.transport.abortConnection()  # cut
            else:
                conn.close()  # clean
            await pending.addErrback(lambda _: None)
            await conn.closed.addErrback(lambda _: None)
        await until(lambda: not resource.connections, "the server to forget them all")
        await until(lambda: open_fds() == before, f"the descriptors to return to {before}")
        self.assertEqual(self.events.count("turn cancelled"), 10)
        self.assertEqual([a.closed_reason is not None for a in self.agents], [True] * 11)

    @skipUnless(os.path.isdir("/proc/self/fd"), "counts descriptors in /proc/self/fd")
    def test_cut_and_closed_connections_leak_nothing(self) -> Deferred[None]:
        """
        Ten connections ended mid-turn (five cut, five closed): every turn cancelled,
        the server's registry empty and the process's file descriptors back to their
        count before.
        """
        return Deferred.fromCoroutine(self._no_leak())

    async def _going_away(self, from_client: bool) -> None:
        url, resource = self.serve()
        conn, _client = await self.open(url)
        await self.start_session(conn)
        (agent,) = self.agents
        closer = conn if from_client else agent
        websocket: Any = cast(Any, closer.protocol.transport).websocket
        websocket.sendCloseFrame(code=1001, reasonUtf8=b"tab closed", isReply=False)
        ended = [await agent.closed, await conn.closed]  # type: ignore[func-returns-value]
        self.assertEqual(ended, [None, None])
        await until(lambda: not resource.connections, "the server to forget the connection")

    def test_client_going_away_1001_is_a_clean_end_on_both_sides(self) -> Deferred[None]:
        """
        The client closes with 1001 "going away" (a browser tab closing): the agent's
        and the client's ``closed`` both succeed (None), as for 1000.
        """
        return Deferred.fromCoroutine(self._going_away(from_client=True))

    def test_server_going_away_1001_is_a_clean_end_on_both_sides(self) -> Deferred[None]:
        """
        The server closes with 1001 "going away" (shutting down): both ``closed``
        Deferreds succeed (None).
        """
        return Deferred.fromCoroutine(self._going_away(from_client=False))

    async def _other_code(self) -> None:
        url, resource = self.serve()
        conn, _client = await self.open(url)
        await self.start_session(conn)
        (agent,) = self.agents
        websocket: Any = cast(Any, agent.protocol.transport).websocket
        websocket.sendClose(code=4001, reason="no more")
        for closed in (agent.closed, conn.closed):
            with self.assertRaises(WebSocketClosed) as caught:
                await closed
            self.assertEqual((caught.exception.code, caught.exception.reason), (4001, "no more"))
        await until(lambda: not resource.connections, "the server to forget the connection")

    def test_other_close_codes_fail_closed_with_the_code_and_reason(self) -> Deferred[None]:
        """
        A close with any code but 1000 and 1001 (here 4001): both sides' ``closed``
        fail with WebSocketClosed carrying the code and the reason.
        """
        return Deferred.fromCoroutine(self._other_code())

    async def _agent_fails(self) -> None:
        events = self.capture_debug_logs()

        def broken(protocol: JSONRPCProtocol) -> AgentConnection:
            raise RuntimeError("no agent today")

        root = Resource()
        resource = websocket_resource(broken)
        self.resources.append(resource)
        root.putChild(b"acp", resource)
        port = listen(root)
        self.addCleanup(port.stopListening)
        conn, _client = await self.open(f"ws://127.0.0.1:{port_number(port)}/acp")
        with self.assertRaises(WebSocketClosed) as caught:
            await conn.closed
        self.assertEqual(caught.exception.code, 1011)
        logged = self.flushLoggedErrors(RuntimeError)
        self.assertEqual([str(f.value) for f in logged], ["no agent today"])
        self.assertIn("could not be made", "".join(formatEvent(e) or "" for e in events))

    def test_agent_factory_failure_closes_1011_and_is_logged(self) -> Deferred[None]:
        """
        make_agent_connection raising: the socket is closed with 1011 (internal error)
        and the exception is logged on the server.
        """
        return Deferred.fromCoroutine(self._agent_fails())

    async def _client_fails(self) -> None:
        url, resource = self.serve()

        def broken(conn: ClientConnection) -> WsClient:
            raise ValueError("no client today")

        with self.assertRaises(ValueError) as caught:
            await connect_websocket(reactor, url, broken)
        self.assertEqual(str(caught.exception), "no client today")
        await until(lambda: not resource.connections, "the server to drop the connection")

    def test_client_factory_failure_fails_connect(self) -> Deferred[None]:
        """
        The client callable raising: connect_websocket's Deferred fails with its
        exception and the socket is closed.
        """
        return Deferred.fromCoroutine(self._client_fails())

    async def _binary(self) -> None:
        url, _resource = self.serve()
        conn, _client = await self.open(url)
        transport: Any = conn.protocol.transport
        transport.websocket.sendMessage(b'{"jsonrpc":"2.0","id":99,"method":"x"}', isBinary=True)
        sid = await self.start_session(conn)
        self.assertEqual(sid, "ws-session")
        server_ws: Any = self.agents[0].protocol.transport
        self.assertEqual(server_ws.websocket.binary_frames_ignored, 1)

    def test_binary_frame_ignored(self) -> Deferred[None]:
        """A binary frame is ignored (not answered, not an error); text frames go on."""
        return Deferred.fromCoroutine(self._binary())

    async def _not_json(self) -> None:
        url, _resource = self.serve()
        conn, _client = await self.open(url)
        received: list[bytes] = []
        engine_received = conn.protocol.dataReceived

        def record(data: bytes) -> None:
            received.append(data)
            engine_received(data)

        conn.protocol.dataReceived = record  # type: ignore[method-assign]
        transport: Any = conn.protocol.transport
        transport.websocket.sendMessage(b"not json", isBinary=False)
        transport.websocket.sendMessage(b"[1, 2]", isBinary=False)
        await until(lambda: len(received) == 2, "two answers")
        codes = [json.loads(frame)["error"]["code"] for frame in received]
        self.assertEqual(codes, [-32700, -32600])
        self.assertEqual(await self.start_session(conn), "ws-session")

    def test_text_frame_not_json_is_answered_as_over_stdio(self) -> Deferred[None]:
        """
        A text frame that is not JSON is answered -32700, a JSON array -32600 (as over
        stdio; the SDK drops both silently); the connection goes on.
        """
        return Deferred.fromCoroutine(self._not_json())

    async def _bad_utf8(self) -> None:
        url, resource = self.serve()
        conn, _client = await self.open(url)
        transport: Any = conn.protocol.transport
        transport.websocket.sendMessage(b'{"x": "\xff"}', isBinary=False)
        with self.assertRaises(WebSocketClosed) as caught:
            await conn.closed
        self.assertEqual(caught.exception.code, 1007)
        await until(lambda: not resource.connections, "the server to drop the connection")

    def test_invalid_utf8_text_frame_closes_1007(self) -> Deferred[None]:
        """A text frame that is not UTF-8 closes the WebSocket with 1007."""
        return Deferred.fromCoroutine(self._bad_utf8())

    async def _oversized_to_server(self) -> None:
        url, resource = self.serve(max_message_size=10_000)
        conn, _client = await self.open(url)
        sid = await self.start_session(conn)
        with self.assertRaises(ConnectionLost) as caught:
            await self.prompt(conn, sid, "z" * 20_000)
        self.assertIn("code 1009", str(caught.exception))
        await until(lambda: not resource.connections, "the server to drop the connection")

    def test_oversized_message_to_server_closes_1009(self) -> Deferred[None]:
        """
        A message over the server's max_message_size: the server closes with 1009
        (message too big) and the client's pending request fails naming it.
        """
        return Deferred.fromCoroutine(self._oversized_to_server())

    async def _hundred_megabytes(self) -> None:
        url, resource = self.serve(max_message_size=1024 * 1024)
        conn, _client = await self.open(url)
        await self.start_session(conn)
        transport: Any = conn.protocol.transport
        # The head of a masked 100 MB text frame, and none of its payload: the server
        # must refuse it from the header alone, without waiting for (or buffering) it.
        head = b"\x81\xff" + (100 * 1024 * 1024).to_bytes(8, "big") + b"\x00\x00\x00\x00"
        transport.websocket.transport.write(head)
        with self.assertRaises(WebSocketClosed) as caught:
            await conn.closed
        self.assertEqual(caught.exception.code, 1009)
        await until(lambda: not resource.connections, "the server to drop the connection")

    def test_hundred_megabyte_frame_refused_from_its_header(self) -> Deferred[None]:
        """
        A frame announcing 100 MB to a server limited to 1 MiB is refused at once, from
        its header (no payload sent): close 1009, the connection forgotten.
        """
        return Deferred.fromCoroutine(self._hundred_megabytes())

    async def _oversized_to_client(self) -> None:
        url, resource = self.serve()
        conn, _client = await self.open(url, max_message_size=10_000)
        sid = await self.start_session(conn)
        with self.assertRaises(ConnectionLost) as caught:
            await self.prompt(conn, sid, "big 20000")
        self.assertIn("code 1009", str(caught.exception))
        await until(lambda: not resource.connections, "the server to drop the connection")

    def test_oversized_message_to_client_closes_1009(self) -> Deferred[None]:
        """
        A message over the client's max_message_size: the client closes with 1009 and
        its pending request fails naming it; the server forgets the connection.
        """
        return Deferred.fromCoroutine(self._oversized_to_client())

    async def _cookies(self) -> None:
        seen: list[str | None] = []

        def headers(request: Any) -> dict[str, Any]:
            seen.append(request.headers.get("cookie"))
            return {
                "Set-Cookie": [
                    "affinity=node-7; Path=/; HttpOnly",
                    "other=x; Expires=Wed, 21 Oct 2026 07:28:00 GMT; Secure",
                ]
            }

        url, _resource = self.serve(response_headers=headers)
        jar: dict[str, str] = {}
        first, _ = await self.open(url, cookies=jar)
        self.assertEqual(jar, {"affinity": "node-7", "other": "x"})
        transport: Any = first.protocol.transport
        self.assertEqual(
            transport.response_headers[CONNECTION_ID_HEADER.lower()], transport.connection_id
        )
        await self.open(url, cookies=jar)
        self.assertEqual(seen, [None, "affinity=node-7; other=x"])

    def test_cookies_kept_and_sent_back(self) -> Deferred[None]:
        """
        Set-Cookie on the 101 lands in the caller's cookie mapping (attributes and
        Expires commas dropped); a handshake made with that mapping sends them back.
        """
        return Deferred.fromCoroutine(self._cookies())

    async def _backpressure(self) -> None:
        url, _resource = self.serve()
        conn, client = await self.open(url)
        sid = await self.start_session(conn)
        transport: Any = conn.protocol.transport
        transport.websocket.transport.pauseProducing()  # the client stops reading
        turn = self.prompt(conn, sid, "flood 4000")
        server = self.agents[0].protocol
        await until(lambda: server._write_paused, "the server's transport to pause the engine")
        await until(lambda: len(self.events) > 0, "the agent to write")
        sent_when_paused = len(self.events)
        tcp: Any = server.transport.websocket.transport  # type: ignore[union-attr]
        buffered = len(tcp.dataBuffer) + sum(map(len, tcp._tempDataBuffer))
        # 4000 chunks are 4 MB: far fewer went out, and the socket buffer stays bounded.
        self.assertLess(sent_when_paused, 1000)
        self.assertLess(buffered, 1024 * 1024)
        transport.websocket.transport.resumeProducing()
        done = await turn
        self.assertEqual(done.stop_reason, schema.StopReason.END_TURN)
        self.assertEqual(len(client.chunks), 4000)

    def test_slow_reader_pauses_the_stream(self) -> Deferred[None]:
        """
        A client that stops reading pauses the agent's stream (writable() waits) with a
        bounded send buffer; once it reads again the whole stream arrives, in order.
        """
        return Deferred.fromCoroutine(self._backpressure())

    async def _dead_peer(self) -> None:
        url, resource = self.serve(auto_ping_interval=1.0, auto_ping_timeout=1.0)
        conn, _client = await self.open(url, auto_ping_interval=None)
        sid = await self.start_session(conn)
        self.prompt(conn, sid, "wait").addErrback(lambda _: None)
        await until(lambda: bool(self.agents[0].protocol._dispatch.running), "the turn")
        transport: Any = conn.protocol.transport
        transport.websocket.transport.pauseProducing()  # a peer that answers nothing
        await until(lambda: not resource.connections, "the server to drop the dead peer")
        self.assertIn("turn cancelled", self.events)
        reason = self.agents[0].closed_reason
        assert reason is not None
        self.assertIn("WebSocket closed with code", str(reason.value))
        transport.websocket.transport.resumeProducing()
        await conn.closed.addErrback(lambda _: None)

    def test_unanswered_ping_drops_the_connection(self) -> Deferred[None]:
        """
        A peer that stops answering (no pong within auto_ping_timeout) is dropped: the
        connection ends, its running turn is cancelled.
        """
        return Deferred.fromCoroutine(self._dead_peer())

    async def _refused(self) -> None:
        port = listen(Resource())
        number = port_number(port)
        await cast("Deferred[None]", port.stopListening())
        with self.assertRaises(WebSocketConnectError) as caught:
            await connect_websocket(reactor, f"ws://127.0.0.1:{number}/acp?k=v", WsClient())
        message = str(caught.exception)
        self.assertIn(f"could not connect to ws://127.0.0.1:{number}/acp:", message)
        self.assertNotIn("k=v", message)

    def test_connection_refused_is_one_clear_error(self) -> Deferred[None]:
        """Nobody listening: WebSocketConnectError naming the URL without its query."""
        return Deferred.fromCoroutine(self._refused())

    def capture_debug_logs(self) -> list[dict[str, Any]]:
        """Every log event from now on, with txaio (Autobahn's logging) at debug level."""
        events: list[dict[str, Any]] = []
        observer = cast(ILogObserver, events.append)
        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)
        level = get_global_log_level()
        set_global_log_level("debug")
        self.addCleanup(set_global_log_level, level)
        return events

    def silent_server(self) -> tuple[str, list[Protocol]]:
        """A TCP server that accepts and never answers; the URL and its connections."""
        accepted: list[Protocol] = []

        class Silent(Protocol):
            def connectionMade(self) -> None:
                accepted.append(self)

        port = reactor.listenTCP(0, cast(Any, Factory.forProtocol(Silent)), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        return f"ws://127.0.0.1:{port_number(port)}/acp", accepted

    async def _open_timeout(self) -> None:
        url, accepted = self.silent_server()
        with self.assertRaises(WebSocketConnectError) as caught:
            await connect_websocket(reactor, url, WsClient(), open_timeout=1.0)
        self.assertIn("opening handshake timeout", str(caught.exception))
        await until(lambda: not cast(Any, accepted[0].transport).connected, "the socket to close")
        cancel_autobahn_timers()

    def test_server_that_never_answers_the_handshake(self) -> Deferred[None]:
        """
        No answer to the upgrade within open_timeout: one WebSocketConnectError, the
        socket closed.
        """
        return Deferred.fromCoroutine(self._open_timeout())

    async def _cancelled(self) -> None:
        url, accepted = self.silent_server()
        connecting = connect_websocket(reactor, url, WsClient())
        await until(lambda: bool(accepted), "the server to accept")
        connecting.cancel()
        with self.assertRaises(CancelledError):
            await connecting
        await until(lambda: not cast(Any, accepted[0].transport).connected, "the socket to close")
        cancel_autobahn_timers()

    def test_cancelling_connect_drops_the_socket(self) -> Deferred[None]:
        """Cancelling connect_websocket's Deferred mid-handshake closes the socket."""
        return Deferred.fromCoroutine(self._cancelled())

    async def _handshake_failed(self) -> None:
        url, _resource = self.serve()
        events = self.capture_debug_logs()
        with self.assertRaises(WebSocketConnectError) as caught:
            await connect_websocket(
                reactor,
                url.replace("/acp", "/nothing-here"),
                WsClient(),
                headers={"Authorization": "Bearer s3cret-token"},
            )
        message = str(caught.exception)
        self.assertIn("handshake with ws://127.0.0.1:", message)
        self.assertIn("404", message)
        self.assertNotIn("s3cret", message)
        self.assertNotIn("s3cret", repr(events))

    async def _token_not_logged(self) -> None:
        url, _resource = self.serve()
        events = self.capture_debug_logs()
        conn, _client = await self.open(url, headers={"Authorization": "Bearer s3cret-token"})
        await self.start_session(conn)
        self.assertGreater(len(events), 0)
        self.assertNotIn("s3cret", repr(events))
        self.assertNotIn("s3cret", "".join(formatEvent(e) for e in events))

    def test_bearer_token_never_logged_even_at_debug_level(self) -> Deferred[None]:
        """
        With txaio at debug level (where Autobahn logs raw handshakes), neither side's
        log events contain the bearer token of a successful connection.
        """
        return Deferred.fromCoroutine(self._token_not_logged())

    def test_handshake_failure_is_one_clear_error_without_the_token(self) -> Deferred[None]:
        """
        A non-101 answer (404): WebSocketConnectError with the status; the bearer token
        appears neither in the error nor in any log event.
        """
        return Deferred.fromCoroutine(self._handshake_failed())

    def test_url_scheme_and_credentials_checked(self) -> None:
        """Only ws:// and wss://; user info in the URL is refused (tokens go in headers)."""
        with self.assertRaises(ValueError):
            connect_websocket(reactor, "http://127.0.0.1:1/acp", WsClient())
        with self.assertRaises(ValueError):
            connect_websocket(reactor, "ws://user:pw@127.0.0.1:1/acp", WsClient())


class ServeRemoteTests(_WsBase):
    """connect_websocket against serve_remote's /acp endpoint (the upgrade after its checks)."""

    async def _serve_remote(self) -> None:
        from acpkit.remote import serve_remote

        self.events = []
        port = await serve_remote(
            reactor,
            "tcp:0:interface=127.0.0.1",
            lambda conn: WsAgent(conn, self.events),
            token="sekrit",
        )
        self.addCleanup(port.stopListening)
        url = f"ws://127.0.0.1:{port_number(port)}/acp"
        with self.assertRaises(WebSocketConnectError) as caught:
            await connect_websocket(reactor, url, WsClient())
        self.assertIn("401", str(caught.exception))
        conn, client = await self.open(url, headers={"Authorization": "Bearer sekrit"})
        sid = await self.start_session(conn)
        pending = self.prompt(conn, sid, "wait")
        await client.waiting
        conn.cancel(sid)
        self.assertEqual((await pending).stop_reason, schema.StopReason.CANCELLED)

    def test_upgrade_through_serve_remote_checks_the_token(self) -> Deferred[None]:
        """
        serve_remote delegates GET /acp with Upgrade: websocket to this transport after
        its checks: no bearer token is one WebSocketConnectError naming the 401; with it,
        a session and a cancelled turn work over the WebSocket.
        """
        return Deferred.fromCoroutine(self._serve_remote())


def self_signed_localhost() -> tuple[bytes, bytes]:
    """A throwaway key and certificate (PEM) for ``localhost`` and ``127.0.0.1``."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


@pytest.mark.skipif(tls_serving_problem() is not None, reason=tls_serving_problem() or "")
class TLSTests(_WsBase):
    """wss:// on loopback with a certificate of our own."""

    def serve_tls(self) -> tuple[str, bytes]:
        from twisted.internet.ssl import CertificateOptions, PrivateCertificate

        self.events = []
        self.agents = []

        def make(protocol: JSONRPCProtocol) -> AgentConnection:
            conn = AgentConnection(lambda c: WsAgent(c, self.events), protocol=protocol)
            self.agents.append(conn)
            return conn

        root = Resource()
        resource = websocket_resource(make)
        self.resources.append(resource)
        root.putChild(b"acp", resource)
        key_pem, cert_pem = self_signed_localhost()
        options = CertificateOptions(
            **certificate_options(PrivateCertificate.loadPEM(key_pem + cert_pem))
        )
        port = cast(Any, reactor).listenSSL(0, Site(root), options, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        return f"wss://localhost:{port_number(port)}/acp", cert_pem

    async def _wss(self) -> None:
        from twisted.internet.ssl import Certificate, optionsForClientTLS

        url, cert_pem = self.serve_tls()
        trust = optionsForClientTLS("localhost", trustRoot=Certificate.loadPEM(cert_pem))
        conn, _client = await self.open(url, tls_options=trust)
        self.assertEqual(await self.start_session(conn), "ws-session")
        with self.assertRaises(WebSocketConnectError) as caught:
            await connect_websocket(reactor, url, WsClient())
        self.assertIn(" wss://localhost:", str(caught.exception))
        self.assertIn("certificate verify failed", str(caught.exception))

    def test_wss_checks_the_certificate(self) -> Deferred[None]:
        """
        wss:// works with tls_options trusting the server's certificate; without them
        the system trust store refuses the self-signed certificate: one
        WebSocketConnectError saying so.
        """
        return Deferred.fromCoroutine(self._wss())


def test_tls_and_tls_options_together_are_refused() -> None:
    """connect_websocket takes ClientTLS (tls) or a Twisted creator (tls_options), not both."""
    from twisted.internet.ssl import optionsForClientTLS

    from acpkit.http.tls import ClientTLS

    with pytest.raises(ValueError, match="give tls or tls_options, not both"):
        connect_websocket(
            reactor,
            "wss://localhost:1/acp",
            WsClient(),
            tls=ClientTLS(),
            tls_options=optionsForClientTLS("localhost"),
        )


@pytest.mark.process
class SdkInteropTests(_WsBase):
    """The official Python SDK's WebSocket transport against acpkit's, both ways."""

    timeout = 60

    async def _sdk_client(self) -> None:
        seen: list[tuple[str | None, str | None]] = []

        def headers(request: Any) -> dict[str, Any]:
            seen.append((request.headers.get("authorization"), request.headers.get("cookie")))
            return {"Set-Cookie": "affinity=node-3; Path=/acp; HttpOnly"}

        url, resource = self.serve(response_headers=headers)
        target = Path(self.mktemp())
        target.write_text("hello")
        out, err, code = await getProcessOutputAndValue(
            sys.executable,
            [str(FIXTURES / "sdk_ws_client.py"), url, str(target.resolve())],
            env=child_env(),
        )
        self.assertEqual(code, 0, err.decode("utf-8", "replace"))
        self.assertEqual(
            json.loads(out),
            {
                "protocolVersion": 1,
                "sessionId": "ws-session",
                "chunks": ["one", " two", " three", "HELLOallow", "waiting"],
                "permissions": [f"read: {target.resolve()}"],
                "first": "end_turn",
                "second": "cancelled",
                "cookie": "affinity=node-3",
            },
        )
        self.assertEqual(seen, [("Bearer interop-token", None)])
        await until(lambda: not resource.connections, "the server to forget the connection")
        self.assertIn("turn cancelled", self.events)

    def test_sdk_client_drives_acpkit_agent(self) -> Deferred[None]:
        """
        The SDK's WebSocket client (bearer header, cookie store) completes initialize,
        session/new, a streamed prompt with permission and fs read, and a cancelled
        prompt against an acpkit agent behind websocket_resource; it keeps the cookie
        of the 101.
        """
        return Deferred.fromCoroutine(self._sdk_client())

    async def start_sdk_server(self) -> tuple[str, Callable[[], Deferred[None]]]:
        """The SDK's server in a child process: its URL, and how to kill it."""
        port, process, server = await start_port_server(
            self.addCleanup, [sys.executable, str(FIXTURES / "sdk_ws_server.py")]
        )

        def kill() -> Deferred[None]:
            if not server.ended.called:
                process.signalProcess("KILL")
            done: Deferred[None] = Deferred()
            server.ended.addBoth(lambda _: None).chainDeferred(done)
            return done

        return f"ws://127.0.0.1:{port}/acp", kill

    async def _sdk_server(self) -> None:
        url, _kill = await self.start_sdk_server()
        jar: dict[str, str] = {}
        conn, client = await self.open(url, headers={"Authorization": "Bearer t"}, cookies=jar)
        transport: Any = conn.protocol.transport
        self.assertTrue(transport.connection_id)
        sid = await self.start_session(conn)
        self.assertEqual(sid, "sdk-ws-session")
        target = Path(self.mktemp())
        target.write_text("hello")
        done = await self.prompt(conn, sid, str(target))
        self.assertEqual(done.stop_reason, schema.StopReason.END_TURN)
        self.assertEqual(client.chunks, ["one", " two", " three", "HELLOallow"])
        self.assertEqual(client.permissions, [f"read: {target}"])
        second = self.prompt(conn, sid, "wait")
        await client.waiting
        conn.cancel(sid)
        cancelled = await second
        self.assertEqual(cancelled.stop_reason, schema.StopReason.CANCELLED)
        conn.close()
        await conn.closed

    def test_acpkit_client_drives_sdk_agent(self) -> Deferred[None]:
        """
        acpkit's connect_websocket completes the same scenario against the SDK's own
        WebSocket server (its ASGI app under uvicorn), which names the connection in
        the 101.
        """
        return Deferred.fromCoroutine(self._sdk_server())

    async def _sdk_server_dies(self) -> None:
        url, kill = await self.start_sdk_server()
        conn, client = await self.open(url)
        sid = await self.start_session(conn)
        pending = self.prompt(conn, sid, "wait")
        await client.waiting
        await kill()
        with self.assertRaises(ConnectionLost) as caught:
            await pending
        self.assertIn("1006", str(caught.exception))

    def test_sdk_server_killed_mid_turn_fails_the_pending_prompt(self) -> Deferred[None]:
        """
        The SDK's server process killed during a turn: the pending prompt fails at once
        with ConnectionLost naming code 1006 (no reconnect, no hang).
        """
        return Deferred.fromCoroutine(self._sdk_server_dies())


def test_set_cookies_reads_each_set_cookie_line() -> None:
    """Each Set-Cookie line gives its name=value; attributes and other headers ignored."""
    raw = (
        b"HTTP/1.1 101 Switching Protocols\r\nSet-Cookie: a=1; Path=/\r\n"
        b"X-Set-Cookie: no=pe\r\nset-cookie:b = 2 ; Expires=Wed, 21 Oct 2026 07:28:00 GMT\r\n"
        b"Set-Cookie: broken\r\n\r\n"
    )
    assert set_cookies(raw) == {"a": "1", "b": "2"}
