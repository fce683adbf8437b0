"""
The inbound side of a JSON-RPC connection: requests from the peer, from arrival to answer.

:class:`InboundDispatcher` processes inbound messages strictly in wire order (a
notification handler that returns an unfired ``Deferred`` holds every later message in
a backlog until it fires; the engine pauses reading meanwhile), keeps the requests in
progress by id, runs at most
``max_concurrent_requests`` handlers at once, queues the next ones in FIFO order (at
most ``max_queued_requests``; the engine refuses beyond), cancels queued and running
requests, and answers each request exactly once:

==========================================  =========================================
the handler                                 the answer
==========================================  =========================================
returns a value (or its Deferred/coroutine  that value as the ``result``
fires with one)
raises / fails with an :class:`RPCError`    that error
raises / fails with anything else           -32603 ``Internal error`` (logged)
ends with ``CancelledError`` (cancelled)    the method's ``cancelled_result``, else
                                            the policy's error (-32800), else nothing
                                            (MCP)
==========================================  =========================================

A queued request that is cancelled is answered at once and never started.  The
dispatcher writes nothing itself: it hands each answer to its host (the engine,
:class:`acpkit.jsonrpc.JSONRPCEngine`), which encodes, bounds and writes it, and tells
the host when the connection may have become idle (``_check_eof``).
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Callable, Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

import attrs
from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.python.failure import Failure

from acpkit.asyncio_support import coroutine_deferred
from acpkit.errors import InternalError, RPCError
from acpkit.rpc_classify import RequestId

if TYPE_CHECKING:
    from acpkit.jsonrpc import JSONRPCEngine

__all__ = ["InboundDispatcher", "InboundRequest"]

CancelledResult = Callable[["InboundRequest"], Any]


class _Owner(Protocol):
    """Who answers a request cancelled before it started (the engine, or a dispatcher)."""

    def _answer_cancelled(self, request: InboundRequest) -> None: ...


def _as_deferred(value: Any) -> Deferred[Any]:
    """A handler's return value as a Deferred (coroutines are wrapped)."""
    if isinstance(value, Deferred):
        return value
    if inspect.iscoroutine(value):
        return coroutine_deferred(value)  # an asyncio task on the asyncio reactor
    return succeed(value)


def _call_handler(fn: Callable[..., Any], *args: Any) -> Deferred[Any]:
    try:
        return _as_deferred(fn(*args))
    except BaseException:
        return fail()


class _State(Enum):
    NEW = "new"
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"


@attrs.define(eq=False)
class InboundRequest:
    """
    A request from the peer, from arrival until it is answered.

    ``params`` is exactly what was received (a dict, or ``None`` when absent, for
    methods registered with ``params_optional``); ``_meta`` stays inside it and is also
    handed separately as ``meta`` (``None`` when absent or not an object).
    """

    id: RequestId
    method: str
    params: Any
    meta: Mapping[str, Any] | None
    #: True once the request is answered (or abandoned because the connection was lost).
    answered: bool = False
    _protocol: _Owner | None = attrs.field(default=None, repr=False, alias="protocol")
    _state: _State = attrs.field(default=_State.NEW, init=False)
    _deferred: Deferred[Any] | None = attrs.field(default=None, init=False, repr=False)
    _after: list[Callable[[], None]] = attrs.field(factory=list, init=False, repr=False)
    _cancelled_result: CancelledResult | None = attrs.field(default=None, init=False, repr=False)
    #: True once cancel() was called.
    cancel_requested: bool = attrs.field(default=False, init=False)

    def cancel(self) -> None:
        """
        Cancel the request whether it is queued (answered at once, never started) or
        running (its handler's Deferred is cancelled).  No effect once answered.
        """
        if self.answered or self._state is _State.DONE:
            return
        self.cancel_requested = True
        if self._state is _State.RUNNING:
            if self._deferred is not None:
                self._deferred.cancel()
            return
        if self._protocol is not None:
            self._protocol._answer_cancelled(self)

    def after_reply(self, fn: Callable[[], None]) -> None:
        """
        Run ``fn`` right after the reply is written (at once if it already was).

        Not run when the reply could not be written because the connection was lost.
        """
        if self.answered:
            fn()
        else:
            self._after.append(fn)


