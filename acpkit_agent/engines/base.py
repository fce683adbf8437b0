"""
The model engine contract: what the agent's turn loop calls to get a model reply.

Messages are OpenAI chat-completions dicts (the history the agent keeps and persists):
``{"role": "system" | "user" | "assistant" | "tool", "content": str, ...}``. Assistant
messages may carry ``"tool_calls"`` (``[{"id", "type": "function", "function": {"name",
"arguments": "<json text>"}}]``) and ``"reasoning_content"``; tool messages carry
``"tool_call_id"``.

An engine (:class:`IEngine`) streams deltas of one model call to a :class:`StreamSink` and
resolves with a :class:`ModelReply`; it fails with :class:`EngineError` (a one-line,
user-presentable explanation) and is cancellable with ``Deferred.cancel()``.

Back-pressure: a sink call may return an unfired ``Deferred`` (the client is not reading);
an engine that can pause (``echo``, ``scripted``) waits for it before its next delta
(:func:`must_wait` tells whether to), so a client that stops reading stops the stream.

:class:`DeltaAssembler` turns OpenAI ``chat.completion.chunk`` deltas into a
:class:`ModelReply`; the ``openai`` and ``scripted`` engines share it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeGuard

import attrs
import zope.interface
from twisted.internet.defer import Deferred

__all__ = [
    "DeltaAssembler",
    "EngineError",
    "IEngine",
    "ModelReply",
    "StreamSink",
    "ToolCallRequest",
    "ToolSpec",
    "Usage",
    "error_text",
    "must_wait",
    "one_line_excerpt",
    "parse_tool_arguments",
    "validate_settings",
]


@attrs.frozen
class ToolSpec:
    """A tool offered to the model: its name, description and JSON schema of its arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]

    def as_openai(self) -> dict[str, Any]:
        """The tool as an entry of the chat-completions ``tools`` array."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


@attrs.frozen
class ToolCallRequest:
    """
    A tool call the model asked for.

    ``raw_arguments`` is the JSON text exactly as the model produced it. ``arguments`` is its
    parsed object; when the text is not a JSON object, ``arguments`` is ``{}`` and ``error``
    explains why (the turn loop should answer the model with that error instead of running
    the tool).
    """

    id: str
    name: str
    arguments: Mapping[str, Any]
    raw_arguments: str
    error: str | None = None

    def as_openai(self) -> dict[str, Any]:
        """
        The call as an entry of an assistant message's ``tool_calls``.

        Unparsable arguments are replaced by ``"{}"`` so that the history stays valid for
        servers that re-parse the arguments of past calls (llama.cpp does).
        """
        arguments = self.raw_arguments if self.error is None else "{}"
        if not arguments.strip():
            arguments = "{}"
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": arguments},
        }


def parse_tool_arguments(raw: str) -> tuple[Mapping[str, Any], str | None]:
    """
    Parse a tool call's JSON arguments text.

    Returns ``(arguments, None)`` on success, ``({}, explanation)`` when the text is not a
    JSON object. Empty text means no arguments (``{}``), as some servers send for
    parameterless tools.
    """
    if not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except ValueError as error:
        return {}, f"the arguments are not valid JSON ({error}): {one_line_excerpt(raw)}"
    if not isinstance(value, dict):
        return {}, f"the arguments are not a JSON object: {one_line_excerpt(raw)}"
    return value, None


@attrs.frozen
class Usage:
    """
    Token counts of one model call, as reported by the server.

    ``output_tokens`` includes ``thought_tokens`` (OpenAI's ``completion_tokens`` includes
    ``reasoning_tokens``); ``input_tokens`` includes ``cached_read_tokens``.
    """

    input_tokens: int
    output_tokens: int
    thought_tokens: int | None = None
    cached_read_tokens: int | None = None

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    @classmethod
    def from_openai(cls, usage: Mapping[str, Any]) -> Usage:
        """
        Read an OpenAI ``usage`` object (``prompt_tokens``, ``completion_tokens``,
        ``prompt_tokens_details.cached_tokens``, ``completion_tokens_details.reasoning_tokens``).

        Raises ``ValueError`` when the counts are missing or not integers.
        """
        prompt = usage.get("prompt_tokens")
        completion = usage.get("completion_tokens", 0)
        if not _is_int(prompt) or not _is_int(completion):
            raise ValueError(
                f"usage without integer token counts: {one_line_excerpt(json.dumps(usage))}"
            )
        cached = _nested_int(usage, "prompt_tokens_details", "cached_tokens")
        thought = _nested_int(usage, "completion_tokens_details", "reasoning_tokens")
        return cls(
            input_tokens=prompt,
            output_tokens=completion,
            thought_tokens=thought,
            cached_read_tokens=cached,
        )


@attrs.frozen
class ModelReply:
    """One complete model answer: text, reasoning, tool calls, usage and finish reason."""

    text: str
    reasoning: str
    tool_calls: Sequence[ToolCallRequest]
    usage: Usage | None
    finish_reason: str | None

    def as_message(self) -> dict[str, Any]:
        """The assistant message to append to the history."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.reasoning:
            message["reasoning_content"] = self.reasoning
        if self.tool_calls:
            message["tool_calls"] = [call.as_openai() for call in self.tool_calls]
        return message


