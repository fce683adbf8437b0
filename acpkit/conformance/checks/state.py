"""
The shared bookkeeping of the conversation the checks judge: sessions, prompt turns (keyed
by their request id, so a turn that outlived the step timeout stays open until its answer
arrives) and ``session/load`` replays. No rule is judged here.

`Conversation` is told every event before the families are; for a ``session/update`` and
for each answer of the agent it returns the event in context (`UpdateContext`,
`AnswerContext`): the open turn, the replay in progress, the turn an answer ended.
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import unquote, urlsplit

import attrs

from acpkit.conformance.checks.base import PendingRequest, is_absolute, strings_under

__all__ = [
    "REPLAY_KINDS",
    "TURN_UPDATES",
    "AnswerContext",
    "Conversation",
    "Replay",
    "Session",
    "Turn",
    "UpdateContext",
    "allowed_tool_call",
    "prompt_paths",
]

#: Session updates that belong to a prompt turn (or a session/load replay).
TURN_UPDATES = frozenset(
    {"agent_message_chunk", "agent_thought_chunk", "tool_call", "tool_call_update", "plan"}
)
#: What a session/load replay carries: the turns' updates and the user's messages.
REPLAY_KINDS = TURN_UPDATES | {"user_message_chunk"}


@attrs.define
class Turn:
    """One prompt turn, open or ended."""

    session_id: str
    request_key: str
    #: the kinds of the turn's live session updates, in order
    kinds: list[str] = attrs.field(factory=list)
    cancel_sent: bool = False
    #: when the first session/cancel for the turn was sent (``time.monotonic()``)
    cancel_at: float | None = None
    #: the client closed the session, or sent $/cancel_request for this prompt
    closed: bool = False
    cancel_request: bool = False
    #: the client answered a permission / elicitation with reject, cancel, decline or an error
    soft_cancel: bool = False
    #: file paths the prompt itself named (resource links, resources)
    prompt_paths: set[str] = attrs.field(factory=set)

    @property
    def cancelled_by_client(self) -> bool:
        """session/cancel, session/close or $/cancel_request was sent during the turn."""
        return self.cancel_sent or self.closed or self.cancel_request


@attrs.define
class Replay:
    """One ``session/load`` replay, in progress or finished."""

    request_key: str
    stream: str
    updates: list[dict[str, Any]] = attrs.field(factory=list)


@attrs.define
class Session:
    """What the client knows of one session."""

    cwd: str | None
    #: cwd and additionalDirectories (absolute ones only)
    roots: list[str] = attrs.field(factory=list)
    turns_ended: int = 0
    #: the request key of the last turn that ended with a result, while no turn is open
    ended_turn: str | None = None


@attrs.frozen
class UpdateContext:
    """A ``session/update`` of the agent, in context."""

    session_id: str
    kind: str | None
    update: dict[str, Any]
    #: the session's most recent open turn when the update arrived
    turn: Turn | None
    #: the session/load replay it belongs to
    replay: Replay | None
    #: the messageId stream: ``live:S``, ``replay-N:S`` or ``late-replay:S``
    stream: str
    #: a conversation update after a finished load's response, outside any turn
    late_replay: bool = False


@attrs.frozen
class AnswerContext:
    """An answer of the agent to one of the client's requests, in context."""

    pending: PendingRequest
    key: str
    message: dict[str, Any]
    #: the params of the session/new, load or resume it answers
    setup: dict[str, Any] | None = None
    #: the prompt turn this answer ended
    turn: Turn | None = None
    #: the session/load replay this answer ended
    replay: Replay | None = None
    #: session/new answered with a session id an earlier session/new returned
    duplicate_session: bool = False

    @property
    def result(self) -> Any:
        """The result (``None`` for an error)."""
        return self.message.get("result")

    @property
    def method(self) -> str:
        """The method of the request answered."""
        return self.pending.method


