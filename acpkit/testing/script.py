"""
Model scripts: deterministic model turns for tests, shared by the ``scripted`` engine of the
reference agent and by :mod:`acpkit.testing.modelserver`.

A script is a TOML or JSON document with the same structure::

    loop = false              # replay from the first turn when the script runs out
    model = "scripted"        # the model id the server reports
    context_window = 8192     # n_ctx the server reports to probes; the engine's window
    context_probe = "all"     # which probes the server answers: props, ollama, vllm, all, none

    [[turn]]
    reasoning = ["thinking..."]       # reasoning deltas, in order
    chunks = ["Hello", ", world"]      # text deltas, in order, whitespace kept
    usage = { input = 10, output = 5, cached = 2, reasoning = 1 }
    finish_reason = "stop"            # default: "tool_calls" with tool calls, else "stop"
    [[turn.tool_calls]]
    name = "bash"
    arguments = { command = "ls" }     # a table, or a string sent verbatim (may be bad JSON)
    id = "call_1"                      # optional; default "call_<turn>_<n>"
    fragments = 3                      # the server splits the arguments over 3 deltas

Fault keys of a turn (for error-path tests):

- ``error = "text"``: the call fails (the server answers HTTP 500 with that message, or
  ``status``; the scripted engine fails with that text);
- ``status = 503`` (with optional ``body``): the server answers that HTTP status;
- ``garbage = "text"``: the server answers 200 with that text instead of a valid stream;
- ``cut_after = N``: the stream stops (connection dropped) after N events;
- ``delay = 0.5``: seconds between streamed events (the first one is sent at once), via
  the reactor's clock: a slow model, or a stalled one for cancellation tests;
- ``split_bytes = N``: the server writes the stream in pieces of N bytes (cuts SSE lines
  and UTF-8 sequences anywhere).

Validation is strict: an unknown key or a wrong type raises :class:`ScriptError` naming the
file and the key.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import attrs

__all__ = [
    "Script",
    "ScriptError",
    "ScriptToolCall",
    "ScriptUsage",
    "Turn",
    "load_script",
    "parse_script",
]

CONTEXT_PROBES = ("props", "ollama", "vllm", "all", "none")


class ScriptError(ValueError):
    """A script that cannot be used: the message names the file and the offending key."""


@attrs.frozen
class ScriptUsage:
    """Token counts a turn reports."""

    input: int
    output: int
    cached: int | None = None
    reasoning: int | None = None

    def as_openai(self) -> dict[str, Any]:
        """The counts as an OpenAI ``usage`` object."""
        usage: dict[str, Any] = {
            "prompt_tokens": self.input,
            "completion_tokens": self.output,
            "total_tokens": self.input + self.output,
        }
        if self.cached is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached}
        if self.reasoning is not None:
            usage["completion_tokens_details"] = {"reasoning_tokens": self.reasoning}
        return usage


@attrs.frozen
class ScriptToolCall:
    """A tool call a turn makes; ``arguments_text`` is the JSON text sent to the client."""

    name: str
    arguments_text: str
    id: str | None = None
    fragments: int = 1

    def fragments_of_arguments(self) -> list[str]:
        """The arguments text cut into ``fragments`` nearly equal pieces."""
        text = self.arguments_text
        count = max(1, min(self.fragments, len(text)))
        size, extra = divmod(len(text), count)
        pieces, start = [], 0
        for index in range(count):
            end = start + size + (1 if index < extra else 0)
            pieces.append(text[start:end])
            start = end
        return pieces or [""]


@attrs.frozen
class Turn:
    """One scripted model answer (or fault)."""

    chunks: tuple[str, ...] = ()
    reasoning: tuple[str, ...] = ()
    tool_calls: tuple[ScriptToolCall, ...] = ()
    usage: ScriptUsage | None = None
    finish_reason: str | None = None
    error: str | None = None
    status: int | None = None
    body: str | None = None
    garbage: str | None = None
    cut_after: int | None = None
    delay: float = 0.0
    split_bytes: int | None = None

    @property
    def effective_finish_reason(self) -> str:
        """``finish_reason``, else ``tool_calls`` when the turn calls tools, else ``stop``."""
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"

    def call_id(self, turn_number: int, position: int) -> str:
        """The id of tool call ``position`` (0-based) of this turn, numbered ``turn_number``."""
        given = self.tool_calls[position].id
        return given if given is not None else f"call_{turn_number}_{position + 1}"

    def deltas(self, turn_number: int) -> list[tuple[dict[str, Any], str | None]]:
        """
        The turn as streamed ``(delta, finish_reason)`` pairs, in order: reasoning, text,
        tool calls (name first, then argument fragments), and a final empty delta with the
        finish reason. The first delta also carries ``"role": "assistant"``.
        """
        events: list[tuple[dict[str, Any], str | None]] = []
        events += [({"reasoning_content": piece}, None) for piece in self.reasoning]
        events += [({"content": piece}, None) for piece in self.chunks]
        for position, call in enumerate(self.tool_calls):
            head = {
                "index": position,
                "id": self.call_id(turn_number, position),
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            events.append(({"tool_calls": [head]}, None))
            for piece in call.fragments_of_arguments():
                fragment = {"index": position, "function": {"arguments": piece}}
                events.append(({"tool_calls": [fragment]}, None))
        events.append(({}, self.effective_finish_reason))
        events[0] = ({"role": "assistant", **events[0][0]}, events[0][1])
        return events

    def message(self, turn_number: int) -> dict[str, Any]:
        """The turn as a non-streamed assistant ``message`` object."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.chunks)}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": self.call_id(turn_number, position),
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_text},
                }
                for position, call in enumerate(self.tool_calls)
            ]
        return message


