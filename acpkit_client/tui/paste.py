"""Bracketed paste: the keys a terminal sends for a paste, turned back into the pasted text.

The application asks the terminal for bracketed paste (urwid's ``bracketed_paste_mode``).
A paste then arrives as the key ``begin paste``, one key per pasted character (``enter``
for a line break, ``tab`` for a tab) and ``end paste``. Without it, a pasted line break
is an ``enter`` like any other and would send the first line as a prompt.
:class:`PasteCollector` keeps the keys between the two markers and gives the text back
whole when the paste ends, so that the application can insert it where it belongs.

A paste of 10,000 lines is some 500,000 keys.  Handed to the widgets one by one they
would cost seconds, so the keys of each read from the terminal go through
:meth:`PasteCollector.filter` first (urwid's ``input_filter``): a paste's keys are
joined there, a slice at a time, and what reaches the widgets is one :class:`Pasted`
key holding the text, in its place among the other keys.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BEGIN_PASTE", "END_PASTE", "PasteCollector", "Pasted", "pasted_character"]

#: The key urwid reports when a bracketed paste starts.
BEGIN_PASTE = "begin paste"
#: The key urwid reports when it ends.
END_PASTE = "end paste"

#: Keys of a paste that stand for a character urwid names instead of passing it.
_NAMED_CHARACTERS = {"enter": "\n", "tab": "\t"}


def pasted_character(key: str) -> str:
    """The text a key inside a paste stands for; empty for keys that are no text."""
    if len(key) == 1:
        return key
    return _NAMED_CHARACTERS.get(key, "")


class Pasted(str):
    """The key that stands for a whole paste (its value is ``"paste"``; see ``text``)."""

    text: str

    def __new__(cls, text: str) -> Pasted:
        key = super().__new__(cls, "paste")
        key.text = text
        return key


def _joined(keys: list[Any]) -> str:
    """The text the keys of a paste stand for (at C speed when all are characters)."""
    chars: list[str] = list(map(_NAMED_CHARACTERS.get, keys, keys))
    if chars and max(map(len, chars)) > 1:  # a named key other than enter and tab
        chars = [pasted_character(key) if isinstance(key, str) else "" for key in chars]
    return "".join(chars)


class PasteCollector:
    """Collects the keys of one bracketed paste (see the module docstring)."""

    def __init__(self) -> None:
        self._parts: list[str] | None = None
        # the paste going on over reads, for filter() (apart: the keys of a read that
        # come before its paste reach feed() after filter() has seen the paste begin)
        self._read_parts: list[str] | None = None

    @property
    def pasting(self) -> bool:
        """Whether a paste has begun and not ended."""
        return self._parts is not None or self._read_parts is not None

    def wants(self, key: str) -> bool:
        """Whether ``key`` belongs to a paste (starts one, or comes while one lasts)."""
        return self._parts is not None or key == BEGIN_PASTE

    def feed(self, key: str) -> str | None:
        """Take a key :meth:`wants`; the pasted text once ``end paste`` comes, else None."""
        if key == BEGIN_PASTE:
            self._parts = []
            return None
        if self._parts is None:
            return None
        if key == END_PASTE:
            text = "".join(self._parts)
            self._parts = None
            return text
        self._parts.append(pasted_character(key))
        return None

    def filter(self, keys: list[Any], raw: Any = None) -> list[Any]:
        """The keys of one read with each paste in them joined into one :class:`Pasted`
        (a paste that goes on in the next read is kept until its end comes)."""
        if self._read_parts is None and BEGIN_PASTE not in keys:
            return keys
        result: list[Any] = []
        index = 0
        while index < len(keys):
            if self._read_parts is None:
                try:
                    begin = keys.index(BEGIN_PASTE, index)
                except ValueError:
                    result.extend(keys[index:])
                    break
                result.extend(keys[index:begin])
                self._read_parts = []
                index = begin + 1
            try:
                end = keys.index(END_PASTE, index)
            except ValueError:
                self._read_parts.append(_joined(keys[index:]))
                break
            self._read_parts.append(_joined(keys[index:end]))
            result.append(Pasted("".join(self._read_parts)))
            self._read_parts = None
            index = end + 1
        return result
