"""decode()'s first converter (no detailed validation) checks JSON-primitive attributes
in the class constructor instead of a hook per attribute (issue 16): it must accept and
reject exactly what the detailed converters do."""

from __future__ import annotations

from typing import Any

import pytest

from acpkit import codec, schema
from acpkit.codec import DecodeError, decode

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


def test_primitive_attributes_cost_no_hook_call_on_the_fast_converter() -> None:
    """The fast converter's generated function for a text block passes ``text`` to the
    constructor unconverted: the constructor holds the type test."""
    codec._hooks("fast").conv.structure({"type": "text", "text": "x"}, schema.TextContentBlock)
    new = codec._CONSTRUCTORS[(schema.TextContentBlock, True)]
    with pytest.raises(Exception, match="expected string"):
        new(3)
    assert new("x").text == "x"
