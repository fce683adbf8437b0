"""
The observer: records every line exchanged with the agent under test and checks each line the
agent sends against the rule catalogue.

- `Transcript` keeps the lines in both directions, printable in the ``ACPKIT_TRACE`` format.
- `SchemaValidator` validates params and results with ``jsonschema`` against
  ``acpkit/schemas/v1/schema.json`` (the definition is chosen by method, from the schema's
  ``x-method`` / ``x-side`` annotations), and names the field and the broken constraint.
- `Verdicts` collects, per rule, whether it was exercised, its findings, and why it was not
  applicable.
- `Observer` ties them together: `Observer.sent` for every message we send,
  `Observer.received` for every line the agent sends; it returns the decoded message (or
  ``None`` for a line that is not a JSON-RPC message) and records findings as it goes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import cache
from typing import Any

import attrs
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from acpkit.testing.jsonschema import load_schema
from acpkit.trace import format_record

__all__ = [
    "Finding",
    "Observer",
    "SchemaValidator",
    "Transcript",
    "Verdicts",
    "form_schema_problem",
    "id_key",
]

#: Session updates that belong to a prompt turn (or a session/load replay).
TURN_UPDATES = frozenset(
    {"agent_message_chunk", "agent_thought_chunk", "tool_call", "tool_call_update", "plan"}
)
_REPLAY_UPDATES = TURN_UPDATES | {"user_message_chunk"}
_CHUNK_UPDATES = frozenset({"user_message_chunk", "agent_message_chunk", "agent_thought_chunk"})
_TERMINAL_STATUSES = frozenset({"completed", "failed"})
_PRIMITIVE_TYPES = frozenset({"string", "number", "integer", "boolean"})
_TERMINAL_USES = frozenset(
    {"terminal/output", "terminal/wait_for_exit", "terminal/kill", "terminal/release"}
)
_EXCERPT_LINES = 12
_MAX_SHOWN = 400


def id_key(value: Any) -> str:
    """A type-sensitive key for a JSON-RPC id (``1`` and ``"1"`` differ)."""
    return json.dumps(value, sort_keys=True)


def _short(line: bytes) -> bytes:
    if len(line) <= _MAX_SHOWN:
        return line
    return line[:_MAX_SHOWN] + b"...(%d bytes)" % len(line)


@attrs.define
class Transcript:
    """Every line exchanged with one agent process, in order."""

    name: str = "agent"
    records: list[tuple[datetime, str, bytes]] = attrs.field(factory=list)

    def add(self, direction: str, line: bytes) -> int:
        """Record one line (``->`` sent, ``<-`` received, ``!!`` a note); returns its index."""
        self.records.append((datetime.now(UTC), direction, line))
        return len(self.records) - 1

    def render(self, start: int = 0, end: int | None = None) -> str:
        """Records ``start:end`` in the ``ACPKIT_TRACE`` format (long lines abridged)."""
        out = []
        for when, direction, line in self.records[start:end]:
            out.append(
                format_record(when, direction, self.name, _short(line)).decode("utf-8", "replace")
            )
        return "".join(out)

    def excerpt(self, around: int | None = None) -> str:
        """The last lines up to record ``around`` (default: the end)."""
        end = len(self.records) if around is None else around + 1
        return self.render(max(0, end - _EXCERPT_LINES), end)


@attrs.frozen
class Finding:
    """One violation: the rule, a one-line message, and the transcript excerpt showing it."""

    rule_id: str
    message: str
    excerpt: str = ""

    def as_dict(self) -> dict[str, str]:
        """The finding as JSON-ready data."""
        return {"rule": self.rule_id, "message": self.message, "excerpt": self.excerpt}


@attrs.define
class Verdicts:
    """Per-rule outcome of one or more runs: exercised counts, findings, non-applicability."""

    exercised: dict[str, int] = attrs.field(factory=dict)
    findings: list[Finding] = attrs.field(factory=list)
    not_applicable: dict[str, str] = attrs.field(factory=dict)
    offered: set[str] = attrs.field(factory=set)

    def ok(self, rule_id: str) -> None:
        """The rule was checked and held once."""
        self.exercised[rule_id] = self.exercised.get(rule_id, 0) + 1

    def violation(self, rule_id: str, message: str, excerpt: str = "") -> None:
        """The rule was checked and broken."""
        self.ok(rule_id)
        self.findings.append(Finding(rule_id, message, excerpt))

    def skip(self, rule_id: str, reason: str) -> None:
        """The rule could not be applied (the first reason is kept)."""
        self.not_applicable.setdefault(rule_id, reason)

    def offer(self, rule_id: str) -> None:
        """The client capability the rule needs was advertised in some run."""
        self.offered.add(rule_id)

    def merge(self, other: Verdicts) -> None:
        """Add ``other``'s counts, findings (one per distinct message), reasons and offers."""
        self.offered |= other.offered
        for rule_id, count in other.exercised.items():
            self.exercised[rule_id] = self.exercised.get(rule_id, 0) + count
        seen = {(f.rule_id, f.message) for f in self.findings}
        for finding in other.findings:
            if (finding.rule_id, finding.message) not in seen:
                self.findings.append(finding)
                seen.add((finding.rule_id, finding.message))
        for rule_id, reason in other.not_applicable.items():
            self.skip(rule_id, reason)


