"""
How the models look on the wire: each attribute's JSON key (:func:`wire_name`), a variant's tag
(:func:`wire_tag`, and the tag as one more attribute for cattrs' generators), and which types
are the generated models', enums and unions that get the codec's hooks.
"""

from __future__ import annotations

import enum
import operator
import types
import typing
from typing import Any, Union, get_args, get_origin

import attrs

from acpkit.schema import AbsentType

MISSING: Any = object()


NONE = type(None)


def wire_name(field: attrs.Attribute[Any]) -> str:
    """The JSON key of a model attribute."""
    explicit = field.metadata.get("wire")
    if explicit is not None:
        return str(explicit)
    name = field.name
    if name == "meta":
        return "_meta"
    name = name.rstrip("_")
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def wire_tag(value: object) -> str | None:
    """The discriminator value of a tagged-union variant, as written on the wire.

    ``wire_tag(AgentMessageChunk(...)) == "agent_message_chunk"``; for an
    ``Unknown<Union>`` value, the tag it was received with; ``None`` for anything else
    (an untagged variant, a plain model, a non-model).
    """
    cls = type(value)
    tag = getattr(cls, "__acp_tag__", None)
    if tag is not None:
        return str(tag[1])
    key = getattr(cls, "__acp_unknown__", None)
    if key is not None:
        raw = getattr(value, "raw", None)
        found = raw.get(key) if isinstance(raw, dict) else None
        return found if isinstance(found, str) else None
    return None


MODEL_MODULES = frozenset({"acpkit.schema", "acpkit.unstable", "acpkit.mcp.schema"})
"""The generated model modules (ACP stable, ACP unstable, MCP) whose types get our hooks."""


def is_model(tp: Any) -> bool:
    return isinstance(tp, type) and attrs.has(tp)


def is_our_model(tp: Any) -> bool:
    return is_model(tp) and tp.__module__ in MODEL_MODULES


def is_our_enum(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, enum.Enum) and tp.__module__ in MODEL_MODULES


def union_args(tp: Any) -> tuple[Any, ...] | None:
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        return get_args(tp)
    return None


def is_our_union(tp: Any) -> bool:
    args = union_args(tp)
    return args is not None and any(is_our_model(a) or is_our_enum(a) for a in args)


def type_hints(cls: type) -> dict[str, Any]:
    module = __import__(cls.__module__, fromlist=["_"])
    return typing.get_type_hints(cls, globalns=vars(module))


def resolved_fields(cls: type) -> list[attrs.Attribute[Any]]:
    """The attributes of ``cls`` with their string annotations resolved (not mutated)."""
    hints = type_hints(cls)
    return [a.evolve(type=hints[a.name]) for a in attrs.fields(cls)]


def strip_optional(tp: Any) -> Any:
    """``T | None | AbsentType`` -> ``T`` (or the union of what remains)."""
    args = union_args(tp)
    if args is None:
        return tp
    rest = tuple(a for a in args if a is not NONE and a is not AbsentType)
    if len(rest) == len(args):
        return tp
    return rest[0] if len(rest) == 1 else Union[rest]


def required_keys(cls: type) -> set[str]:
    return {wire_name(f) for f in attrs.fields(cls) if f.default is attrs.NOTHING}


TAG = "__acp_tag__"


TAG_FIELD: attrs.Attribute[Any] = attrs.fields(
    attrs.make_class("_WireTag", {TAG: attrs.field(default=None, type=str)})
)[0]
"""A variant's tag as one more attribute for cattrs' generators: read from the class
(``instance.__acp_tag__``), written first under the tag key; in strict mode, read from
the wire when present and checked, so that ``forbid_extra_keys`` knows the key."""


tag_value = operator.itemgetter(1)
