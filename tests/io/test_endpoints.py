"""Tests for acpkit.io: spawned agents (real child processes), endpoint strings."""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Generator
from typing import Any

import pytest
from twisted.internet import defer, reactor
from twisted.internet.address import IPv4Address
from twisted.internet.interfaces import IListeningPort
from twisted.internet.protocol import Factory
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase, TestCase

from acpkit.framing import NDJSONProtocol
from acpkit.io import (
    AgentAddress,
    AgentExited,
    AgentNotFoundError,
    AgentProcess,
    connect,
    serve,
    spawn_agent,
)

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "agent_fixture.py")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHONPATH = {"PYTHONPATH": REPO_ROOT}


class Recorder(NDJSONProtocol):
    """Records lines and the connection loss; fires ``lost`` with the reason."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[bytes] = []
        self.input_ended = 0
        #: Fires with the exception of the connectionLost reason.
        self.lost: defer.Deferred[BaseException | None] = defer.Deferred()
        self.line_waiters: list[tuple[int, defer.Deferred[None]]] = []

    def lineReceived(self, line: bytes) -> None:
        self.lines.append(line)
        for entry in list(self.line_waiters):
            if len(self.lines) >= entry[0]:
                self.line_waiters.remove(entry)
                entry[1].callback(None)

    def wait_lines(self, count: int) -> defer.Deferred[None]:
        """Fires once ``count`` lines have arrived."""
        d: defer.Deferred[None] = defer.Deferred()
        if len(self.lines) >= count:
            d.callback(None)
        else:
            self.line_waiters.append((count, d))
        return d

    def inputEnded(self) -> None:
        self.input_ended += 1
        super().inputEnded()

    def connectionLost(self, reason: Failure = Failure(Exception("lost"))) -> None:  # noqa: B008
        super().connectionLost(reason)
        if not self.lost.called:
            self.lost.callback(reason.value)


class EchoServer(NDJSONProtocol):
    """Echoes each line back."""

    def lineReceived(self, line: bytes) -> None:
        self.sendLine(line)


def python_agent(protocol: NDJSONProtocol, *args: str, **kwargs: Any) -> AgentProcess:
    """Spawn the fixture agent with the current interpreter."""
    env = dict(PYTHONPATH)
    env.update(kwargs.pop("env", {}))
    return spawn_agent(
        reactor,
        protocol,
        sys.executable,
        [FIXTURE, *args],
        env=env,
        **kwargs,
    )


def alive(pid: int) -> bool:
    """True if ``pid`` runs (zombies count as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _port_number(port: IListeningPort) -> int:
    """The TCP port a listening port is bound to."""
    host = port.getHost()
    assert isinstance(host, IPv4Address)
    return host.port


def poll_until(condition: Callable[[], object], timeout: float = 5.0) -> defer.Deferred[bool]:
    """Fires True as soon as ``condition()`` holds (checked every 20 ms), False at timeout."""
    from twisted.internet.task import LoopingCall

    deadline = time.monotonic() + timeout
    result: defer.Deferred[bool] = defer.Deferred()

    def check() -> None:
        if condition():
            loop.stop()
            result.callback(True)
        elif time.monotonic() > deadline:
            loop.stop()
            result.callback(False)

    loop = LoopingCall(check)
    loop.start(0.02)
    return result


class SpawnAgentTests(TestCase):
    """spawn_agent with real child processes."""

    timeout = 30

    @pytest.mark.process
    @defer.inlineCallbacks
    def test_echo_round_trip(self) -> Generator[defer.Deferred[Any], Any, None]:
        """
        Lines written to the agent come back; an exiting agent's end is reported once,
        through connectionLost with AgentExited (not as a bare end of input first, so that
        pending requests learn the exit status and stderr tail).
        """
        proto = Recorder()
        agent = python_agent(proto, "echo", name="bob")
        self.assertIs(agent.protocol, proto)
        self.assertIsInstance(agent.pid, int)
        proto.sendLine(b'{"jsonrpc":"2.0","id":1,"method":"x"}')
        assert proto.transport is not None
        proto.transport.writeSequence([b'{"a":', b"2}\n"])
        yield proto.wait_lines(2)
        self.assertEqual(proto.lines, [b'{"jsonrpc":"2.0","id":1,"method":"x"}', b'{"a":2}'])
        peer = proto.transport.getPeer()
        assert isinstance(peer, AgentAddress)
        self.assertEqual(peer.name, "bob")
        proto.transport.loseConnection()
        reason = yield proto.lost
        self.assertIsInstance(reason, AgentExited)
        self.assertEqual((reason.exit_code, reason.signal), (0, None))
        self.assertEqual(proto.input_ended, 0)
        exited = yield agent.exited
        self.assertIs(exited, reason)

    @pytest.mark.process
    @defer.inlineCallbacks
    def test_environment_inherited_and_added(self) -> Generator[defer.Deferred[Any], Any, None]:
        """The child sees our environment plus the given variables; cwd is honoured."""
        os.environ["ACPKIT_TEST_INHERITED"] = "from-parent"
        self.addCleanup(os.environ.pop, "ACPKIT_TEST_INHERITED")
        directory = tempfile.mkdtemp()
        proto = Recorder()
        python_agent(
            proto,
            "info",
            "ACPKIT_TEST_INHERITED",
            "ACPKIT_TEST_ADDED",
            env={"ACPKIT_TEST_ADDED": "added"},
            cwd=directory,
        )
        yield proto.lost
        info = json.loads(proto.lines[0])
        self.assertEqual(
            info["env"], {"ACPKIT_TEST_INHERITED": "from-parent", "ACPKIT_TEST_ADDED": "added"}
        )
        self.assertEqual(os.path.realpath(info["cwd"]), os.path.realpath(directory))

    @pytest.mark.process
    @defer.inlineCallbacks
    def test_command_found_in_path_without_shell(self) -> Generator[defer.Deferred[Any], Any, None]:
        """A bare command name is looked up in the child's PATH and run with its args as-is."""
        proto = Recorder()
        bindir = os.path.dirname(sys.executable)
        spawn_agent(
            reactor,
            proto,
            os.path.basename(sys.executable),
            ["-c", "import sys; print(sys.argv[1:])", "$HOME", "a b"],
            env={"PATH": bindir},
        )
        yield proto.lost
        self.assertEqual(proto.lines, [b"['$HOME', 'a b']"])

    @pytest.mark.process
    @defer.inlineCallbacks
    def test_stdout_closed_by_a_running_agent_half_closes(
        self,
    ) -> Generator[defer.Deferred[Any], Any, None]:
        """
        An agent that closes stdout and keeps running: after STDOUT_EOF_GRACE the
        protocol gets readConnectionLost (its inputEnded closes stdin), then the exit.
        """
        proto = Recorder()
        agent = python_agent(proto, "close-stdout")
        reason = yield proto.lost
        self.assertEqual(proto.lines, [b'{"bye": true}'])
        self.assertEqual(proto.input_ended, 1)
        self.assertEqual(reason.exit_code, 0)
        self.assertEqual(agent.stderr_tail(), "stdin closed")

    def test_command_not_found(self) -> None:
        """A missing command raises AgentNotFoundError (a FileNotFoundError) naming it."""
        with self.assertRaises(AgentNotFoundError) as caught:
            spawn_agent(reactor, Recorder(), "no-such-agent-xyz", env={"PATH": "/nonexistent"})
        self.assertIsInstance(caught.exception, FileNotFoundError)
        self.assertIn("no-such-agent-xyz", str(caught.exception))
        with self.assertRaises(FileNotFoundError):
            spawn_agent(reactor, Recorder(), "./missing/agent")

    @pytest.mark.process
    @defer.inlineCallbacks
    def test_stderr_drained_past_64k(self) -> Generator[defer.Deferred[Any], Any, None]:
        """An agent writing 1 MB to stderr does not freeze; the tail keeps the last lines."""
        proto = Recorder()
        agent = python_agent(proto, "stderr-flood", str(1024 * 1024), stderr_tail_lines=3)
        reason = yield proto.lost
        self.assertEqual(proto.lines, [b'{"done": true}'])
        tail = agent.stderr_tail().splitlines()
        self.assertEqual(len(tail), 3)
        self.assertTrue(all(line.startswith("stderr line ") for line in tail))
        self.assertEqual(reason.stderr_tail, agent.stderr_tail())

    @pytest.mark.process
    @defer.inlineCallbacks
    def test_crash_mid_stream_reports_promptly(self) -> Generator[defer.Deferred[Any], Any, None]:
        """
        A crash mid-line delivers the complete line, the partial last line, then
        AgentExited with status and stderr tail, promptly although a grandchild keeps
        stdout open.
        """
        proto = Recorder()
        agent = python_agent(proto, "crash", "3", name="bob")
        started = time.monotonic()
        reason = yield proto.lost
        self.assertLess(time.monotonic() - started, 5.0)
        exited = reason
        self.assertIsInstance(exited, AgentExited)
        self.assertEqual(exited.exit_code, 3)
        self.assertIn("boom 4", exited.stderr_tail)
        self.assertEqual(proto.lines[0], b'{"first": 1}')
        self.assertTrue(str(exited).startswith('agent "bob" exited with status 3; last stderr'))
        yield agent.stop(grace=0.5)

    @pytest.mark.process
    @defer.inlineCallbacks
    def test_stop_kills_stubborn_agent_and_grandchild(
        self,
    ) -> Generator[defer.Deferred[Any], Any, None]:
        """stop() escalates to SIGKILL of the group: agent and grandchild both die."""
        proto = Recorder()
        agent = python_agent(proto, "stubborn", name="mule")
        yield proto.wait_lines(1)
        grandchild = json.loads(proto.lines[0])["grandchild"]
        self.assertTrue(alive(grandchild))
        exited = yield agent.stop(grace=0.3)
        self.assertEqual(exited.signal, signal.SIGKILL)
        self.assertIn("killed by signal 9", str(exited))
        gone = yield poll_until(lambda: not alive(grandchild))
        self.assertTrue(gone, "grandchild survived")
        again = yield agent.stop()
        self.assertIs(again, exited)

    @pytest.mark.process
    @defer.inlineCallbacks
    def test_stop_polite_agent_exits_on_stdin_eof(
        self,
    ) -> Generator[defer.Deferred[Any], Any, None]:
        """stop() on an agent that exits at stdin EOF ends it without signals."""
        proto = Recorder()
        agent = python_agent(proto, "echo")
        # The grace only has to outlast the agent's start (it reads stdin to its end once
        # started): a loaded machine took more than 5 s; an agent that exits costs nothing.
        exited = yield agent.stop(grace=60.0)
        self.assertEqual((exited.exit_code, exited.signal), (0, None))

    @pytest.mark.process
    @defer.inlineCallbacks
    def test_pause_stops_reading_stdout(self) -> Generator[defer.Deferred[Any], Any, None]:
        """pauseProducing/resumeProducing on the protocol pause and resume stdout reading."""
        proto = Recorder()
        agent = python_agent(proto, "echo")
        proto.sendLine(b"one")
        yield proto.wait_lines(1)
        proto.pauseProducing()
        proto.sendLine(b"two")
        proto.resumeProducing()
        yield proto.wait_lines(2)
        self.assertEqual(proto.lines, [b"one", b"two"])
        yield agent.stop()


class AgentExitedTests(SynchronousTestCase):
    """The AgentExited message."""

    def test_messages(self) -> None:
        """str() names the agent, the status or signal, and the stderr tail."""
        self.assertEqual(
            str(AgentExited("bob", 3, None, "oops\nbad")),
            'agent "bob" exited with status 3; last stderr lines:\noops\nbad',
        )
        self.assertEqual(str(AgentExited("bob", None, 9, "")), 'agent "bob" was killed by signal 9')

    def test_kind_names_what_ended_and_summary_is_one_line(self) -> None:
        """``kind`` replaces "agent" (an MCP server is not an agent); ``summary`` has no tail."""
        exited = AgentExited("time", 3, None, "oops\nbad", kind="MCP server")
        self.assertEqual(
            str(exited), 'MCP server "time" exited with status 3; last stderr lines:\noops\nbad'
        )
        self.assertEqual(exited.summary, 'MCP server "time" exited with status 3')


class StderrTailTests(SynchronousTestCase):
    """Bounded stderr tail, fed in arbitrary chunks."""

    def test_tail_lines_and_cap(self) -> None:
        """Only the last N lines are kept; an overlong line is cut; a partial line is kept."""
        from acpkit.io.spawn import STDERR_LINE_CAP, _StderrTail

        tail = _StderrTail("bob", 2)
        tail.feed(b"one\ntw")
        tail.feed(b"o\r\n" + b"x" * (STDERR_LINE_CAP * 3) + b"\nthr")
        tail.flush()
        lines = tail.text().split("\n")
        self.assertEqual(len(lines), 2)
        self.assertEqual(lines[0], "x" * STDERR_LINE_CAP + " [...]")
        self.assertEqual(lines[1], "thr")


class StderrNamingTests(SynchronousTestCase):
    """Each stderr line is logged once, named by what the child is."""

    def test_each_line_is_logged_with_the_kind_and_name(self) -> None:
        from acpkit.io.spawn import _StderrTail
        from tests.fixtures.agent.harness import captured_logs

        with captured_logs() as logs:
            tail = _StderrTail("pyright", 5, kind="language server")
            tail.feed(b"starting\nready\n")
        self.assertEqual(
            logs.lines,
            ["language server pyright stderr: starting", "language server pyright stderr: ready"],
        )


class EndpointStringTests(TestCase):
    """serve() and connect() over real loopback sockets."""

    timeout = 20

    @defer.inlineCallbacks
    def _round_trip(
        self,
        server_description: str,
        client_description_for: Callable[[IListeningPort], str],
        **options: Any,
    ) -> Generator[defer.Deferred[Any], Any, None]:
        port = yield serve(reactor, server_description, Factory.forProtocol(EchoServer), **options)
        self.addCleanup(port.stopListening)
        client = Recorder()
        connected = yield connect(reactor, client_description_for(port), client)
        self.assertIs(connected, client)
        client.sendLine(b'{"hello":"w\xc3\xa9"}')
        yield client.wait_lines(1)
        self.assertEqual(client.lines, [b'{"hello":"w\xc3\xa9"}'])
        assert client.transport is not None
        client.transport.loseConnection()
        yield client.lost

    def test_tcp(self) -> defer.Deferred[None]:
        """An NDJSON echo over tcp:0 (port chosen by the system), no_token on loopback."""
        return self._round_trip(
            "tcp:0:interface=127.0.0.1",
            lambda port: f"tcp:host=127.0.0.1:port={_port_number(port)}",
            no_token=True,
        )

    def test_unix(self) -> defer.Deferred[None]:
        """An NDJSON echo over a unix socket."""
        path = os.path.join(tempfile.mkdtemp(), "acp.sock")
        return self._round_trip(f"unix:{path}", lambda port: f"unix:path={path}")


class TransportUnitTests(SynchronousTestCase):
    """The agent transport's producer plumbing, with a fake process transport."""

    def test_register_producer_and_write_sequence(self) -> None:
        """registerProducer, writeSequence and loseConnection reach the process transport."""
        from acpkit.io import AgentTransport

        fake = StringTransport()
        closed: list[bool] = []
        fake.closeStdin = lambda: closed.append(True)  # type: ignore[attr-defined]
        agent = AgentProcess(reactor, Recorder(), "bob", 5)
        transport = AgentTransport(agent, fake)  # type: ignore[arg-type]
        transport.writeSequence(iter([b"a", b"b\n"]))
        self.assertEqual(fake.value(), b"ab\n")
        producer = StringTransport()
        transport.registerProducer(producer, True)
        self.assertIs(fake.producer, producer)
        transport.unregisterProducer()
        self.assertIsNone(fake.producer)
        transport.loseConnection()
        self.assertEqual(closed, [True])
        self.assertFalse(transport.disconnecting)


class _FakeProcess(StringTransport):
    """Enough of a process transport for the drain logic."""

    pid = None

    def __init__(self) -> None:
        super().__init__()
        self.pipes: dict[int, object] = {}
        self.closed_pipes = 0

    def loseConnection(self) -> None:
        self.closed_pipes += 1


class PipeDrainTests(SynchronousTestCase):
    """After the agent exits, open pipes are closed after a delay, but not while paused."""

    def test_pipes_closed_after_exit_unless_paused(self) -> None:
        """A paused protocol keeps the pipes (unread output stays); on resume they close."""
        from twisted.internet.task import Clock

        from acpkit.io.spawn import PIPE_DRAIN_TIMEOUT

        clock = Clock()
        proto = Recorder()
        agent = AgentProcess(clock, proto, "bob", 5)
        fake = _FakeProcess()
        agent._started(fake)  # type: ignore[arg-type]
        proto.pauseProducing()
        agent._process_exited()
        clock.advance(PIPE_DRAIN_TIMEOUT * 3)
        self.assertEqual(fake.closed_pipes, 0)
        proto.resumeProducing()
        clock.advance(PIPE_DRAIN_TIMEOUT)
        self.assertEqual(fake.closed_pipes, 1)


class StdioTests(TestCase):
    """serve_stdio on real pipes, in-process."""

    timeout = 20

    @defer.inlineCallbacks
    def test_peer_gone_stdout_first_still_ends(self) -> Generator[defer.Deferred[Any], Any, None]:
        """
        The peer closes our stdout first, then our stdin: connectionLost still comes
        (stock StandardIO with a half-closeable protocol would wait forever).
        """
        from acpkit.io import serve_stdio

        stdin_read, stdin_write = os.pipe()
        stdout_read, stdout_write = os.pipe()
        proto = Recorder()
        output_lost: defer.Deferred[None] = defer.Deferred()
        proto.writeConnectionLost = lambda: output_lost.callback(None)  # type: ignore[method-assign]
        serve_stdio(proto, reactor, stdin=stdin_read, stdout=stdout_write)
        os.close(stdout_read)
        yield output_lost
        os.write(stdin_write, b"last line")
        os.close(stdin_write)
        yield proto.lost
        self.assertEqual(proto.lines, [b"last line"])
        self.assertEqual(proto.input_ended, 1)

    @defer.inlineCallbacks
    def test_half_close_replies_then_ends(self) -> Generator[defer.Deferred[Any], Any, None]:
        """Stdin EOF right after a request: the reply is written, then the connection ends."""
        from acpkit.io import serve_stdio

        stdin_read, stdin_write = os.pipe()
        stdout_read, stdout_write = os.pipe()
        server = EchoServer()
        lost: defer.Deferred[None] = defer.Deferred()
        server.connectionLost = lambda reason=None: lost.callback(None)  # type: ignore[method-assign]
        serve_stdio(server, reactor, stdin=stdin_read, stdout=stdout_write)
        os.write(stdin_write, b'{"id":1}\n')
        os.close(stdin_write)
        yield lost
        self.assertEqual(os.read(stdout_read, 100), b'{"id":1}\n')
        os.close(stdout_read)
