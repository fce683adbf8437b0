"""Anthropic Messages: ``POST /v1/messages`` (streamed SSE or not) and ``count_tokens``."""

from __future__ import annotations

import json
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
    estimated_usage,
    schema_of,
    sse,
    text_of,
)

__all__ = ["Messages"]

_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


def _usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input,
        "output_tokens": usage.output,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": usage.cached or 0,
    }


def _system_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "\n".join(
        as_dict(block)["text"]
        for block in as_list(value)
        if isinstance(as_dict(block).get("text"), str)
    )


class Messages:
    """The Anthropic Messages adapter."""

    name = "anthropic"

    def parse(self, body: Mapping[str, Any], *, model: str, stream: bool) -> ModelRequest:
        """``system``, ``messages`` (text / tool_use / tool_result / image blocks), tools."""
        messages: list[Message] = []
        for raw in as_list(body.get("messages")):
            item = as_dict(raw)
            role = item.get("role")
            content = item.get("content")
            if isinstance(content, str):
                if role in ("user", "assistant"):
                    messages.append(Message(str(role), content))
                continue
            texts: list[str] = []
            calls: list[ToolCall] = []
            images = 0
            for raw_block in as_list(content):
                block = as_dict(raw_block)
                kind = block.get("type")
                if kind == "text" and isinstance(block.get("text"), str):
                    texts.append(block["text"])
                elif kind == "image":
                    images += 1
                elif kind == "tool_use":
                    calls.append(
                        ToolCall(
                            str(block.get("id", "")), str(block.get("name", "")), block.get("input")
                        )
                    )
                elif kind == "tool_result":
                    messages.append(
                        Message(
                            "tool",
                            text_of(block.get("content")),
                            tool_call_id=str(block.get("tool_use_id", "")) or None,
                            is_error=block.get("is_error") is True,
                        )
                    )
            if role == "assistant":
                messages.append(Message("assistant", "\n".join(texts), tool_calls=tuple(calls)))
            elif role == "user" and (texts or images):
                messages.append(Message("user", "\n".join(texts), images=images))
        tools = [
            ToolSpec(
                tool["name"], str(tool.get("description") or ""), schema_of(tool["input_schema"])
            )
            for tool in (as_dict(raw) for raw in as_list(body.get("tools")))
            if isinstance(tool.get("name"), str) and "input_schema" in tool
        ]
        return ModelRequest(
            api=self.name,
            model=model,
            system=_system_text(body.get("system")),
            messages=tuple(messages),
            tools=tuple(tools),
            stream=body.get("stream") is True,
            raw=body,
        )

    def count_tokens(self, request: ModelRequest) -> bytes:
        """The ``count_tokens`` answer."""
        return dumps({"input_tokens": estimated_usage(request, Answer()).input})

    def _blocks(self, answer: Answer) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if answer.reasoning:
            thinking = "".join(answer.reasoning)
            blocks.append({"type": "thinking", "thinking": thinking, "signature": "acpkit"})
        if answer.chunks:
            blocks.append({"type": "text", "text": answer.text})
        for call in answer.tool_calls:
            blocks.append(
                {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments()}
            )
        return blocks

    def _message(self, request: ModelRequest, number: int, content: list[Any]) -> dict[str, Any]:
        return {
            "id": f"msg_{number:024d}",
            "type": "message",
            "role": "assistant",
            "model": request.model,
            "content": content,
            "stop_reason": None,
            "stop_sequence": None,
        }

    def stream(self, answer: Answer, request: ModelRequest, number: int) -> list[bytes]:
        """message_start, ping, content blocks with their deltas, message_delta, message_stop."""
        usage = answer.usage or estimated_usage(request, answer)
        start = self._message(request, number, [])
        start["usage"] = {**_usage(usage), "output_tokens": 1}
        events = [sse({"type": "message_start", "message": start}, "message_start")]
        events.append(sse({"type": "ping"}, "ping"))
        index = 0

        def block(head: dict[str, Any], deltas: list[dict[str, Any]]) -> None:
            events.append(
                sse(
                    {"type": "content_block_start", "index": index, "content_block": head},
                    "content_block_start",
                )
            )
            for delta in deltas:
                events.append(
                    sse(
                        {"type": "content_block_delta", "index": index, "delta": delta},
                        "content_block_delta",
                    )
                )
            events.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))

        if answer.reasoning:
            deltas = [{"type": "thinking_delta", "thinking": piece} for piece in answer.reasoning]
            deltas.append({"type": "signature_delta", "signature": "acpkit"})
            block({"type": "thinking", "thinking": "", "signature": ""}, deltas)
            index += 1
        if answer.chunks:
            block(
                {"type": "text", "text": ""},
                [{"type": "text_delta", "text": piece} for piece in answer.chunks],
            )
            index += 1
        for call in answer.tool_calls:
            block(
                {"type": "tool_use", "id": call.id, "name": call.name, "input": {}},
                [{"type": "input_json_delta", "partial_json": piece} for piece in call.fragments],
            )
            index += 1
        if answer.error is not None:
            error = {"type": "error", "error": {"type": "api_error", "message": answer.error}}
            events.append(sse(error, "error"))
            return events
        delta = {
            "type": "message_delta",
            "delta": {
                "stop_reason": _STOP.get(answer.effective_finish_reason, "end_turn"),
                "stop_sequence": None,
            },
            "usage": {"output_tokens": usage.output},
        }
        events.append(sse(delta, "message_delta"))
        events.append(sse({"type": "message_stop"}, "message_stop"))
        return events

    def whole(self, answer: Answer, request: ModelRequest, number: int) -> bytes:
        """One ``message`` object with usage."""
        value = self._message(request, number, self._blocks(answer))
        value["stop_reason"] = _STOP.get(answer.effective_finish_reason, "end_turn")
        value["usage"] = _usage(answer.usage or estimated_usage(request, answer))
        return dumps(value)

    def error(self, message: str, code: int) -> bytes:
        """``{"type": "error", "error": {"type", "message"}}``."""
        kinds = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error"}
        kinds |= {429: "rate_limit_error", 529: "overloaded_error"}
        kind = kinds.get(code, "api_error")
        return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
