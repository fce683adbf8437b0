"""Tests for acpkit.errors and acpkit.jsonrpc: envelopes, wire replies, ordering, flow."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.internet.error import ConnectionDone, ProcessTerminated
from twisted.internet.task import Clock, deferLater
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase as TrialTestCase

from acpkit.errors import (
    AuthRequired,
    CapabilityError,
    ConnectionLost,
    InternalError,
    InvalidParams,
    InvalidRequest,
    MessageTooLarge,
    MethodNotFound,
    ParseError,
    RequestCancelled,
    RequestTimeout,
    ResourceNotFound,
    RPCError,
)
from acpkit.jsonrpc import InboundRequest, JSONRPCProtocol, MethodRegistry, encode_message

# -- helpers (also used by test_jsonrpc_cancel) ---------------------------------------------


def connect(proto: JSONRPCProtocol) -> StringTransport:
    """Connect ``proto`` to a fresh StringTransport and return it."""
    transport = StringTransport()
    proto.makeConnection(transport)
    return transport


def take(transport: StringTransport) -> list[bytes]:
    """The lines written so far (without newlines), clearing the transport."""
    data = transport.value()
    transport.clear()
    assert data == b"" or data.endswith(b"\n")
    return data.split(b"\n")[:-1] if data else []


def take_json(transport: StringTransport) -> list[Any]:
    """The messages written so far, decoded, clearing the transport."""
    return [json.loads(line) for line in take(transport)]


def line(obj: Any) -> bytes:
    """One JSON message as a wire line."""
    return json.dumps(obj).encode() + b"\n"


class Pair:
    """Two JSONRPCProtocol instances connected in memory, pumped explicitly."""

    def __init__(self, a: JSONRPCProtocol, b: JSONRPCProtocol) -> None:
        self.a, self.b = a, b
        self.ta, self.tb = connect(a), connect(b)
        #: Every line as it crossed, with its direction ("a>b" or "b>a").
        self.wire: list[tuple[str, bytes]] = []

    def flush_a(self) -> bool:
        """Deliver what ``a`` wrote to ``b``; True if anything moved."""
        data = self.ta.value()
        self.ta.clear()
        if data:
            self.wire.extend(("a>b", chunk) for chunk in data.split(b"\n")[:-1])
            self.b.dataReceived(data)
        return bool(data)

    def flush_b(self) -> bool:
        """Deliver what ``b`` wrote to ``a``; True if anything moved."""
        data = self.tb.value()
        self.tb.clear()
        if data:
            self.wire.extend(("b>a", chunk) for chunk in data.split(b"\n")[:-1])
            self.a.dataReceived(data)
        return bool(data)

    def pump(self) -> None:
        """Move bytes both ways until neither side has anything left to send."""
        for _ in range(10_000):
            moved_a = self.flush_a()
            moved_b = self.flush_b()
            if not (moved_a or moved_b):
                return
        raise AssertionError("the pair never went quiet")


def make(registry: MethodRegistry | None = None, **kw: Any) -> tuple[JSONRPCProtocol, Clock]:
    """A connected-later protocol with a Clock."""
    clock = Clock()
    return JSONRPCProtocol(registry, clock=clock, **kw), clock


def echo_registry() -> MethodRegistry:
    """A registry with ``echo`` (returns params) and ``boom`` (raises)."""
    registry = MethodRegistry()
    registry.add_request("echo", lambda r: r.params)

    def boom(r: InboundRequest) -> Any:
        raise ValueError("secret internal detail")

    registry.add_request("boom", boom)
    registry.add_request("auth", lambda r: (_ for _ in ()).throw(AuthRequired("log in first")))
    return registry


@pytest.fixture
def server() -> Iterator[tuple[JSONRPCProtocol, StringTransport]]:
    """A protocol with the echo registry connected to a StringTransport."""
    proto, _ = make(echo_registry())
    yield proto, connect(proto)


# -- errors ----------------------------------------------------------------------------------


def test_error_round_trip_picks_subclass_by_code() -> None:
    """to_json/from_json keep code, message and data and rebuild the right subclass."""
    for error in (
        ParseError("bad"),
        InvalidRequest("no"),
        MethodNotFound("session/list"),
        InvalidParams("$.params.cwd", "must be absolute"),
        InternalError(),
        AuthRequired("token expired"),
        ResourceNotFound("file:///x"),
        RequestCancelled(),
    ):
        back = RPCError.from_json(error.to_json())
        assert type(back) is type(error)
        assert back == error
    other = RPCError.from_json({"code": 42, "message": "custom", "data": [1]})
    assert type(other) is RPCError and other.code == 42 and other.data == [1]
    assert RPCError.from_json({"code": "x"}).code == -32603


def test_error_constructors_are_convenient_and_clip_peer_text() -> None:
    """Constructors fill standard codes/data; peer text is clipped to a few hundred bytes."""
    assert MethodNotFound("session/list").to_json() == {
        "code": -32601,
        "message": "Method not found: session/list",
        "data": {"method": "session/list"},
    }
    assert InvalidParams("$.params.sessionId", "missing").data == {
        "path": "$.params.sessionId",
        "reason": "missing",
    }
    assert AuthRequired("expired").to_json() == {
        "code": -32000,
        "message": "Authentication required",
        "data": {"reason": "expired"},
    }
    assert RequestCancelled().to_json() == {"code": -32800, "message": "Request cancelled"}
    huge = MethodNotFound("x" * 100_000)
    assert len(json.dumps(huge.to_json())) < 1000
    assert "connection lost: boom" == str(ConnectionLost.because("boom"))
    assert "5 s" in str(RequestTimeout("session/prompt", 3, 5))
    assert "loadSession" in str(CapabilityError("session/load", "loadSession"))


# -- parse and envelope errors: exact wire replies ------------------------------------------


def test_invalid_utf8_gets_parse_error_with_null_id(server: Any) -> None:
    """A line that is not UTF-8 is answered -32700 with id null."""
    proto, t = server
    proto.dataReceived(b'{"a":"\xff"}\n')
    assert t.value() == (
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,'
        b'"message":"Parse error: invalid UTF-8 at byte 6",'
        b'"data":{"reason":"invalid UTF-8 at byte 6"}}}\n'
    )


def test_invalid_utf8_replaced_when_asked(server: Any) -> None:
    """
    With ``replace_invalid_utf8``, a request that is not UTF-8 is read with U+FFFD in
    place of each bad byte, answered, and counted; nothing is dropped.
    """
    proto, t = server
    proto.replace_invalid_utf8 = True
    proto.dataReceived(b'{"jsonrpc":"2.0","id":1,"method":"echo","params":{"x":"caf\xe9"}}\n')
    assert take_json(t) == [{"jsonrpc": "2.0", "id": 1, "result": {"x": "caf\ufffd"}}]
    assert proto.invalid_utf8_replaced == 1
    assert proto.undecodable_dropped == 0


def test_junk_line_gets_parse_error_and_connection_survives(server: Any) -> None:
    """A non-JSON line gets -32700 id null and the next request is still served."""
    proto, t = server
    proto.dataReceived(b"Loading banner...\n")
    proto.dataReceived(b'{"jsonrpc":"2.0","id":1,"method":"echo","params":{"x":1}}\n')
    lines = take_json(t)
    assert lines[0]["id"] is None and lines[0]["error"]["code"] == -32700
    assert lines[0]["error"]["message"].startswith("Parse error: Expecting value")
    assert lines[1] == {"jsonrpc": "2.0", "id": 1, "result": {"x": 1}}
    assert not t.disconnecting


def test_nan_is_not_json(server: Any) -> None:
    """NaN/Infinity literals are rejected as a parse error."""
    proto, t = server
    proto.dataReceived(b'{"jsonrpc":"2.0","id":1,"method":"echo","params":{"x":NaN}}\n')
    assert take_json(t)[0]["error"]["code"] == -32700


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"42", "a message must be a JSON object"),
        (b'"text"', "a message must be a JSON object"),
        (b"null", "a message must be a JSON object"),
        (b'[{"jsonrpc":"2.0","id":1,"method":"echo"}]', "batches are not supported"),
        (b'{"jsonrpc":"2.0","id":1}', "not a request, notification or response"),
    ],
)
def test_non_envelopes_get_invalid_request_with_null_id(
    server: Any, raw: bytes, reason: str
) -> None:
    """Scalars, arrays and objects that are no envelope get -32600 with id null."""
    proto, t = server
    proto.dataReceived(raw + b"\n")
    assert t.value() == (
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid request: '
        + reason.encode()
        + b'","data":{"reason":"'
        + reason.encode()
        + b'"}}}\n'
    )


@pytest.mark.parametrize("request_id", [7, "seven"])
@pytest.mark.parametrize("version", [None, "1.0", 2])
def test_wrong_jsonrpc_member_echoes_valid_id(
    server: Any, request_id: int | str, version: Any
) -> None:
    """A request with a missing or wrong "jsonrpc" gets -32600 with its id echoed."""
    proto, t = server
    msg: dict[str, Any] = {"id": request_id, "method": "echo", "params": {}}
    if version is not None:
        msg["jsonrpc"] = version
    proto.dataReceived(line(msg))
    expected_id = json.dumps(request_id).encode()
    assert t.value() == (
        b'{"jsonrpc":"2.0","id":' + expected_id + b',"error":{"code":-32600,'
        b'"message":"Invalid request: the \\"jsonrpc\\" member must be \\"2.0\\"",'
        b'"data":{"reason":"the \\"jsonrpc\\" member must be \\"2.0\\""}}}\n'
    )


@pytest.mark.parametrize("bad_id", [1.5, 1.0, True, False, {"a": 1}, [1], None])
def test_invalid_ids_get_invalid_request_with_null_id(server: Any, bad_id: Any) -> None:
    """Float, bool, object, array and null ids are refused with -32600 and id null."""
    proto, t = server
    proto.dataReceived(line({"jsonrpc": "2.0", "id": bad_id, "method": "echo", "params": {}}))
    assert t.value() == (
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,'
        b'"message":"Invalid request: the id must be a string or an integer",'
        b'"data":{"reason":"the id must be a string or an integer"}}}\n'
    )


def test_non_string_method_gets_invalid_request(server: Any) -> None:
    """A request whose method is not a string gets -32600 with its id."""
    proto, t = server
    proto.dataReceived(line({"jsonrpc": "2.0", "id": 3, "method": 5, "params": {}}))
    reply = take_json(t)[0]
    assert reply["id"] == 3 and reply["error"]["code"] == -32600


@pytest.mark.parametrize("method", ["session/list", "_vendor/thing", "ping"])
def test_unknown_method_gets_method_not_found(server: Any, method: str) -> None:
    """Unknown methods (ACP, extension, bare ping) get -32601 with data.method."""
    proto, t = server
    proto.dataReceived(line({"jsonrpc": "2.0", "id": 9, "method": method, "params": {}}))
    assert t.value() == (
        b'{"jsonrpc":"2.0","id":9,"error":{"code":-32601,"message":"Method not found: '
        + method.encode()
        + b'","data":{"method":"'
        + method.encode()
        + b'"}}}\n'
    )


@pytest.mark.parametrize("params", ["absent", None, [1, 2], "text", 3])
def test_params_not_an_object_gets_invalid_params(server: Any, params: Any) -> None:
    """Absent, null or non-object params get -32602 naming $.params."""
    proto, t = server
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": "r1", "method": "echo"}
    if params != "absent":
        msg["params"] = params
    proto.dataReceived(line(msg))
    assert t.value() == (
        b'{"jsonrpc":"2.0","id":"r1","error":{"code":-32602,'
        b'"message":"Invalid params: $.params: must be an object",'
        b'"data":{"path":"$.params","reason":"must be an object"}}}\n'
    )


def test_params_optional_method_accepts_absent_params() -> None:
    """A method registered with params_optional gets params None instead of -32602."""
    registry = MethodRegistry()
    registry.add_request("_x/status", lambda r: {"params": r.params}, params_optional=True)
    proto, _ = make(registry)
    t = connect(proto)
    proto.dataReceived(b'{"jsonrpc":"2.0","id":1,"method":"_x/status"}\n')
    assert t.value() == b'{"jsonrpc":"2.0","id":1,"result":{"params":null}}\n'


def test_handler_rpc_error_is_sent_as_is(server: Any) -> None:
    """A handler raising an RPCError answers with exactly that error."""
    proto, t = server
    proto.dataReceived(b'{"jsonrpc":"2.0","id":4,"method":"auth","params":{}}\n')
    assert t.value() == (
        b'{"jsonrpc":"2.0","id":4,"error":{"code":-32000,"message":"Authentication required",'
        b'"data":{"reason":"log in first"}}}\n'
    )


def test_handler_crash_gets_internal_error_without_leaking(server: Any) -> None:
    """An unexpected exception becomes -32603 with no exception text on the wire."""
    proto, t = server
    proto.dataReceived(b'{"jsonrpc":"2.0","id":5,"method":"boom","params":{}}\n')
    assert t.value() == (
        b'{"jsonrpc":"2.0","id":5,"error":{"code":-32603,"message":"Internal error"}}\n'
    )


def test_unserialisable_result_gets_internal_error() -> None:
    """A handler result that is not JSON is answered -32603 instead of breaking the stream."""
    registry = MethodRegistry()
    registry.add_request("obj", lambda r: object())
    registry.add_request("nan", lambda r: float("nan"))
    proto, _ = make(registry)
    t = connect(proto)
    proto.dataReceived(b'{"jsonrpc":"2.0","id":1,"method":"obj","params":{}}\n')
    proto.dataReceived(b'{"jsonrpc":"2.0","id":2,"method":"nan","params":{}}\n')
    assert [m["error"]["code"] for m in take_json(t)] == [-32603, -32603]


def test_async_and_deferred_handlers() -> None:
    """Handlers may be coroutines or return Deferreds; results are sent when they fire."""
    registry = MethodRegistry()
    waiting: Deferred[Any] = Deferred()

    async def later(r: InboundRequest) -> Any:
        value = await waiting
        return {"got": value}

    registry.add_request("later", later)
    registry.add_request("now", lambda r: succeed([1]))
    proto, _ = make(registry)
    t = connect(proto)
    proto.dataReceived(
        b'{"jsonrpc":"2.0","id":1,"method":"later","params":{}}\n'
        b'{"jsonrpc":"2.0","id":2,"method":"now","params":{}}\n'
    )
    assert t.value() == b'{"jsonrpc":"2.0","id":2,"result":[1]}\n'
    t.clear()
    waiting.callback("x")
    assert t.value() == b'{"jsonrpc":"2.0","id":1,"result":{"got":"x"}}\n'


def test_ids_are_echoed_with_their_type(server: Any) -> None:
    """String and integer ids come back exactly, "1" and 1 kept distinct."""
    proto, t = server
    proto.dataReceived(
        b'{"jsonrpc":"2.0","id":"1","method":"echo","params":{}}\n'
        b'{"jsonrpc":"2.0","id":1,"method":"echo","params":{}}\n'
        b'{"jsonrpc":"2.0","id":-12,"method":"echo","params":{}}\n'
        b'{"jsonrpc":"2.0","id":"\xc3\xa9t\xc3\xa9","method":"echo","params":{}}\n'
    )
    assert t.value() == (
        b'{"jsonrpc":"2.0","id":"1","result":{}}\n'
        b'{"jsonrpc":"2.0","id":1,"result":{}}\n'
        b'{"jsonrpc":"2.0","id":-12,"result":{}}\n'
        b'{"jsonrpc":"2.0","id":"\xc3\xa9t\xc3\xa9","result":{}}\n'
    )


def test_meta_is_handed_separately_and_kept_in_params() -> None:
    """params keep _meta; meta is the same object, None when absent or not an object."""
    seen: list[InboundRequest] = []
    registry = MethodRegistry()
    registry.add_request("m", lambda r: seen.append(r))
    proto, _ = make(registry)
    connect(proto)
    proto.dataReceived(
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1,"_meta":{"trace":"t"}}}\n'
        b'{"jsonrpc":"2.0","id":2,"method":"m","params":{"_meta":5}}\n'
        b'{"jsonrpc":"2.0","id":3,"method":"m","params":{}}\n'
    )
    assert seen[0].params == {"a": 1, "_meta": {"trace": "t"}}
    assert seen[0].meta == {"trace": "t"}
    assert seen[1].meta is None and seen[2].meta is None


def test_duplicate_in_flight_id_is_refused() -> None:
    """A second request reusing the id of one still running gets -32600."""
    registry = MethodRegistry()
    registry.add_request("wait", lambda r: Deferred())
    proto, _ = make(registry)
    t = connect(proto)
    proto.dataReceived(b'{"jsonrpc":"2.0","id":1,"method":"wait","params":{}}\n' * 2)
    reply = take_json(t)
    assert len(reply) == 1 and reply[0]["id"] == 1 and reply[0]["error"]["code"] == -32600


def test_empty_lines_are_ignored(server: Any) -> None:
    """Blank and whitespace-only lines produce no reply."""
    proto, t = server
    proto.dataReceived(b"\n\r\n  \n\t\n")
    assert t.value() == b""


# -- notifications ------------------------------------------------------------------------


def test_notifications_are_never_answered() -> None:
    """Unknown, invalid, crashing and bad-params notifications produce no output at all."""
    calls: list[Any] = []
    registry = MethodRegistry()

    def crash(params: Any, meta: Any) -> None:
        calls.append(params)
        raise RuntimeError("no")

    registry.add_notification("crash", crash)
    registry.add_notification("note", lambda p, m: calls.append((p, m)))
    proto, _ = make(registry)
    t = connect(proto)
    proto.dataReceived(
        b'{"jsonrpc":"2.0","method":"unknown","params":{}}\n'
        b'{"jsonrpc":"2.0","method":"_vendor/unknown","params":{}}\n'
        b'{"jsonrpc":"2.0","method":"$/progress","params":{}}\n'
        b'{"method":"note","params":{}}\n'
        b'{"jsonrpc":"2.0","method":7}\n'
        b'{"jsonrpc":"2.0","method":"note","params":[1]}\n'
        b'{"jsonrpc":"2.0","method":"note"}\n'
        b'{"jsonrpc":"2.0","method":"crash","params":{"x":1}}\n'
        b'{"jsonrpc":"2.0","method":"note","params":{"_meta":{"k":1}}}\n'
    )
    assert t.value() == b""
    assert calls == [{"x": 1}, ({"_meta": {"k": 1}}, {"k": 1})]


# -- responses ------------------------------------------------------------------------------


def test_request_wire_format_and_result() -> None:
    """request() writes an int-id request and fires with the raw result."""
    proto, _ = make()
    t = connect(proto)
    d1 = proto.request("initialize", {"protocolVersion": 1})
    d2 = proto.request("_x/noparams")
    assert t.value() == (
        b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'
        b'{"jsonrpc":"2.0","id":2,"method":"_x/noparams"}\n'
    )
    proto.dataReceived(b'{"jsonrpc":"2.0","id":2,"result":null}\n')
    proto.dataReceived(b'{"jsonrpc":"2.0","id":1,"result":{"ok":true}}\n')
    results: list[Any] = []
    d1.addCallback(results.append)
    d2.addCallback(results.append)
    assert results == [{"ok": True}, None]


def test_error_response_fails_with_rpc_error_subclass() -> None:
    """An error response fails the Deferred with the matching RPCError subclass."""
    proto, _ = make()
    connect(proto)
    d = proto.request("session/load", {})
    proto.dataReceived(
        b'{"jsonrpc":"2.0","id":1,"error":{"code":-32002,"message":"Resource not found",'
        b'"data":{"uri":"x"}}}\n'
    )
    failures: list[Failure] = []
    d.addErrback(failures.append)
    error = failures[0].value
    assert isinstance(error, ResourceNotFound) and error.data == {"uri": "x"}


def test_decimal_string_id_is_accepted_for_pending_int() -> None:
    """A response with id "1" resolves pending request 1 (with a warning)."""
    proto, _ = make()
    connect(proto)
    d = proto.request("x", {})
    proto.dataReceived(b'{"jsonrpc":"2.0","id":"1","result":5}\n')
    assert d.called and d.result == 5


def test_response_to_unknown_id_is_dropped(server: Any) -> None:
    """A response with an unknown id is logged, not answered, and kills nothing."""
    proto, t = server
    d = proto.request("x", {})
    t.clear()
    proto.dataReceived(
        b'{"jsonrpc":"2.0","id":99,"result":1}\n'
        b'{"jsonrpc":"2.0","id":"01","result":1}\n'
        b'{"jsonrpc":"2.0","id":"abc","error":{"code":1,"message":"m"}}\n'
    )
    assert t.value() == b"" and not d.called
    proto.dataReceived(b'{"jsonrpc":"2.0","id":1,"result":1}\n')
    assert d.called


def test_null_id_error_from_peer_is_never_answered(server: Any) -> None:
    """An error response with id null (the peer could not read us) is only logged."""
    proto, t = server
    proto.dataReceived(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"P"}}\n')
    assert t.value() == b""


def test_two_peers_do_not_bounce_errors() -> None:
    """Junk sent to one peer yields one error, and the other peer does not answer it."""
    pair = Pair(make(echo_registry())[0], make(echo_registry())[0])
    pair.tb.write(b"junk\n")
    pair.pump()
    assert [d for d, _ in pair.wire] == ["b>a", "a>b"]


def test_malformed_response_fails_the_pending_request() -> None:
    """A response with both result and error fails its request; reply id is null."""
    proto, _ = make()
    t = connect(proto)
    d = proto.request("x", {})
    t.clear()
    proto.dataReceived(b'{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"m"}}\n')
    reason = "malformed response: a response must not have both result and error"
    assert t.value() == (
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid request: '
        + reason.encode()
        + b'","data":{"reason":"'
        + reason.encode()
        + b'"}}}\n'
    )
    failures: list[Failure] = []
    d.addErrback(failures.append)
    assert isinstance(failures[0].value, InvalidRequest)


def test_response_without_jsonrpc_and_bad_error_shape() -> None:
    """Responses lacking jsonrpc, or with a non-object error, are refused with id null."""
    proto, _ = make()
    t = connect(proto)
    d1 = proto.request("x", {})
    d2 = proto.request("y", {})
    t.clear()
    proto.dataReceived(b'{"id":1,"result":1}\n{"jsonrpc":"2.0","id":2,"error":"bad"}\n')
    replies = take_json(t)
    assert [(r["id"], r["error"]["code"]) for r in replies] == [(None, -32600), (None, -32600)]
    for d in (d1, d2):
        failures: list[Failure] = []
        d.addErrback(failures.append)
        assert isinstance(failures[0].value, InvalidRequest)


# -- oversized lines ------------------------------------------------------------------------


def test_oversized_line_reply_and_stream_goes_on() -> None:
    """A too-long request gets -32600 with its id and the limit; the next line is served."""
    proto, _ = make(echo_registry(), max_line_length=100)
    t = connect(proto)
    proto.dataReceived(b'{"jsonrpc":"2.0","id":1,"method":"echo","params":{"x":"' + b"a" * 200)
    proto.dataReceived(b'"}}\n{"jsonrpc":"2.0","id":2,"method":"echo","params":{}}\n')
    assert t.value() == (
        b'{"jsonrpc":"2.0","id":1,"error":{"code":-32600,'
        b'"message":"Message too large: lines are limited to 100 bytes","data":{"limit":100}}}\n'
        b'{"jsonrpc":"2.0","id":2,"result":{}}\n'
    )


def test_oversized_response_fails_its_pending_request() -> None:
    """An oversized response to a pending request fails it with MessageTooLarge."""
    proto, _ = make(max_line_length=100)
    t = connect(proto)
    d = proto.request("fs/read_text_file", {})
    other = proto.request("x", {})
    t.clear()
    proto.dataReceived(b'{"jsonrpc":"2.0","id":1,"result":{"content":"' + b"a" * 300 + b'"}}\n')
    assert take_json(t)[0]["error"]["data"] == {"limit": 100}
    failures: list[Failure] = []
    d.addErrback(failures.append)
    error = failures[0].value
    assert isinstance(error, MessageTooLarge) and error.limit == 100
    assert "request 1 (fs/read_text_file) exceeded the 100-byte" in error.message
    assert not other.called


def test_oversized_request_does_not_fail_our_request_with_same_id() -> None:
    """A too-long REQUEST with id 1 does not touch our own pending request 1."""
    proto, _ = make(echo_registry(), max_line_length=100)
    connect(proto)
    d = proto.request("x", {})
    proto.dataReceived(
        b'{"jsonrpc":"2.0","id":1,"method":"echo","params":{"t":"' + b"a" * 300 + b'"}}\n'
    )
    assert not d.called


# -- serialisation ------------------------------------------------------------------------


def test_serialisation_is_compact_utf8_and_escapes_newlines() -> None:
    """Non-ASCII stays raw UTF-8, newlines are escaped, lone surrogates fall back to ASCII."""
    assert encode_message({"t": "é\n\u2028"}) == '{"t":"é\\n\u2028"}'.encode()
    assert encode_message({"t": "\ud800"}) == b'{"t":"\\ud800"}'
    with pytest.raises(ValueError):
        encode_message({"x": float("inf")})


def test_request_with_unserialisable_params_fails_without_writing() -> None:
    """request() with non-JSON params fails its Deferred and writes nothing."""
    proto, _ = make()
    t = connect(proto)
    d = proto.request("x", {"o": object()})
    failures: list[Failure] = []
    d.addErrback(failures.append)
    assert isinstance(failures[0].value, TypeError) and t.value() == b""
    assert proto.request("y").called is False
    assert b'"id":1' in t.value()


# -- ordering --------------------------------------------------------------------------------


def test_notification_before_response_in_one_read_is_handled_first() -> None:
    """A held notification handler delays a response that arrived after it in the same read."""
    events: list[str] = []
    gate: Deferred[None] = Deferred()
    registry = MethodRegistry()

    def on_update(params: Any, meta: Any) -> Deferred[None]:
        events.append("update start")
        gate.addCallback(lambda _: events.append("update done"))
        return gate

    registry.add_notification("session/update", on_update)
    proto, _ = make(registry)
    t = connect(proto)
    d = proto.request("session/prompt", {})
    d.addCallback(lambda r: events.append(f"response {r}"))
    proto.dataReceived(
        b'{"jsonrpc":"2.0","method":"session/update","params":{}}\n'
        b'{"jsonrpc":"2.0","id":1,"result":"end_turn"}\n'
    )
    assert events == ["update start"]
    assert t.producerState == "paused"
    gate.callback(None)
    assert events == ["update start", "update done", "response end_turn"]
    assert t.producerState == "producing"


def test_async_notification_handlers_run_in_order() -> None:
    """Coroutine notification handlers are serialised in wire order."""
    events: list[Any] = []
    gates = [Deferred[None](), Deferred[None]()]
    registry = MethodRegistry()

    async def on_note(params: Any, meta: Any) -> None:
        events.append(("start", params["n"]))
        await gates[params["n"]]
        events.append(("end", params["n"]))

    registry.add_notification("note", on_note)
    proto, _ = make(registry)
    connect(proto)
    proto.dataReceived(
        b'{"jsonrpc":"2.0","method":"note","params":{"n":0}}\n'
        b'{"jsonrpc":"2.0","method":"note","params":{"n":1}}\n'
    )
    assert events == [("start", 0)]
    gates[1].callback(None)
    assert events == [("start", 0)]
    gates[0].callback(None)
    assert events == [("start", 0), ("end", 0), ("start", 1), ("end", 1)]


def test_nested_request_from_handler_does_not_deadlock() -> None:
    """A handler on B asks A something, awaits it, then answers A's original request."""
    reg_a = MethodRegistry()
    reg_a.add_request("fs/read_text_file", lambda r: {"content": "hello"})
    reg_b = MethodRegistry()
    pair_holder: list[Pair] = []

    async def prompt(r: InboundRequest) -> Any:
        got = await pair_holder[0].b.request("fs/read_text_file", {"path": "/x"})
        inner = await pair_holder[0].b.request("fs/read_text_file", {"path": "/y"})
        return {"stopReason": "end_turn", "read": got["content"] + inner["content"]}

    reg_b.add_request("session/prompt", prompt)
    pair = Pair(make(reg_a, name="client")[0], make(reg_b, name="agent")[0])
    pair_holder.append(pair)
    d = pair.a.request("session/prompt", {})
    pair.pump()
    assert d.called and d.result == {"stopReason": "end_turn", "read": "hellohello"}


