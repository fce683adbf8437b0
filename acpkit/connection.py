"""
Typed ACP connections: :class:`AgentConnection` (what an agent holds) and
:class:`ClientConnection` (what a client holds).

Each wraps one :class:`acpkit.jsonrpc.JSONRPCProtocol` (``.protocol``, the object to
hand to a transport) and does three things the untyped layer does not:

1. **Types.**  Inbound params are decoded into ``acpkit.schema`` models (a decoding
   error answers ``-32602`` naming the JSON path); results are encoded back.  Outbound
   calls take and return models.
2. **Capabilities.**  Each side remembers what the other advertised at ``initialize``
   and refuses, with a local :class:`~acpkit.errors.CapabilityError`, to call a method
   the peer did not advertise.  Requests before ``initialize`` are refused.
3. **Protocol semantics** that every implementation otherwise gets wrong:

   .. list-table::
      :header-rows: 1
      :widths: 2 3

      * - situation
        - what the connection does
      * - ``session/cancel`` while a turn runs
        - the ``prompt`` handler's Deferred is cancelled (``CancelledError`` inside an
          ``async def``, ``asyncio.CancelledError`` on the asyncio reactor); the turn
          answers ``stopReason: "cancelled"`` whatever the handler then returns or raises
      * - ``session/cancel`` before the turn started
        - a prompt that arrived but waits for a handler slot is answered ``cancelled``
          without running; a cancel for a session with no prompt in flight is ignored
          (it never leaks into the next turn)
      * - the client calls ``cancel()``
        - ``session/cancel`` is sent and every pending ``session/request_permission`` of
          that session is answered with the ``cancelled`` outcome
      * - an agent sends updates for a session before its ``session/new`` response
        - held until the ``session/new`` response carrying that id has been written,
          then sent in order
      * - a client receives updates for a session it does not know yet
        - buffered (bounded) until the session is known, then delivered in order, right
          after the ``new_session()`` Deferred has fired
      * - a method the implementation lacks
        - ``-32601``, never a fake success, and before its params are decoded (malformed
          params of a method the handler lacks are ``-32601``, not ``-32602``); see
          :func:`unimplemented`
      * - the peer stops reading our output
        - ``session_update()`` (and every notification sender) returns ``writable()``: a
          Deferred that fires once the transport takes more output; ``await`` it in a
          stream and at most one transport buffer piles up
      * - an ``async def`` handler on the asyncio reactor
        - runs as an asyncio task: it may await asyncio libraries (``httpx``, the
          ``openai`` SDK) and the connection's Deferreds in one body; see
          ``acpkit.jsonrpc.asyncio_bridge``
      * - the connection ends
        - ``closed`` fires: ``None`` for a clean end (the peer's EOF, ``close()``, an
          agent process exiting 0), the reason's failure otherwise
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeAlias, TypeVar, cast

import attrs
from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.internet.error import ConnectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from acpkit import codec, schema
from acpkit.errors import (
    AgentExited,
    CapabilityError,
    ConnectionLost,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
)
from acpkit.framing import LineTracer
from acpkit.interfaces import (
    AGENT_METHOD_NAMES,
    CLIENT_METHOD_NAMES,
    IAgent,
    IClient,
    MaybeAsync,
)
from acpkit.jsonrpc import InboundRequest, JSONRPCProtocol
from acpkit.jsonrpc.asyncio_bridge import coroutine_deferred, task_awaitable

if TYPE_CHECKING:  # annotations only: the unstable models load when a program uses them
    from acpkit import unstable

__all__ = [
    "LATEST_PROTOCOL_VERSION",
    "SUPPORTED_PROTOCOL_VERSIONS",
    "Agent",
    "AgentConnection",
    "AgentSource",
    "Client",
    "ClientConnection",
    "ClientSource",
    "ProtocolVersionError",
    "is_implemented",
    "negotiate_version",
    "unimplemented",
]

T = TypeVar("T")

#: Protocol versions acpkit speaks, oldest first.
SUPPORTED_PROTOCOL_VERSIONS: tuple[int, ...] = (schema.PROTOCOL_VERSION,)
#: The version acpkit offers and answers with when the peer's is unsupported.
LATEST_PROTOCOL_VERSION: int = SUPPORTED_PROTOCOL_VERSIONS[-1]

#: How many updates for not-yet-known sessions a client keeps before dropping the oldest.
MAX_EARLY_UPDATES = 1000

_CANCELLED_PROMPT: dict[str, Any] = {"stopReason": "cancelled"}
_CANCELLED_PERMISSION: dict[str, Any] = {"outcome": {"outcome": "cancelled"}}


def negotiate_version(requested: int) -> int:
    """
    The version an agent answers to ``initialize``: the client's when we support it,
    otherwise our latest (ACP: initialization).
    """
    return requested if requested in SUPPORTED_PROTOCOL_VERSIONS else LATEST_PROTOCOL_VERSION


def _in_params(path: str) -> str:
    """A decoder path (``$.cwd``, ``$[0]``, ``$``) as a path into the request."""
    if path == "$":
        return "$.params"
    if path.startswith("$"):
        return "$.params" + path[1:]
    return path


class ProtocolVersionError(Exception):
    """The agent answered ``initialize`` with a protocol version we do not speak."""

    def __init__(self, version: object) -> None:
        super().__init__(
            f"the agent speaks ACP protocol version {version!r}; acpkit speaks "
            f"{', '.join(map(str, SUPPORTED_PROTOCOL_VERSIONS))}: connection closed"
        )
        self.version = version


def _invoke(fn: Callable[[Any], Any], arg: Any) -> Deferred[Any]:
    """Call a handler and return its result as a Deferred (coroutines are wrapped)."""
    try:
        result = fn(arg)
    except BaseException:
        return fail()
    return _as_deferred(result)


def _as_deferred(result: Any) -> Deferred[Any]:
    """A handler's result as a Deferred: Deferreds as they are, awaitables wrapped."""
    if isinstance(result, Deferred):
        return result
    if inspect.iscoroutine(result):
        # An asyncio task on the asyncio reactor (see acpkit.jsonrpc.asyncio_bridge).
        return coroutine_deferred(cast(Coroutine[Any, Any, Any], result))
    if inspect.isawaitable(result):

        async def wait(aw: Awaitable[Any]) -> Any:
            return await aw

        return coroutine_deferred(wait(result))
    return succeed(result)


