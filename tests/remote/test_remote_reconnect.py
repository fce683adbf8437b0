"""
``acpkit.remote.reconnect``: a connection that comes back, on a ``task.Clock`` with
in-memory connections (``acpkit.testing.pair``): a lost connection is made again and
its sessions loaded, a turn in flight is reported interrupted (never answered, never
lost silently), ``attachedElsewhere`` refusals are retried with bounded backoff, and the
resume gives up after the policy's attempts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.task import Clock
from zope.interface import implementer

from acpkit import schema
from acpkit.connection import Agent, AgentConnection, Client, ClientConnection
from acpkit.errors import RPCError
from acpkit.remote.reconnect import (
    IReconnectObserver,
    ReconnectFailed,
    ResumableConnection,
    RetryPolicy,
    TurnInterrupted,
    attached_elsewhere,
)
from acpkit.testing.pair import ConnectedPair, connected_pair

ELSEWHERE = RPCError(-32002, "attached elsewhere", {"reason": "attachedElsewhere"})
GONE = RPCError(-32002, "no such session", {"sessionId": "x"})


@attrs.define
class World:
    """The agent instances behind one URL, on one clock."""

    clock: Clock = attrs.Factory(Clock)
    load_session: bool = True
    #: Connections refused before one is made (each connect() takes one).
    refuse_connects: int = 0
    #: What the next session/load calls raise, in order (then they succeed).
    load_errors: list[RPCError] = attrs.Factory(list)
    #: Set: initialize is never answered.
    hang_initialize: bool = False
    pairs: list[ConnectedPair] = attrs.Factory(list)
    loads: list[str] = attrs.Factory(list)
    prompts: list[str] = attrs.Factory(list)
    next_id: int = 0

    def connect(self, client: Client) -> Deferred[ClientConnection]:
        if self.refuse_connects:
            self.refuse_connects -= 1
            return fail(ConnectionRefusedError("127.0.0.1:1"))
        p = connected_pair(lambda conn: Instance(conn, self), client, clock=self.clock)
        self.pairs.append(p)
        return succeed(p.client)

    def settle(self) -> None:
        """Move every byte and run every due call until nothing changes."""
        for _ in range(1000):
            for p in self.pairs:
                p.pump()
            if (
                not self.clock.getDelayedCalls()
                or min(c.getTime() for c in self.clock.getDelayedCalls()) > self.clock.seconds()
            ):
                break
            self.clock.advance(0)
        for p in self.pairs:
            p.pump()

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass in small steps, settling after each."""
        target = self.clock.seconds() + seconds
        while self.clock.seconds() < target:
            self.clock.advance(min(0.05, target - self.clock.seconds()))
            self.settle()

    def drop(self, p: ConnectedPair | None = None) -> None:
        """The last connection (or ``p``) is lost (its instance died)."""
        p = p if p is not None else self.pairs[-1]
        p.agent_transport.loseConnection()
        p.pump()

    def result(self, d: Deferred[Any]) -> Any:
        self.settle()
        out: list[Any] = []
        d.addBoth(out.append)
        assert out, f"{d!r} has not fired"
        value = out[0]
        if hasattr(value, "raiseException"):
            value.raiseException()
        return value


class Instance(Agent):
    """One agent instance's connection: sessions, loads (with the world's refusals), turns."""

    def __init__(self, conn: AgentConnection, world: World) -> None:
        self.conn = conn
        self.world = world

    def initialize(self, params: schema.InitializeRequest) -> Any:
        if self.world.hang_initialize:
            return Deferred()
        return schema.InitializeResponse(
            protocol_version=1,
            agent_capabilities=schema.AgentCapabilities(load_session=self.world.load_session),
        )

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        self.world.next_id += 1
        return schema.NewSessionResponse(session_id=f"s{self.world.next_id}")

    async def load_session(self, params: schema.LoadSessionRequest) -> schema.LoadSessionResponse:
        self.world.loads.append(params.session_id)
        if self.world.load_errors:
            raise self.world.load_errors.pop(0)
        replay = schema.UserMessageChunk(content=schema.TextContentBlock(text="history"))
        await self.conn.session_update(params.session_id, replay)
        return schema.LoadSessionResponse()

    async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        block = params.prompt[0]
        assert isinstance(block, schema.TextContentBlock)
        self.world.prompts.append(block.text)
        if block.text == "hang":
            await Deferred()
        return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)


