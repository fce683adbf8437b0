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
raises / fails with anything else           -32603 ``Internal error`` (logged; see
                                            :mod:`acpkit.jsonrpc.handler_errors`)
ends with ``CancelledError`` (cancelled)    the method's ``cancelled_result``, else
                                            the policy's error (-32800), else nothing
                                            (MCP)
==========================================  =========================================

A queued request that is cancelled is answered at once and never started.  The
dispatcher writes nothing itself: it hands each answer to its host, which encodes,
bounds and writes it, and tells the host when the connection may have become idle.  The
host is a :class:`DispatchHost`, the engine (:class:`acpkit.jsonrpc.JSONRPCEngine`) in
acpkit; the dispatcher knows it by that interface only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, Protocol

import attrs
from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from acpkit.errors import RPCError
from acpkit.jsonrpc.asyncio_bridge import is_async, settle_now
from acpkit.jsonrpc.cancel import ICancellationPolicy
from acpkit.jsonrpc.classify import RequestId
from acpkit.jsonrpc.handler_errors import (
    ASYNCIO_HINT,
    describe_exception,
    internal_error_for,
    is_asyncio_on_default_reactor,
)

__all__ = [
    "CancelledResult",
    "DispatchHost",
    "InboundDispatcher",
    "InboundRequest",
    "RequestHandler",
    "RequestOwner",
]

#: A request handler: called with the request, returns its result (a value, a Deferred,
#: a coroutine or another awaitable) or raises an :class:`~acpkit.errors.RPCError`.
RequestHandler = Callable[["InboundRequest"], Any]
#: The result a cancelled request answers with instead of the policy's error.
CancelledResult = Callable[["InboundRequest"], Any]


class RequestOwner(Protocol):
    """Who answers a request cancelled before it started (the dispatcher)."""

    def answer_cancelled(self, request: InboundRequest, /) -> None:
        """Answer ``request``, cancelled before its handler ran."""