def test_concurrency_bound_queue_order_and_overflow() -> None:
    """Only N handlers run; others start in FIFO order; beyond the queue -32603 at once."""
    started: list[int] = []
    gates: dict[int, Deferred[Any]] = {}
    registry = MethodRegistry()

    def work(r: InboundRequest) -> Deferred[Any]:
        started.append(r.params["n"])
        gates[r.params["n"]] = d = Deferred[Any]()
        return d

    registry.add_request("work", work)
    proto, _ = make(registry, max_concurrent_requests=2, max_queued_requests=2)
    arrived: list[Any] = []
    proto.on_request_received = lambda r: arrived.append(r.id)
    t = connect(proto)
    proto.dataReceived(
        b"".join(
            line({"jsonrpc": "2.0", "id": n, "method": "work", "params": {"n": n}})
            for n in range(5)
        )
    )
    assert started == [0, 1]
    assert arrived == [0, 1, 2, 3]
    assert t.value() == (
        b'{"jsonrpc":"2.0","id":4,"error":{"code":-32603,'
        b'"message":"Internal error: too many concurrent requests"}}\n'
    )
    t.clear()
    gates[1].callback("one")
    assert started == [0, 1, 2]
    gates[0].callback("zero")
    assert started == [0, 1, 2, 3]
    assert [m["id"] for m in take_json(t)] == [1, 0]


