"""urwid's size tuples, typed, and the two shapes this UI's widgets take them in."""

from __future__ import annotations

__all__ = ["Size", "box_size", "flow_width"]

#: What urwid passes to ``render``, ``keypress`` and ``mouse_event``.
Size = tuple[()] | tuple[int] | tuple[int, int]


def box_size(size: Size) -> tuple[int, int]:
    """``(columns, rows)`` of a box widget's size; a flow size counts as one row."""
    if len(size) == 2:
        return size[0], size[1]
    if len(size) == 1:
        return size[0], 1
    raise ValueError("a box widget needs a size with columns")


def flow_width(size: Size) -> int:
    """The columns of a flow widget's size."""
    if not size:
        raise ValueError("a flow widget needs a size with columns")
    return size[0]


#: The smallest screen the UI lays out; under it, a notice asks for a larger terminal.
MIN_COLUMNS = 20
#: See :data:`MIN_COLUMNS`.
MIN_ROWS = 6
