"""
The agent side of remote ACP: the ``/acp`` endpoint of the Streamable HTTP transport.

:func:`serve_remote` listens on a Twisted endpoint string and serves an acpkit agent
there; :class:`ACPResource` is the ``twisted.web`` resource itself, for mounting in a
site of your own.  Each connection is one :class:`~acpkit.connection.AgentConnection`
over ``JSONRPCProtocol(framing=MessageFraming())``: the ACP lifecycle, ordering,
cancellation and ``ACPKIT_TRACE`` are the engine's, unchanged.  The security checks
(:mod:`acpkit.remote.security`) run first on every request.  docs/reference/remote.md
has the behaviour as a table.
"""

from __future__ import annotations

import inspect
import json
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qsl, urlsplit

import attr
from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.interfaces import (
    IAddress,
    IDelayedCall,
    IListeningPort,
    IPushProducer,
    IReactorTime,
    ITransport,
)
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http
from twisted.web.http import HTTPChannel
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site
from zope.interface import implementer

from acpkit.compat import http_request_path
from acpkit.connection import Agent, AgentConnection
from acpkit.framing import MessageFraming
from acpkit.interfaces import IAgent
from acpkit.io.admission import Admission, AdmissionLimits, GuardedProtocol, Ticket
from acpkit.io.bind_policy import speaks_proxy_protocol
from acpkit.jsonrpc import JSONRPCProtocol
from acpkit.jsonrpc.classify import read_envelope
from acpkit.jsonrpc.drain import end_when_answered
from acpkit.jsonrpc.jsonbytes import NestingTooDeep, loads
from acpkit.remote.h2_reads import H2FrameReads
from acpkit.remote.health import HEALTH_PATH, HealthResource, is_health_request
from acpkit.remote.security import (
    RequestCheck,
    authentication_in_force,
    check_bind,
    tls_serving_problem,
)
from acpkit.remote.session_routes import SessionRoutes
from acpkit.remote.tokens import TokenSet
from acpkit.trace import attach_tracer

__all__ = [
    "CONNECTION_ID_HEADER",
    "SESSION_ID_HEADER",
    "ACPResource",
    "RemoteLimits",
    "serve_remote",
]

_log = Logger(namespace="acpkit.remote")

CONNECTION_ID_HEADER = b"Acp-Connection-Id"
SESSION_ID_HEADER = b"Acp-Session-Id"

#: Methods whose ``params.sessionId`` names a session the client attaches to (or copies):
#: the ``Acp-Session-Id`` header is not required on them (the official SDK does not send
#: it); every other request or notification carrying ``params.sessionId`` needs it.
SESSION_ATTACHING_METHODS = frozenset({"session/load", "session/resume", "session/fork"})

AgentFactory = Callable[[AgentConnection], "IAgent | Agent"]

#: Who a request comes from: the position of the bearer token it carries (None: no token
#: configured) and the SHA-256 digest of its TLS client certificate (None: none).
Identity = tuple[int | None, str | None]

#: Session-scoped GET streams one connection may hold open at once (beyond: 429).
MAX_SESSION_STREAMS = 64

#: Bytes of messages held for one write on the event stream (:meth:`RemoteConnection.flush`)
#: beyond which they are written at once: a long turn still meets the socket's back-pressure.
MAX_BATCH_BYTES = 64 * 1024


@attr.s(frozen=True, auto_attribs=True, kw_only=True)
class RemoteLimits:
    """The limits of one :func:`serve_remote` endpoint (see docs/reference/remote.md)."""

    #: Largest POST body (one JSON-RPC message), in bytes: 413 with a -32600 error above.
    max_message_size: int = 16 * 1024 * 1024
    #: Open connections at once: an ``initialize`` beyond is answered 503.
    max_connections: int = 100
    #: Messages held for a connection whose client does not read (no stream, or a
    #: stream the client does not drain): beyond, the connection is closed.
    max_queued_messages: int = 10_000
    #: Bytes held for such a connection: the agent is paused (``writable()`` waits)
    #: from a quarter of it on; a message that would go beyond closes the connection
    #: (one message of any size is held when nothing else is).
    max_queued_bytes: int = 4 * 1024 * 1024
    #: Seconds a connection with no open stream and no POST lives on.
    grace_period: float = 60.0
    #: Seconds between SSE keep-alive comments on an open stream.
    keepalive_interval: float = 15.0
    #: Seconds ``initialize`` may take before its POST is answered 504.
    initialize_timeout: float = 30.0
    #: Caps and deadlines of the sockets themselves (:mod:`acpkit.io.admission`): slow,
    #: idle or unauthenticated peers cannot hold the descriptors clients need.
    admission: AdmissionLimits = attr.Factory(AdmissionLimits)


def _sse_event(message: bytes) -> bytes:
    """One server-sent event carrying ``message`` (each line a ``data:`` field)."""
    if b"\n" not in message and b"\r" not in message:
        return b"data: " + message + b"\n\n"
    lines = message.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    return b"".join(b"data: " + line + b"\n" for line in lines) + b"\n"


def _write_events(stream: Request, messages: list[bytes]) -> None:
    """``messages`` as server-sent events on ``stream``, in one write."""
    if len(messages) == 1:
        stream.write(_sse_event(messages[0]))
    else:
        stream.write(b"".join([_sse_event(message) for message in messages]))


def _json_error(request: Request, status: int, message: str, code: int = -32600) -> bytes:
    """A refusal: the status and a JSON-RPC error body (id null) saying why."""
    request.setResponseCode(status)
    request.setHeader(b"content-type", b"application/json")
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return json.dumps(body).encode()


def refuse(request: Request, status: int, why: str) -> bytes:
    """A security refusal (401 names the Bearer scheme)."""
    if status == 401:
        request.setHeader(b"www-authenticate", b'Bearer realm="acp"')
    return _json_error(request, status, why)


