"""Property-based and targeted tests of ``acpkit.codec`` over every generated model."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from acpkit import schema, unstable
from acpkit.codec import DecodeError, converter, decode, decode_json, encode, encode_json
from acpkit.testing import strategies
from tests.helpers import examples

SCHEMAS = Path(schema.__file__).parent / "schemas" / "v1"
STABLE_DOC = json.loads((SCHEMAS / "schema.json").read_text(encoding="utf-8"))
UNSTABLE_DOC = json.loads((SCHEMAS / "schema.unstable.json").read_text(encoding="utf-8"))

# Round-trips per class: a fifth of the profile's examples (200+ classes per module).
EXAMPLES = examples(1 / 5)


def _model_classes(module: Any) -> list[type]:
    return sorted(
        (
            v
            for v in vars(module).values()
            if isinstance(v, type)
            and attrs.has(v)
            and v.__module__ == module.__name__
            and v is not schema.Method
        ),
        key=lambda c: c.__name__,
    )


def _def_name(module: Any, doc: dict[str, Any], cls: type) -> str:
    """The ``$defs`` entry an encoded instance of ``cls`` must validate against."""
    for name in doc["$defs"]:
        alias = getattr(module, name)
        if not isinstance(alias, type) and cls in getattr(alias, "__args__", ()):
            return str(name)
    return cls.__name__


@cache
def _validator(which: str, name: str) -> Draft202012Validator:
    doc = STABLE_DOC if which == "stable" else UNSTABLE_DOC
    return Draft202012Validator({"$defs": doc["$defs"], "$ref": f"#/$defs/{name}"})


def _known(classes: list[type]) -> list[type]:
    return [c for c in classes if getattr(c, "__acp_unknown__", None) is None]


STABLE_CLASSES = _known(_model_classes(schema))
UNSTABLE_CLASSES = _known(_model_classes(unstable))


def _plain_json(value: Any, path: str = "$") -> None:
    """Fail unless ``value`` is made only of plain JSON builtins (no enum members, no models)."""
    kind = type(value)
    assert kind in (dict, list, str, int, float, bool, type(None)), f"{path}: {kind.__name__}"
    if kind is dict:
        for key, item in value.items():
            assert type(key) is str, f"{path}: key {key!r}"
            _plain_json(item, f"{path}.{key}")
    elif kind is list:
        for i, item in enumerate(value):
            _plain_json(item, f"{path}[{i}]")


def _round_trip(which: str, module: Any, doc: dict[str, Any], cls: type, data: Any) -> None:
    value = data.draw(strategies.for_type(cls))
    wire = encode(value)
    _plain_json(wire)
    assert decode(cls, wire) == value
    text = encode_json(value)
    assert json.loads(text) == wire
    errors = list(_validator(which, _def_name(module, doc, cls)).iter_errors(wire))
    assert not errors, f"{errors[0].message[:300]} in {wire!r}"
    assert decode(cls, json.loads(text)) == value
    assert decode(cls, json.loads(text), strict=True) == value


@pytest.mark.parametrize("cls", STABLE_CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_stable_round_trip(cls: type, data: st.DataObject) -> None:
    """Every stable class: instance -> encode (plain JSON builtins only) -> valid per the
    official schema -> decode -> equal (lenient and strict)."""
    _round_trip("stable", schema, STABLE_DOC, cls, data)


@pytest.mark.parametrize("cls", UNSTABLE_CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=examples(1 / 10))
@given(data=st.data())
def test_unstable_round_trip(cls: type, data: st.DataObject) -> None:
    """Every unstable class round-trips and validates against the unstable schema."""
    _round_trip("unstable", unstable, UNSTABLE_DOC, cls, data)


@given(strategies.session_notification(unknown=True))
def test_unknown_variants_round_trip(value: schema.SessionNotification) -> None:
    """Values with unknown tags anywhere (update, content blocks...) re-encode unchanged."""
    wire = json.loads(encode_json(value))
    assert decode(schema.SessionNotification, wire) == value
    assert encode(decode(schema.SessionNotification, wire)) == wire


@pytest.mark.parametrize(
    ("union", "key"),
    [
        (schema.SessionUpdate, "sessionUpdate"),
        (schema.ContentBlock, "type"),
        (schema.ToolCallContent, "type"),
        (schema.RequestPermissionOutcome, "outcome"),
        (schema.McpServer, "type"),
        (schema.AuthMethod, "type"),
        (schema.SessionConfigOption, "type"),
        (schema.CreateElicitationRequest, "mode"),
        (schema.CreateElicitationResponse, "action"),
        (schema.ElicitationPropertySchema, "type"),
        (schema.MultiSelectItems, "type"),
    ],
)
def test_unknown_tag_kept_raw_and_strict_rejects(union: Any, key: str) -> None:
    """An unknown tag decodes to Unknown<Union> keeping the raw dict (re-encoded equal); strict
    mode reports it at the tag's path."""
    raw = {key: "future_thing", "payload": {"x": [1, 2]}, "_meta": {"k": "v"}}
    value = decode(union, raw)
    assert type(value).__name__.startswith("Unknown")
    assert value.raw == raw
    assert value.tag == "future_thing"
    assert encode(value) == raw
    with pytest.raises(DecodeError) as info:
        decode(union, raw, strict=True)
    assert info.value.path == f"$.{key}"
    assert "unknown tag" in info.value.message


