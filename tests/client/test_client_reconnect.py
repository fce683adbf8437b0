"""
The reference client carries on when a remote agent's connection is lost: its window
(``AgentWindow``, a ``url`` entry) makes the connection again and loads its session
again (``acpkit.remote.reconnect``), telling the user through its state
(``reconnecting``, then ``ready``) and notes; a turn that was running is reported
interrupted; the replayed history does not enter the conversation twice.  Against a
real remote ACP server on loopback (``serve_remote``) whose connections are ended.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from acpkit import schema
from acpkit.connection import Agent, AgentConnection
from acpkit.remote.server import serve_remote
from acpkit_client.agents import AgentState
from acpkit_client.config import parse_agents_text
from acpkit_client.conversation import EntryKind
from acpkit_client.session import AgentWindow, TurnError

TOKEN = "reconnect-test-token"


async def until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await deferLater(reactor, 0.02, lambda: None)


class Loadable(Agent):
    """An agent whose sessions outlive its connections: ``wait`` turns never end."""

    loads: list[str] = []

    def __init__(self, conn: AgentConnection) -> None:
        self.conn = conn

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=1,
            agent_capabilities=schema.AgentCapabilities(load_session=True),
        )

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id="kept")

    async def load_session(self, params: schema.LoadSessionRequest) -> schema.LoadSessionResponse:
        Loadable.loads.append(params.session_id)
        history = schema.AgentMessageChunk(content=schema.TextContentBlock(text="old answer"))
        await self.conn.session_update(params.session_id, history)
        return schema.LoadSessionResponse()

    async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        block = params.prompt[0]
        assert isinstance(block, schema.TextContentBlock)
        if block.text == "wait":
            await Deferred()
        chunk = schema.AgentMessageChunk(content=schema.TextContentBlock(text=f"re: {block.text}"))
        await self.conn.session_update(params.session_id, chunk)
        return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)


class ClientReconnectTests(TestCase):
    timeout = 60

    async def setUp(self) -> None:  # type: ignore[override]
        Loadable.loads = []
        self.port: Any = await serve_remote(reactor, "tcp:0", Loadable, token=TOKEN)
        self.addCleanup(self.port.stopListening)
        address: Any = self.port.getHost()
        url = f"http://127.0.0.1:{address.port}/acp"
        root = Path(self.mktemp()).resolve()
        root.mkdir(parents=True)
        (entry,) = parse_agents_text(
            "/x/acp.toml",
            f'[[agent]]\nname = "far"\nurl = "{url}"\n'
            f'headers = {{ Authorization = "Bearer {TOKEN}" }}\n',
        )
        self.window = AgentWindow(entry, str(root))
        self.addCleanup(self.window.close)
        self.assertEqual(await self.window.start(reactor), "kept")
        self.states: list[AgentState] = []
        window = self

        class Watch:
            def agent_state_changed(self, run: Any) -> None:
                window.states.append(run.state)

        self.window.run.subscribe(Watch())  # type: ignore[arg-type]

    def drop_every_connection(self) -> None:
        """Every event stream is cut (an instance killed, a balancer's cut)."""
        for connection in list(self.port.factory.acp.connections.values()):
            connection.stream.channel.transport.abortConnection()

    async def test_a_lost_connection_is_made_again_and_the_session_loaded(self) -> None:
        """
        The connection ends: the window says reconnecting, then ready, with a note for
        each; the session was loaded again (its replay not added to the conversation)
        and the next turn is answered on the new connection.
        """
        first = self.window.run.connection
        self.drop_every_connection()
        await until(lambda: AgentState.READY in self.states, "the window to be ready again")
        self.assertEqual(self.states, [AgentState.RECONNECTING, AgentState.READY])
        self.assertEqual(Loadable.loads, ["kept"])
        notes = self.window.run.notes
        self.assertIn("was lost", notes[0])
        self.assertIn("reconnecting", notes[0])
        self.assertIn("reconnected to", notes[1])
        self.assertIn("session kept loaded again", notes[1])
        self.assertIsNot(self.window.run.connection, first)
        self.assertEqual(await self.window.send_prompt("hello"), "end_turn")
        texts = [entry.text for entry in self.window.conversation.entries]
        self.assertNotIn("old answer", "".join(texts))  # the replay is history, not news
        agent = [e for e in self.window.conversation.entries if e.kind is EntryKind.AGENT]
        self.assertEqual([e.text for e in agent], ["re: hello"])

    async def test_a_running_turn_is_reported_interrupted(self) -> None:
        """A turn running when the connection ends fails with 'interrupted', never silently;
        the window then carries on."""
        turn = self.window.send_prompt("wait")
        await until(lambda: self.window.turn_running, "the turn to run")
        await deferLater(reactor, 0.1, lambda: None)
        self.drop_every_connection()
        with self.assertRaises(TurnError) as interrupted:
            await turn
        self.assertIn("the turn was interrupted", str(interrupted.exception))
        self.assertIn("interrupted", self.window.conversation.last_stop or "")
        await until(lambda: self.window.run.state is AgentState.READY, "the window to be ready")
        self.assertEqual(await self.window.send_prompt("again"), "end_turn")


def test_the_client_retries_longer_than_a_server_keeps_a_cut_connection() -> None:
    """
    RECONNECT_POLICY's attempts span more than a server's grace period even with the
    most jitter: a connection cut while its process lives lets its session go (the
    grace period) before the reference client gives up loading it.
    """
    from acpkit.remote.server import RemoteLimits
    from acpkit_client.agents import RECONNECT_POLICY

    shortest = sum(RECONNECT_POLICY.delay(n, 1.0) for n in range(2, RECONNECT_POLICY.attempts + 1))
    assert shortest > RemoteLimits().grace_period
