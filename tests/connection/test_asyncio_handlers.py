"""
``async def`` handlers under a running asyncio loop (what the asyncio reactor runs):
they may await asyncio awaitables and acpkit's Deferreds in one body, and cancellation
reaches them as ``asyncio.CancelledError``.

These run an in-memory pair inside ``asyncio.run`` (no reactor: the pair moves bytes
when pumped), so the handlers see a running loop exactly as under the asyncio reactor.
The real reactor, a real asyncio HTTP library and real pipes are in
``tests/connection/test_asyncio_reactor_process.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import pytest
from twisted.internet.defer import CancelledError, Deferred
from twisted.python.failure import Failure

from acpkit import schema
from acpkit.connection import Agent, AgentConnection, Client, negotiate_version
from acpkit.testing.pair import ConnectedPair, connected_pair

T = TypeVar("T")

#: Loop turns a condition may take before a test gives up (each turn pumps the pair).
TURNS = 10_000


def run(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run ``main`` in a fresh asyncio loop, giving up after 20 s."""

    async def bounded() -> T:
        return await asyncio.wait_for(main(), 20)

    return asyncio.run(bounded())


async def settle(pair: ConnectedPair, done: Callable[[], bool]) -> None:
    """Pump the pair and let the loop run until ``done()``."""
    for _ in range(TURNS):
        pair.pump()
        if done():
            return
        await asyncio.sleep(0)  # one loop turn: tasks run, nothing waits on time
    raise AssertionError("condition not reached")


async def outcome(pair: ConnectedPair, d: Deferred[T]) -> T | Failure:
    """What ``d`` fired with, once it has (pumping meanwhile)."""
    box: list[T | Failure] = []
    d.addBoth(box.append)
    await settle(pair, lambda: bool(box))
    return box[0]


def text(t: str) -> schema.AgentMessageChunk:
    return schema.AgentMessageChunk(content=schema.TextContentBlock(text=t))


class Recorder(Client):
    """Records message chunks; answers permission requests when the test says so."""

    def __init__(self) -> None:
        self.chunks: list[str] = []
        self.permission: asyncio.Future[str] | None = None

    def session_update(self, params: schema.SessionNotification) -> None:
        update = params.update
        if isinstance(update, schema.AgentMessageChunk) and isinstance(
            update.content, schema.TextContentBlock
        ):
            self.chunks.append(update.content.text)

    async def request_permission(
        self, params: schema.RequestPermissionRequest
    ) -> schema.RequestPermissionResponse:
        # An asyncio future in a client handler: the user's choice comes later.
        self.permission = asyncio.get_running_loop().create_future()
        option = await self.permission
        return schema.RequestPermissionResponse(
            outcome=schema.SelectedPermissionOutcome(option_id=option)
        )


class MixingAgent(Agent):
    """
    A prompt that awaits asyncio (an event, ``asyncio.sleep``, a task of its own) and
    acpkit (``session_update``, ``request_permission``) in the same body.
    """

    def __init__(self, conn: AgentConnection) -> None:
        self.conn = conn
        self.go = asyncio.Event()
        self.started = asyncio.Event()
        self.seen: list[str] = []

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=negotiate_version(params.protocol_version)
        )

    def new_session(self, params: schema.NewSessionRequest) -> Any:
        return schema.NewSessionResponse(session_id="s1")

    async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        sid = params.session_id
        self.seen.append(f"task: {asyncio.current_task() is not None}")
        await asyncio.sleep(0)
        await self.conn.session_update(sid, text("before"))
        self.started.set()
        try:
            await self.go.wait()
        except asyncio.CancelledError:
            self.seen.append("asyncio.CancelledError")
            await self.conn.session_update(sid, text("cancelled"))
            raise
        answer = await self.conn.request_permission(
            schema.RequestPermissionRequest(
                session_id=sid,
                tool_call=schema.ToolCallUpdate(tool_call_id="c1"),
                options=[
                    schema.PermissionOption(
                        option_id="yes", name="Yes", kind=schema.PermissionOptionKind.ALLOW_ONCE
                    )
                ],
            )
        )
        assert isinstance(answer.outcome, schema.SelectedPermissionOutcome)
        # acpkit's Deferreds are awaitable from other tasks too (gather wraps them in one).
        await asyncio.gather(
            self.conn.session_update(sid, text(answer.outcome.option_id)),
            asyncio.sleep(0),
        )
        return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)


