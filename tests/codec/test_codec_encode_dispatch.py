"""
The generated encoders choose a union field's variant encoder by one lookup on the value's
class, and that lookup is the field's type check too: every variant encodes (the first
met and the ones after), a value of no variant's class is still an :class:`EncodeError`
however many variants were met before, and what the lookup does not know (an item of a
list of variants that is not a model) is encoded by its own type, as before.  Enum fields
are written as their values, open enums' unknown values and plain strings included.
"""

from __future__ import annotations

from typing import Any

import pytest

from acpkit import codec, schema
from acpkit.codec import EncodeError


def _notification(update: Any) -> schema.SessionNotification:
    return schema.SessionNotification(session_id="s", update=update)


def test_every_variant_of_a_union_field_encodes_after_others_were_met() -> None:
    """Variants met one after the other through the same union field (``update``, then
    ``content``) each encode with their own tag and fields."""
    updates = [
        schema.AgentMessageChunk(content=schema.TextContentBlock(text="a")),
        schema.AgentThoughtChunk(content=schema.TextContentBlock(text="b")),
        schema.UserMessageChunk(content=schema.ResourceLinkContentBlock(name="n", uri="file:///n")),
        schema.AgentMessageChunk(content=schema.ImageContentBlock(data="AA", mime_type="x/y")),
    ]
    encoded = [codec.encode(_notification(u))["update"] for u in updates]
    assert encoded == [
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "a"}},
        {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "b"}},
        {
            "sessionUpdate": "user_message_chunk",
            "content": {"type": "resource_link", "name": "n", "uri": "file:///n"},
        },
        {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "image", "data": "AA", "mimeType": "x/y"},
        },
    ]
    for u, wire in zip(updates, encoded, strict=True):
        assert codec.decode(schema.SessionUpdate, wire) == u


def test_a_model_of_no_variant_is_refused_after_variants_were_met() -> None:
    """Once variants have encoded through a union field, a model that is none of them
    (a content block where an update is expected), a dict and None are still refused,
    naming the model and the field."""
    codec.encode(_notification(schema.AgentMessageChunk(content=schema.TextContentBlock(text="a"))))
    for wrong in (schema.TextContentBlock(text="a"), {"sessionUpdate": "plan"}, None):
        with pytest.raises(EncodeError, match=r"SessionNotification\.update") as caught:
            codec.encode(_notification(wrong))
        assert caught.value.key == "update"
    block = schema.TextContentBlock(text="a")
    with pytest.raises(EncodeError, match=r"AgentMessageChunk\.content"):
        entry = schema.PlanEntry(
            content="x",
            priority=schema.PlanEntryPriority.HIGH,
            status=schema.PlanEntryStatus.PENDING,
        )
        codec.encode(schema.AgentMessageChunk(content=entry))  # type: ignore[arg-type]
    assert codec.encode(schema.AgentMessageChunk(content=block))["content"] == {
        "type": "text",
        "text": "a",
    }


def test_list_items_of_a_union_are_chosen_by_class_and_others_kept_by_type() -> None:
    """A list of union variants (a prompt's blocks) encodes each item with its own
    variant's encoder; an item that is no model (a dict) is encoded by its own type, as
    the codec always did for such lists."""
    prompt = schema.PromptRequest(
        session_id="s",
        prompt=[
            schema.TextContentBlock(text="hi"),
            {"type": "text", "text": "raw"},  # type: ignore[list-item]
            schema.ImageContentBlock(data="AA", mime_type="image/png"),
        ],
    )
    assert codec.encode(prompt)["prompt"] == [
        {"type": "text", "text": "hi"},
        {"type": "text", "text": "raw"},
        {"type": "image", "data": "AA", "mimeType": "image/png"},
    ]


def test_enum_fields_are_written_as_their_values() -> None:
    """A member, an open enum's unknown value (decoded) and a plain string are written as
    the string itself."""
    known = schema.ToolCallStart(tool_call_id="t", title="x", kind=schema.ToolKind.READ)
    unknown = codec.decode(schema.ToolCallStart, {"toolCallId": "t", "title": "x", "kind": "warp"})
    plain = schema.ToolCallStart(tool_call_id="t", title="x", kind="edit")  # type: ignore[arg-type]
    assert [codec.encode(u)["kind"] for u in (known, unknown, plain)] == ["read", "warp", "edit"]
    for u in (known, unknown, plain):
        assert type(codec.encode(u)["kind"]) is str
