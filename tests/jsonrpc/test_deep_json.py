"""
Deep JSON never kills a connection (issue 22, item 3): a message nested to any depth
(0 to 100,000 levels of arrays, objects or both), as a whole message, in ``params``, in
``id``, in ``result`` or in ``error.data``, gets the JSON-RPC answer the spec asks for and
the next request on the same connection is answered, on every byte framing, in memory.
The depth policy (:data:`acpkit.jsonrpc.jsonbytes.MAX_NESTING_DEPTH`) is tested at its edges,
with the parser, the encoder and the trace.  The remote transports are in
``test_deep_json_remote.py``, a real bob in ``test_deep_json_process.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import ILogObserver, LogEvent, formatEvent, globalLogPublisher
from zope.interface import implementer

from acpkit import schema
from acpkit.connection import Agent, AgentConnection, negotiate_version
from acpkit.errors import InvalidRequest, RPCError
from acpkit.framing import MessageFraming, NDJSONProtocol
from acpkit.jsonrpc import JSONRPCEngine, JSONRPCProtocol, MethodRegistry, jsonbytes
from acpkit.jsonrpc.cancel import MCP_CANCELLATION
from acpkit.jsonrpc.classify import TooDeep, decode_message, encode_message, read_envelope
from acpkit.jsonrpc.content_length import ContentLengthJSONRPCProtocol
from acpkit.jsonrpc.jsonbytes import (
    MAX_NESTING_DEPTH,
    NOT_PARSED,
    TOO_DEEP,
    NestingTooDeep,
    loads,
    loads_or_not_parsed,
    nesting_exceeds,
)
from acpkit.testing.strategies import json_values
from acpkit.trace import TraceRecord, pretty_record

LIMIT = MAX_NESTING_DEPTH
#: The depths the issue names, plus the limit's edges.
EXPLICIT_DEPTHS = (0, 1, 969, 970, 999, 1000, 1024, 1025, 5000, 100_000)
EDGES = (LIMIT - 2, LIMIT - 1, LIMIT, LIMIT + 1)
KINDS = ("array", "object", "mixed")
depths = st.integers(min_value=0, max_value=100_000)


# -- building deep text (no recursion: the point is depths Python cannot recurse to) ----


def nested(depth: int, kind: str = "array") -> bytes:
    """A JSON value nested ``depth`` levels deep: arrays, objects, or both alternating."""
    if kind == "array":
        return b"[" * depth + b"0" + b"]" * depth
    if kind == "object":
        return b'{"k":' * depth + b"0" + b"}" * depth
    half, odd = divmod(depth, 2)
    return b'[{"k":' * half + b"[" * odd + b"0" + b"]" * odd + b"}]" * half  # [ { [ { ... } ] } ]


def nested_value(depth: int) -> Any:
    """The same as a Python value (lists), built without recursion."""
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def reference_depth(value: Any) -> int:
    """Nesting depth by plain recursion (for small values only)."""
    if isinstance(value, dict):
        return 1 + max(map(reference_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(reference_depth, value), default=0)
    return 0


@attrs.frozen
class Place:
    """Where the deep value goes in a message, and how many levels the message adds."""

    name: str
    template: bytes
    levels: int

    def message(self, depth: int, kind: str) -> bytes:
        return self.template.replace(b"@", nested(depth, kind))


#: Our pending request has id 1 when the deep message arrives (``result``, ``error.data``).
PLACES = {
    p.name: p
    for p in (
        Place("message", b"@", 0),
        Place("params", b'{"jsonrpc":"2.0","id":7,"method":"echo","params":{"p":@}}', 2),
        Place("unknown method", b'{"jsonrpc":"2.0","id":7,"method":"nope","params":{"p":@}}', 2),
        Place("id", b'{"jsonrpc":"2.0","id":@,"method":"echo","params":{}}', 1),
        Place("notification", b'{"jsonrpc":"2.0","method":"note","params":{"p":@}}', 2),
        Place("result", b'{"jsonrpc":"2.0","id":1,"result":@}', 1),
        Place(
            "error.data", b'{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m","data":@}}', 2
        ),
    )
}
place_names = st.sampled_from(sorted(PLACES))
kinds = st.sampled_from(KINDS)


@attrs.frozen
class Expected:
    """What the engine writes for the deep message, and how our pending request ends."""

    answer: tuple[Any, int | str] | None  # (id, error code or "result"), None: nothing
    pending: str = "pending"  # "result", "error 1", "invalid" or still "pending"


def engine_expects(place: str, depth: int) -> Expected:
    """The JSON-RPC 2.0 answer for ``depth`` levels at ``place`` (see docs/reference/jsonrpc.md)."""
    too_deep = depth + PLACES[place].levels > LIMIT
    if place == "message":
        # Parsed: a scalar or an array/object that is no request (-32600); too deep for
        # our parser: -32700.
        return Expected((None, -32700 if too_deep else -32600))
    if place == "params":
        return Expected((7, -32602 if too_deep else "result"))
    if place == "unknown method":
        return Expected((7, -32601))
    if place == "id":
        if depth == 0:  # the id is 0: a valid request
            return Expected((0, "result"))
        return Expected((None, -32700 if too_deep else -32600))
    if place == "notification":
        return Expected((None, -32700) if too_deep else None)
    if place == "result":
        return Expected((None, -32600), "invalid") if too_deep else Expected(None, "result")
    assert place == "error.data"
    return Expected((None, -32600), "invalid") if too_deep else Expected(None, "error 1")


# -- the engine on each byte framing, in memory ----------------------------------------


class RecordingTransport(StringTransport):
    """A StringTransport that also keeps each write apart (one message per write)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        super().write(data)


