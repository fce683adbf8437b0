"""
What every family of content checks shares: the small interface the observer's checks call
(`Family`), what a family may ask of the observer (`Judge`), and small helpers.

A family gets each event of the conversation, after `acpkit.conformance.checks.state`
has updated the shared bookkeeping (sessions, turns, replays) and described the event in
context (`UpdateContext`, `AnswerContext`). It keeps whatever other state its own rules
need, and records verdicts through the `Judge`: ``violation`` when a rule is broken, ``ok``
when it held.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from acpkit.conformance.checks.state import AnswerContext, Conversation, UpdateContext

__all__ = [
    "Family",
    "Judge",
    "PendingRequest",
    "describe",
    "is_absolute",
    "is_within",
    "metas",
    "strings_under",
]


class _Verdicts(Protocol):
    def ok(self, rule_id: str) -> None:
        """The rule was checked and held."""


class _Definitions(Protocol):
    def definition_for(self, side: str, method: str, kind: str) -> str | None:
        """The schema definition of a method's params or result."""


class Judge(Protocol):
    """What a family may use of the observer (`acpkit.conformance.observer.Observer`)."""

    @property
    def verdicts(self) -> _Verdicts:
        """Where verdicts go."""

    @property
    def client_capabilities(self) -> dict[str, Any]:
        """The clientCapabilities of the client's initialize."""

    @property
    def agent_requests(self) -> list[dict[str, Any]]:
        """The agent's requests so far."""

    @property
    def validator(self) -> _Definitions:
        """The schema's definitions by method."""

    @property
    def stdin_closed(self) -> bool:
        """The client closed the agent's stdin (EOF may end a turn as cancelled)."""

    def violation(self, rule_id: str, message: str, index: int | None = None) -> None:
        """Record a finding."""

    def note(self, text: str) -> None:
        """Add a note to the transcript."""


class PendingRequest(Protocol):
    """A request of the client the agent has answered (`acpkit.conformance.observer.Pending`)."""

    method: str
    params: Any
    session_id: str | None


class Family:
    """
    One family of rules: the events it is told about, each a no-op unless overridden.

    ``judge`` records verdicts; ``state`` is the shared bookkeeping of the conversation,
    already updated for the event.
    """

    #: the rule ids this family judges (for reviewers, and for the catalogue test)
    rules: tuple[str, ...] = ()

    def __init__(self, judge: Judge, state: Conversation) -> None:
        self.judge = judge
        self.state = state

    # -- the events --------------------------------------------------------------------

    def request_sent(self, key: str, method: str, params: dict[str, Any]) -> None:
        """The client sent a request (valid envelope); ``key`` is its id's key."""

    def notification_sent(self, method: str, params: dict[str, Any]) -> None:
        """The client sent a notification."""

    def client_answered(self, request: dict[str, Any], response: dict[str, Any]) -> None:
        """The client answered one of the agent's requests."""

    def agent_message(
        self, method: str, params: dict[str, Any], raw_params: Any, is_request: bool, index: int
    ) -> None:
        """The agent sent a request or a notification (``params`` is ``{}`` unless an
        object; ``raw_params`` is what was sent)."""

    def session_update(self, context: UpdateContext, index: int) -> None:
        """The agent sent a ``session/update`` (after `agent_message`)."""

    def response(self, context: AnswerContext, index: int) -> None:
        """The agent answered one of the client's requests."""

    # -- shorthands --------------------------------------------------------------------

    def ok(self, rule_id: str) -> None:
        """The rule held once."""
        self.judge.verdicts.ok(rule_id)

    def violation(self, rule_id: str, message: str, index: int | None = None) -> None:
        """The rule was broken."""
        self.judge.violation(rule_id, message, index)

    def capability(self, *path: str) -> Any:
        """The client capability at ``path`` (``None`` when absent)."""
        value: Any = self.judge.client_capabilities
        for part in path:
            if not isinstance(value, dict):
                return None
            value = value.get(part)
        return value


# -- helpers ---------------------------------------------------------------------------------


def describe(value: Any, limit: int = 160) -> str:
    """A short JSON rendering of ``value`` for finding messages."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "..."


def is_absolute(path: str) -> bool:
    """An absolute path (POSIX, or a Windows drive / UNC path: agents run anywhere)."""
    return (
        path.startswith("/") or bool(re.match(r"[A-Za-z]:[\\/]", path)) or path.startswith("\\\\")
    )


def _forms(path: str) -> set[str]:
    normal = os.path.normpath(path)
    return {normal, os.path.realpath(normal)}


def is_within(path: str, roots: Iterable[str]) -> bool:
    """``path`` is one of ``roots`` or below one (normalised and symlink-resolved forms)."""
    forms = _forms(path)
    for root in roots:
        for base in _forms(root):
            for candidate in forms:
                if candidate == base or candidate.startswith(base.rstrip(os.sep) + os.sep):
                    return True
    return False


def strings_under(value: Any, keys: frozenset[str]) -> Iterator[str]:
    """Every string value of a key in ``keys``, anywhere in ``value``."""
    if isinstance(value, dict):
        for name, child in value.items():
            if name in keys and isinstance(child, str):
                yield child
            else:
                yield from strings_under(child, keys)
    elif isinstance(value, list):
        for child in value:
            yield from strings_under(child, keys)


def metas(value: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every ``_meta`` object in ``value``, with its path."""
    if isinstance(value, dict):
        for name, child in value.items():
            if name == "_meta" and isinstance(child, dict):
                yield f"{path}._meta", child
            else:
                yield from metas(child, f"{path}.{name}")
    elif isinstance(value, list):
        for position, child in enumerate(value):
            yield from metas(child, f"{path}[{position}]")


def select_values(option: Mapping[str, Any]) -> list[Any]:
    """The values of a select config option, flattened across groups."""
    values: list[Any] = []
    for entry in option.get("options") or []:
        if not isinstance(entry, dict):
            continue
        if isinstance(entry.get("options"), list):
            values += [o.get("value") for o in entry["options"] if isinstance(o, dict)]
        elif "value" in entry:
            values.append(entry.get("value"))
    return values