def _raw_refusal(status: int, why: str) -> bytes:
    """A refusal written straight to an HTTP/1.x transport, closing the connection."""
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": why}}
    ).encode()
    reason = {401: b"Unauthorized", 403: b"Forbidden"}.get(status, b"Refused")
    head = [
        b"HTTP/1.1 %d %s" % (status, reason),
        b"Content-Type: application/json",
        b"Content-Length: %d" % len(body),
        b"Connection: close",
    ]
    if status == 401:
        head.append(b'WWW-Authenticate: Bearer realm="acp"')
    return b"\r\n".join(head) + b"\r\n\r\n" + body


@implementer(IAddress)
@attr.s(frozen=True, auto_attribs=True)
class RemoteAddress:
    """The address of a remote ACP connection: its id and the peer of its first request."""

    connection_id: str
    peer: str


@implementer(ITransport)
class _EngineTransport:
    """What the engine of one connection writes to: each ``write`` is one message."""

    disconnecting = False

    def __init__(self, connection: RemoteConnection) -> None:
        self._connection = connection

    def write(self, data: bytes) -> None:
        self._connection.deliver(data)

    def writeSequence(self, data: Iterable[bytes]) -> None:
        for message in data:
            self._connection.deliver(message)

    def flushNow(self) -> None:
        """The engine is done writing for now (``acpkit.jsonrpc``): send what it wrote."""
        self._connection.flush()

    def loseConnection(self) -> None:
        self.disconnecting = True
        self._connection.end(ConnectionDone("the agent closed the connection"))

    def abortConnection(self) -> None:
        self.loseConnection()

    def getPeer(self) -> IAddress:
        return self._connection.address

    def getHost(self) -> IAddress:
        return self._connection.address

    def registerProducer(self, producer: IPushProducer, streaming: bool) -> None:
        self._connection.engine_producer = producer

    def unregisterProducer(self) -> None:
        self._connection.engine_producer = None


@implementer(IPushProducer)
class _StreamProducer:
    """Told by the HTTP transport when the client stops (and resumes) reading the stream."""

    def __init__(self, connection: RemoteConnection) -> None:
        self._connection = connection

    def pauseProducing(self) -> None:
        self._connection.stream_paused(True)

    def resumeProducing(self) -> None:
        self._connection.stream_paused(False)

    def stopProducing(self) -> None:
        """The stream's ``notifyFinish`` reports the end."""


@implementer(IPushProducer)
class _ListenerProducer:
    """Told by the HTTP transport when the client stops (and resumes) reading a session's
    stream: the engine is held meanwhile."""

    def __init__(self, connection: RemoteConnection, session_id: str) -> None:
        self._connection = connection
        self._session_id = session_id

    def pauseProducing(self) -> None:
        self._connection.listener_paused(self._session_id, True)

    def resumeProducing(self) -> None:
        self._connection.listener_paused(self._session_id, False)

    def stopProducing(self) -> None:
        """The stream's ``notifyFinish`` reports the end."""


