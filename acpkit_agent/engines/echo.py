"""
The ``echo`` engine: the offline default when no model is configured. It is NOT a language
model.

- It echoes the last user message back in streamed chunks of at most 24 characters, cut at
  word boundaries (whitespace preserved); a long message makes a long answer. When the
  sink asks it to wait (back-pressure), it sends the next chunk only once it may.
- It turns plain directives in the last user message into tool calls, one per line, when
  the tool is offered:

  ==============================  ====================================================
  ``run: CMD``                    ``bash {"command": CMD}``
  ``read: PATH``                  ``read_file {"path": PATH}``
  ``write: PATH TEXT``            ``write_file {"path": PATH, "content": TEXT}``
  ``edit: PATH OLD -> NEW``       ``edit_file {"path": PATH, "old_text": OLD, "new_text": NEW}``
  ==============================  ====================================================

  In ``TEXT``, ``OLD`` and ``NEW`` the escapes ``\\n``, ``\\t`` and ``\\\\`` stand for a
  newline, a tab and a backslash (a directive is one line).
- When the last messages are tool results, it replies with a short summary of them (the
  first lines of each output) and no tool calls.
- Usage is approximated as characters / 4 so usage updates show; the context window is
  :data:`ECHO_CONTEXT_WINDOW` tokens unless the ``context_window`` setting says otherwise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from twisted.internet.defer import Deferred, fail, succeed
from zope.interface import implementer

from acpkit_agent.engines.base import (
    EngineError,
    IEngine,
    ModelReply,
    StreamSink,
    ToolCallRequest,
    ToolSpec,
    Usage,
    must_wait,
    validate_settings,
)

__all__ = ["ECHO_CONTEXT_WINDOW", "EchoEngine", "parse_directives"]

ECHO_CONTEXT_WINDOW = 32768
"""The context window the echo engine reports, in tokens."""

SUMMARY_LINES = 3
"""How many first lines of each tool output the summary shows."""

_SETTINGS: dict[str, tuple[type, ...]] = {"context_window": (int,)}
_DIRECTIVE = re.compile(r"^\s*(run|read|write|edit):[ \t]*(.*?)\s*$")
_ESCAPE = re.compile(r"\\(n|t|\\)")
_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\"}
_PIECE = re.compile(r"\S+\s*|\s+")


def _unescape(text: str) -> str:
    return _ESCAPE.sub(lambda match: _ESCAPES[match.group(1)], text)


def parse_directives(text: str) -> list[tuple[str, dict[str, str]] | str]:
    """
    The directives of ``text``, one per line, in order: ``(tool name, arguments)`` for each
    well-formed directive, or an explanation string for a malformed one. Other lines are
    ignored.
    """
    found: list[tuple[str, dict[str, str]] | str] = []
    for line in text.splitlines():
        match = _DIRECTIVE.match(line)
        if match is None:
            continue
        verb, rest = match.group(1), match.group(2)
        if not rest:
            found.append(f"`{verb}:` needs an argument")
        elif verb == "run":
            found.append(("bash", {"command": rest}))
        elif verb == "read":
            found.append(("read_file", {"path": rest}))
        elif verb == "write":
            path, _, content = rest.partition(" ")
            found.append(("write_file", {"path": path, "content": _unescape(content.lstrip())}))
        else:
            path, _, change = rest.partition(" ")
            old, arrow, new = change.partition(" -> ")
            if not arrow:
                found.append(f"`edit: {rest}` needs `PATH OLD -> NEW`")
            else:
                found.append(
                    (
                        "edit_file",
                        {
                            "path": path,
                            "old_text": _unescape(old.strip()),
                            "new_text": _unescape(new),
                        },
                    )
                )
    return found


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _tokens(characters: int) -> int:
    return max(1, (characters + 3) // 4)


def _chunks(text: str, size: int = 24) -> Iterator[str]:
    """
    ``text`` in chunks at word boundaries, whitespace kept, made one at a time (a long
    answer is not held twice more while it streams).
    """
    current = ""
    for match in _PIECE.finditer(text):
        piece = match.group()
        if current and len(current) + len(piece) <= size:
            current += piece
        else:
            if current:
                yield current
            current = piece
    if current:
        yield current


async def _stream(chunks: Iterable[str], sink: StreamSink, reply: ModelReply) -> ModelReply:
    """Send ``chunks`` to ``sink``, waiting whenever it asks to; then return ``reply``."""
    for chunk in chunks:
        ready = sink.text(chunk)
        if must_wait(ready):
            await ready
    return reply


@implementer(IEngine)
class EchoEngine:
    """Echoes the user and runs plain directives; see the module docstring."""

    name = "echo"
    description = "echo (offline, not a language model: echoes and runs directives)"

    def __init__(self, *, context_window: int = ECHO_CONTEXT_WINDOW) -> None:
        self._window = context_window
        self._next_call = 0

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> EchoEngine:
        """Build from the ``[engine]`` table (only ``context_window`` is accepted)."""
        checked = validate_settings("echo", settings, _SETTINGS)
        window = checked.get("context_window", ECHO_CONTEXT_WINDOW)
        if window < 0:
            raise ValueError("setting 'context_window' of engine 'echo' must be >= 0")
        return cls(context_window=window)

    def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[ToolSpec],
        sink: StreamSink,
    ) -> Deferred[ModelReply]:
        """
        A summary of trailing tool results, else echo and directives: at once, unless the
        sink asks to wait (then each next chunk is sent once it may).
        """
        if not messages:
            return fail(EngineError("echo engine called with an empty history"))
        calls: list[ToolCallRequest] = []
        if messages[-1].get("role") == "tool":
            text = self._summarise(messages)
        else:
            text, calls = self._answer(messages, {tool.name for tool in tools})
        prompt_chars = sum(len(_content_text(m.get("content"))) for m in messages)
        output_chars = len(text) + sum(len(call.raw_arguments) for call in calls)
        reply = ModelReply(
            text=text,
            reasoning="",
            tool_calls=tuple(calls),
            usage=Usage(input_tokens=_tokens(prompt_chars), output_tokens=_tokens(output_chars)),
            finish_reason="tool_calls" if calls else "stop",
        )
        return Deferred.fromCoroutine(_stream(_chunks(text), sink, reply))

    def context_window(self) -> Deferred[int]:
        """The fixed window (:data:`ECHO_CONTEXT_WINDOW` unless configured)."""
        return succeed(self._window)

    def _answer(
        self, messages: Sequence[Mapping[str, Any]], offered: set[str]
    ) -> tuple[str, list[ToolCallRequest]]:
        user = next(
            (
                _content_text(m.get("content"))
                for m in reversed(messages)
                if m.get("role") == "user"
            ),
            "",
        )
        calls: list[ToolCallRequest] = []
        notes: list[str] = []
        for directive in parse_directives(user):
            if isinstance(directive, str):
                notes.append(directive)
                continue
            tool, arguments = directive
            if tool not in offered:
                notes.append(f"the tool {tool} is not offered")
                continue
            self._next_call += 1
            raw = json.dumps(arguments, ensure_ascii=False)
            calls.append(
                ToolCallRequest(
                    id=f"echo_{self._next_call}",
                    name=tool,
                    arguments=arguments,
                    raw_arguments=raw,
                )
            )
        if calls:
            text = f"Running {len(calls)} tool call(s)."
        elif user.strip():
            text = f"Echo: {user}"
        else:
            text = "Echo: (empty message)"
        if notes:
            text += "\n" + "\n".join(f"(ignored: {note})" for note in notes)
        return text, calls

    def _summarise(self, messages: Sequence[Mapping[str, Any]]) -> str:
        results: list[Mapping[str, Any]] = []
        for message in reversed(messages):
            if message.get("role") != "tool":
                break
            results.append(message)
        results.reverse()
        names: dict[str, str] = {}
        for message in messages:
            for call in message.get("tool_calls") or []:
                if isinstance(call, dict):
                    function = call.get("function") or {}
                    names[str(call.get("id"))] = str(function.get("name", "tool"))
        lines = [f"{len(results)} tool result(s):"]
        for result in results:
            name = names.get(str(result.get("tool_call_id")), "tool")
            output = _content_text(result.get("content"))
            output_lines = output.splitlines() or ["(no output)"]
            shown = output_lines[:SUMMARY_LINES]
            more = len(output_lines) - len(shown)
            lines.append(f"- {name}: " + shown[0])
            lines.extend(f"  {line}" for line in shown[1:])
            if more > 0:
                lines.append(f"  … ({more} more line(s))")
        return "\n".join(lines)
