"""
Each history message's JSON, encoded once: what makes a turn's cost independent of the
length of the history it follows.

A :class:`HistoryEncoding` (one per session) keeps, for every message of the history, the
text the session file holds for it and the length of its compact JSON (what
:func:`acpkit_agent.session.estimate_tokens` counts).  :meth:`HistoryEncoding.update`
encodes only the messages it has not seen: messages are recognized by identity, so an
appended message is encoded once, and a message replaced by another object (compaction,
``/new``, a repaired history, a recorded call id) is encoded again.  **A message must not be
changed in place once it is in the history**: replace it (``history[i] = {...}``).

The session file text of a message is ``json.dumps(message, ensure_ascii=False, indent=1)``
indented by two more spaces, as it sits in the file's ``history`` list
(:func:`acpkit_agent.store.session_file_chunks`), UTF-8 encoded, with the ``"\\n  "`` that
precedes it and the ``","`` that follows it.
"""

from __future__ import annotations

import json
import operator
from typing import Any

__all__ = ["HistoryEncoding", "compact_length", "file_entry"]


def file_entry(message: dict[str, Any]) -> bytes:
    """``message`` as a session file's ``history`` list holds it: ``\\n  <json>,``."""
    text = json.dumps(message, ensure_ascii=False, indent=1).replace("\n", "\n  ")
    return ("\n  " + text + ",").encode("utf-8")


def compact_length(message: dict[str, Any]) -> int:
    """The length of ``json.dumps(message, ensure_ascii=False)``."""
    return len(json.dumps(message, ensure_ascii=False))


class HistoryEncoding:
    """The encoded messages of one history, kept in step with it by :meth:`update`."""

    def __init__(self) -> None:
        self._messages: list[dict[str, Any]] = []
        self._file_entries: list[bytes] = []
        self._compact: list[int] = []
        self._compact_total = 0

    def update(self, history: list[dict[str, Any]]) -> None:
        """
        Follow ``history``: keep the encoding of each message still there (the same
        object), encode the others.  A message that cannot be encoded raises
        ``TypeError``/``ValueError`` as ``json.dumps`` does; what was kept stays consistent.
        """
        messages = self._messages
        kept = len(messages)
        if kept > len(history) or not all(map(operator.is_, messages, history)):
            kept = next(
                (i for i, (a, b) in enumerate(zip(messages, history, strict=False)) if a is not b),
                min(kept, len(history)),
            )
        if kept == len(messages) == len(history):
            return
        # Messages after the first difference may still be there, moved (an insertion, a
        # compaction keeping the last turns): reuse their encoding.
        moved = {
            id(message): (message, entry, size)
            for message, entry, size in zip(
                messages[kept:], self._file_entries[kept:], self._compact[kept:], strict=True
            )
        }
        self._compact_total -= sum(self._compact[kept:])
        del messages[kept:], self._file_entries[kept:], self._compact[kept:]
        for message in history[kept:]:
            known = moved.get(id(message))
            if known is not None and known[0] is message:
                entry, size = known[1], known[2]
            else:
                entry, size = file_entry(message), compact_length(message)
            messages.append(message)
            self._file_entries.append(entry)
            self._compact.append(size)
            self._compact_total += size

    def file_entries(self, history: list[dict[str, Any]]) -> list[bytes]:
        """The file text of each message of ``history`` (see the module docstring)."""
        self.update(history)
        return list(self._file_entries)

    def compact_length(self, history: list[dict[str, Any]]) -> int:
        """The length of ``json.dumps(history, ensure_ascii=False)``."""
        self.update(history)
        count = len(self._messages)
        return 2 + self._compact_total + 2 * (count - 1) if count else 2
