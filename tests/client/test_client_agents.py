"""Agent runs in real processes: start, handshake, state changes, death, stop."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import reactor
from twisted.trial.unittest import TestCase
from zope.interface import implementer

from acpkit_client.agents import AgentStartError, AgentState
from acpkit_client.config import AgentEntry
from acpkit_client.interfaces import IAgentObserver
from acpkit_client.session import AgentWindow, TurnError
from acpkit_client.status import agent_lines

REPO = Path(__file__).resolve().parent.parent.parent
TINY = str(REPO / "tests" / "fixtures" / "client" / "tiny_agent.py")


def entry(mode: str, **kwargs: Any) -> AgentEntry:
    return AgentEntry(
        name=f"tiny {mode}",
        command=sys.executable,
        args=(TINY, mode),
        env={"PYTHONPATH": str(REPO)},
        source="test",
        **kwargs,
    )


@implementer(IAgentObserver)
class States:
    def __init__(self) -> None:
        self.seen: list[AgentState] = []

    def agent_state_changed(self, run: Any) -> None:
        self.seen.append(run.state)


class AgentRunTests(TestCase):
    timeout = 30

    def setUp(self) -> None:
        self.root = Path(tempfile.mkdtemp())

    @pytest.mark.process
    async def test_start_prompt_stop(self) -> None:
        """A real agent starts in its cwd, answers a prompt, and stops; states are notified."""
        (self.root / "sub").mkdir()
        window = AgentWindow(entry("normal", cwd="sub"), str(self.root))
        states = States()
        window.run.subscribe(states)
        session_id = await window.start(reactor)
        self.assertEqual(session_id, "s1")
        self.assertEqual(window.run.cwd, str(self.root / "sub"))
        self.assertEqual(await window.send_prompt("hi"), "end_turn")
        await window.close()
        self.assertEqual(states.seen, [AgentState.STARTING, AgentState.READY, AgentState.STOPPED])
        self.assertEqual(window.run.problems, [])

    @pytest.mark.process
    async def test_death_is_reported_with_exit_status_and_stderr(self) -> None:
        """An agent dying mid-turn fails the turn; status shows exit status and stderr tail."""
        window = AgentWindow(entry("crash"), str(self.root))
        await window.start(reactor)
        with self.assertRaises(TurnError) as raised:
            await window.send_prompt("x")
        self.assertIn("exited with status 3", str(raised.exception))
        await window.run.process.exited  # type: ignore[union-attr]
        self.assertIs(window.run.state, AgentState.EXITED)
        text = "\n".join(agent_lines(window.run, window.conversation))
        self.assertIn('failed: agent "tiny crash" exited with status 3', text)
        self.assertIn("tiny: something broke", text)
        await window.close()

    @pytest.mark.process
    async def test_unknown_version_closes_and_reports(self) -> None:
        """A real agent answering protocol version 99 is refused; the status says why."""
        window = AgentWindow(entry("version"), str(self.root))
        with self.assertRaises(AgentStartError):
            await window.start(reactor)
        self.assertIn("protocol version 99", window.run.problems[0])
        await window.close()

    async def test_missing_command_and_bad_cwd(self) -> None:
        """A missing command, or a cwd that is not a directory, is a clear start failure."""
        missing = AgentEntry(name="m", command="./nope", source="test")
        window = AgentWindow(missing, str(self.root))
        with self.assertRaises(AgentStartError) as raised:
            await window.start(reactor)
        self.assertIn('"./nope" does not exist or is not executable', str(raised.exception))
        bad_cwd = AgentWindow(entry("normal", cwd="missing-dir"), str(self.root))
        with self.assertRaises(AgentStartError) as raised:
            await bad_cwd.start(reactor)
        self.assertIn("not a directory", str(raised.exception))
