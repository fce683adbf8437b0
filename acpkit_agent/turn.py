"""
The turn loop: one ``session/prompt`` that reaches the model.

``engine.complete(history, tool specs, sink)`` streams ``agent_message_chunk`` (and
``agent_thought_chunk``) updates; each tool call the model asks for is announced
(``tool_call`` pending, ``call_N`` numbered per process), allowed (a permission request when
``yolo = false`` and the tool needs one), run (``tool_call_update`` in_progress, then
completed or failed with its content and ``rawOutput``), and its result goes back into the
history; the loop ends when the model answers without tool calls.

Whatever happens — success, engine failure, cancellation — the history the engine produced
is kept, a question that got no answer at all is removed, every announced tool call ends in
a terminal status, a ``usage_update`` is sent and ``[acp] turn done: …`` is logged.

Back-pressure: each streamed delta is written as soon as it comes, and the sink returns the
connection's ``writable()`` Deferred; the ``echo`` and ``scripted`` engines wait for it
before their next delta, so while the client does not read a turn stops after about one
transport buffer (64 KiB) of updates.  Deltas an engine sends while the sink waits (an
engine that cannot pause its source) are joined and sent as one chunk once the client reads
again, or before the turn's next update: memory stays bounded by the answer's text.

Order: turns are serialized process-wide by :class:`TurnLock`, which hands the lock to the
next turn on the reactor's next iteration, after the releasing turn's response is written:
responses leave in the order turns finish, each after its turn's updates.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

import attrs
from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from acpkit import schema
from acpkit.errors import ConnectionLost
from acpkit_agent.attachments import ISessionAttachments, SessionAttachments
from acpkit_agent.client_files import file_access_for
from acpkit_agent.config import AgentConfig
from acpkit_agent.elicitation import UserAsker
from acpkit_agent.engines.base import (
    EngineError,
    IEngine,
    ModelReply,
    ToolCallRequest,
    ToolSpec,
    one_line_excerpt,
)
from acpkit_agent.hooks import HookRunner
from acpkit_agent.permissions import ask_permission, rejection_message
from acpkit_agent.session import Session
from acpkit_agent.tools.ask_user import InteractiveToolContext
from acpkit_agent.tools.base import Tool, ToolResult
from acpkit_agent.tools.plan import PlanEntry
from acpkit_agent.turn_lock import TurnLock

__all__ = [
    "FILE_TOOLS",
    "SKILL_TOOLS",
    "AgentRuntime",
    "TurnCounts",
    "TurnLock",
    "TurnOutcome",
    "TurnRunner",
    "call_kind",
    "send_update",
    "tool_kind",
]

_log = Logger()

FILE_TOOLS = frozenset({"read_file", "write_file", "edit_file"})
"""Tools counted as file operations in the ``turn done`` line."""
SKILL_TOOLS = frozenset({"read_skill"})
"""Tools counted as skills in the ``turn done`` line."""
CANCELLED_TOOL_OUTPUT = "[tool call cancelled by the user]"


def _ignore_connection_lost(failure: Failure) -> Failure | None:
    return None if failure.check(ConnectionLost) else failure


def send_update(conn: Any, session_id: str, update: object) -> Deferred[None]:
    """
    Send one ``session/update``; return the connection's writability Deferred: it fires
    when the client reads again (``await`` it before the next update of a stream).  A lost
    connection fires it too (the turn is cancelled by the connection anyway), so callers
    may ignore it.
    """
    d = conn.session_update(session_id, update)
    if not isinstance(d, Deferred):
        return succeed(None)
    d.addErrback(_ignore_connection_lost)
    return d


def call_kind(tool: Tool, args: Mapping[str, Any]) -> str:
    """A call's kind string: the tool's ``kind_for(args)`` when it has one, else ``kind``."""
    kind_for = getattr(tool, "kind_for", None)
    return str(kind_for(args)) if callable(kind_for) else tool.kind


def tool_kind(kind: str) -> schema.ToolKind:
    """The ACP ``ToolKind`` of a tool's kind string (unknown kinds are ``execute``)."""
    value = schema.ToolKind(kind)
    return value if value.known else schema.ToolKind.EXECUTE


