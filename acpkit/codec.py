"""The one codec: JSON-able builtins <-> the generated models of :mod:`acpkit.schema`,
:mod:`acpkit.unstable` and :mod:`acpkit.mcp.schema` (MCP, loaded only when imported).

Contract (others code against it)::

    decode(cls, obj, *, strict=False) -> instance of cls      # raises DecodeError
    encode(value) -> JSON-able builtins                       # None fields omitted
    decode_json(cls, data, *, strict=False), encode_json(value) -> bytes
    converter: cattrs.Converter                                # hooks delegate here

Rules:

- camelCase on the wire, ``_meta`` <-> ``meta`` (explicit ``wire`` metadata where the
  name cannot be derived). Optional fields that are ``None`` are omitted on encode;
  required fields are always written (``RequestId`` may be ``null``).
- Null-meaningful fields (``Diff.old_text``, ``SessionInfoUpdate.title`` /
  ``updated_at``, the ``request_id`` scope of elicitations) default to
  :data:`acpkit.schema.ABSENT`: ``ABSENT`` is omitted, ``None`` is written as ``null``.
- Tagged unions dispatch with one dict lookup on the wire tag; a missing tag selects the
  untagged fallback variant where the schema has one (stdio MCP server, agent auth method,
  titled multi-select items, value-id config value); an unknown tag decodes to
  ``Unknown<Union>(raw=...)`` in lenient mode and is an error in strict mode.
- Untagged unions: classes are chosen by the required keys only one of them has
  (``text``/``blob``, ``result``/``error``); ``list[A] | list[B]`` by the first item;
  ``A | list[A]`` (MCP sampling content) by JSON type, object or array;
  primitive unions by JSON type (bool before int, int before float).
- Lenient mode (default): unknown fields are ignored, unknown enum values are kept
  (``OpenStrEnum``), ``x-deserialize-default-on-error`` fields fall back to their default
  when invalid and ``x-deserialize-skip-invalid-items`` lists drop invalid items.
  Missing required fields and wrong types elsewhere raise :class:`DecodeError`.
- Strict mode reports unknown fields, unknown tags, unknown values of closed enums,
  wrong types and missing required fields, with a JSON path.

Decoders and encoders are generated Python functions (compiled once per class, lazily on
first use), so importing this module is cheap.
"""

from __future__ import annotations

import enum
import json
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar, Union, get_args, get_origin

import attrs
import cattrs

from acpkit.schema import ABSENT, AbsentType

__all__ = [
    "DecodeError",
    "converter",
    "decode",
    "decode_json",
    "encode",
    "encode_json",
    "wire_name",
]

T = TypeVar("T")
Decoder = Callable[[Any, bool], Any]
Encoder = Callable[[Any], Any]

_MAX_SNIPPET = 60
_MISSING: Any = object()


