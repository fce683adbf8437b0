"""
Recording: every complete line of a connection, both ways, appended to the
``ACPKIT_TRACE`` file as one record (see :mod:`acpkit.trace`), and the attachment of that
tracer to the protocols the transports connect (:func:`attach_tracer`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from twisted.logger import Logger

from acpkit.framing import ITraced

__all__ = [
    "RECEIVED",
    "SENT",
    "TIMESTAMP_FORMAT",
    "TRACE_VARIABLE",
    "TraceFile",
    "Tracer",
    "attach_tracer",
    "clean_name",
    "format_record",
    "format_timestamp",
    "now",
    "open_trace_file",
    "tracer_from_environment",
]

_log = Logger(namespace="acpkit.trace")

#: The environment variable naming the trace file.
TRACE_VARIABLE = "ACPKIT_TRACE"

SENT = "->"
RECEIVED = "<-"
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def now() -> datetime:
    """The current time, in UTC (what records are stamped with)."""
    return datetime.now(UTC)


def format_timestamp(when: datetime) -> str:
    """``when`` as the trace writes it: UTC ISO-8601 with microseconds and ``Z``."""
    return when.astimezone(UTC).strftime(TIMESTAMP_FORMAT)


def format_record(when: datetime, direction: str, name: str, line: bytes) -> bytes:
    """One trace record, newline included."""
    head = f"{format_timestamp(when)} {direction} {name} ".encode()
    return head + line + b"\n"


def clean_name(name: str) -> str:
    """A peer name usable as one field of a record (no whitespace)."""
    cleaned = "_".join(name.split())
    return cleaned or "_"


# -- writing ---------------------------------------------------------------------------


class TraceFile:
    """
    One trace file, opened once (append mode) and shared by every tracer using its path.

    Each record is one ``write()`` call on an unbuffered descriptor opened with
    ``O_APPEND``, so records from several connections (or processes) never interleave
    within a line.  A failed write closes the file and logs one warning.
    """

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @property
    def broken(self) -> bool:
        """True once a write failed (nothing more is written)."""
        return self._fd is None

    def append(self, record: bytes) -> None:
        """Append one record; never raises."""
        fd = self._fd
        if fd is None:
            return
        try:
            view = memoryview(record)
            while view:
                written = os.write(fd, view)
                view = view[written:]
        except OSError as e:
            self._fd = None
            _log.warn(
                "cannot write trace file {path}: {error}; tracing stops", path=self.path, error=e
            )
            try:
                os.close(fd)
            except OSError:
                pass

    def close(self) -> None:
        """Close the file (used by tests; tracers sharing it stop writing)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


_open_files: dict[str, TraceFile] = {}
_failed_paths: set[str] = set()


def open_trace_file(path: str) -> TraceFile | None:
    """
    The shared :class:`TraceFile` for ``path`` (opened on first use), or ``None`` when it
    cannot be opened (one warning per path is logged).
    """
    key = os.path.abspath(os.path.expanduser(path))
    existing = _open_files.get(key)
    if existing is not None and not existing.broken:
        return existing
    if key in _failed_paths:
        return None
    try:
        fd = os.open(key, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as e:
        _failed_paths.add(key)
        _log.warn("cannot open trace file {path}: {error}; not tracing", path=key, error=e)
        return None
    trace_file = TraceFile(key, fd)
    _open_files[key] = trace_file
    return trace_file


class Tracer:
    """Records the lines of one connection with the peer's name (a ``framing.LineTracer``)."""

    def __init__(
        self, name: str, trace_file: TraceFile, clock: Callable[[], datetime] = now
    ) -> None:
        self.name = clean_name(name)
        self.file = trace_file
        self._clock = clock

    def received(self, line: bytes) -> None:
        """Record a line read from the peer."""
        self.file.append(format_record(self._clock(), RECEIVED, self.name, line))

    def sent(self, line: bytes) -> None:
        """Record a line written to the peer."""
        self.file.append(format_record(self._clock(), SENT, self.name, line))


def tracer_from_environment(name: str, environ: Mapping[str, str] | None = None) -> Tracer | None:
    """
    A :class:`Tracer` for peer ``name`` if ``ACPKIT_TRACE`` names a usable file.

    ``environ`` defaults to ``os.environ`` as it is at the time of the call.
    """
    path = (os.environ if environ is None else environ).get(TRACE_VARIABLE)
    if not path:
        return None
    trace_file = open_trace_file(path)
    if trace_file is None:
        return None
    return Tracer(name, trace_file)


def attach_tracer(protocol: object, name: str, environ: Mapping[str, str] | None = None) -> None:
    """
    Give ``protocol`` the ``ACPKIT_TRACE`` tracer for peer ``name``, if it is traced
    (:class:`acpkit.framing.ITraced`: a framing, or a JSON-RPC engine, which hands it to
    its framing), has no tracer yet, and the variable names a usable file.  Every
    transport of acpkit calls it on the protocol it connects (stdio, a spawned agent,
    remote connections both sides).
    """
    if ITraced.providedBy(protocol):
        traced: Any = protocol
        if traced.tracer is None:
            traced.tracer = tracer_from_environment(name, environ)
