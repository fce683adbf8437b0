"""A bracketed paste is read from the terminal's bytes as text, not key by key.

What the screen hands the application must be what urwid's key-by-key decoding gives,
the paste's keys joined: same text, same keys around it, however the reads cut it.
"""

from __future__ import annotations

from typing import Any

import urwid

from acpkit_client.tui.paste import Pasted, pasted_character
from acpkit_client.tui.paste_screen import PasteScreen

DATA = (
    b"a\x1b[200~x\ry\tz\n\x01\xc3\xa9 end\x1b[201~b"
    b"\x1b[200~with \x1b[A an escape\x1b[201~"
    b"\x1b[200~" + b"line\r" * 2000 + b"\x1b[201~c"
)


def _keys_one_by_one(data: bytes) -> list[Any]:
    """urwid's keys for ``data``, each paste's keys joined into its text."""
    keys: list[Any] = []
    urwid.display.raw.Screen(bracketed_paste_mode=True).parse_input(
        None, lambda found, raw: keys.extend(found), list(data)
    )
    joined: list[Any] = []
    paste: list[str] | None = None
    for key in keys:
        if key == "begin paste":
            paste = []
        elif key == "end paste" and paste is not None:
            joined.append("".join(pasted_character(k) for k in paste))
            paste = None
        elif paste is not None:
            paste.append(key)
        else:
            joined.append(key)
    return joined


def _keys_read_by_read(pieces: list[bytes]) -> list[Any]:
    screen = PasteScreen(bracketed_paste_mode=True)
    keys: list[Any] = []
    for piece in pieces:
        if piece:
            screen.parse_input(None, lambda found, raw: keys.extend(found), list(piece))
    return [key.text if isinstance(key, Pasted) else key for key in keys]


def test_a_paste_is_one_key_holding_what_its_keys_spell() -> None:
    """Read at once, each paste becomes one ``Pasted`` key whose text is what urwid's
    keys spell (CR and LF line breaks, a tab kept, a control character dropped, UTF-8,
    an escape sequence inside as urwid reads it), the keys around in place."""
    expected = _keys_one_by_one(DATA)
    assert expected[:3] == ["a", "x\ny\tz\né end", "b"]
    assert expected[-2:] == ["line\n" * 2000, "c"]
    assert _keys_read_by_read([DATA]) == expected


def test_reads_cutting_a_paste_anywhere_give_the_same_keys() -> None:
    """A read may end anywhere inside a paste, its end marker included: the keys are
    the same.  (A read ending inside a begin marker is urwid's own partial input: it
    keeps the start for the next read.)"""
    expected = _keys_one_by_one(DATA)
    start = DATA.index(b"\x1b[200~") + len(b"\x1b[200~")
    end = DATA.index(b"\x1b[201~") + len(b"\x1b[201~")
    for cut in range(start, end + 1):
        for second in (cut, min(cut + 3, end), end):
            pieces = [DATA[:cut], DATA[cut:second], DATA[second:]]
            assert _keys_read_by_read(pieces) == expected, (cut, second)
