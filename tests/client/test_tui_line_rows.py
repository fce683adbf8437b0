"""A line's rows built directly are the rows urwid draws for it.

:func:`~acpkit_client.tui.line_rows.line_rows` builds the rows of a printable ASCII line
that fits without urwid; for any markup (attributes repeated or not, empty pieces, tabs
and control characters made drawable, wide and non-ASCII characters, lines that wrap),
its rows are byte for byte, attribute run for attribute run, those of
:func:`~acpkit_client.tui.line_rows.draw_line`.
"""

from __future__ import annotations

import urwid
from hypothesis import given, settings
from hypothesis import strategies as st

from acpkit_client.tui.line_rows import canvas_rows, draw_line, line_rows
from acpkit_client.tui.render import Line, drawable
from tests.helpers import examples

ATTRIBUTES = st.sampled_from(["body", "code", "code.string", "code.keyword", "fence"])
PIECES = st.text(
    st.sampled_from([" ", "a", "Z", "(", '"', "#", "\t", "é", "界", "\x07"]), max_size=9
)
MARKUP = st.lists(st.tuples(ATTRIBUTES, PIECES), max_size=10).map(drawable)


def measured(markup: list[tuple[str, str]]) -> tuple[int, int]:
    plain = "".join(piece for _, piece in markup)
    return urwid.calc_width(plain, 0, len(plain)), len(plain) - len(plain.lstrip(" "))


@settings(max_examples=examples(2), deadline=None)
@given(markup=MARKUP, columns=st.integers(min_value=1, max_value=40))
def test_a_line_is_drawn_as_urwid_draws_it(markup: list[tuple[str, str]], columns: int) -> None:
    """Whatever the line and the width, its rows are urwid's own."""
    width, lead = measured(markup)
    assert line_rows(markup, width, lead, columns) == canvas_rows(
        draw_line(markup, width, lead, columns)
    )


def test_a_coloured_line_of_ascii_is_one_row_of_joined_runs() -> None:
    """A Python line's tokens, several of one colour in a row, make one run per colour
    change, then the padding."""
    markup = [("body", "  "), ("code", "log"), ("code", "."), ("code.string", '"x"')]
    assert line_rows(markup, 9, 2, 11) == [
        (
            b'  log."x"  ',
            [("body", 2), ("code", 4), ("code.string", 3), (None, 2)],
            [(None, 2), (None, 4), (None, 3), (None, 2)],
        )
    ]


def test_a_blank_line_and_a_full_width_line_are_urwid_s() -> None:
    """A blank line and a line exactly as wide as the pane are drawn as urwid draws them."""
    for markup in ([], [("body", "  ")], [("body", "x" * 12)]):
        line = Line(markup=markup, text="", region=(0, 0))
        width, lead = measured(line.markup)
        assert line_rows(line.markup, width, lead, 12) == canvas_rows(
            draw_line(line.markup, width, lead, 12)
        )
