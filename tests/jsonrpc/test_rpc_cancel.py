"""The JSON-RPC engine with each cancellation policy (acpkit.jsonrpc.cancel): ACP, LSP, MCP."""

from __future__ import annotations

import json
from typing import Any

import pytest
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from acpkit.jsonrpc import (
    CANCEL_REQUEST,
    InboundRequest,
    JSONRPCEngine,
    JSONRPCProtocol,
    MethodRegistry,
)
from acpkit.jsonrpc.cancel import (
    ACP_CANCELLATION,
    LSP_CANCELLATION,
    MCP_CANCELLATION,
    ICancellationPolicy,
    NotificationCancellation,
)
from tests.helpers import connected


def waiting_registry(log: list[str]) -> MethodRegistry:
    """``wait`` waits until cancelled."""

    async def wait(r: InboundRequest) -> Any:
        log.append(f"start {r.id}")
        try:
            await Deferred()
        except CancelledError:
            log.append(f"cancelled {r.id}")
            raise

    registry = MethodRegistry()
    registry.add_request("wait", wait)
    return registry


def engine_with(policy: NotificationCancellation | None, log: list[str]) -> tuple[Any, Any]:
    """An engine with ``policy`` and the waiting handlers, connected to a StringTransport."""
    proto = JSONRPCProtocol(waiting_registry(log), clock=Clock(), cancellation=policy)
    return proto, connected(proto)


def written(transport: StringTransport) -> list[Any]:
    data = transport.value()
    transport.clear()
    return [json.loads(raw) for raw in data.split(b"\n") if raw]


def send(proto: JSONRPCProtocol, message: dict[str, Any]) -> None:
    proto.dataReceived(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")


def test_policies_provide_the_interface() -> None:
    """Each policy provides ICancellationPolicy; ACP's is JSONRPCProtocol's default."""
    for policy in (ACP_CANCELLATION, LSP_CANCELLATION, MCP_CANCELLATION):
        assert ICancellationPolicy.providedBy(policy)
    assert JSONRPCProtocol.cancellation is ACP_CANCELLATION
    assert CANCEL_REQUEST == "$/cancel_request"


def test_engine_without_a_policy_is_refused() -> None:
    """The generic engine has no dialect of its own: a policy must be given."""

    class Bare(JSONRPCEngine):
        pass

    with pytest.raises(ValueError, match="cancellation policy"):
        Bare(clock=Clock())


@pytest.mark.parametrize(
    ("policy", "method", "member"),
    [
        (None, "$/cancel_request", "requestId"),
        (LSP_CANCELLATION, "$/cancelRequest", "id"),
    ],
)
def test_inbound_cancel_answers_32800(
    policy: NotificationCancellation | None, method: str, member: str
) -> None:
    """ACP's and LSP's cancel notifications cancel the running handler; answer -32800."""
    log: list[str] = []
    proto, transport = engine_with(policy, log)
    send(proto, {"id": 5, "method": "wait", "params": {}})
    # The other dialect's notification is just an unknown notification: ignored.
    other = "$/cancelRequest" if method == "$/cancel_request" else "$/cancel_request"
    send(proto, {"method": other, "params": {"requestId": 5, "id": 5}})
    assert written(transport) == [] and log == ["start 5"]
    send(proto, {"method": method, "params": {member: 5}})
    assert log == ["start 5", "cancelled 5"]
    (reply,) = written(transport)
    assert reply["id"] == 5 and reply["error"]["code"] == -32800


def test_mcp_cancel_is_not_answered_and_frees_the_slot() -> None:
    """MCP: notifications/cancelled cancels the handler and nothing is answered."""
    log: list[str] = []
    proto, transport = engine_with(MCP_CANCELLATION, log)
    send(proto, {"id": "a", "method": "wait", "params": {}})
    send(proto, {"method": "notifications/cancelled", "params": {"requestId": "a"}})
    assert log == ["start a", "cancelled a"]
    assert written(transport) == []
    assert not proto._inbound and proto._running == 0
    # The id is free again.
    send(proto, {"id": "a", "method": "wait", "params": {}})
    assert log[-1] == "start a"


def test_mcp_cancel_of_a_queued_request_is_not_answered() -> None:
    """MCP: a queued request cancelled is dropped without an answer, never started."""
    log: list[str] = []
    proto = JSONRPCProtocol(
        waiting_registry(log),
        clock=Clock(),
        max_concurrent_requests=1,
        cancellation=MCP_CANCELLATION,
    )
    transport = StringTransport()
    proto.makeConnection(transport)
    send(proto, {"id": 1, "method": "wait", "params": {}})
    send(proto, {"id": 2, "method": "wait", "params": {}})
    send(proto, {"method": "notifications/cancelled", "params": {"requestId": 2}})
    assert log == ["start 1"] and written(transport) == []
    assert len(proto._queue) == 0


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (None, {"method": "$/cancel_request", "params": {"requestId": 1}}),
        (LSP_CANCELLATION, {"method": "$/cancelRequest", "params": {"id": 1}}),
        (MCP_CANCELLATION, {"method": "notifications/cancelled", "params": {"requestId": 1}}),
    ],
)
def test_outgoing_cancel_and_timeout_send_the_dialects_notification(
    policy: NotificationCancellation | None, expected: dict[str, Any]
) -> None:
    """d.cancel() and a timeout both send the policy's notification for our request."""
    proto, transport = engine_with(policy, [])
    d = proto.request("slow", {})
    d.addErrback(lambda f: f.trap(CancelledError))
    written(transport)
    d.cancel()
    assert written(transport) == [{"jsonrpc": "2.0", **expected}]
    clock = Clock()
    proto._clock = clock
    d2 = proto.request("slow", {}, timeout=1)
    failures: list[Any] = []
    d2.addErrback(failures.append)
    written(transport)
    clock.advance(1)
    (sent,) = written(transport)
    assert sent["method"] == expected["method"]
    assert list(sent["params"].values()) == [2] and failures


def test_invalid_cancel_params_are_ignored() -> None:
    """A cancel whose id member is missing or not an id is ignored (the request runs on)."""
    log: list[str] = []
    proto, transport = engine_with(LSP_CANCELLATION, log)
    send(proto, {"id": 1, "method": "wait", "params": {}})
    send(proto, {"method": "$/cancelRequest", "params": {"id": 1.5}})
    send(proto, {"method": "$/cancelRequest", "params": {"requestId": 1}})
    send(proto, {"method": "$/cancelRequest"})
    assert log == ["start 1"] and written(transport) == []
