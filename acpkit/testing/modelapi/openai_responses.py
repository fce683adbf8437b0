"""The OpenAI Responses API: ``POST /v1/responses``, streamed (typed SSE events) or not."""

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
    estimated_usage,
    schema_of,
    sse,
    text_of,
)

__all__ = ["Responses"]


def _usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input,
        "input_tokens_details": {"cached_tokens": usage.cached or 0},
        "output_tokens": usage.output,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning or 0},
        "total_tokens": usage.input + usage.output,
    }


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for part in as_list(content):
        item = as_dict(part)
        if item.get("type") in ("input_text", "output_text", "text") and isinstance(
            item.get("text"), str
        ):
            texts.append(item["text"])
    return "\n".join(texts)


def _response_schema(value: Any) -> dict[str, Any] | None:
    """``text.format``'s JSON schema (``{"type": "object"}`` for ``json_object``)."""
    form = as_dict(value)
    if form.get("type") == "json_schema":
        return as_dict(form.get("schema")) or {"type": "object"}
    if form.get("type") == "json_object":
        return {"type": "object"}
    return None


class Responses:
    """The Responses-API adapter."""

    name = "openai-responses"

    def parse(self, body: Mapping[str, Any], *, model: str, stream: bool) -> ModelRequest:
        """``instructions``, ``input`` (a string or items), function ``tools``."""
        system = [body["instructions"]] if isinstance(body.get("instructions"), str) else []
        messages: list[Message] = []
        raw_input = body.get("input")
        if isinstance(raw_input, str):
            messages.append(Message("user", raw_input))
        for raw in as_list(raw_input):
            item = as_dict(raw)
            kind = item.get("type", "message")
            if kind == "message":
                role = item.get("role")
                text = _content_text(item.get("content"))
                if role in ("system", "developer"):
                    system.append(text)
                elif role in ("user", "assistant"):
                    images = sum(
                        1
                        for part in as_list(item.get("content"))
                        if as_dict(part).get("type") == "input_image"
                    )
                    messages.append(Message(str(role), text, images=images))
            elif kind == "function_call":
                arguments: Any = item.get("arguments")
                try:
                    arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
                except ValueError:
                    pass
                call = ToolCall(str(item.get("call_id", "")), str(item.get("name", "")), arguments)
                if messages and messages[-1].role == "assistant":
                    last = messages.pop()
                    messages.append(
                        Message("assistant", last.text, tool_calls=(*last.tool_calls, call))
                    )
                else:
                    messages.append(Message("assistant", tool_calls=(call,)))
            elif kind == "function_call_output":
                messages.append(
                    Message(
                        "tool",
                        text_of(item.get("output")),
                        tool_call_id=str(item.get("call_id", "")) or None,
                    )
                )
        tools = []
        for raw_tool in as_list(body.get("tools")):
            tool = as_dict(raw_tool)
            if tool.get("type", "function") == "function" and isinstance(tool.get("name"), str):
                tools.append(
                    ToolSpec(
                        tool["name"],
                        str(tool.get("description") or ""),
                        schema_of(tool.get("parameters")),
                    )
                )
        return ModelRequest(
            api=self.name,
            model=model,
            system="\n".join(part for part in system if part),
            messages=tuple(messages),
            tools=tuple(tools),
            stream=body.get("stream") is True,
            response_schema=_response_schema(as_dict(body.get("text")).get("format")),
            raw=body,
        )

    def _response(
        self, request: ModelRequest, number: int, status: str, output: list[Any], usage: Any
    ) -> dict[str, Any]:
        return {
            "id": f"resp_{number}",
            "object": "response",
            "created_at": int(time.time()),
            "status": status,
            "error": None,
            "incomplete_details": None,
            "instructions": request.system or None,
            "model": request.model,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [tool for tool in as_list(request.raw.get("tools")) if isinstance(tool, dict)],
            "usage": usage,
        }

    def _items(self, answer: Answer, number: int) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        if answer.reasoning:
            items.append(
                {
                    "id": f"rs_{number}",
                    "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": "".join(answer.reasoning)}],
                }
            )
        if answer.chunks:
            items.append(
                {
                    "id": f"msg_{number}",
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": answer.text, "annotations": []}],
                }
            )
        for position, call in enumerate(answer.tool_calls):
            items.append(
                {
                    "id": f"fc_{number}_{position + 1}",
                    "type": "function_call",
                    "status": "completed",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": call.arguments_text,
                }
            )
        return items

    def stream(self, answer: Answer, request: ModelRequest, number: int) -> list[bytes]:
        """The Responses event sequence, each event with its ``sequence_number``."""
        events: list[bytes] = []

        def emit(kind: str, **fields: Any) -> None:
            events.append(sse({"type": kind, "sequence_number": len(events), **fields}, kind))

        emit("response.created", response=self._response(request, number, "in_progress", [], None))
        emit(
            "response.in_progress",
            response=self._response(request, number, "in_progress", [], None),
        )
        items = self._items(answer, number)
        calls_seen = 0
        for index, item in enumerate(items):
            if item["type"] == "reasoning":
                emit("response.output_item.added", output_index=index, item={**item, "summary": []})
                summary: dict[str, Any] = {"type": "summary_text", "text": ""}
                emit(
                    "response.reasoning_summary_part.added",
                    item_id=item["id"],
                    output_index=index,
                    summary_index=0,
                    part=summary,
                )
                for piece in answer.reasoning:
                    emit(
                        "response.reasoning_summary_text.delta",
                        item_id=item["id"],
                        output_index=index,
                        summary_index=0,
                        delta=piece,
                    )
                text = "".join(answer.reasoning)
                emit(
                    "response.reasoning_summary_text.done",
                    item_id=item["id"],
                    output_index=index,
                    summary_index=0,
                    text=text,
                )
                emit(
                    "response.reasoning_summary_part.done",
                    item_id=item["id"],
                    output_index=index,
                    summary_index=0,
                    part={"type": "summary_text", "text": text},
                )
            elif item["type"] == "message":
                emit(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "content": []},
                )
                part: dict[str, Any] = {"type": "output_text", "text": "", "annotations": []}
                emit(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part=part,
                )
                for piece in answer.chunks:
                    emit(
                        "response.output_text.delta",
                        item_id=item["id"],
                        output_index=index,
                        content_index=0,
                        delta=piece,
                        logprobs=[],
                    )
                emit(
                    "response.output_text.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    text=answer.text,
                    logprobs=[],
                )
                emit(
                    "response.content_part.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part={**part, "text": answer.text},
                )
            else:
                call = answer.tool_calls[calls_seen]
                calls_seen += 1
                emit(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "arguments": ""},
                )
                for piece in call.fragments:
                    emit(
                        "response.function_call_arguments.delta",
                        item_id=item["id"],
                        output_index=index,
                        delta=piece,
                    )
                emit(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    name=call.name,
                    arguments=call.arguments_text,
                )
            emit("response.output_item.done", output_index=index, item=item)
        if answer.error is not None:
            failed = self._response(request, number, "failed", items, None)
            failed["error"] = {"code": "server_error", "message": answer.error}
            emit("response.failed", response=failed)
            return events
        usage = _usage(answer.usage or estimated_usage(request, answer))
        emit(
            "response.completed",
            response=self._response(request, number, "completed", items, usage),
        )
        return events

    def whole(self, answer: Answer, request: ModelRequest, number: int) -> bytes:
        """One ``response`` object."""
        usage = _usage(answer.usage or estimated_usage(request, answer))
        return dumps(
            self._response(request, number, "completed", self._items(answer, number), usage)
        )

    def error(self, message: str, code: int) -> bytes:
        """``{"error": {"message", "type", "code"}}``."""
        kind = "server_error" if code >= 500 else "invalid_request_error"
        return dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})
