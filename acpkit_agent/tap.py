"""
``twistd -n acp-agent``: the options and the service of the reference agent.

Stdout carries only ACP frames: unless the user chose ``--logger``/``--logfile``, the log
goes to stderr (:func:`stderr_observer`), and unless the user chose a ``--pidfile``, no pid
file is written (two agents can run in one directory).  A bad configuration is reported on
stderr, naming the file and the key, and twistd exits with status 1 before serving; so
does a ``--listen`` value that is no endpoint string or names a port that cannot be had
(one line, no traceback).
"""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn, TextIO

from twisted.application.service import IService, Service
from twisted.internet.defer import Deferred, succeed
from twisted.internet.endpoints import serverFromString
from twisted.internet.interfaces import IProtocol
from twisted.internet.protocol import Factory
from twisted.logger import ILogObserver, Logger, eventAsText
from twisted.python import usage
from twisted.python.failure import Failure
from zope.interface import implementer

from acpkit.connection import AgentConnection
from acpkit.endpoints import serve, serve_stdio
from acpkit_agent.agent import AGENT_VERSION, BobAgent
from acpkit_agent.banner import banner_lines
from acpkit_agent.config import AgentConfig, ConfigError, load_config
from acpkit_agent.engines import make_engine
from acpkit_agent.skills import SkillLibrary
from acpkit_agent.tools import builtin_tools
from acpkit_agent.turn import AgentRuntime

__all__ = ["AgentService", "Options", "build_runtime", "makeService", "stderr_observer"]

_log = Logger()
_TWISTD_DEFAULT_PIDFILE = "twistd.pid"


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
    """The log observer factory the plugin installs: plain lines on the real stderr."""
    stream = sys.__stderr__ if sys.__stderr__ is not None else sys.stderr
    return _StderrObserver(stream)


class Options(usage.Options):
    """Options of ``twistd acp-agent``."""

    synopsis = "[--config FILE] [--listen ENDPOINT] [--engine NAME]"
    longdesc = (
        "Run the reference ACP agent bob: JSON-RPC on stdio (or one agent connection per "
        "client connection with --listen). Run it with twistd -n; stdout carries only ACP "
        "frames, the log and the banner go to stderr, no pid file is written unless "
        "--pidfile is given. The configuration (TOML) is --config, else "
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
            "Where to serve: stdio, or a Twisted server endpoint string (tcp:8765, unix:PATH).",
        ],
        ["engine", "e", None, "The engine name (openai, scripted, echo); overrides the config."],
    ]

    def opt_version(self) -> None:
        """Print the agent's version and exit."""
        sys.stdout.write(f"{AGENT_VERSION}\n")
        sys.stdout.flush()
        raise SystemExit(0)

    def postOptions(self) -> None:
        """Keep stdout for frames and the cwd free of twistd.pid (when the user did not choose)."""
        parent = getattr(self, "parent", None)
        if parent is None:
            return
        if parent.get("pidfile") == _TWISTD_DEFAULT_PIDFILE:
            parent["pidfile"] = ""
        if parent.get("logger") is None and parent.get("logfile") is None:
            parent["logger"] = f"{__name__}.stderr_observer"


def build_runtime(config: AgentConfig, reactor: Any) -> AgentRuntime:
    """The process-wide runtime: the engine (validated by ``make_engine``) and the tools."""
    try:
        engine = make_engine(config.engine_name, config.engine_settings, reactor=reactor)
    except ValueError as error:
        where = config.path or "the configuration"
        raise ConfigError(f"{where}: engine: {error}") from None
    tools = builtin_tools(SkillLibrary(extra_dirs=tuple(config.skills_dirs)))
    return AgentRuntime(config=config, engine=engine, tools=tools, reactor=reactor)


