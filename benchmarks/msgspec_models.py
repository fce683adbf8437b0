"""The anchor of ``benchmarks/bench_codec.py``: msgspec typed structs for the lines it
decodes (the JSON-RPC envelope included), as close to acpkit's models as msgspec allows
(tagged unions on the same tags; the untagged ``text``/``blob`` resource is one struct;
enums are plain strings).  msgspec is a benchmark-only dependency: ``pip install msgspec``.
"""

from __future__ import annotations

from typing import Any

import msgspec


class _Model(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")


class _Block(_Model, tag_field="type", kw_only=True):
    annotations: dict[str, Any] | None = None


class TextBlock(_Block, tag="text", kw_only=True):
    text: str


class ImageBlock(_Block, tag="image", kw_only=True):
    data: str
    mime_type: str
    uri: str | None = None


class ResourceLinkBlock(_Block, tag="resource_link", kw_only=True):
    uri: str
    name: str
    mime_type: str | None = None
    title: str | None = None
    description: str | None = None
    size: int | None = None


class ResourceContents(_Model, kw_only=True):
    uri: str
    mime_type: str | None = None
    text: str | None = None
    blob: str | None = None


class ResourceBlock(_Block, tag="resource", kw_only=True):
    resource: ResourceContents


ContentBlock = TextBlock | ImageBlock | ResourceLinkBlock | ResourceBlock


class _ToolContent(_Model, tag_field="type", kw_only=True):
    pass


class ContentToolContent(_ToolContent, tag="content", kw_only=True):
    content: ContentBlock


class DiffToolContent(_ToolContent, tag="diff", kw_only=True):
    path: str
    new_text: str
    old_text: str | None = None


class TerminalToolContent(_ToolContent, tag="terminal", kw_only=True):
    terminal_id: str


ToolCallContent = ContentToolContent | DiffToolContent | TerminalToolContent


class Location(_Model, kw_only=True):
    path: str
    line: int | None = None


class PlanEntry(_Model, kw_only=True):
    content: str
    priority: str
    status: str


class _Update(_Model, tag_field="sessionUpdate", kw_only=True):
    pass


class _Chunk(_Update, kw_only=True):
    content: ContentBlock
    message_id: str | None = None


class AgentMessageChunk(_Chunk, tag="agent_message_chunk", kw_only=True):
    pass


class AgentThoughtChunk(_Chunk, tag="agent_thought_chunk", kw_only=True):
    pass


class UserMessageChunk(_Chunk, tag="user_message_chunk", kw_only=True):
    pass


class _ToolCallFields(_Update, kw_only=True):
    tool_call_id: str
    kind: str | None = None
    status: str | None = None
    content: list[ToolCallContent] | None = None
    locations: list[Location] | None = None
    raw_input: Any = None
    raw_output: Any = None


class ToolCallStart(_ToolCallFields, tag="tool_call", kw_only=True):
    title: str


class ToolCallProgress(_ToolCallFields, tag="tool_call_update", kw_only=True):
    title: str | None = None


class PlanUpdate(_Update, tag="plan", kw_only=True):
    entries: list[PlanEntry]


SessionUpdate = (
    AgentMessageChunk
    | AgentThoughtChunk
    | UserMessageChunk
    | ToolCallStart
    | ToolCallProgress
    | PlanUpdate
)


class SessionNotification(_Model, kw_only=True):
    session_id: str
    update: SessionUpdate


class PromptRequest(_Model, kw_only=True):
    session_id: str
    prompt: list[ContentBlock]


class PromptCapabilities(_Model, kw_only=True):
    image: bool = False
    audio: bool = False
    embedded_context: bool = False


class McpCapabilities(_Model, kw_only=True):
    http: bool = False
    sse: bool = False


class AgentCapabilities(_Model, kw_only=True):
    load_session: bool = False
    prompt_capabilities: PromptCapabilities = msgspec.field(default_factory=PromptCapabilities)
    mcp_capabilities: McpCapabilities = msgspec.field(default_factory=McpCapabilities)
    session_capabilities: dict[str, Any] = msgspec.field(default_factory=dict)
    auth: dict[str, Any] = msgspec.field(default_factory=dict)


class AuthMethod(_Model, kw_only=True):
    id: str
    name: str
    description: str | None = None


class Implementation(_Model, kw_only=True):
    name: str
    version: str
    title: str | None = None


class InitializeResponse(_Model, kw_only=True):
    protocol_version: int
    agent_capabilities: AgentCapabilities = msgspec.field(default_factory=AgentCapabilities)
    auth_methods: list[AuthMethod] = msgspec.field(default_factory=list)
    agent_info: Implementation | None = None


class Notification(msgspec.Struct):
    jsonrpc: str
    method: str
    params: SessionNotification


class Request(msgspec.Struct):
    jsonrpc: str
    id: int | str | None
    method: str
    params: PromptRequest


class Response(msgspec.Struct):
    jsonrpc: str
    id: int | str | None
    result: InitializeResponse
