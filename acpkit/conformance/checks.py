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
import os
import re
import time
from collections.abc import Iterator, Mapping
from functools import cache
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

import attrs
from jsonschema import Draft202012Validator

from acpkit.testing.jsonschema import load_schema

if TYPE_CHECKING:
    from acpkit.conformance.observer import Observer, Pending

__all__ = ["CustomFields", "SessionChecks", "custom_fields", "form_schema_problem"]

#: Session updates that belong to a prompt turn (or a session/load replay).
TURN_UPDATES = frozenset(
    {"agent_message_chunk", "agent_thought_chunk", "tool_call", "tool_call_update", "plan"}
)
REPLAY_KINDS = TURN_UPDATES | {"user_message_chunk"}
_REPLAY_UPDATES = REPLAY_KINDS
_CHUNK_UPDATES = frozenset({"user_message_chunk", "agent_message_chunk", "agent_thought_chunk"})
_TERMINAL_STATUSES = frozenset({"completed", "failed"})
_RUNNING_STATUSES = frozenset({"in_progress", "completed", "failed"})
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


# -- custom fields (EXT-001) ---------------------------------------------------------------


@attrs.define
class _Collected:
    """What the schema says about one JSON object (or array): its keys and sub-schemas."""

    keys: set[str] = attrs.field(factory=set)
    sub: dict[str, list[Any]] = attrs.field(factory=dict)
    items: list[Any] = attrs.field(factory=list)
    #: additionalProperties / patternProperties allow any key
    open: bool = False


class CustomFields:
    """
    EXT-001: keys at the root of spec-typed objects that the type does not define.

    The value is walked together with its ``$defs`` definition: ``$ref`` is followed,
    ``allOf`` branches are merged, and of a ``oneOf`` / ``anyOf`` every branch the value is
    valid against is merged (a union: a key any matching branch defines is known). An object
    whose schema allows additional properties (``_meta``, maps) is not judged, nor one whose
    union no branch matches (SCHEMA-001 reports that), nor a schema without properties.
    """

    def __init__(self, stable: Mapping[str, Any], unstable: Mapping[str, Any]) -> None:
        self._roots = (stable["$defs"], unstable["$defs"])
        #: (schema, id(node)) -> (node, its validator); the node is kept so its id stays its own
        self._validators: dict[tuple[int, int], tuple[Any, Draft202012Validator]] = {}

    def _valid(self, which: int, node: Any, value: Any) -> bool:
        cache_key = (which, id(node))
        cached = self._validators.get(cache_key)
        if cached is None or cached[0] is not node:
            cached = (node, Draft202012Validator({**node, "$defs": self._roots[which]}))
            self._validators[cache_key] = cached
        return bool(cached[1].is_valid(value))

    def _resolve(self, which: int, node: Any) -> Any:
        for _ in range(20):
            if not isinstance(node, Mapping) or "$ref" not in node:
                return node
            ref = str(node["$ref"])
            if not ref.startswith("#/$defs/"):
                return None
            node = self._roots[which].get(ref.removeprefix("#/$defs/"))
        return None

    def _collect(self, which: int, node: Any, value: Any, out: _Collected, depth: int) -> bool:
        if depth > 30:
            return False
        if isinstance(node, Mapping) and "$ref" in node and len(node) > 1:
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return self._collect(which, {"$ref": node["$ref"]}, value, out, depth + 1) and (
                self._collect(which, rest, value, out, depth + 1)
            )
        node = self._resolve(which, node)
        if not isinstance(node, Mapping):
            return node is not None
        properties = node.get("properties")
        if isinstance(properties, Mapping):
            out.keys |= set(properties)
            for name, sub in properties.items():
                out.sub.setdefault(name, []).append(sub)
        extra = node.get("additionalProperties")
        if (extra is not None and extra is not False) or "patternProperties" in node:
            out.open = True
        if "items" in node:
            out.items.append(node["items"])
        for branch in node.get("allOf", ()):
            if not self._collect(which, branch, value, out, depth + 1):
                return False
        for combinator in ("oneOf", "anyOf"):
            branches = node.get(combinator)
            if not branches:
                continue
            valid = [b for b in branches if self._valid(which, b, value)]
            if not valid:
                return False
            for branch in valid:
                if not self._collect(which, branch, value, out, depth + 1):
                    return False
        return True

    def _walk(
        self,
        which: int,
        node: Any,
        value: Any,
        path: str,
        found: tuple[set[str], set[str]],
        depth: int = 0,
    ) -> None:
        extras, unknown = found
        if depth > 40 or not isinstance(value, dict | list):
            return
        info = _Collected()
        if not self._collect(which, node, value, info, 0):
            unknown.add(path)
            return
        if isinstance(value, list):
            for position, element in enumerate(value):
                for item in info.items:
                    self._walk(which, item, element, f"{path}[{position}]", found, depth + 1)
            return
        if info.keys and not info.open:
            extras.update(f"{path}.{k}" for k in value if k not in info.keys and k != "_meta")
        for name, child in value.items():
            if name == "_meta":
                continue
            for sub in info.sub.get(name, ()):
                self._walk(which, sub, child, f"{path}.{name}", found, depth + 1)

    def problems(self, definition: str, value: Any, where: str) -> tuple[list[str], list[str]]:
        """
        The paths (``where.key``) of custom keys in ``value`` typed by ``$defs[definition]``:
        the violations, and the keys only ``schema.unstable.json`` defines.
        """
        stable: tuple[set[str], set[str]] = (set(), set())
        self._walk(0, {"$ref": f"#/$defs/{definition}"}, value, where, stable)
        if not stable[0]:
            return [], []
        unstable: tuple[set[str], set[str]] = (set(), set())
        if definition in self._roots[1]:
            self._walk(1, {"$ref": f"#/$defs/{definition}"}, value, where, unstable)
        # a key the unstable walk did not call custom is known there (or could not be judged
        # there, behind a branch only the unstable schema has): not a violation
        return sorted(stable[0] & unstable[0]), sorted(stable[0] - unstable[0])


