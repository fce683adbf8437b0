"""
The session's plan (ACP "Agent Plan"): its entries, kept by the session, changed by the
``plan`` tool (:mod:`acpkit_agent.tools.plan`) and seen by every tool in its context.
"""

from __future__ import annotations

import attrs

__all__ = ["PlanEntry", "PlanState"]

_MARKS = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}


@attrs.frozen
class PlanEntry:
    """One task of the plan, with the ACP ``PlanEntry`` fields."""

    content: str
    priority: str = "medium"
    status: str = "pending"


@attrs.define
class PlanState:
    """The session's current plan (an ordered list of entries)."""

    entries: list[PlanEntry] = attrs.field(factory=list)

    def render(self) -> str:
        """The plan as numbered text for the model, e.g. ``1. [x] Write tests (high)``."""
        if not self.entries:
            return "The plan is empty."
        done = sum(entry.status == "completed" for entry in self.entries)
        lines = [f"Plan ({done}/{len(self.entries)} completed):"]
        for number, entry in enumerate(self.entries, start=1):
            mark = _MARKS.get(entry.status, "[?]")
            lines.append(f"{number}. {mark} {entry.content} ({entry.priority})")
        return "\n".join(lines)