# -- timeouts, cancellation, connection loss ------------------------------------------------


def test_timeout_fails_with_request_timeout_and_sends_cancel() -> None:
    """After the timeout the Deferred fails with RequestTimeout and $/cancel_request is sent."""
    proto, clock = make()
    t = connect(proto)
    d = proto.request("session/new", {}, timeout=5)
    fast = proto.request("x", {}, timeout=5)
    proto.dataReceived(b'{"jsonrpc":"2.0","id":2,"result":1}\n')
    t.clear()
    clock.advance(4.9)
    assert not d.called
    clock.advance(0.1)
    assert t.value() == b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":1}}\n'
    failures: list[Failure] = []
    d.addErrback(failures.append)
    assert isinstance(failures[0].value, RequestTimeout)
    assert fast.result == 1 and not clock.getDelayedCalls()
    t.clear()
    proto.dataReceived(b'{"jsonrpc":"2.0","id":1,"result":1}\n')
    assert t.value() == b""


def test_deferred_cancel_sends_cancel_request_and_fails_at_once() -> None:
    """d.cancel() sends $/cancel_request and fails with CancelledError; late answer dropped."""
    proto, clock = make()
    t = connect(proto)
    d = proto.request("session/prompt", {}, timeout=30)
    t.clear()
    d.cancel()
    assert t.value() == b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":1}}\n'
    failures: list[Failure] = []
    d.addErrback(failures.append)
    assert failures[0].check(CancelledError)
    assert not clock.getDelayedCalls()
    t.clear()
    proto.dataReceived(b'{"jsonrpc":"2.0","id":1,"error":{"code":-32800,"message":"c"}}\n')
    assert t.value() == b""


