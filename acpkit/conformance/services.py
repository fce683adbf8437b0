"""
The client services the tester offers an agent when it advertises them: a simulated terminal
service and elicitation answers.

`FakeTerminals` serves ``terminal/*`` with the semantics of the spec page ``terminals``
(``docs/protocol/v1/terminals.mdx``), **without running anything**: the command is simulated
and "exits" at once with status 0, its output being one line that names it
(``$ COMMAND ARGS…`` then ``(simulated by acpkit-conformance)``). ``terminal/create`` returns
a fresh id at once; ``terminal/output`` returns the output (kept within ``outputByteLimit``,
truncated from the beginning at a character boundary, ``truncated`` set) and the exit status;
``terminal/wait_for_exit`` returns the exit status; ``terminal/kill`` succeeds and keeps the
terminal valid; ``terminal/release`` frees it, after which the id is invalid for every
``terminal/*`` method (answered ``-32602``). Running the agent's commands for real would make
the suite depend on the machine and on what a model asked for; the protocol rules only need
the lifecycle.

`elicitation_answer` answers ``elicitation/create``: ``accept`` with content valid against the
form's ``requestedSchema`` (drawn with `acpkit.testing.jsonschema.from_schema` when a draw
function is given, else a deterministic filler), ``decline`` or ``cancel``; a url elicitation
accepted means the user agreed to open the URL.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from hypothesis.strategies import SearchStrategy
from jsonschema import Draft202012Validator

from acpkit.testing.jsonschema import SchemaError, from_schema

__all__ = [
    "ELICITATION_ACTIONS",
    "FakeTerminals",
    "elicitation_answer",
    "fill_form",
]

#: What the tester may answer to ``elicitation/create``.
ELICITATION_ACTIONS = ("accept", "decline", "cancel")

_SIMULATED = "(simulated by acpkit-conformance)"

Draw = Callable[[SearchStrategy[Any]], Any]


def _error(code: int, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def _keep_tail(text: str, limit: int | None) -> tuple[str, bool]:
    """``text`` cut from the beginning to at most ``limit`` UTF-8 bytes, on a character
    boundary; and whether it was cut."""
    data = text.encode("utf-8")
    if limit is None or len(data) <= limit:
        return text, False
    tail = data[len(data) - limit :]
    return tail.decode("utf-8", "ignore"), True


@attrs.define
class _FakeTerminal:
    session_id: str
    output: str
    limit: int | None
    killed: bool = False


@attrs.define
class FakeTerminals:
    """Simulated terminals (see the module docstring); ``answer`` serves one request."""

    terminals: dict[str, _FakeTerminal] = attrs.field(factory=dict)
    released: set[str] = attrs.field(factory=set)
    _ids: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1))

    def answer(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """The response body for one ``terminal/*`` request."""
        if method == "terminal/create":
            return self._create(params)
        terminal_id = params.get("terminalId")
        terminal = self.terminals.get(terminal_id) if isinstance(terminal_id, str) else None
        if terminal is None:
            state = "released" if terminal_id in self.released else "unknown"
            return _error(-32602, f"{state} terminal {terminal_id!r}")
        exit_status = {"exitCode": 0, "signal": None}
        if method == "terminal/output":
            output, truncated = _keep_tail(terminal.output, terminal.limit)
            return {"result": {"output": output, "truncated": truncated, "exitStatus": exit_status}}
        if method == "terminal/wait_for_exit":
            return {"result": exit_status}
        if method == "terminal/kill":
            terminal.killed = True
            return {"result": {}}
        if method == "terminal/release":
            del self.terminals[str(terminal_id)]
            self.released.add(str(terminal_id))
            return {"result": {}}
        return _error(-32601, f"Method not found: {method}")

    def _create(self, params: Mapping[str, Any]) -> dict[str, Any]:
        command = params.get("command")
        args = params.get("args") or []
        limit = params.get("outputByteLimit")
        if not isinstance(command, str) or not isinstance(args, list):
            return _error(-32602, "terminal/create needs a command string and an args list")
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            return _error(-32602, f"outputByteLimit must be a non-negative integer: {limit!r}")
        terminal_id = f"term-{next(self._ids)}"
        line = " ".join([command, *(str(a) for a in args)])
        self.terminals[terminal_id] = _FakeTerminal(
            str(params.get("sessionId")), f"$ {line}\n{_SIMULATED}\n", limit
        )
        return {"result": {"terminalId": terminal_id}}


def _fill_property(prop: Mapping[str, Any]) -> Any:
    kind = prop.get("type")
    if "default" in prop and prop["default"] is not None:
        return prop["default"]
    if kind == "string":
        for key in ("enum", "oneOf", "anyOf"):
            choices = prop.get(key)
            if isinstance(choices, list) and choices:
                first = choices[0]
                return first.get("const") if isinstance(first, dict) else first
        text = "conformance"
        minimum = prop.get("minLength")
        if isinstance(minimum, int) and minimum > len(text):
            text = text * (minimum // len(text) + 1)
        maximum = prop.get("maxLength")
        if isinstance(maximum, int):
            text = text[:maximum]
        return text
    if kind in ("number", "integer"):
        low = prop.get("minimum")
        high = prop.get("maximum")
        value = low if isinstance(low, int | float) else 0
        if isinstance(high, int | float) and value > high:
            value = high
        return int(value) if kind == "integer" else value
    if kind == "boolean":
        return True
    if kind == "array":
        minimum = prop.get("minItems")
        items = prop.get("items")
        if isinstance(minimum, int) and minimum > 0 and isinstance(items, dict):
            return [_fill_property({"type": "string", **items})] * minimum
        return []
    return None


def fill_form(requested: Mapping[str, Any]) -> dict[str, Any]:
    """Deterministic content for a form: every property gets a plain valid value."""
    properties = requested.get("properties")
    if not isinstance(properties, dict):
        return {}
    content = {}
    for name, prop in properties.items():
        if isinstance(prop, dict):
            value = _fill_property(prop)
            if value is not None:
                content[name] = value
    return content


def _content_schema(requested: Mapping[str, Any]) -> dict[str, Any]:
    properties = requested.get("properties")
    required = requested.get("required")
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties if isinstance(properties, dict) else {},
        "additionalProperties": False,
    }
    if isinstance(required, list):
        schema["required"] = required
    return schema


def _valid(schema: Mapping[str, Any], content: Any) -> bool:
    try:
        return not any(Draft202012Validator(schema).iter_errors(content))
    except Exception:  # an agent's schema that jsonschema itself cannot use
        return False


def elicitation_answer(
    params: Mapping[str, Any], action: str, draw: Draw | None = None
) -> dict[str, Any]:
    """
    The response body for ``elicitation/create`` with ``params``: ``action`` is ``accept``,
    ``decline`` or ``cancel``. An accepted form gets content valid against its
    ``requestedSchema`` (drawn with ``draw`` when given, else `fill_form`); when no valid
    content can be made the form is declined.
    """
    if action != "accept":
        return {"result": {"action": action}}
    if params.get("mode") != "form":
        return {"result": {"action": "accept"}}
    requested = params.get("requestedSchema")
    if not isinstance(requested, dict):
        return {"result": {"action": "decline"}}
    schema = _content_schema(requested)
    content: Any = None
    if draw is not None:
        try:
            content = draw(from_schema(schema, defs={}, unknown_keys=False))
        except SchemaError:
            content = None  # a keyword the generator does not support: use the filler
    if content is None or not _valid(schema, content):
        content = fill_form(requested)
    if not _valid(schema, content):
        return {"result": {"action": "decline"}}
    return {"result": {"action": "accept", "content": content}}
