"""
``twistd -n acp-agent``: the options and the service of the reference agent.

Stdout carries only ACP frames: unless the user chose ``--logger``/``--logfile``, the log
goes to stderr (:func:`stderr_observer`), and unless the user chose a ``--pidfile``, no pid
file is written (two agents can run in one directory).  Under ``twist``, a log that would
go to stdout goes to stderr.  ``twistd`` without ``-n`` is refused on stdio (a daemon has
no stdin/stdout to talk on); with ``--listen`` it daemonizes and says on stderr where its
log and pid file are.  A bad configuration is reported on stderr, naming the file and the
key, and twistd exits with status 1 before serving; so does a ``--listen`` value that is
no endpoint string or names a port that cannot be had (one line, no traceback).

Lifetime: when stdin ends, the running turns are cancelled (as ``session/cancel`` would),
their answers written if stdout is still open, and the agent exits once every request is
answered and its output flushed.  Handlers still running :data:`STDIN_EOF_GRACE` seconds
after stdin's end are dropped (the connection is closed); output already written then has
:data:`STDIN_EOF_FLUSH_LIMIT` more seconds to reach a client that is still reading.  Whatever
ends the reactor (stdin's end, SIGTERM, SIGINT), the process groups of tool commands and
hooks still alive are stopped first; a watchdog kills them if the agent dies otherwise
(:mod:`acpkit.io.process_groups`).  The language servers the ``lsp`` tool started are sent
``shutdown`` and ``exit`` first (when stdin ends, before the reactor stops), then their
process groups are stopped like the others.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TextIO, cast

from twisted.application.service import IService, Service
from twisted.internet.defer import Deferred, DeferredList, succeed
from twisted.internet.interfaces import IProtocol
from twisted.internet.protocol import Factory
from twisted.logger import ILogObserver, Logger, LogLevel, eventAsText
from twisted.python import usage
from zope.interface import implementer

from acpkit.connection import AgentConnection
from acpkit.io import serve, serve_stdio
from acpkit.io.admission import AdmissionLimits
from acpkit.io.process_groups import child_groups
from acpkit.jsonrpc import JSONRPCProtocol
from acpkit.stdlib_log import bridge_stdlib_logging
from acpkit_agent.agent import AGENT_VERSION, BobAgent
from acpkit_agent.banner import banner_lines, mcp_server_line
from acpkit_agent.config import AgentConfig, ConfigError, load_config
from acpkit_agent.draining import DEFAULT_DRAIN_TIMEOUT, Drain, Drainable, RawConnections
from acpkit_agent.engines import make_engine
from acpkit_agent.listening import (
    REMOTE_PREFIX,
    Listener,
    ListenError,
    forget_token,
    hand_over_token,
    plan_listener,
    start_listening,
)
from acpkit_agent.log_filter import bob_log_filter
from acpkit_agent.mcp_servers import (
    McpServerSet,
    McpToolbox,
    RunningServer,
    close_all_at_shutdown,
)
from acpkit_agent.skills import SkillLibrary
from acpkit_agent.tools import BuiltinTools
from acpkit_agent.turn import AgentRuntime

__all__ = [
    "STDIN_EOF_FLUSH_LIMIT",
    "STDIN_EOF_GRACE",
    "AgentService",
    "Options",
    "build_runtime",
    "makeService",
    "stderr_observer",
    "stop_language_servers",
]

_log = Logger()
_TWISTD_DEFAULT_PIDFILE = "twistd.pid"

STDIN_EOF_GRACE = 3.0
"""Seconds the agent waits, once stdin has ended, for its cancelled turns to be answered
before it drops the requests still running and closes the connection."""
STDIN_EOF_FLUSH_LIMIT = 30.0
"""After the grace, how long output already written may take to reach a client that is
still reading before the agent exits anyway."""


@implementer(ILogObserver)
class _StderrObserver:
    """Writes each log event as one plain line (plus any traceback) to a stream."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def __call__(self, event: dict[str, Any]) -> None:
        text = eventAsText(event, includeTimestamp=False, includeSystem=False)
        try:
            self._stream.write(text + "\n")
            self._stream.flush()
        except (OSError, ValueError):
            pass