def split_ndjson(transport: RecordingTransport) -> list[bytes]:
    data: bytes = transport.value()
    return data.split(b"\n")[:-1]


def split_content_length(transport: RecordingTransport) -> list[bytes]:
    data: bytes = transport.value()
    found = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        length = int(head.split(b":")[1])
        found.append(rest[:length])
        data = rest[length:]
    return found


def split_messages(transport: RecordingTransport) -> list[bytes]:
    return list(transport.writes)


@attrs.frozen
class Framing:
    name: str
    make: Callable[[MethodRegistry], JSONRPCEngine]
    frame: Callable[[bytes], bytes]
    split: Callable[[RecordingTransport], list[bytes]]


FRAMINGS = [
    Framing(
        "ndjson (ACP over stdio, raw endpoints)",
        lambda r: JSONRPCProtocol(r, clock=Clock()),
        lambda m: m + b"\n",
        split_ndjson,
    ),
    Framing(
        "ndjson (MCP over stdio)",
        lambda r: JSONRPCEngine(
            r, clock=Clock(), framing=NDJSONProtocol(), cancellation=MCP_CANCELLATION
        ),
        lambda m: m + b"\n",
        split_ndjson,
    ),
    Framing(
        "Content-Length (LSP)",
        lambda r: ContentLengthJSONRPCProtocol(r, clock=Clock()),
        lambda m: b"Content-Length: %d\r\n\r\n" % len(m) + m,
        split_content_length,
    ),
    Framing(
        "MessageFraming (WebSocket, Streamable HTTP)",
        lambda r: JSONRPCProtocol(r, clock=Clock(), framing=MessageFraming()),
        lambda m: m,
        split_messages,
    ),
]


class Peer:
    """One engine on a framing, with a request of ours (id 1) pending."""

    def __init__(self, framing: Framing) -> None:
        self.framing = framing
        self.notes: list[Any] = []
        registry = MethodRegistry()
        registry.add_request("echo", lambda r: r.params)
        registry.add_notification("note", lambda params, meta: self.notes.append(params))
        self.engine = framing.make(registry)
        self.transport = RecordingTransport()
        self.engine.makeConnection(self.transport)
        self.outcome: list[Any] = []
        self.engine.request("ask").addBoth(self.outcome.append)
        self.take()

    def send(self, message: bytes) -> None:
        self.engine.dataReceived(self.framing.frame(message))

    def take(self) -> list[Any]:
        """The messages written since the last call, decoded."""
        found = [json.loads(m) for m in self.framing.split(self.transport)]
        self.transport.clear()
        self.transport.writes.clear()
        return found

    def pending(self) -> str:
        if not self.outcome:
            return "pending"
        outcome = self.outcome[0]
        if not hasattr(outcome, "value"):
            return "result"
        if isinstance(outcome.value, InvalidRequest):
            assert "nested deeper than 254" in str(outcome.value), outcome.value
            return "invalid"
        assert isinstance(outcome.value, RPCError)
        return f"error {outcome.value.code}"


