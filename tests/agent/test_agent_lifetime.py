"""
bob's process lifetime, with real processes: stdin's end mid-turn cancels the turn and the
agent exits promptly; SIGTERM, SIGINT and SIGKILL mid-turn leave no tool process behind;
a background job (``cmd &``, ``(cmd &)``) does not hold the turn and dies with the agent.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import Any

import pytest
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase, TestCase

from acpkit import schema
from acpkit.connection import Agent, AgentConnection, Client, ClientConnection
from acpkit.io import AgentProcess, spawn_agent
from acpkit.io.process_groups import ChildGroups, group_members, kill_group
from acpkit.testing.pair import connected_pair
from acpkit_agent.config import AgentConfig
from acpkit_agent.tap import STDIN_EOF_FLUSH_LIMIT, STDIN_EOF_GRACE, AgentService, build_runtime
from acpkit_agent.tools.bash import BashTool
from tests.agent.test_agent_process import ENV, TWISTD, process_gone
from tests.agent.test_tool_bash import make_context, temp_dir
from tests.fixtures.agent.harness import RecordingClient
from tests.helpers import wait_until

pytestmark = pytest.mark.process


def read_pid(path: str) -> int:
    """The pid a command wrote to ``path``."""
    with open(path) as stream:
        return int(stream.read())


class _EndlessAgent(Agent):
    """Sessions whose turns never end by themselves."""

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(protocol_version=1)

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        self.count = getattr(self, "count", 0) + 1
        return schema.NewSessionResponse(session_id=f"s{self.count}")

    def prompt(self, params: schema.PromptRequest) -> Deferred[Any]:
        return Deferred()


class CancelAllTurnsTests(SynchronousTestCase):
    """``AgentConnection.cancel_all_turns``, in memory."""

    def test_every_running_turn_is_answered_cancelled(self) -> None:
        """Running turns of several sessions are all answered with stopReason cancelled."""
        pair = connected_pair(_EndlessAgent(), Client())
        pair.result(pair.client.initialize())
        prompts = []
        for _ in range(2):
            session = pair.result(
                pair.client.new_session(schema.NewSessionRequest(cwd="/tmp", mcp_servers=[]))
            )
            prompts.append(
                pair.client.prompt(
                    schema.PromptRequest(
                        session_id=session.session_id,
                        prompt=[schema.TextContentBlock(text="hi")],
                    )
                )
            )
        pair.pump()
        self.assertFalse(any(d.called for d in prompts))
        pair.agent.cancel_all_turns()
        for d in prompts:
            self.assertEqual(pair.result(d).stop_reason, schema.StopReason.CANCELLED)


class _StoppableClock(Clock):
    running = True

    def stop(self) -> None:
        self.running = False


class StdinEndGraceTests(SynchronousTestCase):
    """The stdio service's bound on the wait after stdin's end."""

    def service(self) -> tuple[AgentService, _StoppableClock]:
        clock = _StoppableClock()
        service = AgentService(build_runtime(AgentConfig(), clock), "stdio", clock)
        service.conn = AgentConnection(_EndlessAgent())
        return service, clock

    def test_closes_after_the_grace_and_exits_after_the_flush_limit(self) -> None:
        """
        Requests still running after the grace: the connection is closed (written output
        flushed), and a client that reads nothing more cannot hold the agent past the
        flush limit.
        """
        service, clock = self.service()
        assert service.conn is not None
        transport = StringTransport()
        service.conn.protocol.makeConnection(transport)
        service._stdin_ended()
        clock.advance(STDIN_EOF_GRACE - 0.01)
        self.assertTrue(clock.running)
        self.assertFalse(transport.disconnecting)
        clock.advance(0.02)
        self.assertTrue(transport.disconnecting)
        self.assertTrue(clock.running)
        clock.advance(STDIN_EOF_FLUSH_LIMIT - 0.03)
        self.assertTrue(clock.running)
        clock.advance(0.05)
        self.assertFalse(clock.running)

    def test_a_client_still_reading_gets_the_written_output(self) -> None:
        """
        After the grace the output already written is kept: the agent exits when the
        flushed connection closes, before the flush limit.
        """
        service, clock = self.service()
        assert service.conn is not None
        transport = StringTransport()
        service.conn.protocol.makeConnection(transport)
        service.conn.protocol.when_closed().addBoth(service._stdio_closed)
        service._stdin_ended()
        clock.advance(STDIN_EOF_GRACE + 0.01)
        self.assertTrue(transport.disconnecting)
        service.conn.protocol.connectionLost(Failure(ConnectionDone()))
        self.assertFalse(clock.running)
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_closing_in_time_cancels_the_grace_timer(self) -> None:
        """The connection closes first: the reactor stops then, and the timer is gone."""
        service, clock = self.service()
        service._stdin_ended()
        service._stdio_closed(None)
        self.assertFalse(clock.running)
        self.assertEqual(clock.getDelayedCalls(), [])


class _ShutdownRecorder:
    def __init__(self) -> None:
        self.triggers: list[tuple[Any, ...]] = []

    def addSystemEventTrigger(self, *args: Any) -> None:
        self.triggers.append(args)


class ChildGroupsTests(TestCase):
    """The registry of process groups and its watchdog, with real processes."""

    timeout = 30

    def sleeper(self) -> subprocess.Popen[bytes]:
        """A `sleep 100` leading its own process group (and session)."""
        proc = subprocess.Popen(["sleep", "100"], start_new_session=True)
        self.addCleanup(proc.wait)
        self.addCleanup(proc.kill)
        return proc

    def test_kill_group_spares_a_stranger_with_the_pid(self) -> None:
        """With no group of that id, only our own child is signalled: never a process that
        merely has the pid (a leader's pid reused after its group ended)."""
        shell = subprocess.Popen(["sh", "-c", "sleep 100 & echo $!; wait"], stdout=subprocess.PIPE)
        self.addCleanup(shell.wait)
        self.addCleanup(shell.kill)
        assert shell.stdout is not None
        grandchild = int(shell.stdout.readline())
        self.addCleanup(os.kill, grandchild, signal.SIGKILL)
        self.assertFalse(kill_group(grandchild, signal.SIGTERM))
        self.assertFalse(process_gone(grandchild))
        child = self.sleeper_in_our_group()
        self.assertTrue(kill_group(child.pid, signal.SIGTERM))
        self.assertEqual(child.wait(timeout=10), -signal.SIGTERM)

    def sleeper_in_our_group(self) -> subprocess.Popen[bytes]:
        """A `sleep 100` child that leads no group (as a leader before its setsid)."""
        proc = subprocess.Popen(["sleep", "100"])
        self.addCleanup(proc.wait)
        self.addCleanup(proc.kill)
        return proc

    async def test_kill_all_ends_every_group(self) -> None:
        """kill_all signals every tracked group and fires once they are empty."""
        groups = ChildGroups()
        procs = [self.sleeper() for _ in range(2)]
        for proc in procs:
            groups.add(proc.pid)
        self.assertEqual(sorted(groups), sorted(p.pid for p in procs))
        await groups.kill_all(reactor)
        for proc in procs:
            self.assertEqual(proc.wait(timeout=10), -signal.SIGTERM)
        self.assertEqual(len(groups), 0)

    def test_watchdog_kills_the_groups_when_its_pipe_closes(self) -> None:
        """The watchdog kills the groups still tracked once our end of its pipe closes."""
        groups = ChildGroups()
        recorder = _ShutdownRecorder()
        groups.kill_at_shutdown(recorder)
        self.assertEqual(len(recorder.triggers), 1)
        self.assertIsNone(groups.watchdog_pid)  # started with the first group
        kept, dropped = self.sleeper(), self.sleeper()
        groups.add(kept.pid)
        groups.add(dropped.pid)
        groups.discard(dropped.pid)
        watchdog = groups._watchdog
        assert watchdog is not None and watchdog.stdin is not None
        self.addCleanup(watchdog.wait)
        watchdog.stdin.close()  # as when this process dies
        self.assertEqual(kept.wait(timeout=10), -signal.SIGKILL)
        self.assertEqual(watchdog.wait(timeout=10), 0)
        self.assertIsNone(dropped.poll())


class BackgroundJobTests(TestCase):
    """The bash tool with background jobs, in process."""

    timeout = 30

    def setUp(self) -> None:
        self.ctx = make_context(temp_dir(self))
        self.groups = ChildGroups()
        self.addCleanup(self.groups.signal_all, signal.SIGKILL)

    async def test_background_job_returns_and_stays_tracked(self) -> None:
        """`sleep 100 &` returns once the shell exits, naming the job; its group is tracked
        until killed, and ``ended`` fires when the job is gone."""
        tool = BashTool(groups=self.groups)
        run = tool.start(self.ctx, {"command": "echo started; sleep 100 & echo $!"})
        result = await run.result
        self.assertEqual(result.exit_status, 0)
        assert run.pid is not None
        members = group_members(run.pid)
        self.assertEqual(len(members), 1)
        self.assertTrue(result.output.startswith(f"started\n{members[0]}\n"), result.output)
        self.assertIn(
            f"[still running in the background: pid {members[0]}; stopped when the agent exits]",
            result.output,
        )
        self.assertFalse(run.ended.called)
        self.assertIn(run.pid, self.groups)
        await self.groups.kill_all(reactor)
        await run.ended
        self.assertTrue(process_gone(members[0]))
        self.assertNotIn(run.pid, self.groups)

    async def test_plain_command_leaves_no_group(self) -> None:
        """A command without background jobs is forgotten once it ends."""
        run = BashTool(groups=self.groups).start(self.ctx, {"command": "echo hi"})
        result = await run.result
        await run.ended
        self.assertEqual(result.output, "hi\n")
        self.assertEqual(len(self.groups), 0)


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