def stderr_observer() -> ILogObserver:
    """
    The log observer factory the plugin installs: plain lines on the real stderr, one per
    event (:mod:`acpkit_agent.log_filter`).
    """
    stream = sys.__stderr__ if sys.__stderr__ is not None else sys.stderr
    return bob_log_filter(_StderrObserver(stream))


def _stream_observer(stream: TextIO) -> ILogObserver:
    """twist's log file observer factory: plain lines on ``stream``, one per event."""
    return bob_log_filter(_StderrObserver(stream))


class Options(usage.Options):
    """Options of ``twistd acp-agent``."""

    synopsis = (
        "[--config FILE] [--listen ENDPOINT | --listen http:ENDPOINT [--token-file FILE]"
        " [--max-connections N] [--max-message-size BYTES]] [--tls-client-ca FILE]"
        " [--no-token] [--request-timeout SECONDS] [--drain-timeout SECONDS] [--engine NAME]"
    )
    longdesc = (
        "Run the reference ACP agent bob: JSON-RPC on stdio (or one agent connection per "
        "client connection with --listen). Run it with twistd -n; stdout carries only ACP "
        "frames, the log and the banner go to stderr, no pid file is written unless "
        "--pidfile is given; without -n only --listen may run in the background. "
        "The configuration (TOML) is --config, else "
        "~/.config/acpkit/agent.toml under the nearest <cwd>/.acpkit/agent.toml; each "
        "session takes yolo, hooks and compaction from the nearest .acpkit/agent.toml "
        "of its own cwd."
    )
    optParameters = [
        ["config", "c", None, "The configuration file (TOML); default: looked up."],
        [
            "listen",
            "l",
            "stdio",
            "Where to serve: stdio, http:ENDPOINT for remote ACP (Streamable HTTP and"
            " WebSocket at /acp, e.g. http:tcp:8765, http:unix:PATH; http:ssl:8443:"
            "privateKey=KEY:certKey=CERT for HTTPS), or a Twisted server endpoint string for"
            " raw NDJSON (unix:PATH; tcp: only with --no-token or ssl: with"
            " --tls-client-ca). Loopback unless the endpoint names an interface; on TCP a"
            " bearer token is required (made and printed when --token-file is not given);"
            " unix sockets are owner-only.",
        ],
        [
            "token-file",
            None,
            None,
            "With --listen http:...: the file of bearer tokens a request may send"
            " (Authorization: Bearer), one per line, readable by its owner only; a missing"
            " file is created with a new token. Default on TCP: a new token in"
            " ~/.local/state/acpkit/remote-PORT.token, printed once.",
        ],
        [
            "tls-client-ca",
            None,
            None,
            "With an ssl: listener: a PEM file of CA certificates; every TLS handshake"
            " must present a client certificate one of them signed (TLS client"
            " authentication); with it no token is made.",
        ],
        [
            "allowed-origins",
            None,
            "",
            "With --listen http:...: comma-separated browser origins allowed besides"
            " this machine's loopback (e.g. https://app.example).",
        ],
        [
            "max-connections",
            None,
            None,
            "With --listen http:...: remote connections open at once, a positive integer"
            " (default 100); an initialize or WebSocket upgrade beyond is answered 503.",
        ],
        [
            "max-message-size",
            None,
            None,
            "With --listen http:...: the largest message accepted from a client, in bytes,"
            " a positive integer (default 16777216); a POST beyond is answered 413, a"
            " WebSocket frame beyond closes it (1009).",
        ],
        [
            "request-timeout",
            None,
            None,
            "With --listen: seconds a new connection may take to send a complete request"
            " (remote ACP: an authenticated request head; raw NDJSON: its first line), and a"
            " later HTTP/1.x request its head, before the connection is closed, a positive"
            " number (default 15).",
        ],
        [
            "drain-timeout",
            None,
            None,
            "With --listen: on SIGTERM bob drains (new connections refused, health check"
            " 503, each connection closed once its running turn is answered) and exits;"
            " after this many seconds it closes what is left, cancelling those turns, a"
            f" positive number (default {DEFAULT_DRAIN_TIMEOUT:g}).",
        ],
        ["engine", "e", None, "The engine name (openai, scripted, echo); overrides the config."],
    ]

    optFlags = [
        [
            "no-token",
            None,
            "With a loopback TCP --listen: no authentication at all. Any local user or"
            " process can then connect and run commands as this user; a unix socket is"
            " the tokenless choice that keeps them out. Refused beyond loopback.",
        ],
    ]

    def opt_version(self) -> None:
        """Print the agent's version and exit."""
        sys.stdout.write(f"{AGENT_VERSION}\n")
        sys.stdout.flush()
        raise SystemExit(0)

    #: Set when twistd will daemonize (``--listen`` without ``-n``): the line telling
    #: where the log and the pid file are, written once listening started.
    daemon_note: str | None = None

    def postOptions(self) -> None:
        """
        Keep stdout for frames and the cwd free of twistd.pid (when the user did not
        choose); refuse to daemonize on stdio.
        """
        parent = getattr(self, "parent", None)
        if parent is None:
            return
        if "logFile" in parent:  # twist: never daemonizes, logs to stdout by default
            if parent["logFile"] in (sys.stdout, sys.stderr):
                parent["logFile"] = sys.stderr
                parent["fileLogObserverFactory"] = _stream_observer
            return
        if "nodaemon" in parent and not parent["nodaemon"]:
            self._daemon_options(parent)
            return
        if parent.get("pidfile") == _TWISTD_DEFAULT_PIDFILE:
            parent["pidfile"] = ""
        if parent.get("logger") is None and parent.get("logfile") is None:
            parent["logger"] = f"{__name__}.stderr_observer"

    def _daemon_options(self, parent: Any) -> None:
        """twistd without ``-n``: refused on stdio; with ``--listen``, say where things go."""
        if self["listen"] == "stdio":
            _exit_with(
                "cannot run in the background on stdio: an ACP agent talks on its "
                "stdin/stdout; run twistd -n acp-agent (or give --listen ENDPOINT to serve "
                "sockets in the background)"
            )
        rundir = parent.get("rundir") or "."
        if parent.get("syslog"):
            log = "syslog"
        elif parent.get("logger"):
            log = f"the observer {parent['logger']}"
        else:
            log = os.path.abspath(os.path.join(rundir, parent.get("logfile") or "twistd.log"))
        pidfile = parent.get("pidfile")
        where = os.path.abspath(os.path.join(rundir, pidfile)) if pidfile else "none"
        self.daemon_note = (
            f"running in the background, serving {self['listen']}; log: {log}; pid file: {where}"
        )


