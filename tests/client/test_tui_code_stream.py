"""A chunk inside a code block costs about what a prose chunk costs.

Drawing a code block's tail again after a chunk reuses the lines built for its open
lines (their colours have not changed) and builds only the unfinished line, and what is
drawn after each chunk is exactly what rendering the whole entry at that point draws.
Work is counted (:data:`~acpkit_client.tui.highlight.WORK`), never timed.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from acpkit import schema
from acpkit_client.conversation import Conversation
from acpkit_client.tui.conversation_view import ConversationView
from acpkit_client.tui.highlight import FREEZE_STEP, OPEN_LINES, WORK, highlight_lines
from acpkit_client.tui.render import drawable, render_entry
from tests.helpers import examples

SIZE = (60, 12)


def chunk(text: str) -> schema.AgentMessageChunk:
    return schema.AgentMessageChunk(content=schema.TextContentBlock(text=text))


def test_a_code_chunk_builds_the_lines_it_changed_only() -> None:
    """Streaming 300 lines of Python three chunks a line, a chunk builds at most two
    display lines (the unfinished one, and the one it finished), except when open lines
    are frozen (once per FREEZE_STEP lines)."""
    conversation = Conversation(text_cap=None)
    view = ConversationView(conversation, "bob")
    conversation.apply(chunk("```python\n"))
    view.render(SIZE)
    built = []
    for number in range(300):
        line = f"    value_{number} = compute({number}, retries=3)  # step {number}\n"
        third = len(line) // 3
        for piece in (line[:third], line[third : 2 * third], line[2 * third :]):
            before = WORK.lines_built
            conversation.apply(chunk(piece))
            view.render(SIZE)
            built.append(WORK.lines_built - before)
    heavy = [count for count in built if count > 2]
    assert len(heavy) <= 300 // FREEZE_STEP + 1
    assert max(built) <= OPEN_LINES + FREEZE_STEP + 2


CODE = st.lists(
    st.sampled_from(
        [
            "```python\n",
            "```\n",
            "```go\n",
            "def f(x):\n",
            "    return x  # done\n",
            's = """two\n',
            'lines"""\n',
            "/* a comment\n",
            "   over lines */\n",
            "x := 1\n",
            "\n",
            "prose between blocks\n",
        ]
    ),
    max_size=60,
).map("".join)


@settings(max_examples=examples(1), deadline=None)
@given(text=CODE, cuts=st.lists(st.integers(min_value=0, max_value=1500), max_size=30))
def test_after_each_chunk_the_pane_draws_what_a_full_render_draws(
    text: str, cuts: list[int]
) -> None:
    """However code blocks are cut into chunks, after every chunk the streamed entry's
    lines equal the lines of the entry rendered whole at that point."""
    conversation = Conversation(text_cap=None)
    view = ConversationView(conversation, "bob")
    points = sorted({0, len(text), *(cut for cut in cuts if cut < len(text))})
    for start, end in itertools.pairwise(points):
        conversation.apply(chunk(text[start:end]))
        view.render(SIZE)
        assert view.lines == render_entry(conversation.entries[0], 0, "bob")


def screen(
    view: ConversationView, size: tuple[int, int]
) -> list[list[tuple[object, object, bytes]]]:
    """What the pane puts on screen: per row, its (attribute, charset, bytes) runs."""
    return [list(row) for row in view.render(size).content()]


BLOCK_LINES = st.sampled_from(
    [
        "def f(x, *a, **k):",
        "    return x  # done",
        's = """two',
        'lines"""',
        "/* a comment",
        "   over lines */",
        "x := 1",
        "\tindented with a tab",
        "é 界 wide and accented",
        "",
        "a line long enough to wrap in a narrow pane, with (brackets) and 'quotes' in it",
    ]
)


@settings(max_examples=examples(1), deadline=None)
@given(
    language=st.sampled_from(["python", "go", "yaml", "cobol"]),
    lines=st.lists(BLOCK_LINES, max_size=40),
    closed=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=30),
    width=st.sampled_from([24, 80]),
)
def test_a_streamed_block_is_on_screen_what_the_whole_block_is(
    language: str, lines: list[str], closed: bool, cuts: list[int], width: int
) -> None:
    """A code block streamed in any chunks puts on screen, after every chunk, what the
    same text given at once does (colours, wrapping and padding byte for byte); once
    closed, its lines are coloured as highlighting the whole block at once colours them."""
    text = f"```{language}\n" + "".join(line + "\n" for line in lines) + ("```\n" if closed else "")
    size = (width, 12)
    streamed = Conversation(text_cap=None)
    view = ConversationView(streamed, "bob")
    points = sorted({0, len(text), *(cut for cut in cuts if cut < len(text))})
    for start, end in itertools.pairwise(points):
        streamed.apply(chunk(text[start:end]))
        whole = Conversation(text_cap=None)
        whole.apply(chunk(text[:end]))
        assert screen(view, size) == screen(ConversationView(whole, "bob"), size)
    if closed:
        code = [line.markup[1:] for line in view.lines[2 : 2 + len(lines)]]
        assert code == [drawable(markup) for markup in highlight_lines(lines, language)]
