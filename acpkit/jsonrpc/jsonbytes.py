"""JSON text <-> builtins with orjson, and :mod:`json` wherever orjson would differ.

orjson parses ACP lines 2-4x faster than :func:`json.loads` and writes them ~10x faster
than :class:`json.JSONEncoder`; both the codec (:func:`acpkit.codec.loads` /
:func:`acpkit.codec.dumps`) and the JSON-RPC engine (:mod:`acpkit.jsonrpc.classify`) use it,
with the standard library for what orjson does differently:

- integers past 64 bits: orjson reads them as floats (lossy) and cannot write them. A text
  with a run of 19 digits is left to :mod:`json` (one ``bytes.translate``: a regular
  expression costs more than the parse; then ``bytes.find``, not ``in``, which first tries
  the needle as an integer and raises and clears a ``TypeError`` on every call);
- ``NaN`` / ``Infinity``: orjson refuses them on reading (json's own rules then apply) and
  writes NaN as ``null``, so an output holding a ``null`` value (not merely the word in a
  string) is written again by json
  (which raises ``ValueError`` for NaN, as it always did);
- lone surrogates, non-``str`` keys, other types: orjson raises, json decides.
  Dataclasses and datetimes, which orjson would write and json refuses, are refused.

Output bytes are the compact json encoder's (``ensure_ascii=False``, ``","``/``":"``),
but for the notation of some small floats (orjson ``1e-7``, json ``1e-07``; orjson
``0.00001``, json ``1e-05``: the same number).

Nesting depth
=============

Text nested deeper than :data:`MAX_NESTING_DEPTH` (254) arrays and objects is not read:
:func:`loads` raises :class:`NestingTooDeep` (a ``ValueError``) and
:func:`loads_or_not_parsed` returns :data:`TOO_DEEP`, whatever the depth (100,000 levels
too).  254 is the deepest value orjson writes, so whatever acpkit reads it can write back
on the fast path, and recursive Python code (``repr``, :mod:`json`, :mod:`copy`, a
handler's own walk) has more than 700 frames to spare below the default recursion limit.
JSON allows a parser to limit nesting (RFC 8259 section 9); serde_json, which Rust agents
use, stops at 128.

The check costs nothing on text of at most 509 bytes (two bytes per level: it cannot
nest deeper); on longer text it is one ``orjson.dumps`` of the value orjson read (which
refuses what nests deeper than 254), a fraction of the parse.  Deeper text never reaches
a recursive parser past its limit: orjson stops at 1024 levels, :mod:`json`'s
``RecursionError`` is caught, and the Python helper (:func:`nesting_exceeds`) is a loop
with its own stack.  Writing is bounded too: :func:`dumps` raises :class:`NestingTooDeep`
instead of letting :mod:`json` recurse, and :func:`dumps_or_none` refuses values nested
deeper than 254 (the JSON-RPC engine's limit on what it sends, like its line length).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, Final

__all__ = [
    "MAX_NESTING_DEPTH",
    "NOT_PARSED",
    "TOO_DEEP",
    "NestingTooDeep",
    "dumps",
    "dumps_or_none",
    "loads",
    "loads_or_not_parsed",
    "nesting_exceeds",
]

NOT_PARSED: Final = object()
"""What :func:`loads_or_not_parsed` returns for text it leaves to :mod:`json`."""

TOO_DEEP: Final = object()
"""What :func:`loads_or_not_parsed` returns for text nested deeper than
:data:`MAX_NESTING_DEPTH`."""

MAX_NESTING_DEPTH: Final = 254
"""The deepest nesting of arrays and objects read or written (see "Nesting depth")."""

#: Text of at most this many bytes cannot nest deeper than MAX_NESTING_DEPTH (``[]``:
#: two bytes a level).
_SHALLOW_LENGTH: Final = 2 * MAX_NESTING_DEPTH + 1


class NestingTooDeep(ValueError):
    """JSON text or a value nested deeper than the limit (:data:`MAX_NESTING_DEPTH`)."""

    def __init__(self, limit: int = MAX_NESTING_DEPTH) -> None:
        super().__init__(f"nested deeper than {limit} levels of arrays and objects")
        #: The limit that was exceeded.
        self.limit = limit


_CONTAINERS: Final = (dict, list, tuple)


def nesting_exceeds(value: Any, limit: int = MAX_NESTING_DEPTH) -> bool:
    """
    True when ``value`` nests dicts, lists and tuples more than ``limit`` deep (a scalar
    is depth 0, ``[]`` depth 1).

    A loop with its own stack, never a recursion; it stops at the first container past
    the limit, so a cycle ends it too.  It visits each member of each container once.
    """
    if not isinstance(value, _CONTAINERS):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        container, depth = pop()
        if depth > limit:
            return True
        members = container.values() if isinstance(container, dict) else container
        for member in members:
            if isinstance(member, _CONTAINERS):
                push((member, depth + 1))
    return False


_DIGITS_AS_ZERO = bytes(48 if 48 <= i <= 57 else 32 for i in range(256))
_LONG_NUMBER = b"0" * 19
_json_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def _load_orjson() -> None:
    """Import orjson on first use (its own imports, datetime and uuid, would add
    milliseconds to ``import acpkit.codec``) and bind the functions used below."""
    global _orjson_loads, _orjson_dumps, _write_check
    import orjson

    options = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
    _orjson_loads = orjson.loads
    _orjson_dumps = functools.partial(orjson.dumps, option=options)
    if _refuses_deeper_than(orjson.dumps, MAX_NESTING_DEPTH):
        _write_check = orjson.dumps


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def _refuses_deeper_than(orjson_dumps: Callable[[Any], bytes], limit: int) -> bool:
    """
    True when ``orjson_dumps`` refuses a value nested ``limit + 1`` deep: then whatever
    it writes nests at most ``limit`` deep, and writing a value proves it shallow enough
    (orjson 3.x writes 254 levels).  Else every check is :func:`nesting_exceeds`.
    """
    try:
        orjson_dumps(_nested(limit + 1))
    except TypeError:
        return True
    return False


def _unchecked(value: Any) -> bytes:
    """The write check when orjson writes deeper than the limit: every value is walked."""
    raise TypeError("depth not checked by orjson")


def _too_deep(value: Any) -> bool:
    """
    Whether a value orjson read nests deeper than the limit.  orjson writes every value
    it reads unless it nests deeper than orjson's own writing limit (at most ours), so
    one ``orjson.dumps`` (C, a fraction of the parse) proves it shallow; when it
    refuses, :func:`nesting_exceeds` decides exactly.
    """
    try:
        _write_check(value)
    except TypeError:  # orjson.JSONEncodeError
        return nesting_exceeds(value)
    return False


def _first_loads(data: bytes) -> Any:
    _load_orjson()
    return _orjson_loads(data)


def _first_dumps(obj: Any) -> bytes:
    _load_orjson()
    return _orjson_dumps(obj)


_orjson_loads: Callable[[bytes], Any] = _first_loads
_orjson_dumps: Callable[[Any], bytes] = _first_dumps
#: orjson.dumps once _load_orjson has checked that it refuses what nests deeper than
#: MAX_NESTING_DEPTH (so what it writes is shallow enough); else every check is the walk.
_write_check: Callable[[Any], bytes] = _unchecked


def loads_or_not_parsed(data: bytes) -> Any:
    """The value of ``data`` when orjson reads it exactly as json would, :data:`TOO_DEEP`
    when it nests deeper than :data:`MAX_NESTING_DEPTH`, else :data:`NOT_PARSED`
    (invalid text too: the caller's json path reports it; text orjson leaves to json may
    be too deep as well: check the value, :func:`nesting_exceeds`, or use :func:`loads`)."""
    if data.translate(_DIGITS_AS_ZERO).find(_LONG_NUMBER) >= 0:
        return NOT_PARSED
    try:
        value = _orjson_loads(data)
    except ValueError:  # orjson.JSONDecodeError (deeper than 1024 levels too)
        return NOT_PARSED
    if len(data) > _SHALLOW_LENGTH:
        try:  # _too_deep inlined: one Python call less per message
            _write_check(value)
        except TypeError:
            if nesting_exceeds(value):
                return TOO_DEEP
    return value


def loads(data: bytes | str) -> Any:
    """Parse JSON text to builtins, as :func:`json.loads` does (``ValueError`` on invalid
    JSON; ``NaN`` accepted, huge integers exact), with orjson where it agrees.
    :class:`NestingTooDeep` (a ``ValueError``) for text nested deeper than
    :data:`MAX_NESTING_DEPTH`, never a ``RecursionError``."""
    # loads_or_not_parsed inlined for bytes: one Python call per message on the read path.
    raw = data if type(data) is bytes else _as_bytes(data)
    if raw.translate(_DIGITS_AS_ZERO).find(_LONG_NUMBER) < 0:
        try:
            value = _orjson_loads(raw)
        except ValueError:  # orjson.JSONDecodeError
            pass
        else:
            if len(raw) > _SHALLOW_LENGTH and _too_deep(value):
                raise NestingTooDeep()
            return value
    try:
        value = json.loads(data)
    except RecursionError:
        raise NestingTooDeep() from None
    if len(raw) > _SHALLOW_LENGTH and nesting_exceeds(value):
        raise NestingTooDeep()
    return value


def _as_bytes(data: bytes | str) -> bytes:
    return data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data


def dumps_or_none(obj: Any) -> bytes | None:
    """orjson's compact UTF-8 JSON for ``obj`` when it is the json encoder's, else None.
    :class:`NestingTooDeep` when ``obj`` nests deeper than :data:`MAX_NESTING_DEPTH`."""
    try:
        out = _orjson_dumps(obj)
    except TypeError:  # orjson.JSONEncodeError: a type, a huge int, a surrogate, depth
        if nesting_exceeds(obj):
            raise NestingTooDeep() from None
        return None
    if _write_check is _unchecked and len(out) > _SHALLOW_LENGTH:
        if nesting_exceeds(obj):  # (only if this orjson writes deeper than the limit)
            raise NestingTooDeep()
    # (Written by an orjson that refuses what nests deeper than the limit: shallow enough.)
    if out.find(b"null") < 0:  # the common case: one search
        return out
    return None if _may_hold_nan(out) else out


def _may_hold_nan(out: bytes) -> bool:
    """
    Whether orjson's compact output may hold a NaN or an infinity, which it writes as a
    ``null`` *value*: after ``:``, ``[`` or ``,`` (no whitespace in compact output), or the
    whole text. ``null`` inside a string (a chunk of code that says ``x = null``) is not
    one; a ``:null`` inside a string only sends the text to the slow path, which agrees.
    """
    find = out.find  # (``find``, not ``in``: see the module's docstring)
    return find(b":null") >= 0 or find(b",null") >= 0 or find(b"[null") >= 0 or out == b"null"


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON (``ensure_ascii=False``, no NaN/Infinity), no trailing newline;
    ``TypeError`` / ``ValueError`` for what is not JSON, :class:`NestingTooDeep` (a
    ``ValueError``) for what nests deeper than :data:`MAX_NESTING_DEPTH`."""
    out = dumps_or_none(obj)
    if out is None:
        return _json_dumps(obj).encode("utf-8")
    return out