class StreamSink(Protocol):
    """
    Receives the deltas of a model call while it streams (whitespace preserved).

    Each call may return a ``Deferred``: while it is unfired the sink's reader is not
    keeping up, and an engine that can pause waits for it before the next delta
    (back-pressure).  ``None`` or a fired Deferred: go on.
    """

    def text(self, delta: str) -> Deferred[None] | None:
        """A piece of the answer's text."""

    def reasoning(self, delta: str) -> Deferred[None] | None:
        """A piece of the model's reasoning ("thinking") text."""


def must_wait(ready: Deferred[None] | None) -> TypeGuard[Deferred[None]]:
    """Whether a sink call's result asks the engine to wait before the next delta."""
    return ready is not None and not ready.called


class EngineError(Exception):
    """A failed model call, with a one-line, user-presentable explanation as its message."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))

    @property
    def message(self) -> str:
        """The one-line explanation."""
        return str(self.args[0])


class IEngine(zope.interface.Interface):
    """A model engine: one ``complete()`` call is one model call of a turn."""

    name = zope.interface.Attribute("The engine's name: 'openai', 'scripted', 'echo'.")
    description = zope.interface.Attribute(
        "One line for the startup banner, e.g. 'openai (http://127.0.0.1:8080/v1, model x)'."
    )

    def complete(
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[ToolSpec],
        sink: StreamSink,
    ) -> Deferred[ModelReply]:
        """
        Ask the model for the next assistant message.

        Streams text and reasoning deltas to ``sink`` as they arrive and resolves with the
        complete reply; when a sink call returns an unfired Deferred, an engine that can
        pause its source waits for it before the next delta (back-pressure; an engine that
        cannot, goes on: the sink copes). Fails with :class:`EngineError` on connection
        errors, HTTP errors, garbage or a cut stream. ``Deferred.cancel()`` aborts the call
        at once (the Deferred fails with ``CancelledError``).
        """

    def context_window() -> Deferred[int]:
        """The model's context window in tokens: configured, else probed, else 0. Never fails."""


def _new_call_id() -> str:
    return "call_" + secrets.token_hex(6)


@attrs.define
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: str = ""