@attrs.define
class AgentRuntime:
    """
    What every connection of one agent process shares: the configuration, the engine, the
    tools, the turn lock (turns are serialized process-wide), the ``call_N`` counter and
    which connection each saved session is attached to (:mod:`acpkit_agent.attachments`).
    """

    config: AgentConfig
    engine: IEngine
    tools: Mapping[str, Tool]
    reactor: Any
    lock: TurnLock = attrs.field(
        default=attrs.Factory(lambda self: TurnLock(self.reactor), takes_self=True)
    )
    attachments: ISessionAttachments = attrs.field(factory=SessionAttachments)
    _calls: Iterator[int] = attrs.field(factory=lambda: itertools.count(1))
    _window: int | None = None

    def next_call_id(self) -> str:
        """A new ``call_N`` id (numbered per process, never reset)."""
        return f"call_{next(self._calls)}"

    def tool_specs(self) -> list[ToolSpec]:
        """The tools as offered to the model."""
        return [
            ToolSpec(name=tool.name, description=tool.description, parameters=tool.parameters)
            for tool in self.tools.values()
        ]

    async def window(self) -> int:
        """
        The context window: ``context.contextWindow``, else the engine's probe (a known
        window is kept; 0, unknown, is asked again next time: the engine keeps what it can).
        """
        if self.config.context_window > 0:
            return self.config.context_window
        if not self._window:
            probed = await self.engine.context_window()
            self._window = probed if isinstance(probed, int) and probed > 0 else 0
        return self._window

    def known_window(self) -> int:
        """The window if already known (no probe), else 0."""
        if self.config.context_window > 0:
            return self.config.context_window
        return self._window or 0


@attrs.define
class TurnCounts:
    """What a turn ran, for the ``turn done`` log line."""

    commands: int = 0
    file_ops: int = 0
    skills: int = 0

    def count(self, tool_name: str) -> None:
        """Count one tool call that ran."""
        if tool_name == "bash":
            self.commands += 1
        elif tool_name in FILE_TOOLS:
            self.file_ops += 1
        elif tool_name in SKILL_TOOLS:
            self.skills += 1


@attrs.frozen
class TurnOutcome:
    """How a turn ended: ``end_turn`` or ``cancelled``, or ``error`` (one line) on failure."""

    stop_reason: str
    error: str | None = None


def _chunk(kind: str, text: str) -> object:
    block = schema.TextContentBlock(text=text)
    if kind == "text":
        return schema.AgentMessageChunk(content=block)
    return schema.AgentThoughtChunk(content=block)


class _Sink:
    """
    Streams model deltas as ``agent_message_chunk`` / ``agent_thought_chunk`` updates, with
    back-pressure: a delta is written at once and the connection's writability Deferred is
    returned (unfired while the client does not read); deltas that arrive while it is
    unfired are joined (per kind, in order) and written when it fires, or by :meth:`flush`.
    """

    def __init__(self, conn: Any, session_id: str) -> None:
        self._conn = conn
        self._session_id = session_id
        self.text_parts: list[str] = []
        self._waiting: Deferred[None] | None = None
        self._held: list[tuple[str, list[str]]] = []

    def text(self, delta: str) -> Deferred[None] | None:
        self.text_parts.append(delta)
        return self._send("text", delta)

    def reasoning(self, delta: str) -> Deferred[None] | None:
        return self._send("reasoning", delta)

    def _send(self, kind: str, delta: str) -> Deferred[None] | None:
        if self._waiting is not None:
            # The engine did not wait: hold the delta (joined), nothing new to wait for.
            if self._held and self._held[-1][0] == kind:
                self._held[-1][1].append(delta)
            else:
                self._held.append((kind, [delta]))
            return None
        return self._write(kind, delta)

    def _write(self, kind: str, text: str) -> Deferred[None]:
        d = send_update(self._conn, self._session_id, _chunk(kind, text))
        if not d.called and self._waiting is None:
            self._waiting = d
            d.addBoth(self._writable_again, d)
        return d

    def _writable_again(self, result: object, d: Deferred[None]) -> object:
        if self._waiting is d:
            self._waiting = None
            self._write_held()
        return result

    def _write_held(self) -> None:
        held, self._held = self._held, []
        for kind, parts in held:
            self._write(kind, "".join(parts))

    def flush(self) -> None:
        """Write the held deltas now (before any other update of the turn)."""
        self._waiting = None
        self._write_held()


@attrs.define
class _OpenCall:
    """An announced tool call not yet in a terminal status."""

    acp_id: str
    model_id: str
    running: Deferred[ToolResult] | None = None


