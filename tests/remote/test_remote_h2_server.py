"""
The remote ACP server over HTTP/2 when a request and its ``RST_STREAM`` come in one read.

twisted.web's HTTP/2 server (``twisted.web._http2.H2Connection``) fails then (see
:mod:`acpkit.remote.h2_reads` for the analysis): it raises out of ``dataReceived`` (the
reactor drops the connection with every stream on it) or its sending loop dies (nothing
more is sent on any stream).  acpkit's client triggers it by opening a session stream and
closing right after.  In process, a twisted.web ``H2Connection`` on a
:class:`~twisted.internet.testing.StringTransport` serves an :class:`ACPResource` to an h2
client connection written here, the frames of each step delivered in ONE
``dataReceived``; its timers and sending loop run on a :class:`Clock`.  The
``twisted_web_alone`` tests run the same steps without acpkit's guard and check that the
bug is still there (when one fails, Twisted fixed it: the guard may go).  End to end, the
same with ``serve_remote`` on TLS (HTTP/2 by ALPN) and acpkit's own HTTP/2 client.
"""

from __future__ import annotations

import gc
import io
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attr
import h2.config
import h2.connection
import h2.events
import pytest
from h2.errors import ErrorCodes
from h2.exceptions import StreamClosedError
from twisted.internet import reactor
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock, deferLater
from twisted.internet.testing import StringTransport
from twisted.logger import ILogObserver, LogEvent, formatEvent, globalLogPublisher
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase
from twisted.web._http2 import H2Connection  # the server under test
from zope.interface import implementer

from acpkit import schema
from acpkit.connection import Agent, AgentConnection, negotiate_version
from acpkit.io.admission import GuardedProtocol
from acpkit.remote.h2_reads import H2FrameReads
from acpkit.remote.security import tls_serving_problem
from acpkit.remote.server import ACPResource, RemoteSite, serve_remote

NO_TLS_SERVING = tls_serving_problem()


class EchoAgent(Agent):
    """Session ``s1``; a prompt is answered ``end_turn`` at once; records its end."""

    def __init__(self, conn: AgentConnection) -> None:
        self.ended: list[Failure | None] = []
        conn.closed.addBoth(self.ended.append)

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=negotiate_version(params.protocol_version)
        )

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id="s1")

    def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)


@attr.s(auto_attribs=True)
class Response:
    """What the client received on one stream."""

    headers: dict[str, str] = attr.Factory(dict)
    data: bytes = b""
    ended: bool = False
    reset: bool = False


