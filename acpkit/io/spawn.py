"""
Agents as child processes: :func:`spawn_agent` starts one (no shell, in its own process
group) and connects a protocol to its stdin and stdout.  Its stderr is always drained,
logged line by line, and a bounded tail is kept: when the agent ends, the protocol's
``connectionLost`` gets an :class:`~acpkit.errors.AgentExited` with its exit status and
its last words.

The framings and the JSON-RPC protocols get half-close handling (they provide
``IHalfCloseableProtocol``) and, when ``ACPKIT_TRACE`` is set, a tracer
(:func:`acpkit.trace.attach_tracer`).
"""

from __future__ import annotations

import collections
import os
import shutil
import signal as signal_module
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attr
from twisted.internet.defer import Deferred, ensureDeferred, succeed
from twisted.internet.error import ProcessTerminated
from twisted.internet.interfaces import (
    IAddress,
    IConsumer,
    IDelayedCall,
    IHalfCloseableProtocol,
    IProcessTransport,
    IProducer,
    IProtocol,
    IPushProducer,
    IReactorProcess,
    IReactorTime,
    ITransport,
)
from twisted.internet.protocol import ProcessProtocol, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from acpkit.compat import flush_writer, process_pipe
from acpkit.errors import AgentExited
from acpkit.io.held_writes import ReadWrites
from acpkit.io.process_groups import kill_group, process_group_argv
from acpkit.trace.recording import TRACE_VARIABLE, attach_tracer

__all__ = [
    "PIPE_DRAIN_TIMEOUT",
    "STDERR_LINE_CAP",
    "STDOUT_EOF_GRACE",
    "AgentAddress",
    "AgentExited",
    "AgentNotFoundError",
    "AgentProcess",
    "AgentTransport",
    "spawn_agent",
]

_log = Logger(namespace="acpkit.io.spawn")

#: Longest stderr line kept in the tail (and logged); longer lines are cut.
STDERR_LINE_CAP = 2000

#: When the agent closes its stdout while still running, how long to wait for it to exit
#: before telling the protocol (``readConnectionLost``).  An agent that exits (or crashes)
#: within this delay gets only ``connectionLost(AgentExited)``, so pending requests fail
#: with its exit status and stderr tail rather than with a bare "end of input".
STDOUT_EOF_GRACE = 0.5

#: After the agent process has exited, how long to wait for its pipes to reach EOF
#: (a grandchild may hold them open) before closing them ourselves.
PIPE_DRAIN_TIMEOUT = 1.0


class AgentNotFoundError(FileNotFoundError):
    """The agent's command is not an existing executable (or not found in ``PATH``)."""


@implementer(IAddress)
@attr.s(frozen=True, auto_attribs=True)
class AgentAddress:
    """The address of an agent process: its name and process id."""

    name: str
    pid: int | None


class _StderrTail:
    """Splits stderr into lines, logs each with the process's kind and name, keeps the last."""

    def __init__(self, name: str, max_lines: int, kind: str = "agent") -> None:
        self._name = name
        self._kind = kind
        self._lines: collections.deque[str] = collections.deque(maxlen=max(max_lines, 0))
        self._partial = bytearray()
        self._skipping = False  # inside an overlong line whose head was already kept

    def feed(self, data: bytes) -> None:
        """Consume a chunk of stderr."""
        while data:
            end = data.find(b"\n")
            chunk, data = (data, b"") if end == -1 else (data[:end], data[end + 1 :])
            if not self._skipping:
                room = STDERR_LINE_CAP - len(self._partial)
                self._partial += chunk[: max(room, 0)]
                if len(chunk) > room:
                    self._emit(cut=True)
                    self._skipping = True
            if end != -1:
                if self._skipping:
                    self._skipping = False
                else:
                    self._emit(cut=False)

    def flush(self) -> None:
        """Keep a last line that ended without a newline."""
        if self._partial:
            self._emit(cut=False)
        self._skipping = False

    def _emit(self, cut: bool) -> None:
        text = bytes(self._partial).decode("utf-8", "replace").rstrip("\r")
        self._partial.clear()
        if cut:
            text += " [...]"
        self._lines.append(text)
        _log.info("{kind} {agent} stderr: {line}", kind=self._kind, agent=self._name, line=text)

    def text(self) -> str:
        """The kept lines, joined with newlines."""
        return "\n".join(self._lines)


