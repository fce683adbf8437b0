"""OpenAI chat completions: ``POST /v1/chat/completions``, streamed (SSE) or not."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from acpkit.testing.modelapi import (
    Answer,
    Message,
    ModelRequest,
    ToolCall,
    ToolSpec,
    Usage,
    as_dict,
    as_list,
    dumps,
    schema_of,
    sse,
    text_of,
)

__all__ = ["ChatCompletions", "usage_object"]


def usage_object(usage: Usage) -> dict[str, Any]:
    """The counts as an OpenAI chat ``usage`` object."""
    value: dict[str, Any] = {
        "prompt_tokens": usage.input,
        "completion_tokens": usage.output,
        "total_tokens": usage.input + usage.output,
    }
    if usage.cached is not None:
        value["prompt_tokens_details"] = {"cached_tokens": usage.cached}
    if usage.reasoning is not None:
        value["completion_tokens_details"] = {"reasoning_tokens": usage.reasoning}
    return value


def _arguments(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _response_schema(value: Any) -> dict[str, Any] | None:
    """``response_format``'s JSON schema (``{"type": "object"}`` for ``json_object``)."""
    form = as_dict(value)
    if form.get("type") == "json_schema":
        schema = as_dict(as_dict(form.get("json_schema")).get("schema"))
        return schema or {"type": "object"}
    if form.get("type") == "json_object":
        return {"type": "object"}
    return None


class ChatCompletions:
    """The chat-completions adapter."""

    name = "openai-chat"

    def parse(self, body: Mapping[str, Any], *, model: str, stream: bool) -> ModelRequest:
        """Messages (system/developer, user, assistant with tool_calls, tool), tools."""
        system: list[str] = []
        messages: list[Message] = []
        for raw in as_list(body.get("messages")):
            item = as_dict(raw)
            role = item.get("role")
            content = item.get("content")
            if role in ("system", "developer"):
                system.append(text_of(content))
            elif role == "user":
                images = sum(
                    1 for part in as_list(content) if as_dict(part).get("type") == "image_url"
                )
                messages.append(Message("user", text_of(content), images=images))
            elif role == "assistant":
                calls = []
                for raw_call in as_list(item.get("tool_calls")):
                    call = as_dict(raw_call)
                    function = as_dict(call.get("function"))
                    calls.append(
                        ToolCall(
                            id=str(call.get("id", "")),
                            name=str(function.get("name", "")),
                            arguments=_arguments(function.get("arguments")),
                        )
                    )
                messages.append(Message("assistant", text_of(content), tool_calls=tuple(calls)))
            elif role in ("tool", "function"):
                messages.append(
                    Message(
                        "tool",
                        text_of(content),
                        tool_call_id=str(item.get("tool_call_id", "")) or None,
                        name=item.get("name") if isinstance(item.get("name"), str) else None,
                    )
                )
        tools = []
        for raw_tool in as_list(body.get("tools")):
            function = as_dict(as_dict(raw_tool).get("function"))
            if isinstance(function.get("name"), str):
                tools.append(
                    ToolSpec(
                        function["name"],
                        str(function.get("description") or ""),
                        schema_of(function.get("parameters")),
                    )
                )
        for raw_function in as_list(body.get("functions")):
            function = as_dict(raw_function)
            if isinstance(function.get("name"), str):
                tools.append(
                    ToolSpec(
                        function["name"],
                        str(function.get("description") or ""),
                        schema_of(function.get("parameters")),
                    )
                )
        options = as_dict(body.get("stream_options"))
        return ModelRequest(
            api=self.name,
            model=model,
            system="\n".join(part for part in system if part),
            messages=tuple(messages),
            tools=tuple(tools),
            stream=body.get("stream") is True,
            include_usage=bool(options.get("include_usage")),
            response_schema=_response_schema(body.get("response_format")),
            raw=body,
        )

    def _deltas(self, answer: Answer) -> list[tuple[dict[str, Any], str | None]]:
        events: list[tuple[dict[str, Any], str | None]] = []
        events += [({"reasoning_content": piece}, None) for piece in answer.reasoning]
        events += [({"content": piece}, None) for piece in answer.chunks]
        for position, call in enumerate(answer.tool_calls):
            head = {
                "index": position,
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            events.append(({"tool_calls": [head]}, None))
            for piece in call.fragments:
                fragment = {"index": position, "function": {"arguments": piece}}
                events.append(({"tool_calls": [fragment]}, None))
        events.append(({}, answer.effective_finish_reason))
        events[0] = ({"role": "assistant", **events[0][0]}, events[0][1])
        return events

    def stream(self, answer: Answer, request: ModelRequest, number: int) -> list[bytes]:
        """``chat.completion.chunk`` events, a usage chunk when asked, ``[DONE]``."""
        common = {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": request.model,
        }
        deltas = self._deltas(answer)
        events: list[bytes] = []
        if answer.error is not None:
            deltas = deltas[:-1]
        for delta, finish in deltas:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            events.append(sse({**common, "choices": [choice]}, escape_breaks=False))
        if answer.error is not None:
            error = {"error": {"message": answer.error, "type": "server_error"}}
            events.append(sse(error, escape_breaks=False))
        else:
            if request.include_usage and answer.usage is not None:
                usage = {**common, "choices": [], "usage": usage_object(answer.usage)}
                events.append(sse(usage, escape_breaks=False))
            events.append(b"data: [DONE]\n\n")
        return events

    def whole(self, answer: Answer, request: ModelRequest, number: int) -> bytes:
        """One ``chat.completion`` object."""
        message: dict[str, Any] = {"role": "assistant", "content": answer.text}
        if answer.reasoning:
            message["reasoning_content"] = "".join(answer.reasoning)
        if answer.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_text},
                }
                for call in answer.tool_calls
            ]
        value: dict[str, Any] = {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": answer.effective_finish_reason}
            ],
        }
        if answer.usage is not None:
            value["usage"] = usage_object(answer.usage)
        return dumps(value)

    def error(self, message: str, code: int) -> bytes:
        """``{"error": {"message", "type", "code"}}``."""
        error = {"message": message, "type": "server_error" if code >= 500 else "invalid_request"}
        return json.dumps({"error": {**error, "code": code}}).encode("utf-8")
