"""An overlay whose box is computed from the screen's size at each render, never outside it.

urwid's :class:`~urwid.Overlay` takes a fixed or relative width and height when it is
built. A permission modal wants "72 columns, or fewer on a narrow screen, and the rows its
text needs at that width, or fewer on a short screen"; a drop-down menu wants its own
size at the column of its title, moved left when the screen ends before it. Both are a
function of the screen's size, so :class:`FittedOverlay` overrides the overlay's own hook,
:meth:`~urwid.Overlay.calculate_padding_filler`, with such a function: render, keys, the
cursor and clicks then all use the same box, and the top widget is always given a box
size that fits on the screen (at least one column and one row).
"""

from __future__ import annotations

from collections.abc import Callable

import urwid

__all__ = ["Box", "FittedOverlay", "centered", "dropped_from"]

#: ``(left, top, columns, rows)`` of the top widget on a screen of the given size.
Box = tuple[int, int, int, int]


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(value, high))


def centered(wanted: Callable[[int], int], width: int) -> Callable[[int, int], Box]:
    """A box of ``width`` columns (fewer on a narrow screen) and ``wanted(columns)`` rows
    (fewer on a short screen), centred."""

    def place(columns: int, rows: int) -> Box:
        used_columns = _clamp(width, 1, columns)
        used_rows = _clamp(wanted(used_columns), 1, rows)
        return (columns - used_columns) // 2, (rows - used_rows) // 2, used_columns, used_rows

    return place


def dropped_from(left: int, top: int, size: tuple[int, int]) -> Callable[[int, int], Box]:
    """A box of ``size`` at ``(left, top)``, moved left and up (then shrunk) to stay on screen."""
    width, height = size

    def place(columns: int, rows: int) -> Box:
        used_columns = _clamp(width, 1, columns)
        used_rows = _clamp(height, 1, rows)
        return (
            _clamp(left, 0, columns - used_columns),
            _clamp(top, 0, rows - used_rows),
            used_columns,
            used_rows,
        )

    return place


class FittedOverlay(urwid.Overlay[urwid.Widget, urwid.Widget]):
    """``top`` over ``bottom`` in the box ``place(columns, rows)`` gives for the screen."""

    def __init__(
        self, top: urwid.Widget, bottom: urwid.Widget, place: Callable[[int, int], Box]
    ) -> None:
        super().__init__(top, bottom, "left", ("relative", 100), "top", ("relative", 100))
        self._place = place

    def calculate_padding_filler(
        self, size: tuple[int, int], focus: bool
    ) -> tuple[int, int, int, int]:
        columns, rows = size
        left, top, width, height = self._place(columns, rows)
        return left, columns - left - width, top, rows - top - height
