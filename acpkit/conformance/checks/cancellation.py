"""
Cancellation: what the agent does once the client sent ``session/cancel``.

- CANCEL-003: a cancelled session/prompt answered with an error (more than a second after the
  cancel)
- CANCEL-004: new tool work (a tool_call, a permission request, terminal/create,
  fs/write_text_file) more than a second after the cancel, before the turn's answer

CANCEL-001 and CANCEL-002 (the cancelled stop reason) are judged by the probes that cancel
(`acpkit.conformance.harness.judge_cancel`), and by the observer when a cancelled prompt is
never answered. A second is the margin for what was already on its way when the agent read
the cancel (`CANCEL_RACE`).
"""

from __future__ import annotations

import time
from typing import Any

from acpkit.conformance.checks.base import Family, describe
from acpkit.conformance.checks.state import AnswerContext, Turn, UpdateContext

__all__ = ["CANCEL_RACE", "CancellationChecks"]

#: After a session/cancel, what the agent sends within this many seconds may have been on its
#: way before it read the cancel (same margin as `acpkit.conformance.harness.CANCEL_RACE`).
CANCEL_RACE = 1.0
#: The agent's requests that start tool work.
TOOL_WORK = frozenset({"session/request_permission", "terminal/create", "fs/write_text_file"})
FINAL_STATUSES = frozenset({"completed", "failed"})


class CancellationChecks(Family):
    """See the module docstring."""

    rules = ("CANCEL-003", "CANCEL-004")

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        #: the turns (request keys) that broke CANCEL-004
        self._flagged: set[str] = set()

    def agent_message(
        self, method: str, params: dict[str, Any], raw_params: Any, is_request: bool, index: int
    ) -> None:
        session_id = params.get("sessionId")
        if method in TOOL_WORK and isinstance(session_id, str):
            turn = self.state.turn_of(session_id)
            if turn is not None:
                self._after_cancel(turn, f"a {method} request", index)

    def session_update(self, context: UpdateContext, index: int) -> None:
        update = context.update
        if context.kind != "tool_call" or context.turn is None or context.replay is not None:
            return
        if update.get("status") not in FINAL_STATUSES:
            self._after_cancel(
                context.turn, f"a new tool_call {describe(update.get('toolCallId'))}", index
            )

    def _after_cancel(self, turn: Turn, what: str, index: int) -> None:
        """CANCEL-004: no new tool work once the cancel has had time to arrive."""
        if turn.cancel_at is None or time.monotonic() - turn.cancel_at <= CANCEL_RACE:
            return
        self._flagged.add(turn.request_key)
        self.violation(
            "CANCEL-004",
            f"{time.monotonic() - turn.cancel_at:.1f}s after session/cancel for session "
            f"{turn.session_id}, the agent started new tool work: {what}",
            index,
        )

    def response(self, context: AnswerContext, index: int) -> None:
        """CANCEL-003 (a cancelled turn is not an error) and CANCEL-004 (held)."""
        turn = context.turn
        if context.method != "session/prompt" or turn is None:
            return
        if turn.cancel_at is None or turn.cancel_request:
            return
        if turn.request_key not in self._flagged:
            self.ok("CANCEL-004")
        message = context.message
        if "error" not in message:
            self.ok("CANCEL-003")
            return
        late = time.monotonic() - turn.cancel_at
        if late > CANCEL_RACE:
            self.violation(
                "CANCEL-003",
                f"the session/prompt cancelled with session/cancel was answered {late:.1f}s "
                f"later with the error {describe(message.get('error'))}, not stopReason "
                "cancelled",
                index,
            )
        else:
            self.judge.note(
                f"a cancelled prompt was answered with an error {late:.2f}s after the cancel: "
                "it may have failed before the agent read the cancel (CANCEL-003 inconclusive)"
            )
