"""Cancellation in acpkit.jsonrpc: $/cancel_request, Deferred.cancel, and their races."""

from __future__ import annotations

import json
from typing import Any

import attrs
from hypothesis import event, given
from hypothesis import strategies as st
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock, deferLater
from twisted.python.failure import Failure

from acpkit.errors import ConnectionLost, RequestTimeout, RPCError
from acpkit.jsonrpc import InboundRequest, JSONRPCProtocol, MethodRegistry
from tests.jsonrpc.test_jsonrpc import Pair, connect, make, take_json


def cancel_line(request_id: Any) -> bytes:
    """A $/cancel_request notification as a wire line."""
    return (
        json.dumps(
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": request_id}}
        ).encode()
        + b"\n"
    )


def request_line(request_id: Any, method: str, params: Any = None) -> bytes:
    """A request as a wire line."""
    return (
        json.dumps(
            {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}
        ).encode()
        + b"\n"
    )


def waiting_registry(log: list[str]) -> MethodRegistry:
    """Methods that wait forever: ``wait`` (-32800 on cancel), ``wait_cr`` (cancelled result)."""

    async def wait(r: InboundRequest) -> Any:
        log.append(f"start {r.id}")
        try:
            await Deferred()
        except CancelledError:
            log.append(f"cancelled {r.id}")
            raise

    registry = MethodRegistry()
    registry.add_request("wait", wait)
    registry.add_request("wait_cr", wait, cancelled_result=lambda r: {"stopReason": "cancelled"})
    return registry


def test_cancel_running_async_handler_answers_32800_once() -> None:
    """A running async handler sees CancelledError and the request gets one -32800 reply."""
    log: list[str] = []
    proto, _ = make(waiting_registry(log))
    t = connect(proto)
    proto.dataReceived(request_line(1, "wait"))
    proto.dataReceived(cancel_line(1) + cancel_line(1))
    assert log == ["start 1", "cancelled 1"]
    assert t.value() == (
        b'{"jsonrpc":"2.0","id":1,"error":{"code":-32800,"message":"Request cancelled"}}\n'
    )


def test_cancel_running_with_cancelled_result() -> None:
    """A cancelled handler of a method with cancelled_result is answered with that result."""
    log: list[str] = []
    proto, _ = make(waiting_registry(log))
    t = connect(proto)
    proto.dataReceived(request_line("p1", "wait_cr") + cancel_line("p1"))
    assert log == ["start p1", "cancelled p1"]
    assert t.value() == b'{"jsonrpc":"2.0","id":"p1","result":{"stopReason":"cancelled"}}\n'


def test_cancel_queued_request_answers_at_once_without_starting() -> None:
    """A queued request is answered at once on cancel and its handler never starts."""
    log: list[str] = []
    proto, _ = make(waiting_registry(log), max_concurrent_requests=1)
    t = connect(proto)
    proto.dataReceived(
        request_line(1, "wait")
        + request_line(2, "wait")
        + request_line(3, "wait_cr")
        + cancel_line(2)
        + cancel_line(3)
    )
    assert log == ["start 1"]
    assert t.value() == (
        b'{"jsonrpc":"2.0","id":2,"error":{"code":-32800,"message":"Request cancelled"}}\n'
        b'{"jsonrpc":"2.0","id":3,"result":{"stopReason":"cancelled"}}\n'
    )
    t.clear()
    proto.dataReceived(cancel_line(1))
    assert log == ["start 1", "cancelled 1"]
    assert take_json(t) == [
        {"jsonrpc": "2.0", "id": 1, "error": {"code": -32800, "message": "Request cancelled"}}
    ]


def test_handler_result_wins_when_it_ignores_cancellation() -> None:
    """A handler that catches CancelledError and returns a value is answered with that value."""
    gate: Deferred[None] = Deferred()

    async def stubborn(r: InboundRequest) -> Any:
        try:
            await gate
        except CancelledError:
            return {"partial": True}
        return {"partial": False}

    registry = MethodRegistry()
    registry.add_request("s", stubborn, cancelled_result=lambda r: {"unused": True})
    proto, _ = make(registry)
    t = connect(proto)
    proto.dataReceived(request_line(1, "s") + cancel_line(1))
    assert t.value() == b'{"jsonrpc":"2.0","id":1,"result":{"partial":true}}\n'


def test_cancel_for_unknown_or_answered_id_is_ignored() -> None:
    """$/cancel_request for an unknown, answered, or malformed id produces nothing."""
    registry = MethodRegistry()
    registry.add_request("quick", lambda r: 1)
    proto, _ = make(registry)
    t = connect(proto)
    proto.dataReceived(request_line(1, "quick"))
    t.clear()
    proto.dataReceived(
        cancel_line(1)
        + cancel_line("1")
        + cancel_line(77)
        + cancel_line(None)
        + cancel_line(1.5)
        + b'{"jsonrpc":"2.0","method":"$/cancel_request"}\n'
        + b'{"jsonrpc":"2.0","id":5,"method":"$/cancel_request","params":{"requestId":1}}\n'
    )
    assert take_json(t) == [
        {
            "jsonrpc": "2.0",
            "id": 5,
            "error": {
                "code": -32601,
                "message": "Method not found: $/cancel_request",
                "data": {"method": "$/cancel_request"},
            },
        }
    ]


