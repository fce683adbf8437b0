"""
The remote ACP server under abuse, in memory (``StringTransport``, ``task.Clock``):
credentials checked as soon as a request's headers are read (before its body), caps and
deadlines on the sockets themselves, connection ids bound to the token that opened
them, nothing secret in a log, a WebSocket that pings without reading is dropped.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import ILogObserver, globalLogPublisher
from zope.interface import implementer

from acpkit.connection import Agent, AgentConnection
from acpkit.io.admission import AdmissionLimits
from acpkit.remote.server import ACPResource, RemoteLimits, RemoteSite
from acpkit.remote.tokens import TokenSet

INITIALIZE = json.dumps(
    {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
).encode()


class EchoAgent(Agent):
    def __init__(self, conn: AgentConnection) -> None:
        self.conn = conn


class Connection:
    """One TCP connection to a RemoteSite, on a StringTransport."""

    def __init__(self, site: RemoteSite, host: str = "127.0.0.1") -> None:
        self.transport = StringTransport(
            peerAddress=IPv4Address("TCP", host, 40000),
            hostAddress=IPv4Address("TCP", "127.0.0.1", 8765),
        )
        protocol = site.buildProtocol(self.transport.getPeer())
        self.refused = protocol is None
        self.protocol = protocol
        if protocol is not None:
            protocol.makeConnection(self.transport)

    def send(self, data: bytes) -> None:
        assert self.protocol is not None
        self.protocol.dataReceived(data)

    def head(self, method: str, headers: dict[str, str], length: int | None = None) -> bytes:
        lines = [f"{method} /acp HTTP/1.1", "Host: 127.0.0.1:8765"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if length is not None:
            lines.append(f"Content-Length: {length}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    @property
    def answer(self) -> bytes:
        return bytes(self.transport.value())

    @property
    def status(self) -> int:
        return int(self.answer.split(b" ", 2)[1])

    @property
    def closing(self) -> bool:
        return bool(self.transport.disconnecting)


def site(**kwargs: Any) -> tuple[RemoteSite, Clock]:
    clock = Clock()
    limits = kwargs.pop("limits", RemoteLimits())
    resource = ACPResource(EchoAgent, clock=clock, limits=limits, **kwargs)
    remote = RemoteSite(resource, b"/acp", clock)
    remote.timeOut = None
    return remote, clock


def test_an_unauthenticated_post_is_refused_before_its_body() -> None:
    """
    A POST announcing 100 MB without a token: 401 as soon as its headers are read, the
    connection closed; the body is never read nor stored.
    """
    remote, _ = site(token=b"s3cret")
    connection = Connection(remote)
    headers = {"Content-Type": "application/json"}
    connection.send(connection.head("POST", headers, length=100_000_000))
    assert connection.status == 401
    assert b'WWW-Authenticate: Bearer realm="acp"' in connection.answer
    assert b"Connection: close" in connection.answer
    assert connection.closing
    sent = len(connection.answer)
    connection.send(b"x" * 65536)  # what the peer had already sent is dropped
    assert len(connection.answer) == sent


def test_a_refused_request_is_answered_once() -> None:
    """A refused GET (no body) is not rendered afterwards: one answer only."""
    remote, _ = site(token=b"s3cret")
    connection = Connection(remote)
    connection.send(connection.head("GET", {"Accept": "text/event-stream"}))
    assert connection.answer.count(b"HTTP/1.1 ") == 1


def test_an_expect_continue_request_gets_no_100_after_the_refusal() -> None:
    """Expect: 100-continue without a token: the 401 alone, no '100 Continue'."""
    remote, _ = site(token=b"s3cret")
    connection = Connection(remote)
    headers = {"Content-Type": "application/json", "Expect": "100-continue"}
    connection.send(connection.head("POST", headers, length=10))
    assert b"100 Continue" not in connection.answer
    assert connection.status == 401


def test_a_forbidden_origin_is_refused_before_its_body() -> None:
    """A browser Origin that is not allowed: 403 from the headers alone."""
    remote, _ = site(token=b"s3cret")
    connection = Connection(remote)
    headers = {"Authorization": "Bearer s3cret", "Origin": "https://evil.example"}
    connection.send(connection.head("POST", headers, length=10))
    assert connection.status == 403 and connection.closing


def test_an_authenticated_request_is_served_and_leaves_the_pending_pool() -> None:
    """The right token: the request is served; its connection is no longer pending."""
    remote, clock = site(token=b"s3cret")
    connection = Connection(remote)
    headers = {"Authorization": "Bearer s3cret", "Content-Type": "application/json"}
    connection.send(connection.head("POST", headers, length=len(INITIALIZE)) + INITIALIZE)
    clock.advance(0)
    assert connection.status == 200
    assert remote.admission.pending() == 0 and remote.admission.open_sockets() == 1


def test_a_silent_connection_is_closed_after_the_pending_timeout() -> None:
    """A connection that never completes a request head is aborted (slowloris)."""
    limits = RemoteLimits(admission=AdmissionLimits(pending_timeout=15))
    remote, clock = site(token=b"s3cret", limits=limits)
    connection = Connection(remote)
    for _ in range(14):
        connection.send(b"P")  # a byte a second does not keep it alive
        clock.advance(1)
    assert not connection.closing
    clock.advance(1.1)
    assert connection.closing
    assert remote.admission.counts["timed_out_pending"] == 1


def test_slow_connections_make_room_for_a_legitimate_one() -> None:
    """
    Pending connections beyond the cap evict the oldest: 300 slow connections from one
    address leave room for a client that authenticates at once.
    """
    limits = RemoteLimits(admission=AdmissionLimits(max_pending=64, max_per_peer=256))
    remote, clock = site(token=b"s3cret", limits=limits)
    slow = [Connection(remote) for _ in range(300)]
    for connection in slow:
        connection.send(b"GE")
    assert remote.admission.pending() == 64
    legit = Connection(remote)
    headers = {"Authorization": "Bearer s3cret", "Content-Type": "application/json"}
    legit.send(legit.head("POST", headers, length=len(INITIALIZE)) + INITIALIZE)
    clock.advance(0)
    assert not legit.refused and legit.status == 200
    assert sum(not c.closing for c in slow) <= 63


def test_a_connection_id_belongs_to_its_token_holder() -> None:
    """Two tokens: a connection opened with the first is unknown (404) to the second."""
    remote, clock = site(token=TokenSet.of(["alice-token", "bob-token"]))
    alice = Connection(remote)
    headers = {"Authorization": "Bearer alice-token", "Content-Type": "application/json"}
    alice.send(alice.head("POST", headers, length=len(INITIALIZE)) + INITIALIZE)
    clock.advance(0)
    assert alice.status == 200
    cid = next(
        line.split(b": ", 1)[1].decode()
        for line in alice.answer.split(b"\r\n")
        if line.lower().startswith(b"acp-connection-id")
    )
    note = b'{"jsonrpc":"2.0","method":"_x/ping"}'
    for token, status in (("bob-token", 404), ("alice-token", 202)):
        other = Connection(remote)
        headers = {
            "Authorization": f"Bearer {token}",
            "Acp-Connection-Id": cid,
            "Content-Type": "application/json",
        }
        other.send(other.head("POST", headers, length=len(note)) + note)
        clock.advance(0)
        assert other.status == status


def test_no_access_log_line_carries_a_url(monkeypatch: Any) -> None:
    """A token put in a URL is refused, and no log line holds the URL or the token."""
    events: list[dict[str, Any]] = []

    @implementer(ILogObserver)
    def observer(event: dict[str, Any]) -> None:
        events.append(event)

    globalLogPublisher.addObserver(observer)
    try:
        remote, clock = site(token=b"s3cret")
        connection = Connection(remote)
        connection.send(
            b"GET /acp?access_token=s3cret HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Authorization: Bearer s3cret\r\nAccept: text/event-stream\r\n\r\n"
        )
        clock.advance(0)
        assert connection.status == 401
    finally:
        globalLogPublisher.removeObserver(observer)
    from twisted.logger import formatEvent

    assert not any("s3cret" in formatEvent(e) or "access_token" in formatEvent(e) for e in events)