class Recording(Client):
    """Keeps each update and whether the resumable connection was replaying then."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, bool]] = []
        self.resumable: ResumableConnection | None = None

    def session_update(self, params: schema.SessionNotification) -> None:
        replaying = self.resumable.replaying if self.resumable is not None else False
        self.updates.append((type(params.update).__name__, replaying))


@implementer(IReconnectObserver)
class Events:
    """What the resumable connection told, in order."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []

    def connection_lost(self, reason: str) -> None:
        self.seen.append(("lost", reason))

    def retrying(self, attempt: int, attempts: int, delay: float, reason: str) -> None:
        self.seen.append(("retrying", attempt, attempts, round(delay, 6), reason))

    def resumed(self, session_ids: list[str]) -> None:
        self.seen.append(("resumed", session_ids))

    def session_lost(self, session_id: str, reason: str) -> None:
        self.seen.append(("session_lost", session_id, reason))

    def turn_interrupted(self, session_id: str, reason: str) -> None:
        self.seen.append(("interrupted", session_id))

    def gave_up(self, reason: str) -> None:
        self.seen.append(("gave_up", reason))

    def kinds(self) -> list[str]:
        return [str(event[0]) for event in self.seen]


POLICY = RetryPolicy(attempts=4, first_delay=1.0, factor=2.0, max_delay=3.0, jitter=0.5)


def resumable(
    world: World, policy: RetryPolicy = POLICY, draw: Callable[[], float] = lambda: 0.0
) -> tuple[ResumableConnection, Events, Recording]:
    client = Recording()
    events = Events()
    connection = ResumableConnection(
        lambda: world.connect(client),
        clock=world.clock,
        policy=policy,
        observer=events,
        random=draw,
    )
    client.resumable = connection
    return connection, events, client


def text(words: str) -> list[schema.ContentBlock]:
    return [schema.TextContentBlock(text=words)]


def opened(world: World, **kwargs: Any) -> tuple[ResumableConnection, Events, Recording, str]:
    connection, events, client = resumable(world, **kwargs)
    world.result(Deferred.fromCoroutine(connection.open()))
    new = schema.NewSessionRequest(cwd="/work", mcp_servers=[])
    sid = world.result(Deferred.fromCoroutine(connection.new_session(new))).session_id
    return connection, events, client, sid


def prompt(connection: ResumableConnection, sid: str, words: str) -> Deferred[Any]:
    request = schema.PromptRequest(session_id=sid, prompt=text(words))
    return Deferred.fromCoroutine(connection.prompt(request))


def test_a_turn_in_flight_is_interrupted_and_the_session_loaded_again() -> None:
    """
    The instance dies mid-turn: the turn fails with TurnInterrupted (not answered, not
    silent), a new connection is made at once, the session loaded on it, and the next
    turn goes there; the observer heard lost, interrupted, resumed.
    """
    world = World()
    connection, events, _, sid = opened(world)
    first = world.pairs[0].client
    running = prompt(connection, sid, "hang")
    world.settle()
    world.drop()
    with pytest.raises(TurnInterrupted) as interrupted:
        world.result(running)
    assert interrupted.value.session_id == sid
    world.settle()
    assert world.loads == [sid]
    assert connection.connection is not None and connection.connection is not first
    assert world.result(prompt(connection, sid, "again")).stop_reason == "end_turn"
    assert world.prompts == ["hang", "again"]
    assert sorted(events.kinds()) == sorted(["lost", "interrupted", "retrying", "resumed"])
    assert ("resumed", [sid]) in events.seen
    assert connection.resumes == 1


def test_the_replay_of_a_resume_is_marked() -> None:
    """The updates a resume's session/load replays arrive while ``replaying`` is true."""
    world = World()
    connection, _, client, _sid = opened(world)
    world.drop()
    world.settle()
    assert client.updates == [("UserMessageChunk", True)]
    assert not connection.replaying