def test_cancel_from_on_request_received_never_starts_handler() -> None:
    """InboundRequest.cancel() before the handler starts answers it at once."""
    log: list[str] = []
    proto, _ = make(waiting_registry(log))
    proto.on_request_received = lambda r: r.cancel()
    t = connect(proto)
    proto.dataReceived(request_line(1, "wait_cr"))
    assert log == []
    assert t.value() == b'{"jsonrpc":"2.0","id":1,"result":{"stopReason":"cancelled"}}\n'


def test_deferred_cancel_reaches_the_peer_handler() -> None:
    """Cancelling an outgoing request cancels the peer's handler; its late reply is dropped."""
    log: list[str] = []
    pair = Pair(make()[0], make(waiting_registry(log))[0])
    d = pair.a.request("wait", {})
    pair.pump()
    d.cancel()
    pair.pump()
    assert log == ["start 1", "cancelled 1"]
    failures: list[Failure] = []
    d.addErrback(failures.append)
    assert failures[0].check(CancelledError)
    assert [direction for direction, _ in pair.wire] == ["a>b", "a>b", "b>a"]


# -- property: races over timings ------------------------------------------------------------

KINDS = ("async", "deferred", "sync", "stubborn")


@attrs.define
class Spec:
    """One request in a generated scenario."""

    sender: str
    kind: str
    duration: int
    cancelled_result: bool
    timeout: int | None


@attrs.define
class HandlerRecord:
    """What a handler saw."""

    started: bool = False
    finished: bool = False
    saw_cancel: bool = False


specs = st.builds(
    Spec,
    sender=st.sampled_from("ab"),
    kind=st.sampled_from(KINDS),
    duration=st.integers(0, 6),
    cancelled_result=st.booleans(),
    timeout=st.one_of(st.none(), st.integers(1, 8)),
)

ops = st.one_of(
    st.tuples(st.just("advance"), st.integers(0, 3)),
    st.tuples(st.just("flush"), st.sampled_from("ab")),
    st.tuples(st.just("cancel_deferred"), st.integers(0, 7)),
    st.tuples(st.just("cancel_inbound"), st.integers(0, 7)),
    st.tuples(st.just("raw_cancel"), st.integers(0, 9)),
    st.tuples(st.just("lose"), st.just(0)),
)


def scenario_registry(clock: Clock, records: dict[int, HandlerRecord]) -> MethodRegistry:
    """Handlers of every kind, recording what they saw by the request's ``k``."""

    async def run_async(r: InboundRequest) -> Any:
        rec = records[r.params["k"]]
        rec.started = True
        try:
            await deferLater(clock, r.params["duration"])
        except CancelledError:
            rec.saw_cancel = True
            if r.params["kind"] == "stubborn":
                return {"k": r.params["k"], "stubborn": True}
            raise
        rec.finished = True
        return {"k": r.params["k"]}

    def run_deferred(r: InboundRequest) -> Deferred[Any]:
        rec = records[r.params["k"]]
        rec.started = True

        def canceller(_: Deferred[Any]) -> None:
            rec.saw_cancel = True
            if call.active():
                call.cancel()

        def done() -> None:
            rec.finished = True
            d.callback({"k": r.params["k"]})

        d: Deferred[Any] = Deferred(canceller)
        call = clock.callLater(r.params["duration"], done)
        return d

    def run_sync(r: InboundRequest) -> Any:
        rec = records[r.params["k"]]
        rec.started = rec.finished = True
        return {"k": r.params["k"]}

    def dispatch(r: InboundRequest) -> Any:
        kind = r.params["kind"]
        if kind == "deferred":
            return run_deferred(r)
        if kind == "sync":
            return run_sync(r)
        return run_async(r)

    registry = MethodRegistry()
    registry.add_request("work", dispatch)
    registry.add_request("work_cr", dispatch, cancelled_result=lambda r: {"cancelled": True})
    return registry


def _record_outcome(result: object, outcomes: dict[int, Any], k: int) -> None:
    """An ``addBoth`` callback: keep what request ``k`` ended with."""
    outcomes[k] = result