def test_connection_lost_fails_pending_with_reason_text() -> None:
    """Pending requests fail with ConnectionLost naming the reason; later requests at once."""
    cancelled: list[bool] = []
    registry = MethodRegistry()

    async def slow(r: InboundRequest) -> None:
        try:
            await Deferred()
        except CancelledError:
            cancelled.append(True)
            raise

    registry.add_request("slow", slow)
    registry.add_request("queued", lambda r: Deferred())
    proto, _ = make(registry, max_concurrent_requests=1)
    t = connect(proto)
    closed: list[Failure] = []
    proto.when_closed().addErrback(closed.append)
    d = proto.request("session/prompt", {})
    proto.dataReceived(
        b'{"jsonrpc":"2.0","id":1,"method":"slow","params":{}}\n'
        b'{"jsonrpc":"2.0","id":2,"method":"queued","params":{}}\n'
    )
    t.clear()
    reason = Failure(ProcessTerminated(exitCode=3))
    proto.connectionLost(reason)
    failures: list[Failure] = []
    d.addErrback(failures.append)
    error = failures[0].value
    assert isinstance(error, ConnectionLost)
    assert "exit code 3" in str(error)
    assert cancelled == [True]
    assert t.value() == b""
    assert closed == [reason]
    later: list[Failure] = []
    proto.request("x", {}).addErrback(later.append)
    assert isinstance(later[0].value, ConnectionLost) and "exit code 3" in str(later[0].value)
    again: list[Failure] = []
    proto.when_closed().addErrback(again.append)
    assert again == [reason] and proto.closed_reason is reason
    assert not proto.connected


