"""
bob's SIGTERM with ``--listen``: drain, then exit (:mod:`acpkit_agent.draining`).  The
drain's logic on a ``Clock`` with a recording target; the raw listener's connections in
memory; then real bobs: a turn running at SIGTERM is answered ``end_turn`` while new
connections and the health check get ``503``; past ``--drain-timeout`` the turn is
cancelled and its command ended; nothing is left running.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import treq
from twisted.internet import reactor
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock, deferLater
from twisted.trial.unittest import TestCase

from acpkit import schema
from acpkit.connection import Agent, AgentConnection, Client, ClientConnection
from acpkit.remote.connect import connect_remote
from acpkit.testing.pair import connected_pair
from acpkit_agent.draining import LINGER, Drain, RawConnections
from tests.listening_bob import ListeningBob, start_bob
from tests.remote.test_attack_soak import alive, descendants_of


class Target:
    """A drainable that records what the drain asked of it."""

    def __init__(self) -> None:
        self.drained: Deferred[None] = Deferred()
        self.calls: list[str] = []
        self.open = 3

    def start_draining(self) -> Deferred[None]:
        self.calls.append("start_draining")
        return self.drained

    def close_all(self) -> None:
        self.calls.append("close_all")
        self.open = 0

    def open_connections(self) -> int:
        return self.open


def drain_on_clock(timeout: float = 30.0) -> tuple[Drain, Target, list[str], Clock]:
    clock = Clock()
    target = Target()
    stops: list[str] = []
    drain = Drain(
        clock,
        target,
        timeout,
        stop=lambda: stops.append("stop"),
        stop_listening=lambda: stops.append("stop_listening"),
    )
    return drain, target, stops, clock


def test_the_drain_stops_once_every_connection_ended() -> None:
    """
    begin: listening stops, the target drains; once drained, the reactor is stopped
    LINGER seconds later (requests already on their way get an answer).
    """
    drain, target, stops, clock = drain_on_clock()
    drain.begin()
    assert stops == ["stop_listening"] and target.calls == ["start_draining"]
    clock.advance(10)
    assert stops == ["stop_listening"]
    target.drained.callback(None)
    assert stops == ["stop_listening"]  # still answering, for LINGER seconds
    clock.advance(LINGER)
    assert stops == ["stop_listening", "stop"]
    clock.advance(30)  # the bound is gone with the drain
    assert stops == ["stop_listening", "stop"]


def test_the_drain_is_bounded_by_its_timeout() -> None:
    """Past the timeout, what is left is closed (turns cancelled) and the reactor stopped."""
    drain, target, stops, clock = drain_on_clock(timeout=5)
    drain.begin()
    clock.advance(4.9)
    assert "stop" not in stops
    clock.advance(0.2)
    assert target.calls == ["start_draining", "close_all"]
    assert stops[-1] == "stop"
    target.drained.callback(None)  # the connections ending then change nothing
    assert stops.count("stop") == 1


def test_a_second_sigterm_stops_now() -> None:
    """begin again while draining: closed and stopped at once, once."""
    drain, target, stops, _clock = drain_on_clock()
    drain.begin()
    drain.begin()
    assert target.calls == ["start_draining", "close_all"]
    assert stops == ["stop_listening", "stop"]
    drain.begin()
    assert stops == ["stop_listening", "stop"]


class Waiting(Agent):
    """An agent whose turns wait for ``release``."""

    def __init__(self, conn: AgentConnection) -> None:
        self.conn = conn
        self.release: Deferred[None] = Deferred()

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(protocol_version=1)

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id="s")

    async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        await self.release
        return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)


def test_raw_connections_end_once_their_turns_are_answered() -> None:
    """
    A raw listener's connections: the idle one is closed at once, the busy one once its
    running turn is answered (end_turn, not cancelled); the drain then fires.
    """
    clock = Clock()
    connections = RawConnections()
    pairs = []
    agents: list[Waiting] = []
    for _ in range(2):

        def make(conn: AgentConnection) -> Waiting:
            agent = Waiting(conn)
            agents.append(agent)
            return agent

        p = connected_pair(make, Client(), clock=clock)
        connections.add(p.agent)
        p.result(p.client.initialize())
        pairs.append(p)
    busy = pairs[0]
    sid = busy.result(busy.client.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[])))
    turn = busy.client.prompt(
        schema.PromptRequest(session_id=sid.session_id, prompt=[schema.TextContentBlock(text="x")])
    )
    busy.pump()
    drained = connections.start_draining()
    for p in pairs:
        p.pump()
    clock.advance(0)
    assert connections.open_connections() == 1
    assert not drained.called
    agents[0].release.callback(None)
    busy.pump()
    clock.advance(0)
    busy.pump()
    assert busy.result(turn).stop_reason == schema.StopReason.END_TURN
    assert drained.called
    assert connections.open_connections() == 0


# -- real bobs ------------------------------------------------------------------------------


async def until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Let the reactor turn until ``predicate()``; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await deferLater(reactor, 0.05, lambda: None)


def health_url(bob: ListeningBob) -> str:
    return f"http://127.0.0.1:{bob.port}/healthz"


async def status_of(url: str, **kwargs: Any) -> int:
    method = kwargs.pop("method", "GET")
    response = await treq.request(method, url, persistent=False, **kwargs)
    await treq.content(response)
    return int(response.code)


class Turns(Client):
    """A client that keeps the agent's text."""

    def __init__(self) -> None:
        self.text: list[str] = []

    def session_update(self, params: schema.SessionNotification) -> None:
        update = params.update
        if isinstance(update, schema.AgentMessageChunk) and isinstance(
            update.content, schema.TextContentBlock
        ):
            self.text.append(update.content.text)


