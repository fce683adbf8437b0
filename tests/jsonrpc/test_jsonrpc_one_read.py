"""
Many requests in one read (issue 25, pipelining): a message with nothing waiting before it
is processed without the trip through the backlog, and a request with a free slot and an
empty queue is started without the queue.  These tests check that what the peer sees is
the same as on the backlog and queue path: answers and their order, cancellation of
requests still running or queued (and of ids not received yet), errors, after-reply
callbacks, back-pressure.

The reference run sends first a notification whose handler holds the stream, so that
every later message of the read waits in the backlog, then releases it: the same messages
then go the long way.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from acpkit.errors import InvalidParams
from acpkit.jsonrpc import InboundRequest, JSONRPCProtocol, MethodRegistry
from acpkit.jsonrpc.dispatch import InboundDispatcher

#: What a generated message is: a request of one of these methods, a cancel, a notification.
METHODS = ["value", "plain", "wait", "bad", "crash", "after", "none"]


class World:
    """One connection and what its handlers saw, in order."""

    def __init__(self, slots: int, queue: int) -> None:
        self.events: list[Any] = []
        self.pending: dict[Any, Deferred[Any]] = {}
        self.hold: Deferred[None] | None = None
        registry = MethodRegistry()
        registry.add_request("value", self.value)
        registry.add_request("plain", lambda r: [r.id])
        registry.add_request("wait", self.wait)
        registry.add_request("bad", self.bad)
        registry.add_request("crash", lambda r: 1 / 0)
        registry.add_request("after", self.after)
        registry.add_request("none", lambda r: None)
        registry.add_notification("note", self.note)
        registry.add_notification("hold", self.holding)
        self.proto = JSONRPCProtocol(
            registry, clock=Clock(), max_concurrent_requests=slots, max_queued_requests=queue
        )
        self.proto.on_request_received = lambda r: self.events.append(("received", r.id))
        self.transport = StringTransport()
        self.proto.makeConnection(self.transport)

    def value(self, request: InboundRequest) -> dict[str, Any]:
        self.events.append(("start", request.id))
        return {"ok": request.id}

    def wait(self, request: InboundRequest) -> Deferred[Any]:
        self.events.append(("start", request.id))
        d: Deferred[Any] = Deferred()
        self.pending[request.id] = d
        return d

    def bad(self, request: InboundRequest) -> None:
        self.events.append(("start", request.id))
        raise InvalidParams("$.params.x", "no")

    def after(self, request: InboundRequest) -> dict[str, Any]:
        self.events.append(("start", request.id))
        request.after_reply(lambda: self.events.append(("after", request.id, self.written())))
        return {"after": request.id}

    def note(self, params: Any, meta: Any) -> None:
        self.events.append(("note", params["n"]))

    def holding(self, params: Any, meta: Any) -> Deferred[None]:
        self.hold = Deferred()
        return self.hold

    def written(self) -> list[Any]:
        """Every message written so far, decoded."""
        return [json.loads(line) for line in self.transport.value().splitlines()]


def wire(messages: list[tuple[str, int]]) -> bytes:
    """The read holding ``messages``: (method, id) requests, ("cancel", id), ("note", n)."""
    lines = []
    for kind, number in messages:
        message: dict[str, Any]
        if kind == "cancel":
            message = {"jsonrpc": "2.0", "method": "$/cancel_request"}
            message["params"] = {"requestId": number}
        elif kind == "note":
            message = {"jsonrpc": "2.0", "method": "note", "params": {"n": number}}
        else:
            message = {"jsonrpc": "2.0", "id": number, "method": kind, "params": {}}
        lines.append(json.dumps(message))
    return "".join(line + "\n" for line in lines).encode()


def run(messages: list[tuple[str, int]], slots: int, queue: int, held: bool) -> World:
    """Deliver ``messages`` in one read (after a holding notification when ``held``),
    release the hold, then fire the waiting handlers in id order until none waits."""
    world = World(slots, queue)
    data = wire(messages)
    if held:
        world.proto.dataReceived(wire([("hold", 0)]).replace(b'"id": 0, ', b""))
        assert world.hold is not None
        world.proto.dataReceived(data)
        assert world.written() == []  # everything waits behind the notification
        world.hold.callback(None)
    else:
        world.proto.dataReceived(data)
    while waiting := sorted(n for n, d in world.pending.items() if not d.called):
        # (firing one may start a queued one, which waits in turn)
        world.pending[waiting[0]].callback({"waited": waiting[0]})
    return world


messages_strategy = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(METHODS), st.integers(0, 12)),
        st.tuples(st.just("cancel"), st.integers(0, 12)),
        st.tuples(st.just("note"), st.integers(0, 5)),
    ),
    max_size=40,
)


@given(messages=messages_strategy, slots=st.integers(1, 4), queue=st.integers(0, 6))
def test_one_read_is_answered_as_through_the_backlog(
    messages: list[tuple[str, int]], slots: int, queue: int
) -> None:
    """
    Whatever mix of requests (answered at once, waiting, failing, with after-reply
    callbacks, duplicate ids), cancels (of running, queued, answered and not yet received
    requests) and notifications arrives in one read, the answers written, their order,
    and the order of what the handlers and callbacks saw are those of the same messages
    processed through the backlog.
    """
    fast = run(messages, slots, queue, held=False)
    slow = run(messages, slots, queue, held=True)
    assert fast.written() == slow.written()
    assert fast.events == slow.events
    assert fast.proto.requests_in_progress == slow.proto.requests_in_progress == 0


def test_requests_in_one_read_are_answered_in_order_once_each() -> None:
    """1,000 requests answered at once, in one read: 1,000 answers, in wire order, each
    after-reply callback run right after its own answer is written."""
    world = World(slots=2, queue=0)
    world.proto.dataReceived(wire([("after", number) for number in range(1000)]))
    written = world.written()
    assert [message["id"] for message in written] == list(range(1000))
    assert [message["result"] for message in written] == [{"after": n} for n in range(1000)]
    afters = [event for event in world.events if event[0] == "after"]
    assert [(n, len(seen)) for _, n, seen in afters] == [(n, n + 1) for n in range(1000)]


def test_a_cancel_in_the_same_read_reaches_the_running_and_queued_requests() -> None:
    """Two waiting requests fill the slots, a third waits in the queue; cancels later in
    the same read answer the queued one at once (never started) and cancel the running
    one; a cancel of an id that comes later in the read is ignored."""
    world = World(slots=2, queue=4)
    read = [("wait", 1), ("wait", 2), ("cancel", 4), ("wait", 3), ("cancel", 3), ("cancel", 1)]
    world.proto.dataReceived(wire([*read, ("value", 4)]))
    written = world.written()
    assert [(m["id"], m.get("error", {}).get("code")) for m in written] == [
        (3, -32800),
        (1, -32800),
        (4, None),
    ]
    assert ("start", 3) not in world.events
    world.pending[2].callback({"late": 2})
    assert world.written()[-1] == {"jsonrpc": "2.0", "id": 2, "result": {"late": 2}}


def test_paused_output_queues_requests_of_one_read_then_refuses() -> None:
    """While the peer does not read and the output budget is spent, the requests of one
    read wait in the queue (up to its size) and the rest are refused at once; once the
    peer reads again, the queued ones are started and answered in order."""
    world = World(slots=4, queue=3)
    world.proto.max_buffered_output = 0
    world.proto.pauseProducing()
    world.proto.dataReceived(wire([("value", number) for number in range(5)]))
    refused = world.written()
    assert [(m["id"], m["error"]["message"]) for m in refused] == [
        (3, "Internal error: too many concurrent requests"),
        (4, "Internal error: too many concurrent requests"),
    ]
    assert not [event for event in world.events if event[0] == "start"]
    world.proto.resumeProducing()
    assert [m["id"] for m in world.written()[2:]] == [0, 1, 2]
    assert [event for event in world.events if event[0] == "start"] == [
        ("start", 0),
        ("start", 1),
        ("start", 2),
    ]


def test_a_request_with_a_free_slot_starts_at_once_without_queueing() -> None:
    """accept() of a request with a free slot and nobody queued starts it before it
    returns (no trip through the queue), and one accepted while the queue is not empty
    waits its turn behind it."""
    world = World(slots=1, queue=4)
    dispatch = InboundDispatcher(world.proto)
    registration = world.proto.registry.request_method("wait")
    assert registration is not None

    def request(number: int) -> InboundRequest:
        return InboundRequest(
            number, "wait", {}, None, protocol=dispatch, handler=registration.handler
        )

    def started() -> list[Any]:
        return [event for event in world.events if event[0] == "start"]

    dispatch.accept(request(1))
    assert started() == [("start", 1)] and not dispatch.queue
    dispatch.accept(request(2))
    dispatch.accept(request(3))
    assert [r.id for r in dispatch.queue] == [2, 3]
    world.pending[1].callback({})
    assert started() == [("start", 1), ("start", 2)]


def test_a_message_delivered_while_one_is_processed_is_processed_right_after_it() -> None:
    """A framing that delivers a message while the previous one is being processed (an
    in-memory peer answering from inside a handler) has it processed right after that
    one, before the outer delivery returns: not left waiting for the next message."""
    world = World(slots=2, queue=2)
    inner = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "value", "params": {}}).encode()

    def feeding(request: InboundRequest) -> dict[str, Any]:
        world.events.append(("start", request.id))
        world.proto.messageReceived(inner)
        world.events.append(("fed", request.id))
        return {"fed": request.id}

    world.proto.registry.add_request("feed", feeding)
    outer = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "feed", "params": {}}).encode()
    world.proto.messageReceived(outer)
    assert [m["id"] for m in world.written()] == [1, 2]
    assert [e for e in world.events if e[0] != "received"] == [
        ("start", 1),
        ("fed", 1),
        ("start", 2),
    ]


MISSING = object()
envelope_ids = st.one_of(
    st.integers(-(2**40), 2**40), st.text(max_size=5), st.booleans(), st.floats(0, 9),
    st.none(), st.just([1]), st.just(MISSING),
)  # fmt: skip
envelope_methods = st.sampled_from(["value", "nope", 7, None, ["value"], MISSING])
envelope_versions = st.sampled_from(["2.0", "1.0", 2.0, None, MISSING])
envelope_params = st.sampled_from([{}, {"a": 1}, [], "x", None, MISSING])


@given(
    request_id=envelope_ids,
    method=envelope_methods,
    version=envelope_versions,
    params=envelope_params,
)
def test_a_message_with_a_method_and_an_id_is_answered_as_the_engine_documents(
    request_id: Any, method: Any, version: Any, params: Any
) -> None:
    """
    The reader tells a well-formed request without building its event; every other
    message with a method and an id still gets the answer the engine's docstring lists:
    an invalid id -32600 with id null, a wrong "jsonrpc" or a method that is no string
    -32600 with its id, an unknown method -32601, params that are no object -32602,
    else the handler's result.
    """
    message: dict[str, Any] = {}
    for key, value in (("jsonrpc", version), ("id", request_id), ("method", method)):
        if value is not MISSING:
            message[key] = value
    if params is not MISSING:
        message["params"] = params
    world = World(slots=2, queue=2)
    world.proto.dataReceived(json.dumps(message).encode() + b"\n")
    written = world.written()
    if "method" not in message:
        return  # (a response or no envelope: not what this test is about)
    if "id" not in message:
        assert written == []  # a notification: never answered
        return
    valid_id = type(request_id) in (int, str)
    assert len(written) == 1
    answer = written[0]
    if not valid_id:
        expected: tuple[Any, Any] = (None, -32600)
    elif version != "2.0" or type(method) is not str:
        expected = (request_id, -32600)
    elif method != "value":
        expected = (request_id, -32601)
    elif type(params) is not dict:
        expected = (request_id, -32602)
    else:
        expected = (request_id, None)
    assert (answer["id"], answer.get("error", {}).get("code")) == expected
    if expected[1] is None:
        assert answer["result"] == {"ok": request_id}
