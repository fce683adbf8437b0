"""decode()'s first converter (no detailed validation) has one generated hook per class
that checks JSON-primitive attributes inline and fills the instance through a twin class
(issue 16): it must accept and reject exactly what the detailed converters do."""

from __future__ import annotations

import copy
import linecache
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acpkit import codec, schema, unstable
from acpkit.codec import DecodeError, decode, encode
from acpkit.mcp import schema as mcp_schema
from acpkit.testing.strategies import for_type
from tests.helpers import examples

CASES: list[tuple[type, dict[str, Any]]] = [
    (schema.TextContentBlock, {"type": "text", "text": "hi"}),
    (schema.TextContentBlock, {"type": "text", "text": 3}),
    (schema.TextContentBlock, {"type": "text", "text": None}),
    (schema.TextContentBlock, {"type": "text"}),
    (schema.TextContentBlock, {"type": "text", "text": "hi", "_meta": [1]}),
    (schema.TextContentBlock, {"type": "text", "text": "hi", "_meta": None}),
    (schema.ResourceLinkContentBlock, {"type": "resource_link", "name": "n", "uri": "u"}),
    (
        schema.ResourceLinkContentBlock,
        {"type": "resource_link", "name": "n", "uri": "u", "mimeType": 5, "title": None},
    ),
    (schema.ResourceLinkContentBlock, {"type": "resource_link", "name": "n", "uri": True}),
    (schema.SessionInfoUpdate, {"sessionUpdate": "session_info_update"}),
    (schema.SessionInfoUpdate, {"sessionUpdate": "session_info_update", "title": None}),
    (schema.SessionInfoUpdate, {"sessionUpdate": "session_info_update", "title": 7}),
    (schema.SessionInfoUpdate, {"sessionUpdate": "session_info_update", "title": "t"}),
    (
        schema.SessionInfoUpdate,
        {"sessionUpdate": "session_info_update", "title": schema.ABSENT},
    ),
    # attributes whose default is a value or a factory, inlined by the fast hooks
    (schema.PromptCapabilities, {}),
    (schema.PromptCapabilities, {"image": True, "audio": None, "embeddedContext": "yes"}),
    (schema.AgentCapabilities, {"loadSession": 1, "promptCapabilities": {"image": True}}),
    (schema.AgentCapabilities, {"promptCapabilities": None, "mcpCapabilities": 3}),
    (schema.AgentCapabilities, {"promptCapabilities": {"image": []}, "auth": []}),
    (schema.InitializeResponse, {"protocolVersion": 1, "authMethods": None}),
    (schema.InitializeResponse, {"protocolVersion": 1, "authMethods": "none"}),
    (schema.InitializeResponse, {"protocolVersion": 1, "authMethods": [{"id": 3}]}),
    (schema.InitializeResponse, {"protocolVersion": 1, "authMethods": [{"id": "a", "name": "A"}]}),
    # enums, looked up inline by the fast hooks
    (schema.ToolCallStart, {"toolCallId": "t", "title": "x", "kind": "read", "status": None}),
    (schema.ToolCallStart, {"toolCallId": "t", "title": "x", "kind": "teleport"}),
    (schema.ToolCallStart, {"toolCallId": "t", "title": "x", "kind": 3, "status": ["done"]}),
    (schema.PlanEntry, {"content": "c", "priority": "high", "status": "pending"}),
    (schema.PlanEntry, {"content": "c", "priority": "urgent", "status": "pending"}),
    (schema.PlanEntry, {"content": "c", "priority": 1, "status": "pending"}),
    (schema.PlanEntry, {"content": "c", "priority": None, "status": "pending"}),
]


def _outcome(fn: Any) -> Any:
    try:
        return ("ok", fn())
    except Exception:
        return ("error", None)


@pytest.mark.parametrize(("cls", "obj"), CASES)
def test_fast_converter_agrees_with_the_detailed_one(cls: type, obj: dict[str, Any]) -> None:
    """The fast converter decodes to the same value, or fails where the lenient
    converter (per-attribute hooks) fails; decode() gives the lenient result."""
    fast = _outcome(lambda: codec._hooks("fast").conv.structure(dict(obj), cls))
    lenient = _outcome(lambda: codec.converter.structure(dict(obj), cls))
    assert fast == lenient
    if lenient[0] == "ok":
        assert decode(cls, dict(obj)) == lenient[1]
    else:
        with pytest.raises(DecodeError):
            decode(cls, dict(obj))


