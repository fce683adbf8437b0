"""
The seam between the JSON-RPC engine and its framing: the engine holds a framing object
(``IFraming``) and is its receiver (``IFramedMessageReceiver``), so one engine class runs
over NDJSON, Content-Length, or a framing that reads no byte stream at all.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.interfaces import IHalfCloseableProtocol, ITransport
from twisted.internet.protocol import connectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from zope.interface import implementer
from zope.interface.verify import verifyObject

from acpkit.framing import (
    DEFAULT_MAX_LENGTH,
    ContentLengthProtocol,
    IFramedMessageReceiver,
    IFraming,
    ITraced,
    LineTracer,
    NDJSONProtocol,
)
from acpkit.jsonrpc import JSONRPCEngine, JSONRPCProtocol, MethodRegistry
from acpkit.jsonrpc.cancel import ACP_CANCELLATION, MCP_CANCELLATION
from acpkit.jsonrpc.content_length import ContentLengthJSONRPCProtocol


@implementer(IFraming)
class MessageListFraming:
    """
    A framing with no byte stream (as MCP's Streamable HTTP would be): whole messages
    come in through :meth:`deliver` and go out to :attr:`sent`.
    """

    MAX_LENGTH = DEFAULT_MAX_LENGTH
    tracer: LineTracer | None = None
    paused = False

    def __init__(self) -> None:
        self.receiver: IFramedMessageReceiver | None = None
        self.sent: list[bytes] = []
        self.transport: ITransport | None = None
        self.lost: Failure | None = None

    def makeConnection(self, transport: ITransport) -> None:
        self.transport = transport

    def dataReceived(self, data: bytes) -> None:
        raise AssertionError("a message framing reads no bytes")

    def readConnectionLost(self) -> None:
        assert self.receiver is not None
        self.receiver.inputEnded()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.lost = reason

    def sendMessage(self, data: bytes, /) -> None:
        self.sent.append(data)

    def deliver(self, message: dict[str, Any]) -> None:
        """One message from the peer (an HTTP response body, an SSE event)."""
        assert self.receiver is not None
        self.receiver.messageReceived(json.dumps(message).encode())


def registry() -> MethodRegistry:
    reg = MethodRegistry()
    reg.add_request("echo", lambda r: r.params)
    return reg


def frame_for(framing: Any, message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    if isinstance(framing, ContentLengthProtocol):
        return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    return body + b"\n"


def written_messages(framing: Any, transport: StringTransport) -> list[dict[str, Any]]:
    if isinstance(framing, MessageListFraming):
        return [json.loads(m) for m in framing.sent]
    data = transport.value()
    if isinstance(framing, NDJSONProtocol):
        return [json.loads(line) for line in data.split(b"\n") if line]
    out = []
    while data:
        head, rest = data.split(b"\r\n\r\n", 1)
        length = int(head.split(b":")[1])
        out.append(json.loads(rest[:length]))
        data = rest[length:]
    return out


def feed(proto: JSONRPCEngine, message: dict[str, Any]) -> None:
    framing = proto.framing
    if isinstance(framing, MessageListFraming):
        framing.deliver(message)
    else:
        proto.dataReceived(frame_for(framing, message))


FRAMINGS = [NDJSONProtocol, ContentLengthProtocol, MessageListFraming]


@pytest.mark.parametrize("make_framing", FRAMINGS)
def test_one_engine_class_over_any_framing(make_framing: Any) -> None:
    """
    The generic engine, given a framing object, answers requests, reports unknown
    methods, correlates its own requests and closes after the input ends, the same way
    over NDJSON, Content-Length and a framing that reads no bytes.
    """
    framing = make_framing()
    proto = JSONRPCEngine(registry(), clock=Clock(), framing=framing, cancellation=MCP_CANCELLATION)
    transport = StringTransport()
    proto.makeConnection(transport)
    assert proto.framing is framing and framing.receiver is proto
    feed(proto, {"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"a": 1}})
    feed(proto, {"jsonrpc": "2.0", "id": 2, "method": "nope", "params": {}})
    answers: list[Any] = []
    proto.request("ping", {}).addCallback(answers.append)
    first, second, ours = written_messages(framing, transport)
    assert first == {"jsonrpc": "2.0", "id": 1, "result": {"a": 1}}
    assert second["id"] == 2 and second["error"]["code"] == -32601
    assert ours == {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {}}
    feed(proto, {"jsonrpc": "2.0", "id": 1, "result": "pong"})
    assert answers == ["pong"]
    proto.readConnectionLost()
    assert transport.disconnecting


def test_message_framing_oversized_head_is_answered_with_its_id() -> None:
    """A framing reporting an oversized message's head gets the engine's -32600 answer."""
    framing = MessageListFraming()
    proto = JSONRPCEngine(registry(), clock=Clock(), framing=framing, cancellation=MCP_CANCELLATION)
    proto.makeConnection(StringTransport())
    framing.MAX_LENGTH = 100
    proto.messageLengthExceeded(b'{"jsonrpc":"2.0","id":"r1","method":"echo","params":{"x":"')
    (reply,) = (json.loads(m) for m in framing.sent)
    assert reply["id"] == "r1" and reply["error"]["code"] == -32600
    assert reply["error"]["data"] == {"limit": 100}
    assert proto.oversized_dropped == 1


def test_protocols_hold_their_framing_instead_of_inheriting_it() -> None:
    """
    JSONRPCProtocol holds an NDJSONProtocol and ContentLengthJSONRPCProtocol a
    ContentLengthProtocol, each a separate IFraming whose receiver is the protocol; the
    protocols still provide the half-close, receiver, sender and traced interfaces.
    """
    for cls, framing_cls in (
        (JSONRPCProtocol, NDJSONProtocol),
        (ContentLengthJSONRPCProtocol, ContentLengthProtocol),
    ):
        assert not issubclass(cls, framing_cls)
        proto = cls(clock=Clock())
        assert type(proto.framing) is framing_cls and proto.framing is not proto
        assert verifyObject(IFraming, proto.framing)
        assert proto.framing.receiver is proto
        assert verifyObject(IFramedMessageReceiver, proto)
        for interface in (IHalfCloseableProtocol, ITraced):
            assert interface.providedBy(proto)
    assert JSONRPCProtocol(clock=Clock()).cancellation is ACP_CANCELLATION


def test_framing_settings_are_read_and_set_through_the_protocol() -> None:
    """MAX_LENGTH (max_line_length), tracer and paused on the protocol are its framing's."""
    proto = JSONRPCProtocol(clock=Clock(), max_line_length=1234)
    assert proto.MAX_LENGTH == proto.framing.MAX_LENGTH == 1234
    proto.MAX_LENGTH = 99
    assert proto.framing.MAX_LENGTH == 99

    class Tracer:
        def received(self, line: bytes) -> None:
            pass

        def sent(self, line: bytes) -> None:
            pass

    tracer = Tracer()
    proto.tracer = tracer
    assert proto.framing.tracer is tracer and proto.tracer is tracer
    proto.paused = True
    assert proto.framing.paused and proto.paused


def test_a_subclass_max_length_class_attribute_still_sets_the_limit() -> None:
    """
    ``MAX_LENGTH = n`` in a protocol subclass (as with the inherited framing) becomes its
    framing's limit, still settable per instance; ``max_line_length`` wins over it.
    """

    class Small(JSONRPCProtocol):
        MAX_LENGTH = 50

    proto = Small(registry(), clock=Clock())
    assert proto.MAX_LENGTH == proto.framing.MAX_LENGTH == 50
    transport = StringTransport()
    proto.makeConnection(transport)
    proto.dataReceived(
        b'{"jsonrpc":"2.0","id":1,"method":"echo","params":{"x":"' + b"a" * 60 + b'"}}\n'
    )
    assert proto.oversized_dropped == 1
    proto.MAX_LENGTH = 70
    assert proto.framing.MAX_LENGTH == 70
    assert Small(clock=Clock(), max_line_length=9).framing.MAX_LENGTH == 9
    assert JSONRPCProtocol(clock=Clock()).MAX_LENGTH == DEFAULT_MAX_LENGTH


def test_tracer_set_on_the_protocol_sees_both_directions() -> None:
    """A tracer set on the protocol records every message read and written, once each."""
    seen: list[tuple[str, bytes]] = []

    class Tracer:
        def received(self, line: bytes) -> None:
            seen.append(("<-", line))

        def sent(self, line: bytes) -> None:
            seen.append(("->", line))

    proto = ContentLengthJSONRPCProtocol(registry(), clock=Clock())
    proto.tracer = Tracer()
    proto.makeConnection(StringTransport())
    body = b'{"jsonrpc":"2.0","id":1,"method":"echo","params":{}}'
    proto.dataReceived(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    assert seen == [("<-", body), ("->", b'{"jsonrpc":"2.0","id":1,"result":{}}')]


def test_a_framing_serves_one_receiver_and_the_engine_needs_one() -> None:
    """A framing already held is refused; the generic engine without a framing is refused."""
    proto = JSONRPCProtocol(clock=Clock())
    with pytest.raises(ValueError, match="another receiver"):
        JSONRPCProtocol(clock=Clock(), framing=proto.framing)
    with pytest.raises(ValueError, match="framing"):
        JSONRPCEngine(clock=Clock(), cancellation=ACP_CANCELLATION)


def test_subclass_input_ended_runs_after_the_last_unterminated_line() -> None:
    """
    A protocol subclass overriding inputEnded (as bob's stdio protocol does) is called
    by the held framing on half-close, after the last line without newline is answered.
    """
    events: list[str] = []

    class Stdio(JSONRPCProtocol):
        def inputEnded(self) -> None:
            events.append("ended")
            super().inputEnded()

    proto = Stdio(registry(), clock=Clock())
    transport = StringTransport()
    proto.makeConnection(transport)
    proto.dataReceived(b'{"jsonrpc":"2.0","id":7,"method":"echo","params":{"z":0}}')
    assert transport.value() == b""
    proto.readConnectionLost()
    assert json.loads(transport.value()) == {"jsonrpc": "2.0", "id": 7, "result": {"z": 0}}
    assert events == ["ended"] and transport.disconnecting


def test_engine_over_content_length_closes_on_a_malformed_header() -> None:
    """The Content-Length framing reports a malformed header to its receiver (framingFailed)."""
    framing = ContentLengthProtocol()
    proto = JSONRPCEngine(registry(), clock=Clock(), framing=framing, cancellation=MCP_CANCELLATION)
    transport = StringTransport()
    proto.makeConnection(transport)
    proto.dataReceived(b"Content-Length: x\r\n\r\n{}")
    reply = json.loads(transport.value().split(b"\r\n\r\n", 1)[1])
    assert reply["id"] is None and reply["error"]["code"] == -32700
    assert reply["error"]["message"].startswith("Parse error")
    assert "malformed header: Content-Length is not a decimal number" in json.dumps(reply)
    assert transport.disconnecting and proto.undecodable_dropped == 1


# -- held and subclassed framings deliver the same events ------------------------------


@implementer(IFramedMessageReceiver)
class Events:
    """An IFramedMessageReceiver recording what a held framing delivers."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def messageReceived(self, data: bytes) -> None:
        self.events.append(("message", data))

    def messageLengthExceeded(self, head: bytes) -> None:
        self.events.append(("too long", head))

    def inputEnded(self) -> None:
        self.events.append(("ended", None))

    def framingFailed(self, reason: str) -> None:
        self.events.append(("failed", reason))


class LineEvents(NDJSONProtocol):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, Any]] = []

    def lineReceived(self, line: bytes) -> None:
        self.events.append(("message", line))

    def lineLengthExceeded(self, line: bytes) -> None:
        self.events.append(("too long", line))

    def inputEnded(self) -> None:
        self.events.append(("ended", None))


class BodyEvents(ContentLengthProtocol):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, Any]] = []

    def messageReceived(self, body: bytes) -> None:
        self.events.append(("message", body))

    def messageLengthExceeded(self, head: bytes) -> None:
        self.events.append(("too long", head))

    def malformedHeader(self, reason: str) -> None:
        self.events.append(("failed", f"malformed header: {reason}"))

    def inputEnded(self) -> None:
        self.events.append(("ended", None))


def run(framing: Any, data: bytes, cuts: list[int], limit: int) -> None:
    framing.MAX_LENGTH = limit
    framing.makeConnection(StringTransport())
    points = sorted({c % (len(data) + 1) for c in cuts})
    start = 0
    for point in [*points, len(data)]:
        framing.dataReceived(data[start:point])
        start = point
    framing.readConnectionLost()


messages = st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=8)


@given(messages, st.lists(st.integers(0, 400), max_size=6), st.integers(1, 25), st.booleans())
def test_held_ndjson_framing_delivers_what_a_subclass_gets(
    lines: list[bytes], cuts: list[int], limit: int, unterminated: bool
) -> None:
    """Over any chunking and limit, a held NDJSON framing's receiver sees the subclass's events."""
    data = b"".join(line + b"\n" for line in lines)
    if unterminated:
        data += b"tail"
    receiver = Events()
    run(NDJSONProtocol(receiver), data, cuts, limit)
    subclass = LineEvents()
    run(subclass, data, cuts, limit)
    assert receiver.events == subclass.events


@given(messages, st.lists(st.integers(0, 400), max_size=6), st.integers(1, 25), st.booleans())
def test_held_content_length_framing_delivers_what_a_subclass_gets(
    bodies: list[bytes], cuts: list[int], limit: int, broken: bool
) -> None:
    """The same for Content-Length, a malformed header included (framingFailed)."""
    data = b"".join(b"Content-Length: %d\r\n\r\n%s" % (len(b), b) for b in bodies)
    if broken:
        data += b"Content-Length: nope\r\n\r\n{}"
    receiver = Events()
    run(ContentLengthProtocol(receiver), data, cuts, limit)
    subclass = BodyEvents()
    run(subclass, data, cuts, limit)
    assert receiver.events == subclass.events
