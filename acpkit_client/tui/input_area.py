"""The input area of an agent window: a multi-line edit where ``Enter`` is left to the window.

``Enter`` is not handled here (the window sends the prompt or takes a list entry);
``Alt-Enter`` inserts a line break. The arrows, ``Home``, ``End``, ``Backspace`` and
``Delete`` edit as usual (backspace at the start of a line joins it to the one above).
"""

from __future__ import annotations

import urwid

from acpkit_client.tui.sizes import Size, box_size, flow_width

__all__ = ["InputArea", "InputBox"]


class InputArea(urwid.Edit):
    """The prompt being typed."""

    def __init__(self) -> None:
        super().__init__("", multiline=True)

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
        urwid.connect_signal(edit, "change", lambda *_: self._invalidate())

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
        canvas = urwid.CompositeCanvas(self.edit.render((columns,), focus))
        shown = min(rows, canvas.rows() - self.top)
        canvas.trim(self.top, shown)
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