@cache
def custom_fields() -> CustomFields:
    """One `CustomFields` for the vendored schemas."""
    return CustomFields(load_schema(), load_schema(unstable=True))


@cache
def _known_methods() -> frozenset[str]:
    methods = set()
    for schema in (load_schema(), load_schema(unstable=True)):
        for definition in schema["$defs"].values():
            method = definition.get("x-method")
            if isinstance(method, str):
                methods.add(method)
    return frozenset(methods)


# -- small predicates ------------------------------------------------------------------------

_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?")
_URL_IN_TEXT = re.compile(r"https?://\S", re.IGNORECASE)
_SECRET_PARAMETERS = frozenset(
    {
        "password",
        "passwd",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "api_key",
        "apikey",
        "api-key",
        "secret",
        "client_secret",
    }
)
_TEXT_KEYS = frozenset({"title", "description"})
_SPEC_CATEGORIES = frozenset({"mode", "model", "model_config", "thought_level"})
#: After a session/cancel, what the agent sends within this many seconds may have been on its
#: way before it read the cancel (same margin as `acpkit.conformance.harness.CANCEL_RACE`).
CANCEL_RACE = 1.0
#: Session updates that carry conversation history (SESSION-006: not replayed on resume).
_HISTORY_UPDATES = frozenset(
    {
        "user_message_chunk",
        "agent_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
    }
)


def is_absolute(path: str) -> bool:
    """An absolute path (POSIX, or a Windows drive / UNC path: agents run anywhere)."""
    return (
        path.startswith("/") or bool(re.match(r"[A-Za-z]:[\\/]", path)) or path.startswith("\\\\")
    )


def _forms(path: str) -> set[str]:
    normal = os.path.normpath(path)
    return {normal, os.path.realpath(normal)}


def is_within(path: str, roots: Iterator[str] | list[str]) -> bool:
    """``path`` is one of ``roots`` or below one (normalised and symlink-resolved forms)."""
    forms = _forms(path)
    for root in roots:
        for base in _forms(root):
            for candidate in forms:
                if candidate == base or candidate.startswith(base.rstrip(os.sep) + os.sep):
                    return True
    return False


def _strings_under(value: Any, keys: frozenset[str]) -> Iterator[str]:
    """Every string value of a key in ``keys``, anywhere in ``value``."""
    if isinstance(value, dict):
        for name, child in value.items():
            if name in keys and isinstance(child, str):
                yield child
            else:
                yield from _strings_under(child, keys)
    elif isinstance(value, list):
        for child in value:
            yield from _strings_under(child, keys)


