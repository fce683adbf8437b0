"""
Which log events bob writes to stderr: one line per event, under the right names.

bob reports what happens to its client connection, its MCP servers and its language
servers in lines of its own (the banner's ``mcp:`` lines, ``[mcp] <name> (<transport>)
stopped: ...``, ``[acp] stdin closed: ...``).  acpkit logs the same events for programs
that do not, so bob leaves those out:

============================  ============================================================
events                        written
============================  ============================================================
debug level, any namespace    never (bob's own included: ``bash: started pid ...``)
``acpkit.mcp.client``         warnings and errors, except the end of a server's
                              connection (an event carrying a
                              :class:`~acpkit.mcp.client.ServerClosed`), which bob reports
                              as ``[mcp] <name> (<transport>) stopped: <why>``; its
                              ``initialized`` and ``closed`` lines (info) are the banner's
                              ``mcp:`` line and bob's shutdown
everything else               info and above
============================  ============================================================

Each line of a child's stderr is logged once as it arrives, named by what the child is
(``MCP server <name> stderr: ...``, ``language server <name> stderr: ...``).
"""

from __future__ import annotations

import sys
from typing import Any

from twisted.logger import (
    FilteringLogObserver,
    ILogFilterPredicate,
    ILogObserver,
    LogLevel,
    LogLevelFilterPredicate,
    PredicateResult,
)
from zope.interface import implementer

__all__ = ["bob_log_filter", "bob_log_predicates"]


@implementer(ILogFilterPredicate)
class _ReportedByBob:
    """Leaves out the library's events that bob reports in its own words."""

    def __call__(self, event: dict[str, Any]) -> Any:  # a PredicateResult (constantly has no types)
        # Looked up, not imported: a bob without MCP servers never loads the MCP client,
        # and then no event can carry one of its ServerClosed.
        client = sys.modules.get("acpkit.mcp.client")
        if client is not None and isinstance(event.get("closed"), client.ServerClosed):
            return PredicateResult.no
        return PredicateResult.maybe


@implementer(ILogFilterPredicate)
class _Levels:
    """The levels of the table above; an event without a level or namespace is written."""

    def __init__(self) -> None:
        self._levels = LogLevelFilterPredicate(defaultLogLevel=LogLevel.info)
        self._levels.setLogLevelForNamespace("acpkit.mcp.client", LogLevel.warn)

    def __call__(self, event: dict[str, Any]) -> Any:  # a PredicateResult (constantly has no types)
        if event.get("log_level") is None or not event.get("log_namespace"):
            return PredicateResult.maybe
        return self._levels(event)


def bob_log_predicates() -> list[ILogFilterPredicate]:
    """The predicates of the table above, in order."""
    return [_Levels(), _ReportedByBob()]


def bob_log_filter(observer: ILogObserver) -> ILogObserver:
    """``observer`` given only the events bob writes (the table above)."""
    return FilteringLogObserver(observer, bob_log_predicates())