def answer_of(message: dict[str, Any]) -> tuple[Any, int | str]:
    if "result" in message:
        return message["id"], "result"
    return message["id"], message["error"]["code"]


def check_deep_message_then_next_request(peer: Peer, place: str, kind: str, depth: int) -> None:
    """The deep message gets its expected answer; the next request is answered."""
    expected = engine_expects(place, depth)
    peer.send(PLACES[place].message(depth, kind))
    answers = peer.take()
    assert [answer_of(a) for a in answers] == ([] if expected.answer is None else [expected.answer])
    for a in answers:
        if "error" in a and depth + PLACES[place].levels > LIMIT and a["error"]["code"] != -32601:
            assert "nested deeper than 254 levels" in a["error"]["message"]
    assert peer.pending() == expected.pending
    peer.send(b'{"jsonrpc":"2.0","id":99,"method":"echo","params":{"next":true}}')
    assert peer.take() == [{"jsonrpc": "2.0", "id": 99, "result": {"next": True}}]
    assert peer.engine.connected


@pytest.mark.parametrize("framing", FRAMINGS, ids=lambda f: f.name)
@given(place=place_names, kind=kinds, depth=depths)
@example(place="message", kind="array", depth=0)
@example(place="message", kind="array", depth=1)
@example(place="message", kind="array", depth=969)
@example(place="message", kind="object", depth=970)
@example(place="message", kind="array", depth=999)
@example(place="params", kind="object", depth=1000)
@example(place="id", kind="mixed", depth=1024)
@example(place="result", kind="array", depth=1025)
@example(place="error.data", kind="object", depth=5000)
@example(place="notification", kind="mixed", depth=100_000)
@example(place="params", kind="array", depth=LIMIT - 2)
@example(place="params", kind="array", depth=LIMIT - 1)
def test_any_depth_anywhere_is_answered_and_the_connection_goes_on(
    framing: Framing, place: str, kind: str, depth: int
) -> None:
    """
    Whatever the depth (0 to 100,000), the shape and the place of a deep value, the
    engine answers as JSON-RPC 2.0 says (-32700 when the text is too deep for our parser
    and no request can be read, -32600 for what parses but is no request, -32602 with the
    id for a request whose params are too deep, -32601 first for an unknown method), our
    pending request ends if the deep message is its response, and the next request on
    the same connection is answered, on every byte framing.
    """
    check_deep_message_then_next_request(Peer(framing), place, kind, depth)


@pytest.mark.parametrize("depth", EXPLICIT_DEPTHS + EDGES)
@pytest.mark.parametrize("place", sorted(PLACES))
@pytest.mark.parametrize("kind", KINDS)
def test_every_named_depth_at_every_place_over_ndjson(kind: str, place: str, depth: int) -> None:
    """The issue's depths and the limit's edges, at every place, in every shape (NDJSON):
    the answer of the property above, and the connection goes on."""
    check_deep_message_then_next_request(Peer(FRAMINGS[0]), place, kind, depth)


def test_a_deep_value_before_the_envelope_is_a_parse_error() -> None:
    """The envelope is read up to the deep member: ``params`` written before ``id`` and
    ``method`` leaves no id to answer, so a too deep one gets -32700 with id null."""
    peer = Peer(FRAMINGS[0])
    peer.send(b'{"params":' + nested(2000) + b',"jsonrpc":"2.0","id":5,"method":"echo"}')
    (answer,) = peer.take()
    assert answer["id"] is None and answer["error"]["code"] == -32700
    assert "'params' member is nested deeper than 254 levels" in answer["error"]["message"]


def test_another_deep_member_of_a_request_is_invalid_request_with_its_id() -> None:
    """A request whose envelope was read but with another member nested too deep (not
    params): -32600 with its id, naming the member."""
    peer = Peer(FRAMINGS[0])
    peer.send(b'{"jsonrpc":"2.0","id":5,"method":"echo","params":{},"x":' + nested(300) + b"}")
    (answer,) = peer.take()
    assert answer["id"] == 5 and answer["error"]["code"] == -32600
    assert "'x' member" in answer["error"]["message"]