def _clean_close(reason: Failure) -> bool:
    """Whether a connection ended cleanly: EOF or our close, or an agent's exit status 0."""
    if reason.check(ConnectionDone):
        return True
    value = reason.value
    return isinstance(value, AgentExited) and value.exit_code == 0 and value.signal is None


def _session_id_of(params: object) -> str | None:
    """The ``sessionId`` of raw params, when there is a string one."""
    if isinstance(params, Mapping):
        sid = params.get("sessionId")
        if isinstance(sid, str):
            return sid
    return None


_UNIMPLEMENTED = "__acpkit_unimplemented__"

F = TypeVar("F", bound=Callable[..., Any])


def unimplemented(fn: F) -> F:
    """
    Mark a handler method as not provided: its requests are answered ``-32601``
    (method not found) before their params are decoded, so a malformed call of a
    method the peer does not implement is never reported as ``-32602``.  The optional
    methods of :class:`Agent` and :class:`Client` are marked; a handler that provides a
    method only in some configurations can bind the base stub on the instance
    (``self.load_session = super().load_session``) when it does not.
    """
    setattr(fn, _UNIMPLEMENTED, True)
    return fn


def is_implemented(fn: object) -> bool:
    """Whether ``fn`` (a handler's attribute, or ``None``) is a provided method."""
    return fn is not None and not getattr(fn, _UNIMPLEMENTED, False)


def _all_fields_optional(cls: Any) -> bool:
    """Whether ``cls`` (an attrs params class) can be built with no arguments."""
    if not attrs.has(cls):
        return False
    return all(f.default is not attrs.NOTHING for f in attrs.fields(cls))


H = TypeVar("H")


