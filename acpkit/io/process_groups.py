"""
Process groups a program starts and must not outlive: signal them, see who is left in
them, and make sure they are gone when the program exits, however it exits.

- :func:`kill_group` signals a whole process group (falling back to the leader alone).
- :func:`group_members` / :func:`group_has_live_members` read ``/proc`` (zombies do not
  count), with ``killpg(pgid, 0)`` where there is no ``/proc``.
- :class:`ChildGroups` keeps the groups still alive; :data:`child_groups` is the one of
  this process.  :meth:`ChildGroups.kill_at_shutdown` makes the reactor's shutdown end
  them (SIGTERM, then SIGKILL after :data:`SHUTDOWN_GRACE`), and starts a watchdog: a
  small process, in a session of its own, that reads a pipe from this one and kills
  every group still listed when the pipe reaches end of file, that is when this
  process has exited, even by SIGKILL or a crash.

What this cannot follow: a process that leaves its group (``setsid``, ``setpgid``, a
shell with job control ``set -m``, a daemon that detaches).  A group's id is the pid of
its leader; once a group is empty its id may in principle be given to a new process,
so groups are forgotten as soon as they are seen empty (:meth:`ChildGroups.prune`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import IO, Any

from twisted.internet.defer import Deferred
from twisted.logger import Logger

__all__ = [
    "SHUTDOWN_GRACE",
    "ChildGroups",
    "child_groups",
    "group_has_live_members",
    "group_members",
    "kill_group",
    "process_group_argv",
]

_log = Logger(namespace="acpkit.io.process_groups")

# Runs in the child before the program: become a process-group leader (so that the
# whole group can be signalled), then replace itself with the program.  argv[1] is the
# resolved executable, argv[2:] the program's argv (argv[0] as the user wrote it).
_PGROUP_SHIM = (
    "import os, sys\n"
    "try:\n"
    "    os.setpgid(0, 0)\n"
    "except OSError:\n"
    "    pass\n"
    "os.execv(sys.argv[1], sys.argv[2:])\n"
)


def process_group_argv(executable: str, argv: Sequence[str]) -> tuple[str, list[str]]:
    """
    What to pass to ``reactor.spawnProcess`` so that ``executable`` (with ``argv``,
    ``argv[0]`` included) runs as the leader of its own process group: killing the
    group (``os.killpg(pid, sig)``) then also ends everything it started.  Twisted's
    ``spawnProcess`` cannot do this itself; a tiny Python shim execs the program.
    """
    return sys.executable, [sys.executable, "-I", "-S", "-c", _PGROUP_SHIM, executable, *argv]


SHUTDOWN_GRACE = 1.0
"""Seconds between SIGTERM and SIGKILL for the groups still alive at reactor shutdown."""

_POLL = 0.05

# The watchdog: ignore the signals a terminal or a process manager sends to the
# program's group, track "+pgid" / "-pgid" lines, and kill what is left at end of file.
_WATCHDOG = (
    "import os, signal, sys\n"
    "for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):\n"
    "    signal.signal(s, signal.SIG_IGN)\n"
    "groups = set()\n"
    "for line in sys.stdin.buffer:\n"
    "    line = line.strip()\n"
    "    if line[:1] == b'+':\n"
    "        groups.add(int(line[1:]))\n"
    "    elif line[:1] == b'-':\n"
    "        groups.discard(int(line[1:]))\n"
    "for g in groups:\n"
    "    try:\n"
    "        os.killpg(g, signal.SIGKILL)\n"
    "    except OSError:\n"
    "        pass\n"
)


def kill_group(pgid: int, sig: int) -> bool:
    """
    Send ``sig`` to process group ``pgid``; when there is no such group, to process
    ``pgid`` alone if it is our child (a leader that has not yet made its group; never a
    stranger that got the pid of a leader long gone).  False when nothing was signalled.
    """
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        pass
    except PermissionError as error:
        _log.warn("cannot signal process group {pgid}: {error}", pgid=pgid, error=error)
        return False
    if not _is_our_child(pgid):
        return False
    try:
        os.kill(pgid, sig)
        return True
    except OSError:
        return False


def _is_our_child(pid: int) -> bool:
    """Whether ``pid`` is a child of this process (assumed so where ``/proc`` is missing)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stream:
            fields = stream.read().rsplit(b")", 1)[1].split()
    except FileNotFoundError:
        return not os.path.isdir("/proc/self")
    except (OSError, IndexError):
        return False
    try:
        return int(fields[1]) == os.getpid()
    except (IndexError, ValueError):
        return False