class _AgentFactory(Factory):
    """One agent connection per client connection (``--listen``)."""

    def __init__(self, runtime: AgentRuntime) -> None:
        self.runtime = runtime

    def buildProtocol(self, addr: Any) -> Any:
        runtime = self.runtime
        conn = AgentConnection(lambda c: BobAgent(c, runtime), name="client")
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
    ) -> None:
        self.runtime = runtime
        self.listen = listen
        self.reactor = reactor
        self.port: Any = None
        self._listening_d = listening
        #: Exit status to leave with when listening fails after the reactor started.
        self.exit_status = 0

    def startService(self) -> None:
        """Log the banner, then serve."""
        super().startService()
        config = self.runtime.config
        for line in banner_lines(config, self.runtime.engine.description, AGENT_VERSION):
            _log.info("{line}", line=line)
        if self.listen == "stdio":
            runtime = self.runtime
            conn = AgentConnection(lambda c: BobAgent(c, runtime), name="client")
            serve_stdio(conn.protocol, self.reactor)
            conn.protocol.when_closed().addBoth(self._stdio_closed)
        else:
            d = self._listening_d
            if d is None:
                d = serve(self.reactor, self.listen, _AgentFactory(self.runtime))
            d.addCallbacks(self._listening, self._listen_failed)

    def _stdio_closed(self, _: object) -> None:
        _log.info("[acp] stdin closed: exiting")
        if self.reactor.running:
            self.reactor.stop()

    def _listening(self, port: Any) -> None:
        self.port = port
        _log.info("[acp] listening on {address}", address=port.getHost())

    def _listen_failed(self, failure: Any) -> None:
        _log.error("[acp] cannot listen on {where}: {why}", where=self.listen, why=failure.value)
        self.exit_status = 1
        if self.reactor.running:
            self.reactor.stop()
        else:
            self.reactor.callWhenRunning(self.reactor.stop)

    def stopService(self) -> Any:
        """Stop listening."""
        super().stopService()
        if self.port is not None:
            return self.port.stopListening()
        return None


def makeService(options: Options) -> IService:
    """Load the configuration and build the engine; a bad one exits with a clear message."""
    from twisted.internet import reactor

    try:
        config = load_config(options["config"], cwd=os.getcwd())
        if options["engine"]:
            config = _with_engine(config, options["engine"])
        runtime = build_runtime(config, reactor)
    except ConfigError as error:
        _exit_with(str(error))
    listen = options["listen"]
    listening: Deferred[Any] | None = None
    if listen != "stdio":
        listening = _listen_now(reactor, listen, runtime)
    service = AgentService(runtime, listen, reactor, listening=listening)
    # Listening failed after the reactor started (an endpoint that listens later):
    # twistd would exit 0, so leave with the service's status once the reactor stopped.
    reactor.addSystemEventTrigger("after", "shutdown", _exit_on_failure, service)
    return service


def _exit_with(message: str) -> NoReturn:
    """One line on stderr, exit status 1 (before anything is served)."""
    stream = sys.__stderr__ if sys.__stderr__ is not None else sys.stderr
    stream.write(f"acp-agent: {message}\n")
    stream.flush()
    raise SystemExit(1)


def _listen_now(reactor: Any, listen: str, runtime: AgentRuntime) -> Deferred[Any]:
    """
    Parse ``--listen`` and start listening at once (before twistd runs the reactor): a
    bad endpoint string or a port that cannot be had (in use, no permission) exits 1
    with one line instead of a traceback or an agent that serves nothing.
    """
    try:
        endpoint = serverFromString(reactor, listen)
    except Exception as error:  # ValueError, KeyError, TypeError: whatever the parser raises
        _exit_with(f"--listen {listen}: not a server endpoint string ({_one_line(error)})")
    try:
        d = endpoint.listen(_AgentFactory(runtime))
    except Exception as error:
        _exit_with(f"--listen {listen}: cannot listen: {_one_line(error)}")
    outcome: list[Any] = []
    if d.called:
        d.addBoth(outcome.append)
        result = outcome[0]
        if isinstance(result, Failure):
            why = result.value if result.value is not None else result
            _exit_with(f"--listen {listen}: cannot listen: {_one_line(why)}")
        return succeed(result)
    d2: Deferred[Any] = d
    return d2


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
