"""
Which session a server→client message of a remote connection belongs to, for the routing of
the RFD "Streamable HTTP & WebSocket Transport" (revision of 2026-05-04): "The
session-scoped stream (scoped to Acp-Connection-Id + Acp-Session-Id) carries all messages
for a single session: session update notifications, server-to-client requests like
request_permission, and responses to session-scoped POSTs like session/prompt and
session/cancel", while the connection-scoped stream carries "responses to session/new and
session/load … and any server-initiated messages not tied to a specific session".

`SessionRoutes` also learns the sessions a connection has (from the responses that create
or attach them), so that a ``GET`` naming another one can be refused (404).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from acpkit.jsonrpc.jsonbytes import loads

__all__ = ["MAX_PENDING", "SessionRoutes"]

#: Client requests naming a session whose response is awaited, remembered at most (the
#: oldest is forgotten beyond: its response then goes on the connection stream).
MAX_PENDING = 4096


def _key(request_id: Any) -> str:
    return json.dumps(request_id, sort_keys=True)


class SessionRoutes:
    """
    The sessions of one connection and the session of each message the agent writes.
    ``attaching``: the methods whose ``params.sessionId`` names a session the request
    attaches (``session/load``...): their response is connection-level, and a successful
    one makes the session known.
    """

    def __init__(self, attaching: Collection[str]) -> None:
        self._attaching = frozenset(attaching)
        #: Sessions of the connection: a session-scoped GET may name these only.
        self.known: set[str] = set()
        #: id of a client request naming a session -> (its method, the session)
        self._pending: dict[str, tuple[str, str]] = {}

    def request_sent(self, message: dict[str, Any]) -> None:
        """A message the client POSTed: a request naming a session is remembered, so that
        its response goes on that session's stream."""
        method = message.get("method")
        params = message.get("params")
        if "id" not in message or not isinstance(method, str) or not isinstance(params, dict):
            return
        session = params.get("sessionId")
        if not isinstance(session, str):
            return
        key = _key(message["id"])
        self._pending.pop(key, None)
        if len(self._pending) >= MAX_PENDING:
            del self._pending[next(iter(self._pending))]
        self._pending[key] = (method, session)

    def session_of(self, message: bytes) -> str | None:
        """
        The session whose stream carries ``message`` (one the agent wrote), ``None`` for a
        connection-level one: a request or notification naming a ``sessionId``, or the
        response to a request that named one (but not one attaching it). A response
        holding a new ``sessionId`` (session/new's) makes that session known.
        """
        if not self._pending and b"sessionId" not in message:
            return None
        try:
            decoded = loads(message)
        except ValueError:
            return None
        if not isinstance(decoded, dict):
            return None
        if "method" in decoded:
            params = decoded.get("params")
            session = params.get("sessionId") if isinstance(params, dict) else None
            return session if isinstance(session, str) else None
        if "id" not in decoded:
            return None
        result = decoded.get("result")
        if isinstance(result, dict) and isinstance(result.get("sessionId"), str):
            self.known.add(result["sessionId"])
        method, session = self._pending.pop(_key(decoded["id"]), ("", None))
        if session is None:
            return None
        if method in self._attaching:
            if "error" not in decoded:
                self.known.add(session)
            return None
        return session