class DecodeError(ValueError):
    """Input that does not decode to the requested type. ``str()`` is ``"<path>: <message>"``."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message[:300]
        super().__init__(f"{path}: {self.message}")


class _Invalid(Exception):
    """Internal: raised while decoding; the path is accumulated innermost first."""

    __slots__ = ("message", "path")

    def __init__(self, message: str, path: list[str | int] | None = None) -> None:
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
    type(None): "null",
}


def _type_error(expected: str, value: object) -> _Invalid:
    got = _JSON_TYPE.get(type(value), type(value).__name__)
    return _Invalid(f"expected {expected}, got {got} {_snippet(value)}")


def _render_path(path: list[str | int]) -> str:
    out = "$"
    for part in reversed(path):
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += "." + (part if len(part) <= _MAX_SNIPPET else part[:_MAX_SNIPPET] + "...")
    return out


# ------------------------------------------------------------------ wire names
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


# ------------------------------------------------------------------ primitives
def _dec_str(v: Any, strict: bool) -> Any:
    if type(v) is not str:
        raise _type_error("string", v)
    return v


def _dec_int(v: Any, strict: bool) -> Any:
    if type(v) is not int:
        if type(v) is float and v.is_integer() and not strict:
            return int(v)
        raise _type_error("integer", v)
    return v


def _dec_float(v: Any, strict: bool) -> Any:
    if type(v) is float or type(v) is int:
        return v
    raise _type_error("number", v)


def _dec_bool(v: Any, strict: bool) -> Any:
    if type(v) is not bool:
        raise _type_error("boolean", v)
    return v


def _dec_any(v: Any, strict: bool) -> Any:
    return v


def _dec_none(v: Any, strict: bool) -> Any:
    if v is not None:
        raise _type_error("null", v)
    return None


def _dec_dict_any(v: Any, strict: bool) -> Any:
    if type(v) is not dict:
        raise _type_error("object", v)
    return v


_PRIMITIVE_DECODERS: dict[Any, Decoder] = {
    str: _dec_str,
    int: _dec_int,
    float: _dec_float,
    bool: _dec_bool,
    Any: _dec_any,
    object: _dec_any,
    type(None): _dec_none,
}


def _enum_decoder(cls: type[enum.Enum]) -> Decoder:
    lookup = cls._value2member_map_
    is_open = bool(getattr(cls, "__acp_open__", False))
    base = int if issubclass(cls, int) else str
    expected = "integer" if base is int else "string"
    name = cls.__name__

    def dec(v: Any, strict: bool) -> Any:
        member = lookup.get(v) if type(v) is base else None
        if member is not None:
            return member
        if type(v) is cls:  # already decoded (an encode() result decoded again)
            return v
        if type(v) is not base:
            raise _type_error(expected, v)
        if strict and not is_open:
            raise _Invalid(f"unknown {name} value {_snippet(v)}")
        return cls(v)

    return dec


def _list_decoder(item: Decoder, skip_invalid: bool) -> Decoder:
    if item is _dec_str and not skip_invalid:

        def dec_str_list(v: Any, strict: bool) -> Any:
            if type(v) is not list:
                raise _type_error("array", v)
            for i, x in enumerate(v):
                if type(x) is not str:
                    err = _type_error("string", x)
                    err.path.append(i)
                    raise err
            return list(v)

        return dec_str_list

    def dec(v: Any, strict: bool) -> Any:
        if type(v) is not list:
            raise _type_error("array", v)
        try:
            return [item(x, strict) for x in v]
        except _Invalid:
            pass  # redo item by item for the path, or to skip invalid items
        out = []
        for i, x in enumerate(v):
            try:
                out.append(item(x, strict))
            except _Invalid as e:
                if skip_invalid and not strict:
                    continue
                e.path.append(i)
                raise
        return out

    return dec


def _dict_decoder(value: Decoder) -> Decoder:
    def dec(v: Any, strict: bool) -> Any:
        if type(v) is not dict:
            raise _type_error("object", v)
        out = {}
        for k, x in v.items():
            try:
                out[k] = value(x, strict)
            except _Invalid as e:
                e.path.append(k)
                raise
        return out

    return dec


# ------------------------------------------------------------------ unions
def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and attrs.has(tp)


def _union_args(tp: Any) -> tuple[Any, ...] | None:
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        return get_args(tp)
    return None


def _tagged_decoder(args: tuple[Any, ...]) -> Decoder:
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
    fns: dict[str, Decoder] = {}
    fallback_fn: list[Decoder] = []
    names = "|".join(sorted(table))

    def dec(v: Any, strict: bool) -> Any:
        try:
            fn = fns[v[key]]
        except (KeyError, TypeError):
            pass  # not an object, no tag, an unhashable tag, or a tag met for the first time
        else:
            return fn(v, strict)
        if type(v) is not dict:
            raise _type_error("object", v)
        tag = v.get(key, _MISSING)
        if type(tag) is str and tag in table:
            fn = fns[tag] = _class_decoder(table[tag])
            return fn(v, strict)
        if tag is _MISSING:
            if fallback is None:
                raise _Invalid(f"missing tag (one of {names})"[:200], [key])
            if not fallback_fn:
                fallback_fn.append(_class_decoder(fallback))
            return fallback_fn[0](v, strict)
        if type(tag) is not str:
            err = _type_error("string", tag)
            err.path.append(key)
            raise err
        if strict or unknown is None:
            raise _Invalid(f"unknown tag {_snippet(tag)} (known: {names})"[:200], [key])
        return unknown(raw=v)

    return dec


def _required_keys(cls: type) -> set[str]:
    return {wire_name(f) for f in attrs.fields(cls) if f.default is attrs.NOTHING}


def _untagged_class_decoder(classes: list[type]) -> Decoder:
    required = {cls: _required_keys(cls) for cls in classes}
    marks: list[tuple[frozenset[str], type]] = []
    for cls in classes:
        others: set[str] = set()
        for other in classes:
            if other is not cls:
                others |= required[other]
        marks.append((frozenset(required[cls] - others), cls))
    expected = " or ".join(c.__name__ for c in classes)

    def pick(v: dict[str, Any]) -> type | None:
        for keys, cls in marks:
            if keys and keys <= v.keys():
                return cls
        return None

    def dec(v: Any, strict: bool) -> Any:
        if type(v) is not dict:
            raise _type_error("object", v)
        cls = pick(v)
        if cls is None:
            raise _Invalid(f"object matches none of {expected}"[:200])
        return _class_decoder(cls)(v, strict)

    dec.pick = pick  # type: ignore[attr-defined]
    return dec


def _untagged_list_decoder(list_types: list[Any]) -> Decoder:
    item_types = [get_args(t)[0] for t in list_types]
    picker = _untagged_class_decoder(item_types)
    decoders = {cls: _list_decoder(_decoder(cls), False) for cls in item_types}

    def dec(v: Any, strict: bool) -> Any:
        if type(v) is not list:
            raise _type_error("array", v)
        if not v:
            return []
        first = v[0]
        cls = picker.pick(first) if type(first) is dict else None  # type: ignore[attr-defined]
        if cls is None:
            err = _Invalid("item matches none of " + " or ".join(c.__name__ for c in item_types))
            err.path.append(0)
            raise err
        return decoders[cls](v, strict)

    return dec


def _primitive_union_decoder(args: tuple[Any, ...]) -> Decoder:
    by_json: dict[type, Decoder] = {}
    for arg in args:
        if arg is type(None):
            by_json[type(None)] = _dec_none
        elif arg is bool:
            by_json[bool] = _dec_bool
        elif arg is int:
            by_json[int] = _dec_int
        elif arg is float:
            by_json.setdefault(int, _dec_float)
            by_json[float] = _dec_float
        elif arg is str:
            by_json[str] = _dec_str
        elif get_origin(arg) is list:
            by_json[list] = _decoder(arg)
        elif get_origin(arg) is dict:
            by_json[dict] = _decoder(arg)
        else:
            raise TypeError(f"unsupported union member {arg!r}")
    expected = " or ".join(sorted({_JSON_TYPE[t] for t in by_json}))

    def dec(v: Any, strict: bool) -> Any:
        fn = by_json.get(type(v))
        if fn is None:
            raise _type_error(expected, v)
        return fn(v, strict)

    return dec


def _one_or_many_decoder(args: tuple[Any, ...], list_type: Any) -> Decoder:
    """``A | B | list[A | B]`` (MCP sampling content): an object is one, an array many."""
    singles = tuple(a for a in args if a != list_type)
    one = _decoder(singles[0]) if len(singles) == 1 else _union_decoder(singles)
    many = _decoder(list_type)

    def dec(v: Any, strict: bool) -> Any:
        if type(v) is list:
            return many(v, strict)
        if type(v) is not dict:
            raise _type_error("object or array", v)
        return one(v, strict)

    return dec


def _union_decoder(args: tuple[Any, ...]) -> Decoder:
    non_none = tuple(a for a in args if a is not type(None) and a is not AbsentType)
    if len(non_none) < len(args):
        inner = _decoder(Union[non_none]) if len(non_none) > 1 else _decoder(non_none[0])

        def dec_optional(v: Any, strict: bool) -> Any:
            if v is None:
                return None
            return inner(v, strict)

        return dec_optional
    lists = [a for a in non_none if get_origin(a) is list]
    if (
        len(lists) == 1
        and len(non_none) > 1
        and all(_is_model(a) for a in non_none if a != lists[0])
    ):
        return _one_or_many_decoder(non_none, lists[0])
    if any(
        getattr(a, "__acp_tag__", None) is not None or hasattr(a, "__acp_unknown__")
        for a in non_none
    ):
        return _tagged_decoder(non_none)
    if all(_is_model(a) for a in non_none):
        return _untagged_class_decoder(list(non_none))
    if all(get_origin(a) is list and _is_model(get_args(a)[0]) for a in non_none):
        return _untagged_list_decoder(list(non_none))
    return _primitive_union_decoder(non_none)


# ------------------------------------------------------------------ classes
_DECODERS: dict[Any, Decoder] = dict(_PRIMITIVE_DECODERS)
_CLASS_DECODERS: dict[type, Decoder] = {}


def _decoder(tp: Any, skip_invalid: bool = False) -> Decoder:
    """The decoder for a type expression (cached)."""
    if not skip_invalid:
        found = _DECODERS.get(tp)
        if found is not None:
            return found
    origin = get_origin(tp)
    fn: Decoder
    if origin is list:
        fn = _list_decoder(_decoder(get_args(tp)[0]), skip_invalid)
    elif skip_invalid and _union_args(tp) is not None:
        args = tuple(a for a in get_args(tp) if a is not type(None))
        inner = _decoder(args[0], skip_invalid=True)

        def fn(v: Any, strict: bool) -> Any:
            return None if v is None else inner(v, strict)

    elif skip_invalid:
        fn = _decoder(tp)
    elif origin is dict:
        value_type = get_args(tp)[1]
        fn = _dec_dict_any if value_type is Any else _dict_decoder(_decoder(value_type))
    elif _union_args(tp) is not None:
        fn = _union_decoder(get_args(tp))
    elif isinstance(tp, type) and issubclass(tp, enum.Enum):
        fn = _enum_decoder(tp)
    elif _is_model(tp):
        fn = _class_decoder(tp)
    else:
        raise TypeError(f"acpkit.codec cannot decode {tp!r}")
    if not skip_invalid:
        _DECODERS[tp] = fn
    return fn


def _hints(cls: type) -> dict[str, Any]:
    module = __import__(cls.__module__, fromlist=["_"])
    return typing.get_type_hints(cls, globalns=vars(module))


def _class_decoder(cls: type) -> Decoder:
    """Generate (once) the structure function of one model class."""
    found = _CLASS_DECODERS.get(cls)
    if found is not None:
        return found
    unknown_key = getattr(cls, "__acp_unknown__", None)
    if unknown_key is not None:

        def dec_unknown(v: Any, strict: bool) -> Any:
            if type(v) is not dict:
                raise _type_error("object", v)
            return cls(raw=v)

        _CLASS_DECODERS[cls] = dec_unknown
        return dec_unknown

    # placeholder for recursive types, replaced below
    def trampoline(v: Any, strict: bool) -> Any:
        return _CLASS_DECODERS[cls](v, strict)

    _CLASS_DECODERS[cls] = trampoline
    fn = _generate_decoder(cls)
    _CLASS_DECODERS[cls] = fn
    return fn


_INLINE_CHECKS = {
    str: ("type({v}) is not str", "string"),
    bool: ("type({v}) is not bool", "boolean"),
    int: ("type({v}) is not int", "integer"),
    float: ("type({v}) is not float and type({v}) is not int", "number"),
}


def _strip_optional(tp: Any) -> Any:
    """``T | None | AbsentType`` -> ``T`` (or the union of what remains)."""
    args = _union_args(tp)
    if args is None:
        return tp
    rest = tuple(a for a in args if a is not type(None) and a is not AbsentType)
    if len(rest) == len(args):
        return tp
    return rest[0] if len(rest) == 1 else Union[rest]


def _slot_setter(cls: type, name: str) -> Any:
    """The ``__set__`` of a slot descriptor (bypasses frozen ``__setattr__``), or None."""
    for klass in cls.__mro__:
        desc = klass.__dict__.get(name)
        if desc is not None:
            if type(desc).__name__ == "member_descriptor":
                return desc.__set__
            return None
    return None


def _generate_decoder(cls: type) -> Decoder:
    """Python source for one class's decoder, compiled with its helpers as closure cells."""
    hints = _hints(cls)
    tag = getattr(cls, "__acp_tag__", None)
    fields = attrs.fields(cls)
    known = {wire_name(f) for f in fields}
    if tag is not None:
        known.add(tag[0])
    env: dict[str, Any] = {
        "_Invalid": _Invalid,
        "_type_error": _type_error,
        "_MISSING": _MISSING,
        "ABSENT": ABSENT,
        "cls": cls,
        "new": object.__new__,
        "KNOWN": frozenset(known),
        "_unknown_field": _unknown_field,
    }
    body = [
        "    def decode(d, strict):",
        "        if type(d) is not dict:",
        "            raise _type_error('object', d)",
        "        if strict and not d.keys() <= KNOWN:",
        "            raise _unknown_field(d, KNOWN)",
    ]
    if tag is not None:
        body += [
            f"        if strict and d.get({tag[0]!r}, {tag[1]!r}) != {tag[1]!r}:",
            f"            raise _Invalid('expected tag {tag[1]}', [{tag[0]!r}])",
        ]
    ind = "        "
    setters = []
    for i, f in enumerate(fields):
        wire = wire_name(f)
        tp = hints[f.name]
        var = f"f{i}"
        skip = bool(f.metadata.get("skip_invalid"))
        on_error = bool(f.metadata.get("on_error"))
        setter = _slot_setter(cls, f.name)
        setters.append(setter)
        env[f"S{i}"] = setter
        if f.default is attrs.NOTHING:
            body += [
                f"{ind}try:",
                f"{ind}    {var} = d[{wire!r}]",
                f"{ind}except KeyError:",
                f"{ind}    raise _Invalid('missing required field', [{wire!r}]) from None",
            ]
            inner = ind
            if f.metadata.get("on_null"):
                empty = "[]" if get_origin(tp) is list else "{}"
                body += [f"{ind}if {var} is None:", f"{ind}    {var} = {empty}", f"{ind}else:"]
                inner = ind + "    "
            # a required list marked default-on-error falls back to [] when invalid (lenient)
            is_list = get_origin(tp) is list
            lines = _check_lines(
                env, i, var, wire, tp, skip, inner, on_error and is_list, "[]" if is_list else ""
            )
            body += lines or [f"{inner}pass"]
            continue
        factory = getattr(f.default, "factory", None)
        if factory is not None and hasattr(f.default, "takes_self"):  # an attrs.Factory
            env[f"F{i}"] = factory
            default = f"F{i}()"
        else:
            env[f"D{i}"] = f.default
            default = f"D{i}"
        inner_tp = _strip_optional(tp)
        if AbsentType in (get_args(tp) or ()):
            body += [
                f"{ind}{var} = d.get({wire!r}, _MISSING)",
                f"{ind}if {var} is _MISSING:",
                f"{ind}    {var} = ABSENT",
                f"{ind}elif {var} is not None:",
            ]
        else:
            body += [
                f"{ind}{var} = d.get({wire!r})",
                f"{ind}if {var} is None:",
                f"{ind}    {var} = {default}",
                f"{ind}else:",
            ]
        lines = _check_lines(env, i, var, wire, inner_tp, skip, ind + "    ", on_error, default)
        body += lines or [f"{ind}    pass"]
    if all(s is not None for s in setters):
        body.append(f"{ind}o = new(cls)")
        body += [f"{ind}S{i}(o, f{i})" for i in range(len(fields))]
        body.append(f"{ind}return o")
    else:
        args = ", ".join(f"{f.name}=f{i}" for i, f in enumerate(fields))
        body.append(f"{ind}return cls({args})")
    params = ", ".join(sorted(env))
    source = "\n".join([f"def make({params}):", *body, "    return decode"])
    ns: dict[str, Any] = {}
    exec(compile(source, f"<acpkit.codec decode {cls.__name__}>", "exec"), ns)
    fn: Decoder = ns["make"](**env)
    return fn