class _Role(Generic[H]):
    """What both typed connections share: decoding, encoding, dispatch and calls."""

    _log = Logger()

    #: ACP methods this side handles, and their Python names.
    _handled: ClassVar[Mapping[str, schema.Method]]
    _names: ClassVar[Mapping[str, str]]
    #: ACP methods this side sends.
    _sent: ClassVar[Mapping[str, schema.Method]]

    handler: H

    #: Called as ``hook(method, raw_params, error)`` for a notification that could not be
    #: decoded (it is dropped; notifications are never answered).  A client uses it to
    #: count what it could not show.
    on_undecodable_notification: Callable[[str, Any, Exception], None] | None = None

    def __init__(
        self,
        handler: H | Callable[[Any], H],
        *,
        protocol: JSONRPCProtocol | None,
        strict: bool,
        name: str,
        interface: Any,
        tracer: LineTracer | None = None,
    ) -> None:
        self.protocol = protocol if protocol is not None else JSONRPCProtocol(name=name)
        if tracer is not None:
            self.protocol.tracer = tracer
        self.strict = strict
        for method in self._handled.values():
            self._register(method)
        if interface.providedBy(handler) or not callable(handler):
            self.handler = cast(H, handler)
        else:
            self.handler = handler(self)

    # -- inbound -------------------------------------------------------------------

    def _register(self, method: schema.Method) -> None:
        pyname = self._names[method.name]
        # Params may be omitted on the wire when every field of the params class is optional.
        optional = _all_fields_optional(method.params)
        if method.kind == "request":
            self.protocol.registry.add_request(
                method.name,
                lambda req: self._handle_request(method, pyname, req),
                cancelled_result=self._cancelled_result(method.name),
                params_optional=optional,
            )
        else:
            self.protocol.registry.add_notification(
                method.name,
                lambda params, meta: self._handle_notification(method, pyname, params),
                params_optional=optional,
            )

    def _cancelled_result(self, method: str) -> Callable[[InboundRequest], Any] | None:
        """The result a cancelled request of ``method`` answers with (None: -32800)."""
        return None

    def _decode_params(self, method: schema.Method, params: Any) -> Any:
        try:
            return codec.decode(method.params, {} if params is None else params, strict=self.strict)
        except codec.DecodeError as e:
            # The decoder's paths start at the params ($.cwd); an answer's data.path
            # starts at the request, as the handlers' own do ($.params.cwd).
            raise InvalidParams(_in_params(e.path), e.message) from None

    def _check_ready(self, method: schema.Method) -> None:
        """Raise an RPCError when ``method`` may not be called now."""

    def _handle_request(self, method: schema.Method, pyname: str, req: InboundRequest) -> Any:
        self._check_ready(method)
        fn = getattr(self.handler, pyname, None)
        if not is_implemented(fn):
            # Before decoding: a method we lack is -32601 whatever its params are.
            raise MethodNotFound(method.name)
        assert fn is not None
        params = self._decode_params(method, req.params)
        after = self._after_handler(method, req, params)
        result = fn(params)
        if not isinstance(result, Deferred) and not inspect.isawaitable(result):
            # A synchronous answer: encode and finish it now, without Deferreds.
            result = self._encode_result(result, method)
            for step in after:
                result = step(result)
            return result
        d = _as_deferred(result)
        d.addCallback(self._encode_result, method)
        for step in after:
            d.addBoth(step)
        return d

    def _after_handler(
        self, method: schema.Method, req: InboundRequest, params: Any
    ) -> list[Callable[[Any], Any]]:
        """
        Per-method steps applied to a handler's encoded result (or its Failure, when it
        fails asynchronously), in order; each returns the result to pass on.
        """
        return []

    def _encode_result(self, result: Any, method: schema.Method) -> Any:
        if result is None:
            assert method.result is not None
            try:
                result = method.result()
            except TypeError:
                raise TypeError(
                    f"the {method.name} handler returned None, but its result has required fields"
                ) from None
        if isinstance(result, Mapping):
            return result
        return codec.encode(result)

    def _handle_notification(self, method: schema.Method, pyname: str, params: Any) -> Any:
        try:
            self._check_ready(method)
            decoded = self._decode_params(method, params)
        except Exception as e:
            self._log.warn(
                "dropped a {method} notification: {error}", method=method.name, error=str(e)
            )
            hook = self.on_undecodable_notification
            if hook is not None:
                hook(method.name, params, e)
            return None
        return self._deliver_notification(method, pyname, decoded)

    def _deliver_notification(self, method: schema.Method, pyname: str, params: Any) -> Any:
        fn = getattr(self.handler, pyname, None)
        if fn is None:
            return None
        try:
            result = fn(params)
        except Exception:
            self._notification_failed(Failure(), method.name)
            return None
        if result is None:  # a synchronous handler: no Deferred needed
            return None
        d = _as_deferred(result)
        d.addErrback(self._notification_failed, method.name)
        return d

    def _notification_failed(self, failure: Failure, method: str) -> None:
        self._log.failure("the {method} notification handler failed", failure, method=method)

    # -- outbound ------------------------------------------------------------------

    def _call(self, method: str, params: object, *, timeout: float | None = None) -> Deferred[Any]:
        spec = self._sent[method]
        assert spec.result is not None
        result_type = spec.result
        d = self.protocol.request(method, codec.encode(params), timeout=timeout)
        d.addCallback(
            lambda raw: codec.decode(result_type, {} if raw is None else raw, strict=self.strict)
        )
        return task_awaitable(d)

    def _notify(self, method: str, params: object) -> Deferred[None]:
        self.protocol.notify(method, codec.encode(params))
        return self.writable()

    # -- lifetime ------------------------------------------------------------------

    def close(self) -> None:
        """
        Close the connection now, keeping what was already written: output already
        written is flushed to the peer first; handlers still running are cancelled and
        pending outgoing requests fail once the transport reports the close.  Closing
        twice, or a connection that is gone, does nothing.
        """
        self.protocol.close()

    @property
    def closed(self) -> Deferred[None]:
        """
        A new Deferred on each access that fires once the connection has ended: with
        ``None`` when it ended cleanly (the peer closed its end, we called
        :meth:`close`, or an agent process exited with status 0), and fails with the
        reason otherwise (an :class:`~acpkit.io.AgentExited` with another status
        or a signal, a broken pipe...).  Already fired once the connection is gone.
        (``protocol.when_closed()`` still fires with the reason, a ``Failure``, for
        callers written before this.)
        """
        reason = self.protocol.closed_reason
        if reason is not None:
            return succeed(None) if _clean_close(reason) else fail(reason)
        d = self.protocol.when_closed()
        d.addErrback(lambda reason: None if _clean_close(reason) else reason)
        return task_awaitable(cast("Deferred[None]", d))

    @property
    def closed_reason(self) -> Failure | None:
        """Why the connection ended (a ``Failure``) once it has, else ``None``."""
        return self.protocol.closed_reason

    # -- back-pressure ---------------------------------------------------------------

    def writable(self) -> Deferred[None]:
        """
        A Deferred that fires now, or once the transport takes more output.

        The transport pauses us when the peer stops reading and its buffer is full (one
        buffer: 64 KiB for pipes and sockets); it resumes us once that buffer is written.
        Code that writes much (a stream of updates) awaits this before each write, so a
        peer that does not read makes it wait instead of buffering without bound.  Every
        notification sender (``session_update()``…) returns this Deferred for its write.
        It fails with :class:`~acpkit.errors.ConnectionLost` when the connection is gone,
        or goes away while we wait: ignore that failure (``addErrback``) or stop writing.
        """
        reason = self.protocol.closed_reason
        if reason is not None:
            return fail(ConnectionLost.because(reason.value))
        return task_awaitable(self.protocol.writable())

    # -- extensions ----------------------------------------------------------------

    def register_extension_request(self, method: str, handler: Callable[[Any], Any]) -> None:
        """Handle the custom request ``method`` (``_vendor/...``) with raw params."""
        self._check_extension_name(method)
        self.protocol.registry.add_request(method, lambda req: handler(req.params))

    def register_extension_notification(self, method: str, handler: Callable[[Any], Any]) -> None:
        """Handle the custom notification ``method`` (``_vendor/...``) with raw params."""
        self._check_extension_name(method)
        self.protocol.registry.add_notification(method, lambda params, meta: handler(params))

    def extension_request(
        self, method: str, params: Any = None, *, timeout: float | None = None
    ) -> Deferred[Any]:
        """Send the custom request ``method`` with raw params; resolves with the raw result."""
        self._check_extension_name(method)
        return task_awaitable(self.protocol.request(method, params, timeout=timeout))

    def extension_notify(self, method: str, params: Any = None) -> Deferred[None]:
        """
        Send the custom notification ``method`` with raw params; returns
        :meth:`writable` (await it when sending many).
        """
        self._check_extension_name(method)
        self.protocol.notify(method, params)
        return self.writable()

    @staticmethod
    def _check_extension_name(method: str) -> None:
        if not method.startswith("_"):
            raise ValueError(f"extension methods start with '_' (got {method!r})")


# ======================================================================================
# The agent side
# ======================================================================================


