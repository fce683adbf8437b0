"""
:class:`acpkit.framing.MessageFraming`: the JSON-RPC engine over a transport that
carries whole messages (one per ``dataReceived``, one per ``write``).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from zope.interface import implementer

from acpkit.framing import IFramedMessageReceiver, MessageFraming
from acpkit.jsonrpc import JSONRPCProtocol, MethodRegistry


class MessageTransport(StringTransport):
    """A StringTransport that keeps each write as one message."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.messages.append(data)
        super().write(data)


def _protocol(max_length: int | None = None) -> tuple[JSONRPCProtocol, MessageTransport]:
    registry = MethodRegistry()
    registry.add_request("echo", lambda request: request.params)
    proto = JSONRPCProtocol(
        registry, clock=Clock(), framing=MessageFraming(), max_line_length=max_length
    )
    transport = MessageTransport()
    proto.makeConnection(transport)
    return proto, transport


def _request(request_id: int, params: Any) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": "echo", "params": params}
    ).encode()


def test_each_message_in_is_one_request_and_each_answer_one_write() -> None:
    """Two messages delivered whole are answered by two writes with no delimiter."""
    proto, transport = _protocol()
    proto.dataReceived(_request(1, {"a": 1}))
    proto.dataReceived(_request(2, {"b": 2}))
    answers = [json.loads(m) for m in transport.messages]
    assert [a["id"] for a in answers] == [1, 2]
    assert answers[0]["result"] == {"a": 1}
    assert not any(m.endswith(b"\n") for m in transport.messages)


def test_a_message_may_contain_newlines_inside_its_json() -> None:
    """A pretty-printed message (newlines between tokens) is still one message."""
    proto, transport = _protocol()
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 7, "method": "echo", "params": {"a": [1, 2]}}, indent=2
    )
    proto.dataReceived(body.encode())
    assert json.loads(transport.messages[0])["result"] == {"a": [1, 2]}


def test_an_oversized_message_is_answered_with_its_own_id() -> None:
    """A request longer than the limit is answered -32600 with its id, not dropped silently."""
    proto, transport = _protocol(max_length=200)
    proto.dataReceived(_request(5, "x" * 1000))
    answer = json.loads(transport.messages[0])
    assert answer["id"] == 5
    assert answer["error"]["code"] == -32600


def test_empty_messages_are_keep_alives() -> None:
    """An empty message (or a bare newline) is ignored, not answered as a parse error."""
    proto, transport = _protocol()
    proto.dataReceived(b"")
    proto.dataReceived(b"\n")
    assert transport.messages == []
    assert proto.junk_lines == 0


def test_tracer_sees_each_message_both_ways() -> None:
    """``ACPKIT_TRACE``'s tracer records the request and the answer as whole messages."""
    seen: list[tuple[str, bytes]] = []

    class Tracer:
        def received(self, line: bytes) -> None:
            seen.append(("in", line))

        def sent(self, line: bytes) -> None:
            seen.append(("out", line))

    proto, _ = _protocol()
    proto.tracer = Tracer()
    proto.dataReceived(_request(1, {}))
    assert [d for d, _ in seen] == ["in", "out"]


@given(st.lists(st.integers(min_value=0, max_value=2**31), min_size=1, max_size=30))
def test_any_sequence_of_requests_is_answered_in_order(ids: list[int]) -> None:
    """Whatever the ids, each request gets exactly one answer, in wire order."""
    proto, transport = _protocol()
    for request_id in ids:
        proto.dataReceived(_request(request_id, {"n": request_id}))
    assert [json.loads(m)["id"] for m in transport.messages] == ids


def test_input_end_is_delivered_once() -> None:
    """readConnectionLost ends the input once; messages after it are ignored."""
    framing = MessageFraming()
    ended: list[str] = []

    @implementer(IFramedMessageReceiver)
    class Receiver:
        def messageReceived(self, data: bytes) -> None:
            ended.append("message")

        def messageLengthExceeded(self, head: bytes) -> None:
            ended.append("long")

        def inputEnded(self) -> None:
            ended.append("end")

        def framingFailed(self, reason: str) -> None:
            ended.append("failed")

    framing.receiver = Receiver()
    framing.readConnectionLost()
    framing.readConnectionLost()
    framing.dataReceived(b"{}")
    assert ended == ["end"]