def _metas(value: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every ``_meta`` object in ``value``, with its path."""
    if isinstance(value, dict):
        for name, child in value.items():
            if name == "_meta" and isinstance(child, dict):
                yield f"{path}._meta", child
            else:
                yield from _metas(child, f"{path}.{name}")
    elif isinstance(value, list):
        for position, child in enumerate(value):
            yield from _metas(child, f"{path}[{position}]")


def _prompt_paths(prompt: Any) -> set[str]:
    """The file paths a prompt names (file: URIs of resource links and resources)."""
    paths = set()
    for uri in _strings_under(prompt, frozenset({"uri"})):
        if uri.startswith("file://"):
            paths.add(unquote(urlsplit(uri).path))
    return paths


def _select_values(option: Mapping[str, Any]) -> list[Any]:
    """The values of a select option, flattened across groups."""
    values: list[Any] = []
    for entry in option.get("options") or []:
        if not isinstance(entry, dict):
            continue
        if isinstance(entry.get("options"), list):
            values += [o.get("value") for o in entry["options"] if isinstance(o, dict)]
        elif "value" in entry:
            values.append(entry.get("value"))
    return values


def url_secret_problem(url: str) -> str | None:
    """ELICIT-005: credentials in a URL (a userinfo part, a secret-named parameter)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if "@" in parts.netloc:
        return "has a userinfo part (user:password@host)"
    for source in (parts.query, parts.fragment):
        for name, _ in parse_qsl(source, keep_blank_values=True):
            if name.lower() in _SECRET_PARAMETERS:
                return f"has a parameter named {name!r}"
    return None


def url_is_plain_http(url: str) -> bool:
    """ELICIT-006: an http:// URL to a host other than the loopback."""
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
    except ValueError:
        return False
    if parts.scheme.lower() != "http":
        return False
    loopback = host in ("localhost", "::1") or host.endswith(".localhost")
    return not (loopback or host.startswith("127."))


@attrs.define
class Turn:
    """Bookkeeping for one open prompt turn."""

    session_id: str
    request_key: str
    tool_calls: dict[str, str] = attrs.field(factory=dict)
    cancel_sent: bool = False
    #: the kinds of the turn's live session updates, in order
    kinds: list[str] = attrs.field(factory=list)
    #: when the first session/cancel for the turn was sent (``time.monotonic()``)
    cancel_at: float | None = None
    #: the client closed the session, or sent $/cancel_request for this prompt
    closed: bool = False
    cancel_request: bool = False
    #: the client answered a permission / elicitation with reject, cancel, decline or an error
    soft_cancel: bool = False
    #: tool calls the client allowed (session/request_permission), and those reported running
    granted: set[str] = attrs.field(factory=set)
    ran: set[str] = attrs.field(factory=set)
    #: file paths the prompt itself named (resource links, resources)
    prompt_paths: set[str] = attrs.field(factory=set)


@attrs.define
class Terminal:
    """A terminal the client created for the agent."""

    session_id: str | None
    turn_key: str | None
    released: bool = False
    killed: bool = False


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
    #: cwd and additionalDirectories (absolute ones only)
    roots: list[str] = attrs.field(factory=list)
    #: the mode ids of the last modes object, and the current mode id
    mode_ids: list[str] | None = None
    current_mode: str | None = None
    #: the last complete config option list, by id
    config: dict[str, dict[str, Any]] | None = None
    #: a set_mode / set_config_option / mode or config update changed the state: the next
    #: turn that starts afterwards judges CONFIG-006 when it ends
    dirty: bool = False
    judge_turn: str | None = None


class SessionChecks:
    """See the module docstring."""

    def __init__(self, observer: Observer) -> None:
        self.observer = observer
        self.sessions: dict[str, Session] = {}
        self.session_ids: set[str] = set()
        self.turns: dict[str, Turn] = {}
        self.ended_turns: dict[str, Turn] = {}
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
        #: the agent's initialize result (EXT-003 reads its capabilities' _meta)
        self.init_result: dict[str, Any] | None = None
        #: url-mode elicitationIds not completed, declined or ended with their turn yet, with
        #: the session whose turn started them
        self.outstanding_urls: dict[str, str | None] = {}
        #: session id -> request key of a session/resume not answered yet
        self.resuming: dict[str, str] = {}
        #: request key -> params of a session/new, load or resume not answered yet
        self._setup_params: dict[str, dict[str, Any]] = {}
        #: per session, the file paths its prompts named (not judged by SESSION-010)
        self.prompt_paths: dict[str, set[str]] = {}
        #: the directory the agent was spawned in, when it is not the session cwd (SESSION-009)
        self.spawn_dir: str | None = None
        self._cancel_flagged: set[str] = set()

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
        if method in ("session/new", "session/load", "session/resume"):
            self._setup_params[key] = p
        if method == "session/new":
            cwd = p.get("cwd")
            self._new_session_cwd[key] = cwd if isinstance(cwd, str) else None
        elif method == "session/prompt" and isinstance(session_id, str):
            self.loaded.discard(session_id)
            live = self.message_ids.get(f"live:{session_id}")
            if live is not None:
                live.last = None  # a new turn's messages are new messages
            self.turns[key] = Turn(session_id, key)
            self.open_turns.setdefault(session_id, []).append(key)
            self.prompt_paths.setdefault(session_id, set()).update(_prompt_paths(p.get("prompt")))
            session = self.sessions.get(session_id)
            if session is not None:
                session.ended_turn = None
                if session.dirty:
                    session.dirty = False
                    session.judge_turn = key
        elif method == "session/load" and isinstance(session_id, str):
            self.replay_count += 1
            self.replays[session_id] = Replay(key, f"replay-{self.replay_count}:{session_id}")
        elif method == "session/resume" and isinstance(session_id, str):
            self.resuming[session_id] = key
        elif method == "session/close" and isinstance(session_id, str):
            for turn_key in self.open_turns.get(session_id, []):
                self.turns[turn_key].closed = True

    def notification_sent(self, method: str, params: Any) -> None:
        """A notification of the client."""
        if method == "session/cancel" and isinstance(params, dict):
            session_id = params.get("sessionId")
            for key in self.open_turns.get(str(session_id), []):
                turn = self.turns[key]
                turn.cancel_sent = True
                if turn.cancel_at is None:
                    turn.cancel_at = time.monotonic()
        elif method == "$/cancel_request" and isinstance(params, dict):
            target = self.turns.get(json.dumps(params.get("requestId"), sort_keys=True))
            if target is not None:
                target.cancel_request = True

    def client_answered(self, request: dict[str, Any], response: dict[str, Any]) -> None:
        """
        The client answered one of the agent's requests: learn the terminals it created, the
        tool calls it allowed, and the permissions / elicitations it refused.
        """
        method = request.get("method")
        result = response.get("result")
        params = request.get("params")
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        turn = self.turn_of(session_id) if isinstance(session_id, str) else None
        if method == "session/request_permission" and isinstance(params, dict):
            self._permission_answered(turn, params, result)
            return
        if method == "elicitation/create" and isinstance(params, dict):
            action = result.get("action") if isinstance(result, dict) else None
            if action != "accept":
                if turn is not None:
                    turn.soft_cancel = True
                self.outstanding_urls.pop(str(params.get("elicitationId")), None)
            return
        if method != "terminal/create":
            return
        if isinstance(result, dict) and isinstance(result.get("terminalId"), str):
            turn = self.turn_of(str(session_id))
            self.terminals[result["terminalId"]] = Terminal(
                session_id if isinstance(session_id, str) else None,
                turn.request_key if turn is not None else None,
            )

    def _permission_answered(self, turn: Turn | None, params: dict[str, Any], result: Any) -> None:
        if turn is None:
            return
        outcome = result.get("outcome") if isinstance(result, dict) else None
        chosen = outcome.get("optionId") if isinstance(outcome, dict) else None
        kinds = {
            o.get("optionId"): str(o.get("kind", ""))
            for o in params.get("options") or []
            if isinstance(o, dict)
        }
        tool = params.get("toolCall")
        call_id = tool.get("toolCallId") if isinstance(tool, dict) else None
        selected = isinstance(outcome, dict) and outcome.get("outcome") == "selected"
        if selected and kinds.get(chosen, "").startswith("allow") and isinstance(call_id, str):
            if turn.tool_calls.get(call_id) not in _TERMINAL_STATUSES:
                turn.granted.add(call_id)
        else:
            turn.soft_cancel = True

    # -- what the agent sends ------------------------------------------------------------

    def agent_message(self, method: str, params: Any, is_request: bool, index: int) -> None:
        """A request or notification of the agent."""
        self._check_capability(method, params, index)
        self._traffic(method, params, is_request, index)
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
            elif method == "terminal/kill":
                terminal.killed = True

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
                if elicitation_id in self.outstanding_urls:
                    self._violation(
                        "ELICIT-003",
                        f"url elicitation/create reuses elicitationId {elicitation_id!r}, which "
                        "an earlier url elicitation still outstanding (not completed) has",
                        index,
                    )
                else:
                    self._ok("ELICIT-003")
                    session_id = params.get("sessionId")
                    turn = self.turn_of(session_id) if isinstance(session_id, str) else None
                    self.outstanding_urls[elicitation_id] = (
                        turn.request_key if turn is not None else None
                    )
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
            self.outstanding_urls.pop(elicitation_id, None)
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
        elif session_id in self.loaded and kind in REPLAY_KINDS and turn is None:
            stream = f"late-replay:{session_id}"
            finished = self.finished_replays.get(session_id)
            if finished:  # late, but part of the replay: SESSION-005 judges its content
                finished[-1].updates.append(update)
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
                    turn.kinds.append(str(kind))
        if turn is not None and replay is None:
            self._tool_call(turn, kind, update, index)
        self._update_traffic(session_id, kind, update, turn, replay is not None, index)
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
                if update.get("status") not in _TERMINAL_STATUSES:
                    self._after_cancel(turn, f"a new tool_call {call_id!r}", index)
            turn.tool_calls[call_id] = str(update.get("status") or "pending")
        elif kind == "tool_call_update":
            call_id = str(update.get("toolCallId"))
            status = update.get("status")
            if call_id not in turn.tool_calls:
                turn.tool_calls[call_id] = str(status or "pending")
            elif status:
                turn.tool_calls[call_id] = str(status)
        status = update.get("status")
        if kind in ("tool_call", "tool_call_update") and status in _RUNNING_STATUSES:
            turn.ran.add(str(update.get("toolCallId")))

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
        # in a session/load replay, the replayed messages' ids are SESSION-008's
        rule_id = "SESSION-008" if stream.startswith("replay-") else "TURN-005"
        during = " during a session/load replay" if rule_id == "SESSION-008" else ""
        previous = ids.kinds.get(message_id)
        if previous is not None and previous != kind:
            self._violation(
                rule_id,
                f"messageId {message_id!r} used by {previous} and then by {kind}{during}",
                index,
            )
        elif previous is not None and ids.last != message_id:
            self._violation(
                rule_id,
                f"messageId {message_id!r} reappears after another message started{during}",
                index,
            )
        else:
            self._ok(rule_id)
        ids.kinds[message_id] = kind
        ids.last = message_id

    # -- the agent's answers ---------------------------------------------------------------

    def response(self, pending: Pending, key: str, message: dict[str, Any], index: int) -> None:
        """The agent answered one of the client's requests."""
        result = message.get("result")
        session_id = pending.session_id
        setup = self._setup_params.pop(key, None)
        self._response_traffic(pending, message, index)
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
                self._session_result(new_id, setup, result, "session/new", index)
        elif pending.method in ("session/load", "session/resume") and isinstance(session_id, str):
            if isinstance(result, dict):
                self._session_result(session_id, setup, result, pending.method, index)
            if pending.method == "session/resume":
                if self.resuming.pop(session_id, None) == key and isinstance(result, dict):
                    self._ok("SESSION-006")
        if pending.method == "session/load" and isinstance(session_id, str):
            replay = self.replays.pop(session_id, None)
            if replay is not None and "result" in message:
                self.finished_replays.setdefault(session_id, []).append(replay)
                self.loaded.add(session_id)
                if replay.updates:
                    self._ok("SESSION-004")
        elif pending.method == "session/prompt" and isinstance(session_id, str):
            self._turn_ended(key, session_id, message, index)

    def turn_kinds(self, request_key: str) -> list[str]:
        """The kinds of the live updates of the turn of ``request_key`` (open or ended)."""
        turn = self.turns.get(request_key) or self.ended_turns.get(request_key)
        return list(turn.kinds) if turn is not None else []

    def _turn_ended(self, key: str, session_id: str, message: dict[str, Any], index: int) -> None:
        turn = self.turns.pop(key, None)
        if turn is None:
            return
        self.ended_turns[key] = turn
        keys = self.open_turns.get(session_id, [])
        if key in keys:
            keys.remove(key)
        result = message.get("result")
        self._cancel_outcome(turn, message, index)
        # a url elicitation started by this turn is no longer outstanding once the turn ended
        # (elicitation/complete is only a MAY)
        for elicitation_id, owner in list(self.outstanding_urls.items()):
            if owner == key:
                del self.outstanding_urls[elicitation_id]
        if not isinstance(result, dict):
            return
        session = self.sessions.setdefault(session_id, Session(None))
        session.turns_ended += 1
        if not keys:
            session.ended_turn = key
        self._terminals_released(turn.request_key, index)
        stop = result.get("stopReason")
        self._stop_reason(turn, stop, index)
        if session.judge_turn == key:
            session.judge_turn = None
            self._mode_sync(
                session_id, session, "at the end of the first turn after it changed", index
            )
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
        killed = [t for t, terminal in created.items() if terminal.killed]
        for terminal_id in killed:
            if terminal_id in live:
                self._violation(
                    "TERMINAL-005",
                    f"terminal {terminal_id!r} was killed (terminal/kill) but never released "
                    "by the end of the turn",
                    index,
                )
            else:
                self._ok("TERMINAL-005")
        if live:
            self._violation(
                "TERMINAL-002",
                f"turn ended with terminals never released: {', '.join(live)}",
                index,
            )
        elif created:
            self._ok("TERMINAL-002")

    # -- traffic rules on every message of the agent -------------------------------------

    def _traffic(self, method: str, params: Any, is_request: bool, index: int) -> None:
        """The rules judged on every request and notification of the agent."""
        p = params if isinstance(params, dict) else {}
        if is_request and self.observer.agent_requests:
            self._request_id(method, self.observer.agent_requests[-1].get("id"), index)
        self._method_name(method, index)
        validator = self.observer.validator
        definition = validator.definition_for("client", method, "params")
        if definition is None and method.startswith("$/"):
            definition = validator.definition_for("protocol", method, "params")
        self._custom(definition, params, f"{method} params", index)
        self._trace_context(params, f"{method} params", index)
        session_id = p.get("sessionId") if isinstance(p.get("sessionId"), str) else None
        if method in ("fs/read_text_file", "fs/write_text_file"):
            path = p.get("path")
            self._path(path, f"{method} params.path", index)
            if method == "fs/read_text_file":
                self._line(p.get("line"), f"{method} params.line", index)
            self._where(session_id, path, f"{method} params.path", index, boundary=True)
        elif method == "terminal/create":
            cwd = p.get("cwd")
            if isinstance(cwd, str):
                if is_absolute(cwd):
                    self._ok("TERMINAL-004")
                else:
                    self._violation(
                        "TERMINAL-004", f"terminal/create params.cwd {cwd!r} is not absolute", index
                    )
                self._where(session_id, cwd, "terminal/create params.cwd", index, boundary=True)
        elif method == "session/request_permission":
            tool = p.get("toolCall")
            if isinstance(tool, dict):
                where = "session/request_permission params.toolCall"
                self._tool_fields(session_id, tool, where, False, index)
        elif method == "elicitation/create":
            self._elicitation_content(p, index)
        if session_id is not None and method in (
            "session/request_permission",
            "terminal/create",
            "fs/write_text_file",
        ):
            turn = self.turn_of(session_id)
            if turn is not None:
                self._after_cancel(turn, f"a {method} request", index)

    def _request_id(self, method: str, request_id: Any, index: int) -> None:
        """RPC-011: the agent's request ids are not null and not fractional."""
        if request_id is None:
            self._violation("RPC-011", f"the agent's {method} request has id null", index)
        elif isinstance(request_id, float) and not request_id.is_integer():
            self._violation(
                "RPC-011", f"the agent's {method} request has the fractional id {request_id}", index
            )
        else:
            self._ok("RPC-011")

    def _method_name(self, method: str, index: int) -> None:
        """EXT-004 (methods outside the spec start with _) and EXT-003 (and are advertised)."""
        if method.startswith("_"):
            self._ok("EXT-004")
            if self.init_result is not None:
                caps = self.init_result.get("agentCapabilities")
                meta = caps.get("_meta") if isinstance(caps, dict) else None
                if meta is None:
                    self._violation(
                        "EXT-003",
                        f"the agent sent the extension method {method!r} but its initialize "
                        "result's agentCapabilities has no _meta advertising extensions",
                        index,
                    )
                else:
                    self._ok("EXT-003")
        elif method in _known_methods() or method.startswith("$/"):
            self._ok("EXT-004")
        else:
            self._violation(
                "EXT-004",
                f"the agent sent {method!r}, a method the ACP schema does not define, without "
                "the _ prefix of custom methods",
                index,
            )

    def _custom(self, definition: str | None, value: Any, where: str, index: int) -> None:
        """EXT-001: no custom keys at the root of spec-typed objects."""
        if definition is None or not isinstance(value, dict):
            return
        violations, unstable = custom_fields().problems(definition, value, where)
        if unstable:
            self.observer.note(
                f"{where}: key(s) {', '.join(unstable)} are defined only by the unstable "
                "schema (schema.unstable.json): not judged by EXT-001"
            )
        if violations:
            self._violation(
                "EXT-001",
                f"{where} has custom field(s) at the root of spec types: {', '.join(violations)} "
                "(not properties of their type; extensions belong in _meta)",
                index,
            )
        else:
            self._ok("EXT-001")

    def _trace_context(self, value: Any, where: str, index: int) -> None:
        """EXT-002: the W3C trace-context keys of every _meta object."""
        for path, meta in _metas(value, where):
            problems = []
            traceparent = meta.get("traceparent")
            if "traceparent" in meta and not (
                isinstance(traceparent, str) and _TRACEPARENT.fullmatch(traceparent)
            ):
                problems.append(f"traceparent={describe(traceparent, 80)}")
            for name in ("tracestate", "baggage"):
                if name in meta and not isinstance(meta[name], str):
                    problems.append(f"{name}={describe(meta[name], 80)}")
            if problems:
                self._violation(
                    "EXT-002",
                    f"{path} uses the W3C trace-context key(s) for something else: "
                    f"{', '.join(problems)} (traceparent must be 00-<32 hex>-<16 hex>-<2 hex>, "
                    "tracestate and baggage strings)",
                    index,
                )
            else:
                self._ok("EXT-002")

    def _path(self, path: Any, where: str, index: int) -> None:
        """PATH-001: a file path the agent sends is absolute."""
        if not isinstance(path, str):
            return
        if is_absolute(path):
            self._ok("PATH-001")
        else:
            self._violation("PATH-001", f"{where} is the relative path {path!r}", index)

    def _line(self, line: Any, where: str, index: int) -> None:
        """FS-001: line numbers are 1-based."""
        if not isinstance(line, int) or isinstance(line, bool):
            return
        if line >= 1:
            self._ok("FS-001")
        else:
            self._violation(
                "FS-001",
                f"{where} is {line}; line numbers are 1-based (the first line is 1)",
                index,
            )

    def _where(
        self, session_id: str | None, path: Any, where: str, index: int, *, boundary: bool
    ) -> None:
        """SESSION-009 (not the spawn directory) and SESSION-010 (within the session roots)."""
        if session_id is None or not isinstance(path, str) or not is_absolute(path):
            return
        session = self.sessions.get(session_id)
        if session is None or not session.roots:
            return
        inside = is_within(path, session.roots)
        if self.spawn_dir is not None:
            if not inside and is_within(path, [self.spawn_dir]):
                self._violation(
                    "SESSION-009",
                    f"{where} {path!r} is under the directory the agent was spawned in "
                    f"({self.spawn_dir}), not under the session's cwd {session.cwd!r}",
                    index,
                )
            else:
                self._ok("SESSION-009")
        if not boundary:
            return
        named = self.prompt_paths.get(session_id, set())
        if inside or (named and is_within(path, list(named))):
            self._ok("SESSION-010")
        else:
            self._violation(
                "SESSION-010",
                f"{where} {path!r} is outside the session's roots ({', '.join(session.roots)})",
                index,
            )

    def _tool_fields(
        self, session_id: str | None, body: dict[str, Any], where: str, replay: bool, index: int
    ) -> None:
        """A tool call's locations and content: PATH-001, FS-001, TERMINAL-003, SESSION-009/010."""
        locations = body.get("locations")
        for position, location in enumerate(locations if isinstance(locations, list) else []):
            if not isinstance(location, dict):
                continue
            here = f"{where}.locations[{position}]"
            self._path(location.get("path"), f"{here}.path", index)
            self._line(location.get("line"), f"{here}.line", index)
            self._where(session_id, location.get("path"), f"{here}.path", index, boundary=False)
        content = body.get("content")
        for position, item in enumerate(content if isinstance(content, list) else []):
            if not isinstance(item, dict):
                continue
            here = f"{where}.content[{position}]"
            if item.get("type") == "diff":
                path = item.get("path")
                self._path(path, f"{here}.path (diff)", index)
                self._where(session_id, path, f"{here}.path (diff)", index, boundary=True)
            elif item.get("type") == "terminal" and not replay:
                self._embedded_terminal(item.get("terminalId"), here, index)

    def _embedded_terminal(self, terminal_id: Any, where: str, index: int) -> None:
        """TERMINAL-003: a terminal is embedded only while it is live."""
        terminal = self.terminals.get(terminal_id) if isinstance(terminal_id, str) else None
        if terminal is None:
            self._violation(
                "TERMINAL-003",
                f"{where} embeds terminal {terminal_id!r}, which the client never created",
                index,
            )
        elif terminal.released:
            self._violation(
                "TERMINAL-003",
                f"{where} embeds terminal {terminal_id!r} after the agent's terminal/release "
                "for it",
                index,
            )
        else:
            self._ok("TERMINAL-003")

    def _elicitation_content(self, params: dict[str, Any], index: int) -> None:
        """ELICIT-004 (form: no clickable URL), ELICIT-005 / 006 (url: no secrets, HTTPS)."""
        mode = params.get("mode")
        if mode == "form":
            texts = [params.get("message")]
            texts += list(_strings_under(params.get("requestedSchema"), _TEXT_KEYS))
            found = [t for t in texts if isinstance(t, str) and _URL_IN_TEXT.search(t)]
            if found:
                self._violation(
                    "ELICIT-004",
                    f"form-mode elicitation/create has a URL in its text: {describe(found[0])}",
                    index,
                )
            else:
                self._ok("ELICIT-004")
        elif mode == "url" and isinstance(params.get("url"), str):
            url = str(params["url"])
            problem = url_secret_problem(url)
            if problem is not None:
                self._violation(
                    "ELICIT-005", f"url-mode elicitation/create url {url!r} {problem}", index
                )
            else:
                self._ok("ELICIT-005")
            if url_is_plain_http(url):
                self._violation(
                    "ELICIT-006",
                    f"url-mode elicitation/create url {url!r} is plain http to a host other "
                    "than the loopback",
                    index,
                )
            else:
                self._ok("ELICIT-006")

    def _after_cancel(self, turn: Turn, what: str, index: int) -> None:
        """CANCEL-004: no new tool work once the cancel has had time to arrive."""
        if turn.cancel_at is None or time.monotonic() - turn.cancel_at <= CANCEL_RACE:
            return
        self._cancel_flagged.add(turn.request_key)
        self._violation(
            "CANCEL-004",
            f"{time.monotonic() - turn.cancel_at:.1f}s after session/cancel for session "
            f"{turn.session_id}, the agent started new tool work: {what}",
            index,
        )

    def _update_traffic(
        self,
        session_id: str,
        kind: Any,
        update: dict[str, Any],
        turn: Turn | None,
        replay: bool,
        index: int,
    ) -> None:
        """The traffic rules on one session/update."""
        if kind in ("tool_call", "tool_call_update"):
            self._tool_fields(session_id, update, f"session/update {kind}", replay, index)
        elif kind == "session_info_update":
            present = [k for k in ("sessionId", "cwd", "additionalDirectories") if k in update]
            if present:
                self._violation(
                    "LIST-004",
                    f"session_info_update for session {session_id} carries "
                    f"{', '.join(present)} (not included in the update)",
                    index,
                )
            else:
                self._ok("LIST-004")
        elif kind == "current_mode_update":
            session = self.sessions.setdefault(session_id, Session(None))
            mode = update.get("currentModeId")
            if session.mode_ids is not None:
                if mode in session.mode_ids:
                    self._ok("MODE-002")
                else:
                    self._violation(
                        "MODE-002",
                        f"current_mode_update names currentModeId {mode!r}, not one of the "
                        f"session's availableModes {session.mode_ids}",
                        index,
                    )
            if isinstance(mode, str):
                session.current_mode = mode
                session.dirty = True
        elif kind == "config_option_update":
            options = update.get("configOptions")
            if isinstance(options, list):
                session = self.sessions.setdefault(session_id, Session(None))
                self._config_list(session, options, "config_option_update", index, update=True)
                session.dirty = True
        if (
            session_id in self.resuming
            and kind in _HISTORY_UPDATES
            and not self.open_turns.get(session_id)
        ):
            self._violation(
                "SESSION-006",
                f"session/update {kind} for session {session_id} arrived before the "
                "session/resume response (resume must not replay the history)",
                index,
            )
            self.resuming.pop(session_id, None)

    # -- traffic rules on the agent's answers ---------------------------------------------

    def _response_traffic(self, pending: Pending, message: dict[str, Any], index: int) -> None:
        """The rules judged on every answer of the agent."""
        method = pending.method
        error = message.get("error")
        if "error" in message:
            text = error.get("message") if isinstance(error, dict) else None
            if isinstance(text, str):
                if not text.strip() or "\n" in text.strip() or len(text) > 300:
                    shown = describe(text, 120)
                    self._violation(
                        "RPC-012",
                        f"the error answering {method} has the message {shown} ({len(text)} "
                        "characters): not one concise sentence (details belong in error.data)",
                        index,
                    )
                else:
                    self._ok("RPC-012")
            code = error.get("code") if isinstance(error, dict) else None
            if code == -32601 and (
                method == "session/new"
                or (method == "session/prompt" and pending.session_id in self.session_ids)
            ):
                self._violation(
                    "INIT-005", f"{method} was answered -32601 (method not found)", index
                )
            return
        if method in ("session/new", "session/prompt"):
            self._ok("INIT-005")
        result = message.get("result")
        definition = self.observer.validator.definition_for("agent", method, "result")
        self._custom(definition, result, f"{method} result", index)
        self._trace_context(result, f"{method} result", index)
        if not isinstance(result, dict):
            return
        if method == "initialize":
            self._initialize_result(result, index)
        elif method == "session/list":
            sessions = result.get("sessions")
            for position, info in enumerate(sessions if isinstance(sessions, list) else []):
                if not isinstance(info, dict):
                    continue
                here = f"session/list result.sessions[{position}]"
                self._path(info.get("cwd"), f"{here}.cwd", index)
                extra = info.get("additionalDirectories")
                for number, directory in enumerate(extra if isinstance(extra, list) else []):
                    self._path(directory, f"{here}.additionalDirectories[{number}]", index)
        elif method == "session/set_mode" and isinstance(pending.session_id, str):
            mode = pending.params.get("modeId") if isinstance(pending.params, dict) else None
            session = self.sessions.setdefault(pending.session_id, Session(None))
            if isinstance(mode, str):
                session.current_mode = mode
                session.dirty = True
        elif method == "session/set_config_option" and isinstance(pending.session_id, str):
            session = self.sessions.setdefault(pending.session_id, Session(None))
            self._config_set(session, pending.params, result, index)
            session.dirty = True

    def _initialize_result(self, result: dict[str, Any], index: int) -> None:
        """AUTH-001 on the initialize result (kept for EXT-003)."""
        self.init_result = result
        methods = result.get("authMethods")
        terminal_methods = [
            m.get("id")
            for m in (methods if isinstance(methods, list) else [])
            if isinstance(m, dict) and m.get("type") == "terminal"
        ]
        if terminal_methods and self._cap("auth", "terminal") is not True:
            self._violation(
                "AUTH-001",
                f"the initialize result advertises terminal auth method(s) {terminal_methods} "
                "but the client did not set clientCapabilities.auth.terminal",
                index,
            )
        else:
            self._ok("AUTH-001")

    def judge_initialize(self, result: dict[str, Any], index: int | None = None) -> None:
        """
        INIT-003, INIT-004 and MCP-001 on an initialize result (called by the probes for
        every agent they start, so that a unit observer fed a bare result is not judged).
        """
        info = result.get("agentInfo")
        if not isinstance(info, dict):
            self._violation("INIT-003", "the initialize result has no agentInfo", index)
        else:
            missing = [k for k in ("name", "version") if not isinstance(info.get(k), str)]
            if missing:
                self._violation(
                    "INIT-003",
                    f"the initialize result's agentInfo lacks {' and '.join(missing)}: "
                    f"{describe(info)}",
                    index,
                )
            else:
                self._ok("INIT-003")
        caps = result.get("agentCapabilities")
        if not isinstance(caps, dict):
            self._violation(
                "INIT-004",
                f"the initialize result has no agentCapabilities object (got {describe(caps)})",
                index,
            )
            return
        self._ok("INIT-004")
        mcp = caps.get("mcpCapabilities")
        http = mcp.get("http") if isinstance(mcp, dict) else None
        if http is True:
            self._ok("MCP-001")
        else:
            self._violation(
                "MCP-001",
                "the initialize result's agentCapabilities.mcpCapabilities.http is "
                f"{'absent' if http is None else describe(http)}: MCP over HTTP not supported",
                index,
            )

    # -- modes and config options ----------------------------------------------------------

    def _session_result(
        self,
        session_id: str,
        setup: dict[str, Any] | None,
        result: Any,
        where: str,
        index: int,
    ) -> None:
        """A session/new, load or resume result: roots, modes and config options."""
        if not isinstance(result, dict):
            return
        session = self.sessions.setdefault(session_id, Session(None))
        if setup is not None:
            roots = [setup.get("cwd"), *(setup.get("additionalDirectories") or [])]
            session.roots = [r for r in roots if isinstance(r, str) and is_absolute(r)]
            if session.cwd is None and isinstance(setup.get("cwd"), str):
                session.cwd = setup["cwd"]
        modes = result.get("modes")
        options = result.get("configOptions")
        if isinstance(modes, dict):
            ids = [m.get("id") for m in modes.get("availableModes") or [] if isinstance(m, dict)]
            current = modes.get("currentModeId")
            session.mode_ids = [i for i in ids if isinstance(i, str)]
            session.current_mode = current if isinstance(current, str) else None
            if current in ids:
                self._ok("MODE-002")
            else:
                self._violation(
                    "MODE-002",
                    f"{where} result modes.currentModeId {current!r} is not one of its "
                    f"availableModes {ids}",
                    index,
                )
        if isinstance(options, list):
            self._config_list(session, options, f"{where} result", index)
        has_modes = isinstance(modes, dict) and bool(modes.get("availableModes"))
        mode_ids = set(session.mode_ids or ()) if has_modes else set()
        # the same configuration sent both ways: an option of category mode, or (under a
        # more precise category, e.g. thought_level) an option whose values are the mode ids
        mode_option = isinstance(options, list) and any(
            isinstance(o, dict)
            and (
                o.get("category") == "mode"
                or (bool(mode_ids) and set(map(str, _select_values(o))) == mode_ids)
            )
            for o in options
        )
        if mode_option and not has_modes:
            self._violation(
                "CONFIG-005",
                f"{where} result has a config option of category mode but no modes (the older "
                "API clients fall back to)",
                index,
            )
        elif has_modes and not mode_option:
            self._violation(
                "CONFIG-005",
                f"{where} result has modes but no configOptions entry for them (neither of "
                "category mode nor one whose values are the mode ids)",
                index,
            )
        elif has_modes:
            self._ok("CONFIG-005")
            self._mode_sync(session_id, session, f"in the {where} result", index)

    def _config_list(
        self,
        session: Session,
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
                if self._cap("session", "configOptions", "boolean") is None:
                    self._violation(
                        "CONFIG-001",
                        f"{here} is a boolean option, but the client did not advertise "
                        "clientCapabilities.session.configOptions.boolean",
                        index,
                    )
                else:
                    self._ok("CONFIG-001")
            current = option.get("currentValue")
            if current is None:
                self._violation("CONFIG-002", f"{here} has no currentValue", index)
            elif kind == "select" and current not in (values := _select_values(option)):
                self._violation(
                    "CONFIG-002",
                    f"{here} has currentValue {current!r}, not one of its values {values}",
                    index,
                )
            else:
                self._ok("CONFIG-002")
            category = option.get("category")
            if isinstance(category, str):
                if category in _SPEC_CATEGORIES or category.startswith("_"):
                    self._ok("CONFIG-007")
                else:
                    self._violation(
                        "CONFIG-007",
                        f"{here} has category {category!r}: not a spec category, and custom "
                        "ones start with _",
                        index,
                    )
        new = {
            str(o["id"]): o for o in options if isinstance(o, dict) and isinstance(o.get("id"), str)
        }
        previous = session.config
        if update and previous is not None:
            missing = sorted(set(previous) - set(new))
            changed = any(i not in previous for i in new) or any(
                new[i].get("currentValue") != previous[i].get("currentValue")
                for i in new
                if i in previous
            )
            if missing and not changed:
                self._violation(
                    "CONFIG-004",
                    f"config_option_update lacks option(s) {missing} of the last complete list "
                    "while no option's value changed (the update carries the complete state)",
                    index,
                )
            else:
                self._ok("CONFIG-004")
        session.config = new

    def _config_set(
        self, session: Session, params: Any, result: dict[str, Any], index: int
    ) -> None:
        """CONFIG-003: a set_config_option result is the complete list, with the new value."""
        p = params if isinstance(params, dict) else {}
        config_id = p.get("configId")
        options = result.get("configOptions")
        if not isinstance(options, list):
            self._violation(
                "CONFIG-003",
                f"session/set_config_option ({config_id!r}) result has no configOptions list",
                index,
            )
            return
        chosen = next(
            (o for o in options if isinstance(o, dict) and o.get("id") == config_id), None
        )
        if chosen is None:
            self._violation(
                "CONFIG-003",
                f"session/set_config_option result lacks the option {config_id!r} just set "
                "(it must be the complete list)",
                index,
            )
        elif "value" in p and chosen.get("currentValue") != p.get("value"):
            self._violation(
                "CONFIG-003",
                f"session/set_config_option set {config_id!r} to {p.get('value')!r} but the "
                f"result shows currentValue {chosen.get('currentValue')!r}",
                index,
            )
        else:
            self._ok("CONFIG-003")
        self._config_list(session, options, "session/set_config_option result", index)

    def _mode_sync(self, session_id: str, session: Session, when: str, index: int) -> None:
        """CONFIG-006: modes.currentModeId equals the mode option's currentValue."""
        if session.current_mode is None or session.mode_ids is None or session.config is None:
            return
        for option in session.config.values():
            if option.get("category") != "mode" or option.get("type") != "select":
                continue
            values = _select_values(option)
            if set(values) != set(session.mode_ids):
                continue  # not the same ids: the two cannot be compared
            current = option.get("currentValue")
            if current == session.current_mode:
                self._ok("CONFIG-006")
            else:
                self._violation(
                    "CONFIG-006",
                    f"session {session_id} {when}: the current mode is "
                    f"{session.current_mode!r} but the mode option {option.get('id')!r} has "
                    f"currentValue {current!r}",
                    index,
                )

    # -- turn end ------------------------------------------------------------------------

    def _cancel_outcome(self, turn: Turn, message: dict[str, Any], index: int) -> None:
        """CANCEL-003 (a cancelled turn is not an error) and CANCEL-004 (held)."""
        if turn.cancel_at is None or turn.cancel_request:
            return
        if turn.request_key not in self._cancel_flagged:
            self._ok("CANCEL-004")
        if "error" not in message:
            self._ok("CANCEL-003")
            return
        late = time.monotonic() - turn.cancel_at
        if late > CANCEL_RACE:
            self._violation(
                "CANCEL-003",
                f"the session/prompt cancelled with session/cancel was answered {late:.1f}s "
                f"later with the error {describe(message.get('error'))}, not stopReason "
                "cancelled",
                index,
            )
        else:
            self.observer.note(
                f"a cancelled prompt was answered with an error {late:.2f}s after the cancel: "
                "it may have failed before the agent read the cancel (CANCEL-003 inconclusive)"
            )

    def _stdin_closed(self) -> bool:
        """The client closed the agent's stdin (EOF may end a turn as cancelled)."""
        return any(
            direction == "!!" and line.startswith(b"stdin closed")
            for _, direction, line in self.observer.transcript.records
        )

    def _stop_reason(self, turn: Turn, stop: Any, index: int) -> None:
        """TURN-007 (cancelled only after a cancel) and TOOL-001 (allowed tools run)."""
        cancelled_by_client = turn.cancel_sent or turn.closed or turn.cancel_request
        if stop == "cancelled":
            if cancelled_by_client:
                self._ok("TURN-007")
            elif turn.soft_cancel or self._stdin_closed():
                self.observer.note(
                    "turn ended cancelled after the client refused a permission or an "
                    "elicitation, or closed stdin, without session/cancel (TURN-007 not judged)"
                )
            else:
                self._violation(
                    "TURN-007",
                    f"session/prompt for session {turn.session_id} answered stopReason "
                    "cancelled, but the client sent no session/cancel or session/close",
                    index,
                )
        if stop != "end_turn" or cancelled_by_client:
            return
        for call_id in sorted(turn.granted):
            if call_id in turn.ran:
                self._ok("TOOL-001")
            else:
                self._violation(
                    "TOOL-001",
                    f"tool call {call_id!r} was allowed (session/request_permission answered "
                    "with an allow option) but no update marked it in_progress, completed or "
                    "failed before the turn ended",
                    index,
                )


def describe(value: Any, limit: int = 160) -> str:
    """A short JSON rendering of ``value`` for finding messages."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "..."