def test_variant_class_checks_tag_in_strict_mode() -> None:
    """Decoding a variant class directly ignores a wrong tag leniently, rejects it strictly."""
    wire = {"type": "image", "text": "x"}
    assert decode(schema.TextContentBlock, wire) == schema.TextContentBlock(text="x")
    with pytest.raises(DecodeError) as info:
        decode(schema.TextContentBlock, wire, strict=True)
    assert str(info.value) == "$.type: expected tag text"


def test_tag_is_implied_by_class() -> None:
    """Variant classes take no tag argument; the tag is written first on encode."""
    chunk = schema.AgentMessageChunk(content=schema.TextContentBlock(text="hi"))
    assert encode(chunk) == {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": "hi"},
    }
    with pytest.raises(TypeError):
        schema.TextContentBlock(text="x", type="text")  # type: ignore[call-arg]


def test_camel_case_and_meta() -> None:
    """Attributes are snake_case, wire keys camelCase; ``_meta`` <-> ``meta``."""
    link = schema.ResourceLinkContentBlock(
        uri="file:///a", name="a", mime_type="text/plain", meta={"x": 1}
    )
    wire = encode(link)
    assert wire == {
        "type": "resource_link",
        "uri": "file:///a",
        "name": "a",
        "mimeType": "text/plain",
        "_meta": {"x": 1},
    } or set(wire) == {"type", "uri", "name", "mimeType", "_meta"}
    assert decode(schema.ContentBlock, wire) == link


def test_none_fields_omitted_required_kept() -> None:
    """Optional None fields are omitted; a required RequestId of null is written as null."""
    assert encode(schema.ToolCallUpdate(tool_call_id="t")) == {"toolCallId": "t"}
    assert encode(schema.CancelRequestNotification(request_id=None)) == {"requestId": None}
    assert decode(schema.CancelRequestNotification, {"requestId": None}).request_id is None


# --------------------------------------------------------------- null-meaningful fields
NULL_MEANINGFUL = [
    (schema.Diff, "old_text", "oldText", {"path": "/a", "newText": "b"}),
    (schema.SessionInfoUpdate, "title", "title", {}),
    (schema.SessionInfoUpdate, "updated_at", "updatedAt", {}),
]


