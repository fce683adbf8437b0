"""
The two roles of ACP as zope interfaces: :class:`IAgent` and :class:`IClient`.

An agent implements :class:`IAgent` (what a client may call on it); a client implements
:class:`IClient` (what an agent may call on it).  Every method takes the typed params
model of its ACP method (``acpkit.schema``) and returns the typed result model, directly,
as a :class:`~twisted.internet.defer.Deferred`, or from an ``async def``.  Notifications
(``session/cancel``, ``session/update``, ``elicitation/complete``) return ``None``.

=======================================  ==================================
ACP method                               Python method
=======================================  ==================================
``initialize``                           ``IAgent.initialize``
``authenticate``                         ``IAgent.authenticate``
``logout``                               ``IAgent.logout``
``session/new``                          ``IAgent.new_session``
``session/load``                         ``IAgent.load_session``
``session/list``                         ``IAgent.list_sessions``
``session/delete``                       ``IAgent.delete_session``
``session/resume``                       ``IAgent.resume_session``
``session/close``                        ``IAgent.close_session``
``session/set_mode``                     ``IAgent.set_mode``
``session/set_config_option``            ``IAgent.set_config_option``
``session/prompt``                       ``IAgent.prompt``
``session/cancel`` (notification)        ``IAgent.cancel``
``session/update`` (notification)        ``IClient.session_update``
``session/request_permission``           ``IClient.request_permission``
``fs/read_text_file``                    ``IClient.read_text_file``
``fs/write_text_file``                   ``IClient.write_text_file``
``terminal/create``                      ``IClient.create_terminal``
``terminal/output``                      ``IClient.terminal_output``
``terminal/release``                     ``IClient.release_terminal``
``terminal/wait_for_exit``               ``IClient.wait_for_terminal_exit``
``terminal/kill``                        ``IClient.kill_terminal``
``elicitation/create``                   ``IClient.create_elicitation``
``elicitation/complete`` (notification)  ``IClient.complete_elicitation``
=======================================  ==================================

The params and result classes of each method are in ``acpkit.schema.AGENT_METHODS`` and
``acpkit.schema.CLIENT_METHODS`` (for example ``PromptRequest`` → ``PromptResponse``).
Each method here is typed with them: a handler's return type is :data:`MaybeAsync` of its
result class (``MaybeAsync[schema.PromptResponse]``: the result itself, a ``Deferred`` of
it, or an awaitable such as an ``async def``'s coroutine), so ``mypy --strict`` refuses a
``prompt`` that returns anything else.  Methods whose result class has only optional
fields (``authenticate``, ``session/set_mode``, ``fs/write_text_file``…) may also return
``None``, answered as the empty result.  Where ``acpkit.unstable`` has its own version of
a result class (``InitializeResponse``, ``ListSessionsResponse``, ``PromptResponse``), an
agent that opts into unstable features may return that one instead.

A method an implementation does not provide is answered ``-32601`` (method not found):
subclass :class:`acpkit.connection.Agent` or :class:`acpkit.connection.Client`, whose
optional methods raise :class:`acpkit.errors.MethodNotFound`, and override what you support.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, TypeAlias, TypeVar

from twisted.internet.defer import Deferred
from zope.interface import Interface

if TYPE_CHECKING:  # annotations only: importing this module stays cheap
    from acpkit import schema, unstable

__all__ = ["AGENT_METHOD_NAMES", "CLIENT_METHOD_NAMES", "IAgent", "IClient", "MaybeAsync"]

T = TypeVar("T")

#: What a handler method returns: the value itself, a ``Deferred`` that fires with it,
#: or an awaitable of it (an ``async def`` method's coroutine).  ``MaybeAsync[None]``
#: for notifications.
MaybeAsync: TypeAlias = T | Deferred[T] | Awaitable[T]

#: ACP method name → Python method name on :class:`IAgent`.
AGENT_METHOD_NAMES: dict[str, str] = {
    "initialize": "initialize",
    "authenticate": "authenticate",
    "logout": "logout",
    "session/new": "new_session",
    "session/load": "load_session",
    "session/list": "list_sessions",
    "session/delete": "delete_session",
    "session/resume": "resume_session",
    "session/close": "close_session",
    "session/set_mode": "set_mode",
    "session/set_config_option": "set_config_option",
    "session/prompt": "prompt",
    "session/cancel": "cancel",
}

#: ACP method name → Python method name on :class:`IClient`.
CLIENT_METHOD_NAMES: dict[str, str] = {
    "session/update": "session_update",
    "session/request_permission": "request_permission",
    "fs/read_text_file": "read_text_file",
    "fs/write_text_file": "write_text_file",
    "terminal/create": "create_terminal",
    "terminal/output": "terminal_output",
    "terminal/release": "release_terminal",
    "terminal/wait_for_exit": "wait_for_terminal_exit",
    "terminal/kill": "kill_terminal",
    "elicitation/create": "create_elicitation",
    "elicitation/complete": "complete_elicitation",
}


class IAgent(Interface):
    """The agent side of ACP: what a client may call."""

    def initialize(
        params: schema.InitializeRequest,
    ) -> MaybeAsync[schema.InitializeResponse | unstable.InitializeResponse]:
        """``initialize``: negotiate the version and exchange capabilities."""

    def authenticate(
        params: schema.AuthenticateRequest,
    ) -> MaybeAsync[schema.AuthenticateResponse | None]:
        """``authenticate``: authenticate with one of the advertised ``authMethods``."""

    def logout(params: schema.LogoutRequest) -> MaybeAsync[schema.LogoutResponse | None]:
        """``logout``: end the authenticated state (only when ``auth.logout`` is advertised)."""

    def new_session(params: schema.NewSessionRequest) -> MaybeAsync[schema.NewSessionResponse]:
        """``session/new``: create a session in ``params.cwd``."""

    def load_session(
        params: schema.LoadSessionRequest,
    ) -> MaybeAsync[schema.LoadSessionResponse | None]:
        """``session/load``: replay a stored session as updates, then answer."""

    def list_sessions(
        params: schema.ListSessionsRequest,
    ) -> MaybeAsync[schema.ListSessionsResponse | unstable.ListSessionsResponse]:
        """``session/list``: list stored sessions."""

    def delete_session(
        params: schema.DeleteSessionRequest,
    ) -> MaybeAsync[schema.DeleteSessionResponse | None]:
        """``session/delete``: delete a stored session."""

    def resume_session(
        params: schema.ResumeSessionRequest,
    ) -> MaybeAsync[schema.ResumeSessionResponse | None]:
        """``session/resume``: resume a session without replaying it."""

    def close_session(
        params: schema.CloseSessionRequest,
    ) -> MaybeAsync[schema.CloseSessionResponse | None]:
        """``session/close``: cancel the session's work and free it."""

    def set_mode(
        params: schema.SetSessionModeRequest,
    ) -> MaybeAsync[schema.SetSessionModeResponse | None]:
        """``session/set_mode``: switch the session's mode."""

    def set_config_option(
        params: schema.SetSessionConfigOptionRequest,
    ) -> MaybeAsync[schema.SetSessionConfigOptionResponse]:
        """``session/set_config_option``: change one configuration option."""

    def prompt(
        params: schema.PromptRequest,
    ) -> MaybeAsync[schema.PromptResponse | unstable.PromptResponse]:
        """``session/prompt``: run one prompt turn; answer with its stop reason."""

    def cancel(params: schema.CancelNotification) -> MaybeAsync[None]:
        """
        ``session/cancel`` (notification): the client cancelled the session's turn.

        The connection has already cancelled the running ``prompt`` Deferred; this is
        called afterwards for any extra clean-up the agent wants to do.
        """


