"""Streaming into a long entry: the work per chunk does not grow with the entry's length.

The counters are :data:`acpkit_client.tui.highlight.WORK` (lines handed to a lexer, display
lines built) and :attr:`ConversationView.rows_summed` (lines whose display rows were summed
again).  They count work, deterministically; nothing here is timed.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from acpkit import schema
from acpkit_client.conversation import Conversation
from acpkit_client.tui.conversation_view import ConversationView
from acpkit_client.tui.highlight import FREEZE_STEP, OPEN_LINES, WORK, highlight_lines
from acpkit_client.tui.render import plain_lines, render_entry
from acpkit_client.tui.render import render_notice as render_notice_lines
from tests.helpers import examples

SIZE = (60, 12)

CODE = [
    "def handle(request, *, retries=3):",
    '    """Answer one request."""',
    "    for attempt in range(retries):",
    "        return backend.send(request)  # may raise",
    "",
]

#: The most lines one chunk may cost, whatever the entry's length: a re-lexing of the
#: open lines when some are frozen, plus the chunk's own lines and the unfinished one.
BOUND = OPEN_LINES + FREEZE_STEP + 8


def chunk(text: str) -> schema.AgentMessageChunk:
    return schema.AgentMessageChunk(content=schema.TextContentBlock(text=text))


def stream_costs(prefix: str, line_source: list[str], length: int) -> list[tuple[int, int, int]]:
    """Put ``length`` lines in an entry, then stream 50 more (three chunks a line, the
    screen drawn after each) and return each chunk's work: lexed, built, rows summed."""
    conversation = Conversation(text_cap=None)
    view = ConversationView(conversation, "bob")
    lines = [line_source[number % len(line_source)] for number in range(length)]
    conversation.apply(chunk(prefix + "".join(line + "\n" for line in lines)))
    view.render(SIZE)
    costs = []
    for number in range(length, length + 50):
        line = line_source[number % len(line_source)] + "\n"
        third = max(len(line) // 3, 1)
        for piece in (line[:third], line[third : 2 * third], line[2 * third :]):
            before = (WORK.lines_lexed, WORK.lines_built, view.rows_summed)
            conversation.apply(chunk(piece))
            view.render(SIZE)
            after = (WORK.lines_lexed, WORK.lines_built, view.rows_summed)
            costs.append((after[0] - before[0], after[1] - before[1], after[2] - before[2]))
    return costs


def test_a_chunk_of_a_long_code_block_costs_what_it_costs_in_a_short_one() -> None:
    """Appending to a fenced Python block of 5,000 lines lexes, builds and measures no
    more lines per chunk than a fixed bound, the same bound as for a 200-line block."""
    short = stream_costs("```python\n", CODE, 200)
    long = stream_costs("```python\n", CODE, 5000)
    for costs in (short, long):
        assert max(lexed for lexed, _, _ in costs) <= BOUND
        assert max(built for _, built, _ in costs) <= BOUND
        assert max(rows for _, _, rows in costs) <= BOUND
    assert sum(lexed for lexed, _, _ in long) <= sum(lexed for lexed, _, _ in short) * 1.5


def test_a_chunk_of_long_prose_costs_a_few_lines() -> None:
    """Appending to 5,000 lines of prose builds and measures only the last line or two."""
    costs = stream_costs("", ["Some prose that goes on.", "", "More of it."], 5000)
    assert max(built for _, built, _ in costs) <= 3
    assert max(rows for _, _, rows in costs) <= 3
    assert max(lexed for lexed, _, _ in costs) == 0


def test_an_entry_above_the_streamed_one_is_not_rendered_again() -> None:
    """A long entry finished earlier costs nothing when a later entry grows."""
    conversation = Conversation(text_cap=None)
    view = ConversationView(conversation, "bob")
    conversation.apply(chunk("```python\n" + "x = 1\n" * 1000 + "```\n"))
    conversation.apply(schema.AgentThoughtChunk(content=schema.TextContentBlock(text="hm")))
    view.render(SIZE)
    before = (WORK.lines_lexed, WORK.lines_built, view.rows_summed)
    conversation.apply(schema.AgentThoughtChunk(content=schema.TextContentBlock(text="m.")))
    view.render(SIZE)
    assert WORK.lines_lexed == before[0]
    assert WORK.lines_built - before[1] <= 2
    assert view.rows_summed - before[2] <= 2


MESSAGE = st.lists(
    st.sampled_from(
        [
            "```python\n",
            "```\n",
            "~~~yaml\n",
            "~~~\n",
            "```go\n",
            "/* a comment\n",
            "   over lines */\n",
            'x = """doc\n',
            'string"""\n',
            "plain prose\n",
            "\n",
            "  \n",
            "key: value\n",
            "line with\r\nCRLF\r\n",
            "lone\rreturn\n",
            "tab\there\n",
        ]
    ),
    max_size=120,
).map("".join)


@settings(max_examples=examples(1), deadline=None)
@given(text=MESSAGE, cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=40))
def test_streaming_draws_what_rendering_the_whole_entry_draws(text: str, cuts: list[int]) -> None:
    """However the text is cut into chunks, the streamed entry's lines (drawn after each
    chunk) end up the lines of the whole entry rendered at once."""
    conversation = Conversation(text_cap=None)
    view = ConversationView(conversation, "bob")
    points = sorted({0, len(text), *(cut for cut in cuts if cut < len(text))})
    for start, end in itertools.pairwise(points):
        conversation.apply(chunk(text[start:end]))
        view.render(SIZE)
    if not conversation.entries:
        return
    whole = render_entry(conversation.entries[0], 0, "bob")
    assert view.lines == whole
    assert plain_lines(view.lines) == plain_lines(whole)


