"""A scrollable read-only text window (the **Agent status** report, the starter agents file)."""

from __future__ import annotations

from collections.abc import Sequence

import urwid

from acpkit_client.tui.sizes import Size

__all__ = ["TextWindow"]


class TextWindow(urwid.WidgetWrap[urwid.Widget]):
    """Lines in a framed, scrollable list; ``Esc`` or ``Ctrl-W`` closes it (the app does)."""

    def __init__(self, title: str, lines: Sequence[str]) -> None:
        self.title = title
        self.lines = list(lines)
        walker = urwid.SimpleFocusListWalker(
            [urwid.AttrMap(_Line(line), "body", "cursor") for line in self.lines or [""]]
        )
        self.listbox = urwid.ListBox(walker)
        box = urwid.LineBox(self.listbox, title=title)
        super().__init__(urwid.AttrMap(box, "body"))


class _Line(urwid.Text):
    """A selectable line, so that the list scrolls line by line."""

    _selectable = True

    def keypress(self, size: Size, key: str) -> str:
        return key
