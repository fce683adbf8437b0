"""acpkit.codec decodes and encodes the MCP models: spec messages, unions, round trips."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acpkit.codec import DecodeError, converter, decode, decode_json, encode, encode_json
from acpkit.mcp import schema as mcp
from acpkit.testing.jsonschema import from_schema
from acpkit.testing.strategies import for_type
from tests.helpers import examples

ROOT = Path(__file__).resolve().parent.parent.parent
SCHEMA = ROOT / "acpkit" / "schemas" / "mcp" / "2025-11-25" / "schema.json"

# ---------------------------------------------------------------- spec messages
# Written from the examples of the MCP 2025-11-25 specification (lifecycle, tools,
# utilities pages): what a real server sends and what a client sends.
INITIALIZE_REQUEST = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"roots": {"listChanged": True}, "sampling": {}, "elicitation": {}},
        "clientInfo": {
            "name": "ExampleClient",
            "title": "Example Client Display Name",
            "version": "1.0.0",
            "description": "An example MCP client application",
            "websiteUrl": "https://example.com",
        },
    },
}
INITIALIZE_RESULT = {
    "protocolVersion": "2025-11-25",
    "capabilities": {
        "logging": {},
        "prompts": {"listChanged": True},
        "resources": {"subscribe": True, "listChanged": True},
        "tools": {"listChanged": True},
    },
    "serverInfo": {
        "name": "ExampleServer",
        "title": "Example Server Display Name",
        "version": "1.0.0",
        "icons": [
            {"src": "https://example.com/icon.png", "mimeType": "image/png", "sizes": ["48x48"]}
        ],
    },
    "instructions": "Optional instructions for the client",
}
LIST_TOOLS_REQUEST = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/list",
    "params": {"cursor": "optional-cursor-value"},
}
LIST_TOOLS_RESULT = {
    "tools": [
        {
            "name": "get_weather",
            "title": "Weather Information Provider",
            "description": "Get current weather information for a location",
            "inputSchema": {
                "type": "object",
                "properties": {"location": {"type": "string", "description": "City name"}},
                "required": ["location"],
            },
            "outputSchema": {
                "type": "object",
                "properties": {"temperature": {"type": "number"}},
                "required": ["temperature"],
            },
            "annotations": {
                "title": "Weather",
                "readOnlyHint": True,
                "openWorldHint": True,
            },
        },
        {
            "name": "delete_file",
            "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": False, "destructiveHint": True},
            "execution": {"taskSupport": "optional"},
        },
    ],
    "nextCursor": "next-page-cursor",
}
CALL_TOOL_REQUEST = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {
        "name": "get_weather",
        "arguments": {"location": "New York"},
        "_meta": {"progressToken": "abc123"},
    },
}
TEXT_RESULT = {
    "content": [{"type": "text", "text": "Current weather in New York: 72°F, partly cloudy"}],
    "isError": False,
}
IMAGE_AUDIO_RESULT = {
    "content": [
        {
            "type": "image",
            "data": "iVBORw0KGgo=",
            "mimeType": "image/png",
            "annotations": {"audience": ["user"], "priority": 0.9},
        },
        {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
    ]
}
RESOURCE_RESULT = {
    "content": [
        {
            "type": "resource_link",
            "uri": "file:///project/src/main.rs",
            "name": "main.rs",
            "description": "Primary application entry point",
            "mimeType": "text/x-rust",
        },
        {
            "type": "resource",
            "resource": {
                "uri": "file:///project/src/main.rs",
                "mimeType": "text/x-rust",
                "text": 'fn main() {\n    println!("Hello world!");\n}',
            },
            "annotations": {
                "audience": ["user", "assistant"],
                "priority": 0.7,
                "lastModified": "2025-05-03T14:30:00Z",
            },
        },
        {"type": "resource", "resource": {"uri": "file:///logo.png", "blob": "iVBORw0KGgo="}},
    ]
}
STRUCTURED_RESULT = {
    "content": [{"type": "text", "text": '{"temperature": 22.5, "conditions": "Partly cloudy"}'}],
    "structuredContent": {"temperature": 22.5, "conditions": "Partly cloudy"},
}
ERROR_RESULT = {
    "content": [{"type": "text", "text": "Invalid departure date: must be in the future."}],
    "isError": True,
}
PROGRESS = {
    "jsonrpc": "2.0",
    "method": "notifications/progress",
    "params": {"progressToken": "abc123", "progress": 50, "total": 100, "message": "Half"},
}
CANCELLED = {
    "jsonrpc": "2.0",
    "method": "notifications/cancelled",
    "params": {"requestId": "123", "reason": "User requested cancellation"},
}
LIST_CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
PING = {"jsonrpc": "2.0", "id": "123", "method": "ping"}

REQUESTS = [INITIALIZE_REQUEST, LIST_TOOLS_REQUEST, CALL_TOOL_REQUEST, PING]
RESULTS = [
    ("initialize", INITIALIZE_RESULT),
    ("tools/list", LIST_TOOLS_RESULT),
    ("tools/call", TEXT_RESULT),
    ("tools/call", IMAGE_AUDIO_RESULT),
    ("tools/call", RESOURCE_RESULT),
    ("tools/call", STRUCTURED_RESULT),
    ("tools/call", ERROR_RESULT),
    ("ping", {}),
]


@pytest.mark.parametrize("message", REQUESTS, ids=lambda m: m["method"])
def test_client_requests_decode_strictly_and_round_trip(message: dict[str, Any]) -> None:
    """Spec requests decode (strict) through ClientRequest by method and re-encode unchanged."""
    request = decode(mcp.ClientRequest, message, strict=True)
    assert request.__acp_tag__ == ("method", message["method"])
    assert encode(request) == message
    params = mcp.MCP_SERVER_METHODS[message["method"]].params
    if "params" in message:
        assert isinstance(request.params, params)


@pytest.mark.parametrize(("method", "result"), RESULTS, ids=[r[0] for r in RESULTS])
def test_results_decode_strictly_by_method_table_and_round_trip(
    method: str, result: dict[str, Any]
) -> None:
    """Each spec result decodes (strict) to the method table's result class, and round-trips."""
    cls = mcp.MCP_SERVER_METHODS[method].result
    value = decode(cls, result, strict=True)
    assert encode(value) == result
    assert decode_json(cls, encode_json(value), strict=True) == value