def test_attached_elsewhere_is_retried_with_growing_delays() -> None:
    """
    Two loads refused attachedElsewhere (the dying instance still holds the session):
    retried after 1 s then 2 s (the refused connections closed), then resumed.
    """
    world = World(load_errors=[ELSEWHERE, ELSEWHERE])
    connection, events, _, sid = opened(world)
    world.drop()
    world.settle()
    assert [e[:4] for e in events.seen if e[0] == "retrying"] == [
        ("retrying", 1, 4, 0.0),
        ("retrying", 2, 4, 1.0),
    ]
    world.advance(1.0)
    assert world.loads == [sid, sid]
    assert connection.connection is None
    world.advance(2.0)
    assert world.loads == [sid, sid, sid]
    assert connection.connection is not None
    assert events.kinds()[-1] == "resumed"
    # each refused attempt's connection was closed, not left open
    assert [p.client.closed_reason is not None for p in world.pairs] == [True, True, True, False]


def test_waiting_calls_go_on_once_resumed() -> None:
    """A prompt sent while the resume waits for its next attempt goes out once resumed."""
    world = World(load_errors=[ELSEWHERE])
    connection, _, _, sid = opened(world)
    world.drop()
    world.settle()
    waiting = prompt(connection, sid, "queued")
    world.settle()
    assert not waiting.called and world.prompts == []
    world.advance(1.0)
    assert world.result(waiting).stop_reason == "end_turn"
    assert world.prompts == ["queued"]


def test_the_resume_gives_up_after_its_attempts_within_its_bound() -> None:
    """
    Nothing answers: 4 attempts (at once, then after 1, 2 and 3 s: the delays capped at
    max_delay), then gave_up; waiting and later calls fail with ReconnectFailed.
    """
    world = World()
    connection, events, _, sid = opened(world)
    world.refuse_connects = 100
    world.drop()
    world.settle()
    waiting = prompt(connection, sid, "never sent")
    started = world.clock.seconds()
    world.advance(POLICY.longest_wait() + 1)
    assert POLICY.longest_wait() == 6.0
    assert [e[1] for e in events.seen if e[0] == "retrying"] == [1, 2, 3, 4]
    assert events.kinds()[-1] == "gave_up"
    assert "4 attempts failed" in events.seen[-1][1]
    assert "Connection was refused" in events.seen[-1][1]
    with pytest.raises(ReconnectFailed):
        world.result(waiting)
    assert world.clock.seconds() - started <= POLICY.longest_wait() + 1
    with pytest.raises(ReconnectFailed):
        world.result(prompt(connection, sid, "later"))
    assert world.prompts == []


def test_a_session_that_is_gone_is_dropped_and_the_others_resumed() -> None:
    """A load refused for another reason: session_lost for it, the other one resumed."""
    world = World()
    connection, events, _, first = opened(world)
    new = schema.NewSessionRequest(cwd="/work", mcp_servers=[])
    second = world.result(Deferred.fromCoroutine(connection.new_session(new))).session_id
    world.load_errors = [GONE]
    world.drop()
    world.settle()
    assert ("session_lost", first, "no such session (code -32002)") in events.seen
    assert ("resumed", [second]) in events.seen
    assert connection.session_ids == [second]


def test_an_agent_without_session_load_is_not_resumed() -> None:
    """No loadSession advertised: the loss is told, then gave_up, with no attempt."""
    world = World(load_session=False)
    _connection, events, _, _sid = opened(world)
    world.drop()
    world.settle()
    assert events.kinds() == ["lost", "gave_up"]
    assert "no session/load" in events.seen[-1][1]
    assert len(world.pairs) == 1


def test_a_step_not_answered_in_time_is_an_attempt_that_failed() -> None:
    """initialize never answered: after step_timeout the attempt is given up and retried."""
    policy = RetryPolicy(attempts=2, first_delay=1.0, step_timeout=5.0)
    world = World()
    _connection, events, _, _sid = opened(world, policy=policy)
    world.hang_initialize = True
    world.drop()
    world.advance(5.1)
    assert ("retrying", 2, 2, 1.0, "no answer in time") in events.seen
    world.hang_initialize = False
    world.advance(1.0)
    assert events.kinds()[-1] == "resumed"


