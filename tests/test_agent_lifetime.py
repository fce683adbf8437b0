"""
bob's process lifetime, with real processes: stdin's end mid-turn cancels the turn and the
agent exits promptly; SIGTERM, SIGINT and SIGKILL mid-turn leave no tool process behind;
a background job (``cmd &``, ``(cmd &)``) does not hold the turn and dies with the agent.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile

import pytest
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase

from acpkit import schema
from acpkit.connection import ClientConnection
from acpkit.endpoints import AgentProcess, spawn_agent
from tests.fixtures.agent.harness import RecordingClient
from tests.test_agent_process import ENV, TWISTD, process_gone, wait_until

pytestmark = pytest.mark.process


def read_pid(path: str) -> int:
    """The pid a command wrote to ``path``."""
    with open(path) as stream:
        return int(stream.read())


class AgentLifetimeTests(TestCase):
    """``twistd -n acp-agent`` child processes running the echo engine's ``run:`` turns."""

    timeout = 60

    def setUp(self) -> None:
        self.cwd = os.path.realpath(tempfile.mkdtemp(prefix="bob-life-"))
        self.home = tempfile.mkdtemp(prefix="bob-life-home-")
        self.addCleanup(shutil.rmtree, self.cwd, True)
        self.addCleanup(shutil.rmtree, self.home, True)
        self.pids: list[int] = []
        self.addCleanup(self._kill_leftovers)

    def _kill_leftovers(self) -> None:
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def spawn(self) -> tuple[ClientConnection, AgentProcess, RecordingClient]:
        client = RecordingClient()
        conn = ClientConnection(client)
        agent = spawn_agent(
            reactor,
            conn.protocol,
            sys.executable,
            TWISTD,
            env={**ENV, "HOME": self.home},
            cwd=self.cwd,
        )
        self.addCleanup(agent.stop)
        return conn, agent, client

    async def start_turn(
        self, conn: ClientConnection, command: str
    ) -> tuple[Deferred[schema.PromptResponse], str]:
        """Open a session and prompt ``run: COMMAND``; ``$PIDFILE`` in it names a file."""
        await conn.initialize()
        session = await conn.new_session(schema.NewSessionRequest(cwd=self.cwd, mcp_servers=[]))
        pidfile = os.path.join(self.cwd, "job.pid")
        text = "run: " + command.replace("$PIDFILE", pidfile)
        prompt = conn.prompt(
            schema.PromptRequest(
                session_id=session.session_id, prompt=[schema.TextContentBlock(text=text)]
            )
        )
        return prompt, pidfile

    async def running_job(
        self, conn: ClientConnection
    ) -> tuple[Deferred[schema.PromptResponse], int]:
        """A turn whose bash command waits on a `sleep 600` child; the child's pid."""
        prompt, pidfile = await self.start_turn(
            conn, "sleep 600 & echo $! > $PIDFILE.tmp; mv $PIDFILE.tmp $PIDFILE; wait"
        )
        await wait_until(lambda: os.path.exists(pidfile))
        pid = read_pid(pidfile)
        self.pids.append(pid)
        assert not process_gone(pid)
        return prompt, pid

    async def test_stdin_end_mid_turn_cancels_and_exits(self) -> None:
        """stdin closed during a 600 s command: the turn is answered cancelled, the child
        is gone and the agent exits within seconds (not when the command ends)."""
        conn, agent, _ = self.spawn()
        prompt, pid = await self.running_job(conn)
        started = reactor.seconds()
        assert conn.protocol.transport is not None
        conn.protocol.transport.loseConnection()
        response = await prompt
        assert response.stop_reason == schema.StopReason.CANCELLED
        exited = await agent.exited
        elapsed = reactor.seconds() - started
        assert exited.exit_code == 0, exited
        assert elapsed < 10, f"the agent took {elapsed:.1f} s to exit"
        await wait_until(lambda: process_gone(pid), timeout=10)
        assert "stdin closed: running turns cancelled, exiting within 3 s" in agent.stderr_tail()

    async def test_sigterm_mid_turn_kills_the_command(self) -> None:
        """SIGTERM during a command: the agent exits and the command's child is gone."""
        conn, agent, _ = self.spawn()
        prompt, pid = await self.running_job(conn)
        prompt.addErrback(lambda _: None)
        assert agent.pid is not None
        os.kill(agent.pid, signal.SIGTERM)
        await agent.exited
        await wait_until(lambda: process_gone(pid), timeout=10)

    async def test_sigint_mid_turn_kills_the_command(self) -> None:
        """SIGINT (Ctrl-C) during a command: the agent exits and the command's child is gone."""
        conn, agent, _ = self.spawn()
        prompt, pid = await self.running_job(conn)
        prompt.addErrback(lambda _: None)
        assert agent.pid is not None
        os.kill(agent.pid, signal.SIGINT)
        await agent.exited
        await wait_until(lambda: process_gone(pid), timeout=10)

    async def test_sigkill_mid_turn_the_watchdog_kills_the_command(self) -> None:
        """SIGKILL of the agent alone (no shutdown runs): its watchdog kills the command."""
        conn, agent, _ = self.spawn()
        prompt, pid = await self.running_job(conn)
        prompt.addErrback(lambda _: None)
        assert agent.pid is not None
        os.kill(agent.pid, signal.SIGKILL)
        await agent.exited
        await wait_until(lambda: process_gone(pid), timeout=10)

    async def background_job(self, command: str) -> None:
        """The turn ends while ``command``'s job runs on; the job dies when the agent exits."""
        conn, agent, client = self.spawn()
        prompt, pidfile = await self.start_turn(conn, command)
        response = await prompt
        assert response.stop_reason == schema.StopReason.END_TURN
        pid = read_pid(pidfile)
        self.pids.append(pid)
        assert not process_gone(pid), "the job should still run after the turn"
        final = [u for u in client.tool_updates() if u.get("status") == "completed"]
        assert len(final) == 1, client.tool_updates()
        assert f"[still running in the background: pid {pid}; " in str(final[0])
        assert conn.protocol.transport is not None
        conn.protocol.transport.loseConnection()
        exited = await agent.exited
        assert exited.exit_code == 0, exited
        await wait_until(lambda: process_gone(pid), timeout=10)

    async def test_background_job_does_not_hold_the_turn(self) -> None:
        """`sleep 100 &` (holding the output pipe): the turn ends; the job dies with bob."""
        await self.background_job("sleep 100 & echo $! > $PIDFILE")

    async def test_subshell_background_job_does_not_hold_the_turn(self) -> None:
        """`(sleep 100 &)`: the turn ends; the job dies with bob."""
        await self.background_job("(sleep 100 & echo $! > $PIDFILE)")

    async def test_detached_output_background_job_dies_with_the_agent(self) -> None:
        """A job that closed its output (`sleep 100 >/dev/null 2>&1 &`) dies with bob too."""
        await self.background_job("sleep 100 >/dev/null 2>&1 & echo $! > $PIDFILE")
