"""acpkit.codec as a cattrs converter: ``get_converter`` on a user's converter, ``wire_tag``,
generated source in tracebacks, and the orjson layer (``loads`` / ``dumps``)."""

from __future__ import annotations

import json
import math
import traceback
from typing import Any

import attrs
import cattrs
import pytest
from cattrs.errors import ClassValidationError

from acpkit import codec, schema
from acpkit.codec import decode, dumps, encode, get_converter, loads, wire_tag

CHUNK_WIRE: dict[str, Any] = {
    "sessionId": "s",
    "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}},
}


@attrs.frozen
class Note:
    """A user's own class, with cattrs' default rules."""

    title: str
    count: int


# ------------------------------------------------------------------ wire_tag
def test_wire_tag_of_variants() -> None:
    """wire_tag gives a variant's discriminator value without encoding it; an unknown
    variant's received tag; None for untagged variants, plain models and non-models."""
    chunk = schema.AgentMessageChunk(content=schema.TextContentBlock(text="x"))
    assert wire_tag(chunk) == "agent_message_chunk"
    assert wire_tag(chunk.content) == "text"
    assert wire_tag(schema.SelectedPermissionOutcome(option_id="o")) == "selected"
    unknown = decode(schema.ContentBlock, {"type": "hologram", "x": 1})
    assert wire_tag(unknown) == "hologram"
    assert wire_tag(schema.UnknownContentBlock(raw={"type": 3})) is None
    stdio = schema.McpServerStdio(name="fs", command="srv", args=[], env=[])
    assert wire_tag(stdio) is None
    assert wire_tag(schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)) is None
    assert wire_tag({"type": "text"}) is None
    assert wire_tag(None) is None


def test_wire_tag_matches_encode_for_every_variant() -> None:
    """For every tagged variant class, wire_tag equals the tag encode() writes."""
    for union in (schema.SessionUpdate, schema.ContentBlock, schema.ToolCallContent):
        for cls in union.__args__:
            tag = getattr(cls, "__acp_tag__", None)
            if tag is not None:
                assert wire_tag(object.__new__(cls)) == tag[1]


# ------------------------------------------------------------------ get_converter
def test_get_converter_on_a_user_converter_keeps_their_rules() -> None:
    """get_converter(conv) adds our hooks and returns conv: ACP types decode and encode as
    with decode()/encode(), the user's own classes keep cattrs' rules (a str field still
    takes cattrs' str(), our strict type checks stay with our models)."""
    conv = cattrs.Converter()
    assert get_converter(conv) is conv
    value = conv.structure(CHUNK_WIRE, schema.SessionNotification)
    assert value == decode(schema.SessionNotification, CHUNK_WIRE)
    assert conv.unstructure(value) == encode(value) == CHUNK_WIRE
    assert conv.structure({"title": 5, "count": "2"}, Note) == Note(title="5", count=2)
    with pytest.raises(ClassValidationError):
        conv.structure({"sessionId": 5, "update": CHUNK_WIRE["update"]}, schema.SessionNotification)


def test_user_hook_for_our_class_is_used_inside_our_unions() -> None:
    """A structure hook the user registers for one of our variant classes is the one our
    tagged-union dispatch calls (registered before the first use of the enclosing type)."""
    conv = get_converter(cattrs.Converter())
    seen: list[Any] = []

    def text_block(obj: Any, _: Any) -> schema.TextContentBlock:
        seen.append(obj)
        return schema.TextContentBlock(text=obj["text"].upper())

    conv.register_structure_hook(schema.TextContentBlock, text_block)
    value = conv.structure(CHUNK_WIRE, schema.SessionNotification)
    assert isinstance(value.update, schema.AgentMessageChunk)
    assert value.update.content == schema.TextContentBlock(text="HI")
    assert seen == [CHUNK_WIRE["update"]["content"]]


