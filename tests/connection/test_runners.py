"""
``acpkit.run_agent`` / ``acpkit.run_client`` and ``select_reactor``: the reactor they
choose, and the exit status that says how a program ended (the table of
``acpkit.runners``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from twisted.application.reactors import getReactorTypes
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.protocol import ProcessProtocol
from twisted.internet.utils import getProcessOutputAndValue
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase, TestCase

from acpkit.runners import ReactorChoiceError, select_reactor, stderr_excerpt

ROOT = Path(__file__).parent.parent.parent
PROGRAMS = str(ROOT / "tests" / "fixtures" / "runner_programs.py")
PYTHON = sys.executable

pytestmark = pytest.mark.process


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ACPKIT_TRACE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return env


class SelectReactorTests(SynchronousTestCase):
    """Which reactor a runner runs (this process has Twisted's default one installed)."""

    def test_none_is_the_installed_reactor(self) -> None:
        """No choice: the installed reactor."""
        self.assertIs(select_reactor(None), reactor)

    def test_a_reactor_object_is_used_as_given(self) -> None:
        """A reactor object is returned as it is."""
        mine = object()
        self.assertIs(select_reactor(mine), mine)

    def test_the_installed_reactor_by_name(self) -> None:
        """The name of the installed reactor returns it (nothing to install)."""
        module = type(reactor).__module__
        (name,) = [r.shortName for r in getReactorTypes() if getattr(r, "moduleName", "") == module]
        self.assertIs(select_reactor(name), reactor)

    def test_another_reactor_is_already_installed(self) -> None:
        """Asking for asyncio once another reactor is installed says which one is."""
        with self.assertRaises(ReactorChoiceError) as caught:
            select_reactor("asyncio")
        self.assertIn("cannot install the asyncio reactor", str(caught.exception))
        self.assertIn(type(reactor).__name__, str(caught.exception))

    def test_unknown_name(self) -> None:
        """An unknown name is refused with the known ones."""
        with self.assertRaises(ReactorChoiceError) as caught:
            select_reactor("no-such")
        self.assertIn("no reactor named 'no-such'", str(caught.exception))
        self.assertIn("asyncio", str(caught.exception))


class _Collect(ProcessProtocol):
    def __init__(self) -> None:
        self.out = b""
        self.err = b""
        self.first_line: Deferred[None] = Deferred()
        self.ended: Deferred[None] = Deferred()
        self.exit_code: int | None = None

    def outReceived(self, data: bytes) -> None:
        self.out += data
        if b"\n" in self.out and not self.first_line.called:
            self.first_line.callback(None)

    def errReceived(self, data: bytes) -> None:
        self.err += data

    def processEnded(self, reason: Failure) -> None:
        self.exit_code = getattr(reason.value, "exitCode", None)
        self.ended.callback(None)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


class RunAgentTests(TestCase):
    timeout = 60

    async def test_signal_is_a_broken_connection(self) -> None:
        """
        An agent stopped by SIGTERM did not end cleanly: exit status 1, the reason on
        stderr.  (A clean end, stdin closed, is 0: tests/project/test_readme_agent.py.)
        """
        pidfile = Path(self.mktemp())
        protocol = _Collect()
        process = reactor.spawnProcess(
            protocol, PYTHON, [PYTHON, PROGRAMS, "agent", str(pidfile)], env=child_env()
        )
        process.write(
            b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'
        )
        await protocol.first_line
        process.signalProcess("TERM")
        await protocol.ended
        self.assertEqual(protocol.exit_code, 1, protocol.err)
        self.assertIn(b"connection lost: ", protocol.err)


class RunClientTests(TestCase):
    timeout = 60

    async def client(
        self, mode: str, *reactor_name: str, env: dict[str, str] | None = None
    ) -> tuple[str, str, int, int]:
        """Run the client program against the agent program: out, err, status, agent pid."""
        pidfile = Path(self.mktemp()).resolve()
        out, err, code = await getProcessOutputAndValue(
            PYTHON,
            [
                PROGRAMS,
                "client",
                mode,
                *reactor_name,
                "--",
                PYTHON,
                PROGRAMS,
                "agent",
                str(pidfile),
            ],
            env={**child_env(), **(env or {})},
            reactor=reactor,
        )
        pid = int(pidfile.read_text()) if pidfile.exists() else 0
        return out.decode(), err.decode(), code, pid

    async def test_main_returns(self) -> None:
        """``main`` returned: status 0, and the agent was stopped before the exit."""
        out, err, code, pid = await self.client("ok")
        self.assertEqual((out, code), ("end_turn\n", 0), err)
        self.assertTrue(gone(pid))

    async def test_system_exit(self) -> None:
        """``SystemExit(7)`` in main: status 7; the agent is stopped too."""
        out, err, code, pid = await self.client("exit")
        self.assertEqual((out, code), ("", 7), err)
        self.assertTrue(gone(pid))

    async def test_error_answer_is_one_line(self) -> None:
        """An error answer failing main: status 1 and one line on stderr naming it."""
        _out, err, code, _pid = await self.client("refused")
        self.assertEqual(code, 1, err)
        self.assertEqual(err.count("\n"), 1, err)
        self.assertIn("runner_programs.py: ", err)
        self.assertIn("no session 'nope'", err)

    async def test_internal_error_shows_the_agents_stderr(self) -> None:
        """
        A handler failing in the agent (-32603): the client's stderr shows the agent's last
        stderr lines, where the agent's log line names its side, the method and the
        exception; the exception's text is not sent (no ``data``).
        """
        _out, err, code, _pid = await self.client("crash", env={"ACPKIT_DEBUG_ERRORS": ""})
        self.assertEqual(code, 1, err)
        self.assertIn("answered Internal error; its last stderr lines:", err)
        self.assertIn(
            "agent: handler for session/prompt (id 3, from the client) raised ValueError", err
        )
        self.assertIn("ValueError: the model's API key is missing", err)
        last = err.rstrip("\n").splitlines()[-1]
        self.assertEqual(last, "runner_programs.py: Internal error (code -32603)")

    async def test_debug_errors_puts_the_exception_in_data(self) -> None:
        """With ``ACPKIT_DEBUG_ERRORS=1`` in the agent's environment, the error's ``data``
        carries the exception's type and message, and the client's error line shows it."""
        _out, err, code, _pid = await self.client("crash", env={"ACPKIT_DEBUG_ERRORS": "1"})
        self.assertEqual(code, 1, err)
        last = err.rstrip("\n").splitlines()[-1]
        self.assertEqual(
            last,
            "runner_programs.py: Internal error (code -32603); data: "
            '{"exception": "ValueError", "message": "the model\'s API key is missing"}',
        )

    async def test_unexpected_error_has_its_traceback(self) -> None:
        """An unexpected exception in main: status 1 and its traceback on stderr."""
        _out, err, code, _pid = await self.client("bug")
        self.assertEqual(code, 1, err)
        self.assertIn("unexpected error", err)
        self.assertIn("ValueError: a bug in main", err)
        self.assertIn("Traceback", err)

    async def test_missing_agent_command(self) -> None:
        """An agent command that does not exist: status 1, one line naming it."""
        out, err, code = await getProcessOutputAndValue(
            PYTHON,
            [PROGRAMS, "client", "ok", "--", "./no-such-agent"],
            env=child_env(),
            reactor=reactor,
        )
        self.assertEqual((out, code), (b"", 1), err)
        self.assertEqual(
            err.decode(), 'runner_programs.py: agent command "./no-such-agent" does not exist\n'
        )

    async def test_asyncio_reactor(self) -> None:
        """``reactor="asyncio"``: main awaits asyncio and the connection's calls."""
        out, err, code, pid = await self.client("asyncio", "asyncio")
        self.assertEqual((out, code), ("end_turn\n", 0), err)
        self.assertTrue(gone(pid))


class RunClientSignalTests(TestCase):
    timeout = 60

    async def test_sigterm_stops_the_agent_first(self) -> None:
        """A client stopped by SIGTERM stops its agent, then exits 1."""
        pidfile = Path(self.mktemp()).resolve()
        protocol = _Collect()
        args = [PROGRAMS, "client", "hang", "--", PYTHON, PROGRAMS, "agent", str(pidfile)]
        process = reactor.spawnProcess(protocol, PYTHON, [PYTHON, *args], env=child_env())
        await protocol.first_line
        self.assertEqual(protocol.out, b"ready\n")
        process.signalProcess("TERM")
        await protocol.ended
        self.assertEqual(protocol.exit_code, 1, protocol.err)
        self.assertTrue(gone(int(pidfile.read_text())))


def test_the_stderr_excerpt_begins_where_its_log_entry_does() -> None:
    """
    The agent's last stderr lines shown on a -32603 reach back to the first line of the
    log entry they begin in: a deep traceback never hides the line naming the handler and
    the exception (Twisted 24.7's inlineCallbacks adds frames).
    """
    entry = ["agent: handler for session/prompt (id 3, from the client) raised ValueError"]
    entry += ["\tTraceback (most recent call last):"]
    entry += [f'\t  File "m.py", line {n}, in f{n}\n\t    g()' for n in range(15)]
    entry += ["\tbuiltins.ValueError: the model's API key is missing"]
    tail = "\n".join(["earlier line", *entry, "python: Internal error (code -32603)"]) + "\n"
    shown = stderr_excerpt(tail, shown=20)
    assert shown[0] == entry[0]
    assert shown[-1] == "python: Internal error (code -32603)"
    assert "earlier line" not in shown


def test_the_stderr_excerpt_is_the_last_lines_when_they_begin_an_entry() -> None:
    """Lines that begin at an entry's first line are shown as they are: the last N."""
    tail = "".join(f"line {n}\n" for n in range(40))
    assert stderr_excerpt(tail, shown=20) == [f"line {n}" for n in range(20, 40)]