A = TypeVar("A", bound=MixingAgent)


def keeping(cls: type[A], into: list[A]) -> Callable[[AgentConnection], A]:
    """A factory making ``cls`` agents, kept in ``into``."""

    def make(conn: AgentConnection) -> A:
        into.append(cls(conn))
        return into[-1]

    return make


async def started_pair() -> tuple[ConnectedPair, MixingAgent, Recorder]:
    agents: list[MixingAgent] = []
    client = Recorder()
    pair = connected_pair(keeping(MixingAgent, agents), client)
    await outcome(pair, pair.client.initialize())
    await outcome(pair, pair.client.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[])))
    return pair, agents[0], client


def prompt(pair: ConnectedPair) -> Deferred[schema.PromptResponse]:
    return pair.client.prompt(
        schema.PromptRequest(session_id="s1", prompt=[schema.TextContentBlock(text="hi")])
    )


def test_asyncio_and_deferreds_in_one_handler() -> None:
    """
    Under a running loop the prompt runs as an asyncio task: it awaits an asyncio event,
    ``asyncio.sleep``, ``session_update`` and ``request_permission`` (answered by an
    asyncio client handler) and a gathered ``session_update``, and answers end_turn.
    """

    async def main() -> None:
        pair, agent, client = await started_pair()
        d = prompt(pair)
        await settle(pair, agent.started.is_set)
        agent.go.set()
        await settle(pair, lambda: client.permission is not None)
        assert client.permission is not None
        client.permission.set_result("yes")
        result = await outcome(pair, d)
        assert result == schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)
        assert client.chunks == ["before", "yes"]
        assert agent.seen == ["task: True"]

    run(main)


def test_session_cancel_reaches_the_task() -> None:
    """
    ``session/cancel`` while the handler awaits an asyncio event: the handler sees
    ``asyncio.CancelledError`` (and may still send an update), the turn answers
    ``cancelled``.
    """

    async def main() -> None:
        pair, agent, client = await started_pair()
        d = prompt(pair)
        await settle(pair, agent.started.is_set)
        pair.client.cancel("s1")
        result = await outcome(pair, d)
        assert result == schema.PromptResponse(stop_reason=schema.StopReason.CANCELLED)
        assert agent.seen == ["task: True", "asyncio.CancelledError"]
        assert client.chunks == ["before", "cancelled"]

    run(main)


def test_cancel_request_reaches_the_task() -> None:
    """
    ``$/cancel_request`` (the client cancels its prompt Deferred) cancels the task too:
    the handler sees ``asyncio.CancelledError``.
    """

    async def main() -> None:
        pair, agent, _client = await started_pair()
        d = prompt(pair)
        await settle(pair, agent.started.is_set)
        d.cancel()
        failure = await outcome(pair, d)
        assert isinstance(failure, Failure) and failure.check(CancelledError)
        await settle(pair, lambda: len(agent.seen) == 2)
        assert agent.seen == ["task: True", "asyncio.CancelledError"]

    run(main)


