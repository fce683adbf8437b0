"""
API adapters of the scripted model server: one neutral request and answer, four wire formats.

Each adapter module turns one API's request body into a `ModelRequest` (system text,
messages with text / tool calls / tool results, the tools offered, stream flag, model) and
encodes one `Answer` (reasoning, text chunks, tool calls, usage, finish reason) streamed or
not, in that API's shapes:

- `openai_chat`: OpenAI chat completions (``POST /v1/chat/completions``);
- `openai_responses`: the OpenAI Responses API (``POST /v1/responses``);
- `anthropic`: Anthropic Messages (``POST /v1/messages``);
- `gemini`: the Gemini API (``POST /v1beta/models/{model}:generateContent``).

A *brain* (`Brain`) decides the answer to a neutral request: the script playback of
:mod:`acpkit.testing.modelserver` is one, the conformance model of
:mod:`acpkit.conformance.model` another.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

import attrs

__all__ = [
    "Adapter",
    "Answer",
    "AnswerToolCall",
    "Brain",
    "Message",
    "ModelRequest",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "estimate_tokens",
    "estimated_usage",
    "split_text",
]


@attrs.frozen
class ToolSpec:
    """A tool the client offers: name, description and JSON-schema parameters."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class ToolCall:
    """A tool call in the conversation history (made by the assistant earlier)."""

    id: str
    name: str
    arguments: Any = None


@attrs.frozen
class Message:
    """
    One neutral message: ``role`` is ``user``, ``assistant`` or ``tool``.

    A ``tool`` message is one tool result (``tool_call_id``, ``name`` when the API gives it,
    ``text`` the output, ``is_error`` when the API flags it).
    """

    role: str
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False
    images: int = 0


@attrs.frozen
class ModelRequest:
    """What one model call asks, whatever the API."""

    api: str
    model: str
    system: str = ""
    messages: tuple[Message, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    stream: bool = False
    #: chat completions only: ``stream_options.include_usage``
    include_usage: bool = False
    #: the JSON schema the answer text must follow (structured output), when asked
    response_schema: Mapping[str, Any] | None = None
    raw: Mapping[str, Any] = attrs.field(factory=dict, eq=False, repr=False)


@attrs.frozen
class Usage:
    """Token counts of one answer."""

    input: int
    output: int
    cached: int | None = None
    reasoning: int | None = None


@attrs.frozen
class AnswerToolCall:
    """A tool call the answer makes; ``fragments`` is its arguments JSON text, in pieces."""

    id: str
    name: str
    fragments: tuple[str, ...]

    @property
    def arguments_text(self) -> str:
        """The whole arguments text."""
        return "".join(self.fragments)

    def arguments(self) -> Any:
        """The arguments decoded (``{}`` when the text is not a JSON object)."""
        try:
            value = json.loads(self.arguments_text)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}


@attrs.frozen
class Answer:
    """
    One model answer (or fault), neutral. HTTP faults (``status``, ``garbage``,
    ``cut_after``, ``split_bytes``, ``delay``) are applied by the server on any API;
    ``error`` with content is an in-stream error event, without content an HTTP error.
    """

    chunks: tuple[str, ...] = ()
    reasoning: tuple[str, ...] = ()
    tool_calls: tuple[AnswerToolCall, ...] = ()
    usage: Usage | None = None
    finish_reason: str | None = None
    error: str | None = None
    status: int | None = None
    body: str | None = None
    garbage: str | None = None
    cut_after: int | None = None
    delay: float = 0.0
    split_bytes: int | None = None
    #: what the brain wants recorded about this answer (scenario, step...)
    info: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def effective_finish_reason(self) -> str:
        """``finish_reason``, else ``tool_calls`` with tool calls, else ``stop``."""
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"

    @property
    def has_content(self) -> bool:
        """Whether there is anything to send besides an error."""
        return bool(self.chunks or self.reasoning or self.tool_calls)

    @property
    def text(self) -> str:
        """The answer's text."""
        return "".join(self.chunks)


class Brain(Protocol):
    """Decides the answer to each model call."""

    def answer(self, request: ModelRequest, number: int) -> Answer:
        """The answer to the ``number``-th call (0-based) of the server."""


class Adapter(Protocol):
    """One API's wire format."""

    name: str

    def parse(self, body: Mapping[str, Any], *, model: str, stream: bool) -> ModelRequest:
        """The neutral request of a body (``model`` / ``stream`` from the URL when given)."""

    def stream(self, answer: Answer, request: ModelRequest, number: int) -> list[bytes]:
        """The streamed answer as a list of events (bytes each), in order."""

    def whole(self, answer: Answer, request: ModelRequest, number: int) -> bytes:
        """The non-streamed answer body (JSON)."""

    def error(self, message: str, status: int) -> bytes:
        """An error body in the API's shape."""


def estimate_tokens(text: str) -> int:
    """A deterministic token count: about four characters a token, at least 1."""
    return max(1, (len(text) + 3) // 4)


def estimated_usage(request: ModelRequest, answer: Answer) -> Usage:
    """Deterministic counts for an answer that names none: characters / 4 of each side."""
    parts = [request.system]
    for message in request.messages:
        parts.append(message.text)
        parts += [f"{call.name}{json.dumps(call.arguments)}" for call in message.tool_calls]
    parts += [f"{tool.name}{tool.description}" for tool in request.tools]
    produced = answer.text + "".join(answer.reasoning)
    produced += "".join(call.name + call.arguments_text for call in answer.tool_calls)
    return Usage(
        input=estimate_tokens("".join(parts)),
        output=estimate_tokens(produced),
        cached=0,
        reasoning=estimate_tokens("".join(answer.reasoning)) if answer.reasoning else 0,
    )


def split_text(text: str, pieces: int) -> list[str]:
    """``text`` cut into ``pieces`` nearly equal, non-empty parts (fewer if too short)."""
    count = max(1, min(pieces, len(text)))
    size, extra = divmod(len(text), count)
    out, start = [], 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        out.append(text[start:end])
        start = end
    return out


def text_of(value: Any) -> str:
    """The text of a content value: a string, or a list of parts with ``text`` keys."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(text_of(item) for item in value if text_of(item))
    if isinstance(value, dict):
        for key in ("text", "content", "output"):
            if key in value and isinstance(value[key], str | list):
                return text_of(value[key])
        return ""
    return str(value)


_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def sse(payload: Any, event: str | None = None, *, escape_breaks: bool = True) -> bytes:
    """
    One server-sent event (``event:`` line when given), JSON data. With ``escape_breaks``
    the characters some line splitters take for line ends (U+0085, U+2028, U+2029) are
    written as JSON escapes.
    """
    text = json.dumps(payload, ensure_ascii=False)
    if escape_breaks:
        text = text.translate(_LINE_BREAKS)
    data = b"data: " + text.encode("utf-8") + b"\n\n"
    if event is None:
        return data
    return b"event: " + event.encode("ascii") + b"\n" + data


def dumps(value: Any) -> bytes:
    """Compact-ish JSON bytes as the servers send."""
    return json.dumps(value, ensure_ascii=False).encode("utf-8")


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` if it is a dict, else ``{}``."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` if it is a list, else ``[]``."""
    return value if isinstance(value, list) else []


def schema_of(value: Any) -> dict[str, Any]:
    """A tool's parameters schema (an object schema when missing)."""
    schema = as_dict(value)
    return schema if schema else {"type": "object", "properties": {}}
