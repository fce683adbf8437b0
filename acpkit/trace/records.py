"""
Reading a trace: its records (:func:`read_trace`, :class:`TraceRecord`) and a readable
rendering of one (:func:`pretty_record`, what ``python -m acpkit.trace print`` shows).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import attr

from acpkit.jsonrpc.jsonbytes import NestingTooDeep, loads
from acpkit.trace.recording import SENT, TIMESTAMP_FORMAT, format_record, format_timestamp

__all__ = ["MalformedTraceLine", "TraceRecord", "parse_record", "pretty_record", "read_trace"]


class MalformedTraceLine(ValueError):
    """A line of a trace file is not a record; ``line_number`` counts from 1."""

    def __init__(self, path: str, line_number: int, reason: str) -> None:
        super().__init__(f"{path}:{line_number}: {reason}")
        self.path = path
        self.line_number = line_number
        self.reason = reason


_NOT_JSON = object()


@attr.s(frozen=True, auto_attribs=True, kw_only=True)
class TraceRecord:
    """One record: when, which direction (``"->"`` sent / ``"<-"`` received), peer, line."""

    timestamp: datetime
    direction: str
    name: str
    message: bytes
    line_number: int

    @property
    def sent(self) -> bool:
        """True for a line we sent."""
        return self.direction == SENT

    def json(self) -> Any:
        """The message parsed as JSON (raises ``ValueError`` if it is not JSON, or is
        nested deeper than :data:`acpkit.jsonrpc.jsonbytes.MAX_NESTING_DEPTH`)."""
        return loads(self.message)

    def to_bytes(self) -> bytes:
        """The record as it appears in a trace file."""
        return format_record(self.timestamp, self.direction, self.name, self.message)


def parse_record(raw: bytes, path: str = "<trace>", line_number: int = 1) -> TraceRecord:
    """Parse one trace line (without its newline); raises :class:`MalformedTraceLine`."""
    parts = raw.split(b" ", 3)
    if len(parts) != 4:
        raise MalformedTraceLine(path, line_number, "expected 'TIMESTAMP DIRECTION NAME MESSAGE'")
    stamp, direction, name, message = parts
    try:
        timestamp = datetime.strptime(stamp.decode("ascii"), TIMESTAMP_FORMAT).replace(tzinfo=UTC)
    except (UnicodeDecodeError, ValueError):
        raise MalformedTraceLine(path, line_number, f"bad timestamp {stamp[:40]!r}") from None
    if direction not in (b"->", b"<-"):
        raise MalformedTraceLine(path, line_number, f"bad direction {direction[:10]!r}")
    try:
        peer = name.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedTraceLine(path, line_number, "peer name is not UTF-8") from None
    return TraceRecord(
        timestamp=timestamp,
        direction=direction.decode("ascii"),
        name=peer,
        message=message,
        line_number=line_number,
    )


def read_trace(
    path: str, on_error: Callable[[MalformedTraceLine], None] | None = None
) -> Iterator[TraceRecord]:
    """
    The records of a trace file, in order.

    A malformed line raises :class:`MalformedTraceLine` (with its line number), unless
    ``on_error`` is given: then it is called with that exception and reading goes on.
    """
    with open(path, "rb") as f:
        for line_number, raw in enumerate(f, 1):
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            try:
                yield parse_record(raw, path, line_number)
            except MalformedTraceLine as e:
                if on_error is None:
                    raise
                on_error(e)


def _describe(message: Any) -> str:
    """A short summary of a JSON-RPC message: kind, id, method."""
    if not isinstance(message, dict):
        return "not a JSON-RPC object"
    has_id = "id" in message
    if "method" in message:
        method = message["method"]
        if has_id:
            return f"request {json.dumps(message['id'])} {method}"
        return f"notification {method}"
    if has_id:
        kind = "error" if "error" in message else "response"
        return f"{kind} {json.dumps(message['id'])}"
    return "not a JSON-RPC message"


def pretty_record(record: TraceRecord) -> str:
    """A record as several readable lines: a header, then the message indented."""
    try:
        message = record.json()
    except ValueError as e:
        body = "    " + record.message.decode("utf-8", "replace")
        summary = f"not JSON: {e}" if isinstance(e, NestingTooDeep) else "not JSON"
    else:
        body = "\n".join(
            "    " + line for line in json.dumps(message, indent=2, ensure_ascii=False).splitlines()
        )
        summary = _describe(message)
    header = f"{format_timestamp(record.timestamp)} {record.direction} {record.name}  {summary}"
    return f"{header}\n{body}\n"
