"""
ACP's Streamable HTTP client (:mod:`acpkit.remote.http_client`): a loopback twisted.web
server scripted per test for the transport's rules, and the official Python SDK 0.12.1's
HTTP server (under uvicorn, in a subprocess) for interop.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import reactor
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.interfaces import IListeningPort
from twisted.internet.task import Clock, deferLater
from twisted.logger import ILogObserver, formatEvent, globalLogPublisher
from twisted.trial.unittest import TestCase
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site
from zope.interface import implementer

from acpkit import schema
from acpkit.connection import ClientConnection
from acpkit.errors import ConnectionLost, NotDelivered, RPCError
from acpkit.http.sse import encode_event
from acpkit.remote.http_client import HTTP_TRANSPORT_ERROR, HTTPClientTransport, connect_http
from tests.helpers import InteropClient, start_port_server
from tests.real_peers import NODE22, TS_SDK_MODULES, require_peer

ROOT = Path(__file__).parent.parent.parent
FIXTURES = Path(__file__).parent.parent / "fixtures" / "remote"
TOKEN = "Bearer s3cret-token-value"


async def until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Let the reactor turn until ``condition()``; fail after ``timeout`` s."""
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await deferLater(reactor, 0.01, lambda: None)


def _text_of(message: Any) -> str | None:
    """The text of a session/prompt message's first block, else None."""
    if isinstance(message, dict) and message.get("method") == "session/prompt":
        return str(message["params"]["prompt"][0].get("text"))
    return None


# -- a scripted loopback server -----------------------------------------------------------


class FakeAcpServer(Resource):
    """
    A minimal ACP Streamable HTTP endpoint, scripted by ``answer(message)``: the
    messages it returns go out on the connection's SSE stream.  Records every request.
    """

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[tuple[bytes, dict[str, str], Any]] = []
        self.connection_id = "conn-1"
        self.known = True
        self.stream: Request | None = None
        self.stream_opened: Deferred[None] = Deferred()
        self.session_stream_status = 400
        self.session_streams: list[Request] = []
        self.session_stream_opened: Deferred[None] = Deferred()
        self.post_status: Callable[[Any], int | None] = lambda message: None
        self.answer: Callable[[Any], list[Any]] = lambda message: []
        self.deleted: Deferred[None] = Deferred()
        self.initialize_status = 200
        self.posted: list[Deferred[Any]] = []
        self.hold: Callable[[Any], bool] = lambda message: False
        self.held: list[Request] = []

    def headers_of(self, request: Request) -> dict[str, str]:
        return {
            k.decode().lower(): b", ".join(v).decode()
            for k, v in request.requestHeaders.getAllRawHeaders()
        }

    def render_POST(self, request: Request) -> bytes:
        assert request.content is not None
        message = json.loads(request.content.read())
        headers = self.headers_of(request)
        self.requests.append((b"POST", headers, message))
        holding = self.hold(message)
        if holding:
            self.held.append(request)
        else:
            message["_while_held"] = any(not r.finished for r in self.held)
        waiters, self.posted = self.posted, []
        for waiter in waiters:
            waiter.callback(message)
        if message.get("method") == "initialize":
            request.setResponseCode(self.initialize_status)
            request.setHeader(b"content-type", b"application/json")
            if self.initialize_status != 200:
                return b'{"error": "Unauthorized"}'
            request.setHeader(b"Acp-Connection-Id", self.connection_id.encode())
            request.addCookie(b"affinity", b"node-7", path=b"/")
            result = {"protocolVersion": 1, "agentCapabilities": {"loadSession": False}}
            return json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
        if not self.known or headers.get("acp-connection-id") != self.connection_id:
            request.setResponseCode(404)
            request.setHeader(b"content-type", b"application/json")
            return b'{"error": "Unknown connection id"}'
        if holding:
            return NOT_DONE_YET  # type: ignore[return-value]
        status = self.post_status(message)
        if status is not None:
            request.setResponseCode(status)
            request.setHeader(b"content-type", b"application/json")
            return b'{"error": "refused by the test"}'
        request.setResponseCode(202)
        for out in self.answer(message):
            reactor.callLater(0, self.push, out)
        return b""

    def render_GET(self, request: Request) -> int | bytes:
        headers = self.headers_of(request)
        self.requests.append((b"GET", headers, None))
        if headers.get("acp-connection-id") != self.connection_id or not self.known:
            request.setResponseCode(404)
            return b""
        if "acp-session-id" in headers:
            if self.session_stream_status != 200:
                request.setResponseCode(self.session_stream_status)
                return b""
            self.session_streams.append(request)
            if not self.session_stream_opened.called:
                reactor.callLater(0, self.session_stream_opened.callback, None)
        else:
            self.stream = request
        request.setHeader(b"content-type", b"text/event-stream")
        request.write(b": open\n\n")
        if "acp-session-id" not in headers and not self.stream_opened.called:
            self.stream_opened.callback(None)
        return NOT_DONE_YET

    def render_DELETE(self, request: Request) -> bytes:
        self.requests.append((b"DELETE", self.headers_of(request), None))
        request.setResponseCode(202)
        if not self.deleted.called:
            self.deleted.callback(None)
        return b""

    def push(self, message: Any, stream: Request | None = None) -> None:
        target = stream or self.stream
        assert target is not None, "no SSE stream open"
        target.write(encode_event(json.dumps(message).encode()))

    def next_post(self) -> Deferred[Any]:
        d: Deferred[Any] = Deferred()
        self.posted.append(d)
        return d