def build_runtime(config: AgentConfig, reactor: Any) -> AgentRuntime:
    """The process-wide runtime: the engine (validated by ``make_engine``) and the tools."""
    try:
        engine = make_engine(config.engine_name, config.engine_settings, reactor=reactor)
    except ValueError as error:
        where = config.path or "the configuration"
        raise ConfigError(f"{where}: engine: {error}") from None
    # The lsp tool is offered when [lsp.servers] names a server (started on first use);
    # without one, neither the language-server client nor lsprotocol is imported.
    language_servers = None
    if config.lsp_servers:
        from acpkit_agent.lsp import LanguageServers

        language_servers = LanguageServers(config.lsp_servers, reactor)
    # made on a session's first use of a tool: not needed to answer initialize
    tools = BuiltinTools(SkillLibrary(extra_dirs=tuple(config.skills_dirs)), language_servers)
    # bob's MCP servers (started by AgentService.startService): their tools follow the
    # built-in ones in the toolbox
    toolbox = McpToolbox(tools)
    if config.mcp_servers:
        servers = McpServerSet(config.mcp_servers, reactor, on_settled=_log_mcp_server)
        toolbox = McpToolbox(tools, servers)
    return AgentRuntime(config=config, engine=engine, tools=toolbox, reactor=reactor)


def _log_mcp_server(server: RunningServer) -> None:
    """The banner line of one MCP server that answered or failed."""
    _log.info("{line}", line=mcp_server_line(server.label, server.summary()))


