"""The ``bash`` tool: run a shell command in the session's directory.

The command runs as ``bash -c CMD`` (``/bin/sh -c CMD`` when bash is missing) in a new session,
so it leads its own process group: stopping it (cancel or timeout) sends SIGTERM to the whole
group, then SIGKILL after a short grace, and no child survives.  Standard input is closed;
standard output and standard error share one pipe, so their interleaving is kept.  Output is
capped: the head and the tail are kept around a ``[… N bytes omitted …]`` marker.

The call ends when the shell exits: a background job (``cmd &``, ``(cmd &)``) that still
holds the output pipe does not hold the call longer than :attr:`BashTool.pipe_grace`; the
result then says which pids still run.  Every group stays in
:data:`acpkit.io.process_groups.child_groups` until it is empty, so such jobs are killed at
the latest when the agent's process exits (see :meth:`ChildGroups.kill_at_shutdown`).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.protocol import ProcessProtocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from acpkit.io.process_groups import (
    ChildGroups,
    child_groups,
    group_has_live_members,
    group_members,
    kill_group,
)
from acpkit_agent.tools.base import (
    ArgumentError,
    ToolContext,
    ToolResult,
    number_arg,
    text_arg,
    title_text,
)

__all__ = ["BashRun", "BashTool", "OutputCap", "find_shell", "group_has_live_members"]

_log = Logger()

#: Run in the child before the shell: become a session (and process-group) leader, send
#: standard error into the standard output pipe, then replace itself with the shell (same pid).
_LAUNCHER = (
    "import os, sys\n"
    "os.setsid()\n"
    "os.dup2(1, 2)\n"
    "os.execv(sys.argv[1], [sys.argv[1], '-c', sys.argv[2]])\n"
)


def find_shell() -> str:
    """The shell commands run with: ``bash`` from ``PATH``, else ``/bin/sh``."""
    return shutil.which("bash") or "/bin/sh"


@attrs.define
class OutputCap:
    """Keeps at most ``limit`` bytes of a stream: its head and its tail, counting the rest."""

    limit: int = 64 * 1024
    _head: bytearray = attrs.field(factory=bytearray, init=False)
    _tail: bytearray = attrs.field(factory=bytearray, init=False)
    total: int = attrs.field(default=0, init=False)
    """How many bytes were fed in all."""

    def feed(self, data: bytes) -> None:
        """Account for ``data``, keeping what fits in the head and the latest bytes as tail."""
        self.total += len(data)
        head_room = self.limit // 2 - len(self._head)
        if head_room > 0:
            self._head += data[:head_room]
            data = data[head_room:]
        if data:
            tail_size = self.limit - self.limit // 2
            self._tail += data
            if len(self._tail) > tail_size:
                del self._tail[: len(self._tail) - tail_size]

    @property
    def omitted(self) -> int:
        """How many bytes were dropped between head and tail."""
        return self.total - len(self._head) - len(self._tail)

    def text(self) -> str:
        """The kept bytes as text (UTF-8, invalid bytes replaced) with the omission marker."""
        head = bytes(self._head).decode("utf-8", "replace")
        tail = bytes(self._tail).decode("utf-8", "replace")
        if self.omitted:
            return f"{head}\n[… {self.omitted} bytes omitted …]\n{tail}"
        return head + tail


class _CommandProtocol(ProcessProtocol):
    """Collects the merged output and reports the exit of the shell and the end of its pipe."""

    def __init__(self, cap: OutputCap, on_output: Callable[[bytes], None] | None) -> None:
        self.cap = cap
        self.on_output = on_output
        self.reason: Failure | None = None
        self.exit_reason: Failure | None = None
        #: Fires when the shell has exited (its output pipe may still be held open).
        self.exited: Deferred[None] = Deferred()
        #: Fires when the shell has exited and every holder of its output pipe closed it.
        self.ended: Deferred[None] = Deferred()

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.transport.closeStdin()

    def childDataReceived(self, childFD: int, data: bytes) -> None:
        self.cap.feed(data)
        if self.on_output is not None:
            try:
                self.on_output(data)
            except Exception:
                _log.failure("bash output observer failed")

    def processExited(self, reason: Failure) -> None:
        # Not passed to callback(): a Failure there would run the errback chain.
        self.exit_reason = reason
        self.exited.callback(None)

    def processEnded(self, reason: Failure) -> None:
        self.reason = reason
        if not self.exited.called:
            self.exit_reason = reason
            self.exited.callback(None)
        self.ended.callback(None)


@attrs.define(eq=False)
class BashRun:
    """One running command: ``result`` is the tool's Deferred, ``ended`` fires when it is gone.

    ``ended`` fires (with None) once the shell has exited and every process holding its
    output pipe has closed it, which includes children that were killed with the group.
    ``result`` may fire before: when the shell has exited but a background job still holds
    the pipe :attr:`BashTool.pipe_grace` seconds later.
    """

    pid: int | None
    result: Deferred[ToolResult]
    ended: Deferred[None]


@attrs.define
class BashTool:
    """Runs ``bash -c COMMAND`` in the session cwd (see the module docstring)."""

    output_limit: int = 64 * 1024
    """How many bytes of output are kept (half head, half tail)."""
    default_timeout: float | None = 600.0
    """Seconds before a command without a ``timeout`` argument is stopped (None: never)."""
    kill_grace: float = 2.0
    """Seconds between SIGTERM and SIGKILL when stopping a command's process group."""
    shell: str = attrs.field(factory=find_shell)
    pipe_grace: float = 0.2
    """Seconds the call still reads output once the shell has exited, when background jobs
    hold the output pipe open; then it returns, saying which pids still run."""
    groups: ChildGroups = attrs.field(default=child_groups)
    """Where each command's process group is tracked until it is empty (killed at exit)."""

    name: str = attrs.field(default="bash", init=False)
    kind: str = attrs.field(default="execute", init=False)
    description: str = attrs.field(
        default=(
            "Run a shell command with bash in the session's working directory and return its "
            "combined standard output and error (long output keeps its head and tail). Standard "
            "input is closed. A non-zero exit status is reported as '[exit status N]'. The call "
            "returns when the shell exits; background jobs (cmd &) keep running until the agent "
            "exits."
        ),
        init=False,
    )
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command line, run by bash -c."},
                "timeout": {
                    "type": "number",
                    "description": "Seconds after which the command is stopped.",
                },
            },
            "required": ["command"],
            "additionalProperties": False,
        },
        init=False,
    )

    def title(self, args: Mapping[str, Any]) -> str:
        """``bash: <command>``."""
        return f"bash: {title_text(args, 'command')}"

    def locations(self, args: Mapping[str, Any], cwd: str) -> list[str]:
        """A command concerns no particular file."""
        return []

    def needs_permission(self, args: Mapping[str, Any]) -> bool:
        """Always: running a command may change anything."""
        return True

    def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Deferred[ToolResult]:
        """Run the command; cancelling kills its process group."""
        return self.start(ctx, args).result

    def start(
        self,
        ctx: ToolContext,
        args: Mapping[str, Any],
        on_output: Callable[[bytes], None] | None = None,
    ) -> BashRun:
        """Start the command and return its :class:`BashRun`; ``on_output`` sees each chunk."""
        done: Deferred[None] = Deferred()
        try:
            command = text_arg(args, "command")
            timeout = number_arg(args, "timeout")
        except ArgumentError as error:
            done.callback(None)
            return BashRun(None, _failed_now(f"bash: {error}"), done)
        assert command is not None
        if not command.strip():
            done.callback(None)
            return BashRun(None, _failed_now("bash: the command is empty"), done)
        if timeout is None:
            timeout = self.default_timeout
        if not os.path.isdir(ctx.cwd):
            done.callback(None)
            message = f"bash: the working directory {ctx.cwd} does not exist"
            return BashRun(None, _failed_now(message), done)
        return _Execution(self, ctx, command, timeout, on_output, done).launch()


