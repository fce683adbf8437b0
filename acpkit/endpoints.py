"""
Transports for ACP connections: stdio, child-process agents, Twisted endpoint strings.

Every function here works with any :class:`~twisted.internet.interfaces.IProtocol`;
the framings (:class:`acpkit.framing.NDJSONProtocol`,
:class:`acpkit.framing_headers.ContentLengthProtocol`) and the JSON-RPC protocols that
hold them additionally get half-close handling (they provide ``IHalfCloseableProtocol``)
and, when ``ACPKIT_TRACE`` is set, a tracer (they provide :class:`acpkit.framing.ITraced`).

- :func:`serve_stdio` runs a protocol on this process's stdin/stdout (the agent side).
- :func:`spawn_agent` starts an agent as a child process in its own process group and
  connects a protocol to its stdin/stdout (the client side); its stderr is always
  drained, logged line by line, and a bounded tail is kept for diagnostics.
- :func:`serve` / :func:`connect` use Twisted endpoint strings (``tcp:0``,
  ``unix:/path``, ``tcp:host=127.0.0.1:port=8000``...).
"""

from __future__ import annotations

import collections
import os
import shutil
import signal as signal_module
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attr
from twisted.internet.defer import Deferred, ensureDeferred, succeed
from twisted.internet.endpoints import clientFromString, connectProtocol, serverFromString
from twisted.internet.error import ConnectionDone, ProcessTerminated
from twisted.internet.interfaces import (
    IAddress,
    IConsumer,
    IDelayedCall,
    IHalfCloseableProtocol,
    IListeningPort,
    IProcessTransport,
    IProducer,
    IProtocol,
    IProtocolFactory,
    IPushProducer,
    IReactorProcess,
    IReactorTime,
    IStreamClientEndpoint,
    IStreamServerEndpoint,
    ITransport,
)
from twisted.internet.protocol import ProcessProtocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from acpkit.admission import Admission, AdmissionLimits, AdmittedFactory
from acpkit.compat import StandardIO, flush_writer, process_pipe, stdio_writer
from acpkit.framing import ITraced
from acpkit.process_groups import kill_group

__all__ = [
    "AgentAddress",
    "AgentExited",
    "AgentNotFoundError",
    "AgentProcess",
    "AgentTransport",
    "connect",
    "process_group_argv",
    "serve",
    "serve_remote",
    "serve_stdio",
    "spawn_agent",
]

_log = Logger(namespace="acpkit.endpoints")

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


def _attach_tracer(protocol: IProtocol, name: str) -> None:
    """
    Give a traced protocol (:class:`acpkit.framing.ITraced`: a framing, or a JSON-RPC
    protocol, which hands it to its framing) without a tracer the ``ACPKIT_TRACE``
    tracer, if any.
    """
    if ITraced.providedBy(protocol) and protocol.tracer is None:
        from acpkit.trace import tracer_from_environment

        protocol.tracer = tracer_from_environment(name)


# -- stdio and endpoint strings -------------------------------------------------------


def _flush_writer(writer: Any) -> None:
    """
    Write what ``writer`` (a Twisted ``FileDescriptor``) has buffered now, instead of
    on the reactor's next turn.

    Twisted buffers every write until the reactor polls the descriptor again: one more
    loop iteration per message, which is most of a request's round-trip time over a
    pipe.  Transports made here offer ``flushNow()`` so the JSON-RPC layer can flush
    once it has written what it had to say (see ``acpkit.jsonrpc``).  The Twisted
    internals this needs, and what happens without them, are in ``acpkit.compat``.
    """
    flush_writer(writer)


class _StandardIO(StandardIO):
    """
    ``StandardIO`` that always ends with ``connectionLost``, and can flush at once.

    With an ``IHalfCloseableProtocol``, stock ``StandardIO`` never calls
    ``connectionLost`` when stdout is lost first (the peer stopped reading: it died)
    and ``loseConnection`` comes later: the process would then wait forever.
    """

    def flushNow(self) -> None:
        """Write buffered output now rather than on the reactor's next turn."""
        _flush_writer(stdio_writer(self))

    def loseConnection(self) -> None:
        super().loseConnection()
        if stdio_writer(self) is None and not self.disconnected:
            self.connectionLost(Failure(ConnectionDone("stdout was already closed")))


def serve_stdio(
    protocol: IProtocol,
    reactor: Any = None,
    *,
    name: str = "client",
    stdin: int = 0,
    stdout: int = 1,
) -> StandardIO:
    """
    Connect ``protocol`` to this process's stdin and stdout (or the given descriptors).

    When stdin reaches EOF, an ``IHalfCloseableProtocol`` (every framing and
    JSON-RPC protocol of acpkit) gets ``readConnectionLost()`` and may still write its
    last replies; other protocols get ``connectionLost``.  ``loseConnection`` always leads to
    ``connectionLost``, also when stdout was closed by the peer first.  ``name`` is the
    peer name used in traces.
    """
    _attach_tracer(protocol, name)
    return _StandardIO(protocol, stdin=stdin, stdout=stdout, reactor=reactor)


