"""
The MCP servers bob runs: started, listed, watched and closed (:class:`McpServerSet`),
and the tools the model sees, bob's own plus theirs (:class:`McpToolbox`).

Lifecycle (bob's choice: start at startup, not on first use, so the banner can say what
each server offers and a broken server is known before the first prompt):

=========================  ==============================================================
moment                     what happens
=========================  ==============================================================
bob starts                 every ``[mcp.servers.<name>]`` server is started at once
                           (stdio: a child process in its own process group; http: the
                           endpoint is initialized), then its tools are listed; each
                           server's outcome is one banner line, ``mcp:`` then
                           ``<name> (<transport>): N tools`` or ``failed: <why>``
a prompt arrives early     the client is told (an ``agent_message_chunk`` naming the
                           servers still starting) and the turn waits until every server
                           has answered or failed, at most :data:`TURN_WAIT` seconds;
                           then it goes on without the servers still starting (said in
                           a second chunk and logged); they keep starting (up to
                           :data:`STARTUP_TIMEOUT`) and a later turn has their tools
``tools/list_changed``     the server's tools are listed again; the next model call
                           sees the new list (logged ``[mcp] <name>: tools changed``)
a server stops             logged once (``[mcp] <name> (<transport>) stopped: <why>``);
                           its tools stay offered and each call fails at once with
                           ``[<tool>: the MCP server <name> is not running (<why>)]``
                           (it is not restarted)
bob exits                  each server is closed (stdio: stdin closed, then SIGTERM and
                           SIGKILL to its process group); each stdio group is also in
                           :data:`acpkit.io.process_groups.child_groups`, so the shutdown
                           and the watchdog end it even when bob dies without closing
=========================  ==============================================================

The client's ``mcpServers`` (``session/new``, ``session/load``) get the same lifecycle
per session when ``mcp.useClientServers`` is true (:func:`client_server_configs`); they
are closed when the connection ends or bob exits.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from twisted.internet.defer import (
    CancelledError,
    Deferred,
    DeferredList,
    fail,
    succeed,
)
from twisted.logger import Logger
from twisted.python.failure import Failure

from acpkit import schema
from acpkit.errors import clip
from acpkit.io.process_groups import child_groups
from acpkit_agent.mcp_config import (
    DEFAULT_CALL_TIMEOUT,
    McpHttpServer,
    McpServerConfig,
    McpStdioServer,
)
from acpkit_agent.mcp_tools import McpTool, tools_of
from acpkit_agent.tools.base import Tool

if TYPE_CHECKING:
    # the MCP models load with the first MCP server, not at bob's start
    from acpkit.mcp import schema as mcp

__all__ = [
    "STARTUP_TIMEOUT",
    "TURN_WAIT",
    "Connector",
    "McpClientLike",
    "McpServerSet",
    "McpToolbox",
    "RunningServer",
    "client_server_configs",
    "close_all_at_shutdown",
    "default_connector",
]

_log = Logger()

STARTUP_TIMEOUT = 30.0
"""Seconds a server has to start and list its tools before it counts as failed."""

TURN_WAIT = 5.0
"""Seconds a turn waits for servers still starting before it goes on without them."""

State = Literal["starting", "ready", "failed", "stopped", "closed"]


class McpClientLike(Protocol):
    """What bob uses of :class:`acpkit.mcp.client.McpClient`."""

    tools: list[mcp.Tool]
    on_tools_changed: Callable[[], None] | None

    def list_tools(self) -> Deferred[list[mcp.Tool]]: ...

    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        progress: Callable[[float, float | None, str | None], None] | None = None,
        timeout: float | None = None,
    ) -> Deferred[mcp.CallToolResult]: ...

    def when_closed(self) -> Deferred[Any]: ...

    def close(self) -> Deferred[None]: ...


Connector = Callable[[McpServerConfig], Deferred[Any]]
"""Starts one server and fires with its started :class:`McpClientLike`."""


def default_connector(reactor: Any) -> Connector:
    """Connect with acpkit's MCP client: stdio (``connect_stdio``) or Streamable HTTP."""

    def connect(config: McpServerConfig) -> Deferred[Any]:
        if isinstance(config, McpStdioServer):
            from acpkit.mcp.stdio import connect_stdio

            return connect_stdio(
                reactor,
                config.command,
                config.args,
                env=dict(config.env) if config.env else None,
                cwd=config.cwd,
                name=config.name,
                groups=child_groups,
            )
        from acpkit.mcp.http import connect_http

        started: Deferred[Any] = connect_http(
            reactor, config.url, dict(config.headers) or None, name=config.name
        )
        return started

    return connect


