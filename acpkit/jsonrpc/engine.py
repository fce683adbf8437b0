"""
The JSON-RPC 2.0 engine, untyped: params and results are JSON builtins.

:class:`JSONRPCEngine` is the Twisted protocol connected to the transport.  It holds its
framing (:class:`acpkit.framing.IFraming`, in ``framing``) instead of inheriting one: it
hands the framing every read, the framing calls it back with whole messages
(:class:`acpkit.framing.IFramedMessageReceiver`), and it writes each message with the
framing's ``sendMessage`` (:class:`acpkit.framing.IMessageSender`).  So one engine class
runs over any framing, one with no byte stream included (see :class:`JSONRPCEngine`).
:class:`acpkit.jsonrpc.JSONRPCProtocol` is the engine holding an
:class:`acpkit.framing.NDJSONProtocol` with ACP's ``$/cancel_request``;
:class:`acpkit.jsonrpc.ContentLengthJSONRPCProtocol` the engine holding a
``Content-Length`` framing with LSP's ``$/cancelRequest``.

The engine joins pieces that know one another only by small interfaces: each message
waits its turn in the dispatcher (:mod:`acpkit.jsonrpc.dispatch`, wire order), is read
by the reader (:mod:`acpkit.jsonrpc.receive`), which classifies it once by its keys
(:mod:`acpkit.jsonrpc.classify`: ``id`` + ``method``: request; ``id`` + ``result`` xor
``error``: response; ``method`` alone: notification), hands requests to the dispatcher
(handler slots, queue, one answer each), notifications to their handlers in a
:class:`~acpkit.jsonrpc.MethodRegistry`, and responses to the table of our pending
requests (:mod:`acpkit.jsonrpc.outgoing`); both ways, requests are cancelled with the
dialect's notification (:mod:`acpkit.jsonrpc.cancel`).  The engine itself writes, bounds
sizes, applies back-pressure, and handles the end of input and of the connection; it is
the dispatcher's :class:`~acpkit.jsonrpc.dispatch.DispatchHost` and the reader's
:class:`~acpkit.jsonrpc.receive.ReaderHost`.  Below,
"line" is one framed message.

Error replies
=============

- invalid UTF-8 or invalid JSON: -32700, id ``null``;
- a scalar, an array (ACP has no batches), an object that is no envelope: -32600, id
  ``null``;
- a request with a missing/wrong ``jsonrpc`` or a non-string ``method``: -32600 with its
  id; with an invalid id (float, bool, object, array, null): -32600, id ``null``;
- an integer longer than Python converts (``sys.get_int_max_str_digits()``; valid
  JSON): as the id, -32600 with id ``null`` (no peer could echo it exactly); in the
  params of a known request, -32602 with its id; in a notification, dropped; in a
  response, the pending request fails with :class:`InvalidRequest`;
- an unknown method: -32601 with ``data.method``;
- params absent or not an object: -32602 with ``data.path == "$.params"``;
- a handler raising an :class:`RPCError`: that error; raising anything else: -32603
  ``Internal error`` (the exception is logged, never sent);
- more requests than running and queue slots (or, while the peer is not reading, than
  queue slots once ``max_buffered_output`` is spent): -32603 ``Internal error: too many
  concurrent requests``;
- a line longer than ``max_line_length`` (see Oversized lines): -32600
  (:class:`MessageTooLarge`, ``data.limit``) with the request's id when its head shows
  one, else with id ``null``;
- a malformed response: -32600 with id ``null`` (never the response's id, which names
  one of OUR requests); the pending request it names fails with :class:`InvalidRequest`;
- a message nested deeper than :data:`~acpkit.jsonrpc.jsonbytes.MAX_NESTING_DEPTH` (254) arrays
  and objects: see Messages nested too deep.

Notifications are never answered, not even when invalid (they are logged).  Error
responses with id ``null`` from the peer are never answered (so two peers cannot bounce
errors forever); they may fail one of our requests (see Oversized lines).  A response
with an unknown id is logged and dropped (quietly, at debug level, when it answers a
request we cancelled or timed out).  Ids are echoed exactly as received; ours are ints,
and a response whose id is the decimal string of a pending id is accepted with a warning.

Ordering and concurrency
========================

Inbound messages are processed strictly in wire order, also when several arrive in one
read.  A notification handler may return an unfired ``Deferred`` (or a coroutine that
does not finish at once): until it fires, every *later* message (notifications,
responses, requests) waits in a backlog and reading from the transport is paused, so a
``session/update`` that arrived before a response is handled before the response's
``Deferred`` fires.  Request handlers never hold the stream: a request is started, or
queued, in order, and the stream moves on; so a handler can make a nested request to
the peer and get its answer.  At most ``max_concurrent_requests`` handlers run at once;
further requests wait in FIFO order in a queue of at most ``max_queued_requests``;
beyond that a request is answered -32603 at once.

Oversized lines
===============

A line longer than ``MAX_LENGTH`` (``max_line_length``) is never buffered: the framing
keeps its first 4 KiB (``OVERSIZED_HEAD``) and drops the rest.  From that head a small
scanner reads the top-level keys and the values that are whole in it:

- a request (``method`` and a valid ``id`` read whole, the id not in progress): answered
  -32600 :class:`MessageTooLarge` with that id, so its sender stops waiting (encoders
  write ``id`` before ``params``, ours included);
- anything else (a notification, an id after 4 KiB of params, garbage): -32600 with id
  ``null``; a response whose id is one of our pending requests fails that request with
  :class:`MessageTooLarge`.

Every such line adds one to :attr:`JSONRPCProtocol.oversized_dropped` and is logged
with its kind, method and id when the head shows them.

Sending: a request, notification or result whose line would be longer than our own
``MAX_LENGTH`` is not sent (we assume the peer accepts what we accept: ACP peers share
the 64 MiB default): :meth:`JSONRPCProtocol.request` fails with
:class:`MessageTooLarge`, an inbound request whose result is too long is answered with
it instead, and :meth:`JSONRPCProtocol.notify` drops the notification with a warning
(no exception: a stream of updates goes on).  An error with id
``null`` from the peer means it could not read one of our lines; it fails at once the
requests it can only be about:

- -32600 with an integer ``data.limit`` (acpkit's "too large"): every pending request
  whose line was longer than the limit (the peer drops every such line, so each of them
  is lost, whichever line this error was about);
- -32700: the single pending request, if exactly one is pending and its line is the
  longest we wrote since the previous id-``null`` error (so it is at least as long as the
  line the peer could not parse);
- anything else: nothing fails (logged).

The failed request's late answer, if any, is dropped quietly.

Messages nested too deep
========================

A message nested deeper than :data:`~acpkit.jsonrpc.jsonbytes.MAX_NESTING_DEPTH` (254 levels of
arrays and objects; any depth, 100,000 included) is not parsed past its first top-level
member that is (:class:`acpkit.jsonrpc.classify.TooDeep`); the members read before it (the
envelope: encoders write ``jsonrpc``, ``id`` and ``method`` first) decide the answer:

- a request (``"jsonrpc": "2.0"``, a valid id not in progress, a string method): answered
  with its id: -32601 for an unknown method, else -32602 (``data.path == "$.params"``)
  when the deep member is ``params`` (the request is valid; its params are what this
  side cannot take, as for a huge integer), else -32600;
- a response (``result`` or ``error`` read or too deep, no ``method``): -32600 with id
  ``null``; the pending request its id names fails with :class:`InvalidRequest`;
- anything else (an array, no envelope, an id not read before the deep member): -32700
  with id ``null``: the text is not JSON this side parses.

Each one is logged and counted in :attr:`JSONRPCEngine.undecodable_dropped`; the next
message is read as usual.  Nothing recurses on the way (no ``repr`` of a deep value,
no parser past its limit), and nothing deeper than the limit is ever sent:
:meth:`request` fails and :meth:`notify` raises :class:`~acpkit.jsonrpc.jsonbytes.NestingTooDeep`
(a ``ValueError``), and a result nested too deep is answered -32603.

Cancellation
============

Inbound, the policy's cancel notification (ACP: ``$/cancel_request {"requestId": id}``)
calls :meth:`InboundRequest.cancel`: a queued request is answered at once; a running
handler's ``Deferred`` is cancelled (an ``async def`` handler sees ``CancelledError`` at
its ``await``).  A request is answered exactly once: with the handler's result if it
produced one anyway, else the method's ``cancelled_result``, else -32800 (a policy that
does not answer cancelled requests, MCP's, answers nothing).  A cancel for an unknown or
answered id is ignored.  Outgoing: ``d.cancel()`` on a :meth:`JSONRPCEngine.request`
Deferred sends the cancel notification and fails ``d`` with ``CancelledError`` at once;
the peer's late answer is dropped.  A timeout does the same with
:class:`RequestTimeout`.

Back-pressure
=============

The protocol registers itself with its transport as a streaming producer.  When the
transport pauses it (the peer is not reading our output), :meth:`JSONRPCProtocol.writable`
returns Deferreds that wait until the transport resumes it: code that writes much
(streams of notifications) awaits ``writable()`` before each write.

Write pressure never stops us reading: a peer that writes many requests before it reads
any answer is blocked writing to us, and if we stopped reading because it does not read,
neither could ever go on.  Instead, what the peer's requests make us write is bounded:

- while paused, requests are started as usual until ``max_buffered_output`` bytes
  (:data:`DEFAULT_MAX_BUFFERED_OUTPUT`, 16 MiB) were written since the pause;
- past that, no new handler starts: requests wait in the queue (up to
  ``max_queued_requests``) and are started when the peer reads again;
- past that, each request is answered -32603 ``too many concurrent requests`` at once.

So while the peer does not read, the transport holds at most what it held when it
paused us (Twisted's 64 KiB) plus ``max_buffered_output``, plus what handlers already
running write, plus one error reply per further line (about 100 bytes and the id).
Notifications and responses produce no output.  Only a notification handler that
holds the stream stops reading (see Ordering).

End of input and connection loss
================================

When the peer closes our input (half-close), responses still in the backlog are
processed, then every pending outgoing request fails with :class:`ConnectionLost` (no
answer can come), and the connection is closed (flushing output) once every inbound
request has been answered.  On ``connectionLost`` every pending outgoing request fails
with :class:`ConnectionLost` carrying the reason's text, every running or queued
inbound handler is cancelled (its reply is dropped), and later :meth:`request` calls
fail at once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Never

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import (
    IDelayedCall,
    IHalfCloseableProtocol,
    IPushProducer,
    IReactorTime,
    ITransport,
)
from twisted.internet.protocol import Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from acpkit.errors import (
    ConnectionLost,
    InternalError,
    MessageTooLarge,
    RequestTimeout,
    clip,
)
from acpkit.framing import (
    IFramedMessageReceiver,
    IFraming,
    IMessageSender,
    ITraced,
    LineTracer,
)
from acpkit.jsonrpc.cancel import ICancellationPolicy
from acpkit.jsonrpc.classify import RequestId, encode_message, error_message
from acpkit.jsonrpc.dispatch import InboundDispatcher, InboundRequest
from acpkit.jsonrpc.outgoing import OutgoingRequests
from acpkit.jsonrpc.receive import JUNK_LINE_KEPT, MessageReader
from acpkit.jsonrpc.registry import MethodRegistry

__all__ = ["DEFAULT_MAX_BUFFERED_OUTPUT", "JUNK_LINE_KEPT", "JSONRPCEngine"]

#: Default for ``max_buffered_output``: how many bytes we write while the peer is not
#: reading our output before new inbound requests stop being started (Back-pressure).
DEFAULT_MAX_BUFFERED_OUTPUT = 16 * 1024 * 1024

#: Bytes written while a read is processed after which they are flushed at once rather
#: than after the whole read: a burst of messages written from inside one read (a client
#: resumed by an answer that sends thousands of requests) starts reaching the peer before
#: the last one is made.
FLUSH_WHILE_RECEIVING = 64 * 1024


@implementer(IPushProducer, IHalfCloseableProtocol, IFramedMessageReceiver, IMessageSender, ITraced)
class JSONRPCEngine(Protocol):
    """
    The JSON-RPC 2.0 engine of one peer connection, whatever the framing (see the module
    docstring for the policies).

    It is the Twisted protocol connected to the transport, and it holds its framing
    (:class:`acpkit.framing.IFraming`) instead of inheriting one: every read goes to
    ``framing.dataReceived``; the framing calls back this engine, its ``receiver``
    (:class:`acpkit.framing.IFramedMessageReceiver`), with each whole message
    (:meth:`messageReceived`), the head of an oversized one
    (:meth:`messageLengthExceeded`), the end of input (:meth:`inputEnded`) and a broken
    stream (:meth:`framingFailed`); the engine writes each message with
    ``framing.sendMessage`` (:class:`acpkit.framing.IMessageSender`).  So the same class
    runs over any framing: ``JSONRPCEngine(registry, framing=NDJSONProtocol(),
    cancellation=MCP_CANCELLATION)`` is MCP over stdio.  :class:`JSONRPCProtocol`
    (NDJSON, ACP) and :class:`acpkit.jsonrpc.content_length.ContentLengthJSONRPCProtocol`
    (``Content-Length``, LSP) only choose a framing and a policy.

    A framing that reads no byte stream (MCP's Streamable HTTP: a POST per message, the
    answers in a JSON body or an event stream) plugs in the same way: it provides
    :class:`~acpkit.framing.IFraming` (``sendMessage`` POSTs; each message it reads goes
    to ``receiver.messageReceived``; the end of the session to ``receiver.inputEnded``),
    and the engine is connected (``makeConnection``) to a transport standing for the
    session, whose ``loseConnection`` ends it and calls :meth:`connectionLost`.  The
    engine only needs ``loseConnection`` from its transport; ``registerProducer``,
    ``pauseProducing``/``resumeProducing`` and ``flushNow`` are used when present.

    ``registry`` holds the methods this side handles; ``clock`` drives timeouts
    (default: the global reactor); ``name`` labels log lines; ``cancellation`` is the
    dialect's way to cancel requests (:mod:`acpkit.jsonrpc.cancel`; default: the class's);
    ``framing`` is an unconnected framing without a receiver (default: the class's
    :meth:`make_framing`); ``max_line_length`` sets its ``MAX_LENGTH``.
    """

    _log = Logger()

    #: How requests are cancelled, both ways (a subclass sets its dialect's).
    cancellation: ICancellationPolicy

    #: Called with each accepted inbound request, in wire order, before it may wait
    #: for a slot (not called for requests answered with an error at once).
    on_request_received: Callable[[InboundRequest], None] | None = None

    #: This side's role in log lines ("agent: handler for session/prompt raised ..."):
    #: the typed connections set it; None names no side.
    side: str | None = None

    #: Whether a handler's unexpected exception goes in its -32603 answer's ``data``
    #: (type and message): None lets ``ACPKIT_DEBUG_ERRORS`` decide (see
    #: :mod:`acpkit.jsonrpc.handler_errors`); ``run_agent(debug_errors=True)`` sets it.
    error_details: bool | None = None

    #: How deep we are in ``dataReceived`` (writes made meanwhile are flushed after it).
    _receiving = 0
    #: Bytes written since the last flush.
    _unflushed = 0

    def __init__(
        self,
        registry: MethodRegistry | None = None,
        *,
        clock: IReactorTime | None = None,
        max_concurrent_requests: int = 32,
        max_queued_requests: int = 1024,
        max_line_length: int | None = None,
        max_buffered_output: int = DEFAULT_MAX_BUFFERED_OUTPUT,
        name: str = "peer",
        cancellation: ICancellationPolicy | None = None,
        framing: IFraming | None = None,
    ) -> None:
        if cancellation is not None:
            self.cancellation = cancellation
        elif getattr(self, "cancellation", None) is None:
            raise ValueError("a cancellation policy is needed (see acpkit.jsonrpc.cancel)")
        if max_concurrent_requests < 1:
            raise ValueError("max_concurrent_requests must be at least 1")
        if max_queued_requests < 0:
            raise ValueError("max_queued_requests must not be negative")
        if max_buffered_output < 0:
            raise ValueError("max_buffered_output must not be negative")
        self.registry = registry if registry is not None else MethodRegistry()
        self.name = name
        if clock is None:
            from twisted.internet import reactor

            clock = reactor
        self._clock: IReactorTime = clock
        self.max_concurrent_requests = max_concurrent_requests
        self.max_queued_requests = max_queued_requests
        #: Bytes of output we may write while the peer is not reading before new
        #: inbound requests wait in the queue instead of starting (see Back-pressure).
        self.max_buffered_output = max_buffered_output
        if max_line_length is not None and max_line_length < 1:
            raise ValueError("max_line_length must be positive")
        if framing is None:
            framing = self.make_framing()
        elif framing.receiver is not None:
            raise ValueError("this framing already delivers to another receiver")
        framing.receiver = self
        #: The framing this protocol reads and writes through (:class:`IFraming`).
        self.framing: IFraming = framing
        # Bound once: one call per message, no attribute chain.
        self._send_message = framing.sendMessage
        self._frame_data = framing.dataReceived
        if max_line_length is None:
            max_line_length = self._class_max_length
        if max_line_length is not None:
            framing.MAX_LENGTH = max_line_length
        self.connected = False
        # outgoing
        self._outgoing = OutgoingRequests()
        # inbound: wire order and request slots, then what each message calls for
        self._dispatch = InboundDispatcher(self)
        self._reader = MessageReader(self, self._dispatch, self._outgoing)
        # input end, flow control, close
        self._eof = False
        self._eof_handled = False
        self._closing = False
        self._closed_reason: Failure | None = None
        self._close_waiters: list[Deferred[Never]] = []
        self._write_paused = False
        # Bytes written since the transport paused us (reset when it resumes us).
        self._written_while_paused = 0
        self._reading_paused = False
        self._writable_waiters: list[Deferred[None]] = []
        self._settled_waiters: list[Deferred[None]] = []
        self._settled_call: IDelayedCall | None = None

    @property
    def requests_in_progress(self) -> int:
        """The peer's requests received and not answered yet (waiting or running)."""
        return len(self._dispatch.inbound)

    def when_requests_answered(self) -> Deferred[None]:
        """
        A Deferred that fires once no request of the peer is in progress: at once when
        none is, else on a later reactor turn where every request received so far is
        answered and no other came meanwhile (or the connection ended).  What drains
        a connection before closing it: the callback may close it.
        """
        if not self._dispatch.inbound or self._closed_reason is not None:
            return succeed(None)
        d: Deferred[None] = Deferred()
        self._settled_waiters.append(d)
        return d

    def requests_settled(self) -> None:
        """The dispatcher answered (or dropped) its last request in progress (a
        :class:`~acpkit.jsonrpc.dispatch.DispatchHost` call)."""
        if self._settled_waiters and self._settled_call is None:
            self._settled_call = self._clock.callLater(0, self._fire_settled)

    def _fire_settled(self) -> None:
        self._settled_call = None
        if self._dispatch.inbound and self._closed_reason is None:
            return  # another request came meanwhile: its answer settles it again
        waiters, self._settled_waiters = self._settled_waiters, []
        for waiter in waiters:
            waiter.callback(None)

    @property
    def undecodable_dropped(self) -> int:
        """
        How many incoming lines were discarded undelivered because they are not a valid
        JSON-RPC message: not UTF-8, not JSON, not an object, or a malformed request,
        notification or response, since the connection started.  Each one is also
        logged (a client shows the count: its agent's updates may be among them).
        """
        return self._reader.undecodable_dropped

    @property
    def junk_lines(self) -> int:
        """
        How many incoming lines were not a JSON object at all (not UTF-8, not JSON, or
        another JSON value): junk such as a banner or a print on the peer's stdout.
        """
        return self._reader.junk_lines

    @property
    def first_junk_line(self) -> bytes | None:
        """
        The first of those lines as received (its first ``JUNK_LINE_KEPT`` bytes), or
        None: a client shows it in the errors it reports without ``-v``.
        """
        return self._reader.first_junk_line

    @property
    def invalid_utf8_replaced(self) -> int:
        """How many incoming messages were not UTF-8 and were read with each invalid byte
        replaced by U+FFFD (only with :attr:`replace_invalid_utf8`)."""
        return self._reader.invalid_utf8_replaced

    #: Read a message that is not UTF-8 with each invalid byte replaced by U+FFFD (and
    #: count it in :attr:`invalid_utf8_replaced`) instead of answering -32700 and dropping
    #: it.  Off by default; a client that shows an agent's text sets it, so that one bad
    #: byte does not lose a whole message.
    replace_invalid_utf8 = False

    #: A subclass's ``MAX_LENGTH = n`` class attribute (see ``__init_subclass__``).
    _class_max_length: int | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """
        A subclass may still say ``MAX_LENGTH = n`` (as when the engine inherited its
        framing): ``n`` becomes its framings' default instead of hiding the property.
        """
        super().__init_subclass__(**kwargs)
        value = cls.__dict__.get("MAX_LENGTH")
        if isinstance(value, int):
            del cls.MAX_LENGTH
            cls._class_max_length = value

    def make_framing(self) -> IFraming:
        """
        The framing used when none is given to the constructor.  The generic engine has
        none of its own: a subclass returns a new one (:class:`JSONRPCProtocol`:
        :class:`~acpkit.framing.NDJSONProtocol`).
        """
        raise ValueError("a framing is needed (see acpkit.framing.IFraming)")

    # The framing's settings, under the names the engine had when it inherited them.

    @property
    def MAX_LENGTH(self) -> int:
        """
        The largest message, in bytes, read or written (``max_line_length``; the
        framing's ``MAX_LENGTH``, which this reads and sets).
        """
        return self.framing.MAX_LENGTH  # type: ignore[no-any-return]

    @MAX_LENGTH.setter
    def MAX_LENGTH(self, value: int) -> None:
        self.framing.MAX_LENGTH = value

    @property
    def tracer(self) -> LineTracer | None:
        """The framing's tracer: records every complete message both ways when set."""
        return self.framing.tracer  # type: ignore[no-any-return]

    @tracer.setter
    def tracer(self, value: LineTracer | None) -> None:
        self.framing.tracer = value

    @property
    def paused(self) -> bool:
        """True while the framing holds complete messages undelivered."""
        return bool(self.framing.paused)

    @paused.setter
    def paused(self, value: bool) -> None:
        self.framing.paused = value

    # Views of the inbound dispatcher and the outgoing table, under their old names.

    @property
    def _inbound(self) -> dict[RequestId, InboundRequest]:
        return self._dispatch.inbound

    @property
    def _queue(self) -> deque[InboundRequest]:
        return self._dispatch.queue

    @property
    def _running(self) -> int:
        return self._dispatch.running

    @property
    def _next_id(self) -> int:
        """The id our next request will get (kept for tests written against it)."""
        return self._outgoing.next_id

    @property
    def oversized_dropped(self) -> int:
        """
        How many incoming lines were discarded for being longer than ``MAX_LENGTH``
        (requests, notifications, responses or anything else), since the connection
        started.  Each one is also logged with its method when its head shows it.
        """
        return self._reader.oversized_dropped

    # -- connection ---------------------------------------------------------------

    def makeConnection(self, transport: ITransport) -> None:
        """Connect the framing (it writes to ``transport``), then this protocol."""
        self.framing.makeConnection(transport)
        super().makeConnection(transport)

    def connectionMade(self) -> None:
        """Register as a streaming producer with the transport when it supports it."""
        self.connected = True
        register = getattr(self.transport, "registerProducer", None)
        if register is not None:
            try:
                register(self, True)
            except RuntimeError as e:
                self._log.warn("{peer}: could not register as producer: {e}", peer=self.name, e=e)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        """Fail pending requests, cancel running handlers, fire ``when_closed``."""
        # The framing first: a last unterminated line is still delivered.
        self.framing.connectionLost(reason)
        self.connected = False
        self._closed_reason = reason
        why = ConnectionLost.because(reason.value)
        # debug: whoever owns the connection reports its end in its own words (when_closed)
        self._log.debug("{peer}: connection lost: {why}", peer=self.name, why=reason.value)
        self.fail_all_outgoing(why)
        dropped = self._dispatch.drop_backlog()
        if dropped:
            self._log.info(
                "{peer}: {n} unprocessed messages dropped on connection loss",
                peer=self.name,
                n=dropped,
            )
        self._dispatch.abandon_all()
        waiters, self._writable_waiters = self._writable_waiters, []
        for w in waiters:
            w.errback(why)
        closers, self._close_waiters = self._close_waiters, []
        for c in closers:
            c.errback(reason)

    def when_closed(self) -> Deferred[Never]:
        """
        A Deferred that fails with the ``connectionLost`` reason (a ``Failure``), even
        for a clean close, and never succeeds (hence ``Deferred[Never]``).

        Use ``addErrback``/``addBoth``: ``await`` raises the reason's exception,
        ``ConnectionDone`` for a clean close.  :attr:`closed_reason` holds it too.  The
        typed connections' ``closed`` Deferred succeeds on a clean close instead.
        """
        if self._closed_reason is not None:
            return fail(self._closed_reason)
        d: Deferred[Never] = Deferred()
        self._close_waiters.append(d)
        return d

    @property
    def closed_reason(self) -> Failure | None:
        """The ``connectionLost`` reason once the connection is gone, else ``None``."""
        return self._closed_reason

    def close(self) -> None:
        """
        Close the connection now, keeping what was already written.

        Output already written is flushed to the peer first (the transport's
        ``loseConnection``); inbound handlers still running are cancelled, and pending
        outgoing requests fail, when ``connectionLost`` follows.  Closing twice, or a
        closed connection, does nothing.
        """
        if self._closing or not self.connected or self.transport is None:
            return
        self._closing = True
        self.transport.loseConnection()

    # -- flow control (IPushProducer, called by the transport) -------------------------

    def pauseProducing(self) -> None:
        """
        The peer is not reading our output: hold writers (``writable()`` waits).

        Input is still read (see Back-pressure in the module docstring): two peers that
        both write before they read cannot deadlock.
        """
        if not self._write_paused:
            self._write_paused = True
            self._written_while_paused = 0

    def resumeProducing(self) -> None:
        """The peer reads again: start queued requests, release writers."""
        self._write_paused = False
        self._written_while_paused = 0
        self.paused = False
        self.dataReceived(b"")
        self.update_reading()
        self._dispatch.pump()
        waiters, self._writable_waiters = self._writable_waiters, []
        for w in waiters:
            w.callback(None)

    def stopProducing(self) -> None:
        """The transport is going away; ``connectionLost`` does the cleanup."""

    @property
    def output_paused(self) -> bool:
        """True while the transport has paused us: the peer is not reading our output."""
        return self._write_paused

    def writable(self) -> Deferred[None]:
        """Fires now, or when the transport resumes us (back-pressure)."""
        if not self._write_paused:
            return succeed(None)
        d: Deferred[None] = Deferred()
        self._writable_waiters.append(d)
        return d

    # -- writing ------------------------------------------------------------------

    def write(self, line: bytes, /) -> bool:
        """Write one encoded message, as is (False, and logged, when not connected)."""
        if not self.connected or self.transport is None:
            self._log.debug(
                "{peer}: not connected, dropped {line!r}", peer=self.name, line=line[:80]
            )
            return False
        size = len(line)
        self._outgoing.written(size)
        if self._write_paused:
            self._written_while_paused += size + 1
        self._send_message(line)
        self._unflushed += size + 1
        if not self._receiving or self._unflushed >= FLUSH_WHILE_RECEIVING:
            self._flush()
        return True

    def _flush(self) -> None:
        """
        Ask the transport to write now, when it can (``flushNow``, offered by the
        transports of ``acpkit.io``).  Replies written while a read is being
        processed are flushed once, after the whole read: one write for a batch (or
        each :data:`FLUSH_WHILE_RECEIVING` bytes of it).
        """
        self._unflushed = 0
        flush = getattr(self.transport, "flushNow", None)
        if flush is not None:
            flush()

    def dataReceived(self, data: bytes) -> None:
        """Process a read; what the handlers wrote meanwhile is flushed once, at the end."""
        self._receiving += 1
        try:
            self._frame_data(data)
        finally:
            self._receiving -= 1
        if not self._receiving and self.transport is not None:
            self._flush()

    def request(
        self, method: str, params: Any = None, *, timeout: float | None = None
    ) -> Deferred[Any]:
        """
        Send a request; the Deferred fires with the raw ``result``.

        It fails with the peer's error as an :class:`RPCError` subclass, with
        :class:`RequestTimeout` after ``timeout`` seconds, with :class:`ConnectionLost`,
        or with ``TypeError``/``ValueError`` when ``params`` is not JSON.
        ``d.cancel()`` sends ``$/cancel_request`` and fails ``d`` with
        ``CancelledError`` at once.
        """
        if not self.connected or self.transport is None:
            if self._closed_reason is not None:
                return fail(ConnectionLost.because(self._closed_reason.value))
            return fail(ConnectionLost("not connected"))
        if self._eof:
            return fail(ConnectionLost("the peer closed its output; no answer can come"))
        request_id = self._outgoing.next_id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        try:
            line = encode_message(message)
        except (TypeError, ValueError) as e:
            return fail(e)
        if len(line) > self.framing.MAX_LENGTH:
            return fail(self._too_long_to_send(f"the {method} request", len(line)))

        def canceller(_: Deferred[Any]) -> None:
            self._give_up(request_id)

        d: Deferred[Any] = Deferred(canceller)
        _, outgoing = self._outgoing.add(method, d, len(line))
        if timeout is not None:
            outgoing.timer = self._clock.callLater(timeout, self._timed_out, request_id, timeout)
        self.write(line)
        return d

    def notify(self, method: str, params: Any = None) -> None:
        """
        Send a notification (dropped with a log line when not connected).

        Raises ``TypeError``/``ValueError`` at once when ``params`` is not JSON.  A
        notification whose line would be longer than our own ``MAX_LENGTH`` is not
        sent (logged): the peer would drop it too, and a stream of updates must not
        fail because one of them is too long.
        """
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        line = encode_message(message)
        if len(line) > self.framing.MAX_LENGTH:
            self._too_long_to_send(f"the {method} notification", len(line))
            return
        self.write(line)

    def _too_long_to_send(self, what: str, size: int) -> MessageTooLarge:
        """The error for a line of ours longer than our own limit (it is not sent)."""
        limit = self.framing.MAX_LENGTH
        self._log.warn(
            "{peer}: {what} was not sent: {size} bytes, over the {limit}-byte line limit",
            peer=self.name,
            what=clip(what, 120),
            size=size,
            limit=limit,
        )
        return MessageTooLarge(
            limit,
            f"Message too large: {clip(what, 120)} is {size} bytes, over the {limit}-byte "
            "line limit of this connection; it was not sent",
        )

    def fail_all_outgoing(self, reason: Exception) -> None:
        """Fail every pending outgoing request with ``reason``."""
        self._outgoing.fail_all(reason)

    def fail_outgoing(self, request_id: int, reason: Exception) -> bool:
        """
        Fail one pending outgoing request now with ``reason`` (a transport that knows
        what became of it, e.g. that it was never delivered); False when it is not
        pending (answered, given up, never sent).
        """
        if request_id not in self._outgoing:
            return False
        self._outgoing.fail(request_id, reason)
        return True

    def _give_up(self, request_id: int) -> None:
        """Our caller cancelled: tell the peer; the Deferred fails with CancelledError."""
        if self._outgoing.give_up(request_id) is None:
            return
        if self.connected and not self._eof:
            self.notify(self.cancellation.method, self.cancellation.cancel_params(request_id))

    def _timed_out(self, request_id: int, timeout: float) -> None:
        outgoing = self._outgoing.give_up(request_id)
        if outgoing is None:
            return
        self._log.warn(
            "{peer}: request {id} ({method}) timed out after {timeout} s",
            peer=self.name,
            id=request_id,
            method=outgoing.method,
            timeout=timeout,
        )
        if self.connected:
            self.notify(self.cancellation.method, self.cancellation.cancel_params(request_id))
        outgoing.deferred.errback(RequestTimeout(outgoing.method, request_id, timeout))

    def sendMessage(self, data: bytes, /) -> None:
        """
        Write one message through the framing (:class:`acpkit.framing.IMessageSender`),
        as is: no id, no size check (:meth:`request` and :meth:`notify` do those).
        """
        self._send_message(data)

    # -- reading: what the framing delivers (IFramedMessageReceiver) ----------------------

    def messageReceived(self, data: bytes) -> None:
        """One whole message from the framing: process it in wire order."""
        self._dispatch.receive(data)

    def messageLengthExceeded(self, head: bytes) -> None:
        """The head of an oversized message: process it in wire order."""
        self._dispatch.receive(head, True)

    def framingFailed(self, reason: str) -> None:
        """
        The framing cannot find another message (``Content-Length``: a malformed header
        block): answer -32700 with id ``null`` and ``reason``, then close.
        """
        self._log.error("{peer}: {reason}; closing", peer=self.name, reason=reason)
        self._reader.framing_failed(reason)
        self.close()

    def inputEnded(self) -> None:
        """The peer closed our input: finish in-flight work, then close."""
        self._eof = True
        self._dispatch.drain()

    # -- half-close (IHalfCloseableProtocol, called by the transport) ---------------------

    def readConnectionLost(self) -> None:
        """
        The peer closed our input: the framing delivers a last unterminated message,
        then calls :meth:`inputEnded` (while paused, once resumed).
        """
        self.framing.readConnectionLost()

    def writeConnectionLost(self) -> None:
        """The peer will read nothing more; nothing to do (``connectionLost`` follows)."""

    # -- the host of the dispatcher and of the reader (DispatchHost, ReaderHost) --------
    # What acpkit.jsonrpc.dispatch and acpkit.jsonrpc.receive call; not for applications.

    @property
    def log(self) -> Logger:
        """This engine's logger (its pieces log through it)."""
        return self._log

    @property
    def written_while_paused(self) -> int:
        """Bytes written since the transport paused us (0 while it does not)."""
        return self._written_while_paused

    def process_message(self, data: bytes, /) -> None:
        """Process one whole message now: its turn in wire order has come."""
        self._reader.process_message(data)

    def process_oversized(self, head: bytes, /) -> None:
        """Process the head of an oversized message now: its turn has come."""
        self._reader.process_oversized(head)

    def output_over_budget(self) -> bool:
        """True while the peer is not reading and we wrote ``max_buffered_output`` since."""
        return self._write_paused and self._written_while_paused >= self.max_buffered_output

    def update_reading(self) -> None:
        """
        Pause reading while a notification handler holds the stream, resume it after.
        Only a held notification handler stops reading; write pressure never does.
        """
        want = self._dispatch.held is not None
        if want == self._reading_paused or not self.connected or self.transport is None:
            return
        if getattr(self.transport, "disconnecting", False):
            return
        self._reading_paused = want
        toggle = getattr(self.transport, "pauseProducing" if want else "resumeProducing", None)
        if toggle is not None:
            toggle()

    def check_finished(self) -> None:
        """
        Once the input ended and every message read is processed: fail our pending
        requests (no answer can come), and close when every inbound request is answered.
        """
        if not self._eof or not self._dispatch.idle():
            return
        if not self._eof_handled:
            self._eof_handled = True
            if self._outgoing:
                self.fail_all_outgoing(
                    ConnectionLost("the peer closed its output before answering")
                )
        if self._dispatch.inbound or self._dispatch.queue or self._closing:
            return
        if self.connected and self.transport is not None:
            self._closing = True
            self.transport.loseConnection()

    def write_reply(self, request: InboundRequest, message: dict[str, Any], is_error: bool) -> bool:
        """
        Encode and write the answer to ``request``: -32603 if it is not JSON, -32600
        (too large) if it is longer than ``MAX_LENGTH``.  False if not connected.
        """
        try:
            line = encode_message(message)
        except (TypeError, ValueError) as e:
            self._log.error(
                "{peer}: reply to {method} (id {id}) is not JSON: {e}",
                peer=self.name,
                method=request.method,
                id=request.id,
                e=e,
            )
            line = encode_message(error_message(request.id, InternalError()))
        if len(line) > self.framing.MAX_LENGTH:
            what = f"the {'error' if is_error else 'result'} of {request.method}"
            too_large = self._too_long_to_send(f"{what} (id {request.id!r})", len(line))
            line = encode_message(error_message(request.id, too_large))
        return self.write(line)
