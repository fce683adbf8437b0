"""Line ends from an agent: ``\\r\\n`` is a newline, a lone ``\\r`` is a control character."""

from __future__ import annotations

from acpkit import schema
from acpkit_client.conversation import Conversation
from acpkit_client.tui.conversation_view import ConversationView
from acpkit_client.tui.render import plain_lines, render_entry

MARK = "\ufffd"


def says(*chunks: str) -> ConversationView:
    conversation = Conversation()
    view = ConversationView(conversation, "bob")
    for text in chunks:
        conversation.apply(schema.AgentMessageChunk(content=schema.TextContentBlock(text=text)))
        view.render((40, 10))
    return view


def test_crlf_line_ends_draw_no_replacement_mark() -> None:
    """Prose sent with CRLF line ends is drawn and copied like prose sent with LF."""
    view = says("first line\r\nsecond line\r\n\r\nthird\r\n")
    assert plain_lines(view.lines) == ["bob", "  first line", "  second line", "  ", "  third"]
    assert all("\r" not in line.text for line in view.lines)


def test_crlf_cut_between_two_chunks_is_still_one_line_end() -> None:
    """A ``\\r`` at the end of one chunk and the ``\\n`` at the start of the next end a line."""
    view = says("one\r", "\ntwo\r", "\nthree")
    assert plain_lines(view.lines) == ["bob", "  one", "  two", "  three"]


def test_crlf_in_a_code_block_keeps_the_fences_and_the_colours() -> None:
    """Fences and code lines with CRLF ends: the block is found, no mark is drawn."""
    view = says("```python\r\nx = 1\r\n```\r\ndone\r\n")
    drawn = plain_lines(view.lines)
    assert drawn == ["bob", "  ```python", "  x = 1", "  ```", "  done"]
    assert {attribute for attribute, _ in view.lines[2].markup} > {"body"}


def test_a_lone_carriage_return_is_still_drawn_as_a_mark() -> None:
    """A ``\\r`` that does not end a line stays a control character (drawn as a mark,
    copied as sent)."""
    view = says("progress 10%\rprogress 20%\n")
    assert plain_lines(view.lines)[1] == f"  progress 10%{MARK}progress 20%"
    assert view.lines[1].text == "progress 10%\rprogress 20%"


def test_crlf_in_tool_output_and_whole_entries() -> None:
    """Tool call output with CRLF ends draws no mark either."""
    conversation = Conversation()
    conversation.apply(
        schema.ToolCallStart(
            tool_call_id="t1",
            title="run",
            status=schema.ToolCallStatus.COMPLETED,
            content=[
                schema.ContentToolCallContent(content=schema.TextContentBlock(text="a\r\nb\r\n"))
            ],
        )
    )
    drawn = plain_lines(render_entry(conversation.entries[0], 0, "bob"))
    assert not any(MARK in line for line in drawn)
    assert drawn[1:] == ["    a", "    b"]
