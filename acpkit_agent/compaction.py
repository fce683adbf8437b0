"""
Compaction: the older part of a session's history replaced by a summary the engine writes.

A *turn* starts at each user message (a compaction summary does not start one) and runs to
the next.  :func:`compact` keeps the leading system prompt and the last ``keep_last_turns``
turns verbatim, sends everything in between to the engine with a summary prompt
(``engine.complete(messages, [], sink)``, no tools) and replaces it by one user-role message
marked ``"compaction": "summary"`` (:func:`is_summary`).  It answers one line:

- ``🗜️ compressed N messages → 1 summary + K kept (B → A tokens, S.Ss)`` (B and A: the
  history estimate before and after, S: seconds the engine took);
- ``🗜️ nothing to compact: N message(s), no turn older than the last K`` (unchanged);
- ``[compact: failed, history kept: <explanation>]`` (unchanged).

:func:`maybe_compact` runs it before a turn when the session's tokens exceed
``context.compactAt`` of the context window (``[acp] session <id>: automatic compaction …``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
from twisted.internet.defer import CancelledError
from twisted.logger import Logger

from acpkit_agent.engines.base import EngineError, IEngine, ModelReply, one_line_excerpt
from acpkit_agent.session import Session, estimate_tokens

__all__ = [
    "SUMMARY_MARK",
    "SUMMARY_PREFIX",
    "CompactionResult",
    "compact",
    "is_summary",
    "maybe_compact",
    "split_history",
    "summary_message",
    "summary_text",
]

_log = Logger()

SUMMARY_MARK = "summary"
"""The value of the ``"compaction"`` key of a summary message."""
SUMMARY_PREFIX = "[Summary of the earlier conversation, compacted]\n"
"""How a summary message's content starts (the model sees it; the replay strips it)."""

SUMMARY_INSTRUCTIONS = (
    "You summarise a conversation between a user and a coding agent so that the agent can "
    "carry on without it. Keep the user's goals and requests, the decisions taken, the facts "
    "learned about the project (files, commands and their results, errors), what is done and "
    "what is left to do. Plain text, concise, no preamble."
)
_OUTPUT_LIMIT = 2000


def is_summary(message: dict[str, Any]) -> bool:
    """Whether ``message`` is a compaction summary."""
    return message.get("role") == "user" and message.get("compaction") == SUMMARY_MARK


def summary_message(summary: str) -> dict[str, Any]:
    """The history message holding a summary."""
    return {"role": "user", "content": SUMMARY_PREFIX + summary, "compaction": SUMMARY_MARK}


def summary_text(message: dict[str, Any]) -> str:
    """The summary a summary message holds (without :data:`SUMMARY_PREFIX`)."""
    content = str(message.get("content") or "")
    return content[len(SUMMARY_PREFIX) :] if content.startswith(SUMMARY_PREFIX) else content


def _starts_turn(message: dict[str, Any]) -> bool:
    return message.get("role") == "user" and not is_summary(message)


@attrs.frozen
class HistorySplit:
    """A history cut in three: the system prompt(s), the part to summarise, the kept turns."""

    head: list[dict[str, Any]]
    older: list[dict[str, Any]]
    kept: list[dict[str, Any]]
    older_turns: int
    """How many turns ``older`` holds (a summary alone is not a turn)."""


def split_history(history: Sequence[dict[str, Any]], keep_last_turns: int) -> HistorySplit:
    """Cut ``history`` before its last ``keep_last_turns`` turns."""
    start = 0
    while start < len(history) and history[start].get("role") == "system":
        start += 1
    head, body = list(history[:start]), list(history[start:])
    starts = [i for i, message in enumerate(body) if _starts_turn(message)]
    if keep_last_turns <= 0:
        cut = len(body)
    elif len(starts) <= keep_last_turns:
        cut = 0
    else:
        cut = starts[-keep_last_turns]
    older, kept = body[:cut], body[cut:]
    older_turns = sum(1 for message in older if _starts_turn(message))
    return HistorySplit(head=head, older=older, kept=kept, older_turns=older_turns)


