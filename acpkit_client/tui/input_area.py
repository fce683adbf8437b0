"""The input area of an agent window: a multi-line edit where ``Enter`` is left to the window.

``Enter`` is not handled here (the window sends the prompt or takes a list entry);
``Alt-Enter`` inserts a line break. The arrows, ``Home``, ``End``, ``Backspace`` and
``Delete`` edit as usual (backspace at the start of a line joins it to the one above).

The cost of a key does not grow with what the input holds (a paste of 10,000 lines
included): the text is kept as lines with their wrapping (:class:`WrappedLines`), an
edit splits and wraps again only the lines it touched, and only the rows on screen are
drawn (:meth:`InputBox.render`).  What is left per key is a few scans at C speed over
the text (urwid's ``Edit`` builds the new text whole; the edit is checked against it;
the rows are summed again when a line's row count changed).
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate
from typing import Any

import urwid
from urwid import text_layout
from urwid.canvas import apply_text_layout

from acpkit_client.tui.sizes import Size, box_size, flow_width

#: One row of an urwid text layout (segments of ``(columns, start, end)`` and the like).
LayoutRow = list[Any]


class _RowsOfLine(dict[str, list[LayoutRow]]):
    """Line text -> its wrapped layout at one width (computed once per distinct line)."""

    def __init__(self, layout: text_layout.TextLayout, columns: int) -> None:
        super().__init__()
        self.layout = layout
        self.columns = columns
        #: Lines wrapped (for the tests: the work of an edit).
        self.wrapped = 0

    def __missing__(self, line: str) -> list[LayoutRow]:
        self.wrapped += 1
        if line.isascii() and line.isprintable() and len(line) <= self.columns:
            # what urwid's layout gives for a line that fits, without asking it
            rows: list[LayoutRow] = (
                [[(len(line), 0, len(line)), (0, len(line))]] if line else [[(0, 0)]]
            )
        else:
            rows = self.layout.layout(line, self.columns, "left", "space")
        self[line] = rows
        return rows


class WrappedLines:
    """The layout of a text, line by line, at one width: what the input draws and measures.

    ``lines`` are the text's lines and ``line_rows`` the display rows of each; each
    distinct line is wrapped once (kept in ``rows_of``, shared between texts).  An edit
    (:meth:`update`) splits and wraps again only the lines it touched, found from where
    the caret was and is, and checked against the text (else everything is split again).
    """

    def __init__(self, text: str, rows_of: _RowsOfLine, caret: int = 0) -> None:
        self.rows_of = rows_of
        self._whole(text)
        #: The caret's offset when the text was last seen.
        self.caret = caret
        #: Lines split again by the edits so far (for the tests: the work of an edit).
        self.lines_split = 0

    def _whole(self, text: str) -> None:
        self.text = text
        self.lines = text.split("\n")
        self.line_rows = list(map(len, map(self.rows_of.__getitem__, self.lines)))
        self._row_starts: list[int] | None = None

    def update(self, text: str, caret: int) -> None:
        """The text is now ``text`` and the caret at ``caret``."""
        old, was = self.text, self.caret
        self.caret = caret
        if text is old:
            return
        moved = len(text) - len(old)
        # the edit lies between where the caret was and where it is: whole lines around
        first = old.rfind("\n", 0, max(min(was, caret), 0)) + 1
        end = old.find("\n", min(max(was, caret - moved, first), len(old)))
        end = len(old) if end < 0 else end
        if not (first <= end + moved and text.startswith(old[:first]) and text.endswith(old[end:])):
            self._whole(text)
            self.lines_split += len(self.lines)
            return
        low = old.count("\n", 0, first)
        high = low + old.count("\n", first, end) + 1
        lines = text[first : end + moved].split("\n")
        rows = list(map(len, map(self.rows_of.__getitem__, lines)))
        if len(lines) != high - low or rows != self.line_rows[low:high]:
            self._row_starts = None
        self.lines[low:high] = lines
        self.line_rows[low:high] = rows
        self.text = text
        self.lines_split += len(lines)

    @property
    def row_starts(self) -> list[int]:
        """The display row where each line starts, then the total."""
        if self._row_starts is None:
            self._row_starts = list(accumulate(self.line_rows, initial=0))
        return self._row_starts

    @property
    def rows(self) -> int:
        """Display rows of the whole text."""
        return self.row_starts[-1]

    def line_of_row(self, row: int) -> int:
        """The line drawn on display row ``row``."""
        return bisect_right(self.row_starts, row, 0, len(self.lines)) - 1

    def coords(self, offset: int) -> tuple[int, int]:
        """Column and row of text offset ``offset``."""
        index = self.text.count("\n", 0, offset)
        start = self.text.rfind("\n", 0, offset) + 1
        line = self.lines[index]
        x, y = text_layout.calc_coords(line, self.rows_of[line], offset - start)
        return x, self.row_starts[index] + y

    def offset(self, x: Any, row: int) -> int:
        """The text offset nearest column ``x`` (or ``left``/``right``) of row ``row``."""
        index = self.line_of_row(row)
        line = self.lines[index]
        within = text_layout.calc_pos(line, self.rows_of[line], x, row - self.row_starts[index])
        return sum(map(len, self.lines[:index])) + index + within

    def canvases(self, top: int, count: int) -> tuple[list[urwid.Canvas], int]:
        """The canvases of the lines on rows ``top`` to ``top + count``, and the rows of
        the first one to skip."""
        index = self.line_of_row(top)
        skip = top - self.row_starts[index]
        drawn: list[urwid.Canvas] = []
        rows = -skip
        while index < len(self.lines) and rows < count:
            line = self.lines[index]
            layout = self.rows_of[line]
            drawn.append(apply_text_layout(line, [], layout, self.rows_of.columns))
            rows += len(layout)
            index += 1
        return drawn, skip

    def translation(self) -> list[LayoutRow]:
        """The whole text's layout, as urwid's ``Text`` gives it (every row: slow)."""
        rows: list[LayoutRow] = []
        starts = accumulate(map((1).__add__, map(len, self.lines)), initial=0)
        for start, line in zip(starts, self.lines, strict=False):
            rows.extend(_shifted(row, start) if start else row for row in self.rows_of[line])
        return rows


def _shifted(row: LayoutRow, by: int) -> LayoutRow:
    """A layout row of a line moved to offset ``by`` of the text."""
    moved: LayoutRow = []
    for segment in row:
        if len(segment) == 3 and isinstance(segment[2], int):
            moved.append((segment[0], segment[1] + by, segment[2] + by))
        elif len(segment) == 3:
            moved.append((segment[0], segment[1] + by, segment[2]))
        elif segment[1] is None:
            moved.append(segment)
        else:
            moved.append((segment[0], segment[1] + by))
    return moved


__all__ = ["InputArea", "InputBox"]


class InputArea(urwid.Edit):
    """The prompt being typed."""

    def __init__(self) -> None:
        super().__init__("", multiline=True)
        self._rows_of: _RowsOfLine | None = None
        self._wrapped: WrappedLines | None = None
        #: Widgets drawing this one's rows (their canvases go stale with it).
        self.drawn_by: list[urwid.Widget] = []

    def _invalidate(self) -> None:
        super()._invalidate()
        for widget in getattr(self, "drawn_by", ()):
            widget._invalidate()

    def wrapped(self, columns: int) -> WrappedLines:
        """The text's layout at ``columns`` (kept while the text and width stay)."""
        rows_of = self._rows_of
        if rows_of is None or rows_of.columns != columns:
            rows_of = self._rows_of = _RowsOfLine(self._w.layout, columns)
            self._wrapped = None
        text: str = self.edit_text
        caret = int(self.edit_pos)
        wrapped = self._wrapped
        if wrapped is None:
            wrapped = self._wrapped = WrappedLines(text, rows_of, caret)
        elif wrapped.text is not text:
            wrapped.update(text, caret)
            if len(rows_of) > 4 * len(wrapped.lines) + 1024:  # forget lines gone from the text
                rows_of.clear()
                wrapped = self._wrapped = WrappedLines(text, rows_of, caret)
        else:
            wrapped.caret = caret
        return wrapped

    # -- urwid.Edit's layout, line by line (see the module docstring) -----------------------

    def get_line_translation(self, maxcol: int, ta: Any = None) -> list[LayoutRow]:
        return self.wrapped(maxcol).translation()

    def position_coords(self, maxcol: int, pos: int) -> tuple[int, int]:
        return self.wrapped(maxcol).coords(pos)

    def rows(self, size: tuple[int], focus: bool = False) -> int:
        return self.wrapped(size[0]).rows

    def move_cursor_to_coords(self, size: tuple[int], x: Any, y: int) -> bool:
        (maxcol,) = size
        wrapped = self.wrapped(maxcol)
        if y < 0 or y >= wrapped.rows:
            return False
        self.set_edit_pos(min(max(wrapped.offset(x, y), 0), len(self.edit_text)))
        self.pref_col_maxcol = x, maxcol
        self._invalidate()
        return True

    def render(self, size: tuple[int], focus: bool = False) -> urwid.Canvas:  # type: ignore[override]
        (maxcol,) = size
        return self.render_rows(maxcol, 0, self.wrapped(maxcol).rows, focus)

    def render_rows(self, columns: int, top: int, count: int, focus: bool) -> urwid.CompositeCanvas:
        """Rows ``top`` to ``top + count`` of the text (only those are drawn)."""
        wrapped = self.wrapped(columns)
        drawn, skip = wrapped.canvases(top, count)
        canvas = urwid.CanvasCombine([(c, None, False) for c in drawn])
        shown = min(count, canvas.rows() - skip)
        canvas.trim(skip, shown)
        if focus:
            coords = self.get_cursor_coords((columns,))
            if coords is not None and top <= coords[1] < top + shown:
                canvas.cursor = (coords[0], coords[1] - top)
        return canvas

    def keypress(self, size: Size, key: str) -> str | None:
        if key == "enter":
            return key
        if key == "meta enter":
            self.insert_text("\n")
            return None
        if key == "home":
            self.set_edit_pos(self._line_start())
            return None
        if key == "end":
            self.set_edit_pos(self._line_end())
            return None
        result: str | None = super().keypress((flow_width(size),), key)
        return result

    def _line_start(self) -> int:
        text: str = self.edit_text
        return text.rfind("\n", 0, int(self.edit_pos)) + 1

    def _line_end(self) -> int:
        text: str = self.edit_text
        end = text.find("\n", int(self.edit_pos))
        return len(text) if end == -1 else end

    def replace(self, start: int, end: int, replacement: str) -> None:
        """Replace ``text[start:end]`` and put the caret after the replacement."""
        text = self.edit_text
        self.set_edit_text(text[:start] + replacement + text[end:])
        self.set_edit_pos(start + len(replacement))

    def clear(self) -> str:
        """Empty the area and return what it held."""
        text: str = self.edit_text
        self.set_edit_text("")
        return text


