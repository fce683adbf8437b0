"""The conversation pane's cursor bar colour, and following the end when a turn starts."""

from __future__ import annotations

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


def rows(view: ConversationView) -> list[str]:
    return [row.decode().rstrip() for row in view.render(SIZE, focus=True).text]


def test_the_cursor_bar_is_drawn_in_the_selection_colour() -> None:
    """The focused cursor's line uses the ``selection`` palette entry (the seed's
    ``editor.selection``), with nothing else selected."""
    _, view = view_with_lines(8)
    canvas = view.render(SIZE, focus=True)
    attributes = [{attribute for attribute, _, _ in row} for row in canvas.content()]
    assert rows(view)[-1] == "  line 7" and attributes[-1] == {"selection"}
    assert view.selection is None and "selection" not in attributes[-2]


def test_a_new_turn_is_shown_even_when_the_user_had_scrolled_up() -> None:
    """After scrolling up (or moving the cursor up), sending a prompt brings the view
    back to the end: the new turn's line is drawn, and later output is followed."""
    conversation, view = view_with_lines(30)
    rows(view)
    view.keypress(SIZE, "page up")
    view.scroll(-3)
    assert "  hello" not in rows(view)
    conversation.start_turn("hello")
    assert rows(view)[-2:] == ["you", "  hello"]
    conversation.apply(schema.AgentMessageChunk(content=schema.TextContentBlock(text="answer")))
    assert rows(view)[-1] == "  answer"


def test_a_selection_is_dropped_when_a_turn_starts() -> None:
    """The cursor jumps to the end on a new turn, so a selection made before is dropped
    rather than stretched to the end."""
    conversation, view = view_with_lines(10)
    view.keypress(SIZE, "shift up")
    assert view.selection is not None
    conversation.start_turn("hello")
    rows(view)
    assert view.selection is None
