"""
:class:`BobAgent`: the reference agent's :class:`~acpkit.interfaces.IAgent`, one per
connection, on acpkit's public API only.

========================  ================================================================
method                    behaviour
========================  ================================================================
``initialize``            logs the client, the protocol version and
                          ``elicitation(form)=…``; answers the negotiated version,
                          ``agentCapabilities`` (``loadSession`` = ``sessions.enabled``),
                          ``agentInfo`` and ``authMethods: []``
``authenticate``          ``{}``
``session/new``           a date-sortable id (never one saved or attached already), attached
                          to this connection (:mod:`acpkit_agent.attachments`), the
                          request's cwd (absolute, an existing directory, else ``-32602``
                          at ``$.params.cwd``), the session's configuration
                          (:func:`acpkit_agent.config.session_config`; an unusable
                          project file is ``-32602`` at ``$.params.cwd`` naming it), a
                          fresh history; counts ``mcpServers`` (ignored, unless
                          ``mcp.useClientServers``: then connected to for this session,
                          :mod:`acpkit_agent.mcp_servers`); logs the
                          configuration files and the policy; then
                          ``available_commands_update`` (the commands, then the skills:
                          :mod:`acpkit_agent.commands`)
``session/load``          with ``sessions.enabled``: the same cwd and configuration checks,
                          then, once no turn runs, the session is attached to this
                          connection (taken over from another connection of this process;
                          ``-32002`` while a connection of another process holds it) and
                          :mod:`acpkit_agent.replay` reads and replays it
``session/prompt``        a slash command of the :class:`CommandRegistry`, or a model turn
                          (:mod:`acpkit_agent.turn`; ``/skill`` rewritten to ``$skill``,
                          automatic compaction first; a model turn first waits for the
                          MCP servers still starting); turns serialized process-wide; on a
                          session another connection took over: ``-32002`` naming the
                          takeover (checked again once the turn may start)
``session/cancel``        the connection cancels the running turn (of this connection only)
others                    ``-32601`` (the :class:`acpkit.connection.Agent` base)
========================  ================================================================
"""

from __future__ import annotations

import os
import uuid
from typing import TYPE_CHECKING, Any

import attrs
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.logger import Logger
from zope.interface import implementer

from acpkit import schema
from acpkit.connection import Agent, AgentConnection, negotiate_version
from acpkit.errors import InternalError, InvalidParams, MethodNotFound, clip
from acpkit.interfaces import IAgent
from acpkit_agent.attachments import AttachedElsewhere, SessionTakenOver
from acpkit_agent.commands import (
    CommandRegistry,
    SlashCommand,
    advertised_commands,
    builtin_commands,
    skill_library_for,
)
from acpkit_agent.compaction import maybe_compact
from acpkit_agent.config import AgentConfig, ConfigError, session_config
from acpkit_agent.mcp_servers import TURN_WAIT, McpServerSet, McpToolbox, client_server_configs
from acpkit_agent.prompt_content import flatten_prompt
from acpkit_agent.replay import load_and_replay
from acpkit_agent.session import (
    LIVE_ID_KEY,
    SYSTEM_PROMPT,
    Session,
    SessionStore,
    new_session_id,
)
from acpkit_agent.skills import SkillLibrary, rewrite_skill_command, skills_prompt
from acpkit_agent.store import DiskSessionStore, SessionFileError, session_store_for
from acpkit_agent.turn import AgentRuntime, TurnRunner, send_update

if TYPE_CHECKING:
    # The unstable models (a second generated schema module) are needed for the first
    # prompt's answer only, not to answer initialize: imported there.
    from acpkit import unstable

__all__ = ["AGENT_VERSION", "BobAgent", "CommandRegistry", "SlashCommand"]

_log = Logger()


def _version() -> str:
    from acpkit import __version__

    return str(__version__)


AGENT_VERSION = _version()
"""``agentInfo.version``: the same string as ``twistd acp-agent --version``."""

NEW_ID_ATTEMPTS = 100
"""How many fresh ids ``session/new`` tries before it gives up (each is 32 random bits)."""


