"""
Prompt turns and tool calls: what a turn streams, how it ends, and each tool call's lifecycle.

- TURN-001: every session/prompt result: it has a stopReason
- TURN-002: a turn update (message, thought, tool call, plan) after the turn's response
- TURN-003: a tool_call reusing a toolCallId of its session; a turn ending (not cancelled) with
  a tool call not completed or failed
- TURN-004: every plan: complete entries; an entry left out of a plan and back in a later
  one of the same turn (a new turn may make a new plan)
- TURN-005: a live messageId used again for another message (another kind, or after another id)
- SESSION-008: the same, within one session/load replay
- TURN-006: a usage_update without used and size (non-negative integers), or a cost without
  amount and currency
- TURN-007: stopReason cancelled though the client cancelled nothing
- TOOL-001: a tool call the client allowed that no update reports running by the turn's end
- TOOL-002: a tool_call_update (or a permission's toolCall) naming a tool call the session
  never announced
- TOOL-003: a tool call's status moving backwards (pending < in_progress < completed / failed)
"""

from __future__ import annotations

from typing import Any

import attrs

from acpkit.conformance.checks.base import Family, describe
from acpkit.conformance.checks.state import (
    TURN_UPDATES,
    AnswerContext,
    UpdateContext,
    allowed_tool_call,
)

__all__ = ["STATUS_ORDER", "TurnChecks"]

CHUNK_UPDATES = frozenset({"user_message_chunk", "agent_message_chunk", "agent_thought_chunk"})
FINAL_STATUSES = frozenset({"completed", "failed"})
#: How far each status is along a tool call's lifecycle ("progress through" them).
STATUS_ORDER = {"pending": 0, "in_progress": 1, "completed": 2, "failed": 2}


@attrs.define
class _MessageIds:
    """``messageId`` use within one stream (live turns of a session, or one replay)."""

    kinds: dict[str, str] = attrs.field(factory=dict)
    last: str | None = None


@attrs.define
class _TurnTools:
    """One turn's tool calls: announced, allowed by the client, reported running."""

    announced: list[str] = attrs.field(factory=list)
    granted: set[str] = attrs.field(factory=set)
    ran: set[str] = attrs.field(factory=set)


@attrs.define
class _Plans:
    """The plans of one turn: the last one's entries, and those of every earlier one."""

    last: set[str] | None = None
    earlier: set[str] = attrs.field(factory=set)


