"""
An HTTP/2 client for Twisted: :class:`HTTP2Agent`, an ``IAgent`` on the ``h2`` package.

The ``h2`` state machine (sans-IO) does the protocol; a small Twisted protocol moves its
bytes.  Responses provide ``IResponse`` as Twisted's own client's do (``version`` is
``(b"HTTP", 2, 0)``; a body ends with ``ResponseDone``, or ``ResponseFailed``; a request
with no response fails with ``ResponseNeverReceived``), so ``treq.client.HTTPClient`` and
:class:`acpkit.http.responses.BodyReader` run over it unchanged.

==========================================  ============================================
situation                                   what the agent does
==========================================  ============================================
``https://``, ``http2="auto"`` (default)    TLS offering ``h2`` then ``http/1.1`` by
                                            ALPN; ``h2`` chosen: HTTP/2
the server picks ``http/1.1`` or no ALPN    that TLS connection is closed (one handshake
                                            wasted) and the origin's requests, now and
                                            later, go to Twisted's HTTP/1.1 ``Agent``
``http://``, ``http2="auto"``/``"never"``   HTTP/1.1 (Twisted's ``Agent``)
``http://``, ``http2="prior-knowledge"``    HTTP/2 in cleartext from the first byte
                                            (h2c with prior knowledge, RFC 9113 §3.3)
``https://``, ``http2="never"``             HTTP/1.1 over TLS
several requests to one origin              one connection, one stream each
more requests than the server allows        the rest wait, in order, for a stream to
                                            end (``SETTINGS_MAX_CONCURRENT_STREAMS``)
a request body                              sent within the server's flow-control
                                            windows; its producer is paused while the
                                            window is shut; of a known length, its
                                            last DATA frame ends the stream (no empty
                                            DATA frame after it)
a response body                             ``WINDOW_UPDATE`` as the body's protocol
                                            reads it; a protocol that calls
                                            ``transport.pauseProducing()`` gets nothing
                                            and acknowledges nothing until it resumes
                                            (the server's window closes: back-pressure);
                                            the connection's window is 16 MiB, so that
                                            stream's shut window (64 KiB) does not stop
                                            the others
the body's protocol stops its transport     ``RST_STREAM(CANCEL)``; the protocol gets
                                            ``connectionLost`` (``ResponseFailed``)
the request's Deferred cancelled            ``RST_STREAM(CANCEL)`` (or never sent);
                                            ``CancelledError``
``RST_STREAM`` from the server              that request alone fails
                                            (:class:`StreamReset`)
``GOAWAY`` from the server                  requests above its last stream id fail with
                                            :class:`RequestNotProcessed` (safe to
                                            retry); those below finish; new requests
                                            open a new connection
the connection is lost                      every open stream fails with the reason
a frame that breaks HTTP/2                  every open stream fails
                                            (:class:`HTTP2ProtocolError`); the
                                            connection is closed
an HTTP/1.x answer to h2c's preface         the same, saying the server has no HTTP/2
                                            with prior knowledge
a PING from the server                      answered (``h2`` does it)
a server push                               refused (``SETTINGS_ENABLE_PUSH`` is 0)
``close()``                                 ``GOAWAY`` and close every connection
the ``h2`` package is not installed         ``"auto"`` is HTTP/1.1 everywhere;
                                            ``"prior-knowledge"`` is an ``ImportError``
==========================================  ============================================
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, cast

import attrs
from twisted.internet.defer import Deferred, DeferredList, succeed
from twisted.internet.endpoints import HostnameEndpoint, connectProtocol, wrapClientTLS
from twisted.internet.error import ConnectionAborted
from twisted.internet.interfaces import (
    IConsumer,
    IHandshakeListener,
    IPushProducer,
    IStreamClientEndpoint,
)
from twisted.internet.protocol import Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.client import URI, ResponseDone, ResponseFailed, ResponseNeverReceived
from twisted.web.http import RESPONSES
from twisted.web.http_headers import Headers
from twisted.web.iweb import (
    UNKNOWN_LENGTH,
    IAgent,
    IBodyProducer,
    IClientRequest,
    IPolicyForHTTPS,
    IResponse,
)
from zope.interface import implementer

if TYPE_CHECKING:
    from h2.connection import H2Connection
    from twisted.internet.interfaces import IProtocol

    from acpkit.http.tls import ClientTLS

__all__ = [
    "CONNECTION_WINDOW",
    "HTTP2Agent",
    "HTTP2Mode",
    "HTTP2ProtocolError",
    "RequestNotProcessed",
    "StreamReset",
    "h2_installed",
]

#: ``"auto"``: HTTP/2 when TLS's ALPN picks it, else HTTP/1.1 (and HTTP/1.1 for
#: ``http://``); ``"prior-knowledge"``: HTTP/2 on ``http://`` too (h2c); ``"never"``.
HTTP2Mode = Literal["auto", "prior-knowledge", "never"]

ALPN = (b"h2", b"http/1.1")

#: Request headers HTTP/2 forbids (RFC 9113 §8.2.2); ``host`` becomes ``:authority``.
_CONNECTION_HEADERS = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade", b"host"}
)

#: The connection-level receive window (each stream's stays at the 65 535-byte default).
CONNECTION_WINDOW = 16 * 1024 * 1024

#: Bytes of request body buffered past the server's window before its producer pauses.
_BODY_BUFFER = 65536

Origin = tuple[bytes, bytes, int]


class StreamReset(Exception):
    """The server reset this request's HTTP/2 stream (RST_STREAM)."""

    def __init__(self, stream_id: int, error_code: int) -> None:
        self.stream_id = stream_id
        self.error_code = error_code
        super().__init__(f"the server reset HTTP/2 stream {stream_id}: {_code_name(error_code)}")


