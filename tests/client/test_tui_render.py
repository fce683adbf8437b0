"""Entries to display lines: labels, code colouring, tool calls, plans, regions, copy."""

from __future__ import annotations

import base64

from acpkit import schema
from acpkit_client.conversation import Conversation, EntryKind
from acpkit_client.tui.copy import Clipboards, copied_text, osc52_sequence, region_span, region_text
from acpkit_client.tui.render import Line, highlight_code, plain_lines, render_entry, render_notice


def text_block(value: str) -> schema.TextContentBlock:
    return schema.TextContentBlock(text=value)


def lines_of(conversation: Conversation, agent_name: str = "bob") -> list[Line]:
    lines: list[Line] = []
    for number, entry in enumerate(conversation.entries):
        lines.extend(render_entry(entry, number, agent_name))
    return lines


def agent_says(text: str) -> Conversation:
    conversation = Conversation()
    conversation.apply(schema.AgentMessageChunk(content=text_block(text)))
    return conversation


def test_speaker_labels_use_the_keyword_class_and_bodies_are_indented() -> None:
    """A message is its speaker's name (keyword colour) over the text indented by two."""
    conversation = Conversation()
    conversation.start_turn("hello")
    conversation.apply(schema.AgentMessageChunk(content=text_block("hi there")))
    lines = lines_of(conversation)
    assert plain_lines(lines) == ["you", "  hello", "bob", "  hi there"]
    assert lines[0].markup == [("keyword", "you")]
    assert lines[2].markup == [("keyword", "bob")]
    assert lines[0].furniture and not lines[1].furniture


def test_thoughts_are_in_the_comment_colour_under_a_thought_label() -> None:
    """A thought entry: the label *thought* and its text both in the comment class."""
    conversation = Conversation()
    conversation.apply(schema.AgentThoughtChunk(content=text_block("pondering")))
    lines = lines_of(conversation)
    assert plain_lines(lines) == ["thought", "  pondering"]
    assert lines[0].markup == [("comment", "thought")]
    assert ("comment", "pondering") in lines[1].markup


def test_python_fenced_block_is_coloured_and_unknown_language_stays_plain() -> None:
    """``python`` code gets Pygments classes; a language outside the list stays plain code."""
    conversation = agent_says("```python\ndef f():\n    return 1\n```\n```cobol\nMOVE A TO B\n```")
    lines = lines_of(conversation)
    python_line = lines[2]
    assert python_line.text == "def f():"
    assert ("code.keyword", "def") in python_line.markup
    cobol_line = next(line for line in lines if line.text == "MOVE A TO B")
    assert cobol_line.markup[1:] == [("code", "MOVE A TO B")]


def test_every_seed_language_has_a_lexer() -> None:
    """go, toml, yaml, markdown, javascript, html, xml, dockerfile, bash and python colour."""
    samples = {
        "go": "func main() {}",
        "toml": "[a]\nb = 1",
        "yaml": "a: 1",
        "markdown": "# Title",
        "javascript": "function f() { return 1 }",
        "html": "<p>x</p>",
        "xml": "<a b='1'/>",
        "dockerfile": "FROM debian",
        "bash": "if true; then echo x; fi",
        "python": "import os",
    }
    for language, code in samples.items():
        highlighted = highlight_code(code, language)
        assert len(highlighted) == len(code.split("\n")), language
        classes = {attribute for line in highlighted for attribute, _ in line}
        assert classes - {"code"}, f"{language} was not coloured: {highlighted}"


def test_tool_call_is_one_line_with_status_and_failed_ones_in_the_error_colour() -> None:
    """A tool call is one heading line (type colour) folded with its output; failed: error."""
    conversation = Conversation()
    conversation.apply(
        schema.ToolCallStart(tool_call_id="t1", title="bash: ls", kind=schema.ToolKind.EXECUTE)
    )
    lines = lines_of(conversation)
    assert plain_lines(lines) == ["  ⚙ bash: ls (execute) [pending]"]
    assert lines[0].markup[1][0] == "type"
    conversation.apply(
        schema.ToolCallProgress(
            tool_call_id="t1",
            status=schema.ToolCallStatus.FAILED,
            content=[schema.ContentToolCallContent(content=text_block("no such file"))],
        )
    )
    lines = lines_of(conversation)
    assert plain_lines(lines) == ["  ⚙ bash: ls (execute) [failed]", "    no such file"]
    assert lines[0].markup[1][0] == "error"