def _fast_hook_source(cls: type) -> str:
    codec._hooks("fast").conv.get_structure_hook(cls)
    name = f"<acpkit.codec fast hook {cls.__module__}.{cls.__qualname__}>"
    return "".join(linecache.getlines(name))


def test_primitive_attributes_cost_no_hook_call_on_the_fast_converter() -> None:
    """The fast converter's hook for a text block is one generated function whose source
    is registered for tracebacks: it tests ``text``'s type inline (no hook call for a
    JSON primitive), and rejects a wrong type as the detailed converter does."""
    source = _fast_hook_source(schema.TextContentBlock)
    assert "type(v1) is not str" in source
    assert "H1(" not in source
    hook = codec._hooks("fast").conv.get_structure_hook(schema.TextContentBlock)
    with pytest.raises(Exception, match="expected string"):
        hook({"type": "text", "text": 3}, None)
    assert hook({"type": "text", "text": "x"}, None).text == "x"


def test_defaults_and_enums_cost_no_hook_call_on_the_fast_converter() -> None:
    """A flag whose default is ``False`` is tested inline (absent, ``null`` or not a
    boolean: the default), a capability whose default is made by a factory calls the
    model's class hook directly, and an enum attribute finds a known member by one
    lookup; the hooks they replace are called only for what the lookup does not know."""
    flags = _fast_hook_source(schema.PromptCapabilities)
    assert "type(v0) is not bool" in flags and "H0(" not in flags
    capabilities = _fast_hook_source(schema.AgentCapabilities)
    assert "M1(v1, T1)" in capabilities and "H1(" not in capabilities
    tool_call = _fast_hook_source(schema.ToolCallStart)
    assert "L3.get(v3)" in tool_call
    kinds = decode(schema.ToolCallStart, {"toolCallId": "t", "title": "x", "kind": "read"})
    assert kinds.kind is schema.ToolKind.READ


def _models() -> list[type]:
    classes = []
    for module in (schema, unstable, mcp_schema):
        for name, value in vars(module).items():
            if isinstance(value, type) and attrs.has(value) and name != "Method":
                classes.append(value)
    return classes


@pytest.mark.parametrize("module", [schema, unstable, mcp_schema], ids=lambda m: m.__name__)
def test_every_generated_model_has_a_slot_twin(module: Any) -> None:
    """Every generated model class with attributes (not ``Method``) can be made through
    a twin: its slots come from one class on ``object`` with no ``__weakref__`` slot, so
    the fast hook stores plain attributes and then sets the real class."""
    missing = [
        cls.__name__
        for cls in _models()
        if cls.__module__ == module.__name__ and attrs.fields(cls) and codec._twin(cls) is None
    ]
    assert missing == []


def test_twin_made_instances_are_the_real_class() -> None:
    """An instance decoded through the twin is exactly the model: its type, equality,
    hash, repr, ``attrs.evolve`` and frozenness are those of ``attrs``' own instances."""
    obj = {"type": "resource_link", "name": "n", "uri": "u", "size": 3}
    decoded = decode(schema.ContentBlock, obj)
    made = schema.ResourceLinkContentBlock(name="n", uri="u", size=3)
    assert type(decoded) is schema.ResourceLinkContentBlock
    assert decoded == made and hash(decoded) == hash(made) and repr(decoded) == repr(made)
    assert attrs.evolve(decoded, name="m") == attrs.evolve(made, name="m")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        decoded.name = "m"  # type: ignore[misc]


@settings(max_examples=examples(10 / 3), deadline=None)
@given(st.data())
def test_fast_hooks_agree_with_cattrs_generated_ones(data: st.DataObject) -> None:
    """For any generated model and any JSON value built from its own encoded examples
    with keys dropped or values replaced, the fast converter's hook and the lenient
    converter's cattrs-generated function agree: the same value or both an error."""
    cls = data.draw(st.sampled_from([c for c in _models() if c.__module__ == "acpkit.schema"]))
    try:
        value = data.draw(for_type(cls))
    except Exception:  # a class the strategies cannot build on their own
        return
    obj = encode(value)
    if isinstance(obj, dict) and obj:
        key = data.draw(st.sampled_from(sorted(obj)))
        change = data.draw(st.sampled_from(["drop", "null", "number", "string", "keep"]))
        if change == "drop":
            del obj[key]
        elif change != "keep":
            obj[key] = {"null": None, "number": 7, "string": "x"}[change]
    fast = _outcome(lambda: codec._hooks("fast").conv.structure(copy.deepcopy(obj), cls))
    lenient = _outcome(lambda: codec.converter.structure(copy.deepcopy(obj), cls))
    assert fast == lenient
