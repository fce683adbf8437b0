"""The conversation pane: draws a conversation's entries, with a cursor and a selection.

It observes a :class:`~acpkit_client.conversation.Conversation` and redraws as entries
arrive or change. Keys (when it has the focus): ``↑`` ``↓`` a line, ``PgUp`` ``PgDn`` a
screen, ``Home`` ``End`` the start and end; with ``Shift`` they extend the selection
instead. Button 1 drags a selection, the wheel scrolls three rows without moving the
cursor. Selection is by whole lines. While the cursor is on the last line the view
follows new output; a new turn (the user sent a prompt) puts the cursor back on the last
line, so the view follows again. The cursor bar is drawn like a selected line.

The cost of a change does not grow with the conversation: an entry that grows is
rendered incrementally (:class:`~acpkit_client.tui.render.MessageRenderer`), only its
lines that changed are measured again, and the display rows are summed again only from
the first changed line.
"""

from __future__ import annotations

import operator
from bisect import bisect_right
from collections.abc import Callable, Sequence
from typing import Any

import urwid
from zope.interface import implementer

from acpkit_client.conversation import Conversation, Entry
from acpkit_client.interfaces import IConversationObserver
from acpkit_client.tui.copy import region_text
from acpkit_client.tui.line_rows import Row, canvas_rows, draw_line, hang, line_rows
from acpkit_client.tui.render import EntryRenderer, Line, entry_renderer, render_notice
from acpkit_client.tui.sizes import Size, box_size

__all__ = ["WHEEL_ROWS", "ConversationView", "Notice"]

#: Rows the mouse wheel scrolls.
WHEEL_ROWS = 3

_MOVES = {"up", "down", "page up", "page down", "home", "end"}


class Notice:
    """A line from the client itself (a failure, a stop reason), shown in the error colour."""

    def __init__(self, text: str) -> None:
        self.text = text


#: A segment's text.
_PIECE = operator.itemgetter(1)


def _width(text: str) -> int:
    return int(urwid.calc_width(text, 0, len(text)))


def _measure(lines: Sequence[Line]) -> list[tuple[int, int]]:
    """Each line's display width and its leading spaces (its indentation)."""
    measured = []
    for line in lines:
        plain = "".join(map(_PIECE, line.markup))
        measured.append((_width(plain), len(plain) - len(plain.lstrip(" "))))
    return measured


