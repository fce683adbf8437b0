"""
Remote ACP under faults (issue 17): a socket cut mid-turn, a half-open event stream, a
slow reader, a 100 MB message, an unknown connection id, a replayed ``DELETE``.

Each test serves an agent on a real loopback port in this process (``ACPResource`` in a
``RemoteSite``, its timers on a :class:`~twisted.internet.task.Clock` so the grace period
is advanced, not waited for) and drives it with raw HTTP requests (treq, no connection
reuse) or acpkit's WebSocket client. Before and after, it counts the server's open
connections and this process's open file descriptors (``/proc/self/fd``): after the
fault both are back where they started, and nothing waits forever.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from treq.client import HTTPClient
from twisted.internet import reactor
from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.internet.interfaces import IListeningPort
from twisted.internet.protocol import Protocol, connectionDone
from twisted.internet.task import Clock, deferLater
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent as WebAgent
from twisted.web.client import HTTPConnectionPool
from twisted.web.http_headers import Headers
from twisted.web.iweb import IBodyProducer
from zope.interface import implementer

from acpkit import schema
from acpkit.connection import Agent, AgentConnection, Client, negotiate_version
from acpkit.remote.server import ACPResource, RemoteLimits, RemoteSite
from tests.helpers import cancel_autobahn_timers

pytest.importorskip("autobahn")

MiB = 1024 * 1024


def open_fds() -> int:
    """
    This process's open file descriptors that are sockets or files, less ``/dev/null``:
    pipes, anonymous inodes and ``/dev/null`` are the reactor's and the interpreter's
    own plumbing (wakers, the thread pool of the first name lookup), opened once per
    process by whichever test comes first.
    """
    plumbing = ("pipe:", "anon_inode:", "/dev/null")
    return sum(1 for link in fd_links() if not link.split(":", 1)[1].startswith(plumbing))


def fd_links() -> list[str]:
    """What each open descriptor is (for failure messages)."""
    links = []
    for fd in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:"):
            link += describe_socket(int(fd))
        links.append(f"{fd}:{link}")
    return links


def describe_socket(fd: int) -> str:
    """`` local->peer`` of a socket descriptor, as far as it says."""
    try:
        with socket.socket(fileno=os.dup(fd)) as sock:
            try:
                return f" {sock.getsockname()}->{sock.getpeername()}"
            except OSError:
                return f" {sock.getsockname()}"
    except OSError as e:
        return f" ({e})"


def rss() -> int:
    """This process's resident memory now, in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def until(predicate: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    """Wait (on the reactor, checking every 10 ms) until ``predicate()``; fail after
    ``timeout`` seconds saying ``what`` never happened."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await deferLater(reactor, 0.01, lambda: None)


class FaultAgent(Agent):
    """``wait``: a ``waiting`` chunk, then until cancelled; ``stream N SIZE``: N chunks of
    SIZE bytes, counted in ``sent``."""

    def __init__(self, conn: AgentConnection) -> None:
        self.conn = conn
        self.cancelled: list[str] = []
        self.sent = 0
        self.ended: list[Failure | None] = []
        conn.closed.addBoth(self.ended.append)

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=negotiate_version(params.protocol_version)
        )

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id="s1")

    async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        block = params.prompt[0]
        assert isinstance(block, schema.TextContentBlock)
        words = block.text.split()
        sid = params.session_id
        try:
            if words[0] == "wait":
                await self.conn.session_update(sid, chunk("waiting"))
                await Deferred()
            for _ in range(int(words[1])):
                await self.conn.session_update(sid, chunk("x" * int(words[2])))
                self.sent += 1
        except CancelledError:
            self.cancelled.append(sid)
            raise
        return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)


def chunk(text: str) -> schema.AgentMessageChunk:
    return schema.AgentMessageChunk(content=schema.TextContentBlock(text=text))