@attrs.frozen
class Script:
    """A sequence of model turns, replayed in order (from the start again if ``loop``)."""

    turns: tuple[Turn, ...]
    loop: bool = False
    model: str = "scripted"
    context_window: int | None = None
    context_probe: str = "all"
    source: str = "<script>"

    def turn_at(self, call_number: int) -> Turn | None:
        """The turn for the ``call_number``-th call (0-based), or None when exhausted."""
        if not self.turns:
            return None
        if self.loop:
            return self.turns[call_number % len(self.turns)]
        return self.turns[call_number] if call_number < len(self.turns) else None

    def exhausted_message(self) -> str:
        """The explanation given when the script has no turn left."""
        return f"script exhausted after {len(self.turns)} turns ({self.source})"


def load_script(path: str | Path) -> Script:
    """Read a script from a ``.toml`` or ``.json`` file (by extension; else tried as TOML)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ScriptError(f"{path}: cannot read script: {error.strerror or error}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ScriptError(f"{path}: script is not UTF-8: {error}") from None
    if path.suffix.lower() == ".json":
        try:
            document = json.loads(text)
        except ValueError as error:
            raise ScriptError(f"{path}: invalid JSON: {error}") from None
    else:
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise ScriptError(f"{path}: invalid TOML: {error}") from None
    return parse_script(document, source=str(path))


def parse_script(document: Any, *, source: str = "<script>") -> Script:
    """Validate a decoded script document (a dict, as from TOML or JSON) into a :class:`Script`."""
    reader = _Reader(source)
    top = reader.table(document, "")
    reader.check_keys(top, "", {"turn", "loop", "model", "context_window", "context_probe"})
    raw_turns = top.get("turn", [])
    if not isinstance(raw_turns, list):
        reader.fail("turn", "must be an array of tables ([[turn]])")
    turns = tuple(reader.turn(raw, f"turn[{index}]") for index, raw in enumerate(raw_turns))
    probe = reader.optional(top, "", "context_probe", str) or "all"
    if probe not in CONTEXT_PROBES:
        reader.fail("context_probe", f"must be one of {', '.join(CONTEXT_PROBES)}")
    window = reader.optional(top, "", "context_window", int)
    if window is not None and window < 0:
        reader.fail("context_window", "must be >= 0")
    return Script(
        turns=turns,
        loop=bool(reader.optional(top, "", "loop", bool)),
        model=reader.optional(top, "", "model", str) or "scripted",
        context_window=window,
        context_probe=probe,
        source=source,
    )


_TURN_KEYS = {
    "chunks",
    "reasoning",
    "tool_calls",
    "usage",
    "finish_reason",
    "error",
    "status",
    "body",
    "garbage",
    "cut_after",
    "delay",
    "split_bytes",
}
_USAGE_KEYS = {"input", "output", "cached", "reasoning"}
_CALL_KEYS = {"name", "arguments", "id", "fragments"}


@attrs.define
class _Reader:
    source: str

    def fail(self, key: str, problem: str) -> NoReturn:
        raise ScriptError(f"{self.source}: key '{key}': {problem}")

    def table(self, value: Any, where: str) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            raise ScriptError(f"{self.source}: {where or 'the script'} must be a table/object")
        return value

    def check_keys(self, table: Mapping[str, Any], where: str, known: set[str]) -> None:
        for key in table:
            if key not in known:
                name = f"{where}.{key}" if where else key
                self.fail(name, f"unknown key (known: {', '.join(sorted(known))})")

    def optional(self, table: Mapping[str, Any], where: str, key: str, kind: type) -> Any:
        if key not in table:
            return None
        value = table[key]
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            ok, value = True, float(value)
        if not ok:
            self.fail(f"{where}.{key}" if where else key, f"must be {kind.__name__}")
        return value

    def strings(self, table: Mapping[str, Any], where: str, key: str) -> tuple[str, ...]:
        value = table.get(key, [])
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            self.fail(f"{where}.{key}", "must be a list of strings")
        return tuple(value)

    def positive(self, table: Mapping[str, Any], where: str, key: str) -> int | None:
        value = self.optional(table, where, key, int)
        if value is not None and value < 1:
            self.fail(f"{where}.{key}", "must be >= 1")
        return value  # type: ignore[no-any-return]

    def turn(self, raw: Any, where: str) -> Turn:
        table = self.table(raw, where)
        self.check_keys(table, where, _TURN_KEYS)
        usage = None
        if "usage" in table:
            usage = self.usage(table["usage"], f"{where}.usage")
        raw_calls = table.get("tool_calls", [])
        if not isinstance(raw_calls, list):
            self.fail(f"{where}.tool_calls", "must be an array of tables")
        calls = tuple(
            self.tool_call(call, f"{where}.tool_calls[{index}]")
            for index, call in enumerate(raw_calls)
        )
        status = self.optional(table, where, "status", int)
        if status is not None and not 400 <= status <= 599:
            self.fail(f"{where}.status", "must be an HTTP error status (400-599)")
        cut_after = self.optional(table, where, "cut_after", int)
        if cut_after is not None and cut_after < 0:
            self.fail(f"{where}.cut_after", "must be >= 0")
        delay = self.optional(table, where, "delay", float) or 0.0
        if delay < 0:
            self.fail(f"{where}.delay", "must be >= 0")
        return Turn(
            chunks=self.strings(table, where, "chunks"),
            reasoning=self.strings(table, where, "reasoning"),
            tool_calls=calls,
            usage=usage,
            finish_reason=self.optional(table, where, "finish_reason", str),
            error=self.optional(table, where, "error", str),
            status=status,
            body=self.optional(table, where, "body", str),
            garbage=self.optional(table, where, "garbage", str),
            cut_after=cut_after,
            delay=delay,
            split_bytes=self.positive(table, where, "split_bytes"),
        )

    def usage(self, raw: Any, where: str) -> ScriptUsage:
        table = self.table(raw, where)
        self.check_keys(table, where, _USAGE_KEYS)
        counts = {key: self.optional(table, where, key, int) for key in _USAGE_KEYS}
        for key in ("input", "output"):
            if counts[key] is None:
                self.fail(f"{where}.{key}", "is required")
        for key, value in counts.items():
            if value is not None and value < 0:
                self.fail(f"{where}.{key}", "must be >= 0")
        return ScriptUsage(
            input=counts["input"],
            output=counts["output"],
            cached=counts["cached"],
            reasoning=counts["reasoning"],
        )

    def tool_call(self, raw: Any, where: str) -> ScriptToolCall:
        table = self.table(raw, where)
        self.check_keys(table, where, _CALL_KEYS)
        name = self.optional(table, where, "name", str)
        if not name:
            self.fail(f"{where}.name", "is required (a non-empty string)")
        arguments = table.get("arguments", {})
        if isinstance(arguments, dict):
            text = json.dumps(arguments, ensure_ascii=False)
        elif isinstance(arguments, str):
            text = arguments
        else:
            self.fail(f"{where}.arguments", "must be a table or a string of JSON text")
        return ScriptToolCall(
            name=name,
            arguments_text=text,
            id=self.optional(table, where, "id", str),
            fragments=self.positive(table, where, "fragments") or 1,
        )


def script_of(turns: Sequence[Mapping[str, Any]], **options: Any) -> Script:
    """Build a validated script from Python values: ``script_of([{...}], loop=True)``."""
    document: dict[str, Any] = {"turn": [dict(turn) for turn in turns], **options}
    return parse_script(document, source="<script_of>")


__all__ += ["script_of"]
