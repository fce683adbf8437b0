"""
A remote ACP server behind a load balancer: the health endpoint (``GET /healthz``: no
token, nothing revealed, ``503`` while draining or full) and draining
(``ACPResource.start_draining``: no new connection, running turns answered, then each
connection ends), in memory (raw HTTP on a ``StringTransport``, timers on a ``Clock``).
"""

from __future__ import annotations

from typing import Any

from acpkit.remote.server import RemoteLimits
from tests.remote.test_remote_server import Response, Server, updates

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def health(server: Server, method: str = "GET", path: str = "/healthz") -> Response:
    return server.request(method, {}, path=path)


def permission_answer(request: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request["id"],
        "result": {"outcome": {"outcome": "selected", "optionId": "allow"}},
    }


# -- the health endpoint ----------------------------------------------------------------------


def test_health_is_200_without_a_token_and_says_nothing() -> None:
    """
    ``GET /healthz`` on a server that requires a token: ``200`` without one, an empty
    body, no ``Server`` (no version) nor ``Content-Type``; ``/acp`` still needs the token.
    """
    server = Server(token=TOKEN.encode())
    answer = health(server)
    assert answer.status == 200
    assert answer.body == b""
    assert answer.header("Server") is None
    assert answer.header("Content-Type") is None
    assert answer.header("Cache-Control") == "no-store"
    assert server.request("GET", {"Accept": "text/event-stream"}).status == 401


def test_health_takes_head_and_ignores_the_query() -> None:
    """``HEAD /healthz`` and ``GET /healthz?anything``: ``200``; another method ``405``."""
    server = Server(token=TOKEN.encode())
    assert health(server, "HEAD").status == 200
    assert health(server, path="/healthz?verbose=1").status == 200
    refused = server.request("POST", {"Content-Type": "application/json"}, b"{}", "/healthz")
    assert refused.status == 405
    assert refused.header("Allow") == "GET, HEAD"


def test_health_is_503_while_draining() -> None:
    """Once draining: ``503`` with ``Retry-After``, still no body."""
    server = Server()
    server.resource.start_draining()
    answer = health(server)
    assert answer.status == 503
    assert answer.header("Retry-After") == "1"
    assert answer.body == b""


def test_health_is_503_at_the_connection_cap() -> None:
    """At ``max_connections``, a new connection would be refused: ``503``; below, ``200``."""
    server = Server(limits=RemoteLimits(max_connections=1))
    cid = server.initialize()
    assert health(server).status == 503
    server.request("DELETE", {"Acp-Connection-Id": cid})
    assert health(server).status == 200


def test_health_is_served_beside_an_endpoint_at_the_root() -> None:
    """With the ACP endpoint at ``/`` (serve_remote's ``path="/"``), ``/healthz`` is health."""
    from acpkit.remote.server import RemoteSite

    server = Server()
    server.site = RemoteSite(server.resource, b"/", server.clock)
    assert health(server).status == 200


# -- draining ------------------------------------------------------------------------------------


def test_a_draining_server_refuses_new_connections_with_503() -> None:
    """``initialize`` while draining: ``503``, ``Retry-After``, a JSON-RPC error saying why."""
    server = Server()
    server.resource.start_draining()
    answer = server.post(
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
    )
    assert answer.status == 503
    assert answer.header("Retry-After") == "1"
    assert "draining" in answer.json()["error"]["message"]
    assert server.resource.connections == {}


def test_an_idle_connection_ends_when_draining_starts() -> None:
    """A connection with nothing running ends at once; the drain has then finished."""
    server = Server()
    cid = server.initialize()
    stream = server.stream(cid)
    server.new_session(cid)
    drained = server.resource.start_draining()
    assert drained.called
    assert cid not in server.resource.connections
    assert stream.transport.disconnecting  # the stream ended: the client sees it
    assert server.agents[0].ended  # the agent's connection ended