class Collect(Protocol):
    """
    A streamed response body; ``got(predicate)`` fires once the data holds (a search
    for a short marker: after the first check, only the newly arrived tail is tested,
    so a long stream costs linear time).
    """

    def __init__(self) -> None:
        self.data = bytearray()
        self.waiters: list[tuple[Callable[[bytes], bool], Deferred[None]]] = []
        self.done: Deferred[None] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        start = max(0, len(self.data) - 256)
        self.data += data
        tail = bytes(self.data[start:])
        for waiter in list(self.waiters):
            if waiter[0](tail):
                self.waiters.remove(waiter)
                waiter[1].callback(None)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if not self.done.called:
            self.done.callback(None)

    def got(self, predicate: Callable[[bytes], bool]) -> Deferred[None]:
        d: Deferred[None] = Deferred()
        if predicate(bytes(self.data)):
            d.callback(None)
        else:
            self.waiters.append((predicate, d))
        return d

    def cut(self) -> None:
        """Drop the TCP connection under the body at once (no FIN handshake wait)."""
        assert self.transport is not None
        self.transport.stopProducing()  # type: ignore[attr-defined]


@implementer(IBodyProducer)
class ZerosBody:
    """``length`` bytes of body, written 1 MiB at a time from one buffer and only while
    the transport takes them (a pausable producer): the client never holds the body.
    ``on_chunk`` runs after each MiB (to sample memory)."""

    def __init__(self, length: int, on_chunk: Callable[[], None]) -> None:
        self.length = length
        self._left = length
        self._on_chunk = on_chunk
        self._paused = False
        self._consumer: Any = None
        self._done: Deferred[None] = Deferred()
        self._buffer = b"0" * MiB

    def startProducing(self, consumer: Any) -> Deferred[None]:
        self._consumer = consumer
        self._write()
        return self._done

    def _write(self) -> None:
        while self._left > 0 and not self._paused:
            piece = self._buffer[: min(MiB, self._left)]
            self._left -= len(piece)
            self._consumer.write(piece)
            self._on_chunk()
        if self._left == 0 and not self._done.called:
            self._done.callback(None)

    def pauseProducing(self) -> None:
        self._paused = True

    def resumeProducing(self) -> None:
        self._paused = False
        self._write()

    def stopProducing(self) -> None:
        self._paused = True


