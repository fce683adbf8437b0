"""Bracketed paste: the keys a terminal sends for a paste, turned back into the pasted text.

The application asks the terminal for bracketed paste (urwid's ``bracketed_paste_mode``).
A paste then arrives as the key ``begin paste``, one key per pasted character (``enter``
for a line break, ``tab`` for a tab) and ``end paste``. Without it, a pasted line break
is an ``enter`` like any other and would send the first line as a prompt.
:class:`PasteCollector` keeps the keys between the two markers and gives the text back
whole when the paste ends, so that the application can insert it where it belongs.
"""

from __future__ import annotations

__all__ = ["BEGIN_PASTE", "END_PASTE", "PasteCollector", "pasted_character"]

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


class PasteCollector:
    """Collects the keys of one bracketed paste (see the module docstring)."""

    def __init__(self) -> None:
        self._parts: list[str] | None = None

    @property
    def pasting(self) -> bool:
        """Whether a paste has begun and not ended."""
        return self._parts is not None

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
