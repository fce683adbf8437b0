"""
``acpkit.io.admission``: caps and deadlines for incoming connections, with ``task.Clock`` and
``StringTransport``.  Slow, silent or unauthenticated peers cannot hold the descriptors a
legitimate client needs: pending connections time out, and caps evict the oldest
pending connection of the peer holding the most instead of refusing newcomers.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from zope.interface import implementer

from acpkit.io.admission import (
    Admission,
    AdmissionLimits,
    AdmittedFactory,
    GuardedProtocol,
    socket_budget,
)


class Recorder(Protocol):
    """Records what it reads."""

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.lost: list[Failure] = []

    def dataReceived(self, data: bytes) -> None:
        self.received.append(data)

    def connectionLost(self, reason: Failure = Failure(Exception("lost"))) -> None:  # noqa: B008
        self.lost.append(reason)


class Peer:
    """One admitted connection on a StringTransport."""

    def __init__(self, admission: Admission, host: str, **options: Any) -> None:
        self.transport = StringTransport()
        self.protocol = Recorder()
        ticket = admission.admit(host)
        self.admitted = ticket is not None
        self.guard: GuardedProtocol | None = None
        if ticket is not None:
            self.guard = GuardedProtocol(self.protocol, ticket, admission, **options)
            self.guard.makeConnection(self.transport)

    @property
    def aborted(self) -> bool:
        return bool(self.transport.disconnecting)


def limits(**overrides: Any) -> AdmissionLimits:
    values: dict[str, Any] = {"max_sockets": 100, "max_per_peer": 10, "max_pending": 5}
    values.update(overrides)
    return AdmissionLimits(**values)


def test_a_pending_connection_times_out() -> None:
    """A connection that never gets accepted is aborted after ``pending_timeout``."""
    clock = Clock()
    admission = Admission(limits(pending_timeout=15), clock=clock)
    peer = Peer(admission, "10.0.0.1")
    peer.guard.dataReceived(b"G")  # type: ignore[union-attr]
    clock.advance(14.9)
    assert not peer.aborted
    clock.advance(0.2)
    assert peer.aborted
    assert admission.counts["timed_out_pending"] == 1
    assert admission.open_sockets() == 0


def test_an_accepted_connection_has_no_pending_deadline() -> None:
    """Once accepted, the pending deadline is gone: an idle connection stays."""
    clock = Clock()
    admission = Admission(limits(), clock=clock)
    peer = Peer(admission, "10.0.0.1")
    assert peer.guard is not None
    peer.guard.accepted()
    clock.advance(3600)
    assert not peer.aborted
    assert admission.pending() == 0 and admission.open_sockets() == 1


def test_accept_on_a_first_line() -> None:
    """Raw NDJSON: the first complete line accepts the connection."""
    clock = Clock()
    admission = Admission(limits(), clock=clock)
    peer = Peer(admission, "10.0.0.1", accept_on=b"\n")
    assert peer.guard is not None
    peer.guard.dataReceived(b'{"jsonrpc":')
    assert admission.pending() == 1
    peer.guard.dataReceived(b'"2.0"}\n')
    assert admission.pending() == 0
    assert peer.protocol.received == [b'{"jsonrpc":', b'"2.0"}\n']


def test_the_oldest_pending_connection_makes_room() -> None:
    """At ``max_pending``, a newcomer evicts the oldest pending connection."""
    admission = Admission(limits(max_pending=3), clock=Clock())
    peers = [Peer(admission, "10.0.0.1") for _ in range(3)]
    newcomer = Peer(admission, "10.0.0.2")
    assert newcomer.admitted
    assert [p.aborted for p in peers] == [True, False, False]
    assert admission.counts["evicted_pending"] == 1


def test_eviction_picks_the_peer_holding_most() -> None:
    """Room is made at the expense of the peer holding the most pending connections."""
    admission = Admission(limits(max_pending=4), clock=Clock())
    victim_of_age = Peer(admission, "192.0.2.9")
    flood = [Peer(admission, "10.6.6.6") for _ in range(3)]
    Peer(admission, "192.0.2.10")
    assert not victim_of_age.aborted
    assert [p.aborted for p in flood] == [True, False, False]


def test_a_peer_at_its_cap_evicts_its_own_oldest_pending() -> None:
    """``max_per_peer``: the peer's own oldest pending connection makes room."""
    admission = Admission(limits(max_per_peer=2, max_pending=50), clock=Clock())
    first, second = Peer(admission, "10.0.0.1"), Peer(admission, "10.0.0.1")
    third = Peer(admission, "10.0.0.1")
    assert third.admitted and first.aborted and not second.aborted
    assert admission.counts["evicted_per_peer"] == 1


def test_a_peer_at_its_cap_with_nothing_pending_is_refused() -> None:
    """``max_per_peer`` reached by accepted connections: the newcomer is refused."""
    admission = Admission(limits(max_per_peer=2), clock=Clock())
    for _ in range(2):
        peer = Peer(admission, "10.0.0.1")
        assert peer.guard is not None
        peer.guard.accepted()
    assert not Peer(admission, "10.0.0.1").admitted
    assert Peer(admission, "10.0.0.2").admitted
    assert admission.counts["refused_per_peer"] == 1