class Server:
    """An agent endpoint on a loopback port, its timers on ``clock``."""

    def __init__(self, case: TestCase, limits: RemoteLimits) -> None:
        self.clock = Clock()
        self.agents: list[FaultAgent] = []
        self.resource = ACPResource(self._agent, clock=self.clock, limits=limits)
        site = RemoteSite(self.resource, b"/acp", reactor)
        self.port: IListeningPort = reactor.listenTCP(0, site, interface="127.0.0.1")  # type: ignore[arg-type]
        case.addCleanup(self.port.stopListening)
        self.url = f"http://127.0.0.1:{self.port.getHost().port}/acp"  # type: ignore[attr-defined]
        pool = HTTPConnectionPool(reactor, persistent=False)
        self.http = HTTPClient(WebAgent(reactor, pool=pool))

    def _agent(self, conn: AgentConnection) -> FaultAgent:
        self.agents.append(FaultAgent(conn))
        return self.agents[-1]

    def open_connections(self) -> int:
        return self.resource.open_connections()

    async def post(self, message: dict[str, Any], cid: str | None = None, **extra: str) -> Any:
        headers = Headers({"Content-Type": ["application/json"]})
        if cid is not None:
            headers.addRawHeader("Acp-Connection-Id", cid)
        for name, value in extra.items():
            headers.addRawHeader(name.replace("_", "-"), value)
        response = await self.http.post(
            self.url, data=json.dumps(message).encode(), headers=headers
        )
        response.body = await response.content()
        return response

    async def request(self, method: str, cid: str) -> Any:
        headers = Headers({"Acp-Connection-Id": [cid], "Accept": ["text/event-stream"]})
        response = await self.http.request(method, self.url, headers=headers)
        response.body = await response.content()
        return response

    async def initialize(self) -> str:
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize"}
        init["params"] = {"protocolVersion": 1}
        response = await self.post(init)
        assert response.code == 200, response.body
        cid: str = response.headers.getRawHeaders("Acp-Connection-Id")[0]
        return cid

    async def stream(self, cid: str) -> Collect:
        headers = Headers({"Accept": ["text/event-stream"], "Acp-Connection-Id": [cid]})
        response = await self.http.get(self.url, headers=headers)
        assert response.code == 200
        body = Collect()
        response.deliverBody(body)
        return body

    async def session_and_prompt(self, cid: str, text: str) -> None:
        new = {"jsonrpc": "2.0", "id": 1, "method": "session/new"}
        new["params"] = {"cwd": "/", "mcpServers": []}
        assert (await self.post(new, cid)).code == 202
        params = {"sessionId": "s1", "prompt": [{"type": "text", "text": text}]}
        prompt = {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": params}
        assert (await self.post(prompt, cid, Acp_Session_Id="s1")).code == 202

    def connection(self, cid: str) -> Any:
        return self.resource.connections[cid]


class FaultTests(TestCase):
    """Each fault on a loopback server; open connections and fds counted around it."""

    timeout = 60

    def setUp(self) -> None:
        self.fds_before = open_fds()

    async def settled(self, server: Server) -> None:
        """Nothing left: no connection open on the server, and every socket the test
        opened closed again (this process's fd count back to where it started, plus the
        listening port)."""
        await until(lambda: server.open_connections() == 0, "the server's connections to end")
        await until(
            lambda: open_fds() <= self.fds_before + 1,
            f"fds back to {self.fds_before + 1} (now {open_fds()}: {fd_links()})",
        )
        cancel_autobahn_timers()

    async def test_http_socket_cut_mid_turn(self) -> None:
        """
        The event stream's socket cut while a turn runs: the connection waits out the
        grace period (the client may come back), then the turn is cancelled, the agent's
        connection ends, the id is forgotten; no socket is left.
        """
        server = Server(self, RemoteLimits(grace_period=30))
        cid = await server.initialize()
        body = await server.stream(cid)
        await server.session_and_prompt(cid, "wait")
        await body.got(lambda data: b"waiting" in data)
        assert server.open_connections() == 1
        body.cut()
        await body.done
        await until(lambda: server.connection(cid).stream is None, "the server to see the cut")
        agent = server.agents[0]
        server.clock.advance(29)
        assert agent.cancelled == [] and agent.ended == []  # still within the grace period
        server.clock.advance(1)
        assert agent.cancelled == ["s1"]
        assert len(agent.ended) == 1 and "no event stream" in str(agent.ended[0])
        assert cid not in server.resource.connections
        await self.settled(server)

    async def test_websocket_socket_cut_mid_turn(self) -> None:
        """
        The WebSocket's TCP connection cut (no close frame) while a turn runs: at once,
        the turn is cancelled, the agent's connection ends with code 1006, the server
        forgets it; no socket is left.
        """
        from acpkit.remote.websocket import connect_websocket

        server = Server(self, RemoteLimits())
        waiting: Deferred[None] = Deferred()

        class Waits(Client):
            def session_update(self, params: schema.SessionNotification) -> None:
                if not waiting.called:
                    waiting.callback(None)

        conn = await connect_websocket(
            reactor, server.url.replace("http", "ws", 1), Waits(), auto_ping_interval=None
        )
        await conn.initialize()
        session = await conn.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))
        turn = conn.prompt(
            schema.PromptRequest(
                session_id=session.session_id, prompt=[schema.TextContentBlock(text="wait")]
            )
        )
        turn.addErrback(lambda _: None)  # fails with the cut, checked below
        await waiting
        assert server.open_connections() == 1
        agent = server.agents[0]
        conn.protocol.transport.abortConnection()  # type: ignore[union-attr]
        await until(lambda: len(agent.ended) == 1, "the agent's connection to end")
        assert agent.cancelled == ["s1"]
        assert "1006" in str(agent.ended[0])
        assert turn.called
        await self.settled(server)

    async def test_half_open_stream_with_posts_still_coming(self) -> None:
        """
        The stream gone but POSTs still coming: each POST restarts the grace period, so
        the connection lives as long as they come; once they stop, it ends one grace
        period after the last one.
        """
        server = Server(self, RemoteLimits(grace_period=10))
        cid = await server.initialize()
        body = await server.stream(cid)
        await server.session_and_prompt(cid, "stream 1 10")
        await body.got(lambda data: b'"end_turn"' in data)
        body.cut()
        await until(lambda: server.connection(cid).stream is None, "the server to see the cut")
        params = {"sessionId": "s1", "prompt": [{"type": "text", "text": "stream 1 10"}]}
        for n in range(3, 8):
            server.clock.advance(9)
            prompt = {"jsonrpc": "2.0", "id": n, "method": "session/prompt", "params": params}
            assert (await server.post(prompt, cid, Acp_Session_Id="s1")).code == 202
        # 45 s of clock since the stream went: alive, its answers queued for a stream
        assert cid in server.resource.connections
        assert len(server.connection(cid).queue) == 10  # 5 chunks and 5 answers
        server.clock.advance(9.9)
        assert cid in server.resource.connections
        server.clock.advance(0.1)
        assert cid not in server.resource.connections
        assert "no event stream" in str(server.agents[0].ended[0])
        await self.settled(server)

    async def test_half_open_stream_then_nothing(self) -> None:
        """
        A connection whose client never opens its stream (or loses it) and sends nothing
        ends after the grace period, with its reason; a stream opened within the grace
        period stops the timer.
        """
        server = Server(self, RemoteLimits(grace_period=5))
        lost = await server.initialize()
        kept = await server.initialize()
        server.clock.advance(4)
        body = await server.stream(kept)
        server.clock.advance(1)
        assert lost not in server.resource.connections
        assert kept in server.resource.connections
        server.clock.advance(100)
        assert kept in server.resource.connections  # its stream is open
        body.cut()
        await until(lambda: server.connection(kept).stream is None, "the server to see the cut")
        server.clock.advance(5)
        assert server.resource.connections == {}
        for agent in server.agents:
            assert "no event stream and no request for 5 s" in str(agent.ended[0])
        await self.settled(server)

    async def test_slow_reader_keeps_server_memory_bounded(self) -> None:
        """
        A client that stops reading its event stream: once the socket's buffers are
        full the agent's ``session_update`` waits (the engine is paused), so the server
        holds at most a few messages, far from ``max_queued_messages``, while the turn
        (4000 chunks of 4 KiB, 16 MiB) is not done; when the client reads again every
        chunk arrives and the turn ends.
        """
        server = Server(self, RemoteLimits(max_queued_messages=100))
        cid = await server.initialize()
        body = await server.stream(cid)
        assert body.transport is not None
        body.transport.pauseProducing()  # type: ignore[attr-defined]  # the client stops reading
        await server.session_and_prompt(cid, "stream 4000 4096")
        connection = server.connection(cid)
        await until(lambda: connection._stream_paused, "the server to see the client stall")
        agent = server.agents[0]
        assert agent.sent < 4000
        assert len(connection.queue) <= 100
        sent = agent.sent
        # the engine is paused: nothing more is produced while the client does not read
        await until(lambda: connection._engine_paused, "the engine to be paused")
        assert agent.sent <= sent + 1
        body.transport.resumeProducing()  # type: ignore[attr-defined]
        await body.got(lambda data: b'"end_turn"' in data)
        assert agent.sent == 4000
        assert body.data.count(b"agent_message_chunk") == 4000
        body.cut()
        await server.request("DELETE", cid)
        await self.settled(server)

    async def test_unread_messages_beyond_the_limit_end_the_connection(self) -> None:
        """
        A client that opens no stream while the agent streams: beyond
        ``max_queued_messages`` the connection ends with its reason, its queue dropped,
        and a later GET is 404. The limit is checked on the clock's next turn (not
        inside the engine's write): with no stream the engine is not paused, so a burst
        the agent writes within one turn (here all 1000 chunks) is queued whole first.
        """
        server = Server(self, RemoteLimits(max_queued_messages=50))
        cid = await server.initialize()
        await server.session_and_prompt(cid, "stream 1000 100")
        agent = server.agents[0]

        def ended() -> bool:
            server.clock.advance(0)  # the overflow ends it on the clock's next turn
            return len(agent.ended) == 1

        await until(ended, "the connection to end")
        assert "more than 50 messages queued" in str(agent.ended[0])
        connection = server.connection(cid) if cid in server.resource.connections else None
        assert connection is None
        assert agent.sent == 1000  # the burst came in one turn (see the docstring)
        assert (await server.request("GET", cid)).code == 404
        await self.settled(server)

    async def test_a_100_mb_message_is_refused_without_memory_growth(self) -> None:
        """
        A 100 MB POST on a connection (the body streamed 1 MiB at a time, one buffer): 413
        with a -32600 error naming the limit; the server stores none of it (resident
        memory grows by far less than the message while it arrives), and the connection
        goes on.
        """
        server = Server(self, RemoteLimits(max_message_size=MiB))
        cid = await server.initialize()
        before = rss()
        peak = [before]
        body = ZerosBody(100 * MiB, lambda: peak.append(rss()))
        headers = Headers({"Content-Type": ["application/json"], "Acp-Connection-Id": [cid]})
        response = await server.http.post(server.url, data=body, headers=headers)
        answer = json.loads(await response.content())
        assert response.code == 413
        assert answer["error"]["code"] == -32600
        assert f"larger than {MiB} bytes" in answer["error"]["message"]
        assert len(peak) == 101
        assert max(peak) - before < 32 * MiB, (max(peak) - before) / MiB
        new = {"jsonrpc": "2.0", "id": 1, "method": "session/new"}
        new["params"] = {"cwd": "/", "mcpServers": []}
        assert (await server.post(new, cid)).code == 202
        assert (await server.request("DELETE", cid)).code == 202
        await self.settled(server)

    async def test_a_100_mb_websocket_frame_is_refused(self) -> None:
        """
        A WebSocket text frame announcing 100 MB to a 1 MiB server: closed with 1009
        from the frame's header, the connection forgotten, nothing buffered.
        """
        from acpkit.remote.websocket import connect_websocket

        server = Server(self, RemoteLimits(max_message_size=MiB))
        conn = await connect_websocket(
            reactor, server.url.replace("http", "ws", 1), Client(), auto_ping_interval=None
        )
        await conn.initialize()
        assert server.open_connections() == 1
        websocket = conn.protocol.transport.websocket  # type: ignore[union-attr]
        # a frame header (FIN, text; masked; 64-bit length) for 100 MB, and no payload
        header = bytes([0x81, 0x80 | 127]) + (100 * MiB).to_bytes(8, "big") + b"\0\0\0\0"
        websocket.transport.write(header)
        closed: list[Any] = []
        conn.closed.addBoth(closed.append)
        await until(lambda: bool(closed), "the client to see the close")
        assert "1009" in str(closed[0]) or getattr(closed[0].value, "code", None) == 1009
        await self.settled(server)

    async def test_unknown_connection_id_is_404(self) -> None:
        """POST, GET and DELETE naming a connection that never existed: 404 each, with
        the reason; nothing created."""
        server = Server(self, RemoteLimits())
        cid = str(uuid.uuid4())
        new = {"jsonrpc": "2.0", "id": 1, "method": "session/new"}
        new["params"] = {"cwd": "/", "mcpServers": []}
        for response in (
            await server.post(new, cid),
            await server.request("GET", cid),
            await server.request("DELETE", cid),
        ):
            assert response.code == 404
            assert "unknown Acp-Connection-Id" in json.loads(response.body)["error"]["message"]
        assert server.agents == []
        await self.settled(server)

    async def test_replayed_delete_is_404(self) -> None:
        """
        ``DELETE`` twice: the first ends the connection (202; the running turn cancelled,
        the stream ended), the replay gets 404 and changes nothing; the server still
        serves a new connection.
        """
        server = Server(self, RemoteLimits())
        cid = await server.initialize()
        body = await server.stream(cid)
        await server.session_and_prompt(cid, "wait")
        await body.got(lambda data: b"waiting" in data)
        assert (await server.request("DELETE", cid)).code == 202
        await body.done
        agent = server.agents[0]
        assert agent.cancelled == ["s1"]
        assert len(agent.ended) == 1
        again = await server.request("DELETE", cid)
        assert again.code == 404
        assert len(agent.ended) == 1
        other = await server.initialize()
        assert (await server.request("DELETE", other)).code == 202
        await self.settled(server)


def test_helpers_count_what_they_say() -> None:
    """open_fds() sees a new descriptor; rss() is a positive size."""
    before = open_fds()
    with tempfile.TemporaryFile() as f:
        assert f.fileno() >= 0
        assert open_fds() == before + 1
    assert open_fds() == before
    assert rss() > 0
    assert succeed(None).called