class DispatchHost(Protocol):
    """
    What an :class:`InboundDispatcher` needs from the engine that feeds it, and nothing
    more: the engine (:class:`acpkit.jsonrpc.JSONRPCEngine`) provides it.
    """

    #: The peer's name, in log lines.
    name: str
    #: This side's role in log lines (``"agent"``, ``"client"``), or None.
    side: str | None
    #: Whether a handler's unexpected exception is described in the error's ``data``
    #: (None: the ``ACPKIT_DEBUG_ERRORS`` variable decides; see
    #: :mod:`acpkit.jsonrpc.handler_errors`).
    error_details: bool | None
    #: How many request handlers may run at once.
    max_concurrent_requests: int
    #: How many requests may wait for a handler slot.
    max_queued_requests: int
    #: Called with each accepted request before it may wait for a slot, or None.
    on_request_received: Callable[[InboundRequest], None] | None

    @property
    def log(self) -> Logger:
        """Where failures of handlers and callbacks are logged."""

    @property
    def cancellation(self) -> ICancellationPolicy:
        """The dialect's cancellation: whether and how a cancelled request is answered."""

    def process_message(self, data: bytes, /) -> None:
        """Process one whole message now (its turn in wire order has come)."""

    def process_oversized(self, head: bytes, /) -> None:
        """Process the head of an oversized message now (its turn has come)."""

    def update_reading(self) -> None:
        """Whether the stream is held may have changed: pause or resume reading."""

    def check_finished(self) -> None:
        """Work may have ended: close the connection if the input ended and all is done."""

    def output_over_budget(self) -> bool:
        """True while the peer does not read and what we wrote since is over budget."""

    def write_reply(
        self, request: InboundRequest, message: dict[str, Any], is_error: bool, /
    ) -> bool:
        """Encode and write the answer to ``request``; False when it could not be written."""

    def requests_settled(self) -> None:
        """The last request in progress was answered (or dropped): none is left."""


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
    handed separately as ``meta`` (``None`` when absent or not an object).  ``handler``
    is what the dispatcher runs for it, ``cancelled_result`` what answers it when it is
    cancelled (the registration's), ``protocol`` who answers it when it is cancelled
    before it started (its dispatcher).
    """

    id: RequestId
    method: str
    params: Any
    meta: Mapping[str, Any] | None
    #: True once the request is answered (or abandoned because the connection was lost).
    answered: bool = False
    _protocol: RequestOwner | None = attrs.field(default=None, repr=False, alias="protocol")
    _handler: RequestHandler | None = attrs.field(default=None, repr=False, alias="handler")
    _cancelled_result: CancelledResult | None = attrs.field(
        default=None, repr=False, alias="cancelled_result"
    )
    _state: _State = attrs.field(default=_State.NEW, init=False)
    _deferred: Deferred[Any] | None = attrs.field(default=None, init=False, repr=False)
    # The after-reply callbacks (None until the first: most requests have none).
    _after: list[Callable[[], None]] | None = attrs.field(default=None, init=False, repr=False)
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
            self._protocol.answer_cancelled(self)

    def after_reply(self, fn: Callable[[], None]) -> None:
        """
        Run ``fn`` right after the reply is written (at once if it already was).

        Not run when the reply could not be written because the connection was lost.
        """
        if self.answered:
            fn()
        elif self._after is None:
            self._after = [fn]
        else:
            self._after.append(fn)


class InboundDispatcher:
    """Inbound messages of one connection: wire order, request slots, queue, cancellation."""

    def __init__(self, host: DispatchHost) -> None:
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

    def receive(self, data: bytes, oversized: bool = False) -> None:
        """
        A message from the framing (``oversized``: the head of one too long): process it
        now when nothing waits before it, else after what does (:meth:`drain`).
        """
        if self._draining or self.backlog or self.held is not None:
            self.backlog.append((data, oversized))
            self.drain()
            return
        # Nothing before it: processed as drain would, without the trip through the backlog.
        host = self._host
        self._draining = True
        try:
            if oversized:
                host.process_oversized(data)
            else:
                host.process_message(data)
        finally:
            self._draining = False
        if self.backlog:  # (what arrived while it was processed, from an in-memory peer)
            self.drain()
            return
        host.update_reading()
        host.check_finished()

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
                    host.process_oversized(data)
                else:
                    host.process_message(data)
        finally:
            self._draining = False
        host.update_reading()
        host.check_finished()

    def hold(self, d: Deferred[Any], method: str) -> None:
        """A notification handler returned ``d``: later messages wait until it fires."""
        self.held = d
        host = self._host
        host.update_reading()

        def release(result: object) -> None:
            if isinstance(result, Failure) and not isinstance(result.value, CancelledError):
                host.log.failure(
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

    def is_full(self) -> bool:
        """True when a new request could neither start nor wait in the queue."""
        host = self._host
        # (the queue first: it is empty almost always, and the budget is a call)
        return len(self.queue) >= host.max_queued_requests and (
            self.running >= host.max_concurrent_requests or host.output_over_budget()
        )

    def accept(self, request: InboundRequest) -> None:
        """Take an accepted request: track it by id, queue it, start it when a slot is free."""
        self.inbound[request.id] = request
        callback = self._host.on_request_received
        if callback is not None:
            try:
                callback(request)
            except Exception:
                self._host.log.failure("{peer}: on_request_received failed", peer=self._host.name)
        if request.answered:
            return
        host = self._host
        if (
            self.queue
            or self._pumping
            or self.running >= host.max_concurrent_requests
            or host.output_over_budget()
        ):
            request._state = _State.QUEUED
            self.queue.append(request)
            self.pump()
            return
        # A free slot and nobody waiting: start it as pump() would, without the queue.
        self._pumping = True
        try:
            self._start(request)
        finally:
            self._pumping = False
        if self.queue:
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
                and not self._host.output_over_budget()
            ):
                self._start(self.queue.popleft())
        finally:
            self._pumping = False

    def _start(self, request: InboundRequest) -> None:
        handler = request._handler
        assert handler is not None, "a request is accepted with its handler"
        request._state = _State.RUNNING
        self.running += 1
        try:
            result = handler(request)
        except BaseException:
            self._handler_done(Failure(), request)
            return
        if type(result) is dict:
            # The common case (a typed connection's handler answers with the encoded
            # result): a plain value, answered now (answer() ignores an answered request).
            self.answer(request, result=result)
            return
        if not is_async(result):
            # A synchronous handler: answer now, no Deferred needed.
            self._handler_done(result, request)
            return
        finished, d = settle_now(result)
        if finished:
            # A coroutine that returned without waiting: answer now, no Deferred either.
            self._handler_done(d, request)
            return
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
            host = self._host
            error = result.value
            assert error is not None  # a Failure holds its exception
            hint = f" ({ASYNCIO_HINT})" if is_asyncio_on_default_reactor(error) else ""
            host.log.failure(
                "{side}: handler for {method} (id {id}, from the {peer}) raised {error}{hint}",
                result,
                side=host.side or "handler",
                peer=host.name,
                method=request.method,
                id=request.id,
                error=describe_exception(error),
                hint=hint,
            )
            self.answer(request, error=internal_error_for(error, details=host.error_details))

    def answer_cancelled(self, request: InboundRequest) -> None:
        """
        Answer a cancelled request: its ``cancelled_result`` or the policy's error
        (-32800); not at all when the policy says cancelled requests are not answered.
        """
        cancelled = self._host.cancellation.cancelled_error()
        if cancelled is None:
            self.finish(request)
            self.pump()
            self._host.check_finished()
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
            self._host.log.failure(
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
        written = self._host.write_reply(request, message, error is not None)
        self.finish(request)
        after = request._after
        if written and after is not None:
            request._after = None
            for fn in after:
                try:
                    fn()
                except Exception:
                    self._host.log.failure(
                        "{peer}: after_reply callback failed", peer=self._host.name
                    )
        if self.queue:
            self.pump()
        if not self._draining:  # (else the end of the drain checks it)
            self._host.check_finished()

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
                self._host.requests_settled()