@implementer(ILogObserver)
class Failures:
    """Log events carrying a failure (tracebacks), as logged."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, event: LogEvent) -> None:
        failure = event.get("log_failure")
        if failure is not None:
            self.seen.append(formatEvent(event) + "\n" + failure.getTraceback())


@pytest.fixture
def failures() -> Iterator[Failures]:
    observer = Failures()
    globalLogPublisher.addObserver(observer)
    yield observer
    globalLogPublisher.removeObserver(observer)


class Wire:
    """
    An :class:`ACPResource` behind twisted.web's HTTP/2 server (guarded by
    :class:`H2FrameReads` or not) and an h2 client; what the client queues is delivered
    in one read by :meth:`flush`.
    """

    def __init__(
        self, *, guarded: bool, through_site: bool = False, token: bytes | None = None
    ) -> None:
        self.clock = Clock()  # the resource's timers and the engine's
        self.h2clock = Clock()  # twisted.web's sending loop
        self.agents: list[EchoAgent] = []
        self.resource = ACPResource(self._agent, clock=self.clock, token=token)
        self.transport = StringTransport()
        self.transport.negotiatedProtocol = b"h2"  # type: ignore[attr-defined]
        self.protocol: Any
        if through_site:
            # As serve_remote builds it: twisted.web switches to its H2Connection (its
            # sending loop on the global reactor) on seeing ALPN h2.
            site = RemoteSite(self.resource, b"/acp", reactor=reactor)
            self.protocol = site.buildProtocol(None)
        else:
            site = RemoteSite(self.resource, b"/acp", reactor=self.h2clock)
            server: Any = H2Connection(self.h2clock)
            server.requestFactory = site.requestFactory
            server.site = site
            server.factory = site
            server.timeOut = None
            server.callLater = self.h2clock.callLater
            self.server = server
            self.protocol = H2FrameReads(server) if guarded else server
        self.protocol.makeConnection(self.transport)
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.client = h2.connection.H2Connection(config=config)
        self.client.initiate_connection()
        self.responses: dict[int, Response] = {}
        self.connection_id = ""
        if not through_site:
            self.flush()

    def _agent(self, conn: AgentConnection) -> EchoAgent:
        self.agents.append(EchoAgent(conn))
        return self.agents[-1]

    # -- the client ---------------------------------------------------------------------

    def request(self, method: str, headers: dict[str, str] | None = None, body: Any = None) -> int:
        """Queue a request (not sent until :meth:`flush`); its stream id."""
        stream_id: int = self.client.get_next_available_stream_id()
        fields = [(":method", method), (":path", "/acp"), (":scheme", "https")]
        fields.append((":authority", "localhost"))
        if self.connection_id:
            fields.append(("acp-connection-id", self.connection_id))
        if body is not None:
            fields.append(("content-type", "application/json"))
        if method == "GET":
            fields.append(("accept", "text/event-stream"))
        fields.extend((headers or {}).items())
        self.client.send_headers(stream_id, fields, end_stream=body is None)
        if body is not None:
            self.client.send_data(stream_id, json.dumps(body).encode(), end_stream=True)
        self.responses[stream_id] = Response()
        return stream_id

    def reset(self, stream_id: int) -> None:
        """Queue ``RST_STREAM(CANCEL)`` for a stream."""
        self.client.reset_stream(stream_id, ErrorCodes.CANCEL)

    def flush(self) -> None:
        """Deliver everything queued in ONE read, then run the server until it is idle
        (exceptions out of the server's ``dataReceived`` propagate)."""
        data = self.client.data_to_send()
        if data:
            self.protocol.dataReceived(data)
        self.settle()

    def settle(self) -> None:
        """Run both clocks and exchange frames until nothing moves."""
        for _ in range(1000):
            self.clock.advance(0)
            self.h2clock.advance(0)
            written = self.transport.value()
            self.transport.clear()
            if written:
                self._received(written)
            reply = self.client.data_to_send()
            if reply:
                self.protocol.dataReceived(reply)
            due = [c for c in self.h2clock.getDelayedCalls() if c.getTime() <= 0]
            if not written and not reply and not due:
                return
        raise AssertionError("the server never went idle")

    async def exchange_until(self, predicate: Callable[[], bool], what: str) -> None:
        """Deliver what is queued in one read, then move frames both ways, the global
        reactor turning, until ``predicate()`` (failing after 10 s saying ``what``)."""
        data = self.client.data_to_send()
        if data:
            self.protocol.dataReceived(data)
        deadline = time.monotonic() + 10
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await deferLater(reactor, 0, lambda: None)
            self.clock.advance(0)
            written = self.transport.value()
            self.transport.clear()
            if written:
                self._received(written)
            reply = self.client.data_to_send()
            if reply:
                self.protocol.dataReceived(reply)

    def _received(self, data: bytes) -> None:
        for event in self.client.receive_data(data):
            response = self.responses.get(getattr(event, "stream_id", 0) or 0)
            if response is None:
                continue
            if isinstance(event, h2.events.ResponseReceived):
                response.headers = {str(k): str(v) for k, v in event.headers or []}
            elif isinstance(event, h2.events.DataReceived):
                response.data += event.data or b""
                self.client.acknowledge_received_data(
                    event.flow_controlled_length or 0, event.stream_id or 0
                )
            elif isinstance(event, h2.events.StreamEnded):
                response.ended = True
            elif isinstance(event, h2.events.StreamReset):
                response.reset = True

    # -- ACP over it --------------------------------------------------------------------

    def open(self) -> tuple[int, Any]:
        """initialize, the connection's event stream, session/new: (stream id, the
        server's RemoteConnection)."""
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize"}
        init["params"] = {"protocolVersion": 1}
        answered = self.request("POST", body=init)
        self.flush()
        assert self.responses[answered].headers[":status"] == "200"
        self.connection_id = self.responses[answered].headers["acp-connection-id"]
        events = self.request("GET")
        self.flush()
        params = {"cwd": "/", "mcpServers": []}
        new = self.request(
            "POST", body={"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": params}
        )
        self.flush()
        assert self.responses[new].headers[":status"] == "202"
        assert b'"sessionId":"s1"' in self.responses[events].data
        return events, self.resource.connections[self.connection_id]

    def prompt(self, request_id: int) -> int:
        params = {"sessionId": "s1", "prompt": [{"type": "text", "text": "hi"}]}
        body = {"jsonrpc": "2.0", "id": request_id, "method": "session/prompt"}
        body["params"] = params
        return self.request("POST", {"acp-session-id": "s1"}, body)


def answered(response: Response, request_id: int) -> bool:
    """Whether an event stream carried the ``end_turn`` answer to ``request_id``."""
    return f'"id":{request_id},"result":{{"stopReason":"end_turn"}}'.encode() in response.data


# -- with acpkit's guard -------------------------------------------------------------------


def test_a_session_stream_reset_in_its_own_read_leaves_every_other_stream_working(
    failures: Failures,
) -> None:
    """A session GET, its RST_STREAM and a prompt POST in one read: the reset GET is
    aborted (no session stream left behind), the POST is answered 202, the prompt's
    answer comes on the connection's event stream, nothing is logged as a failure."""
    wire = Wire(guarded=True)
    events, connection = wire.open()
    session = wire.request("GET", {"acp-session-id": "s1"})
    wire.reset(session)
    post = wire.prompt(2)
    wire.flush()
    assert wire.responses[post].headers[":status"] == "202"
    assert wire.responses[post].ended
    assert answered(wire.responses[events], 2)
    assert not wire.responses[events].ended
    assert connection.listeners == {}
    assert list(wire.server.streams) == [events]
    assert failures.seen == []


def test_a_reset_stream_alone_in_a_read_does_not_stop_the_sending_loop(
    failures: Failures,
) -> None:
    """A session GET and its RST_STREAM alone in one read, while the event stream is
    idle: later requests are still answered and their answers still sent."""
    wire = Wire(guarded=True)
    events, connection = wire.open()
    session = wire.request("GET", {"acp-session-id": "s1"})
    wire.reset(session)
    wire.flush()
    post = wire.prompt(2)
    wire.flush()
    assert wire.responses[post].headers[":status"] == "202"
    assert wire.responses[post].ended
    assert answered(wire.responses[events], 2)
    assert connection.listeners == {}
    assert failures.seen == []


def test_the_clients_close_in_one_read_ends_the_connection_at_once(failures: Failures) -> None:
    """What acpkit's client sends when it closes right after opening a session stream,
    in one read (session GET, its reset, the event stream's reset, DELETE): the DELETE
    is answered 202 and ends the ACP connection (the agent sees it closed), no grace
    period, nothing logged as a failure, no stream left on the HTTP/2 connection."""
    wire = Wire(guarded=True)
    events, _ = wire.open()
    session = wire.request("GET", {"acp-session-id": "s1"})
    wire.reset(session)
    wire.reset(events)
    delete = wire.request("DELETE")
    wire.flush()
    assert wire.responses[delete].headers[":status"] == "202"
    assert wire.resource.connections == {}
    assert len(wire.agents[0].ended) == 1
    assert wire.server.streams == {}
    assert failures.seen == []


def test_a_reset_in_the_read_after_its_request_is_handled_as_before(failures: Failures) -> None:
    """The session GET in one read, its reset in the next: the stream is opened, then
    aborted; nothing else changes."""
    wire = Wire(guarded=True)
    events, connection = wire.open()
    session = wire.request("GET", {"acp-session-id": "s1"})
    wire.flush()
    assert wire.responses[session].headers[":status"] == "200"
    assert list(connection.listeners) == ["s1"]
    wire.reset(session)
    wire.flush()
    assert connection.listeners == {}
    wire.prompt(2)
    wire.flush()
    assert answered(wire.responses[events], 2)
    assert failures.seen == []


def test_a_whole_connection_in_one_read_is_served_frame_by_frame() -> None:
    """Preface, SETTINGS and a request split at awkward places (one byte, then the
    rest): the wrapper holds partial frames and serves the request once it is whole."""
    wire = Wire(guarded=True)
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize"}
    init["params"] = {"protocolVersion": 1}
    stream = wire.request("POST", body=init)
    data = wire.client.data_to_send()
    for piece in (data[:1], data[1:5], data[5:]):
        wire.protocol.dataReceived(piece)
    wire.settle()
    assert wire.responses[stream].headers[":status"] == "200"


def test_a_frame_larger_than_allowed_is_passed_on_and_refused_by_h2() -> None:
    """A frame announcing more than 16 KiB: passed on as it comes (not held here); h2
    refuses it once whole (GOAWAY FRAME_SIZE_ERROR) and the connection is closed."""
    wire = Wire(guarded=True)
    header = (100_000).to_bytes(3, "big") + b"\x00\x00" + (1).to_bytes(4, "big")
    wire.protocol.dataReceived(header + b"x" * 10)
    assert not wire.transport.disconnecting
    wire.protocol.dataReceived(b"x" * (100_000 - 10))
    assert wire.transport.disconnecting
    events = wire.client.receive_data(wire.transport.value())
    goaway = [e for e in events if isinstance(e, h2.events.ConnectionTerminated)]
    assert goaway and goaway[0].error_code == ErrorCodes.FRAME_SIZE_ERROR


def test_other_connections_are_passed_through_untouched() -> None:
    """Without ALPN ``h2`` (HTTP/1.1), reads go to the site's protocol as they come."""
    received: list[bytes] = []

    class Recorder:
        def makeConnection(self, transport: Any) -> None:
            pass

        def dataReceived(self, data: bytes) -> None:
            received.append(data)

        def connectionLost(self, reason: Failure) -> None:
            pass

    reads = H2FrameReads(Recorder())  # type: ignore[arg-type]
    reads.makeConnection(StringTransport())
    reads.dataReceived(b"GET / HTTP/1.1\r\n")
    reads.dataReceived(b"\r\n")
    assert received == [b"GET / HTTP/1.1\r\n", b"\r\n"]


def test_the_remote_site_builds_its_protocol_guarded() -> None:
    """
    RemoteSite's protocols are guarded (admission) around the HTTP/2 frame splitter;
    the site's attributes read through both.
    """
    site = RemoteSite(ACPResource(EchoAgent, clock=Clock()), b"/acp", reactor=Clock())
    protocol = site.buildProtocol(None)
    assert isinstance(protocol, GuardedProtocol)
    assert isinstance(protocol.wrapped, H2FrameReads)
    assert protocol.site is site


class ThroughTheSiteTests(TestCase):
    """The guard where serve_remote puts it: RemoteSite's protocol, on every Twisted
    (no TLS needed: the transport says ALPN chose h2)."""

    timeout = 30

    async def test_the_clients_close_in_one_read_through_the_site(self) -> None:
        """RemoteSite's protocol on an ALPN-h2 transport: initialize, the event stream,
        then the session GET, its reset, the stream's reset and the DELETE in one read:
        the DELETE is answered 202, the ACP connection ends, nothing logged as a
        failure."""
        observer = Failures()
        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)
        wire = Wire(guarded=True, through_site=True)
        self.addCleanup(wire.protocol.connectionLost, Failure(ConnectionDone()))
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize"}
        init["params"] = {"protocolVersion": 1}
        first = wire.request("POST", body=init)
        await wire.exchange_until(lambda: wire.responses[first].ended, "initialize's answer")
        wire.connection_id = wire.responses[first].headers["acp-connection-id"]
        events = wire.request("GET")
        await wire.exchange_until(lambda: bool(wire.responses[events].data), "the stream")
        session = wire.request("GET", {"acp-session-id": "s1"})
        wire.reset(session)
        wire.reset(events)
        delete = wire.request("DELETE")
        await wire.exchange_until(lambda: wire.responses[delete].ended, "the DELETE's answer")
        self.assertEqual(wire.responses[delete].headers[":status"], "202")
        self.assertEqual(wire.resource.connections, {})
        self.assertEqual(observer.seen, [])

    async def test_an_unauthenticated_body_is_discarded_then_answered_401(self) -> None:
        """
        With a token required, an HTTP/2 POST without one: its body (300 kB in DATA
        frames, over several reads) is never stored (no temporary file: the request's
        content stays empty), and once the stream ends it is answered 401 with
        ``WWW-Authenticate: Bearer``; the connection stays pending (not accepted).
        """
        wire = Wire(guarded=True, through_site=True, token=b"s3cret")
        self.addCleanup(wire.protocol.connectionLost, Failure(ConnectionDone()))
        made: list[Any] = []
        inner = wire.protocol.wrapped.wrapped  # guard, frame splitter, twisted.web
        factory = inner.requestFactory

        def recording(*args: Any, **kwargs: Any) -> Any:
            made.append(factory(*args, **kwargs))
            return made[-1]

        inner.requestFactory = recording
        size = 300_000
        stream_id = wire.client.get_next_available_stream_id()
        fields = [(":method", "POST"), (":path", "/acp"), (":scheme", "https")]
        fields += [(":authority", "localhost"), ("content-type", "application/json")]
        fields.append(("content-length", str(size)))
        wire.client.send_headers(stream_id, fields)
        wire.responses[stream_id] = response = Response()
        sent = 0

        def may_send() -> bool:
            return sent == size or wire.client.local_flow_control_window(stream_id) > 0

        while sent < size:
            chunk = min(16_384, size - sent, wire.client.local_flow_control_window(stream_id))
            if chunk:
                wire.client.send_data(stream_id, b"x" * chunk)
                sent += chunk
            await wire.exchange_until(may_send, "the window to open")
        self.assertEqual(len(made), 1)
        self.assertIsInstance(made[0].content, io.BytesIO)  # no temporary file
        self.assertEqual(made[0].content.seek(0, 2), 0)  # nothing kept
        self.assertEqual(response.headers, {})  # not answered before the stream ends
        wire.client.end_stream(stream_id)
        await wire.exchange_until(lambda: response.ended, "the answer")
        self.assertEqual(response.headers[":status"], "401")
        self.assertEqual(response.headers["www-authenticate"], 'Bearer realm="acp"')
        self.assertEqual(wire.protocol.ticket.pending, True)


