"""The input area of an agent window: a multi-line edit where ``Enter`` is left to the window.

``Enter`` is not handled here (the window sends the prompt or takes a list entry);
``Alt-Enter`` inserts a line break. The arrows, ``Home``, ``End``, ``Backspace`` and
``Delete`` edit as usual (backspace at the start of a line joins it to the one above).
"""

from __future__ import annotations

import urwid

from acpkit_client.tui.sizes import Size, flow_width

__all__ = ["InputArea"]


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