def _check_lines(
    env: dict[str, Any],
    i: int,
    var: str,
    wire: str,
    tp: Any,
    skip: bool,
    ind: str,
    on_error: bool,
    default: str,
) -> list[str]:
    """Source lines validating/converting ``var``; errors get the path or the default."""
    if tp is Any:
        return []
    inline = _INLINE_CHECKS.get(tp)
    if inline is None and get_origin(tp) is dict and get_args(tp)[1] is Any:
        inline = ("type({v}) is not dict", "object")
    if inline is not None:
        cond, expected = inline
        fail = f"_e = _type_error({expected!r}, {var}); _e.path.append({wire!r}); raise _e"
        out = [f"{ind}if {cond.format(v=var)}:"]
        if on_error:
            return [
                *out,
                f"{ind}    if strict:",
                f"{ind}        {fail}",
                f"{ind}    {var} = {default}",
            ]
        return [*out, f"{ind}    {fail}"]
    env[f"dec{i}"] = _decoder(tp, skip_invalid=skip)
    out = [f"{ind}try:", f"{ind}    {var} = dec{i}({var}, strict)", f"{ind}except _Invalid as _e:"]
    if on_error:
        return [
            *out,
            f"{ind}    if strict:",
            f"{ind}        _e.path.append({wire!r})",
            f"{ind}        raise",
            f"{ind}    {var} = {default}",
        ]
    return [*out, f"{ind}    _e.path.append({wire!r})", f"{ind}    raise"]