@given(st.lists(specs, min_size=1, max_size=8), st.lists(ops, max_size=30))
def test_cancellation_races(plan: list[Spec], steps: list[tuple[str, Any]]) -> None:
    """
    Whatever the timings and cancels (Deferred.cancel, InboundRequest.cancel, raw
    $/cancel_request, timeouts, a connection loss) on both sides: each request is
    answered exactly once on the wire (at most once if the connection was lost), no
    Deferred is left pending, nothing is left running, and a handler that was cancelled
    while running saw CancelledError.
    """
    clock = Clock()
    records: dict[int, HandlerRecord] = {k: HandlerRecord() for k in range(len(plan))}
    protos = {
        side: JSONRPCProtocol(
            scenario_registry(clock, records), clock=clock, max_concurrent_requests=2, name=side
        )
        for side in "ab"
    }
    inbound: dict[int, InboundRequest] = {}

    def remember(r: InboundRequest) -> None:
        inbound[r.params["k"]] = r

    for proto in protos.values():
        proto.on_request_received = remember
    pair = Pair(protos["a"], protos["b"])
    deferreds: list[Deferred[Any]] = []
    ids: list[int] = []
    outcomes: dict[int, Any] = {}
    locally_cancelled: set[int] = set()
    for k, spec in enumerate(plan):
        method = "work_cr" if spec.cancelled_result else "work"
        params = {"k": k, "kind": spec.kind, "duration": spec.duration}
        d = protos[spec.sender].request(method, params, timeout=spec.timeout)
        ids.append(protos[spec.sender]._next_id - 1)
        d.addBoth(_record_outcome, outcomes, k)
        deferreds.append(d)

    lost = False
    for op, arg in steps:
        if lost and op == "flush":
            continue
        if op == "lose" and not lost:
            lost = True
            pair.ta.clear()
            pair.tb.clear()
            for proto in protos.values():
                proto.connectionLost(Failure(ConnectionDone("test cut the line")))
        elif op == "advance":
            clock.advance(arg)
        elif op == "flush":
            (pair.flush_a if arg == "a" else pair.flush_b)()
        elif op == "cancel_deferred" and arg < len(plan):
            if not deferreds[arg].called:
                locally_cancelled.add(arg)
            deferreds[arg].cancel()
        elif op == "cancel_inbound" and arg in inbound:
            inbound[arg].cancel()
        elif op == "raw_cancel":
            sender = plan[arg].sender if arg < len(plan) else "a"
            target = ids[arg] if arg < len(plan) else 1000 + arg
            protos[sender].notify("$/cancel_request", {"requestId": target})

    for _ in range(200):
        if lost:
            pair.ta.clear()
            pair.tb.clear()
        pair.pump()
        calls = clock.getDelayedCalls()
        if not calls:
            break
        clock.advance(max(c.getTime() for c in calls) - clock.seconds())
    pair.pump()
    assert not clock.getDelayedCalls()

    # Exactly one response per request, on the wire, in the opposite direction.
    responses: dict[tuple[str, Any], list[Any]] = {}
    for direction, raw in pair.wire:
        msg = json.loads(raw)
        assert "error" not in msg or msg["id"] is not None, msg
        if "method" not in msg:
            responses.setdefault((direction, msg["id"]), []).append(msg)
    for k, spec in enumerate(plan):
        back = "b>a" if spec.sender == "a" else "a>b"
        answers = len(responses.pop((back, ids[k]), []))
        assert answers == 1 or (lost and answers == 0), (k, pair.wire)
    assert responses == {}

    for k, spec in enumerate(plan):
        d, rec = deferreds[k], records[k]
        assert d.called, k
        outcome = outcomes[k]
        if k in locally_cancelled:
            assert isinstance(outcome, Failure) and outcome.check(CancelledError)
        elif isinstance(outcome, Failure):
            assert isinstance(outcome.value, RPCError | RequestTimeout | ConnectionLost), outcome
            if isinstance(outcome.value, ConnectionLost):
                assert lost and "test cut the line" in str(outcome.value)
            if isinstance(outcome.value, RPCError):
                assert outcome.value.code == -32800 and not spec.cancelled_result
        elif outcome == {"cancelled": True}:
            assert spec.cancelled_result
        # Handlers: a started handler either finished or saw CancelledError.
        if rec.started:
            assert rec.finished or rec.saw_cancel, (k, rec)
        request = inbound.get(k)
        if request is not None:
            assert request.answered
            if lost and rec.started and not rec.finished:
                assert rec.saw_cancel, (k, rec)
            if request.cancel_requested and rec.started and not rec.finished:
                assert rec.saw_cancel
        if isinstance(outcome, dict) and outcome.get("cancelled"):
            assert not rec.started or rec.saw_cancel
        if rec.saw_cancel:
            event("a running handler was cancelled")
        if request is not None and request.cancel_requested and not rec.started:
            event("a queued request was cancelled")
        if isinstance(outcome, Failure) and isinstance(outcome.value, RequestTimeout):
            event("a request timed out")
        if isinstance(outcome, Failure) and isinstance(outcome.value, ConnectionLost):
            event("a request failed with ConnectionLost")

    for proto in protos.values():
        assert not proto._outgoing and not proto._inbound and not proto._queue
        assert proto._running == 0
