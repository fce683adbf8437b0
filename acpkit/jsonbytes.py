"""JSON text <-> builtins with orjson, and :mod:`json` wherever orjson would differ.

orjson parses ACP lines 2-4x faster than :func:`json.loads` and writes them ~10x faster
than :class:`json.JSONEncoder`; both the codec (:func:`acpkit.codec.loads` /
:func:`acpkit.codec.dumps`) and the JSON-RPC engine (:mod:`acpkit.rpc_classify`) use it,
with the standard library for what orjson does differently:

- integers past 64 bits: orjson reads them as floats (lossy) and cannot write them. A text
  with a run of 19 digits is left to :mod:`json` (one ``bytes.translate``: a regular
  expression costs more than the parse; then ``bytes.find``, not ``in``, which first tries
  the needle as an integer and raises and clears a ``TypeError`` on every call);
- ``NaN`` / ``Infinity``: orjson refuses them on reading (json's own rules then apply) and
  writes NaN as ``null``, so an output containing ``null`` is written again by json
  (which raises ``ValueError`` for NaN, as it always did);
- lone surrogates, non-``str`` keys, other types: orjson raises, json decides.
  Dataclasses and datetimes, which orjson would write and json refuses, are refused.

Output bytes are the compact json encoder's (``ensure_ascii=False``, ``","``/``":"``),
but for the exponent of small floats (orjson ``1e-7``, json ``1e-07``: the same number).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, Final

__all__ = ["NOT_PARSED", "dumps", "dumps_or_none", "loads", "loads_or_not_parsed"]

NOT_PARSED: Final = object()
"""What :func:`loads_or_not_parsed` returns for text it leaves to :mod:`json`."""

_DIGITS_AS_ZERO = bytes(48 if 48 <= i <= 57 else 32 for i in range(256))
_LONG_NUMBER = b"0" * 19
_json_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def _load_orjson() -> None:
    """Import orjson on first use (its own imports, datetime and uuid, would add
    milliseconds to ``import acpkit.codec``) and bind the two functions used below."""
    global _orjson_loads, _orjson_dumps
    import orjson

    options = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
    _orjson_loads = orjson.loads
    _orjson_dumps = functools.partial(orjson.dumps, option=options)


def _first_loads(data: bytes) -> Any:
    _load_orjson()
    return _orjson_loads(data)


def _first_dumps(obj: Any) -> bytes:
    _load_orjson()
    return _orjson_dumps(obj)


_orjson_loads: Callable[[bytes], Any] = _first_loads
_orjson_dumps: Callable[[Any], bytes] = _first_dumps


def loads_or_not_parsed(data: bytes) -> Any:
    """The value of ``data`` when orjson reads it exactly as json would, else
    :data:`NOT_PARSED` (invalid text too: the caller's json path reports it)."""
    if data.translate(_DIGITS_AS_ZERO).find(_LONG_NUMBER) >= 0:
        return NOT_PARSED
    try:
        return _orjson_loads(data)
    except ValueError:  # orjson.JSONDecodeError
        return NOT_PARSED


def loads(data: bytes | str) -> Any:
    """Parse JSON text to builtins, as :func:`json.loads` does (``ValueError`` on invalid
    JSON; ``NaN`` accepted, huge integers exact), with orjson where it agrees."""
    # loads_or_not_parsed inlined for bytes: one Python call per message on the read path.
    raw = data if type(data) is bytes else _as_bytes(data)
    if raw.translate(_DIGITS_AS_ZERO).find(_LONG_NUMBER) < 0:
        try:
            return _orjson_loads(raw)
        except ValueError:  # orjson.JSONDecodeError
            pass
    return json.loads(data)


def _as_bytes(data: bytes | str) -> bytes:
    return data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data


def dumps_or_none(obj: Any) -> bytes | None:
    """orjson's compact UTF-8 JSON for ``obj`` when it is the json encoder's, else None."""
    try:
        out = _orjson_dumps(obj)
    except TypeError:  # orjson.JSONEncodeError
        return None
    return None if out.find(b"null") >= 0 else out


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON (``ensure_ascii=False``, no NaN/Infinity), no trailing newline;
    ``TypeError`` / ``ValueError`` for what is not JSON."""
    out = dumps_or_none(obj)
    if out is None:
        return _json_dumps(obj).encode("utf-8")
    return out
