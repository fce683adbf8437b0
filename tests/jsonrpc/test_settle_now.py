"""
A coroutine handler that returns without waiting is answered at once, without a Deferred
(``acpkit.jsonrpc.asyncio_bridge.settle_now``); one that waits goes on as
``Deferred.fromCoroutine`` ran it; ``is_async`` remembers which types are plain values.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Generator, Iterator
from contextvars import ContextVar
from typing import Any

import pytest
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from acpkit import schema
from acpkit.connection import Agent, AgentConnection, negotiate_version
from acpkit.errors import InvalidParams
from acpkit.jsonrpc import InboundRequest, JSONRPCProtocol, MethodRegistry
from acpkit.jsonrpc.asyncio_bridge import is_async, settle_now

VAR: ContextVar[str] = ContextVar("VAR", default="unset")


@pytest.fixture
def deferreds_made(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Deferred[Any]]]:
    """Every Deferred made while the test runs."""
    made: list[Deferred[Any]] = []
    init = Deferred.__init__

    def counting(self: Deferred[Any], *args: Any, **kwargs: Any) -> None:
        made.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(Deferred, "__init__", counting)
    yield made


def answers(transport: StringTransport) -> list[dict[str, Any]]:
    lines = transport.value().splitlines()
    transport.clear()
    return [json.loads(line) for line in lines]


def engine(registry: MethodRegistry) -> tuple[JSONRPCProtocol, StringTransport]:
    protocol = JSONRPCProtocol(registry, clock=Clock())
    transport = StringTransport()
    protocol.makeConnection(transport)
    return protocol, transport


def request(number: int, method: str, params: dict[str, Any]) -> bytes:
    message = {"jsonrpc": "2.0", "id": number, "method": method, "params": params}
    return json.dumps(message).encode() + b"\n"


def test_coroutine_that_returns_at_once_is_answered_in_the_same_read_without_deferred(
    deferreds_made: list[Deferred[Any]],
) -> None:
    """An ``async def`` handler that awaits nothing is answered within the read that
    brought its request, and no Deferred is made on the way."""
    registry = MethodRegistry()

    async def echo(req: InboundRequest) -> Any:
        return req.params

    registry.add_request("echo", echo)
    protocol, transport = engine(registry)
    deferreds_made.clear()
    protocol.dataReceived(request(1, "echo", {"x": 1}))
    assert answers(transport) == [{"jsonrpc": "2.0", "id": 1, "result": {"x": 1}}]
    assert deferreds_made == []


def test_coroutine_that_waits_is_answered_when_what_it_awaits_fires() -> None:
    """A coroutine that waits goes on where it stopped, in the context it started in:
    a context variable it set before waiting is still set after, and the caller's
    context does not see it."""
    registry = MethodRegistry()
    gate: Deferred[str] = Deferred()

    async def waits(req: InboundRequest) -> Any:
        VAR.set("handler")
        got = await gate
        return {"got": got, "var": VAR.get()}

    registry.add_request("wait", waits)
    protocol, transport = engine(registry)
    protocol.dataReceived(request(1, "wait", {}))
    assert answers(transport) == []
    assert VAR.get() == "unset"
    gate.callback("fired")
    assert answers(transport) == [
        {"jsonrpc": "2.0", "id": 1, "result": {"got": "fired", "var": "handler"}}
    ]


def test_coroutine_that_waits_twice_gets_each_value_and_each_error() -> None:
    """After its first wait the coroutine receives what each awaited Deferred fires with,
    and an awaited failure is raised at its ``await`` (where it may catch it)."""
    registry = MethodRegistry()
    first: Deferred[int] = Deferred()
    second: Deferred[int] = Deferred()

    async def twice(req: InboundRequest) -> Any:
        a = await first
        try:
            await second
        except ValueError as e:
            return {"a": a, "caught": str(e)}
        return {"a": a}

    registry.add_request("twice", twice)
    protocol, transport = engine(registry)
    protocol.dataReceived(request(1, "twice", {}))
    first.callback(1)
    assert answers(transport) == []
    second.errback(ValueError("boom"))
    assert answers(transport) == [{"jsonrpc": "2.0", "id": 1, "result": {"a": 1, "caught": "boom"}}]


def test_cancelling_a_waiting_coroutine_raises_at_its_await() -> None:
    """``$/cancel_request`` for a coroutine waiting after its first step cancels what it
    awaits; it sees ``CancelledError`` there, and the request is answered -32800."""
    registry = MethodRegistry()
    seen: list[str] = []

    async def waits(req: InboundRequest) -> Any:
        try:
            await Deferred()
        except CancelledError:
            seen.append("cancelled")
            raise
        return None

    registry.add_request("wait", waits)
    protocol, transport = engine(registry)
    protocol.dataReceived(request(7, "wait", {}))
    cancel = {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 7}}
    protocol.dataReceived(json.dumps(cancel).encode() + b"\n")
    assert seen == ["cancelled"]
    [answer] = answers(transport)
    assert answer["id"] == 7 and answer["error"]["code"] == -32800


def test_coroutine_that_raises_at_once_is_answered_with_its_error() -> None:
    """A coroutine that raises before waiting is answered as before: an RPCError as is,
    anything else -32603."""
    registry = MethodRegistry()

    async def broken(req: InboundRequest) -> Any:
        raise ZeroDivisionError("nope")

    async def refused(req: InboundRequest) -> Any:
        raise InvalidParams("$.params.x", "not today")

    registry.add_request("broken", broken)
    registry.add_request("refused", refused)
    protocol, transport = engine(registry)
    protocol.dataReceived(request(1, "broken", {}))
    protocol.dataReceived(request(2, "refused", {}))
    broke, refusal = answers(transport)
    assert broke["error"]["code"] == -32603
    assert refusal["error"]["code"] == -32602
    assert refusal["error"]["data"]["path"] == "$.params.x"


class EmptyPromptAgent(Agent):
    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=negotiate_version(params.protocol_version)
        )

    async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)


def test_async_prompt_that_returns_at_once_is_answered_without_deferred(
    deferreds_made: list[Deferred[Any]],
) -> None:
    """An agent's ``async def prompt`` that awaits nothing is answered ``end_turn``
    within the read, without a Deferred."""
    conn = AgentConnection(EmptyPromptAgent())
    transport = StringTransport()
    conn.protocol.makeConnection(transport)
    conn.protocol.dataReceived(request(0, "initialize", {"protocolVersion": 1}))
    transport.clear()
    deferreds_made.clear()
    prompt = {"sessionId": "s1", "prompt": [{"type": "text", "text": ""}]}
    conn.protocol.dataReceived(request(1, "session/prompt", prompt))
    assert answers(transport) == [{"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn"}}]
    assert deferreds_made == []


class Later:
    """Awaitable only once registered as such (``__await__`` it has all along)."""

    def __await__(self) -> Generator[Any, None, None]:
        yield None


def test_is_async_for_plain_values_and_awaitables() -> None:
    """Plain values are not async, whatever their type, asked once or many times;
    Deferreds, coroutines and objects with ``__await__`` are."""

    async def coro() -> None:
        return None

    c = coro()
    for _ in range(2):
        assert not is_async(None)
        assert not is_async({"a": 1})
        assert not is_async(schema.PromptResponse(stop_reason=schema.StopReason.END_TURN))
        assert is_async(Deferred())
        assert is_async(c)
        assert is_async(Later())
    c.close()


def test_is_async_sees_a_later_abc_registration() -> None:
    """A type remembered as plain becomes async once registered as ``Awaitable``."""

    class Plain:
        pass

    assert not is_async(Plain())
    assert not is_async(Plain())
    Awaitable.register(Plain)
    assert is_async(Plain())


def test_settle_now_under_a_running_loop_leaves_coroutines_to_tasks() -> None:
    """With an asyncio loop running, a coroutine is never stepped here: it becomes a task
    (a Deferred that has not fired yet)."""
    import asyncio

    async def at_once() -> int:
        return 1

    async def main() -> tuple[bool, bool, list[object]]:
        finished, d = settle_now(at_once())
        fired_at_once = d.called
        got: list[object] = []
        d.addBoth(got.append)
        for _ in range(10):  # loop turns: the task runs
            await asyncio.sleep(0)
        return finished, fired_at_once, got

    assert asyncio.run(main()) == (False, False, [1])
