"""
:class:`LanguageServers`: the language servers of one bob process, started on first use,
one process per (configured server, workspace root), stopped together at exit.

Lifecycle of one (server, root):

==============================  ==========================================================
event                           what happens
==============================  ==========================================================
first :meth:`server_for`        spawn (own process group, cwd = root, stderr drained),
                                ``initialize`` (rootUri, one workspace folder, bob's
                                client capabilities, the configured
                                ``initializationOptions``), then ``initialized``; callers
                                that ask meanwhile share that start
command not found               :class:`NoLanguageServer` (``... command "x" not found``);
                                checked again on each call, nothing is spawned
exits while starting            :class:`NoLanguageServer` (``... crashed while starting:
                                exited with status 1; its last stderr line: ...``)
refuses ``initialize`` or does  :class:`NoLanguageServer` (``... could not start: did not
not answer it in time           answer initialize within 60 s``); its process is stopped
dies after it started           pending requests fail with :class:`LanguageServerCrashed`
                                (exit status, last stderr line); the next
                                :meth:`server_for` starts it again
a second death (or failed       :class:`NoLanguageServer` for every later call (``...
start)                          failed 2 times; not restarted (last: ...)``): a server
                                that keeps crashing is not restarted on every tool call
:meth:`shutdown_all`            each live server gets ``shutdown`` then ``exit``, has
                                ``grace`` seconds to exit, then its stdin is closed and
                                its process group gets SIGTERM, then SIGKILL
==============================  ==========================================================

A server's process group is also listed in :data:`acpkit.process_groups.child_groups`,
so it is killed with bob even when bob dies without shutting down.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import attrs
from lsprotocol import types as lsp
from twisted.internet.defer import Deferred, DeferredList, ensureDeferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from acpkit.endpoints import AgentNotFoundError, spawn_agent
from acpkit.jsonrpc import MethodRegistry
from acpkit.process_groups import ChildGroups, child_groups
from acpkit.rpc_content_length import ContentLengthJSONRPCProtocol
from acpkit_agent.lsp.capabilities import client_capabilities
from acpkit_agent.lsp.client import DEFAULT_REQUEST_TIMEOUT, LanguageServer
from acpkit_agent.lsp.errors import LanguageServerError, NoLanguageServer
from acpkit_agent.lsp.uris import path_to_uri
from acpkit_agent.lsp_config import LspServerConfig

__all__ = [
    "DEFAULT_SHUTDOWN_GRACE",
    "DEFAULT_START_TIMEOUT",
    "LanguageServers",
    "ServerProcess",
    "Spawner",
]

_log = Logger(namespace="acpkit_agent.lsp")

#: Seconds a server has to answer ``initialize``.
DEFAULT_START_TIMEOUT = 60.0
#: Seconds a server has to answer ``shutdown`` and then to exit, at :meth:`shutdown_all`.
DEFAULT_SHUTDOWN_GRACE = 2.0
#: How many times one (server, root) is started before bob gives up on it.
MAX_STARTS = 2


class ServerProcess(Protocol):
    """A started server process (:class:`acpkit.endpoints.AgentProcess` is one)."""

    pid: int | None

    def stop(self, grace: float = ...) -> Deferred[Any]:
        """Close stdin, wait ``grace``, SIGTERM the group, wait, SIGKILL it."""

    def kill(self) -> Deferred[Any]:
        """SIGKILL the group now."""


#: ``spawner(config, root, protocol)`` starts ``config``'s process with cwd ``root`` and
#: connects ``protocol`` to its stdin/stdout; raises ``FileNotFoundError`` (or
#: ``PermissionError``) when the command cannot be run.
Spawner = Callable[[LspServerConfig, str, ContentLengthJSONRPCProtocol], ServerProcess]


@attrs.define
class _Slot:
    """One (server config, root): its running server, its start, its history."""

    config: LspServerConfig
    root: str
    starts: int = 0
    server: LanguageServer | None = None
    process: ServerProcess | None = None
    starting: list[Deferred[LanguageServer]] | None = None
    last_end: str | None = None


class LanguageServers:
    """
    The language servers of one bob process (see the module's table).

    ``configs``: the ``[lsp.servers.<name>]`` tables in the file's order (the first
    whose ``files`` match a path serves it); ``reactor`` spawns and times.
    ``spawner`` replaces process spawning (tests); ``groups`` tracks the process groups
    (default: the process's :data:`acpkit.process_groups.child_groups`).
    """

    def __init__(
        self,
        configs: Sequence[LspServerConfig],
        reactor: Any,
        *,
        spawner: Spawner | None = None,
        groups: ChildGroups | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE,
    ) -> None:
        self.configs = tuple(configs)
        self._reactor = reactor
        self._clock: IReactorTime = reactor
        self._groups = groups if groups is not None else child_groups
        self._spawner = spawner if spawner is not None else self._spawn
        self.start_timeout = start_timeout
        self.request_timeout = request_timeout
        self.shutdown_grace = shutdown_grace
        self._slots: dict[tuple[str, str], _Slot] = {}
        self._shutting_down = False

    # -- lookup -----------------------------------------------------------------------

    def config_for(self, path: str, root: str) -> LspServerConfig | None:
        """The first configured server whose ``files`` match ``path`` (None: none)."""
        for config in self.configs:
            if config.serves(path, root):
                return config
        return None

    def running(self) -> list[LanguageServer]:
        """The servers started and not ended, in start order."""
        return [
            slot.server
            for slot in self._slots.values()
            if slot.server is not None and not slot.server.closed
        ]

    def server_for(self, path: str, root: str) -> Deferred[LanguageServer]:
        """
        The initialized server for ``path`` (absolute, or relative to ``root``) in the
        workspace ``root`` (the session's cwd): the running one, or one started now.
        Fails with :class:`NoLanguageServer` (one line) when none is configured for the
        file, its command is not found, it crashed or failed while starting, or it
        failed twice already.
        """
        root = os.path.abspath(root)
        if self._shutting_down:
            return _failed(NoLanguageServer("bob is shutting down its language servers"))
        config = self.config_for(path, root)
        if config is None:
            name = os.path.basename(path) or path
            return _failed(
                NoLanguageServer(
                    f"no language server is configured for {name} "
                    "(agent.toml: [lsp.servers.<name>] with files = [...])"
                )
            )
        slot = self._slots.setdefault((config.name, root), _Slot(config, root))
        if slot.server is not None and not slot.server.closed:
            return succeed(slot.server)
        if slot.starting is not None:
            waiter: Deferred[LanguageServer] = Deferred()
            slot.starting.append(waiter)
            return waiter
        if slot.starts >= MAX_STARTS:
            return _failed(
                NoLanguageServer(
                    f"language server {config.name} failed {slot.starts} times; "
                    f"not restarted (last: {_strip_name(slot.last_end, config.name)})"
                )
            )
        try:
            started = self._start(slot)
        except NoLanguageServer as error:
            return _failed(error)
        slot.starting = []

        def done(result: LanguageServer | Failure) -> LanguageServer | Failure:
            waiters, slot.starting = slot.starting or [], None
            for waiter in waiters:
                if isinstance(result, Failure):
                    waiter.errback(result)
                else:
                    waiter.callback(result)
            return result

        return started.addBoth(done)

    # -- starting ---------------------------------------------------------------------

    def _spawn(
        self, config: LspServerConfig, root: str, protocol: ContentLengthJSONRPCProtocol
    ) -> ServerProcess:
        process = spawn_agent(
            self._reactor,
            protocol,
            config.command,
            config.args,
            env=dict(config.env) if config.env else None,
            cwd=root,
            name=config.name,
            kind="language server",
        )
        pid = process.pid
        if pid is not None:
            self._groups.add(pid)
            process.exited.addCallback(lambda _: self._groups.discard(pid))
        return process

    def _start(self, slot: _Slot) -> Deferred[LanguageServer]:
        """Spawn and initialize ``slot``'s server; NoLanguageServer when it cannot run."""
        config = slot.config
        registry = MethodRegistry()
        protocol = ContentLengthJSONRPCProtocol(
            registry, clock=self._clock, name=f"lsp {config.name}"
        )
        server = LanguageServer(
            config.name,
            slot.root,
            protocol,
            self._clock,
            language_id=config.language_id,
            request_timeout=self.request_timeout,
        )
        server.register(registry)
        try:
            process = self._spawner(config, slot.root, protocol)
        except FileNotFoundError as error:
            missing = isinstance(error, AgentNotFoundError) or error.filename is None
            why = "not found" if missing else "does not exist"
            if os.sep in config.command:
                why = "does not exist"
            raise NoLanguageServer(
                f'language server {config.name}: command "{config.command}" {why}'
                + ("" if os.sep in config.command else " in PATH")
            ) from None
        except (PermissionError, NotADirectoryError) as error:
            raise NoLanguageServer(
                f"language server {config.name}: cannot start: {error}"
            ) from None
        slot.starts += 1
        slot.process = process
        server.pid = process.pid
        _log.info(
            "lsp {name}: started (pid {pid}) for {root}",
            name=config.name,
            pid=process.pid,
            root=slot.root,
        )
        return ensureDeferred(self._initialize(slot, server, process))

    async def _initialize(
        self, slot: _Slot, server: LanguageServer, process: ServerProcess
    ) -> LanguageServer:
        config = slot.config
        params = lsp.InitializeParams(
            process_id=os.getpid(),
            client_info=lsp.ClientInfo(name="bob", version=_version()),
            root_uri=path_to_uri(slot.root),
            root_path=slot.root,
            workspace_folders=[
                lsp.WorkspaceFolder(
                    uri=path_to_uri(slot.root), name=os.path.basename(slot.root) or slot.root
                )
            ],
            capabilities=client_capabilities(),
            initialization_options=(
                dict(config.initialization_options)
                if config.initialization_options is not None
                else None
            ),
        )
        try:
            result = await server.request(lsp.INITIALIZE, params, timeout=self.start_timeout)
        except LanguageServerError as error:
            slot.last_end = server.end_reason or str(error)
            how = "crashed while starting" if server.closed else "could not start"
            if not server.closed:
                process.stop(self.shutdown_grace)
            raise NoLanguageServer(
                f"language server {config.name} {how}: {_strip_name(slot.last_end, config.name)}"
            ) from None
        if not isinstance(result, lsp.InitializeResult):
            process.stop(self.shutdown_grace)
            raise NoLanguageServer(
                f"language server {config.name} answered initialize without capabilities"
            )
        server.capabilities = result.capabilities
        server.server_info = result.server_info
        server.notify(lsp.INITIALIZED, lsp.InitializedParams())
        slot.server = server
        server.when_closed().addCallback(self._ended, slot, process)
        return server

    def _ended(self, end: str, slot: _Slot, process: ServerProcess) -> None:
        # Callers may already have started its successor (from the errback of a request
        # that failed with the crash): only this server's own process is stopped.
        slot.last_end = end
        if not self._shutting_down:
            _log.warn("{end}", end=end)
        # Its connection is gone: make sure nothing of its group lingers.
        process.stop(self.shutdown_grace)

    # -- stopping ---------------------------------------------------------------------

    def shutdown_all(self) -> Deferred[None]:
        """
        Stop every server: ``shutdown``, ``exit``, ``grace`` seconds to exit, then the
        process group (SIGTERM, then SIGKILL).  Later :meth:`server_for` calls fail.
        """
        self._shutting_down = True
        stops = [
            ensureDeferred(self._stop(slot))
            for slot in self._slots.values()
            if slot.process is not None
        ]
        done = DeferredList(stops, consumeErrors=True)
        return done.addCallback(lambda _: None)

    async def _stop(self, slot: _Slot) -> None:
        server, process = slot.server, slot.process
        if process is None:
            return
        if server is not None and not server.closed:
            try:
                await server.request(lsp.SHUTDOWN, None, timeout=self.shutdown_grace)
            except Exception as error:
                _log.info("lsp {name}: shutdown: {error}", name=slot.config.name, error=error)
            if not server.closed:
                server.notify(lsp.EXIT)
        await process.stop(self.shutdown_grace)


def _failed(error: Exception) -> Deferred[LanguageServer]:
    d: Deferred[LanguageServer] = Deferred()
    d.errback(error)
    return d


def _strip_name(text: str | None, name: str) -> str:
    """``text`` without its leading ``language server <name>`` (said once already)."""
    text = text or "unknown"
    prefix = f"language server {name} "
    return text[len(prefix) :] if text.startswith(prefix) else text


def _version() -> str:
    from acpkit._version import __version__

    return __version__