class _GivenUp(Exception):
    """A server's startup was given up (timeout, closed); the message says why."""


def _one_line(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else text
    return clip(" ".join(first.split()))


def _why(failure: Failure) -> str:
    error = failure.value
    if isinstance(error, CancelledError):
        return "cancelled"
    return _one_line(str(error) or type(error).__name__)


def _closed_reason(description: str, stderr_tail: object) -> str:
    """One line: how the server ended, and its last stderr line when there is one."""
    first = _one_line(description).removesuffix("; last stderr lines:")
    lines = [line for line in str(stderr_tail or "").splitlines() if line.strip()]
    if lines:
        first += f" (last stderr line: {clip(lines[-1].strip())})"
    return first


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


class RunningServer:
    """One configured server: its state, its client once started, the tools it exposes."""

    def __init__(self, config: McpServerConfig, owner: McpServerSet) -> None:
        self.config = config
        self.name = config.name
        self.transport: str = config.transport
        self.state: State = "starting"
        self.client: Any = None
        self.reason: str | None = None
        """Why the server failed or stopped (one line)."""
        self.tools: list[mcp.Tool] = []
        """The tools offered to the model (the allow-list applied)."""
        self.offered = 0
        """How many tools the server listed."""
        self._owner = owner

    @property
    def label(self) -> str:
        """``name (transport)``."""
        return f"{self.name} ({self.transport})"

    # -- McpCaller --------------------------------------------------------------------

    def unavailable(self) -> str | None:
        """Why calls cannot be made (failed, stopped, closed), or None when running."""
        if self.state == "ready":
            return None
        if self.state == "starting":
            return "still starting"
        return self.reason or self.state

    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any],
        progress: Callable[[float, float | None, str | None], None],
    ) -> Deferred[mcp.CallToolResult]:
        """``tools/call`` through the client (the caller checked :meth:`unavailable`)."""
        client = self.client
        if client is None:
            return fail(RuntimeError(self.unavailable() or "not started"))
        result: Deferred[mcp.CallToolResult] = client.call_tool(name, arguments, progress=progress)
        return result

    # -- tools --------------------------------------------------------------------------

    def take_tools(self, listed: Sequence[mcp.Tool]) -> None:
        """Keep the listed tools that the allow-list lets through."""
        self.offered = len(listed)
        allowed = self.config.tools
        if allowed is None:
            self.tools = list(listed)
            return
        self.tools = [tool for tool in listed if tool.name in allowed]
        missing = sorted(set(allowed) - {tool.name for tool in listed})
        if missing:
            _log.warn(
                "[mcp] {server}: the tools allow-list names {missing}, which the server "
                "does not offer",
                server=self.label,
                missing=", ".join(missing),
            )

    def summary(self) -> str:
        """The banner's words for this server: its tools, or why it has none."""
        if self.state == "starting":
            return "starting"
        if self.state == "failed":
            return f"failed: {self.reason}"
        if self.config.tools is None:
            count = _plural(len(self.tools), "tool")
        else:
            count = f"{len(self.tools)} of {_plural(self.offered, 'tool')} (tools allow-list)"
        if self.state in ("stopped", "closed"):
            return f"{count}; {self.state}: {self.reason}"
        return count


_open_sets: weakref.WeakSet[McpServerSet] = weakref.WeakSet()


