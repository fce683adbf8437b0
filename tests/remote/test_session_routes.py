"""SessionRoutes: which session's stream carries each agent message (RFD 2026-05-04)."""

from __future__ import annotations

import json
from typing import Any

from acpkit.remote.session_routes import MAX_PENDING, SessionRoutes

ATTACHING = {"session/load", "session/resume", "session/fork"}


def _bytes(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode()


def _request(rid: Any, method: str, session: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {} if session is None else {"sessionId": session}
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def test_notifications_and_requests_go_to_the_session_they_name() -> None:
    """An agent notification or request naming a sessionId belongs to that session; one
    naming none is connection-level."""
    routes = SessionRoutes(ATTACHING)
    update = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s"}}
    assert routes.session_of(_bytes(update)) == "s"
    asking = _request(7, "session/request_permission", "s")
    assert routes.session_of(_bytes(asking)) == "s"
    assert routes.session_of(_bytes(_request(8, "_x/ping", None))) is None
    assert routes.session_of(b"not json") is None


def test_a_response_goes_where_its_request_named() -> None:
    """The response to a client request naming a session (session/prompt) belongs to that
    session, whatever the id's type; session/new's response is connection-level and makes
    its session known."""
    routes = SessionRoutes(ATTACHING)
    routes.request_sent(_request(1, "session/new", None))
    created = {"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "n"}}
    assert routes.session_of(_bytes(created)) is None
    routes.request_sent(_request(2, "session/new", None))
    created = {"jsonrpc": "2.0", "id": 2, "result": {"sessionId": "m"}}
    assert routes.session_of(_bytes(created)) is None
    assert routes.known == {"n", "m"}
    routes.request_sent(_request("p", "session/prompt", "m"))
    answer = {"jsonrpc": "2.0", "id": "p", "result": {"stopReason": "end_turn"}}
    assert routes.session_of(_bytes(answer)) == "m"
    assert routes.session_of(_bytes(answer)) is None  # answered once: forgotten


def test_an_attaching_request_answered_makes_its_session_known() -> None:
    """session/load's response is connection-level; a successful one makes the session
    known, a failed one does not."""
    routes = SessionRoutes(ATTACHING)
    routes.request_sent(_request(1, "session/load", "old"))
    assert routes.session_of(_bytes({"jsonrpc": "2.0", "id": 1, "result": {}})) is None
    routes.request_sent(_request(2, "session/load", "bad"))
    failed = {"jsonrpc": "2.0", "id": 2, "error": {"code": -32002, "message": "no"}}
    assert routes.session_of(_bytes(failed)) is None
    assert routes.known == {"old"}


def test_pending_requests_are_bounded() -> None:
    """At most MAX_PENDING requests are remembered: the oldest one's response then goes on
    the connection stream (nothing is lost, memory is bounded)."""
    routes = SessionRoutes(ATTACHING)
    for rid in range(MAX_PENDING + 1):
        routes.request_sent(_request(rid, "session/prompt", "s"))
    first = {"jsonrpc": "2.0", "id": 0, "result": {}}
    last = {"jsonrpc": "2.0", "id": MAX_PENDING, "result": {}}
    assert routes.session_of(_bytes(first)) is None
    assert routes.session_of(_bytes(last)) == "s"
