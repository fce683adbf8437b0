"""``acpkit-client ask`` and signals, in real processes: exit statuses, no agent left.

Each test runs ``python -m acpkit_client ask`` on a fixture agent whose tool runs in a
child process (``tests/fixtures/client/long_tool_agent.py``), waits for the agent's
``tool running`` chunk on ``ask``'s stdout (and for ``ask``'s own messages on its stderr
before a second signal), signals ``ask``, and checks its exit status and that the agent,
its child and its whole process group are gone once ``ask`` has exited.

A process counts as gone once it is a zombie or has ``SIGKILL`` pending: both are dead
for every purpose (this machine's init does not reap orphans, so a killed grandchild
stays a zombie).
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import attrs
import pytest
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.protocol import ProcessProtocol
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase

from acpkit_client import cli
from acpkit_client.interrupts import SIGNALS, AskInterrupts
from tests.fixtures.client.long_tool_agent import MARKER

REPO = Path(__file__).resolve().parent.parent.parent
AGENT = REPO / "tests" / "fixtures" / "client" / "long_tool_agent.py"
MODES = ("obey", "stubborn", "deaf", "self-cancel")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as stream:
            text = stream.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(")") + 2 :].split()


def _kill_pending(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as stream:
            status = dict(line.split(":", 1) for line in stream if ":" in line)
    except (FileNotFoundError, ProcessLookupError):
        return True
    bit = 1 << (signal.SIGKILL - 1)
    return any(int(status.get(key, "0").strip(), 16) & bit for key in ("ShdPnd", "SigPnd"))


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie, no SIGKILL pending)."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X", "x"):
        return False
    return not _kill_pending(pid)


def live_members(group: int) -> list[int]:
    """The live processes of process group ``group``."""
    members = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat_fields(int(name))
            if fields is not None and fields[2] == str(group) and alive(int(name)):
                members.append(int(name))
    return members


@attrs.define
class Ended:
    code: int | None
    out: bytes
    err: bytes


class SignalledAsk(ProcessProtocol):
    """Runs ``ask``; sends ``signals[0]`` once the marker is on stdout, and each later one
    once ``after`` (a stderr text) has appeared since the previous signal."""

    def __init__(self, signals: list[str], after: bytes, done: Deferred[Ended]) -> None:
        self.signals = list(signals)
        self.after = after
        self.done = done
        self.out = b""
        self.err = b""
        self.err_at_last_signal = 0

    def _send(self) -> None:
        assert self.transport is not None
        self.transport.signalProcess(self.signals.pop(0))
        self.err_at_last_signal = len(self.err)

    def outReceived(self, data: bytes) -> None:
        first = MARKER.encode() not in self.out
        self.out += data
        if first and MARKER.encode() in self.out and self.signals:
            self._send()

    def errReceived(self, data: bytes) -> None:
        self.err += data
        since = self.err[self.err_at_last_signal :]
        if self.signals and self.err_at_last_signal and self.after in since:
            self._send()

    def processEnded(self, reason: Failure) -> None:
        self.done.callback(Ended(getattr(reason.value, "exitCode", None), self.out, self.err))


@pytest.mark.process
class AskSignalTests(TestCase):
    """``ask`` on the long-tool agent, signalled."""

    timeout = 60

    def setUp(self) -> None:
        self.root = Path(tempfile.mkdtemp())
        self.project = self.root / "project"
        (self.project / ".acpkit").mkdir(parents=True)
        self.trace = self.root / "trace.log"
        blocks = [
            f'[[agent]]\nname = "{mode}"\ncommand = "{sys.executable}"\n'
            f'args = ["{AGENT}", "{mode}"]\nenv = {{ PYTHONPATH = "{REPO}" }}\n'
            for mode in MODES
        ]
        (self.project / ".acpkit" / "acp.toml").write_text("\n".join(blocks), encoding="utf-8")
        self.addCleanup(self.kill_leftovers)

    def kill_leftovers(self) -> None:
        """Whatever a failing test left running goes (never reached when tests pass)."""
        pids = self.pids() if (self.project / "pids.json").exists() else {}
        for pid in pids.values():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)

    def pids(self) -> dict[str, int]:
        pids: dict[str, int] = json.loads((self.project / "pids.json").read_text("utf-8"))
        return pids

    def ask(
        self, agent: str, signals: list[str], after: bytes = b"", *args: str
    ) -> Deferred[Ended]:
        done: Deferred[Ended] = Deferred()
        env = dict(os.environ, PYTHONPATH=str(REPO), ACPKIT_DIR=str(self.root / "user"))
        env["ACPKIT_TRACE"] = str(self.trace)
        reactor.spawnProcess(
            SignalledAsk(signals, after, done),
            sys.executable,
            [sys.executable, "-m", "acpkit_client", "ask", "--agent", agent, *args, "go"],
            env=env,
            path=str(self.project),
        )
        return done

    def assert_all_gone(self, ended: Ended) -> None:
        pids = self.pids()
        self.assertFalse(alive(pids["agent"]), ended.err)
        self.assertFalse(alive(pids["child"]), "the agent's child outlived ask")
        self.assertEqual(live_members(pids["agent"]), [])
        self.assertNotIn(b"Traceback", ended.err)

    async def test_sigterm_cancels_then_ends_the_process_group(self) -> None:
        """SIGTERM: session/cancel, the agent's cancelled answer, then the agent and the
        child it left running are gone; exit 143."""
        ended = await self.ask("obey", ["TERM"])
        self.assertEqual(ended.code, cli.EXIT_TERMINATED, ended.err)
        self.assertIn(b"cancelling the turn", ended.err)
        self.assertIn(b"the turn ended: cancelled", ended.err)
        trace = self.trace.read_text(encoding="utf-8")
        self.assertIn('"method":"session/cancel"', trace)
        self.assertIn('"stopReason":"cancelled"', trace)
        self.assert_all_gone(ended)

    async def test_sigint_exits_130(self) -> None:
        """SIGINT (Ctrl-C) does the same and exits 130."""
        ended = await self.ask("obey", ["INT"])
        self.assertEqual(ended.code, cli.EXIT_CANCELLED, ended.err)
        self.assertEqual(ended.out.decode(), f"{MARKER}\n")
        self.assert_all_gone(ended)

    async def test_the_wait_for_the_cancelled_answer_is_bounded(self) -> None:
        """An agent that ignores session/cancel is stopped after --cancel-timeout."""
        ended = await self.ask("stubborn", ["TERM"], b"", "--cancel-timeout", "0.5")
        self.assertEqual(ended.code, cli.EXIT_TERMINATED, ended.err)
        self.assertIn(b"did not end the cancelled turn within 0.5 s", ended.err)
        self.assert_all_gone(ended)

    async def test_second_sigint_while_waiting_kills_at_once(self) -> None:
        """A second Ctrl-C while ask waits for the cancelled answer kills the agent's
        group (an agent deaf to cancel, stdin's end and SIGTERM); exit 130, no traceback."""
        ended = await self.ask("deaf", ["INT", "INT"], b"cancelling the turn")
        self.assertEqual(ended.code, cli.EXIT_CANCELLED, ended.err)
        self.assertIn(b"stopping the agent now", ended.err)
        self.assert_all_gone(ended)

    async def test_second_signal_during_shutdown_kills_at_once(self) -> None:
        """A second signal while ask is already stopping the agent (after the cancel wait)
        skips the rest of the graceful stop, kills the group; no traceback."""
        ended = await self.ask("deaf", ["INT", "INT"], b"stopping it", "--cancel-timeout", "0.2")
        self.assertEqual(ended.code, cli.EXIT_CANCELLED, ended.err)
        self.assertIn(b"stopping the agent now", ended.err)
        self.assert_all_gone(ended)

    async def test_sigterm_then_sigint_keeps_the_first_status(self) -> None:
        """The first signal sets the status: SIGTERM then Ctrl-C exits 143."""
        ended = await self.ask("deaf", ["TERM", "INT"], b"cancelling the turn")
        self.assertEqual(ended.code, cli.EXIT_TERMINATED, ended.err)
        self.assert_all_gone(ended)

    async def test_agent_that_cancels_by_itself(self) -> None:
        """stopReason cancelled that nobody asked for exits 6 (not 130) and says so."""
        ended = await self.ask("self-cancel", [])
        self.assertEqual(ended.code, cli.EXIT_CANCELLED_BY_AGENT, ended.err)
        self.assertIn(b"the agent cancelled the turn by itself", ended.err)
        self.assertNotIn(b"Traceback", ended.err)


# -- the same rules, in memory --------------------------------------------------------


class FakeWindow:
    """Records what AskInterrupts asks of the window."""

    def __init__(self, turn_running: bool) -> None:
        self.turn_running = turn_running
        self.calls: list[str] = []

    def cancel(self) -> bool:
        self.calls.append("cancel")
        return self.turn_running

    def abandon_turn(self) -> bool:
        self.calls.append("abandon_turn")
        running, self.turn_running = self.turn_running, False
        return running

    def close(self) -> None:
        self.calls.append("close")

    def kill(self) -> None:
        self.calls.append("kill")


def interrupts(turn_running: bool) -> tuple[AskInterrupts, FakeWindow, Clock, io.StringIO]:
    clock, err = Clock(), io.StringIO()
    window = FakeWindow(turn_running)
    return AskInterrupts(clock, window, err, cancel_wait=5), window, clock, err


def test_first_signal_cancels_and_waits_a_bounded_time() -> None:
    """A first signal during a turn sends session/cancel and nothing else; after
    cancel_wait seconds without an answer the turn is given up."""
    handler, window, clock, err = interrupts(turn_running=True)
    handler.received(signal.SIGTERM)
    assert window.calls == ["cancel"]
    assert handler.exit_status == 143
    clock.advance(4.9)
    assert window.calls == ["cancel"]
    clock.advance(0.2)
    assert window.calls == ["cancel", "abandon_turn"]
    assert "within 5 s" in err.getvalue()


def test_the_wait_ends_quietly_when_the_turn_ended() -> None:
    """When the agent answered the cancel before the wait ran out (ask is stopping it),
    the end of the wait gives up nothing and says nothing."""
    handler, window, clock, err = interrupts(turn_running=True)
    handler.received(signal.SIGINT)
    window.turn_running = False  # the agent answered cancelled
    before = err.getvalue()
    clock.advance(5)
    assert window.calls == ["cancel", "abandon_turn"]
    assert err.getvalue() == before


def test_first_signal_without_a_turn_stops_the_agent() -> None:
    """Outside a turn (the handshake, the final stop) a first signal stops the agent."""
    handler, window, clock, _err = interrupts(turn_running=False)
    handler.received(signal.SIGINT)
    assert window.calls == ["cancel", "close"]
    assert handler.exit_status == 130
    assert clock.getDelayedCalls() == []


def test_second_signal_kills_without_waiting() -> None:
    """A second signal gives up the turn and kills the agent's group at once; the cancel
    wait is over; the status stays the first signal's."""
    handler, window, clock, _err = interrupts(turn_running=True)
    handler.received(signal.SIGINT)
    handler.received(signal.SIGTERM)
    assert window.calls == ["cancel", "abandon_turn", "close", "kill"]
    assert clock.getDelayedCalls() == []
    assert handler.exit_status == 130


def test_signals_after_finish_do_nothing() -> None:
    """Once ask is done, signals are ignored (nothing is left to stop)."""
    handler, window, _clock, _err = interrupts(turn_running=True)
    handler.finish(restore=False)
    handler.received(signal.SIGINT)
    assert window.calls == []
    assert handler.exit_status is None


def test_install_and_restore_handlers() -> None:
    """install() takes SIGINT and SIGTERM (and again once the reactor runs);
    finish() puts the previous handlers back."""
    before = {signum: signal.getsignal(signum) for signum in SIGNALS}
    handler, _window, clock, _err = interrupts(turn_running=False)
    started: list[Any] = []
    clock.callWhenRunning = started.append  # type: ignore[attr-defined]
    handler.install()
    assert started == [handler._take_signals]
    started[0]()
    try:
        for signum in SIGNALS:
            assert signal.getsignal(signum) == handler._handler
    finally:
        handler.finish()
    assert {signum: signal.getsignal(signum) for signum in SIGNALS} == before
