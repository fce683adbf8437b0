"""
Server-Sent Events: an incremental parser (the WHATWG "event stream interpretation"),
bounded in memory, and the writer of one event.  Shared by the transports that read or
write an SSE stream: MCP's Streamable HTTP client (:mod:`acpkit.mcp.http`) and ACP's
remote transport (:mod:`acpkit.remote`).

Feed it the body's bytes as they arrive, in chunks of any size; it returns the events
completed so far.  Linear in its input: each byte is searched for a line end once.

=====================================  =============================================
input                                  what happens
=====================================  =============================================
``data: x`` lines, then an empty line  one event whose data is the lines' values
                                       joined with ``\\n`` (one leading space after
                                       the colon is dropped)
``id: v``                              the stream's last event id becomes ``v`` (kept
                                       across events; an id holding NUL is ignored;
                                       ``id`` with an empty value resets it)
``retry: 500``                         :attr:`SSEParser.retry` becomes 500 (ms); a
                                       value that is not all ASCII digits is ignored
``event: t``                           the event's type (default ``message``)
``: anything``                         a comment: ignored (keep-alives)
a field without colon (``data``)       the field with an empty value
an unknown field                       ignored
line ends ``\\r\\n``, ``\\n`` or ``\\r``  all accepted, also split across chunks
a UTF-8 BOM at the start               dropped
an empty line with no ``data`` field   no event (its ``id`` still counts)
a line or an event's data longer       :class:`SSEEventTooLarge` (the stream cannot
than ``max_event_size`` bytes          be trusted to resynchronise: stop reading)
the stream ends mid-event              the incomplete event is discarded (as the
                                       standard says)
=====================================  =============================================
"""

from __future__ import annotations

import attrs

__all__ = ["KEEPALIVE", "SSEEvent", "SSEEventTooLarge", "SSEParser", "encode_event"]

_BOM = b"\xef\xbb\xbf"


class SSEEventTooLarge(Exception):
    """An SSE line or event's data exceeded the parser's ``max_event_size``."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"an SSE event exceeded the {limit}-byte limit")
        self.limit = limit


@attrs.frozen
class SSEEvent:
    """One dispatched event."""

    #: The event's data (the ``data`` lines joined with ``\\n``), bytes as received.
    data: bytes
    #: The ``event`` field (``"message"`` when absent).
    type: str = "message"
    #: The stream's last event id when this event was dispatched (None: never set).
    id: str | None = None


class SSEParser:
    """Incremental, bounded SSE parser (see the module docstring)."""

    def __init__(self, max_event_size: int) -> None:
        if max_event_size < 1:
            raise ValueError("max_event_size must be positive")
        self.max_event_size = max_event_size
        #: The last event id seen on this stream (``id`` field), or None.
        self.last_event_id: str | None = None
        #: The reconnection time the server asked for (``retry`` field), in ms, or None.
        self.retry: int | None = None
        self._buffer = bytearray()
        self._scanned = 0
        self._skip_lf = False  # the previous chunk ended with CR: a leading LF is its pair
        self._started = False  # the BOM check was done
        self._data: list[bytes] = []
        self._data_size = 0
        self._type = ""

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse ``chunk``; return the events it completed, in order."""
        buf = self._buffer
        buf += chunk
        if not self._started:
            if len(buf) < len(_BOM) and _BOM.startswith(bytes(buf)):
                return []
            self._started = True
            if buf.startswith(_BOM):
                del buf[: len(_BOM)]
        events: list[SSEEvent] = []
        start = 0
        if self._skip_lf and buf:
            # The previous chunk ended with CR: an LF first in this one completes it.
            start = 1 if buf[:1] == b"\n" else 0
            self._skip_lf = False
        search = max(self._scanned, start)
        n = len(buf)
        while True:
            cr = buf.find(b"\r", search)
            lf = buf.find(b"\n", search)
            if cr == -1 and lf == -1:
                break
            end = lf if cr == -1 else cr if lf == -1 else min(cr, lf)
            line = bytes(buf[start:end])
            if buf[end] == 0x0D:
                if end + 1 < n:
                    next_start = end + 2 if buf[end + 1] == 0x0A else end + 1
                else:
                    next_start = end + 1
                    self._skip_lf = True
            else:
                next_start = end + 1
            start = search = next_start
            event = self._line(line)
            if event is not None:
                events.append(event)
        del buf[:start]
        self._scanned = len(buf)
        if len(buf) > self.max_event_size:
            raise SSEEventTooLarge(self.max_event_size)
        return events

    def _line(self, line: bytes) -> SSEEvent | None:
        if not line:
            return self._dispatch()
        if line[:1] == b":":
            return None
        colon = line.find(b":")
        if colon == -1:
            field, value = line, b""
        else:
            field, value = line[:colon], line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if field == b"data":
            self._data_size += len(value) + 1
            if self._data_size > self.max_event_size:
                raise SSEEventTooLarge(self.max_event_size)
            self._data.append(value)
        elif field == b"id":
            if b"\x00" not in value:
                self.last_event_id = value.decode("utf-8", errors="replace")
        elif field == b"retry":
            if value and value.isdigit():
                self.retry = int(value)
        elif field == b"event":
            self._type = value.decode("utf-8", errors="replace")
        return None

    def _dispatch(self) -> SSEEvent | None:
        data, self._data, self._data_size = self._data, [], 0
        event_type, self._type = self._type, ""
        if not data:
            return None
        return SSEEvent(b"\n".join(data), event_type or "message", self.last_event_id)


#: A comment line: keeps an idle stream's intermediaries from timing it out; parsers
#: ignore it.
KEEPALIVE = b": keepalive\n\n"


def encode_event(
    data: bytes, *, event_id: str | None = None, event_type: str | None = None
) -> bytes:
    """One SSE event carrying ``data``, as :class:`SSEParser` reads it back.

    Each line of ``data`` (split on CR, LF or CRLF, which SSE cannot carry inside a
    field) becomes a ``data:`` line; a JSON message from a compact encoder is one line.
    ``event_id`` and ``event_type`` must not hold a line end (:class:`ValueError`).
    """
    fields = []
    for name, value in (("event", event_type), ("id", event_id)):
        if value is not None:
            if "\r" in value or "\n" in value:
                raise ValueError(f"an SSE {name} field cannot hold a line end: {value!r}")
            fields.append(f"{name}: {value}\n".encode())
    lines = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    fields.extend(b"data: " + line + b"\n" for line in lines)
    return b"".join(fields) + b"\n"
