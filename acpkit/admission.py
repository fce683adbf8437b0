"""
Admission of incoming connections: caps and deadlines, so that slow or idle peers cannot
take the descriptors legitimate clients need.

A listener (remote ACP's site, a raw NDJSON endpoint) asks an :class:`Admission` table
for each new connection and wraps its protocol in a :class:`GuardedProtocol`.  A
connection is *pending* from its first byte (TLS handshake included) until the listener
accepts something from it (an authenticated request head, a first NDJSON line); then it
is *established*.

=====================================  ==================================================
situation                              what happens
=====================================  ==================================================
a pending connection older than        aborted (it never sent an acceptable request
``pending_timeout``                    head: a slow or silent peer, a slow TLS handshake,
                                       an unauthenticated HTTP/2 connection)
``max_pending`` pending connections    the oldest pending connection of one peer is
and a new one arrives                  aborted to make room: the peer whose connections
                                       were evicted most recently (evictions counted
                                       per peer, halved every ``strike_half_life``
                                       seconds); between equals, the one holding the
                                       most connections pending for ``eviction_grace``
                                       or more, then the most pending ones
a peer at ``max_per_peer``             its oldest pending connection is aborted to make
connections opens another              room; with none pending, the new one is closed
                                       at once
``max_sockets`` connections open       a pending connection is aborted, chosen as for
(default: from ``RLIMIT_NOFILE``)      ``max_pending``; with none pending, the new one
                                       is closed at once
an established HTTP/1.x connection     the request head must be complete within
starts a request                       ``head_timeout`` of its first byte, and its body
                                       within ``body_timeout`` plus one second per
                                       ``body_min_rate`` bytes; else it is aborted
refusals, evictions, timeouts          counted (:attr:`Admission.counts`) and logged at
                                       most once per ``log_interval`` seconds, as a sum
                                       (the last one when the listener stops)
behind a load balancer speaking the    (``proxied``: ``haproxy:`` endpoints) the peer is
PROXY protocol                         the client the header names, not the balancer: a
                                       connection counts toward no peer's cap until its
                                       first bytes are read (the header), then toward
                                       that client's, and is aborted when the client is
                                       at ``max_per_peer`` with nothing pending to make
                                       room
=====================================  ==================================================

Eviction instead of refusal is what keeps a legitimate client served while an attacker
holds thousands of slow connections: its connection completes its head in a round trip
and leaves the pending pool, while the attacker's ones make room.  Who makes room is
what keeps the client's connection from being evicted in the meantime.  An attacker
spread over many addresses holds fewer pending connections per address than a burst of
clients behind one address, and, reconnecting as fast as it is evicted, keeps every
pending connection younger than the client's round trips on a loaded server: neither
the count nor the age alone tells them apart.  Being evicted does: whoever fills the
pool is evicted again and again, a client's connections leave the pool by themselves.
Pending connections past the grace then decide between peers never evicted (an attacker
that holds its slow connections without churning them), the count last.  An attacker
that never reuses an address starts each at zero (spread over more addresses than
:data:`REMEMBERED_PEERS`, or new IPv6 addresses, it is not recognized).
"""

from __future__ import annotations

import resource
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any

import attrs
from twisted.internet.interfaces import (
    IAddress,
    IDelayedCall,
    IProtocol,
    IProtocolFactory,
    IReactorTime,
    ITransport,
)
from twisted.internet.protocol import Factory
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import alsoProvides, implementer, providedBy

__all__ = [
    "REMEMBERED_PEERS",
    "UNNAMED_PEER",
    "Admission",
    "AdmissionLimits",
    "AdmittedFactory",
    "GuardedProtocol",
    "Ticket",
    "socket_budget",
]

_log = Logger(namespace="acpkit.admission")

#: Peers whose evictions are remembered (the least recently evicted are forgotten first).
REMEMBERED_PEERS = 4096

#: The peer of a connection through a PROXY protocol balancer whose header was not read
#: yet (``Admission(proxied=True)``): no cap applies to it.
UNNAMED_PEER = "(behind the proxy, not named yet)"