@implementer(ITransport, IConsumer, IPushProducer)
class AgentTransport:
    """
    ``protocol.transport`` for a spawned agent.

    ``write``/``writeSequence`` go to the agent's stdin.  ``loseConnection`` closes
    stdin once queued data is written; the agent's stdout is still read until EOF and
    ``connectionLost`` comes when the process ends (use :meth:`AgentProcess.stop` to
    force it).  ``abortConnection`` kills the agent's process group.  Pausing pauses
    reading stdout only: stderr is always drained.
    """

    #: Never set: after ``loseConnection`` the agent's replies are still delivered.
    disconnecting = False

    def __init__(self, agent: AgentProcess, process: IProcessTransport) -> None:
        self._agent = agent
        #: The underlying Twisted process transport.
        self.process = process
        #: True while reading stdout is paused.
        self.paused = False
        # What the protocol writes while it processes a read of the agent's stdout.
        self._writes = ReadWrites(lambda: process_pipe(self.process, 0))

    def write(self, data: bytes) -> None:
        """Write to the agent's stdin (during a read of its stdout: once the read is
        processed, see :class:`~acpkit.io.held_writes.ReadWrites`)."""
        if not self._writes.hold([data], len(data)):
            self.process.write(data)

    def writeSequence(self, data: Iterable[bytes]) -> None:
        """Write several byte strings to the agent's stdin."""
        chunks = list(data)
        if not self._writes.hold(chunks, sum(map(len, chunks))):
            self.process.writeSequence(chunks)

    def flushNow(self) -> None:
        """Write buffered input for the agent now rather than on the reactor's next turn."""
        self._writes.release()
        flush_writer(process_pipe(self.process, 0))

    def _deliver(self, protocol: IProtocol, data: bytes) -> None:
        """Give ``protocol`` a read of the agent's stdout; write what it wrote meanwhile."""
        writes = self._writes
        writes.reading = True
        try:
            protocol.dataReceived(data)
        finally:
            writes.reading = False
            writes.release()

    def loseConnection(self) -> None:
        """Close the agent's stdin after queued data is written."""
        self._writes.release()
        self.process.closeStdin()

    def abortConnection(self) -> None:
        """Kill the agent's whole process group now."""
        self._agent._kill_group(signal_module.SIGKILL)

    def getPeer(self) -> AgentAddress:
        """The agent."""
        return AgentAddress(self._agent.name, self._agent.pid)

    def getHost(self) -> AgentAddress:
        """The agent (a pipe has no local address of its own)."""
        return AgentAddress(self._agent.name, self._agent.pid)

    def registerProducer(self, producer: IProducer, streaming: bool) -> None:
        """Register a producer of data for the agent's stdin."""
        self.process.registerProducer(producer, streaming)  # type: ignore[attr-defined]

    def unregisterProducer(self) -> None:
        """Unregister the stdin producer."""
        self.process.unregisterProducer()  # type: ignore[attr-defined]

    def _stdout_reader(self) -> Any:
        return process_pipe(self.process, 1)

    def pauseProducing(self) -> None:
        """Stop reading the agent's stdout (stderr keeps being drained)."""
        self.paused = True
        reader = self._stdout_reader()
        if reader is not None:
            reader.stopReading()

    def resumeProducing(self) -> None:
        """Read the agent's stdout again."""
        self.paused = False
        reader = self._stdout_reader()
        if reader is not None:
            reader.startReading()

    def stopProducing(self) -> None:
        """Stop reading stdout for good (the pipes are closed once the agent exits)."""
        reader = self._stdout_reader()
        if reader is not None:
            reader.stopReading()