@pytest.mark.parametrize(("cls", "attr", "key", "base"), NULL_MEANINGFUL)
def test_null_meaningful_fields(cls: type, attr: str, key: str, base: dict[str, Any]) -> None:
    """Absent decodes to ABSENT and stays absent; explicit null decodes to None and is written
    back as null; a value round-trips."""
    absent: Any = decode(cls, dict(base))
    assert getattr(absent, attr) is schema.ABSENT
    assert key not in encode(absent)
    null: Any = decode(cls, {**base, key: None})
    assert getattr(null, attr) is None
    assert encode(null)[key] is None
    assert absent != null
    value: Any = decode(cls, {**base, key: "v"})
    assert encode(value)[key] == "v"


def test_session_info_update_clears_title() -> None:
    """``SessionInfoUpdate(title=None)`` means "clear the title" on the wire."""
    wire = encode(schema.SessionInfoUpdate(title=None))
    assert wire == {"sessionUpdate": "session_info_update", "title": None}


def test_elicitation_request_id_scope_null() -> None:
    """The elicitation request scope keeps a null request id distinct from no request scope."""
    base = {"mode": "url", "message": "m", "elicitationId": "e", "url": "https://x"}
    with_null = decode(schema.CreateElicitationRequest, {**base, "requestId": None})
    assert with_null.request_id is None
    assert encode(with_null)["requestId"] is None
    without = decode(schema.CreateElicitationRequest, {**base, "sessionId": "s"})
    assert without.request_id is schema.ABSENT
    assert "requestId" not in encode(without)


# ----------------------------------------------------------------------- untagged unions
def test_mcp_server_stdio_has_no_tag() -> None:
    """A McpServer without ``type`` is stdio; http/sse are tagged; stdio encodes without a tag."""
    stdio = {"name": "fs", "command": "srv", "args": ["-v"], "env": [{"name": "A", "value": "1"}]}
    value = decode(schema.McpServer, stdio)
    assert isinstance(value, schema.McpServerStdio)
    assert encode(value) == stdio
    http = decode(schema.McpServer, {"type": "http", "name": "h", "url": "u", "headers": []})
    assert isinstance(http, schema.HttpMcpServer)


def test_auth_method_defaults_to_agent() -> None:
    """An AuthMethod without ``type`` is the agent method; ``terminal`` is tagged."""
    assert isinstance(decode(schema.AuthMethod, {"id": "a", "name": "A"}), schema.AuthMethodAgent)
    term = decode(schema.AuthMethod, {"type": "terminal", "id": "t", "name": "T"})
    assert isinstance(term, schema.TerminalAuthMethod)


def test_select_options_grouped_vs_ungrouped() -> None:
    """Config select options: a list of groups when items carry ``group``, else flat options."""
    flat = [{"value": "a", "name": "A"}]
    grouped = [{"group": "g", "name": "G", "options": flat}]
    base = {"type": "select", "id": "m", "name": "Model", "currentValue": "a"}
    one = decode(schema.SessionConfigOption, {**base, "options": flat})
    two = decode(schema.SessionConfigOption, {**base, "options": grouped})
    assert isinstance(one.options[0], schema.SessionConfigSelectOption)
    assert isinstance(two.options[0], schema.SessionConfigSelectGroup)
    assert decode(schema.SessionConfigOption, {**base, "options": []}).options == []


def test_embedded_resource_text_vs_blob() -> None:
    """Embedded resources: ``text`` selects text contents, ``blob`` selects blob contents."""
    text = decode(schema.EmbeddedResourceResource, {"uri": "u", "text": "t"})
    blob = decode(schema.EmbeddedResourceResource, {"uri": "u", "blob": "AA=="})
    assert isinstance(text, schema.TextResourceContents)
    assert isinstance(blob, schema.BlobResourceContents)
    with pytest.raises(DecodeError, match="matches none"):
        decode(schema.EmbeddedResourceResource, {"uri": "u"})


def test_request_id_and_content_values() -> None:
    """RequestId is null, integer or string; elicitation values pick by JSON type (bool first)."""
    for rid in (None, 7, "r"):
        assert decode(schema.RequestId, rid) == rid
    with pytest.raises(DecodeError):
        decode(schema.RequestId, 1.5)
    for v in ("s", 3, 2.5, True, ["a"]):
        out = decode(schema.ElicitationContentValue, v)
        assert out == v and type(out) is type(v)