class TurnChecks(Family):
    """See the module docstring."""

    rules = (
        "TURN-001",
        "TURN-002",
        "TURN-003",
        "TURN-004",
        "TURN-005",
        "TURN-006",
        "TURN-007",
        "SESSION-008",
        "TOOL-001",
        "TOOL-002",
        "TOOL-003",
    )

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._message_ids: dict[str, _MessageIds] = {}
        #: per session, each tool call's status (live: announced by a tool_call)
        self._statuses: dict[str, dict[str, str]] = {}
        #: per turn (request key), its tool calls
        self._tools: dict[str, _TurnTools] = {}
        #: per stream (live or a replay), the current turn's plans
        self._plans: dict[str, _Plans] = {}

    # -- the client ------------------------------------------------------------------------

    def request_sent(self, key: str, method: str, params: dict[str, Any]) -> None:
        session_id = params.get("sessionId")
        if method == "session/prompt" and isinstance(session_id, str):
            live = self._message_ids.get(f"live:{session_id}")
            if live is not None:
                live.last = None  # a new turn's messages are new messages
            self._tools[key] = _TurnTools()
            self._plans.pop(f"live:{session_id}", None)  # a new turn may make a new plan

    def client_answered(self, request: dict[str, Any], response: dict[str, Any]) -> None:
        params = request.get("params")
        if request.get("method") != "session/request_permission" or not isinstance(params, dict):
            return
        session_id = params.get("sessionId")
        turn = self.state.turn_of(session_id) if isinstance(session_id, str) else None
        call_id = allowed_tool_call(params, response.get("result"))
        if turn is None or call_id is None:
            return
        status = self._statuses.get(turn.session_id, {}).get(call_id)
        if status not in FINAL_STATUSES:
            self._tools.setdefault(turn.request_key, _TurnTools()).granted.add(call_id)

    # -- the agent -------------------------------------------------------------------------

    def agent_message(
        self, method: str, params: dict[str, Any], raw_params: Any, is_request: bool, index: int
    ) -> None:
        """TOOL-002 on a permission request's toolCall (an update to an existing call)."""
        if method != "session/request_permission":
            return
        tool = params.get("toolCall")
        session_id = params.get("sessionId")
        if isinstance(tool, dict) and isinstance(session_id, str):
            self._update_names_a_call(
                session_id, tool.get("toolCallId"), "session/request_permission toolCall", index
            )

    def session_update(self, context: UpdateContext, index: int) -> None:
        kind, update = context.kind, context.update
        if context.replay is None and not context.late_replay and kind in TURN_UPDATES:
            self._outside_turn(context, index)
        if kind in ("tool_call", "tool_call_update"):
            self._tool_call(context, index)
        if kind == "user_message_chunk" and context.replay is not None:
            self._plans.pop(context.stream, None)  # a replayed turn: its plans are new plans
        if kind == "plan":
            self._plan(context.stream, update, index)
        elif kind == "usage_update":
            self._usage(update, index)
        if kind in CHUNK_UPDATES:
            self._message_id(context.stream, kind, update.get("messageId"), index)

    def _outside_turn(self, context: UpdateContext, index: int) -> None:
        """TURN-002: turn content after the turn's response, before the next prompt."""
        if context.turn is not None:
            self.ok("TURN-002")
            return
        session = self.state.sessions.get(context.session_id)
        if session is not None and session.ended_turn is not None:
            self.violation(
                "TURN-002",
                f"session/update {context.kind} for session {context.session_id} arrived after "
                "the response to its last session/prompt, before any new prompt",
                index,
            )

    def _tool_call(self, context: UpdateContext, index: int) -> None:
        """TURN-003 (ids unique in the session), TOOL-002 (updates name announced calls),
        TOOL-003 (statuses move forward); the turn's announced and running calls."""
        update = context.update
        call_id = update.get("toolCallId")
        if not isinstance(call_id, str):
            return  # SCHEMA-001
        # a replay repeats the calls of the session's history: its own registry
        registry_key = context.stream if context.replay is not None else context.session_id
        statuses = self._statuses.setdefault(registry_key, {})
        status = update.get("status")
        where = f"session/update {context.kind}"
        if context.kind == "tool_call":
            if call_id in statuses:
                self.violation(
                    "TURN-003",
                    f"tool_call reuses toolCallId {call_id!r}, which an earlier tool_call of "
                    f"session {context.session_id} announced (unique within the session)",
                    index,
                )
            else:
                self.ok("TURN-003")
            self._status_change(call_id, statuses.get(call_id), status or "pending", where, index)
            statuses[call_id] = str(status or "pending")
            if context.turn is not None and context.replay is None:
                tools = self._tools.setdefault(context.turn.request_key, _TurnTools())
                tools.announced.append(call_id)
        else:
            if context.replay is not None and call_id not in statuses:
                # a replay may update a call the client saw announced live
                known = self._statuses.get(context.session_id, {}).get(call_id)
                if known is not None:
                    statuses[call_id] = known
            if self._update_names_a_call(registry_key, call_id, where, index) and status:
                self._status_change(call_id, statuses[call_id], status, where, index)
                statuses[call_id] = str(status)
        if status in ("in_progress", *FINAL_STATUSES) and context.turn is not None:
            self._tools.setdefault(context.turn.request_key, _TurnTools()).ran.add(call_id)

    def _update_names_a_call(self, registry_key: str, call_id: Any, where: str, index: int) -> bool:
        """TOOL-002: an update names a tool call announced earlier; whether it does."""
        if not isinstance(call_id, str):
            return False
        if call_id in self._statuses.get(registry_key, {}):
            self.ok("TOOL-002")
            return True
        self.violation(
            "TOOL-002",
            f"{where} names toolCallId {call_id!r}, which no earlier tool_call of the session "
            "announced (an update is to an existing tool call)",
            index,
        )
        # judged once: from here on the call is known
        self._statuses.setdefault(registry_key, {})[call_id] = "pending"
        return False

    def _status_change(
        self, call_id: str, before: str | None, after: Any, where: str, index: int
    ) -> None:
        """TOOL-003: a status never moves back (a final status never changes)."""
        if before is None or not isinstance(after, str) or after not in STATUS_ORDER:
            return
        backwards = STATUS_ORDER[after] < STATUS_ORDER.get(before, 0)
        if backwards or (before in FINAL_STATUSES and after != before):
            self.violation(
                "TOOL-003",
                f"{where} moves tool call {call_id!r} from {before} back to {after} "
                "(statuses progress pending, in_progress, then completed or failed)",
                index,
            )
        else:
            self.ok("TOOL-003")

    def _plan(self, stream: str, update: dict[str, Any], index: int) -> None:
        """TURN-004: complete, well-formed entries; an entry that vanishes and comes back
        within one turn (any number of updates later)."""
        entries = update.get("entries")
        if not isinstance(entries, list) or not all(
            isinstance(e, dict) and {"content", "priority", "status"} <= e.keys() for e in entries
        ):
            self.violation(
                "TURN-004",
                "plan update is not a complete list of entries with content, priority and status",
                index,
            )
            return
        contents = [str(e.get("content")) for e in entries]
        plans = self._plans.setdefault(stream, _Plans())
        if plans.last is not None:
            back = [c for c in contents if c in plans.earlier and c not in plans.last]
            if back:
                self.violation(
                    "TURN-004",
                    f"plan entry {back[0]!r} was left out of an earlier plan update of this turn "
                    "and is back in this one: an update that left it out was not the complete "
                    "list",
                    index,
                )
            else:
                self.ok("TURN-004")
            plans.earlier.update(plans.last)
        else:
            self.ok("TURN-004")
        plans.last = set(contents)

    def _usage(self, update: dict[str, Any], index: int) -> None:
        """TURN-006: used and size are required, non-null token counts; a cost has both parts."""
        problems = [
            k
            for k in ("used", "size")
            if not (isinstance(update.get(k), int) and not isinstance(update.get(k), bool))
            or update[k] < 0
        ]
        cost = update.get("cost")
        if cost is not None and not (
            isinstance(cost, dict) and "amount" in cost and isinstance(cost.get("currency"), str)
        ):
            problems.append("cost (amount and currency)")
        if problems:
            self.violation(
                "TURN-006",
                f"usage_update lacks valid {', '.join(problems)}: {describe(update)}",
                index,
            )
        else:
            self.ok("TURN-006")

    def _message_id(self, stream: str, kind: str, message_id: Any, index: int) -> None:
        """TURN-005 (live) / SESSION-008 (a replay): one messageId per message."""
        ids = self._message_ids.setdefault(stream, _MessageIds())
        if not isinstance(message_id, str):
            # a chunk of another kind starts another message; one of the same kind without
            # an id may be part of the current one (neither another id nor another kind)
            if ids.last is not None and ids.kinds.get(ids.last) != kind:
                ids.last = None
            return
        rule_id = "SESSION-008" if stream.startswith("replay-") else "TURN-005"
        during = " during a session/load replay" if rule_id == "SESSION-008" else ""
        previous = ids.kinds.get(message_id)
        if previous is not None and previous != kind:
            self.violation(
                rule_id,
                f"messageId {message_id!r} used by {previous} and then by {kind}{during}",
                index,
            )
        elif previous is not None and ids.last != message_id:
            self.violation(
                rule_id,
                f"messageId {message_id!r} reappears after another message started{during}",
                index,
            )
        else:
            self.ok(rule_id)
        ids.kinds[message_id] = kind
        ids.last = message_id

    # -- the end of a turn -----------------------------------------------------------------

    def response(self, context: AnswerContext, index: int) -> None:
        turn = context.turn
        if context.method != "session/prompt" or turn is None:
            return
        tools = self._tools.pop(context.key, _TurnTools())
        result = context.result
        if not isinstance(result, dict):
            return
        stop = result.get("stopReason")
        if isinstance(stop, str):
            self.ok("TURN-001")
        else:
            self.violation(
                "TURN-001",
                f"session/prompt for session {turn.session_id} was answered without a "
                f"stopReason: {describe(result)}",
                index,
            )
        self._stop_reason(turn.session_id, turn.cancelled_by_client, turn.soft_cancel, stop, index)
        if stop == "cancelled" or turn.cancelled_by_client:
            return
        statuses = self._statuses.get(turn.session_id, {})
        if stop == "end_turn":
            self._allowed_ran(tools, index)
        unfinished = sorted(
            {c for c in tools.announced if statuses.get(c, "pending") not in FINAL_STATUSES}
        )
        if unfinished:
            self.violation(
                "TURN-003",
                f"turn ended ({stop}) with tool calls not completed/failed: "
                f"{', '.join(unfinished)}",
                index,
            )
        elif tools.announced:
            self.ok("TURN-003")

    def _stop_reason(
        self, session_id: str, cancelled: bool, soft: bool, stop: Any, index: int
    ) -> None:
        """TURN-007: stopReason cancelled only answers a turn the client cancelled."""
        if stop != "cancelled":
            return
        if cancelled:
            self.ok("TURN-007")
        elif soft or self.judge.stdin_closed:
            self.judge.note(
                "turn ended cancelled after the client refused a permission or an elicitation, "
                "or closed stdin, without session/cancel (TURN-007 not judged)"
            )
        else:
            self.violation(
                "TURN-007",
                f"session/prompt for session {session_id} answered stopReason cancelled, but "
                "the client sent no session/cancel or session/close",
                index,
            )

    def _allowed_ran(self, tools: _TurnTools, index: int) -> None:
        """TOOL-001: each allowed tool call was reported in_progress, completed or failed."""
        for call_id in sorted(tools.granted):
            if call_id in tools.ran:
                self.ok("TOOL-001")
            else:
                self.violation(
                    "TOOL-001",
                    f"tool call {call_id!r} was allowed (session/request_permission answered with "
                    "an allow option) but no update marked it in_progress, completed or failed "
                    "before the turn ended",
                    index,
                )
