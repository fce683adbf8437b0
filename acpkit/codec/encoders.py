"""
The generated class encoders: one function per model that does what cattrs' generated
unstructure function did (the tag first, required fields always, ``None``/``ABSENT``
optional fields omitted, each attribute through its hook) and checks each attribute's
Python type on the way, inline, so that a wrong type (``NewSessionResponse(session_id=1)``)
is an :class:`EncodeError` naming the model and the field instead of ``{"sessionId":1}``
on the wire.

The checks cost one ``v.__class__ is T`` comparison per attribute in the common case (the
``isinstance`` fallback runs only for subclasses and wrong values); writing the tag as a
constant instead of calling a hook pays for them (benchmarks/bench_codec.py).
What is checked: ``str``/``int``/``float``/``bool`` (``bool`` is not an ``int`` here, an
``int`` is a ``float``), models (an instance of the class), unions of models and of
primitives (an instance of one of the variants), enums (the enum or its ``str``/``int``
base: open enums keep unknown values), lists (``list``/``tuple``, and their items when they
are primitives) and objects (``dict``). ``Any`` and ``Literal`` are not checked.
"""

from __future__ import annotations

import enum
import linecache
from collections.abc import Callable
from typing import Any, Literal, get_args, get_origin

import attrs

from acpkit.codec.primitives import UnstructureHook
from acpkit.codec.wire import NONE, is_model, strip_optional, union_args, wire_name
from acpkit.schema import ABSENT, AbsentType

__all__ = ["EncodeError", "checked_unstructure"]


class EncodeError(TypeError):
    """A model holds a value of the wrong type for its field; nothing was encoded.

    ``model`` is the class's name, ``field`` the attribute's Python name, ``key`` its wire
    key; the message names all three, the expected type and the value's type.
    """

    def __init__(self, model: str, field: str, key: str, expected: str, value: object) -> None:
        self.model = model
        self.field = field
        self.key = key
        shown = repr(value)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        super().__init__(
            f"cannot encode {model}.{field} (wire key {key!r}): expected {expected}, "
            f"got {type(value).__name__} {shown}"
        )


_PRIMITIVE_CHECKS: dict[Any, tuple[str, str]] = {
    # type: (the test that the value is WRONG, as an expression on v; the type's name)
    str: ("v.__class__ is not str and not isinstance(v, str)", "str"),
    int: (
        "v.__class__ is not int and (not isinstance(v, int) or isinstance(v, bool))",
        "int",
    ),
    float: (
        "v.__class__ is not float and v.__class__ is not int"
        " and (not isinstance(v, (int, float)) or isinstance(v, bool))",
        "float",
    ),
    bool: ("v.__class__ is not bool", "bool"),
}


def _runtime_classes(tp: Any) -> tuple[type, ...] | None:
    """The classes a value of ``tp`` may be an instance of (None: not checked)."""
    if tp is NONE:
        return (NONE,)
    if tp is AbsentType:
        return (AbsentType,)
    if tp is bool:
        return (bool,)
    if tp is int:
        return (int,)
    if tp is float:
        return (int, float)
    if tp is str:
        return (str,)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        bases = tuple(b for b in (str, int) if issubclass(tp, b))
        return (tp, *bases)
    if is_model(tp):
        return (tp,)
    origin = get_origin(tp)
    if origin is list:
        return (list, tuple)
    if origin is dict:
        return (dict,)
    args = union_args(tp)
    if args is not None:
        found: list[type] = []
        for arg in args:
            classes = _runtime_classes(arg)
            if classes is None:
                return None
            found.extend(classes)
        return tuple(dict.fromkeys(found))
    return None  # Any, Literal, anything else: not checked


def _describe(tp: Any) -> str:
    args = union_args(tp)
    if args is not None:
        return " | ".join(_describe(a) for a in args)
    if tp is NONE:
        return "None"
    if get_origin(tp) is not None:
        return repr(tp).replace("typing.", "")
    return getattr(tp, "__name__", repr(tp))