class RequestNotProcessed(Exception):
    """
    The server says it did not process this request (a GOAWAY whose last stream id is
    below the request's stream, or ``RST_STREAM(REFUSED_STREAM)``): it may be retried.
    """

    retryable = True


def h2_installed() -> bool:
    """Whether the ``h2`` package can be imported."""
    from importlib.util import find_spec

    return find_spec("h2") is not None


def _code_name(code: int) -> str:
    from h2.errors import ErrorCodes

    try:
        return f"{ErrorCodes(code).name} (0x{code:x})"
    except ValueError:
        return f"error 0x{code:x}"


@implementer(IAgent)
class HTTP2Agent:
    """
    ``IAgent`` speaking HTTP/2 where it can (see the module docstring), HTTP/1.1 through
    Twisted's ``Agent`` elsewhere.

    ``tls``: the trust root and client certificate for ``https://`` (default: the
    platform's authorities).  ``pool``: the HTTP/1.1 ``Agent``'s connection pool.
    ``http11_agent``: the HTTP/1.1 agent to use instead of one made here.
    ``endpoint_factory(scheme, host, port)``: the TCP endpoint to an origin (tests; TLS
    is added around it for ``https``).

    With ``http2="auto"`` on ``https://``, an origin whose server does not pick ``h2`` by
    ALPN costs one TLS handshake, the first time: that connection is closed and the
    origin remembered as HTTP/1.1 for this agent's life.
    """

    _log = Logger()

    def __init__(
        self,
        reactor: Any,
        *,
        http2: HTTP2Mode = "auto",
        tls: ClientTLS | None = None,
        connect_timeout: float = 30.0,
        pool: Any = None,
        http11_agent: IAgent | None = None,
        endpoint_factory: Callable[[bytes, str, int], IStreamClientEndpoint] | None = None,
    ) -> None:
        if http2 not in ("auto", "prior-knowledge", "never"):
            raise ValueError(f"http2 must be 'auto', 'prior-knowledge' or 'never': {http2!r}")
        #: Whether the h2 package is installed (without it "auto" is HTTP/1.1).
        self.h2_installed = h2_installed()
        if http2 == "prior-knowledge" and not self.h2_installed:
            raise ImportError(
                "HTTP/2 with prior knowledge needs the h2 package (pip install h2, or "
                "the remote extra)"
            )
        self._reactor = reactor
        self.http2: HTTP2Mode = http2
        self._tls = tls
        self._connect_timeout = connect_timeout
        self._pool = pool
        if http11_agent is None:
            from twisted.web.client import Agent

            kwargs: dict[str, Any] = {}
            if tls is not None:
                kwargs["contextFactory"] = _TLSPolicy(tls)
            http11_agent = Agent(reactor, connectTimeout=connect_timeout, pool=pool, **kwargs)
        self._http11 = http11_agent
        self._endpoint_factory = endpoint_factory
        #: Origins whose server did not pick h2 by ALPN.
        self.http11_origins: set[Origin] = set()
        self._connections: dict[Origin, _H2ClientProtocol] = {}
        self._connecting: dict[Origin, list[_Request]] = {}
        self._all: set[_H2ClientProtocol] = set()
        self._closed = False

    # -- IAgent --------------------------------------------------------------------------

    def request(
        self,
        method: bytes,
        uri: bytes,
        headers: Headers | None = None,
        bodyProducer: IBodyProducer | None = None,
    ) -> Deferred[IResponse]:
        """Send one request; its response once its headers came."""
        parsed = URI.fromBytes(uri)
        origin: Origin = (parsed.scheme, parsed.host, parsed.port)
        if not self._speaks_http2(origin):
            return self._http11.request(method, uri, headers, bodyProducer)
        request = _Request(self, origin, method, uri, parsed, headers, bodyProducer)
        self._route(request)
        return request.deferred

    def close(self) -> Deferred[None]:
        """GOAWAY and close every HTTP/2 connection, and the HTTP/1.1 pool's; fires when
        they are closed.  Requests made after fail."""
        self._closed = True
        waits: list[Deferred[Any]] = []
        for request in [r for queue in self._connecting.values() for r in queue]:
            request.fail(Failure(ConnectionAborted("the HTTP/2 agent was closed")))
        self._connecting.clear()
        for protocol in list(self._all):
            waits.append(protocol.close())
        if self._pool is not None:
            waits.append(self._pool.closeCachedConnections())
        return DeferredList(waits).addCallback(lambda _: None)

    # -- routing -------------------------------------------------------------------------

    def _speaks_http2(self, origin: Origin) -> bool:
        if origin in self.http11_origins or self.http2 == "never" or not self.h2_installed:
            return False
        return origin[0] == b"https" or self.http2 == "prior-knowledge"

    def _route(self, request: _Request) -> None:
        """Give ``request`` to its origin's connection, opening one if needed."""
        origin = request.origin
        if self._closed:
            request.fail(Failure(ConnectionAborted("the HTTP/2 agent was closed")))
            return
        if not self._speaks_http2(origin):
            request.hand_to(self._http11)
            return
        protocol = self._connections.get(origin)
        if protocol is not None:
            protocol.submit(request)
            return
        waiting = self._connecting.get(origin)
        if waiting is not None:
            waiting.append(request)
            return
        self._connecting[origin] = [request]
        self._connect(origin)

    def _connect(self, origin: Origin) -> None:
        scheme, host_bytes, port = origin
        host = host_bytes.decode("idna")
        tls = scheme == b"https"
        if self._endpoint_factory is not None:
            endpoint = self._endpoint_factory(scheme, host, port)
        else:
            endpoint = HostnameEndpoint(self._reactor, host, port, timeout=self._connect_timeout)
        if tls:
            from acpkit.http.tls import ClientTLS

            creator = (self._tls or ClientTLS()).creator(host, alpn=ALPN)
            endpoint = wrapClientTLS(creator, endpoint)
        protocol = _H2ClientProtocol(self, origin, tls=tls)
        connected = connectProtocol(endpoint, protocol)
        connected.addCallback(lambda _: protocol.ready)
        connected.addCallbacks(
            lambda ready: self._connected(origin, ready), lambda f: self._not_connected(origin, f)
        )

    def _connected(self, origin: Origin, protocol: _H2ClientProtocol | None) -> None:
        waiting = self._connecting.pop(origin, [])
        if protocol is None:
            # The server chose HTTP/1.1 by ALPN.
            self.http11_origins.add(origin)
        elif self._closed:
            protocol.close()
        else:
            self._connections[origin] = protocol
        for request in waiting:
            self._route(request)

    def _not_connected(self, origin: Origin, failure: Failure) -> None:
        for request in self._connecting.pop(origin, []):
            request.fail(failure)

    def _forget(self, protocol: _H2ClientProtocol) -> None:
        """``protocol`` takes no new requests (GOAWAY, lost)."""
        if self._connections.get(protocol.origin) is protocol:
            del self._connections[protocol.origin]


