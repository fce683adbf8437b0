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


@given(_values)
def test_dumps_is_the_json_encoders_output(value: Any) -> None:
    """For any JSON-like value, dumps gives json's compact bytes, or both refuse it."""
    try:
        expected = _reference(value).encode()
    except ValueError:
        with pytest.raises(ValueError):
            dumps(value)
        return
    assert dumps(value) == expected
