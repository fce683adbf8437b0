"""Conversation entries become display lines, each tagged with its copy region.

A :class:`Line` is what one row of the conversation shows before wrapping: its urwid
markup (display indentation included), the text a copy takes (indentation removed), and
the *region* it belongs to. Regions are what ``Ctrl-C`` copies when nothing is selected:
a fenced code block, a prose passage, a tool call's output, a plan. A speaker's label and
a tool call's heading are *furniture*: regions of their own, never copied along with what
they head.

Fenced code blocks whose language is in :data:`HIGHLIGHTED_LANGUAGES` are coloured with
that language's Pygments lexer; any other language, or none, stays plain.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import attrs
from pygments import lex
from pygments.lexer import Lexer
from pygments.lexers import get_lexer_by_name

from acpkit import schema
from acpkit_client.conversation import (
    Entry,
    EntryKind,
    MessageEntry,
    PlanEntry,
    ToolCallEntry,
    render_tool_content,
)
from acpkit_client.tui.theme import token_attribute

__all__ = [
    "HIGHLIGHTED_LANGUAGES",
    "INDENT",
    "OUTPUT_INDENT",
    "Line",
    "Markup",
    "highlight_code",
    "render_entry",
    "render_notice",
]

#: A list of ``(palette entry, text)`` segments.
Markup = list[tuple[str, str]]

#: Display indentation of an entry's body (removed when copying).
INDENT = "  "
#: Display indentation of a tool call's output (removed when copying).
OUTPUT_INDENT = "    "

#: Fence language -> Pygments lexer name: the seed's list, plus ``python``.
HIGHLIGHTED_LANGUAGES: dict[str, str] = {
    "go": "go",
    "toml": "toml",
    "yaml": "yaml",
    "yml": "yaml",
    "markdown": "markdown",
    "md": "markdown",
    "javascript": "javascript",
    "js": "javascript",
    "html": "html",
    "xml": "xml",
    "dockerfile": "docker",
    "bash": "bash",
    "sh": "bash",
    "shell": "bash",
    "python": "python",
    "py": "python",
}

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([^\s`]*)")

#: Plan entry status -> the marker shown in front of it.
PLAN_MARKERS = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}


# Tabs and control characters cannot be drawn as they are (urwid counts a tab as zero
# columns, the terminal does not): a tab becomes spaces and any other control character a
# replacement mark.  Only the drawing changes; ``Line.text`` (what a copy takes) keeps them.
_UNDRAWABLE = {c: "\ufffd" for c in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]}
_UNDRAWABLE[ord("\t")] = "    "


def drawable(markup: Markup) -> Markup:
    """``markup`` with tabs and control characters replaced by what a terminal can draw."""
    return [(attr, piece.translate(_UNDRAWABLE)) for attr, piece in markup]


@attrs.frozen
class Line:
    """One logical line of the conversation as displayed (see the module docstring)."""

    #: What is drawn, display indentation included (tabs and control characters made
    #: drawable).
    markup: Markup = attrs.field(converter=drawable)
    #: The text a copy takes: what is drawn minus the display indentation.
    text: str
    #: The region this line belongs to (unique within the conversation).
    region: tuple[int, int]
    #: True for labels and tool headings (regions of their own, never copied along).
    furniture: bool = False
    #: False for lines shown but left out of a region copy (the fences around code).
    in_region_copy: bool = True


def _lexer(language: str) -> Lexer | None:
    name = HIGHLIGHTED_LANGUAGES.get(language.lower())
    if name is None:
        return None
    return get_lexer_by_name(name, stripnl=False)


def highlight_code(code: str, language: str) -> list[Markup]:
    """Return one markup list per line of ``code``, coloured when ``language`` is known."""
    lines = code.split("\n")
    lexer = _lexer(language)
    if lexer is None:
        return [[("code", line)] if line else [] for line in lines]
    result: list[Markup] = [[]]
    for token, value in lex(code, lexer):
        attribute = token_attribute(token)
        pieces = value.split("\n")
        for number, piece in enumerate(pieces):
            if number:
                result.append([])
            if piece:
                result[-1].append((attribute, piece))
    while len(result) < len(lines):
        result.append([])
    return result[: len(lines)]


def _indented(indent: str, markup: Markup) -> Markup:
    return [("body", indent), *markup] if indent else markup


class _Builder:
    """Collects the lines of one entry, numbering its regions."""

    def __init__(self, entry_number: int) -> None:
        self.entry_number = entry_number
        self.lines: list[Line] = []
        self._region = 0

    def new_region(self) -> tuple[int, int]:
        self._region += 1
        return (self.entry_number, self._region)

    def add(
        self,
        region: tuple[int, int],
        indent: str,
        markup: Markup,
        *,
        furniture: bool = False,
        in_region_copy: bool = True,
    ) -> None:
        text = "".join(piece for _, piece in markup)
        self.lines.append(
            Line(
                markup=_indented(indent, markup),
                text=text,
                region=region,
                furniture=furniture,
                in_region_copy=in_region_copy,
            )
        )


def _message_body(builder: _Builder, text: str, prose_attribute: str) -> None:
    """Prose passages and fenced code blocks, each its own region."""
    lines = text.split("\n")
    index = 0
    prose: list[str] = []

    def flush_prose() -> None:
        while prose and not prose[-1].strip():
            prose.pop()
        if prose:
            region = builder.new_region()
            for line in prose:
                builder.add(region, INDENT, [(prose_attribute, line)] if line else [])
        prose.clear()

    while index < len(lines):
        match = _FENCE.match(lines[index])
        if match is None:
            if prose or lines[index].strip():
                prose.append(lines[index])
            index += 1
            continue
        flush_prose()
        fence, language = match.group(1), match.group(2)
        region = builder.new_region()
        builder.add(region, INDENT, [("fence", lines[index])], in_region_copy=False)
        index += 1
        code: list[str] = []
        closing: str | None = None
        while index < len(lines):
            stripped = lines[index].strip()
            if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
                closing = lines[index]
                index += 1
                break
            code.append(lines[index])
            index += 1
        if code:
            for markup in highlight_code("\n".join(code), language):
                builder.add(region, INDENT, markup)
        if closing is not None:
            builder.add(region, INDENT, [("fence", closing)], in_region_copy=False)
    flush_prose()


def _tool_output(entry: ToolCallEntry) -> list[Markup]:
    if not entry.content or entry.output.dropped:
        text = str(entry.output)
        return [[("body", line)] if line else [] for line in text.split("\n")] if text else []
    result: list[Markup] = []
    for item in entry.content:
        text = render_tool_content([item])
        if not text:
            continue
        is_diff = isinstance(item, schema.FileEditToolCallContent)
        for line in text.split("\n"):
            result.append([(_diff_attribute(line) if is_diff else "body", line)] if line else [])
    return result


def _diff_attribute(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "diff.hunk"
    if line.startswith("+"):
        return "diff.add"
    if line.startswith("-"):
        return "diff.del"
    if line.startswith("@@"):
        return "diff.hunk"
    return "body"


def render_entry(entry: Entry, entry_number: int, agent_name: str = "agent") -> list[Line]:
    """The display lines of ``entry`` (its regions numbered under ``entry_number``)."""
    builder = _Builder(entry_number)
    if isinstance(entry, MessageEntry):
        if entry.kind is EntryKind.THOUGHT:
            builder.add(builder.new_region(), "", [("comment", "thought")], furniture=True)
            _message_body(builder, entry.text, "comment")
        else:
            label = "you" if entry.kind is EntryKind.YOU else agent_name
            builder.add(builder.new_region(), "", [("keyword", label)], furniture=True)
            _message_body(builder, entry.text, "body")
    elif isinstance(entry, ToolCallEntry):
        attribute = "error" if entry.status == "failed" else "type"
        heading: Markup = [(attribute, f"⚙ {entry.heading}")]
        builder.add(builder.new_region(), INDENT, heading, furniture=True)
        output = _tool_output(entry)
        if output:
            region = builder.new_region()
            for markup in output:
                builder.add(region, OUTPUT_INDENT, markup)
    elif isinstance(entry, PlanEntry):
        builder.add(builder.new_region(), "", [("keyword", "plan")], furniture=True)
        region = builder.new_region()
        for item in entry.items:
            marker = PLAN_MARKERS.get(item.status, f"[{item.status}]")
            attribute = "comment" if item.status == "completed" else "body"
            builder.add(region, INDENT, [("type", marker), (attribute, f" {item.content}")])
    else:
        region = builder.new_region()
        for line in entry.text.split("\n"):
            builder.add(region, INDENT, [("body", line)] if line else [])
    return builder.lines


def render_notice(text: str, number: int) -> list[Line]:
    """A notice from the client itself (failures, stop reasons), in the error colour."""
    builder = _Builder(number)
    region = builder.new_region()
    for line in text.split("\n"):
        builder.add(region, "", [("error", line)])
    return builder.lines


def plain_lines(lines: Iterable[Line]) -> Sequence[str]:
    """The drawn text of ``lines`` (for tests and captures)."""
    return ["".join(piece for _, piece in line.markup) for line in lines]