class InputBox(urwid.Widget):
    """The input area as a box of a given height that scrolls to keep the caret visible."""

    _sizing = frozenset([urwid.Sizing.BOX])
    _selectable = True

    def __init__(self, edit: InputArea) -> None:
        super().__init__()
        self.edit = edit
        self.top = 0
        # its rows are drawn here without its own canvas: a change of its text or caret
        # must make this box's canvas stale
        edit.drawn_by.append(self)

    def _scroll_to_caret(self, columns: int, rows: int) -> None:
        coords = self.edit.get_cursor_coords((columns,))
        if coords is None:
            return
        row = coords[1]
        if row < self.top:
            self.top = row
        elif row >= self.top + rows:
            self.top = row - rows + 1
        total = int(self.edit.rows((columns,)))
        self.top = max(0, min(self.top, total - rows))

    def render(self, size: Size, focus: bool = False) -> urwid.Canvas:
        columns, rows = box_size(size)
        self._scroll_to_caret(columns, rows)
        canvas = self.edit.render_rows(columns, self.top, rows, focus)
        shown = canvas.rows()
        if shown < rows:
            canvas.pad_trim_top_bottom(0, rows - shown)
        return canvas

    def keypress(self, size: Size, key: str) -> str | None:
        columns, _ = box_size(size)
        result: str | None = self.edit.keypress((columns,), key)
        return result

    def get_cursor_coords(self, size: Size) -> tuple[int, int] | None:
        columns, rows = box_size(size)
        self._scroll_to_caret(columns, rows)
        coords = self.edit.get_cursor_coords((columns,))
        if coords is None:
            return None
        return coords[0], coords[1] - self.top

    def mouse_event(
        self, size: Size, event: str, button: int, col: int, row: int, focus: bool
    ) -> bool:
        columns, _ = box_size(size)
        return bool(self.edit.mouse_event((columns,), event, button, col, row + self.top, focus))
