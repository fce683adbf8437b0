"""
The codec's three converters (made on first use) and the functions on them: :func:`decode`,
:func:`encode`, :func:`decode_json`, :func:`encode_json`.
"""

from __future__ import annotations

import typing
from typing import Any, TypeVar

import cattrs

from acpkit.codec.decode_errors import DecodeError, locate, render_path
from acpkit.codec.hooks import Hooks, install
from acpkit.codec.primitives import StructureHook, UnstructureHook
from acpkit.codec.wire import is_model, is_our_model
from acpkit.jsonrpc.jsonbytes import dumps, loads

T = TypeVar("T")


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


_HOOKS: dict[str, Hooks] = {}


def hooks(name: str) -> Hooks:
    found = _HOOKS.get(name)
    if found is None:
        forbid, detailed = _CONVERTER_OPTIONS[name]
        conv = cattrs.Converter(forbid_extra_keys=forbid, detailed_validation=detailed)
        found = _HOOKS[name] = install(conv)
    return found


_LENIENT: dict[Any, StructureHook] = {}


_STRICT: dict[Any, StructureHook] = {}


_FAST: dict[Any, StructureHook] = {}


_ENCODERS: dict[type, UnstructureHook] = {}


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
    if is_our_model(cls) and getattr(cls, "__acp_unknown__", None) is None:
        _OBJECT_ONLY.add(cls)
        return hooks("fast").conv.get_structure_hook(cls)
    return hooks("fast").hook(cls)


def _decode_detailed(cls: Any, obj: object, strict: bool) -> Any:
    cache = _STRICT if strict else _LENIENT
    fn = cache.get(cls)
    if fn is None:
        fn = cache[cls] = hooks("strict" if strict else "lenient").hook(cls)
    try:
        return fn(obj, cls)
    except RecursionError:
        raise DecodeError("$", "input nested too deeply") from None
    except Exception as e:
        path, message = locate(e)
        raise DecodeError(render_path(path), message) from None


def encode(value: object) -> Any:
    """Encode a model (or a list/dict of models) to JSON-able builtins; tags included."""
    fn = _ENCODERS.get(type(value))
    if fn is not None:
        return fn(value)
    if is_model(type(value)):
        fn = _ENCODERS[type(value)] = hooks("lenient").conv.get_unstructure_hook(type(value))
        return fn(value)
    return hooks("lenient").unstructure_runtime(value)


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
