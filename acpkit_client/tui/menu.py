"""The menu bar and its drop-down menus.

The bar shows the menus' titles (``Alt-A`` opens **Agent**, ``Alt-W`` **Window``; a click
on a title opens it too). A drop-down lists :class:`MenuItem`\\ s built when it opens, so
that whether an entry is active reflects the moment: a disabled entry is drawn dimmed and
cannot be chosen.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs
import urwid

from acpkit_client.tui.sizes import Size, flow_width

__all__ = ["Menu", "MenuBar", "MenuDropdown", "MenuItem"]


@attrs.frozen
class MenuItem:
    """One entry of a menu."""

    label: str
    action: Callable[[], object]
    enabled: bool = True
    #: The key that does the same, shown on the right.
    shortcut: str = ""


@attrs.frozen
class Menu:
    """A menu of the bar: its title, the key that opens it, and its entries (built on opening)."""

    title: str
    key: str
    items: Callable[[], Sequence[MenuItem]]


class MenuBar(urwid.Widget):
    """One row with the menus' titles; ``on_open(index)`` is called on a click on one."""

    _sizing = frozenset([urwid.Sizing.FLOW])
    _selectable = False

    def __init__(self, menus: Sequence[Menu], on_open: Callable[[int], None]) -> None:
        super().__init__()
        self.menus = list(menus)
        self._on_open = on_open
        #: The open menu's index, or None.
        self.open_index: int | None = None

    def offset(self, index: int) -> int:
        """The column where menu ``index``'s title starts."""
        column = 0
        for menu in self.menus[:index]:
            column += len(menu.title) + 2
        return column

    def rows(self, size: Size, focus: bool = False) -> int:
        return 1

    def render(self, size: Size, focus: bool = False) -> urwid.Canvas:
        maxcol = flow_width(size)
        markup: list[tuple[str, str]] = []
        for index, menu in enumerate(self.menus):
            attribute = "menu.focus" if index == self.open_index else "menu"
            markup.append((attribute, f" {menu.title} "))
        used = sum(len(menu.title) + 2 for menu in self.menus)
        markup.append(("menu", " " * max(0, maxcol - used)))
        return urwid.Text(markup, wrap="clip").render((maxcol,))

    def mouse_event(
        self, size: Size, event: str, button: int, col: int, row: int, focus: bool
    ) -> bool:
        if event != "mouse press" or button != 1:
            return False
        for index in range(len(self.menus)):
            start = self.offset(index)
            if start <= col < start + len(self.menus[index].title) + 2:
                self._on_open(index)
                return True
        return False


class _Entry(urwid.WidgetWrap[urwid.Widget]):
    """One drop-down line."""

    def __init__(self, item: MenuItem, width: int, on_choose: Callable[[MenuItem], None]) -> None:
        self.item = item
        self._on_choose = on_choose
        label = item.label.ljust(width - len(item.shortcut) - 2) + item.shortcut
        text = urwid.Text(f" {label} ", wrap="clip")
        if item.enabled:
            widget: urwid.Widget = urwid.AttrMap(text, "menu", "menu.focus")
        else:
            widget = urwid.AttrMap(text, "menu.disabled")
        super().__init__(widget)

    def selectable(self) -> bool:
        return self.item.enabled

    def keypress(self, size: Size, key: str) -> str | None:
        if key in ("enter", " "):
            self._on_choose(self.item)
            return None
        return key

    def mouse_event(
        self, size: Size, event: str, button: int, col: int, row: int, focus: bool
    ) -> bool:
        if event == "mouse press" and button == 1 and self.item.enabled:
            self._on_choose(self.item)
            return True
        return False


class MenuDropdown(urwid.WidgetWrap[urwid.Widget]):
    """The entries of one open menu, framed; ``on_choose(item)`` when one is chosen."""

    def __init__(self, items: Sequence[MenuItem], on_choose: Callable[[MenuItem], None]) -> None:
        self.items = list(items)
        labels = [
            len(item.label) + (len(item.shortcut) + 2 if item.shortcut else 0) for item in items
        ]
        #: The inner width of the drop-down.
        self.width = max([*labels, 12]) + 2
        entries = [_Entry(item, self.width, on_choose) for item in self.items]
        walker = urwid.SimpleFocusListWalker(entries)
        self.listbox = urwid.ListBox(walker)
        for index, item in enumerate(self.items):
            if item.enabled:
                self.listbox.focus_position = index
                break
        box = urwid.LineBox(self.listbox)
        super().__init__(urwid.AttrMap(box, "menu"))

    @property
    def size(self) -> tuple[int, int]:
        """Columns and rows the framed drop-down needs."""
        return self.width + 2, len(self.items) + 2
