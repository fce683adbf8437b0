"""
The small hooks: JSON primitives checked (never coerced), ``null`` and defaults, x-deserialize-
default-on-error, tags checked in strict mode, and the few unstructure helpers.  Each is a
cattrs hook or an override's hook (``hook(value, type)``).
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable
from typing import Any, Protocol

import attrs

from acpkit.codec.decode_errors import Invalid, type_error
from acpkit.codec.wire import MISSING

StructureHook = Callable[[Any, Any], Any]


UnstructureHook = Callable[[Any], Any]


class HookSource(Protocol):
    """What the union and fast-path hook builders need from the hooks of one converter
    (:class:`acpkit.codec.hooks.Hooks`)."""

    #: The converter's ``forbid_extra_keys``: strict mode.
    strict: bool

    def hook(self, tp: Any, skip_invalid: bool = False) -> StructureHook:
        """The structure hook of a type expression met in a model."""
        ...

    def class_hook(self, cls: type) -> StructureHook:
        """The converter's hook for a model class (late-bound while it is being made)."""
        ...

    def list_hook(self, item: StructureHook, skip_invalid: bool) -> StructureHook:
        """The hook of a list whose items ``item`` structures."""
        ...

    def field_hook(self, a: attrs.Attribute[Any]) -> StructureHook:
        """The structure hook of one model attribute."""
        ...


def s_str(v: Any, _: Any) -> Any:
    if type(v) is not str:
        raise type_error("string", v)
    return v


def s_int_strict(v: Any, _: Any) -> Any:
    if type(v) is not int:
        raise type_error("integer", v)
    return v


def s_int(v: Any, _: Any) -> Any:
    if type(v) is not int:
        if type(v) is float and v.is_integer():
            return int(v)
        raise type_error("integer", v)
    return v


def s_float(v: Any, _: Any) -> Any:
    if type(v) is float or type(v) is int:
        return v
    raise type_error("number", v)


def s_bool(v: Any, _: Any) -> Any:
    if type(v) is not bool:
        raise type_error("boolean", v)
    return v


def s_any(v: Any, _: Any) -> Any:
    return v


def s_none(v: Any, _: Any) -> Any:
    if v is not None:
        raise type_error("null", v)
    return None


def s_object(v: Any, _: Any) -> Any:
    if type(v) is not dict:
        raise type_error("object", v)
    return v


NONES = itertools.repeat(None)
"""The second argument of item hooks, for ``map`` (no Python frame per item)."""


def optional(inner: StructureHook) -> StructureHook:
    def structure_optional(v: Any, t: Any) -> Any:
        return None if v is None else inner(v, t)

    structure_optional.acp_optional_of = inner  # type: ignore[attr-defined]
    return structure_optional


def none() -> Any:
    return None


def constant(value: Any) -> Callable[[], Any]:
    def default() -> Any:
        return value

    return default


def opt_str(v: Any, _: Any) -> Any:
    if v is None or type(v) is str:
        return v
    raise type_error("string", v)


def opt_bool(v: Any, _: Any) -> Any:
    if v is None or type(v) is bool:
        return v
    raise type_error("boolean", v)


def opt_float(v: Any, _: Any) -> Any:
    if v is None or type(v) is float or type(v) is int:
        return v
    raise type_error("number", v)


def opt_object(v: Any, _: Any) -> Any:
    if v is None or type(v) is dict:
        return v
    raise type_error("object", v)


OPTIONAL_PRIMITIVES: dict[StructureHook, StructureHook] = {
    s_str: opt_str,
    s_bool: opt_bool,
    s_float: opt_float,
    s_object: opt_object,
    s_any: s_any,
}
"""``T | None`` hooks of one call for the JSON primitives."""


PRIMITIVE_TYPES: dict[StructureHook, tuple[type, ...]] = {
    s_str: (str,),
    s_bool: (bool,),
    s_float: (float, int),
    s_object: (dict,),
}
"""The Python types each primitive hook accepts as they are."""


PRIMITIVE_NAMES: dict[StructureHook, str] = {
    s_str: "string",
    s_bool: "boolean",
    s_float: "number",
    s_object: "object",
}


def optional_or_default(inner: StructureHook, made: Callable[[], Any]) -> StructureHook:
    """x-deserialize-default-on-error, lenient mode: ``null`` or an invalid value becomes
    the default.  ``acp_default_of`` (``(inner, True)``: an invalid value is the default;
    :func:`null_to`'s is ``(inner, False)``) lets the fast class hooks inline it."""

    json_types = PRIMITIVE_TYPES.get(inner)
    if json_types is not None:  # a JSON primitive: one type test, no inner call

        def primitive_or_default(v: Any, t: Any) -> Any:
            return v if type(v) in json_types else made()

        primitive_or_default.acp_default_of = (inner, True)  # type: ignore[attr-defined]
        return primitive_or_default

    def structure_or_default(v: Any, t: Any) -> Any:
        if v is None:
            return made()
        try:
            return inner(v, t)
        except Exception:
            return made()

    if made is none:
        structure_or_default.acp_or_none_of = inner  # type: ignore[attr-defined]
    structure_or_default.acp_default_of = (inner, True)  # type: ignore[attr-defined]
    return structure_or_default


def null_to(inner: StructureHook, made: Callable[[], Any]) -> StructureHook:
    def structure_null_to_default(v: Any, t: Any) -> Any:
        return made() if v is None else inner(v, t)

    structure_null_to_default.acp_default_of = (inner, False)  # type: ignore[attr-defined]
    return structure_null_to_default


def default_on_error(inner: StructureHook, made: Callable[[], Any]) -> StructureHook:
    """x-deserialize-default-on-error, lenient mode: an invalid value becomes the default."""

    def structure_or_default(v: Any, t: Any) -> Any:
        try:
            return inner(v, t)
        except Exception:
            return made()

    return structure_or_default


def strict_tag_check(generated: StructureHook, key: str, tag: str) -> StructureHook:
    """Strict mode, a variant class: its tag, when present, must be its own; it is then
    dropped so that ``forbid_extra_keys`` (which knows only the attributes) accepts it."""

    def structure_variant_strict(o: Any, t: Any) -> Any:
        if type(o) is not dict:
            raise type_error("object", o)
        found = o.get(key, MISSING)
        if found is not MISSING:
            if found != tag:
                raise Invalid(f"expected tag {tag}", [key])
            o = {k: v for k, v in o.items() if k != key}
        return generated(o, t)

    return structure_variant_strict


def tag_check(tag: str) -> StructureHook:
    def structure_tag(v: Any, t: Any) -> Any:
        if v != tag:
            raise Invalid(f"expected tag {tag}")
        return v

    return structure_tag


def unstructure_optional(inner: UnstructureHook) -> UnstructureHook:
    def unstructure_optional(v: Any) -> Any:
        return None if v is None else inner(v)

    return unstructure_optional


def enum_value(v: Any) -> Any:
    """The wire value of an enum field (plain ``str``/``int``, never the member)."""
    return v.value if isinstance(v, enum.Enum) else v