@implementer(IAgent)
class Agent:
    """
    A convenient base for :class:`~acpkit.interfaces.IAgent` implementations.

    Every method answers ``-32601`` until overridden, except ``authenticate`` (an empty
    answer, right for agents without ``authMethods``) and ``cancel`` (nothing to do:
    the connection already cancelled the running turn).
    """

    @unimplemented
    def initialize(
        self, params: schema.InitializeRequest
    ) -> MaybeAsync[schema.InitializeResponse | unstable.InitializeResponse]:
        raise MethodNotFound("initialize")

    def authenticate(
        self, params: schema.AuthenticateRequest
    ) -> MaybeAsync[schema.AuthenticateResponse | None]:
        return schema.AuthenticateResponse()

    @unimplemented
    def logout(self, params: schema.LogoutRequest) -> MaybeAsync[schema.LogoutResponse | None]:
        raise MethodNotFound("logout")

    @unimplemented
    def new_session(
        self, params: schema.NewSessionRequest
    ) -> MaybeAsync[schema.NewSessionResponse]:
        raise MethodNotFound("session/new")

    @unimplemented
    def load_session(
        self, params: schema.LoadSessionRequest
    ) -> MaybeAsync[schema.LoadSessionResponse | None]:
        raise MethodNotFound("session/load")

    @unimplemented
    def list_sessions(
        self, params: schema.ListSessionsRequest
    ) -> MaybeAsync[schema.ListSessionsResponse | unstable.ListSessionsResponse]:
        raise MethodNotFound("session/list")

    @unimplemented
    def delete_session(
        self, params: schema.DeleteSessionRequest
    ) -> MaybeAsync[schema.DeleteSessionResponse | None]:
        raise MethodNotFound("session/delete")

    @unimplemented
    def resume_session(
        self, params: schema.ResumeSessionRequest
    ) -> MaybeAsync[schema.ResumeSessionResponse | None]:
        raise MethodNotFound("session/resume")

    @unimplemented
    def close_session(
        self, params: schema.CloseSessionRequest
    ) -> MaybeAsync[schema.CloseSessionResponse | None]:
        raise MethodNotFound("session/close")

    @unimplemented
    def set_mode(
        self, params: schema.SetSessionModeRequest
    ) -> MaybeAsync[schema.SetSessionModeResponse | None]:
        raise MethodNotFound("session/set_mode")

    @unimplemented
    def set_config_option(
        self, params: schema.SetSessionConfigOptionRequest
    ) -> MaybeAsync[schema.SetSessionConfigOptionResponse]:
        raise MethodNotFound("session/set_config_option")

    @unimplemented
    def prompt(
        self, params: schema.PromptRequest
    ) -> MaybeAsync[schema.PromptResponse | unstable.PromptResponse]:
        raise MethodNotFound("session/prompt")

    def cancel(self, params: schema.CancelNotification) -> MaybeAsync[None]:
        return None


@attrs.define
class _Turn:
    """One ``session/prompt`` request the agent side has received and not yet answered."""

    request: InboundRequest
    cancelled: bool = False


