"""
Union hooks: a tagged union dispatches on its wire tag with one dict lookup (an unknown tag
decodes to ``Unknown<Union>(raw=...)`` in lenient mode); untagged unions choose by the
required keys only one class has, by the first item of a list, or by JSON type (see
:mod:`acpkit.codec`'s rules).  Each builder takes the hooks of the converter it serves
(a :class:`~acpkit.codec.primitives.HookSource`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Union, get_args, get_origin

from acpkit.codec.decode_errors import JSON_TYPE, Invalid, snippet, type_error
from acpkit.codec.primitives import HookSource, StructureHook, optional, s_bool, s_float, s_str
from acpkit.codec.wire import MISSING, NONE, is_model, required_keys
from acpkit.schema import AbsentType


def union_hook(source: HookSource, args: tuple[Any, ...]) -> StructureHook:
    non_none = tuple(a for a in args if a is not NONE and a is not AbsentType)
    if len(non_none) < len(args):
        return optional(source.hook(Union[non_none] if len(non_none) > 1 else non_none[0]))
    lists = [a for a in non_none if get_origin(a) is list]
    if (
        len(lists) == 1
        and len(non_none) > 1
        and all(is_model(a) for a in non_none if a != lists[0])
    ):
        return one_or_many_hook(source, non_none, lists[0])
    if any(
        getattr(a, "__acp_tag__", None) is not None or hasattr(a, "__acp_unknown__")
        for a in non_none
    ):
        return tagged_hook(source, non_none)
    if all(is_model(a) for a in non_none):
        return untagged_classes_hook(source, list(non_none))
    if all(get_origin(a) is list and is_model(get_args(a)[0]) for a in non_none):
        return untagged_lists_hook(source, list(non_none))
    return primitives_hook(source, non_none)


def tagged_hook(source: HookSource, args: tuple[Any, ...]) -> StructureHook:
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
        elif is_model(cls):
            fallback = cls
    hooks: dict[str, StructureHook] = {}
    fallback_hook: list[StructureHook] = []
    names = "|".join(sorted(table))
    strict = source.strict
    class_hook = source.class_hook

    def structure_tagged(v: Any, t: Any) -> Any:
        try:
            fn = hooks[v[key]]
        except (KeyError, TypeError):
            pass  # not an object, no tag, an unhashable tag, or a tag met for the first time
        else:
            return fn(v, None)
        if type(v) is not dict:
            raise type_error("object", v)
        tag = v.get(key, MISSING)
        if type(tag) is str and tag in table:
            fn = hooks[tag] = class_hook(table[tag])
            return fn(v, None)
        if tag is MISSING:
            if fallback is None:
                raise Invalid(f"missing tag (one of {names})"[:200], [key])
            if not fallback_hook:
                fallback_hook.append(class_hook(fallback))
            return fallback_hook[0](v, None)
        if type(tag) is not str:
            err = type_error("string", tag)
            err.path.append(key)
            raise err
        if strict or unknown is None:
            raise Invalid(f"unknown tag {snippet(tag)} (known: {names})"[:200], [key])
        return unknown(raw=v)

    structure_tagged.acp_tag_key = key  # type: ignore[attr-defined]
    structure_tagged.acp_by_tag = hooks  # type: ignore[attr-defined]
    return structure_tagged


def untagged_classes_hook(source: HookSource, classes: list[type]) -> StructureHook:
    pick = picker(classes)
    expected = " or ".join(c.__name__ for c in classes)
    class_hook = source.class_hook
    hooks: dict[type, StructureHook] = {}
    firsts: list[tuple[str, type]] | None = getattr(pick, "acp_keys", None)
    if firsts is not None:  # one key tells each class (text / blob): no pick() call

        def structure_untagged_by_key(v: Any, t: Any) -> Any:
            if type(v) is not dict:
                raise type_error("object", v)
            for key, cls in firsts:
                if key in v:
                    fn = hooks.get(cls)
                    if fn is None:
                        fn = hooks[cls] = class_hook(cls)
                    return fn(v, cls)
            raise Invalid(f"object matches none of {expected}"[:200])

        return structure_untagged_by_key

    def structure_untagged(v: Any, t: Any) -> Any:
        if type(v) is not dict:
            raise type_error("object", v)
        cls = pick(v)
        if cls is None:
            raise Invalid(f"object matches none of {expected}"[:200])
        fn = hooks.get(cls)
        if fn is None:
            fn = hooks[cls] = class_hook(cls)
        return fn(v, cls)

    return structure_untagged


def untagged_lists_hook(source: HookSource, list_types: list[Any]) -> StructureHook:
    item_types = [get_args(t)[0] for t in list_types]
    pick = picker(item_types)
    hooks = {cls: source.list_hook(source.hook(cls), False) for cls in item_types}
    names = " or ".join(c.__name__ for c in item_types)

    def structure_list_union(v: Any, t: Any) -> Any:
        if type(v) is not list:
            raise type_error("array", v)
        if not v:
            return []
        first = v[0]
        cls = pick(first) if type(first) is dict else None
        if cls is None:
            raise Invalid("item matches none of " + names, [0])
        return hooks[cls](v, None)

    return structure_list_union


def primitives_hook(source: HookSource, args: tuple[Any, ...]) -> StructureHook:
    by_json: dict[type, StructureHook] = {}
    for arg in args:
        if arg is bool:
            by_json[bool] = s_bool
        elif arg is int:
            by_json[int] = source.hook(int)
        elif arg is float:
            by_json.setdefault(int, s_float)
            by_json[float] = s_float
        elif arg is str:
            by_json[str] = s_str
        elif get_origin(arg) is list:
            by_json[list] = source.hook(arg)
        elif get_origin(arg) is dict:
            by_json[dict] = source.hook(arg)
        else:
            raise TypeError(f"unsupported union member {arg!r}")
    expected = " or ".join(sorted({JSON_TYPE[t] for t in by_json}))

    def structure_by_json_type(v: Any, t: Any) -> Any:
        fn = by_json.get(type(v))
        if fn is None:
            raise type_error(expected, v)
        return fn(v, None)

    return structure_by_json_type


def one_or_many_hook(source: HookSource, args: tuple[Any, ...], list_type: Any) -> StructureHook:
    """``A | B | list[A | B]`` (MCP sampling content): an object is one, an array many."""
    singles = tuple(a for a in args if a != list_type)
    one = source.hook(singles[0]) if len(singles) == 1 else union_hook(source, singles)
    many = source.hook(list_type)

    def structure_one_or_many(v: Any, t: Any) -> Any:
        if type(v) is list:
            return many(v, None)
        if type(v) is not dict:
            raise type_error("object or array", v)
        return one(v, None)

    return structure_one_or_many


def picker(classes: list[type]) -> Callable[[dict[str, Any]], type | None]:
    """Choose among untagged classes by the required keys only one of them has."""
    required = {cls: required_keys(cls) for cls in classes}
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