def _rows(width: int, lead: int, columns: int) -> int:
    """Rows a line of ``width`` columns with ``lead`` leading spaces takes in ``columns``."""
    if width <= columns:
        return 1
    indent = hang(width, lead, columns)
    return -(-(width - indent) // (columns - indent))


class _NoticeRenderer:
    def __init__(self, notice: Notice, number: int) -> None:
        self.notice = notice
        self.number = number

    def update(self) -> tuple[int, list[Line]]:
        return 0, render_notice(self.notice.text, self.number)


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
        self._items: list[Entry | Notice] = []
        # id() of each item -> its number (the items are kept, so ids stay theirs).
        self._numbers: dict[int, int] = {}
        self._renderers: list[EntryRenderer] = []
        # Per item: its lines and their display widths.
        self._item_lines: list[list[Line]] = []
        self._item_widths: list[list[tuple[int, int]]] = []
        # Per item: the index of its first line in ``_lines`` (valid up to ``_stale``).
        self._offsets: list[int] = []
        # Items to render again, and how many of their lines may be stale at least.
        self._stale: set[int] = set()
        self._lines: list[Line] = []
        self._widths: list[tuple[int, int]] = []
        # Display row of each line's start (and one past the end) at ``_starts_width``,
        # computed for the first ``len(_starts) - 1`` lines.
        self._starts: list[int] = [0]
        self._starts_width = 0
        #: Lines whose rows were summed (for the tests: the work of a change).
        self.rows_summed = 0
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
        # The rows of the plain lines drawn last, by line index: (line, width, rows).
        self._drawn: dict[int, tuple[Line, int, list[Row]]] = {}
        for entry in conversation.entries:
            self._append(entry)
        conversation.subscribe(self)

    # -- the model -----------------------------------------------------------------------

    def _append(self, item: Entry | Notice) -> None:
        number = len(self._items)
        self._items.append(item)
        self._numbers[id(item)] = number
        if isinstance(item, Notice):
            self._renderers.append(_NoticeRenderer(item, number))
        else:
            self._renderers.append(entry_renderer(item, number, self.agent_name))
        self._item_lines.append([])
        self._item_widths.append([])
        self._offsets.append(0)
        self._stale.add(number)
        self._invalidate()

    def entry_added(self, entry: Any) -> None:
        """Append the new entry."""
        self._append(entry)

    def entry_changed(self, entry: Any) -> None:
        """Redraw the changed entry."""
        number = self._numbers.get(id(entry))
        if number is not None:
            self._stale.add(number)
            self._invalidate()

    def commands_changed(self, commands: Any) -> None:
        """Not drawn here."""

    def usage_changed(self, usage: Any) -> None:
        """Not drawn here."""

    def turn_changed(self, running: bool) -> None:
        """A new turn: the cursor goes back to the end and the view follows it."""
        if running:
            self.follow = True
            self.anchor = None
            self._invalidate()

    def add_notice(self, text: str) -> None:
        """Append a notice from the client."""
        self._append(Notice(text))

    def detach(self) -> None:
        """Stop observing the conversation."""
        self.conversation.unsubscribe(self)

    def _bring_up_to_date(self) -> None:
        """Render the stale items again and splice their new lines into ``_lines``."""
        first = min(self._stale)
        first_keep = 0
        for number in sorted(self._stale):
            keep, tail = self._renderers[number].update()
            lines, widths = self._item_lines[number], self._item_widths[number]
            del lines[keep:]
            del widths[keep:]
            lines.extend(tail)
            widths.extend(_measure(tail))
            if number == first:
                first_keep = keep
        self._stale.clear()
        if first:
            self._offsets[first] = self._offsets[first - 1] + len(self._item_lines[first - 1])
        start = self._offsets[first] + first_keep
        del self._lines[start:]
        del self._widths[start:]
        self._lines.extend(self._item_lines[first][first_keep:])
        self._widths.extend(self._item_widths[first][first_keep:])
        for number in range(first + 1, len(self._items)):
            self._offsets[number] = len(self._lines)
            self._lines.extend(self._item_lines[number])
            self._widths.extend(self._item_widths[number])
        del self._starts[start + 1 :]

    @property
    def lines(self) -> list[Line]:
        """Every display line, in order."""
        if self._stale:
            self._bring_up_to_date()
            lines = self._lines
            if self.follow and lines:
                self.cursor = len(lines) - 1
            self.cursor = min(self.cursor, max(len(lines) - 1, 0))
            if self.anchor is not None and self.anchor >= len(lines):
                self.anchor = None
        elif self.follow and self._lines:
            self.cursor = len(self._lines) - 1
        return self._lines

    # -- geometry --------------------------------------------------------------------------

    def _line_start_rows(self, width: int) -> list[int]:
        """The display row where each line starts, then the total (kept between calls)."""
        lines = self.lines
        starts = self._starts
        if width != self._starts_width:
            self._starts_width = width
            del starts[1:]
        total = starts[-1]
        widths = self._widths
        self.rows_summed += len(lines) + 1 - len(starts)
        for index in range(len(starts) - 1, len(lines)):
            w, lead = widths[index]
            total += _rows(w, lead, width) if w else 1
            starts.append(total)
        return starts

    # -- geometry --------------------------------------------------------------------------

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
        index = bisect_right(starts, row) - 1
        return max(0, min(index, len(starts) - 2))

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
            chosen = [lines[index] for index in selection]
            # labels and tool headings are not copied along (unless nothing else is chosen)
            text = [line for line in chosen if not line.furniture] or chosen
            return [line.text for line in text]
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
        rows: list[Row] = []
        index = first
        drawn_now: dict[int, tuple[Line, int, list[Row]]] = {}
        while index < len(lines) and len(rows) < maxrow + skip:
            line = lines[index]
            w, lead = self._widths[index]
            if (selection is not None and index in selection) or (index == self.cursor and focus):
                drawn = canvas_rows(_bar(line, w, lead, maxcol))
            else:
                known = self._drawn.get(index)
                if known is not None and known[0] is line and known[1] == maxcol:
                    drawn = known[2]
                else:
                    drawn = line_rows(line.markup, w, lead, maxcol)
                drawn_now[index] = (line, maxcol, drawn)
            rows.extend(drawn)
            index += 1
        self._drawn = drawn_now
        shown = rows[skip : skip + maxrow]
        blank = b" " * maxcol
        while len(shown) < maxrow:
            shown.append((blank, [], []))
        # one text canvas for the pane: its rows are the lines' rows, kept drawn (a
        # composite of a canvas per line would cost a shard per line at every draw)
        return urwid.TextCanvas(
            [text for text, _, _ in shown],
            [list(attr) for _, attr, _ in shown],
            [list(cs) for _, _, cs in shown],
            maxcol=maxcol,
            check_width=False,
        )

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
        starts = self._line_start_rows(width)
        index = self.cursor
        moved = 0
        while 0 <= index + direction < len(starts) - 1 and moved < max(height - 1, 1):
            index += direction
            moved += starts[index + 1] - starts[index]
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


def _bar(line: Line, width: int, lead: int, columns: int) -> urwid.Canvas:
    """``line`` drawn as selected (the selection and the cursor bar look the same)."""
    canvas = urwid.CompositeCanvas(draw_line([("selection", _plain(line))], width, lead, columns))
    canvas.fill_attr("selection")
    return canvas
