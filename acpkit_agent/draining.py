"""
bob's SIGTERM with ``--listen``: drain, then exit (what a load balancer's rolling restart
and a service manager's stop expect).

=====================================  ================================================
event                                  what bob does
=====================================  ================================================
SIGTERM (``--listen``)                 draining: remote ACP keeps listening but answers
                                       ``initialize``, WebSocket upgrades and
                                       ``GET /healthz`` with ``503``; raw NDJSON stops
                                       listening.  Each open connection ends as soon as
                                       no request of its client is in progress (a
                                       running turn is answered and saved first); bob
                                       exits once every connection has ended (and
                                       :data:`LINGER` more seconds: a request already
                                       on its way is answered ``404``, not cut)
``--drain-timeout`` seconds later      the connections still open are closed, their
                                       running turns cancelled (answered
                                       ``cancelled``); bob exits
a second SIGTERM while draining        bob exits now (running turns cancelled)
SIGINT; stdin's end (stdio)            unchanged: running turns cancelled, exit
=====================================  ================================================

The lines bob writes: ``[acp] SIGTERM: draining…`` when it starts, then ``[acp] drained:
every connection ended; exiting`` or ``[acp] drain timeout…`` naming how many were
closed.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any, Protocol

from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger

from acpkit.connection import AgentConnection
from acpkit.drain import end_when_answered

__all__ = ["DEFAULT_DRAIN_TIMEOUT", "LINGER", "Drain", "Drainable", "RawConnections"]

_log = Logger()

DEFAULT_DRAIN_TIMEOUT = 30.0
"""Seconds bob waits, after SIGTERM, for its connections' running turns (``--drain-timeout``)."""

LINGER = 1.0
"""Seconds bob still answers once drained (``503`` to new connections, ``404`` to requests
of ended ones) before it stops: a request already on its way through a balancer gets an
answer that says it was not handled, not a connection cut mid-request."""


class Drainable(Protocol):
    """What a listener drains: remote ACP's resource, or :class:`RawConnections`."""

    def start_draining(self) -> Deferred[None]: ...

    def close_all(self) -> None: ...

    def open_connections(self) -> int: ...


class RawConnections:
    """The open connections of a raw NDJSON listener (one agent connection each)."""

    def __init__(self) -> None:
        self._open: set[AgentConnection] = set()

    def add(self, connection: AgentConnection) -> None:
        """Track ``connection`` until it ends."""
        self._open.add(connection)
        connection.closed.addBoth(lambda _: self._open.discard(connection))

    def open_connections(self) -> int:
        """Connections open now."""
        return len(self._open)

    def start_draining(self) -> Deferred[None]:
        """End each connection once no request of its client is in progress."""
        waits = [end_when_answered(c.protocol, c.close) for c in list(self._open)]
        return DeferredList(waits, consumeErrors=True).addCallback(lambda _: None)

    def close_all(self) -> None:
        """Close every connection now, running turns cancelled."""
        for connection in list(self._open):
            connection.cancel_all_turns()
            connection.close()


class Drain:
    """
    SIGTERM's drain (see the module docstring): ``target`` is drained, ``stop_listening``
    (raw NDJSON) called first, and ``stop()`` ``linger`` seconds after it is done, or
    after ``timeout`` seconds.
    """

    def __init__(
        self,
        reactor: Any,
        target: Drainable,
        timeout: float,
        *,
        stop: Callable[[], object],
        stop_listening: Callable[[], object] | None = None,
        linger: float = LINGER,
    ) -> None:
        self.reactor = reactor
        self.target = target
        self.timeout = timeout
        self._stop = stop
        self._stop_listening = stop_listening
        #: True once draining started.
        self.started = False
        #: Seconds answered still once drained (:data:`LINGER`).
        self.linger = linger
        self._timer: IDelayedCall | None = None
        self._linger: IDelayedCall | None = None
        self._done = False

    def install(self) -> None:
        """
        Take SIGTERM over from the reactor (call once it runs: Twisted installs its own
        handlers as it starts); nothing outside the main thread.
        """
        if threading.current_thread() is not threading.main_thread():
            return
        signal.signal(signal.SIGTERM, self._signalled)

    def _signalled(self, signum: int, frame: object) -> None:
        self.reactor.callFromThread(self.begin)

    def begin(self) -> None:
        """Start draining; a second call (SIGTERM again) stops now."""
        if self.started:
            if not self._done:
                _log.warn("[acp] SIGTERM again while draining: exiting now")
                self._finish()
            return
        self.started = True
        count = self.target.open_connections()
        _log.info(
            "[acp] SIGTERM: draining: new connections refused; {count} connection(s) open end"
            " once their running turns are answered; exiting when they have, within"
            " {timeout:g} s (--drain-timeout; another SIGTERM exits now)",
            count=count,
            timeout=self.timeout,
        )
        if self._stop_listening is not None:
            self._stop_listening()
        self._timer = self.reactor.callLater(self.timeout, self._timed_out)
        self.target.start_draining().addCallback(self._drained)

    def _drained(self, _: object) -> None:
        if self._done:
            return
        _log.info("[acp] drained: every connection ended; exiting")
        self._linger = self.reactor.callLater(self.linger, self._finish)

    def _timed_out(self) -> None:
        self._timer = None
        if self._done:
            return
        _log.warn(
            "[acp] drain timeout ({timeout:g} s): closing {count} connection(s) still open"
            " (their running turns are cancelled); exiting",
            timeout=self.timeout,
            count=self.target.open_connections(),
        )
        self._finish()

    def _finish(self) -> None:
        if self._done:
            return
        self._done = True
        for call in (self._timer, self._linger):
            if call is not None and call.active():
                call.cancel()
        self._timer = self._linger = None
        self.target.close_all()
        self._stop()