def test_close_stops_everything() -> None:
    """close(): the connection ends, no resume, calls fail with ReconnectFailed."""
    world = World()
    connection, events, _, sid = opened(world)
    world.result(connection.close())
    world.settle()
    assert events.seen == []
    assert len(world.pairs) == 1
    with pytest.raises(ReconnectFailed, match="closed"):
        world.result(prompt(connection, sid, "after"))


def test_close_during_a_resume_stops_it() -> None:
    """close() while the resume waits between attempts: no further attempt."""
    world = World(load_errors=[ELSEWHERE])
    connection, events, _, _sid = opened(world)
    world.drop()
    world.settle()
    connection.close()
    world.advance(10)
    assert len(world.pairs) == 2
    assert events.kinds()[-1] == "retrying"


def test_open_retries_the_first_connection() -> None:
    """The first connection is refused twice (a balancer with no instance up yet): retried."""
    world = World(refuse_connects=2)
    connection, events, _ = resumable(world)
    opening = Deferred.fromCoroutine(connection.open())
    world.advance(3.0)
    assert world.result(opening).protocol_version == 1
    assert [e[1] for e in events.seen if e[0] == "retrying"] == [2, 3]


def test_attached_elsewhere_is_recognized() -> None:
    """Only -32002 with data.reason attachedElsewhere is worth retrying."""
    assert attached_elsewhere(ELSEWHERE)
    assert not attached_elsewhere(GONE)
    assert not attached_elsewhere(RPCError(-32603, "x", {"reason": "attachedElsewhere"}))
    assert not attached_elsewhere(ValueError("attachedElsewhere"))


@given(
    attempt=st.integers(min_value=1, max_value=60),
    draw=st.floats(min_value=0.0, max_value=1.0),
)
def test_delays_grow_and_stay_bounded(attempt: int, draw: float) -> None:
    """Every delay is within [max(0, 1 - jitter) x base, base], base <= max_delay; the first 0."""
    policy = RetryPolicy(first_delay=0.25, factor=2.0, max_delay=10.0, jitter=0.5)
    delay = policy.delay(attempt, draw)
    if attempt == 1:
        assert delay == 0.0
        return
    base = min(10.0, 0.25 * 2.0 ** (attempt - 2))
    assert base * 0.5 - 1e-9 <= delay <= base + 1e-9
    assert policy.delay(attempt + 1, 0.0) >= policy.delay(attempt, 0.0)


@pytest.mark.parametrize(
    ("field", "value"),
    [("attempts", 0), ("first_delay", 0.0), ("factor", 0.5), ("jitter", 1.0), ("step_timeout", -1)],
)
def test_a_bad_policy_is_refused(field: str, value: Any) -> None:
    """A policy that could not end or could not wait is a ValueError naming the field."""
    with pytest.raises(ValueError, match=field):
        RetryPolicy(**{field: value})


def test_connect_resumable_gives_up_at_once_on_a_url_that_cannot_work() -> None:
    """``connect_resumable`` with a bad URL: open() fails with ReconnectFailed saying why,
    without retrying (no attempt could work)."""
    from acpkit.remote.connect import connect_resumable

    clock = Clock()
    events = Events()
    connection = connect_resumable(clock, "ftp://host/acp", Client(), observer=events)
    opening = Deferred.fromCoroutine(connection.open())
    clock.advance(0)
    failures: list[Any] = []
    opening.addErrback(failures.append)
    assert failures and failures[0].check(ReconnectFailed)
    assert "ws://, wss://, http:// or https://" in str(failures[0].value)
    assert events.kinds() == ["gave_up"]


