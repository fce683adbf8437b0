"""Tests for acpkit.jsonrpc.outgoing: the table of our pending requests."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from acpkit.errors import ConnectionLost, MessageTooLarge, RPCError
from acpkit.jsonrpc.outgoing import FORGOTTEN_IDS, OutgoingRequests


def outcome(d: Deferred[Any]) -> Any:
    found: list[Any] = []
    d.addBoth(found.append)
    return found[0] if found else None


def test_ids_count_up_and_match_ints_and_decimal_strings() -> None:
    """Ids are 1, 2, ...; a response id matches as an int or its decimal string."""
    table = OutgoingRequests()
    first, _ = table.add("a", Deferred(), 10)
    second, _ = table.add("b", Deferred(), 10)
    assert (first, second, table.next_id, len(table)) == (1, 2, 3, 2)
    assert table.match(2)[0] is not None and table.match(2)[2] is False
    outgoing, number, from_string = table.match("2")
    assert outgoing is not None and number == 2 and from_string
    assert table.match("02")[0] is None
    assert table.match(True)[0] is None
    assert table.match(9)[0] is None


def test_fail_stops_the_timer_and_fires_once() -> None:
    """fail removes the request, cancels its timer and errbacks its Deferred."""
    clock = Clock()
    table = OutgoingRequests()
    d: Deferred[Any] = Deferred()
    request_id, outgoing = table.add("m", d, 1)
    outgoing.timer = clock.callLater(5, lambda: None)
    table.fail(request_id, ConnectionLost("gone"))
    assert isinstance(outcome(d), Failure) and not outgoing.timer.active()
    assert request_id not in table
    table.fail(request_id, ConnectionLost("again"))  # no second firing


def test_give_up_remembers_a_bounded_number_of_ids() -> None:
    """A given-up id's late answer is recognised; only the last FORGOTTEN_IDS are kept."""
    table = OutgoingRequests()
    ids = [table.add("m", Deferred(), 1)[0] for _ in range(FORGOTTEN_IDS + 5)]
    for request_id in ids:
        assert table.give_up(request_id) is not None
    assert table.give_up(ids[0]) is None
    assert not table.was_given_up(ids[0]) and table.was_given_up(ids[-1])
    assert len(table) == 0


def test_fail_all() -> None:
    """fail_all fails every pending request with the reason."""
    table = OutgoingRequests()
    ds: list[Deferred[Any]] = [Deferred() for _ in range(3)]
    for d in ds:
        table.add("m", d, 1)
    table.fail_all(ConnectionLost("x"))
    assert all(isinstance(outcome(d).value, ConnectionLost) for d in ds)
    assert len(table) == 0


def test_unreadable_too_large_names_every_longer_request() -> None:
    """-32600 with data.limit: every pending request longer than the limit."""
    table = OutgoingRequests()
    table.add("small", Deferred(), 10)
    table.add("big", Deferred(), 500)
    table.add("bigger", Deferred(), 900)
    failed = table.unreadable({"code": -32600, "message": "x", "data": {"limit": 100}})
    assert [(i, o.method) for i, o, _ in failed] == [(2, "big"), (3, "bigger")]
    assert all(isinstance(e, MessageTooLarge) for _, _, e in failed)


def test_unreadable_parse_error_only_the_single_longest() -> None:
    """-32700: the only pending request, if it is the longest written since the last one."""
    table = OutgoingRequests()
    table.written(50)
    _, outgoing = table.add("m", Deferred(), 20)
    table.written(20)
    assert table.unreadable({"code": -32700, "message": "x"}) == []
    _, outgoing = table.add("n", Deferred(), 30)
    table.written(30)
    table.pop(1)
    ((request_id, found, error),) = table.unreadable({"code": -32700, "message": "x"})
    assert request_id == 2 and found is outgoing and isinstance(error, RPCError)
    assert table.unreadable({"code": -32000, "message": "other"}) == []