def _failed_now(message: str) -> Deferred[ToolResult]:
    result: Deferred[ToolResult] = Deferred()
    result.callback(ToolResult(output=message, failed=True))
    return result


class _Execution:
    """The life of one command: spawn, collect, time out, cancel, kill the group."""

    def __init__(
        self,
        tool: BashTool,
        ctx: ToolContext,
        command: str,
        timeout: float | None,
        on_output: Callable[[bytes], None] | None,
        done: Deferred[None],
    ) -> None:
        self.tool = tool
        self.reactor = ctx.reactor
        self.cwd = ctx.cwd
        self.command = command
        self.timeout = timeout
        self.cap = OutputCap(tool.output_limit)
        self.protocol = _CommandProtocol(self.cap, on_output)
        self.done = done
        self.result: Deferred[ToolResult] = Deferred(self._cancel)
        self.pid: int | None = None
        self.exited = False
        self.timed_out = False
        self.timer: IDelayedCall | None = None
        self.kill_timer: IDelayedCall | None = None
        self.pipe_timer: IDelayedCall | None = None

    def launch(self) -> BashRun:
        try:
            transport = self.reactor.spawnProcess(
                self.protocol,
                sys.executable,
                [sys.executable, "-S", "-c", _LAUNCHER, self.tool.shell, self.command],
                env=None,
                path=self.cwd,
                childFDs={0: "w", 1: "r", 2: "r"},
            )
        except Exception as error:
            self.done.callback(None)
            self.result.callback(
                ToolResult(output=f"bash: cannot start the command: {error}", failed=True)
            )
            return BashRun(None, self.result, self.done)
        self.pid = transport.pid
        if self.pid is not None:
            self.tool.groups.add(self.pid)
        _log.debug("bash: started pid {pid}: {command!r}", pid=self.pid, command=self.command)
        if self.timeout is not None:
            self.timer = self.reactor.callLater(self.timeout, self._time_out)
        self.protocol.exited.addCallback(self._shell_exited)
        self.protocol.ended.addCallback(self._ended)
        return BashRun(self.pid, self.result, self.done)

    def _time_out(self) -> None:
        self.timer = None
        self.timed_out = True
        _log.info("bash: pid {pid} timed out after {timeout}s", pid=self.pid, timeout=self.timeout)
        self._stop_group()

    def _cancel(self, result: Deferred[ToolResult]) -> None:
        # The Deferred then fails with CancelledError; the process group is stopped.
        _log.info("bash: pid {pid} cancelled", pid=self.pid)
        self._cancel_pipe_timer()
        self._stop_group()

    def _stop_group(self) -> None:
        self._cancel_timer()
        self._signal_group(signal.SIGTERM)
        if self.kill_timer is None:
            self.kill_timer = self.reactor.callLater(self.tool.kill_grace, self._kill_group)

    def _kill_group(self) -> None:
        self.kill_timer = None
        self._signal_group(signal.SIGKILL)
        self._finish_if_ended()

    def _signal_group(self, signum: int) -> None:
        if self.pid is not None:
            kill_group(self.pid, signum)

    def _group_alive(self) -> bool:
        return self.pid is not None and group_has_live_members(self.pid)

    def _cancel_timer(self) -> None:
        if self.timer is not None and self.timer.active():
            self.timer.cancel()
        self.timer = None

    def _cancel_pipe_timer(self) -> None:
        if self.pipe_timer is not None and self.pipe_timer.active():
            self.pipe_timer.cancel()
        self.pipe_timer = None

    def _shell_exited(self, ignored: None) -> None:
        """The shell is gone; whoever still holds the pipe gets ``pipe_grace`` seconds."""
        self._cancel_timer()
        if not self.result.called and not self.protocol.ended.called:
            self.pipe_timer = self.reactor.callLater(self.tool.pipe_grace, self._pipe_grace_over)

    def _pipe_grace_over(self) -> None:
        """Background jobs hold the output pipe: the call ends now, they keep running."""
        self.pipe_timer = None
        reason = self.protocol.exit_reason
        assert reason is not None
        if not self.result.called:
            self.result.callback(self._outcome(reason))

    def _ended(self, ignored: None) -> None:
        self.exited = True
        self._cancel_pipe_timer()
        reason = self.protocol.exit_reason or self.protocol.reason
        assert reason is not None
        self._cancel_timer()
        if not self.result.called:
            self.result.callback(self._outcome(reason))
        self._finish_if_ended()

    def _finish_if_ended(self) -> None:
        if not self.exited:
            return
        if self.kill_timer is not None and self.kill_timer.active():
            # Stopped by us: wait for the SIGKILL unless the whole group is already gone.
            if self._group_alive():
                return
            self.kill_timer.cancel()
            self.kill_timer = None
        if self.pid is not None and not self._group_alive():
            self.tool.groups.discard(self.pid)
        if not self.done.called:
            self.done.callback(None)

    def _outcome(self, reason: Failure) -> ToolResult:
        text = self.cap.text()
        notes: list[str] = []
        exit_status: int | None = None
        value = reason.value
        if isinstance(value, ProcessDone):
            exit_status = 0
        elif isinstance(value, ProcessTerminated):
            if value.exitCode is not None:
                exit_status = value.exitCode
            elif value.signal is not None:
                notes.append(f"[killed by signal {value.signal}]")
        if exit_status not in (0, None):
            notes.append(f"[exit status {exit_status}]")
        if self.timed_out:
            notes.append(f"[timed out after {self.timeout:g} s; the command was stopped]")
        elif self.pid is not None:
            left = group_members(self.pid)
            if left:
                notes.append(
                    f"[still running in the background: pid {', '.join(map(str, left))}; "
                    "stopped when the agent exits]"
                )
        if not text and not notes:
            text = "[no output]"
        output = text
        if notes:
            separator = "\n" if text and not text.endswith("\n") else ""
            output = text + separator + "\n".join(notes)
        failed = exit_status != 0 or self.timed_out
        return ToolResult(output=output, failed=failed, exit_status=exit_status)
