"""
:class:`acpkit.http.http2.HTTP2Agent` without a network: its connection runs over a
``StringTransport`` whose bytes a test pumps to and from a server-side ``h2``
``H2Connection`` written here (h2 does both sides).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from h2.config import H2Configuration
from h2.connection import ConnectionState, H2Connection
from h2.errors import ErrorCodes
from h2.events import (
    DataReceived,
    Event,
    PingAckReceived,
    RequestReceived,
    StreamEnded,
    StreamReset,
    WindowUpdated,
)
from h2.settings import SettingCodes, Settings
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.defer import Deferred, succeed
from twisted.internet.error import ConnectionLost
from twisted.internet.interfaces import (
    IConsumer,
    IProtocol,
    IProtocolFactory,
    IStreamClientEndpoint,
)
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.client import ResponseDone, ResponseFailed, ResponseNeverReceived
from twisted.web.http_headers import Headers
from twisted.web.iweb import IAgent, IBodyProducer, IResponse
from zope.interface import implementer

from acpkit.http.http2 import HTTP2Agent, RequestNotProcessed
from acpkit.http.http2 import StreamReset as AgentStreamReset
from acpkit.http.responses import BodyReader, failure_text
from tests.helpers import examples

URL = b"http://example.test:8080/acp?x=1"
BIG = 200_000  # well past the 65 535-byte initial window


class Server:
    """The server side of one connection: an h2 H2Connection and what it received."""

    def __init__(self, *, max_streams: int | None = None) -> None:
        self.h2 = H2Connection(H2Configuration(client_side=False, header_encoding=None))
        if max_streams is not None:
            self.h2.local_settings = Settings(
                client=False, initial_values={SettingCodes.MAX_CONCURRENT_STREAMS: max_streams}
            )
        self.h2.initiate_connection()
        self.events: list[Event] = []
        self.requests: dict[int, dict[bytes, bytes]] = {}
        self.bodies: dict[int, bytearray] = {}
        self.ended: list[int] = []
        self.outbox: dict[int, tuple[bytearray, bool]] = {}
        #: Called with the stream id when a request is complete.
        self.on_request: Callable[[int], None] = lambda stream_id: None

    def receive(self, data: bytes) -> None:
        for event in self.h2.receive_data(data):
            self.events.append(event)
            if isinstance(event, RequestReceived):
                assert event.stream_id is not None
                self.requests[event.stream_id] = dict(event.headers or [])
                self.bodies[event.stream_id] = bytearray()
            elif isinstance(event, DataReceived):
                assert event.stream_id is not None and event.data is not None
                self.bodies[event.stream_id] += event.data
                self.h2.acknowledge_received_data(
                    event.flow_controlled_length or 0, event.stream_id
                )
            elif isinstance(event, StreamEnded):
                assert event.stream_id is not None
                self.ended.append(event.stream_id)
                self.on_request(event.stream_id)
            elif isinstance(event, WindowUpdated):
                self.send_pending()

    def respond(
        self,
        stream_id: int,
        body: bytes = b"",
        *,
        status: int = 200,
        headers: list[tuple[bytes, bytes]] | None = None,
        end: bool = True,
    ) -> None:
        """Headers now; the body as the client's windows allow."""
        self.h2.send_headers(stream_id, [(b":status", b"%d" % status), *(headers or [])])
        self.outbox[stream_id] = (bytearray(body), end)
        self.send_pending()

    def send_pending(self) -> None:
        for stream_id, (data, end) in list(self.outbox.items()):
            while data:
                room = min(
                    self.h2.local_flow_control_window(stream_id), self.h2.max_outbound_frame_size
                )
                if room <= 0:
                    break
                self.h2.send_data(stream_id, bytes(data[:room]))
                del data[:room]
            if not data:
                if end:
                    self.h2.end_stream(stream_id)
                del self.outbox[stream_id]

    def window_updates(self, stream_id: int) -> int:
        return sum(
            1 for e in self.events if isinstance(e, WindowUpdated) and e.stream_id == stream_id
        )


