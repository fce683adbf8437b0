"""The one codec: JSON-able builtins <-> the generated models of :mod:`acpkit.schema`,
:mod:`acpkit.unstable` and :mod:`acpkit.mcp.schema` (MCP, loaded only when imported),
built on cattrs.

Contract (others code against it)::

    decode(cls, obj, *, strict=False) -> instance of cls      # raises DecodeError
    encode(value) -> JSON-able builtins                       # None fields omitted
    decode_json(cls, data, *, strict=False), encode_json(value) -> bytes
    loads(data) -> builtins, dumps(obj) -> bytes              # orjson, json fallbacks
    wire_tag(value) -> str | None                             # a variant's wire tag
    converter: cattrs.Converter                               # the lenient converter
    get_converter(converter=None) -> cattrs.Converter         # our hooks on yours

How it is built: :func:`get_converter` registers hook factories on a
:class:`cattrs.Converter`. Each model class gets cattrs' own generated functions,
``make_dict_structure_fn_from_attrs`` / ``make_dict_unstructure_fn_from_attrs``, with one
``cattrs.override`` per attribute: ``rename=`` the camelCase wire key, ``omit_if_default=``
for the fields whose default is ``None`` or ``ABSENT``, and the field's ``struct_hook`` /
``unstruct_hook``. Strict mode is the same hooks on a converter made with
``forbid_extra_keys=True``. ``converter`` and the strict one use ``detailed_validation``,
and the cattrs exception groups (``ClassValidationError`` with
``AttributeValidationNote``) are turned into a :class:`DecodeError` with a JSON path.
cattrs registers the generated source in :mod:`linecache`, so tracebacks inside them
show their lines.

For speed, two things beside cattrs' defaults. Lenient :func:`decode` first runs a
converter without detailed validation and decodes again with ``converter`` only when
that fails (for the error's path). That first converter's class hooks are not cattrs'
generated functions but one generated function per class (``_Hooks._fused``) that reads
each key, checks a JSON primitive inline or calls the attribute's hook (the same hooks as
the other converters), and fills a new instance through the class's slot-compatible twin
(``_twin``); the other converters' cattrs functions call a constructor that stores the
slots directly (``_constructor``: attrs' frozen ``__init__`` goes through
``object.__setattr__``). Measured (benchmarks/bench_codec.py), cattrs' generated function
(a ``res`` dict, then ``cls(..., **res)``) and the slot setters were three quarters of
decode()'s time, and kept the three-block prompt at 1.5x the ``json.loads`` floor;
fused, it is below the floor. Both fast-path pieces are checked against the detailed
converters (tests/test_codec_fast_checks.py). The three converters are made on first
use.

Rules, and the small hooks cattrs cannot express by itself (each is a cattrs hook or an
override's hook, never a step beside the converter):

- camelCase on the wire, ``_meta`` <-> ``meta`` (explicit ``wire`` metadata where the
  name cannot be derived): ``override(rename=...)``. Optional fields that are ``None``
  are omitted on encode (``omit_if_default``); required fields are always written
  (``RequestId`` may be ``null``).
- Null-meaningful fields (``Diff.old_text``, ``SessionInfoUpdate.title`` /
  ``updated_at``, the ``request_id`` scope of elicitations) default to
  :data:`acpkit.schema.ABSENT`: ``ABSENT`` is omitted, ``None`` is written as ``null``.
- JSON types are checked, not coerced (cattrs' default ``str`` hook would turn ``3`` into
  ``"3"``): small per-field hooks for ``str``/``int``/``float``/``bool``/objects. A
  ``null`` optional field decodes to its default (a per-field hook where the default is
  not ``None``).
- Tagged unions (a structure hook factory): one dict lookup on the wire tag; a missing
  tag selects the untagged fallback variant where the schema has one (stdio MCP server,
  agent auth method, titled multi-select items, value-id config value); an unknown tag
  decodes to ``Unknown<Union>(raw=...)`` in lenient mode and is an error in strict mode.
  cattrs' tagged-union strategy needs a tag on every variant and writes it last; ours
  writes it first and keeps unknown variants raw. The tag is one more attribute given to
  cattrs' generators (``_TAG_FIELD``): read from the class and written first on encode;
  in strict mode read from the wire when present and checked, so that
  ``forbid_extra_keys`` knows the key.
- Untagged unions (same factory): classes are chosen by the required keys only one of
  them has (``text``/``blob``, ``result``/``error``); ``list[A] | list[B]`` by the first
  item; ``A | list[A]`` (MCP sampling content) by JSON type, object or array; primitive
  unions by JSON type (bool before int, int before float).
- Lenient mode (default): unknown fields are ignored, unknown enum values are kept
  (``OpenStrEnum``; an enum hook factory), ``x-deserialize-default-on-error`` fields fall
  back to their default when invalid and ``x-deserialize-skip-invalid-items`` lists drop
  invalid items (per-field hooks: cattrs has no per-field "default on error").
  Missing required fields and wrong types elsewhere raise :class:`DecodeError`.
- Strict mode reports unknown fields, unknown tags, unknown values of closed enums,
  wrong types and missing required fields, with a JSON path.

Hooks are generated lazily, on first use of each class, so importing this module is cheap.
orjson (:mod:`acpkit.jsonrpc.jsonbytes`) does bytes <-> builtins.
"""

from __future__ import annotations

import enum
import itertools
import json
import linecache
import operator
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar, Union, get_args, get_origin

import attrs
import cattrs
from cattrs.errors import (
    AttributeValidationNote,
    BaseValidationError,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationNote,
)
from cattrs.fns import identity
from cattrs.gen import (
    make_dict_structure_fn_from_attrs,
    make_dict_unstructure_fn_from_attrs,
    override,
)

from acpkit.jsonrpc.jsonbytes import dumps, loads
from acpkit.schema import ABSENT, AbsentType, OpenIntEnum, OpenStrEnum

__all__ = [
    "DecodeError",
    "converter",
    "decode",
    "decode_json",
    "dumps",
    "encode",
    "encode_json",
    "get_converter",
    "loads",
    "wire_name",
    "wire_tag",
]

T = TypeVar("T")
StructureHook = Callable[[Any, Any], Any]
UnstructureHook = Callable[[Any], Any]