class InboundDispatcher:
    """Inbound messages of one connection: wire order, request slots, queue, cancellation."""

    def __init__(self, host: JSONRPCEngine) -> None:
        self._host = host
        #: Requests in progress (queued or running) by id.
        self.inbound: dict[RequestId, InboundRequest] = {}
        #: Requests waiting for a handler slot, in arrival order.
        self.queue: deque[InboundRequest] = deque()
        #: How many handlers are running.
        self.running = 0
        self._pumping = False
        #: Messages not processed yet, in wire order: (bytes, True for an oversized head).
        self.backlog: deque[tuple[bytes, bool]] = deque()
        self._draining = False
        #: The unfired Deferred of a notification handler holding the stream, or None.
        self.held: Deferred[Any] | None = None

    # -- wire order ------------------------------------------------------------------

    def drain(self) -> None:
        """Process the backlog in order until it is empty or a handler holds the stream."""
        if self._draining:
            return
        self._draining = True
        host = self._host
        backlog = self.backlog
        try:
            while backlog and self.held is None:
                data, oversized = backlog.popleft()
                if oversized:
                    host._process_oversized(data)
                else:
                    host._process_line(data)
        finally:
            self._draining = False
        host._update_reading()
        host._check_eof()

    def hold(self, d: Deferred[Any], method: str) -> None:
        """A notification handler returned ``d``: later messages wait until it fires."""
        self.held = d
        host = self._host
        host._update_reading()

        def release(result: object) -> None:
            if isinstance(result, Failure) and not isinstance(result.value, CancelledError):
                host._log.failure(
                    "{peer}: notification handler for {method} failed",
                    result,
                    peer=host.name,
                    method=method,
                )
            if self.held is d:
                self.held = None
                self.drain()

        d.addBoth(release)

    def idle(self) -> bool:
        """True when nothing waits in the backlog and no handler holds the stream."""
        return not self.backlog and self.held is None

    def drop_backlog(self) -> int:
        """The connection is gone: drop unprocessed messages, cancel a holding handler."""
        dropped = len(self.backlog)
        self.backlog.clear()
        held, self.held = self.held, None
        if held is not None:
            held.cancel()
        return dropped

    # -- requests ----------------------------------------------------------------------

    def _answer_cancelled(self, request: InboundRequest) -> None:
        """What :meth:`InboundRequest.cancel` calls for a request not running yet."""
        self.answer_cancelled(request)

    def is_full(self) -> bool:
        """True when a new request could neither start nor wait in the queue."""
        host = self._host
        return (self.running >= host.max_concurrent_requests or host._output_over_budget()) and (
            len(self.queue) >= host.max_queued_requests
        )

    def accept(self, request: InboundRequest) -> None:
        """Take an accepted request: track it by id, queue it, start it when a slot is free."""
        self.inbound[request.id] = request
        callback = self._host.on_request_received
        if callback is not None:
            try:
                callback(request)
            except Exception:
                self._host._log.failure("{peer}: on_request_received failed", peer=self._host.name)
        if request.answered:
            return
        request._state = _State.QUEUED
        self.queue.append(request)
        self.pump()

    def abandon_all(self) -> None:
        """
        The connection is gone: drop queued requests (never started, no reply) and
        cancel running ones (the host, disconnected, drops their replies).
        """
        for request in list(self.queue):
            self.finish(request)
        self.queue.clear()
        for request in list(self.inbound.values()):
            request.cancel()
            if not request.answered:
                self.finish(request)

    def pump(self) -> None:
        if self._pumping:
            return
        self._pumping = True
        try:
            while (
                self.queue
                and self.running < self._host.max_concurrent_requests
                and not self._host._output_over_budget()
            ):
                self._start(self.queue.popleft())
        finally:
            self._pumping = False

    def _start(self, request: InboundRequest) -> None:
        registration = self._host.registry.request_method(request.method)
        assert registration is not None
        request._state = _State.RUNNING
        self.running += 1
        try:
            result = registration.handler(request)
        except BaseException:
            self._handler_done(Failure(), request)
            return
        if not isinstance(result, Deferred) and not inspect.iscoroutine(result):
            # A synchronous handler: answer now, no Deferred needed.
            self._handler_done(result, request)
            return
        d = _as_deferred(result)
        request._deferred = d
        d.addBoth(self._handler_done, request)
        if request.cancel_requested and not request.answered:
            # The handler cancelled its own request while it was starting.
            d.cancel()

    def _handler_done(self, result: object, request: InboundRequest) -> None:
        if request.answered:
            return
        if not isinstance(result, Failure):
            self.answer(request, result=result)
        elif isinstance(result.value, CancelledError):
            self.answer_cancelled(request)
        elif isinstance(result.value, RPCError):
            self.answer(request, error=result.value)
        else:
            self._host._log.failure(
                "{peer}: handler for {method} (id {id}) failed",
                result,
                peer=self._host.name,
                method=request.method,
                id=request.id,
            )
            self.answer(request, error=InternalError())

    def answer_cancelled(self, request: InboundRequest) -> None:
        """
        Answer a cancelled request: its ``cancelled_result`` or the policy's error
        (-32800); not at all when the policy says cancelled requests are not answered.
        """
        cancelled = self._host.cancellation.cancelled_error()
        if cancelled is None:
            self.finish(request)
            self.pump()
            self._host._check_eof()
            return
        make = request._cancelled_result
        if make is None:
            self.answer(request, error=cancelled)
            return
        try:
            value = make(request)
        except RPCError as e:
            self.answer(request, error=e)
        except Exception:
            self._host._log.failure(
                "{peer}: cancelled_result for {method} failed",
                peer=self._host.name,
                method=request.method,
            )
            self.answer(request, error=cancelled)
        else:
            self.answer(request, result=value)

    def answer(
        self, request: InboundRequest, *, result: Any = None, error: RPCError | None = None
    ) -> None:
        if request.answered:
            return
        # (dict literals: this runs once per request)
        if error is not None:
            message = {"jsonrpc": "2.0", "id": request.id, "error": error.to_json()}
        else:
            message = {"jsonrpc": "2.0", "id": request.id, "result": result}
        written = self._host._write_reply(request, message, error is not None)
        self.finish(request)
        if written:
            after, request._after = request._after, []
            for fn in after:
                try:
                    fn()
                except Exception:
                    self._host._log.failure(
                        "{peer}: after_reply callback failed", peer=self._host.name
                    )
        self.pump()
        self._host._check_eof()

    def finish(self, request: InboundRequest) -> None:
        """Mark ``request`` answered and free its slot (no reply written here)."""
        if request.answered:
            return
        request.answered = True
        if request._state is _State.RUNNING:
            self.running -= 1
        elif request._state is _State.QUEUED:
            try:
                self.queue.remove(request)
            except ValueError:
                pass
        request._state = _State.DONE
        if self.inbound.get(request.id) is request:
            del self.inbound[request.id]
            if not self.inbound:
                self._host._requests_settled()