# -- twisted.web alone: the upstream bug -----------------------------------------------------


def test_twisted_web_alone_raises_out_of_data_received() -> None:
    """Without the guard, the session GET, its reset and a prompt POST in one read: the
    POST's HEADERS made h2 forget the reset stream, so writing the GET's response raises
    StreamIDTooLowError, processingFailed's 500 raises StreamClosedError out of
    dataReceived (in a reactor: "Unhandled Error", the TCP connection dropped with all
    its streams); the POST is never served; the ACP connection lives until its grace
    period ends it."""
    wire = Wire(guarded=False)
    _, connection = wire.open()
    session = wire.request("GET", {"acp-session-id": "s1"})
    wire.reset(session)
    post = wire.prompt(2)
    with pytest.raises(StreamClosedError) as raised:
        wire.flush()
    assert wire.responses[post].headers == {}
    # What the reactor does next: the TCP connection is lost, with every stream on it.
    wire.protocol.connectionLost(Failure(raised.value))
    assert connection.stream is None  # the event stream ended: the grace period runs
    assert connection.listeners == {}  # watched before its write: gone with the socket
    assert wire.resource.connections != {} and wire.agents[0].ended == []
    wire.clock.advance(wire.resource.limits.grace_period)
    assert wire.resource.connections == {} and len(wire.agents[0].ended) == 1
    assert connection.listeners == {}


