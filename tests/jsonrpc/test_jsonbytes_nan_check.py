"""
`acpkit.jsonrpc.jsonbytes.dumps` writes with orjson and falls back to the json encoder only
where orjson's bytes may differ: a ``null`` *value* (orjson writes NaN and infinities as
``null``; json refuses them). The word ``null`` inside a string stays on the fast path.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acpkit.jsonrpc.jsonbytes import dumps, dumps_or_none

_reference = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats()  # NaN and both infinities included
    | st.text(alphabet=st.sampled_from('null:,[]{} "\\ab\u00e9'), max_size=12)
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


def test_the_word_null_in_a_string_stays_on_the_fast_path() -> None:
    """A chunk of code saying ``x = null`` is written by orjson, not again by json."""
    message = {"text": "let x = null; if (y == null) {}", "type": "text"}
    assert dumps_or_none(message) == _reference(message).encode()


@pytest.mark.parametrize(
    "value",
    [float("nan"), float("inf"), -float("inf"), [float("nan")], [1, float("nan")], {"x": math.inf}],
)
def test_nan_and_infinities_are_still_refused(value: Any) -> None:
    """NaN and infinities, wherever they are, raise ValueError as json does."""
    assert dumps_or_none(value) is None
    with pytest.raises(ValueError):
        dumps(value)


def _has_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, list):
        return any(_has_float(item) for item in value)
    if isinstance(value, dict):
        return any(_has_float(item) for item in value.values())
    return False


def _same_text_read(a: Any, b: Any) -> bool:
    """``a`` and ``b`` (values read from JSON text) are the same, types, numbers, strings
    and key order included."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same_text_read(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_same_text_read, a, b))
    return bool(a == b)


@given(_values)
def test_dumps_is_the_json_encoders_output(value: Any) -> None:
    """For any JSON-like value, dumps gives json's compact bytes, or both refuse it; a
    float may be written in orjson's notation instead (``1.5e-7`` for json's ``1.5e-07``,
    ``0.00001`` for ``1e-05``: the same number), so a value holding floats reads back
    the same from both texts, floats exactly."""
    try:
        expected = _reference(value).encode()
    except ValueError:
        with pytest.raises(ValueError):
            dumps(value)
        return
    written = dumps(value)
    if _has_float(value):
        assert _same_text_read(json.loads(written), json.loads(expected)), (written, expected)
    else:
        assert written == expected


@pytest.mark.parametrize(
    ("value", "orjson_text"),
    [
        (1.5e-07, b"1.5e-7"),
        (1e-05, b"0.00001"),
        ([1.2017950240340976e-06], b"[1.2017950240340976e-6]"),
    ],
)
def test_small_floats_in_orjson_notation(value: Any, orjson_text: bytes) -> None:
    """The floats whose notation differs from json's are written as orjson writes them,
    and read back as the same number."""
    assert dumps(value) == orjson_text
    assert json.loads(orjson_text) == value