def _render(message: dict[str, Any]) -> str:
    role = message.get("role")
    content = str(message.get("content") or "")
    if is_summary(message):
        return f"EARLIER SUMMARY:\n{summary_text(message)}"
    if role == "user":
        return f"USER:\n{content}"
    if role == "tool":
        text = content if len(content) <= _OUTPUT_LIMIT else content[:_OUTPUT_LIMIT] + " […]"
        return f"TOOL RESULT ({message.get('tool_call_id')}):\n{text}"
    parts = [f"ASSISTANT:\n{content}"] if content else []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        parts.append(
            f"ASSISTANT CALLED {function.get('name')} ({call.get('id')}): "
            f"{function.get('arguments')}"
        )
    return "\n".join(parts) or "ASSISTANT: (no text)"


def summary_request(older: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages sent to the engine to summarise ``older``."""
    transcript = "\n\n".join(_render(message) for message in older)
    return [
        {"role": "system", "content": SUMMARY_INSTRUCTIONS},
        {"role": "user", "content": f"Summarise this conversation:\n\n{transcript}"},
    ]


class _DiscardSink:
    """The summary is not streamed to the client."""

    def text(self, delta: str) -> None:
        pass

    def reasoning(self, delta: str) -> None:
        pass


@attrs.frozen
class CompactionResult:
    """What :func:`compact` did: its line, and whether the history changed."""

    line: str
    changed: bool
    failed: bool = False


def _messages_word(count: int) -> str:
    return f"{count} message(s)"


async def compact(
    session: Session,
    engine: IEngine,
    keep_last_turns: int,
    seconds: Callable[[], float],
) -> CompactionResult:
    """
    Summarise the older part of ``session.history`` (forced: no threshold).  On success the
    history becomes head + summary + kept turns and the last token measure is forgotten;
    on failure or with nothing to compact the history is unchanged.  Cancelling raises
    :class:`CancelledError` with the history unchanged.
    """
    history = session.history
    split = split_history(history, keep_last_turns)
    if split.older_turns == 0:
        count = len(split.older) + len(split.kept)
        return CompactionResult(
            line=f"🗜️ nothing to compact: {_messages_word(count)}, "
            f"no turn older than the last {keep_last_turns}",
            changed=False,
        )
    before = estimate_tokens(history)
    started = seconds()
    try:
        reply: ModelReply = await engine.complete(summary_request(split.older), [], _DiscardSink())
    except CancelledError:
        raise
    except EngineError as error:
        return _failed(error.message)
    except Exception as error:
        _log.failure("[acp] session {sid}: compaction failed", sid=session.id)
        return _failed(one_line_excerpt(f"{type(error).__name__}: {error}"))
    elapsed = max(0.0, seconds() - started)
    if reply.usage is not None:
        session.totals.add(reply.usage)
    summary = reply.text.strip()
    if not summary:
        return _failed("the model answered an empty summary")
    history[:] = [*split.head, summary_message(summary), *split.kept]
    session.last_measure = 0
    after = estimate_tokens(history)
    return CompactionResult(
        line=f"🗜️ compressed {len(split.older)} messages → 1 summary + {len(split.kept)} kept "
        f"({before} → {after} tokens, {elapsed:.1f}s)",
        changed=True,
    )


def _failed(explanation: str) -> CompactionResult:
    return CompactionResult(
        line=f"[compact: failed, history kept: {explanation}]", changed=False, failed=True
    )


async def maybe_compact(
    session: Session,
    engine: IEngine,
    *,
    keep_last_turns: int,
    compact_at: float,
    window: int,
    seconds: Callable[[], float],
) -> CompactionResult | None:
    """
    Compact before a turn when the session's tokens (the larger of the last measure and the
    history estimate) exceed ``compact_at`` of ``window``; None when below (or the window is
    unknown).  Logged as ``[acp] session <id>: automatic compaction at U/W tokens — <line>``
    when it compacted or failed (nothing to compact is not logged: it would be at each turn).
    """
    if window <= 0:
        return None
    used = session.used_tokens()
    if used <= compact_at * window:
        return None
    result = await compact(session, engine, keep_last_turns, seconds)
    if not result.changed and not result.failed:
        return result  # nothing older than the last turns: not logged at every turn
    _log.info(
        "[acp] session {sid}: automatic compaction at {used}/{window} tokens — {line}",
        sid=session.id,
        used=used,
        window=window,
        line=result.line,
    )
    return result