class TurnRunner:
    """Runs turns of one connection's sessions (``conn`` is its ``AgentConnection``)."""

    def __init__(self, runtime: AgentRuntime, conn: Any) -> None:
        self.runtime = runtime
        self.conn = conn

    # -- updates --------------------------------------------------------------------

    def _update(self, session: Session, update: object) -> None:
        send_update(self.conn, session.id, update)

    @property
    def hooks(self) -> HookRunner:
        """The configured hooks (:mod:`acpkit_agent.hooks`)."""
        return HookRunner(self.runtime.config.hooks, self.runtime.reactor)

    def send_usage(self, session: Session, used: int) -> None:
        """A ``usage_update`` with the known window as ``size``."""
        self._update(session, schema.UsageUpdate(used=used, size=self.runtime.known_window()))

    def _send_plan(self, session: Session, entries: list[PlanEntry]) -> None:
        self._update(
            session,
            schema.AgentPlanUpdate(
                entries=[
                    schema.PlanEntry(
                        content=entry.content,
                        priority=schema.PlanEntryPriority(entry.priority),
                        status=schema.PlanEntryStatus(entry.status),
                    )
                    for entry in entries
                ]
            ),
        )

    # -- the turn -------------------------------------------------------------------

    async def run(self, session: Session, user_text: str) -> TurnOutcome:
        """Run one turn of ``session`` for the user message ``user_text``."""
        history = session.history
        question = {"role": "user", "content": user_text}
        history.append(question)
        counts = TurnCounts()
        open_calls: dict[str, _OpenCall] = {}
        sink = _Sink(self.conn, session.id)
        outcome: TurnOutcome
        try:
            await self.runtime.window()
            while True:
                sink.text_parts = []
                reply: ModelReply = await self.runtime.engine.complete(
                    list(history), self.runtime.tool_specs(), sink
                )
                sink.flush()
                sink.text_parts = []
                if reply.usage is not None:
                    session.totals.add(reply.usage)
                    session.last_measure = reply.usage.total_tokens
                    self.send_usage(session, session.last_measure)
                history.append(reply.as_message())
                if not reply.tool_calls:
                    break
                for call in reply.tool_calls:
                    output = await self._tool_call(session, call, counts, open_calls)
                    history.append({"role": "tool", "tool_call_id": call.id, "content": output})
            await self.hooks.finish_answer(
                session,
                user_text,
                lambda text: self._update(
                    session, schema.AgentMessageChunk(content=schema.TextContentBlock(text=text))
                ),
            )
            outcome = TurnOutcome(stop_reason="end_turn")
        except CancelledError:
            outcome = TurnOutcome(stop_reason="cancelled")
        except EngineError as error:
            outcome = TurnOutcome(stop_reason="error", error=error.message)
        except Exception as error:
            _log.failure("[acp] session {sid}: the turn failed", sid=session.id)
            text = one_line_excerpt(f"{type(error).__name__}: {error}")
            outcome = TurnOutcome(stop_reason="error", error=f"agent error: {text}")
        interrupted = (
            CANCELLED_TOOL_OUTPUT
            if outcome.stop_reason == "cancelled"
            else f"[tool call interrupted: {outcome.error}]"
        )
        self._finish(session, question, sink, open_calls, counts, interrupted)
        return outcome

    def _finish(
        self,
        session: Session,
        question: dict[str, Any],
        sink: _Sink,
        open_calls: dict[str, _OpenCall],
        counts: TurnCounts,
        interrupted: str,
    ) -> None:
        """Make the history and the tool calls consistent after the turn, whatever ended it."""
        sink.flush()
        history = session.history
        for call in list(open_calls.values()):
            if call.running is not None and not call.running.called:
                call.running.cancel()
            self._terminal(session, call.acp_id, interrupted, failed=True)
        open_calls.clear()
        partial = "".join(sink.text_parts)
        if partial:
            history.append({"role": "assistant", "content": partial})
        self._answer_dangling_calls(history, interrupted)
        if history and history[-1] is question:
            history.pop()
        self.send_usage(session, session.used_tokens())
        _log.info(
            "[acp] turn done: {commands} command(s) · {files} file op(s) · {skills} skill(s)",
            commands=counts.commands,
            files=counts.file_ops,
            skills=counts.skills,
        )

    @staticmethod
    def _answer_dangling_calls(history: list[dict[str, Any]], output: str) -> None:
        """Give every tool call of the last assistant message a result (servers demand it)."""
        for index in range(len(history) - 1, -1, -1):
            message = history[index]
            if message.get("role") == "assistant":
                answered = {
                    m.get("tool_call_id") for m in history[index + 1 :] if m.get("role") == "tool"
                }
                for call in message.get("tool_calls") or []:
                    if call.get("id") not in answered:
                        history.append(
                            {
                                "role": "tool",
                                "tool_call_id": call.get("id"),
                                "content": output,
                            }
                        )
                return
            if message.get("role") not in ("tool",):
                return

    # -- one tool call ----------------------------------------------------------------

    def _terminal(
        self,
        session: Session,
        acp_id: str,
        output: str,
        *,
        failed: bool,
        result: ToolResult | None = None,
    ) -> None:
        content: list[Any] = list(result.content) if result is not None else []
        diffs = [] if result is None else [*filter(None, [result.diff]), *result.diffs]
        content.extend(
            schema.FileEditToolCallContent(path=d.path, old_text=d.old_text, new_text=d.new_text)
            for d in diffs
        )
        if not content:
            content = [schema.ContentToolCallContent(content=schema.TextContentBlock(text=output))]
        self._update(
            session,
            schema.ToolCallProgress(
                tool_call_id=acp_id,
                status=schema.ToolCallStatus.FAILED if failed else schema.ToolCallStatus.COMPLETED,
                content=content,
                raw_output={"output": output},
            ),
        )

    async def _tool_call(
        self,
        session: Session,
        call: ToolCallRequest,
        counts: TurnCounts,
        open_calls: dict[str, _OpenCall],
    ) -> str:
        """Announce, allow, run and conclude one tool call; return what the model receives."""
        acp_id = self.runtime.next_call_id()
        tool = self.runtime.tools.get(call.name)
        args = dict(call.arguments)
        if tool is None:
            title, kind, locations = call.name or "unknown tool", schema.ToolKind.EXECUTE, []
        else:
            title = tool.title(args)
            kind = tool_kind(call_kind(tool, args))
            locations = [schema.ToolCallLocation(path=p) for p in tool.locations(args, session.cwd)]
        # saved with the call, for session/load's replay
        session.record_call_id(call.id, acp_id, title, str(kind.value))
        raw_input: Any = args if call.error is None else call.raw_arguments
        self._update(
            session,
            schema.ToolCallStart(
                tool_call_id=acp_id,
                title=title,
                kind=kind,
                status=schema.ToolCallStatus.PENDING,
                raw_input=raw_input,
                locations=locations or None,
            ),
        )
        open_calls[acp_id] = _OpenCall(acp_id=acp_id, model_id=call.id)
        if tool is None:
            output = f"[unknown tool {call.name!r}: the tools are {', '.join(self.runtime.tools)}]"
            return self._close(session, open_calls, acp_id, output, failed=True)
        if call.error is not None:
            output = f"[invalid arguments for {call.name}: {call.error}]"
            return self._close(session, open_calls, acp_id, output, failed=True)
        denial = await self.hooks.pre_tool_call(
            session_id=session.id,
            cwd=session.cwd,
            tool_call_id=acp_id,
            tool=tool.name,
            title=title,
            arguments=args,
        )
        if denial is not None:
            open_calls.pop(acp_id, None)
            self._update(session, denial.update(acp_id, title))
            return denial.output
        always_asks = bool(getattr(tool, "always_asks", False))
        if always_asks or (not self.runtime.config.yolo and tool.needs_permission(args)):
            request = schema.ToolCallUpdate(
                tool_call_id=acp_id,
                title=title,
                kind=kind,
                status=schema.ToolCallStatus.PENDING,
                raw_input=raw_input,
                locations=locations or None,
            )
            key = getattr(tool, "permission_key", None) or tool.name
            allowed = await ask_permission(self.conn, session, key, request)
            if not allowed:
                output = rejection_message(tool.name)
                _log.info(
                    "[acp] session {sid}: {tool} rejected by the user", sid=session.id, tool=title
                )
                return self._close(session, open_calls, acp_id, output, failed=True)
        self._update(
            session,
            schema.ToolCallProgress(tool_call_id=acp_id, status=schema.ToolCallStatus.IN_PROGRESS),
        )
        context = InteractiveToolContext(
            cwd=session.cwd,
            files=file_access_for(self.conn, session.id),
            reactor=self.runtime.reactor,
            plan=session.plan,
            send_plan=lambda entries: self._send_plan(session, entries),
            asker=UserAsker(self.conn, session.id, acp_id),
            progress=lambda text: self._progress(session, acp_id, text),
        )
        running = tool.run(context, args)
        open_calls[acp_id].running = running
        counts.count(tool.name)
        result = await running
        open_calls.pop(acp_id, None)
        self._terminal(session, acp_id, result.output, failed=result.failed, result=result)
        return result.output

    def _progress(self, session: Session, acp_id: str, text: str) -> None:
        """Show ``text`` as the running call's content (a tool's progress report)."""
        self._update(
            session,
            schema.ToolCallProgress(
                tool_call_id=acp_id,
                content=[schema.ContentToolCallContent(content=schema.TextContentBlock(text=text))],
            ),
        )

    def _close(
        self,
        session: Session,
        open_calls: dict[str, _OpenCall],
        acp_id: str,
        output: str,
        *,
        failed: bool,
    ) -> str:
        open_calls.pop(acp_id, None)
        self._terminal(session, acp_id, output, failed=failed)
        return output
