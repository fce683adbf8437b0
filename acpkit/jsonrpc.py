"""
The JSON-RPC 2.0 engine, untyped: params and results are JSON builtins.

:class:`JSONRPCEngine` takes whole messages from a framing and classifies each once by
its keys (:mod:`acpkit.rpc_classify`: ``id`` + ``method``: request; ``id`` + ``result``
xor ``error``: response; ``method`` alone: notification), correlates our outgoing
requests with their responses (:mod:`acpkit.rpc_outgoing`), dispatches inbound requests
and notifications to a :class:`MethodRegistry`, and cancels both ways with its
dialect's notification (:mod:`acpkit.rpc_cancel`).

The engine is the Twisted protocol connected to the transport, and it holds its framing
(:class:`acpkit.framing.IFraming`, in ``framing``) instead of inheriting one: it hands
the framing every read, the framing calls it back with whole messages
(:class:`acpkit.framing.IFramedMessageReceiver`), and it writes each message with the
framing's ``sendMessage`` (:class:`acpkit.framing.IMessageSender`).  So one engine class
runs over any framing, one with no byte stream included (see :class:`JSONRPCEngine`).
:class:`JSONRPCProtocol` is the engine holding an :class:`acpkit.framing.NDJSONProtocol`
with ACP's ``$/cancel_request``; :class:`acpkit.rpc_content_length.ContentLengthJSONRPCProtocol`
the engine holding a ``Content-Length`` framing with LSP's ``$/cancelRequest``.  Below,
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
- a message nested deeper than :data:`~acpkit.jsonbytes.MAX_NESTING_DEPTH` (254) arrays
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

A message nested deeper than :data:`~acpkit.jsonbytes.MAX_NESTING_DEPTH` (254 levels of
arrays and objects; any depth, 100,000 included) is not parsed past its first top-level
member that is (:class:`acpkit.rpc_classify.TooDeep`); the members read before it (the
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
:meth:`request` fails and :meth:`notify` raises :class:`~acpkit.jsonbytes.NestingTooDeep`
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

import json
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Never

import attrs
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
    InvalidParams,
    InvalidRequest,
    MessageTooLarge,
    MethodNotFound,
    ParseError,
    RequestTimeout,
    RPCError,
    clip,
)
from acpkit.framing import (
    IFramedMessageReceiver,
    IFraming,
    IMessageSender,
    ITraced,
    LineTracer,
    NDJSONProtocol,
)
from acpkit.rpc_cancel import ACP_CANCELLATION, ICancellationPolicy
from acpkit.rpc_classify import (
    HugeInt,
    Invalid,
    Notification,
    Request,
    RequestId,
    Response,
    TooDeep,
    Unparsable,
    classify,
    decode_message,
    encode_message,
    error_message,
    is_valid_id,
)
from acpkit.rpc_dispatch import InboundDispatcher, InboundRequest, _as_deferred
from acpkit.rpc_outgoing import OutgoingRequest, OutgoingRequests

__all__ = [
    "CANCEL_REQUEST",
    "DEFAULT_MAX_BUFFERED_OUTPUT",
    "InboundRequest",
    "JSONRPCEngine",
    "JSONRPCProtocol",
    "MethodRegistry",
    "RequestId",
    "encode_message",
]

#: The ACP notification that cancels a request (:data:`acpkit.rpc_cancel.ACP_CANCELLATION`).
CANCEL_REQUEST = ACP_CANCELLATION.method

#: How many bytes of the first junk line (not a JSON object) are kept for diagnostics.
JUNK_LINE_KEPT = 1024

#: Default for ``max_buffered_output``: how many bytes we write while the peer is not
#: reading our output before new inbound requests stop being started (Back-pressure).
DEFAULT_MAX_BUFFERED_OUTPUT = 16 * 1024 * 1024

RequestHandler = Callable[["InboundRequest"], Any]
NotificationHandler = Callable[[Any, "Mapping[str, Any] | None"], Any]
CancelledResult = Callable[["InboundRequest"], Any]


_valid_id = is_valid_id
_HugeInt = HugeInt


@attrs.define
class _RequestMethod:
    handler: RequestHandler
    cancelled_result: CancelledResult | None
    params_optional: bool


@attrs.define
class _NotificationMethod:
    handler: NotificationHandler
    params_optional: bool


class MethodRegistry:
    """
    The methods one side handles.  Extension methods (``_vendor/...``) are registered
    the same way as ACP methods.
    """

    def __init__(self) -> None:
        self._requests: dict[str, _RequestMethod] = {}
        self._notifications: dict[str, _NotificationMethod] = {}

    def add_request(
        self,
        method: str,
        handler: RequestHandler,
        *,
        cancelled_result: CancelledResult | None = None,
        params_optional: bool = False,
    ) -> None:
        """
        Handle requests for ``method`` with ``handler(request)``.

        The handler returns a value, a Deferred or a coroutine; it raises (or fails
        with) an :class:`RPCError` to answer with that error.  ``cancelled_result``:
        when the request is cancelled (queued, or running and the handler ended with
        ``CancelledError``) answer with ``cancelled_result(request)`` as the RESULT
        instead of -32800.  ``params_optional``: accept a request without params
        (``request.params is None``) instead of answering -32602.
        """
        self._requests[method] = _RequestMethod(handler, cancelled_result, params_optional)

    def add_notification(
        self, method: str, handler: NotificationHandler, *, params_optional: bool = False
    ) -> None:
        """
        Handle notifications for ``method`` with ``handler(params, meta)``.

        A returned unfired Deferred (or unfinished coroutine) holds the processing of
        later messages until it fires.  Notifications without an object ``params`` are
        dropped (logged) unless ``params_optional``.
        """
        self._notifications[method] = _NotificationMethod(handler, params_optional)

    def request_method(self, method: str) -> _RequestMethod | None:
        """The registration for request ``method``, if any."""
        return self._requests.get(method)

    def notification_method(self, method: str) -> _NotificationMethod | None:
        """The registration for notification ``method``, if any."""
        return self._notifications.get(method)

    def request_methods(self) -> frozenset[str]:
        """Names of the registered request methods."""
        return frozenset(self._requests)

    def notification_methods(self) -> frozenset[str]:
        """Names of the registered notification methods."""
        return frozenset(self._notifications)


@attrs.define
class _Head:
    """What the first bytes of an oversized line show of its top-level object."""

    #: The top-level keys seen, in order, including the one whose value was cut off.
    keys: list[str] = attrs.Factory(list)
    #: The top-level values read whole (a value cut off by the head is absent).
    values: dict[str, object] = attrs.Factory(dict)

    def request_id(self) -> RequestId | None:
        """The id of a request (``method`` and a whole, valid ``id`` seen), else None."""
        request_id = self.values.get("id")
        if "method" in self.keys and _valid_id(request_id):
            return request_id  # type: ignore[return-value]
        return None

    def method(self) -> str | None:
        """The ``method`` when it was read whole, else None."""
        method = self.values.get("method")
        return method if isinstance(method, str) else None

    def kind(self) -> str:
        """request, notification (as far as the head shows), response, or unknown."""
        if "method" in self.keys:
            return "request" if "id" in self.keys else "notification"
        if "result" in self.keys or "error" in self.keys:
            return "response"
        return "unknown"


def _scan_head(head: bytes) -> _Head:
    """
    Read the top-level keys and values at the start of a truncated JSON object.

    Values are decoded only when they are complete within ``head``; a long value (the
    params that made the line too long) stops the scan, so keys after it are not seen.
    """
    text = head.decode("utf-8", errors="replace")
    decoder = json.JSONDecoder()
    found = _Head()
    pos = 0
    n = len(text)

    def skip(p: int) -> int:
        while p < n and text[p] in " \t\r\n":
            p += 1
        return p

    pos = skip(pos)
    if pos >= n or text[pos] != "{":
        return found
    pos += 1
    while True:
        pos = skip(pos)
        if pos >= n or text[pos] != '"':
            return found
        try:
            key, pos = decoder.raw_decode(text, pos)
        except ValueError:
            return found
        pos = skip(pos)
        if pos >= n or text[pos] != ":":
            return found
        found.keys.append(key)
        pos = skip(pos + 1)
        try:
            value, pos = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            return found
        found.values[key] = value
        pos = skip(pos)
        if pos >= n or text[pos] != ",":
            return found
        pos += 1


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
    (NDJSON, ACP) and :class:`acpkit.rpc_content_length.ContentLengthJSONRPCProtocol`
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
    dialect's way to cancel requests (:mod:`acpkit.rpc_cancel`; default: the class's);
    ``framing`` is an unconnected framing without a receiver (default: the class's
    :meth:`make_framing`); ``max_line_length`` sets its ``MAX_LENGTH``.
    """

    _log = Logger()

    #: How requests are cancelled, both ways (a subclass sets its dialect's).
    cancellation: ICancellationPolicy

    #: Called with each accepted inbound request, in wire order, before it may wait
    #: for a slot (not called for requests answered with an error at once).
    on_request_received: Callable[[InboundRequest], None] | None = None

    #: How deep we are in ``dataReceived`` (writes made meanwhile are flushed after it).
    _receiving = 0

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
            raise ValueError("a cancellation policy is needed (see acpkit.rpc_cancel)")
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
        # inbound
        self._dispatch = InboundDispatcher(self)
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
        self._oversized_dropped = 0
        self._undecodable_dropped = 0
        #: How many incoming messages were not UTF-8 and were read with each invalid
        #: byte replaced by U+FFFD (only with :attr:`replace_invalid_utf8`).
        self.invalid_utf8_replaced = 0
        #: How many incoming lines were not a JSON object at all (not UTF-8, not JSON,
        #: or another JSON value): junk such as a banner or a print on the peer's stdout.
        self.junk_lines = 0
        #: The first of those lines as received (its first ``JUNK_LINE_KEPT`` bytes), or
        #: None: a client shows it in the errors it reports without ``-v``.
        self.first_junk_line: bytes | None = None

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

    def _requests_settled(self) -> None:
        """The dispatcher answered (or dropped) its last request in progress."""
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
        return self._undecodable_dropped

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
        return self._oversized_dropped

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
        self._update_reading()
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

    def _output_over_budget(self) -> bool:
        """True while the peer is not reading and we wrote ``max_buffered_output`` since."""
        return self._write_paused and self._written_while_paused >= self.max_buffered_output

    def _update_reading(self) -> None:
        # Only a held notification handler stops reading; write pressure never does.
        want = self._dispatch.held is not None
        if want == self._reading_paused or not self.connected or self.transport is None:
            return
        if getattr(self.transport, "disconnecting", False):
            return
        self._reading_paused = want
        toggle = getattr(self.transport, "pauseProducing" if want else "resumeProducing", None)
        if toggle is not None:
            toggle()

    # -- writing ------------------------------------------------------------------

    def _write(self, line: bytes) -> bool:
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
        if not self._receiving:
            self._flush()
        return True

    def _flush(self) -> None:
        """
        Ask the transport to write now, when it can (``flushNow``, offered by the
        transports of ``acpkit.endpoints``).  Replies written while a read is being
        processed are flushed once, after the whole read: one write for a batch.
        """
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
        self._write(line)
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
        self._write(line)

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
        """One whole message from the framing: queue it for in-order processing."""
        dispatch = self._dispatch
        dispatch.backlog.append((data, False))
        dispatch.drain()

    def messageLengthExceeded(self, head: bytes) -> None:
        """The head of an oversized message: queue it for in-order processing."""
        dispatch = self._dispatch
        dispatch.backlog.append((head, True))
        dispatch.drain()

    def framingFailed(self, reason: str) -> None:
        """
        The framing cannot find another message (``Content-Length``: a malformed header
        block): answer -32700 with id ``null`` and ``reason``, then close.
        """
        self._log.error("{peer}: {reason}; closing", peer=self.name, reason=reason)
        self._undecodable_dropped += 1
        self._send_error(None, ParseError(reason))
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

    def _check_eof(self) -> None:
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

    # -- reading: classification ----------------------------------------------------------

    def _process_line(self, line: bytes) -> None:
        decoded = decode_message(line)
        if decoded is None:
            return
        if type(decoded) is Unparsable and decoded.not_utf8 and self.replace_invalid_utf8:
            repaired = decode_message(line.decode("utf-8", "replace").encode("utf-8"))
            if repaired is not None and type(repaired) is not Unparsable:
                self.invalid_utf8_replaced += 1
                self._log.warn(
                    "{peer}: {detail}: read with replacement characters (U+FFFD)",
                    peer=self.name,
                    detail=decoded.detail,
                )
                decoded = repaired
        if type(decoded) is not tuple:
            if type(decoded) is TooDeep:
                self._process_too_deep(decoded)
                return
            assert type(decoded) is Unparsable
            self._log.warn("{peer}: {detail}", peer=self.name, detail=decoded.detail)
            self._junk(line[3:] if line.startswith(b"\xef\xbb\xbf") else line)
            self._undecodable_dropped += 1
            self._send_error(None, ParseError(decoded.error))
            return
        obj, huge = decoded
        if huge and isinstance(obj, dict) and self._refuse_huge_ints(obj, huge):
            return
        event = classify(obj)
        kind = type(event)
        if kind is Notification:
            self._process_notification(event)  # type: ignore[arg-type]
        elif kind is Request:
            self._process_request(event)  # type: ignore[arg-type]
        elif kind is Response:
            self._process_response(event)  # type: ignore[arg-type]
        else:
            self._process_invalid(event, line)  # type: ignore[arg-type]

    def _process_invalid(self, event: Invalid, line: bytes) -> None:
        if event.kind == "notification":
            self._log.warn(
                "{peer}: invalid notification dropped: {obj}",
                peer=self.name,
                obj=clip(repr(event.value), 200),
            )
            self._undecodable_dropped += 1
            return
        if event.kind != "response":
            if event.junk:
                self._junk(line[3:] if line.startswith(b"\xef\xbb\xbf") else line)
            self._invalid(event.answer_id, event.reason, event.value)
            return
        outgoing, request_id = self._match(event.response_id)
        self._invalid(None, event.reason, event.value)
        if outgoing is not None:
            self._outgoing.fail(request_id, InvalidRequest(event.reason))

    def _process_too_deep(self, deep: TooDeep) -> None:
        """A message nested deeper than the limit (see Messages nested too deep): answer from what
        its envelope shows."""
        self._undecodable_dropped += 1
        members = deep.members
        event = classify(members) if members is not None else None
        reason = deep.reason
        if (
            type(event) is Request
            and deep.member is not None
            and event.id not in self._dispatch.inbound
        ):
            method = event.method
            self._log.warn(
                "{peer}: request {method} (id {id}) refused: {reason}",
                peer=self.name,
                method=clip(method, 80),
                id=clip(repr(event.id), 80),
                reason=reason,
            )
            error: RPCError
            if self.registry.request_method(method) is None:
                error = MethodNotFound(method)
            elif deep.member == "params":
                error = InvalidParams("$.params", reason)
            else:
                error = InvalidRequest(reason)
            self._send_error(event.id, error)
            return
        if members is not None and deep.is_response():
            self._log.warn("{peer}: malformed response ({reason})", peer=self.name, reason=reason)
            problem = f"malformed response: {reason}"
            self._send_error(None, InvalidRequest(problem))
            if "id" in members:
                outgoing, number = self._match(members["id"])
                if outgoing is not None:
                    self._outgoing.fail(number, InvalidRequest(problem))
            return
        self._log.warn(
            "{peer}: message not parsed: {reason} (top-level members read: {keys})",
            peer=self.name,
            reason=reason,
            keys=clip(", ".join(members or ()), 200) or "none",
        )
        self._send_error(None, ParseError(reason))

    def _junk(self, line: bytes) -> None:
        """Count a line that is not a JSON object; keep the first one."""
        self.junk_lines += 1
        if self.first_junk_line is None:
            self.first_junk_line = line[:JUNK_LINE_KEPT]

    def _refuse_huge_ints(self, obj: dict[str, Any], huge: list[_HugeInt]) -> bool:
        """
        Answer a message holding integers too long to represent; False: process it as
        usual (it is invalid for another reason anyway).
        """
        request_id = obj.get("id")
        if isinstance(request_id, _HugeInt):
            self._invalid(
                None,
                f"the id is an integer of {request_id.digits} digits, too long to be "
                "echoed exactly; use a string or a shorter integer",
                obj,
            )
            return True
        digits = max(h.digits for h in huge)
        reason = f"an integer of {digits} digits is too long for this peer"
        if "method" in obj:
            if "id" not in obj:
                self._log.warn(
                    "{peer}: notification dropped: {reason}", peer=self.name, reason=reason
                )
                return True
            if not _valid_id(request_id) or obj.get("jsonrpc") != "2.0":
                return False
            if not isinstance(obj["method"], str) or request_id in self._dispatch.inbound:
                return False
            if self.registry.request_method(obj["method"]) is None:
                return False
            self._send_error(request_id, InvalidParams("$.params", reason))
            return True
        if "result" in obj or "error" in obj:
            outgoing, number = self._match(request_id)
            self._invalid(None, f"malformed response: {reason}", obj)
            if outgoing is not None:
                self._outgoing.fail(number, InvalidRequest(f"malformed response: {reason}"))
            return True
        return False

    def _invalid(self, request_id: RequestId | None, reason: str, obj: object) -> None:
        self._undecodable_dropped += 1
        self._log.warn(
            "{peer}: invalid message ({reason}): {obj}",
            peer=self.name,
            reason=reason,
            obj=clip(repr(obj), 200),
        )
        self._send_error(request_id, InvalidRequest(reason))

    def _send_error(self, request_id: RequestId | None, error: RPCError) -> None:
        self._write(encode_message({"jsonrpc": "2.0", "id": request_id, "error": error.to_json()}))

    def _process_request(self, event: Request) -> None:
        request_id = event.id
        method = event.method
        dispatch = self._dispatch
        if request_id in dispatch.inbound:
            self._invalid(request_id, "this id belongs to a request still in progress", event.value)
            return
        registration = self.registry.request_method(method)
        if registration is None:
            self._log.info(
                "{peer}: unknown method {method}", peer=self.name, method=clip(method, 80)
            )
            self._send_error(request_id, MethodNotFound(method))
            return
        params = event.params
        if not isinstance(params, dict) and not (params is None and registration.params_optional):
            self._send_error(request_id, InvalidParams("$.params", "must be an object"))
            return
        meta = params.get("_meta") if isinstance(params, dict) else None
        request = InboundRequest(
            request_id,
            method,
            params,
            meta if isinstance(meta, dict) else None,
            protocol=self,
        )
        request._cancelled_result = registration.cancelled_result
        if dispatch.is_full():
            self._log.warn(
                "{peer}: refused {method} (id {id}): {running} running, {queued} queued, "
                "{buffered} bytes written since the peer stopped reading",
                peer=self.name,
                method=method,
                id=request_id,
                running=dispatch.running,
                queued=len(dispatch.queue),
                buffered=self._written_while_paused,
            )
            self._send_error(request_id, InternalError("too many concurrent requests"))
            return
        dispatch.accept(request)

    def _process_notification(self, event: Notification) -> None:
        method = event.method
        params = event.params
        if method == self.cancellation.method:
            self._cancel_inbound(params)
            return
        registration = self.registry.notification_method(method)
        if registration is None:
            self._log.debug(
                "{peer}: unknown notification {method} ignored",
                peer=self.name,
                method=clip(method, 80),
            )
            return
        if not isinstance(params, dict) and not (params is None and registration.params_optional):
            self._log.warn(
                "{peer}: notification {method} dropped: params must be an object",
                peer=self.name,
                method=method,
            )
            self._undecodable_dropped += 1
            return
        meta = params.get("_meta") if isinstance(params, dict) else None
        try:
            result = registration.handler(params, meta if isinstance(meta, dict) else None)
        except Exception:
            self._log.failure(
                "{peer}: notification handler for {method} failed", peer=self.name, method=method
            )
            return
        if result is None:  # the common case: a synchronous handler, nothing to wait for
            return
        d = _as_deferred(result)
        if d.called:
            d.addErrback(
                lambda f: self._log.failure(
                    "{peer}: notification handler for {method} failed",
                    f,
                    peer=self.name,
                    method=method,
                )
            )
        else:
            self._dispatch.hold(d, method)

    def _cancel_inbound(self, params: object) -> None:
        policy = self.cancellation
        request_id = policy.request_id(params)
        if request_id is None:
            self._log.warn(
                "{peer}: {method} without a valid request id ignored",
                peer=self.name,
                method=policy.method,
            )
            return
        request = self._dispatch.inbound.get(request_id)
        if request is None:
            self._log.debug(
                "{peer}: {method} for unknown or answered id {id} ignored",
                peer=self.name,
                method=policy.method,
                id=request_id,
            )
            return
        request.cancel()

    def _process_response(self, event: Response) -> None:
        response_id = event.id
        error = event.error
        if response_id is None:
            assert error is not None
            self._null_id_error(error)
            return
        outgoing, request_id = self._match(response_id)
        if outgoing is None:
            if self._outgoing.was_given_up(response_id):
                self._log.debug(
                    "{peer}: late response to given-up request {id} dropped",
                    peer=self.name,
                    id=response_id,
                )
            else:
                self._log.warn(
                    "{peer}: response to unknown id {id} dropped",
                    peer=self.name,
                    id=clip(repr(response_id), 80),
                )
            return
        self._outgoing.pop(request_id)
        if error is not None:
            outgoing.deferred.errback(RPCError.from_json(error))
        else:
            outgoing.deferred.callback(event.result)

    def _match(self, response_id: object) -> tuple[OutgoingRequest | None, int]:
        outgoing, number, from_string = self._outgoing.match(response_id)
        if from_string:
            self._log.warn(
                "{peer}: response id {id!r} is a string; accepted for request {number}",
                peer=self.name,
                id=response_id,
                number=number,
            )
        return outgoing, number

    def _null_id_error(self, error: dict[str, Any]) -> None:
        """
        The peer answered with id ``null``: it could not read one of our lines.

        Work out which of our pending requests it can only be about, and fail it now
        rather than let it wait for an answer that will never come:

        - -32600 with an integer ``data.limit`` (a line too long for the peer): every
          pending request whose line was longer than that limit.  The peer discards
          every such line, so each of them fails whichever line the error was about.
        - -32700 (the peer could not parse a line; our lines are valid JSON, so it cut
          a long one): the single pending request, if there is exactly one and its line
          is the longest we wrote since the previous error with id ``null`` (so it is
          at least as long as the line the error is about, whichever it was).
        - anything else: nothing is failed (logged only).
        """
        failed = self._outgoing.unreadable(error)
        if not failed:
            self._log.warn(
                "{peer}: the peer reported an error about a message it could not identify: {error}",
                peer=self.name,
                error=clip(repr(error), 300),
            )
            return
        for request_id, outgoing, reason in failed:
            self._log.warn(
                "{peer}: request {id} ({method}) failed: the peer could not read it: {error}",
                peer=self.name,
                id=request_id,
                method=outgoing.method,
                error=clip(repr(error), 300),
            )
            self._outgoing.give_up(request_id)
            outgoing.deferred.errback(reason)

    def _process_oversized(self, head: bytes) -> None:
        limit = self.framing.MAX_LENGTH
        self._oversized_dropped += 1
        found = _scan_head(head)
        kind = found.kind()
        request_id = found.request_id()
        method = found.method()
        self._log.warn(
            "{peer}: discarded an incoming {kind}{method}{id} longer than {limit} bytes "
            "({count} so far; starts {head!r})",
            peer=self.name,
            kind="line" if kind == "unknown" else kind,
            method="" if method is None else f" {clip(method, 80)}",
            id="" if request_id is None else f" (id {clip(repr(request_id), 80)})",
            limit=limit,
            count=self._oversized_dropped,
            head=head[:80],
        )
        if request_id is not None and request_id not in self._dispatch.inbound:
            # A request whose id we read: answer that id, so its sender stops waiting.
            self._send_error(request_id, MessageTooLarge(limit))
            return
        self._send_error(None, MessageTooLarge(limit))
        if kind != "response" or "id" not in found.values:
            return
        outgoing, number = self._match(found.values["id"])
        if outgoing is None:
            return
        self._outgoing.pop(number)
        outgoing.deferred.errback(
            MessageTooLarge(
                limit,
                f"the response to request {number} ({outgoing.method}) exceeded the "
                f"{limit}-byte message limit and was discarded",
            )
        )

    # -- inbound requests: slots, answers ---------------------------------------------------

    def _answer_cancelled(self, request: InboundRequest) -> None:
        """Answer a cancelled request (see :meth:`InboundDispatcher.answer_cancelled`)."""
        self._dispatch.answer_cancelled(request)

    def _write_reply(
        self, request: InboundRequest, message: dict[str, Any], is_error: bool
    ) -> bool:
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
        return self._write(line)


class JSONRPCProtocol(JSONRPCEngine):
    """
    JSON-RPC 2.0 for ACP: the engine holding a newline-delimited framing (one message per
    line, :class:`acpkit.framing.NDJSONProtocol`, in :attr:`framing`), cancelling with
    ``$/cancel_request`` (:data:`acpkit.rpc_cancel.ACP_CANCELLATION`).  Pass
    ``cancellation`` for another dialect over the same framing (MCP over stdio:
    ``MCP_CANCELLATION``).
    """

    cancellation = ACP_CANCELLATION

    def make_framing(self) -> NDJSONProtocol:
        """A new :class:`~acpkit.framing.NDJSONProtocol`."""
        return NDJSONProtocol()