def socket_budget(soft_limit: int | None = None) -> int:
    """
    How many connections a listener may hold: the process's descriptor limit
    (``RLIMIT_NOFILE``'s soft limit) less a reserve for everything else the agent opens
    (files, pipes to tools, language and MCP servers): an eighth, at least 64.
    """
    if soft_limit is None:
        soft_limit, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft_limit == resource.RLIM_INFINITY:
            soft_limit = 1 << 20
    reserve = max(64, soft_limit // 8)
    return max(16, soft_limit - reserve)


@attrs.frozen(kw_only=True)
class AdmissionLimits:
    """The caps and deadlines of :class:`Admission` (see the module docstring)."""

    #: Connections open at once (None: :func:`socket_budget`).
    max_sockets: int | None = None
    #: Connections from one peer address at once.
    max_per_peer: int = 256
    #: Connections that have not yet been accepted (see the module docstring).
    max_pending: int = 256
    #: Seconds a connection may stay pending.
    pending_timeout: float = 15.0
    #: Seconds from a request's first byte to its complete head (HTTP/1.x).
    head_timeout: float = 15.0
    #: Seconds a request body may take, beyond one second per ``body_min_rate`` bytes.
    body_timeout: float = 30.0
    #: Bytes per second a body must at least arrive at, past ``body_timeout``.
    body_min_rate: int = 64 * 1024
    #: Seconds between two summary lines of refusals, evictions and timeouts.
    log_interval: float = 10.0
    #: Seconds after which a pending connection counts as slow when choosing whom to
    #: evict (a client's round trips: TCP, TLS, its head, on a loaded server).
    eviction_grace: float = 2.0
    #: Seconds after which a peer's count of evicted connections is halved.
    strike_half_life: float = 30.0

    def __attrs_post_init__(self) -> None:
        for name in ("max_per_peer", "max_pending", "body_min_rate"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer")
        if self.max_sockets is not None and self.max_sockets < 1:
            raise ValueError("max_sockets must be a positive integer")
        for name in ("pending_timeout", "head_timeout", "body_timeout", "log_interval"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be a positive number of seconds")
        if not self.eviction_grace >= 0:
            raise ValueError("eviction_grace must be a number of seconds, zero or more")
        if not self.strike_half_life > 0:
            raise ValueError("strike_half_life must be a positive number of seconds")

    def sockets(self) -> int:
        """The socket cap in force."""
        return self.max_sockets if self.max_sockets is not None else socket_budget()


@attrs.define(eq=False)
class Ticket:
    """One admitted connection: its peer, whether it is still pending, its guard."""

    peer: str
    pending: bool = True
    guard: GuardedProtocol | None = None
    #: When it was admitted (the table's clock).
    since: float = 0.0

    def close(self) -> None:
        """Abort the connection (an eviction)."""
        if self.guard is not None:
            self.guard.abort()


class Admission:
    """
    The connections of one listener (see the module docstring).  ``extra_sockets``
    counts the listener's connections that left the table (WebSockets, which took
    their transport over) toward ``max_sockets``.  ``proxied``: every connection comes
    through a PROXY protocol balancer (see the module docstring).
    """

    def __init__(
        self,
        limits: AdmissionLimits | None = None,
        *,
        clock: IReactorTime,
        extra_sockets: Callable[[], int] = lambda: 0,
        proxied: bool = False,
    ) -> None:
        #: Connections come through a PROXY protocol balancer (settable until the
        #: first connection).
        self.proxied = proxied
        self.limits = limits if limits is not None else AdmissionLimits()
        self.clock = clock
        self._extra_sockets = extra_sockets
        self._max_sockets = self.limits.sockets()
        #: Every ticket in the table, oldest first.
        self._tickets: OrderedDict[Ticket, None] = OrderedDict()
        self._per_peer: Counter[str] = Counter()
        self._pending_per_peer: Counter[str] = Counter()
        #: Per peer: its evictions (decayed) and when last counted; least recent first.
        self._strikes: OrderedDict[str, tuple[float, float]] = OrderedDict()
        #: Refusals, evictions and timeouts since the listener started, by kind.
        self.counts: Counter[str] = Counter()
        self._unlogged: Counter[str] = Counter()
        self._log_call: IDelayedCall | None = None

    # -- the table ---------------------------------------------------------------------

    def open_sockets(self) -> int:
        """Connections open now, WebSockets included."""
        return len(self._tickets) + self._extra_sockets()

    def pending(self) -> int:
        """Connections pending now."""
        return sum(self._pending_per_peer.values())

    def admit(self, peer: str) -> Ticket | None:
        """A ticket for a new connection from ``peer``, or None (close it at once)."""
        limits = self.limits
        if self.proxied:
            peer = UNNAMED_PEER  # the balancer: the client is named by the header
        elif self._per_peer[peer] >= limits.max_per_peer and not self._evict(peer, "per_peer"):
            self._note("refused_per_peer")
            return None
        if self.open_sockets() >= self._max_sockets and not self._evict(None, "sockets"):
            self._note("refused_sockets")
            return None
        if self.pending() >= limits.max_pending and not self._evict(None, "pending"):
            self._note("refused_pending")
            return None
        ticket = Ticket(peer, since=self.clock.seconds())
        self._tickets[ticket] = None
        self._per_peer[peer] += 1
        self._pending_per_peer[peer] += 1
        return ticket

    def established(self, ticket: Ticket) -> None:
        """``ticket``'s connection was accepted: it leaves the pending pool."""
        if ticket.pending and ticket in self._tickets:
            ticket.pending = False
            self._forget_pending(ticket.peer)

    def release(self, ticket: Ticket) -> None:
        """``ticket``'s connection is gone (or left the table: an upgrade)."""
        if ticket not in self._tickets:
            return
        del self._tickets[ticket]
        self._per_peer[ticket.peer] -= 1
        if self._per_peer[ticket.peer] <= 0:
            del self._per_peer[ticket.peer]
        if ticket.pending:
            ticket.pending = False
            self._forget_pending(ticket.peer)

    def move(self, ticket: Ticket, peer: str) -> bool:
        """
        ``ticket``'s connection turned out to come from ``peer`` (a PROXY protocol
        header named the client behind a balancer): count it as ``peer``'s.  False (the
        connection is to be closed) when ``peer`` is at ``max_per_peer`` and none of its
        pending connections can make room.
        """
        if ticket not in self._tickets or ticket.peer == peer:
            return True
        if (
            peer != UNNAMED_PEER
            and self._per_peer[peer] >= self.limits.max_per_peer
            and not self._evict(peer, "per_peer")
        ):
            self._note("refused_per_peer")
            return False
        self._per_peer[ticket.peer] -= 1
        if self._per_peer[ticket.peer] <= 0:
            del self._per_peer[ticket.peer]
        self._per_peer[peer] += 1
        if ticket.pending:
            self._forget_pending(ticket.peer)
            self._pending_per_peer[peer] += 1
        ticket.peer = peer
        return True

    def timed_out(self, kind: str) -> None:
        """A guard aborted its connection for a deadline (``pending``, ``head``, ``body``)."""
        self._note(f"timed_out_{kind}")

    def _forget_pending(self, peer: str) -> None:
        self._pending_per_peer[peer] -= 1
        if self._pending_per_peer[peer] <= 0:
            del self._pending_per_peer[peer]

    def _evict(self, peer: str | None, why: str) -> bool:
        """
        Abort the oldest pending connection of ``peer`` (None: see the module docstring)
        to make room; False when there is none.
        """
        if peer is None:
            victim = self._victim()
        else:
            victim = next((t for t in self._tickets if t.pending and t.peer == peer), None)
        if victim is None:
            return False
        self.release(victim)
        victim.close()
        self._strike(victim.peer)
        self._note(f"evicted_{why}")
        return True

    def _victim(self) -> Ticket | None:
        """
        The oldest pending connection of the peer the module docstring chooses (tickets
        are kept oldest first); None when nothing is pending.
        """
        pending = [t for t in self._tickets if t.pending]
        if not pending:
            return None
        now = self.clock.seconds()
        cutoff = now - self.limits.eviction_grace
        slow = Counter(t.peer for t in pending if t.since <= cutoff)
        counts = Counter(t.peer for t in pending)

        def weight(peer: str) -> tuple[int, int, int]:
            # Whole evictions: one counts for a half-life, then fades out.
            return (int(self._strikes_of(peer, now) + 0.5), slow[peer], counts[peer])

        chosen = max(counts, key=weight)
        return next(t for t in pending if t.peer == chosen)

    def _strikes_of(self, peer: str, now: float) -> float:
        """``peer``'s evictions, each halved every ``strike_half_life`` seconds since."""
        score, when = self._strikes.get(peer, (0.0, now))
        return float(score * 0.5 ** ((now - when) / self.limits.strike_half_life))

    def _strike(self, peer: str) -> None:
        """One more eviction for ``peer`` (at most REMEMBERED_PEERS peers remembered)."""
        now = self.clock.seconds()
        self._strikes[peer] = (self._strikes_of(peer, now) + 1, now)
        self._strikes.move_to_end(peer)
        while len(self._strikes) > REMEMBERED_PEERS:
            self._strikes.popitem(last=False)

    # -- the summary line ----------------------------------------------------------------

    def _note(self, kind: str) -> None:
        self.counts[kind] += 1
        self._unlogged[kind] += 1
        if self._log_call is None:
            self._log_call = self.clock.callLater(self.limits.log_interval, self._log_summary)

    def _log_summary(self) -> None:
        self._log_call = None
        if not self._unlogged:
            return
        summary = ", ".join(f"{kind.replace('_', ' ')}: {n}" for kind, n in self._unlogged.items())
        self._unlogged.clear()
        _log.warn(
            "connections refused or closed early in the last {interval:g} s ({summary});"
            " {open} open, {pending} pending",
            interval=self.limits.log_interval,
            summary=summary,
            open=self.open_sockets(),
            pending=self.pending(),
        )

    def stop(self) -> None:
        """The listener stopped: the summary line still due is written now."""
        if self._log_call is not None and self._log_call.active():
            self._log_call.cancel()
        self._log_summary()


@implementer(IProtocol)
class GuardedProtocol:
    """
    Wraps the protocol of one admitted connection: its deadlines, and its ticket's
    release when the connection ends.  The wrapped protocol gets the real transport.

    The listener's protocol calls :meth:`accepted` when the connection may leave the
    pending pool, and, for HTTP/1.x requests, :meth:`head_received` and
    :meth:`body_received` (an established connection's next bytes start the next
    request's head deadline).  :meth:`detach` hands the connection over (a WebSocket
    upgrade took the transport): deadlines stop and the ticket is released.
    """

    def __init__(
        self,
        wrapped: IProtocol,
        ticket: Ticket,
        admission: Admission,
        *,
        accept_on: bytes | None = None,
    ) -> None:
        self.wrapped = wrapped
        self.ticket = ticket
        self.admission = admission
        #: Accept the connection once this byte sequence arrives (raw NDJSON: a first
        #: line); None: the listener calls :meth:`accepted` itself.
        self.accept_on = accept_on
        self.transport: ITransport | None = None
        ticket.guard = self
        # Half-close, TLS handshake listening...: what the wrapped protocol provides,
        # its methods reached through __getattr__.
        alsoProvides(self, *list(providedBy(wrapped)))
        self._timer: IDelayedCall | None = None
        self._timer_kind = ""
        #: HTTP/1.x request deadlines are armed (only once established, on HTTP/1.x).
        self.per_request = False
        self._idle = True
        self._gone = False
        #: Whether the peer was read again from the transport (on the first bytes).
        self._peer_checked = False

    def __getattr__(self, name: str) -> Any:
        # Attributes set on the listener's protocol stay readable through the wrapper.
        if name == "wrapped":
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    # -- IProtocol ---------------------------------------------------------------------

    def makeConnection(self, transport: ITransport) -> None:
        self.transport = transport
        self._arm("pending", self.admission.limits.pending_timeout)
        self.wrapped.makeConnection(transport)

    def connectionMade(self) -> None:
        """Called by ``makeConnection`` on the wrapped protocol itself."""

    def dataReceived(self, data: bytes) -> None:
        if not self._peer_checked:
            self._peer_checked = True
            if not self._check_peer():
                return
        if self.accept_on is not None and self.ticket.pending and self.accept_on in data:
            self.accepted()
        if self.per_request and self._idle:
            self._idle = False
            self._arm("head", self.admission.limits.head_timeout)
        self.wrapped.dataReceived(data)

    def connectionLost(self, reason: Failure) -> None:
        self._end()
        self.wrapped.connectionLost(reason)

    def _check_peer(self) -> bool:
        """
        The first bytes: a PROXY protocol wrapper has read its header by now, and the
        transport's peer is the client it named.  Count the connection as that client's
        (:meth:`Admission.move`); False when it was refused (and aborted).
        """
        if not self.admission.proxied:
            return True
        try:
            address = self.transport.getPeer() if self.transport is not None else None
        except Exception:
            return True
        peer = str(getattr(address, "host", None) or "local")
        if self.admission.move(self.ticket, peer):
            return True
        self.abort()
        return False

    # -- the listener's hooks ------------------------------------------------------------

    def accepted(self, *, per_request: bool = False) -> None:
        """
        The listener accepted this connection: it leaves the pending pool.
        ``per_request``: arm HTTP/1.x request deadlines from now on.
        """
        if self.ticket.pending:
            self._disarm()
            self.admission.established(self.ticket)
        self.per_request = self.per_request or per_request

    def head_received(self, length: int | None) -> None:
        """A request's head is complete: its body's deadline starts (HTTP/1.x)."""
        if not self.per_request:
            return
        self._idle = False
        limits = self.admission.limits
        allowance = limits.body_timeout + (length or 0) / limits.body_min_rate
        self._arm("body", allowance)

    def body_received(self) -> None:
        """A request is complete: no deadline until the next request's first byte."""
        if self.ticket.pending:
            return
        self._disarm()
        self._idle = True

    def detach(self) -> None:
        """The transport was taken over: stop the deadlines, leave the table."""
        self._end()

    def abort(self) -> None:
        """Abort the connection now (an eviction or a deadline)."""
        self._end()
        if self.transport is not None:
            self.transport.abortConnection()  # type: ignore[attr-defined]

    # -- deadlines --------------------------------------------------------------------------

    def _arm(self, kind: str, seconds: float) -> None:
        self._disarm()
        if self._gone:
            return
        self._timer_kind = kind
        self._timer = self.admission.clock.callLater(seconds, self._deadline)

    def _disarm(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _deadline(self) -> None:
        self._timer = None
        if self._gone:
            return
        self.admission.timed_out(self._timer_kind)
        self.abort()

    def _end(self) -> None:
        self._disarm()
        if not self._gone:
            self._gone = True
            self.admission.release(self.ticket)


@implementer(IProtocolFactory)
class AdmittedFactory(Factory):
    """
    Wraps a listener's factory: each connection is admitted by ``admission`` (None from
    :meth:`buildProtocol` closes it at once) and guarded; ``accept_on``: see
    :class:`GuardedProtocol`.
    """

    def __init__(
        self, wrapped: IProtocolFactory, admission: Admission, *, accept_on: bytes | None
    ) -> None:
        self.wrapped = wrapped
        self.admission = admission
        self.accept_on = accept_on
        self.noisy = False

    def buildProtocol(self, addr: IAddress) -> IProtocol | None:  # type: ignore[override]
        ticket = self.admission.admit(str(getattr(addr, "host", None) or "local"))
        if ticket is None:
            return None
        protocol = self.wrapped.buildProtocol(addr)
        if protocol is None:
            self.admission.release(ticket)
            return None
        return GuardedProtocol(protocol, ticket, self.admission, accept_on=self.accept_on)

    def doStart(self) -> None:
        self.wrapped.doStart()

    def doStop(self) -> None:
        self.admission.stop()
        self.wrapped.doStop()
