"""Integers longer than Python's int string-conversion limit: valid JSON, answered sanely."""

from __future__ import annotations

import json
from typing import Any

import pytest

from acpkit.errors import InvalidRequest
from acpkit.jsonrpc import JSONRPCProtocol
from tests.jsonrpc.test_jsonrpc import Pair, connect, echo_registry, make, take, take_json

DIGITS = 5000
HUGE = "1" * DIGITS


def test_request_with_a_huge_integer_id_is_an_invalid_request_with_id_null() -> None:
    """
    A request whose id is an integer of thousands of digits (valid JSON) is answered
    -32600 with id null and a message saying the id is too long to echo; no Python
    internals (``sys.set_int_max_str_digits``) leak, and the connection goes on.
    """
    proto, _ = make(echo_registry())
    t = connect(proto)
    proto.dataReceived(
        b'{"jsonrpc":"2.0","id":' + HUGE.encode() + b',"method":"echo","params":{}}\n'
    )
    proto.dataReceived(b'{"jsonrpc":"2.0","id":2,"method":"echo","params":{"x":1}}\n')
    raw = take(t)
    assert raw[0] == (
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid request: '
        b"the id is an integer of 5000 digits, too long to be echoed exactly; use a string "
        b'or a shorter integer","data":{"reason":"the id is an integer of 5000 digits, too '
        b'long to be echoed exactly; use a string or a shorter integer"}}}'
    )
    assert b"set_int_max_str_digits" not in raw[0] and b"4300" not in raw[0]
    assert json.loads(raw[1]) == {"jsonrpc": "2.0", "id": 2, "result": {"x": 1}}


def test_negative_huge_integer_id_counts_digits_without_the_sign() -> None:
    """A negative huge id is refused the same way; the sign is not counted as a digit."""
    proto, _ = make(echo_registry())
    t = connect(proto)
    proto.dataReceived(b'{"jsonrpc":"2.0","id":-' + HUGE.encode() + b',"method":"echo"}\n')
    (reply,) = take_json(t)
    assert reply["id"] is None and reply["error"]["code"] == -32600
    assert "5000 digits" in reply["error"]["message"]


def test_huge_integer_in_params_is_invalid_params_with_the_request_id() -> None:
    """
    A request with a valid id and a huge integer inside its params gets -32602 with its
    own id (the handler never sees a value it cannot hold).
    """
    seen: list[Any] = []
    registry = echo_registry()
    registry.add_request("keep", lambda r: seen.append(r.params))
    proto, _ = make(registry)
    t = connect(proto)
    proto.dataReceived(
        b'{"jsonrpc":"2.0","id":7,"method":"keep","params":{"n":' + HUGE.encode() + b"}}\n"
    )
    (reply,) = take_json(t)
    assert reply["id"] == 7
    assert reply["error"] == {
        "code": -32602,
        "message": "Invalid params: $.params: an integer of 5000 digits is too long for this peer",
        "data": {
            "path": "$.params",
            "reason": "an integer of 5000 digits is too long for this peer",
        },
    }
    assert seen == []


def test_huge_integer_in_an_unknown_method_is_still_method_not_found() -> None:
    """Method not found comes first: a huge integer in an unknown method's params is -32601."""
    proto, _ = make(echo_registry())
    t = connect(proto)
    proto.dataReceived(
        b'{"jsonrpc":"2.0","id":3,"method":"nope","params":{"n":' + HUGE.encode() + b"}}\n"
    )
    (reply,) = take_json(t)
    assert reply["id"] == 3 and reply["error"]["code"] == -32601


def test_huge_integer_in_a_notification_is_dropped_silently() -> None:
    """A notification holding a huge integer is dropped (logged), never answered."""
    registry = echo_registry()
    got: list[Any] = []
    registry.add_notification("note", lambda params, meta: got.append(params))
    proto, _ = make(registry)
    t = connect(proto)
    proto.dataReceived(b'{"jsonrpc":"2.0","method":"note","params":{"n":' + HUGE.encode() + b"}}\n")
    assert t.value() == b"" and got == []


def test_huge_integer_in_a_result_fails_the_pending_request() -> None:
    """
    A response to one of our requests whose result holds a huge integer fails that
    request with InvalidRequest (and is reported to the peer with id null), so nothing
    waits for ever.
    """
    client, _ = make()
    server, _ = make()
    pair = Pair(client, server)
    d = client.request("echo", {})
    pair.flush_a()
    pair.ta.clear()
    client.dataReceived(b'{"jsonrpc":"2.0","id":1,"result":{"n":' + HUGE.encode() + b"}}\n")
    with pytest.raises(InvalidRequest) as failure:
        _result_of(d)
    assert "5000 digits" in str(failure.value)
    (reply,) = take_json(pair.ta)
    assert reply["id"] is None and reply["error"]["code"] == -32600


def _result_of(d: Any) -> Any:
    box: list[Any] = []
    d.addBoth(box.append)
    if hasattr(box[0], "raiseException"):
        box[0].raiseException()
    return box[0]


def test_nan_is_still_a_parse_error_byte_for_byte() -> None:
    """The slow path for long integers leaves NaN's -32700 reply exactly as it was."""
    proto: JSONRPCProtocol
    proto, _ = make(echo_registry())
    t = connect(proto)
    proto.dataReceived(b'{"jsonrpc":"2.0","id":1,"method":"echo","params":{"x":NaN}}\n')
    assert t.value() == (
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: NaN is '
        b'not valid JSON","data":{"reason":"NaN is not valid JSON"}}}\n'
    )
