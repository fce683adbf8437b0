"""Tests for acpkit.jsonrpc.dispatch: inbound requests' slots, queue, cancellation, answers."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Generator
from typing import Any

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from acpkit.errors import InvalidParams
from acpkit.jsonrpc import MethodRegistry
from acpkit.jsonrpc.cancel import ACP_CANCELLATION, MCP_CANCELLATION, NotificationCancellation
from acpkit.jsonrpc.dispatch import InboundDispatcher, InboundRequest


class Host:
    """The engine side of the dispatcher (a DispatchHost), recording the answers it is
    asked to write."""

    def __init__(
        self,
        *,
        slots: int = 1,
        queue: int = 10,
        cancellation: NotificationCancellation = ACP_CANCELLATION,
    ) -> None:
        self.max_concurrent_requests = slots
        self.max_queued_requests = queue
        self.cancellation = cancellation
        self.name = "test"
        self.side: str | None = None
        self.error_details: bool | None = None
        self.log = Logger()
        self.on_request_received: Callable[[InboundRequest], None] | None = None
        self.answers: list[dict[str, Any]] = []
        self.idle_checks = 0
        self.settled = 0
        self.closed = False

    def process_message(self, data: bytes, /) -> None:
        raise AssertionError("these tests give the dispatcher requests, not messages")

    def process_oversized(self, head: bytes, /) -> None:
        raise AssertionError("these tests give the dispatcher requests, not messages")

    def update_reading(self) -> None:
        pass

    def output_over_budget(self) -> bool:
        return False

    def check_finished(self) -> None:
        self.idle_checks += 1

    def write_reply(
        self, request: InboundRequest, message: dict[str, Any], is_error: bool, /
    ) -> bool:
        if self.closed:
            return False
        self.answers.append(message)
        return True

    def requests_settled(self) -> None:
        self.settled += 1


#: The methods each dispatcher of these tests serves (a request carries its handler).
REGISTRIES: weakref.WeakKeyDictionary[InboundDispatcher, MethodRegistry] = (
    weakref.WeakKeyDictionary()
)


def setup(**kw: Any) -> tuple[Host, InboundDispatcher, dict[Any, Deferred[Any]]]:
    pending: dict[Any, Deferred[Any]] = {}
    registry = MethodRegistry()

    def wait(r: InboundRequest) -> Deferred[Any]:
        pending[r.id] = Deferred()
        return pending[r.id]

    registry.add_request("wait", wait)
    registry.add_request("wait_cr", wait, cancelled_result=lambda r: {"stopReason": "cancelled"})
    registry.add_request("value", lambda r: {"ok": r.id})
    registry.add_request("bad", lambda r: (_ for _ in ()).throw(InvalidParams("$.x", "no")))
    registry.add_request("crash", lambda r: 1 / 0)
    host = Host(**kw)
    dispatcher = InboundDispatcher(host)
    REGISTRIES[dispatcher] = registry
    return host, dispatcher, pending


def submit(dispatcher: InboundDispatcher, request_id: Any, method: str) -> InboundRequest:
    registration = REGISTRIES[dispatcher].request_method(method)
    assert registration is not None
    request = InboundRequest(
        request_id,
        method,
        {},
        None,
        protocol=dispatcher,
        handler=registration.handler,
        cancelled_result=registration.cancelled_result,
    )
    dispatcher.accept(request)
    return request


def test_answers_by_handler_outcome() -> None:
    """A value is the result; an RPCError is itself; anything else is -32603."""
    host, dispatcher, _ = setup(slots=4)
    submit(dispatcher, 1, "value")
    submit(dispatcher, 2, "bad")
    submit(dispatcher, 3, "crash")
    assert host.answers[0] == {"jsonrpc": "2.0", "id": 1, "result": {"ok": 1}}
    assert host.answers[1]["error"]["code"] == -32602
    assert host.answers[2]["error"] == {"code": -32603, "message": "Internal error"}
    assert not dispatcher.inbound and dispatcher.running == 0


def test_the_host_hears_when_no_request_is_left() -> None:
    """The host is told each time the last request in progress is answered (what
    ``when_requests_answered`` waits on), not while another one is still running."""
    host, dispatcher, pending = setup(slots=2)
    submit(dispatcher, 1, "wait")
    submit(dispatcher, 2, "wait")
    pending[1].callback({})
    assert host.settled == 0
    pending[2].callback({})
    assert host.settled == 1
    submit(dispatcher, 3, "value")
    assert host.settled == 2


class Later:
    """An awaitable that is not a coroutine (as an asyncio future or a library's own)."""

    def __init__(self, d: Deferred[Any]) -> None:
        self.d = d

    def __await__(self) -> Generator[Any, None, Any]:
        return (yield from self.d.__await__())


def test_an_awaitable_result_is_awaited() -> None:
    """A handler may return any awaitable, not only a coroutine: the request is answered
    with what it gives once it is done, and its slot is held meanwhile."""
    host, dispatcher, _ = setup(slots=1)
    later: Deferred[Any] = Deferred()
    dispatcher_registry = REGISTRIES[dispatcher]
    dispatcher_registry.add_request("later", lambda r: Later(later))
    submit(dispatcher, 1, "later")
    assert host.answers == [] and dispatcher.running == 1
    later.callback({"done": True})
    assert host.answers == [{"jsonrpc": "2.0", "id": 1, "result": {"done": True}}]
    assert dispatcher.running == 0


def test_slots_and_fifo_queue() -> None:
    """At most max_concurrent_requests run; the rest start in arrival order."""
    host, dispatcher, pending = setup(slots=2, queue=2)
    for request_id in (1, 2, 3, 4):
        submit(dispatcher, request_id, "wait")
    assert list(pending) == [1, 2] and dispatcher.running == 2
    assert [r.id for r in dispatcher.queue] == [3, 4]
    assert dispatcher.is_full()
    pending[2].callback("two")
    assert list(pending) == [1, 2, 3]
    assert host.answers == [{"jsonrpc": "2.0", "id": 2, "result": "two"}]


def test_cancel_queued_is_answered_at_once_never_started() -> None:
    """Cancelling a queued request answers -32800 at once; it never starts."""
    host, dispatcher, pending = setup(slots=1)
    submit(dispatcher, 1, "wait")
    queued = submit(dispatcher, 2, "wait")
    queued.cancel()
    assert host.answers[0]["id"] == 2 and host.answers[0]["error"]["code"] == -32800
    pending[1].callback(None)
    assert list(pending) == [1]


def test_cancel_running_uses_cancelled_result() -> None:
    """A running request cancelled answers the method's cancelled_result if it has one."""
    host, dispatcher, pending = setup()
    request = submit(dispatcher, "a", "wait_cr")
    request.cancel()
    assert pending["a"].called
    assert host.answers == [{"jsonrpc": "2.0", "id": "a", "result": {"stopReason": "cancelled"}}]


def test_mcp_policy_answers_nothing_but_frees_the_slot() -> None:
    """With MCP's policy a cancelled request is not answered; the next one starts."""
    host, dispatcher, pending = setup(cancellation=MCP_CANCELLATION)
    request = submit(dispatcher, 1, "wait")
    submit(dispatcher, 2, "wait")
    request.cancel()
    assert host.answers == [] and list(pending) == [1, 2]
    assert request.answered and 1 not in dispatcher.inbound


def test_abandon_all_cancels_without_answers() -> None:
    """On connection loss running handlers are cancelled, queued ones dropped, never started."""
    host, dispatcher, pending = setup(slots=1)
    submit(dispatcher, 1, "wait")
    second = submit(dispatcher, 2, "wait")
    after: list[str] = []
    second.after_reply(lambda: after.append("ran"))
    host.closed = True
    dispatcher.abandon_all()
    assert pending[1].called and list(pending) == [1]
    assert host.answers == [] and after == []
    assert not dispatcher.inbound and not dispatcher.queue and dispatcher.running == 0