class AgentConnection(_Role[IAgent]):
    """
    The agent's end of an ACP connection.

    ``agent`` is an :class:`~acpkit.interfaces.IAgent` provider, or a callable that
    receives this connection and returns one (so the agent can call the client)::

        conn = AgentConnection(lambda conn: EchoAgent(conn))
        serve_stdio(conn.protocol)
        conn.closed.addBoth(lambda _: reactor.stop())

    or, in one call that also runs the reactor and exits when the connection ends,
    :func:`acpkit.run_agent(EchoAgent) <acpkit.runners.run_agent>`.

    Back-pressure: ``writable()`` (both roles have it) returns a Deferred that fires at
    once, or once the transport takes more output (the client stopped reading and a
    transport buffer, 64 KiB, is full); ``session_update()`` returns it.  ``await`` it
    before each update of a long stream and a client that stops reading stops the
    stream instead of filling memory.  It fails with
    :class:`~acpkit.errors.ConnectionLost` once the connection is gone.
    """

    _handled = schema.AGENT_METHODS
    _names = AGENT_METHOD_NAMES
    _sent = schema.CLIENT_METHODS

    def __init__(
        self,
        agent: AgentSource,
        *,
        protocol: JSONRPCProtocol | None = None,
        strict: bool = False,
        name: str = "client",
        tracer: LineTracer | None = None,
    ) -> None:
        self._turns: dict[str, list[_Turn]] = {}
        # Sessions whose id the client knows (seen in a request or a written response).
        self._known_sessions: set[str] = set()
        self._new_sessions_in_flight = 0
        self._held_updates: dict[str, list[dict[str, Any]]] = {}
        #: What the client advertised at ``initialize`` (None before).
        self.client_capabilities: schema.ClientCapabilities | None = None
        self.client_info: schema.Implementation | None = None
        self.protocol_version: int | None = None
        super().__init__(
            agent, protocol=protocol, strict=strict, name=name, interface=IAgent, tracer=tracer
        )
        self.protocol.side = "agent"
        self.protocol.on_request_received = self._request_received

    # -- inbound semantics -----------------------------------------------------------

    def _check_ready(self, method: schema.Method) -> None:
        if self.client_capabilities is None and method.name != "initialize":
            raise InvalidRequest(
                f"{method.name} before initialize: the client must call initialize first"
            )

    def _request_received(self, req: InboundRequest) -> None:
        sid = _session_id_of(req.params)
        if sid is not None:
            self._known_sessions.add(sid)
        if req.method == "session/prompt" and sid is not None:
            turn = _Turn(req)
            self._turns.setdefault(sid, []).append(turn)
            req.after_reply(lambda: self._turn_ended(sid, turn))
        elif req.method == "session/new":
            self._new_sessions_in_flight += 1
            req.after_reply(self._new_session_done)

    def _new_session_done(self) -> None:
        self._new_sessions_in_flight -= 1
        if self._new_sessions_in_flight == 0:
            self._release_all_held()

    def _turn_ended(self, sid: str, turn: _Turn) -> None:
        turns = self._turns.get(sid, [])
        if turn in turns:
            turns.remove(turn)
        if not turns:
            self._turns.pop(sid, None)

    def _cancelled_result(self, method: str) -> Callable[[InboundRequest], Any] | None:
        if method == "session/prompt":
            return lambda req: dict(_CANCELLED_PROMPT)
        return None

    def _after_handler(
        self, method: schema.Method, req: InboundRequest, params: Any
    ) -> list[Callable[[Any], Any]]:
        if method.name == "initialize":
            return [
                lambda result: (
                    result if isinstance(result, Failure) else self._initialized(result, params)
                )
            ]
        if method.name == "session/new":
            return [lambda result: self._new_session_answered(result, req)]
        if method.name == "session/prompt":
            return [lambda result: self._prompt_answered(result, req)]
        return []

    def _initialized(self, result: Any, params: schema.InitializeRequest) -> Any:
        self.client_capabilities = params.client_capabilities or schema.ClientCapabilities()
        self.client_info = params.client_info
        if isinstance(result, Mapping):
            version = result.get("protocolVersion")
            self.protocol_version = version if isinstance(version, int) else None
        return result

    def _new_session_answered(self, result: Any, req: InboundRequest) -> Any:
        sid = _session_id_of(result)
        if sid is not None:
            self._known_sessions.add(sid)
            req.after_reply(lambda: self._release_held(sid))
        return result

    def _release_held(self, sid: str) -> None:
        for params in self._held_updates.pop(sid, []):
            self.protocol.notify("session/update", params)

    def _release_all_held(self) -> None:
        held, self._held_updates = self._held_updates, {}
        for updates in held.values():
            for params in updates:
                self.protocol.notify("session/update", params)

    def _prompt_answered(self, result: Any, req: InboundRequest) -> Any:
        sid = _session_id_of(req.params)
        turn = next((t for t in self._turns.get(sid or "", []) if t.request is req), None)
        cancelled = turn is not None and turn.cancelled
        if isinstance(result, Failure):
            if cancelled or result.check(CancelledError):
                if not result.check(CancelledError):
                    self._log.failure(
                        "the cancelled turn of session {sid} ended with an error", result, sid=sid
                    )
                return dict(_CANCELLED_PROMPT)
            return result
        if cancelled and isinstance(result, Mapping):
            result = {**result, "stopReason": "cancelled"}
        return result

    def _deliver_notification(self, method: schema.Method, pyname: str, params: Any) -> Any:
        if method.name == "session/cancel":
            self._cancel_turns(params.session_id)
        return super()._deliver_notification(method, pyname, params)

    def cancel_all_turns(self) -> None:
        """
        Cancel every running turn of every session, as ``session/cancel`` does for one:
        each ``session/prompt`` is answered ``cancelled``.  For an agent that must stop
        (its input ended, it is shutting down).
        """
        for sid in list(self._turns):
            self._cancel_turns(sid)

    def _cancel_turns(self, sid: str) -> None:
        for turn in list(self._turns.get(sid, [])):
            if not turn.cancelled:
                turn.cancelled = True
                turn.request.cancel()

    # -- outbound: calls to the client -------------------------------------------------

    def _require(self, allowed: bool, method: str, capability: str) -> None:
        if self.client_capabilities is None:
            raise CapabilityError(method, "anything yet (initialize has not happened)")
        if not allowed:
            raise CapabilityError(method, capability)

    def session_update(
        self,
        session_id: str,
        update: schema.SessionUpdate | unstable.SessionUpdate,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> Deferred[None]:
        """
        Send one ``session/update``; returns :meth:`writable`.

        ``await`` it before the next update of a long stream: while the client does not
        read, it waits (the update itself is already written), so at most one transport
        buffer of updates piles up.  An update for a session whose ``session/new``
        response is not written yet is held and returns a fired Deferred.
        """
        # The SessionNotification envelope built directly: this is the hot path of a turn.
        params: dict[str, Any] = {"sessionId": session_id, "update": codec.encode(update)}
        if meta:
            params["_meta"] = dict(meta)
        if session_id not in self._known_sessions and self._new_sessions_in_flight:
            self._held_updates.setdefault(session_id, []).append(params)
            return succeed(None)
        self.protocol.notify("session/update", params)
        return self.writable()

    def request_permission(
        self, params: schema.RequestPermissionRequest, *, timeout: float | None = None
    ) -> Deferred[schema.RequestPermissionResponse]:
        """``session/request_permission``: ask the user to choose one of ``params.options``."""
        return self._call("session/request_permission", params, timeout=timeout)

    def _fs(self) -> Any:
        caps = self.client_capabilities
        return caps.fs if caps is not None and caps.fs is not None else None

    def read_text_file(
        self, params: schema.ReadTextFileRequest, *, timeout: float | None = None
    ) -> Deferred[schema.ReadTextFileResponse]:
        """``fs/read_text_file`` (only when the client advertised ``fs.readTextFile``)."""
        try:
            fs = self._fs()
            self._require(bool(fs and fs.read_text_file), "fs/read_text_file", "fs.readTextFile")
        except CapabilityError:
            return fail()
        return self._call("fs/read_text_file", params, timeout=timeout)

    def write_text_file(
        self, params: schema.WriteTextFileRequest, *, timeout: float | None = None
    ) -> Deferred[schema.WriteTextFileResponse]:
        """``fs/write_text_file`` (only when the client advertised ``fs.writeTextFile``)."""
        try:
            fs = self._fs()
            self._require(bool(fs and fs.write_text_file), "fs/write_text_file", "fs.writeTextFile")
        except CapabilityError:
            return fail()
        return self._call("fs/write_text_file", params, timeout=timeout)

    def _terminal_call(self, method: str, params: object, timeout: float | None) -> Deferred[Any]:
        try:
            caps = self.client_capabilities
            self._require(bool(caps is not None and caps.terminal), method, "terminal")
        except CapabilityError:
            return fail()
        return self._call(method, params, timeout=timeout)

    def create_terminal(
        self, params: schema.CreateTerminalRequest, *, timeout: float | None = None
    ) -> Deferred[schema.CreateTerminalResponse]:
        """``terminal/create`` (only when the client advertised ``terminal``)."""
        return self._terminal_call("terminal/create", params, timeout)

    def terminal_output(
        self, params: schema.TerminalOutputRequest, *, timeout: float | None = None
    ) -> Deferred[schema.TerminalOutputResponse]:
        """``terminal/output``."""
        return self._terminal_call("terminal/output", params, timeout)

    def release_terminal(
        self, params: schema.ReleaseTerminalRequest, *, timeout: float | None = None
    ) -> Deferred[schema.ReleaseTerminalResponse]:
        """``terminal/release``."""
        return self._terminal_call("terminal/release", params, timeout)

    def wait_for_terminal_exit(
        self, params: schema.WaitForTerminalExitRequest, *, timeout: float | None = None
    ) -> Deferred[schema.WaitForTerminalExitResponse]:
        """``terminal/wait_for_exit``."""
        return self._terminal_call("terminal/wait_for_exit", params, timeout)

    def kill_terminal(
        self, params: schema.KillTerminalRequest, *, timeout: float | None = None
    ) -> Deferred[schema.KillTerminalResponse]:
        """``terminal/kill``."""
        return self._terminal_call("terminal/kill", params, timeout)

    def _elicitation_modes(self) -> set[str]:
        caps = self.client_capabilities
        elicitation = caps.elicitation if caps is not None else None
        if elicitation is None:
            return set()
        return {mode for mode in ("form", "url") if getattr(elicitation, mode, None) is not None}

    def create_elicitation(
        self, params: schema.CreateElicitationRequest, *, timeout: float | None = None
    ) -> Deferred[schema.CreateElicitationResponse]:
        """``elicitation/create`` (only in a mode the client advertised)."""
        mode = codec.wire_tag(params)
        try:
            self._require(
                mode in self._elicitation_modes(), "elicitation/create", f"elicitation.{mode}"
            )
        except CapabilityError:
            return fail()
        return self._call("elicitation/create", params, timeout=timeout)

    def complete_elicitation(
        self, params: schema.CompleteElicitationNotification
    ) -> Deferred[None]:
        """``elicitation/complete`` (URL mode only)."""
        try:
            self._require(
                "url" in self._elicitation_modes(), "elicitation/complete", "elicitation.url"
            )
        except CapabilityError:
            return fail()
        return self._notify("elicitation/complete", params)


# ======================================================================================
# The client side
# ======================================================================================


@implementer(IClient)
class Client:
    """
    A convenient base for :class:`~acpkit.interfaces.IClient` implementations.

    ``session_update`` does nothing; ``request_permission`` rejects (never approve by
    default); everything else answers ``-32601`` until overridden.
    """

    def session_update(self, params: schema.SessionNotification) -> MaybeAsync[None]:
        return None

    def request_permission(
        self, params: schema.RequestPermissionRequest
    ) -> MaybeAsync[schema.RequestPermissionResponse]:
        for option in params.options:
            if str(option.kind) in ("reject_once", "reject_always"):
                return codec.decode(
                    schema.RequestPermissionResponse,
                    {"outcome": {"outcome": "selected", "optionId": option.option_id}},
                )
        return codec.decode(schema.RequestPermissionResponse, dict(_CANCELLED_PERMISSION))

    @unimplemented
    def read_text_file(
        self, params: schema.ReadTextFileRequest
    ) -> MaybeAsync[schema.ReadTextFileResponse]:
        raise MethodNotFound("fs/read_text_file")

    @unimplemented
    def write_text_file(
        self, params: schema.WriteTextFileRequest
    ) -> MaybeAsync[schema.WriteTextFileResponse | None]:
        raise MethodNotFound("fs/write_text_file")

    @unimplemented
    def create_terminal(
        self, params: schema.CreateTerminalRequest
    ) -> MaybeAsync[schema.CreateTerminalResponse]:
        raise MethodNotFound("terminal/create")

    @unimplemented
    def terminal_output(
        self, params: schema.TerminalOutputRequest
    ) -> MaybeAsync[schema.TerminalOutputResponse]:
        raise MethodNotFound("terminal/output")

    @unimplemented
    def release_terminal(
        self, params: schema.ReleaseTerminalRequest
    ) -> MaybeAsync[schema.ReleaseTerminalResponse | None]:
        raise MethodNotFound("terminal/release")

    @unimplemented
    def wait_for_terminal_exit(
        self, params: schema.WaitForTerminalExitRequest
    ) -> MaybeAsync[schema.WaitForTerminalExitResponse | None]:
        raise MethodNotFound("terminal/wait_for_exit")

    @unimplemented
    def kill_terminal(
        self, params: schema.KillTerminalRequest
    ) -> MaybeAsync[schema.KillTerminalResponse | None]:
        raise MethodNotFound("terminal/kill")

    @unimplemented
    def create_elicitation(
        self, params: schema.CreateElicitationRequest
    ) -> MaybeAsync[schema.CreateElicitationResponse]:
        raise MethodNotFound("elicitation/create")

    def complete_elicitation(
        self, params: schema.CompleteElicitationNotification
    ) -> MaybeAsync[None]:
        return None


class ClientConnection(_Role[IClient]):
    """
    The client's end of an ACP connection.

    ``client`` is an :class:`~acpkit.interfaces.IClient` provider, or a callable that
    receives this connection and returns one.  Typical use (or
    :func:`acpkit.run_client <acpkit.runners.run_client>`, which does the spawning, the
    reactor and the exit status)::

        conn = ClientConnection(MyClient())
        spawn_agent(reactor, conn.protocol, "my-agent")
        await conn.initialize()
        session = await conn.new_session(schema.NewSessionRequest(cwd=..., mcp_servers=[]))
        response = await conn.prompt(schema.PromptRequest(session_id=..., prompt=[...]))
    """

    _handled = schema.CLIENT_METHODS
    _names = CLIENT_METHOD_NAMES
    _sent = schema.AGENT_METHODS

    def __init__(
        self,
        client: ClientSource,
        *,
        protocol: JSONRPCProtocol | None = None,
        strict: bool = False,
        name: str = "agent",
        tracer: LineTracer | None = None,
    ) -> None:
        self._known_sessions: set[str] = set()
        self._early_updates: deque[tuple[str, schema.SessionNotification]] = deque()
        self._permissions: dict[str, list[InboundRequest]] = {}
        #: What the agent answered to ``initialize`` (None before).
        self.initialize_response: schema.InitializeResponse | None = None
        super().__init__(
            client, protocol=protocol, strict=strict, name=name, interface=IClient, tracer=tracer
        )
        self.protocol.side = "client"
        self.protocol.on_request_received = self._request_received

    @property
    def agent_capabilities(self) -> schema.AgentCapabilities | None:
        """What the agent advertised at ``initialize`` (None before)."""
        response = self.initialize_response
        if response is None:
            return None
        return response.agent_capabilities or schema.AgentCapabilities()

    # -- inbound semantics -----------------------------------------------------------

    def _request_received(self, req: InboundRequest) -> None:
        if req.method == "session/request_permission":
            sid = _session_id_of(req.params)
            if sid is not None:
                pending = self._permissions.setdefault(sid, [])
                pending.append(req)
                req.after_reply(lambda: pending.remove(req) if req in pending else None)

    def _cancelled_result(self, method: str) -> Callable[[InboundRequest], Any] | None:
        if method == "session/request_permission":
            return lambda req: {"outcome": {"outcome": "cancelled"}}
        return None

    def _deliver_notification(self, method: schema.Method, pyname: str, params: Any) -> Any:
        if method.name == "session/update" and params.session_id not in self._known_sessions:
            self._early_updates.append((params.session_id, params))
            if len(self._early_updates) > MAX_EARLY_UPDATES:
                sid, _ = self._early_updates.popleft()
                self._log.warn(
                    "dropped an update for unknown session {sid}: too many early updates", sid=sid
                )
            return None
        return super()._deliver_notification(method, pyname, params)

    def _session_known(self, sid: str) -> None:
        """Deliver, in order, the updates that arrived for ``sid`` before it was known."""
        self._known_sessions.add(sid)
        if not self._early_updates:
            return
        keep: deque[tuple[str, schema.SessionNotification]] = deque()
        deliver: list[tuple[str, schema.SessionNotification]] = []
        for item in self._early_updates:
            (deliver if item[0] == sid else keep).append(item)
        self._early_updates = keep
        method = self._handled["session/update"]
        for _, params in deliver:
            super()._deliver_notification(method, "session_update", params)

    # -- outbound: calls to the agent ----------------------------------------------------

    def _ready(self, what: str) -> schema.AgentCapabilities:
        caps = self.agent_capabilities
        if caps is None:
            raise CapabilityError(what, "anything yet (call initialize first)")
        return caps

    def _initialized_check(self, what: str) -> Callable[[], None]:
        """A check that only requires ``initialize`` to have been answered."""

        def check() -> None:
            self._ready(what)

        return check

    def _guarded(self, check: Callable[[], None], method: str, params: object) -> Deferred[Any]:
        try:
            check()
        except CapabilityError:
            return fail()
        return self._call(method, params)

    def initialize(
        self,
        params: schema.InitializeRequest | None = None,
        *,
        client_capabilities: schema.ClientCapabilities | None = None,
        client_info: schema.Implementation | None = None,
        timeout: float | None = None,
    ) -> Deferred[schema.InitializeResponse]:
        """
        ``initialize`` with our latest protocol version.  Fails with
        :class:`ProtocolVersionError` (and closes the connection) when the agent answers
        with a version we do not speak.
        """
        if params is None:
            params = schema.InitializeRequest(
                protocol_version=LATEST_PROTOCOL_VERSION,
                client_capabilities=client_capabilities or schema.ClientCapabilities(),
                client_info=client_info,
            )
        d = self._call("initialize", params, timeout=timeout)

        def check(response: schema.InitializeResponse) -> schema.InitializeResponse:
            if response.protocol_version not in SUPPORTED_PROTOCOL_VERSIONS:
                if self.protocol.transport is not None:
                    self.protocol.transport.loseConnection()
                raise ProtocolVersionError(response.protocol_version)
            self.initialize_response = response
            return response

        d.addCallback(check)
        return d

    def authenticate(
        self, params: schema.AuthenticateRequest
    ) -> Deferred[schema.AuthenticateResponse]:
        """``authenticate`` with one of the agent's ``authMethods``."""
        return self._guarded(self._initialized_check("authenticate"), "authenticate", params)

    def logout(self, params: schema.LogoutRequest | None = None) -> Deferred[schema.LogoutResponse]:
        """``logout`` (only when the agent advertised ``auth.logout``)."""

        def check() -> None:
            caps = self._ready("logout")
            auth = caps.auth
            if auth is None or getattr(auth, "logout", None) is None:
                raise CapabilityError("logout", "auth.logout")

        return self._guarded(check, "logout", params or schema.LogoutRequest())

    def _session_capability(self, name: str, what: str) -> Callable[[], None]:
        def check() -> None:
            caps = self._ready(what)
            session = caps.session_capabilities
            if session is None or getattr(session, name, None) is None:
                raise CapabilityError(what, f"sessionCapabilities.{name}")

        return check

    def _check_directories(self, params: object, what: str) -> None:
        if getattr(params, "additional_directories", None):
            self._session_capability("additional_directories", what)()

    def _known_on_answer(self, d: Deferred[Any]) -> Deferred[Any]:
        """
        A Deferred for the caller that fires before buffered updates are delivered;
        cancelling it cancels the request (``$/cancel_request``).
        """
        mine: Deferred[Any] = Deferred(lambda _: d.cancel())

        def answered(response: Any) -> None:
            sid = getattr(response, "session_id", None)
            if isinstance(sid, str):
                self._known_sessions.add(sid)
            mine.callback(response)
            if isinstance(sid, str):
                self._session_known(sid)

        d.addCallbacks(answered, mine.errback)
        return task_awaitable(mine)

    def new_session(self, params: schema.NewSessionRequest) -> Deferred[schema.NewSessionResponse]:
        """``session/new``."""

        def check() -> None:
            self._ready("session/new")
            self._check_directories(params, "session/new")

        return self._known_on_answer(self._guarded(check, "session/new", params))

    def load_session(
        self, params: schema.LoadSessionRequest
    ) -> Deferred[schema.LoadSessionResponse]:
        """``session/load`` (only when the agent advertised ``loadSession``): the replay
        arrives as ``session_update`` calls before this Deferred fires."""

        def check() -> None:
            caps = self._ready("session/load")
            if not caps.load_session:
                raise CapabilityError("session/load", "loadSession")
            self._check_directories(params, "session/load")

        d = self._guarded(check, "session/load", params)
        if not d.called:
            self._session_known(params.session_id)
        return d

    def list_sessions(
        self, params: schema.ListSessionsRequest | None = None
    ) -> Deferred[schema.ListSessionsResponse]:
        """``session/list`` (only with ``sessionCapabilities.list``)."""
        return self._guarded(
            self._session_capability("list", "session/list"),
            "session/list",
            params or schema.ListSessionsRequest(),
        )

    def delete_session(
        self, params: schema.DeleteSessionRequest
    ) -> Deferred[schema.DeleteSessionResponse]:
        """``session/delete`` (only with ``sessionCapabilities.delete``)."""
        return self._guarded(
            self._session_capability("delete", "session/delete"), "session/delete", params
        )

    def resume_session(
        self, params: schema.ResumeSessionRequest
    ) -> Deferred[schema.ResumeSessionResponse]:
        """``session/resume`` (only with ``sessionCapabilities.resume``)."""

        def check() -> None:
            self._session_capability("resume", "session/resume")()
            self._check_directories(params, "session/resume")

        d = self._guarded(check, "session/resume", params)
        if not d.called:
            self._session_known(params.session_id)
        return d

    def close_session(
        self, params: schema.CloseSessionRequest
    ) -> Deferred[schema.CloseSessionResponse]:
        """``session/close`` (only with ``sessionCapabilities.close``)."""
        return self._guarded(
            self._session_capability("close", "session/close"), "session/close", params
        )

    def set_mode(
        self, params: schema.SetSessionModeRequest
    ) -> Deferred[schema.SetSessionModeResponse]:
        """``session/set_mode``."""
        return self._guarded(
            self._initialized_check("session/set_mode"), "session/set_mode", params
        )

    def set_config_option(
        self, params: schema.SetSessionConfigOptionRequest
    ) -> Deferred[schema.SetSessionConfigOptionResponse]:
        """``session/set_config_option``."""
        return self._guarded(
            self._initialized_check("session/set_config_option"),
            "session/set_config_option",
            params,
        )

    def prompt(
        self, params: schema.PromptRequest, *, timeout: float | None = None
    ) -> Deferred[schema.PromptResponse]:
        """
        ``session/prompt``.  Content blocks the agent's ``promptCapabilities`` do not
        allow (image, audio, embedded resources) are refused locally.
        """
        try:
            caps = self._ready("session/prompt")
            allowed = caps.prompt_capabilities or schema.PromptCapabilities()
            for block in params.prompt:
                tag = codec.wire_tag(block)
                if tag == "image" and not allowed.image:
                    raise CapabilityError(
                        "session/prompt with an image", "promptCapabilities.image"
                    )
                if tag == "audio" and not allowed.audio:
                    raise CapabilityError("session/prompt with audio", "promptCapabilities.audio")
                if tag == "resource" and not allowed.embedded_context:
                    raise CapabilityError(
                        "session/prompt with an embedded resource (send a resource_link instead)",
                        "promptCapabilities.embeddedContext",
                    )
        except CapabilityError:
            return fail()
        return self._call("session/prompt", params, timeout=timeout)

    def cancel(self, session_id: str) -> None:
        """
        Cancel the session's turn: send ``session/cancel`` and answer every pending
        ``session/request_permission`` of the session with the ``cancelled`` outcome.
        """
        self.protocol.notify(
            "session/cancel", codec.encode(schema.CancelNotification(session_id=session_id))
        )
        for req in list(self._permissions.get(session_id, [])):
            req.cancel()


#: What :class:`AgentConnection`, :func:`~acpkit.run_agent` and the other entry points take
#: as the agent: an :class:`~acpkit.interfaces.IAgent` provider or a callable given the
#: connection that returns one (an :class:`Agent` subclass itself, usually).  :class:`Agent`
#: is named beside ``IAgent`` so that its subclasses type-check with plain mypy and pyright
#: (without the ``mypy_zope`` plugin, which alone knows that ``Agent`` implements ``IAgent``).
AgentSource: TypeAlias = "IAgent | Agent | Callable[[AgentConnection], IAgent | Agent]"
#: The same for the client: an :class:`~acpkit.interfaces.IClient` provider, a
#: :class:`Client`, or a callable given the :class:`ClientConnection` that returns one.
ClientSource: TypeAlias = "IClient | Client | Callable[[ClientConnection], IClient | Client]"
