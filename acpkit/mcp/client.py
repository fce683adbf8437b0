"""
An MCP client on acpkit's JSON-RPC engine: lifecycle, tools, progress, cancellation, ping.

:class:`McpClient` drives one MCP server connection given any
:class:`acpkit.jsonrpc.JSONRPCEngine`-based protocol that cancels with
:data:`acpkit.rpc_cancel.MCP_CANCELLATION` (stdio: :func:`acpkit.mcp.stdio.connect_stdio`;
Streamable HTTP: another transport, same client).  Every payload is an attrs model of
:mod:`acpkit.mcp.schema`, decoded and encoded by :mod:`acpkit.codec`.

=====================================  ================================================
message                                what the client does
=====================================  ================================================
``initialize`` (ours)                  sent by :meth:`McpClient.start` with our
                                       ``clientInfo`` and no capabilities (we implement
                                       none of roots, sampling, elicitation, tasks); a
                                       server ``protocolVersion`` outside
                                       :data:`SUPPORTED_VERSIONS` fails the start with
                                       :class:`McpVersionError` and closes the
                                       connection (spec: the client SHOULD disconnect);
                                       never cancelled (spec: MUST NOT), a handshake
                                       timeout closes the connection instead
``notifications/initialized`` (ours)   sent once the ``initialize`` result is accepted
``tools/list`` (ours)                  :meth:`McpClient.list_tools` follows
                                       ``nextCursor`` page by page; a cursor seen
                                       twice, or more than ``max_tool_pages`` pages,
                                       fails with :class:`McpProtocolError`
``tools/call`` (ours)                  :meth:`McpClient.call_tool`; ``isError`` results
                                       are results; ``progress=`` puts a
                                       ``progressToken`` in ``_meta``
``notifications/progress``             given to that call's ``progress`` callback;
                                       unknown or finished tokens are dropped
``notifications/cancelled`` (ours)     sent by the engine when a call's Deferred is
                                       cancelled or times out; no answer is expected
``ping`` (both ways)                   :meth:`McpClient.ping`; the server's ``ping`` is
                                       answered ``{}``
``notifications/tools/list_changed``   tools listed again, then ``on_tools_changed()``
``notifications/message``              logged at the message's level
``sampling/createMessage``,            answered -32601 (method not found): we declared
``elicitation/create``, ``roots/list``  none of these capabilities
(any request we do not handle)
=====================================  ================================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from acpkit._version import __version__
from acpkit.codec import DecodeError, decode, encode
from acpkit.errors import ConnectionLost, RPCError, clip
from acpkit.jsonrpc import InboundRequest, JSONRPCEngine
from acpkit.mcp.schema import (
    MCP_PROTOCOL_VERSION,
    CallToolRequestParams,
    CallToolResult,
    ClientCapabilities,
    Implementation,
    InitializeRequestParams,
    InitializeResult,
    ListToolsResult,
    LoggingMessageNotificationParams,
    ProgressNotificationParams,
    ServerCapabilities,
    Tool,
)

__all__ = [
    "DEFAULT_CLIENT_INFO",
    "MAX_TOOL_PAGES",
    "SUPPORTED_VERSIONS",
    "McpClient",
    "McpError",
    "McpHandshakeError",
    "McpHandshakeTimeout",
    "McpProtocolError",
    "McpServerGone",
    "McpVersionError",
    "ProgressCallback",
    "ServerClosed",
]

#: The MCP revisions this client speaks, newest first; ``initialize`` offers the first.
#: The older ones differ from 2025-11-25 only in fields this client reads leniently
#: (``structuredContent``, ``title``, progress ``message`` may be absent).
SUPPORTED_VERSIONS: tuple[str, ...] = (
    MCP_PROTOCOL_VERSION,
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
)

#: How many ``tools/list`` pages :meth:`McpClient.list_tools` follows before giving up.
MAX_TOOL_PAGES = 100

#: Who we say we are in ``initialize``.
DEFAULT_CLIENT_INFO = Implementation(name="acpkit", version=__version__)

#: ``progress(progress, total, message)``: one ``notifications/progress`` of a call.
ProgressCallback = Callable[[float, "float | None", "str | None"], None]

if TYPE_CHECKING:
    from acpkit.endpoints import AgentProcess

_log = Logger(namespace="acpkit.mcp.client")


class McpError(Exception):
    """A failure of the MCP client itself (not a JSON-RPC error the server answered)."""


class McpHandshakeError(McpError):
    """``initialize`` failed: the server exited, answered an error or junk, or a bad result."""


class McpVersionError(McpHandshakeError):
    """The server chose an MCP protocol version this client does not speak."""

    def __init__(self, server: str, version: str) -> None:
        super().__init__(
            f'MCP server "{server}" speaks protocol version {version!r}; acpkit speaks '
            f"{', '.join(SUPPORTED_VERSIONS)}"
        )
        self.version = version


class McpHandshakeTimeout(McpHandshakeError):
    """The server did not answer ``initialize`` in time."""


class McpProtocolError(McpError):
    """The server answered something the protocol does not allow (bad result, looping cursor)."""


class McpServerGone(McpError, ConnectionLost):
    """The server connection ended (the process exited) before a request was answered."""

    def __init__(self, why: str) -> None:
        McpError.__init__(self, why)
        self.why = why


@attrs.frozen
class ServerClosed:
    """
    How a server connection ended (what :meth:`McpClient.when_closed` fires with).

    ``exit_code``/``signal``/``stderr_tail`` are known for a child process (stdio).
    ``requested`` is True when we closed it (:meth:`McpClient.close`).
    """

    description: str
    requested: bool = False
    exit_code: int | None = None
    signal: int | None = None
    stderr_tail: str = ""

    def __str__(self) -> str:
        return self.description


def _closed_from(name: str, reason: Failure, requested: bool) -> ServerClosed:
    """Describe the end of the connection from the engine's ``connectionLost`` reason."""
    value = reason.value
    exit_code = getattr(value, "exit_code", None)
    sig = getattr(value, "signal", None)
    tail = getattr(value, "stderr_tail", None)
    if isinstance(tail, str) and (exit_code is not None or sig is not None):
        how = (
            f"was killed by signal {sig}" if sig is not None else f"exited with status {exit_code}"
        )
        text = f'MCP server "{name}" {how}'
        if tail:
            text += f"; last stderr lines:\n{tail}"
        return ServerClosed(text, requested, exit_code, sig, tail)
    return ServerClosed(f'MCP server "{name}": connection closed ({value})', requested)


