"""
The Gemini API: ``POST /v1beta/models/{model}:generateContent`` and
``:streamGenerateContent`` (``?alt=sse`` for server-sent events, else a streamed JSON array).
"""

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
    sse,
)

__all__ = ["Gemini", "json_schema_of"]

_FINISH = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS"}


def json_schema_of(schema: Any) -> Any:
    """A Gemini (OpenAPI-style) schema as JSON Schema: type names lower-cased."""
    if isinstance(schema, list):
        return [json_schema_of(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            out[key] = value.lower()
        elif key == "nullable":
            continue
        elif key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {name: json_schema_of(item) for name, item in value.items()}
        else:
            out[key] = json_schema_of(value)
    return out


def _usage(usage: Usage) -> dict[str, Any]:
    value: dict[str, Any] = {
        "promptTokenCount": usage.input,
        "candidatesTokenCount": usage.output,
        "totalTokenCount": usage.input + usage.output + (usage.reasoning or 0),
    }
    if usage.cached:
        value["cachedContentTokenCount"] = usage.cached
    if usage.reasoning:
        value["thoughtsTokenCount"] = usage.reasoning
    return value


def _texts(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "\n".join(
        part["text"]
        for part in as_list(as_dict(value).get("parts"))
        if isinstance(as_dict(part).get("text"), str)
    )


def _response_schema(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON schema of ``generationConfig`` when it asks for JSON output."""
    if config.get("responseMimeType", config.get("response_mime_type")) != "application/json":
        return None
    for key in ("responseJsonSchema", "response_json_schema", "responseSchema"):
        if isinstance(config.get(key), dict):
            return as_dict(json_schema_of(config[key]))
    return {"type": "object"}


class Gemini:
    """The Gemini adapter."""

    name = "gemini"

    def parse(self, body: Mapping[str, Any], *, model: str, stream: bool) -> ModelRequest:
        """``contents`` (text / functionCall / functionResponse parts), tools, instruction."""
        messages: list[Message] = []
        for raw in as_list(body.get("contents")):
            item = as_dict(raw)
            role = "assistant" if item.get("role") == "model" else "user"
            texts: list[str] = []
            calls: list[ToolCall] = []
            images = 0
            for raw_part in as_list(item.get("parts")):
                part = as_dict(raw_part)
                if isinstance(part.get("text"), str) and not part.get("thought"):
                    texts.append(part["text"])
                elif "inlineData" in part or "fileData" in part:
                    images += 1
                elif "functionCall" in part:
                    call = as_dict(part["functionCall"])
                    calls.append(
                        ToolCall(
                            str(call.get("id") or ""), str(call.get("name", "")), call.get("args")
                        )
                    )
                elif "functionResponse" in part:
                    result = as_dict(part["functionResponse"])
                    response = result.get("response")
                    text = json.dumps(response, ensure_ascii=False)
                    is_error = isinstance(response, dict) and "error" in response
                    messages.append(
                        Message(
                            "tool",
                            text,
                            tool_call_id=str(result.get("id") or "") or None,
                            name=str(result.get("name", "")) or None,
                            is_error=is_error,
                        )
                    )
            if role == "assistant":
                messages.append(Message("assistant", "\n".join(texts), tool_calls=tuple(calls)))
            elif texts or images:
                messages.append(Message("user", "\n".join(texts), images=images))
        tools = []
        for raw_tool in as_list(body.get("tools")):
            tool = as_dict(raw_tool)
            declarations = tool.get("functionDeclarations", tool.get("function_declarations"))
            for raw_declaration in as_list(declarations):
                declaration = as_dict(raw_declaration)
                if not isinstance(declaration.get("name"), str):
                    continue
                schema = declaration.get(
                    "parametersJsonSchema", declaration.get("parameters_json_schema")
                )
                if schema is None:
                    schema = json_schema_of(declaration.get("parameters"))
                tools.append(
                    ToolSpec(
                        declaration["name"],
                        str(declaration.get("description") or ""),
                        as_dict(schema) or {"type": "object", "properties": {}},
                    )
                )
        instruction = body.get("systemInstruction", body.get("system_instruction"))
        return ModelRequest(
            api=self.name,
            model=model,
            system=_texts(instruction),
            messages=tuple(messages),
            tools=tuple(tools),
            stream=stream,
            response_schema=_response_schema(as_dict(body.get("generationConfig"))),
            raw=body,
        )

    def _chunk(
        self, request: ModelRequest, parts: list[Any], finish: str | None, usage: Usage | None
    ) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if finish is not None:
            candidate["finishReason"] = finish
        value: dict[str, Any] = {"candidates": [candidate]}
        if usage is not None:
            value["usageMetadata"] = _usage(usage)
        value["modelVersion"] = request.model
        return value

    def _call_part(self, answer: Answer, position: int) -> dict[str, Any]:
        call = answer.tool_calls[position]
        return {"functionCall": {"name": call.name, "args": call.arguments(), "id": call.id}}

    def chunks(self, answer: Answer, request: ModelRequest) -> list[dict[str, Any]]:
        """The streamed answer as response objects: thoughts, text pieces, calls, finish."""
        usage = answer.usage or estimated_usage(request, answer)
        out = [
            self._chunk(request, [{"text": p, "thought": True}], None, None)
            for p in answer.reasoning
        ]
        out += [self._chunk(request, [{"text": piece}], None, None) for piece in answer.chunks]
        calls = [self._call_part(answer, i) for i in range(len(answer.tool_calls))]
        finish = _FINISH.get(answer.effective_finish_reason, "STOP")
        if calls:
            out.append(self._chunk(request, calls, finish, usage))
        elif out:
            last = out[-1]
            out[-1] = self._chunk(request, last["candidates"][0]["content"]["parts"], finish, usage)
        else:
            out.append(self._chunk(request, [{"text": ""}], finish, usage))
        return out

    def stream(self, answer: Answer, request: ModelRequest, number: int) -> list[bytes]:
        """``data:`` events (the caller asked ``alt=sse``)."""
        events = [sse(chunk) for chunk in self.chunks(answer, request)]
        if answer.error is not None:
            events = [*events[:-1], sse(json.loads(self.error(answer.error, 500)))]
        return events

    def array(self, answer: Answer, request: ModelRequest) -> list[bytes]:
        """The streamed answer as a JSON array written element by element."""
        chunks = self.chunks(answer, request)
        pieces = []
        for index, chunk in enumerate(chunks):
            prefix = b"[" if index == 0 else b",\r\n"
            pieces.append(prefix + dumps(chunk))
        pieces.append(b"]")
        return pieces

    def whole(self, answer: Answer, request: ModelRequest, number: int) -> bytes:
        """One ``GenerateContentResponse``."""
        parts: list[Any] = [{"text": "".join(answer.reasoning), "thought": True}]
        parts = parts if answer.reasoning else []
        if answer.chunks:
            parts.append({"text": answer.text})
        parts += [self._call_part(answer, i) for i in range(len(answer.tool_calls))]
        usage = answer.usage or estimated_usage(request, answer)
        finish = _FINISH.get(answer.effective_finish_reason, "STOP")
        return dumps(self._chunk(request, parts or [{"text": ""}], finish, usage))

    def count_tokens(self, request: ModelRequest) -> bytes:
        """The ``countTokens`` answer."""
        return dumps({"totalTokens": estimated_usage(request, Answer()).input})

    def error(self, message: str, code: int) -> bytes:
        """``{"error": {"code", "message", "status"}}``."""
        names = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED"}
        names |= {404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}
        status = names.get(code, "INTERNAL")
        return dumps({"error": {"code": code, "message": message, "status": status}})