def _unknown_field(d: dict[str, Any], known: frozenset[str]) -> _Invalid:
    extra = sorted(k for k in d if k not in known)
    return _Invalid("unknown field", [extra[0]])


# ------------------------------------------------------------------ encoding
_ENCODERS: dict[type, Encoder] = {}


def _encode_generic(v: Any) -> Any:
    """Encode any value: models via their generated encoder, containers recursively."""
    fn = _ENCODERS.get(type(v))
    if fn is not None:
        return fn(v)
    if _is_model(type(v)):
        return _class_encoder(type(v))(v)
    if type(v) is list or type(v) is tuple:
        return [_encode_generic(x) for x in v]
    if type(v) is dict:
        return {k: _encode_generic(x) for k, x in v.items()}
    if isinstance(v, enum.Enum):
        return v.value
    return v


def _enum_value(v: Any) -> Any:
    """The wire value of an enum field (plain ``str``/``int``, never the member)."""
    return v.value if isinstance(v, enum.Enum) else v


def _encoder_for(tp: Any) -> Encoder | None:
    """A specialised encoder for a field type, or None when values pass through unchanged."""
    if tp in (str, int, float, bool, Any, type(None)):
        return None
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_value
    origin = get_origin(tp)
    if origin is dict and get_args(tp)[1] is Any:
        return None
    if origin is list:
        item = get_args(tp)[0]
        if item is str:
            return list
        if _is_model(item):
            return lambda v: [_class_encoder(item)(x) for x in v]
    if _is_model(tp):
        return lambda v: _class_encoder(tp)(v)
    return _encode_generic