def test_a_deep_request_reusing_an_id_in_progress_is_not_answered_with_that_id() -> None:
    """A too deep request with the id of a request still running is answered with id
    null (answering the id would look like the running request's answer)."""
    registry = MethodRegistry()
    registry.add_request("slow", lambda r: Deferred())
    engine = JSONRPCProtocol(registry, clock=Clock())
    transport = StringTransport()
    engine.makeConnection(transport)
    engine.dataReceived(b'{"jsonrpc":"2.0","id":5,"method":"slow","params":{}}\n')
    engine.dataReceived(b'{"jsonrpc":"2.0","id":5,"method":"slow","params":' + nested(400) + b"}\n")
    (answer,) = [json.loads(line) for line in transport.value().splitlines()]
    assert answer["id"] is None and answer["error"]["code"] == -32700


@implementer(ILogObserver)
class Logged:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, event: LogEvent) -> None:
        self.lines.append(formatEvent(event))


def test_each_refusal_is_logged_clearly_and_counted() -> None:
    """Each refused deep message is one warning naming what was too deep (no Python
    internals such as "maximum recursion depth"), and counts as undecodable."""
    peer = Peer(FRAMINGS[0])
    logged = Logged()
    globalLogPublisher.addObserver(logged)
    try:
        peer.send(nested(999))
        peer.send(PLACES["params"].message(5000, "object"))
        peer.send(PLACES["result"].message(300, "array"))
    finally:
        globalLogPublisher.removeObserver(logged)
    deep = [line for line in logged.lines if "nested deeper than 254 levels" in line]
    assert len(deep) == 3, logged.lines
    assert "request echo (id 7) refused" in deep[1]
    assert "malformed response" in deep[2]
    assert not any("recursion" in line for line in logged.lines)
    assert peer.engine.undecodable_dropped == 3


# -- the sending side ---------------------------------------------------------------------


def test_nothing_nested_too_deep_is_sent() -> None:
    """What we send is bounded like what we read: a request with params nested deeper
    than the limit fails (NestingTooDeep, a ValueError), a notification raises it, and a
    handler's result nested too deep (100,000 levels, no recursion) is answered -32603;
    the connection goes on."""
    registry = MethodRegistry()
    registry.add_request("deep", lambda r: nested_value(100_000))
    registry.add_request("ok", lambda r: {"fine": nested_value(LIMIT - 2)})
    engine = JSONRPCProtocol(registry, clock=Clock())
    transport = StringTransport()
    engine.makeConnection(transport)
    failed: list[Any] = []
    engine.request("x", {"p": nested_value(LIMIT)}).addErrback(failed.append)
    assert failed and failed[0].check(NestingTooDeep)
    with pytest.raises(NestingTooDeep):
        engine.notify("x", {"p": nested_value(100_000)})
    assert transport.value() == b""
    engine.dataReceived(b'{"jsonrpc":"2.0","id":1,"method":"deep","params":{}}\n')
    engine.dataReceived(b'{"jsonrpc":"2.0","id":2,"method":"ok","params":{}}\n')
    first, second = [json.loads(line) for line in transport.value().splitlines()]
    assert first["id"] == 1 and first["error"]["code"] == -32603
    assert second["id"] == 2 and reference_depth(second) == LIMIT


def test_encoders_refuse_deep_values_without_recursing() -> None:
    """encode_message and jsonbytes.dumps take values nested up to the limit (orjson's
    own: 254) and refuse deeper ones, 100,000 levels included, with NestingTooDeep,
    also on the json fallback (a huge integer, a lone surrogate, a null)."""
    for leaf in (0, 10**30, "\ud800", None):
        ok: Any = leaf
        for _ in range(LIMIT):
            ok = [ok]
        if leaf != "\ud800":  # (which UTF-8 cannot carry: encode_message escapes it)
            assert reference_depth(json.loads(jsonbytes.dumps(ok))) == LIMIT
        assert reference_depth(json.loads(encode_message(ok))) == LIMIT
        for bad in ([ok], nested_value(100_000)):
            with pytest.raises(NestingTooDeep):
                jsonbytes.dumps(bad)
            with pytest.raises(NestingTooDeep):
                encode_message(bad)


def test_orjson_limits_this_policy_relies_on() -> None:
    """orjson reads 1024 levels and refuses 1025; it writes 254 and refuses 255: the
    fast check uses the second (a change in orjson shows up here first)."""
    orjson.loads(nested(1024))
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(nested(1025))
    orjson.dumps(nested_value(254))
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps(nested_value(255))


# -- the parser's policy: one limit, checked without recursion --------------------------