def test_diffs_are_shown_as_diffs() -> None:
    """A file edit's content is a unified diff with added and removed lines coloured."""
    conversation = Conversation()
    conversation.apply(
        schema.ToolCallStart(
            tool_call_id="e1",
            title="edit a.txt",
            kind=schema.ToolKind.EDIT,
            content=[
                schema.FileEditToolCallContent(
                    path="a.txt", old_text="one\ntwo\n", new_text="one\n2\n"
                )
            ],
        )
    )
    lines = lines_of(conversation)
    texts = [line.text for line in lines]
    assert "-two" in texts and "+2" in texts
    by_text = {line.text: line for line in lines}
    assert by_text["-two"].markup[-1][0] == "diff.del"
    assert by_text["+2"].markup[-1][0] == "diff.add"


def test_plan_is_a_list_with_statuses() -> None:
    """A plan shows each entry with a status marker."""
    conversation = Conversation()
    conversation.apply(
        schema.AgentPlanUpdate(
            entries=[
                schema.PlanEntry(
                    content="read",
                    priority=schema.PlanEntryPriority.HIGH,
                    status=schema.PlanEntryStatus.COMPLETED,
                ),
                schema.PlanEntry(
                    content="write",
                    priority=schema.PlanEntryPriority.LOW,
                    status=schema.PlanEntryStatus.IN_PROGRESS,
                ),
            ]
        )
    )
    assert plain_lines(lines_of(conversation)) == ["plan", "  [x] read", "  [~] write"]
    assert conversation.entries[0].kind is EntryKind.PLAN


def test_regions_code_prose_and_labels_are_separate() -> None:
    """Prose, a fenced block and the label are three regions; copying one takes only it."""
    conversation = agent_says("Here is it:\n\n```bash\n  echo hi\necho there\n```\nThat's all.")
    lines = lines_of(conversation)
    texts = [line.text for line in lines]
    code_index = texts.index("  echo hi")
    assert region_text(lines, code_index) == ["  echo hi", "echo there"]
    assert region_text(lines, 1) == ["Here is it:"]
    assert region_text(lines, texts.index("That's all.")) == ["That's all."]
    assert region_text(lines, 0) == ["bob"]
    start, end = region_span(lines, code_index)
    assert texts[start] == "```bash" and texts[end - 1] == "```"


def test_tool_output_is_its_own_region_without_the_heading() -> None:
    """The cursor on a tool call's output copies the output, not the heading above it."""
    conversation = Conversation()
    conversation.apply(
        schema.ToolCallStart(
            tool_call_id="t1",
            title="bash: seq 2",
            status=schema.ToolCallStatus.COMPLETED,
            content=[schema.ContentToolCallContent(content=text_block("1\n2"))],
        )
    )
    lines = lines_of(conversation)
    assert region_text(lines, 2) == ["1", "2"]
    assert region_text(lines, 0) == ["⚙ bash: seq 2 [completed]"]


def test_copied_text_and_osc52() -> None:
    """Copied lines end with newlines; OSC 52 carries them base64-encoded, ending with BEL."""
    text = copied_text(["a", "  b"])
    assert text == "a\n  b\n"
    sequence = osc52_sequence(text)
    assert sequence.startswith("\x1b]52;c;") and sequence.endswith("\x07")
    assert base64.b64decode(sequence[7:-1]).decode() == text
    written: list[str] = []
    clipboards = Clipboards(written.append)
    clipboards.copy("é\n")
    assert clipboards.text == "é\n"
    assert written == [osc52_sequence("é\n")]


def test_notice_lines_are_errors() -> None:
    """The client's own notices are drawn in the error colour."""
    lines = render_notice("could not start\nwhy", 3)
    assert [line.markup for line in lines] == [[("error", "could not start")], [("error", "why")]]


def test_region_span_refuses_a_line_outside() -> None:
    """Asking for the region of a line that does not exist is an IndexError that says so."""
    try:
        region_span([], 0)
    except IndexError as e:
        assert "outside" in str(e)
    else:
        raise AssertionError("no error")
