"""What ``acpkit-client ask`` does when it gets ``SIGINT`` (Ctrl-C) or ``SIGTERM``.

==================================  ==================================================
first signal, a turn running        ``session/cancel``; the agent has ``cancel_wait``
                                    seconds to end the turn, then the turn is given up
first signal, no turn running       the agent is stopped (stdin closed, then its
                                    process group ended)
the cancel wait runs out            the turn is given up; the agent is stopped
a later signal                      no more waiting: the turn is given up and the
                                    agent's whole process group is killed (``SIGKILL``)
exit status                         ``128 +`` the first signal's number: 130 for
                                    ``SIGINT``, 143 for ``SIGTERM``
==================================  ==================================================

The handlers run on the reactor (``callFromThread``): nothing is done inside the
signal handler itself, so a signal arriving anywhere (during shutdown included) never
raises an exception in the middle of other code; they stay in place until the agent is
gone, and signals after that are ignored.
"""

from __future__ import annotations

import signal
from typing import IO, Any, Protocol

from twisted.internet.interfaces import IDelayedCall

__all__ = ["DEFAULT_CANCEL_WAIT", "SIGNALS", "AskInterrupts", "StoppableWindow", "exit_status"]

#: Seconds the agent has to answer a cancelled turn after the first signal.
DEFAULT_CANCEL_WAIT = 5.0

#: The signals ``ask`` handles.
SIGNALS = (signal.SIGINT, signal.SIGTERM)


def exit_status(signum: int) -> int:
    """The exit status after signal ``signum``: ``128 + signum`` (the shells' convention)."""
    return 128 + signum


class StoppableWindow(Protocol):
    """What :class:`AskInterrupts` needs of an agent window."""

    def cancel(self) -> bool:
        """Send ``session/cancel``; False when no turn runs."""

    def abandon_turn(self) -> bool:
        """Stop waiting for the turn (it fails at once); False when none runs."""

    def close(self) -> Any:
        """Stop the agent gracefully (stdin closed, then its process group)."""

    def kill(self) -> Any:
        """Kill the agent's process group now."""


class AskInterrupts:
    """Counts ``ask``'s signals and acts on them (see the module docstring)."""

    def __init__(
        self,
        reactor: Any,
        window: StoppableWindow,
        err: IO[str],
        cancel_wait: float = DEFAULT_CANCEL_WAIT,
    ) -> None:
        self.reactor = reactor
        self.window = window
        self.err = err
        self.cancel_wait = cancel_wait
        #: The first signal received, if any.
        self.first: int | None = None
        #: How many signals were received.
        self.count = 0
        self._wait: IDelayedCall | None = None
        self._previous: dict[int, Any] = {}
        self._finished = False

    @property
    def exit_status(self) -> int | None:
        """``128 +`` the first signal, or None when no signal came."""
        return None if self.first is None else exit_status(self.first)

    # -- handlers ------------------------------------------------------------------------

    def install(self) -> None:
        """
        Handle :data:`SIGNALS` now, and again once the reactor runs (starting, it puts
        its own ``SIGTERM`` handler in place, which would stop it and leave the agent
        running).
        """
        self._take_signals()
        self.reactor.callWhenRunning(self._take_signals)

    def _take_signals(self) -> None:
        if self._finished:
            return
        for signum in SIGNALS:
            current = signal.getsignal(signum)
            if current != self._handler:
                self._previous.setdefault(signum, current)
                signal.signal(signum, self._handler)

    def finish(self, restore: bool = True) -> None:
        """
        ``ask`` is done: later signals do nothing; ``restore`` puts the previous handlers
        back (``False`` when the process is about to exit: a signal then cannot reach a
        reactor that is stopping).
        """
        self._finished = True
        self._stop_waiting()
        if restore:
            for signum, previous in self._previous.items():
                signal.signal(signum, previous)
            self._previous.clear()

    def _handler(self, signum: int, frame: Any) -> None:
        self.reactor.callFromThread(self.received, signum)

    # -- what a signal does ----------------------------------------------------------------

    def _say(self, text: str) -> None:
        self.err.write(f"\nacpkit-client: {text}\n")
        self.err.flush()

    def received(self, signum: int) -> None:
        """Act on signal ``signum`` (on the reactor)."""
        if self._finished:
            return
        self.count += 1
        if self.count == 1:
            self.first = signum
            again = "Ctrl-C again" if signum == signal.SIGINT else "a second signal"
            if self.window.cancel():
                self._say(f"cancelling the turn ({again} stops the agent)")
                self._wait = self.reactor.callLater(self.cancel_wait, self._gave_up)
            else:
                self._say("stopping the agent")
                self.window.close()
            return
        self._stop_waiting()
        self._say("stopping the agent now")
        self.window.abandon_turn()
        self.window.close()
        self.window.kill()

    def _gave_up(self) -> None:
        self._wait = None
        if self.window.abandon_turn():  # (the turn may have ended meanwhile)
            self._say(
                f"the agent did not end the cancelled turn within {self.cancel_wait:g} s; "
                "stopping it"
            )

    def _stop_waiting(self) -> None:
        wait, self._wait = self._wait, None
        if wait is not None and wait.active():
            wait.cancel()
