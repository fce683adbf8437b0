"""The ``read_skill`` tool: returns the procedure (body) of a skill of the catalog.

Kind ``read``, title ``read_skill: <name>``, never asks permission.  The catalog is read for
the session's cwd at each call (:class:`acpkit_agent.skills.SkillLibrary`), so a skill added
while the agent runs is found.  An unknown name fails the call with the list of skills.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from twisted.internet.defer import Deferred, succeed

from acpkit_agent.skills import SkillLibrary
from acpkit_agent.tools.base import ArgumentError, ToolContext, ToolResult, text_arg, title_text

__all__ = ["ReadSkillTool"]


def _skill_name(raw: str) -> str:
    """The name the model gave, without a leading ``$`` or ``/`` and spaces."""
    return raw.strip().lstrip("$/").strip()


@attrs.define
class ReadSkillTool:
    """Reads a skill's procedure from the catalog of the session's cwd."""

    library: SkillLibrary = attrs.field(factory=SkillLibrary)
    name: str = attrs.field(default="read_skill", init=False)
    kind: str = attrs.field(default="read", init=False)
    description: str = attrs.field(
        default=(
            "Read the procedure of a skill by its name (the user writes $name to ask for "
            "one). Returns the skill's instructions; follow them."
        ),
        init=False,
    )
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The skill's name, without '$'."}
            },
            "required": ["name"],
        },
        init=False,
    )

    def title(self, args: Mapping[str, Any]) -> str:
        """``read_skill: <name>``."""
        return f"read_skill: {title_text(args, 'name')}"

    def locations(self, args: Mapping[str, Any], cwd: str) -> list[str]:
        """The skill's ``SKILL.md`` is not shown as a location (it may live outside cwd)."""
        return []

    def needs_permission(self, args: Mapping[str, Any]) -> bool:
        """Never: reading a procedure changes nothing."""
        return False

    def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Deferred[ToolResult]:
        """The skill's body, or a failed result naming the known skills."""
        try:
            raw = text_arg(args, "name")
        except ArgumentError as error:
            return succeed(ToolResult(output=f"[read_skill: {error}]", failed=True))
        name = _skill_name(raw or "")
        catalog = self.library.catalog(ctx.cwd)
        skill = catalog.get(name)
        if skill is None:
            known = ", ".join(catalog.names()) or "none"
            return succeed(
                ToolResult(output=f"[unknown skill {name!r}: the skills are {known}]", failed=True)
            )
        return succeed(ToolResult(output=skill.body))