@pytest.mark.parametrize("message", [PROGRESS, CANCELLED, LIST_CHANGED, PING])
def test_server_messages_decode_by_method(message: dict[str, Any]) -> None:
    """Notifications and ping from a server decode through the client-side unions."""
    union = mcp.ServerRequest if "id" in message else mcp.ServerNotification
    value = decode(union, message, strict=True)
    assert encode(value) == message


def test_initialize_result_fields() -> None:
    """The initialize result gives the negotiated version, capabilities and server info."""
    result = decode(mcp.InitializeResult, INITIALIZE_RESULT, strict=True)
    assert result.protocol_version == mcp.MCP_PROTOCOL_VERSION
    assert result.capabilities.tools == {"listChanged": True}
    assert result.server_info.name == "ExampleServer"
    assert result.server_info.icons == [
        mcp.Icon(src="https://example.com/icon.png", mime_type="image/png", sizes=["48x48"])
    ]
    assert result.instructions == "Optional instructions for the client"


def test_tools_list_annotations_and_cursor() -> None:
    """tools/list gives typed tools, annotations (hints) and the next page's cursor."""
    result = decode(mcp.ListToolsResult, LIST_TOOLS_RESULT, strict=True)
    weather, delete = result.tools
    assert result.next_cursor == "next-page-cursor"
    assert weather.annotations == mcp.ToolAnnotations(
        title="Weather", read_only_hint=True, open_world_hint=True
    )
    assert weather.input_schema["required"] == ["location"]
    assert weather.output_schema is not None
    assert delete.annotations is not None and delete.annotations.destructive_hint is True
    assert delete.execution == mcp.ToolExecution(task_support="optional")
    assert delete.description is None
    last_page = decode(mcp.ListToolsResult, {"tools": []}, strict=True)
    assert last_page.next_cursor is None


def test_call_tool_result_content_blocks() -> None:
    """Content blocks dispatch on ``type``; embedded resources tell text from blob by key."""
    images = decode(mcp.CallToolResult, IMAGE_AUDIO_RESULT, strict=True)
    image, audio = images.content
    assert isinstance(image, mcp.ImageContent) and image.mime_type == "image/png"
    assert image.annotations == mcp.Annotations(audience=[mcp.Role.USER], priority=0.9)
    assert isinstance(audio, mcp.AudioContent) and audio.data == "UklGRg=="
    resources = decode(mcp.CallToolResult, RESOURCE_RESULT, strict=True)
    link, text, blob = resources.content
    assert isinstance(link, mcp.ResourceLink) and link.name == "main.rs"
    assert isinstance(text, mcp.EmbeddedResource)
    assert isinstance(text.resource, mcp.TextResourceContents)
    assert text.resource.text.startswith("fn main()")
    assert isinstance(blob, mcp.EmbeddedResource)
    assert blob.resource == mcp.BlobResourceContents(uri="file:///logo.png", blob="iVBORw0KGgo=")
    structured = decode(mcp.CallToolResult, STRUCTURED_RESULT, strict=True)
    assert structured.structured_content == {"temperature": 22.5, "conditions": "Partly cloudy"}
    assert structured.is_error is None
    assert decode(mcp.CallToolResult, ERROR_RESULT).is_error is True


def test_unknown_content_block_is_kept_raw_and_strict_rejects_it() -> None:
    """An unknown content type decodes to UnknownContentBlock (lenient), an error when strict."""
    raw = {"content": [{"type": "hologram", "data": {"x": 1}}]}
    value = decode(mcp.CallToolResult, raw)
    assert value.content == [mcp.UnknownContentBlock(raw={"type": "hologram", "data": {"x": 1}})]
    assert encode(value) == raw
    with pytest.raises(DecodeError) as caught:
        decode(mcp.CallToolResult, raw, strict=True)
    assert caught.value.path == "$.content[0].type"