class SchemaValidator:
    """Validates ACP payloads by method against the official v1 schema."""

    def __init__(self, schema: Mapping[str, Any] | None = None) -> None:
        self._schema = schema if schema is not None else load_schema()
        self._defs: Mapping[str, Any] = self._schema["$defs"]
        self._by_method: dict[tuple[str, str, str], str] = {}
        for name, definition in self._defs.items():
            method = definition.get("x-method")
            side = definition.get("x-side")
            if not isinstance(method, str) or not isinstance(side, str):
                continue
            kind = "result" if name.endswith("Response") else "params"
            self._by_method[(side, method, kind)] = name
        self._validators: dict[str, Draft202012Validator] = {}

    def definition_for(self, side: str, method: str, kind: str) -> str | None:
        """The ``$defs`` name for ``kind`` (``params`` / ``result``) of a method handled by
        ``side`` (``agent`` / ``client`` / ``protocol``), or ``None`` when the schema has none."""
        return self._by_method.get((side, method, kind))

    def _validator(self, name: str) -> Draft202012Validator:
        validator = self._validators.get(name)
        if validator is None:
            root = {"$ref": f"#/$defs/{name}", "$defs": self._defs}
            validator = Draft202012Validator(root)
            self._validators[name] = validator
        return validator

    def problem(self, name: str, value: Any, where: str) -> str | None:
        """``None`` when ``value`` is valid against ``$defs[name]``, else a one-line message
        naming the field (``where`` is the path prefix) and the broken constraint."""
        error = best_match(self._validator(name).iter_errors(value))
        if error is None:
            return None
        path = where + "".join(
            f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path
        )
        constraint = error.validator
        message = error.message
        if len(message) > 200:
            message = message[:200] + "..."
        return f"{path} violates {name} ({constraint}): {message}"


@cache
def shared_validator() -> SchemaValidator:
    """One `SchemaValidator` for the vendored schema (building validators is not free)."""
    return SchemaValidator()


@attrs.define
class _Turn:
    """Bookkeeping for one open prompt turn."""

    request_key: str
    tool_calls: dict[str, str | None] = attrs.field(factory=dict)
    cancel_sent: bool = False
    permission_pending: bool = False


@attrs.define
class _Terminal:
    """A terminal the client created for the agent."""

    session_id: str | None
    turn_key: str | None
    released: bool = False


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
class _Pending:
    method: str
    params: Any
    session_id: str | None