@implementer(IPolicyForHTTPS)
class _TLSPolicy:
    """Twisted's ``Agent`` policy for https: :class:`ClientTLS`'s creator for the host."""

    def __init__(self, tls: ClientTLS) -> None:
        self.tls = tls

    def creatorForNetloc(self, hostname: bytes, port: int) -> Any:
        """The TLS connection creator for ``hostname`` (its certificate is checked)."""
        return self.tls.creator(hostname.decode("idna"))


@implementer(IClientRequest)
@attrs.define(eq=False)
class _RequestInfo:
    """``IResponse.request``: what was asked."""

    method: bytes
    absoluteURI: bytes
    headers: Headers


class _Request:
    """One request through :class:`HTTP2Agent`, from ``request()`` to its response."""

    def __init__(
        self,
        agent: HTTP2Agent,
        origin: Origin,
        method: bytes,
        uri: bytes,
        parsed: URI,
        headers: Headers | None,
        body: IBodyProducer | None,
    ) -> None:
        self.agent = agent
        self.origin = origin
        self.method = method
        self.uri = uri
        self.parsed = parsed
        self.headers = headers if headers is not None else Headers()
        self.body = body
        self.deferred: Deferred[IResponse] = Deferred(self._cancel)
        #: The stream it went out on (None while it waits).
        self.stream: _Stream | None = None
        #: The HTTP/1.1 agent's Deferred, when it went there.
        self.elsewhere: Deferred[IResponse] | None = None
        self.done = False

    def _cancel(self, _: Deferred[IResponse]) -> None:
        self.done = True
        if self.elsewhere is not None:
            self.elsewhere.cancel()
        elif self.stream is not None:
            self.stream.cancel()
        else:
            queue = self.agent._connecting.get(self.origin)
            if queue is not None and self in queue:
                queue.remove(self)
            for protocol in self.agent._all:
                if self in protocol.queued:
                    protocol.queued.remove(self)

    def hand_to(self, agent: IAgent) -> None:
        """Send it through ``agent`` (HTTP/1.1) instead."""
        self.elsewhere = agent.request(self.method, self.uri, self.headers, self.body)
        self.elsewhere.addCallbacks(self.respond, self.fail)

    def respond(self, response: IResponse) -> None:
        if not self.done:
            self.done = True
            self.deferred.callback(response)

    def fail(self, failure: Failure) -> None:
        if not self.done:
            self.done = True
            self.deferred.errback(failure)


