"""The terminal screen, with a bracketed paste read as text rather than key by key.

urwid decodes what the terminal sends one key at a time, in Python: a paste of 10,000
lines (some 450,000 characters) took seconds before the application saw its first key.
:class:`PasteScreen` finds the bracketed paste's markers (``ESC [ 200 ~`` …
``ESC [ 201 ~``) in the bytes read, decodes what lies between as UTF-8 in one call,
and hands the application one :class:`~acpkit_client.tui.paste.Pasted` key in its
place; the bytes around it are decoded by urwid as before.  A paste spanning reads is
kept until its end comes.  The text is what the key-by-key path gives: a line break
(``CR`` or ``LF``) is ``\\n``, a tab stays, other control characters are dropped (a
paste holding an escape sequence is decoded key by key, as before).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import urwid

from acpkit_client.tui.paste import Pasted, pasted_character

__all__ = ["PasteScreen", "pasted_text"]

BEGIN = b"\x1b[200~"
END = b"\x1b[201~"

#: Control characters a paste drops (the key-by-key path names them, and drops names).
_DROPPED = {code: None for code in [*range(0x00, 0x20), 0x7F] if code not in (0x09, 0x0A, 0x0D)}


def pasted_text(data: bytes) -> str:
    """The text of a paste's bytes (see the module docstring)."""
    text = data.decode("utf-8", errors="replace")
    return text.replace("\r", "\n").translate(_DROPPED)


class PasteScreen(urwid.display.raw.Screen):
    """urwid's raw screen, reading bracketed pastes whole (see the module docstring)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        #: The bytes of a paste whose end has not come yet (None: not in a paste).
        self._pasting: bytearray | None = None

    def parse_input(
        self,
        event_loop: Any,
        callback: Callable[[list[Any], list[int]], Any] | None,
        codes: list[int],
        wait_for_more: bool = True,
    ) -> Any:
        data = bytes(codes) if all(0 <= code < 256 for code in codes) else None
        if data is None or (self._pasting is None and BEGIN not in data):
            return super().parse_input(event_loop, callback, codes, wait_for_more)
        keys: list[Any] = []
        rest = data
        while True:
            if self._pasting is None:
                begin = rest.find(BEGIN)
                if begin < 0:
                    break
                keys.extend(self._keys(rest[:begin]))
                self._pasting = bytearray()
                rest = rest[begin + len(BEGIN) :]
            # the end marker may have been cut by the previous read: look from before it
            start = max(0, len(self._pasting) - len(END) + 1)
            self._pasting.extend(rest)
            end = self._pasting.find(END, start)
            if end < 0:
                rest = b""
                break
            body = bytes(self._pasting[:end])
            rest = bytes(self._pasting[end + len(END) :])
            self._pasting = None
            keys.append(Pasted(self._text(body)))
        if rest:
            keys.extend(self._keys(rest, event_loop, wait_for_more))
        if callback is not None:
            callback(keys, codes)
            return None
        return keys, codes

    def _text(self, body: bytes) -> str:
        """The text of a paste's bytes; with an escape sequence in them, urwid's keys
        joined (as the key-by-key path would)."""
        if b"\x1b" not in body:
            return pasted_text(body)
        return "".join(pasted_character(key) for key in self._keys(body) if isinstance(key, str))

    def _keys(self, data: bytes, event_loop: Any = None, wait_for_more: bool = False) -> list[Any]:
        """urwid's keys for ``data`` (outside a paste)."""
        found: list[list[Any]] = []
        if data:
            super().parse_input(
                event_loop, lambda keys, raw: found.append(keys), list(data), wait_for_more
            )
        return found[0] if found else []