def test_set_config_option_boolean_vs_value_id() -> None:
    """set_config_option: ``type: boolean`` selects the boolean form, no type the value id."""
    b = decode(
        schema.SetSessionConfigOptionRequest,
        {"sessionId": "s", "configId": "c", "type": "boolean", "value": True},
    )
    v = decode(
        schema.SetSessionConfigOptionRequest, {"sessionId": "s", "configId": "c", "value": "x"}
    )
    assert isinstance(b, schema.SetSessionConfigOptionRequestBoolean)
    assert isinstance(v, schema.SetSessionConfigOptionRequestValueId)


def test_response_result_vs_error() -> None:
    """JSON-RPC response envelopes: ``result`` vs ``error`` selects the variant."""
    ok = decode(schema.AgentResponse, {"id": 1, "result": {}})
    err = decode(schema.AgentResponse, {"id": 1, "error": {"code": -32601, "message": "nope"}})
    assert isinstance(ok, schema.AgentResponseResult)
    assert isinstance(err, schema.AgentResponseError)
    assert err.error.code == schema.ErrorCode.METHOD_NOT_FOUND


# ------------------------------------------------------------------ lenient vs strict
def test_unknown_fields_ignored_lenient_reported_strict() -> None:
    """Unknown fields: ignored by default, reported by strict mode with their path."""
    wire = {"sessionId": "s", "update": {"sessionUpdate": "plan", "entries": [], "extra": 1}}
    assert decode(schema.SessionNotification, wire).update == schema.AgentPlanUpdate(entries=[])
    with pytest.raises(DecodeError) as info:
        decode(schema.SessionNotification, wire, strict=True)
    assert info.value.path == "$.update.extra"
    assert str(info.value) == "$.update.extra: unknown field"


def test_default_on_error_lenient() -> None:
    """An invalid x-deserialize-default-on-error field decodes to its default (lenient) and is
    an error in strict mode."""
    wire = {"toolCallId": "t", "title": 5, "locations": "nope", "status": "in_progress"}
    value = decode(schema.ToolCallUpdate, wire)
    assert value.title is None and value.locations is None
    assert value.status == schema.ToolCallStatus.IN_PROGRESS
    with pytest.raises(DecodeError) as info:
        decode(schema.ToolCallUpdate, wire, strict=True)
    assert info.value.path == "$.title"


def test_skip_invalid_items_lenient() -> None:
    """x-deserialize-skip-invalid-items lists drop bad items (lenient), strict reports the index."""
    wire = {
        "sessionUpdate": "plan",
        "entries": [
            {"content": "a", "priority": "high", "status": "pending"},
            {"content": 1},
            {"content": "b", "priority": "low", "status": "completed"},
        ],
    }
    plan = decode(schema.SessionUpdate, wire)
    assert [e.content for e in plan.entries] == ["a", "b"]
    with pytest.raises(DecodeError) as info:
        decode(schema.SessionUpdate, wire, strict=True)
    assert info.value.path == "$.entries[1].content"


def test_required_list_default_on_error() -> None:
    """A required list marked default-on-error decodes to [] when it is not a list (lenient)."""
    wire = {"sessionUpdate": "available_commands_update", "availableCommands": {"bad": 1}}
    assert decode(schema.SessionUpdate, wire) == schema.AvailableCommandsUpdate(
        available_commands=[]
    )
    with pytest.raises(DecodeError) as info:
        decode(schema.SessionUpdate, wire, strict=True)
    assert info.value.path == "$.availableCommands"
    with pytest.raises(DecodeError, match="missing required field"):
        decode(schema.SessionUpdate, {"sessionUpdate": "available_commands_update"})


