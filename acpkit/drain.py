"""
Draining a connection: let the peer's requests in progress be answered, then end it.

What a server that stops gracefully does to each connection (remote ACP's
:meth:`~acpkit.remote.server.ACPResource.start_draining`, bob's SIGTERM): a connection
with nothing in progress ends at once; one with a running turn ends right after the
turn is answered (on a later reactor turn, never from inside the engine).
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.defer import Deferred

from acpkit.jsonrpc import JSONRPCEngine

__all__ = ["end_when_answered"]


def end_when_answered(protocol: JSONRPCEngine, end: Callable[[], None]) -> Deferred[None]:
    """
    Call ``end`` once no request of ``protocol``'s peer is in progress (at once when none
    is); fires once that happened or the connection ended by itself.
    """
    done: Deferred[None] = Deferred()

    def settled(_: object) -> None:
        if done.called:
            return
        if protocol.closed_reason is None:
            if protocol.requests_in_progress:
                protocol.when_requests_answered().addCallback(settled)
                return
            end()
        if not done.called:  # ending it may have fired it already
            done.callback(None)

    protocol.when_closed().addErrback(lambda _: None if done.called else done.callback(None))
    protocol.when_requests_answered().addCallback(settled)
    return done
