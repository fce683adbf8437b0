"""
Sessions: their ids, load and resume replays, session metadata, modes and config options.

- SESSION-001: a session/new result whose sessionId an earlier session/new returned
- SESSION-004: a replayed update (user / agent message, tool call, plan) after the load's
  response
- SESSION-006: a history update between a session/resume and its response
- LIST-004: a session_info_update carrying sessionId, cwd or additionalDirectories
- MODE-002: a modes object or current_mode_update naming a mode not available
- CONFIG-001, 002, 007: every config option list (results and config_option_update)
- CONFIG-003: a set_config_option result: the complete list, with the value set
- CONFIG-004: a config_option_update missing options while no value changed
- CONFIG-005: a session result with modes but no mode option, or the reverse
- CONFIG-006: a session result, and the first turn after a mode or option change

SESSION-005 (the replay's content), LIST-001..003, DELETE, MODE-001 and the stimuli of the
rules above are probes (`acpkit.conformance.probes_session`).
"""

from __future__ import annotations

from typing import Any

import attrs

from acpkit.conformance.checks.base import Family, select_values
from acpkit.conformance.checks.state import AnswerContext, UpdateContext

__all__ = ["SessionChecks"]

#: The categories the spec defines (custom ones start with _).
SPEC_CATEGORIES = frozenset({"mode", "model", "model_config", "thought_level"})
#: Session updates that carry conversation history (SESSION-006: not replayed on resume).
HISTORY_UPDATES = frozenset(
    {
        "user_message_chunk",
        "agent_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
    }
)


@attrs.define
class _Modes:
    """A session's modes and config options, as last announced."""

    #: the mode ids of the last modes object, and the current mode id
    mode_ids: list[str] | None = None
    current_mode: str | None = None
    #: the last complete config option list, by id
    config: dict[str, dict[str, Any]] | None = None
    #: a set_mode / set_config_option / mode or config update changed the state: the next
    #: turn that starts afterwards judges CONFIG-006 when it ends
    dirty: bool = False
    judge_turn: str | None = None


