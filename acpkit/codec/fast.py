"""
The generated fast path of :func:`acpkit.codec.decode`: one function per model class,
generated once, that reads each key, checks a JSON primitive inline or calls the
attribute's hook, and fills a new instance through the class's slot-compatible twin
(:func:`slot_twin`); and the constructors that store an instance's slots directly
(:func:`constructor`), which the other converters' cattrs functions call.  Their source
is in :mod:`linecache`, so a traceback shows the lines.
"""

from __future__ import annotations

import linecache
from collections.abc import Callable
from typing import Any

import attrs

from acpkit.codec.decode_errors import type_error
from acpkit.codec.primitives import (
    PRIMITIVE_NAMES,
    PRIMITIVE_TYPES,
    HookSource,
    StructureHook,
    s_any,
)
from acpkit.codec.wire import MISSING, TAG_FIELD, strip_optional, wire_name
from acpkit.schema import ABSENT

Check = tuple[str, tuple[type, ...], str]
"""An attribute's check made inline by a fast class hook: ``(kind, accepted types, JSON type
name)``; kind is ``required``, ``optional`` (``null`` accepted), ``or_default`` (an
invalid value becomes ``None``: x-deserialize-default-on-error) or ``any``."""


def fused_structure(
    hooks: HookSource, cls: type, fields: list[attrs.Attribute[Any]]
) -> StructureHook | None:
    """The fast converter's class hook: one generated function that reads each key,
    checks or converts its value and stores it in the instance's slot (made as the
    class's :func:`slot_twin` where it has one), or None for a class that needs attrs'
    own ``__init__``."""
    setters = [slot_setter(cls, a.name) for a in fields]
    if not slot_constructible(cls, setters):
        return None
    twin = slot_twin(cls)
    env: dict[str, Any] = {
        "new": object.__new__,
        "cls": cls,
        "twin": twin,
        "error": type_error,
        "MISSING": MISSING,
    }
    made = "twin" if twin is not None else "cls"
    lines = [
        f"def structure_{cls.__name__}(o, _=None):",
        f"    x = {made}()" if twin is not None else "    x = new(cls)",
    ]
    for i, a in enumerate(fields):
        lines.extend(_fused_lines(hooks, i, a, env))
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


def _fused_lines(
    hooks: HookSource, i: int, a: attrs.Attribute[Any], env: dict[str, Any]
) -> list[str]:
    """Lines setting ``v{i}`` to attribute ``a``'s value from the object ``o``."""
    key = wire_name(a)
    v = f"v{i}"
    check = inline_check(hooks, a)
    default = a.default
    required = default is attrs.NOTHING
    if check is None:
        hook = hooks.field_hook(a)
        env[f"H{i}"] = hook
        env[f"T{i}"] = a.type
        if required:
            return [f"    {v} = o[{key!r}]", *inline_call(i, hook, env)]
        inner = getattr(hook, "acp_optional_of", None)
        if default is None and inner is not None:  # null or absent: None
            env[f"H{i}"] = inner
            call = inline_call(i, inner, env, indent="        ")
            return [f"    {v} = o.get({key!r})", f"    if {v} is not None:", *call]
        inner = getattr(hook, "acp_or_none_of", None)
        if default is None and inner is not None:  # null, absent or invalid: None
            env[f"H{i}"] = inner
            call = inline_call(i, inner, env, indent="            ")
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
        defaulted = getattr(hook, "acp_default_of", None)
        if defaulted is not None and default is not ABSENT:
            return _default_lines(i, key, defaulted[0], defaulted[1], missing, env)
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
    test = f"type({v}) is not {types[0].__name__}" if len(types) == 1 else f"type({v}) not in J{i}"
    if kind != "required":  # None passes (optional) or is the default (or_default)
        test = f"{v} is not None and {test}"
    action = f"{v} = None" if kind == "or_default" else f"raise error({expected!r}, {v})"
    lines.append(f"{prefix}{test}:\n        {action}")
    return lines


