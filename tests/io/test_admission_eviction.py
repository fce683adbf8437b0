"""
Which pending connection the admission table (:mod:`acpkit.io.admission`) evicts when its
pending pool or its socket cap is full: one of the peer evicted most recently, else of
the peer holding the most slow pending connections, never a client's burst of new ones
while those can go.  A legitimate client's connection, pending only until its request
head is read, must survive an attacker churning slow connections from many addresses
(the soak test, tests/remote/test_attack_soak.py, saw up to 20 of 50 clients evicted before).
"""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.task import Clock
from twisted.logger import ILogObserver, LogEvent, formatEvent, globalLogPublisher
from zope.interface import implementer

import acpkit.io.admission as admission_module
from acpkit.io.admission import Admission, AdmissionLimits, Ticket


def table(**limits: Any) -> tuple[Admission, Clock]:
    clock = Clock()
    return Admission(AdmissionLimits(**limits), clock=clock), clock


def admit(admission: Admission, peer: str, count: int = 1) -> list[Ticket]:
    tickets = [admission.admit(peer) for _ in range(count)]
    assert all(t is not None for t in tickets)
    return [t for t in tickets if t is not None]


def evicted(tickets: list[Ticket]) -> int:
    """How many of ``tickets`` (none established) were evicted (left the pending pool)."""
    return sum(not t.pending for t in tickets)


def test_a_young_burst_from_one_peer_is_spared_while_older_pending_ones_can_go() -> None:
    """
    The pool (12) holds 2 old pending connections from each of 4 attacker peers; one
    client peer opens 10 connections at once (it now holds the most pending, all of them
    just arrived).  Each eviction takes an attacker's old connection, never the
    client's.
    """
    admission, clock = table(max_pending=12, eviction_grace=2.0)
    attackers = [t for n in range(4) for t in admit(admission, f"10.0.0.{n}", 2)]
    clock.advance(5)
    client = admit(admission, "192.0.2.1", 10)
    assert evicted(client) == 0
    assert evicted(attackers) == 6
    assert admission.counts["evicted_pending"] == 6


def test_among_old_pending_connections_the_biggest_holder_loses_its_oldest() -> None:
    """
    Past the grace, the peer holding the most pending connections loses its oldest
    one: a heavy peer pays, a peer with one slow connection (a far client's TLS
    handshake) keeps it.
    """
    admission, clock = table(max_pending=4, eviction_grace=2.0)
    far = admit(admission, "198.51.100.7")
    clock.advance(1)
    heavy = admit(admission, "10.0.0.1", 3)
    clock.advance(5)
    newcomer = admit(admission, "10.0.0.2")
    assert evicted(far) == 0
    assert [t.pending for t in heavy] == [False, True, True]
    assert evicted(newcomer) == 0


def test_a_peer_evicted_before_loses_again_before_a_bigger_burst() -> None:
    """
    An attacker churns the pool (10): its connections are all younger than the grace,
    evicted as fast as it reconnects.  A client's burst of 6 new connections from one
    address (more than the attacker holds on any of its two) costs the client nothing:
    the peers evicted before are evicted again.
    """
    admission, clock = table(max_pending=10, eviction_grace=2.0)
    attackers: list[Ticket] = []
    for n in range(30):  # churn: 30 arrivals, 0.01 s apart, over two addresses
        attackers += admit(admission, f"10.0.0.{n % 2}")
        clock.advance(0.01)
    assert evicted(attackers) == 20
    client = admit(admission, "192.0.2.1", 6)
    assert evicted(client) == 0
    assert evicted(attackers) == 26


def test_evictions_are_forgotten_over_time() -> None:
    """
    A peer's evictions halve every ``strike_half_life`` seconds and, once under one
    half, count for nothing: long after, the peer holding the most pending connections
    is the one evicted again.
    """
    admission, clock = table(max_pending=4, max_per_peer=2, strike_half_life=10.0)
    struck = admit(admission, "10.0.0.1", 3)  # the third evicts the first: one strike
    assert admission.counts["evicted_per_peer"] == 1
    bigger = admit(admission, "10.0.0.2", 2)  # the pool is full
    admit(admission, "10.0.0.3")  # 10.0.0.1 was evicted before: it loses again
    assert evicted(struck) == 2 and evicted(bigger) == 0
    clock.advance(60)  # six half-lives: two evictions weigh 1/32
    admit(admission, "10.0.0.4")
    assert evicted(bigger) == 1 and evicted(struck) == 2


def test_only_so_many_peers_are_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Evictions are remembered for REMEMBERED_PEERS peers at most (the least recent go)."""
    monkeypatch.setattr(admission_module, "REMEMBERED_PEERS", 3)
    admission, _clock = table(max_pending=1, max_per_peer=1)
    for n in range(6):
        admit(admission, f"10.0.0.{n}")  # each evicts the previous peer's one connection
    assert admission.counts["evicted_pending"] == 5
    assert len(admission._strikes) == 3


def test_the_socket_cap_evicts_by_the_same_rule() -> None:
    """The socket cap full (8): the same choice as the pending pool's (old first)."""
    admission, clock = table(max_sockets=8, max_pending=100, eviction_grace=2.0)
    attackers = admit(admission, "10.0.0.1", 4) + admit(admission, "10.0.0.2", 4)
    clock.advance(3)
    client = admit(admission, "192.0.2.1", 5)
    assert evicted(client) == 0
    assert evicted(attackers) == 5
    assert admission.counts["evicted_sockets"] == 5


def test_the_new_limits_are_checked() -> None:
    """``eviction_grace`` is zero or more seconds, ``strike_half_life`` more than zero."""
    assert AdmissionLimits(eviction_grace=0).eviction_grace == 0
    with pytest.raises(ValueError, match="eviction_grace"):
        AdmissionLimits(eviction_grace=-1)
    with pytest.raises(ValueError, match="strike_half_life"):
        AdmissionLimits(strike_half_life=0)


@implementer(ILogObserver)
class Events:
    """The log events seen."""

    def __init__(self) -> None:
        self.seen: list[LogEvent] = []

    def __call__(self, event: LogEvent) -> None:
        self.seen.append(event)


def test_the_last_summary_line_is_written_when_the_listener_stops() -> None:
    """
    Evictions not yet summed up in a log line (one every ``log_interval``) are when the
    listener stops: its last counts are not lost; nothing is written a second time.
    """
    events = Events()
    globalLogPublisher.addObserver(events)
    try:
        admission, clock = table(max_pending=1, log_interval=10.0)
        admit(admission, "10.0.0.1", 3)
        admission.stop()
        clock.advance(10)
        admission.stop()
    finally:
        globalLogPublisher.removeObserver(events)
    said = [formatEvent(e) for e in events.seen if e.get("log_namespace") == "acpkit.io.admission"]
    assert len(said) == 1, said
    assert "evicted pending: 2" in said[0]
