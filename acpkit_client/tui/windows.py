"""The window area: agent windows maximised (the front one) or tiled, each under a title bar.

The title bar shows ``[x]`` (close), the window's number (``Alt-<n>``), the agent's name,
and ``[■]`` (tile or maximise). The title is the agent's name and is never animated.
"""

from __future__ import annotations

from collections.abc import Callable

import urwid

from acpkit_client.tui import glyphs
from acpkit_client.tui.sizes import Size, flow_width

__all__ = ["TitleBar", "WindowFrame"]


class TitleBar(urwid.Widget):
    """One row naming a window; clicks on ``[x]`` and ``[■]`` call back."""

    _sizing = frozenset([urwid.Sizing.FLOW])
    _selectable = False

    def __init__(
        self,
        number: int,
        title: str,
        front: bool,
        on_close: Callable[[], None],
        on_toggle: Callable[[], None],
    ) -> None:
        super().__init__()
        self.number, self.title, self.front = number, title, front
        self._on_close, self._on_toggle = on_close, on_toggle

    def rows(self, size: Size, focus: bool = False) -> int:
        return 1

    def render(self, size: Size, focus: bool = False) -> urwid.Canvas:
        maxcol = flow_width(size)
        attribute = "title.front" if self.front else "title"
        chars = glyphs.current()
        left = f"[x] {self.number} {self.title} "
        right = f" [{chars.toggle}]"
        room = maxcol - len(right)
        if len(left) > room >= len("[x] 1 …"):
            # Too narrow for the whole title: cut it, so that [■] stays where a click finds it.
            left = left[: room - 1] + chars.cut
        fill = max(0, maxcol - len(left) - len(right))
        return urwid.Text((attribute, left + " " * fill + right), wrap="clip").render((maxcol,))

    def mouse_event(
        self, size: Size, event: str, button: int, col: int, row: int, focus: bool
    ) -> bool:
        if event != "mouse press" or button != 1:
            return False
        if col < 3:
            self._on_close()
            return True
        if col >= flow_width(size) - 3:
            self._on_toggle()
            return True
        return False


class WindowFrame(urwid.WidgetWrap[urwid.Widget]):
    """A window under its title bar."""

    def __init__(self, title_bar: TitleBar, body: urwid.Widget) -> None:
        self.title_bar = title_bar
        self.body = body
        pile = urwid.Pile([("pack", title_bar), ("weight", 1, body)])
        pile.focus_position = 1
        super().__init__(pile)