class _AgentProcessProtocol(ProcessProtocol):
    """Routes the child's pipes to the agent handle."""

    def __init__(self, agent: AgentProcess) -> None:
        self._agent = agent

    def connectionMade(self) -> None:
        assert self.transport is not None
        self._agent._started(self.transport)

    def childDataReceived(self, childFD: int, data: bytes) -> None:
        self._agent._child_data(childFD, data)

    def childConnectionLost(self, childFD: int) -> None:
        self._agent._child_connection_lost(childFD)

    def processExited(self, reason: Failure) -> None:
        self._agent._process_exited()

    def processEnded(self, reason: Failure) -> None:
        self._agent._process_ended(reason)


class AgentProcess:
    """
    A running agent child process connected to ``protocol``; made by :func:`spawn_agent`.

    ``exited`` gives a new Deferred on each access, firing with the :class:`AgentExited`
    once the process has ended and its output was delivered (never an errback).
    """

    def __init__(
        self,
        reactor: Any,
        protocol: IProtocol,
        name: str,
        stderr_tail_lines: int,
        kind: str = "agent",
    ) -> None:
        self._reactor: IReactorTime = reactor
        #: The protocol connected to the agent's stdin/stdout.
        self.protocol = protocol
        #: The agent's name (logs, traces, errors).
        self.name = name
        #: What the process is, in logs and errors (``"agent"``, ``"MCP server"``...).
        self.kind = kind
        #: The process id (also the id of the agent's process group).
        self.pid: int | None = None
        self.transport: AgentTransport | None = None
        self._stderr = _StderrTail(name, stderr_tail_lines, kind)
        self._leader_exited = False
        self._exit_waiters: list[Deferred[bool]] = []
        self._result: AgentExited | None = None
        self._ended_waiters: list[Deferred[AgentExited]] = []
        self._drain_call: IDelayedCall | None = None
        self._eof_call: IDelayedCall | None = None

    # -- public --------------------------------------------------------------------

    @property
    def exited(self) -> Deferred[AgentExited]:
        """A new Deferred firing with the :class:`AgentExited` when the process has ended."""
        if self._result is not None:
            return succeed(self._result)
        d: Deferred[AgentExited] = Deferred()
        self._ended_waiters.append(d)
        return d

    def stderr_tail(self) -> str:
        """The last lines the agent wrote to stderr."""
        return self._stderr.text()

    def stop(self, grace: float = 2.0) -> Deferred[AgentExited]:
        """
        Stop the agent: close its stdin, wait ``grace`` seconds for it to exit, then
        SIGTERM its process group, wait ``grace`` again, then SIGKILL the group.  Once
        the agent itself has exited, what is left of its group is killed too.
        """
        return ensureDeferred(self._stop(grace))

    def kill(self) -> Deferred[AgentExited]:
        """
        Kill the agent's whole process group now (``SIGKILL``), without the graces of
        :meth:`stop`; a :meth:`stop` under way then ends at once.  Fires like
        :attr:`exited`.
        """
        self._kill_group(signal_module.SIGKILL)
        return self.exited

    async def _stop(self, grace: float) -> AgentExited:
        if self.transport is not None and not self._leader_exited:
            self.transport.loseConnection()
            if not await self._wait_leader_exit(grace):
                self._kill_group(signal_module.SIGTERM)
                if not await self._wait_leader_exit(grace):
                    self._kill_group(signal_module.SIGKILL)
        result = await self.exited
        # Grandchildren left in the group (they may hold the pipes open) go too.
        self._kill_group(signal_module.SIGKILL)
        return result

    # -- internals ---------------------------------------------------------------------

    def _wait_leader_exit(self, timeout: float) -> Deferred[bool]:
        d: Deferred[bool] = Deferred()
        if self._leader_exited:
            d.callback(True)
            return d
        self._exit_waiters.append(d)

        def expire() -> None:
            if d in self._exit_waiters:
                self._exit_waiters.remove(d)
                d.callback(False)

        call = self._reactor.callLater(timeout, expire)

        def cancel_timer(result: bool) -> bool:
            if call.active():
                call.cancel()
            return result

        return d.addCallback(cancel_timer)

    def _kill_group(self, sig: int) -> None:
        """Send ``sig`` to the agent's process group (or to the agent alone, if no group)."""
        if self.pid is not None:
            kill_group(self.pid, sig)

    def _started(self, process: IProcessTransport) -> None:
        self.pid = process.pid
        if self.pid is not None:
            try:
                # Also done by the child; whichever runs first wins the race.
                os.setpgid(self.pid, self.pid)
            except OSError:
                pass
        self.transport = AgentTransport(self, process)
        self.protocol.makeConnection(self.transport)

    def _child_data(self, fd: int, data: bytes) -> None:
        if fd == 1:
            if self.transport is not None:
                self.transport._deliver(self.protocol, data)
            else:
                self.protocol.dataReceived(data)
        elif fd == 2:
            self._stderr.feed(data)

    def _child_connection_lost(self, fd: int) -> None:
        half_closeable = IHalfCloseableProtocol.providedBy(self.protocol)
        if fd == 1 and half_closeable:
            # An agent that closes its stdout is almost always exiting: wait for the
            # exit, so that the protocol learns why (status and stderr tail) through
            # connectionLost instead of a bare end of input.  One that lives on with
            # its stdout closed gets the end of input after a grace period.
            if not self._leader_exited:
                self._eof_call = self._reactor.callLater(STDOUT_EOF_GRACE, self._stdout_ended)
        elif fd == 0 and half_closeable:
            self.protocol.writeConnectionLost()  # type: ignore[attr-defined]
        elif fd == 2:
            self._stderr.flush()

    def _stdout_ended(self) -> None:
        """The agent closed its stdout long ago and is still running."""
        self._eof_call = None
        if self._result is None:
            self.protocol.readConnectionLost()  # type: ignore[attr-defined]

    def _cancel_eof_call(self) -> None:
        if self._eof_call is not None and self._eof_call.active():
            self._eof_call.cancel()
        self._eof_call = None

    def _process_exited(self) -> None:
        self._leader_exited = True
        self._cancel_eof_call()
        waiters, self._exit_waiters = self._exit_waiters, []
        for d in waiters:
            d.callback(True)
        self._drain_call = self._reactor.callLater(PIPE_DRAIN_TIMEOUT, self._close_pipes)

    def _close_pipes(self) -> None:
        """The agent exited but something still holds its pipes open: stop reading."""
        self._drain_call = None
        if self.transport is not None and self.transport.paused:
            # Unread output waits in the pipe until the protocol resumes reading.
            self._drain_call = self._reactor.callLater(PIPE_DRAIN_TIMEOUT, self._close_pipes)
            return
        if self._result is None and self.transport is not None:
            _log.warn(
                "{kind} {agent} exited but its output pipes are still open; closing them",
                kind=self.kind,
                agent=self.name,
            )
            self.transport.process.loseConnection()

    def _process_ended(self, reason: Failure) -> None:
        self._cancel_eof_call()
        if self._drain_call is not None and self._drain_call.active():
            self._drain_call.cancel()
        self._drain_call = None
        self._stderr.flush()
        exit_code: int | None = 0
        sig: int | None = None
        if isinstance(reason.value, ProcessTerminated):
            exit_code = reason.value.exitCode
            sig = reason.value.signal
        result = AgentExited(self.name, exit_code, sig, self._stderr.text(), self.kind)
        self._result = result
        if not self._leader_exited:
            self._process_exited_late()
        try:
            self.protocol.connectionLost(Failure(result))
        except Exception:
            _log.failure(
                "connectionLost of {kind} {agent}'s protocol failed",
                kind=self.kind,
                agent=self.name,
            )
        waiters, self._ended_waiters = self._ended_waiters, []
        for d in waiters:
            d.callback(result)

    def _process_exited_late(self) -> None:
        self._leader_exited = True
        waiters, self._exit_waiters = self._exit_waiters, []
        for d in waiters:
            d.callback(True)