@pytest.mark.process
class DrainProcessTests(TestCase):
    timeout = 120

    async def _running_turn(self, tmp: Path, *args: str) -> tuple[ListeningBob, Any, Any]:
        bob = start_bob(tmp, "--listen", "http:tcp:0", *args)
        self.addCleanup(bob.stop)
        assert bob.port is not None and bob.token is not None, bob.stderr()
        self.assertEqual(await status_of(health_url(bob)), 200)
        conn: ClientConnection = await connect_remote(
            reactor, bob.url, Turns(), headers=bob.headers()
        )
        self.addCleanup(conn.close)
        await conn.initialize(timeout=30)
        new = await conn.new_session(schema.NewSessionRequest(cwd=str(tmp), mcp_servers=[]))
        return bob, conn, new.session_id

    async def test_sigterm_lets_the_running_turn_finish(self) -> None:
        """
        SIGTERM while a turn runs a 3 s command: the health check and a new connection
        get 503 at once, the turn ends end_turn (its command ran to the end), bob exits
        0 by itself and leaves nothing running; its lines say it drained.
        """
        tmp = Path(self.mktemp()).resolve()
        tmp.mkdir(parents=True)
        bob, conn, sid = await self._running_turn(tmp)
        prompt: list[schema.ContentBlock] = [
            schema.TextContentBlock(text="run: sleep 3 && echo slept")
        ]
        turn = conn.prompt(schema.PromptRequest(session_id=sid, prompt=prompt), timeout=60)
        pid = bob.process.pid
        await until(lambda: bool(descendants_of(pid)), 30, "bob to run the command")
        children = descendants_of(pid)
        bob.process.send_signal(signal.SIGTERM)
        await until(lambda: "SIGTERM: draining" in bob.stderr(), 30, "the drain to start")
        self.assertEqual(await status_of(health_url(bob)), 503)
        init = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}'
        refused = await status_of(
            bob.url,
            method="POST",
            data=init,
            headers={**bob.headers(), "Content-Type": "application/json"},
        )
        self.assertEqual(refused, 503)
        answer = await turn
        self.assertEqual(answer.stop_reason, schema.StopReason.END_TURN)
        await until(lambda: bob.process.poll() is not None, 60, "bob to exit")
        self.assertEqual(bob.process.returncode, 0, bob.stderr())
        self.assertFalse(any(alive(c) for c in children))
        said = bob.stderr()
        self.assertIn("drained: every connection ended; exiting", said)
        self.assertNotIn("Traceback", said)
        await conn.closed.addErrback(lambda _: None)

    async def test_the_drain_timeout_cancels_what_is_left(self) -> None:
        """
        --drain-timeout 1 and a turn running a 10-minute command: one second after
        SIGTERM the turn is answered cancelled, its command ended, bob exits.
        """
        tmp = Path(self.mktemp()).resolve()
        tmp.mkdir(parents=True)
        bob, conn, sid = await self._running_turn(tmp, "--drain-timeout", "1")
        prompt: list[schema.ContentBlock] = [schema.TextContentBlock(text="run: sleep 600")]
        turn = conn.prompt(schema.PromptRequest(session_id=sid, prompt=prompt), timeout=60)
        pid = bob.process.pid
        await until(lambda: bool(descendants_of(pid)), 30, "bob to run the command")
        children = descendants_of(pid)
        bob.process.send_signal(signal.SIGTERM)
        try:
            answer = await turn
        except Exception as error:  # the stream may end before the answer reaches us
            outcome = type(error).__name__
        else:
            outcome = str(answer.stop_reason)
        self.assertIn(outcome, ("cancelled", "ConnectionLost"))
        await until(lambda: bob.process.poll() is not None, 60, "bob to exit")
        await until(lambda: not any(alive(c) for c in children), 30, "the command to end")
        self.assertIn("drain timeout (1 s): closing 1 connection(s)", bob.stderr())

    async def test_drain_timeout_is_checked(self) -> None:
        """A --drain-timeout that is not a positive number: exit 1, one line naming it."""
        tmp = Path(self.mktemp()).resolve()
        tmp.mkdir(parents=True)
        bob = start_bob(tmp, "--listen", "http:tcp:0", "--drain-timeout", "soon", ready=False)
        status = bob.process.wait(60)
        await succeed(None)
        self.assertEqual(status, 1)
        self.assertIn("--drain-timeout soon: not a positive number of seconds", bob.stderr())