def test_a_turn_sent_again_at_once_waits_for_the_resume() -> None:
    """
    The client sends the interrupted turn again from its error handler, before the
    engine has reported the end: it is not sent to the dead connection (interrupted
    again) but waits, and is answered once resumed.
    """
    world = World()
    connection, _, _, sid = opened(world)
    running = prompt(connection, sid, "hang")
    again: list[Deferred[Any]] = []

    def resend(failure: Any) -> None:
        failure.trap(TurnInterrupted)
        again.append(prompt(connection, sid, "again"))

    running.addErrback(resend)
    world.settle()
    world.drop()
    world.settle()
    assert len(again) == 1
    assert world.result(again[0]).stop_reason == "end_turn"
    assert world.prompts == ["hang", "again"]


def test_a_prompt_that_never_reached_the_agent_is_sent_again() -> None:
    """
    The prompt's POST was refused 404 (NotDelivered: the instance had just ended the
    connection, e.g. draining): it is not reported interrupted but sent again once the
    connection is resumed, and runs once.
    """
    import json

    from acpkit.errors import NotDelivered

    world = World()
    connection, events, _, sid = opened(world)
    first = world.pairs[-1]
    sent = prompt(connection, sid, "only once")
    written = first.client_transport.value()
    first.client_transport.clear()  # never delivered to the agent
    request_id = json.loads(written.splitlines()[-1])["id"]
    assert first.client.protocol.fail_outgoing(request_id, NotDelivered("404: unknown connection"))
    world.drop(first)
    assert world.result(sent).stop_reason == "end_turn"
    assert world.prompts == ["only once"]
    assert "interrupted" not in events.kinds()
    assert events.kinds().count("resumed") == 1


def test_a_prompt_whose_post_failed_at_a_gateway_is_interrupted() -> None:
    """
    The prompt's POST answered 502 by a balancer (the instance died mid-answer: it may
    have run the turn): TurnInterrupted; the suspect connection is closed (so a live
    instance lets the session go) and resumed.  The agent's own errors stay errors.
    """
    import json

    from acpkit.http.transport import HTTP_TRANSPORT_ERROR

    world = World()
    connection, events, _, sid = opened(world)
    first = world.pairs[-1]
    sent = prompt(connection, sid, "maybe ran")
    request_id = json.loads(first.client_transport.value().splitlines()[-1])["id"]
    first.client_transport.clear()
    bad_gateway = RPCError(HTTP_TRANSPORT_ERROR, "HTTP 502", {"status": 502})
    first.client.protocol.fail_outgoing(request_id, bad_gateway)
    with pytest.raises(TurnInterrupted, match="HTTP 502"):
        world.result(sent)
    world.settle()
    assert first.client.closed_reason is not None  # closed by us: the agent saw it end
    assert events.kinds()[-1] == "resumed"
    refused = RPCError(HTTP_TRANSPORT_ERROR, "HTTP 413", {"status": 413})
    second = world.pairs[-1]
    sent = prompt(connection, sid, "too big")
    request_id = json.loads(second.client_transport.value().splitlines()[-1])["id"]
    second.client_transport.clear()
    second.client.protocol.fail_outgoing(request_id, refused)
    with pytest.raises(RPCError, match="HTTP 413"):
        world.result(sent)
    assert connection.connection is second.client


def test_an_adopted_connection_is_resumed_with_its_tracked_sessions() -> None:
    """
    A connection made and initialized elsewhere (adopt) with a session opened
    elsewhere (track_session): lost, it is made again, initialized with the same
    arguments, and the session loaded.
    """
    world = World()
    client = Recording()
    events = Events()
    first = world.result(world.connect(client))
    info = schema.Implementation(name="editor", version="1")
    answer = world.result(first.initialize(client_info=info))
    sid = world.result(
        first.new_session(schema.NewSessionRequest(cwd="/w", mcp_servers=[]))
    ).session_id
    connection = ResumableConnection(
        lambda: world.connect(client), clock=world.clock, policy=POLICY, observer=events
    )
    connection.adopt(first, answer, client_info=info)
    connection.track_session(sid, "/w")
    assert connection.connection is first
    world.drop()
    world.settle()
    assert events.kinds()[-1] == "resumed"
    assert world.loads == [sid]
    assert world.result(prompt(connection, sid, "after")).stop_reason == "end_turn"
    with pytest.raises(RuntimeError):
        connection.adopt(world.pairs[0].client, answer)
