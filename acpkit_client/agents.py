"""Agent processes: start one from its agents-file entry, shake hands, watch it, stop it.

An :class:`AgentRun` is one agent of one window:

1. :meth:`AgentRun.spawn` starts the entry's command (looked up like the agents file says,
   ``env`` added over ours, in the entry's ``cwd`` resolved against the project root) with
   :func:`acpkit.endpoints.spawn_agent`, on a :class:`~acpkit.connection.ClientConnection`
   whose IClient is the window; ``ACPKIT_TRACE`` gives the connection a tracer.
   (:meth:`AgentRun.attach` takes an existing connection instead: in-memory pairs.)
2. :meth:`AgentRun.handshake` sends ``initialize`` (fs read/write, no terminal,
   ``clientInfo`` acpkit-client), refuses a protocol version we do not speak, notes
   ``authMethods`` (a login we cannot do: ``authenticate`` is never called), then
   ``session/new`` with the entry's cwd and no MCP servers.
3. :meth:`AgentRun.stop` closes the agent's stdin, then its process group.

Whatever fails is kept in :attr:`AgentRun.problems` (plain sentences, for **Agent
status**) and the run's :attr:`AgentRun.state` says where it is.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger

from acpkit import __version__, schema
from acpkit.connection import ClientConnection, ProtocolVersionError
from acpkit.endpoints import AgentExited, AgentProcess, spawn_agent
from acpkit.errors import AuthRequired, RPCError
from acpkit.interfaces import IClient
from acpkit.trace import tracer_from_environment
from acpkit_client.config import AgentEntry
from acpkit_client.interfaces import IAgentObserver

__all__ = [
    "CLIENT_NAME",
    "AgentRun",
    "AgentStartError",
    "AgentState",
    "client_capabilities",
    "client_info",
]

log = Logger()

#: The ``clientInfo.name`` we announce.
CLIENT_NAME = "acpkit-client"


class AgentState(enum.Enum):
    """Where an agent run is."""

    NOT_STARTED = "not started"
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"
    EXITED = "exited"
    STOPPED = "stopped"


class AgentStartError(Exception):
    """The agent could not be started or its session could not be opened; ``str()`` says why."""


def client_capabilities() -> schema.ClientCapabilities:
    """What we announce: ``fs`` read and write; no ``terminal``."""
    return schema.ClientCapabilities(
        fs=schema.FileSystemCapabilities(read_text_file=True, write_text_file=True),
        terminal=False,
    )


def client_info() -> schema.Implementation:
    """Our ``clientInfo``."""
    return schema.Implementation(name=CLIENT_NAME, title="acpkit client", version=__version__)


def _describe_auth_methods(methods: list[Any]) -> str:
    names = []
    for method in methods:
        name = getattr(method, "name", None) or getattr(method, "id", None)
        if name is None:
            raw = getattr(method, "raw", None)
            name = raw.get("name") if isinstance(raw, dict) else None
        names.append(str(name or "?"))
    return ", ".join(names)


class AgentRun:
    """One agent process (or in-memory connection) and its session (module docstring)."""

    def __init__(
        self,
        entry: AgentEntry,
        project_root: str,
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        self.entry = entry
        self.project_root = os.path.abspath(project_root)
        self.environ = environ
        self.state = AgentState.NOT_STARTED
        #: What went wrong, in order (plain sentences for Agent status).
        self.problems: list[str] = []
        #: Notes that are not failures (e.g. the agent lists authMethods).
        self.notes: list[str] = []
        self.process: AgentProcess | None = None
        self.connection: ClientConnection | None = None
        self.initialize_response: schema.InitializeResponse | None = None
        self.session_id: str | None = None
        #: How the process ended, once it has.
        self.exit: AgentExited | None = None
        #: True when the agent listed ``authMethods`` (a login we cannot do).
        self.needs_login = False
        self._observers: list[IAgentObserver] = []
        self._stopping: Deferred[Any] | None = None

    # -- observers ---------------------------------------------------------------------

    def subscribe(self, observer: IAgentObserver) -> None:
        """Tell ``observer`` about every later state change."""
        self._observers.append(observer)

    def _set_state(self, state: AgentState) -> None:
        if state is self.state:
            return
        self.state = state
        for observer in list(self._observers):
            try:
                observer.agent_state_changed(self)
            except Exception:
                log.failure("agent observer {observer!r} failed", observer=observer)

    def _fail(self, problem: str) -> AgentStartError:
        log.warn("agent {name}: {problem}", name=self.entry.name, problem=problem)
        self.problems.append(problem)
        if self.state not in (AgentState.EXITED, AgentState.STOPPED):
            self._set_state(AgentState.FAILED)
        return AgentStartError(problem)

    # -- properties ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The agent's name (menu, window title, traces)."""
        return self.entry.name

    @property
    def cwd(self) -> str:
        """Where the agent runs, and the ``cwd`` of its session."""
        return self.entry.resolved_cwd(self.project_root)

    @property
    def agent_capabilities(self) -> schema.AgentCapabilities:
        """What the agent announced (all unsupported before ``initialize``)."""
        response = self.initialize_response
        if response is None or response.agent_capabilities is None:
            return schema.AgentCapabilities()
        return response.agent_capabilities

    # -- starting ------------------------------------------------------------------------

    def spawn(self, reactor: Any, client: IClient) -> ClientConnection:
        """Start the agent process with ``client`` as its IClient; raise AgentStartError."""
        self._set_state(AgentState.STARTING)
        env = self.entry.child_environment(self.environ)
        executable = self.entry.find_executable(self.project_root, env)
        if executable is None:
            if any(sep in self.entry.command for sep in (os.sep, os.altsep) if sep):
                raise self._fail(
                    f'cannot start: "{self.entry.command}" does not exist or is not executable '
                    f"(relative to {self.cwd})"
                )
            raise self._fail(
                f'cannot start: command "{self.entry.command}" not found in PATH '
                f"({env.get('PATH', os.defpath)})"
            )
        connection = ClientConnection(client, name=self.entry.name)
        tracer = tracer_from_environment(self.entry.name, self.environ)
        if tracer is not None:
            connection.protocol.tracer = tracer
        try:
            process = spawn_agent(
                reactor,
                connection.protocol,
                executable,
                self.entry.args,
                env=dict(env),
                cwd=self.cwd,
                name=self.entry.name,
            )
        except OSError as e:
            raise self._fail(f"cannot start: {e}") from None
        self.process = process
        process.exited.addCallback(self.record_exit)
        self.connection = connection
        return connection

    def attach(self, connection: ClientConnection) -> None:
        """Use an already connected ``connection`` (no process: in-memory, sockets)."""
        self._set_state(AgentState.STARTING)
        self.connection = connection

    async def handshake(self) -> str:
        """``initialize`` then ``session/new``; return the session id or raise AgentStartError."""
        connection = self.connection
        if connection is None:
            raise self._fail("not started")
        try:
            response = await connection.initialize(
                client_capabilities=client_capabilities(), client_info=client_info()
            )
        except ProtocolVersionError as e:
            raise self._fail(str(e)) from None
        except Exception as e:
            raise self._fail(f"initialize failed: {self._reason(e)}") from None
        self.initialize_response = response
        if response.auth_methods:
            self.needs_login = True
            self.notes.append(
                "the agent requires a login that acpkit-client cannot do (authMethods: "
                f"{_describe_auth_methods(list(response.auth_methods))}); log in with the "
                "agent's own command line before starting it here"
            )
        try:
            session = await connection.new_session(
                schema.NewSessionRequest(cwd=self.cwd, mcp_servers=[])
            )
        except AuthRequired as e:
            raise self._fail(
                f"session/new failed: the agent requires a login that acpkit-client cannot do "
                f"({e}); log in with the agent's own command line first"
            ) from None
        except Exception as e:
            raise self._fail(f"session/new failed: {self._reason(e)}") from None
        self.session_id = session.session_id
        if self.state is AgentState.STARTING:
            self._set_state(AgentState.READY)
        return session.session_id

    def _reason(self, error: BaseException) -> str:
        if isinstance(error, RPCError):
            return f"{error} (code {error.code})"
        if self.exit is not None:
            return str(self.exit)
        return str(error) or type(error).__name__

    # -- ending ----------------------------------------------------------------------------

    def record_exit(self, exit: AgentExited) -> AgentExited:
        """Note how the process ended (once; later calls change nothing)."""
        if self.exit is not None:
            return exit
        self.exit = exit
        if self.state is not AgentState.STOPPED:
            self.problems.append(str(exit))
            self._set_state(AgentState.EXITED)
        return exit

    def stop(self, grace: float = 2.0) -> Deferred[Any]:
        """
        Close the agent's stdin, then end its process group (see ``AgentProcess.stop``).
        Fires once the process has ended (at once without a process); calling it again
        waits for the same end.
        """
        if self._stopping is None:
            if self.state is not AgentState.EXITED:
                self._set_state(AgentState.STOPPED)
            if self.process is not None:
                self._stopping = self.process.stop(grace)
            else:
                connection = self.connection
                if connection is not None and connection.protocol.transport is not None:
                    connection.protocol.transport.loseConnection()
                self._stopping = succeed(None)
        waiter: Deferred[Any] = Deferred()

        def relay(result: Any) -> Any:
            waiter.callback(result)
            return result

        self._stopping.addBoth(relay)
        return waiter
