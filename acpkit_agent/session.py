"""
Session state of the reference agent: the history, the remembered permission answers, the
plan, the token counts — and :class:`SessionStore`, where the agent keeps its sessions.

The store is the seam for persistence: :class:`MemorySessionStore` keeps sessions for the
life of the process; a persistent store (``sessions.enabled``) implements the same
:class:`SessionStore` protocol and additionally writes ``<cwd>/<sessions.dir>/<id>.json``.

Each tool call of an assistant message in the history also holds the ``toolCallId``,
``title`` and ``kind`` the client saw live (:data:`LIVE_ID_KEY`, :data:`LIVE_TITLE_KEY`,
:data:`LIVE_KIND_KEY`, set by :meth:`Session.record_call_id`), so that a replay shows the
same ids, titles and kinds, even before the MCP server that offered the tool has listed
its tools again; engines do not send them to the model.  :func:`repair_history`
gives a result to every tool call that has none (a session saved mid-tool by an older
agent, or a crash), since chat-completions servers reject such a history.
"""

from __future__ import annotations

import datetime
import json
import secrets
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import attrs

from acpkit_agent.config import AgentConfig
from acpkit_agent.engines.base import Usage
from acpkit_agent.history_encoding import HistoryEncoding
from acpkit_agent.tools.plan import PlanState

__all__ = [
    "INTERRUPTED_TOOL_OUTPUT",
    "LIVE_ID_KEY",
    "LIVE_KIND_KEY",
    "LIVE_TITLE_KEY",
    "SYSTEM_PROMPT",
    "MemorySessionStore",
    "Session",
    "SessionStore",
    "SessionTotals",
    "estimate_tokens",
    "new_session_id",
    "repair_history",
    "tool_results_of",
]

LIVE_ID_KEY = "acpToolCallId"
"""The key, in a history tool call, of the ``toolCallId`` the client saw live."""

LIVE_TITLE_KEY = "acpTitle"
"""The key, in a history tool call, of the ``title`` the client saw live."""

LIVE_KIND_KEY = "acpKind"
"""The key, in a history tool call, of the ``kind`` the client saw live."""

INTERRUPTED_TOOL_OUTPUT = "[tool call interrupted: the agent stopped before it answered]"
"""The result :func:`repair_history` gives a tool call that has none."""

SYSTEM_PROMPT = (
    "You are Bob, a bash-first coding agent working in the user's project directory "
    "({cwd}). Prefer running shell commands with the bash tool to inspect and change "
    "things; use read_file, write_file and edit_file for files, fetch_content for URLs and "
    "plan to keep a task list for multi-step work. Be brief; say what you did."
)
"""The system prompt; ``{cwd}`` is replaced by the session's directory."""


def new_session_id(
    now: datetime.datetime | None = None, token: Callable[[int], str] = secrets.token_hex
) -> str:
    """A date-sortable session id: local time and 8 hex digits, ``20260916-101530-4f2a9c1e``."""
    now = now if now is not None else datetime.datetime.now()
    return f"{now:%Y%m%d-%H%M%S}-{token(4)}"


def estimate_tokens(history: list[dict[str, Any]]) -> int:
    """A rough token count of a history: its JSON characters divided by 4."""
    return len(json.dumps(history, ensure_ascii=False)) // 4


@attrs.define
class SessionTotals:
    """Session totals of the token counts the engine reported (``usage`` of the response)."""

    input_tokens: int = 0
    output_tokens: int = 0
    thought_tokens: int | None = None
    cached_read_tokens: int | None = None
    reported: bool = False
    """Whether the engine reported any count yet (``usage`` is absent until then)."""

    def add(self, usage: Usage) -> None:
        """Add one model call's counts."""
        self.reported = True
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        if usage.thought_tokens is not None:
            self.thought_tokens = (self.thought_tokens or 0) + usage.thought_tokens
        if usage.cached_read_tokens is not None:
            self.cached_read_tokens = (self.cached_read_tokens or 0) + usage.cached_read_tokens

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