def test_twisted_web_alone_stops_sending_for_good(failures: Failures) -> None:
    """Without the guard, the session GET and its reset alone in one read, the event
    stream idle: the write wakes the idle sending loop, which raises on the closed stream
    and is never rescheduled; a later POST gets its headers but never its end, and the
    prompt's answer never leaves the server.  The failure surfaces only as "Unhandled
    error in Deferred" when the loop's Deferred is collected."""
    wire = Wire(guarded=False)
    events, _ = wire.open()
    session = wire.request("GET", {"acp-session-id": "s1"})
    wire.reset(session)
    wire.flush()
    post = wire.prompt(2)
    wire.flush()
    assert wire.responses[post].headers[":status"] == "202"
    assert not wire.responses[post].ended
    assert not answered(wire.responses[events], 2)
    gc.collect()
    assert any("StreamClosedError" in seen for seen in failures.seen)


# -- end to end: serve_remote on TLS, acpkit's HTTP/2 client ---------------------------------


@pytest.mark.skipif(NO_TLS_SERVING is not None, reason=NO_TLS_SERVING or "")
class EndToEndTests(TestCase):
    """serve_remote on ``ssl:`` (HTTP/2 by ALPN) and connect_http with session streams."""

    timeout = 60

    async def test_closing_right_after_a_new_session_ends_cleanly(self) -> None:
        """connect_http (session streams on), a session, close at once, five times: each
        time the session stream's GET and its reset reach the server in one read; the
        client's DELETE ends the server's connection at once, no failure is logged, and
        the process's sockets are back to the listening port's."""
        from acpkit.http.tls import ClientTLS
        from acpkit.remote.http_client import connect_http
        from tests.helpers import InteropClient
        from tests.remote.test_remote_faults import fd_links, open_fds, until
        from tests.remote.test_remote_http2 import write_certificate

        observer = Failures()
        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)
        directory = Path(self.mktemp())
        directory.mkdir()
        key, cert = write_certificate(directory)
        fds_before = open_fds()
        description = f"ssl:0:interface=127.0.0.1:privateKey={key}:certKey={cert}"
        agents: list[EchoAgent] = []

        def agent(conn: AgentConnection) -> EchoAgent:
            agents.append(EchoAgent(conn))
            return agents[-1]

        port: Any = await serve_remote(reactor, description, agent, no_token=True)
        self.addCleanup(port.stopListening)
        acp = port.factory.wrappedFactory.acp
        url = f"https://localhost:{port.getHost().port}/acp"
        for _ in range(5):
            conn = await connect_http(reactor, url, InteropClient(), tls=ClientTLS(cert))
            await conn.initialize()
            await conn.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))
            self.assertEqual(conn.protocol.transport.http_version, "HTTP/2")  # type: ignore[union-attr]
            conn.close()
            await conn.closed
            # The DELETE ends it: well before the grace period (60 s).
            await until(lambda: acp.connections == {}, "the server's connection to end", 10)
        self.assertEqual([len(a.ended) for a in agents], [1] * 5)
        await until(
            lambda: open_fds() <= fds_before + 1,
            f"fds back to {fds_before + 1} (now {open_fds()}: {fd_links()})",
        )
        self.assertEqual(observer.seen, [])