class RemoteConnection:
    """
    One remote ACP connection: the agent's engine, the SSE stream that carries what it
    writes, the queue of messages written while no stream can take them, the
    keep-alive and grace timers.
    """

    def __init__(
        self,
        connection_id: str,
        agent_factory: AgentFactory,
        *,
        clock: IReactorTime,
        limits: RemoteLimits,
        peer: str,
        on_end: Callable[[RemoteConnection], None],
        owner: Identity = (None, None),
    ) -> None:
        self.connection_id = connection_id
        #: Who opened it (:data:`Identity`): its later requests must be the same holder.
        self.owner = owner
        self.address = RemoteAddress(connection_id, peer)
        self._clock = clock
        self._limits = limits
        self._on_end = on_end
        self.queue: deque[bytes] = deque()
        #: The size of the messages in ``queue``.
        self.queued_bytes = 0
        self.stream: Request | None = None
        #: Session-scoped GET streams (``Acp-Session-Id``), by session: each carries its
        #: session's messages while it is open.
        self.listeners: dict[str, Request] = {}
        #: The sessions of the connection and the session of each agent message.
        self.routes = SessionRoutes(SESSION_ATTACHING_METHODS)
        #: Session streams the client stopped reading (the engine is held meanwhile).
        self._paused_listeners: set[str] = set()
        self._stream_paused = False
        self.engine_producer: IPushProducer | None = None
        self._engine_paused = False
        self._keepalive: IDelayedCall | None = None
        self._grace: IDelayedCall | None = None
        self._overflow: IDelayedCall | None = None
        self._init_waiter: tuple[Any, Deferred[bytes]] | None = None
        #: Messages for the open stream, written as one write at :meth:`flush`.
        self._batch: list[bytes] = []
        #: Messages for each session stream (by session: the stream and its messages),
        #: written as one write per stream at :meth:`flush`.
        self._listener_batches: dict[str, tuple[Request, list[bytes]]] = {}
        #: The size of the messages held in ``_batch`` and ``_listener_batches``.
        self._batch_bytes = 0
        self._batch_flush: IDelayedCall | None = None
        #: Why the connection ended, once it has.
        self.ended: Failure | None = None
        framing = MessageFraming()
        framing.MAX_LENGTH = limits.max_message_size
        self.protocol = JSONRPCProtocol(
            framing=framing, clock=clock, name=f"remote {connection_id[:8]}"
        )
        attach_tracer(self.protocol, "client")
        self.agent_connection = AgentConnection(agent_factory, protocol=self.protocol)
        self.protocol.makeConnection(_EngineTransport(self))
        self._start_grace()

    # -- from the client ----------------------------------------------------------------

    def receive(self, body: bytes, message: dict[str, Any] | None = None) -> None:
        """A message POSTed by the client (``message``: ``body`` decoded): to the engine;
        the grace period restarts."""
        if self.stream is None:
            self._start_grace()
        if message is not None:
            self.routes.request_sent(message)
        self.protocol.dataReceived(body)

    def initialize(self, body: bytes, request_id: Any) -> Deferred[bytes]:
        """The ``initialize`` request: fires with its answer (not sent on the stream)."""
        waiter: Deferred[bytes] = Deferred()
        self._init_waiter = (request_id, waiter)
        self.receive(body)
        return waiter

    # -- to the client ------------------------------------------------------------------

    def deliver(self, message: bytes) -> None:
        """One message from the engine: a session's on that session's stream when the
        client has one open; any other on the connection's stream, else queued
        (bounded)."""
        if self.ended is not None:
            return
        if self._init_waiter is not None and self._answers_initialize(message):
            return
        session = self.routes.session_of(message)
        listener = self.listeners.get(session) if session is not None else None
        if listener is not None:
            assert session is not None
            held = self._listener_batches.get(session)
            if held is None:
                self._listener_batches[session] = (listener, [message])
            else:
                held[1].append(message)
            self._hold(len(message))
            return
        self._to_stream(message)

    def _to_stream(self, message: bytes) -> None:
        """One message for the connection's stream: held for it, else queued (bounded)."""
        if self.stream is not None and not self._stream_paused and not self.queue:
            self._batch.append(message)
            self._hold(len(message))
            return
        if self._overflow is not None:
            return  # closing on the next turn: nothing more is held
        limits = self._limits
        # One message of any size fits an empty queue (the agent made it already).
        if self.queue and self.queued_bytes + len(message) > limits.max_queued_bytes:
            why = f"more than {limits.max_queued_bytes} bytes"
        elif len(self.queue) + 1 > limits.max_queued_messages:
            why = f"more than {limits.max_queued_messages} messages"
        else:
            self.queue.append(message)
            self.queued_bytes += len(message)
            if self.queued_bytes > limits.max_queued_bytes // 4:
                # No stream, or one the client does not drain: the agent waits
                # (writable()) until a stream takes the queue.
                self._pause_engine(True)
            return
        # Not from inside the engine's write: end on the next turn.
        self._overflow = self._clock.callLater(0, self._queue_overflowed, why)

    def _hold(self, size: int) -> None:
        """
        A message of ``size`` bytes was held for a stream until the engine's flushNow
        (once its read is processed, or after each write made outside a read): a turn's
        updates and answer are one write on their stream, one HTTP chunk or HTTP/2 DATA
        frame (a TLS record), not one per message.  The reactor's next turn flushes what
        no flushNow followed; beyond `MAX_BATCH_BYTES`, everything is written at once.
        """
        self._batch_bytes += size
        if self._batch_bytes >= MAX_BATCH_BYTES:
            self.flush()
        elif self._batch_flush is None:
            self._batch_flush = self._clock.callLater(0, self.flush)

    def flush(self) -> None:
        """
        Write the messages held since the last flush, in order, as one write on each
        stream; if the connection's stream went away or paused meanwhile, its messages
        go first in the queue.
        """
        call, self._batch_flush = self._batch_flush, None
        if call is not None and call.active():
            call.cancel()
        self._batch_bytes = 0
        if self._listener_batches:
            held, self._listener_batches = self._listener_batches, {}
            for listener, messages in held.values():
                _write_events(listener, messages)
        batch = self._batch
        if not batch:
            return
        self._batch = []
        stream = self.stream
        if stream is None or self._stream_paused or self.queue:
            for message in reversed(batch):
                self.queue.appendleft(message)
                self.queued_bytes += len(message)
            return
        _write_events(stream, batch)

    def _answers_initialize(self, message: bytes) -> bool:
        assert self._init_waiter is not None
        request_id, waiter = self._init_waiter
        try:
            decoded = loads(message)
        except ValueError:
            return False
        if not isinstance(decoded, dict) or "method" in decoded or decoded.get("id") != request_id:
            return False
        self._init_waiter = None
        waiter.callback(message)
        return True

    def _queue_overflowed(self, why: str) -> None:
        self._overflow = None
        self.end(
            ConnectionLost(f"closed: {why} queued for a client that does not read its event stream")
        )

    # -- the event stream ---------------------------------------------------------------

    def attach_stream(self, request: Request) -> None:
        """A GET opened the stream: send what was queued, then everything as it comes."""
        self.flush()
        previous = self.stream
        if previous is not None:
            # The newer stream wins (a client that reconnects a half-open stream).
            self.stream = None
            self._finish(previous)
        self._cancel_grace()
        self.stream = request
        self._stream_paused = False
        # Watched before any write: a write that raises (the request fails, twisted.web
        # answers 500) still ends the stream and starts the grace period.
        request.notifyFinish().addBoth(lambda _: self._stream_gone(request))
        self._event_stream_headers(request)
        request.setHeader(CONNECTION_ID_HEADER, self.connection_id.encode())
        request.registerProducer(_StreamProducer(self), True)
        request.write(b": stream open\n\n")
        self._flush_queue()
        self._schedule_keepalive()

    def attach_listener(self, request: Request, session_id: str) -> bool:
        """
        A GET naming a session of the connection (``Acp-Session-Id``): the session's
        stream (the RFD's revision of 2026-05-04), which carries every message of that
        session from now on, with keep-alives; a newer one for the session replaces it.
        While the client has none open, the session's messages go on the connection's
        stream (as a client of the 2026-04-23 revision, with one stream, expects). False
        when the connection has `MAX_SESSION_STREAMS` open already.
        """
        self.flush()  # what was held for the stream it replaces goes there first
        previous = self.listeners.pop(session_id, None)
        if previous is not None:
            self._finish(previous)
        elif len(self.listeners) >= MAX_SESSION_STREAMS:
            return False
        self._event_stream_headers(request)
        self.listeners[session_id] = request

        def gone(_: object) -> None:
            if self.listeners.get(session_id) is request:
                del self.listeners[session_id]
                held = self._listener_batches.pop(session_id, None)
                if held is not None:
                    # Not written yet: the session's messages go where they go without
                    # a session stream, in order.
                    for message in held[1]:
                        self._batch_bytes -= len(message)
                        self._to_stream(message)
                self.listener_paused(session_id, False)

        # Watched before the write: one that raises does not leave it registered.
        request.notifyFinish().addBoth(gone)
        request.registerProducer(_ListenerProducer(self, session_id), True)
        request.write(b": session stream open\n\n")
        if self._keepalive is None:
            self._schedule_keepalive()
        return True

    @staticmethod
    def _event_stream_headers(request: Request) -> None:
        request.setResponseCode(200)
        request.setHeader(b"content-type", b"text/event-stream")
        request.setHeader(b"cache-control", b"no-cache")
        request.setHeader(b"x-accel-buffering", b"no")

    def stream_paused(self, paused: bool) -> None:
        """The client stopped or resumed reading: hold the engine's writers meanwhile."""
        self.flush()  # what was held comes before anything queued from now on
        self._stream_paused = paused
        if paused:
            self._pause_engine(True)
        else:
            # Resumes the engine once the queue is sent, unless a write of it filled the
            # socket again (the stream paused anew, re-entrantly): then it stays paused.
            self._flush_queue()

    def listener_paused(self, session_id: str, paused: bool) -> None:
        """The client stopped or resumed reading a session's stream: the engine is held
        while one is paused (its writes to it would pile up in memory)."""
        if paused:
            self._paused_listeners.add(session_id)
            self._pause_engine(True)
            return
        self._paused_listeners.discard(session_id)
        if (
            not self._paused_listeners
            and not self._stream_paused
            and self.queued_bytes <= self._limits.max_queued_bytes // 4
        ):
            self._pause_engine(False)

    def _pause_engine(self, paused: bool) -> None:
        if paused == self._engine_paused or self.engine_producer is None:
            return
        self._engine_paused = paused
        if paused:
            self.engine_producer.pauseProducing()
        else:
            self.engine_producer.resumeProducing()

    def _flush_queue(self) -> None:
        stream = self.stream
        while self.queue and stream is not None and not self._stream_paused:
            message = self.queue.popleft()
            self.queued_bytes -= len(message)
            stream.write(_sse_event(message))
            stream = self.stream
        if (
            not self.queue
            and self.stream is not None
            and not self._stream_paused
            and not self._paused_listeners
        ):
            self._pause_engine(False)

    def _schedule_keepalive(self) -> None:
        self._cancel(self._keepalive)
        self._keepalive = self._clock.callLater(self._limits.keepalive_interval, self._keep_alive)

    def _keep_alive(self) -> None:
        self._keepalive = None
        self.flush()
        if self.stream is not None:
            self.stream.write(b": keepalive\n\n")
        for listener in self.listeners.values():
            listener.write(b": keepalive\n\n")
        if self.stream is not None or self.listeners:
            self._schedule_keepalive()

    def _stream_gone(self, request: Request) -> None:
        if self.stream is not request:
            return
        self.stream = None
        self._stream_paused = False
        self.flush()  # to the queue, for the client's next stream
        if not self.listeners:
            self._cancel(self._keepalive)
            self._keepalive = None
        if self.ended is None:
            _log.info(
                "remote connection {cid}: event stream closed; the connection ends in"
                " {grace:g} s unless the client comes back",
                cid=self.connection_id[:8],
                grace=self._limits.grace_period,
            )
            self._start_grace()

    # -- lifetime -----------------------------------------------------------------------

    def _start_grace(self) -> None:
        self._cancel_grace()
        self._grace = self._clock.callLater(self._limits.grace_period, self._grace_over)

    def _cancel_grace(self) -> None:
        self._cancel(self._grace)
        self._grace = None

    def _grace_over(self) -> None:
        self._grace = None
        grace = self._limits.grace_period
        self.end(ConnectionLost(f"closed: no event stream and no request for {grace:g} s"))

    def end(self, reason: Exception) -> None:
        """
        End the connection: running turns are cancelled (their answers still go to an
        open stream), the engine sees the connection lost with ``reason``, the stream
        ends.  Ending twice does nothing.
        """
        if self.ended is not None:
            return
        if not isinstance(reason, ConnectionDone):
            _log.info("remote connection {cid}: {why}", cid=self.connection_id[:8], why=reason)
        self.agent_connection.cancel_all_turns()
        self.flush()
        self.ended = Failure(reason)
        # Forgotten first: whoever the end wakes up sees the connection gone.
        self._on_end(self)
        for call in (self._grace, self._keepalive, self._overflow):
            self._cancel(call)
        self._grace = self._keepalive = self._overflow = None
        self.queue.clear()
        self.queued_bytes = 0
        self.protocol.connectionLost(self.ended)
        if self._init_waiter is not None:
            _, waiter = self._init_waiter
            self._init_waiter = None
            waiter.errback(Failure(reason))
        stream, self.stream = self.stream, None
        if stream is not None:
            self._finish(stream)
        for listener in list(self.listeners.values()):
            self._finish(listener)
        self.listeners.clear()

    @staticmethod
    def _finish(request: Request) -> None:
        if not request.finished and not getattr(request, "_disconnected", False):
            if request.producer is not None:
                request.unregisterProducer()
            request.finish()

    @staticmethod
    def _cancel(call: IDelayedCall | None) -> None:
        if call is not None and call.active():
            call.cancel()