@attrs.define
class Session:
    """One ACP session of the agent."""

    id: str
    cwd: str
    history: list[dict[str, Any]]
    remembered: dict[str, bool] = attrs.field(factory=dict)
    """Remembered permission answers per tool name: True always allow, False never."""
    plan: PlanState = attrs.field(factory=PlanState)
    totals: SessionTotals = attrs.field(factory=SessionTotals)
    last_measure: int = 0
    """The last model call's input + output tokens (0: none, or forgotten by ``/new``)."""
    config: AgentConfig | None = None
    """The session's configuration (:func:`acpkit_agent.config.session_config`); None:
    the process's."""
    encoding: HistoryEncoding = attrs.field(factory=HistoryEncoding, eq=False, repr=False)
    """Each history message's JSON, encoded once (:mod:`acpkit_agent.history_encoding`):
    the messages of ``history`` are replaced, never changed in place."""

    @classmethod
    def create(cls, session_id: str, cwd: str, system_prompt: str = SYSTEM_PROMPT) -> Session:
        """A fresh session: the history holds the system prompt only."""
        return cls(
            id=session_id,
            cwd=cwd,
            history=[{"role": "system", "content": system_prompt.format(cwd=cwd)}],
        )

    def record_call_id(
        self, model_id: str, live_id: str, title: str | None = None, kind: str | None = None
    ) -> None:
        """
        Remember that the model's tool call ``model_id`` of the latest assistant message
        was announced to the client as ``live_id`` (its first call with that id not yet
        given one: a model may reuse ids), with ``title`` and ``kind`` when given.
        """
        # The message is replaced, not changed in place (see ``encoding``).
        for index in range(len(self.history) - 1, -1, -1):
            message = self.history[index]
            if message.get("role") != "assistant":
                continue
            calls = list(message.get("tool_calls") or [])
            for position, call in enumerate(calls):
                if isinstance(call, dict) and call.get("id") == model_id:
                    if LIVE_ID_KEY not in call:
                        extra = {LIVE_ID_KEY: live_id}
                        if title is not None:
                            extra[LIVE_TITLE_KEY] = title
                        if kind is not None:
                            extra[LIVE_KIND_KEY] = kind
                        calls[position] = {**call, **extra}
                        self.history[index] = {**message, "tool_calls": calls}
                        return
            return

    def used_tokens(self) -> int:
        """Tokens in context now: the larger of the last measure and the history estimate."""
        return max(self.last_measure, self.encoding.compact_length(self.history) // 4)


def tool_results_of(history: list[dict[str, Any]], index: int) -> list[dict[str, Any]]:
    """The tool results answering the assistant message ``history[index]``: the ``tool``
    messages that follow it, up to the next message of another role."""
    results = []
    for message in history[index + 1 :]:
        if message.get("role") != "tool":
            break
        results.append(message)
    return results


def repair_history(history: list[dict[str, Any]], output: str = INTERRUPTED_TOOL_OUTPUT) -> int:
    """
    Give every tool call of every assistant message a result (``output``, inserted after
    the message's own results) when it has none; returns how many were added.
    """
    added = 0
    index = 0
    while index < len(history):
        message = history[index]
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if not isinstance(calls, list) or not calls:
            index += 1
            continue
        results = tool_results_of(history, index)
        answered = [result.get("tool_call_id") for result in results]
        missing = []
        for call in calls:
            call_id = call.get("id") if isinstance(call, dict) else None
            if call_id in answered:
                answered.remove(call_id)
            else:
                missing.append({"role": "tool", "tool_call_id": call_id, "content": output})
        end = index + 1 + len(results)
        history[end:end] = missing
        added += len(missing)
        index = end + len(missing)
    return added


class SessionStore(Protocol):
    """Where the agent keeps its sessions (in memory, or persisted in part 2)."""

    def add(self, session: Session) -> None:
        """Register a new (or loaded) session."""

    def get(self, session_id: str) -> Session | None:
        """The session with this id, or None."""

    def saved(self, session: Session) -> None:
        """Called after each turn (and each command) that changed the session."""

    def __iter__(self) -> Iterator[Session]:
        """Every session kept."""


class MemorySessionStore:
    """Keeps sessions in memory for the life of the process."""

    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}

    def add(self, session: Session) -> None:
        """Register a session."""
        self._sessions[session.id] = session

    def get(self, session_id: str) -> Session | None:
        """The session with this id, or None."""
        return self._sessions.get(session_id)

    def saved(self, session: Session) -> None:
        """Nothing to write: the session lives in memory."""

    def __iter__(self) -> Iterator[Session]:
        """Every session kept."""
        return iter(list(self._sessions.values()))