class Lines:
    """A tracer keeping the JSON messages a connection received."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def sent(self, line: bytes) -> None:
        pass

    def received(self, line: bytes) -> None:
        self.messages.append(json.loads(line))


class SlowAgent(MixingAgent):
    """``authenticate`` waits on asyncio: a plain request, answered -32800 when cancelled."""

    async def authenticate(self, params: schema.AuthenticateRequest) -> Any:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.seen.append("asyncio.CancelledError")
            raise
        raise AssertionError("not reached")


def test_cancelled_request_answers_32800() -> None:
    """
    A cancelled asyncio task of a method without a cancelled result (``authenticate``)
    is answered -32800 once the handler has seen ``asyncio.CancelledError``.
    """

    async def main() -> None:
        agents: list[SlowAgent] = []
        pair = connected_pair(keeping(SlowAgent, agents), Client())
        lines = Lines()
        pair.client.protocol.tracer = lines
        await outcome(pair, pair.client.initialize())
        d = pair.client.authenticate(schema.AuthenticateRequest(method_id="m"))
        await settle(pair, lambda: bool(agents) and agents[0].started.is_set())
        d.cancel()  # sends $/cancel_request
        failure = await outcome(pair, d)
        assert isinstance(failure, Failure) and failure.check(CancelledError)
        await settle(pair, lambda: len(lines.messages) == 2)
        assert lines.messages[1]["error"]["code"] == -32800
        assert agents[0].seen == ["asyncio.CancelledError"]

    run(main)


def test_awaitable_results_run_as_tasks() -> None:
    """A handler returning another awaitable (an asyncio future) is awaited in a task."""

    class FutureAgent(MixingAgent):
        def new_session(self, params: schema.NewSessionRequest) -> Awaitable[Any]:
            future = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(
                future.set_result, schema.NewSessionResponse(session_id="f1")
            )
            return future

    async def main() -> None:
        pair = connected_pair(FutureAgent, Client())
        await outcome(pair, pair.client.initialize())
        result = await outcome(
            pair, pair.client.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))
        )
        assert result == schema.NewSessionResponse(session_id="f1")

    run(main)


def test_without_a_loop_handlers_run_as_today() -> None:
    """
    Without a running loop (the default reactor) a coroutine handler runs at once through
    ``Deferred.fromCoroutine``: a handler that awaits nothing has answered when the
    request has been delivered, and asyncio is not available in it.
    """

    class Plain(MixingAgent):
        async def new_session(self, params: schema.NewSessionRequest) -> Any:
            self.seen.append(f"task: {_current_task()}")
            return schema.NewSessionResponse(session_id="p1")

    agents: list[Plain] = []
    pair = connected_pair(keeping(Plain, agents), Client())
    pair.result(pair.client.initialize())
    d = pair.client.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))
    pair.pump()
    assert d.called
    assert pair.result(d) == schema.NewSessionResponse(session_id="p1")
    assert agents[0].seen == ["task: no running event loop"]


def _current_task() -> str:
    try:
        return str(asyncio.current_task() is not None)
    except RuntimeError as e:
        return str(e)


@pytest.mark.parametrize("awaited", ["session/cancel", "$/cancel_request"])
def test_cancelling_cancels_what_the_handler_awaits(awaited: str) -> None:
    """
    Cancelling the handler (either way) cancels the Deferred it awaits, as
    ``fromCoroutine`` does: the agent's pending ``session/request_permission`` is
    cancelled with ``$/cancel_request``.
    """

    class Asking(MixingAgent):
        async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
            self.started.set()
            try:
                await self.conn.request_permission(
                    schema.RequestPermissionRequest(
                        session_id=params.session_id,
                        tool_call=schema.ToolCallUpdate(tool_call_id="c1"),
                        options=[],
                    )
                )
            except asyncio.CancelledError:
                self.seen.append("asyncio.CancelledError")
                raise
            return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)

    async def main() -> None:
        agents: list[Asking] = []
        client = Recorder()
        pair = connected_pair(keeping(Asking, agents), client)
        lines = Lines()
        pair.client.protocol.tracer = lines
        await outcome(pair, pair.client.initialize())
        await outcome(
            pair, pair.client.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))
        )
        d = prompt(pair)
        await settle(pair, lambda: client.permission is not None)
        asked = lines.messages[-1]
        assert asked["method"] == "session/request_permission"
        if awaited == "session/cancel":
            pair.client.cancel("s1")
        else:
            d.cancel()
        await outcome(pair, d)
        await settle(pair, lambda: agents[0].seen == ["asyncio.CancelledError"])
        cancels = [m for m in lines.messages if m.get("method") == "$/cancel_request"]
        assert cancels == [
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": asked["id"]}}
        ]

    run(main)


class SlowSessions(MixingAgent):
    """``session/new`` waits on asyncio until cancelled."""

    async def new_session(self, params: schema.NewSessionRequest) -> Any:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.seen.append("asyncio.CancelledError")
            raise
        raise AssertionError("not reached")


def test_cancelled_client_task_withdraws_its_request() -> None:
    """
    A client task awaiting ``new_session()`` is cancelled: the request is withdrawn with
    ``$/cancel_request``, so the agent's handler is cancelled too.
    """

    async def main() -> None:
        agents: list[SlowSessions] = []
        pair = connected_pair(keeping(SlowSessions, agents), Client())
        await outcome(pair, pair.client.initialize())

        async def open_session() -> None:
            await pair.client.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))

        task = asyncio.get_running_loop().create_task(open_session())
        await settle(pair, agents[0].started.is_set)
        task.cancel()
        await settle(pair, lambda: agents[0].seen == ["asyncio.CancelledError"])
        assert task.cancelled()

    run(main)