def test_resource_contents_with_neither_text_nor_blob_is_an_error() -> None:
    """An embedded resource with neither ``text`` nor ``blob`` is a DecodeError with a path."""
    raw = {"content": [{"type": "resource", "resource": {"uri": "file:///x"}}]}
    with pytest.raises(DecodeError) as caught:
        decode(mcp.CallToolResult, raw)
    assert caught.value.path == "$.content[0].resource"
    assert "TextResourceContents or BlobResourceContents" in caught.value.message


def test_missing_required_field_names_its_path() -> None:
    """A tool without inputSchema is rejected at ``$.tools[0].inputSchema``."""
    with pytest.raises(DecodeError) as caught:
        decode(mcp.ListToolsResult, {"tools": [{"name": "x"}]})
    assert caught.value.path == "$.tools[0].inputSchema"


def test_sampling_content_is_one_block_or_a_list() -> None:
    """``SamplingMessage.content`` is one block (an object) or several (an array)."""
    one = {"role": "assistant", "content": {"type": "text", "text": "hi"}}
    many = {
        "role": "user",
        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
    }
    assert decode(mcp.SamplingMessage, one, strict=True).content == mcp.TextContent(text="hi")
    decoded = decode(mcp.SamplingMessage, many, strict=True)
    assert decoded.content == [mcp.TextContent(text="a"), mcp.TextContent(text="b")]
    assert encode(decoded) == many
    with pytest.raises(DecodeError) as caught:
        decode(mcp.SamplingMessage, {"role": "user", "content": "text"})
    assert caught.value.path == "$.content"


def test_converter_hooks_cover_mcp_models() -> None:
    """The one cattrs converter structures and unstructures MCP models like decode/encode."""
    value = converter.structure(TEXT_RESULT, mcp.CallToolResult)
    assert value == decode(mcp.CallToolResult, TEXT_RESULT)
    assert converter.unstructure(value) == TEXT_RESULT
    union: Any = mcp.ContentBlock
    block = converter.structure({"type": "text", "text": "x"}, union)
    assert block == mcp.TextContent(text="x")


# ---------------------------------------------------------------- property tests
def _without_annotation_formats(node: Any) -> Any:
    """The schema minus ``format: byte`` / ``uri-template``: annotations the codec does not
    check and acpkit.testing.jsonschema does not generate (any string is drawn instead)."""
    if isinstance(node, dict):
        return {
            k: _without_annotation_formats(v)
            for k, v in node.items()
            if not (k == "format" and v in ("byte", "uri-template"))
        }
    if isinstance(node, list):
        return [_without_annotation_formats(v) for v in node]
    return node


DEFS: dict[str, Any] = _without_annotation_formats(
    json.loads(SCHEMA.read_text(encoding="utf-8"))["$defs"]
)
# Error.data is optional and untyped: a drawn ``"data": null`` decodes to None, which is
# "absent" and not re-encoded (the codec's rule for optional fields, as for ACP's Error).
NULL_DROPPED = {"Error", "JSONRPCErrorResponse"}
OBJECT_DEFS = sorted(
    name
    for name in DEFS
    if isinstance(getattr(mcp, name), type) and attrs.has(getattr(mcp, name))
    if name not in NULL_DROPPED
)
UNIONS = [
    "ContentBlock",
    "SamplingMessageContentBlock",
    "ClientRequest",
    "ClientNotification",
    "ServerRequest",
    "ServerNotification",
    "ElicitRequestParams",
]


@functools.cache
def _drawn(name: str) -> st.SearchStrategy[Any]:
    return from_schema({"$ref": f"#/$defs/{name}"}, defs=DEFS, unknown_keys=False)


@settings(max_examples=examples(5))
@given(st.sampled_from(OBJECT_DEFS + UNIONS).flatmap(lambda n: st.tuples(st.just(n), _drawn(n))))
def test_schema_valid_json_round_trips_strictly(case: tuple[str, Any]) -> None:
    """Any JSON valid against an MCP definition decodes strictly and re-encodes unchanged."""
    name, value = case
    decoded = decode(getattr(mcp, name), value, strict=True)
    assert encode(decoded) == value


TOOL_MODELS = [
    mcp.CallToolResult,
    mcp.ListToolsResult,
    mcp.InitializeResult,
    mcp.InitializeRequestParams,
    mcp.CallToolRequestParams,
    mcp.ProgressNotificationParams,
    mcp.CancelledNotificationParams,
    mcp.ClientRequest,
    mcp.ServerNotification,
]


@given(st.sampled_from(TOOL_MODELS).flatmap(lambda t: st.tuples(st.just(t), for_type(t, True))))
def test_models_round_trip_through_json(case: tuple[Any, Any]) -> None:
    """Model values (unknown variants included) survive encode_json -> decode_json unchanged."""
    tp, value = case
    assert decode_json(tp, encode_json(value)) == value
