"""The conversation pane: draws a conversation's entries, with a cursor and a selection.

It observes a :class:`~acpkit_client.conversation.Conversation` and redraws as entries
arrive or change. Keys (when it has the focus): ``↑`` ``↓`` a line, ``PgUp`` ``PgDn`` a
screen, ``Home`` ``End`` the start and end; with ``Shift`` they extend the selection
instead. Button 1 drags a selection, the wheel scrolls three rows without moving the
cursor. Selection is by whole lines. While the cursor is on the last line the view
follows new output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import urwid
from zope.interface import implementer

from acpkit_client.conversation import Conversation, Entry
from acpkit_client.interfaces import IConversationObserver
from acpkit_client.tui.copy import region_text
from acpkit_client.tui.render import Line, render_entry, render_notice
from acpkit_client.tui.sizes import Size, box_size

__all__ = ["WHEEL_ROWS", "ConversationView", "Notice"]

#: Rows the mouse wheel scrolls.
WHEEL_ROWS = 3

_MOVES = {"up", "down", "page up", "page down", "home", "end"}


class Notice:
    """A line from the client itself (a failure, a stop reason), shown in the error colour."""

    def __init__(self, text: str) -> None:
        self.text = text


def _width(text: str) -> int:
    return int(urwid.calc_width(text, 0, len(text)))


@implementer(IConversationObserver)
class ConversationView(urwid.Widget):
    """The conversation pane of one agent window (see the module docstring)."""

    _sizing = frozenset([urwid.Sizing.BOX])
    _selectable = True

    def __init__(
        self,
        conversation: Conversation,
        agent_name: str = "agent",
        on_scrolled: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        self.conversation = conversation
        self.agent_name = agent_name
        self._items: list[Entry | Notice] = list(conversation.entries)
        # Per item: its lines and their display widths, kept until the item changes.
        self._rendered: dict[int, tuple[list[Line], list[int]]] = {}
        self._lines: list[Line] = []
        self._widths: list[int] = []
        self._dirty = True
        #: The cursor's line.
        self.cursor = 0
        #: The other end of the selection, or None when nothing is selected.
        self.anchor: int | None = None
        #: The first display row drawn.
        self.top = 0
        #: Whether the view sticks to the end as output arrives.
        self.follow = True
        self._dragging = False
        self._height = 1
        self._width_seen = 80
        conversation.subscribe(self)

    # -- the model -----------------------------------------------------------------------

    def entry_added(self, entry: Any) -> None:
        """Append the new entry."""
        self._items.append(entry)
        self._invalidate_lines()

    def entry_changed(self, entry: Any) -> None:
        """Redraw the changed entry."""
        for number, item in enumerate(self._items):
            if item is entry:
                self._rendered.pop(number, None)
        self._invalidate_lines()

    def commands_changed(self, commands: Any) -> None:
        """Not drawn here."""

    def usage_changed(self, usage: Any) -> None:
        """Not drawn here."""

    def turn_changed(self, running: bool) -> None:
        """Not drawn here."""

    def add_notice(self, text: str) -> None:
        """Append a notice from the client."""
        self._items.append(Notice(text))
        self._invalidate_lines()

    def detach(self) -> None:
        """Stop observing the conversation."""
        self.conversation.unsubscribe(self)

    def _invalidate_lines(self) -> None:
        self._dirty = True
        self._invalidate()

    @property
    def lines(self) -> list[Line]:
        """Every display line, in order."""
        if self._dirty:
            lines: list[Line] = []
            widths: list[int] = []
            for number, item in enumerate(self._items):
                cached = self._rendered.get(number)
                if cached is None:
                    if isinstance(item, Notice):
                        rendered = render_notice(item.text, number)
                    else:
                        rendered = render_entry(item, number, self.agent_name)
                    measured = [sum(_width(piece) for _, piece in line.markup) for line in rendered]
                    cached = self._rendered[number] = (rendered, measured)
                lines.extend(cached[0])
                widths.extend(cached[1])
            self._lines = lines
            self._widths = widths
            self._dirty = False
            if self.follow and lines:
                self.cursor = len(lines) - 1
            self.cursor = min(self.cursor, max(len(lines) - 1, 0))
            if self.anchor is not None and self.anchor >= len(lines):
                self.anchor = None
        return self._lines

    # -- geometry --------------------------------------------------------------------------

    def _rows(self, width: int) -> list[int]:
        lines = self.lines
        return [max(1, -(-w // width)) if w else 1 for w in self._widths[: len(lines)]]

    def _line_start_rows(self, width: int) -> list[int]:
        starts = []
        total = 0
        for rows in self._rows(width):
            starts.append(total)
            total += rows
        starts.append(total)
        return starts

    def _max_top(self, width: int, height: int) -> int:
        return max(0, self._line_start_rows(width)[-1] - height)

    def _keep_cursor_visible(self, width: int, height: int) -> None:
        starts = self._line_start_rows(width)
        if not self.lines:
            self.top = 0
            return
        first, end = starts[self.cursor], starts[self.cursor + 1]
        if first < self.top:
            self.top = first
        elif end > self.top + height:
            self.top = min(first, end - height)
        self.top = max(0, min(self.top, max(0, starts[-1] - height)))

    def _line_at_row(self, width: int, row: int) -> int:
        starts = self._line_start_rows(width)
        for index in range(len(starts) - 1):
            if starts[index] <= row < starts[index + 1]:
                return index
        return max(len(starts) - 2, 0)

    # -- selection and copy ------------------------------------------------------------------

    @property
    def selection(self) -> range | None:
        """The selected lines, or None."""
        if self.anchor is None:
            return None
        low, high = sorted((self.anchor, self.cursor))
        return range(low, high + 1)

    def abandon_selection(self) -> bool:
        """Drop the selection; False when there was none."""
        if self.anchor is None:
            return False
        self.anchor = None
        self._invalidate()
        return True

    def copy_lines(self) -> list[str]:
        """The text ``Ctrl-C`` copies: the selected lines, else the cursor's region."""
        lines = self.lines
        if not lines:
            return []
        selection = self.selection
        if selection is not None:
            return [lines[index].text for index in selection]
        return region_text(lines, self.cursor)

    # -- drawing -------------------------------------------------------------------------------

    def render(self, size: Size, focus: bool = False) -> urwid.Canvas:
        maxcol, maxrow = box_size(size)
        self._height, self._width_seen = maxrow, maxcol
        lines = self.lines
        if not lines:
            return urwid.SolidCanvas(" ", maxcol, maxrow)
        starts = self._line_start_rows(maxcol)
        if self.follow:
            self.top = max(0, starts[-1] - maxrow)
        self.top = max(0, min(self.top, max(0, starts[-1] - maxrow)))
        first = self._line_at_row(maxcol, self.top)
        skip = self.top - starts[first]
        selection = self.selection
        canvases: list[tuple[urwid.Canvas, Any, bool]] = []
        drawn = 0
        index = first
        while index < len(lines) and drawn < maxrow + skip:
            line = lines[index]
            widget: urwid.Widget = urwid.Text(line.markup or "", wrap="any")
            if selection is not None and index in selection:
                widget = urwid.AttrMap(urwid.Text(_plain(line), wrap="any"), "selection")
            elif index == self.cursor and focus:
                widget = urwid.AttrMap(urwid.Text(_plain(line), wrap="any"), "cursor")
            canvas = widget.render((maxcol,))
            canvases.append((canvas, None, False))
            drawn += canvas.rows()
            index += 1
        combined = urwid.CanvasCombine(canvases)
        combined.trim(skip, min(maxrow, drawn - skip))
        if combined.rows() < maxrow:
            combined.pad_trim_top_bottom(0, maxrow - combined.rows())
        return combined

    # -- keys and mouse ------------------------------------------------------------------------

    def keypress(self, size: Size, key: str) -> str | None:
        maxcol, maxrow = box_size(size)
        extend = key.startswith("shift ")
        move = key[len("shift ") :] if extend else key
        if move not in _MOVES:
            return key
        lines = self.lines
        if not lines:
            return None
        if extend:
            if self.anchor is None:
                self.anchor = self.cursor
        else:
            self.anchor = None
        last = len(lines) - 1
        if move == "up":
            self.cursor = max(0, self.cursor - 1)
        elif move == "down":
            self.cursor = min(last, self.cursor + 1)
        elif move == "home":
            self.cursor = 0
        elif move == "end":
            self.cursor = last
        else:
            self.cursor = self._page(maxcol, maxrow, -1 if move == "page up" else 1)
        self.follow = self.cursor == last
        self._keep_cursor_visible(maxcol, maxrow)
        self._invalidate()
        return None

    def _page(self, width: int, height: int, direction: int) -> int:
        rows = self._rows(width)
        index = self.cursor
        moved = 0
        while 0 <= index + direction < len(rows) and moved < max(height - 1, 1):
            index += direction
            moved += rows[index]
        return index

    def scroll(self, rows: int, size: tuple[int, int] | None = None) -> None:
        """Scroll by ``rows`` display rows (negative: up) without moving the cursor."""
        width, height = size if size is not None else (self._width_seen, self._height)
        self.top = max(0, min(self.top + rows, self._max_top(width, height)))
        self.follow = False
        self._invalidate()

    def mouse_event(
        self, size: Size, event: str, button: int, col: int, row: int, focus: bool
    ) -> bool:
        maxcol, maxrow = box_size(size)
        if event == "mouse press" and button in (4, 5):
            self.scroll(-WHEEL_ROWS if button == 4 else WHEEL_ROWS, (maxcol, maxrow))
            return True
        if not self.lines:
            return False
        if event == "mouse press" and button == 1:
            self.cursor = self._line_at_row(maxcol, self.top + row)
            self.anchor = self.cursor
            self._dragging = True
            self.follow = False
            self._invalidate()
            return True
        if event == "mouse drag" and self._dragging:
            if row < 0:
                self.scroll(-1, (maxcol, maxrow))
            elif row >= maxrow:
                self.scroll(1, (maxcol, maxrow))
            clamped = max(0, min(row, maxrow - 1))
            self.cursor = self._line_at_row(maxcol, self.top + clamped)
            self._invalidate()
            return True
        if event == "mouse release" and self._dragging:
            self._dragging = False
            if self.anchor == self.cursor:
                self.anchor = None
            self._invalidate()
            return True
        return False


def _plain(line: Line) -> str:
    return "".join(piece for _, piece in line.markup)