@implementer(IStreamClientEndpoint)
class Loop:
    """The agent's connections, each a StringTransport pumped to a :class:`Server`."""

    def __init__(self, make_server: Callable[[], Server] = Server) -> None:
        self.make_server = make_server
        self.connections: list[tuple[IProtocol, StringTransport, Server]] = []
        #: Splits the server's bytes before the client gets them (None: whole).
        self.chunker: Callable[[bytes], list[bytes]] | None = None

    def connect(self, factory: IProtocolFactory) -> Deferred[IProtocol]:
        protocol = factory.buildProtocol(cast(Any, None))
        assert protocol is not None
        transport = StringTransport()
        protocol.makeConnection(transport)
        self.connections.append((protocol, transport, self.make_server()))
        return succeed(protocol)

    @property
    def server(self) -> Server:
        return self.connections[-1][2]

    def pump(self) -> None:
        """Move bytes both ways until neither side has anything to say."""
        moved = True
        while moved:
            moved = False
            for protocol, transport, server in self.connections:
                out = transport.value()
                if out:
                    transport.clear()
                    server.receive(out)
                    moved = True
                back = server.h2.data_to_send()
                if back and not transport.disconnecting:
                    pieces = self.chunker(back) if self.chunker else [back]
                    for piece in pieces:
                        protocol.dataReceived(piece)
                    moved = True


def make_agent(loop: Loop, **kwargs: Any) -> HTTP2Agent:
    return HTTP2Agent(
        object(),
        http2="prior-knowledge",
        endpoint_factory=lambda scheme, host, port: loop,
        **kwargs,
    )


class Body:
    """Collects a response body through acpkit's BodyReader."""

    def __init__(self, response: IResponse, *, pause_first: bool = False) -> None:
        self.data = bytearray()
        self.chunks = 0
        self.end: Failure | None = None
        self.pause_first = pause_first
        self.reader = BodyReader(self._data, self._end, what="test")
        response.deliverBody(self.reader)

    def _data(self, chunk: bytes) -> None:
        self.data += chunk
        self.chunks += 1
        if self.pause_first and self.chunks == 1:
            assert self.reader.transport is not None
            self.reader.transport.pauseProducing()  # type: ignore[attr-defined]

    def _end(self, reason: Failure) -> None:
        self.end = reason

    def resume(self) -> None:
        assert self.reader.transport is not None
        self.reader.transport.resumeProducing()  # type: ignore[attr-defined]