def serve(
    reactor: Any,
    description: str,
    factory: IProtocolFactory,
    *,
    no_token: bool = False,
    client_ca: str | os.PathLike[str] | None = None,
    limits: AdmissionLimits | None = None,
) -> Deferred[IListeningPort]:
    """
    Listen on a server endpoint string (``"unix:/path/sock"``, ``"tcp:0"``...) for raw
    NDJSON, under the bind policy every acpkit listener shares
    (:mod:`acpkit.bind_policy`): loopback by default; a unix socket is owner-only; TCP
    needs TLS client certificates (``client_ca``: a PEM file of CA certificates,
    ``ssl:`` only) or, on loopback only, ``no_token=True`` (any local user can then
    connect: raw NDJSON carries no token).  A refused listener is a failed Deferred
    (:class:`~acpkit.bind_policy.InsecureBindError`), before anything listens.
    Connections are admitted (:mod:`acpkit.admission`, ``limits``): a connection that
    has not sent a first line within ``pending_timeout`` is closed, and so are the
    oldest silent ones when caps are reached.
    """
    from twisted.internet.defer import fail

    from acpkit.bind_policy import BindAuthentication, check_bind, speaks_proxy_protocol

    auth = BindAuthentication(client_certificate=client_ca is not None, no_token=no_token)
    try:
        description = check_bind(description, auth, raw=True)
        if client_ca is None:
            endpoint: IStreamServerEndpoint = serverFromString(reactor, description)
        else:
            from pathlib import Path

            from acpkit.remote.tls_server import server_endpoint

            endpoint = server_endpoint(reactor, description, client_ca=Path(client_ca).expanduser())
    except Exception as e:  # the policy's refusal, whatever the endpoint parser raises
        return fail(e)
    admission = Admission(limits, clock=reactor, proxied=speaks_proxy_protocol(description))
    return endpoint.listen(AdmittedFactory(factory, admission, accept_on=b"\n"))


def serve_remote(
    reactor: Any, endpoint_description: str, agent_factory: Any, **options: Any
) -> Deferred[IListeningPort]:
    """Serve an agent over remote ACP (HTTP, WebSocket): :func:`acpkit.remote.serve_remote`."""
    from acpkit.remote.server import serve_remote as serve_remote_

    return serve_remote_(reactor, endpoint_description, agent_factory, **options)


def connect(reactor: Any, description: str, protocol: IProtocol) -> Deferred[IProtocol]:
    """Connect ``protocol`` to a client endpoint string; fires with the protocol."""
    endpoint: IStreamClientEndpoint = clientFromString(reactor, description)
    connected: Deferred[IProtocol] = connectProtocol(endpoint, protocol)
    return connected


# -- child-process agents -------------------------------------------------------------


class AgentNotFoundError(FileNotFoundError):
    """The agent's command is not an existing executable (or not found in ``PATH``)."""


class AgentExited(Exception):
    """
    An agent process ended; the value of the Failure given to ``connectionLost``.

    ``exit_code`` is ``None`` when the process was killed by ``signal``.  ``kind`` is
    what the process is (``spawn_agent``'s ``kind``: ``"agent"``, ``"MCP server"``...).
    """

    def __init__(
        self,
        name: str,
        exit_code: int | None,
        signal: int | None,
        stderr_tail: str,
        kind: str = "agent",
    ) -> None:
        super().__init__(name, exit_code, signal, stderr_tail)
        self.name = name
        self.exit_code = exit_code
        self.signal = signal
        self.stderr_tail = stderr_tail
        self.kind = kind

    @property
    def summary(self) -> str:
        """One line: what ended and how, without the stderr lines."""
        if self.signal is not None:
            how = f"was killed by signal {self.signal}"
        else:
            how = f"exited with status {self.exit_code}"
        return f'{self.kind} "{self.name}" {how}'

    def __str__(self) -> str:
        text = self.summary
        if self.stderr_tail:
            text += f"; last stderr lines:\n{self.stderr_tail}"
        return text


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

    def write(self, data: bytes) -> None:
        """Write to the agent's stdin."""
        self.process.write(data)

    def writeSequence(self, data: Iterable[bytes]) -> None:
        """Write several byte strings to the agent's stdin."""
        self.process.writeSequence(list(data))

    def flushNow(self) -> None:
        """Write buffered input for the agent now rather than on the reactor's next turn."""
        _flush_writer(process_pipe(self.process, 0))

    def loseConnection(self) -> None:
        """Close the agent's stdin after queued data is written."""
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
    protocol: IProtocol,
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
    from acpkit.trace import TRACE_VARIABLE

    child_env.pop(TRACE_VARIABLE, None)
    executable = _resolve_command(command, child_env.get("PATH"), cwd)
    if cwd is not None and not os.path.isdir(cwd):
        raise NotADirectoryError(f'agent working directory "{cwd}" is not a directory')
    agent_name = name if name is not None else os.path.basename(command)
    _attach_tracer(protocol, agent_name)
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