def _wrong(tp: Any, names: dict[str, Any], label: str) -> str | None:
    """The expression true when ``v`` is not a ``tp`` (None: not checked)."""
    if tp is Any or get_origin(tp) is Literal:
        return None
    primitive = _PRIMITIVE_CHECKS.get(tp)
    if primitive is not None:
        return primitive[0]
    origin = get_origin(tp)
    if origin is list:
        (item,) = get_args(tp) or (Any,)
        item_check = _PRIMITIVE_CHECKS.get(item)
        container = "not isinstance(v, (list, tuple))"
        if item_check is None:
            return container
        names[f"_items_{label}"] = _items_checker(item_check[0])
        return f"{container} or _items_{label}(v)"
    classes = _runtime_classes(tp)
    if classes is None:
        return None
    names[f"_classes_{label}"] = classes
    if len(classes) == 1:
        names[f"_class_{label}"] = classes[0]
        return f"v.__class__ is not _class_{label} and not isinstance(v, _class_{label})"
    if bool not in classes and (int in classes or float in classes):
        # bool is an int to isinstance, not to JSON's readers: True is no request id
        return f"not isinstance(v, _classes_{label}) or v.__class__ is bool"
    return f"not isinstance(v, _classes_{label})"


def _items_checker(wrong: str) -> Callable[[Any], bool]:
    """A function true when one item of a list is not of the primitive type."""
    namespace: dict[str, Any] = {}
    exec(f"def items_wrong(items):\n    return any({wrong} for v in items)\n", namespace)
    return namespace["items_wrong"]  # type: ignore[no-any-return]


def checked_unstructure(
    cls: type,
    fields: list[attrs.Attribute[Any]],
    tag: tuple[str, str] | None,
    field_hook: Callable[[Any], UnstructureHook],
    is_identity: Callable[[UnstructureHook], bool],
) -> UnstructureHook:
    """
    The encoder of ``cls``: ``fields`` are its attributes with resolved types, ``tag`` its
    ``(key, value)`` wire tag (None: not a variant), ``field_hook(type)`` an attribute's
    unstructure hook (inlined when ``is_identity``).
    """
    names: dict[str, Any] = {"_bad": _bad, "_NONE": None, "_ABSENT": ABSENT}
    required: list[str] = []
    optional: list[str] = []
    checks: list[str] = []
    for n, a in enumerate(fields):
        label = str(n)
        key = wire_name(a)
        omitted_when = "_NONE" if a.default is None else "_ABSENT" if a.default is ABSENT else None
        hook = field_hook(a.type)
        value = "v" if is_identity(hook) else f"_hook_{label}(v)"
        if value != "v":
            names[f"_hook_{label}"] = hook
        names[f"_tp_{label}"] = _describe(a.type)
        wrong = _wrong(a.type, names, label)
        if omitted_when is not None:
            # Once it is not the default, the value is checked against the type without
            # None where None is the default, against the whole type where ABSENT is (the
            # null-meaningful fields: None is written as null).
            inner = strip_optional(a.type) if a.default is None else a.type
            check = _wrong(inner, names, label + "i") if inner is not a.type else wrong
            lines = [f"    v = o.{a.name}", f"    if v is not {omitted_when}:"]
            if check is not None:
                lines.append(
                    f"        if {check}: _bad({cls.__name__!r}, {a.name!r}, {key!r}, "
                    f"_tp_{label}, v)"
                )
            lines.append(f"        res[{key!r}] = {value}")
            optional.append("\n".join(lines))
        else:
            local = f"v{label}"
            lines = [f"    v = o.{a.name}"]
            if wrong is not None:
                lines.append(
                    f"    if {wrong}: _bad({cls.__name__!r}, {a.name!r}, {key!r}, _tp_{label}, v)"
                )
            lines.append(f"    {local} = {value}")
            checks.append("\n".join(lines))
            required.append(f"{key!r}: {local}")
    entries = ([f"{tag[0]!r}: {tag[1]!r}"] if tag is not None else []) + required
    name = f"encode_{cls.__name__}"
    source = "\n".join(
        [
            f"def {name}(o):",
            *checks,
            f"    res = {{{', '.join(entries)}}}",
            *optional,
            "    return res",
        ]
    )
    filename = f"<acpkit.codec encoder {cls.__module__}.{cls.__qualname__}>"
    exec(compile(source, filename, "exec"), names)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return names[name]  # type: ignore[no-any-return]


def _bad(model: str, field: str, key: str, expected: str, value: object) -> None:
    raise EncodeError(model, field, key, expected, value)