class SessionChecks(Family):
    """See the module docstring."""

    rules = (
        "SESSION-001",
        "SESSION-004",
        "SESSION-006",
        "LIST-004",
        "MODE-002",
        "CONFIG-001",
        "CONFIG-002",
        "CONFIG-003",
        "CONFIG-004",
        "CONFIG-005",
        "CONFIG-006",
        "CONFIG-007",
    )

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._modes: dict[str, _Modes] = {}

    def _of(self, session_id: str) -> _Modes:
        return self._modes.setdefault(session_id, _Modes())

    # -- the client ------------------------------------------------------------------------

    def request_sent(self, key: str, method: str, params: dict[str, Any]) -> None:
        session_id = params.get("sessionId")
        if method == "session/prompt" and isinstance(session_id, str):
            modes = self._modes.get(session_id)
            if modes is not None and modes.dirty:
                modes.dirty = False
                modes.judge_turn = key

    # -- the agent's updates ---------------------------------------------------------------

    def session_update(self, context: UpdateContext, index: int) -> None:
        session_id, kind, update = context.session_id, context.kind, context.update
        if context.late_replay:
            self.violation(
                "SESSION-004",
                f"session/update {kind} for session {session_id} arrived after the response to "
                "its session/load (the replay must come before the response)",
                index,
            )
        if kind == "session_info_update":
            present = [k for k in ("sessionId", "cwd", "additionalDirectories") if k in update]
            if present:
                self.violation(
                    "LIST-004",
                    f"session_info_update for session {session_id} carries "
                    f"{', '.join(present)} (not included in the update)",
                    index,
                )
            else:
                self.ok("LIST-004")
        elif kind == "current_mode_update":
            modes = self._of(session_id)
            mode = update.get("currentModeId")
            if modes.mode_ids is not None:
                if mode in modes.mode_ids:
                    self.ok("MODE-002")
                else:
                    self.violation(
                        "MODE-002",
                        f"current_mode_update names currentModeId {mode!r}, not one of the "
                        f"session's availableModes {modes.mode_ids}",
                        index,
                    )
            if isinstance(mode, str):
                modes.current_mode = mode
                modes.dirty = True
        elif kind == "config_option_update":
            options = update.get("configOptions")
            if isinstance(options, list):
                modes = self._of(session_id)
                self._config_list(modes, options, "config_option_update", index, update=True)
                modes.dirty = True
        if (
            session_id in self.state.resuming
            and kind in HISTORY_UPDATES
            and not self.state.open_turns.get(session_id)
        ):
            self.violation(
                "SESSION-006",
                f"session/update {kind} for session {session_id} arrived before the "
                "session/resume response (resume must not replay the history)",
                index,
            )
            del self.state.resuming[session_id]

    # -- the agent's answers ---------------------------------------------------------------

    def response(self, context: AnswerContext, index: int) -> None:
        method, result = context.method, context.result
        session_id = context.pending.session_id
        if method == "session/new" and isinstance(result, dict):
            new_id = result.get("sessionId")
            if isinstance(new_id, str):
                if context.duplicate_session:
                    self.violation(
                        "SESSION-001", f"session/new returned the used sessionId {new_id!r}", index
                    )
                else:
                    self.ok("SESSION-001")
                self._session_result(new_id, result, "session/new", index)
        elif method in ("session/load", "session/resume") and isinstance(session_id, str):
            if isinstance(result, dict):
                self._session_result(session_id, result, method, index)
                if method == "session/resume" and session_id not in self.state.resuming:
                    self.ok("SESSION-006")
            if context.replay is not None and context.replay.updates:
                self.ok("SESSION-004")
        elif method == "session/set_mode" and isinstance(session_id, str):
            params = context.pending.params
            mode = params.get("modeId") if isinstance(params, dict) else None
            if isinstance(result, dict) and isinstance(mode, str):
                modes = self._of(session_id)
                modes.current_mode = mode
                modes.dirty = True
        elif method == "session/set_config_option" and isinstance(session_id, str):
            if isinstance(result, dict):
                modes = self._of(session_id)
                self._config_set(modes, context.pending.params, result, index)
                modes.dirty = True
        elif method == "session/prompt" and isinstance(session_id, str):
            known = self._modes.get(session_id)
            if known is not None and known.judge_turn == context.key:
                known.judge_turn = None
                self._mode_sync(
                    session_id, known, "at the end of the first turn after it changed", index
                )

    def _session_result(
        self, session_id: str, result: dict[str, Any], where: str, index: int
    ) -> None:
        """A session/new, load or resume result: modes and config options."""
        modes = self._of(session_id)
        state = result.get("modes")
        options = result.get("configOptions")
        if isinstance(state, dict):
            ids = [m.get("id") for m in state.get("availableModes") or [] if isinstance(m, dict)]
            current = state.get("currentModeId")
            modes.mode_ids = [i for i in ids if isinstance(i, str)]
            modes.current_mode = current if isinstance(current, str) else None
            if current in ids:
                self.ok("MODE-002")
            else:
                self.violation(
                    "MODE-002",
                    f"{where} result modes.currentModeId {current!r} is not one of its "
                    f"availableModes {ids}",
                    index,
                )
        if isinstance(options, list):
            self._config_list(modes, options, f"{where} result", index)
        has_modes = isinstance(state, dict) and bool(state.get("availableModes"))
        mode_ids = set(modes.mode_ids or ()) if has_modes else set()
        # the same configuration sent both ways: an option of category mode, or (under a
        # more precise category, e.g. thought_level) an option whose values are the mode ids
        mode_option = isinstance(options, list) and any(
            isinstance(o, dict)
            and (
                o.get("category") == "mode"
                or (bool(mode_ids) and set(map(str, select_values(o))) == mode_ids)
            )
            for o in options
        )
        if mode_option and not has_modes:
            self.violation(
                "CONFIG-005",
                f"{where} result has a config option of category mode but no modes (the older "
                "API clients fall back to)",
                index,
            )
        elif has_modes and not mode_option:
            self.violation(
                "CONFIG-005",
                f"{where} result has modes but no configOptions entry for them (neither of "
                "category mode nor one whose values are the mode ids)",
                index,
            )
        elif has_modes:
            self.ok("CONFIG-005")
            self._mode_sync(session_id, modes, f"in the {where} result", index)

    def _config_list(
        self,
        modes: _Modes,
        options: list[Any],
        where: str,
        index: int,
        *,
        update: bool = False,
    ) -> None:
        """CONFIG-001 / 002 / 007 on each option, CONFIG-004 on an update."""
        for position, option in enumerate(options):
            if not isinstance(option, dict):
                continue
            here = f"{where} configOptions[{position}] (id {option.get('id')!r})"
            kind = option.get("type")
            if kind == "boolean":
                if self.capability("session", "configOptions", "boolean") is None:
                    self.violation(
                        "CONFIG-001",
                        f"{here} is a boolean option, but the client did not advertise "
                        "clientCapabilities.session.configOptions.boolean",
                        index,
                    )
                else:
                    self.ok("CONFIG-001")
            current = option.get("currentValue")
            if current is None:
                self.violation("CONFIG-002", f"{here} has no currentValue", index)
            elif kind == "select" and current not in (values := select_values(option)):
                self.violation(
                    "CONFIG-002",
                    f"{here} has currentValue {current!r}, not one of its values {values}",
                    index,
                )
            else:
                self.ok("CONFIG-002")
            category = option.get("category")
            if isinstance(category, str):
                if category in SPEC_CATEGORIES or category.startswith("_"):
                    self.ok("CONFIG-007")
                else:
                    self.violation(
                        "CONFIG-007",
                        f"{here} has category {category!r}: not a spec category, and custom "
                        "ones start with _",
                        index,
                    )
        new = {
            str(o["id"]): o for o in options if isinstance(o, dict) and isinstance(o.get("id"), str)
        }
        previous = modes.config
        if update and previous is not None:
            missing = sorted(set(previous) - set(new))
            changed = any(i not in previous for i in new) or any(
                new[i].get("currentValue") != previous[i].get("currentValue")
                for i in new
                if i in previous
            )
            if missing and not changed:
                self.violation(
                    "CONFIG-004",
                    f"config_option_update lacks option(s) {missing} of the last complete list "
                    "while no option's value changed (the update carries the complete state)",
                    index,
                )
            else:
                self.ok("CONFIG-004")
        modes.config = new

    def _config_set(self, modes: _Modes, params: Any, result: dict[str, Any], index: int) -> None:
        """CONFIG-003: a set_config_option result is the complete list, with the new value."""
        p = params if isinstance(params, dict) else {}
        config_id = p.get("configId")
        options = result.get("configOptions")
        if not isinstance(options, list):
            self.violation(
                "CONFIG-003",
                f"session/set_config_option ({config_id!r}) result has no configOptions list",
                index,
            )
            return
        chosen = next(
            (o for o in options if isinstance(o, dict) and o.get("id") == config_id), None
        )
        if chosen is None:
            self.violation(
                "CONFIG-003",
                f"session/set_config_option result lacks the option {config_id!r} just set "
                "(it must be the complete list)",
                index,
            )
        elif "value" in p and chosen.get("currentValue") != p.get("value"):
            self.violation(
                "CONFIG-003",
                f"session/set_config_option set {config_id!r} to {p.get('value')!r} but the "
                f"result shows currentValue {chosen.get('currentValue')!r}",
                index,
            )
        else:
            self.ok("CONFIG-003")
        self._config_list(modes, options, "session/set_config_option result", index)

    def _mode_sync(self, session_id: str, modes: _Modes, when: str, index: int) -> None:
        """CONFIG-006: modes.currentModeId equals the mode option's currentValue."""
        if modes.current_mode is None or modes.mode_ids is None or modes.config is None:
            return
        for option in modes.config.values():
            if option.get("category") != "mode" or option.get("type") != "select":
                continue
            if set(select_values(option)) != set(modes.mode_ids):
                continue  # not the same ids: the two cannot be compared
            current = option.get("currentValue")
            if current == modes.current_mode:
                self.ok("CONFIG-006")
            else:
                self.violation(
                    "CONFIG-006",
                    f"session {session_id} {when}: the current mode is "
                    f"{modes.current_mode!r} but the mode option {option.get('id')!r} has "
                    f"currentValue {current!r}",
                    index,
                )
