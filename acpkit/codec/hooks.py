"""
The cattrs hook factories :func:`get_converter` registers on a converter: for each model class
cattrs' own generated structure and unstructure functions, with one ``override`` per attribute
(its camelCase key, the omit rule, its hook); hooks for our enums and unions; and, on the
fast converter (no detailed validation), the generated class hooks of
:mod:`acpkit.codec.fast`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, get_args, get_origin

import attrs
import cattrs
from cattrs.fns import identity
from cattrs.gen import (
    make_dict_structure_fn_from_attrs,
    override,
)

from acpkit.codec.decode_errors import Invalid, at, snippet, type_error
from acpkit.codec.encoders import FieldEncoding, checked_unstructure
from acpkit.codec.fast import constructor, fused_structure
from acpkit.codec.primitives import (
    NONES,
    OPTIONAL_PRIMITIVES,
    StructureHook,
    UnstructureHook,
    constant,
    default_on_error,
    enum_value,
    none,
    null_to,
    optional,
    optional_or_default,
    s_any,
    s_bool,
    s_float,
    s_int,
    s_int_strict,
    s_none,
    s_object,
    s_str,
    strict_tag_check,
    tag_check,
    unstructure_optional,
)
from acpkit.codec.unions import union_hook
from acpkit.codec.wire import (
    NONE,
    TAG,
    TAG_FIELD,
    is_model,
    is_our_enum,
    is_our_model,
    is_our_union,
    resolved_fields,
    strip_optional,
    union_args,
    wire_name,
)
from acpkit.schema import ABSENT, OpenIntEnum, OpenStrEnum


class Hooks:
    """The hook factories :func:`get_converter` registers on one converter.

    ``strict`` follows the converter's ``forbid_extra_keys``. ``_structure`` /
    ``_unstructure`` hold the finished class hooks, so that a class met again while its
    own hook is being generated (a recursive model) gets a late-bound hook.
    """

    def __init__(self, conv: cattrs.Converter) -> None:
        self.conv = conv
        self.strict = bool(getattr(conv, "forbid_extra_keys", False))
        self._structure: dict[type, StructureHook] = {}
        self._unstructure: dict[type, UnstructureHook] = {}
        self._generating: set[tuple[str, type]] = set()
        self._local: dict[Any, StructureHook] = {}
        self._runtime: dict[type, UnstructureHook] = {}
        self._enums: dict[type, StructureHook] = {}

    # ---------------------------------------------------------- structure: type -> hook
    def hook(self, tp: Any, skip_invalid: bool = False) -> StructureHook:
        """The structure hook of a type expression met in a model (or given to decode)."""
        if not skip_invalid:
            found = self._local.get(tp)
            if found is not None:
                return found
        fn = self._build(tp, skip_invalid)
        if not skip_invalid:
            self._local[tp] = fn
        return fn

    def _build(self, tp: Any, skip_invalid: bool) -> StructureHook:
        if tp is str:
            return s_str
        if tp is int:
            return s_int_strict if self.strict else s_int
        if tp is float:
            return s_float
        if tp is bool:
            return s_bool
        if tp is Any or tp is object:
            return s_any
        if tp is NONE:
            return s_none
        origin = get_origin(tp)
        if origin is list:
            return self.list_hook(self.hook(get_args(tp)[0]), skip_invalid and not self.strict)
        if origin is dict:
            value_type = get_args(tp)[1]
            return s_object if value_type is Any else self._dict(self.hook(value_type))
        if union_args(tp) is not None:
            if skip_invalid:
                return optional(self.hook(strip_optional(tp), skip_invalid=True))
            if is_our_union(tp):
                return self.conv.get_structure_hook(tp)
            return union_hook(self, get_args(tp))
        if is_our_model(tp):
            return self._model(tp)
        if is_our_enum(tp):
            found = self.conv.get_structure_hook(tp)
            return self.enum_hook(tp) if found == self.structure_enum_by_type else found
        if is_model(tp) or (isinstance(tp, type) and issubclass(tp, enum.Enum)):
            return self.conv.get_structure_hook(tp)
        raise TypeError(f"acpkit.codec cannot decode {tp!r}")

    def class_hook(self, cls: type) -> StructureHook:
        """The converter's hook for a model class, for a caller that checked the object
        (late-bound while that class's own hook is being made)."""
        if ("s", cls) in self._generating:
            table = self._structure

            def late(v: Any, t: Any) -> Any:
                return table[cls](v, t)

            return late
        return self.conv.get_structure_hook(cls)

    def _model(self, cls: type) -> StructureHook:
        """A model met as a field, item or decode() target: a JSON object, then the
        converter's hook for the class (late-bound while that hook is being made)."""
        inner = self.class_hook(cls)

        def structure_model(v: Any, t: Any) -> Any:
            if type(v) is not dict:
                raise type_error("object", v)
            return inner(v, cls)

        structure_model.acp_model_hook = inner  # type: ignore[attr-defined]
        return structure_model

    @staticmethod
    def list_hook(item: StructureHook, skip_invalid: bool) -> StructureHook:
        if item is s_str and not skip_invalid:

            def structure_str_list(v: Any, t: Any) -> Any:
                if type(v) is not list:
                    raise type_error("array", v)
                for i, x in enumerate(v):
                    if type(x) is not str:
                        err = type_error("string", x)
                        err.path.append(i)
                        raise err
                return list(v)

            return structure_str_list

        by_tag = getattr(item, "acp_by_tag", None)
        key = getattr(item, "acp_tag_key", None)

        def structure_list(v: Any, t: Any) -> Any:
            if type(v) is not list:
                raise type_error("array", v)
            try:
                if by_tag is not None:  # a tagged union's cached dispatch, inlined
                    return [by_tag[x[key]](x, None) for x in v]
                return list(map(item, v, NONES))
            except Exception:
                pass  # redo item by item for the path, or to skip invalid items
            out = []
            for i, x in enumerate(v):
                try:
                    out.append(item(x, None))
                except Exception as e:
                    if skip_invalid:
                        continue
                    raise at(e, i) from None
            return out

        if by_tag is not None and not skip_invalid:
            # the fast class hooks inline the first try (fast.inline_call)
            structure_list.acp_items_by_tag = (by_tag, key)  # type: ignore[attr-defined]
        return structure_list

    @staticmethod
    def _dict(value: StructureHook) -> StructureHook:
        def structure_dict(v: Any, t: Any) -> Any:
            if type(v) is not dict:
                raise type_error("object", v)
            out = {}
            for k, x in v.items():
                try:
                    out[k] = value(x, None)
                except Exception as e:
                    raise at(e, k) from None
            return out

        return structure_dict

    # ---------------------------------------------------------- structure: factories
    def structure_enum_by_type(self, v: Any, t: Any) -> Any:
        """The hook registered for our enum base classes (see :func:`get_converter`)."""
        return self.enum_hook(t)(v, t)

    def enum_hook(self, cls: type[enum.Enum]) -> StructureHook:
        """The structure hook of one of our enums (made once)."""
        found = self._enums.get(cls)
        if found is None:
            found = self._enums[cls] = self.structure_enum(cls)
        return found

    def structure_enum(self, cls: type[enum.Enum]) -> StructureHook:
        """Enum values: known members by lookup; unknown values kept (lenient, or an open
        enum in strict mode) or reported."""
        lookup = cls._value2member_map_
        keep_unknown = not self.strict or bool(getattr(cls, "__acp_open__", False))
        base = int if issubclass(cls, int) else str
        expected = "integer" if base is int else "string"
        name = cls.__name__

        def structure_enum(v: Any, t: Any) -> Any:
            member = lookup.get(v) if type(v) is base else None
            if member is not None:
                return member
            if type(v) is cls:  # already decoded (an encode() result decoded again)
                return v
            if type(v) is not base:
                raise type_error(expected, v)
            if not keep_unknown:
                raise Invalid(f"unknown {name} value {snippet(v)}")
            return cls(v)

        # the fast class hooks look known members up inline (fast.inline_call)
        structure_enum.acp_members = (lookup, base)  # type: ignore[attr-defined]
        return structure_enum

    def structure_union(self, tp: Any) -> StructureHook:
        """Unions with one of our models or enums: see the module docstring."""
        return union_hook(self, get_args(tp))

    def structure_class(self, cls: type) -> StructureHook:
        """cattrs' generated function for a model, with our overrides per attribute."""
        unknown_key = getattr(cls, "__acp_unknown__", None)
        if unknown_key is not None:

            def structure_unknown(v: Any, t: Any) -> Any:
                if type(v) is not dict:
                    raise type_error("object", v)
                return cls(raw=v)

            self._structure[cls] = structure_unknown
            return structure_unknown
        self._generating.add(("s", cls))
        try:
            fields = resolved_fields(cls)
            if not self.strict and not self.conv.detailed_validation:
                fused = fused_structure(self, cls, fields)
                if fused is not None:
                    self._structure[cls] = fused
                    return fused
            new = constructor(cls)
            overrides: dict[str, Any] = {a.name: self._field_override(a) for a in fields}
            if new is not cls:
                # Positional arguments for the required attributes: without detailed
                # validation cattrs then calls new(value, ..., **res), which costs
                # about a quarter less than keywords beside **res.
                fields = [
                    a.evolve(kw_only=False) if a.default is attrs.NOTHING else a for a in fields
                ]
            tag = getattr(cls, "__acp_tag__", None)
            if tag is not None and self.strict and new is not cls:
                fields.append(TAG_FIELD)
                overrides[TAG] = override(rename=tag[0], struct_hook=tag_check(tag[1]))
            generated = make_dict_structure_fn_from_attrs(fields, new, self.conv, **overrides)
        finally:
            self._generating.discard(("s", cls))
        fn: StructureHook = generated
        if tag is not None and self.strict and new is cls:
            fn = strict_tag_check(generated, tag[0], tag[1])
        self._structure[cls] = fn
        return fn

    def _field_override(self, a: attrs.Attribute[Any]) -> Any:
        """``override(rename=…, struct_hook=…)`` for one attribute."""
        return override(rename=wire_name(a), struct_hook=self.field_hook(a))

    def field_hook(self, a: attrs.Attribute[Any]) -> StructureHook:
        tp = a.type
        meta = a.metadata
        on_error = bool(meta.get("on_error")) and not self.strict
        skip = bool(meta.get("skip_invalid"))
        is_list = get_origin(strip_optional(tp)) is list
        if a.default is attrs.NOTHING:
            inner = self.hook(tp, skip_invalid=skip)
            if meta.get("on_null"):
                inner = null_to(inner, list if is_list else dict)
            if on_error and is_list:
                inner = default_on_error(inner, list)
            return inner
        inner = self.hook(strip_optional(tp), skip_invalid=skip)
        default = a.default
        made: Callable[[], Any]
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            made = default.factory  # type: ignore[union-attr]
        elif default is None or default is ABSENT:
            made = none
        else:
            made = constant(default)
        if on_error:
            return optional_or_default(inner, made)
        if made is none:
            return OPTIONAL_PRIMITIVES.get(inner) or optional(inner)
        return null_to(inner, made)

    # ---------------------------------------------------------- unstructure
    def unstructure_class(self, cls: type) -> UnstructureHook:
        """The generated encoder of a model (:mod:`acpkit.codec.encoders`): cattrs' rules,
        a variant's tag written first, every attribute's type checked."""
        if getattr(cls, "__acp_unknown__", None) is not None:

            def unstructure_unknown(o: Any) -> Any:
                return dict(o.raw)

            self._unstructure[cls] = unstructure_unknown
            return unstructure_unknown
        self._generating.add(("u", cls))
        try:
            generated = checked_unstructure(
                cls,
                resolved_fields(cls),
                getattr(cls, "__acp_tag__", None),
                FieldEncoding(
                    self._field_unhook,
                    lambda hook: hook is identity,
                    self._class_unhook,
                    self.unstructure_runtime,
                ),
            )
        finally:
            self._generating.discard(("u", cls))
        self._unstructure[cls] = generated
        return generated

    def _class_unhook(self, cls: type) -> UnstructureHook:
        if ("u", cls) in self._generating:
            table = self._unstructure

            def late(v: Any) -> Any:
                return table[cls](v)

            return late
        return self.conv.get_unstructure_hook(cls)

    def _field_unhook(self, tp: Any) -> UnstructureHook:
        """The unstructure hook of one attribute's type (identity where values are already
        JSON builtins: cattrs then inlines the attribute read)."""
        if tp in (str, int, float, bool, NONE) or tp is Any:
            return identity
        inner_tp = strip_optional(tp)
        if inner_tp is not tp:
            inner = self._field_unhook(inner_tp)
            if inner is identity:
                return identity
            return unstructure_optional(inner)
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return enum_value
        origin = get_origin(tp)
        if origin is dict and get_args(tp)[1] is Any:
            return identity
        if origin is list:
            item = get_args(tp)[0]
            if item in (str, int, float, bool):
                return list
            if is_our_model(item):
                item_fn = self._class_unhook(item)
                return lambda v: [item_fn(x) for x in v]
        if is_our_model(tp):
            return self._class_unhook(tp)
        return self.unstructure_runtime

    def unstructure_runtime(self, v: Any) -> Any:
        """Encode by the value's own type: models through the converter, containers item
        by item, enums to their value, anything else unchanged."""
        cls = type(v)
        fn = self._runtime.get(cls)
        if fn is not None:
            return fn(v)
        if is_model(cls):
            fn = self._runtime[cls] = self.conv.get_unstructure_hook(cls)
            return fn(v)
        if cls is list or cls is tuple:
            return [self.unstructure_runtime(x) for x in v]
        if cls is dict:
            return {k: self.unstructure_runtime(x) for k, x in v.items()}
        if isinstance(v, enum.Enum):
            return v.value
        return v


def get_converter(converter: cattrs.Converter | None = None) -> cattrs.Converter:
    """Install acpkit's hooks on ``converter`` (a new ``cattrs.Converter`` if omitted)
    and return it.

    The hooks cover the classes and enums of :mod:`acpkit.schema`, :mod:`acpkit.unstable`
    and :mod:`acpkit.mcp.schema` and the unions of them; your own hooks on the same
    converter stay in place, and a hook you register for one of our classes wins (cattrs
    uses the newest matching hook), also inside our models and unions, if registered
    before the first structure of a type that contains it (cattrs captures hooks when it
    generates a class's function).
    ``forbid_extra_keys=True`` gives the strict mode's rules; pass
    ``detailed_validation=True`` (cattrs' default) for errors that carry the attribute.
    """
    conv = converter if converter is not None else cattrs.Converter()
    install(conv)
    return conv


def install(conv: cattrs.Converter) -> Hooks:
    hooks = Hooks(conv)
    conv.register_structure_hook_factory(is_our_model, hooks.structure_class)
    conv.register_structure_hook_factory(is_our_enum, hooks.structure_enum)
    # cattrs dispatches str/int subclasses through functools.singledispatch before any
    # predicate: our str/int enums need a hook on their base classes there.
    for base in (OpenStrEnum, OpenIntEnum):
        conv.register_structure_hook(base, hooks.structure_enum_by_type)
    conv.register_structure_hook_factory(is_our_union, hooks.structure_union)
    conv.register_unstructure_hook_factory(is_our_model, hooks.unstructure_class)
    return hooks
