"""Tests for acpkit.jsonrpc.classify: the pure decode and classification of JSON-RPC messages."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acpkit.errors import MethodNotFound
from acpkit.jsonrpc.classify import (
    HugeInt,
    Invalid,
    Notification,
    Request,
    Response,
    Unparsable,
    classify,
    decode_message,
    encode_message,
    error_message,
    is_plain_request,
    parse_decimal_id,
    result_message,
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error", "code", "x"])
            | st.text(max_size=5),
            children,
            max_size=6,
        )
    ),
    max_leaves=20,
)

ids = st.integers() | st.text(max_size=10)
params = st.none() | st.dictionaries(st.text(max_size=5), st.integers(), max_size=3)


@given(json_values)
def test_any_json_value_classifies_without_raising(value: Any) -> None:
    """Every JSON value is exactly one event; invalid ones say why."""
    event = classify(value)
    assert isinstance(event, Request | Notification | Response | Invalid)
    if isinstance(event, Invalid):
        assert event.reason
        if event.kind == "notification":
            assert not event.answer


@given(ids, st.text(max_size=10), params)
def test_request_round_trip(request_id: Any, method: str, p: Any) -> None:
    """An encoded request decodes and classifies back to the same id, method and params."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if p is not None:
        message["params"] = p
    decoded = decode_message(encode_message(message))
    assert isinstance(decoded, tuple)
    event = classify(decoded[0])
    assert isinstance(event, Request)
    assert (event.id, event.method, event.params) == (request_id, method, p)


@given(st.text(max_size=10), params)
def test_notification_round_trip(method: str, p: Any) -> None:
    """An encoded notification classifies back to its method and params."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": p}
    event = classify(json.loads(encode_message(message)))
    assert isinstance(event, Notification)
    assert (event.method, event.params) == (method, p)


@given(ids, json_values)
def test_response_round_trip(request_id: Any, result: Any) -> None:
    """result_message and error_message classify back to Response with the same id."""
    event = classify(json.loads(encode_message(result_message(request_id, result))))
    assert isinstance(event, Response)
    assert (event.id, event.result, event.error) == (request_id, result, None)
    event = classify(json.loads(encode_message(error_message(request_id, MethodNotFound("m")))))
    assert isinstance(event, Response) and event.error is not None
    assert event.error["code"] == -32601


@pytest.mark.parametrize(
    ("value", "kind", "answer_id", "reason"),
    [
        ([], "message", None, "batches"),
        (3, "message", None, "JSON object"),
        ({}, "message", None, "not a request"),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "m"}, "request", None, "the id"),
        ({"jsonrpc": "1.0", "id": 7, "method": "m"}, "request", 7, "jsonrpc"),
        ({"jsonrpc": "2.0", "id": "a", "method": 1}, "request", "a", "method must"),
        ({"jsonrpc": "2.0", "method": 1}, "notification", None, "invalid notification"),
        ({"jsonrpc": "2.0", "result": 1}, "response", None, "must have an id"),
        ({"jsonrpc": "2.0", "id": 1, "result": 1, "error": {}}, "response", None, "both"),
        ({"jsonrpc": "2.0", "id": 1, "error": {"code": True}}, "response", None, "integer code"),
        ({"jsonrpc": "2.0", "id": None, "result": 1}, "response", None, "the id must"),
    ],
)
def test_invalid_messages(value: Any, kind: str, answer_id: Any, reason: str) -> None:
    """Each invalid shape has its kind, the id to answer with, and a reason."""
    event = classify(value)
    assert isinstance(event, Invalid)
    assert (event.kind, event.answer_id) == (kind, answer_id)
    assert reason in event.reason
    assert event.junk == (kind == "message" and not isinstance(value, list | dict))


def test_malformed_response_keeps_its_id_for_matching_only() -> None:
    """A malformed response's id is kept to fail our request, never echoed."""
    event = classify({"jsonrpc": "1.0", "id": 4, "result": None})
    assert isinstance(event, Invalid)
    assert event.response_id == 4 and event.answer_id is None


def test_null_id_error_is_a_response_without_id() -> None:
    """An error with id null is a Response whose id is None."""
    event = classify({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "x"}})
    assert isinstance(event, Response) and event.id is None and event.error is not None


def test_decode_blank_bom_utf8_json_and_huge_ints() -> None:
    """Blank: None; BOM skipped; bad UTF-8 / JSON: Unparsable; huge integers kept apart."""
    assert decode_message(b"") is None
    assert decode_message(b"  \t") is None
    assert decode_message(b"\xef\xbb\xbf{}") == ({}, [])
    bad = decode_message(b"\xff{}")
    assert isinstance(bad, Unparsable) and bad.error == "invalid UTF-8 at byte 0"
    assert isinstance(decode_message(b"{"), Unparsable)
    assert isinstance(decode_message(b"NaN"), Unparsable)
    decoded = decode_message(b'{"id": ' + b"9" * 5000 + b"}")
    assert isinstance(decoded, tuple)
    value, huge = decoded
    assert isinstance(value["id"], HugeInt) and huge[0].digits == 5000


def test_parse_decimal_id() -> None:
    """Only plain decimal strings name an integer id."""
    assert parse_decimal_id("12") == 12
    assert parse_decimal_id("-3") == -3
    assert parse_decimal_id("012") is None
    assert parse_decimal_id("1e3") is None


_envelope_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.sampled_from(["2.0", "1.0", "", "session/new", "x"]),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.sampled_from(["a", "cwd"]), st.integers(), max_size=2),
)


@given(
    st.dictionaries(
        st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error"]),
        _envelope_values,
    )
)
def test_is_plain_request_agrees_with_classify(obj: dict[str, Any]) -> None:
    """Any envelope is_plain_request takes is one classify reads as a Request with the
    same id, method, params and message; whatever classify reads as a Request with an int
    or str id and a str method is taken too."""
    event = classify(obj)
    if is_plain_request(obj):
        assert isinstance(event, Request)
        assert (event.id, event.method, event.params, event.value) == (
            obj["id"], obj["method"], obj.get("params"), obj,
        )  # fmt: skip
    elif isinstance(event, Request):
        assert not (type(event.id) in (int, str) and type(event.method) is str)
