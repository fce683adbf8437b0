"""
The observer: records every line exchanged with the agent under test and checks each line the
agent sends against the rule catalogue.

- `Transcript` keeps the lines in both directions, printable in the ``ACPKIT_TRACE`` format.
- `SchemaValidator` validates params and results with ``jsonschema`` against
  ``acpkit/schemas/v1/schema.json`` (the definition is chosen by method, from the schema's
  ``x-method`` / ``x-side`` annotations), and names the field and the broken constraint.
- `Verdicts` collects, per rule, whether it was exercised, its findings, the steps that could
  not be judged (too slow) and why it was not applicable.
- `Observer` ties them together. It sees every line we write (`Observer.sent_bytes`; each
  JSON line is accounted for by `Observer.sent`, including deliberately malformed ones, so an
  answer that echoes their id is matched) and every line the agent writes
  (`Observer.received`). It classifies the agent's lines (framing, JSON-RPC envelope, ids)
  and hands each message to `acpkit.conformance.checks.Checks`, which judges its content
  against the session, turn, service and extension rules, whenever it arrives.

A message the agent meant as a message is always delivered to the caller, even when its
envelope is wrong (a response without ``id``, a pretty-printed message written over several
lines): the finding names what is wrong and the waiting code sees what did arrive, so no
finding says "no response" when there was one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import cache
from typing import Any

import attrs
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from acpkit.conformance.checks import Checks, form_schema_problem
from acpkit.jsonrpc import jsonbytes
from acpkit.testing.jsonschema import load_schema
from acpkit.trace import format_record

__all__ = [
    "BATCH_ANSWER",
    "Finding",
    "Observer",
    "SchemaValidator",
    "Transcript",
    "Verdicts",
    "form_schema_problem",
    "id_key",
]

_EXCERPT_LINES = 12
#: Distinct findings kept per rule (the others are counted).
MAX_FINDINGS = 5
_MAX_SHOWN = 400
#: A pretty-printed message may span this many lines / bytes before they count as junk.
_MAX_FRAGMENT_LINES = 20_000
_MAX_FRAGMENT_BYTES = 8 << 20


def id_key(value: Any) -> str:
    """A type-sensitive key for a JSON-RPC id (``1`` and ``"1"`` differ)."""
    return json.dumps(value, sort_keys=True)


def _short(line: bytes) -> bytes:
    if len(line) <= _MAX_SHOWN:
        return line
    return line[:_MAX_SHOWN] + b"...(%d bytes)" % len(line)


def _parse(line: bytes) -> Any:
    """The JSON value of ``line``; ``_TOO_DEEP`` when it nests deeper than
    `acpkit.jsonrpc.jsonbytes.MAX_NESTING_DEPTH` (never a ``RecursionError``), else ``_INVALID``."""
    try:
        return jsonbytes.loads(line)
    except jsonbytes.NestingTooDeep:
        return _TOO_DEEP
    except ValueError:
        return _INVALID


_INVALID = object()
_TOO_DEEP = object()

#: The key of the stand-in message delivered for an array answer to a batch probe.
BATCH_ANSWER = "acpkit.batch"


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
    """
    Per-rule outcome of one or more runs: exercised counts, findings, steps that could not be
    judged (the agent did not answer within the step timeout), non-applicability.
    """

    exercised: dict[str, int] = attrs.field(factory=dict)
    findings: list[Finding] = attrs.field(factory=list)
    not_applicable: dict[str, str] = attrs.field(factory=dict)
    offered: set[str] = attrs.field(factory=set)
    undecided: dict[str, list[str]] = attrs.field(factory=dict)
    repeated: dict[str, int] = attrs.field(factory=dict)

    def ok(self, rule_id: str) -> None:
        """The rule was checked and held once."""
        self.exercised[rule_id] = self.exercised.get(rule_id, 0) + 1

    def violation(self, rule_id: str, message: str, excerpt: str = "") -> None:
        """
        The rule was checked and broken. A message already recorded for the rule, and any
        finding beyond `MAX_FINDINGS` per rule, is only counted (`repeated`).
        """
        self.ok(rule_id)
        same_rule = [f for f in self.findings if f.rule_id == rule_id]
        if len(same_rule) >= MAX_FINDINGS or any(f.message == message for f in same_rule):
            self.repeated[rule_id] = self.repeated.get(rule_id, 0) + 1
            return
        self.findings.append(Finding(rule_id, message, excerpt))

    def slow(self, rule_id: str, reason: str) -> None:
        """The rule could not be judged this time: the agent was too slow (not a finding)."""
        reasons = self.undecided.setdefault(rule_id, [])
        if reason not in reasons and len(reasons) < 5:
            reasons.append(reason)

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
        for rule_id, count in other.repeated.items():
            self.repeated[rule_id] = self.repeated.get(rule_id, 0) + count
        for rule_id, reasons in other.undecided.items():
            for reason in reasons:
                self.slow(rule_id, reason)


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
class Pending:
    """A request we sent and the agent has not answered yet."""

    method: str
    params: Any
    session_id: str | None
    #: a deliberately malformed request (fault injection): its answer is not schema-checked
    invalid: bool = False
    #: the order in which the client sent it (1, 2, …)
    seq: int = 0
    #: a session/cancel (for a prompt) or a $/cancel_request named it
    cancelled: bool = False
    #: a $/cancel_request named it (before any session/cancel)
    cancel_request: bool = False
    #: called with the answer when it arrives, however late (a step gave up waiting)
    late: list[Callable[[dict[str, Any]], None]] = attrs.field(factory=list)
    #: when it was sent (``time.monotonic()``)
    sent_at: float = attrs.field(factory=time.monotonic)
    #: a probe already judged it unanswered (under its own rule): not judged again
    judged: bool = False


#: Requests whose answer may wait for a person (a browser login): never judged unanswered.
_MAY_WAIT_FOR_A_USER = frozenset({"authenticate", "initialize"})


def answer_rule(pending: Pending) -> str:
    """The rule that requires an answer to ``pending``: a request cancelled by
    ``$/cancel_request`` its one answer, a prompt's stop reason (after a cancel, the
    cancelled one), a custom request's answer, or any request's."""
    if pending.cancel_request:
        return "RPC-010"
    if pending.method == "session/prompt":
        return "CANCEL-001" if pending.cancelled else "TURN-001"
    if pending.method.startswith("_"):
        return "RPC-008"
    return "RPC-013"


class Observer:
    """Checks the agent's messages as they arrive; see the module docstring."""

    def __init__(self, transcript: Transcript | None = None, verdicts: Verdicts | None = None):
        self.transcript = transcript if transcript is not None else Transcript()
        self.verdicts = verdicts if verdicts is not None else Verdicts()
        self.validator = shared_validator()
        self.client_capabilities: dict[str, Any] = {}
        self.pending: dict[str, Pending] = {}
        self.answered: set[str] = set()
        #: the answered requests a $/cancel_request named (a second answer is RPC-010's)
        self.answered_after_cancel_request: set[str] = set()
        #: requests sent so far, and the latest (by send order) the agent answered
        self.requests_sent = 0
        self.answered_seq = 0
        self.expected_null_id_errors = 0
        self.notifications_sent = 0
        self.agent_requests: list[dict[str, Any]] = []
        self.agent_pending: dict[str, dict[str, Any]] = {}
        #: the probe step running now and the one during which an exception escaped
        self.step: tuple[str, str] | None = None
        self.failed_step: tuple[str, str] | None = None
        #: the agent chose a protocol version other than 1: v1 rules no longer apply
        self.off_version: int | None = None
        #: a batch probe is running: an array answer is judged under RPC-004, not FRAME-002
        self.arrays_expected = 0
        self._fragments: list[bytes] = []
        self._fragment_index = 0
        #: the client closed the agent's stdin (EOF may end a turn as cancelled)
        self.stdin_closed = False
        self.checks = Checks(self)

    # -- helpers -------------------------------------------------------------------------

    def violation(self, rule_id: str, message: str, index: int | None = None) -> None:
        """Record a violation with the transcript excerpt ending at record ``index``."""
        self.verdicts.violation(rule_id, message, self.transcript.excerpt(index))

    def note(self, text: str) -> None:
        """Add a human note to the transcript (``!!`` records)."""
        self.transcript.add("!!", text.encode("utf-8"))

    @contextmanager
    def probe(self, rule_id: str, what: str) -> Iterator[None]:
        """
        Mark a probe step: it is noted in the transcript, and when an exception (the agent
        died, or a step timed out) escapes it, `failed_step` names the rule it was probing.
        """
        previous = self.step
        self.step = (rule_id, what)
        self.note(f"probe {rule_id}: {what}")
        try:
            yield
        except BaseException:
            if self.failed_step is None:
                self.failed_step = self.step
            raise
        finally:
            self.step = previous

    def fault(self, name: str, rule_id: str, what: str) -> None:
        """Note a deliberate fault injection: the next line we write is malformed on purpose."""
        self.note(f"fault injection {name} ({what}); expected outcome: {rule_id}")

    # -- outgoing ------------------------------------------------------------------------

    def sent_bytes(self, data: bytes) -> None:
        """
        Record raw bytes we wrote (one record per line, the line end stripped) and account for
        every JSON line among them (see `sent`); a line that is not a JSON object, or not a
        valid request envelope, may be answered with an error whose id is null.
        """
        for line in data.split(b"\n"):
            if not line:
                continue
            line = line.rstrip(b"\r")
            self.transcript.add("->", line)
            value = _parse(line)
            if isinstance(value, dict):
                valid = value.get("jsonrpc") == "2.0" and _valid_id(value)
                if not valid:
                    self.expected_null_id_errors += 1
                self.sent(value, invalid=not valid)
            elif isinstance(value, list):
                self.expected_null_id_errors += 1 + len(value)
                for element in value:
                    if isinstance(element, dict):
                        self.sent(element, invalid=True)
            else:
                self.expected_null_id_errors += 1

    def sent(self, message: Any, *, invalid: bool = False) -> None:
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
            if key in self.pending or (key in self.answered and invalid):
                return  # the same line accounted twice (send() then the bytes)
            self.requests_sent += 1
            self.pending[key] = Pending(
                method,
                params,
                session_id if isinstance(session_id, str) else None,
                invalid,
                seq=self.requests_sent,
            )
            if invalid:
                return
            if method == "initialize" and isinstance(params, dict):
                caps = params.get("clientCapabilities")
                self.client_capabilities = caps if isinstance(caps, dict) else {}
            self.checks.request_sent(key, method, params)
        elif isinstance(method, str) and "id" not in message:
            self.notifications_sent += 1
            self._mark_cancelled(method, params)
            self.checks.notification_sent(method, params)

    def _mark_cancelled(self, method: str, params: Any) -> None:
        """session/cancel cancels the session's pending prompts; $/cancel_request one request."""
        p = params if isinstance(params, dict) else {}
        if method == "session/cancel":
            for pending in self.pending.values():
                if pending.method == "session/prompt" and pending.session_id == p.get("sessionId"):
                    pending.cancelled = True
        elif method == "$/cancel_request" and "requestId" in p:
            target = self.pending.get(id_key(p.get("requestId")))
            if target is not None:
                target.cancel_request = not target.cancelled
                target.cancelled = True

    def when_answered(self, request_id: Any, callback: Callable[[dict[str, Any]], None]) -> None:
        """Call ``callback`` with the answer to ``request_id`` when it arrives (a step that
        gave up waiting still judges a late answer); nothing when it was answered already."""
        pending = self.pending.get(id_key(request_id))
        if pending is not None:
            pending.late.append(callback)

    def judged_unanswered(self, request_id: Any) -> None:
        """A probe judged ``request_id`` unanswered under its own rule: not judged again."""
        pending = self.pending.get(id_key(request_id))
        if pending is not None:
            pending.judged = True

    def unanswered(self) -> list[tuple[str, Pending]]:
        """The valid requests of the client still waiting for an answer (and not judged
        already by a probe), in send order."""
        waiting = [(k, p) for k, p in self.pending.items() if not p.invalid and not p.judged]
        return sorted(waiting, key=lambda item: item[1].seq)

    def overtaken(self) -> list[tuple[str, Pending]]:
        """Unanswered requests (that may not wait for a user) sent before a request the agent
        did answer: not slow, dropped."""
        return [
            (k, p)
            for k, p in self.unanswered()
            if p.seq < self.answered_seq and p.method not in _MAY_WAIT_FOR_A_USER
        ]

    def judge_unanswered(
        self, patience: Callable[[Pending], float], *, conclusive: bool = True
    ) -> None:
        """
        At the end of an agent's life: a request never answered, ``patience(request)``
        seconds after it was sent, while a request sent after it was answered is a finding of
        the rule that requires its answer (`answer_rule`); one with nothing answered after
        it, or younger, could not be judged (slow). Not ``conclusive`` (the answers may have
        gone where the client did not read): every one is slow.
        """
        now = time.monotonic()
        overtaken = {k for k, p in self.overtaken() if now - p.sent_at >= patience(p)}
        if not conclusive:
            overtaken = set()
        for key, pending in self.unanswered():
            if pending.method in _MAY_WAIT_FOR_A_USER:
                continue
            rule_id = answer_rule(pending)
            what = f"{pending.method} (id {key})"
            if key in overtaken:
                later = self.answered_seq - pending.seq
                cancelled = " although the client cancelled it" if pending.cancelled else ""
                self.violation(
                    rule_id,
                    f"{what} was never answered{cancelled} ({now - pending.sent_at:.0f}s), "
                    f"while the agent answered a request the client sent {later} request(s) "
                    "after it: dropped, not slow",
                )
            else:
                self.verdicts.slow(
                    rule_id,
                    f"{what} was still unanswered {now - pending.sent_at:.1f}s after it was "
                    "sent, when the agent was stopped",
                )

    def _answered_agent(self, response: dict[str, Any]) -> None:
        """Our answer to one of the agent's requests."""
        request = self.agent_pending.pop(id_key(response.get("id")), None)
        if request is not None:
            self.checks.client_answered(request, response)

    # -- incoming ------------------------------------------------------------------------

    def received(self, line: bytes) -> dict[str, Any] | None:
        """Check one line from the agent's stdout; the message, or ``None`` if it is not one."""
        index = self.transcript.add("<-", line)
        if self.off_version is not None:
            value = _parse(line.strip())
            return value if isinstance(value, dict) else None
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as e:
            self.violation(
                "FRAME-001", f"stdout line is not UTF-8: {e.reason} at byte {e.start}", index
            )
            # still a message the agent meant: deliver it (its bad bytes replaced)
            line = line.decode("utf-8", "replace").encode("utf-8")
        else:
            self.verdicts.ok("FRAME-001")
        stripped = line.strip()
        if self._fragments:
            return self._continue_fragments(line, index)
        if not stripped:
            self.violation("FRAME-003", "an empty line on stdout is not an ACP message", index)
            return None
        value = _parse(stripped)
        if value is _TOO_DEEP:
            self._too_deep(stripped, index)
            return None
        if value is _INVALID:
            if stripped[:1] in (b"{", b"["):
                self._fragments = [line]
                self._fragment_index = index
                return None
            self._junk(stripped, index)
            return None
        return self._value(value, index)

    def _too_deep(self, stripped: bytes, index: int) -> None:
        """A line nested deeper than any ACP message: not read (RFC 8259 section 9 lets a
        receiver limit nesting; acpkit reads 254 levels, serde_json 128)."""
        limit = jsonbytes.MAX_NESTING_DEPTH
        if stripped[:1] != b"{":
            self.violation(
                "FRAME-002",
                f"a line that is not one message object, nested deeper than {limit} levels",
                index,
            )
            return
        self.violation(
            "SCHEMA-001",
            f"a message nested deeper than {limit} levels ({len(stripped)} bytes): no ACP "
            "message nests so deep, and clients that limit nesting (RFC 8259 section 9) "
            "cannot read it",
            index,
        )

    def _junk(self, stripped: bytes, index: int) -> None:
        text = stripped.decode("utf-8", "replace")
        self.violation(
            "FRAME-003", f"stdout line is not JSON (banner or log?): {text[:80]!r}", index
        )

    def _continue_fragments(self, line: bytes, index: int) -> dict[str, Any] | None:
        """A line after the start of what may be a message written over several lines."""
        self._fragments.append(line)
        joined = b"\n".join(self._fragments)
        value = _parse(joined)
        if isinstance(value, dict):
            count = len(self._fragments)
            self._fragments = []
            self.violation(
                "FRAME-002",
                f"one JSON-RPC message was written over {count} lines (pretty-printed JSON?); "
                "messages MUST NOT contain embedded newlines",
                index,
            )
            return self._value(value, index, framed=False)
        alone = _parse(line.strip())
        if isinstance(alone, dict) and _looks_like_message(alone):
            self._fragments.pop()
            self.flush()
            return self._value(alone, index)
        if len(self._fragments) > _MAX_FRAGMENT_LINES or len(joined) > _MAX_FRAGMENT_BYTES:
            self.flush()
        return None

    def flush(self) -> None:
        """Judge lines held as the start of a multi-line message that never completed."""
        fragments, self._fragments = self._fragments, []
        if fragments:
            first = fragments[0].strip().decode("utf-8", "replace")
            self.violation(
                "FRAME-003",
                f"{len(fragments)} stdout line(s) that are not JSON, from {first[:80]!r}",
                self._fragment_index + len(fragments) - 1,
            )

    def _value(self, message: Any, index: int, *, framed: bool = True) -> dict[str, Any] | None:
        if isinstance(message, list) and self.arrays_expected > 0:
            self.arrays_expected -= 1
            self.violation(
                "RPC-004",
                "the agent answered the client's batch with a JSON array (a JSON-RPC batch "
                "response); ACP messages are individual, so a batch is an invalid request",
                index,
            )
            return {"jsonrpc": "2.0", "id": None, BATCH_ANSWER: message}
        if not isinstance(message, dict):
            kind = "a batch (array)" if isinstance(message, list) else type(message).__name__
            self.violation("FRAME-002", f"stdout line is {kind}, not one JSON-RPC object", index)
            return None
        if framed:
            self.verdicts.ok("FRAME-002")
        looks_like_message = "method" in message or "result" in message or "error" in message
        if message.get("jsonrpc") != "2.0":
            if not looks_like_message:
                self.violation(
                    "FRAME-003",
                    "stdout line is a JSON object that is not a JSON-RPC message "
                    f"(a log record?): {json.dumps(message)[:120]}",
                    index,
                )
                return None
            self.violation(
                "RPC-009",
                f'message lacks "jsonrpc": "2.0" (got jsonrpc={message.get("jsonrpc")!r})',
                index,
            )
        else:
            self.verdicts.ok("FRAME-003")
        if "method" in message:
            self._incoming_call(message, index)
        elif "result" in message or "error" in message or "id" in message:
            if "id" not in message:
                self.violation(
                    "RPC-009", "a response without an id member (JSON-RPC requires it)", index
                )
                message = {**message, "id": None}
            self._response(message, index)
            return dict(message)
        else:
            self.violation("FRAME-003", "message has neither method nor id", index)
            return None
        return message

    def schema_check(self, name: str | None, value: Any, where: str, index: int) -> None:
        """Validate ``value`` against ``$defs[name]`` (SCHEMA-001)."""
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
        self.schema_check(definition, params, "params", index)
        if "id" in message:
            self.agent_requests.append(message)
            self.agent_pending[id_key(message["id"])] = message
        self.checks.agent_message(method, params, "id" in message, index)

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
        if BATCH_ANSWER in message:
            return
        if response_id is None:
            if has_error:  # the answer to a malformed line: its message is still RPC-012's
                self.checks.envelope.judge_error_message("a malformed line", error, index)
            self._null_id_response(has_error, index)
            return
        key = id_key(response_id)
        pending = self.pending.pop(key, None)
        if pending is None:
            self._unmatched(response_id, key, index)
            return
        self.answered.add(key)
        if pending.cancel_request:
            self.answered_after_cancel_request.add(key)
        if pending.invalid:
            if has_error:
                self.checks.envelope.judge_error_message("a malformed request", error, index)
            # answered with the echoed id instead of null: that allowance is used up
            self.expected_null_id_errors = max(0, self.expected_null_id_errors - 1)
            return
        self.answered_seq = max(self.answered_seq, pending.seq)
        self.verdicts.ok("RPC-001")
        if answer_rule(pending) == "RPC-013":
            self.verdicts.ok("RPC-013")
        if pending.method == "initialize" and self._other_version(message, index):
            return
        if has_result:
            definition = self.validator.definition_for("agent", pending.method, "result")
            self.schema_check(definition, message["result"], "result", index)
        self.checks.response(pending, key, message, index)
        for callback in pending.late:
            callback(message)

    def _other_version(self, message: Mapping[str, Any], index: int) -> bool:
        """
        The agent answered ``initialize`` with a protocol version other than 1 (the one the
        tester speaks): judging its messages against v1 would be wrong, so the observer
        stops judging (INIT-002 judges the version itself; a client SHOULD then close).
        """
        result = message.get("result")
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        if not isinstance(version, int) or isinstance(version, bool) or version == 1:
            return False
        self.off_version = version
        self.note(
            f"the agent chose protocol version {version}: its messages are not judged against "
            "the v1 rules from here on"
        )
        return True

    def _null_id_response(self, is_error: bool, index: int) -> None:
        if is_error and self.expected_null_id_errors > 0:
            self.expected_null_id_errors -= 1
            return
        kind = "an error" if is_error else "a success"
        if self.notifications_sent:
            self.violation(
                "RPC-002",
                f"{kind} response with id null arrived, though every line the client sent "
                "since was valid (an answer to a notification?)",
                index,
            )
        else:
            self.violation(
                "RPC-001", f"{kind} response with id null: no request of the client has it", index
            )

    def _unmatched(self, response_id: Any, key: str, index: int) -> None:
        same_text = [
            k
            for k in self.pending
            if jsonbytes.loads(k) == response_id or str(jsonbytes.loads(k)) == str(response_id)
        ]
        if same_text:
            original = jsonbytes.loads(same_text[0])
            answered = self.pending.pop(same_text[0])
            self.answered.add(same_text[0])
            if not answered.invalid:
                self.answered_seq = max(self.answered_seq, answered.seq)
            self.violation(
                "RPC-001",
                f"response id {response_id!r} ({type(response_id).__name__}) does not echo "
                f"the request id {original!r} ({type(original).__name__})",
                index,
            )
        elif key in self.answered:
            # a request and its response are a pair; after $/cancel_request, RPC-010 says so
            cancelled = key in self.answered_after_cancel_request
            self.violation(
                "RPC-010" if cancelled else "RPC-013",
                f"request {response_id!r} was answered a second time"
                + (" (after a $/cancel_request)" if cancelled else ""),
                index,
            )
        elif self.notifications_sent:
            self.violation(
                "RPC-002",
                f"a response for id {response_id!r}, which no request of the client has, "
                f"after the client sent {self.notifications_sent} notification(s) (an answer "
                "to a notification?)",
                index,
            )
        else:
            self.violation(
                "RPC-001",
                f"response for id {response_id!r}, which no request of the client has",
                index,
            )

    def expect_null_id_error(self) -> None:
        """We sent something unparseable: one error response with id null is legitimate."""
        self.expected_null_id_errors += 1


def _looks_like_message(value: Mapping[str, Any]) -> bool:
    """A JSON object that is meant as a JSON-RPC message (not ``{}`` inside a pretty print)."""
    return any(key in value for key in ("jsonrpc", "method", "result", "error"))


def _valid_id(message: Mapping[str, Any]) -> bool:
    if "id" not in message:
        return True
    value = message["id"]
    return value is None or (isinstance(value, str | int) and not isinstance(value, bool))
