"""
The agent's end of an ACP connection: :class:`AgentConnection`, and :class:`Agent`, a
base for handlers that answers ``-32601`` to what it does not override.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

import attrs
from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.python.failure import Failure
from zope.interface import implementer

from acpkit import codec, schema
from acpkit.connection.role import AfterStep, Role, session_id_of, unimplemented
from acpkit.errors import CapabilityError, InvalidRequest, MethodNotFound
from acpkit.framing import LineTracer
from acpkit.interfaces import AGENT_METHOD_NAMES, IAgent, MaybeAsync
from acpkit.jsonrpc import InboundRequest, JSONRPCProtocol

if TYPE_CHECKING:  # annotations only: the unstable models load when a program uses them
    from acpkit import unstable

__all__ = ["Agent", "AgentConnection", "AgentSource"]

_CANCELLED_PROMPT: dict[str, Any] = {"stopReason": "cancelled"}


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


class AgentConnection(Role[IAgent]):
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
        # The same turns by their request (until each ends).
        self._turn_of: dict[InboundRequest, _Turn] = {}
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
        sid = session_id_of(req.params)
        if sid is not None:
            self._known_sessions.add(sid)
        if req.method == "session/prompt" and sid is not None:
            turn = _Turn(req)
            self._turns.setdefault(sid, []).append(turn)
            self._turn_of[req] = turn
            req.after_reply(lambda: self._turn_ended(sid, turn))
        elif req.method == "session/new":
            self._new_sessions_in_flight += 1
            req.after_reply(self._new_session_done)

    def _new_session_done(self) -> None:
        self._new_sessions_in_flight -= 1
        if self._new_sessions_in_flight == 0 and self._held_updates:
            self._release_all_held()

    def _turn_ended(self, sid: str, turn: _Turn) -> None:
        if self._turn_of.get(turn.request) is turn:
            del self._turn_of[turn.request]
        turns = self._turns.get(sid, [])
        if turn in turns:
            turns.remove(turn)
        if not turns:
            self._turns.pop(sid, None)

    def _cancelled_result(self, method: str) -> Callable[[InboundRequest], Any] | None:
        if method == "session/prompt":
            return lambda req: dict(_CANCELLED_PROMPT)
        return None

    def _after_steps_by_method(self) -> Mapping[str, AfterStep]:
        return {
            "initialize": self._initialized,
            "session/new": self._new_session_answered,
            "session/prompt": self._prompt_answered,
        }

    def _initialized(
        self, result: Any, req: InboundRequest, params: schema.InitializeRequest
    ) -> Any:
        if isinstance(result, Failure):
            return result
        self.client_capabilities = params.client_capabilities or schema.ClientCapabilities()
        self.client_info = params.client_info
        if isinstance(result, Mapping):
            version = result.get("protocolVersion")
            self.protocol_version = version if isinstance(version, int) else None
        return result

    def _new_session_answered(self, result: Any, req: InboundRequest, params: object) -> Any:
        sid = session_id_of(result)
        if sid is not None:
            self._known_sessions.add(sid)
            # Updates for ``sid`` are held only until it is known: from now on none is.
            if sid in self._held_updates:
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

    def _prompt_answered(self, result: Any, req: InboundRequest, params: object) -> Any:
        turn = self._turn_of.get(req)
        cancelled = turn is not None and turn.cancelled
        if isinstance(result, Failure):
            if cancelled or result.check(CancelledError):
                if not result.check(CancelledError):
                    self._log.failure(
                        "the cancelled turn of session {sid} ended with an error",
                        result,
                        sid=session_id_of(req.params),
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


#: What :class:`AgentConnection`, :func:`~acpkit.run_agent` and the other entry points take
#: as the agent: an :class:`~acpkit.interfaces.IAgent` provider or a callable given the
#: connection that returns one (an :class:`Agent` subclass itself, usually).  :class:`Agent`
#: is named beside ``IAgent`` so that its subclasses type-check with plain mypy and pyright
#: (without the ``mypy_zope`` plugin, which alone knows that ``Agent`` implements ``IAgent``).
AgentSource: TypeAlias = "IAgent | Agent | Callable[[AgentConnection], IAgent | Agent]"