def allowed_tool_call(params: dict[str, Any], result: Any) -> str | None:
    """The toolCallId a session/request_permission answer allowed (an allow option was
    selected), or ``None`` (rejected, cancelled, an error)."""
    outcome = result.get("outcome") if isinstance(result, dict) else None
    if not isinstance(outcome, dict) or outcome.get("outcome") != "selected":
        return None
    kinds = {
        o.get("optionId"): str(o.get("kind", ""))
        for o in params.get("options") or []
        if isinstance(o, dict)
    }
    tool = params.get("toolCall")
    call_id = tool.get("toolCallId") if isinstance(tool, dict) else None
    if kinds.get(outcome.get("optionId"), "").startswith("allow") and isinstance(call_id, str):
        return call_id
    return None


def prompt_paths(prompt: Any) -> set[str]:
    """The file paths a prompt names (file: URIs of resource links and resources)."""
    paths = set()
    for uri in strings_under(prompt, frozenset({"uri"})):
        if uri.startswith("file://"):
            paths.add(unquote(urlsplit(uri).path))
    return paths


class Conversation:
    """See the module docstring."""

    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}
        #: the session ids session/new returned
        self.created: set[str] = set()
        self.turns: dict[str, Turn] = {}
        self.ended_turns: dict[str, Turn] = {}
        self.open_turns: dict[str, list[str]] = {}
        self.replays: dict[str, Replay] = {}
        self.finished_replays: dict[str, list[Replay]] = {}
        self.replay_count = 0
        #: sessions loaded since their last prompt: conversation updates now come too late
        self.loaded: set[str] = set()
        #: session id -> request key of a session/resume not answered yet
        self.resuming: dict[str, str] = {}
        #: per session, the file paths its prompts named (not judged by SESSION-010)
        self.prompt_paths: dict[str, set[str]] = {}
        #: the directory the agent was spawned in, when it is not the session cwd
        self.spawn_dir: str | None = None
        self._setup: dict[str, dict[str, Any]] = {}

    def turn_of(self, session_id: str) -> Turn | None:
        """The most recent open turn of a session."""
        keys = self.open_turns.get(session_id)
        return self.turns[keys[-1]] if keys else None

    def session(self, session_id: str) -> Session:
        """The session's record (made on first use: an agent may name one we never made)."""
        return self.sessions.setdefault(session_id, Session(None))

    # -- what the client sends -----------------------------------------------------------

    def request_sent(self, key: str, method: str, params: dict[str, Any]) -> None:
        """A request of the client (valid envelope)."""
        session_id = params.get("sessionId")
        if method in ("session/new", "session/load", "session/resume"):
            self._setup[key] = params
        if method == "session/prompt" and isinstance(session_id, str):
            self.loaded.discard(session_id)
            turn = Turn(session_id, key, prompt_paths=prompt_paths(params.get("prompt")))
            self.turns[key] = turn
            self.open_turns.setdefault(session_id, []).append(key)
            self.prompt_paths.setdefault(session_id, set()).update(turn.prompt_paths)
            session = self.sessions.get(session_id)
            if session is not None:
                session.ended_turn = None
        elif method == "session/load" and isinstance(session_id, str):
            self.replay_count += 1
            self.replays[session_id] = Replay(key, f"replay-{self.replay_count}:{session_id}")
        elif method == "session/resume" and isinstance(session_id, str):
            self.resuming[session_id] = key
        elif method == "session/close" and isinstance(session_id, str):
            for turn_key in self.open_turns.get(session_id, []):
                self.turns[turn_key].closed = True

    def notification_sent(self, method: str, params: dict[str, Any]) -> None:
        """A notification of the client: a cancel marks the turns it cancels."""
        if method == "session/cancel":
            for key in self.open_turns.get(str(params.get("sessionId")), []):
                turn = self.turns[key]
                turn.cancel_sent = True
                if turn.cancel_at is None:
                    turn.cancel_at = time.monotonic()
        elif method == "$/cancel_request":
            target = self.turns.get(json.dumps(params.get("requestId"), sort_keys=True))
            if target is not None:
                target.cancel_request = True

    def client_answered(self, request: dict[str, Any], response: dict[str, Any]) -> None:
        """The client answered a permission (allowed or not) or an elicitation."""
        params = request.get("params")
        if not isinstance(params, dict):
            return
        session_id = params.get("sessionId")
        turn = self.turn_of(session_id) if isinstance(session_id, str) else None
        if turn is None:
            return
        result = response.get("result")
        method = request.get("method")
        if method == "session/request_permission":
            if allowed_tool_call(params, result) is None:
                turn.soft_cancel = True
        elif method == "elicitation/create":
            if not (isinstance(result, dict) and result.get("action") == "accept"):
                turn.soft_cancel = True

    # -- what the agent sends ------------------------------------------------------------

    def update(self, params: dict[str, Any]) -> UpdateContext | None:
        """A ``session/update`` in context (``None`` when it names no session or update)."""
        session_id = params.get("sessionId")
        update = params.get("update")
        if not isinstance(session_id, str) or not isinstance(update, dict):
            return None
        raw_kind = update.get("sessionUpdate")
        kind = raw_kind if isinstance(raw_kind, str) else None
        turn = self.turn_of(session_id)
        replay = self.replays.get(session_id)
        late = False
        if replay is not None and kind in REPLAY_KINDS:
            replay.updates.append(update)
            stream = replay.stream
        elif session_id in self.loaded and kind in REPLAY_KINDS and turn is None:
            stream, late = f"late-replay:{session_id}", True
            finished = self.finished_replays.get(session_id)
            if finished:  # late, but part of the replay: SESSION-005 judges its content
                finished[-1].updates.append(update)
        else:
            stream = f"live:{session_id}"
            replay = None
            if kind in TURN_UPDATES and turn is not None:
                turn.kinds.append(kind)
        return UpdateContext(session_id, kind, update, turn, replay, stream, late)

    # -- the agent's answers -------------------------------------------------------------

    def response(self, pending: PendingRequest, key: str, message: dict[str, Any]) -> AnswerContext:
        """An answer of the agent in context; the bookkeeping follows it."""
        setup = self._setup.pop(key, None)
        session_id = pending.session_id
        result = message.get("result")
        context = AnswerContext(pending, key, message, setup)
        if pending.method == "session/new" and isinstance(result, dict):
            new_id = result.get("sessionId")
            if isinstance(new_id, str):
                duplicate = new_id in self.created
                context = attrs.evolve(context, duplicate_session=duplicate)
                if not duplicate:
                    self.created.add(new_id)
                    cwd = setup.get("cwd") if setup is not None else None
                    self.sessions[new_id] = Session(cwd if isinstance(cwd, str) else None)
                self._roots(new_id, setup)
        elif pending.method in ("session/load", "session/resume") and isinstance(session_id, str):
            if isinstance(result, dict):
                self._roots(session_id, setup)
            if pending.method == "session/resume" and self.resuming.get(session_id) == key:
                del self.resuming[session_id]
        if pending.method == "session/load" and isinstance(session_id, str):
            replay = self.replays.pop(session_id, None)
            if replay is not None and "result" in message:
                self.finished_replays.setdefault(session_id, []).append(replay)
                self.loaded.add(session_id)
                context = attrs.evolve(context, replay=replay)
        elif pending.method == "session/prompt" and isinstance(session_id, str):
            turn = self._turn_ended(key, session_id, message)
            context = attrs.evolve(context, turn=turn)
        return context

    def _roots(self, session_id: str, setup: dict[str, Any] | None) -> None:
        if setup is None:
            return
        session = self.session(session_id)
        roots = [setup.get("cwd"), *(setup.get("additionalDirectories") or [])]
        session.roots = [r for r in roots if isinstance(r, str) and is_absolute(r)]
        if session.cwd is None and isinstance(setup.get("cwd"), str):
            session.cwd = setup["cwd"]

    def _turn_ended(self, key: str, session_id: str, message: dict[str, Any]) -> Turn | None:
        turn = self.turns.pop(key, None)
        if turn is None:
            return None
        self.ended_turns[key] = turn
        keys = self.open_turns.get(session_id, [])
        if key in keys:
            keys.remove(key)
        if isinstance(message.get("result"), dict):
            session = self.session(session_id)
            session.turns_ended += 1
            if not keys:
                session.ended_turn = key
        return turn

    def turn_kinds(self, request_key: str) -> list[str]:
        """The kinds of the live updates of the turn of ``request_key`` (open or ended)."""
        turn = self.turns.get(request_key) or self.ended_turns.get(request_key)
        return list(turn.kinds) if turn is not None else []
