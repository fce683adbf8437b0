"""
Session state of the reference agent: the history, the remembered permission answers, the
plan, the token counts — and :class:`SessionStore`, where the agent keeps its sessions.

The store is the seam for persistence: :class:`MemorySessionStore` keeps sessions for the
life of the process; a persistent store (``sessions.enabled``) implements the same
:class:`SessionStore` protocol and additionally writes ``<cwd>/<sessions.dir>/<id>.json``.
"""

from __future__ import annotations

import datetime
import json
import secrets
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import attrs

from acpkit_agent.engines.base import Usage
from acpkit_agent.tools.plan import PlanState

__all__ = [
    "SYSTEM_PROMPT",
    "MemorySessionStore",
    "Session",
    "SessionStore",
    "SessionTotals",
    "estimate_tokens",
    "new_session_id",
]

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

    @classmethod
    def create(cls, session_id: str, cwd: str, system_prompt: str = SYSTEM_PROMPT) -> Session:
        """A fresh session: the history holds the system prompt only."""
        return cls(
            id=session_id,
            cwd=cwd,
            history=[{"role": "system", "content": system_prompt.format(cwd=cwd)}],
        )

    def used_tokens(self) -> int:
        """Tokens in context now: the larger of the last measure and the history estimate."""
        return max(self.last_measure, estimate_tokens(self.history))


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