def rpc_result(message: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


def chunk(text: str, session_id: str = "s1") -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {
            "sessionId": session_id,
            "update": {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": text},
            },
        },
    }


def scripted_agent(message: Any) -> list[Any]:
    """session/new -> s1; a prompt -> three chunks, then end_turn."""
    method = message.get("method")
    if method == "session/new":
        return [rpc_result(message, {"sessionId": "s1"})]
    if method == "session/prompt":
        return [
            chunk("one"),
            chunk(" two"),
            chunk(" three"),
            rpc_result(message, {"stopReason": "end_turn"}),
        ]
    return []


@implementer(ILogObserver)
class LogCapture:
    def __init__(self) -> None:
        self.text: list[str] = []

    def __call__(self, event: dict[str, Any]) -> None:
        self.text.append(formatEvent(event))
        failure = event.get("log_failure")
        if failure is not None:
            self.text.append(failure.getTraceback())


class LoopbackTests(TestCase):
    """The client against a scripted twisted.web server on a loopback port."""

    timeout = 30

    def setUp(self) -> Deferred[None]:  # type: ignore[override]
        self.server = FakeAcpServer()
        self.server.answer = scripted_agent
        site = Site(self.server)
        site.displayTracebacks = False

        def listening(port: IListeningPort) -> None:
            self.port = port
            self.url = f"http://127.0.0.1:{port.getHost().port}/acp"  # type: ignore[attr-defined]
            self.addCleanup(port.stopListening)

        d: Deferred[Any] = TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(site)
        return d.addCallback(listening)

    async def connect(self, **kwargs: Any) -> tuple[ClientConnection, InteropClient]:
        client = InteropClient()
        conn = await connect_http(reactor, self.url, client, **kwargs)

        def close() -> Deferred[None]:
            conn.close()
            done = conn.closed
            done.addErrback(lambda _: None)
            return done

        self.addCleanup(close)
        return conn, client

    async def session(self, **kwargs: Any) -> tuple[ClientConnection, InteropClient, str]:
        conn, client = await self.connect(**kwargs)
        await conn.initialize()
        new = await conn.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))
        return conn, client, new.session_id

    def posts(self, method: str | None) -> list[dict[str, str]]:
        return [
            h
            for verb, h, m in self.server.requests
            if verb == b"POST" and (m.get("method") if isinstance(m, dict) else None) == method
        ]

    def prompt(self, conn: ClientConnection, sid: str, text: str = "hi") -> Deferred[Any]:
        return conn.prompt(
            schema.PromptRequest(session_id=sid, prompt=[schema.TextContentBlock(text=text)])
        )

    async def test_answers_arrive_on_the_stream_in_order_after_202s(self) -> None:
        """initialize is answered in its 200 body; session/new and a prompt get 202 and
        their answers, with the prompt's chunks before its response, on the GET stream."""
        conn, client, sid = await self.session()
        self.assertEqual(sid, "s1")
        response = await self.prompt(conn, sid)
        self.assertEqual(response.stop_reason, schema.StopReason.END_TURN)
        self.assertEqual(client.chunks, ["one", " two", " three"])
        get = [h for verb, h, _ in self.server.requests if verb == b"GET"]
        self.assertEqual(get[0]["accept"], "text/event-stream")
        self.assertEqual(get[0]["acp-connection-id"], "conn-1")
        (init,) = self.posts("initialize")
        self.assertNotIn("acp-connection-id", init)
        self.assertEqual(init["content-type"], "application/json")

    async def test_posts_reach_the_server_in_the_order_written(self) -> None:
        """A POST goes out once the previous one is answered: a cancel written right after
        its prompt waits for the prompt's 202 (over HTTP/1.1 it would otherwise go on
        another TCP connection and could overtake it)."""
        self.server.hold = lambda m: m.get("method") == "session/prompt"
        self.server.answer = lambda m: (
            [] if m.get("method") == "session/prompt" else scripted_agent(m)
        )
        conn, _, sid = await self.session()
        transport = conn.protocol.transport
        assert isinstance(transport, HTTPClientTransport)
        posted = self.server.next_post()
        self.prompt(conn, sid).addErrback(lambda _: None)
        await posted
        conn.cancel(sid)
        self.assertEqual(len(transport._post_queue), 1)  # the cancel waits
        cancel_posted = self.server.next_post()
        (prompt,) = self.server.held
        prompt.setResponseCode(202)
        prompt.finish()
        cancel = await cancel_posted
        self.assertEqual(cancel["method"], "session/cancel")
        self.assertFalse(cancel["_while_held"])

    async def test_session_header_on_session_scoped_posts_only(self) -> None:
        """Acp-Connection-Id on every later POST; Acp-Session-Id on a prompt (from its
        params), not on session/new."""
        conn, _, sid = await self.session()
        await self.prompt(conn, sid)
        (new,) = self.posts("session/new")
        (prompt,) = self.posts("session/prompt")
        self.assertEqual(new["acp-connection-id"], "conn-1")
        self.assertNotIn("acp-session-id", new)
        self.assertEqual(prompt["acp-connection-id"], "conn-1")
        self.assertEqual(prompt["acp-session-id"], "s1")

    async def test_cookies_set_by_the_server_are_sent_back(self) -> None:
        """The cookie set with the initialize answer goes with the GET and every later POST."""
        conn, _, sid = await self.session()
        await self.prompt(conn, sid)
        later = [h for verb, h, m in self.server.requests[1:] if verb in (b"GET", b"POST")]
        self.assertTrue(later)
        for headers in later:
            self.assertEqual(headers.get("cookie"), "affinity=node-7")
        self.assertNotIn("cookie", self.server.requests[0][1])

    async def test_configured_headers_sent_everywhere_never_logged(self) -> None:
        """The Authorization header goes with every request, DELETE included, and never
        appears in the logs, even when a refusal is logged."""
        logs = LogCapture()
        globalLogPublisher.addObserver(logs)
        self.addCleanup(globalLogPublisher.removeObserver, logs)
        self.server.post_status = lambda m: 403 if m.get("method") == "session/set_mode" else None
        conn, _, sid = await self.session(headers={"Authorization": TOKEN})
        with self.assertRaises(RPCError):
            await conn.set_mode(schema.SetSessionModeRequest(session_id=sid, mode_id="x"))
        conn.close()
        await self.server.deleted
        await conn.closed
        for verb, headers, _ in self.server.requests:
            self.assertEqual(headers.get("authorization"), TOKEN, verb)
        self.assertTrue(any("403" in line for line in logs.text))
        self.assertFalse([line for line in logs.text if "s3cret" in line])

    async def test_a_refused_post_fails_that_request_with_the_reason(self) -> None:
        """A POST answered 400 fails its request (code HTTP_TRANSPORT_ERROR, the status
        and the server's text); the connection goes on."""
        self.server.post_status = lambda m: 400 if m.get("method") == "session/set_mode" else None
        conn, _, sid = await self.session()
        with self.assertRaises(RPCError) as caught:
            await conn.set_mode(schema.SetSessionModeRequest(session_id=sid, mode_id="x"))
        self.assertEqual(caught.exception.code, HTTP_TRANSPORT_ERROR)
        self.assertEqual(caught.exception.data["status"], 400)
        self.assertIn("refused by the test", str(caught.exception))
        response = await self.prompt(conn, sid)
        self.assertEqual(response.stop_reason, schema.StopReason.END_TURN)

    async def test_a_dropped_stream_fails_pending_requests_promptly(self) -> None:
        """The GET stream dropping mid-turn fails the pending prompt at once with
        ConnectionLost naming the stream."""
        self.server.answer = lambda m: (
            [chunk("waiting")] if m.get("method") == "session/prompt" else scripted_agent(m)
        )
        conn, client, sid = await self.session()
        pending = self.prompt(conn, sid)
        await client.waiting
        assert self.server.stream is not None
        self.server.stream.channel.transport.abortConnection()  # type: ignore[union-attr]
        with self.assertRaises(ConnectionLost) as caught:
            await pending
        self.assertIn("SSE stream", str(caught.exception))
        self.assertIn("dropped", str(caught.exception))

    async def test_a_stream_ended_by_the_server_fails_pending_requests(self) -> None:
        """A cleanly ended GET stream is the end of the connection too."""
        self.server.answer = lambda m: (
            [] if m.get("method") == "session/prompt" else scripted_agent(m)
        )
        conn, _, sid = await self.session()
        posted = self.server.next_post()
        pending = self.prompt(conn, sid)
        await posted
        assert self.server.stream is not None
        self.server.stream.finish()
        with self.assertRaises(ConnectionLost) as caught:
            await pending
        self.assertIn("SSE stream", str(caught.exception))
        self.assertIn("ended", str(caught.exception))

    async def test_an_oversized_event_ends_the_connection(self) -> None:
        """An SSE event over max_event_size is not buffered: the connection is lost with
        the limit in the reason."""
        self.server.answer = lambda m: (
            [chunk("x" * 5000)] if m.get("method") == "session/prompt" else scripted_agent(m)
        )
        conn, client, sid = await self.session(max_event_size=2000)
        with self.assertRaises(ConnectionLost) as caught:
            await self.prompt(conn, sid)
        self.assertIn("2000-byte limit", str(caught.exception))
        self.assertEqual(client.chunks, [])

    async def test_a_silent_stream_is_taken_for_dead_after_idle_timeout(self) -> None:
        """A stream on which nothing comes (a half-open connection: no keep-alive either)
        ends the connection after idle_timeout; any byte, a keep-alive comment included,
        restarts the wait."""
        self.server.answer = lambda m: (
            [] if m.get("method") == "session/prompt" else scripted_agent(m)
        )
        clock = Clock()
        conn, _, sid = await self.session(idle_timeout=45, clock=clock)
        posted = self.server.next_post()
        pending = self.prompt(conn, sid)
        await posted
        clock.advance(44)
        # Wait (an event, not a delay) until the client has read the keep-alive.
        transport = conn.protocol.transport
        assert isinstance(transport, HTTPClientTransport)
        read: Deferred[None] = Deferred()
        original = transport._still_alive

        def spy(stream: Any) -> None:
            original(stream)
            if not read.called:
                read.callback(None)

        transport._still_alive = spy
        assert self.server.stream is not None
        self.server.stream.write(b": keepalive\n\n")
        await read
        clock.advance(44)
        self.assertFalse(pending.called)
        clock.advance(1)
        with self.assertRaises(ConnectionLost) as caught:
            await pending
        self.assertIn("for 45 s (not even a keep-alive)", str(caught.exception))

    async def test_close_sends_delete_with_the_connection_id(self) -> None:
        """close() DELETEs the connection (its id, the cookie) and ends the connection
        cleanly."""
        conn, _, _ = await self.session()
        conn.close()
        await self.server.deleted
        await conn.closed
        (delete,) = [h for verb, h, _ in self.server.requests if verb == b"DELETE"]
        self.assertEqual(delete["acp-connection-id"], "conn-1")
        self.assertEqual(delete.get("cookie"), "affinity=node-7")

    async def test_unknown_connection_id_404_fails_everything(self) -> None:
        """A 404 to a POST (the server forgot the connection) loses the connection: the
        request fails with ConnectionLost saying so."""
        conn, _, sid = await self.session()
        self.server.known = False
        with self.assertRaises(ConnectionLost) as caught:
            await self.prompt(conn, sid)
        self.assertIn("404", str(caught.exception))
        self.assertIn("does not know this connection", str(caught.exception))
        with self.assertRaises(ConnectionLost):
            await self.prompt(conn, sid)

    async def test_the_request_a_404_refused_was_not_delivered(self) -> None:
        """
        A 404 to a prompt's POST: that prompt fails with NotDelivered (a ConnectionLost:
        it never ran, sending it again is safe); a prompt the server had taken (202)
        and not answered fails with a plain ConnectionLost (it may have run).
        """
        conn, _, sid = await self.session()
        answer = self.server.answer
        self.server.answer = lambda m: [] if _text_of(m) == "taken" else answer(m)
        taken = self.prompt(conn, sid, "taken")
        await until(lambda: len(self.posts("session/prompt")) == 1, "the first prompt's 202")
        self.server.known = False
        with self.assertRaises(NotDelivered) as refused:
            await self.prompt(conn, sid, "refused")
        self.assertIn("does not know this connection", str(refused.exception))
        with self.assertRaises(ConnectionLost) as lost:
            await taken
        self.assertNotIsInstance(lost.exception, NotDelivered)

    async def _stream_ends_with_a_post_in_flight(
        self, status: int
    ) -> tuple[Deferred[Any], Deferred[Any]]:
        """A prompt's POST held by the server, a cancel queued behind it, then the
        server ends the stream (it drains) and answers the prompt's POST ``status``."""
        self.server.hold = lambda m: m.get("method") == "session/prompt"
        self.server.answer = lambda m: (
            [] if m.get("method") == "session/prompt" else scripted_agent(m)
        )
        conn, _, sid = await self.session()
        posted = self.server.next_post()
        running = self.prompt(conn, sid, "in flight")
        await posted
        queued = conn.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))
        assert self.server.stream is not None
        self.server.stream.finish()
        await deferLater(reactor, 0.05, lambda: None)
        self.assertIsNone(conn.closed_reason)  # not before the POST in flight is answered
        (prompt,) = self.server.held
        prompt.setResponseCode(status)
        if status == 404:
            prompt.write(b'{"error": "Unknown connection id"}')
        prompt.finish()
        return running, queued

    async def test_a_post_refused_after_the_stream_ended_was_not_delivered(self) -> None:
        """
        The server ends the stream (draining) as a prompt's POST is on its way, then
        answers it 404: the prompt fails NotDelivered, and so does the request queued
        behind it (never sent); the connection is lost then.
        """
        running, queued = await self._stream_ends_with_a_post_in_flight(404)
        with self.assertRaises(NotDelivered):
            await running
        with self.assertRaises(NotDelivered) as unsent:
            await queued
        self.assertIn("before it was sent", str(unsent.exception))

    async def test_a_post_taken_before_the_stream_ended_was_delivered(self) -> None:
        """The same POST answered 202: it reached the agent, so its request fails with a
        plain ConnectionLost (it may have run)."""
        running, queued = await self._stream_ends_with_a_post_in_flight(202)
        with self.assertRaises(ConnectionLost) as lost:
            await running
        self.assertNotIsInstance(lost.exception, NotDelivered)
        self.assertIn("SSE stream", str(lost.exception))
        with self.assertRaises(NotDelivered):  # queued behind it: never sent
            await queued

    async def test_initialize_refused_says_why(self) -> None:
        """An initialize answered 401 fails with the status and a hint at the headers."""
        self.server.initialize_status = 401
        conn, _ = await self.connect()
        with self.assertRaises(ConnectionLost) as caught:
            await conn.initialize()
        self.assertIn("HTTP 401", str(caught.exception))
        self.assertIn("check the configured headers", str(caught.exception))

    async def test_permission_answer_posted_with_its_session(self) -> None:
        """A permission request arriving on the stream is answered by a POST carrying
        the request's session as Acp-Session-Id."""

        def answer(m: Any) -> list[Any]:
            if m.get("method") == "session/prompt":
                ask = {
                    "jsonrpc": "2.0",
                    "id": 99,
                    "method": "session/request_permission",
                    "params": {
                        "sessionId": "s1",
                        "toolCall": {"toolCallId": "c1", "title": "run ls"},
                        "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}],
                    },
                }
                self.prompt_message = m
                return [ask]
            if m.get("id") == 99 and "result" in m:
                return [rpc_result(self.prompt_message, {"stopReason": "end_turn"})]
            return scripted_agent(m)

        self.server.answer = answer
        conn, client, sid = await self.session()
        response = await self.prompt(conn, sid)
        self.assertEqual(response.stop_reason, schema.StopReason.END_TURN)
        self.assertEqual(client.permissions, ["run ls"])
        (posted,) = [
            (h, m) for verb, h, m in self.server.requests if verb == b"POST" and m.get("id") == 99
        ]
        self.assertEqual(posted[0]["acp-session-id"], "s1")
        self.assertEqual(posted[1]["result"]["outcome"]["optionId"], "allow")

    async def test_session_stream_opened_and_read_when_accepted(self) -> None:
        """A new sessionId in a response opens a GET with Acp-Session-Id; messages the
        server sends there (as the Python SDK's server does) arrive too."""
        self.server.session_stream_status = 200

        def answer(m: Any) -> list[Any]:
            if m.get("method") == "session/prompt":
                stream = self.server.session_streams[0]
                for out in (
                    chunk("on the session stream"),
                    rpc_result(m, {"stopReason": "end_turn"}),
                ):
                    reactor.callLater(0, self.server.push, out, stream)
                return []
            return scripted_agent(m)

        self.server.answer = answer
        conn, client, sid = await self.session()
        await self.server.session_stream_opened
        response = await self.prompt(conn, sid)
        self.assertEqual(response.stop_reason, schema.StopReason.END_TURN)
        self.assertEqual(client.chunks, ["on the session stream"])
        (session_get,) = [
            h for verb, h, _ in self.server.requests if verb == b"GET" and "acp-session-id" in h
        ]
        self.assertEqual(session_get["acp-session-id"], "s1")

    async def test_a_refused_session_stream_is_ignored(self) -> None:
        """A server that refuses session streams (one stream per connection, as the RFD
        has it) still works: everything comes on the connection's stream."""
        self.server.session_stream_status = 400
        conn, _, sid = await self.session()
        response = await self.prompt(conn, sid)
        self.assertEqual(response.stop_reason, schema.StopReason.END_TURN)
        refused = [
            h for verb, h, _ in self.server.requests if verb == b"GET" and "acp-session-id" in h
        ]
        self.assertEqual(len(refused), 1)

    async def test_acpkit_trace_records_the_http_traffic(self) -> None:
        """ACPKIT_TRACE records remote traffic as for a spawned agent: each message once,
        both ways (initialize's answer from its POST body, the rest from the stream)."""
        trace = Path(self.mktemp())
        os.environ["ACPKIT_TRACE"] = str(trace)
        self.addCleanup(os.environ.pop, "ACPKIT_TRACE", None)
        conn, _, sid = await self.session()
        await self.prompt(conn, sid)
        conn.close()
        await conn.closed
        # Each record: time, direction, peer, the message as on the wire.
        records = [line.split(" ", 3) for line in trace.read_text().splitlines()]
        sent = [json.loads(r[3]) for r in records if r[1] == "->"]
        received = [json.loads(r[3]) for r in records if r[1] == "<-"]
        self.assertEqual(
            [m.get("method") for m in sent], ["initialize", "session/new", "session/prompt"]
        )
        self.assertEqual(received[0]["result"]["protocolVersion"], 1)
        self.assertEqual(len(received), 6)  # init, new, three chunks, the prompt's answer

    async def test_a_bad_url_fails_at_once(self) -> None:
        """A URL that is not http(s)://host, or holds user info, fails the Deferred with
        ValueError; nothing is sent."""
        for url in ("ws://127.0.0.1/acp", "http:///acp", "http://u:p@127.0.0.1/acp"):
            with self.assertRaises(ValueError):
                await connect_http(reactor, url, InteropClient())
        self.assertEqual(self.server.requests, [])

    async def test_unreachable_server_fails_initialize(self) -> None:
        """Nobody listening: initialize fails with ConnectionLost naming the URL."""
        await maybeDeferred(self.port.stopListening)
        conn, _ = await self.connect()
        with self.assertRaises(ConnectionLost) as caught:
            await conn.initialize()
        self.assertIn("cannot reach the ACP server at http://127.0.0.1:", str(caught.exception))