def _resolve_command(command: str, path_variable: str | None, cwd: str | None) -> str:
    """The executable the agent runs, resolved like ``execvp`` would in the child."""
    separators = [os.sep] + ([os.altsep] if os.altsep else [])
    if any(sep in command for sep in separators):
        candidate = command if cwd is None else os.path.join(cwd, command)
        if not os.path.isfile(candidate):
            raise AgentNotFoundError(f'agent command "{command}" does not exist')
        if not os.access(candidate, os.X_OK):
            raise PermissionError(f'agent command "{command}" is not executable')
        return os.path.abspath(candidate)
    found = shutil.which(command, path=path_variable if path_variable is not None else os.defpath)
    if found is None:
        raise AgentNotFoundError(
            f'agent command "{command}" not found in PATH ({path_variable or os.defpath})'
        )
    return os.path.abspath(found)


def spawn_agent(
    reactor: Any,
    protocol: IProtocol | Protocol,
    command: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    name: str | None = None,
    stderr_tail_lines: int = 50,
    kind: str = "agent",
) -> AgentProcess:
    """
    Start ``command args...`` (no shell) as a child process and connect ``protocol``.

    - ``env``: ``None`` inherits our environment; a mapping is added over it.
      ``ACPKIT_TRACE`` is never passed on (not even from ``env``): the tracer attached
      here records both directions already.
    - ``command`` is looked up in the child's ``PATH`` unless it contains a path
      separator; a missing one raises :class:`AgentNotFoundError` here.
    - The child leads its own process group, so :meth:`AgentProcess.stop` can end it
      and everything it started.
    - The agent's stdout feeds ``protocol.dataReceived``.  If the agent closes its
      stdout and is still running ``STDOUT_EOF_GRACE`` seconds later, an
      ``IHalfCloseableProtocol`` gets ``readConnectionLost()``; the end of the process
      calls ``protocol.connectionLost(Failure(AgentExited(...)))`` after stdout was
      delivered (a last unterminated line included).  stderr is logged line by line
      (``<kind> <name> stderr: <line>``) and its tail kept.
    - ``kind`` names what the child is in logs and errors: ``"agent"`` by default,
      ``"MCP server"`` for :func:`acpkit.mcp.stdio.connect_stdio`'s servers.
    """
    if not IReactorProcess.providedBy(reactor):
        raise TypeError(f"{reactor!r} cannot spawn processes")
    child_env = dict(os.environ)
    if env is not None:
        child_env.update(env)
    # Our own trace already records both directions of this connection; an acpkit
    # agent given ACPKIT_TRACE would write every message a second time (its records
    # named after its own peer, "client").  Callers often pass their whole environment
    # as ``env``, so it is removed from that too: no spawned agent traces.
    child_env.pop(TRACE_VARIABLE, None)
    executable = _resolve_command(command, child_env.get("PATH"), cwd)
    if cwd is not None and not os.path.isdir(cwd):
        raise NotADirectoryError(f'agent working directory "{cwd}" is not a directory')
    agent_name = name if name is not None else os.path.basename(command)
    attach_tracer(protocol, agent_name)
    agent = AgentProcess(reactor, protocol, agent_name, stderr_tail_lines, kind)
    launcher, argv = process_group_argv(executable, [command, *args])
    reactor.spawnProcess(
        _AgentProcessProtocol(agent),
        launcher,
        argv,
        env=child_env,
        path=cwd,
    )
    return agent
