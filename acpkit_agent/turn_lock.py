"""
The process-wide turn lock of the reference agent: turns of every session and connection
run one at a time, in arrival order, and each turn's response is written before the next
turn starts.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from twisted.internet.defer import Deferred, succeed

__all__ = ["TurnLock"]


class TurnLock:
    """
    Serializes turns process-wide: ``await lock.acquire()`` … ``lock.release()``, FIFO.

    Unlike :class:`~twisted.internet.defer.DeferredLock`, ``release()`` does not run the next
    waiter inside itself: it hands the lock over on the reactor's next iteration.  The
    releasing ``prompt`` handler returns first and its response is written; otherwise a
    queued turn that needs no I/O (the ``echo`` engine) would run to its end, and be
    answered, inside the previous turn's ``release()``, before that turn's own response.
    A cancelled ``acquire()`` leaves the queue.
    """

    def __init__(self, reactor: Any = None) -> None:
        self._reactor = reactor
        self._waiting: deque[Deferred[TurnLock]] = deque()
        self._handing_over = False
        #: True while a turn holds the lock or it is being handed to the next one.
        self.locked = False

    def acquire(self) -> Deferred[TurnLock]:
        """A Deferred that fires with the lock once it is ours."""
        if not self.locked:
            self.locked = True
            return succeed(self)
        d: Deferred[TurnLock] = Deferred(self._waiting.remove)
        self._waiting.append(d)
        return d

    def release(self) -> None:
        """Give the lock up; the next waiter gets it on the reactor's next iteration."""
        if not self.locked or self._handing_over:
            raise RuntimeError("TurnLock.release() without acquire()")
        if not self._waiting:
            self.locked = False
            return
        reactor = self._reactor
        if reactor is None:
            from twisted.internet import reactor as global_reactor

            reactor = global_reactor
        self._handing_over = True
        reactor.callLater(0, self._hand_over)

    def _hand_over(self) -> None:
        self._handing_over = False
        if not self._waiting:  # the waiters were cancelled meanwhile
            self.locked = False
            return
        self._waiting.popleft().callback(self)