def _proc_stats() -> list[tuple[int, bytes, int]] | None:
    """``(pid, state, pgid)`` of every process in ``/proc``; None without ``/proc``."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    if not names:
        return None
    stats: list[tuple[int, bytes, int]] = []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stream:
                fields = stream.read().rsplit(b")", 1)[1].split()
            stats.append((int(name), fields[0], int(fields[2])))
        except (OSError, IndexError, ValueError):
            continue
    return stats


def group_members(pgid: int) -> list[int]:
    """
    The pids of the live (not zombie) members of process group ``pgid``, sorted.

    Without ``/proc``: ``[pgid]`` when ``killpg(pgid, 0)`` finds the group, else ``[]``.
    """
    stats = _proc_stats()
    if stats is None:
        try:
            os.killpg(pgid, 0)
        except OSError:
            return []
        return [pgid]
    return sorted(pid for pid, state, group in stats if group == pgid and state not in (b"Z", b"X"))


def group_has_live_members(pgid: int) -> bool:
    """Whether process group ``pgid`` still has a member that is not a zombie."""
    return bool(group_members(pgid))


class ChildGroups:
    """
    The process groups this process started that may still be running.

    ``add`` a group when it is made and ``discard`` it once it is known to be empty;
    :meth:`kill_all` ends them all.  Nothing is killed by merely forgetting a group.
    """

    def __init__(self) -> None:
        self._groups: set[int] = set()
        self._watchdog: subprocess.Popen[bytes] | None = None
        #: Whether a watchdog is wanted (started with the first group, once).
        self._watching = False
        self._installed: set[int] = set()

    def __contains__(self, pgid: object) -> bool:
        return pgid in self._groups

    def __iter__(self) -> Any:
        return iter(sorted(self._groups))

    def __len__(self) -> int:
        return len(self._groups)

    def add(self, pgid: int) -> None:
        """Track ``pgid`` (forgetting first the groups already empty)."""
        self.prune()
        self._groups.add(pgid)
        if self._watching and self._watchdog is None:
            self._start_watchdog()  # sends every group, this one included
        else:
            self._tell(f"+{pgid}")

    def discard(self, pgid: int) -> None:
        """Stop tracking ``pgid`` (its members are gone, or someone else owns them now)."""
        if pgid in self._groups:
            self._groups.discard(pgid)
            self._tell(f"-{pgid}")

    def prune(self) -> None:
        """Forget the groups that have no live member left (one pass over ``/proc``)."""
        if not self._groups:
            return
        stats = _proc_stats()
        if stats is None:
            alive = {pgid for pgid in self._groups if group_has_live_members(pgid)}
        else:
            alive = {group for _, state, group in stats if state not in (b"Z", b"X")}
        for pgid in list(self._groups):
            if pgid not in alive:
                self.discard(pgid)

    def signal_all(self, sig: int) -> None:
        """Send ``sig`` to every tracked group."""
        for pgid in sorted(self._groups):
            kill_group(pgid, sig)

    def kill_all(self, reactor: Any, grace: float = SHUTDOWN_GRACE) -> Deferred[None]:
        """
        SIGTERM every tracked group, SIGKILL those still alive ``grace`` seconds later;
        fires once every group is empty (or right after the SIGKILL).
        """
        done: Deferred[None] = Deferred()
        self.prune()
        if not self._groups:
            done.callback(None)
            return done
        _log.info("stopping process groups {groups}", groups=sorted(self._groups))
        self.signal_all(signal.SIGTERM)
        deadline = reactor.seconds() + grace

        def check() -> None:
            self.prune()
            if not self._groups:
                done.callback(None)
            elif reactor.seconds() >= deadline:
                self.signal_all(signal.SIGKILL)
                self.prune()
                done.callback(None)
            else:
                reactor.callLater(_POLL, check)

        reactor.callLater(_POLL, check)
        return done

    def kill_at_shutdown(self, reactor: Any, *, watchdog: bool = True) -> None:
        """
        Make ``reactor``'s shutdown (``reactor.stop()``, SIGTERM, SIGINT) end every
        tracked group first; with ``watchdog``, also have a watchdog process (started
        with the first group) kill them if this process dies without a shutdown
        (SIGKILL, crash).  Installing twice on one reactor does nothing more.
        """
        if id(reactor) not in self._installed:
            self._installed.add(id(reactor))
            reactor.addSystemEventTrigger("before", "shutdown", self.kill_all, reactor)
        if watchdog and not self._watching:
            self._watching = True
            if self._groups:
                self._start_watchdog()

    # -- the watchdog ----------------------------------------------------------------

    def _start_watchdog(self) -> None:
        try:
            self._watchdog = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _WATCHDOG],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=True,
                start_new_session=True,
            )
        except OSError as error:
            _log.warn("cannot start the process-group watchdog: {error}", error=error)
            self._watching = False
            return
        for pgid in sorted(self._groups):
            self._tell(f"+{pgid}")

    @property
    def watchdog_pid(self) -> int | None:
        """The watchdog's pid, or None when there is none."""
        return None if self._watchdog is None else self._watchdog.pid

    def _tell(self, line: str) -> None:
        watchdog = self._watchdog
        if watchdog is None:
            return
        stream: IO[bytes] | None = watchdog.stdin
        if stream is None:
            return
        try:
            stream.write(line.encode("ascii") + b"\n")
            stream.flush()
        except (OSError, ValueError) as error:
            _log.warn("the process-group watchdog is gone: {error}", error=error)
            self._watchdog = None
            self._watching = False


child_groups = ChildGroups()
"""The groups of this process (the ``bash`` tool's commands, hooks)."""
