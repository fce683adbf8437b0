"""
ACP traffic traces: record every line in both directions, read, print and replay them.

Set ``ACPKIT_TRACE=<file>`` and every connection that has a tracer (agents spawned
with :func:`acpkit.io.spawn_agent`, protocols served with
:func:`acpkit.io.serve_stdio`) appends one record per line::

    2026-11-29T19:45:01.123456Z -> bob {"jsonrpc":"2.0","id":0,"method":"initialize",...}
    2026-11-29T19:45:01.125002Z <- bob {"jsonrpc":"2.0","id":0,"result":{...}}

``->`` is a line we sent, ``<-`` a line we received, then the peer's name and the line
exactly as it was on the wire.  Tracing never breaks a connection: a file that cannot
be opened or written means no trace and one warning in the log.

Command line::

    python -m acpkit.trace print FILE
    python -m acpkit.trace replay [--timeout S] FILE -- CMD ARGS...

=================================  =====================================================
module                             its job
=================================  =====================================================
:mod:`acpkit.trace.recording`      the ``ACPKIT_TRACE`` file, its records, the tracer
                                   of a connection and its attachment
:mod:`acpkit.trace.records`        reading a trace, and printing a record readably
:mod:`acpkit.trace.replay`         replaying a trace against an agent process
:mod:`acpkit.trace.cli`            ``python -m acpkit.trace``
=================================  =====================================================
"""

from __future__ import annotations

from acpkit.trace.cli import main
from acpkit.trace.recording import (
    RECEIVED,
    SENT,
    TRACE_VARIABLE,
    TraceFile,
    Tracer,
    attach_tracer,
    format_record,
    format_timestamp,
    open_trace_file,
    tracer_from_environment,
)
from acpkit.trace.records import (
    MalformedTraceLine,
    TraceRecord,
    parse_record,
    pretty_record,
    read_trace,
)
from acpkit.trace.replay import replay

__all__ = [
    "RECEIVED",
    "SENT",
    "TRACE_VARIABLE",
    "MalformedTraceLine",
    "TraceFile",
    "TraceRecord",
    "Tracer",
    "attach_tracer",
    "format_record",
    "format_timestamp",
    "main",
    "open_trace_file",
    "parse_record",
    "pretty_record",
    "read_trace",
    "replay",
    "tracer_from_environment",
]