@implementer(IHandshakeListener)
class _H2ClientProtocol(Protocol):
    """One HTTP/2 connection: feeds ``h2`` the bytes, acts on its events."""

    _log = Logger()

    def __init__(self, agent: HTTP2Agent, origin: Origin, *, tls: bool) -> None:
        self.agent = agent
        self.origin = origin
        self.tls = tls
        #: Fires with this protocol once HTTP/2 is spoken, None if ALPN chose another.
        self.ready: Deferred[_H2ClientProtocol | None] = Deferred()
        self.h2: H2Connection | None = None
        self.streams: dict[int, _Stream] = {}
        #: Requests waiting for a stream (at the server's concurrency limit).
        self.queued: deque[_Request] = deque()
        self.going_away = False
        self.lost: Failure | None = None
        self._closed_waiters: list[Deferred[None]] = []
        #: Whether the server sent anything yet.
        self._heard = False

    # -- the connection ----------------------------------------------------------------

    def connectionMade(self) -> None:
        self.agent._all.add(self)
        if not self.tls:
            self._start()

    def handshakeCompleted(self) -> None:
        """TLS is up: HTTP/2 if ALPN chose ``h2``, else give the origin back."""
        chosen = getattr(self.transport, "negotiatedProtocol", None)
        if chosen == b"h2":
            self._start()
            return
        self.going_away = True
        self.ready.callback(None)
        assert self.transport is not None
        self.transport.loseConnection()

    def _start(self) -> None:
        from h2.config import H2Configuration
        from h2.connection import H2Connection
        from h2.settings import SettingCodes, Settings

        h2 = H2Connection(H2Configuration(client_side=True, header_encoding=None))
        h2.local_settings = Settings(client=True, initial_values={SettingCodes.ENABLE_PUSH: 0})
        h2.initiate_connection()
        # The connection's window well above a stream's: a reader that pauses holds
        # its stream's window (64 KiB) shut without starving the other streams.
        h2.increment_flow_control_window(CONNECTION_WINDOW - h2.inbound_flow_control_window)
        self.h2 = h2
        self._flush()
        self.ready.callback(self)

    def close(self) -> Deferred[None]:
        """GOAWAY, then close; fires once the connection is lost."""
        self.going_away = True
        self.agent._forget(self)
        if self.lost is None and self.transport is not None:
            if self.h2 is not None:
                from h2.exceptions import ProtocolError

                try:
                    self.h2.close_connection()
                except ProtocolError:
                    pass
                self._flush()
            self.transport.loseConnection()
        if self.lost is not None or self.transport is None:
            return succeed(None)
        d: Deferred[None] = Deferred()
        self._closed_waiters.append(d)
        return d

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.lost = reason
        self.going_away = True
        self.agent._all.discard(self)
        self.agent._forget(self)
        if not self.ready.called:
            self.ready.errback(reason)
        for stream in list(self.streams.values()):
            stream.lost(reason)
        self.streams.clear()
        queued, self.queued = list(self.queued), deque()
        for request in queued:
            request.fail(reason)
        waiters, self._closed_waiters = self._closed_waiters, []
        for waiter in waiters:
            waiter.callback(None)

    def _flush(self) -> None:
        if self.h2 is None or self.transport is None:
            return
        data = self.h2.data_to_send()
        if data:
            self.transport.write(data)

    def _fail_connection(self, why: str) -> None:
        """A protocol error: every stream fails with ``why``; the connection closes."""
        failure = Failure(HTTP2ProtocolError(why))
        self.going_away = True
        self.agent._forget(self)
        for stream in list(self.streams.values()):
            stream.lost(failure)
        self.streams.clear()
        self._flush()
        if self.transport is not None:
            self.transport.loseConnection()

    # -- requests ------------------------------------------------------------------------

    def submit(self, request: _Request) -> None:
        """Send ``request`` on a new stream, or queue it at the concurrency limit."""
        if self.going_away:
            self.agent._route(request)
            return
        self.queued.append(request)
        self._send_queued()

    def _can_open(self) -> bool:
        h2 = self.h2
        return (
            h2 is not None
            and not self.going_away
            and h2.open_outbound_streams < h2.remote_settings.max_concurrent_streams
        )

    def _send_queued(self) -> None:
        while self.queued and self._can_open():
            self._open(self.queued.popleft())
        self._flush()
        if self.going_away and self.queued:
            queued, self.queued = list(self.queued), deque()
            for request in queued:
                self.agent._route(request)

    def _open(self, request: _Request) -> None:
        assert self.h2 is not None
        stream_id = self.h2.get_next_available_stream_id()
        parsed = request.parsed
        host = parsed.host
        if b":" in host:
            host = b"[" + host + b"]"
        default = 443 if parsed.scheme == b"https" else 80
        authority = host if parsed.port == default else host + b":%d" % parsed.port
        headers: list[tuple[bytes, bytes]] = [
            (b":method", request.method),
            (b":scheme", parsed.scheme),
            (b":authority", authority),
            (b":path", parsed.originForm),
        ]
        for name, values in request.headers.getAllRawHeaders():
            lower = name.lower()
            if lower in _CONNECTION_HEADERS or (lower == b"te" and values != [b"trailers"]):
                continue
            headers.extend((lower, value) for value in values)
        body = request.body
        if body is not None and body.length is not UNKNOWN_LENGTH:
            headers.append((b"content-length", b"%d" % cast(int, body.length)))
        stream = _Stream(self, stream_id, request)
        self.streams[stream_id] = stream
        request.stream = stream
        self.h2.send_headers(stream_id, headers, end_stream=body is None)
        if body is not None:
            stream.start_body(body)

    def stream_over(self, stream: _Stream) -> None:
        """``stream`` is over (ended, reset or cancelled): room for a queued request."""
        self.streams.pop(stream.stream_id, None)
        self._send_queued()
        if self.going_away and not self.streams and self.transport is not None:
            self.transport.loseConnection()

    # -- from the server -----------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        if self.h2 is None:
            return
        from h2.exceptions import ProtocolError

        if not self._heard:
            self._heard = True
            if data.startswith(b"HTTP/"):
                # An HTTP/1.x answer to our preface (h2 would wait for a frame that
                # never comes): the server has no HTTP/2 with prior knowledge.
                self._fail_connection(
                    "the server answered in HTTP/1.x: it does not speak HTTP/2 with prior "
                    "knowledge (h2c); use HTTP/1.1 there"
                )
                return
        try:
            events = self.h2.receive_data(data)
        except ProtocolError as e:
            self._fail_connection(f"the server broke HTTP/2: {e}")
            return
        for event in events:
            self._event(event)
            if self.lost is not None:
                return
        self._flush()

    def _event(self, event: Any) -> None:
        from h2 import events as ev

        stream = self.streams.get(getattr(event, "stream_id", 0) or 0)
        if isinstance(event, ev.ResponseReceived):
            if stream is not None:
                stream.response(event.headers or [])
        elif isinstance(event, ev.DataReceived):
            if stream is not None:
                stream.data(event.data or b"", event.flow_controlled_length or 0)
            else:
                self._acknowledge(event.flow_controlled_length or 0, event.stream_id or 0)
        elif isinstance(event, ev.StreamEnded):
            if stream is not None:
                stream.ended()
        elif isinstance(event, ev.StreamReset):
            if stream is not None:
                stream.reset(event.error_code or 0)
        elif isinstance(event, ev.WindowUpdated):
            targets = [stream] if stream is not None else list(self.streams.values())
            for target in targets:
                target.send_body()
        elif isinstance(event, ev.RemoteSettingsChanged):
            for target in list(self.streams.values()):
                target.send_body()
            self._send_queued()
        elif isinstance(event, ev.ConnectionTerminated):
            self._goaway(event.error_code or 0, event.last_stream_id or 0)
        elif isinstance(event, ev.PushedStreamReceived):
            from h2.errors import ErrorCodes

            assert self.h2 is not None
            self.h2.reset_stream(event.pushed_stream_id or 0, ErrorCodes.REFUSED_STREAM)

    def _goaway(self, error_code: int, last_stream_id: int) -> None:
        """The server ends the connection: streams above ``last_stream_id`` were not
        processed (retryable); with ``NO_ERROR`` the others finish here."""
        self.going_away = True
        self.agent._forget(self)
        text = f"the server sent GOAWAY ({_code_name(error_code)})"
        for stream_id, stream in sorted(self.streams.items()):
            if stream_id > last_stream_id:
                stream.lost(
                    Failure(RequestNotProcessed(f"{text} before processing stream {stream_id}"))
                )
                self.streams.pop(stream_id, None)
        if error_code != 0:
            for stream in list(self.streams.values()):
                stream.lost(Failure(HTTP2ProtocolError(text)))
            self.streams.clear()
        elif self.streams:
            # h2 moves to CLOSED on GOAWAY and then refuses every frame, the
            # remaining streams' too (python-hyper/h2#1199): read them as before; no
            # new stream is opened here (going_away).
            from h2.connection import ConnectionState

            assert self.h2 is not None
            self.h2.state_machine.state = ConnectionState.CLIENT_OPEN
        self._send_queued()
        if not self.streams and self.transport is not None:
            self._flush()
            self.transport.loseConnection()

    def _acknowledge(self, length: int, stream_id: int) -> None:
        if self.h2 is None or self.lost is not None or length <= 0:
            return
        self.h2.acknowledge_received_data(length, stream_id)
        self._flush()


