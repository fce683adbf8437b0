"""
The codec in the reverse direction: JSON generated from the official schema decodes and
re-encodes to the same JSON.

The only differences allowed are the ones the codec documents (acpkit/codec.py):

- an optional field (default ``None``) sent as ``null`` comes back absent (``None`` means
  absent); the null-meaningful fields (default ``ABSENT``) and required fields must keep
  their ``null``;
- a field left out comes back with its default when the model has a non-``None`` default;
- in lenient mode, keys the model does not know are dropped (only in the unknown-keys test).

Everything else, including ``_meta`` contents (nulls too), must come back unchanged.
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import acpkit.schema
import acpkit.unstable
from acpkit.codec import DecodeError, decode, encode, wire_name
from acpkit.schema import ABSENT
from acpkit.testing.jsonschema import for_definition, load_schema
from tests.helpers import examples

# A tenth-ish of the profile's examples per model: the tests are parametrized over every
# model of both schemas (60 in the ci profile: 10 and 4 per model).
ROUND_TRIP = settings(max_examples=examples(1 / 6), suppress_health_check=[HealthCheck.too_slow])
UNKNOWN_KEYS = settings(max_examples=examples(1 / 15), suppress_health_check=[HealthCheck.too_slow])


def _message_types() -> list[Any]:
    """Every $def with an ``x-method`` (params, results, notifications), plus the unions."""
    params: list[Any] = []
    for unstable in (False, True):
        defs = load_schema(unstable=unstable)["$defs"]
        names = [n for n in defs if "x-method" in defs[n]] + ["SessionUpdate", "ContentBlock"]
        label = "unstable" if unstable else "stable"
        params.extend(pytest.param(n, unstable, id=f"{label}-{n}") for n in names)
    return params


def _models(unstable: bool) -> ModuleType:
    return acpkit.unstable if unstable else acpkit.schema


def _field_default(field: attrs.Attribute[Any]) -> Any:
    default = field.default
    factory = getattr(default, "factory", None)
    if factory is not None and hasattr(default, "takes_self"):  # an attrs.Factory
        return factory(None) if getattr(default, "takes_self", False) else factory()
    return default


def _json_equal(left: Any, right: Any) -> bool:
    """JSON equality: numbers by value (1 == 1.0), booleans never equal to numbers."""
    if isinstance(left, bool) or isinstance(right, bool):
        return left is right
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(_json_equal, left, right))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_json_equal(left[k], right[k]) for k in left)
    return type(left) is type(right) and left == right


def _differences(model: Any, sent: Any, back: Any, path: str, unknown_ok: bool) -> list[str]:
    """Where ``back`` (re-encoded) differs from ``sent`` beyond the documented rules."""
    if isinstance(sent, dict) and isinstance(back, dict):
        return _object_differences(model, sent, back, path, unknown_ok)
    if isinstance(sent, list) and isinstance(back, list):
        if len(sent) != len(back):
            return [f"{path}: {len(sent)} items sent, {len(back)} back"]
        models = list(model) if isinstance(model, list | tuple) else [None] * len(sent)
        if len(models) != len(sent):
            models = [None] * len(sent)
        return [
            problem
            for index, (m, s, b) in enumerate(zip(models, sent, back, strict=True))
            for problem in _differences(m, s, b, f"{path}[{index}]", unknown_ok)
        ]
    if not _json_equal(sent, back):
        return [f"{path}: sent {_show(sent)}, back {_show(back)}"]
    return []


def _object_differences(
    model: Any, sent: dict[str, Any], back: dict[str, Any], path: str, unknown_ok: bool
) -> list[str]:
    fields = (
        {wire_name(f): f for f in attrs.fields(type(model))} if attrs.has(type(model)) else None
    )
    problems: list[str] = []
    for key in sorted(sent.keys() | back.keys()):
        where = f"{path}.{key}"
        field = fields.get(key) if fields is not None else None
        if key in sent and key in back:
            if field is not None:
                child = getattr(model, field.name)
            elif isinstance(model, dict):
                child = model.get(key)
            else:
                child = None
            problems.extend(_differences(child, sent[key], back[key], where, unknown_ok))
        elif key in sent:
            optional_null = field is not None and sent[key] is None and field.default is None
            ignored_unknown = unknown_ok and fields is not None and field is None
            if not (optional_null or ignored_unknown):
                problems.append(f"{where}: sent {_show(sent[key])}, missing on re-encode")
        else:
            filled = field is not None and _json_equal(
                _as_json(encode(_field_default(field))), back[key]
            )
            if not filled:
                problems.append(f"{where}: not sent, re-encoded as {_show(back[key])}")
    return problems


def _as_json(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 120 else text[:117] + "..."


def _round_trip(name: str, unstable: bool, value: Any, unknown_ok: bool) -> None:
    cls = getattr(_models(unstable), name)
    try:
        model = decode(cls, value)
    except DecodeError as error:
        pytest.fail(f"schema-valid {name} rejected: {error}\n{_show(value)}")
    encoded = encode(model)
    wire = json.dumps(encoded, allow_nan=False)  # JSON-able builtins, no NaN
    problems = _differences(model, value, json.loads(wire), "$", unknown_ok)
    assert not problems, "\n".join(problems) + f"\nsent: {_show(value)}"


@pytest.mark.parametrize(("name", "unstable"), _message_types())
@ROUND_TRIP
@given(data=st.data())
def test_schema_json_decodes_and_re_encodes_unchanged(name: str, unstable: bool, data: Any) -> None:
    """decode then encode gives back the schema-generated JSON (documented rules aside)."""
    value = data.draw(for_definition(name, unstable=unstable, unknown_keys=False))
    _round_trip(name, unstable, value, unknown_ok=False)


@pytest.mark.parametrize(("name", "unstable"), _message_types())
@UNKNOWN_KEYS
@given(data=st.data())
def test_unknown_keys_are_ignored_in_lenient_mode(name: str, unstable: bool, data: Any) -> None:
    """Schema-valid JSON with unknown keys decodes leniently; only those keys are dropped."""
    value = data.draw(for_definition(name, unstable=unstable, unknown_keys=True))
    _round_trip(name, unstable, value, unknown_ok=True)


@pytest.mark.parametrize(("name", "unstable"), _message_types())
@UNKNOWN_KEYS
@given(data=st.data())
def test_strict_mode_accepts_or_reports(name: str, unstable: bool, data: Any) -> None:
    """Strict decoding of schema-valid JSON gives the lenient result or rejects an unknown.

    Strict mode refuses the schema's open-union 'other' variants (unknown tags) and unknown
    values of open enums by design; nothing else schema-valid may be refused, it must never
    crash with another exception, and it must decode to the same value as lenient mode.
    """
    value = data.draw(for_definition(name, unstable=unstable, unknown_keys=False))
    cls = getattr(_models(unstable), name)
    try:
        strict = decode(cls, value, strict=True)
    except DecodeError as error:
        assert error.path.startswith("$")
        assert "unknown" in error.message, str(error)
        return
    assert encode(strict) == encode(decode(cls, value))


def test_every_message_type_has_a_model() -> None:
    """acpkit.schema / acpkit.unstable define a class or alias for each message $def."""
    for param in _message_types():
        name, unstable = param.values
        assert hasattr(_models(unstable), name), name


# The comparison itself must not hide codec bugs.

TEXT_BLOCK = {"type": "text", "text": "hi", "annotations": None, "_meta": {"k": None, "n": 1}}


def _text_model() -> Any:
    return decode(acpkit.schema.ContentBlock, TEXT_BLOCK)


def test_comparison_allows_null_optional_fields_to_come_back_absent() -> None:
    """An optional field sent as null and re-encoded absent is the documented behaviour."""
    back = {"type": "text", "text": "hi", "_meta": {"k": None, "n": 1}}
    assert _differences(_text_model(), TEXT_BLOCK, back, "$", unknown_ok=False) == []


@pytest.mark.parametrize(
    ("back", "where"),
    [
        ({"type": "text", "text": "hi", "_meta": {"n": 1}}, "$._meta.k"),
        ({"type": "text", "text": "hi", "_meta": {"k": None, "n": True}}, "$._meta.n"),
        ({"type": "text", "text": "hi", "_meta": {"k": None, "n": 1, "x": 0}}, "$._meta.x"),
        ({"type": "text", "_meta": {"k": None, "n": 1}}, "$.text"),
        ({"type": "text", "text": "hi", "_meta": {"k": None, "n": 1}, "uri": "x"}, "$.uri"),
    ],
    ids=["meta-null-dropped", "number-became-bool", "meta-key-added", "field-dropped", "added"],
)
def test_comparison_reports_real_differences(back: dict[str, Any], where: str) -> None:
    """Dropped, changed or invented keys are reported, including null values inside _meta."""
    problems = _differences(_text_model(), TEXT_BLOCK, back, "$", unknown_ok=True)
    assert [p.split(":")[0] for p in problems] == [where]


def test_comparison_keeps_null_meaningful_fields() -> None:
    """A null-meaningful field (default ABSENT) sent as null must not come back absent."""
    sent = {"sessionUpdate": "session_info_update", "title": None}
    model = decode(acpkit.schema.SessionUpdate, sent)
    assert attrs.fields_dict(type(model))["title"].default is ABSENT
    problems = _differences(model, sent, {"sessionUpdate": "session_info_update"}, "$", False)
    assert [p.split(":")[0] for p in problems] == ["$.title"]
    assert _differences(model, sent, _as_json(encode(model)), "$", unknown_ok=False) == []


def test_comparison_keeps_required_nulls() -> None:
    """A required field whose value is null (a null request id) must be re-encoded as null."""
    sent = {"requestId": None}
    model = decode(acpkit.schema.CancelRequestNotification, sent)
    problems = _differences(model, sent, {}, "$", unknown_ok=False)
    assert [p.split(":")[0] for p in problems] == ["$.requestId"]
    assert _differences(model, sent, _as_json(encode(model)), "$", unknown_ok=False) == []