_MAX_SNIPPET = 60
_MISSING: Any = object()
_NONE = type(None)


class DecodeError(ValueError):
    """Input that does not decode to the requested type. ``str()`` is ``"<path>: <message>"``."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message[:300]
        super().__init__(f"{path}: {self.message}")


class _Invalid(Exception):
    """Raised by our hooks; ``path`` holds the wire keys/indexes below the hook, innermost
    first (cattrs' notes add the attribute above it)."""

    def __init__(self, message: str, path: list[str | int] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path: list[str | int] = path if path is not None else []


def _snippet(value: object) -> str:
    """A short, bounded rendering of an offending value."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > _MAX_SNIPPET:
        text = text[:_MAX_SNIPPET] + "..."
    return text


_JSON_TYPE = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
    _NONE: "null",
}


def _type_error(expected: str, value: object) -> _Invalid:
    got = _JSON_TYPE.get(type(value), type(value).__name__)
    return _Invalid(f"expected {expected}, got {got} {_snippet(value)}")


def _render_path(path: list[str | int]) -> str:
    """``$.a.b[0]`` from outermost-first parts."""
    out = "$"
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += "." + (part if len(part) <= _MAX_SNIPPET else part[:_MAX_SNIPPET] + "...")
    return out


# ------------------------------------------------------------------ wire names and tags
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


# ------------------------------------------------------------------ which types are ours
_MODEL_MODULES = frozenset({"acpkit.schema", "acpkit.unstable", "acpkit.mcp.schema"})
"""The generated model modules (ACP stable, ACP unstable, MCP) whose types get our hooks."""


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and attrs.has(tp)


def _is_our_model(tp: Any) -> bool:
    return _is_model(tp) and tp.__module__ in _MODEL_MODULES


def _is_our_enum(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, enum.Enum) and tp.__module__ in _MODEL_MODULES


def _union_args(tp: Any) -> tuple[Any, ...] | None:
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        return get_args(tp)
    return None


def _is_our_union(tp: Any) -> bool:
    args = _union_args(tp)
    return args is not None and any(_is_our_model(a) or _is_our_enum(a) for a in args)


def _hints(cls: type) -> dict[str, Any]:
    module = __import__(cls.__module__, fromlist=["_"])
    return typing.get_type_hints(cls, globalns=vars(module))


def _resolved_fields(cls: type) -> list[attrs.Attribute[Any]]:
    """The attributes of ``cls`` with their string annotations resolved (not mutated)."""
    hints = _hints(cls)
    return [a.evolve(type=hints[a.name]) for a in attrs.fields(cls)]


def _strip_optional(tp: Any) -> Any:
    """``T | None | AbsentType`` -> ``T`` (or the union of what remains)."""
    args = _union_args(tp)
    if args is None:
        return tp
    rest = tuple(a for a in args if a is not _NONE and a is not AbsentType)
    if len(rest) == len(args):
        return tp
    return rest[0] if len(rest) == 1 else Union[rest]


# ------------------------------------------------------------------ primitive hooks
def _s_str(v: Any, _: Any) -> Any:
    if type(v) is not str:
        raise _type_error("string", v)
    return v


def _s_int_strict(v: Any, _: Any) -> Any:
    if type(v) is not int:
        raise _type_error("integer", v)
    return v


def _s_int(v: Any, _: Any) -> Any:
    if type(v) is not int:
        if type(v) is float and v.is_integer():
            return int(v)
        raise _type_error("integer", v)
    return v


def _s_float(v: Any, _: Any) -> Any:
    if type(v) is float or type(v) is int:
        return v
    raise _type_error("number", v)


def _s_bool(v: Any, _: Any) -> Any:
    if type(v) is not bool:
        raise _type_error("boolean", v)
    return v


def _s_any(v: Any, _: Any) -> Any:
    return v


def _s_none(v: Any, _: Any) -> Any:
    if v is not None:
        raise _type_error("null", v)
    return None


def _s_object(v: Any, _: Any) -> Any:
    if type(v) is not dict:
        raise _type_error("object", v)
    return v


_NONES = itertools.repeat(None)
"""The second argument of item hooks, for ``map`` (no Python frame per item)."""


def _optional(inner: StructureHook) -> StructureHook:
    def structure_optional(v: Any, t: Any) -> Any:
        return None if v is None else inner(v, t)

    structure_optional.acp_optional_of = inner  # type: ignore[attr-defined]
    return structure_optional


# ------------------------------------------------------------------ the hooks of one converter
class _Hooks:
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
            return _s_str
        if tp is int:
            return _s_int_strict if self.strict else _s_int
        if tp is float:
            return _s_float
        if tp is bool:
            return _s_bool
        if tp is Any or tp is object:
            return _s_any
        if tp is _NONE:
            return _s_none
        origin = get_origin(tp)
        if origin is list:
            return self._list(self.hook(get_args(tp)[0]), skip_invalid and not self.strict)
        if origin is dict:
            value_type = get_args(tp)[1]
            return _s_object if value_type is Any else self._dict(self.hook(value_type))
        if _union_args(tp) is not None:
            if skip_invalid:
                return _optional(self.hook(_strip_optional(tp), skip_invalid=True))
            if _is_our_union(tp):
                return self.conv.get_structure_hook(tp)
            return self._union(get_args(tp))
        if _is_our_model(tp):
            return self._model(tp)
        if _is_our_enum(tp):
            found = self.conv.get_structure_hook(tp)
            return self.enum_hook(tp) if found == self.structure_enum_by_type else found
        if _is_model(tp) or (isinstance(tp, type) and issubclass(tp, enum.Enum)):
            return self.conv.get_structure_hook(tp)
        raise TypeError(f"acpkit.codec cannot decode {tp!r}")

    def _class_hook(self, cls: type) -> StructureHook:
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
        inner = self._class_hook(cls)

        def structure_model(v: Any, t: Any) -> Any:
            if type(v) is not dict:
                raise _type_error("object", v)
            return inner(v, cls)

        structure_model.acp_model_hook = inner  # type: ignore[attr-defined]
        return structure_model

    @staticmethod
    def _list(item: StructureHook, skip_invalid: bool) -> StructureHook:
        if item is _s_str and not skip_invalid:

            def structure_str_list(v: Any, t: Any) -> Any:
                if type(v) is not list:
                    raise _type_error("array", v)
                for i, x in enumerate(v):
                    if type(x) is not str:
                        err = _type_error("string", x)
                        err.path.append(i)
                        raise err
                return list(v)

            return structure_str_list

        by_tag = getattr(item, "acp_by_tag", None)
        key = getattr(item, "acp_tag_key", None)

        def structure_list(v: Any, t: Any) -> Any:
            if type(v) is not list:
                raise _type_error("array", v)
            try:
                if by_tag is not None:  # a tagged union's cached dispatch, inlined
                    return [by_tag[x[key]](x, None) for x in v]
                return list(map(item, v, _NONES))
            except Exception:
                pass  # redo item by item for the path, or to skip invalid items
            out = []
            for i, x in enumerate(v):
                try:
                    out.append(item(x, None))
                except Exception as e:
                    if skip_invalid:
                        continue
                    raise _at(e, i) from None
            return out

        return structure_list

    @staticmethod
    def _dict(value: StructureHook) -> StructureHook:
        def structure_dict(v: Any, t: Any) -> Any:
            if type(v) is not dict:
                raise _type_error("object", v)
            out = {}
            for k, x in v.items():
                try:
                    out[k] = value(x, None)
                except Exception as e:
                    raise _at(e, k) from None
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
                raise _type_error(expected, v)
            if not keep_unknown:
                raise _Invalid(f"unknown {name} value {_snippet(v)}")
            return cls(v)

        return structure_enum

    def structure_union(self, tp: Any) -> StructureHook:
        """Unions with one of our models or enums: see the module docstring."""
        return self._union(get_args(tp))

    def structure_class(self, cls: type) -> StructureHook:
        """cattrs' generated function for a model, with our overrides per attribute."""
        unknown_key = getattr(cls, "__acp_unknown__", None)
        if unknown_key is not None:

            def structure_unknown(v: Any, t: Any) -> Any:
                if type(v) is not dict:
                    raise _type_error("object", v)
                return cls(raw=v)

            self._structure[cls] = structure_unknown
            return structure_unknown
        self._generating.add(("s", cls))
        try:
            fields = _resolved_fields(cls)
            if not self.strict and not self.conv.detailed_validation:
                fused = self._fused(cls, fields)
                if fused is not None:
                    self._structure[cls] = fused
                    return fused
            new = _constructor(cls)
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
                fields.append(_TAG_FIELD)
                overrides[_TAG] = override(rename=tag[0], struct_hook=_tag_check(tag[1]))
            generated = make_dict_structure_fn_from_attrs(fields, new, self.conv, **overrides)
        finally:
            self._generating.discard(("s", cls))
        fn: StructureHook = generated
        if tag is not None and self.strict and new is cls:
            fn = _strict_tag_check(generated, tag[0], tag[1])
        self._structure[cls] = fn
        return fn

    def _fused(self, cls: type, fields: list[attrs.Attribute[Any]]) -> StructureHook | None:
        """The fast converter's class hook: one generated function that reads each key,
        checks or converts its value and stores it in the instance's slot (made as the
        class's :func:`_twin` where it has one), or None for a class that needs attrs'
        own ``__init__``."""
        setters = [_slot_setter(cls, a.name) for a in fields]
        if not _slot_constructible(cls, setters):
            return None
        twin = _twin(cls)
        env: dict[str, Any] = {
            "new": object.__new__,
            "cls": cls,
            "twin": twin,
            "error": _type_error,
            "MISSING": _MISSING,
        }
        made = "twin" if twin is not None else "cls"
        lines = [f"def structure_{cls.__name__}(o, _=None):", f"    x = new({made})"]
        for i, a in enumerate(fields):
            lines.extend(self._fused_lines(i, a, env))
            if twin is not None:
                lines.append(f"    x.{a.name} = v{i}")
            else:
                env[f"S{i}"] = setters[i]
                lines.append(f"    S{i}(x, v{i})")
        if twin is not None:
            lines.append("    x.__class__ = cls")
        lines.append("    return x")
        source = "\n".join(lines) + "\n"
        filename = f"<acpkit.codec fast hook {cls.__module__}.{cls.__qualname__}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), env)
        fn: StructureHook = env[f"structure_{cls.__name__}"]
        return fn

    def _fused_lines(self, i: int, a: attrs.Attribute[Any], env: dict[str, Any]) -> list[str]:
        """Lines setting ``v{i}`` to attribute ``a``'s value from the object ``o``."""
        key = wire_name(a)
        v = f"v{i}"
        check = self._inline_check(a)
        default = a.default
        required = default is attrs.NOTHING
        if check is None:
            hook = self._field_hook(a)
            env[f"H{i}"] = hook
            env[f"T{i}"] = a.type
            if required:
                return [f"    {v} = o[{key!r}]", *_inline_call(i, hook, env)]
            inner = getattr(hook, "acp_optional_of", None)
            if default is None and inner is not None:  # null or absent: None
                env[f"H{i}"] = inner
                call = _inline_call(i, inner, env, indent="        ")
                return [f"    {v} = o.get({key!r})", f"    if {v} is not None:", *call]
            inner = getattr(hook, "acp_or_none_of", None)
            if default is None and inner is not None:  # null, absent or invalid: None
                env[f"H{i}"] = inner
                call = _inline_call(i, inner, env, indent="            ")
                return [
                    f"    {v} = o.get({key!r})",
                    f"    if {v} is not None:",
                    "        try:",
                    *call,
                    "        except Exception:",
                    f"            {v} = None",
                ]
            if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                env[f"F{i}"] = default.factory  # type: ignore[union-attr]
                missing = f"F{i}()"
            else:
                env[f"D{i}"] = default
                missing = f"D{i}"
            return [
                f"    {v} = o.get({key!r}, MISSING)",
                f"    {v} = {missing} if {v} is MISSING else H{i}({v}, T{i})",
            ]
        kind, types, expected = check
        lines = []
        if required:
            lines.append(f"    {v} = o[{key!r}]")
            prefix = "    if "
        elif default is None:
            lines.append(f"    {v} = o.get({key!r})")
            prefix = "    if "
        else:  # ABSENT: the default when the key is absent, not a value accepted on input
            env[f"D{i}"] = default
            lines.append(f"    {v} = o.get({key!r}, MISSING)")
            lines.append(f"    if {v} is MISSING:\n        {v} = D{i}")
            prefix = "    elif "
        if kind == "any":
            return lines
        env[f"J{i}"] = types
        test = (
            f"type({v}) is not {types[0].__name__}" if len(types) == 1 else f"type({v}) not in J{i}"
        )
        if kind != "required":  # None passes (optional) or is the default (or_default)
            test = f"{v} is not None and {test}"
        action = f"{v} = None" if kind == "or_default" else f"raise error({expected!r}, {v})"
        lines.append(f"{prefix}{test}:\n        {action}")
        return lines

    def _field_override(self, a: attrs.Attribute[Any]) -> Any:
        """``override(rename=…, struct_hook=…)`` for one attribute."""
        return override(rename=wire_name(a), struct_hook=self._field_hook(a))

    def _inline_check(self, a: attrs.Attribute[Any]) -> _Check | None:
        """The check of a JSON-primitive attribute that the fast converter's class hook
        makes inline (:meth:`_fused_lines`): the same acceptance as the attribute's
        hook from :meth:`_field_hook`, or None where that hook is not a primitive one."""
        meta = a.metadata
        if meta.get("on_null") or meta.get("skip_invalid"):
            return None
        on_error = bool(meta.get("on_error"))
        if a.default is attrs.NOTHING:
            inner = self.hook(a.type)
            kind = "required"
            if on_error:
                return None
        elif a.default is None or a.default is ABSENT:
            inner = self.hook(_strip_optional(a.type))
            kind = "or_default" if on_error else "optional"
        else:
            return None
        if inner is _s_any:
            return ("any", (), "")
        types = _PRIMITIVE_TYPES.get(inner)
        if types is None:
            return None
        return (kind, types, _PRIMITIVE_NAMES[inner])

    def _field_hook(self, a: attrs.Attribute[Any]) -> StructureHook:
        tp = a.type
        meta = a.metadata
        on_error = bool(meta.get("on_error")) and not self.strict
        skip = bool(meta.get("skip_invalid"))
        is_list = get_origin(_strip_optional(tp)) is list
        if a.default is attrs.NOTHING:
            inner = self.hook(tp, skip_invalid=skip)
            if meta.get("on_null"):
                inner = _null_to(inner, list if is_list else dict)
            if on_error and is_list:
                inner = _default_on_error(inner, list)
            return inner
        inner = self.hook(_strip_optional(tp), skip_invalid=skip)
        default = a.default
        made: Callable[[], Any]
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            made = default.factory  # type: ignore[union-attr]
        elif default is None or default is ABSENT:
            made = _none
        else:
            made = _constant(default)
        if on_error:
            return _optional_or_default(inner, made)
        if made is _none:
            return _OPTIONAL_PRIMITIVES.get(inner) or _optional(inner)
        return _null_to(inner, made)

    # ---------------------------------------------------------- unions
    def _union(self, args: tuple[Any, ...]) -> StructureHook:
        non_none = tuple(a for a in args if a is not _NONE and a is not AbsentType)
        if len(non_none) < len(args):
            return _optional(self.hook(Union[non_none] if len(non_none) > 1 else non_none[0]))
        lists = [a for a in non_none if get_origin(a) is list]
        if (
            len(lists) == 1
            and len(non_none) > 1
            and all(_is_model(a) for a in non_none if a != lists[0])
        ):
            return self._one_or_many(non_none, lists[0])
        if any(
            getattr(a, "__acp_tag__", None) is not None or hasattr(a, "__acp_unknown__")
            for a in non_none
        ):
            return self._tagged(non_none)
        if all(_is_model(a) for a in non_none):
            return self._untagged_classes(list(non_none))
        if all(get_origin(a) is list and _is_model(get_args(a)[0]) for a in non_none):
            return self._untagged_lists(list(non_none))
        return self._primitives(non_none)

    def _tagged(self, args: tuple[Any, ...]) -> StructureHook:
        key = ""
        table: dict[str, type] = {}
        fallback: type | None = None
        unknown: type | None = None
        for cls in args:
            tag = getattr(cls, "__acp_tag__", None)
            if tag is not None:
                key = tag[0]
                table[tag[1]] = cls
            elif getattr(cls, "__acp_unknown__", None) is not None:
                unknown = cls
                key = key or cls.__acp_unknown__
            elif _is_model(cls):
                fallback = cls
        hooks: dict[str, StructureHook] = {}
        fallback_hook: list[StructureHook] = []
        names = "|".join(sorted(table))
        strict = self.strict
        class_hook = self._class_hook

        def structure_tagged(v: Any, t: Any) -> Any:
            try:
                fn = hooks[v[key]]
            except (KeyError, TypeError):
                pass  # not an object, no tag, an unhashable tag, or a tag met for the first time
            else:
                return fn(v, None)
            if type(v) is not dict:
                raise _type_error("object", v)
            tag = v.get(key, _MISSING)
            if type(tag) is str and tag in table:
                fn = hooks[tag] = class_hook(table[tag])
                return fn(v, None)
            if tag is _MISSING:
                if fallback is None:
                    raise _Invalid(f"missing tag (one of {names})"[:200], [key])
                if not fallback_hook:
                    fallback_hook.append(class_hook(fallback))
                return fallback_hook[0](v, None)
            if type(tag) is not str:
                err = _type_error("string", tag)
                err.path.append(key)
                raise err
            if strict or unknown is None:
                raise _Invalid(f"unknown tag {_snippet(tag)} (known: {names})"[:200], [key])
            return unknown(raw=v)

        structure_tagged.acp_tag_key = key  # type: ignore[attr-defined]
        structure_tagged.acp_by_tag = hooks  # type: ignore[attr-defined]
        return structure_tagged

    def _untagged_classes(self, classes: list[type]) -> StructureHook:
        pick = _picker(classes)
        expected = " or ".join(c.__name__ for c in classes)
        class_hook = self._class_hook
        hooks: dict[type, StructureHook] = {}
        firsts: list[tuple[str, type]] | None = getattr(pick, "acp_keys", None)
        if firsts is not None:  # one key tells each class (text / blob): no pick() call

            def structure_untagged_by_key(v: Any, t: Any) -> Any:
                if type(v) is not dict:
                    raise _type_error("object", v)
                for key, cls in firsts:
                    if key in v:
                        fn = hooks.get(cls)
                        if fn is None:
                            fn = hooks[cls] = class_hook(cls)
                        return fn(v, cls)
                raise _Invalid(f"object matches none of {expected}"[:200])

            return structure_untagged_by_key

        def structure_untagged(v: Any, t: Any) -> Any:
            if type(v) is not dict:
                raise _type_error("object", v)
            cls = pick(v)
            if cls is None:
                raise _Invalid(f"object matches none of {expected}"[:200])
            fn = hooks.get(cls)
            if fn is None:
                fn = hooks[cls] = class_hook(cls)
            return fn(v, cls)

        return structure_untagged

    def _untagged_lists(self, list_types: list[Any]) -> StructureHook:
        item_types = [get_args(t)[0] for t in list_types]
        pick = _picker(item_types)
        hooks = {cls: self._list(self.hook(cls), False) for cls in item_types}
        names = " or ".join(c.__name__ for c in item_types)

        def structure_list_union(v: Any, t: Any) -> Any:
            if type(v) is not list:
                raise _type_error("array", v)
            if not v:
                return []
            first = v[0]
            cls = pick(first) if type(first) is dict else None
            if cls is None:
                raise _Invalid("item matches none of " + names, [0])
            return hooks[cls](v, None)

        return structure_list_union

    def _primitives(self, args: tuple[Any, ...]) -> StructureHook:
        by_json: dict[type, StructureHook] = {}
        for arg in args:
            if arg is bool:
                by_json[bool] = _s_bool
            elif arg is int:
                by_json[int] = self.hook(int)
            elif arg is float:
                by_json.setdefault(int, _s_float)
                by_json[float] = _s_float
            elif arg is str:
                by_json[str] = _s_str
            elif get_origin(arg) is list:
                by_json[list] = self.hook(arg)
            elif get_origin(arg) is dict:
                by_json[dict] = self.hook(arg)
            else:
                raise TypeError(f"unsupported union member {arg!r}")
        expected = " or ".join(sorted({_JSON_TYPE[t] for t in by_json}))

        def structure_by_json_type(v: Any, t: Any) -> Any:
            fn = by_json.get(type(v))
            if fn is None:
                raise _type_error(expected, v)
            return fn(v, None)

        return structure_by_json_type

    def _one_or_many(self, args: tuple[Any, ...], list_type: Any) -> StructureHook:
        """``A | B | list[A | B]`` (MCP sampling content): an object is one, an array many."""
        singles = tuple(a for a in args if a != list_type)
        one = self.hook(singles[0]) if len(singles) == 1 else self._union(singles)
        many = self.hook(list_type)

        def structure_one_or_many(v: Any, t: Any) -> Any:
            if type(v) is list:
                return many(v, None)
            if type(v) is not dict:
                raise _type_error("object or array", v)
            return one(v, None)

        return structure_one_or_many

    # ---------------------------------------------------------- unstructure
    def unstructure_class(self, cls: type) -> UnstructureHook:
        """cattrs' generated function for a model; a variant's tag is written first."""
        if getattr(cls, "__acp_unknown__", None) is not None:

            def unstructure_unknown(o: Any) -> Any:
                return dict(o.raw)

            self._unstructure[cls] = unstructure_unknown
            return unstructure_unknown
        self._generating.add(("u", cls))
        try:
            fields = _resolved_fields(cls)
            overrides: dict[str, Any] = {
                a.name: override(
                    rename=wire_name(a),
                    omit_if_default=a.default is None or a.default is ABSENT,
                    unstruct_hook=self._field_unhook(a.type),
                )
                for a in fields
            }
            tag = getattr(cls, "__acp_tag__", None)
            if tag is not None:
                fields.insert(0, _TAG_FIELD)
                overrides[_TAG] = override(rename=tag[0], unstruct_hook=_tag_value)
            generated: UnstructureHook = make_dict_unstructure_fn_from_attrs(
                fields, cls, self.conv, **overrides
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
        if tp in (str, int, float, bool, _NONE) or tp is Any:
            return identity
        inner_tp = _strip_optional(tp)
        if inner_tp is not tp:
            inner = self._field_unhook(inner_tp)
            if inner is identity:
                return identity
            return _unstructure_optional(inner)
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return _enum_value
        origin = get_origin(tp)
        if origin is dict and get_args(tp)[1] is Any:
            return identity
        if origin is list:
            item = get_args(tp)[0]
            if item in (str, int, float, bool):
                return list
            if _is_our_model(item):
                item_fn = self._class_unhook(item)
                return lambda v: [item_fn(x) for x in v]
        if _is_our_model(tp):
            return self._class_unhook(tp)
        return self.unstructure_runtime

    def unstructure_runtime(self, v: Any) -> Any:
        """Encode by the value's own type: models through the converter, containers item
        by item, enums to their value, anything else unchanged."""
        cls = type(v)
        fn = self._runtime.get(cls)
        if fn is not None:
            return fn(v)
        if _is_model(cls):
            fn = self._runtime[cls] = self.conv.get_unstructure_hook(cls)
            return fn(v)
        if cls is list or cls is tuple:
            return [self.unstructure_runtime(x) for x in v]
        if cls is dict:
            return {k: self.unstructure_runtime(x) for k, x in v.items()}
        if isinstance(v, enum.Enum):
            return v.value
        return v


def _slot_setter(cls: type, name: str) -> Any:
    """The ``__set__`` of a slot descriptor (bypasses frozen ``__setattr__``), or None."""
    for klass in cls.__mro__:
        desc = klass.__dict__.get(name)
        if desc is not None:
            return desc.__set__ if type(desc).__name__ == "member_descriptor" else None
    return None


def _inline_call(
    i: int, hook: StructureHook, env: dict[str, Any], indent: str = "    "
) -> list[str]:
    """Lines of a fast hook (:meth:`_Hooks._fused`) passing ``v{i}`` through ``H{i}``
    (``hook``), with the hook's first step inlined where it is a model's object check or
    a tagged union's cached dispatch (the hook itself handles everything else)."""
    v = f"v{i}"
    model_hook = getattr(hook, "acp_model_hook", None)
    if model_hook is not None:
        env[f"M{i}"] = model_hook
        return [
            f"{indent}if type({v}) is not dict:",
            f"{indent}    raise error('object', {v})",
            f"{indent}{v} = M{i}({v}, T{i})",
        ]
    by_tag = getattr(hook, "acp_by_tag", None)
    if by_tag is not None:
        env[f"U{i}"] = by_tag
        return [
            f"{indent}try:",
            f"{indent}    f = U{i}[{v}[{hook.acp_tag_key!r}]]",  # type: ignore[attr-defined]
            f"{indent}except (KeyError, TypeError):",
            f"{indent}    {v} = H{i}({v}, T{i})",
            f"{indent}else:",
            f"{indent}    {v} = f({v}, None)",
        ]
    return [f"{indent}{v} = H{i}({v}, T{i})"]


_TWINS: dict[type, type | None] = {}


def _twin(cls: type) -> type | None:
    """A plain class with the same slots as the frozen model ``cls``, or None.

    The fast hooks fill a new instance of the twin with ordinary attribute stores, then
    give it its real class (``x.__class__ = cls``, allowed between classes of the same
    slot layout). Measured on an 8-attribute model: three times faster than calling each
    slot descriptor's ``__set__`` (a frozen class refuses attribute stores), which was
    most of decode()'s time. It needs the model's slots to be added by one class on top
    of ``object`` and no ``__weakref__`` slot (CPython compares the layouts by the slots
    added; the generated models have ``weakref_slot=False`` for this).
    """
    if cls in _TWINS:
        return _TWINS[cls]
    found: type | None = None
    adders = [k for k in cls.__mro__[:-1] if k.__dict__.get("__slots__")]
    if len(adders) == 1 and adders[0].__bases__ == (object,):
        slots = adders[0].__dict__["__slots__"]
        if "__weakref__" not in slots and "__dict__" not in slots:
            twin = type(f"{cls.__name__}Twin", (object,), {"__slots__": slots})
            probe: Any = object.__new__(twin)
            try:
                probe.__class__ = cls
            except TypeError:  # a layout CPython does not take as the same
                pass
            else:
                found = twin
    _TWINS[cls] = found
    return found


def _slot_constructible(cls: type, setters: list[Any]) -> bool:
    """Whether an instance of ``cls`` may be made by setting its slots directly: every
    attribute a slot, set by ``__init__`` as given (no converter, validator, pre or post
    init)."""
    return (
        all(setters)
        and all(a.init and a.validator is None and a.converter is None for a in attrs.fields(cls))
        and not hasattr(cls, "__attrs_post_init__")
        and not hasattr(cls, "__attrs_pre_init__")
    )


_CONSTRUCTORS: dict[type, Callable[..., Any]] = {}


def _constructor(cls: type) -> Any:
    """What cattrs' generated function calls to make an instance of ``cls``.

    attrs' ``__init__`` of a frozen class sets each attribute through
    ``object.__setattr__``; this constructor, with the same parameter names (the
    required ones also positional), stores the slots directly (made once per class,
    its source in :mod:`linecache`). It carries ``cls``'s names, so cattrs names the
    generated function and its errors after the class, and ``__wrapped__`` is ``cls``.
    A class without slots gets its own ``__init__``.
    """
    found = _CONSTRUCTORS.get(cls)
    if found is not None:
        return found
    fields = attrs.fields(cls)
    setters = [_slot_setter(cls, a.name) for a in fields]
    if not _slot_constructible(cls, setters):
        _CONSTRUCTORS[cls] = cls
        return cls
    env: dict[str, Any] = {"new": object.__new__, "cls": cls}
    required = []
    params = []
    body = []
    for i, a in enumerate(fields):
        env[f"S{i}"] = setters[i]
        if a.default is attrs.NOTHING:
            required.append(a.alias)
        elif isinstance(a.default, attrs.Factory):  # type: ignore[arg-type]
            env[f"F{i}"] = a.default.factory
            params.append(f"{a.alias}=MISSING")
            body.append(f"    if {a.alias} is MISSING:\n        {a.alias} = F{i}()")
            env["MISSING"] = _MISSING
        else:
            env[f"D{i}"] = a.default
            params.append(f"{a.alias}=D{i}")
        body.append(f"    S{i}(o, {a.alias})")
    if getattr(cls, "__acp_tag__", None) is not None:
        params.append(f"{_TAG_FIELD.alias}=None")  # strict mode's checked tag, not stored
    # Required attributes positional-or-keyword (cattrs passes them positionally when
    # they are not kw_only, see structure_class), the others keyword-only.
    signature = ", ".join([*required, *(["*", *params] if params else [])])
    lines = [f"def new_{cls.__name__}({signature}):", "    o = new(cls)", *body]
    lines.append("    return o")
    source = "\n".join(lines) + "\n"
    filename = f"<acpkit.codec constructor {cls.__module__}.{cls.__qualname__}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), env)
    fn = env[f"new_{cls.__name__}"]
    fn.__qualname__ = cls.__qualname__
    fn.__module__ = cls.__module__
    fn.__name__ = cls.__name__
    fn.__wrapped__ = cls
    _CONSTRUCTORS[cls] = fn
    return fn


def _none() -> Any:
    return None


def _constant(value: Any) -> Callable[[], Any]:
    def default() -> Any:
        return value

    return default


def _opt_str(v: Any, _: Any) -> Any:
    if v is None or type(v) is str:
        return v
    raise _type_error("string", v)


def _opt_bool(v: Any, _: Any) -> Any:
    if v is None or type(v) is bool:
        return v
    raise _type_error("boolean", v)


def _opt_float(v: Any, _: Any) -> Any:
    if v is None or type(v) is float or type(v) is int:
        return v
    raise _type_error("number", v)


def _opt_object(v: Any, _: Any) -> Any:
    if v is None or type(v) is dict:
        return v
    raise _type_error("object", v)


_OPTIONAL_PRIMITIVES: dict[StructureHook, StructureHook] = {
    _s_str: _opt_str,
    _s_bool: _opt_bool,
    _s_float: _opt_float,
    _s_object: _opt_object,
    _s_any: _s_any,
}
"""``T | None`` hooks of one call for the JSON primitives."""


_PRIMITIVE_TYPES: dict[StructureHook, tuple[type, ...]] = {
    _s_str: (str,),
    _s_bool: (bool,),
    _s_float: (float, int),
    _s_object: (dict,),
}
"""The Python types each primitive hook accepts as they are."""

_PRIMITIVE_NAMES: dict[StructureHook, str] = {
    _s_str: "string",
    _s_bool: "boolean",
    _s_float: "number",
    _s_object: "object",
}

_Check = tuple[str, tuple[type, ...], str]
"""An attribute's check made inline by a fast class hook: ``(kind, accepted types, JSON type
name)``; kind is ``required``, ``optional`` (``null`` accepted), ``or_default`` (an
invalid value becomes ``None``: x-deserialize-default-on-error) or ``any``."""


def _optional_or_default(inner: StructureHook, made: Callable[[], Any]) -> StructureHook:
    """x-deserialize-default-on-error, lenient mode: ``null`` or an invalid value becomes
    the default."""

    json_types = _PRIMITIVE_TYPES.get(inner)
    if json_types is not None:  # a JSON primitive: one type test, no inner call

        def primitive_or_default(v: Any, t: Any) -> Any:
            return v if type(v) in json_types else made()

        return primitive_or_default

    def structure_or_default(v: Any, t: Any) -> Any:
        if v is None:
            return made()
        try:
            return inner(v, t)
        except Exception:
            return made()

    if made is _none:
        structure_or_default.acp_or_none_of = inner  # type: ignore[attr-defined]
    return structure_or_default


def _null_to(inner: StructureHook, made: Callable[[], Any]) -> StructureHook:
    def structure_null_to_default(v: Any, t: Any) -> Any:
        return made() if v is None else inner(v, t)

    return structure_null_to_default


def _default_on_error(inner: StructureHook, made: Callable[[], Any]) -> StructureHook:
    """x-deserialize-default-on-error, lenient mode: an invalid value becomes the default."""

    def structure_or_default(v: Any, t: Any) -> Any:
        try:
            return inner(v, t)
        except Exception:
            return made()

    return structure_or_default


def _strict_tag_check(generated: StructureHook, key: str, tag: str) -> StructureHook:
    """Strict mode, a variant class: its tag, when present, must be its own; it is then
    dropped so that ``forbid_extra_keys`` (which knows only the attributes) accepts it."""

    def structure_variant_strict(o: Any, t: Any) -> Any:
        if type(o) is not dict:
            raise _type_error("object", o)
        found = o.get(key, _MISSING)
        if found is not _MISSING:
            if found != tag:
                raise _Invalid(f"expected tag {tag}", [key])
            o = {k: v for k, v in o.items() if k != key}
        return generated(o, t)

    return structure_variant_strict


_TAG = "__acp_tag__"
_TAG_FIELD: attrs.Attribute[Any] = attrs.fields(
    attrs.make_class("_WireTag", {_TAG: attrs.field(default=None, type=str)})
)[0]
"""A variant's tag as one more attribute for cattrs' generators: read from the class
(``instance.__acp_tag__``), written first under the tag key; in strict mode, read from
the wire when present and checked, so that ``forbid_extra_keys`` knows the key."""

_tag_value = operator.itemgetter(1)


def _tag_check(tag: str) -> StructureHook:
    def structure_tag(v: Any, t: Any) -> Any:
        if v != tag:
            raise _Invalid(f"expected tag {tag}")
        return v

    return structure_tag


def _unstructure_optional(inner: UnstructureHook) -> UnstructureHook:
    def unstructure_optional(v: Any) -> Any:
        return None if v is None else inner(v)

    return unstructure_optional


def _enum_value(v: Any) -> Any:
    """The wire value of an enum field (plain ``str``/``int``, never the member)."""
    return v.value if isinstance(v, enum.Enum) else v


def _required_keys(cls: type) -> set[str]:
    return {wire_name(f) for f in attrs.fields(cls) if f.default is attrs.NOTHING}


def _picker(classes: list[type]) -> Callable[[dict[str, Any]], type | None]:
    """Choose among untagged classes by the required keys only one of them has."""
    required = {cls: _required_keys(cls) for cls in classes}
    marks: list[tuple[frozenset[str], type]] = []
    for cls in classes:
        others: set[str] = set()
        for other in classes:
            if other is not cls:
                others |= required[other]
        marks.append((frozenset(required[cls] - others), cls))

    if all(len(keys) == 1 for keys, _ in marks):  # one key each (text / blob): `in`
        firsts = [(next(iter(keys)), cls) for keys, cls in marks]

        def pick_by_key(v: dict[str, Any]) -> type | None:
            for key, cls in firsts:
                if key in v:
                    return cls
            return None

        pick_by_key.acp_keys = firsts  # type: ignore[attr-defined]
        return pick_by_key

    def pick(v: dict[str, Any]) -> type | None:
        for keys, cls in marks:
            if keys and keys <= v.keys():
                return cls
        return None

    return pick


# ------------------------------------------------------------------ errors -> DecodeError
def _at(error: Exception, part: str | int) -> Exception:
    """``error`` one level down: under list index / dict key ``part``."""
    if isinstance(error, _Invalid):
        error.path.append(part)
        return error
    path, message = _locate(error)
    return _Invalid(message, [*reversed(path), part])


def _wire_key(cls: Any, attribute: str) -> str:
    cls = getattr(cls, "__wrapped__", cls)
    if attribute == _TAG:
        return str(cls.__acp_tag__[0])
    for a in attrs.fields(cls):
        if a.name == attribute:
            return wire_name(a)
    return attribute


def _locate(error: BaseException) -> tuple[list[str | int], str]:
    """The JSON path (outermost first) and message of the first error cattrs collected.

    An unknown field comes first (today's order), then the attributes in class order.
    """
    path: list[str | int] = []
    while True:
        if isinstance(error, ClassValidationError):
            group = list(error.exceptions)
            extra = [e for e in group if isinstance(e, ForbiddenExtraKeysError)]
            inner = extra[0] if extra else group[0]
            for note in getattr(inner, "__notes__", ()):
                if isinstance(note, AttributeValidationNote):
                    path.append(_wire_key(error.cl, note.name))
                    break
            if isinstance(inner, KeyError) and not isinstance(inner, BaseValidationError):
                return path, "missing required field"
            error = inner
            continue
        if isinstance(error, BaseValidationError):  # an iterable's group
            inner = error.exceptions[0]
            for note in getattr(inner, "__notes__", ()):
                if isinstance(note, IterableValidationNote):
                    path.append(note.index)
                    break
            error = inner
            continue
        if isinstance(error, ForbiddenExtraKeysError):
            return [*path, sorted(error.extra_fields)[0]], "unknown field"
        if isinstance(error, _Invalid):
            return [*path, *reversed(error.path)], error.message
        return path, f"{type(error).__name__}: {error}"[:200]


# ------------------------------------------------------------------ converters
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
    _install(conv)
    return conv


def _install(conv: cattrs.Converter) -> _Hooks:
    hooks = _Hooks(conv)
    conv.register_structure_hook_factory(_is_our_model, hooks.structure_class)
    conv.register_structure_hook_factory(_is_our_enum, hooks.structure_enum)
    # cattrs dispatches str/int subclasses through functools.singledispatch before any
    # predicate: our str/int enums need a hook on their base classes there.
    for base in (OpenStrEnum, OpenIntEnum):
        conv.register_structure_hook(base, hooks.structure_enum_by_type)
    conv.register_structure_hook_factory(_is_our_union, hooks.structure_union)
    conv.register_unstructure_hook_factory(_is_our_model, hooks.unstructure_class)
    return hooks


_CONVERTER_OPTIONS: dict[str, tuple[bool, bool]] = {
    "lenient": (False, True),
    "strict": (True, True),
    "fast": (False, False),
}
"""The module's three converters (``forbid_extra_keys``, ``detailed_validation``), made
on first use (a ``cattrs.Converter`` costs
milliseconds to build: ``import acpkit.codec`` builds none).

``lenient`` is :data:`converter`; ``strict`` serves ``decode(..., strict=True)``;
``fast`` is decode()'s first try: the same hooks without detailed validation (cattrs'
generated functions then pass required fields straight to the constructor, with no
per-field ``try`` and no error list). Input it rejects is decoded again by ``lenient``
for the JSON path, so its own errors never reach the user."""

_HOOKS: dict[str, _Hooks] = {}


def _hooks(name: str) -> _Hooks:
    found = _HOOKS.get(name)
    if found is None:
        forbid, detailed = _CONVERTER_OPTIONS[name]
        conv = cattrs.Converter(forbid_extra_keys=forbid, detailed_validation=detailed)
        found = _HOOKS[name] = _install(conv)
    return found


converter: cattrs.Converter
"""The lenient converter: ``converter.structure(obj, cls)`` == ``decode(cls, obj)``, with
cattrs' detailed validation (its errors name the attribute). Made on first access."""


def __getattr__(name: str) -> Any:
    if name == "converter":
        return _hooks("lenient").conv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_LENIENT: dict[Any, StructureHook] = {}
_STRICT: dict[Any, StructureHook] = {}
_FAST: dict[Any, StructureHook] = {}
_ENCODERS: dict[type, UnstructureHook] = {}


# ------------------------------------------------------------------ public API
@typing.overload
def decode(cls: type[T], obj: object, *, strict: bool = False) -> T: ...
@typing.overload
def decode(cls: Any, obj: object, *, strict: bool = False) -> Any: ...
def decode(cls: Any, obj: object, *, strict: bool = False) -> Any:
    """Decode JSON-able builtins into ``cls`` (a model class or a union alias).

    Raises :class:`DecodeError` with a JSON path such as ``$.update.content.type``.
    """
    if not strict:
        fn = _FAST.get(cls)
        if fn is None:
            fn = _FAST[cls] = _fast_entry(cls)
        if type(obj) is dict or cls not in _OBJECT_ONLY:
            try:
                return fn(obj, cls)
            except Exception:
                pass  # decoded again below, for the error's path
    return _decode_detailed(cls, obj, strict)


_OBJECT_ONLY: set[Any] = set()
"""Model classes whose decode() hook is the class hook itself: decode() checks the input
is an object before calling it."""


def _fast_entry(cls: Any) -> StructureHook:
    """decode()'s hook for ``cls`` on the fast converter (see :data:`_OBJECT_ONLY`)."""
    if _is_our_model(cls) and getattr(cls, "__acp_unknown__", None) is None:
        _OBJECT_ONLY.add(cls)
        return _hooks("fast").conv.get_structure_hook(cls)
    return _hooks("fast").hook(cls)


def _decode_detailed(cls: Any, obj: object, strict: bool) -> Any:
    cache = _STRICT if strict else _LENIENT
    fn = cache.get(cls)
    if fn is None:
        fn = cache[cls] = _hooks("strict" if strict else "lenient").hook(cls)
    try:
        return fn(obj, cls)
    except RecursionError:
        raise DecodeError("$", "input nested too deeply") from None
    except Exception as e:
        path, message = _locate(e)
        raise DecodeError(_render_path(path), message) from None


def encode(value: object) -> Any:
    """Encode a model (or a list/dict of models) to JSON-able builtins; tags included."""
    fn = _ENCODERS.get(type(value))
    if fn is not None:
        return fn(value)
    if _is_model(type(value)):
        fn = _ENCODERS[type(value)] = _hooks("lenient").conv.get_unstructure_hook(type(value))
        return fn(value)
    return _hooks("lenient").unstructure_runtime(value)


# ------------------------------------------------------------------ bytes <-> builtins
# loads / dumps: orjson with json fallbacks, shared with the JSON-RPC engine
# (acpkit.jsonrpc.jsonbytes); re-exported here as the codec's bytes layer.


def encode_json(value: object) -> bytes:
    """Compact UTF-8 JSON for a model, without a trailing newline."""
    return dumps(encode(value))


@typing.overload
def decode_json(cls: type[T], data: bytes | str, *, strict: bool = False) -> T: ...
@typing.overload
def decode_json(cls: Any, data: bytes | str, *, strict: bool = False) -> Any: ...
def decode_json(cls: Any, data: bytes | str, *, strict: bool = False) -> Any:
    """Parse JSON text and :func:`decode` it; invalid JSON is a :class:`DecodeError` at ``$``."""
    try:
        obj = loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise DecodeError("$", f"invalid JSON: {str(e)[:120]}") from None
    return decode(cls, obj, strict=strict)