# -- interop with the official Python SDK's server -----------------------------------------


def _sdk_server_available() -> bool:
    try:
        import acp.http.asgi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        return False
    return True


async def start_sdk_server(case: TestCase) -> str:
    """Start the SDK's HTTP server (killed at the test's cleanup); return its /acp URL."""
    if not _sdk_server_available():
        raise pytest.skip.Exception("the Python SDK's HTTP server or uvicorn is missing")
    return await start_server(case, [sys.executable, str(FIXTURES / "sdk_http_server.py")])


async def start_ts_server(case: TestCase) -> str:
    """Start the TypeScript SDK's HTTP server (node); return its /acp URL."""
    node = require_peer(NODE22)
    sdk = os.path.join(require_peer(TS_SDK_MODULES), "@agentclientprotocol", "sdk")
    return await start_server(case, [node, str(FIXTURES / "ts_http_server.mjs"), sdk])


async def start_server(case: TestCase, argv: list[str]) -> str:
    """Run ``argv`` (a server printing ``PORT n``), killed at cleanup; return its URL."""
    port, _, _ = await start_port_server(case.addCleanup, argv)
    return f"http://127.0.0.1:{port}/acp"


async def run_scenario(case: TestCase, url: str, session_id: str) -> None:
    """initialize, session/new, a streamed prompt with a permission round trip and fs
    read/write, then a cancelled prompt, and close: acpkit's ClientConnection over HTTP."""
    tmp = Path(case.mktemp())
    tmp.mkdir()
    target = tmp / "note.txt"
    target.write_text("hello")
    client = InteropClient()
    conn = await connect_http(reactor, url, client)
    init = await conn.initialize(
        client_capabilities=schema.ClientCapabilities(
            fs=schema.FileSystemCapabilities(read_text_file=True, write_text_file=True)
        )
    )
    case.assertEqual(init.protocol_version, 1)
    session = await conn.new_session(
        schema.NewSessionRequest(cwd=str(tmp.resolve()), mcp_servers=[])
    )
    case.assertEqual(session.session_id, session_id)
    first = await conn.prompt(
        schema.PromptRequest(
            session_id=session.session_id,
            prompt=[schema.TextContentBlock(text=str(target.resolve()))],
        )
    )
    case.assertEqual(first.stop_reason, schema.StopReason.END_TURN)
    case.assertEqual(client.chunks, ["one", " two", " three"])
    case.assertEqual(client.permissions, [f"write_file: {target.resolve()}"])
    case.assertEqual((tmp / "note.txt.out").read_text(), "HELLOallow")
    second = conn.prompt(
        schema.PromptRequest(
            session_id=session.session_id, prompt=[schema.TextContentBlock(text="wait")]
        )
    )
    await client.waiting
    conn.cancel(session.session_id)
    response = await second
    case.assertEqual(response.stop_reason, schema.StopReason.CANCELLED)
    conn.close()
    await conn.closed