def test_unknown_enum_values() -> None:
    """Unknown enum values are kept in lenient mode, rejected by strict mode for closed enums
    and accepted for open ones (``other`` branch)."""
    kind = decode(schema.ToolCall, {"toolCallId": "t", "title": "x", "kind": "teleport"}).kind
    assert kind == "teleport" and not kind.known
    assert schema.ToolKind.READ.known
    with pytest.raises(DecodeError) as info:
        decode(schema.ToolCall, {"toolCallId": "t", "title": "x", "kind": "teleport"}, strict=True)
    assert info.value.path == "$.kind"
    notice = {"sessionUpdate": "notice", "severity": "fatal", "title": "t"}
    assert decode(schema.SessionUpdate, notice, strict=True).severity == "fatal"


@pytest.mark.parametrize(
    ("wire", "path", "fragment"),
    [
        ({"sessionId": "s"}, "$.update", "missing required field"),
        ({"sessionId": 3, "update": {}}, "$.sessionId", "expected string, got integer 3"),
        (
            {"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk", "content": []}},
            "$.update.content",
            "expected object, got array",
        ),
        (
            {
                "sessionId": "s",
                "update": {"sessionUpdate": "agent_message_chunk", "content": {"text": "x"}},
            },
            "$.update.content.type",
            "missing tag",
        ),
        ({"sessionId": "s", "update": {"content": 1}}, "$.update.sessionUpdate", "missing tag"),
        ([], "$", "expected object"),
    ],
)
def test_error_paths(wire: Any, path: str, fragment: str) -> None:
    """Bad input raises DecodeError with the JSON path and a short message (both modes)."""
    for strict in (False, True):
        with pytest.raises(DecodeError) as info:
            decode(schema.SessionNotification, wire, strict=strict)
        assert info.value.path == path
        assert fragment in info.value.message
        assert str(info.value) == f"{path}: {info.value.message}"


def test_error_message_is_bounded() -> None:
    """A huge offending value is not echoed back in full."""
    with pytest.raises(DecodeError) as info:
        decode(schema.SessionNotification, {"sessionId": ["x" * 100_000], "update": {}})
    assert len(str(info.value)) < 300


def test_decode_json_errors() -> None:
    """Invalid JSON text is a DecodeError at ``$``; valid text decodes."""
    with pytest.raises(DecodeError) as info:
        decode_json(schema.PromptResponse, b'{"stopReason": ')
    assert info.value.path == "$"
    assert decode_json(schema.PromptResponse, '{"stopReason":"end_turn"}').stop_reason == "end_turn"


def test_encode_json_compact_utf8() -> None:
    """encode_json writes compact UTF-8 JSON with no newline."""
    out = encode_json(schema.TextContentBlock(text="é\u2028"))
    assert out == '{"type":"text","text":"é\u2028"}'.encode()
    assert not out.endswith(b"\n")


def test_cattrs_converter_delegates() -> None:
    """The cattrs converter structures and unstructures ACP types like decode/encode."""
    wire = {"outcome": "selected", "optionId": "allow"}
    value: Any = converter.structure(wire, schema.RequestPermissionOutcome)  # type: ignore[arg-type]
    assert value == schema.SelectedPermissionOutcome(option_id="allow")
    assert converter.unstructure(value) == wire


def test_unstable_usage_models() -> None:
    """Unstable PromptResponse carries usage; stable PromptResponse ignores it (lenient)."""
    wire = {
        "stopReason": "end_turn",
        "usage": {"inputTokens": 1, "outputTokens": 2, "totalTokens": 3, "cachedReadTokens": 0},
    }
    value = decode(unstable.PromptResponse, wire)
    assert value.usage == unstable.Usage(
        input_tokens=1, output_tokens=2, total_tokens=3, cached_read_tokens=0
    )
    assert encode(value) == wire
    assert decode(schema.PromptResponse, wire) == schema.PromptResponse(
        stop_reason=schema.StopReason.END_TURN
    )
    assert hasattr(schema, "UsageUpdate") and hasattr(unstable, "UsageUpdate")