def test_a_running_turn_is_answered_before_its_connection_ends() -> None:
    """
    Draining with a turn running (waiting for a permission): the connection stays; the
    client's answer still reaches the turn, the turn ends ``end_turn`` on the stream,
    then the connection ends and the drain has finished.
    """
    server = Server()
    busy = server.initialize()
    busy_stream = server.stream(busy)
    server.new_session(busy)
    server.prompt(busy, "ask")
    idle = server.initialize()
    drained = server.resource.start_draining()
    assert idle not in server.resource.connections
    assert busy in server.resource.connections
    assert not drained.called
    request = busy_stream.events()[-1]
    assert request["method"] == "session/request_permission"
    assert server.post(permission_answer(request), busy).status == 202
    events = busy_stream.events()
    assert updates(events) == ["allow"]
    assert events[-1] == {"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}}
    server.clock.advance(0)
    assert busy not in server.resource.connections
    assert drained.called


def test_close_all_ends_what_the_drain_left_with_cancelled_turns() -> None:
    """Past the drain's bound, ``close_all``: the running turn is answered ``cancelled``."""
    server = Server()
    cid = server.initialize()
    stream = server.stream(cid)
    server.new_session(cid)
    server.prompt(cid, "wait")
    drained = server.resource.start_draining()
    server.clock.advance(30)
    assert not drained.called
    server.resource.close_all()
    assert stream.events()[-1] == {"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "cancelled"}}
    assert drained.called
    assert server.resource.connections == {}


# -- WebSocket connections, on a real loopback listener -----------------------------------------

import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

from twisted.internet import reactor  # noqa: E402
from twisted.internet.defer import Deferred  # noqa: E402
from twisted.internet.task import deferLater  # noqa: E402
from twisted.trial.unittest import TestCase  # noqa: E402

from acpkit import schema  # noqa: E402
from acpkit.connection import Agent, AgentConnection, Client  # noqa: E402
from acpkit.remote.server import serve_remote  # noqa: E402


class Gated(Agent):
    """Its turns wait for the class's gate."""

    gate: Deferred[None] = Deferred()
    running = 0

    def __init__(self, conn: AgentConnection) -> None:
        self.conn = conn

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(protocol_version=1)

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id="ws")

    async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        Gated.running += 1
        await Gated.gate
        return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)


async def until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await deferLater(reactor, 0.02, lambda: None)


class WebSocketDrainTests(TestCase):
    timeout = 30

    async def test_websockets_are_drained_too(self) -> None:
        """
        Draining with two WebSocket connections: the idle one is closed at once, the one
        running a turn once that turn is answered end_turn; the drain then fires, and a
        new upgrade is refused.
        """
        from acpkit.remote.websocket import WebSocketConnectError, connect_websocket

        Gated.gate = Deferred()
        Gated.running = 0
        port: Any = await serve_remote(reactor, "tcp:0", Gated, token=TOKEN)
        self.addCleanup(port.stopListening)
        address: Any = port.getHost()
        url = f"ws://127.0.0.1:{address.port}/acp"
        busy = await connect_websocket(reactor, url, Client(), headers=AUTH)
        idle = await connect_websocket(reactor, url, Client(), headers=AUTH)
        for connection in (busy, idle):
            await connection.initialize()
        sid = (await busy.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))).session_id
        turn = busy.prompt(
            schema.PromptRequest(session_id=sid, prompt=[schema.TextContentBlock(text="x")])
        )
        resource = port.factory.acp
        await until(lambda: resource.open_websockets() == 2, "two WebSockets")
        await until(lambda: Gated.running == 1, "the turn to run")
        drained = resource.start_draining()
        await until(lambda: idle.closed_reason is not None, "the idle WebSocket to close")
        self.assertIsNone(busy.closed_reason)
        self.assertFalse(drained.called)
        Gated.gate.callback(None)
        self.assertEqual((await turn).stop_reason, schema.StopReason.END_TURN)
        await drained
        await until(lambda: busy.closed_reason is not None, "the busy WebSocket to close")
        with self.assertRaises(WebSocketConnectError):
            await connect_websocket(reactor, url, Client(), headers=AUTH)
