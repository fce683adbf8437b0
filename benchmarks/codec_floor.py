"""The floor of acpkit's codec design, for ``benchmarks/bench_codec.py``: straight-line
Python generated for one value's exact shape, with no type check, no dispatch and no call
per object.

:func:`decode_floor` makes a function that turns the dict of that shape into the same
model tree the codec makes (each instance a slot twin filled, then given its class, as
:mod:`acpkit.codec.fast` does); :func:`encode_floor` one that turns a model of that shape
into the dict the codec writes (a dict display, the omitted fields left out in advance).
Whatever the codec does beyond them (checks, choosing the variant, one call per object)
is what a pure-Python codec on orjson may still remove; what they cost is not.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import attrs

from acpkit.codec.fast import slot_twin
from acpkit.codec.wire import wire_name
from acpkit.schema import ABSENT


class _Source:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.env: dict[str, Any] = {}
        self.n = 0

    def name(self, prefix: str, value: Any = None) -> str:
        self.n += 1
        name = f"{prefix}{self.n}"
        if value is not None:
            self.env[name] = value
        return name

    def function(self, name: str, result: str) -> Callable[[Any], Any]:
        body = "\n".join(f"    {line}" for line in [*self.lines, f"return {result}"])
        exec(compile(f"def {name}(d):\n{body}\n", f"<codec floor {name}>", "exec"), self.env)
        return self.env[name]  # type: ignore[no-any-return]


def decode_floor(model: Any, data: dict[str, Any]) -> Callable[[dict[str, Any]], Any]:
    """A function turning ``data`` (the dict ``model`` was decoded from) into an equal
    model, by the shortest code this design allows."""
    src = _Source()
    result = _decode_value(src, model, data, "d")
    return src.function("decode_floor", result)


def _decode_value(src: _Source, value: Any, data: Any, var: str) -> str:
    if attrs.has(type(value)):
        return _decode_model(src, value, data, var)
    if isinstance(value, list) and any(attrs.has(type(x)) for x in value):
        items = []
        for i, item in enumerate(value):
            sub = src.name("d")
            src.lines.append(f"{sub} = {var}[{i}]")
            items.append(_decode_value(src, item, data[i], sub))
        return f"[{', '.join(items)}]"
    if isinstance(value, enum.Enum):
        table = src.name("E", type(value)._value2member_map_)
        return f"{table}[{var}]"
    return var


def _decode_model(src: _Source, model: Any, data: dict[str, Any], var: str) -> str:
    cls = type(model)
    twin = slot_twin(cls)
    assert twin is not None, cls
    made = src.name("x")
    sets = []
    for a in attrs.fields(cls):
        key = wire_name(a)
        value = getattr(model, a.name)
        if key in data:
            sub = src.name("d")
            src.lines.append(f"{sub} = {var}[{key!r}]")
            expr = _decode_value(src, value, data[key], sub)
        elif value is None or value is ABSENT or value is False:
            expr = repr(value) if value is not ABSENT else src.name("ABSENT", ABSENT)
        else:  # a default made by a factory (an empty list, a model of defaults)
            expr = _decode_value(src, value, {}, src.name("EMPTY", {}))
        sets.append(f"{made}.{a.name} = {expr}")
    src.lines.append(f"{made} = {src.name('T', twin)}()")
    src.lines.extend(sets)
    src.lines.append(f"{made}.__class__ = {src.name('C', cls)}")
    return made


def encode_floor(model: Any) -> Callable[[Any], dict[str, Any]]:
    """A function turning a model of ``model``'s shape into the dict the codec writes."""
    src = _Source()
    return src.function("encode_floor", _encode_value(src, model, "d"))


def _encode_value(src: _Source, value: Any, path: str) -> str:
    if attrs.has(type(value)):
        entries = []
        tag = getattr(type(value), "__acp_tag__", None)
        if tag is not None:
            entries.append(f"{tag[0]!r}: {tag[1]!r}")
        for a in attrs.fields(type(value)):
            sub = getattr(value, a.name)
            if sub is ABSENT or (sub is None and a.default is None):
                continue
            entries.append(f"{wire_name(a)!r}: {_encode_value(src, sub, f'{path}.{a.name}')}")
        return "{" + ", ".join(entries) + "}"
    if isinstance(value, list) and any(attrs.has(type(x)) for x in value):
        items = [_encode_value(src, x, f"{path}[{i}]") for i, x in enumerate(value)]
        return f"[{', '.join(items)}]"
    if isinstance(value, enum.Enum):
        return f"{path}.value"
    return path