def _class_encoder(cls: type) -> Encoder:
    """Generate (once) the unstructure function of one model class."""
    found = _ENCODERS.get(cls)
    if found is not None:
        return found
    if getattr(cls, "__acp_unknown__", None) is not None:

        def enc_unknown(o: Any) -> Any:
            return dict(o.raw)

        _ENCODERS[cls] = enc_unknown
        return enc_unknown
    hints = _hints(cls)
    ns: dict[str, Any] = {"ABSENT": ABSENT}
    tag = getattr(cls, "__acp_tag__", None)
    lines = [
        "def encode(o):",
        "    d = {}" if tag is None else f"    d = {{{tag[0]!r}: {tag[1]!r}}}",
    ]
    for i, f in enumerate(attrs.fields(cls)):
        tp = hints[f.name]
        enc = _encoder_for(tp)
        ns[f"enc{i}"] = enc
        wire = wire_name(f)
        value = "v" if enc is None else f"enc{i}(v)"
        lines.append(f"    v = o.{f.name}")
        if f.default is attrs.NOTHING:
            if enc is not None and AbsentType not in (get_args(tp) or ()):
                lines.append(f"    d[{wire!r}] = None if v is None else {value}")
            else:
                lines.append(f"    d[{wire!r}] = {value}")
        elif AbsentType in (get_args(tp) or ()):
            lines += [
                "    if v is not ABSENT:",
                f"        d[{wire!r}] = None if v is None else {value}",
            ]
        else:
            lines += ["    if v is not None:", f"        d[{wire!r}] = {value}"]
    lines.append("    return d")
    exec(compile("\n".join(lines), f"<acpkit.codec encode {cls.__name__}>", "exec"), ns)
    fn: Encoder = ns["encode"]
    _ENCODERS[cls] = fn
    return fn