class McpServerSet:
    """
    Servers started together (bob's configured ones, or one session's client servers).

    ``connect`` starts one server (default: :func:`default_connector`); ``on_settled``
    is called with each server once it is ready or failed (the banner lines).
    """

    def __init__(
        self,
        configs: Sequence[McpServerConfig],
        reactor: Any,
        *,
        connect: Connector | None = None,
        startup_timeout: float = STARTUP_TIMEOUT,
        on_settled: Callable[[RunningServer], None] | None = None,
    ) -> None:
        self.reactor = reactor
        self.servers = [RunningServer(config, self) for config in configs]
        self._connect = connect if connect is not None else default_connector(reactor)
        self._startup_timeout = startup_timeout
        self._on_settled = on_settled
        self._started: Deferred[None] | None = None
        self._ready_waiters: list[Deferred[None]] = []
        self._settled = False
        self._closing = False
        self.version = 0
        """Changes whenever a server's tool list changes (the toolbox re-reads it)."""
        self._pending: dict[str, Deferred[Any]] = {}
        _open_sets.add(self)

    def __repr__(self) -> str:
        return f"<McpServerSet {[s.label for s in self.servers]}>"

    # -- start ------------------------------------------------------------------------

    def start(self) -> Deferred[None]:
        """Start every server (once); fires when each is ready or failed (never fails)."""
        if self._started is None:
            attempts = [self._start_one(server) for server in self.servers]
            self._started = DeferredList(attempts, consumeErrors=True).addCallback(
                self._all_settled
            )
        d: Deferred[None] = Deferred()
        self._ready_waiters.append(d)
        if self._settled:
            self._fire_ready()
        return d

    def ready(self) -> Deferred[None]:
        """Fires once every server is ready or failed (at once if never started)."""
        if self._started is None or self._settled:
            return succeed(None)
        d: Deferred[None] = Deferred()
        self._ready_waiters.append(d)
        return d

    def _all_settled(self, _: object) -> None:
        self._settled = True
        self._fire_ready()

    def _fire_ready(self) -> None:
        waiters, self._ready_waiters = self._ready_waiters, []
        for d in waiters:
            d.callback(None)

    def _start_one(self, server: RunningServer) -> Deferred[None]:
        """
        Connect and list one server.  Its startup is given up after the startup timeout
        or at :meth:`close` without cancelling the connection attempt (a transport may
        not support it): a client that arrives afterwards is closed at once.
        """
        try:
            connecting = self._connect(server.config)
        except Exception as error:
            connecting = fail(error)
        gate: Deferred[Any] = Deferred()
        self._pending[server.name] = gate

        def give_up(why: str) -> None:
            if not gate.called:
                gate.errback(Failure(_GivenUp(why)))

        timer = self.reactor.callLater(
            self._startup_timeout, give_up, f"no answer in {self._startup_timeout:g} s"
        )

        def arrived(client: Any) -> None:
            if gate.called:  # given up meanwhile: nobody will use it
                client.close()
            else:
                gate.callback(client)

        def not_arrived(failure: Failure) -> None:
            if not gate.called:
                gate.errback(failure)

        connecting.addCallbacks(arrived, not_arrived)

        def connected(client: Any) -> Deferred[None]:
            server.client = client
            self._track_group(client)
            listing: Deferred[list[mcp.Tool]] = client.list_tools()
            listing_timer = self.reactor.callLater(self._startup_timeout, listing.cancel)

            def listed(tools: list[mcp.Tool]) -> None:
                if listing_timer.active():
                    listing_timer.cancel()
                if self._closing:
                    raise _GivenUp("closed before it started")
                server.take_tools(tools)
                server.state = "ready"
                self.version += 1
                client.on_tools_changed = lambda: self._tools_changed(server)
                client.when_closed().addBoth(self._server_closed, server)

            def not_listed(failure: Failure) -> Failure:
                if listing_timer.active():
                    listing_timer.cancel()
                client.close()
                if failure.check(CancelledError):
                    why = f"tools/list not answered in {self._startup_timeout:g} s"
                    return Failure(_GivenUp(why))
                return failure

            return listing.addCallbacks(listed, not_listed)

        def failed(failure: Failure) -> None:
            server.state = "failed"
            server.reason = _why(failure)

        def settled(_: object) -> None:
            if timer.active():
                timer.cancel()
            self._pending.pop(server.name, None)
            if self._on_settled is not None:
                self._on_settled(server)
            elif server.state == "failed":
                _log.warn("[mcp] {server}: failed: {why}", server=server.label, why=server.reason)
            else:
                _log.info(
                    "[mcp] {server}: {summary}", server=server.label, summary=server.summary()
                )

        d: Deferred[None] = gate.addCallback(connected)
        d.addErrback(failed)
        d.addCallback(settled)
        return d

    def _track_group(self, client: Any) -> None:
        """A stdio server's process group dies with bob whatever happens (watchdog)."""
        process = getattr(client, "process", None)
        pid = getattr(process, "pid", None)
        if isinstance(pid, int) and pid > 0:
            child_groups.add(pid)

    # -- changes --------------------------------------------------------------------------

    def _tools_changed(self, server: RunningServer) -> None:
        if server.state != "ready" or server.client is None:
            return
        server.take_tools(list(server.client.tools))
        self.version += 1
        _log.info(
            "[mcp] {server}: tools changed: {count}",
            server=server.label,
            count=_plural(len(server.tools), "tool"),
        )

    def _server_closed(self, closed: Any, server: RunningServer) -> None:
        """Report, once, a server that ended while we did not close it."""
        if server.state != "ready":
            return
        why = closed.getErrorMessage() if isinstance(closed, Failure) else str(closed)
        requested = bool(getattr(closed, "requested", False))
        if self._closing or requested:
            server.state = "closed"
            server.reason = "closed by bob"
            return
        server.state = "stopped"
        server.reason = _closed_reason(why, getattr(closed, "stderr_tail", ""))
        _log.warn(
            "[mcp] {server} stopped: {why}; its {count} now fail",
            server=server.label,
            why=server.reason,
            count=_plural(len(server.tools), "tool"),
        )

    # -- what the toolbox reads ---------------------------------------------------------

    def entries(self) -> list[tuple[RunningServer, list[mcp.Tool], bool, float]]:
        """``(server, tools, always_asks, timeout)`` of each server that listed tools."""
        return [
            (server, server.tools, server.config.permissions == "ask", server.config.timeout)
            for server in self.servers
            if server.tools and server.state in ("ready", "stopped")
        ]

    # -- close ----------------------------------------------------------------------------

    @property
    def closing(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closing

    def close(self) -> Deferred[None]:
        """Close every server (starting ones are given up); fires when they are gone."""
        if self._closing:
            return succeed(None)
        self._closing = True
        _open_sets.discard(self)
        for gate in list(self._pending.values()):
            if not gate.called:
                gate.errback(Failure(_GivenUp("closed before it started")))
        closing: list[Deferred[Any]] = []
        for server in self.servers:
            client = server.client
            if server.state == "ready":
                server.state = "closed"
                server.reason = "closed by bob"
            if client is not None:
                try:
                    closing.append(client.close())
                except Exception:
                    _log.failure("[mcp] {server}: close failed", server=server.label)
        self.version += 1
        return DeferredList(closing, consumeErrors=True).addCallback(lambda _: None)


def close_all_at_shutdown(reactor: Any) -> None:
    """Close every open :class:`McpServerSet` before ``reactor`` shuts down."""

    def close_all() -> Deferred[None]:
        sets = list(_open_sets)
        return DeferredList([s.close() for s in sets], consumeErrors=True).addCallback(
            lambda _: None
        )

    reactor.addSystemEventTrigger("before", "shutdown", close_all)


# -- the tools the model sees --------------------------------------------------------------


class McpToolbox(Mapping[str, Tool]):
    """
    bob's built-in tools followed by the MCP tools of ``sets`` (in order), a live view:
    a set's tool list that changed is seen at the next lookup.  Names are given by
    :func:`acpkit_agent.mcp_tools.assign_names` over every set in order, so a session's
    client servers never take a name from bob's own servers.
    """

    def __init__(
        self,
        builtin: Mapping[str, Tool],
        *sets: McpServerSet,
        connect: Connector | None = None,
    ) -> None:
        self.builtin = builtin
        self.sets = sets
        self.connect = connect
        """How :meth:`new_set` starts servers (None: :func:`default_connector`)."""
        self._key: tuple[int, ...] | None = None
        # made at the first lookup (``_current``): the built-in tools may be made lazily
        self._tools: dict[str, Tool] = {}

    def new_set(
        self,
        configs: Sequence[McpServerConfig],
        reactor: Any,
        on_settled: Callable[[RunningServer], None] | None = None,
    ) -> McpServerSet:
        """A set of more servers (a session's client servers), started like this one's."""
        return McpServerSet(configs, reactor, connect=self.connect, on_settled=on_settled)

    def with_set(self, extra: McpServerSet) -> McpToolbox:
        """This toolbox with one more set (a session's client servers) after the others."""
        return McpToolbox(self.builtin, *self.sets, extra, connect=self.connect)

    def ready(self) -> Deferred[None]:
        """Fires when every set's servers are ready or failed."""
        return DeferredList([s.ready() for s in self.sets], consumeErrors=True).addCallback(
            lambda _: None
        )

    def starting(self) -> list[str]:
        """The labels (``name (transport)``) of the servers still starting."""
        return [
            server.label
            for server_set in self.sets
            if not server_set.closing
            for server in server_set.servers
            if server.state == "starting"
        ]

    def mcp_tools(self) -> dict[str, McpTool]:
        """The MCP tools only, by model-facing name."""
        return {name: tool for name, tool in self._current().items() if isinstance(tool, McpTool)}

    def _current(self) -> dict[str, Tool]:
        key = tuple(s.version if not s.closing else -1 for s in self.sets)
        if key != self._key:
            entries = [entry for s in self.sets if not s.closing for entry in s.entries()]
            tools: dict[str, Tool] = dict(self.builtin)
            for name, tool in tools_of(entries, taken=self.builtin).items():
                tools[name] = tool
            self._tools = tools
            self._key = key
        return self._tools

    def __getitem__(self, name: str) -> Tool:
        return self._current()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._current()))

    def __len__(self) -> int:
        return len(self._current())


