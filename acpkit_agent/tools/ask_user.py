"""
``ask_user``: the model asks the user one or more questions (seed 000, "Requêtes
elicitation/create envoyées"); how they are asked is :mod:`acpkit_agent.elicitation`.

Arguments: ``{"questions": [{"question": str, "type": "choice"|"multi"|"text"|"confirm",
"options": [str, …] (choice and multi), "default": …}, …]}``.  The result is the answers
(``The user answered:`` and one line per question), or ``[the user declined to answer]``,
``[the user cancelled the questions]``, ``[nobody can be asked: …]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from twisted.internet.defer import Deferred, succeed

from acpkit_agent.elicitation import QuestionError, UserAsker, parse_questions
from acpkit_agent.tools.base import ToolContext, ToolResult

__all__ = ["AskUserTool", "InteractiveToolContext"]

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "questions": {
            "type": "array",
            "minItems": 1,
            "description": "The questions, asked together as one form.",
            "items": {
                "type": "object",
                "properties": {
                    "question": {"type": "string", "description": "The question, one line."},
                    "type": {
                        "type": "string",
                        "enum": ["choice", "multi", "text", "confirm"],
                        "description": "choice: pick one option; multi: pick any options; "
                        "text: free text; confirm: yes or no. Default: text.",
                    },
                    "options": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "The options (choice and multi only).",
                    },
                    "default": {
                        "description": "Optional default: an option (choice), a list of "
                        "options (multi), a string (text), true or false (confirm).",
                    },
                },
                "required": ["question"],
            },
        }
    },
    "required": ["questions"],
}


@attrs.define
class InteractiveToolContext(ToolContext):
    """A :class:`ToolContext` that can also ask the session's user (``ask_user``, ``ask_agent``)."""

    asker: UserAsker | None = None


@attrs.define
class AskUserTool:
    """Asks the session's user questions; needs an :class:`InteractiveToolContext`."""

    name: str = "ask_user"
    kind: str = "other"
    description: str = (
        "Ask the user one or more questions when you cannot decide alone: choices, "
        "multiple choices, free text or yes/no. All questions of one call are shown "
        "together. Returns the answers, or says the user declined or cancelled. Never ask "
        "for passwords, tokens or other secrets."
    )
    parameters: Mapping[str, Any] = attrs.field(factory=lambda: dict(_PARAMETERS))

    def title(self, args: Mapping[str, Any]) -> str:
        """``ask_user: <the question>`` or ``ask_user: N questions``."""
        questions = args.get("questions")
        if isinstance(questions, list) and len(questions) == 1:
            first = questions[0]
            text = first.get("question") if isinstance(first, Mapping) else None
            if isinstance(text, str) and text.strip():
                return f"ask_user: {' '.join(text.split())[:120]}"
        if isinstance(questions, list) and questions:
            return f"ask_user: {len(questions)} questions"
        return "ask_user"

    def locations(self, args: Mapping[str, Any], cwd: str) -> list[str]:
        """No files."""
        return []

    def needs_permission(self, args: Mapping[str, Any]) -> bool:
        """Never: asking is itself a question to the user."""
        return False

    def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Deferred[ToolResult]:
        """Ask the questions; cancelling cancels the pending request."""
        try:
            questions = parse_questions(args)
        except QuestionError as error:
            return succeed(ToolResult(output=f"[invalid questions: {error}]", failed=True))
        asker: UserAsker | None = getattr(ctx, "asker", None)
        if asker is None:
            return succeed(
                ToolResult(output="[nobody can be asked: no user in this context]", failed=True)
            )

        async def ask() -> ToolResult:
            outcome = await asker.ask(questions)
            return ToolResult(output=outcome.for_model(questions), failed=outcome.failed)

        return Deferred.fromCoroutine(ask())