# ------------------------------------------------------------------ public API
@typing.overload
def decode(cls: type[T], obj: object, *, strict: bool = False) -> T: ...
@typing.overload
def decode(cls: Any, obj: object, *, strict: bool = False) -> Any: ...
def decode(cls: Any, obj: object, *, strict: bool = False) -> Any:
    """Decode JSON-able builtins into ``cls`` (a model class or a union alias).

    Raises :class:`DecodeError` with a JSON path such as ``$.update.content.type``.
    """
    fn = _DECODERS.get(cls)
    if fn is None:
        fn = _decoder(cls)
    try:
        result = fn(obj, strict)
    except _Invalid as e:
        raise DecodeError(_render_path(e.path), e.message) from None
    except RecursionError:
        raise DecodeError("$", "input nested too deeply") from None
    return result


def encode(value: object) -> Any:
    """Encode a model (or a list/dict of models) to JSON-able builtins; tags included."""
    fn = _ENCODERS.get(type(value))
    if fn is not None:
        return fn(value)
    return _encode_generic(value)


_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def encode_json(value: object) -> bytes:
    """Compact UTF-8 JSON for a model, without a trailing newline."""
    return _dumps(encode(value)).encode("utf-8")


@typing.overload
def decode_json(cls: type[T], data: bytes | str, *, strict: bool = False) -> T: ...
@typing.overload
def decode_json(cls: Any, data: bytes | str, *, strict: bool = False) -> Any: ...
def decode_json(cls: Any, data: bytes | str, *, strict: bool = False) -> Any:
    """Parse JSON text and :func:`decode` it; invalid JSON is a :class:`DecodeError` at ``$``."""
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise DecodeError("$", f"invalid JSON: {str(e)[:120]}") from None
    return decode(cls, obj, strict=strict)


_MODEL_MODULES = frozenset({"acpkit.schema", "acpkit.unstable", "acpkit.mcp.schema"})
"""The generated model modules (ACP stable, ACP unstable, MCP) the converter hooks cover."""


def _is_acp_type(tp: Any) -> bool:
    if _is_model(tp):
        return tp.__module__ in _MODEL_MODULES
    args = _union_args(tp)
    return args is not None and any(_is_acp_type(a) for a in args)


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter()
    conv.register_structure_hook_func(_is_acp_type, lambda obj, tp: decode(tp, obj))
    conv.register_unstructure_hook_func(
        lambda tp: _is_model(tp) and tp.__module__ in _MODEL_MODULES,
        encode,
    )
    return conv


converter: cattrs.Converter = _make_converter()
"""The one lenient converter: ``converter.structure(obj, cls)`` == ``decode(cls, obj)``."""