def _require_usable_cwd(cwd: str) -> None:
    """
    The session's ``cwd`` must be an absolute path (ACP: it is the base of relative paths)
    naming an existing directory (the tools run there; the agent never creates it):
    ``-32602`` with ``data.path`` ``$.params.cwd`` and a reason naming the path otherwise.
    """
    if not os.path.isabs(cwd):
        raise InvalidParams("$.params.cwd", f"cwd must be an absolute path, got {cwd!r}")
    if not os.path.isdir(cwd):
        if "\0" in cwd:
            why = "contains a NUL character"
        elif os.path.lexists(cwd):
            why = "is not a directory"
        else:
            why = "does not exist"
        raise InvalidParams("$.params.cwd", f"cwd {cwd!r} {why}")


def _live_number(call_id: object) -> int:
    """N of a ``call_N`` id, else 0."""
    if isinstance(call_id, str) and call_id.startswith("call_") and call_id[5:].isdigit():
        return int(call_id[5:])
    return 0


@implementer(IAgent)
class BobAgent(Agent):
    """The reference agent "bob" for one connection (``conn``: its ``AgentConnection``)."""

    def __init__(
        self,
        conn: AgentConnection,
        runtime: AgentRuntime,
        *,
        sessions: SessionStore | None = None,
        commands: CommandRegistry | None = None,
        system_prompt: str = SYSTEM_PROMPT,
    ) -> None:
        self.conn = conn
        self.runtime = runtime
        self.sessions: SessionStore = (
            sessions if sessions is not None else session_store_for(runtime.config)
        )
        if commands is None:
            commands = CommandRegistry()
            for builtin in builtin_commands(runtime, self.sessions):
                commands.register(builtin)
        self.commands = commands
        self._skills: SkillLibrary | None = None
        self.system_prompt = system_prompt
        self.turns = TurnRunner(runtime, conn)
        #: The client's MCP servers of each session (``mcp.useClientServers``) and the
        #: toolbox that adds their tools to the process's.
        self._client_mcp: dict[str, tuple[McpServerSet, McpToolbox]] = {}
        #: Whether the client advertised ``elicitation.form`` (for ``ask_user``, part 2).
        self.elicitation_form = False
        #: The session file (the attachment's key) of each session this connection
        #: attached (sessions on disk only).
        self._attached: dict[str, str] = {}
        self._watching_close = False
        if not self._sessions_on_disk():
            # Without saved sessions bob does not implement session/load: the base stub
            # (marked unimplemented) answers -32601 before any params are decoded.
            # The stub's type is the base's (MaybeAsync), not this class's coroutine.
            self.load_session = super().load_session  # type: ignore[method-assign, assignment]

    @property
    def skills(self) -> SkillLibrary:
        """
        The skill library (the ``read_skill`` tool's), found on first use: looking it up
        makes the built-in tools, which answering ``initialize`` does not need.
        """
        if self._skills is None:
            self._skills = skill_library_for(self.runtime)
        return self._skills

    # -- initialize ---------------------------------------------------------------------

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        """Log the client and answer with the agent's capabilities and identity."""
        caps = params.client_capabilities
        elicitation = getattr(caps, "elicitation", None) if caps is not None else None
        self.elicitation_form = getattr(elicitation, "form", None) is not None
        info = params.client_info
        client = info.name if info is not None else "(unnamed client)"
        if info is not None and info.version:
            client += f" {info.version}"
        version = negotiate_version(params.protocol_version)
        asked = params.protocol_version
        _log.info(
            "[acp] initialize: client {client}, protocol version {version}{asked}, "
            "elicitation(form)={form}",
            client=client,
            version=version,
            asked="" if asked == version else f" (the client asked for {asked})",
            form="true" if self.elicitation_form else "false",
        )
        config = self.runtime.config
        return schema.InitializeResponse(
            protocol_version=version,
            agent_capabilities=schema.AgentCapabilities(
                load_session=config.sessions_enabled,
                mcp_capabilities=schema.McpCapabilities(http=config.mcp_use_client_servers),
            ),
            agent_info=schema.Implementation(
                name=config.name, title=config.title or None, version=AGENT_VERSION
            ),
            auth_methods=[],
        )

    # -- sessions -----------------------------------------------------------------------

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        """Create a session and, once the response is written, advertise the commands."""
        _require_usable_cwd(params.cwd)
        config = self._config_for(params.cwd)
        session_id = self._fresh_session_id(params.cwd)
        catalog = self.skills.catalog(params.cwd)
        session = Session.create(session_id, params.cwd, self.system_prompt)
        session.config = config
        system = session.history[0]
        session.history[0] = {**system, "content": system["content"] + skills_prompt(catalog)}
        self.sessions.add(session)
        self._save(session)
        _log.info(
            "[acp] session {sid}: new in {cwd} ({mcp})",
            sid=session_id,
            cwd=params.cwd,
            mcp=self._client_servers(session_id, params.cwd, params.mcp_servers or []),
        )
        self._log_config(session)
        # The connection holds updates for a session until its session/new response is
        # written, so this arrives right after the response.
        send_update(
            self.conn,
            session_id,
            schema.AvailableCommandsUpdate(
                available_commands=advertised_commands(self.commands, catalog)
            ),
        )
        return schema.NewSessionResponse(session_id=session_id)

    async def load_session(self, params: schema.LoadSessionRequest) -> schema.LoadSessionResponse:
        """With ``sessions.enabled``: read the saved session, replay it, advertise commands."""
        store = self.sessions
        if not self._sessions_on_disk() or not isinstance(store, DiskSessionStore):
            raise MethodNotFound("session/load")  # what the base stub answers
        _require_usable_cwd(params.cwd)
        config = self._config_for(params.cwd)
        key = self._session_key(store, params.session_id, params.cwd)
        lock = self.runtime.lock
        # The turn lock first: a turn running on the connection that holds the session
        # ends, and is saved, before the file is read.
        await lock.acquire()
        try:
            catalog = self.skills.catalog(params.cwd)
            system = self.system_prompt.format(cwd=params.cwd) + skills_prompt(catalog)
            previous = self._attach(params.session_id, key)
            try:
                session = load_and_replay(
                    self.conn, store, params.session_id, params.cwd, system, self.runtime.tools
                )
            except BaseException:
                self._undo_attach(params.session_id, key, previous)
                raise
            if previous is not None:
                label = previous._connection_label() if isinstance(previous, BobAgent) else "?"
                _log.info(
                    "[acp] session {sid}: taken over from another connection ({connection}),"
                    " which can no longer use it",
                    sid=params.session_id,
                    connection=label,
                    pid=os.getpid(),
                    session_file=key,
                )
            self._attached_now(params.session_id, key)
            session.config = config
            self._skip_replayed_call_ids(session)
            mcp = self._client_servers(session.id, params.cwd, params.mcp_servers or [])
            if self.runtime.config.mcp_use_client_servers:
                _log.info("[acp] session {sid}: loaded ({mcp})", sid=session.id, mcp=mcp)
            store.add(session)
            self._log_config(session)
            send_update(
                self.conn,
                session.id,
                schema.AvailableCommandsUpdate(
                    available_commands=advertised_commands(self.commands, catalog)
                ),
            )
        finally:
            lock.release()
        return schema.LoadSessionResponse()

    def _config_for(self, cwd: str) -> AgentConfig:
        """
        The configuration of a session in ``cwd`` (its project file over the base); an
        unusable file is ``-32602`` at ``$.params.cwd`` naming it (no silent defaults).
        """
        try:
            return session_config(self.runtime.config, cwd)
        except ConfigError as error:
            _log.warn(
                "[acp] session in {cwd}: unusable configuration: {error}", cwd=cwd, error=error
            )
            raise InvalidParams("$.params.cwd", str(error)) from None

    @staticmethod
    def _log_config(session: Session) -> None:
        """Log which configuration files the session uses and its permission policy."""
        config = session.config
        if config is None:
            return
        policy = "yolo (commands run without asking)" if config.yolo else "asks before changes"
        _log.info(
            "[acp] session {sid}: config {files}; permissions: {policy}",
            sid=session.id,
            files=config.describe_sources(),
            policy=policy,
        )
        if config.ignored:
            _log.warn(
                "[acp] session {sid}: {path} sets {keys}, which apply per process: "
                "ignored for this session",
                sid=session.id,
                path=config.project_path,
                keys=", ".join(config.ignored),
            )

    def _skip_replayed_call_ids(self, session: Session) -> None:
        """
        Move the process's ``call_N`` counter past the live ids the loaded history holds
        (saved by an earlier process), so that a new call never repeats a replayed id.
        """
        highest = max(
            (
                _live_number(call.get(LIVE_ID_KEY))
                for message in session.history
                for call in message.get("tool_calls") or []
                if isinstance(call, dict)
            ),
            default=0,
        )
        if highest:
            while _live_number(self.runtime.next_call_id()) < highest:
                pass

    def _runtime_of(self, session: Session) -> AgentRuntime:
        """
        The runtime as ``session`` sees it: the process's engine, tools, turn lock and
        ``call_N`` counter (shared objects), with the session's configuration and the
        tools of its client MCP servers.
        """
        changes: dict[str, Any] = {}
        if session.config is not None and session.config is not self.runtime.config:
            changes["config"] = session.config
        client = self._client_mcp.get(session.id)
        if client is not None:
            changes["tools"] = client[1]
        if not changes:
            return self.runtime
        return attrs.evolve(self.runtime, **changes)

    # -- MCP ----------------------------------------------------------------------------

    def _client_servers(self, session_id: str, cwd: str, servers: list[Any]) -> str:
        """
        Connect to the client's ``mcpServers`` for this session when
        ``mcp.useClientServers`` is true (else they are ignored); the log's words for them.
        """
        count = len(servers)
        tools = self.runtime.tools
        if not (self.runtime.config.mcp_use_client_servers and isinstance(tools, McpToolbox)):
            return f"{count} MCP server(s) ignored"
        previous = self._client_mcp.pop(session_id, None)
        if previous is not None:
            previous[0].close()
        configs, skipped = client_server_configs(servers, cwd)
        for line in skipped:
            _log.warn("[mcp] session {sid}: {line}: not used", sid=session_id, line=line)
        if not configs:
            return f"{count} MCP server(s) from the client, none usable"
        if not self._client_mcp:
            # closed with the connection (bob's exit closes them too)
            self.conn.closed.addBoth(self._close_client_servers)

        def settled(server: Any) -> None:
            _log.info(
                "[mcp] session {sid}: {server}: {summary}",
                sid=session_id,
                server=server.label,
                summary=server.summary(),
            )

        client_set = tools.new_set(configs, self.runtime.reactor, settled)
        self._client_mcp[session_id] = (client_set, tools.with_set(client_set))
        client_set.start()
        return f"{len(configs)} MCP server(s) from the client: connecting"

    def _close_client_servers(self, _: object) -> None:
        """The connection ended: close every session's client servers."""
        sets, self._client_mcp = self._client_mcp, {}
        for client_set, _toolbox in sets.values():
            client_set.close()

    async def _wait_for_mcp_servers(self, session: Session) -> None:
        """
        Wait, at most :data:`~acpkit_agent.mcp_servers.TURN_WAIT` seconds, for the MCP
        servers this turn may use that are still starting; tell the client while waiting,
        and when the turn goes on without some of them.
        """
        runtime = self._runtime_of(session)
        tools = runtime.tools
        if not isinstance(tools, McpToolbox):
            return
        starting = tools.starting()
        if not starting:
            return
        names = ", ".join(starting)
        self._notice(session, f"waiting for MCP server(s) {names} to start...")
        if await _within(tools.ready(), TURN_WAIT, runtime.reactor):
            return
        late = ", ".join(tools.starting()) or names
        _log.warn(
            "[mcp] session {sid}: {late} not ready after {wait:g} s: the turn goes on without"
            " their tools",
            sid=session.id,
            late=late,
            wait=TURN_WAIT,
        )
        self._notice(
            session,
            f"MCP server(s) {late} not ready after {TURN_WAIT:g} s: this turn goes on without"
            " their tools (a later turn has them once they have started)",
        )

    def _notice(self, session: Session, text: str) -> None:
        """One line to the client, a message of its own (not in the model's history)."""
        send_update(
            self.conn,
            session.id,
            schema.AgentMessageChunk(
                content=schema.TextContentBlock(text=text + "\n\n"), message_id=str(uuid.uuid4())
            ),
        )

    def _sessions_on_disk(self) -> bool:
        """Whether sessions are saved (and so ``session/load`` is implemented)."""
        return self.runtime.config.sessions_enabled and isinstance(self.sessions, DiskSessionStore)

    def _save(self, session: Session) -> None:
        """Save the session; a failed save is told to the user once (the store logs each)."""
        self.sessions.saved(session)
        take_warning = getattr(self.sessions, "take_warning", None)
        warning = take_warning(session.id) if callable(take_warning) else None
        if warning:
            send_update(
                self.conn,
                session.id,
                schema.AgentMessageChunk(content=schema.TextContentBlock(text=warning)),
            )

    def _session(self, session_id: str) -> Session:
        """
        The session, if this connection holds it: ``-32602`` for an unknown id,
        :class:`SessionTakenOver` (``-32002``) for one another connection loaded since.
        """
        session = self.sessions.get(session_id)
        if session is None:
            raise InvalidParams("$.params.sessionId", f"unknown session {session_id!r}")
        key = self._attached.get(session_id)
        if key is not None and self.runtime.attachments.owner(key) is not self:
            raise SessionTakenOver(session_id)
        return session

    # -- attachments ---------------------------------------------------------------------

    @staticmethod
    def _session_key(store: DiskSessionStore, session_id: str, cwd: str) -> str:
        """The session's file, symbolic links resolved: the key of its attachment."""
        try:
            path = store.path_for(session_id, cwd)
        except SessionFileError as error:
            raise InvalidParams(
                "$.params.sessionId", f"cannot load session {session_id!r}: {error}"
            ) from None
        return os.path.realpath(path)

    def _fresh_session_id(self, cwd: str) -> str:
        """
        A new id: not in this connection's store and, with sessions on disk, neither
        saved nor attached anywhere; then attached to this connection.
        """
        store = self.sessions
        for _ in range(NEW_ID_ATTEMPTS):
            session_id = new_session_id()
            if store.get(session_id) is not None:
                continue
            if not (self._sessions_on_disk() and isinstance(store, DiskSessionStore)):
                return session_id
            key = self._session_key(store, session_id, cwd)
            if self.runtime.attachments.owner(key) is not None or os.path.lexists(key):
                continue
            try:
                os.makedirs(os.path.dirname(key), exist_ok=True)
            except OSError:
                pass  # the save says why, and the session goes on in memory
            try:
                self._attach(session_id, key)
            except AttachedElsewhere:
                continue
            self._attached_now(session_id, key)
            return session_id
        raise InternalError(f"no free session id after {NEW_ID_ATTEMPTS} attempts")

    def _attach(self, session_id: str, key: str) -> object | None:
        """
        Attach the session file ``key`` to this connection; the owner it was taken from.
        ``-32002`` when a connection of another process holds it.
        """
        try:
            return self.runtime.attachments.attach(key, self)
        except AttachedElsewhere as error:
            _log.info(
                "[acp] session {sid}: not attached here: {holder} holds it",
                sid=session_id,
                holder=error.holder,
            )
            raise error.rpc_error(session_id) from None
        except OSError as error:
            raise InternalError(
                f"cannot lock session {session_id!r}: {error.strerror or error}"
            ) from None

    def _undo_attach(self, session_id: str, key: str, previous: object | None) -> None:
        """A load that failed after :meth:`_attach`: the session goes back to its owner."""
        attachments = self.runtime.attachments
        if previous is not None:
            attachments.attach(key, previous)
        elif self._attached.get(session_id) != key:
            attachments.detach(key, self)

    def _connection_label(self) -> str:
        """This connection in the log: its remote connection id (8 characters), else a
        name unique in this process."""
        transport = getattr(getattr(self.conn, "protocol", None), "transport", None)
        try:
            peer = transport.getPeer() if transport is not None else None
        except Exception:
            peer = None
        connection_id = getattr(peer, "connection_id", None)
        if isinstance(connection_id, str):
            return connection_id[:8]
        return f"local-{id(self.conn):x}"

    def _attached_now(self, session_id: str, key: str) -> None:
        """Record the attachment; detached when the connection ends."""
        old = self._attached.get(session_id)
        if old is not None and old != key:  # the same id, loaded from another directory
            self.runtime.attachments.detach(old, self)
        if old != key:
            _log.info(
                "[acp] session {sid}: attached to connection {connection} (pid {pid})",
                sid=session_id,
                connection=self._connection_label(),
                pid=os.getpid(),
                session_file=key,
            )
        self._attached[session_id] = key
        if not self._watching_close:
            self._watching_close = True
            self.conn.closed.addBoth(self._connection_ended)

    def _connection_ended(self, _: object) -> None:
        """The connection ended: detach its sessions once no turn runs."""
        d = ensureDeferred(self._detach_all())
        d.addErrback(lambda failure: _log.failure("[acp] detaching sessions", failure))

    async def _detach_all(self) -> None:
        """
        Detach every session of this connection, holding the turn lock: a turn of this
        connection still running (a tool it waits for) is saved before another process
        may take the session.
        """
        lock = self.runtime.lock
        await lock.acquire()
        try:
            attached, self._attached = self._attached, {}
            for session_id, key in attached.items():
                if self.runtime.attachments.owner(key) is self:
                    # said while still attached: another process may attach it next
                    _log.info(
                        "[acp] session {sid}: detached from connection {connection} (pid {pid})",
                        sid=session_id,
                        connection=self._connection_label(),
                        pid=os.getpid(),
                        session_file=key,
                    )
                self.runtime.attachments.detach(key, self)
        finally:
            lock.release()

    # -- prompt -------------------------------------------------------------------------

    async def prompt(self, params: schema.PromptRequest) -> unstable.PromptResponse:
        """Run a slash command or a model turn; turns are serialized process-wide."""
        session = self._session(params.session_id)
        flat = flatten_prompt(params.prompt, session.cwd)
        for path in flat.attached:
            _log.info("[acp] session {sid}: attached {path}", sid=session.id, path=path)
        if self.commands.match(flat.text) is None:
            await self._wait_for_mcp_servers(session)
        lock = self.runtime.lock
        await lock.acquire()
        try:
            # another connection may have loaded the session while this turn waited
            session = self._session(params.session_id)
            await self.runtime.window()
            runtime = self._runtime_of(session)
            turns = self.turns if runtime is self.runtime else TurnRunner(runtime, self.conn)
            command = self.commands.match(flat.text)
            if command is not None:
                line = await command.run(session)
                send_update(
                    self.conn,
                    session.id,
                    schema.AgentMessageChunk(content=schema.TextContentBlock(text=line)),
                )
                # the window may not be known yet (no model call so far): ask for it, so
                # usage_update.size is the window and not 0
                await runtime.window()
                turns.send_usage(session, session.used_tokens())
                stop_reason = "end_turn"
            else:
                text = rewrite_skill_command(flat.text, self.skills.catalog(session.cwd))
                config = runtime.config
                await maybe_compact(
                    session,
                    self.runtime.engine,
                    keep_last_turns=config.keep_last_turns,
                    compact_at=config.compact_at,
                    window=await runtime.window(),
                    seconds=self.runtime.reactor.seconds,
                )
                outcome = await turns.run(session, text)
                if outcome.error is not None:
                    self._save(session)
                    # the seed's table: "internal error with error: <one-line explanation>"
                    raise InternalError(outcome.error, data={"error": clip(outcome.error)})
                stop_reason = outcome.stop_reason
            self._save(session)
        finally:
            lock.release()
        from acpkit import unstable

        return unstable.PromptResponse(
            stop_reason=unstable.StopReason(stop_reason), usage=self._usage(session)
        )

    @staticmethod
    def _usage(session: Session) -> unstable.Usage | None:
        totals = session.totals
        if not totals.reported:
            return None
        from acpkit import unstable

        return unstable.Usage(
            total_tokens=totals.total_tokens,
            input_tokens=totals.input_tokens,
            output_tokens=totals.output_tokens,
            thought_tokens=totals.thought_tokens,
            cached_read_tokens=totals.cached_read_tokens,
        )


def _within(d: Deferred[None], seconds: float, clock: Any) -> Deferred[bool]:
    """Fires True when ``d`` fires within ``seconds`` of ``clock``, else False then."""
    outcome: Deferred[bool] = Deferred()

    def settle(value: bool) -> None:
        if not outcome.called:
            outcome.callback(value)

    timer = clock.callLater(seconds, settle, False)

    def fired(_: object) -> None:
        if timer.active():
            timer.cancel()
        settle(True)

    d.addBoth(fired)
    return outcome