class HTTP2ProtocolError(Exception):
    """The HTTP/2 connection broke: a protocol error, or a GOAWAY with an error code."""


@implementer(IConsumer)
class _Stream:
    """One request and its response on a connection's stream."""

    def __init__(self, protocol: _H2ClientProtocol, stream_id: int, request: _Request) -> None:
        self.protocol = protocol
        self.stream_id = stream_id
        self.request = request
        self.response_: _H2Response | None = None
        # request body
        self.body: IBodyProducer | None = None
        self.outbox = bytearray()
        self.body_done = False
        self.body_paused = False
        #: Bytes of a body of known length not yet given to h2 (None: unknown length):
        #: its last DATA frame ends the stream (no empty DATA frame after it).
        self.body_left: int | None = None
        # response body
        self.reader: IProtocol | None = None
        self.inbox: deque[tuple[bytes, int]] = deque()
        self.reader_paused = False
        self.unacknowledged = 0
        self.end: Failure | None = None
        self.over = False

    # -- the request body: IConsumer -----------------------------------------------------

    def start_body(self, body: IBodyProducer) -> None:
        self.body = body
        if body.length is not UNKNOWN_LENGTH:
            self.body_left = cast(int, body.length)
        produced = body.startProducing(self)
        produced.addCallbacks(self._body_produced, self._body_failed)

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        """(IConsumer; the body producer is paused through ``self.body``)"""

    def unregisterProducer(self) -> None:
        """(IConsumer)"""

    def write(self, data: bytes) -> None:
        if self.over or self.body_done:
            return
        self.outbox.extend(data)
        self.send_body()

    def _body_produced(self, _: object) -> None:
        self.body_done = True
        self.send_body()

    def _body_failed(self, failure: Failure) -> None:
        if self.over or self.body is None:
            return
        from h2.errors import ErrorCodes

        self._reset_ours(ErrorCodes.CANCEL)
        self.request.fail(failure)
        self._finish()

    def send_body(self) -> None:
        """Send what the server's windows allow; end the stream after the last byte."""
        h2 = self.protocol.h2
        if self.over or h2 is None or self.body is None or self.protocol.lost is not None:
            return
        from h2.exceptions import StreamClosedError

        try:
            while self.outbox:
                room = min(h2.local_flow_control_window(self.stream_id), h2.max_outbound_frame_size)
                if room <= 0:
                    break
                chunk = bytes(self.outbox[:room])
                del self.outbox[:room]
                last = False
                if self.body_left is not None:
                    self.body_left -= len(chunk)
                    last = self.body_left <= 0 and not self.outbox
                h2.send_data(self.stream_id, chunk, end_stream=last)
                if last:
                    # The whole body of the length announced: the request is complete
                    # (what the producer might write beyond it is not sent).
                    self.body = None
                    break
            if self.body is not None and self.body_done and not self.outbox:
                h2.end_stream(self.stream_id)
                self.body = None
        except StreamClosedError:
            self.outbox.clear()
            self.body = None
        self.protocol._flush()
        body = self.body
        if body is None:
            return
        if len(self.outbox) > _BODY_BUFFER and not self.body_paused:
            self.body_paused = True
            body.pauseProducing()
        elif len(self.outbox) <= _BODY_BUFFER and self.body_paused:
            self.body_paused = False
            body.resumeProducing()

    def _stop_body(self) -> None:
        body, self.body = self.body, None
        self.outbox.clear()
        if body is not None and not self.body_done:
            self.body_done = True
            body.stopProducing()

    # -- the response ----------------------------------------------------------------------

    def response(self, raw: Iterable[tuple[bytes, bytes]]) -> None:
        status = 0
        headers = Headers()
        for name, value in raw:
            if name == b":status":
                status = int(value)
            elif not name.startswith(b":"):
                headers.addRawHeader(name, value)
        length: int | object = UNKNOWN_LENGTH
        declared = headers.getRawHeaders(b"content-length")
        if self.request.method == b"HEAD" or status in (204, 304):
            length = 0
        elif declared and declared[0].strip().isdigit():
            length = int(declared[0])
        request = self.request
        self.response_ = _H2Response(
            self,
            status,
            RESPONSES.get(status, b""),
            headers,
            length,
            _RequestInfo(request.method, request.uri, request.headers),
        )
        request.respond(self.response_)

    def data(self, data: bytes, flow_controlled: int) -> None:
        if self.over:
            self.protocol._acknowledge(flow_controlled, self.stream_id)
            return
        if self.reader is None or self.reader_paused or self.inbox:
            self.inbox.append((data, flow_controlled))
            return
        self._deliver(data, flow_controlled)

    def _deliver(self, data: bytes, flow_controlled: int) -> None:
        assert self.reader is not None
        self.reader.dataReceived(data)
        if self.reader_paused:
            self.unacknowledged += flow_controlled
        else:
            self.protocol._acknowledge(flow_controlled, self.stream_id)

    def ended(self) -> None:
        self._stop_body()
        if self.response_ is None:
            self.request.fail(
                Failure(
                    ResponseNeverReceived(
                        [Failure(HTTP2ProtocolError("the stream ended without a response"))]
                    )
                )
            )
            self._finish()
            return
        self.end = Failure(ResponseDone("Response body fully received"))
        self.protocol.stream_over(self)
        self._maybe_end()

    def _maybe_end(self) -> None:
        if self.reader is None or self.reader_paused or self.inbox or self.end is None:
            return
        end, self.end = self.end, None
        self.over = True
        self.reader.connectionLost(end)

    def reset(self, error_code: int) -> None:
        from h2.errors import ErrorCodes

        if error_code == ErrorCodes.REFUSED_STREAM and self.response_ is None:
            self.lost(Failure(RequestNotProcessed(str(StreamReset(self.stream_id, error_code)))))
        else:
            self.lost(Failure(StreamReset(self.stream_id, error_code)))
        self.protocol.stream_over(self)

    def lost(self, reason: Failure) -> None:
        """The stream cannot go on: the request, or its body's reader, fails."""
        self._stop_body()
        if self.over:
            return
        if self.response_ is None:
            self.request.fail(Failure(ResponseNeverReceived([reason])))
            self.over = True
            return
        self.end = Failure(ResponseFailed([reason]))
        # A failing body is not held for a paused reader: what is buffered is dropped.
        self.inbox.clear()
        self.reader_paused = False
        self._maybe_end()

    # -- our side's ends -------------------------------------------------------------------

    def _reset_ours(self, code: int) -> None:
        h2 = self.protocol.h2
        if h2 is None or self.protocol.lost is not None:
            return
        from h2.exceptions import StreamClosedError

        try:
            h2.reset_stream(self.stream_id, code)
        except StreamClosedError:
            pass
        self.protocol._flush()

    def _finish(self) -> None:
        self.over = True
        pending = self.unacknowledged + sum(n for _, n in self.inbox)
        self.inbox.clear()
        self.unacknowledged = 0
        self.protocol._acknowledge(pending, self.stream_id)
        self.protocol.stream_over(self)

    def cancel(self) -> None:
        """The request's Deferred was cancelled before its response."""
        from h2.errors import ErrorCodes

        self._stop_body()
        self._reset_ours(ErrorCodes.CANCEL)
        self._finish()

    # -- the body's transport ----------------------------------------------------------------

    def deliver_to(self, reader: IProtocol) -> None:
        self.reader = reader
        reader.makeConnection(cast(Any, _BodyTransport(self)))
        self.drain()

    def drain(self) -> None:
        while self.inbox and not self.reader_paused and self.reader is not None:
            data, flow_controlled = self.inbox.popleft()
            self._deliver(data, flow_controlled)
        self._maybe_end()

    def pause_reading(self) -> None:
        self.reader_paused = True

    def resume_reading(self) -> None:
        if not self.reader_paused:
            return
        self.reader_paused = False
        pending, self.unacknowledged = self.unacknowledged, 0
        self.protocol._acknowledge(pending, self.stream_id)
        self.drain()

    def stop_reading(self) -> None:
        """The reader stopped: ``RST_STREAM(CANCEL)``; it gets ``ResponseFailed``."""
        if self.over:
            return
        from h2.errors import ErrorCodes

        still_open = self.end is None
        reader = self.reader
        if still_open:
            self._reset_ours(ErrorCodes.CANCEL)
        self.end = None
        self._finish()
        if reader is not None:
            reader.connectionLost(
                Failure(ResponseFailed([Failure(ConnectionAborted("the reader stopped the body"))]))
            )


