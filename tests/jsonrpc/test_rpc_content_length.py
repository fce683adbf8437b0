"""The same JSON-RPC engine over Content-Length framing (LSP), end to end."""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.test.iosim import FakeTransport, connect

from acpkit.jsonrpc import InboundRequest, MethodRegistry
from acpkit.jsonrpc.content_length import ContentLengthJSONRPCProtocol


def registry(log: list[str]) -> MethodRegistry:
    """``echo`` answers its params; ``wait`` waits until cancelled."""

    async def wait(r: InboundRequest) -> Any:
        log.append(f"start {r.id}")
        try:
            await Deferred()
        except CancelledError:
            log.append(f"cancelled {r.id}")
            raise

    reg = MethodRegistry()
    reg.add_request("echo", lambda r: r.params)
    reg.add_request("wait", wait)
    return reg


def outcome(d: Deferred[Any]) -> Any:
    found: list[Any] = []
    d.addBoth(found.append)
    assert found, "the Deferred has not fired"
    return found[0]


def pair(log: list[str]) -> tuple[ContentLengthJSONRPCProtocol, ContentLengthJSONRPCProtocol, Any]:
    server = ContentLengthJSONRPCProtocol(registry(log), clock=Clock(), name="server")
    client = ContentLengthJSONRPCProtocol(MethodRegistry(), clock=Clock(), name="client")
    pump = connect(
        server,
        FakeTransport(server, isServer=True),
        client,
        FakeTransport(client, isServer=False),
    )
    return server, client, pump


def test_request_and_response_over_content_length() -> None:
    """Two protocols exchange a request and its response framed with Content-Length."""
    log: list[str] = []
    _server, client, pump = pair(log)
    d = client.request("echo", {"text": "héllo\nworld"})
    pump.flush()
    assert outcome(d) == {"text": "héllo\nworld"}


def test_lsp_cancel_request_end_to_end() -> None:
    """d.cancel() sends $/cancelRequest; the server cancels the handler and answers -32800."""
    log: list[str] = []
    server, client, pump = pair(log)
    seen: list[bytes] = []

    class Tracer:
        def received(self, line: bytes) -> None:
            seen.append(line)

        def sent(self, line: bytes) -> None:
            pass

    server.tracer = Tracer()
    d = client.request("wait", {})
    d.addErrback(lambda f: f.trap(CancelledError))
    pump.flush()
    assert log == ["start 1"]
    d.cancel()
    pump.flush()
    assert log == ["start 1", "cancelled 1"]
    assert json.loads(seen[-1]) == {
        "jsonrpc": "2.0",
        "method": "$/cancelRequest",
        "params": {"id": 1},
    }
    assert not server._inbound and server._running == 0


def test_wire_format_and_errors_are_the_engines() -> None:
    """Unknown method: -32601 framed with Content-Length; invalid JSON: -32700 id null."""
    proto = ContentLengthJSONRPCProtocol(MethodRegistry(), clock=Clock())
    transport = StringTransport()
    proto.makeConnection(transport)
    body = b'{"jsonrpc":"2.0","id":3,"method":"nope","params":{}}'
    proto.dataReceived(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    proto.dataReceived(b"Content-Length: 1\r\n\r\n{")
    data = transport.value()
    first, rest = data.split(b"\r\n\r\n", 1)
    length = int(first.split(b":")[1])
    assert json.loads(rest[:length])["error"]["code"] == -32601
    second = rest[length:].split(b"\r\n\r\n", 1)[1]
    reply = json.loads(second)
    assert reply["id"] is None and reply["error"]["code"] == -32700


def test_malformed_header_is_answered_then_closed() -> None:
    """A header without Content-Length: -32700 'malformed header', then the connection closes."""
    proto = ContentLengthJSONRPCProtocol(MethodRegistry(), clock=Clock())
    transport = StringTransport()
    proto.makeConnection(transport)
    proto.dataReceived(b"Content-Type: x\r\n\r\n{}")
    body = transport.value().split(b"\r\n\r\n", 1)[1]
    reply = json.loads(body)
    assert reply["id"] is None and reply["error"]["code"] == -32700
    assert "malformed header" in json.dumps(reply)
    assert transport.disconnecting


def test_oversized_body_answered_with_its_id() -> None:
    """A body over max_line_length is skipped and answered -32600 with the id it shows."""
    proto = ContentLengthJSONRPCProtocol(MethodRegistry(), clock=Clock(), max_line_length=100)
    transport = StringTransport()
    proto.makeConnection(transport)
    body = b'{"jsonrpc":"2.0","id":9,"method":"echo","params":{"x":"' + b"a" * 500 + b'"}}'
    proto.dataReceived(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    reply = json.loads(transport.value().split(b"\r\n\r\n", 1)[1])
    assert reply["id"] == 9 and reply["error"]["code"] == -32600
    assert proto.oversized_dropped == 1


def test_both_framings_provide_the_message_sender_interface() -> None:
    """NDJSON and Content-Length framings (and the engine over each) are IMessageSenders."""
    from acpkit.framing import ContentLengthProtocol, IMessageSender, NDJSONProtocol
    from acpkit.jsonrpc import JSONRPCProtocol

    for cls in (NDJSONProtocol, ContentLengthProtocol, JSONRPCProtocol):
        assert IMessageSender.implementedBy(cls)
    assert IMessageSender.providedBy(ContentLengthJSONRPCProtocol(clock=Clock()))


def test_acpkit_trace_reaches_content_length_protocols(tmp_path: Any, monkeypatch: Any) -> None:
    """ACPKIT_TRACE gives a Content-Length protocol a tracer, as it does an NDJSON one."""
    from acpkit.trace import attach_tracer

    monkeypatch.setenv("ACPKIT_TRACE", str(tmp_path / "trace.log"))
    proto = ContentLengthJSONRPCProtocol(MethodRegistry(), clock=Clock())
    attach_tracer(proto, "lsp")
    assert proto.tracer is not None
