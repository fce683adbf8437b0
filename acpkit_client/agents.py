"""Agent processes: start one from its agents-file entry, shake hands, watch it, stop it.

An :class:`AgentRun` is one agent of one window:

1. :meth:`AgentRun.spawn` starts the entry's command (looked up like the agents file says,
   ``env`` added over ours, in the entry's ``cwd`` resolved against the project root) with
   :func:`acpkit.endpoints.spawn_agent`, on a :class:`~acpkit.connection.ClientConnection`
   whose IClient is the window; ``ACPKIT_TRACE`` gives the connection a tracer.
   (:meth:`AgentRun.attach` takes an existing connection instead: in-memory pairs.)
   An entry with a ``url`` is connected instead (:meth:`AgentRun.connect`,
   :func:`acpkit.remote.connect.connect_remote`, its ``headers`` sent, never shown).  Once
   its session is open, a connection lost later is made again and the session loaded
   again (:mod:`acpkit.remote.reconnect`, :data:`RECONNECT_POLICY`), the state
   ``reconnecting`` meanwhile and each step a note; an agent that cannot load sessions,
   or a resume that gave up, is reported like an exit.
2. :meth:`AgentRun.handshake` sends ``initialize`` (fs read/write, no terminal,
   ``clientInfo`` acpkit-client), refuses a protocol version we do not speak, keeps
   ``authMethods`` (``authenticate`` is never called: a login is only reported when the
   agent answers ``-32000`` "authentication required"), then ``session/new`` with the
   entry's cwd and no MCP servers.  With a ``timeout``, both must be answered within it
   or the handshake fails with :class:`HandshakeTimeout` naming the unanswered request.
3. :meth:`AgentRun.stop` closes the agent's stdin, then its process group.

Whatever fails is kept in :attr:`AgentRun.problems` (plain sentences, for **Agent
status**) and the run's :attr:`AgentRun.state` says where it is.
"""

from __future__ import annotations

import enum
import json
import os
import re
from collections.abc import Mapping
from typing import Any, TypeVar

from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from acpkit import __version__, schema
from acpkit.connection import ClientConnection, ProtocolVersionError
from acpkit.endpoints import AgentExited, AgentProcess, spawn_agent
from acpkit.errors import AuthRequired, RPCError, clip
from acpkit.interfaces import IClient
from acpkit.remote.reconnect import IReconnectObserver, ResumableConnection, RetryPolicy
from acpkit.trace import tracer_from_environment
from acpkit_client.config import AgentEntry
from acpkit_client.interfaces import IAgentObserver

__all__ = [
    "CLIENT_NAME",
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "RECONNECT_POLICY",
    "AgentRun",
    "AgentStartError",
    "AgentState",
    "HandshakeTimeout",
    "client_capabilities",
    "client_info",
    "describe_auth_methods",
    "describe_rpc_error",
]

log = Logger()

#: The ``clientInfo.name`` we announce.
CLIENT_NAME = "acpkit-client"

#: At most this many characters of an error's ``data`` (as compact JSON) are shown.
ERROR_DATA_LIMIT = 500

#: At most this many characters of an error's ``message`` are shown.
ERROR_MESSAGE_LIMIT = 500

_T = TypeVar("_T")


class AgentState(enum.Enum):
    """Where an agent run is."""

    NOT_STARTED = "not started"
    STARTING = "starting"
    READY = "ready"
    RECONNECTING = "reconnecting"
    FAILED = "failed"
    EXITED = "exited"
    STOPPED = "stopped"


#: How a remote agent's lost connection is made again: 12 attempts, the first at once,
#: then after 0.5, 1, 2, 4, 8, then 10 s (each shortened at random by up to a fifth):
#: 60 to 76 s in all, longer than a server's grace period (60 s), after which a
#: connection cut while its process lives lets its session go.
RECONNECT_POLICY = RetryPolicy(attempts=12, first_delay=0.5, factor=2.0, max_delay=10.0, jitter=0.2)

#: Seconds an agent has to answer ``initialize`` and ``session/new`` (``ask`` and the
#: terminal UI; ``--handshake-timeout`` changes it).
DEFAULT_HANDSHAKE_TIMEOUT = 30.0


class AgentStartError(Exception):
    """The agent could not be started or its session could not be opened; ``str()`` says why."""


