"""
The table of our pending outgoing requests: ids, timers, and who an answer is for.

No I/O and no logging: the engine (:mod:`acpkit.jsonrpc`) writes and logs, this table
only keeps state.

=================  ==================================================================
operation          what it does
=================  ==================================================================
``add``            allocate the next id (1, 2, ...) for a request of ``size`` bytes
``match``          the pending request a response id names: an int, or the decimal
                   string of a pending int (``from_string`` tells the engine to warn)
``fail``           remove it, stop its timer, errback its Deferred
``give_up``        remove it and stop its timer without firing it; its id is
                   remembered (the last 1024) so that a late answer is dropped
                   quietly (``was_given_up``)
``fail_all``       every pending request fails with the reason
``unreadable``     which requests an error with id ``null`` can only be about (see
                   "Oversized lines" in :mod:`acpkit.jsonrpc`)
=================  ==================================================================
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall

from acpkit.errors import InvalidRequest, MessageTooLarge, ParseError, RPCError
from acpkit.jsonrpc.classify import parse_decimal_id

__all__ = ["FORGOTTEN_IDS", "OutgoingRequest", "OutgoingRequests"]

#: How many ids of requests we gave up on (cancelled, timed out) are remembered, so that
#: their late answers are dropped quietly.
FORGOTTEN_IDS = 1024


@attrs.define
class OutgoingRequest:
    """One request of ours waiting for its answer."""

    method: str
    deferred: Deferred[Any]
    timer: IDelayedCall | None = None
    #: Length of the request's message, in bytes (without framing).
    size: int = 0
    #: How many messages we had written when this one was written.
    seq: int = 0

    def stop_timer(self) -> None:
        """Cancel the timeout, if one is running."""
        if self.timer is not None and self.timer.active():
            self.timer.cancel()


class OutgoingRequests:
    """Pending outgoing requests by id, plus what is needed to interpret id-``null`` errors."""

    def __init__(self) -> None:
        self._next_id = 1
        self._pending: dict[int, OutgoingRequest] = {}
        self._forgotten: OrderedDict[int, None] = OrderedDict()
        # Messages written so far, and the longest one since the last error with id
        # null (which of our messages it was about is worked out from these).
        self._written = 0
        self._window_start = 0
        self._window_longest = 0

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._pending

    def __iter__(self) -> Iterator[int]:
        return iter(self._pending)

    @property
    def next_id(self) -> int:
        """The id the next request will get."""
        return self._next_id

    def add(self, method: str, deferred: Deferred[Any], size: int) -> tuple[int, OutgoingRequest]:
        """Allocate an id for a request about to be written (its message is ``size`` bytes)."""
        request_id = self._next_id
        self._next_id += 1
        outgoing = OutgoingRequest(method, deferred, size=size, seq=self._written + 1)
        self._pending[request_id] = outgoing
        return request_id, outgoing

    def written(self, size: int) -> None:
        """Note one message of ``size`` bytes written (any message, not only requests)."""
        self._written += 1
        if size > self._window_longest:
            self._window_longest = size

    def match(self, response_id: object) -> tuple[OutgoingRequest | None, int, bool]:
        """
        The pending request ``response_id`` names, its number, and whether the id was
        a decimal string (accepted, the engine warns); ``(None, n, False)`` if none.
        """
        if isinstance(response_id, int) and not isinstance(response_id, bool):
            return self._pending.get(response_id), response_id, False
        if isinstance(response_id, str) and (number := parse_decimal_id(response_id)) is not None:
            outgoing = self._pending.get(number)
            return outgoing, number, outgoing is not None
        return None, 0, False

    def pop(self, request_id: int) -> OutgoingRequest | None:
        """Remove and return a pending request (its timer stopped), or None."""
        outgoing = self._pending.pop(request_id, None)
        if outgoing is not None:
            outgoing.stop_timer()
        return outgoing

    def fail(self, request_id: int, reason: BaseException) -> None:
        """Remove a pending request and fail its Deferred with ``reason``."""
        outgoing = self.pop(request_id)
        if outgoing is not None:
            outgoing.deferred.errback(reason)

    def give_up(self, request_id: int) -> OutgoingRequest | None:
        """Remove a request without firing it; its late answer will be dropped quietly."""
        outgoing = self.pop(request_id)
        if outgoing is not None:
            self.forget(request_id)
        return outgoing

    def forget(self, request_id: int) -> None:
        """Remember that ``request_id`` was given up (the last ``FORGOTTEN_IDS`` are kept)."""
        self._forgotten[request_id] = None
        while len(self._forgotten) > FORGOTTEN_IDS:
            self._forgotten.popitem(last=False)

    def was_given_up(self, request_id: object) -> bool:
        """True if ``request_id`` is one we gave up on recently."""
        return request_id in self._forgotten

    def fail_all(self, reason: BaseException) -> None:
        """Fail every pending request with ``reason``."""
        pending, self._pending = self._pending, {}
        for outgoing in pending.values():
            outgoing.stop_timer()
            outgoing.deferred.errback(reason)

    def unreadable(self, error: dict[str, Any]) -> list[tuple[int, OutgoingRequest, RPCError]]:
        """
        The pending requests an error with id ``null`` can only be about, with the
        error each should fail with (not removed here):

        - -32600 with an integer ``data.limit`` (a line too long for the peer): every
          pending request whose message was longer than that limit.  The peer discards
          every such message, so each of them fails whichever one the error was about.
        - -32700 (the peer could not parse a message; ours are valid JSON, so it cut
          a long one): the single pending request, if there is exactly one and its
          message is the longest we wrote since the previous error with id ``null``.
        - anything else: none.

        Starts a new window for the next error with id ``null``.
        """
        code = error.get("code")
        data = error.get("data")
        limit = data.get("limit") if isinstance(data, dict) else None
        failed: list[tuple[int, OutgoingRequest, RPCError]] = []
        if code == InvalidRequest.CODE and isinstance(limit, int) and not isinstance(limit, bool):
            for request_id, outgoing in self._pending.items():
                if outgoing.size > limit:
                    failed.append(
                        (
                            request_id,
                            outgoing,
                            MessageTooLarge(
                                limit,
                                f"Message too large: request {request_id} ({outgoing.method}) "
                                f"was {outgoing.size} bytes, over the peer's {limit}-byte "
                                "line limit; the peer discarded it",
                            ),
                        )
                    )
        elif code == ParseError.CODE and len(self._pending) == 1:
            ((request_id, outgoing),) = self._pending.items()
            if outgoing.seq > self._window_start and outgoing.size >= self._window_longest:
                failed.append((request_id, outgoing, RPCError.from_json(error)))
        self._window_start = self._written
        self._window_longest = 0
        return failed