@given(value=json_values)
def test_nesting_exceeds_agrees_with_the_recursive_definition(value: Any) -> None:
    """nesting_exceeds(v, n) is exactly "depth(v) > n" for any JSON value."""
    depth = reference_depth(value)
    for limit in range(0, depth + 2):
        assert nesting_exceeds(value, limit) == (depth > limit)


def test_nesting_exceeds_is_not_recursive() -> None:
    """100,000 levels (far past the recursion limit) and a cycle are answered."""
    assert nesting_exceeds(nested_value(100_000))
    assert not nesting_exceeds(nested_value(LIMIT))
    cycle: list[Any] = []
    cycle.append(cycle)
    assert nesting_exceeds(cycle)


@given(depth=depths, kind=kinds)
@example(depth=LIMIT, kind="array")
@example(depth=LIMIT + 1, kind="array")
@example(depth=LIMIT, kind="object")
@example(depth=LIMIT + 1, kind="mixed")
def test_loads_reads_up_to_the_limit_and_refuses_beyond(depth: int, kind: str) -> None:
    """jsonbytes.loads (bytes and str) reads text nested up to MAX_NESTING_DEPTH and
    raises NestingTooDeep (a ValueError) beyond, never RecursionError;
    loads_or_not_parsed gives TOO_DEEP (or NOT_PARSED past orjson's 1024)."""
    text = nested(depth, kind)
    fast = loads_or_not_parsed(text)
    if depth <= LIMIT:
        assert reference_depth(loads(text)) == depth
        assert loads(text.decode()) == fast
        return
    for data in (text, text.decode()):
        with pytest.raises(NestingTooDeep):
            loads(data)
    assert fast is (TOO_DEEP if depth <= 1024 else NOT_PARSED)


@pytest.mark.parametrize("depth", [LIMIT, LIMIT + 1, 600, 1000, 1024, 1025, 100_000])
def test_the_json_fallback_keeps_the_same_limit(depth: int) -> None:
    """Text orjson leaves to json (a huge integer, a lone surrogate) is held to the
    same limit, however deep json itself could go."""
    for leaf in (b"1" * 30, b'"\\ud800"'):
        text = b"[" * depth + leaf + b"]" * depth
        decoded = decode_message(text)
        if depth <= LIMIT:
            assert isinstance(decoded, tuple)
            assert reference_depth(loads(text)) == depth
        else:
            assert isinstance(decoded, TooDeep)
            with pytest.raises(NestingTooDeep):
                loads(text)


def test_orjson_proves_a_value_shallow_only_if_it_refuses_deeper_ones() -> None:
    """The fast check is used only when orjson refuses values nested deeper than the
    limit (then what it writes is shallow enough); a writer with no limit, or a higher
    one, leaves every check to the exact walk."""

    def refusing_past(n: int) -> Callable[[Any], bytes]:
        def dumps(value: Any) -> bytes:
            if nesting_exceeds(value, n):
                raise TypeError("Recursion limit reached")
            return b""

        return dumps

    assert jsonbytes._refuses_deeper_than(refusing_past(254), LIMIT)
    assert jsonbytes._refuses_deeper_than(refusing_past(128), LIMIT)
    assert not jsonbytes._refuses_deeper_than(refusing_past(1000), LIMIT)
    assert not jsonbytes._refuses_deeper_than(lambda value: b"", LIMIT)
    loads(b"[]")  # (orjson is loaded, and probed, on first use)
    assert jsonbytes._write_check is orjson.dumps


def test_the_walk_gives_the_same_answers_when_orjson_cannot_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """If orjson's writer limit were not the policy's, every check falls back to the
    exact walk: same answers."""
    monkeypatch.setattr(jsonbytes, "_write_check", jsonbytes._unchecked)
    for depth in (LIMIT, LIMIT + 1, 1024):
        text = nested(depth, "mixed")
        result = loads_or_not_parsed(text)
        assert (result is TOO_DEEP) == (depth > LIMIT)
    with pytest.raises(NestingTooDeep):
        jsonbytes.dumps(nested_value(LIMIT + 1))