def test_the_socket_cap_refuses_when_nothing_is_pending() -> None:
    """``max_sockets`` reached by accepted connections: the newcomer is refused."""
    admission = Admission(limits(max_sockets=3, max_per_peer=10), clock=Clock())
    for n in range(3):
        peer = Peer(admission, f"10.0.0.{n}")
        assert peer.guard is not None
        peer.guard.accepted()
    assert not Peer(admission, "10.0.0.9").admitted
    assert admission.counts["refused_sockets"] == 1


def test_websockets_count_toward_the_socket_cap() -> None:
    """Connections that left the table (``extra_sockets``) still count."""
    admission = Admission(limits(max_sockets=2), clock=Clock(), extra_sockets=lambda: 2)
    assert not Peer(admission, "10.0.0.1").admitted


def test_http1_request_deadlines() -> None:
    """
    Established HTTP/1.x: a request's first byte starts the head deadline; a complete
    head starts the body deadline (grown by the announced length at the minimum rate);
    a complete request stops both.
    """
    clock = Clock()
    admission = Admission(limits(head_timeout=10, body_timeout=20, body_min_rate=1000), clock=clock)
    peer = Peer(admission, "10.0.0.1")
    guard = peer.guard
    assert guard is not None
    guard.accepted(per_request=True)
    guard.head_received(5000)
    clock.advance(24.9)
    assert not peer.aborted
    guard.body_received()
    clock.advance(3600)  # idle between requests: no deadline
    assert not peer.aborted
    guard.dataReceived(b"P")  # the next request's first byte
    clock.advance(10.1)
    assert peer.aborted
    assert admission.counts["timed_out_head"] == 1


def test_a_slow_body_times_out() -> None:
    """A body that does not arrive within its deadline aborts the connection."""
    clock = Clock()
    admission = Admission(limits(body_timeout=20, body_min_rate=1000), clock=clock)
    peer = Peer(admission, "10.0.0.1")
    guard = peer.guard
    assert guard is not None
    guard.accepted(per_request=True)
    guard.head_received(1000)
    clock.advance(21.1)
    assert peer.aborted and admission.counts["timed_out_body"] == 1


def test_a_lost_connection_releases_its_ticket_once() -> None:
    """connectionLost releases the ticket, cancels the deadline and tells the protocol."""
    clock = Clock()
    admission = Admission(limits(), clock=clock)
    peer = Peer(admission, "10.0.0.1")
    assert peer.guard is not None
    peer.guard.connectionLost(Failure(Exception("gone")))
    peer.guard.connectionLost(Failure(Exception("again")))
    assert admission.open_sockets() == 0 and admission.pending() == 0
    assert not clock.getDelayedCalls()
    assert len(peer.protocol.lost) == 2


def test_detach_leaves_the_table() -> None:
    """A transport taken over (WebSocket): deadlines stop, the ticket is released."""
    clock = Clock()
    admission = Admission(limits(), clock=clock)
    peer = Peer(admission, "10.0.0.1")
    assert peer.guard is not None
    peer.guard.accepted(per_request=True)
    peer.guard.detach()
    assert admission.open_sockets() == 0 and not clock.getDelayedCalls()


def test_one_summary_line_per_interval(capsys: pytest.CaptureFixture[str]) -> None:
    """Refusals are summed and logged at most once per ``log_interval``."""
    from twisted.logger import ILogObserver, LogLevel, globalLogPublisher

    events: list[dict[str, Any]] = []

    @implementer(ILogObserver)
    def observer(event: dict[str, Any]) -> None:
        events.append(event)

    globalLogPublisher.addObserver(observer)
    try:
        clock = Clock()
        admission = Admission(limits(max_per_peer=1, log_interval=10), clock=clock)
        keep = Peer(admission, "10.0.0.1")
        assert keep.guard is not None
        keep.guard.accepted()
        for _ in range(500):
            Peer(admission, "10.0.0.1")
        clock.advance(10)
    finally:
        globalLogPublisher.removeObserver(observer)
    summaries = [e for e in events if e.get("log_namespace") == "acpkit.io.admission"]
    assert len(summaries) == 1 and summaries[0]["log_level"] == LogLevel.warn
    assert "refused per peer: 500" in summaries[0]["summary"]


def test_admitted_factory_wraps_and_refuses() -> None:
    """AdmittedFactory: guarded protocols, None (closed at once) beyond the caps."""
    admission = Admission(limits(max_per_peer=1), clock=Clock())
    factory = AdmittedFactory(Factory.forProtocol(Recorder), admission, accept_on=b"\n")
    from twisted.internet.address import IPv4Address

    address = IPv4Address("TCP", "10.0.0.1", 1234)
    first = factory.buildProtocol(address)
    assert isinstance(first, GuardedProtocol)
    first.makeConnection(StringTransport())
    first.dataReceived(b"{}\n")
    assert factory.buildProtocol(address) is None