def test_a_block_coloured_whole_is_coloured_as_pygments_colours_it() -> None:
    """Line by line with resumption, a block gets Pygments' own colours, multi-line
    strings and comments included (when they fit in the open lines)."""
    from pygments import lex
    from pygments.lexers import get_lexer_by_name

    from acpkit_client.tui.theme import token_attribute

    code = (CODE * 30 + ['s = """two', 'lines"""', "/* not python */"]) * 3
    expected: list[list[tuple[str, str]]] = [[]]
    for token, value in lex("\n".join(code), get_lexer_by_name("python", stripnl=False)):
        for number, piece in enumerate(value.split("\n")):
            if number:
                expected.append([])
            if piece:
                expected[-1].append((token_attribute(token), piece))
    assert highlight_lines(code, "python") == expected[: len(code)]


EVENT = st.one_of(
    st.tuples(st.just("agent"), st.sampled_from(["a", "b\n", "```py\n", "x = 1\n", "```\n"])),
    st.tuples(st.just("thought"), st.sampled_from(["hm", "\n", "ok\n"])),
    st.tuples(st.just("tool"), st.sampled_from(["t1", "t2"])),
    st.tuples(st.just("turn"), st.just("go")),
    st.tuples(st.just("notice"), st.just("turn ended: refusal")),
)


@settings(max_examples=examples(1), deadline=None)
@given(events=st.lists(EVENT, max_size=40))
def test_the_pane_draws_every_entry_in_order_whatever_changes(
    events: list[tuple[str, str]],
) -> None:
    """Entries added, grown and changed in any order (a tool call above the last entry
    updated, notices between): the pane's lines are each entry's lines, in order."""
    conversation = Conversation()
    view = ConversationView(conversation, "bob")
    notices: dict[int, str] = {}
    for kind, value in events:
        if kind == "agent":
            conversation.apply(chunk(value))
        elif kind == "thought":
            conversation.apply(
                schema.AgentThoughtChunk(content=schema.TextContentBlock(text=value))
            )
        elif kind == "tool":
            status = (
                schema.ToolCallStatus.COMPLETED
                if conversation.tool_call(value)
                else schema.ToolCallStatus.PENDING
            )
            conversation.apply(schema.ToolCallStart(tool_call_id=value, title=value, status=status))
        elif kind == "turn":
            conversation.start_turn(value)
        else:
            notices[len(conversation.entries) + len(notices)] = value
            view.add_notice(value)
        view.render(SIZE)
    expected: list[str] = []
    entries = iter(conversation.entries)
    for number in range(len(conversation.entries) + len(notices)):
        if number in notices:
            expected.extend(plain_lines(render_notice_lines(notices[number], number)))
        else:
            expected.extend(plain_lines(render_entry(next(entries), number, "bob")))
    assert plain_lines(view.lines) == expected


def test_a_capped_entry_streams_its_dropped_note() -> None:
    """Past the entry's cap the streamed lines end with the note of what was dropped,
    updated as more is dropped, as when the entry is rendered whole."""
    conversation = Conversation(text_cap=40)
    view = ConversationView(conversation, "bob")
    for number in range(12):
        conversation.apply(chunk(f"line {number}\n"))
        view.render(SIZE)
    drawn = plain_lines(view.lines)
    sent = sum(len(f"line {number}\n") for number in range(12))
    assert drawn[-1] == f"  [… {sent - 40:,} bytes dropped …]"
    assert view.lines == render_entry(conversation.entries[0], 0, "bob")