@implementer(IPushProducer)
class _BodyTransport:
    """The transport a body's protocol sees: pause, resume, stop this stream."""

    def __init__(self, stream: _Stream) -> None:
        self._stream = stream

    def pauseProducing(self) -> None:
        self._stream.pause_reading()

    def resumeProducing(self) -> None:
        self._stream.resume_reading()

    def stopProducing(self) -> None:
        self._stream.stop_reading()

    def loseConnection(self) -> None:
        self._stream.stop_reading()


@implementer(IResponse)
class _H2Response:
    """A response received over HTTP/2 (``IResponse``)."""

    version = (b"HTTP", 2, 0)

    def __init__(
        self,
        stream: _Stream,
        code: int,
        phrase: bytes,
        headers: Headers,
        length: int | object,
        request: _RequestInfo,
    ) -> None:
        self._stream = stream
        self.code = code
        self.phrase = phrase
        self.headers = headers
        self.length = length
        self.request = request
        self.previousResponse: IResponse | None = None
        self._delivered = False

    def deliverBody(self, protocol: IProtocol) -> None:
        """Give the body to ``protocol`` (once), as Twisted's responses do."""
        if self._delivered:
            raise RuntimeError("the body of this response was already delivered")
        self._delivered = True
        self._stream.deliver_to(protocol)

    def setPreviousResponse(self, response: IResponse) -> None:
        self.previousResponse = response
