"""The ``plan`` tool and the session's plan (ACP "Agent Plan").

Actions (``args["action"]``):

``set``     replace the whole plan by ``entries`` (a non-empty list of
            ``{"content", "priority"?, "status"?}``; priority defaults to ``medium``,
            status to ``pending``).
``update``  change entry number ``index`` (1-based, as shown): any of ``status``,
            ``priority``, ``content``.
``clear``   remove every entry.
``show``    return the plan; changes nothing.

Every change calls ``ctx.send_plan`` with the complete list (the agent MUST send all entries
in each ``plan`` update; the client replaces its plan).  Every action returns the plan as text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from twisted.internet.defer import Deferred, succeed

from acpkit_agent.tools.base import ArgumentError, ToolContext, ToolResult, title_text
from acpkit_agent.tools.plan_state import PlanEntry, PlanState

__all__ = ["PRIORITIES", "STATUSES", "PlanEntry", "PlanState", "PlanTool"]

PRIORITIES = ("high", "medium", "low")
"""ACP ``PlanEntryPriority`` values."""
STATUSES = ("pending", "in_progress", "completed")
"""ACP ``PlanEntryStatus`` values."""

_MODIFYING = frozenset({"set", "update", "clear"})
_ACTIONS = ("set", "update", "clear", "show")


def _choice(value: Any, name: str, allowed: Sequence[str], default: str | None) -> str:
    if value is None:
        if default is None:
            raise ArgumentError(f"missing argument {name!r}")
        return default
    if value not in allowed:
        raise ArgumentError(f"{name!r} must be one of {', '.join(allowed)}; got {value!r}")
    assert isinstance(value, str)
    return value


def _content(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ArgumentError(f"{where}: 'content' must be a non-empty string")
    return value


def _entries(value: Any) -> list[PlanEntry]:
    if not isinstance(value, list) or not value:
        raise ArgumentError(
            "'set' needs 'entries', a non-empty list of {content, priority?, status?}; "
            "use action 'clear' to empty the plan"
        )
    entries = []
    for number, item in enumerate(value, start=1):
        where = f"entry {number}"
        if isinstance(item, str):
            item = {"content": item}
        if not isinstance(item, Mapping):
            raise ArgumentError(f"{where} must be an object with 'content'")
        try:
            entries.append(
                PlanEntry(
                    content=_content(item.get("content"), where),
                    priority=_choice(item.get("priority"), "priority", PRIORITIES, "medium"),
                    status=_choice(item.get("status"), "status", STATUSES, "pending"),
                )
            )
        except ArgumentError as error:
            message = str(error)
            raise ArgumentError(
                message if message.startswith(where) else f"{where}: {message}"
            ) from None
    return entries


@attrs.define
class PlanTool:
    """Maintains ``ctx.plan`` and reports each change with ``ctx.send_plan``."""

    name: str = attrs.field(default="plan", init=False)
    kind: str = attrs.field(default="think", init=False)
    description: str = attrs.field(
        default=(
            "Keep a visible plan of the task. action 'set' replaces the plan with 'entries' "
            "(each {content, priority?: high|medium|low, status?: pending|in_progress|"
            "completed}); 'update' changes entry 'index' (1-based) with any of 'status', "
            "'priority', 'content'; 'clear' empties it; 'show' returns it. Mark an entry "
            "in_progress when you start it and completed when it is done."
        ),
        init=False,
    )
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": list(_ACTIONS)},
                "entries": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "content": {"type": "string"},
                            "priority": {"type": "string", "enum": list(PRIORITIES)},
                            "status": {"type": "string", "enum": list(STATUSES)},
                        },
                        "required": ["content"],
                    },
                },
                "index": {"type": "integer", "minimum": 1},
                "status": {"type": "string", "enum": list(STATUSES)},
                "priority": {"type": "string", "enum": list(PRIORITIES)},
                "content": {"type": "string"},
            },
            "required": ["action"],
            "additionalProperties": False,
        },
        init=False,
    )

    def title(self, args: Mapping[str, Any]) -> str:
        """``plan: <action>``."""
        return f"plan: {title_text(args, 'action')}"

    def locations(self, args: Mapping[str, Any], cwd: str) -> list[str]:
        """A plan concerns no file."""
        return []

    def needs_permission(self, args: Mapping[str, Any]) -> bool:
        """Only for the actions that modify the plan (``set``, ``update``, ``clear``)."""
        return args.get("action") in _MODIFYING

    def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Deferred[ToolResult]:
        """Apply the action to ``ctx.plan``; send the complete plan when it changed."""
        try:
            changed = self._apply(ctx.plan, args)
        except ArgumentError as error:
            message = f"plan: {error}; the plan was not changed\n{ctx.plan.render()}"
            return succeed(ToolResult(output=message, failed=True))
        if changed:
            ctx.send_plan(list(ctx.plan.entries))
        return succeed(ToolResult(output=ctx.plan.render()))

    def _apply(self, plan: PlanState, args: Mapping[str, Any]) -> bool:
        action = args.get("action")
        if action == "show":
            return False
        if action == "clear":
            plan.entries = []
            return True
        if action == "set":
            plan.entries = _entries(args.get("entries"))
            return True
        if action == "update":
            plan.entries[self._index(plan, args)] = self._updated(plan, args)
            return True
        raise ArgumentError(f"'action' must be one of {', '.join(_ACTIONS)}; got {action!r}")

    def _index(self, plan: PlanState, args: Mapping[str, Any]) -> int:
        index = args.get("index")
        if isinstance(index, float) and index.is_integer():
            index = int(index)
        if isinstance(index, bool) or not isinstance(index, int):
            raise ArgumentError("'update' needs 'index', the 1-based number of the entry")
        if not plan.entries:
            raise ArgumentError("the plan is empty; use action 'set' first")
        if not 1 <= index <= len(plan.entries):
            raise ArgumentError(f"'index' must be between 1 and {len(plan.entries)}; got {index}")
        return index - 1

    def _updated(self, plan: PlanState, args: Mapping[str, Any]) -> PlanEntry:
        entry = plan.entries[self._index(plan, args)]
        changes: dict[str, str] = {}
        if args.get("status") is not None:
            changes["status"] = _choice(args["status"], "status", STATUSES, None)
        if args.get("priority") is not None:
            changes["priority"] = _choice(args["priority"], "priority", PRIORITIES, None)
        if args.get("content") is not None:
            changes["content"] = _content(args["content"], "update")
        if not changes:
            raise ArgumentError("'update' needs at least one of 'status', 'priority', 'content'")
        return attrs.evolve(entry, **changes)
