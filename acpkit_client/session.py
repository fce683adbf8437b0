"""One agent window: agent process + connection + session + conversation, glued.

:class:`AgentWindow` is the IClient of its agent's connection.  A front end makes one
per window, calls :meth:`AgentWindow.start` (or :meth:`AgentWindow.open_on` with a
connection it made), then :meth:`AgentWindow.send_prompt` / :meth:`AgentWindow.cancel`
/ :meth:`AgentWindow.close`, and watches :attr:`AgentWindow.conversation` and
:attr:`AgentWindow.run` through their observers.

A remote agent's connection, once its session is open, comes back when lost
(:meth:`acpkit_client.agents.AgentRun.resume_when_lost`): a turn it cut short fails with
:class:`TurnError` saying it was interrupted.

What the agent may call:

=============================  =============================================================
``session/update``             folded into the conversation (undecodable ones are counted;
                               not the history a remote agent's resume replays)
``session/request_permission`` the window's :class:`~acpkit_client.interfaces.
                               IPermissionPrompt` (default: reject), given the tool call
                               completed with what the agent announced for its id
                               (:func:`~acpkit_client.permissions.merge_tool_call`)
``fs/read_text_file``          :class:`~acpkit_client.fs.FileAccess` (buffers, then disk)
``fs/write_text_file``         the same
``elicitation/create``         a form: the window's :class:`~acpkit_client.interfaces.
                               IFormPrompt` asks it (``elicitation.form`` is announced only
                               with one); any other (a URL, a form nobody can ask, or
                               one this client cannot render): answered ``decline``, and
                               a note in ``run.notes`` says so
``terminal/*``                 ``-32601`` (not announced)
=============================  =============================================================
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from typing import Any

import attrs
from twisted.internet.defer import CancelledError, Deferred, ensureDeferred, fail
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from acpkit import codec, schema
from acpkit.connection import Client, ClientConnection
from acpkit.endpoints import AgentExited
from acpkit.errors import AuthRequired, ConnectionLost, InvalidParams, RPCError
from acpkit.interfaces import IClient
from acpkit.remote.reconnect import ReconnectFailed, TurnInterrupted
from acpkit_client.agents import AgentRun, AgentStartError, describe_rpc_error
from acpkit_client.config import AgentEntry
from acpkit_client.conversation import ENTRY_TEXT_CAP, Conversation
from acpkit_client.forms import UnsupportedForm, form_fields
from acpkit_client.fs import FileAccess
from acpkit_client.interfaces import IBufferProvider, IFormPrompt, IPermissionPrompt
from acpkit_client.permissions import (
    PolicyPermissionPrompt,
    answer_permission,
    merge_tool_call,
)
from acpkit_client.prompt import build_prompt

__all__ = ["AgentWindow", "TurnError"]

log = Logger()

#: After the connection to a child agent is lost mid-turn, how long to wait for its exit
#: status (so that the turn's error and Agent status can say how it ended).
EXIT_REPORT_WAIT = 2.0

#: At most this many characters of the first junk line on the agent's stdout are shown.
JUNK_SHOWN = 200


class TurnError(Exception):
    """A prompt could not be sent or the agent failed the turn; ``str()`` says why."""


@implementer(IClient)
class AgentWindow(Client):
    """The model of one agent window (see the module docstring)."""

    def __init__(
        self,
        entry: AgentEntry,
        project_root: str,
        *,
        buffers: IBufferProvider | None = None,
        permission_prompt: IPermissionPrompt | None = None,
        form_prompt: IFormPrompt | None = None,
        allow_outside_roots: bool = False,
        environ: Mapping[str, str] = os.environ,
        handshake_timeout: float | None = None,
        text_cap: int | None = ENTRY_TEXT_CAP,
    ) -> None:
        self.project_root = os.path.abspath(project_root)
        self.run = AgentRun(entry, self.project_root, environ)
        #: ``initialize`` and ``session/new`` must both be answered within this many
        #: seconds (None: no limit).
        self.handshake_timeout = handshake_timeout
        #: Each entry of the conversation keeps at most this many bytes (None: no cap).
        self.conversation = Conversation(text_cap=text_cap)
        self.buffers = buffers
        self.files = FileAccess(
            [self.project_root, self.run.cwd],
            buffers,
            allow_outside_roots=allow_outside_roots,
            environ=environ,
            protected_paths=entry.launch_files(self.project_root, environ),
        )
        self.permission_prompt: IPermissionPrompt = (
            permission_prompt if permission_prompt is not None else PolicyPermissionPrompt()
        )
        #: Asks form elicitations (None: they are declined, and not announced).
        self.form_prompt = form_prompt
        self.run.announce_forms = form_prompt is not None
        self._turn: Deferred[Any] | None = None
        self._reactor: Any = None
        self._cancel_sent = False

    # -- opening ------------------------------------------------------------------------

    @property
    def session_id(self) -> str | None:
        """The session's id once ``session/new`` answered."""
        return self.run.session_id

    @property
    def connection(self) -> ClientConnection | None:
        """The connection to the agent, once started."""
        return self.run.connection

    def start(self, reactor: Any) -> Deferred[str]:
        """Spawn the agent (or connect to its ``url``) and open the session; fires with
        the session id.

        Fails with :class:`~acpkit_client.agents.AgentStartError` (also kept in
        ``run.problems``); :class:`~acpkit_client.agents.HandshakeTimeout` when the
        agent does not answer within :attr:`handshake_timeout`.
        """
        self._reactor = reactor
        if self.run.entry.url is not None:
            opened = self.run.connect(reactor, self).addCallback(self.open_on)
            return opened.addCallback(self._resume_when_lost)
        try:
            connection = self.run.spawn(reactor, self)
        except AgentStartError:
            return fail()
        return self.open_on(connection)

    def _resume_when_lost(self, session_id: str) -> str:
        """A remote agent's session is open: a lost connection is made again from now on."""
        self.run.resume_when_lost(self._reactor, self)
        return session_id

    def open_on(self, connection: ClientConnection, clock: Any = None) -> Deferred[str]:
        """
        Open the session on an existing ``connection`` whose IClient is this window;
        ``clock`` (default: the reactor given to :meth:`start`) times the handshake.
        """
        if self.run.connection is not connection:
            self.run.attach(connection)
        self._count_undecodable_updates(connection)
        # An agent's message with a bad byte is shown (U+FFFD), not dropped whole; Agent
        # status counts it.
        connection.protocol.replace_invalid_utf8 = True
        clock = clock if clock is not None else self._reactor
        opened = ensureDeferred(self.run.handshake(clock, self.handshake_timeout))
        return opened.addErrback(self._name_the_junk)

    # -- junk on the agent's stdout ------------------------------------------------------

    def junk_note(self) -> str | None:
        """
        One sentence about the lines on the agent's stdout that were not JSON (a banner,
        a stray print), quoting the first one (cut at :data:`JUNK_SHOWN` characters);
        None when there were none.  Added to ``run.notes`` (Agent status) once.
        """
        connection = self.run.connection
        first = None if connection is None else connection.protocol.first_junk_line
        if connection is None or first is None:
            return None
        count = connection.protocol.junk_lines
        text = first.decode("utf-8", "backslashreplace")
        if len(text) > JUNK_SHOWN:
            text = text[:JUNK_SHOWN] + "…"
        lines = "a line that is not" if count == 1 else f"{count} lines that are not"
        note = (
            f"the agent wrote {lines} JSON on its stdout (ignored; stdout is for ACP "
            f"messages only), the first: {text!r}"
        )
        if not any(n.startswith("the agent wrote ") for n in self.run.notes):
            self.run.notes.append(note)
        return note

    def dropped_note(self) -> str | None:
        """
        One sentence about the agent's messages the connection dropped unread (over the
        line limit, or not readable as a JSON-RPC message) or read with U+FFFD for bytes
        that are not UTF-8; None when there were none.  (Agent status counts them too.)
        """
        connection = self.run.connection
        if connection is None:
            return None
        protocol = connection.protocol
        oversized = int(getattr(protocol, "oversized_dropped", 0))
        undecodable = int(getattr(protocol, "undecodable_dropped", 0))
        replaced = int(getattr(protocol, "invalid_utf8_replaced", 0))
        dropped = []
        if oversized:
            limit = getattr(protocol.framing, "MAX_LENGTH", None)
            dropped.append(
                f"{_count(oversized, 'message')} over the size limit"
                + (f" ({limit:,} bytes)" if isinstance(limit, int) else "")
            )
        if undecodable:
            dropped.append(f"{_count(undecodable, 'line')} that are not ACP messages")
        parts = []
        if dropped:
            parts.append(
                f"the agent sent {' and '.join(dropped)}: dropped unread, so what it "
                "said may be incomplete"
            )
        if replaced:
            parts.append(
                f"{_count(replaced, 'message')} with bytes that are not UTF-8, shown with "
                "U+FFFD in their place"
            )
        return "; ".join(parts) or None

    def _with_junk(self, message: str) -> str:
        note = self.junk_note()
        return message if note is None else f"{message}\n{note}"

    def _name_the_junk(self, failure: Failure) -> Failure:
        """A failed start says what the agent wrote on its stdout that was not JSON."""
        error = failure.value
        if isinstance(error, AgentStartError) and error.args:
            error.args = (self._with_junk(str(error.args[0])), *error.args[1:])
        return failure

    def _count_undecodable_updates(self, connection: ClientConnection) -> None:
        """Count the ``session/update``\\ s the core could not decode (it drops them)."""
        conversation = self.conversation

        def undecodable(method: str, params: Any, error: Exception) -> None:
            if method == "session/update":
                conversation.ignore(params, f"undecodable: {error}")

        connection.on_undecodable_notification = undecodable

    # -- turns -------------------------------------------------------------------------

    @property
    def turn_running(self) -> bool:
        """Whether a prompt is in flight."""
        return self._turn is not None

    def send_prompt(self, text: str, files: Collection[str] | None = None) -> Deferred[str]:
        """
        Send the typed ``text`` (``@`` mentions become file blocks; ``files`` are the
        known project files, default: walk the project).  Fires with the stop reason
        (``"end_turn"``, ``"cancelled"``, ``"refusal"``...) or fails with
        :class:`TurnError`.
        """
        return ensureDeferred(self._send(text, files))

    async def _send(self, text: str, files: Collection[str] | None) -> str:
        connection = self.run.connection
        session_id = self.run.session_id
        if connection is None or session_id is None:
            raise TurnError(f'agent "{self.run.name}" has no open session')
        if self._turn is not None:
            raise TurnError("a turn is already running in this window")
        blocks = build_prompt(
            text, self.project_root, files, self.run.agent_capabilities, self.buffers
        )
        self.conversation.start_turn(text)
        self._cancel_sent = False
        request = schema.PromptRequest(session_id=session_id, prompt=blocks)
        resumable = self.run.resumable
        if resumable is not None:
            # A remote agent: the prompt waits for a connection being made again, and a
            # turn the loss of the connection interrupted says so.
            self._turn = Deferred.fromCoroutine(resumable.prompt(request))
        else:
            self._turn = connection.prompt(request)
        try:
            response = await self._turn
        except Exception as e:
            if isinstance(e, ConnectionLost):
                await self._wait_for_exit()
            if isinstance(e, CancelledError):
                message = "the turn was abandoned without an answer from the agent"
            elif isinstance(e, TurnInterrupted):
                message = (
                    f"the turn was interrupted: the connection was lost ({e.reason}); it may"
                    " or may not have been saved: reconnecting to load the session again,"
                    " then send it again if needed"
                )
            elif isinstance(e, ReconnectFailed):
                message = f"the connection to the agent could not be made again: {e}"
            else:
                message = self._with_junk(self._error_text(e))
            self.conversation.end_turn(f"error: {message}")
            raise TurnError(message) from None
        finally:
            self._turn = None
        stop = str(response.stop_reason)
        if self._cancel_sent and stop != "cancelled":
            log.info("the agent ended a cancelled turn with {stop}", stop=stop)
        self.conversation.end_turn(stop)
        return stop

    async def _wait_for_exit(self) -> None:
        """The connection is gone: give the process a moment to report its exit status."""
        process = self.run.process
        if process is None or self.run.exit is not None or self._reactor is None:
            return
        done: Deferred[None] = Deferred()

        def finish(result: object = None) -> None:
            if isinstance(result, AgentExited):
                self.run.record_exit(result)
            if not done.called:
                done.callback(None)

        process.exited.addCallback(finish)
        timer = self._reactor.callLater(EXIT_REPORT_WAIT, finish)
        await done
        if timer.active():
            timer.cancel()

    def _error_text(self, error: BaseException) -> str:
        if isinstance(error, AuthRequired):
            return self.run.login_required(error)
        if isinstance(error, RPCError):
            return f"the agent answered {describe_rpc_error(error)}"
        if self.run.exit is not None:
            return str(self.run.exit)
        return str(error) or type(error).__name__

    def cancel(self) -> bool:
        """Cancel the running turn (``session/cancel``); False when none runs."""
        connection = self.run.connection
        session_id = self.run.session_id
        if self._turn is None or connection is None or session_id is None:
            return False
        self._cancel_sent = True
        self.conversation.mark_cancelled()
        connection.cancel(session_id)
        return True

    def abandon_turn(self) -> bool:
        """
        Give up on the running turn: send ``session/cancel`` and stop waiting for the
        answer (the turn fails with :class:`TurnError` at once).  False when none runs.
        """
        turn = self._turn
        if turn is None:
            return False
        self.cancel()
        turn.cancel()
        return True

    def close(self) -> Deferred[Any]:
        """Close the window: stop the agent (stdin closed, then its process group)."""
        return self.run.stop()

    def kill(self) -> Deferred[Any]:
        """
        Close the window at once: the agent's whole process group is killed (``SIGKILL``)
        without the graces of :meth:`close`.  Fires once the agent has ended.
        """
        stopped = self.close()
        process = self.run.process
        if process is not None:
            process.kill()
        return stopped

    # -- IClient -----------------------------------------------------------------------

    def _check_session(self, session_id: str) -> None:
        if self.run.session_id is not None and session_id != self.run.session_id:
            raise InvalidParams("$.params.sessionId", f"unknown session {session_id!r}")

    def session_update(self, params: schema.SessionNotification) -> None:
        """Fold the update into the conversation (not the history a resume replays)."""
        resumable = self.run.resumable
        if resumable is not None and resumable.replaying:
            return
        if self.run.session_id is not None and params.session_id != self.run.session_id:
            self.conversation.ignore(
                codec.encode(params), f"update for another session {params.session_id!r}"
            )
            return
        self.conversation.apply(params.update)

    def request_permission(
        self, params: schema.RequestPermissionRequest
    ) -> Deferred[schema.RequestPermissionResponse]:
        """Ask the window's permission prompt about the tool call as the agent announced it."""
        self._check_session(params.session_id)
        return answer_permission(self.permission_request(params), self.permission_prompt)

    def permission_request(
        self, params: schema.RequestPermissionRequest
    ) -> schema.RequestPermissionRequest:
        """
        ``params`` with its tool call completed by what this turn's ``tool_call`` and
        ``tool_call_update`` announced for the same id (title, kind, command, diff, files).
        """
        announced = self.conversation.tool_call(params.tool_call.tool_call_id)
        if announced is not None and announced.turn != self.conversation.turn:
            announced = None  # an id reused from an earlier turn names another call
        merged = merge_tool_call(announced, params.tool_call)
        return params if merged is params.tool_call else attrs.evolve(params, tool_call=merged)

    def read_text_file(self, params: schema.ReadTextFileRequest) -> schema.ReadTextFileResponse:
        """``fs/read_text_file`` through :attr:`files`."""
        self._check_session(params.session_id)
        return self.files.read_text_file(params)

    def write_text_file(self, params: schema.WriteTextFileRequest) -> schema.WriteTextFileResponse:
        """``fs/write_text_file`` through :attr:`files`."""
        self._check_session(params.session_id)
        return self.files.write_text_file(params)

    async def create_elicitation(self, params: Any) -> Any:
        """
        A form asked through :attr:`form_prompt`: ``accept`` with the answers, or
        ``decline``/``cancel``.  Anything else is declined, with a note saying why.
        """
        session_id = getattr(params, "session_id", None)
        if isinstance(session_id, str):
            self._check_session(session_id)
        mode = codec.encode(params).get("mode")
        if self.form_prompt is None or not isinstance(params, schema.CreateElicitationRequestForm):
            why = "it was not announced" if mode != "form" or self.form_prompt is None else ""
            return self._decline(f"an elicitation in {mode!r} mode", why)
        wire = codec.encode(params.requested_schema)
        try:
            fields = form_fields(wire)
        except UnsupportedForm as e:
            return self._decline("a form", str(e))
        answer = await ensureDeferred(
            _as_coroutine(self.form_prompt.answer(params.message, fields))
        )
        if answer == "cancel":
            return schema.CreateElicitationResponseCancel()
        if not isinstance(answer, dict):
            return schema.CreateElicitationResponseDecline()
        return schema.CreateElicitationResponseAccept(content=answer)

    def _decline(self, what: str, why: str) -> Any:
        note = f"the agent asked for {what}: declined" + (f" ({why})" if why else "")
        log.warn("{note}", note=note)
        if note not in self.run.notes:
            self.run.notes.append(note)
        return schema.CreateElicitationResponseDecline()


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


async def _as_coroutine(value: Any) -> Any:
    """Await ``value`` when it is a Deferred or a coroutine; else it is the result."""
    if isinstance(value, Deferred) or hasattr(value, "__await__"):
        return await value
    return value
