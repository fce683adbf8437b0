"""
The client's end of an ACP connection: :class:`ClientConnection`, and :class:`Client`,
a base for handlers that shows nothing, rejects permission requests and answers
``-32601`` to the rest.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

from twisted.internet.defer import Deferred, fail
from zope.interface import implementer

from acpkit import codec, schema
from acpkit.connection.role import Role, session_id_of, unimplemented
from acpkit.connection.versions import (
    LATEST_PROTOCOL_VERSION,
    SUPPORTED_PROTOCOL_VERSIONS,
    ProtocolVersionError,
)
from acpkit.errors import CapabilityError, MethodNotFound
from acpkit.framing import LineTracer
from acpkit.interfaces import CLIENT_METHOD_NAMES, IClient, MaybeAsync
from acpkit.jsonrpc import InboundRequest, JSONRPCProtocol
from acpkit.jsonrpc.asyncio_bridge import task_awaitable

if TYPE_CHECKING:  # annotations only: the unstable models load when a program uses them
    pass

__all__ = ["MAX_EARLY_UPDATES", "Client", "ClientConnection", "ClientSource"]

#: How many updates for not-yet-known sessions a client keeps before dropping the oldest.
MAX_EARLY_UPDATES = 1000

_CANCELLED_PERMISSION: dict[str, Any] = {"outcome": {"outcome": "cancelled"}}


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


class ClientConnection(Role[IClient]):
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
            sid = session_id_of(req.params)
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


#: The same as :data:`~acpkit.connection.agent.AgentSource` for the client: an
#: :class:`~acpkit.interfaces.IClient` provider, a :class:`Client`, or a callable given the
#: :class:`ClientConnection` that returns one.
ClientSource: TypeAlias = "IClient | Client | Callable[[ClientConnection], IClient | Client]"
