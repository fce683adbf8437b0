"""
How acpkit's WebSocket server writes frames: byte for byte what Autobahn would write, in
one transport call, without Autobahn's per-frame debug-log formatting.
"""

from __future__ import annotations

from typing import Any

import pytest
from autobahn.websocket.protocol import WebSocketProtocol
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from acpkit.connection import Agent, AgentConnection
from acpkit.remote.websocket import text_frame_header, websocket_resource


class Quiet(Agent):
    def __init__(self, conn: AgentConnection) -> None:
        self.conn = conn


HANDSHAKE = (
    b"GET /acp HTTP/1.1\r\n"
    b"Host: 127.0.0.1:8765\r\n"
    b"Upgrade: websocket\r\n"
    b"Connection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    b"Sec-WebSocket-Version: 13\r\n\r\n"
)


def open_server(**options: Any) -> tuple[Any, StringTransport]:
    """An acpkit WebSocket server protocol, open on a StringTransport (its 101 cleared)."""
    resource = websocket_resource(lambda protocol: AgentConnection(Quiet, protocol=protocol))
    if options:
        resource.factory.setProtocolOptions(**options)
    address = IPv4Address("TCP", "127.0.0.1", 40000)
    websocket: Any = resource.factory.buildProtocol(address)
    transport = StringTransport(peerAddress=address)
    websocket.makeConnection(transport)
    websocket.dataReceived(HANDSHAKE)
    assert websocket.state == WebSocketProtocol.STATE_OPEN, transport.value()
    transport.clear()
    return websocket, transport


@pytest.mark.parametrize("size", [0, 10, 125, 126, 65535, 65536, 70_000])
def test_engine_writes_are_the_frames_autobahn_makes(size: int) -> None:
    """A message the engine writes goes out as the very frame Autobahn's own
    ``sendMessage`` makes (7-, 16- and 64-bit lengths), in one transport call."""
    websocket, transport = open_server()
    payload = b"x" * size
    websocket.sendMessage(payload, isBinary=False)
    expected = transport.value()
    transport.clear()
    calls: list[Any] = []
    write_sequence = transport.writeSequence

    def counted(data: Any) -> None:
        calls.append(data)
        write_sequence(data)

    transport.writeSequence = counted  # type: ignore[method-assign]
    websocket.acp.protocol.transport.write(payload)
    assert transport.value() == expected
    assert len(calls) == 1
    assert expected.startswith(text_frame_header(size))


def test_messages_over_the_size_limit_still_go_through_autobahn() -> None:
    """Beyond ``maxMessagePayloadSize`` Autobahn decides (it refuses to send), as before."""
    websocket, transport = open_server(maxMessagePayloadSize=100)
    with pytest.raises(Exception, match="exceeding payload limit"):
        websocket.send_text(b"x" * 101)
    assert transport.value() == b""


def test_sending_does_not_format_autobahn_debug_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """No per-frame debug-log arguments are built (``autobahn.util.hltype``) while
    sending a message: they cost more than the frame itself."""
    import autobahn.websocket.protocol as autobahn_protocol

    websocket, transport = open_server()
    formatted: list[Any] = []

    def hltype(obj: Any) -> str:
        formatted.append(obj)
        return ""

    monkeypatch.setattr(autobahn_protocol, "hltype", hltype)
    websocket.acp.protocol.transport.write(b'{"jsonrpc":"2.0","method":"x"}')
    websocket.sendPing(b"p")  # a control frame: Autobahn's sendFrame, our sendData
    assert transport.value()
    assert formatted == []