@pytest.mark.process
class SdkServerTests(TestCase):
    """acpkit's ClientConnection driving the Python SDK 0.12.1's Streamable HTTP server."""

    timeout = 60

    async def test_full_scenario_against_the_sdk_server(self) -> None:
        """The whole scenario (run_scenario) against the SDK's server and its agent."""
        url = await start_sdk_server(self)
        await run_scenario(self, url, "sdk-session")


@pytest.mark.process
class TsServerTests(TestCase):
    """acpkit's ClientConnection driving the TypeScript SDK 2.4.0's Streamable HTTP server."""

    timeout = 60

    async def test_full_scenario_against_the_ts_sdk_server(self) -> None:
        """The whole scenario against the TypeScript SDK's AcpServer (node adapter)."""
        url = await start_ts_server(self)
        await run_scenario(self, url, "ts-session")


class AcpkitServerTests(TestCase):
    """acpkit's HTTP client driving acpkit's own server (serve_remote), in process."""

    timeout = 60

    async def test_full_scenario_against_serve_remote(self) -> None:
        """The whole scenario against serve_remote serving the same agent built on acpkit."""
        from acpkit.remote import serve_remote
        from tests.fixtures.interop.acpkit_agent import InteropAgent

        port = await serve_remote(reactor, "tcp:0", InteropAgent, no_token=True)
        self.addCleanup(port.stopListening)
        url = f"http://127.0.0.1:{port.getHost().port}/acp"
        await run_scenario(self, url, "acpkit-session")