class HandshakeTimeout(AgentStartError):
    """The agent did not answer ``initialize`` or ``session/new`` in time."""

    def __init__(self, method: str, timeout: float) -> None:
        super().__init__(f"no answer to {method} within {timeout:g} s")
        #: The request that was not answered (``initialize`` or ``session/new``).
        self.method = method
        self.timeout = timeout


def describe_rpc_error(error: RPCError) -> str:
    """
    One line for an error the agent answered: its message once, its code once, and its
    ``data`` (compact JSON, cut at :data:`ERROR_DATA_LIMIT` characters) when there is any.

    >>> describe_rpc_error(RPCError(-32603, "Internal error", {"reason": "no API key"}))
    'Internal error (code -32603; data: {"reason":"no API key"})'
    """
    message = " ".join(str(error.message).split()) or "(no message)"
    suffix = f"(code {error.code})"
    if message.endswith(suffix):  # some agents put the code in the message already
        message = message[: -len(suffix)].rstrip() or message
    message = clip(message, ERROR_MESSAGE_LIMIT)
    if error.data is None:
        return f"{message} (code {error.code})"
    try:
        data = json.dumps(error.data, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        data = repr(error.data)
    return f"{message} (code {error.code}; data: {clip(data, ERROR_DATA_LIMIT)})"


class _Deadline:
    """One time limit over several requests: when it expires, the pending one is cancelled."""

    def __init__(self, clock: Any, seconds: float | None) -> None:
        self.seconds = seconds
        self.expired = False
        self._pending: Deferred[Any] | None = None
        self._call: IDelayedCall | None = None
        if clock is not None and seconds is not None:
            self._call = clock.callLater(seconds, self._expire)

    def _expire(self) -> None:
        self.expired = True
        pending, self._pending = self._pending, None
        if pending is not None and not pending.called:
            pending.cancel()

    async def wait(self, d: Deferred[_T]) -> _T:
        """What ``d`` fires with; CancelledError when the deadline passes first."""
        if self.expired:
            d.cancel()
        else:
            self._pending = d
        try:
            return await d
        finally:
            self._pending = None

    def stop(self) -> None:
        """The handshake is over: no more deadline."""
        if self._call is not None and self._call.active():
            self._call.cancel()


#: A transport's error that already says it could not connect, and where: its reason.
_SAYS_CONNECT = re.compile(r"(?:could not|cannot) (?:connect to|reach) \S+: (.*)", re.DOTALL)


def client_capabilities(*, forms: bool = False) -> schema.ClientCapabilities:
    """
    What we announce: ``fs`` read and write; no ``terminal``; ``elicitation.form`` when
    ``forms`` (a front end that can ask the user a form); never ``elicitation.url``.
    """
    return schema.ClientCapabilities(
        fs=schema.FileSystemCapabilities(read_text_file=True, write_text_file=True),
        terminal=False,
        elicitation=schema.ElicitationCapabilities(form=schema.ElicitationFormCapabilities())
        if forms
        else None,
    )


def client_info() -> schema.Implementation:
    """Our ``clientInfo``."""
    return schema.Implementation(name=CLIENT_NAME, title="acpkit client", version=__version__)


def describe_auth_methods(methods: list[Any]) -> str:
    """The names of the listed ``authMethods``, comma-separated."""
    names = []
    for method in methods:
        name = getattr(method, "name", None) or getattr(method, "id", None)
        if name is None:
            raw = getattr(method, "raw", None)
            name = raw.get("name") if isinstance(raw, dict) else None
        names.append(str(name or "?"))
    return ", ".join(names)


@implementer(IReconnectObserver)
class AgentRun:
    """
    One agent process (or in-memory connection) and its session (module docstring);
    what a remote agent's resumable connection tells it (IReconnectObserver) becomes
    its state and notes.
    """

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
        #: Notes that are not failures.
        self.notes: list[str] = []
        #: Announce ``elicitation.form`` at ``initialize`` (the front end can ask forms).
        self.announce_forms = False
        self.process: AgentProcess | None = None
        self.connection: ClientConnection | None = None
        self.initialize_response: schema.InitializeResponse | None = None
        self.session_id: str | None = None
        #: How the process ended, once it has.
        self.exit: AgentExited | None = None
        #: True once the agent answered -32000 "authentication required" (a login we
        #: cannot do); listing ``authMethods`` alone does not set it.
        self.needs_login = False
        self._observers: list[IAgentObserver] = []
        self._stopping: Deferred[Any] | None = None
        #: A remote agent's connection that comes back when lost (once its session is
        #: open and the agent can load sessions: :meth:`resume_when_lost`).
        self.resumable: ResumableConnection | None = None

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
        connection = ClientConnection(
            client,
            name=self.entry.name,
            tracer=tracer_from_environment(self.entry.name, self.environ),
        )
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

    def _connect_remote(self, reactor: Any, client: IClient) -> Deferred[ClientConnection]:
        """A new connection to the entry's ``url`` (not initialized)."""
        from acpkit.remote.connect import connect_remote

        url = self.entry.url
        if url is None:
            raise ValueError(f"agent {self.entry.name!r} has no url")
        return connect_remote(
            reactor,
            url,
            client,
            headers=dict(self.entry.headers),
            tls=self.entry.tls,
            http2=self.entry.http2,
            name=self.entry.name,
            token_file=self.entry.token_file,
        )

    def connect(self, reactor: Any, client: IClient) -> Deferred[ClientConnection]:
        """Connect to the entry's ``url`` with ``client`` as its IClient; fails with
        AgentStartError."""
        if self.entry.url is None:
            raise ValueError(f"agent {self.entry.name!r} has no url")
        self._set_state(AgentState.STARTING)
        connecting = self._connect_remote(reactor, client)

        def connected(connection: ClientConnection) -> ClientConnection:
            if connection.protocol.tracer is None:
                connection.protocol.tracer = tracer_from_environment(self.entry.name, self.environ)
            self.connection = connection
            connection.closed.addErrback(self._connection_lost)
            return connection

        def failed(failure: Failure) -> Failure:
            error = failure.value
            why = str(error) or type(error).__name__
            said = _SAYS_CONNECT.match(why)
            if said is not None:  # the transport's own "could not connect to URL: ..."
                why = said.group(1)
            raise self._fail(f"cannot connect to {self.entry.command_line()}: {why}")

        return connecting.addCallbacks(connected, failed)

    def _connection_lost(self, failure: Failure) -> None:
        """A remote agent's connection ended other than by :meth:`stop`: like an exit
        (unless it is being made again: :meth:`resume_when_lost`)."""
        if self.state is AgentState.STOPPED or self.resumable is not None:
            return
        shown = self.entry.command_line()
        self.problems.append(f"the connection to {shown} was lost: {failure.value}")
        self._set_state(AgentState.EXITED)

    # -- a remote agent's connection, made again when lost ------------------------------------

    def resume_when_lost(
        self, reactor: Any, client: IClient, policy: RetryPolicy = RECONNECT_POLICY
    ) -> bool:
        """
        From now on (the session is open), a lost connection to the remote agent is made
        again and the session loaded again (:class:`ResumableConnection`): the state is
        ``reconnecting`` meanwhile, ``ready`` again once loaded, ``exited`` if it gave
        up.  False (nothing changes) without a url, a session, or an agent that can
        load sessions.
        """
        connection = self.connection
        response = self.initialize_response
        if (
            self.entry.url is None
            or connection is None
            or response is None
            or self.session_id is None
            or not self.agent_capabilities.load_session
        ):
            return False
        resumable = ResumableConnection(
            lambda: self._connect_remote(reactor, client),
            clock=reactor,
            policy=policy,
            observer=self,
        )
        resumable.adopt(
            connection,
            response,
            client_capabilities=client_capabilities(),
            client_info=client_info(),
        )
        resumable.track_session(self.session_id, self.cwd)
        self.resumable = resumable
        return True

    def connection_lost(self, reason: str) -> None:
        """IReconnectObserver: the connection ended; it is being made again."""
        if self.state is AgentState.STOPPED:
            return
        self.notes.append(
            f"the connection to {self.entry.command_line()} was lost ({reason}): reconnecting"
        )
        self._set_state(AgentState.RECONNECTING)

    def retrying(self, attempt: int, attempts: int, delay: float, reason: str) -> None:
        """IReconnectObserver: the next attempt (logged; the state says reconnecting)."""
        log.info(
            "agent {name}: reconnecting, attempt {attempt} of {attempts} in {delay:.1f} s"
            " ({reason})",
            name=self.entry.name,
            attempt=attempt,
            attempts=attempts,
            delay=delay,
            reason=reason,
        )

    def resumed(self, session_ids: list[str]) -> None:
        """IReconnectObserver: connected again, the session loaded."""
        resumable = self.resumable
        if resumable is None or resumable.connection is None or self.state is AgentState.STOPPED:
            return
        self.connection = resumable.connection
        shown = ", ".join(session_ids) or "none"
        self.notes.append(
            f"reconnected to {self.entry.command_line()}; session {shown} loaded again"
        )
        self._set_state(AgentState.READY)

    def session_lost(self, session_id: str, reason: str) -> None:
        """IReconnectObserver: the session could not be loaded again."""
        self.problems.append(f"session {session_id} could not be loaded again: {reason}")

    def turn_interrupted(self, session_id: str, reason: str) -> None:
        """IReconnectObserver: a turn was running (the window reports it)."""

    def gave_up(self, reason: str) -> None:
        """IReconnectObserver: no more attempts: like an exit."""
        if self.state is AgentState.STOPPED:
            return
        self.problems.append(
            f"the connection to {self.entry.command_line()} could not be made again: {reason}"
        )
        self._set_state(AgentState.EXITED)

    def attach(self, connection: ClientConnection) -> None:
        """Use an already connected ``connection`` (no process: in-memory, sockets)."""
        self._set_state(AgentState.STARTING)
        self.connection = connection

    async def handshake(self, clock: Any = None, timeout: float | None = None) -> str:
        """
        ``initialize`` then ``session/new``; return the session id or raise AgentStartError
        (:class:`HandshakeTimeout` when ``clock`` and ``timeout`` are given and the two
        were not both answered within ``timeout`` seconds).
        """
        deadline = _Deadline(clock, timeout)
        try:
            return await self._handshake(deadline)
        finally:
            deadline.stop()

    def _timed_out(self, method: str, deadline: _Deadline) -> AgentStartError:
        assert deadline.seconds is not None
        error = HandshakeTimeout(method, deadline.seconds)
        self._fail(str(error))
        return error

    async def _handshake(self, deadline: _Deadline) -> str:
        connection = self.connection
        if connection is None:
            raise self._fail("not started")
        try:
            response = await deadline.wait(
                connection.initialize(
                    client_capabilities=client_capabilities(forms=self.announce_forms),
                    client_info=client_info(),
                )
            )
        except ProtocolVersionError as e:
            raise self._fail(str(e)) from None
        except CancelledError:
            if deadline.expired:
                raise self._timed_out("initialize", deadline) from None
            raise self._fail("initialize failed: cancelled") from None
        except Exception as e:
            raise self._fail(f"initialize failed: {self._reason(e)}") from None
        self.initialize_response = response
        try:
            session = await deadline.wait(
                connection.new_session(schema.NewSessionRequest(cwd=self.cwd, mcp_servers=[]))
            )
        except AuthRequired as e:
            raise self._fail(f"session/new failed: {self.login_required(e)}") from None
        except CancelledError:
            if deadline.expired:
                raise self._timed_out("session/new", deadline) from None
            raise self._fail("session/new failed: cancelled") from None
        except Exception as e:
            raise self._fail(f"session/new failed: {self._reason(e)}") from None
        self.session_id = session.session_id
        if self.state is AgentState.STARTING:
            self._set_state(AgentState.READY)
        return session.session_id

    @property
    def auth_methods(self) -> list[Any]:
        """The ``authMethods`` the agent listed at ``initialize`` (none before)."""
        response = self.initialize_response
        return list(response.auth_methods or []) if response is not None else []

    def login_required(self, error: AuthRequired) -> str:
        """
        The sentence for a ``-32000`` answer: the agent's own words, the login methods it
        listed, and what to do.  Sets :attr:`needs_login`.
        """
        self.needs_login = True
        methods = self.auth_methods
        offered = f"; authMethods: {describe_auth_methods(methods)}" if methods else ""
        return (
            f"the agent requires a login that acpkit-client cannot do "
            f"({describe_rpc_error(error)}{offered}); log in with the agent's own command "
            "line first"
        )

    def _reason(self, error: BaseException) -> str:
        if isinstance(error, RPCError):
            return describe_rpc_error(error)
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
            elif self.resumable is not None:
                # A remote agent made again when lost: no more of that; close it.
                self._stopping = self.resumable.close()
            elif self.entry.url is not None and self.connection is not None:
                # A remote agent: close (WebSocket close, or HTTP DELETE), then done.
                self.connection.close()
                self._stopping = self.connection.closed
                self._stopping.addErrback(lambda _: None)
            else:
                if self.connection is not None:
                    self.connection.close()
                self._stopping = succeed(None)
        waiter: Deferred[Any] = Deferred()

        def relay(result: Any) -> Any:
            waiter.callback(result)
            return result

        self._stopping.addBoth(relay)
        return waiter