class _StdioProtocol(JSONRPCProtocol):
    """The stdio connection's protocol: ``on_input_ended`` runs when stdin has ended."""

    def __init__(self, on_input_ended: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_input_ended = on_input_ended

    def inputEnded(self) -> None:
        """Answer what was read (the base class), then tell the service."""
        super().inputEnded()
        self._on_input_ended()


class _AgentFactory(Factory):
    """One agent connection per client connection (``--listen``, raw NDJSON)."""

    def __init__(self, runtime: AgentRuntime) -> None:
        self.runtime = runtime
        #: The open connections (drained on SIGTERM).
        self.connections = RawConnections()

    def buildProtocol(self, addr: Any) -> Any:
        runtime = self.runtime
        conn = AgentConnection(lambda c: BobAgent(c, runtime), name="client")
        self.connections.add(conn)
        protocol: IProtocol = conn.protocol
        return protocol


class AgentService(Service):
    """
    Serves the agent on stdio (the reactor stops when stdin closes) or an endpoint.

    ``listening``: the outcome of listening already started by :func:`makeService` (a
    Deferred firing with the port); without it ``startService`` starts listening.
    """

    def __init__(
        self,
        runtime: AgentRuntime,
        listen: str,
        reactor: Any,
        *,
        listening: Deferred[Any] | None = None,
        authentication: str | None = None,
        no_token: bool = False,
    ) -> None:
        self.runtime = runtime
        #: What a client must present (``--listen``), logged once listening.
        self.authentication = authentication
        #: Without ``listening``: serve raw NDJSON on loopback TCP without credentials.
        self.no_token = no_token
        self.listen = listen
        self.reactor = reactor
        self.port: Any = None
        self._listening_d = listening
        #: Exit status to leave with when listening fails after the reactor started.
        self.exit_status = 0
        #: The stdio connection (None with ``--listen``).
        self.conn: AgentConnection | None = None
        #: SIGTERM's drain (``--listen``; :mod:`acpkit_agent.draining`).
        self.drain: Drain | None = None
        self._eof_timer: Any = None
        #: The reactor is shutting down (a signal, or stdin's end already told): the end
        #: of stdio is no news then.
        self._end_told = False

    def startService(self) -> None:
        """Log the banner, then serve."""
        super().startService()
        config = self.runtime.config
        for line in banner_lines(config, self.runtime.engine.description, AGENT_VERSION):
            _log.info("{line}", line=line)
        for servers in self._mcp_sets():
            self.reactor.callWhenRunning(servers.start)
        if self.listen == "stdio":
            runtime = self.runtime
            protocol = _StdioProtocol(self._stdin_ended, name="client")
            conn = AgentConnection(lambda c: BobAgent(c, runtime), protocol=protocol, name="client")
            self.conn = conn
            serve_stdio(conn.protocol, self.reactor)
            conn.closed.addBoth(self._stdio_closed)
        else:
            d = self._listening_d
            if d is None:
                factory = _AgentFactory(self.runtime)
                d = serve(self.reactor, self.listen, factory, no_token=self.no_token)
            d.addCallbacks(self._listening, self._listen_failed)

    def _stdin_ended(self) -> None:
        """Stdin ended: cancel the running turns; exit within ``STDIN_EOF_GRACE`` at most."""
        if self.conn is None or self._eof_timer is not None:
            return
        if self.conn.closed_reason is None and not self._end_told:
            self._end_told = True
            if self.runtime.lock.locked:
                _log.info(
                    "[acp] stdin closed: running turns cancelled, exiting within {grace:g} s",
                    grace=STDIN_EOF_GRACE,
                )
            else:
                _log.info("[acp] stdin closed: exiting")
        self.conn.cancel_all_turns()
        if self.conn.closed_reason is None:
            self._eof_timer = self.reactor.callLater(STDIN_EOF_GRACE, self._eof_grace_over)

    def _eof_grace_over(self) -> None:
        """
        Handlers still running past the grace are dropped; written output is kept.

        The connection is closed (what was written is flushed to a client still
        reading, then the reactor stops through :meth:`_stdio_closed`); a client that
        reads nothing more cannot hold the agent past :data:`STDIN_EOF_FLUSH_LIMIT`.
        """
        self._eof_timer = None
        if self.conn is None or self.conn.closed_reason is not None:
            return
        _log.warn(
            "[acp] requests still running {grace:g} s after stdin closed: closing the"
            " connection (output already written is flushed for up to {limit:g} s)",
            grace=STDIN_EOF_GRACE,
            limit=STDIN_EOF_FLUSH_LIMIT,
        )
        self.conn.close()
        self._eof_timer = self.reactor.callLater(STDIN_EOF_FLUSH_LIMIT, self._flush_limit_over)

    def _flush_limit_over(self) -> None:
        self._eof_timer = None
        _log.warn(
            "[acp] the client did not read the last output {limit:g} s after the"
            " connection was closed: exiting",
            limit=STDIN_EOF_FLUSH_LIMIT,
        )
        if self.reactor.running:
            self.reactor.stop()

    def _stdio_closed(self, _: object) -> None:
        if self._eof_timer is not None and self._eof_timer.active():
            self._eof_timer.cancel()
        self._eof_timer = None
        if not self._end_told:
            self._end_told = True
            _log.info("[acp] the client closed the connection: exiting")
        # Language servers get shutdown/exit before the reactor's shutdown kills groups.
        stop_language_servers(self.runtime).addBoth(lambda _: self._stop_reactor())

    def _stop_reactor(self) -> None:
        if self.reactor.running:
            self.reactor.stop()

    def _listening(self, port: Any) -> None:
        self.port = port
        _log.info("[acp] listening on {address}", address=port.getHost())
        if self.authentication is not None:
            kind = "remote ACP" if self.listen.startswith(REMOTE_PREFIX) else "raw NDJSON"
            _log.info(
                "[acp] {kind} {authentication}", kind=kind, authentication=self.authentication
            )

    def _listen_failed(self, failure: Any) -> None:
        _log.error("[acp] cannot listen on {where}: {why}", where=self.listen, why=failure.value)
        self.exit_status = 1
        if self.reactor.running:
            self.reactor.stop()
        else:
            self.reactor.callWhenRunning(self.reactor.stop)

    def stop_listening(self) -> None:
        """Stop taking connections (raw NDJSON's drain); the open ones go on."""
        port, self.port = self.port, None
        if port is not None:
            port.stopListening()

    def _mcp_sets(self) -> tuple[McpServerSet, ...]:
        tools = self.runtime.tools
        return tools.sets if isinstance(tools, McpToolbox) else ()

    def stopService(self) -> Any:
        """Cancel the running turns of the stdio connection; stop listening; close MCP."""
        super().stopService()
        if self.conn is not None and self.conn.closed_reason is None:
            if not self._end_told and self.runtime.lock.locked:
                _log.info("[acp] shutting down: running turns cancelled")
            self._end_told = True  # the reactor's shutdown was logged (a signal...)
            self.conn.cancel_all_turns()
        stopping: list[Deferred[Any]] = [servers.close() for servers in self._mcp_sets()]
        if self.port is not None:
            stopping.append(self.port.stopListening())
        if not stopping:
            return None
        return DeferredList(stopping, consumeErrors=True)


def makeService(options: Options) -> IService:
    """Load the configuration and build the engine; a bad one exits with a clear message."""
    from twisted.internet import reactor

    # Libraries bob uses (HTTP clients, SDKs) log through the standard library: into
    # twistd's log, from info up (twistd's own log keeps every level).
    bridge_stdlib_logging(LogLevel.info)

    try:
        config = load_config(options["config"], cwd=os.getcwd())
        if options["engine"]:
            config = _with_engine(config, options["engine"])
        runtime = build_runtime(config, reactor)
    except ConfigError as error:
        _exit_with(str(error))
    listen = options["listen"]
    drain_timeout = _drain_timeout(options)  # a bad --drain-timeout exits here
    admission = _admission_limits(options)  # a bad --request-timeout exits here
    limits = _remote_limits(options, admission)  # so does a bad remote limit
    client_ca = _tls_client_ca(options)
    listening: Deferred[Any] | None = None
    listener: Listener | None = None
    if listen != "stdio":
        listener = _plan(reactor, options, runtime, limits, client_ca, admission)
        try:
            listening = start_listening(reactor, listener)
        except ListenError as error:
            _exit_with(str(error))
        listening.addCallback(_hand_over, listener)
        reactor.addSystemEventTrigger("after", "shutdown", forget_token, listener)
    service = AgentService(
        runtime,
        listen,
        reactor,
        listening=listening,
        authentication=listener.authentication if listener is not None else None,
    )
    # Language servers: shutdown/exit (then their groups) whatever ends the reactor.
    reactor.addSystemEventTrigger("before", "shutdown", stop_language_servers, runtime)
    # Tool commands and hooks run in process groups of their own: end them with the agent.
    child_groups.kill_at_shutdown(reactor)
    # MCP servers (bob's and the sessions' client servers) are closed too.
    close_all_at_shutdown(reactor)
    if listener is not None:
        # SIGTERM drains the listener's connections before the reactor stops.
        drain = Drain(
            reactor,
            _drain_target(listener),
            drain_timeout,
            stop=lambda: _stop(reactor),
            stop_listening=None if listen.startswith(REMOTE_PREFIX) else service.stop_listening,
        )
        reactor.callWhenRunning(drain.install)
        service.drain = drain
    if options.daemon_note is not None:
        _note(options.daemon_note)
    # Listening failed after the reactor started (an endpoint that listens later):
    # twistd would exit 0, so leave with the service's status once the reactor stopped.
    reactor.addSystemEventTrigger("after", "shutdown", _exit_on_failure, service)
    return service


def _drain_target(listener: Listener) -> Drainable:
    """What SIGTERM drains: the remote ACP resource, or the raw listener's connections."""
    factory = listener.factory
    acp = getattr(factory, "acp", None)  # a RemoteSite
    if acp is not None:
        return cast("Drainable", acp)
    raw = getattr(factory, "wrapped", factory)  # an AdmittedFactory around _AgentFactory
    return cast("Drainable", raw.connections)


def _stop(reactor: Any) -> None:
    """Stop the reactor unless it is stopping already."""
    from twisted.internet.error import ReactorNotRunning

    try:
        reactor.stop()
    except ReactorNotRunning:
        pass


def _drain_timeout(options: Options | None) -> float:
    """
    ``--drain-timeout`` (default :data:`DEFAULT_DRAIN_TIMEOUT`); a value that is not a
    positive, finite number, or one given without ``--listen``, exits 1 with one line.
    """
    given = options["drain-timeout"] if options is not None else None
    if given is None:
        return DEFAULT_DRAIN_TIMEOUT
    if options is not None and options["listen"] == "stdio":
        _exit_with("--drain-timeout applies only with --listen")
    try:
        seconds = float(given.strip())
    except ValueError:
        seconds = 0.0
    if not (seconds > 0 and math.isfinite(seconds)):
        _exit_with(f"--drain-timeout {given}: not a positive number of seconds")
    return seconds


def stop_language_servers(runtime: AgentRuntime) -> Deferred[None]:
    """
    Stop the language servers the ``lsp`` tool started (``shutdown``, ``exit``, then the
    process group: :meth:`LanguageServers.shutdown_all`); fires at once without any.
    """
    servers = getattr(runtime.tools.get("lsp"), "servers", None)
    if servers is None:
        return succeed(None)
    from acpkit_agent.lsp import LanguageServers

    if isinstance(servers, LanguageServers):
        return servers.shutdown_all()
    return succeed(None)


def _note(message: str) -> None:
    """One line on the real stderr, ``acp-agent: MESSAGE``."""
    stream = sys.__stderr__ if sys.__stderr__ is not None else sys.stderr
    stream.write(f"acp-agent: {message}\n")
    stream.flush()


def _exit_with(message: str) -> NoReturn:
    """One line on stderr, exit status 1 (before anything is served)."""
    _note(message)
    raise SystemExit(1)


def _plan(
    reactor: Any,
    options: Options,
    runtime: AgentRuntime,
    limits: Any,
    client_ca: Path | None,
    admission: AdmissionLimits | None = None,
) -> Listener:
    """How to listen (:func:`acpkit_agent.listening.plan_listener`); refused: exit 1."""
    origins = [o.strip() for o in options["allowed-origins"].split(",") if o.strip()]

    def remote_site(tokens: Any) -> Any:
        from acpkit.remote.server import ACPResource, RemoteSite

        resource = ACPResource(
            lambda conn: BobAgent(conn, runtime),
            clock=reactor,
            token=tokens,
            allowed_origins=origins,
            limits=limits,
        )
        return RemoteSite(resource, b"/acp", reactor)

    try:
        return plan_listener(
            reactor,
            options,
            raw_factory=_AgentFactory(runtime),
            remote_site=remote_site,
            client_ca=client_ca,
            admission_limits=admission,
        )
    except ListenError as error:
        _exit_with(str(error))


def _hand_over(port: Any, listener: Listener) -> Any:
    """Once listening: write and announce the token bob made; a failure exits 1."""
    try:
        hand_over_token(listener, port, _note)
    except ListenError as error:
        port.stopListening()
        _exit_with(str(error))
    return port


def _tls_client_ca(options: Options | None) -> Path | None:
    """
    ``--tls-client-ca FILE``, checked now: a file that cannot be read or holds no valid
    PEM certificate exits 1 with one line naming the option and the file; given
    without ``--listen``, exit 1 too.
    """
    given = options["tls-client-ca"] if options is not None else None
    if not given:
        return None
    if options is not None and options["listen"] == "stdio":
        _exit_with("--tls-client-ca applies only with --listen (an ssl: endpoint)")
    from acpkit.io.pem import read_certificates

    path = Path(given).expanduser()
    try:
        read_certificates(path, "CA file")
    except ValueError as error:
        _exit_with(f"--tls-client-ca {given}: {_one_line(error)}")
    return path


#: The options setting a :class:`~acpkit.remote.server.RemoteLimits` field, by field.
REMOTE_LIMIT_OPTIONS = {
    "max_connections": "max-connections",
    "max_message_size": "max-message-size",
}


def _admission_limits(options: Options | None) -> AdmissionLimits | None:
    """
    The admission deadlines ``--request-timeout`` asks for (``None``: the defaults): the
    pending and request-head deadlines of :mod:`acpkit.io.admission`.  A value that is not a
    positive, finite number, or one given without ``--listen``, exits 1 with one line.
    """
    given = options["request-timeout"] if options is not None else None
    if given is None:
        return None
    if options is not None and options["listen"] == "stdio":
        _exit_with("--request-timeout applies only with --listen")
    try:
        seconds = float(given.strip())
    except ValueError:
        seconds = 0.0
    if not (seconds > 0 and math.isfinite(seconds)):
        _exit_with(f"--request-timeout {given}: not a positive number of seconds")
    return AdmissionLimits(pending_timeout=seconds, head_timeout=seconds)


def _remote_limits(options: Options | None, admission: AdmissionLimits | None = None) -> Any:
    """
    The ``RemoteLimits`` the options ask for (``None``: the defaults), with
    ``admission``'s deadlines when given.  A value that is not a positive integer, or
    one given without ``--listen http:...``, exits 1 with one line naming the option.
    """
    if options is None:
        return None
    given = {
        field: (name, options[name])
        for field, name in REMOTE_LIMIT_OPTIONS.items()
        if options[name] is not None
    }
    if not given:
        if admission is None or not options["listen"].startswith(REMOTE_PREFIX):
            return None
        from acpkit.remote.server import RemoteLimits

        return RemoteLimits(admission=admission)
    if not options["listen"].startswith(REMOTE_PREFIX):
        name = next(iter(given.values()))[0]
        _exit_with(f"--{name} applies only to remote ACP (--listen http:ENDPOINT)")
    values: dict[str, Any] = {}
    for field, (name, text) in given.items():
        try:
            value = int(text.strip())
        except ValueError:
            value = 0
        if value < 1:
            _exit_with(f"--{name} {text}: not a positive integer")
        values[field] = value
    if admission is not None:
        values["admission"] = admission
    from acpkit.remote.server import RemoteLimits

    return RemoteLimits(**values)


def _one_line(error: object) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text


def _exit_on_failure(service: AgentService) -> None:
    if service.exit_status:
        sys.stderr.flush()
        os._exit(service.exit_status)


def _with_engine(config: AgentConfig, name: str) -> AgentConfig:
    """``--engine NAME``: the engine's settings are kept only when the name is the same."""
    import attrs

    settings = config.engine_settings if name == config.engine_name else {}
    return attrs.evolve(config, engine_name=name, engine_settings=settings)
