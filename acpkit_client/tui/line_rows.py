"""The rows a conversation line takes on screen, as the pane's text canvas holds them.

:func:`draw_line` draws a line with urwid (wrapped anywhere, its continuation rows hung
under its text, :func:`hang`) and :func:`canvas_rows` reads the rows out of the canvas.
:func:`line_rows` gives the same rows, built directly, for the common line: printable
ASCII that fits in the width (one character a column, nothing to wrap): its bytes,
padded with spaces, and the runs of its attributes, neighbours of one attribute joined
as urwid joins them.  A line coloured by Pygments has a segment per token, so drawing it
through urwid cost about twice what a prose line did; built directly, it costs about the
same.  Any other line goes through urwid.
"""

from __future__ import annotations

from typing import Any

import urwid

__all__ = ["Row", "canvas_rows", "draw_line", "hang", "line_rows"]

#: One drawn row: its bytes, its attributes and its character sets (run lengths).
Row = tuple[bytes, list[tuple[Any, int]], list[tuple[Any, int]]]


def hang(width: int, lead: int, columns: int) -> int:
    """
    The indentation a wrapped line's continuation rows keep: its own leading spaces,
    when the line wraps and they leave at least half the width for text; else 0.
    """
    return lead if width > columns and lead < columns // 2 else 0


def draw_line(markup: Any, width: int, lead: int, columns: int) -> urwid.Canvas:
    """
    ``markup`` drawn in ``columns``, wrapped anywhere; the rows after the first start
    under its text, not at column 0 (the line's indentation is kept, :func:`hang`).
    """
    indent = hang(width, lead, columns)
    if not indent:
        return urwid.Text(markup or "", wrap="any").render((columns,))
    rest: list[tuple[Any, str]] = []
    skip = indent
    for attr, piece in markup:
        if skip >= len(piece):
            skip -= len(piece)
            continue
        rest.append((attr, piece[skip:]))
        skip = 0
    canvas = urwid.CompositeCanvas(urwid.Text(rest or "", wrap="any").render((columns - indent,)))
    canvas.pad_trim_left_right(indent, 0)
    return canvas


def canvas_rows(canvas: urwid.Canvas) -> list[Row]:
    """The rows of ``canvas``, as a text canvas holds them."""
    rows: list[Row] = []
    for row in canvas.content():
        rows.append(
            (
                b"".join(segment[2] for segment in row),
                [(segment[0], len(segment[2])) for segment in row],
                [(segment[1], len(segment[2])) for segment in row],
            )
        )
    return rows


def _ascii_row(markup: list[tuple[str, str]], columns: int) -> list[Row] | None:
    """The row of ``markup`` built directly, or None unless it is printable ASCII that
    fits in ``columns``."""
    runs: list[tuple[Any, int]] = []
    pieces: list[str] = []
    for attribute, piece in markup:
        if piece:
            if runs and runs[-1][0] == attribute:
                runs[-1] = (attribute, runs[-1][1] + len(piece))
            else:
                runs.append((attribute, len(piece)))
            pieces.append(piece)
    text = "".join(pieces)
    width = len(text)
    if width > columns or not (text.isascii() and text.isprintable()):
        return None
    charsets: list[tuple[Any, int]] = [(None, run) for _, run in runs]
    if width < columns:
        runs.append((None, columns - width))
        charsets.append((None, columns - width))
    return [(text.encode("ascii") + b" " * (columns - width), runs, charsets)]


def line_rows(markup: list[tuple[str, str]], width: int, lead: int, columns: int) -> list[Row]:
    """The rows ``markup`` (``width`` columns, ``lead`` leading spaces) takes in
    ``columns``: what :func:`draw_line` draws (see the module docstring)."""
    if width <= columns:
        row = _ascii_row(markup, columns)
        if row is not None:
            return row
    return canvas_rows(draw_line(markup, width, lead, columns))
