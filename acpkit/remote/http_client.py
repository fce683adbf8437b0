"""
ACP over Streamable HTTP, client side (the RFD "Streamable HTTP & WebSocket Transport").

:func:`connect_http` gives a :class:`~acpkit.connection.ClientConnection` whose engine
runs over :class:`HTTPClientTransport`: the same JSON-RPC engine as over stdio, on
:class:`~acpkit.framing_messages.MessageFraming` (one message per ``write`` and per
``dataReceived``).  The transport only looks at a message's ``method``, ``id`` and
``params.sessionId`` to know how to send it; nothing of ACP is re-implemented here.

=========================================  ==============================================
situation                                  what the transport does
=========================================  ==============================================
the first message, ``initialize``          ``POST`` (``Content-Type`` and ``Accept``
                                           ``application/json``); ``200`` with a JSON body
                                           and an ``Acp-Connection-Id`` header expected:
                                           the body is the response, fed to the engine
the ``initialize`` answer                  ``GET`` with ``Accept: text/event-stream`` and
                                           the connection id: the stream every
                                           server→client message arrives on, each event's
                                           data fed to the engine whole, in order
messages written before that answer        held, then sent in order once it came
every later message                        ``POST`` with ``Acp-Connection-Id``; ``202``
                                           expected (a ``200`` JSON body is fed too);
                                           one at a time, in the order written (over
                                           HTTP/2 too)
a message whose ``params.sessionId`` is    ``Acp-Session-Id: S`` too (not on
``S``; our answer to a server request      ``session/load``, ``session/resume``,
carrying ``sessionId: S``                  ``session/fork``: they attach a session the
                                           connection does not have yet)
a response names a new ``sessionId``       ``GET`` with ``Acp-Session-Id`` too, read like
(``session_streams=True``, the default)    the first stream (the Python SDK 0.12.1 server
                                           routes a session's messages there); a refusal
                                           is logged and ignored
a cookie set by the server                 kept (one jar per connection) and sent back
                                           on every later request, until ``close()``
``headers`` (e.g. ``Authorization``)       sent on every request; never logged
a POST of one of our requests refused      that request fails (:data:`HTTP_TRANSPORT_ERROR`,
(an HTTP error status, no answer)          ``data.status``, the server's error text)
``404`` to a POST (unknown connection)     that request fails with
                                           :class:`~acpkit.errors.NotDelivered` (a
                                           ``ConnectionLost``: it never ran), then as
                                           below
the server ends the stream while a POST     the connection is lost once that POST is
is in flight (it drains)                    answered (at most ``POST_ANSWER_WAIT``
                                            s): a ``404`` makes its request
                                            ``NotDelivered``; the messages queued
                                            behind it were never sent: theirs too
``404`` to a POST (unknown connection),    the connection is lost: every pending request
the ``initialize`` POST refused, the       fails at once with
stream refused, ended or dropped, the      :class:`~acpkit.errors.ConnectionLost` saying
server unreachable                         why (no reconnection)
an SSE event over ``max_event_size``       the connection is lost (the stream is not read
                                           further: nothing is buffered past the limit)
nothing on a stream for ``idle_timeout``   the connection is lost (a half-open TCP
(60 s; servers send keep-alives)           connection would otherwise hang every request)
``close()``                                the streams are closed, ``DELETE`` with the
                                           connection id, the jar emptied, then the
                                           engine sees the connection end
=========================================  ==============================================

HTTP/2, which the RFD requires of the transport: requests go through
:class:`acpkit.http2_agent.HTTP2Agent` (``h2``, the ``remote`` extra).  On ``https://``
(``http2="auto"``) ALPN offers ``h2``: the streams and the ``POST`` requests then share one TCP
connection, one HTTP/2 stream each; a server without HTTP/2 (uvicorn) gets HTTP/1.1,
as ``http://`` does unless ``http2="prior-knowledge"`` (h2c).  The ``POST`` requests go one at
a time in the order written either way.  ``treq`` is imported only when a transport is
created.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from http.cookiejar import CookieJar
from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult

import attrs
from twisted.internet.defer import Deferred, succeed
from twisted.internet.error import ConnectError, DNSLookupError
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.python.failure import Failure

from acpkit import http_transport, jsonbytes
from acpkit.connection import ClientConnection
from acpkit.endpoints import _attach_tracer
from acpkit.errors import NotDelivered, clip
from acpkit.framing import DEFAULT_MAX_LENGTH
from acpkit.framing_messages import MessageFraming
from acpkit.http2_agent import HTTP2Mode
from acpkit.http_responses import (
    BodyReader,
    body_ended_cleanly,
    content_type,
    failure_text,
    visible_ascii,
)
from acpkit.http_transport import HTTPTransportBase, hashable_id, pop_request, status_line
from acpkit.interfaces import IClient
from acpkit.jsonrpc import JSONRPCEngine, JSONRPCProtocol
from acpkit.remote.tls import ClientTLS
from acpkit.sse import SSEParser

if TYPE_CHECKING:
    from twisted.web.iweb import IResponse

__all__ = [
    "CONNECTION_ID_HEADER",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_EVENT_SIZE",
    "HTTP_TRANSPORT_ERROR",
    "SESSION_ID_HEADER",
    "HTTPClientTransport",
    "RemoteConnectionLost",
    "connect_http",
]

CONNECTION_ID_HEADER = "Acp-Connection-Id"
SESSION_ID_HEADER = "Acp-Session-Id"

#: Error code of one request whose POST the server refused (JSON-RPC's range for
#: implementation-defined errors, as MCP's HTTP client uses); ``data`` holds ``reason``
#: and ``status``.
HTTP_TRANSPORT_ERROR = http_transport.HTTP_TRANSPORT_ERROR

#: Largest SSE event (and ``initialize`` body) accepted: the engine's line limit.
DEFAULT_MAX_EVENT_SIZE = DEFAULT_MAX_LENGTH

#: Seconds without a byte on an SSE stream (servers send a keep-alive every 15 s)
#: before the connection is taken for dead: a half-open TCP connection otherwise hangs
#: every pending request forever.
DEFAULT_IDLE_TIMEOUT = 60.0

#: Seconds to wait, once the server ended the connection's stream, for the answer to
#: the POST then in flight (it tells whether that message reached the agent).
POST_ANSWER_WAIT = 10.0

#: How much of an error body is read to explain an HTTP error status.
ERROR_BODY_KEPT = http_transport.ERROR_BODY_KEPT

#: Methods that attach a session the connection does not know yet: no Acp-Session-Id
#: (the Python SDK 0.12.1 server answers 404 to a session id it does not know).
SESSION_ATTACHING_METHODS = frozenset({"session/load", "session/resume", "session/fork"})

_JSON = b"application/json"
_SSE = b"text/event-stream"


class RemoteConnectionLost(Exception):
    """The Streamable HTTP connection cannot go on; ``str()`` says why."""


@attrs.define(eq=False)
class _Stream:
    """One SSE stream (GET) of this connection."""

    session_id: str | None
    parser: SSEParser
    reader: BodyReader | None = None
    #: Fires when nothing came on the stream for ``idle_timeout`` seconds.
    idle: IDelayedCall | None = None


class HTTPClientTransport(HTTPTransportBase):
    """
    The engine's transport over ACP Streamable HTTP (see the module docstring).

    ``headers`` go with every request and are never logged.  ``http_client``: a
    ``treq.client.HTTPClient`` to use instead of the one made here (its pool and cookies
    are then the caller's; ``tls`` and ``http2`` are then unused).  ``tls``: the trust
    root and client certificate of ``https://`` connections (default: the platform's
    authorities).  ``http2``: see :func:`connect_http`.
    """

    protocol_name = "ACP"
    session_name = "ACP connection"

    def __init__(
        self,
        reactor: Any,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        max_event_size: int = DEFAULT_MAX_EVENT_SIZE,
        connect_timeout: float = 30.0,
        session_streams: bool = True,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
        name: str = "agent",
        http_client: Any = None,
        clock: IReactorTime | None = None,
        tls: ClientTLS | None = None,
        http2: HTTP2Mode = "auto",
    ) -> None:
        if max_event_size < 1:
            raise ValueError("max_event_size must be positive")
        for key, value in (headers or {}).items():
            if not _header_ok(key, value):
                raise ValueError(f"header {key!r} is not a valid HTTP header (name or value)")
        #: The cookies the server set on this connection (kept until ``close()``).
        self.cookies = CookieJar()
        super().__init__(
            reactor,
            url,
            headers,
            name=name,
            connect_timeout=connect_timeout,
            http_client=http_client,
            http2=http2,
            clock=clock,
            tls=tls,
            cookies=self.cookies,
        )
        self.max_event_size = max_event_size
        self.session_streams = session_streams
        self.idle_timeout = idle_timeout
        #: The server's ``Acp-Connection-Id`` (None before the ``initialize`` answer).
        self.connection_id: str | None = None
        #: The HTTP version of the ``initialize`` answer: ``"HTTP/2"``, ``"HTTP/1.1"``.
        self.http_version: str | None = None
        self._init_sent = False
        self._held: list[tuple[bytes, Any]] = []
        self._post_queue: deque[tuple[dict[bytes, list[bytes]], bytes, Any, str | None]] = deque()
        self._posting = False
        #: Why the connection ends, once the server ended its stream with a POST in
        #: flight: that POST's answer (202 or 404) tells whether it reached the agent.
        self._ending: str | None = None
        #: Our requests not answered yet: id -> method.
        self._ours: dict[Any, str] = {}
        #: The server's requests not answered yet: id -> their params' sessionId.
        self._theirs: dict[Any, str | None] = {}
        self._streams: list[_Stream] = []
        self._stream_sessions: set[str] = set()

    # -- ITransport, as the engine sees it ---------------------------------------------

    def write(self, data: bytes) -> None:
        """One whole message from the engine (:class:`MessageFraming`)."""
        if self.disconnecting or self._lost:
            return
        message = jsonbytes.loads_or_not_parsed(data)
        if not self._init_sent:
            if isinstance(message, dict) and message.get("method") == "initialize":
                self._init_sent = True
                self._post_initialize(data, message)
            else:
                self._held.append((data, message))
            return
        if self.connection_id is None:
            self._held.append((data, message))
            return
        self._post(data, message)

    # -- sending -------------------------------------------------------------------------

    def _headers(
        self, accept: bytes, *, content: bool = False, session_id: str | None = None
    ) -> dict[bytes, list[bytes]]:
        headers = super()._headers(accept, content=content)
        if self.connection_id is not None:
            headers[CONNECTION_ID_HEADER.encode()] = [self.connection_id.encode("ascii")]
        if session_id is not None:
            headers[SESSION_ID_HEADER.encode()] = [session_id.encode("utf-8")]
        return headers

    # -- what the base asks ----------------------------------------------------------------

    def _session_held(self) -> bool:
        return self.connection_id is not None

    def _forget(self) -> None:
        self._held.clear()
        self._post_queue.clear()
        self.cookies.clear()

    @staticmethod
    def _error_detail(body: bytes) -> str:
        return _error_detail(body)

    def _post_initialize(self, data: bytes, message: dict[str, Any]) -> None:
        request_id = message.get("id")
        d = self._request(b"POST", self._headers(_JSON, content=True), data)

        def answered(response: IResponse) -> None:
            if self._lost or self.disconnecting:
                self._discard(response)
                return
            self.http_version = _version_text(response.version)
            if response.code != 200:
                self._error_status(response, None, "initialize", fatal=True)
                return
            values = response.headers.getRawHeaders(CONNECTION_ID_HEADER.encode()) or []
            value = values[0].strip() if values else b""
            if not visible_ascii(value):
                self._discard(response)
                what = "no" if not value else "an invalid (not visible ASCII)"
                self._fatal(
                    f"the server at {self.shown_url} answered initialize with {what} "
                    f"{CONNECTION_ID_HEADER} header: not an ACP Streamable HTTP endpoint?"
                )
                return
            self._read_body(response, lambda body: self._initialized(value.decode(), body))

        d.addCallback(answered)
        d.addErrback(self._post_failed, request_id, "initialize", True)
        d.addErrback(self._bug)

    def _initialized(self, connection_id: str, body: bytes) -> None:
        if self._lost or self.disconnecting:
            return
        self.connection_id = connection_id
        self._open_stream(None)
        self._feed(body)
        held, self._held = self._held, []
        for data, message in held:
            if self._lost or self.disconnecting:
                return
            self._post(data, message)

    def _post(self, data: bytes, message: Any) -> None:
        method: str | None = None
        session_id: str | None = None
        request_id: Any = None
        if isinstance(message, dict):
            raw_method = message.get("method")
            method = raw_method if isinstance(raw_method, str) else None
            if method is not None:
                if method not in SESSION_ATTACHING_METHODS:
                    session_id = _session_id(message.get("params"))
                if "id" in message and hashable_id(message["id"]):
                    request_id = message["id"]
                    self._ours[request_id] = method
            elif "id" in message and hashable_id(message["id"]):
                # Our answer to a server request: the session that request was for.
                session_id = self._theirs.pop(message["id"], None)
        headers = self._headers(_JSON, content=True, session_id=session_id)
        self._post_queue.append((headers, data, request_id, method))
        if not self._posting:
            self._next_post()

    def _next_post(self) -> None:
        """Send the next queued POST once the previous one is answered: the server then
        gets our messages in the order written (over HTTP/1.1 concurrent POSTs go on
        separate TCP connections and may overtake each other: a ``session/cancel``
        before its ``session/prompt``)."""
        if self._ending is not None:
            # The stream ended: what is queued was never sent, so never reached the agent.
            self._posting = False
            queued, self._post_queue = self._post_queue, deque()
            for _, _, request_id, _ in queued:
                if request_id is not None:
                    self._not_delivered(request_id, f"{self._ending} before it was sent")
            return
        if not self._post_queue or self._lost or self.disconnecting:
            self._posting = False
            return
        self._posting = True
        headers, data, request_id, method = self._post_queue.popleft()
        d = self._request(b"POST", headers, data)

        def answered(result: object) -> object:
            self._next_post()
            return result

        d.addBoth(answered)
        d.addCallback(self._posted, request_id, method)
        d.addErrback(self._post_failed, request_id, method, False)
        d.addErrback(self._bug)

    def _posted(self, response: IResponse, request_id: Any, method: str | None) -> None:
        if self._lost or self.disconnecting:
            self._discard(response)
            return
        status = response.code
        if status == 404:
            self._error_status(response, request_id, method or "a response", fatal=True, gone=True)
            return
        if not 200 <= status < 300:
            self._error_status(response, request_id, method or "a response")
        elif status == 200 and content_type(response) == "application/json":
            self._read_body(response, self._feed)
        else:
            self._discard(response)
        if self._ending is not None:
            self._fatal(self._ending)  # it reached the agent before the end

    def _post_failed(
        self, failure: Failure, request_id: Any, method: str | None, fatal: bool
    ) -> None:
        if self._lost or self.disconnecting:
            return
        why = failure_text(failure)
        if fatal or failure.check(ConnectError, DNSLookupError):
            self._fatal(f"cannot reach the ACP server at {self.shown_url}: {why}")
            return
        text = f"POST of {method or 'a response'} to {self.shown_url} failed: {why}"
        if self._ending is not None:
            self._fatal(self._ending)
        elif request_id is not None:
            self._fail(request_id, text, status=None)
        else:
            self._log.warn("{peer}: {text}", peer=self.name, text=text)

    # -- answers -------------------------------------------------------------------------

    def _error_status(
        self,
        response: IResponse,
        request_id: Any,
        what: str,
        *,
        fatal: bool = False,
        gone: bool = False,
    ) -> None:
        status = response.code
        headline = f"{status_line(response)} from {self.shown_url} to the {what} request"
        if gone:
            headline += " (the server does not know this connection: it has ended)"

        def report(text: str) -> None:
            if fatal:
                if gone and request_id is not None:
                    self._not_delivered(request_id, text)
                self._fatal(text)
            elif request_id is not None:
                self._fail(request_id, text, status=status)
            else:
                self._log.warn("{peer}: {text}", peer=self.name, text=text)

        self._read_error(response, headline, report)

    def _read_body(self, response: IResponse, then: Callable[[bytes], None]) -> None:
        """Read a JSON body (at most ``max_event_size`` bytes), then ``then(body)``."""
        limit = self.max_event_size

        def too_large(length: int | None) -> None:
            if length is not None:
                self._fatal(f"a {length}-byte answer exceeds this connection's {limit}-byte limit")
            else:
                self._fatal(f"an answer exceeded this connection's {limit}-byte limit")

        reader = self._read_limited(
            response,
            limit,
            then=then,
            too_large=too_large,
            dropped=lambda reason: self._fatal(
                f"the connection dropped mid-answer: {failure_text(reason)}"
            ),
        )
        if reader is not None:
            response.deliverBody(reader)

    # -- the SSE streams -----------------------------------------------------------------

    def _open_stream(self, session_id: str | None) -> None:
        """GET: the connection's stream (``session_id`` None) or a session's."""
        if session_id is not None:
            if session_id in self._stream_sessions:
                return
            self._stream_sessions.add(session_id)
        stream = _Stream(session_id, SSEParser(self.max_event_size))
        self._streams.append(stream)
        d = self._request(b"GET", self._headers(_SSE, session_id=session_id))
        what = "the connection's SSE stream" if session_id is None else f"session {session_id}'s"

        def got(response: IResponse) -> None:
            if self._lost or self.disconnecting:
                self._discard(response)
                return
            if response.code != 200 or content_type(response) != "text/event-stream":
                if session_id is None:
                    self._error_status(response, None, "GET (SSE stream)", fatal=True)
                else:
                    self._log.info(
                        "{peer}: {url} refused a session stream (HTTP {status}): its "
                        "messages come on the connection's stream",
                        peer=self.name,
                        url=self.shown_url,
                        status=response.code,
                    )
                    self._discard(response)
                return
            self._still_alive(stream)
            stream.reader = self._reader(
                lambda chunk: self._stream_data(stream, chunk),
                lambda reason: self._stream_ended(stream, reason),
            )
            response.deliverBody(stream.reader)

        def failed(failure: Failure) -> None:
            if self._lost or self.disconnecting:
                return
            self._fatal(f"{what} GET to {self.shown_url} failed: {failure_text(failure)}")

        d.addCallbacks(got, failed)
        d.addErrback(self._bug)

    def _still_alive(self, stream: _Stream) -> None:
        """Data came on ``stream``: (re)start its idle timer."""
        if self.idle_timeout is None:
            return
        if stream.idle is not None and stream.idle.active():
            stream.idle.reset(self.idle_timeout)
            return
        stream.idle = self._call_later(self.idle_timeout, self._stream_idle, stream)

    def _stream_idle(self, stream: _Stream) -> None:
        what = "the server's" if stream.session_id is None else f"session {stream.session_id}'s"
        self._fatal(
            f"nothing came on {what} SSE stream at {self.shown_url} for "
            f"{self.idle_timeout:g} s (not even a keep-alive): the connection is taken "
            "for dead"
        )

    def _stop_idle(self, stream: _Stream) -> None:
        self._cancel_later(stream.idle)
        stream.idle = None

    def _stream_data(self, stream: _Stream, chunk: bytes) -> None:
        self._still_alive(stream)

        def too_large(limit: int) -> None:
            self._fatal(
                f"an SSE event from {self.shown_url} exceeded this connection's "
                f"{limit}-byte limit (the stream cannot be read further)"
            )

        self._sse_chunk(stream.parser, chunk, stream.reader, self._feed, too_large)

    def _stream_ended(self, stream: _Stream, reason: Failure) -> None:
        self._stop_idle(stream)
        if self._lost or self.disconnecting:
            return
        clean = body_ended_cleanly(reason)
        how = "ended" if clean else f"dropped ({failure_text(reason)})"
        if stream.session_id is None:
            why = f"the server's SSE stream at {self.shown_url} {how}"
            if clean and self._posting and self._ending is None:
                # The server ended the connection (it drains) while a POST was on its
                # way: its answer says whether it got there (202) or not (404: then it
                # never ran, and can be sent again).  Bounded, in case none comes.
                self._ending = why
                self._call_later(POST_ANSWER_WAIT, self._fatal, why)
                return
            self._fatal(why)
        elif not clean:
            self._fatal(f"session {stream.session_id}'s SSE stream at {self.shown_url} {how}")
        else:
            self._log.info(
                "{peer}: session {sid}'s SSE stream ended", peer=self.name, sid=stream.session_id
            )

    # -- into the engine -----------------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        """Give one message to the engine, noting what the transport must remember."""
        if self.protocol is None or self._lost or not data.strip():
            return
        message = jsonbytes.loads_or_not_parsed(data)
        if isinstance(message, dict):
            if "method" in message:
                if "id" in message and hashable_id(message["id"]):
                    self._theirs[message["id"]] = _session_id(message.get("params"))
            elif "id" in message:
                self._answered(message["id"])
                if self.session_streams and self.connection_id is not None:
                    result = message.get("result")
                    sid = _session_id(result)
                    if sid is not None:
                        self._open_stream(sid)
        self.protocol.dataReceived(data)

    def _answered(self, response_id: object) -> str | None:
        return pop_request(self._ours, response_id)

    def _not_delivered(self, request_id: Any, reason: str) -> None:
        """
        Our request's POST was answered ``404``: no agent there knows the connection, so
        it never ran; it fails with :class:`~acpkit.errors.NotDelivered` (a
        ``ConnectionLost``: the connection is lost with it).
        """
        if self._answered(request_id) is None:
            return
        engine = self.protocol
        if isinstance(engine, JSONRPCEngine) and isinstance(request_id, int):
            engine.fail_outgoing(request_id, NotDelivered(f"connection lost: {reason}"))

    def _fail(self, request_id: Any, reason: str, *, status: int | None) -> None:
        """Fail one request of ours: an error response for its id, fed to the engine."""
        if request_id not in self._ours:
            return
        self._feed(jsonbytes.dumps(self._error_response(request_id, reason, status=status)))

    # -- the end -------------------------------------------------------------------------

    def _fatal(self, why: str) -> None:
        """The connection cannot go on: stop everything; pending requests fail with why."""
        self._lose(RemoteConnectionLost(why))


def connect_http(
    reactor: Any,
    url: str,
    client: IClient | Callable[[ClientConnection], IClient],
    *,
    headers: Mapping[str, str] | None = None,
    name: str = "agent",
    strict: bool = False,
    max_event_size: int = DEFAULT_MAX_EVENT_SIZE,
    connect_timeout: float = 30.0,
    session_streams: bool = True,
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
    clock: IReactorTime | None = None,
    tls: ClientTLS | None = None,
    http2: HTTP2Mode = "auto",
) -> Deferred[ClientConnection]:
    """
    A :class:`ClientConnection` to the remote agent at ``url`` (Streamable HTTP).

    Nothing is sent until the connection's first message, ``initialize``
    (:meth:`ClientConnection.initialize`): HTTP has no connection before it.
    ``ACPKIT_TRACE`` records the traffic as for a spawned agent.  Fails with
    ``ValueError`` for a URL that is not ``http(s)://host...`` or has user info, or a
    header that is not a valid HTTP header.  :meth:`ClientConnection.close` sends the
    ``DELETE``.  ``idle_timeout`` (None: none) is timed on ``clock`` (default: the
    reactor).  ``tls``: what an ``https://`` connection trusts and the client
    certificate it offers (default: the platform's certificate authorities, no client
    certificate); a file it names that cannot be read is a ``ValueError`` here.
    ``http2``: ``"auto"`` (HTTP/2 on ``https://`` when the server picks it by ALPN,
    HTTP/1.1 otherwise), ``"prior-knowledge"`` (HTTP/2 on ``http://`` too: h2c) or
    ``"never"`` (HTTP/1.1); see :class:`acpkit.http2_agent.HTTP2Agent`.
    """
    try:
        transport = HTTPClientTransport(
            reactor,
            url,
            headers,
            max_event_size=max_event_size,
            connect_timeout=connect_timeout,
            session_streams=session_streams,
            idle_timeout=idle_timeout,
            name=name,
            clock=clock,
            tls=tls,
            http2=http2,
        )
    except (ValueError, ImportError) as e:
        from twisted.internet.defer import fail

        return fail(e)
    protocol = JSONRPCProtocol(
        clock=reactor, name=name, framing=MessageFraming(), max_line_length=max_event_size
    )
    _attach_tracer(protocol, name)
    connection = ClientConnection(client, protocol=protocol, strict=strict, name=name)
    transport.connect(protocol)
    return succeed(connection)


def check_http_url(url: str) -> SplitResult:
    """The parts of an ``http(s)://host...`` URL; ``ValueError`` for anything else."""
    return http_transport.check_http_url(url, "ACP")


def _session_id(params: object) -> str | None:
    if isinstance(params, dict):
        value = params.get("sessionId")
        if isinstance(value, str) and value:
            return value
    return None


def _header_ok(name: str, value: str) -> bool:
    token = set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    return (
        bool(name)
        and set(name) <= token
        and "\r" not in value
        and "\n" not in value
        and "\x00" not in value
        and all(ord(c) < 256 for c in value)
    )


def _version_text(version: tuple[bytes, int, int]) -> str:
    """``(b"HTTP", 1, 1)`` -> ``"HTTP/1.1"``; ``(b"HTTP", 2, 0)`` -> ``"HTTP/2"``."""
    name, major, minor = version
    number = f"{major}" if major >= 2 and minor == 0 else f"{major}.{minor}"
    return f"{name.decode('ascii', errors='replace')}/{number}"


def _error_detail(body: bytes) -> str:
    """The ``error`` text of a JSON error body, else the body's first line."""
    if not body.strip():
        return ""
    value = jsonbytes.loads_or_not_parsed(body)
    if isinstance(value, dict):
        error = value.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return clip(error["message"], 200)
        if isinstance(error, str):
            return clip(error, 200)
    lines = body.decode("utf-8", errors="replace").strip().splitlines()
    return clip(lines[0], 200) if lines else ""
