"""
The content checks: what the agent sends, judged against the session, turn and client-service
rules, whenever it sends it.

`SessionChecks` is owned by an `acpkit.conformance.observer.Observer`, which classifies each
line (framing, envelope, ids) and calls:

- `SessionChecks.request_sent` / `SessionChecks.notification_sent` for what the client sends
  (a ``session/prompt`` opens a turn, a ``session/load`` opens a replay, ``session/cancel``
  marks the turn cancelled);
- `SessionChecks.client_answered` for the client's answers to the agent's requests (terminals
  created, permissions granted);
- `SessionChecks.agent_message` for every request and notification of the agent;
- `SessionChecks.response` for every answer of the agent to one of the client's requests.

State is kept per session and per turn (turns are keyed by their request id, so a turn that
outlived the step timeout stays open until its answer arrives), and ``messageId`` uniqueness
is tracked per stream: the live stream of a session, and each ``session/load`` replay (which
may repeat the ids the client saw live).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from acpkit.conformance.observer import Observer, Pending

__all__ = ["SessionChecks", "form_schema_problem"]

#: Session updates that belong to a prompt turn (or a session/load replay).
TURN_UPDATES = frozenset(
    {"agent_message_chunk", "agent_thought_chunk", "tool_call", "tool_call_update", "plan"}
)
REPLAY_KINDS = TURN_UPDATES | {"user_message_chunk"}
_REPLAY_UPDATES = REPLAY_KINDS
_CHUNK_UPDATES = frozenset({"user_message_chunk", "agent_message_chunk", "agent_thought_chunk"})
_TERMINAL_STATUSES = frozenset({"completed", "failed"})
_PRIMITIVE_TYPES = frozenset({"string", "number", "integer", "boolean"})
_TERMINAL_USES = frozenset(
    {"terminal/output", "terminal/wait_for_exit", "terminal/kill", "terminal/release"}
)


def form_schema_problem(requested: Any) -> str | None:
    """
    ``None`` when ``requested`` is a flat object schema of primitive properties (string,
    number, integer, boolean, or an array of string options) whose ``required`` names are
    among its properties; else what is wrong with it (ELICIT-001).
    """
    if not isinstance(requested, dict):
        return f"requestedSchema is {type(requested).__name__}, not an object schema"
    if requested.get("type", "object") != "object":
        return f"requestedSchema has type {requested.get('type')!r}, not 'object'"
    properties = requested.get("properties", {})
    if not isinstance(properties, dict):
        return "requestedSchema.properties is not an object"
    for name, prop in properties.items():
        kind = prop.get("type") if isinstance(prop, dict) else None
        if kind in _PRIMITIVE_TYPES:
            continue
        if kind == "array":
            items = prop.get("items")
            if isinstance(items, dict) and (
                items.get("type") == "string" or "enum" in items or "anyOf" in items
            ):
                continue
            return f"requestedSchema.properties.{name} is an array whose items are not strings"
        return f"requestedSchema.properties.{name} has type {kind!r}, not a primitive type"
    required = requested.get("required")
    if required is not None:
        if not isinstance(required, list):
            return "requestedSchema.required is not a list"
        missing = [r for r in required if r not in properties]
        if missing:
            return f"requestedSchema.required names unknown properties {missing!r}"
    return None


@attrs.define
class Turn:
    """Bookkeeping for one open prompt turn."""

    session_id: str
    request_key: str
    tool_calls: dict[str, str] = attrs.field(factory=dict)
    cancel_sent: bool = False
    updates: int = 0


@attrs.define
class Terminal:
    """A terminal the client created for the agent."""

    session_id: str | None
    turn_key: str | None
    released: bool = False


@attrs.define
class Replay:
    """One ``session/load`` replay in progress."""

    request_key: str
    stream: str
    updates: list[dict[str, Any]] = attrs.field(factory=list)


@attrs.define
class MessageIds:
    """``messageId`` use within one stream (live turns of a session, or one replay)."""

    kinds: dict[str, str] = attrs.field(factory=dict)
    last: str | None = None


@attrs.define
class Session:
    """What the client knows of one session."""

    cwd: str | None
    turns_ended: int = 0
    #: the request key of the last turn that ended with a result, while no turn is open
    ended_turn: str | None = None


class SessionChecks:
    """See the module docstring."""

    def __init__(self, observer: Observer) -> None:
        self.observer = observer
        self.sessions: dict[str, Session] = {}
        self.session_ids: set[str] = set()
        self.turns: dict[str, Turn] = {}
        self.open_turns: dict[str, list[str]] = {}
        self.replays: dict[str, Replay] = {}
        self.finished_replays: dict[str, list[Replay]] = {}
        self.replay_count = 0
        self.message_ids: dict[str, MessageIds] = {}
        self.terminals: dict[str, Terminal] = {}
        self.url_elicitations: set[str] = set()
        self._new_session_cwd: dict[str, str | None] = {}
        #: sessions loaded since their last prompt: conversation updates now come too late
        self.loaded: set[str] = set()

    # -- shorthands ----------------------------------------------------------------------

    def _violation(self, rule_id: str, message: str, index: int | None = None) -> None:
        self.observer.violation(rule_id, message, index)

    def _ok(self, rule_id: str) -> None:
        self.observer.verdicts.ok(rule_id)

    def _cap(self, *path: str) -> Any:
        value: Any = self.observer.client_capabilities
        for part in path:
            if not isinstance(value, dict):
                return None
            value = value.get(part)
        return value

    def turn_of(self, session_id: str) -> Turn | None:
        """The most recent open turn of a session."""
        keys = self.open_turns.get(session_id)
        return self.turns[keys[-1]] if keys else None

    @property
    def replayed(self) -> dict[str, int]:
        """Per session, the number of replayed updates of its last completed load."""
        return {
            session: len(replays[-1].updates) for session, replays in self.finished_replays.items()
        }

    # -- what the client sends -----------------------------------------------------------

    def request_sent(self, key: str, method: str, params: Any) -> None:
        """A request of the client (valid envelope)."""
        p = params if isinstance(params, dict) else {}
        session_id = p.get("sessionId")
        if method == "session/new":
            cwd = p.get("cwd")
            self._new_session_cwd[key] = cwd if isinstance(cwd, str) else None
        elif method == "session/prompt" and isinstance(session_id, str):
            self.loaded.discard(session_id)
            self.turns[key] = Turn(session_id, key)
            self.open_turns.setdefault(session_id, []).append(key)
            session = self.sessions.get(session_id)
            if session is not None:
                session.ended_turn = None
        elif method == "session/load" and isinstance(session_id, str):
            self.replay_count += 1
            self.replays[session_id] = Replay(key, f"replay-{self.replay_count}:{session_id}")

    def notification_sent(self, method: str, params: Any) -> None:
        """A notification of the client."""
        if method == "session/cancel" and isinstance(params, dict):
            session_id = params.get("sessionId")
            for key in self.open_turns.get(str(session_id), []):
                self.turns[key].cancel_sent = True

    def client_answered(self, request: dict[str, Any], response: dict[str, Any]) -> None:
        """The client answered one of the agent's requests: learn the terminals it created."""
        if request.get("method") != "terminal/create":
            return
        result = response.get("result")
        params = request.get("params")
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        if isinstance(result, dict) and isinstance(result.get("terminalId"), str):
            turn = self.turn_of(str(session_id))
            self.terminals[result["terminalId"]] = Terminal(
                session_id if isinstance(session_id, str) else None,
                turn.request_key if turn is not None else None,
            )

    # -- what the agent sends ------------------------------------------------------------

    def agent_message(self, method: str, params: Any, is_request: bool, index: int) -> None:
        """A request or notification of the agent."""
        self._check_capability(method, params, index)
        if method in _TERMINAL_USES:
            self._terminal_use(method, params, index)
        elif method == "elicitation/create":
            self._elicitation(params, index)
        elif method == "elicitation/complete":
            self._elicitation_complete(params, index)
        if method == "session/update" and isinstance(params, dict):
            self._session_update(params, index)

    def _check_capability(self, method: str, params: Any, index: int) -> None:
        if method.startswith("fs/"):
            flag = {"fs/read_text_file": "readTextFile", "fs/write_text_file": "writeTextFile"}
            needed = flag.get(method)
            if needed is None or self._cap("fs", needed) is not True:
                self._violation(
                    "CAP-001",
                    f"agent called {method} but clientCapabilities.fs.{needed or '?'} "
                    "was not advertised",
                    index,
                )
            else:
                self._ok("CAP-001")
        elif method.startswith("terminal/"):
            if self._cap("terminal") is not True:
                self._violation(
                    "CAP-002",
                    f"agent called {method} but clientCapabilities.terminal was not advertised",
                    index,
                )
            else:
                self._ok("CAP-002")
        elif method.startswith("elicitation/"):
            mode = params.get("mode") if isinstance(params, dict) else None
            advertised = self._cap("elicitation")
            if not isinstance(advertised, dict) or (
                isinstance(mode, str) and advertised.get(mode) is None
            ):
                self._violation(
                    "CAP-003",
                    f"agent called {method} (mode {mode!r}) but clientCapabilities.elicitation"
                    f"{'.' + mode if isinstance(mode, str) else ''} was not advertised",
                    index,
                )
            else:
                self._ok("CAP-003")

    def _terminal_use(self, method: str, params: Any, index: int) -> None:
        terminal_id = params.get("terminalId") if isinstance(params, dict) else None
        terminal = self.terminals.get(terminal_id) if isinstance(terminal_id, str) else None
        if terminal is None:
            self._violation(
                "TERMINAL-001",
                f"{method} for terminal {terminal_id!r}, which the client never created",
                index,
            )
        elif terminal.released:
            self._violation(
                "TERMINAL-001", f"{method} for terminal {terminal_id!r} after its release", index
            )
        else:
            self._ok("TERMINAL-001")
            if method == "terminal/release":
                terminal.released = True

    def _elicitation(self, params: Any, index: int) -> None:
        if not isinstance(params, dict):
            return
        mode = params.get("mode")
        if mode == "form":
            problem = form_schema_problem(params.get("requestedSchema"))
        elif mode == "url":
            elicitation_id = params.get("elicitationId")
            url = params.get("url")
            if not isinstance(elicitation_id, str) or not isinstance(url, str) or ":" not in url:
                problem = f"url elicitation needs an elicitationId and a url, got {params!r}"[:300]
            else:
                problem = None
                self.url_elicitations.add(elicitation_id)
        else:
            return  # a custom or future mode: CAP-003 and the schema judge it
        if problem is None:
            self._ok("ELICIT-001")
        else:
            self._violation("ELICIT-001", f"elicitation/create ({mode}): {problem}", index)

    def _elicitation_complete(self, params: Any, index: int) -> None:
        elicitation_id = params.get("elicitationId") if isinstance(params, dict) else None
        if isinstance(elicitation_id, str) and elicitation_id in self.url_elicitations:
            self._ok("ELICIT-002")
        else:
            self._violation(
                "ELICIT-002",
                f"elicitation/complete for {elicitation_id!r}, which no url-mode "
                "elicitation/create started",
                index,
            )

    def _notice_or_compaction(self, kind: str, update: dict[str, Any], index: int) -> None:
        if kind == "notice":
            title = update.get("title")
            severity = update.get("severity")
            if isinstance(severity, str) and isinstance(title, str) and title:
                self._ok("NOTICE-001")
            else:
                self._violation(
                    "NOTICE-001",
                    f"notice needs a severity and a non-empty title, got severity={severity!r} "
                    f"title={title!r}",
                    index,
                )
            return
        compaction_id = update.get("compactionId")
        if kind == "compaction_update":
            good = isinstance(compaction_id, str) and isinstance(update.get("status"), str)
            needs = "compactionId and status"
        else:
            good = isinstance(compaction_id, str) and isinstance(update.get("content"), dict)
            needs = "compactionId and one content block"
        if good:
            self._ok("NOTICE-002")
        else:
            self._violation("NOTICE-002", f"{kind} needs {needs}", index)

    def _session_update(self, params: dict[str, Any], index: int) -> None:
        session_id = params.get("sessionId")
        update = params.get("update")
        if not isinstance(session_id, str) or not isinstance(update, dict):
            return
        kind = update.get("sessionUpdate")
        if kind == "notice" or (isinstance(kind, str) and kind.startswith("compaction_")):
            capability = "notices" if kind == "notice" else "compaction"
            if self._cap("session", capability) is None:
                self._violation(
                    "CAP-004",
                    f"session/update {kind} sent but clientCapabilities.session.{capability} "
                    "was not advertised",
                    index,
                )
            else:
                self._ok("CAP-004")
                if kind in ("notice", "compaction_update", "compaction_summary_chunk"):
                    self._notice_or_compaction(kind, update, index)
        turn = self.turn_of(session_id)
        replay = self.replays.get(session_id)
        if replay is not None and kind in _REPLAY_UPDATES:
            replay.updates.append(update)
            stream = replay.stream
        elif session_id in self.loaded and kind in REPLAY_KINDS:
            stream = f"late-replay:{session_id}"
            self._violation(
                "SESSION-004",
                f"session/update {kind} for session {session_id} arrived after the response to "
                "its session/load (the replay must come before the response)",
                index,
            )
        else:
            stream = f"live:{session_id}"
            if kind in TURN_UPDATES:
                self._outside_turn(session_id, kind, turn, index)
                if turn is not None:
                    turn.updates += 1
        if turn is not None and replay is None:
            self._tool_call(turn, kind, update, index)
        if kind == "plan":
            self._plan(update, index)
        elif kind == "usage_update":
            missing = [k for k in ("used", "size") if update.get(k) is None]
            if missing:
                self._violation(
                    "TURN-006", f"usage_update lacks required {', '.join(missing)}", index
                )
            else:
                self._ok("TURN-006")
        if kind in _CHUNK_UPDATES:
            self._message_id(stream, str(kind), update.get("messageId"), index)

    def _outside_turn(self, session_id: str, kind: Any, turn: Turn | None, index: int) -> None:
        """TURN-002: turn content after the turn's response, before the next prompt."""
        if turn is not None:
            self._ok("TURN-002")
            return
        session = self.sessions.get(session_id)
        if session is not None and session.ended_turn is not None:
            self._violation(
                "TURN-002",
                f"session/update {kind} for session {session_id} arrived after the response "
                "to its last session/prompt, before any new prompt",
                index,
            )

    def _tool_call(self, turn: Turn, kind: Any, update: dict[str, Any], index: int) -> None:
        if kind == "tool_call":
            call_id = str(update.get("toolCallId"))
            if call_id in turn.tool_calls:
                self._violation(
                    "TURN-003", f"tool_call reuses toolCallId {call_id!r} in the same turn", index
                )
            else:
                self._ok("TURN-003")
            turn.tool_calls[call_id] = str(update.get("status") or "pending")
        elif kind == "tool_call_update":
            call_id = str(update.get("toolCallId"))
            status = update.get("status")
            if call_id not in turn.tool_calls:
                turn.tool_calls[call_id] = str(status or "pending")
            elif status:
                turn.tool_calls[call_id] = str(status)

    def _plan(self, update: dict[str, Any], index: int) -> None:
        entries = update.get("entries")
        if not isinstance(entries, list) or not all(
            isinstance(e, dict) and {"content", "priority", "status"} <= e.keys() for e in entries
        ):
            self._violation(
                "TURN-004",
                "plan update is not a complete list of entries with content, priority and status",
                index,
            )
        else:
            self._ok("TURN-004")

    def _message_id(self, stream: str, kind: str, message_id: Any, index: int) -> None:
        ids = self.message_ids.setdefault(stream, MessageIds())
        if not isinstance(message_id, str):
            ids.last = None
            return
        previous = ids.kinds.get(message_id)
        if previous is not None and previous != kind:
            self._violation(
                "TURN-005",
                f"messageId {message_id!r} used by {previous} and then by {kind}",
                index,
            )
        elif previous is not None and ids.last != message_id:
            self._violation(
                "TURN-005",
                f"messageId {message_id!r} reappears after another message started",
                index,
            )
        else:
            self._ok("TURN-005")
        ids.kinds[message_id] = kind
        ids.last = message_id

    # -- the agent's answers ---------------------------------------------------------------

    def response(self, pending: Pending, key: str, message: dict[str, Any], index: int) -> None:
        """The agent answered one of the client's requests."""
        result = message.get("result")
        session_id = pending.session_id
        if pending.method == "session/new":
            cwd = self._new_session_cwd.pop(key, None)
            new_id = result.get("sessionId") if isinstance(result, dict) else None
            if isinstance(new_id, str):
                if new_id in self.session_ids:
                    self._violation(
                        "SESSION-001", f"session/new returned the used sessionId {new_id!r}", index
                    )
                else:
                    self._ok("SESSION-001")
                    self.session_ids.add(new_id)
                    self.sessions[new_id] = Session(cwd)
        elif pending.method == "session/load" and isinstance(session_id, str):
            replay = self.replays.pop(session_id, None)
            if replay is not None and "result" in message:
                self.finished_replays.setdefault(session_id, []).append(replay)
                self.loaded.add(session_id)
                if replay.updates:
                    self._ok("SESSION-004")
        elif pending.method == "session/prompt" and isinstance(session_id, str):
            self._turn_ended(key, session_id, result, index)

    def _turn_ended(self, key: str, session_id: str, result: Any, index: int) -> None:
        turn = self.turns.pop(key, None)
        if turn is None:
            return
        keys = self.open_turns.get(session_id, [])
        if key in keys:
            keys.remove(key)
        if not isinstance(result, dict):
            return
        session = self.sessions.setdefault(session_id, Session(None))
        session.turns_ended += 1
        if not keys:
            session.ended_turn = key
        self._terminals_released(turn.request_key, index)
        stop = result.get("stopReason")
        if stop == "cancelled":
            return
        unfinished = sorted(
            call for call, status in turn.tool_calls.items() if status not in _TERMINAL_STATUSES
        )
        if unfinished:
            self._violation(
                "TURN-003",
                f"turn ended ({stop}) with tool calls not completed/failed: "
                f"{', '.join(unfinished)}",
                index,
            )
        elif turn.tool_calls:
            self._ok("TURN-003")

    def _terminals_released(self, turn_key: str, index: int) -> None:
        created = {
            terminal_id: terminal
            for terminal_id, terminal in self.terminals.items()
            if terminal.turn_key == turn_key
        }
        live = sorted(t for t, terminal in created.items() if not terminal.released)
        if live:
            self._violation(
                "TERMINAL-002",
                f"turn ended with terminals never released: {', '.join(live)}",
                index,
            )
        elif created:
            self._ok("TERMINAL-002")


def describe(value: Any, limit: int = 160) -> str:
    """A short JSON rendering of ``value`` for finding messages."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "..."
