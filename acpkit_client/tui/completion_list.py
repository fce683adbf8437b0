"""The ``/`` and ``@`` list drawn over the bottom of the conversation.

It only shows :class:`~acpkit_client.completion.Completion`\\ s computed by the library's
pure functions and keeps which one is highlighted; the agent window decides when it opens,
what it holds and what taking an entry does.
"""

from __future__ import annotations

from collections.abc import Sequence

import urwid

from acpkit_client.completion import Completion
from acpkit_client.tui.sizes import Size, box_size

__all__ = ["MAX_ROWS", "CompletionList"]

#: At most this many rows of the list are visible at once.
MAX_ROWS = 8


class CompletionList(urwid.Widget):
    """A highlighted list of completions (box widget, see :meth:`wanted_rows`)."""

    _sizing = frozenset([urwid.Sizing.BOX])
    _selectable = False

    def __init__(self) -> None:
        super().__init__()
        self.items: list[Completion] = []
        #: The highlighted entry's index.
        self.highlight = 0
        self._first = 0

    def set_items(self, items: Sequence[Completion]) -> None:
        """Show ``items``; the highlight stays on the same label when it is still there."""
        current = self.current()
        self.items = list(items)
        self.highlight = 0
        if current is not None:
            for index, item in enumerate(self.items):
                if item.label == current.label:
                    self.highlight = index
                    break
        self._invalidate()

    def current(self) -> Completion | None:
        """The highlighted completion, if any."""
        if 0 <= self.highlight < len(self.items):
            return self.items[self.highlight]
        return None

    def move(self, delta: int) -> None:
        """Move the highlight by ``delta`` entries (kept inside the list)."""
        if self.items:
            self.highlight = max(0, min(len(self.items) - 1, self.highlight + delta))
            self._invalidate()

    def wanted_rows(self) -> int:
        """How many rows the list wants: one per entry (one for "no match"), at most MAX_ROWS."""
        return max(1, min(MAX_ROWS, len(self.items)))

    def render(self, size: Size, focus: bool = False) -> urwid.Canvas:
        maxcol, maxrow = box_size(size)
        if not self.items:
            rows: list[urwid.Widget] = [urwid.Text(("list", " no match"))]
        else:
            if self.highlight < self._first:
                self._first = self.highlight
            elif self.highlight >= self._first + maxrow:
                self._first = self.highlight - maxrow + 1
            self._first = max(0, min(self._first, max(0, len(self.items) - maxrow)))
            rows = []
            for index in range(self._first, min(len(self.items), self._first + maxrow)):
                item = self.items[index]
                attribute = "list.focus" if index == self.highlight else "list"
                detail = f"  {item.detail}" if item.detail else ""
                rows.append(urwid.Text((attribute, f" {item.label}{detail}"), wrap="ellipsis"))
        pile = urwid.AttrMap(urwid.Filler(urwid.Pile(rows), valign="top"), "list")
        return pile.render((maxcol, maxrow), focus)