class DeltaAssembler:
    """
    Assembles streamed chat-completions chunks into a :class:`ModelReply`.

    Feed each decoded ``chat.completion.chunk`` object to :meth:`feed`; text and reasoning
    deltas go to the sink at once; tool-call deltas are assembled by ``index`` (``id``,
    ``function.name`` and ``function.arguments`` fragments are concatenated). A chunk with
    an ``error`` object raises :class:`EngineError`. :meth:`feed` and :meth:`feed_delta`
    return what the sink asked to wait for (see :func:`must_wait`), or ``None``.
    """

    def __init__(self, sink: StreamSink) -> None:
        self._sink = sink
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, _PartialCall] = {}
        self.usage: Usage | None = None
        self.finish_reason: str | None = None

    def feed(self, chunk: Any) -> Deferred[None] | None:
        """Take one decoded chunk object; return what the sink asked to wait for."""
        if not isinstance(chunk, dict):
            raise EngineError(
                f"model server sent a non-object chunk: {one_line_excerpt(repr(chunk))}"
            )
        error = chunk.get("error")
        if error is not None:
            raise EngineError(f"model server error: {error_text(error)}")
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            try:
                self.usage = Usage.from_openai(usage)
            except ValueError as bad:
                raise EngineError(f"model server sent a bad usage object: {bad}") from None
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise EngineError(f"model server sent bad choices: {one_line_excerpt(repr(choices))}")
        ready: Deferred[None] | None = None
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or choice.get("message") or {}
            if isinstance(delta, dict):
                ready = _wait_for(ready, self.feed_delta(delta))
            finish = choice.get("finish_reason")
            if isinstance(finish, str):
                self.finish_reason = finish
        return ready

    def feed_delta(self, delta: Mapping[str, Any]) -> Deferred[None] | None:
        """
        Take one ``delta`` object (or a whole non-streamed ``message``); return what the
        sink asked to wait for.
        """
        ready: Deferred[None] | None = None
        reasoning = delta.get("reasoning_content")
        if not isinstance(reasoning, str):
            reasoning = delta.get("reasoning")  # Ollama and vLLM's newer name
        if isinstance(reasoning, str) and reasoning:
            self._reasoning.append(reasoning)
            ready = self._sink.reasoning(reasoning)
        content = delta.get("content")
        if isinstance(content, str) and content:
            self._text.append(content)
            ready = _wait_for(ready, self._sink.text(content))
        tool_calls = delta.get("tool_calls")
        if isinstance(tool_calls, list):
            for position, fragment in enumerate(tool_calls):
                if isinstance(fragment, dict):
                    self._feed_tool_call(position, fragment)
        return ready

    def _feed_tool_call(self, position: int, fragment: Mapping[str, Any]) -> None:
        index = fragment.get("index")
        if not _is_int(index):
            index = position if position not in self._calls else len(self._calls)
        partial = self._calls.setdefault(index, _PartialCall())
        call_id = fragment.get("id")
        if isinstance(call_id, str) and call_id and not partial.id:
            partial.id = call_id  # sent once by OpenAI, repeated by some servers
        function = fragment.get("function")
        if isinstance(function, dict):
            name = function.get("name")
            if isinstance(name, str) and name != partial.name:
                partial.name += name  # some servers repeat the whole name in every delta
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                partial.arguments += arguments
            elif isinstance(arguments, dict):  # Ollama's native style: an object
                partial.arguments += json.dumps(arguments)

    def reply(self) -> ModelReply:
        """The reply assembled so far."""
        calls = []
        for index in sorted(self._calls):
            partial = self._calls[index]
            arguments, error = parse_tool_arguments(partial.arguments)
            calls.append(
                ToolCallRequest(
                    id=partial.id or _new_call_id(),
                    name=partial.name,
                    arguments=arguments,
                    raw_arguments=partial.arguments,
                    error=error,
                )
            )
        return ModelReply(
            text="".join(self._text),
            reasoning="".join(self._reasoning),
            tool_calls=tuple(calls),
            usage=self.usage,
            finish_reason=self.finish_reason,
        )


def _wait_for(
    earlier: Deferred[None] | None, later: Deferred[None] | None
) -> Deferred[None] | None:
    """Of two sink results, the one to wait for: the later unless only the earlier waits."""
    return earlier if must_wait(earlier) and not must_wait(later) else later


def error_text(error: Any) -> str:
    """The message of an OpenAI-style ``error`` value (an object with ``message``, or text)."""
    if isinstance(error, dict):
        message = error.get("message")
        if isinstance(message, str) and message:
            return one_line_excerpt(message)
    return one_line_excerpt(error if isinstance(error, str) else json.dumps(error))


def one_line_excerpt(text: str, limit: int = 200) -> str:
    """``text`` on one line (whitespace runs collapsed), cut to ``limit`` characters."""
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 1] + "…"


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _nested_int(mapping: Mapping[str, Any], key: str, inner: str) -> int | None:
    details = mapping.get(key)
    if isinstance(details, dict):
        value = details.get(inner)
        if _is_int(value):
            return value
    return None


def validate_settings(
    engine: str, settings: Mapping[str, Any], known: Mapping[str, tuple[type, ...]]
) -> dict[str, Any]:
    """
    Check an engine's settings table: every key known, every value of an allowed type.

    Returns a plain dict copy. Raises ``ValueError`` naming the engine and the key.
    """
    checked: dict[str, Any] = {}
    for key, value in settings.items():
        if key not in known:
            names = ", ".join(sorted(known)) or "none"
            raise ValueError(f"unknown setting {key!r} for engine {engine!r} (known: {names})")
        kinds = known[key]
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            wanted = " or ".join(kind.__name__ for kind in kinds)
            raise ValueError(
                f"setting {key!r} of engine {engine!r} must be {wanted}, not {value!r}"
            )
        checked[key] = value
    return checked