class Observer:
    """Checks the agent's messages as they arrive; see the module docstring."""

    def __init__(self, transcript: Transcript | None = None, verdicts: Verdicts | None = None):
        self.transcript = transcript if transcript is not None else Transcript()
        self.verdicts = verdicts if verdicts is not None else Verdicts()
        self.validator = shared_validator()
        self.client_capabilities: dict[str, Any] = {}
        self.pending: dict[str, _Pending] = {}
        self.turns: dict[str, _Turn] = {}
        self.loading: set[str] = set()
        self.session_ids: set[str] = set()
        self.replayed: dict[str, int] = {}
        self.expected_null_id_errors = 0
        self.notifications_sent = 0
        self.message_ids: dict[str, tuple[str, str]] = {}
        self.last_message_id: dict[str, str] = {}
        self.agent_requests: list[dict[str, Any]] = []
        self.answered: set[str] = set()
        self.agent_pending: dict[str, dict[str, Any]] = {}
        self.terminals: dict[str, _Terminal] = {}
        self.url_elicitations: set[str] = set()

    # -- helpers -------------------------------------------------------------------------

    def violation(self, rule_id: str, message: str, index: int | None = None) -> None:
        """Record a violation with the transcript excerpt ending at record ``index``."""
        self.verdicts.violation(rule_id, message, self.transcript.excerpt(index))

    def note(self, text: str) -> None:
        """Add a human note to the transcript (``!!`` records)."""
        self.transcript.add("!!", text.encode("utf-8"))

    # -- outgoing ------------------------------------------------------------------------

    def sent_bytes(self, data: bytes) -> None:
        """Record raw bytes we wrote (one record per line, the line end stripped)."""
        for line in data.split(b"\n"):
            if line:
                self.transcript.add("->", line.rstrip(b"\r"))

    def sent(self, message: Any) -> None:
        """Account for a message we sent (its bytes are recorded by `sent_bytes`)."""
        if not isinstance(message, dict):
            return
        method = message.get("method")
        params = message.get("params")
        if method is None and "id" in message:
            self._answered_agent(message)
        elif "id" in message and isinstance(method, str):
            session_id = params.get("sessionId") if isinstance(params, dict) else None
            key = id_key(message["id"])
            self.pending[key] = _Pending(method, params, session_id)
            if method == "initialize" and isinstance(params, dict):
                caps = params.get("clientCapabilities")
                self.client_capabilities = caps if isinstance(caps, dict) else {}
            elif method == "session/prompt" and isinstance(session_id, str):
                self.turns[session_id] = _Turn(key)
            elif method == "session/load" and isinstance(session_id, str):
                self.loading.add(session_id)
                self.replayed[session_id] = 0
        elif isinstance(method, str) and "id" not in message:
            self.notifications_sent += 1
            if method == "session/cancel" and isinstance(params, dict):
                turn = self.turns.get(str(params.get("sessionId")))
                if turn is not None:
                    turn.cancel_sent = True

    def _answered_agent(self, response: dict[str, Any]) -> None:
        """Our answer to one of the agent's requests: learn the terminals we created."""
        request = self.agent_pending.pop(id_key(response.get("id")), None)
        if request is None or request.get("method") != "terminal/create":
            return
        result = response.get("result")
        params = request.get("params")
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        if isinstance(result, dict) and isinstance(result.get("terminalId"), str):
            turn = self.turns.get(str(session_id))
            self.terminals[result["terminalId"]] = _Terminal(
                session_id if isinstance(session_id, str) else None,
                turn.request_key if turn is not None else None,
            )

    # -- incoming ------------------------------------------------------------------------

    def received(self, line: bytes) -> dict[str, Any] | None:
        """Check one line from the agent's stdout; the message, or ``None`` if it is not one."""
        index = self.transcript.add("<-", line)
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            self.violation("FRAME-001", f"stdout line is not UTF-8: {e.reason} at byte {e.start}")
            return None
        self.verdicts.ok("FRAME-001")
        stripped = text.strip()
        if not stripped:
            self.violation("FRAME-003", "an empty line on stdout is not an ACP message", index)
            return None
        try:
            message = json.loads(stripped)
        except ValueError:
            self.violation(
                "FRAME-003", f"stdout line is not JSON (banner or log?): {stripped[:80]!r}", index
            )
            return None
        if not isinstance(message, dict):
            kind = "a batch (array)" if isinstance(message, list) else type(message).__name__
            self.violation("FRAME-002", f"stdout line is {kind}, not one JSON-RPC object", index)
            return None
        self.verdicts.ok("FRAME-002")
        if message.get("jsonrpc") != "2.0":
            self.violation(
                "FRAME-003",
                f"stdout line is not a JSON-RPC 2.0 message: jsonrpc={message.get('jsonrpc')!r}",
                index,
            )
            return None
        self.verdicts.ok("FRAME-003")
        if "method" in message:
            self._incoming_call(message, index)
        elif "id" in message:
            self._response(message, index)
        else:
            self.violation("FRAME-003", "message has neither method nor id", index)
            return None
        return message

    def _schema_check(self, name: str | None, value: Any, where: str, index: int) -> None:
        if name is None:
            return
        problem = self.validator.problem(name, value, where)
        if problem is None:
            self.verdicts.ok("SCHEMA-001")
        else:
            self.violation("SCHEMA-001", problem, index)

    def _incoming_call(self, message: dict[str, Any], index: int) -> None:
        method = message["method"]
        params = message.get("params")
        if not isinstance(method, str):
            self.violation("SCHEMA-001", "method is not a string", index)
            return
        definition = self.validator.definition_for("client", method, "params")
        if definition is None and method.startswith("$/"):
            definition = self.validator.definition_for("protocol", method, "params")
        self._schema_check(definition, params, "params", index)
        self._check_capability(method, params, index)
        if "id" in message:
            self.agent_requests.append(message)
            self.agent_pending[id_key(message["id"])] = message
        if method in _TERMINAL_USES:
            self._terminal_use(method, params, index)
        elif method == "elicitation/create":
            self._elicitation(params, index)
        elif method == "elicitation/complete":
            self._elicitation_complete(params, index)
        if method == "session/update" and isinstance(params, dict):
            self._session_update(params, index)

    def _cap(self, *path: str) -> Any:
        value: Any = self.client_capabilities
        for part in path:
            if not isinstance(value, dict):
                return None
            value = value.get(part)
        return value

    def _check_capability(self, method: str, params: Any, index: int) -> None:
        if method.startswith("fs/"):
            flag = {"fs/read_text_file": "readTextFile", "fs/write_text_file": "writeTextFile"}
            needed = flag.get(method)
            if needed is None or self._cap("fs", needed) is not True:
                self.violation(
                    "CAP-001",
                    f"agent called {method} but clientCapabilities.fs.{needed or '?'} "
                    "was not advertised",
                    index,
                )
            else:
                self.verdicts.ok("CAP-001")
        elif method.startswith("terminal/"):
            if self._cap("terminal") is not True:
                self.violation(
                    "CAP-002",
                    f"agent called {method} but clientCapabilities.terminal was not advertised",
                    index,
                )
            else:
                self.verdicts.ok("CAP-002")
        elif method.startswith("elicitation/"):
            mode = params.get("mode") if isinstance(params, dict) else None
            advertised = self._cap("elicitation")
            if not isinstance(advertised, dict) or (
                isinstance(mode, str) and advertised.get(mode) is None
            ):
                self.violation(
                    "CAP-003",
                    f"agent called {method} (mode {mode!r}) but clientCapabilities.elicitation"
                    f"{'.' + mode if isinstance(mode, str) else ''} was not advertised",
                    index,
                )
            else:
                self.verdicts.ok("CAP-003")

    def _terminal_use(self, method: str, params: Any, index: int) -> None:
        terminal_id = params.get("terminalId") if isinstance(params, dict) else None
        terminal = self.terminals.get(terminal_id) if isinstance(terminal_id, str) else None
        if terminal is None:
            self.violation(
                "TERMINAL-001",
                f"{method} for terminal {terminal_id!r}, which the client never created",
                index,
            )
        elif terminal.released:
            self.violation(
                "TERMINAL-001", f"{method} for terminal {terminal_id!r} after its release", index
            )
        else:
            self.verdicts.ok("TERMINAL-001")
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
            self.verdicts.ok("ELICIT-001")
        else:
            self.violation("ELICIT-001", f"elicitation/create ({mode}): {problem}", index)

    def _elicitation_complete(self, params: Any, index: int) -> None:
        elicitation_id = params.get("elicitationId") if isinstance(params, dict) else None
        if isinstance(elicitation_id, str) and elicitation_id in self.url_elicitations:
            self.verdicts.ok("ELICIT-002")
        else:
            self.violation(
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
                self.verdicts.ok("NOTICE-001")
            else:
                self.violation(
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
            self.verdicts.ok("NOTICE-002")
        else:
            self.violation("NOTICE-002", f"{kind} needs {needs}", index)

    def _session_update(self, params: dict[str, Any], index: int) -> None:
        session_id = params.get("sessionId")
        update = params.get("update")
        if not isinstance(session_id, str) or not isinstance(update, dict):
            return
        kind = update.get("sessionUpdate")
        if kind == "notice" or (isinstance(kind, str) and kind.startswith("compaction_")):
            capability = "notices" if kind == "notice" else "compaction"
            if self._cap("session", capability) is None:
                self.violation(
                    "CAP-004",
                    f"session/update {kind} sent but clientCapabilities.session.{capability} "
                    "was not advertised",
                    index,
                )
            else:
                self.verdicts.ok("CAP-004")
                if kind in ("notice", "compaction_update", "compaction_summary_chunk"):
                    self._notice_or_compaction(kind, update, index)
        turn = self.turns.get(session_id)
        if kind in _REPLAY_UPDATES and session_id in self.loading:
            self.replayed[session_id] = self.replayed.get(session_id, 0) + 1
        elif kind in TURN_UPDATES:
            if turn is None:
                self.violation(
                    "TURN-002",
                    f"session/update {kind} for session {session_id} arrived when no prompt "
                    "turn was open (after the session/prompt response?)",
                    index,
                )
            else:
                self.verdicts.ok("TURN-002")
        if kind == "tool_call" and turn is not None:
            call_id = str(update.get("toolCallId"))
            if call_id in turn.tool_calls:
                self.violation(
                    "TURN-003", f"tool_call reuses toolCallId {call_id!r} in the same turn", index
                )
            else:
                self.verdicts.ok("TURN-003")
            turn.tool_calls[call_id] = update.get("status") or "pending"
        elif kind == "tool_call_update" and turn is not None:
            call_id = str(update.get("toolCallId"))
            status = update.get("status")
            if call_id not in turn.tool_calls:
                turn.tool_calls[call_id] = status or "pending"
            elif status:
                turn.tool_calls[call_id] = status
        elif kind == "plan":
            entries = update.get("entries")
            if not isinstance(entries, list) or not all(
                isinstance(e, dict) and {"content", "priority", "status"} <= e.keys()
                for e in entries
            ):
                self.violation(
                    "TURN-004",
                    "plan update is not a complete list of entries with content, priority "
                    "and status",
                    index,
                )
            else:
                self.verdicts.ok("TURN-004")
        elif kind == "usage_update":
            missing = [k for k in ("used", "size") if update.get(k) is None]
            if missing:
                self.violation(
                    "TURN-006", f"usage_update lacks required {', '.join(missing)}", index
                )
            else:
                self.verdicts.ok("TURN-006")
        if kind in _CHUNK_UPDATES:
            self._message_id(session_id, kind, update.get("messageId"), index)

    def _message_id(self, session_id: str, kind: str, message_id: Any, index: int) -> None:
        if not isinstance(message_id, str):
            self.last_message_id.pop(session_id, None)
            return
        key = f"{session_id}\x00{message_id}"
        previous = self.message_ids.get(key)
        last = self.last_message_id.get(session_id)
        if previous is not None and previous[0] != kind:
            self.violation(
                "TURN-005",
                f"messageId {message_id!r} used by {previous[0]} and then by {kind}",
                index,
            )
        elif previous is not None and last != message_id:
            self.violation(
                "TURN-005",
                f"messageId {message_id!r} reappears after another message started",
                index,
            )
        else:
            self.verdicts.ok("TURN-005")
        self.message_ids[key] = (kind, message_id)
        self.last_message_id[session_id] = message_id

    def _response(self, message: dict[str, Any], index: int) -> None:
        has_result = "result" in message
        has_error = "error" in message
        error = message.get("error")
        if has_result == has_error:
            self.violation("RPC-009", "response must have exactly one of result and error", index)
        elif has_error and not (
            isinstance(error, dict)
            and isinstance(error.get("code"), int)
            and not isinstance(error.get("code"), bool)
            and isinstance(error.get("message"), str)
        ):
            self.violation(
                "RPC-009", f"error must be {{code: integer, message: string}}, got {error!r}", index
            )
        else:
            self.verdicts.ok("RPC-009")
        response_id = message.get("id")
        if response_id is None:
            code = error.get("code") if isinstance(error, dict) else None
            if self.expected_null_id_errors > 0 and code in (-32700, -32600):
                self.expected_null_id_errors -= 1
                return
            if self.notifications_sent:
                self.violation(
                    "RPC-002",
                    "a response with id null arrived (an answer to a notification?)",
                    index,
                )
            return
        key = id_key(response_id)
        pending = self.pending.pop(key, None)
        if pending is None:
            same_text = [
                k
                for k in self.pending
                if json.loads(k) == response_id or str(json.loads(k)) == str(response_id)
            ]
            if same_text:
                self.pending.pop(same_text[0])
                self.violation(
                    "RPC-001",
                    f"response id {response_id!r} ({type(response_id).__name__}) does not echo "
                    f"the request id {json.loads(same_text[0])!r} "
                    f"({type(json.loads(same_text[0])).__name__})",
                    index,
                )
            elif key in self.answered:
                self.violation(
                    "RPC-010", f"request {response_id!r} was answered a second time", index
                )
            else:
                self.violation(
                    "RPC-002",
                    f"response for id {response_id!r}, which no pending request has "
                    "(an answer to a notification?)",
                    index,
                )
            return
        self.answered.add(key)
        self.verdicts.ok("RPC-001")
        if has_result:
            definition = self.validator.definition_for("agent", pending.method, "result")
            self._schema_check(definition, message["result"], "result", index)
        self._finished(pending, message, index)

    def _finished(self, pending: _Pending, message: dict[str, Any], index: int) -> None:
        result = message.get("result")
        session_id = pending.session_id
        if pending.method == "session/new" and isinstance(result, dict):
            new_id = result.get("sessionId")
            if isinstance(new_id, str):
                if new_id in self.session_ids:
                    self.violation(
                        "SESSION-001", f"session/new returned the used sessionId {new_id!r}", index
                    )
                else:
                    self.verdicts.ok("SESSION-001")
                    self.session_ids.add(new_id)
        elif pending.method == "session/load" and isinstance(session_id, str):
            self.loading.discard(session_id)
        elif pending.method == "session/prompt" and isinstance(session_id, str):
            turn = self.turns.get(session_id)
            if turn is None or turn.request_key != id_key(message.get("id")):
                return
            del self.turns[session_id]
            if not isinstance(result, dict):
                return
            self._terminals_released(turn.request_key, index)
            stop = result.get("stopReason")
            if stop != "cancelled":
                unfinished = sorted(
                    call
                    for call, status in turn.tool_calls.items()
                    if status not in _TERMINAL_STATUSES
                )
                if unfinished:
                    self.violation(
                        "TURN-003",
                        f"turn ended ({stop}) with tool calls not completed/failed: "
                        f"{', '.join(unfinished)}",
                        index,
                    )
                elif turn.tool_calls:
                    self.verdicts.ok("TURN-003")

    def _terminals_released(self, turn_key: str, index: int) -> None:
        created = {
            terminal_id: terminal
            for terminal_id, terminal in self.terminals.items()
            if terminal.turn_key == turn_key
        }
        live = sorted(t for t, terminal in created.items() if not terminal.released)
        if live:
            self.violation(
                "TERMINAL-002",
                f"turn ended with terminals never released: {', '.join(live)}",
                index,
            )
        elif created:
            self.verdicts.ok("TERMINAL-002")

    def expect_null_id_error(self) -> None:
        """We sent something unparseable: one error response with id null is legitimate."""
        self.expected_null_id_errors += 1