def test_fail_all_outgoing() -> None:
    """fail_all_outgoing fails every pending request with the given exception."""
    proto, clock = make()
    connect(proto)
    ds = [proto.request("x", {}, timeout=1), proto.request("y", {})]
    proto.fail_all_outgoing(ConnectionLost("agent exited with status 1"))
    for d in ds:
        failures: list[Failure] = []
        d.addErrback(failures.append)
        assert str(failures[0].value) == "agent exited with status 1"
    assert not clock.getDelayedCalls()


def test_after_reply_runs_after_the_reply_is_written() -> None:
    """after_reply callbacks run right after the reply is on the transport."""
    seen: list[bytes] = []
    registry = MethodRegistry()
    transports: list[StringTransport] = []

    def handler(r: InboundRequest) -> Any:
        r.after_reply(lambda: seen.append(transports[0].value()))
        return {"sessionId": "s"}

    registry.add_request("session/new", handler)
    proto, _ = make(registry)
    transports.append(connect(proto))
    proto.dataReceived(b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":{}}\n')
    assert seen == [b'{"jsonrpc":"2.0","id":1,"result":{"sessionId":"s"}}\n']


# -- back-pressure and half-close ------------------------------------------------------------


def test_back_pressure_holds_writers_and_new_requests_not_reading() -> None:
    """
    Paused by the transport: writable() waits and, once ``max_buffered_output`` bytes
    were written meanwhile, new requests wait in the queue; input is still read (the
    transport is never paused for write pressure).  Resume starts them and releases
    writable().
    """
    proto, _ = make(echo_registry(), max_buffered_output=0)
    t = connect(proto)
    assert t.producer is proto and t.streaming
    assert proto.writable().called
    proto.pauseProducing()
    assert t.producerState == "producing"
    w = proto.writable()
    assert not w.called
    proto.dataReceived(b'{"jsonrpc":"2.0","id":1,"method":"echo","params":{}}\n')
    assert t.value() == b""
    proto.resumeProducing()
    assert t.producerState == "producing"
    assert w.called
    assert t.value() == b'{"jsonrpc":"2.0","id":1,"result":{}}\n'


def test_half_close_waits_for_running_requests() -> None:
    """After input ends, the connection closes only once inbound requests are answered."""
    gate: Deferred[Any] = Deferred()
    registry = MethodRegistry()
    registry.add_request("slow", lambda r: gate)
    registry.add_request("fast", lambda r: 1)
    proto, _ = make(registry, max_concurrent_requests=1)
    t = connect(proto)
    mine = proto.request("x", {})
    proto.dataReceived(
        b'{"jsonrpc":"2.0","id":1,"method":"slow","params":{}}\n'
        b'{"jsonrpc":"2.0","id":2,"method":"fast","params":{}}'
    )
    proto.readConnectionLost()
    assert not t.disconnecting
    failures: list[Failure] = []
    mine.addErrback(failures.append)
    assert isinstance(failures[0].value, ConnectionLost)
    gate.callback("done")
    assert t.disconnecting
    assert t.value().endswith(
        b'{"jsonrpc":"2.0","id":1,"result":"done"}\n{"jsonrpc":"2.0","id":2,"result":1}\n'
    )


def test_half_close_with_nothing_running_closes_at_once() -> None:
    """Input ending with no inbound request in progress closes the connection."""
    proto, _ = make()
    t = connect(proto)
    proto.readConnectionLost()
    assert t.disconnecting


def test_connection_done_reason_text() -> None:
    """ConnectionLost text includes the reason's own text for a clean close too."""
    proto, _ = make()
    connect(proto)
    d = proto.request("x", {})
    proto.connectionLost(Failure(ConnectionDone("bye")))
    failures: list[Failure] = []
    d.addErrback(failures.append)
    assert "bye" in str(failures[0].value)


def test_requests_after_end_of_input_fail_at_once() -> None:
    """Once the peer closed our input, request() fails with ConnectionLost immediately."""
    gate: Deferred[Any] = Deferred()
    registry = MethodRegistry()
    registry.add_request("slow", lambda r: gate)
    proto, _ = make(registry)
    t = connect(proto)
    proto.dataReceived(b'{"jsonrpc":"2.0","id":1,"method":"slow","params":{}}\n')
    proto.readConnectionLost()
    failures: list[Failure] = []
    proto.request("fs/read_text_file", {}).addErrback(failures.append)
    assert isinstance(failures[0].value, ConnectionLost)
    assert "closed its output" in str(failures[0].value)
    proto.notify("session/update", {"n": 1})
    assert t.value().endswith(b'{"jsonrpc":"2.0","method":"session/update","params":{"n":1}}\n')


def test_leading_bom_and_crlf_are_tolerated(server: Any) -> None:
    """A UTF-8 BOM before a message and a CRLF line end are accepted."""
    proto, t = server
    proto.dataReceived(b'\xef\xbb\xbf{"jsonrpc":"2.0","id":1,"method":"echo","params":{}}\r\n')
    assert t.value() == b'{"jsonrpc":"2.0","id":1,"result":{}}\n'


def test_held_stream_keeps_requests_in_order_behind_notification() -> None:
    """Requests that arrive behind a held notification start only after it is released."""
    events: list[str] = []
    gate: Deferred[None] = Deferred()
    registry = MethodRegistry()
    registry.add_notification("n", lambda p, m: gate)
    registry.add_request("r", lambda r: events.append("request started"))
    proto, _ = make(registry)
    t = connect(proto)
    proto.dataReceived(
        b'{"jsonrpc":"2.0","method":"n","params":{}}\n'
        b'{"jsonrpc":"2.0","id":1,"method":"r","params":{}}\n'
    )
    proto.dataReceived(b"junk\n")
    assert events == [] and t.value() == b""
    gate.callback(None)
    assert events == ["request started"]
    assert [m["id"] for m in take_json(t)] == [1, None]


class LoopbackBackPressureTests(TrialTestCase):
    """Back-pressure through a real TCP loopback connection."""

    def test_slow_reader_pauses_writer(self) -> Deferred[None]:
        """A peer that stops reading makes writable() wait; reading again releases it."""
        from twisted.internet import reactor
        from twisted.internet.address import IPv4Address
        from twisted.internet.protocol import Factory, Protocol

        server_protos: list[JSONRPCProtocol] = []
        received = bytearray()

        class Reader(Protocol):
            def dataReceived(self, data: bytes) -> None:
                received.extend(data)

        def make_server() -> JSONRPCProtocol:
            proto = JSONRPCProtocol(name="writer")
            server_protos.append(proto)
            return proto

        # listenTCP is annotated for a ServerFactory of protocols with a ``factory``
        # attribute; Factory.forProtocol's result is one at run time, not in the stubs.
        factory = Factory.forProtocol(make_server)
        port = reactor.listenTCP(0, factory, interface="127.0.0.1")  # type: ignore[arg-type]
        self.addCleanup(port.stopListening)
        reader = Reader()
        from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol

        host = port.getHost()
        assert isinstance(host, IPv4Address)
        endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", host.port)

        async def scenario() -> None:
            await connectProtocol(endpoint, reader)
            while not server_protos or not server_protos[0].connected:
                await deferLater(reactor, 0.01)
            writer = server_protos[0]
            assert reader.transport is not None
            reader.transport.pauseProducing()  # type: ignore[attr-defined]
            chunk = {"text": "x" * 65536}
            sent = 0
            while writer.writable().called and sent < 2000:
                writer.notify("session/update", chunk)
                sent += 1
                if sent % 16 == 0:
                    await deferLater(reactor, 0)
            self.assertFalse(writer.writable().called, "never paused")
            self.assertLess(sent, 2000)
            waiting = writer.writable()
            reader.transport.resumeProducing()  # type: ignore[attr-defined]
            await waiting
            reader.transport.loseConnection()
            closed: list[Failure] = []
            await writer.when_closed().addErrback(closed.append)
            self.assertEqual(len(closed), 1)

        return Deferred.fromCoroutine(scenario())