@implementer(IBodyProducer)
class BytesProducer:
    """A request body written in one go (the agent must split it to the windows)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.length = len(data)
        self.paused = 0

    def startProducing(self, consumer: IConsumer) -> Deferred[None]:
        consumer.write(self.data)
        return succeed(None)

    def pauseProducing(self) -> None:
        self.paused += 1

    def resumeProducing(self) -> None:
        pass

    def stopProducing(self) -> None:
        pass


def result_of(d: Deferred[Any]) -> Any:
    box: list[Any] = []
    d.addBoth(box.append)
    assert box, "the Deferred has not fired"
    if isinstance(box[0], Failure):
        box[0].raiseException()
    return box[0]


def failure_of(d: Deferred[Any]) -> Failure:
    box: list[Any] = []
    d.addBoth(box.append)
    assert box and isinstance(box[0], Failure), f"expected a failure, got {box}"
    return box[0]


class HTTP2AgentTests(SynchronousTestCase):
    def test_request_and_response(self) -> None:
        """A GET goes out as HEADERS with the pseudo-headers and the caller's headers
        (lower case; Host and Connection dropped); the response provides IResponse with
        version HTTP/2.0, the status, its phrase, headers, length and the body, ended by
        ResponseDone."""
        loop = Loop()
        agent = make_agent(loop)
        self.assertTrue(IAgent.providedBy(agent))
        headers = Headers({b"Accept": [b"text/event-stream"], b"Connection": [b"close"]})
        headers.addRawHeader(b"Host", b"ignored")
        d = agent.request(b"GET", URL, headers)
        loop.server.on_request = lambda sid: loop.server.respond(
            sid, b"hello", headers=[(b"content-type", b"text/plain"), (b"content-length", b"5")]
        )
        loop.pump()
        response = result_of(d)
        self.assertTrue(IResponse.providedBy(response))
        self.assertEqual(
            (response.version, response.code, response.phrase, response.length),
            ((b"HTTP", 2, 0), 200, b"OK", 5),
        )
        self.assertEqual(response.headers.getRawHeaders(b"content-type"), [b"text/plain"])
        body = Body(response)
        self.assertEqual(bytes(body.data), b"hello")
        assert body.end is not None
        self.assertTrue(body.end.check(ResponseDone))
        sent = loop.server.requests[1]
        self.assertEqual(sent[b":method"], b"GET")
        self.assertEqual(sent[b":scheme"], b"http")
        self.assertEqual(sent[b":authority"], b"example.test:8080")
        self.assertEqual(sent[b":path"], b"/acp?x=1")
        self.assertEqual(sent[b"accept"], b"text/event-stream")
        self.assertNotIn(b"host", sent)
        self.assertNotIn(b"connection", sent)

    def test_two_concurrent_streams_on_one_connection(self) -> None:
        """Two requests share one connection (streams 1 and 3); answered in reverse
        order, each gets its own body."""
        loop = Loop()
        agent = make_agent(loop)
        first = agent.request(b"GET", URL)
        second = agent.request(b"POST", URL, None, BytesProducer(b"two"))
        loop.pump()
        self.assertEqual(len(loop.connections), 1)
        self.assertEqual(sorted(loop.server.requests), [1, 3])
        self.assertEqual(bytes(loop.server.bodies[3]), b"two")
        loop.server.respond(3, b"answer 3")
        loop.server.respond(1, b"answer 1")
        loop.pump()
        self.assertEqual(bytes(Body(result_of(first)).data), b"answer 1")
        self.assertEqual(bytes(Body(result_of(second)).data), b"answer 3")

    def test_a_body_of_known_length_ends_the_stream_with_its_last_data_frame(self) -> None:
        """A POST whose body's length is known is HEADERS and one DATA frame carrying
        END_STREAM: no empty DATA frame after the body (a frame less for the server to
        process per request); the server gets the body whole and the request ended."""
        loop = Loop()
        agent = make_agent(loop)
        agent.request(b"POST", URL, None, BytesProducer(b'{"jsonrpc":"2.0"}'))
        _, transport, server = loop.connections[-1]
        events = server.h2.receive_data(transport.value())
        transport.clear()
        kinds = [
            (type(e).__name__, getattr(e, "stream_id", None))
            for e in events
            if isinstance(e, (RequestReceived, DataReceived, StreamEnded))
        ]
        self.assertEqual(kinds, [("RequestReceived", 1), ("DataReceived", 1), ("StreamEnded", 1)])
        data = [e for e in events if isinstance(e, DataReceived)]
        self.assertEqual(data[0].data, b'{"jsonrpc":"2.0"}')
        self.assertIs(data[0].stream_ended, events[-1])

    def test_bodies_larger_than_the_initial_window_both_ways(self) -> None:
        """A 200 000-byte request body is sent within the server's windows (the producer
        is paused meanwhile) and a 200 000-byte response body arrives whole: the agent
        acknowledges what it reads with WINDOW_UPDATE."""
        loop = Loop()
        agent = make_agent(loop)
        upload = bytes(range(256)) * (BIG // 256)
        producer = BytesProducer(upload)
        d = agent.request(b"POST", URL, None, producer)
        download = bytes(reversed(upload))
        loop.server.on_request = lambda sid: loop.server.respond(sid, download)
        loop.pump()
        self.assertEqual(bytes(loop.server.bodies[1]), upload)
        self.assertEqual(loop.server.requests[1][b"content-length"], b"%d" % len(upload))
        self.assertGreater(producer.paused, 0)
        body = Body(result_of(d))
        loop.pump()
        self.assertEqual(bytes(body.data), download)
        assert body.end is not None
        self.assertTrue(body.end.check(ResponseDone))

    def test_a_paused_reader_stops_window_updates(self) -> None:
        """A body protocol that pauses its transport gets nothing more and the stream's
        window is not reopened (no WINDOW_UPDATE for it): the server stops at the window.
        Resumed, it gets the rest, and the window updates flow again."""
        loop = Loop()
        agent = make_agent(loop)
        d = agent.request(b"GET", URL)
        loop.pump()
        loop.server.respond(1, b"x" * BIG)
        loop.pump()
        body = Body(result_of(d), pause_first=True)
        loop.pump()
        self.assertEqual(body.chunks, 1)
        self.assertEqual(loop.server.window_updates(1), 0)
        self.assertIn(1, loop.server.outbox)  # the server is blocked by the window
        self.assertLessEqual(BIG - len(loop.server.outbox[1][0]), 65535)
        body.resume()
        loop.pump()
        self.assertEqual(len(body.data), BIG)
        self.assertGreater(loop.server.window_updates(1), 0)
        assert body.end is not None
        self.assertTrue(body.end.check(ResponseDone))

    def test_a_paused_reader_does_not_starve_the_other_streams(self) -> None:
        """While one stream's reader is paused with its window full, a 200 000-byte
        body on another stream of the same connection arrives whole (the connection's
        window is not the stream's 64 KiB)."""
        loop = Loop()
        agent = make_agent(loop)
        slow = agent.request(b"GET", URL)
        fast = agent.request(b"GET", URL)
        loop.pump()
        loop.server.respond(1, b"s" * BIG)
        loop.pump()
        paused = Body(result_of(slow), pause_first=True)
        loop.pump()
        loop.server.respond(3, b"f" * BIG)
        loop.pump()
        body = Body(result_of(fast))
        loop.pump()
        self.assertEqual(len(body.data), BIG)
        assert body.end is not None
        self.assertTrue(body.end.check(ResponseDone))
        self.assertEqual(paused.chunks, 1)

    def test_rst_stream_from_the_server_fails_that_request_only(self) -> None:
        """The server resets stream 1: that request fails with StreamReset naming the
        code; stream 3 on the same connection is answered."""
        loop = Loop()
        agent = make_agent(loop)
        first = agent.request(b"GET", URL)
        second = agent.request(b"GET", URL)
        loop.pump()
        loop.server.h2.reset_stream(1, ErrorCodes.INTERNAL_ERROR)
        loop.server.respond(3, b"fine")
        loop.pump()
        failure = failure_of(first)
        self.assertTrue(failure.check(ResponseNeverReceived))
        self.assertIn("reset HTTP/2 stream 1: INTERNAL_ERROR", failure_text(failure))
        self.assertIsInstance(cast(Any, failure.value).reasons[0].value, AgentStreamReset)
        self.assertEqual(bytes(Body(result_of(second)).data), b"fine")

    def test_goaway_fails_streams_above_last_and_opens_a_new_connection(self) -> None:
        """GOAWAY(last_stream_id=3) with three streams open: stream 5 fails with the
        retryable RequestNotProcessed, streams 1 and 3 finish on the old connection, and
        a new request opens a second connection."""
        loop = Loop()
        agent = make_agent(loop)
        ds = [agent.request(b"GET", URL) for _ in range(3)]
        loop.pump()
        old = loop.server
        old.h2.close_connection(last_stream_id=3)
        # A graceful server finishes streams 1 and 3 (h2 itself would refuse to).
        old.h2.state_machine.state = ConnectionState.SERVER_OPEN
        loop.pump()
        failure = failure_of(ds[2])
        self.assertTrue(failure.check(ResponseNeverReceived))
        reason = cast(Any, failure.value).reasons[0]
        self.assertTrue(reason.check(RequestNotProcessed))
        self.assertTrue(reason.value.retryable)
        later = agent.request(b"GET", URL)
        loop.pump()
        self.assertEqual(len(loop.connections), 2)
        old.respond(1, b"one")
        old.respond(3, b"three")
        loop.server.on_request = lambda sid: None
        loop.server.respond(1, b"new")
        loop.pump()
        self.assertEqual(bytes(Body(result_of(ds[0])).data), b"one")
        self.assertEqual(bytes(Body(result_of(ds[1])).data), b"three")
        self.assertEqual(bytes(Body(result_of(later)).data), b"new")
        self.assertTrue(loop.connections[0][1].disconnecting)

    def test_connection_lost_mid_body_fails_with_the_reason(self) -> None:
        """The connection drops while one body is half read and another request has no
        answer yet: the body ends with ResponseFailed carrying the reason, the other
        request fails with ResponseNeverReceived carrying it."""
        loop = Loop()
        agent = make_agent(loop)
        reading = agent.request(b"GET", URL)
        waiting = agent.request(b"GET", URL)
        loop.pump()
        loop.server.respond(1, b"half", end=False)
        loop.pump()
        body = Body(result_of(reading))
        protocol = loop.connections[0][0]
        protocol.connectionLost(Failure(ConnectionLost("the cable was cut")))
        assert body.end is not None
        self.assertTrue(body.end.check(ResponseFailed))
        self.assertIn("the cable was cut", failure_text(body.end))
        self.assertEqual(bytes(body.data), b"half")
        failure = failure_of(waiting)
        self.assertTrue(failure.check(ResponseNeverReceived))
        self.assertIn("the cable was cut", failure_text(failure))

    def test_requests_beyond_max_concurrent_streams_wait(self) -> None:
        """The server allows one stream: the second request goes out only when the first
        stream ends, in order."""
        loop = Loop(lambda: Server(max_streams=1))
        agent = make_agent(loop)
        first = agent.request(b"GET", URL)
        loop.pump()
        second = agent.request(b"GET", URL + b"&second")
        loop.pump()
        self.assertEqual(sorted(loop.server.requests), [1])
        loop.server.respond(1, b"one")
        loop.pump()
        self.assertEqual(sorted(loop.server.requests), [1, 3])
        self.assertEqual(loop.server.requests[3][b":path"], b"/acp?x=1&second")
        loop.server.respond(3, b"two")
        loop.pump()
        self.assertEqual(bytes(Body(result_of(first)).data), b"one")
        self.assertEqual(bytes(Body(result_of(second)).data), b"two")

    def test_stopping_a_body_or_cancelling_resets_the_stream(self) -> None:
        """A reader that aborts its body, and a cancelled request Deferred, each send
        RST_STREAM(CANCEL) for their stream; the reader's end is reported (done fires),
        the Deferred fails with CancelledError; the connection goes on."""
        from twisted.internet.defer import CancelledError

        loop = Loop()
        agent = make_agent(loop)
        reading = agent.request(b"GET", URL)
        cancelled = agent.request(b"GET", URL)
        loop.pump()
        loop.server.respond(1, b"x" * 1000, end=False)
        loop.pump()
        body = Body(result_of(reading))
        body.reader.abort()
        self.assertTrue(body.reader.done.called)
        cancelled.cancel()
        self.assertTrue(failure_of(cancelled).check(CancelledError))
        loop.pump()
        resets = {
            e.stream_id: e.error_code for e in loop.server.events if isinstance(e, StreamReset)
        }
        self.assertEqual(resets, {1: ErrorCodes.CANCEL, 3: ErrorCodes.CANCEL})
        after = agent.request(b"GET", URL)
        loop.server.on_request = lambda sid: loop.server.respond(sid, b"still here")
        loop.pump()
        self.assertEqual(bytes(Body(result_of(after)).data), b"still here")

    def test_a_ping_from_the_server_is_answered(self) -> None:
        """The server's PING gets its ACK."""
        loop = Loop()
        agent = make_agent(loop)
        agent.request(b"GET", URL)
        loop.pump()
        loop.server.h2.ping(b"12345678")
        loop.pump()
        acks = [e for e in loop.server.events if isinstance(e, PingAckReceived)]
        self.assertEqual([e.ping_data for e in acks], [b"12345678"])

    def test_garbage_from_the_server_fails_every_stream(self) -> None:
        """A frame that breaks HTTP/2 (DATA on stream 0) fails the open request with a
        reason saying the server broke HTTP/2, and the connection is closed."""
        loop = Loop()
        agent = make_agent(loop)
        d = agent.request(b"GET", URL)
        loop.pump()
        protocol, transport, _ = loop.connections[0]
        protocol.dataReceived(b"\x00\x00\x01\x00\x00\x00\x00\x00\x00x")
        self.assertIn("broke HTTP/2", failure_text(failure_of(d)))
        self.assertTrue(transport.disconnecting)

    def test_an_http11_answer_to_prior_knowledge_says_so(self) -> None:
        """A server without cleartext HTTP/2 answers the preface in HTTP/1.1: the request
        fails at once saying the server has no HTTP/2 with prior knowledge (h2 alone
        would wait for a frame forever)."""
        loop = Loop()
        agent = make_agent(loop)
        d = agent.request(b"GET", URL)
        protocol, transport, _ = loop.connections[0]
        protocol.dataReceived(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        self.assertIn("does not speak HTTP/2 with prior knowledge", failure_text(failure_of(d)))
        self.assertTrue(transport.disconnecting)

    def test_http_without_prior_knowledge_goes_to_the_http11_agent(self) -> None:
        """http:// with http2="auto" (and anything with "never") is Twisted's HTTP/1.1
        agent's; prior knowledge sends it over h2c."""

        @implementer(IAgent)
        class Recorder:
            def __init__(self) -> None:
                self.uris: list[bytes] = []

            def request(self, method: bytes, uri: bytes, *args: Any) -> Deferred[IResponse]:
                self.uris.append(uri)
                return Deferred()

        loop = Loop()
        for mode, expected in (("auto", [URL]), ("never", [URL, b"https://x.test/"])):
            recorder = Recorder()
            agent = HTTP2Agent(
                object(),
                http2=mode,  # type: ignore[arg-type]
                http11_agent=recorder,
                endpoint_factory=lambda *_: loop,
            )
            agent.request(b"GET", URL)
            if mode == "never":
                agent.request(b"GET", b"https://x.test/")
            self.assertEqual(recorder.uris, expected)
        self.assertEqual(loop.connections, [])
        with self.assertRaises(ValueError):
            HTTP2Agent(object(), http2="sometimes")  # type: ignore[arg-type]


@st.composite
def chunkings(draw: st.DrawFn) -> Callable[[bytes], list[bytes]]:
    sizes = draw(st.lists(st.integers(1, 70), min_size=1, max_size=20))

    def chunk(data: bytes) -> list[bytes]:
        pieces = []
        i = 0
        k = 0
        while i < len(data):
            size = sizes[k % len(sizes)]
            pieces.append(data[i : i + size])
            i += size
            k += 1
        return pieces

    return chunk


class ChunkingProperty(SynchronousTestCase):
    @settings(max_examples=examples(2 / 3), deadline=None)
    @given(chunkings())
    def test_any_chunking_of_the_server_bytes_gives_the_same_responses(
        self, chunker: Callable[[bytes], list[bytes]]
    ) -> None:
        """However the server's bytes are cut before the agent reads them, three
        concurrent requests get the same statuses, headers and bodies."""
        loop = Loop()
        loop.chunker = chunker
        agent = make_agent(loop)
        ds = [agent.request(b"GET", URL + b"&%d" % i) for i in range(3)]
        loop.pump()
        bodies = {1: b"a" * 70_000, 3: b"", 5: b"short"}
        for sid, body in bodies.items():
            loop.server.respond(sid, body, status=200 + sid, headers=[(b"x-stream", b"%d" % sid)])
        loop.pump()
        got = []
        for d in ds:
            response = result_of(d)
            reader = Body(response)
            loop.pump()
            assert reader.end is not None
            got.append(
                (
                    response.code,
                    response.headers.getRawHeaders(b"x-stream"),
                    bytes(reader.data),
                    bool(reader.end.check(ResponseDone)),
                )
            )
        self.assertEqual(
            got,
            [(200 + sid, [b"%d" % sid], body, True) for sid, body in bodies.items()],
        )


class WithoutH2Tests(SynchronousTestCase):
    def test_without_h2_auto_is_http11_and_prior_knowledge_refused(self) -> None:
        """Without the h2 package, "auto" sends https:// through the HTTP/1.1 agent (no
        TLS handshake wasted on ALPN) and "prior-knowledge" is an ImportError naming h2."""
        from acpkit.http import http2 as http2_agent

        self.patch(http2_agent, "h2_installed", lambda: False)
        uris: list[bytes] = []

        @implementer(IAgent)
        class Recorder:
            def request(self, method: bytes, uri: bytes, *args: Any) -> Deferred[IResponse]:
                uris.append(uri)
                return Deferred()

        loop = Loop()
        agent = HTTP2Agent(object(), http11_agent=Recorder(), endpoint_factory=lambda *_: loop)
        agent.request(b"GET", b"https://x.test/acp")
        self.assertEqual(uris, [b"https://x.test/acp"])
        self.assertEqual(loop.connections, [])
        with self.assertRaises(ImportError) as caught:
            HTTP2Agent(object(), http2="prior-knowledge")
        self.assertIn("h2", str(caught.exception))
