"""
What the first bytes of an oversized message show: the framing keeps only the head of a
message longer than its limit (``OVERSIZED_HEAD``, 4 KiB), and :func:`scan_head` reads
the top-level keys and the values that are whole in it, so that the engine can answer a
request with its id, or fail the pending request a response names.
"""

from __future__ import annotations

import json

import attrs

from acpkit.jsonrpc.classify import RequestId, is_valid_id

__all__ = ["OversizedHead", "scan_head"]


@attrs.define
class OversizedHead:
    """What the first bytes of an oversized line show of its top-level object."""

    #: The top-level keys seen, in order, including the one whose value was cut off.
    keys: list[str] = attrs.Factory(list)
    #: The top-level values read whole (a value cut off by the head is absent).
    values: dict[str, object] = attrs.Factory(dict)

    def request_id(self) -> RequestId | None:
        """The id of a request (``method`` and a whole, valid ``id`` seen), else None."""
        request_id = self.values.get("id")
        if "method" in self.keys and is_valid_id(request_id):
            return request_id  # type: ignore[return-value]
        return None

    def method(self) -> str | None:
        """The ``method`` when it was read whole, else None."""
        method = self.values.get("method")
        return method if isinstance(method, str) else None

    def kind(self) -> str:
        """request, notification (as far as the head shows), response, or unknown."""
        if "method" in self.keys:
            return "request" if "id" in self.keys else "notification"
        if "result" in self.keys or "error" in self.keys:
            return "response"
        return "unknown"


def scan_head(head: bytes) -> OversizedHead:
    """
    Read the top-level keys and values at the start of a truncated JSON object.

    Values are decoded only when they are complete within ``head``; a long value (the
    params that made the line too long) stops the scan, so keys after it are not seen.
    """
    text = head.decode("utf-8", errors="replace")
    decoder = json.JSONDecoder()
    found = OversizedHead()
    pos = 0
    n = len(text)

    def skip(p: int) -> int:
        while p < n and text[p] in " \t\r\n":
            p += 1
        return p

    pos = skip(pos)
    if pos >= n or text[pos] != "{":
        return found
    pos += 1
    while True:
        pos = skip(pos)
        if pos >= n or text[pos] != '"':
            return found
        try:
            key, pos = decoder.raw_decode(text, pos)
        except ValueError:
            return found
        pos = skip(pos)
        if pos >= n or text[pos] != ":":
            return found
        found.keys.append(key)
        pos = skip(pos + 1)
        try:
            value, pos = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            return found
        found.values[key] = value
        pos = skip(pos)
        if pos >= n or text[pos] != ",":
            return found
        pos += 1