# -- the client's servers ----------------------------------------------------------------


def client_server_configs(
    servers: Sequence[Any], cwd: str
) -> tuple[list[McpServerConfig], list[str]]:
    """
    The ACP ``mcpServers`` of ``session/new`` as server configurations (stdio servers run
    in the session's ``cwd``), and one line per server that cannot be used (SSE, unknown
    types).  Their calls follow ``yolo``; their timeout is the default.
    """
    configs: list[McpServerConfig] = []
    skipped: list[str] = []
    for server in servers:
        if isinstance(server, schema.McpServerStdio):
            configs.append(
                McpStdioServer(
                    name=server.name,
                    command=server.command,
                    args=tuple(server.args or ()),
                    env={variable.name: variable.value for variable in server.env or ()},
                    cwd=cwd,
                    timeout=DEFAULT_CALL_TIMEOUT,
                )
            )
        elif isinstance(server, schema.HttpMcpServer):
            configs.append(
                McpHttpServer(
                    name=server.name,
                    url=server.url,
                    headers={header.name: header.value for header in server.headers or ()},
                    timeout=DEFAULT_CALL_TIMEOUT,
                )
            )
        elif isinstance(server, schema.SseMcpServer):
            skipped.append(f"{server.name} (sse): the SSE transport is not supported")
        else:
            raw = getattr(server, "raw", {})
            name = raw.get("name", "?") if isinstance(raw, dict) else "?"
            skipped.append(f"{name}: unknown MCP server type {getattr(server, 'tag', None)!r}")
    return configs, skipped