def _default_lines(
    i: int, key: str, inner: StructureHook, invalid_too: bool, default: str, env: dict[str, Any]
) -> list[str]:
    """Lines of an attribute whose default is a value or a factory (``null_to`` or
    ``optional_or_default`` inlined): absent or ``null`` is the default; otherwise the
    inner hook's check or call, and where ``invalid_too`` an invalid value is the default
    too (x-deserialize-default-on-error)."""
    v = f"v{i}"
    lines = [f"    {v} = o.get({key!r})", f"    if {v} is None:", f"        {v} = {default}"]
    types = PRIMITIVE_TYPES.get(inner)
    if types is not None:
        env[f"J{i}"] = types
        test = (
            f"type({v}) is not {types[0].__name__}" if len(types) == 1 else f"type({v}) not in J{i}"
        )
        action = (
            f"{v} = {default}" if invalid_too else f"raise error({PRIMITIVE_NAMES[inner]!r}, {v})"
        )
        return [*lines, f"    elif {test}:", f"        {action}"]
    env[f"H{i}"] = inner
    if not invalid_too:
        return [*lines, "    else:", *inline_call(i, inner, env, indent="        ")]
    return [
        *lines,
        "    else:",
        "        try:",
        *inline_call(i, inner, env, indent="            "),
        "        except Exception:",
        f"            {v} = {default}",
    ]


def inline_check(hooks: HookSource, a: attrs.Attribute[Any]) -> Check | None:
    """The check of a JSON-primitive attribute that the fast converter's class hook
    makes inline (:meth:`_fused_lines`): the same acceptance as the attribute's
    hook from :meth:`field_hook`, or None where that hook is not a primitive one."""
    meta = a.metadata
    if meta.get("on_null") or meta.get("skip_invalid"):
        return None
    on_error = bool(meta.get("on_error"))
    if a.default is attrs.NOTHING:
        inner = hooks.hook(a.type)
        kind = "required"
        if on_error:
            return None
    elif a.default is None or a.default is ABSENT:
        inner = hooks.hook(strip_optional(a.type))
        kind = "or_default" if on_error else "optional"
    else:
        return None
    if inner is s_any:
        return ("any", (), "")
    types = PRIMITIVE_TYPES.get(inner)
    if types is None:
        return None
    return (kind, types, PRIMITIVE_NAMES[inner])


def slot_setter(cls: type, name: str) -> Any:
    """The ``__set__`` of a slot descriptor (bypasses frozen ``__setattr__``), or None."""
    for klass in cls.__mro__:
        desc = klass.__dict__.get(name)
        if desc is not None:
            return desc.__set__ if type(desc).__name__ == "member_descriptor" else None
    return None


def inline_call(
    i: int, hook: StructureHook, env: dict[str, Any], indent: str = "    "
) -> list[str]:
    """Lines of a fast hook (:meth:`Hooks._fused`) passing ``v{i}`` through ``H{i}``
    (``hook``), with the hook's first step inlined where it is a model's object check, a
    tagged union's cached dispatch or a list of a tagged union's (the hook itself handles
    everything else: a tag met for the first time, an invalid item, an error's path)."""
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
    members = getattr(hook, "acp_members", None)
    if members is not None:  # an enum: its known members by one lookup
        env[f"L{i}"], env[f"B{i}"] = members
        return [
            f"{indent}m = L{i}.get({v}) if type({v}) is B{i} else None",
            f"{indent}{v} = H{i}({v}, T{i}) if m is None else m",
        ]
    items = getattr(hook, "acp_items_by_tag", None)
    if items is not None:  # a list of a tagged union: the list hook's first try
        env[f"U{i}"] = items[0]
        return [
            f"{indent}try:",
            f"{indent}    if type({v}) is not list:",
            f"{indent}        raise TypeError",
            f"{indent}    {v} = [U{i}[y[{items[1]!r}]](y, None) for y in {v}]",
            f"{indent}except Exception:",
            f"{indent}    {v} = H{i}({v}, T{i})",
        ]
    return [f"{indent}{v} = H{i}({v}, T{i})"]


_TWINS: dict[type, type | None] = {}


def slot_twin(cls: type) -> type | None:
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


def slot_constructible(cls: type, setters: list[Any]) -> bool:
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


def constructor(cls: type) -> Any:
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
    setters = [slot_setter(cls, a.name) for a in fields]
    if not slot_constructible(cls, setters):
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
            env["MISSING"] = MISSING
        else:
            env[f"D{i}"] = a.default
            params.append(f"{a.alias}=D{i}")
        body.append(f"    S{i}(o, {a.alias})")
    if getattr(cls, "__acp_tag__", None) is not None:
        params.append(f"{TAG_FIELD.alias}=None")  # strict mode's checked tag, not stored
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
