"""
Which log events bob writes to stderr (:mod:`acpkit_agent.log_filter`): the library's
lines about events bob reports itself are left out, debug lines too.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from twisted.logger import ILogObserver, LogLevel
from zope.interface import implementer

from acpkit.mcp.client import ServerClosed
from acpkit_agent.log_filter import bob_log_filter
from acpkit_agent.tap import stderr_observer


@implementer(ILogObserver)
class _Kept:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any]) -> None:
        self.events.append(event)


def _event(namespace: str, level: LogLevel, **fields: Any) -> dict[str, Any]:
    return {
        "log_namespace": namespace,
        "log_level": level,
        "log_format": "x",
        "log_time": 0.0,
        **fields,
    }


@pytest.mark.parametrize(
    ("namespace", "level", "fields", "written"),
    [
        ("acpkit_agent.agent", LogLevel.info, {}, True),
        ("acpkit_agent.tools.bash", LogLevel.debug, {}, False),
        ("acpkit.jsonrpc.JSONRPCProtocol", LogLevel.debug, {}, False),
        ("acpkit.jsonrpc.JSONRPCProtocol", LogLevel.warn, {}, True),
        ("acpkit.io.spawn", LogLevel.info, {}, True),
        ("acpkit.mcp.client", LogLevel.info, {}, False),
        ("acpkit.mcp.client", LogLevel.warn, {}, True),
        (
            "acpkit.mcp.client",
            LogLevel.warn,
            {"closed": ServerClosed('MCP server "s" exited with status 3', False)},
            False,
        ),
        ("twisted.web.client._HTTP11ClientFactory", LogLevel.info, {}, True),
    ],
)
def test_which_events_bob_writes(
    namespace: str, level: LogLevel, fields: dict[str, Any], written: bool
) -> None:
    """Each row of the module's table: the event is written or left out."""
    kept = _Kept()
    bob_log_filter(kept)(_event(namespace, level, **fields))
    assert bool(kept.events) is written


def test_the_plugins_observer_filters(capfd: pytest.CaptureFixture[str]) -> None:
    """The observer twistd is given writes info lines and leaves debug lines out."""
    observer = stderr_observer()
    observer(_event("acpkit_agent.tap", LogLevel.debug, log_format="hidden"))
    observer(_event("acpkit_agent.tap", LogLevel.info, log_format="[acp] shown"))
    out, err = capfd.readouterr()
    assert out == ""
    assert err == "[acp] shown\n"


def test_an_event_without_a_level_is_written() -> None:
    """A legacy event with no level (twisted.python.log.msg) is still written."""
    stream = io.StringIO()
    from acpkit_agent.tap import _stream_observer

    _stream_observer(stream)({"log_format": "hello", "log_time": 0.0})
    assert stream.getvalue() == "hello\n"
