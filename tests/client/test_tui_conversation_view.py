"""The conversation pane alone: drawing, cursor keys, wheel, mouse drag selection, following."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from acpkit import schema
from acpkit_client.conversation import Conversation
from acpkit_client.tui.conversation_view import ConversationView

SIZE = (40, 5)


def view_with_lines(count: int) -> tuple[Conversation, ConversationView]:
    conversation = Conversation()
    view = ConversationView(conversation, "bob")
    text = "\n".join(f"line {n}" for n in range(count))
    conversation.apply(schema.AgentMessageChunk(content=schema.TextContentBlock(text=text)))
    return conversation, view


def rows(view: ConversationView, focus: bool = True) -> list[str]:
    return [row.decode().rstrip() for row in view.render(SIZE, focus=focus).text]


def test_follows_the_end_as_output_arrives() -> None:
    """With the cursor at the end, the last lines are shown and new output stays in view."""
    conversation, view = view_with_lines(10)
    assert rows(view)[-1] == "  line 9"
    conversation.apply(schema.AgentMessageChunk(content=schema.TextContentBlock(text="\nline 10")))
    assert rows(view)[-1] == "  line 10"


def test_home_end_and_page_keys_move_the_cursor() -> None:
    """Home shows the start, End the end; PgUp moves about a screen."""
    _, view = view_with_lines(20)
    view.keypress(SIZE, "home")
    assert view.cursor == 0 and rows(view)[0] == "bob"
    view.keypress(SIZE, "end")
    assert view.cursor == 20 and rows(view)[-1] == "  line 19"
    view.keypress(SIZE, "page up")
    assert 14 <= view.cursor <= 17


def test_wheel_scrolls_three_rows_without_moving_the_cursor() -> None:
    """Wheel up scrolls by three rows and the cursor stays on its line."""
    _, view = view_with_lines(20)
    rows(view)
    cursor, top = view.cursor, view.top
    assert view.mouse_event(SIZE, "mouse press", 4, 0, 0, True)
    assert view.cursor == cursor and view.top == top - 3
    assert rows(view)[0] == "  line 12"
    view.mouse_event(SIZE, "mouse press", 5, 0, 0, True)
    assert view.top == top and view.cursor == cursor


def test_mouse_drag_selects_whole_lines() -> None:
    """Dragging with button 1 from one row to another selects those whole lines."""
    _, view = view_with_lines(4)
    rows(view)
    view.mouse_event(SIZE, "mouse press", 1, 5, 1, True)
    view.mouse_event(SIZE, "mouse drag", 1, 2, 3, True)
    view.mouse_event(SIZE, "mouse release", 0, 2, 3, True)
    assert view.copy_lines() == ["line 0", "line 1", "line 2"]


def test_a_selection_starting_on_the_speaker_label_copies_the_text_only() -> None:
    """Dragging from the ``bob`` label down copies the message's lines, not the label;
    the label alone selected is still copied."""
    _, view = view_with_lines(4)
    assert rows(view)[0] == "bob"
    view.mouse_event(SIZE, "mouse press", 1, 1, 0, True)
    view.mouse_event(SIZE, "mouse drag", 1, 2, 2, True)
    view.mouse_event(SIZE, "mouse release", 0, 2, 2, True)
    assert view.copy_lines() == ["line 0", "line 1"]
    view.mouse_event(SIZE, "mouse press", 1, 1, 0, True)
    view.mouse_event(SIZE, "mouse drag", 1, 2, 0, True)
    view.keypress(SIZE, "shift home")
    assert view.copy_lines() == ["bob"]


def test_a_click_without_drag_selects_nothing_and_moves_the_cursor() -> None:
    """A click puts the cursor on the clicked line; copying then takes its region."""
    _, view = view_with_lines(4)
    rows(view)
    view.mouse_event(SIZE, "mouse press", 1, 5, 0, True)
    view.mouse_event(SIZE, "mouse release", 0, 5, 0, True)
    assert view.selection is None
    assert view.copy_lines() == ["bob"]


def test_selection_and_cursor_are_drawn() -> None:
    """Selected lines are drawn with the selection attribute, and so is the cursor bar
    when focused (the seed's ``editor.selection``)."""
    _, view = view_with_lines(3)
    view.keypress(SIZE, "shift up")
    canvas = view.render(SIZE, focus=True)
    attributes = [{attribute for attribute, _, _ in row} for row in canvas.content()]
    assert attributes[-3] == {"selection"} and attributes[-2] == {"selection"}
    view.abandon_selection()
    canvas = view.render(SIZE, focus=True)
    attributes = [{attribute for attribute, _, _ in row} for row in canvas.content()]
    assert attributes[-3] == {"selection"} and "selection" not in attributes[-2]


def test_long_lines_wrap_and_copy_once() -> None:
    """A line wider than the pane wraps over rows, each row under the text's indentation,
    but copies as one line."""
    conversation = Conversation()
    view = ConversationView(conversation, "bob")
    long = "x" * 70
    conversation.apply(schema.AgentMessageChunk(content=schema.TextContentBlock(text=long)))
    drawn = rows(view)
    assert drawn[1] == "  " + "x" * 38 and drawn[2] == "  " + "x" * 32
    assert view.copy_lines() == [long]


def test_a_wrapped_indented_line_keeps_its_indentation_also_under_the_cursor() -> None:
    """A list item's wrapped rows start under its text, drawn plain or as the cursor bar;
    a line indented past half the pane wraps at column 0 (its text keeps room)."""
    conversation = Conversation()
    view = ConversationView(conversation, "bob")
    item = "   - " + "y" * 60
    conversation.apply(schema.AgentMessageChunk(content=schema.TextContentBlock(text=item)))
    for focus in (False, True):
        drawn = rows(view, focus=focus)
        assert drawn[1:3] == ["     - " + "y" * 33, "     " + "y" * 27], (focus, drawn)
    assert view.copy_lines() == [item]
    deep = " " * 25 + "z" * 30
    conversation.apply(schema.AgentMessageChunk(content=schema.TextContentBlock(text="\n" + deep)))
    drawn = rows(view, focus=False)
    assert drawn[3:5] == ["  " + deep[:38], deep[38:]], drawn


def test_empty_conversation_draws_blank_and_copies_nothing() -> None:
    """No entries: a blank pane, keys are harmless and nothing is copied."""
    view = ConversationView(Conversation())
    assert rows(view) == [""] * 5
    assert view.keypress(SIZE, "up") is None
    assert view.copy_lines() == []


MOVES = ["up", "down", "page up", "page down", "home", "end"]
KEYS = st.sampled_from([*MOVES, *(f"shift {move}" for move in MOVES)])
MOUSE = st.tuples(
    st.sampled_from(["mouse press", "mouse drag", "mouse release"]),
    st.sampled_from([0, 1, 4, 5]),
    st.integers(min_value=-2, max_value=7),
)
ACTIONS = st.one_of(
    KEYS.map(lambda key: ("key", key)),
    MOUSE.map(lambda event: ("mouse", event)),
    st.text(max_size=30).map(lambda text: ("chunk", text)),
)


@given(st.lists(ACTIONS, max_size=40), st.integers(min_value=1, max_value=6))
def test_any_sequence_keeps_the_view_consistent(
    actions: list[tuple[str, object]], height: int
) -> None:
    """Whatever keys, mouse events and chunks arrive, the cursor and selection stay on
    existing lines, the top stays in range, and the pane draws exactly its size."""
    conversation = Conversation()
    view = ConversationView(conversation, "bob")
    size = (20, height)
    for kind, value in actions:
        if kind == "key":
            assert isinstance(value, str)
            view.keypress(size, value)
        elif kind == "mouse":
            assert isinstance(value, tuple)
            event, button, row = value
            view.mouse_event(size, event, button, 3, row, True)
        else:
            assert isinstance(value, str)
            chunk = schema.TextContentBlock(text=value)
            conversation.apply(schema.AgentMessageChunk(content=chunk))
        canvas = view.render(size, focus=True)
        assert canvas.rows() == height and canvas.cols() == 20
        count = len(view.lines)
        if count:
            assert 0 <= view.cursor < count
            if view.selection is not None:
                assert view.selection.start >= 0 and view.selection.stop <= count
        assert view.top >= 0


def test_tabs_wide_and_control_characters_draw_within_the_width() -> None:
    """A tab beside wide characters (and control characters) never draws past the pane;
    a copy still gets the original text, tab included."""
    conversation = Conversation()
    view = ConversationView(conversation, "bob")
    for text in ("\tꥒ", "0000000000𠀀", "bell\x07 esc\x1b[31m"):
        conversation.apply(schema.AgentMessageChunk(content=schema.TextContentBlock(text=text)))
    for height in (1, 3, 6):
        canvas = view.render((20, height), focus=True)
        assert canvas.rows() == height and canvas.cols() == 20
    assert any("\t" in line.text for line in view.lines)
    assert not any("\t" in piece for line in view.lines for _, piece in line.markup)