def test_strict_rules_follow_forbid_extra_keys() -> None:
    """A converter made with forbid_extra_keys gets the strict rules; its errors are
    cattrs' own (transform_error names the path)."""
    conv = get_converter(cattrs.Converter(forbid_extra_keys=True))
    wire = {**CHUNK_WIRE, "extra": 1}
    with pytest.raises(ClassValidationError) as info:
        conv.structure(wire, schema.SessionNotification)
    assert any("extra" in line for line in cattrs.transform_error(info.value))
    lenient = get_converter(cattrs.Converter())
    assert lenient.structure(wire, schema.SessionNotification).session_id == "s"


def test_generated_functions_show_their_source_in_tracebacks() -> None:
    """Frames of cattrs' generated functions (and of our constructors) have source lines."""
    conv = get_converter(cattrs.Converter())

    def broken(obj: Any, _: Any) -> Any:
        raise RuntimeError("boom")

    conv.register_structure_hook(schema.TextContentBlock, broken)
    with pytest.raises(ClassValidationError) as info:
        conv.structure(CHUNK_WIRE, schema.SessionNotification)
    error: BaseException = info.value
    while isinstance(error, ClassValidationError):
        error = error.exceptions[0]
    frames = traceback.extract_tb(error.__traceback__)
    generated = [f for f in frames if f.filename.startswith("<cattrs generated structure")]
    assert generated, [f.filename for f in frames]
    assert all(f.line for f in generated)
    assert "AgentMessageChunk" in generated[0].filename
    new = codec._constructor(schema.TextContentBlock)
    assert __import__("linecache").getline(new.__code__.co_filename, 1).startswith("def new_")


# ------------------------------------------------------------------ loads / dumps
def test_loads_keeps_integers_past_64_bits_and_accepts_what_json_accepts() -> None:
    """loads is exact for huge integers (orjson would give a float), takes str or bytes,
    and accepts NaN as json.loads does; invalid text is a ValueError."""
    big = 123456789012345678901234567890
    assert loads(b'{"id":' + str(big).encode() + b"}") == {"id": big}
    assert loads('{"a":[1,2.5,"\u00e9"]}') == {"a": [1, 2.5, "\u00e9"]}
    assert math.isnan(loads(b"NaN"))
    with pytest.raises(ValueError):
        loads(b'{"a": ')


def test_dumps_is_byte_compatible_with_the_json_encoder() -> None:
    """dumps writes what the compact json encoder wrote: separators, raw UTF-8 (U+2028
    too), huge integers, non-str keys; NaN is still a ValueError. The one difference is a
    float's exponent padding (``1e-7``, json ``1e-07``): the same number."""
    reference = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    value: object
    for value in (
        {"type": "text", "text": 'é\u2028\n"q" \x01'},
        {"id": 2**70, "ok": True, "none": None, "n": [1, -2, 0.5]},
        {1: "int key"},
        [],
    ):
        assert dumps(value) == reference.encode(value).encode("utf-8"), value
    assert json.loads(dumps({"x": 1e-7})) == {"x": 1e-7}
    with pytest.raises(ValueError):
        dumps({"x": float("nan")})
    with pytest.raises(TypeError):
        dumps({"x": object()})


def test_orjson_path_leaves_to_json_what_it_would_read_differently() -> None:
    """loads_or_not_parsed (the engine's and the codec's fast path) declines huge integers,
    lone surrogates, NaN, invalid UTF-8 and invalid text; it reads the rest as json does."""
    from acpkit.jsonrpc.jsonbytes import NOT_PARSED, loads_or_not_parsed

    for text in (b"12345678901234567890", b'"\\ud800"', b"NaN", b"\xff", b"[1,", b"1e400"):
        assert loads_or_not_parsed(text) is NOT_PARSED, text
    for text in (b' {"a": [1, -2, 0.5, "\\u00e9", null, true]} ', b"-0", b"1E5"):
        assert loads_or_not_parsed(text) == json.loads(text), text