class IClient(Interface):
    """The client side of ACP: what an agent may call."""

    def session_update(params: schema.SessionNotification) -> MaybeAsync[None]:
        """``session/update`` (notification): one update of a session."""

    def request_permission(
        params: schema.RequestPermissionRequest,
    ) -> MaybeAsync[schema.RequestPermissionResponse]:
        """``session/request_permission``: ask the user to choose among the agent's options."""

    def read_text_file(
        params: schema.ReadTextFileRequest,
    ) -> MaybeAsync[schema.ReadTextFileResponse]:
        """``fs/read_text_file``: read a text file (from an open buffer when there is one)."""

    def write_text_file(
        params: schema.WriteTextFileRequest,
    ) -> MaybeAsync[schema.WriteTextFileResponse | None]:
        """``fs/write_text_file``: write a text file, creating it when missing."""

    def create_terminal(
        params: schema.CreateTerminalRequest,
    ) -> MaybeAsync[schema.CreateTerminalResponse]:
        """``terminal/create``: start a command in a terminal; answer its id at once."""

    def terminal_output(
        params: schema.TerminalOutputRequest,
    ) -> MaybeAsync[schema.TerminalOutputResponse]:
        """``terminal/output``: the terminal's output so far and its exit status if any."""

    def release_terminal(
        params: schema.ReleaseTerminalRequest,
    ) -> MaybeAsync[schema.ReleaseTerminalResponse | None]:
        """``terminal/release``: free the terminal (its id becomes invalid)."""

    def wait_for_terminal_exit(
        params: schema.WaitForTerminalExitRequest,
    ) -> MaybeAsync[schema.WaitForTerminalExitResponse | None]:
        """``terminal/wait_for_exit``: wait for the terminal's command to exit."""

    def kill_terminal(
        params: schema.KillTerminalRequest,
    ) -> MaybeAsync[schema.KillTerminalResponse | None]:
        """``terminal/kill``: kill the terminal's command without releasing it."""

    def create_elicitation(
        params: schema.CreateElicitationRequest,
    ) -> MaybeAsync[schema.CreateElicitationResponse]:
        """``elicitation/create``: ask the user for structured input."""

    def complete_elicitation(params: schema.CompleteElicitationNotification) -> MaybeAsync[None]:
        """``elicitation/complete`` (notification): a URL elicitation finished."""