def _content_type_is_json(value: bytes | None) -> bool:
    if value is None:
        return False
    media = value.split(b";", 1)[0].strip().lower()
    return media == b"application/json"


def _accepts_event_stream(value: bytes | None) -> bool:
    if value is None:
        return False
    ranges = [part.split(b";", 1)[0].strip().lower() for part in value.split(b",")]
    return b"text/event-stream" in ranges


def _requires_session_header(message: dict[str, Any]) -> str | None:
    """The session id an ``Acp-Session-Id`` header must name for this message, if any."""
    method = message.get("method")
    if not isinstance(method, str) or method in SESSION_ATTACHING_METHODS:
        return None
    params = message.get("params")
    if isinstance(params, dict):
        sid = params.get("sessionId")
        if isinstance(sid, str):
            return sid
    return None


def _ender(connection: RemoteConnection) -> Callable[[], None]:
    """What ends ``connection`` once drained."""
    return lambda: connection.end(ConnectionDone("the server is draining"))


class ACPResource(Resource):
    """
    The ``/acp`` endpoint: POST, GET (event stream or WebSocket upgrade), DELETE.

    ``agent_factory`` makes the agent of each new connection from its
    :class:`~acpkit.connection.AgentConnection`; ``clock`` drives the keep-alive and
    grace timers (the reactor).
    """

    isLeaf = True

    def __init__(
        self,
        agent_factory: AgentFactory,
        *,
        clock: IReactorTime,
        token: bytes | TokenSet | None = None,
        allowed_origins: Iterable[str] = (),
        limits: RemoteLimits | None = None,
    ) -> None:
        super().__init__()
        self._agent_factory = agent_factory
        self._clock = clock
        self._check = RequestCheck(token, allowed_origins)
        self.limits = limits if limits is not None else RemoteLimits()
        #: The open connections, by ``Acp-Connection-Id``.
        self.connections: dict[str, RemoteConnection] = {}
        #: The WebSocket resource (``acpkit.remote.websocket``), made on first upgrade.
        self._websocket: Any = None
        #: True once :meth:`start_draining` was called: no new connection is taken.
        self.draining = False

    # -- draining -----------------------------------------------------------------------

    def accepting(self) -> bool:
        """
        Whether a new connection would be taken now (what the health endpoint answers):
        not draining, and below ``max_connections``.
        """
        return not self.draining and self.open_connections() < self.limits.max_connections

    def start_draining(self) -> Deferred[None]:
        """
        Stop taking connections and let the open ones finish: from now on an
        ``initialize`` or a WebSocket upgrade is answered ``503`` (``Retry-After``) and
        the health endpoint ``503``; each open connection (Streamable HTTP or WebSocket)
        ends as soon as no request of its client is in progress (a running turn is
        answered first, on its stream).  Fires once every connection has ended; to bound
        the wait, :meth:`close_all` ends those still open (their turns cancelled).
        """
        self.draining = True
        waits: list[Deferred[None]] = []
        for connection in list(self.connections.values()):
            waits.append(end_when_answered(connection.protocol, _ender(connection)))
        if self._websocket is not None:
            for agent_connection in list(self._websocket.connections.values()):
                waits.append(end_when_answered(agent_connection.protocol, agent_connection.close))
        return DeferredList(waits, consumeErrors=True).addCallback(lambda _: None)

    def _draining_refusal(self, request: Request) -> bytes:
        request.setHeader(b"retry-after", b"1")
        return _json_error(
            request,
            503,
            "this server is draining (stopping): connect again, another instance will answer",
        )

    # -- routing ----------------------------------------------------------------------

    def head_refusal(self, request: Request) -> tuple[int, str] | None:
        """
        The checks that need only the request's headers (the bearer token, the
        ``Origin``), as soon as they are read and before any body: ``(status, why)``
        for a refused request, None for an accepted one.
        """
        return self._check.refusal(
            authorization=request.getHeader(b"authorization"),
            origin=request.getHeader(b"origin"),
            host=request.getHeader(b"host"),
        )

    def identity(self, request: Request) -> Identity:
        """Who ``request`` comes from (:data:`Identity`)."""
        holder = self._check.token_holder(request.getHeader(b"authorization"))
        certificate = request.peer_certificate() if isinstance(request, LimitedRequest) else None
        return holder, certificate

    def render(self, request: Request) -> bytes | int:
        """Security checks first, then the method."""
        query = urlsplit(request.uri).query
        query_names = [name for name, _ in parse_qsl(query, keep_blank_values=True)]
        refusal = self._check.refusal(
            query_names=query_names,
            authorization=request.getHeader(b"authorization"),
            origin=request.getHeader(b"origin"),
            host=request.getHeader(b"host"),
        )
        if refusal is not None:
            return refuse(request, *refusal)
        if request.method == b"POST":
            return self._post(request)
        if request.method == b"GET":
            return self._get(request)
        if request.method == b"DELETE":
            return self._delete(request)
        request.setHeader(b"allow", b"GET, POST, DELETE")
        return _json_error(request, 405, "use POST, GET or DELETE")

    def _connection(self, request: Request) -> RemoteConnection | bytes:
        """
        The connection the request names, or the refusal (400, 404) to answer.  A
        connection another holder opened (another token, another client certificate)
        is answered as an unknown one: its existence is not told either.
        """
        header = request.getHeader(CONNECTION_ID_HEADER)
        if header is None:
            return _json_error(request, 400, "the Acp-Connection-Id header is required")
        connection = self.connections.get(header.decode("latin-1"))
        if connection is None or connection.owner != self.identity(request):
            return _json_error(request, 404, "unknown Acp-Connection-Id (the connection ended?)")
        return connection

    # -- POST ---------------------------------------------------------------------------

    def _post(self, request: Request) -> bytes | int:
        if not _content_type_is_json(request.getHeader(b"content-type")):
            return _json_error(request, 415, "Content-Type must be application/json")
        if getattr(request, "body_too_large", False):
            return self._too_large(request)
        assert request.content is not None
        body = request.content.read()
        if len(body) > self.limits.max_message_size:
            return self._too_large(request)
        try:
            message = loads(body)
        except NestingTooDeep:
            deep = read_envelope(body.decode("utf-8", "replace"))
            if deep.members is None or "id" not in deep.members:
                return _json_error(request, 400, f"the body is not JSON: {deep.reason}", -32700)
            # Its id was read: the engine answers it (on the stream), as on every framing.
            message = deep.members
        except ValueError as e:
            return _json_error(request, 400, f"the body is not JSON: {e}", code=-32700)
        if isinstance(message, list):
            return _json_error(request, 501, "JSON-RPC batches are not supported")
        if not isinstance(message, dict):
            return _json_error(request, 400, "the body must be one JSON-RPC message (an object)")
        if (
            request.getHeader(CONNECTION_ID_HEADER) is None
            and message.get("method") == "initialize"
            and "id" in message
        ):
            return self._initialize(request, body, message["id"])
        connection = self._connection(request)
        if not isinstance(connection, RemoteConnection):
            return connection
        required = _requires_session_header(message)
        header = request.getHeader(SESSION_ID_HEADER)
        if required is not None and header is None:
            return _json_error(request, 400, f"{message['method']} needs the Acp-Session-Id header")
        if required is not None and header is not None and header.decode("latin-1") != required:
            return _json_error(
                request, 400, "the Acp-Session-Id header does not match params.sessionId"
            )
        connection.receive(body, message)
        request.setResponseCode(202)
        return b""

    def _too_large(self, request: Request) -> bytes:
        limit = self.limits.max_message_size
        return _json_error(request, 413, f"the message is larger than {limit} bytes")

    def _too_many(self, request: Request) -> bytes:
        request.setHeader(b"retry-after", b"5")
        limit = self.limits.max_connections
        return _json_error(request, 503, f"too many open connections ({limit})")

    def _initialize(self, request: Request, body: bytes, request_id: Any) -> bytes | int:
        if self.draining:
            return self._draining_refusal(request)
        if self.open_connections() >= self.limits.max_connections:
            return self._too_many(request)
        connection_id = str(uuid.uuid4())
        peer = request.getClientAddress()
        connection = RemoteConnection(
            connection_id,
            self._agent_factory,
            clock=self._clock,
            limits=self.limits,
            peer=str(getattr(peer, "host", peer)),
            on_end=self._ended,
            owner=self.identity(request),
        )
        self.connections[connection_id] = connection
        answered = connection.initialize(body, request_id)
        timeout = self._clock.callLater(
            self.limits.initialize_timeout,
            lambda: connection.end(ConnectionLost("initialize was not answered in time")),
        )

        def reply(answer: bytes) -> None:
            if timeout.active():
                timeout.cancel()
            request.setResponseCode(200)
            request.setHeader(b"content-type", b"application/json")
            request.setHeader(CONNECTION_ID_HEADER, connection_id.encode())
            self._write_and_finish(request, answer)

        def failed(reason: Failure) -> None:
            if timeout.active():
                timeout.cancel()
            self._write_and_finish(
                request, _json_error(request, 504, f"initialize failed: {reason.value}")
            )

        answered.addCallbacks(reply, failed)
        return NOT_DONE_YET

    @staticmethod
    def _write_and_finish(request: Request, data: bytes) -> None:
        if request.finished or getattr(request, "_disconnected", False):
            return
        request.write(data)
        request.finish()

    def _ended(self, connection: RemoteConnection) -> None:
        self.connections.pop(connection.connection_id, None)

    # -- GET ----------------------------------------------------------------------------

    def _get(self, request: Request) -> bytes | int:
        upgrade = request.getHeader(b"upgrade")
        if upgrade is not None and upgrade.strip().lower() == b"websocket":
            return self._websocket_upgrade(request)
        if not _accepts_event_stream(request.getHeader(b"accept")):
            return _json_error(request, 406, "Accept must include text/event-stream")
        connection = self._connection(request)
        if not isinstance(connection, RemoteConnection):
            return connection
        session_id = request.getHeader(SESSION_ID_HEADER)
        if session_id is not None:
            session = session_id.decode("latin-1")
            if session not in connection.routes.known:
                return _json_error(request, 404, "unknown Acp-Session-Id for this connection")
            if not connection.attach_listener(request, session):
                limit = MAX_SESSION_STREAMS
                return _json_error(request, 429, f"more than {limit} session streams")
        else:
            connection.attach_stream(request)
        return NOT_DONE_YET

    def _websocket_upgrade(self, request: Request) -> bytes | int:
        """
        The seam to the WebSocket transport (:mod:`acpkit.remote.websocket`): its
        resource takes the upgrade after the security checks and the connection limit;
        501 when it cannot be imported (Autobahn not installed).
        """
        resource = self._websocket_resource()
        if resource is None:
            return _json_error(
                request, 501, "WebSocket not available: the server lacks the 'websocket' extra"
            )
        if self.draining:
            return self._draining_refusal(request)
        if self.open_connections() >= self.limits.max_connections:
            return self._too_many(request)
        answer = cast("bytes | int", resource.render(request))
        if request.code == 101 and isinstance(request, LimitedRequest):
            # The WebSocket took the transport over: it no longer passes through the
            # connection's guard, and counts as a WebSocket from now on.
            request.transport_taken()
        return answer

    def _websocket_resource(self) -> Any:
        if self._websocket is None:
            try:
                from acpkit.remote.websocket import websocket_resource
            except ImportError:
                return None
            factory = self._agent_factory
            self._websocket = websocket_resource(
                lambda protocol: AgentConnection(factory, protocol=protocol),
                max_message_size=self.limits.max_message_size,
            )
        return self._websocket

    def open_connections(self) -> int:
        """Connections open now: over Streamable HTTP and over WebSocket."""
        return len(self.connections) + self.open_websockets()

    def open_websockets(self) -> int:
        """WebSocket connections open now."""
        return len(self._websocket.connections) if self._websocket is not None else 0

    # -- DELETE -------------------------------------------------------------------------

    def _delete(self, request: Request) -> bytes | int:
        connection = self._connection(request)
        if not isinstance(connection, RemoteConnection):
            return connection
        connection.end(ConnectionDone("the client ended the connection (DELETE)"))
        request.setResponseCode(202)
        return b""

    def close_all(self) -> None:
        """End every connection (the server is stopping): running turns are cancelled."""
        for connection in list(self.connections.values()):
            connection.end(ConnectionDone("the server is stopping"))
        if self._websocket is not None:
            for agent_connection in list(self._websocket.connections.values()):
                agent_connection.cancel_all_turns()
                agent_connection.close()