def test_limits_are_checked() -> None:
    """A limit that is not positive is a ValueError naming it."""
    with pytest.raises(ValueError, match="max_pending"):
        AdmissionLimits(max_pending=0)
    with pytest.raises(ValueError, match="head_timeout"):
        AdmissionLimits(head_timeout=0)


@given(st.integers(16, 1 << 20))
def test_the_socket_budget_leaves_a_reserve(soft: int) -> None:
    """The socket budget stays below the descriptor limit, by at least 64."""
    budget = socket_budget(soft)
    assert 16 <= budget and (budget <= soft - 64 or budget == 16)


class AdmissionMachine(RuleBasedStateMachine):
    """
    Any sequence of arrivals, acceptances, losses and deadlines keeps the table
    consistent: the caps hold, counts match the live connections, and nothing that
    was aborted or lost stays counted.
    """

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.admission = Admission(
            AdmissionLimits(max_sockets=12, max_per_peer=5, max_pending=6), clock=self.clock
        )
        self.peers: list[Peer] = []

    @rule(host=st.sampled_from(["10.0.0.1", "10.0.0.2", "10.0.0.3"]))
    def arrive(self, host: str) -> None:
        peer = Peer(self.admission, host)
        if peer.admitted:
            self.peers.append(peer)

    @precondition(lambda self: self.peers)
    @rule(index=st.integers(0, 100))
    def accept(self, index: int) -> None:
        peer = self.peers[index % len(self.peers)]
        assert peer.guard is not None
        peer.guard.accepted()

    @precondition(lambda self: self.peers)
    @rule(index=st.integers(0, 100))
    def lose(self, index: int) -> None:
        peer = self.peers.pop(index % len(self.peers))
        assert peer.guard is not None
        peer.guard.connectionLost(Failure(Exception("lost")))

    @rule(seconds=st.floats(0, 20))
    def wait(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @invariant()
    def consistent(self) -> None:
        live = [p for p in self.peers if not p.aborted]
        assert self.admission.open_sockets() == len(live)
        pending = [p for p in live if p.guard is not None and p.guard.ticket.pending]
        assert self.admission.pending() == len(pending)
        assert len(live) <= 12 and len(pending) <= 6
        for host in {p.guard.ticket.peer for p in live if p.guard is not None}:
            assert sum(1 for p in live if p.guard and p.guard.ticket.peer == host) <= 5


TestAdmissionMachine = AdmissionMachine.TestCase
TestAdmissionMachine.settings = settings(stateful_step_count=40)


# -- behind a load balancer: the PROXY protocol names the peer ------------------------------


def proxied(admission: Admission, balancer: str, client: str) -> Peer:
    """A connection from ``balancer`` whose transport names ``client`` once read (PROXY)."""
    from twisted.internet.address import IPv4Address

    peer = Peer(admission, balancer)
    peer.transport.peerAddr = IPv4Address("TCP", client, 40000)
    return peer


def test_the_peer_is_the_client_a_proxy_header_names() -> None:
    """
    Admitted as the balancer's, a connection whose transport names another peer once
    its first bytes are read (a PROXY protocol header) counts as that peer's.
    """
    admission = Admission(limits(max_per_peer=2), clock=Clock(), proxied=True)
    peers = [proxied(admission, "127.0.0.1", f"203.0.113.{n}") for n in range(5)]
    for peer in peers:
        peer.guard.dataReceived(b"G")  # type: ignore[union-attr]
    assert all(peer.admitted and not peer.aborted for peer in peers)
    assert admission.open_sockets() == 5
    assert admission.pending() == 5
    assert admission.counts == {}


def test_without_proxied_the_transport_address_is_the_peer() -> None:
    """A listener not behind a balancer keeps the address it admitted the connection as."""
    admission = Admission(limits(max_per_peer=2), clock=Clock())
    first, second = (proxied(admission, "10.0.0.1", f"203.0.113.{n}") for n in (1, 2))
    for peer in (first, second):
        peer.guard.dataReceived(b"G")  # type: ignore[union-attr]
        peer.guard.accepted()  # type: ignore[union-attr]
    assert not first.aborted and not second.aborted
    assert not proxied(admission, "10.0.0.1", "203.0.113.3").admitted


def test_a_client_behind_the_proxy_at_its_cap_is_refused() -> None:
    """The client a header names is held to ``max_per_peer`` (its oldest pending evicted)."""
    admission = Admission(limits(max_per_peer=2), clock=Clock(), proxied=True)
    first, second = (proxied(admission, "127.0.0.1", "203.0.113.7") for _ in range(2))
    for peer in (first, second):
        peer.guard.dataReceived(b"G")  # type: ignore[union-attr]
        peer.guard.accepted()  # type: ignore[union-attr]
    third = proxied(admission, "127.0.0.1", "203.0.113.7")
    third.guard.dataReceived(b"G")  # type: ignore[union-attr]
    assert third.aborted
    assert third.protocol.received == []  # nothing of it reached the listener
    assert admission.counts["refused_per_peer"] == 1
    assert admission.open_sockets() == 2
    pending = proxied(admission, "127.0.0.1", "203.0.113.8")
    pending.guard.dataReceived(b"G")  # type: ignore[union-attr]
    assert not pending.aborted