_LOG_LEVELS: Mapping[str, str] = {
    "debug": "debug",
    "info": "info",
    "notice": "info",
    "warning": "warn",
    "error": "error",
    "critical": "critical",
    "alert": "critical",
    "emergency": "critical",
}


class McpClient:
    """
    One MCP server connection seen from the client side.

    ``protocol`` is a connected (or about to be connected) JSON-RPC engine whose
    cancellation policy is MCP's; the client registers its handlers in
    ``protocol.registry``.  ``shutdown`` (optional) ends the transport for
    :meth:`close` and fires when it is gone (stdio: close stdin, wait, SIGTERM, SIGKILL);
    without it :meth:`close` closes the protocol's connection.

    Call :meth:`start` first; the other requests fail with :class:`McpError` before it
    succeeded.
    """

    def __init__(
        self,
        protocol: JSONRPCEngine,
        *,
        name: str = "mcp",
        clock: IReactorTime | None = None,
        client_info: Implementation = DEFAULT_CLIENT_INFO,
        shutdown: Callable[[], Deferred[Any]] | None = None,
        max_tool_pages: int = MAX_TOOL_PAGES,
    ) -> None:
        if clock is None:
            from twisted.internet import reactor

            clock = reactor
        assert clock is not None
        self.protocol = protocol
        #: The server's name (logs, errors).
        self.name = name
        self._clock: IReactorTime = clock
        self._client_info = client_info
        self._shutdown = shutdown
        self.max_tool_pages = max_tool_pages
        #: The ``initialize`` result's parts once started.
        self.server_info: Implementation | None = None
        self.capabilities: ServerCapabilities | None = None
        self.instructions: str | None = None
        #: The protocol version the server chose (one of :data:`SUPPORTED_VERSIONS`).
        self.protocol_version: str | None = None
        #: The tools of the last successful :meth:`list_tools`.
        self.tools: list[Tool] = []
        #: Called (no arguments) after the tools were listed again following the
        #: server's ``notifications/tools/list_changed``.
        self.on_tools_changed: Callable[[], None] | None = None
        #: How the connection ended, once it did.
        self.closed: ServerClosed | None = None
        #: The server's child process (stdio, set by ``connect_stdio``), else None.
        self.process: AgentProcess | None = None
        self._initialized = False
        self._closing = False
        self._progress: dict[int, ProgressCallback] = {}
        self._next_token = 1
        self._relisting = False
        self._relist_again = False
        self._close_waiters: list[Deferred[ServerClosed]] = []
        registry = protocol.registry
        registry.add_request("ping", self._answer_ping, params_optional=True)
        registry.add_notification("notifications/progress", self._progress_received)
        registry.add_notification(
            "notifications/tools/list_changed", self._tools_changed, params_optional=True
        )
        registry.add_notification("notifications/message", self._log_message)
        protocol.when_closed().addErrback(self._connection_lost)

    # -- lifecycle ------------------------------------------------------------------

    def start(self, *, timeout: float | None = None) -> Deferred[InitializeResult]:
        """
        ``initialize``, check the server's protocol version, send ``notifications/initialized``.

        Fails with :class:`McpVersionError` (connection closed), :class:`McpHandshakeTimeout`
        after ``timeout`` seconds (connection closed; ``initialize`` is never cancelled,
        the spec forbids it), or :class:`McpHandshakeError` (the server exited, answered
        an error, or a result that does not decode).
        """
        params = InitializeRequestParams(
            protocol_version=SUPPORTED_VERSIONS[0],
            capabilities=ClientCapabilities(),
            client_info=self._client_info,
        )
        timer: list[IDelayedCall] = []

        def give_up(_: Deferred[InitializeResult]) -> None:
            self._abort()

        outer: Deferred[InitializeResult] = Deferred(give_up)
        inner = self.protocol.request("initialize", encode(params))

        def answered(raw: object) -> None:
            if outer.called:
                return
            try:
                result = self._accept_initialize(raw)
            except McpHandshakeError as e:
                self._abort()
                outer.errback(e)
                return
            outer.callback(result)

        def failed(f: Failure) -> None:
            if outer.called:
                return
            outer.errback(self._handshake_failure(f))

        inner.addCallbacks(answered, failed)

        if timeout is not None:

            def expire() -> None:
                if outer.called:
                    return
                outer.errback(
                    McpHandshakeTimeout(
                        f'MCP server "{self.name}" did not answer initialize within '
                        f"{timeout:g} s{self._junk_note()}"
                    )
                )
                self._abort()

            timer.append(self._clock.callLater(timeout, expire))

            def stop_timer(result: Any) -> Any:
                if timer[0].active():
                    timer[0].cancel()
                return result

            outer.addBoth(stop_timer)
        return outer

    def _accept_initialize(self, raw: object) -> InitializeResult:
        version = raw.get("protocolVersion") if isinstance(raw, dict) else None
        if isinstance(version, str) and version not in SUPPORTED_VERSIONS:
            raise McpVersionError(self.name, version)
        try:
            result = decode(InitializeResult, raw)
        except DecodeError as e:
            raise McpHandshakeError(
                f'MCP server "{self.name}" answered initialize with an invalid result: {e}'
            ) from None
        self.server_info = result.server_info
        self.capabilities = result.capabilities
        self.instructions = result.instructions
        self.protocol_version = result.protocol_version
        self._initialized = True
        self.protocol.notify("notifications/initialized")
        _log.info(
            "{server}: initialized: {info} {version}, protocol {protocol}",
            server=self.name,
            info=result.server_info.name,
            version=result.server_info.version,
            protocol=result.protocol_version,
        )
        return result

    def _handshake_failure(self, f: Failure) -> McpHandshakeError:
        value = f.value
        if isinstance(value, RPCError):
            return McpHandshakeError(
                f'MCP server "{self.name}" refused initialize: {value}{self._junk_note()}'
            )
        if isinstance(value, ConnectionLost):
            reason = self.protocol.closed_reason
            if reason is not None:
                why = str(_closed_from(self.name, reason, self._closing))
            else:
                why = f'MCP server "{self.name}": {value}'
            return McpHandshakeError(f"{why}{self._junk_note()} (during initialize)")
        return McpHandshakeError(f'MCP server "{self.name}": initialize failed: {value}')

    def _junk_note(self) -> str:
        junk = getattr(self.protocol, "first_junk_line", None)
        if not junk:
            return ""
        text = junk.decode("utf-8", errors="replace")
        return f"; it wrote {clip(repr(text), 200)} where a JSON-RPC message was expected"

    def _abort(self) -> None:
        """Give up the connection without a graceful handshake (shutdown, else close)."""
        if self._shutdown is not None:
            self._shutdown().addErrback(
                lambda f: _log.failure("{server}: shutdown failed", f, server=self.name)
            )
        else:
            self.protocol.close()

    def close(self) -> Deferred[None]:
        """
        End the connection: pending requests fail with :class:`McpServerGone` at once,
        then the transport is shut down (stdio: stdin closed, the server given a grace
        to exit, then SIGTERM and SIGKILL to its process group); fires when it is gone.
        """
        self._closing = True
        if self.closed is not None:
            return succeed(None)
        self.protocol.fail_all_outgoing(
            McpServerGone(f'MCP server "{self.name}": the connection was closed by us')
        )
        if self._shutdown is not None:
            d = self._shutdown()
        else:
            self.protocol.close()
            d = self.when_closed()
        return d.addCallback(lambda _: None)

    def when_closed(self) -> Deferred[ServerClosed]:
        """A new Deferred firing (never failing) with a :class:`ServerClosed` at the end."""
        if self.closed is not None:
            return succeed(self.closed)
        d: Deferred[ServerClosed] = Deferred()
        self._close_waiters.append(d)
        return d

    def _connection_lost(self, reason: Failure) -> None:
        closed = _closed_from(self.name, reason, self._closing)
        self.closed = closed
        self._progress.clear()
        if closed.requested:
            _log.info("{server}: closed", server=self.name)
        else:
            _log.warn("{description}", description=closed.description, closed=closed)
        waiters, self._close_waiters = self._close_waiters, []
        for d in waiters:
            d.callback(closed)

    # -- requests -------------------------------------------------------------------

    def _request(self, method: str, params: Any, timeout: float | None) -> Deferred[Any]:
        """A request once initialized; a lost connection fails it with :class:`McpServerGone`."""
        if not self._initialized:
            return fail(McpError(f'MCP server "{self.name}": {method} before initialize'))
        if self.closed is not None:
            return fail(McpServerGone(f"{self.closed}; {method} was not sent"))
        d = self.protocol.request(method, params, timeout=timeout)
        return d.addErrback(self._gone, method)

    def _gone(self, f: Failure, method: str) -> Any:
        if f.check(McpServerGone) or not f.check(ConnectionLost):
            return f
        reason = self.protocol.closed_reason
        if reason is not None:
            why = str(_closed_from(self.name, reason, self._closing))
        else:
            why = f'MCP server "{self.name}": {f.value}'
        raise McpServerGone(f"{why} (while {method} was pending)")

    def ping(self, *, timeout: float | None = None) -> Deferred[None]:
        """``ping``: fires with None when the server answers."""
        return self._request("ping", None, timeout).addCallback(lambda _: None)

    def list_tools(self, *, timeout: float | None = None) -> Deferred[list[Tool]]:
        """
        Every tool, following ``nextCursor`` (``timeout`` per page); also sets :attr:`tools`.

        A cursor the server already gave, or more than ``max_tool_pages`` pages, fails
        with :class:`McpProtocolError` (a server looping its cursors cannot hang us).
        """
        tools: list[Tool] = []
        seen: set[str] = set()
        done: Deferred[list[Tool]] = Deferred(lambda _: page_d[0].cancel())
        page_d: list[Deferred[Any]] = []

        def request_page(cursor: str | None, page: int) -> None:
            params = None if cursor is None else {"cursor": cursor}
            d = self._request("tools/list", params, timeout)
            page_d[:] = [d]
            d.addCallbacks(got_page, done.errback, callbackArgs=(page,))

        def got_page(raw: object, page: int) -> None:
            if done.called:
                return
            try:
                result = decode(ListToolsResult, raw)
            except DecodeError as e:
                done.errback(self._bad_result("tools/list", e))
                return
            tools.extend(result.tools)
            cursor = result.next_cursor
            if cursor is None:
                self.tools = tools
                done.callback(list(tools))
                return
            if cursor in seen:
                done.errback(
                    McpProtocolError(
                        f'MCP server "{self.name}": tools/list gave cursor '
                        f"{clip(repr(cursor), 80)} "
                        f"a second time (page {page + 1}); the listing loops, given up"
                    )
                )
                return
            if page >= self.max_tool_pages:
                done.errback(
                    McpProtocolError(
                        f'MCP server "{self.name}": tools/list still has more after '
                        f"{page} pages; given up"
                    )
                )
                return
            seen.add(cursor)
            request_page(cursor, page + 1)

        request_page(None, 1)
        return done

    def _bad_result(self, method: str, e: DecodeError) -> McpProtocolError:
        return McpProtocolError(
            f'MCP server "{self.name}" answered {method} with an invalid result: {e}'
        )

    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        progress: ProgressCallback | None = None,
        timeout: float | None = None,
    ) -> Deferred[CallToolResult]:
        """
        ``tools/call``; fires with the :class:`CallToolResult`, ``is_error`` results too.

        ``progress(progress, total, message)`` is called for each progress notification
        of this call (a ``progressToken`` is sent in ``_meta``).  ``d.cancel()`` sends
        ``notifications/cancelled`` and fails ``d`` with ``CancelledError`` at once;
        ``timeout`` does the same with :class:`acpkit.errors.RequestTimeout`.  A server
        error answer fails with its :class:`RPCError`; a server that ends fails with
        :class:`McpServerGone`.
        """
        token: int | None = None
        meta: dict[str, Any] | None = None
        if progress is not None:
            token = self._next_token
            self._next_token += 1
            meta = {"progressToken": token}
        params = CallToolRequestParams(
            name=name, arguments=dict(arguments) if arguments is not None else None, meta=meta
        )
        if token is not None and progress is not None and self._initialized:
            self._progress[token] = progress
        d = self._request("tools/call", encode(params), timeout)

        def finished(result: Any) -> Any:
            if token is not None:
                self._progress.pop(token, None)
            return result

        def decoded(raw: object) -> CallToolResult:
            try:
                return decode(CallToolResult, raw)
            except DecodeError as e:
                raise self._bad_result("tools/call", e) from None

        return d.addBoth(finished).addCallback(decoded)

    # -- what the server sends ----------------------------------------------------------

    def _answer_ping(self, request: InboundRequest) -> dict[str, Any]:
        return {}

    def _progress_received(self, params: Any, meta: Mapping[str, Any] | None) -> None:
        try:
            note = decode(ProgressNotificationParams, params)
        except DecodeError as e:
            _log.warn(
                "{server}: invalid notifications/progress dropped: {e}", server=self.name, e=e
            )
            return
        token = note.progress_token
        callback = self._progress.get(token) if isinstance(token, int) else None
        if callback is None:
            _log.debug(
                "{server}: progress for unknown token {token!r} dropped",
                server=self.name,
                token=token,
            )
            return
        try:
            callback(note.progress, note.total, note.message)
        except Exception:
            _log.failure("{server}: progress callback failed", server=self.name)

    def _tools_changed(self, params: Any, meta: Mapping[str, Any] | None) -> None:
        # Never return the Deferred: the engine would hold the stream, and the
        # tools/list answer behind it, until it fired.
        if not self._initialized or self.closed is not None:
            return
        if self._relisting:
            self._relist_again = True
            return
        self._relist()

    def _relist(self) -> None:
        self._relisting = True
        self._relist_again = False

        def listed(_: object) -> None:
            self._relisting = False
            if self._relist_again and self.closed is None:
                self._relist()
                return
            callback = self.on_tools_changed
            if callback is not None:
                try:
                    callback()
                except Exception:
                    _log.failure("{server}: on_tools_changed failed", server=self.name)

        def failed(f: Failure) -> None:
            self._relisting = False
            if not f.check(CancelledError) and not self._closing:
                _log.warn(
                    "{server}: listing tools after list_changed failed: {why}",
                    server=self.name,
                    why=f.value,
                )

        self.list_tools().addCallbacks(listed, failed)

    def _log_message(self, params: Any, meta: Mapping[str, Any] | None) -> None:
        try:
            message = decode(LoggingMessageNotificationParams, params)
        except DecodeError as e:
            _log.warn("{server}: invalid notifications/message dropped: {e}", server=self.name, e=e)
            return
        level = str(message.level.value)
        data = message.data
        text = data if isinstance(data, str) else repr(data)
        emit = getattr(_log, _LOG_LEVELS.get(level, "info"))
        emit(
            "{server}{logger} [{mcp_level}]: {text}",
            server=self.name,
            logger="" if message.logger is None else f" ({message.logger})",
            text=clip(text, 2000),
            mcp_level=level,
            mcp_data=data,
        )