@given(depth=depths, kind=kinds, place=place_names)
def test_decode_message_never_raises_and_reads_the_envelope(
    depth: int, kind: str, place: str
) -> None:
    """decode_message gives a value or a TooDeep at any depth, never an exception; a
    TooDeep has the members read before the deep one."""
    message = PLACES[place].message(depth, kind)
    decoded = decode_message(message)
    if depth + PLACES[place].levels <= LIMIT:
        assert isinstance(decoded, tuple)
        return
    assert isinstance(decoded, TooDeep)
    assert "nested deeper than 254 levels" in decoded.reason
    if place == "message":
        assert decoded.member == (None if kind != "object" else "k")
    elif place in ("params", "unknown method"):
        assert decoded.member == "params"
        assert decoded.members is not None and set(decoded.members) == {"jsonrpc", "id", "method"}
    elif place == "id":
        assert decoded.member == "id" and decoded.members == {"jsonrpc": "2.0"}
    elif place in ("result", "error.data"):
        assert decoded.is_response()


def test_read_envelope_stops_at_what_it_cannot_read() -> None:
    """read_envelope: a non-object has no members; an unreadable member ends the scan
    (its name kept); a broken text ends it without a name."""
    assert read_envelope("[[[").members is None
    deep = read_envelope('{"a":1, "b" : "x", "c":' + "[" * 3000 + "]" * 3000 + ',"d":2}')
    assert deep.members == {"a": 1, "b": "x"} and deep.member == "c"
    assert read_envelope('{"a":1 "b":2}').member is None
    assert read_envelope('{"a":NaN}').member == "a"


def test_decode_message_outcomes_at_the_edges() -> None:
    """254 levels are a value, 255 a TooDeep, with and without a BOM; blank is None."""
    assert decode_message(b"   ") is None
    assert isinstance(decode_message(nested(LIMIT)), tuple)
    assert isinstance(decode_message(b"\xef\xbb\xbf" + nested(LIMIT + 1)), TooDeep)
    assert repr(decode_message(nested(LIMIT + 1, "object"))) == "TooDeep('k', keys=[])"


# -- a typed ACP agent (what bob is) ------------------------------------------------------


class TinyAgent(Agent):
    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=negotiate_version(params.protocol_version)
        )


INITIALIZE = b'{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":1}}\n'


@pytest.mark.parametrize("depth", EXPLICIT_DEPTHS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_typed_agent_answers_deep_json_then_initialize(depth: int, kind: str) -> None:
    """An AgentConnection (the typed ACP layer bob uses) answers a deep message, then
    initialize (with deep ``_meta`` params first: -32602 once too deep, else answered)."""
    protocol = JSONRPCProtocol(clock=Clock())
    AgentConnection(TinyAgent(), protocol=protocol)
    transport = StringTransport()
    protocol.makeConnection(transport)
    protocol.dataReceived(nested(depth, kind) + b"\n")
    meta = (
        b'{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":1,"_meta":{"x":'
    )
    protocol.dataReceived(meta + nested(depth, kind) + b"}}}\n")
    protocol.dataReceived(INITIALIZE)
    first, second, third = [json.loads(line) for line in transport.value().splitlines()]
    assert first["id"] is None
    assert first["error"]["code"] == (-32600 if depth <= LIMIT else -32700)
    assert second["id"] == 3
    if depth + 3 <= LIMIT:
        assert second["result"]["protocolVersion"] == 1
    else:
        assert second["error"]["code"] == -32602
    assert third == {"jsonrpc": "2.0", "id": "init", "result": third["result"]}
    assert third["result"]["protocolVersion"] == 1


# -- the trace (ACPKIT_TRACE) -------------------------------------------------------------


class ListTracer:
    def __init__(self) -> None:
        self.lines: list[tuple[str, bytes]] = []

    def received(self, line: bytes) -> None:
        self.lines.append(("<-", line))

    def sent(self, line: bytes) -> None:
        self.lines.append(("->", line))


def test_the_trace_records_deep_lines_as_received_and_reads_them_back() -> None:
    """A tracer on the framing records a 100,000-deep line byte for byte and the answer;
    reading the record back (TraceRecord.json) is a ValueError, and printing it says
    why; nothing recurses."""
    peer = Peer(FRAMINGS[0])
    tracer = ListTracer()
    peer.engine.tracer = tracer
    line = nested(100_000, "mixed")
    peer.send(line)
    assert tracer.lines[0] == ("<-", line)
    assert json.loads(tracer.lines[1][1])["error"]["code"] == -32700
    record = TraceRecord(
        timestamp=datetime.now(UTC), direction="<-", name="bob", message=line, line_number=1
    )
    with pytest.raises(NestingTooDeep):
        record.json()
    assert "not JSON: nested deeper than 254 levels" in pretty_record(record).splitlines()[0]
