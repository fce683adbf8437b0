"""
A peer's line nested 100,000 levels deep is a finding, never a crash of the tester: every
place the conformance tester reads a peer's JSON parses it with `acpkit.jsonrpc.jsonbytes.loads`,
which refuses text nested deeper than 254 levels (the standard library's ``json.loads``
raises ``RecursionError`` on it).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from acpkit.conformance.observer import Observer
from acpkit.conformance.probes_session import _updates_after
from acpkit.conformance.remote_driver import jsonrpc_body

DEPTH = 100_000


def _deep_array() -> bytes:
    return b"[" * DEPTH + b"]" * DEPTH


def _deep_message() -> bytes:
    params = b'{"sessionId":"s","_meta":{"x":' + b"[" * DEPTH + b"]" * DEPTH + b"}}"
    return b'{"jsonrpc":"2.0","method":"session/update","params":' + params + b"}"


def _in_a_thread(work: Any) -> None:
    """Run ``work`` in a thread, as the tester's lanes do (smaller stacks than the main one)."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as e:
            failure.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


@pytest.mark.parametrize("line", [_deep_array(), _deep_message()], ids=["array", "message"])
def test_a_line_nested_100000_deep_is_a_finding_not_a_crash(line: bytes) -> None:
    """The observer files a deep line from the agent as a finding and reads the next line."""
    observer = Observer()

    def work() -> None:
        assert observer.received(line) is None
        ok = b'{"jsonrpc":"2.0","method":"_x.example/ping","params":{}}'
        assert observer.received(ok) is not None

    _in_a_thread(work)
    messages = [f.message for f in observer.verdicts.findings]
    assert any("nested deeper than" in m for m in messages), messages


def test_a_remote_body_nested_100000_deep_is_not_a_message() -> None:
    """An HTTP body nested too deep is not taken for a JSON-RPC message (no crash)."""
    assert jsonrpc_body(_deep_message()) is None


def test_the_close_probe_skips_a_deep_line_in_its_records() -> None:
    """The session/close probe's look at the records skips a line it cannot read."""
    records = [(0.0, "<-", _deep_message()), (0.1, "<-", b'{"id":1,"result":{}}')]
    _in_a_thread(lambda: _updates_after(records, (1,), "s", 0.0))