class LimitedRequest(Request):
    """
    A request whose body stops being stored past the site's ``max_body`` bytes (the
    resource answers 413): a huge POST costs reading it, not memory or disk.

    Made by :class:`RemoteSite` for one connection, with that connection's ``guard``
    (:class:`~acpkit.io.admission.GuardedProtocol`): once its headers are read, the
    resource's header checks run (:meth:`ACPResource.head_refusal`); an HTTP/1.x request
    they refuse is answered at once and its connection closed, its body never read; an
    HTTP/2 one is answered when its stream ends, its body discarded as it comes.  An
    accepted one takes its connection out of the pending pool, and the request's body
    deadline starts.
    """

    body_too_large = False
    _body_size = 0
    #: The guard of this request's connection (None: made by another site).
    guard: GuardedProtocol | None = None
    #: Answered from its headers alone (refused): nothing more of it is processed.
    refused_early = False
    #: Refused by its headers, to be answered when rendered (HTTP/2): its body is not kept.
    body_discarded = False

    def _limit(self) -> int | None:
        site = getattr(self.channel, "site", None)
        return getattr(site, "max_body", None)

    def gotLength(self, length: int | None) -> None:
        if self.guard is not None and self._check_head(length):
            return
        if self.body_discarded:
            super().gotLength(0)  # nothing will be stored
            return
        limit = self._limit()
        if length is not None and limit is not None and length > limit:
            self.body_too_large = True
            length = 0  # no temporary file sized for it
        super().gotLength(length)

    def _check_head(self, length: int | None) -> bool:
        """The header checks; True when the request was refused (and answered) here."""
        guard = self.guard
        assert guard is not None
        site = getattr(self.channel, "site", None)
        acp = getattr(site, "acp", None)
        health = http_request_path(self.channel) == HEALTH_PATH
        refusal = acp.head_refusal(self) if isinstance(acp, ACPResource) and not health else None
        http1 = isinstance(self.channel, HTTPChannel)
        if refusal is None:
            guard.accepted(per_request=http1)
            guard.head_received(length)
            return False
        if not http1:
            # twisted.web answers an HTTP/2 stream only once its request is complete (a
            # response ended earlier makes its later DATA frames raise inside it), so the
            # refusal is answered when rendered; until then its body is discarded as it
            # comes: an unauthenticated peer gets no temporary file, and its connection,
            # still pending, is closed at the pending deadline.
            self.body_discarded = True
            return False
        self.refused_early = True
        self.requestHeaders.removeHeader(b"expect")  # no "100 Continue" after the answer
        transport = self.channel.transport
        if transport is not None:
            transport.write(_raw_refusal(*refusal))
            transport.loseConnection()
        return True

    def handleContentChunk(self, data: bytes) -> None:
        if self.body_too_large or self.refused_early or self.body_discarded:
            return
        limit = self._limit()
        self._body_size += len(data)
        if limit is not None and self._body_size > limit:
            self.body_too_large = True
            assert self.content is not None
            self.content.seek(0)
            self.content.truncate()
            return
        super().handleContentChunk(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if self.refused_early:
            return
        if self.guard is not None:
            self.guard.body_received()
        super().requestReceived(command, path, version)

    def peer_certificate(self) -> str | None:
        """The SHA-256 digest of the peer's TLS client certificate, or None."""
        transport = self.guard.transport if self.guard is not None else None
        getter = getattr(transport, "getPeerCertificate", None)
        if getter is None:
            return None
        try:
            certificate = getter()
        except Exception:
            return None
        if certificate is None:
            return None
        return str(certificate.digest("sha256").decode("ascii"))

    def transport_taken(self) -> None:
        """A WebSocket took the connection's transport over (see :class:`RemoteSite`)."""
        if self.guard is not None:
            self.guard.detach()


class _GuardedRequests:
    """The request factory of one connection: its requests know the connection's guard."""

    def __init__(self, ticket: Ticket) -> None:
        self.ticket = ticket

    def __call__(self, channel: Any, queued: Any = None) -> LimitedRequest:
        request = LimitedRequest(channel) if queued is None else LimitedRequest(channel, queued)
        request.guard = self.ticket.guard
        return request


def _site_options() -> dict[str, Any]:
    """
    ``parsePOSTFormSubmission=False`` where this Twisted's ``Site`` has it (24.10 and
    later): no POST body is parsed as a form (ours are JSON; a form is answered 415), and
    no request's ``Content-Type`` goes through ``email``'s header parser first.  Twisted
    24.7 parses form bodies before rendering; they are bounded by ``max_message_size``
    all the same.
    """
    parameters = inspect.signature(Site.__init__).parameters
    return {"parsePOSTFormSubmission": False} if "parsePOSTFormSubmission" in parameters else {}


class RemoteSite(Site):
    """
    The site :func:`serve_remote` listens with: the endpoint at ``path``, limited
    bodies, and every connection admitted by an :class:`~acpkit.io.admission.Admission`
    table (caps per server and per peer, deadlines for slow and idle peers, headers
    checked before bodies are read: ``resource.limits.admission``).
    """

    def __init__(self, resource: ACPResource, path: bytes, reactor: Any = None) -> None:
        root = Resource()
        segments = [s for s in path.split(b"/") if s]
        parent = root
        for segment in segments[:-1]:
            child = Resource()
            parent.putChild(segment, child)
            parent = child
        if segments:
            parent.putChild(segments[-1], resource)
        else:
            root = resource
        super().__init__(root, requestFactory=LimitedRequest, reactor=reactor, **_site_options())
        self.acp = resource
        #: ``GET /healthz`` (:mod:`acpkit.remote.health`): no token, nothing revealed.
        self.health = HealthResource(resource.accepting)
        self.max_body = resource.limits.max_message_size
        self.noisy = False
        self.admission = Admission(
            resource.limits.admission,
            clock=self.reactor,
            extra_sockets=resource.open_websockets,
        )

    def buildProtocol(self, addr: IAddress | None) -> Any:
        """
        The site's protocol for one connection the admission table lets in (None
        closes it at once), guarded (:class:`~acpkit.io.admission.GuardedProtocol`) and fed
        one HTTP/2 frame per read on ``h2`` connections
        (``acpkit.remote.h2_reads.H2FrameReads``: twisted.web's HTTP/2 server fails
        when a request and its ``RST_STREAM`` come in one read).
        """
        ticket = self.admission.admit(str(getattr(addr, "host", None) or "local"))
        if ticket is None:
            return None
        protocol = super().buildProtocol(addr)
        if protocol is None:
            self.admission.release(ticket)
            return None
        protocol.requestFactory = _GuardedRequests(ticket)
        return GuardedProtocol(H2FrameReads(protocol), ticket, self.admission)

    def getResourceFor(self, request: Request) -> Any:
        """The health endpoint for its path (wherever the ACP endpoint is), else the tree."""
        if is_health_request(request):
            return self.health
        return super().getResourceFor(request)

    def log(self, request: http.Request) -> None:
        """
        No access log: twisted.web's would write each URL with its query, where a
        client may have put a token (refused, but written to the log all the same).
        """

    def stopFactory(self) -> None:
        self.acp.close_all()
        self.admission.stop()
        super().stopFactory()


def serve_remote(
    reactor: Any,
    endpoint_description: str,
    agent_factory: AgentFactory,
    *,
    path: str = "/acp",
    token: str | bytes | Sequence[str | bytes] | TokenSet | None = None,
    no_token: bool = False,
    allowed_origins: Iterable[str] = (),
    limits: RemoteLimits | None = None,
    client_ca: str | Path | None = None,
) -> Deferred[IListeningPort]:
    """
    Serve ``agent_factory``'s agents over remote ACP (Streamable HTTP, and WebSocket
    when ``acpkit.remote.websocket`` is there) at ``path`` on a Twisted endpoint string.

    Where it may listen is :mod:`acpkit.io.bind_policy`'s: a TCP or TLS endpoint naming no
    ``interface`` listens on ``127.0.0.1``; TCP needs authentication, loopback included:
    ``token`` (one bearer token, or several: each holder's connections are its own),
    ``client_ca`` (a PEM file of CA certificates; ``ssl:`` endpoints only, else
    :class:`~acpkit.io.bind_policy.ClientAuthError`: every TLS handshake then needs a
    client certificate signed by one of them), or, on loopback only, ``no_token=True``
    (any local user or process can then connect).  A unix socket is owner-only and
    needs none.  Refused: :class:`~acpkit.io.bind_policy.InsecureBindError`, as a failed
    Deferred.  Both ``token`` and ``client_ca`` given: both are required.  The
    authentication in force is logged once listening.  Browsers' requests (an
    ``Origin`` header) are accepted from ``allowed_origins`` and this machine's loopback
    only.  ``limits``: :class:`RemoteLimits`.  The Deferred fires with the listening
    port; ``port.factory.acp`` is the :class:`ACPResource`.
    """
    from twisted.internet.defer import fail

    from acpkit.io.tls_server import server_endpoint

    try:
        tokens = None if token is None else TokenSet.of(token)
    except ValueError:
        return fail(ValueError("the bearer token is empty"))
    if tokens is not None and any(not t.strip() for t in tokens):
        return fail(ValueError("the bearer token is empty"))
    ca_file = None if client_ca is None else Path(client_ca).expanduser()
    try:
        description = check_bind(
            endpoint_description, token=tokens, client_auth=ca_file is not None, no_token=no_token
        )
    except ValueError as e:
        return fail(e)
    if description.split(":", 1)[0].lower() == "ssl":
        problem = tls_serving_problem()
        if problem is not None:
            return fail(RuntimeError(problem))
    try:
        endpoint = server_endpoint(reactor, description, client_ca=ca_file)
    except Exception as e:  # whatever Twisted's endpoint parser or OpenSSL raises
        return fail(e)
    resource = ACPResource(
        agent_factory,
        clock=reactor,
        token=tokens,
        allowed_origins=allowed_origins,
        limits=limits,
    )
    site = RemoteSite(resource, path.encode(), reactor)
    # Behind a PROXY protocol balancer, each connection is counted as its client's.
    site.admission.proxied = speaks_proxy_protocol(description)
    listening = endpoint.listen(site)

    def log_listening(port: IListeningPort) -> IListeningPort:
        _log.info(
            "remote ACP listening on {address}; {authentication}",
            address=port.getHost(),
            authentication=authentication_in_force(tokens, ca_file, no_token=no_token),
        )
        return port

    return listening.addCallback(log_listening)
