"""The input area lays its text out line by line and draws only the rows on screen.

It must behave exactly as urwid's ``Edit`` laid out whole (same rows, caret, drawing,
moves), and a key after a long paste must wrap only the line it changed.  Work is
counted (lines wrapped), never timed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import urwid
from hypothesis import given, settings
from hypothesis import strategies as st

from acpkit_client.tui.input_area import InputArea, InputBox
from tests.client.test_tui_paste import paste_keys
from tests.client.test_tui_window import SIZE, Harness
from tests.helpers import examples


class _WholeEdit(InputArea):
    """The input area with urwid's own layout of the whole text (the reference)."""

    get_line_translation = urwid.Edit.get_line_translation
    position_coords = urwid.Edit.position_coords
    rows = urwid.Edit.rows
    move_cursor_to_coords = urwid.Edit.move_cursor_to_coords
    render = urwid.Edit.render


TEXT = st.lists(
    st.sampled_from(["a", "b ", " ", "word ", "longerword", "\t", "é", "界", "\n", "x" * 13]),
    max_size=40,
).map("".join)
KEYS = st.lists(
    st.sampled_from(
        [
            "left",
            "right",
            "up",
            "down",
            "home",
            "end",
            "backspace",
            "delete",
            "z",
            " ",
            "meta enter",
        ]
    ),
    max_size=25,
)


def _apply(edit: InputArea, columns: int, key: str) -> str | None:
    """Press ``key``, or make the edit it names (not at the caret, for some)."""
    if key == "@paste":
        edit.insert_text("pasted\n\tlines, some long enough to wrap\n")
    elif key == "@jump":
        edit.set_edit_pos(len(edit.edit_text) // 2)
    elif key == "@replace":
        edit.replace(0, min(3, len(edit.edit_text)), "R\nS")
    elif key == "@set":
        edit.set_edit_text(edit.edit_text[::-1])
    else:
        return edit.keypress((columns,), key)
    return None


def _state(edit: InputArea, columns: int) -> tuple[Any, ...]:
    canvas = edit.render((columns,), focus=True)
    return (
        edit.edit_text,
        edit.edit_pos,
        edit.rows((columns,)),
        edit.get_cursor_coords((columns,)),
        canvas.text,
        canvas.cursor,
    )


@settings(max_examples=examples(1), deadline=None)
@given(
    text=TEXT,
    start=st.integers(min_value=0, max_value=400),
    keys=KEYS,
    columns=st.integers(min_value=3, max_value=30),
)
def test_the_input_lays_out_edits_and_draws_as_urwid_edit_does(
    text: str, start: int, keys: list[str], columns: int
) -> None:
    """Whatever the text (wrapped words, tabs, wide characters, empty lines), width and
    keys, the line-by-line layout gives urwid's ``Edit``'s rows, caret, moves and screen."""
    ours, reference = InputArea(), _WholeEdit()
    for edit in (ours, reference):
        edit.set_edit_text(text)
        edit.set_edit_pos(min(start, len(text)))
    assert _state(ours, columns) == _state(reference, columns)
    for key in keys:
        assert _apply(ours, columns, key) == _apply(reference, columns, key)
        assert _state(ours, columns) == _state(reference, columns)


@settings(max_examples=examples(1), deadline=None)
@given(
    text=TEXT,
    keys=KEYS,
    columns=st.integers(min_value=3, max_value=30),
    rows=st.integers(min_value=1, max_value=6),
)
def test_the_box_draws_the_rows_of_the_whole_edit_around_the_caret(
    text: str, keys: list[str], columns: int, rows: int
) -> None:
    """The box draws only its rows, and they are the rows of the whole text drawn by
    urwid, with the caret in view."""
    ours, reference = InputArea(), _WholeEdit()
    box = InputBox(ours)
    for edit in (ours, reference):
        edit.set_edit_text(text)
    for key in ["noop", *keys]:
        if key != "noop":
            _apply(ours, columns, key)
            _apply(reference, columns, key)
        drawn = box.render((columns, rows), focus=True)
        whole = reference.render((columns,), focus=True).text
        expected = whole[box.top : box.top + rows]
        expected += [b" " * columns] * (rows - len(expected))
        assert drawn.text == expected
        assert drawn.cursor is not None
        x, y = drawn.cursor
        assert 0 <= y < rows and (x, y + box.top) == reference.get_cursor_coords((columns,))


def test_a_paste_then_keys_edit_where_the_caret_is(tmp_path: Path) -> None:
    """After pasting 2,000 lines, keys edit at the caret: typed text lands at the end,
    backspace removes it, Up moves to the line above, and the screen shows the edit."""
    ui = Harness(tmp_path)
    window = ui.open()
    pasted = "\n".join(f"pasted line {number}" for number in range(2000))
    ui.press(*paste_keys(pasted))
    assert ui.input_text == pasted
    assert "pasted line 1999" in ui.screen()
    ui.type("XY")
    ui.press("backspace")
    assert ui.input_text == pasted + "X"
    assert "pasted line 1999X" in ui.screen()
    ui.press("up", "home")
    ui.type("Q")
    lines = ui.input_text.split("\n")
    assert lines[-2] == "Qpasted line 1998" and lines[-1] == "pasted line 1999X"
    assert window.input.edit_pos == ui.input_text.index("Qpasted line 1998") + 1
    screen = ui.screen()
    assert "Qpasted line 1998" in screen and "pasted line 1999X" in screen


def test_a_key_after_a_long_paste_wraps_only_its_line(tmp_path: Path) -> None:
    """With 10,000 pasted lines in the input, a typed key (at the end, then in the
    middle) splits and wraps one line again (the line it changed), not the whole text."""
    ui = Harness(tmp_path)
    window = ui.open()
    ui.press(*paste_keys("\n".join(f"line {number} of the paste" for number in range(10_000))))
    ui.screen()
    columns = SIZE[0]  # the window is maximised: the input is as wide as the screen
    layout = window.input.wrapped(columns)
    wrapped, split = layout.rows_of.wrapped, layout.lines_split
    edits = ["t", "y", "p", "e", "backspace", "d"]
    for key in [*edits[:2], *["up"] * 50, *edits[2:]]:
        ui.press(key)
        ui.screen()
    assert window.input.wrapped(columns) is layout
    assert layout.rows_of.wrapped - wrapped <= len(edits)
    assert layout.lines_split - split <= len(edits)
    assert "\nline 9949 of the pastepd\n" in ui.input_text
