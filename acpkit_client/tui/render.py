"""Conversation entries become display lines, each tagged with its copy region.

A :class:`Line` is what one row of the conversation shows before wrapping: its urwid
markup (display indentation included), the text a copy takes (indentation removed), and
the *region* it belongs to. Regions are what ``Ctrl-C`` copies when nothing is selected:
a fenced code block, a prose passage, a tool call's output, a plan. A speaker's label and
a tool call's heading are *furniture*: regions of their own, never copied along with what
they head.

Fenced code blocks whose language is in :data:`HIGHLIGHTED_LANGUAGES` are coloured with
that language's Pygments lexer; any other language, or none, stays plain.

A message grows chunk by chunk: :class:`MessageRenderer` turns only its new text into
lines.  Lines that can no longer change (finished prose lines, a code block's frozen
lines, see :mod:`acpkit_client.tui.highlight`) are built once; each update rebuilds only
the lines after them.  So appending a chunk costs the same whatever the entry's length.

Line ends: ``\n`` ends a line, and so does ``\r\n`` (the ``\r`` is not drawn nor
copied); a lone ``\r`` elsewhere is a control character (drawn as a replacement mark).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Sequence
from typing import Protocol

import attrs

from acpkit import schema
from acpkit_client.conversation import (
    Entry,
    EntryKind,
    MessageEntry,
    PlanEntry,
    ToolCallEntry,
    render_tool_content,
)
from acpkit_client.tui import glyphs
from acpkit_client.tui.highlight import (
    HIGHLIGHTED_LANGUAGES,
    WORK,
    CodeHighlighter,
    Markup,
    highlight_lines,
)

__all__ = [
    "HIGHLIGHTED_LANGUAGES",
    "INDENT",
    "OUTPUT_INDENT",
    "EntryRenderer",
    "Line",
    "Markup",
    "MessageRenderer",
    "entry_renderer",
    "highlight_code",
    "render_entry",
    "render_notice",
    "split_lines",
]

#: Display indentation of an entry's body (removed when copying).
INDENT = "  "
#: Display indentation of a tool call's output (removed when copying).
OUTPUT_INDENT = "    "

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([^\s`]*)")

#: Plan entry status -> the marker shown in front of it.
PLAN_MARKERS = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}


# Tabs and control characters cannot be drawn as they are (urwid counts a tab as zero
# columns, the terminal does not): a tab becomes spaces and any other control character a
# replacement mark.  Only the drawing changes; ``Line.text`` (what a copy takes) keeps them.
_UNDRAWABLE = {c: "\ufffd" for c in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]}
_UNDRAWABLE[ord("\t")] = "    "
#: A segment's text.
_PIECE = operator.itemgetter(1)


def drawable(markup: Markup) -> Markup:
    """``markup`` with tabs and control characters replaced by what a terminal can draw."""
    if "".join(map(_PIECE, markup)).isprintable():  # the usual line: one test for all
        return list(markup)
    return [
        (attr, piece if piece.isprintable() else piece.translate(_UNDRAWABLE))
        for attr, piece in markup
    ]


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


def split_lines(text: str) -> list[str]:
    """``text`` cut at each ``\n``; a ``\r`` right before a ``\n`` goes with it."""
    lines = text.split("\n")
    if "\r" in text:
        for index in range(len(lines) - 1):
            if lines[index].endswith("\r"):
                lines[index] = lines[index][:-1]
    return lines


def highlight_code(code: str, language: str) -> list[Markup]:
    """Return one markup list per line of ``code``, coloured when ``language`` is known."""
    return highlight_lines(split_lines(code), language)


def _indented(indent: str, markup: Markup) -> Markup:
    return [("body", indent), *markup] if indent else markup


class _Builder:
    """Collects the lines of one entry, numbering its regions."""

    def __init__(self, entry_number: int, region: int = 0) -> None:
        self.entry_number = entry_number
        self.lines: list[Line] = []
        self._region = region

    def copy(self) -> _Builder:
        """A builder that numbers regions on from here and has no lines yet."""
        return _Builder(self.entry_number, self._region)

    def take(self) -> list[Line]:
        """The lines added since the last call."""
        lines, self.lines = self.lines, []
        return lines

    def new_region(self) -> tuple[int, int]:
        self._region += 1
        return (self.entry_number, self._region)

    def append(self, line: Line) -> None:
        """Add a line built before (nothing is built again)."""
        self.lines.append(line)

    def add(
        self,
        region: tuple[int, int],
        indent: str,
        markup: Markup,
        *,
        furniture: bool = False,
        in_region_copy: bool = True,
    ) -> None:
        WORK.lines_built += 1
        text = "".join(map(_PIECE, markup))
        self.lines.append(
            Line(
                markup=_indented(indent, markup),
                text=text,
                region=region,
                furniture=furniture,
                in_region_copy=in_region_copy,
            )
        )


@attrs.define
class _CodeBlock:
    """A fenced code block being read.

    ``built_lines`` keeps the lines built for the block's open lines, and ``built_for``
    the markups they were built from (the highlighter keeps an open line's markup until
    the line is frozen or coloured again), so that drawing the block's tail again after
    a chunk builds only its unfinished line.  Copies of the block (the reader's trials)
    share them.
    """

    fence: str
    region: tuple[int, int]
    highlighter: CodeHighlighter
    built_for: list[Markup] = attrs.field(factory=list)
    built_lines: list[Line] = attrs.field(factory=list)

    def closes(self, line: str) -> bool:
        stripped = line.strip()
        return stripped.startswith(self.fence[0] * len(self.fence)) and not stripped.strip(
            self.fence[0]
        )


class _BodyReader:
    """Reads a message body line by line: prose passages and fenced code blocks, each its
    own region.  Blank lines that end a prose passage are drawn only once a non-blank line
    follows them in the same passage."""

    def __init__(self, builder: _Builder, prose_attribute: str) -> None:
        self.builder = builder
        self.prose_attribute = prose_attribute
        self.prose_region: tuple[int, int] | None = None
        self.blanks: list[str] = []
        self.code: _CodeBlock | None = None
        #: Lines at the start of this reader's lines that are the open code lines built
        #: before, reused (a hint for the comparison with the lines drawn last time).
        self.reused = 0

    def copy(self) -> _BodyReader:
        """A reader in the same state, with a builder of its own, to try lines on."""
        twin = _BodyReader(self.builder.copy(), self.prose_attribute)
        twin.prose_region = self.prose_region
        twin.blanks = list(self.blanks)
        if self.code is not None:
            twin.code = _CodeBlock(
                self.code.fence,
                self.code.region,
                self.code.highlighter.copy(),
                self.code.built_for,
                self.code.built_lines,
            )
        return twin

    def _prose(self, line: str) -> Markup:
        return [(self.prose_attribute, line)] if line else []

    def _code_lines(self, markups: Iterable[Markup]) -> None:
        assert self.code is not None
        for markup in markups:
            self.builder.add(self.code.region, INDENT, markup)

    def _open_code_lines(self, markups: Sequence[Markup], unfinished: int) -> None:
        """Add the lines of the open code block: ``markups`` are its open lines' then its
        ``unfinished`` last ones.  The open lines built last time are reused while their
        markups are the ones they were built from (compared as lists, at C speed: the
        very same markups pass at once); only the lines after them are built."""
        code = self.code
        assert code is not None
        settled = len(markups) - unfinished
        reuse = min(len(code.built_for), settled)
        if reuse:
            if markups[:reuse] == code.built_for[:reuse]:
                code.built_for[:reuse] = markups[:reuse]  # the same ones from now on
            else:
                reuse = 0
        start = len(self.builder.lines)
        self.builder.lines.extend(code.built_lines[:reuse])
        del code.built_for[reuse:]
        del code.built_lines[reuse:]
        for markup in markups[reuse:settled]:
            self.builder.add(code.region, INDENT, markup)
            code.built_for.append(markup)
            code.built_lines.append(self.builder.lines[-1])
        if not start:
            self.reused = reuse
        for markup in markups[settled:]:
            self.builder.add(code.region, INDENT, markup)

    def feed(self, line: str) -> None:
        """Read one finished line."""
        code = self.code
        if code is not None:
            if code.closes(line):
                self._code_lines(code.highlighter.finish())
                self.builder.add(code.region, INDENT, [("fence", line)], in_region_copy=False)
                self.code = None
            else:
                self._code_lines(code.highlighter.add(line))
            return
        match = _FENCE.match(line)
        if match is not None:
            self.prose_region = None
            self.blanks.clear()
            region = self.builder.new_region()
            self.builder.add(region, INDENT, [("fence", line)], in_region_copy=False)
            self.code = _CodeBlock(match.group(1), region, CodeHighlighter(match.group(2)))
            return
        if not line.strip():
            if self.prose_region is not None:
                self.blanks.append(line)
            return
        if self.prose_region is None:
            self.prose_region = self.builder.new_region()
        for blank in self.blanks:
            self.builder.add(self.prose_region, INDENT, self._prose(blank))
        self.blanks.clear()
        self.builder.add(self.prose_region, INDENT, self._prose(line))

    def end(self, last: str) -> None:
        """The text ends with ``last``, unfinished: draw it and whatever is still open."""
        code = self.code
        if code is not None and not code.closes(last):
            self._open_code_lines(code.highlighter.render([last]), 1)
            return
        self.feed(last)
        if self.code is not None:
            self._open_code_lines(self.code.highlighter.render(), 0)


class EntryRenderer(Protocol):
    """Renders one entry again after each change (see :func:`entry_renderer`)."""

    def update(self) -> tuple[int, list[Line]]:
        """Return ``(keep, tail)``: the entry's lines are now the first ``keep`` lines of
        the previous result (all of them the first time: 0) followed by ``tail``."""


class MessageRenderer:
    """Renders a message entry incrementally (see the module docstring).

    Each :meth:`update` reads only the text appended since the last one, and rebuilds only
    the lines that may still change.
    """

    def __init__(self, entry: MessageEntry, entry_number: int, agent_name: str) -> None:
        self.entry = entry
        builder = _Builder(entry_number)
        if entry.kind is EntryKind.THOUGHT:
            builder.add(builder.new_region(), "", [("comment", "thought")], furniture=True)
            self._reader = _BodyReader(builder, "comment")
        else:
            label = "you" if entry.kind is EntryKind.YOU else agent_name
            builder.add(builder.new_region(), "", [("keyword", label)], furniture=True)
            self._reader = _BodyReader(builder, "body")
        #: Characters of the body read into finished lines.
        self._read = 0
        #: Lines of the last result that will not change.
        self._frozen = 0
        #: The last result's lines after those.
        self._open: list[Line] = []

    def update(self) -> tuple[int, list[Line]]:
        body = self.entry.body
        new = body.since(self._read)
        cut = new.rfind("\n")
        if cut >= 0:
            self._read += cut + 1
            lines = split_lines(new[: cut + 1])
            for line in lines[:-1]:
                self._reader.feed(line)
            new = new[cut + 1 :]
        if body.dropped:
            new += f"\n[… {body.dropped:,} bytes dropped …]"
        frozen = self._reader.builder.take()
        trial = self._reader.copy()
        unfinished = split_lines(new)
        for line in unfinished[:-1]:
            trial.feed(line)
        trial.end(unfinished[-1])
        tail = trial.builder.take()
        keep = self._frozen
        self._frozen += len(frozen)
        after = [*frozen, *tail] if frozen else tail
        # Lines drawn last time and drawn the same now are kept: the longest run of equal
        # lines at the start.  The open code lines reused are equal at once (the very same
        # lines, compared as lists at C speed); the lines after them are compared one by one.
        same = trial.reused if not frozen else 0
        if same and self._open[:same] != after[:same]:
            same = 0
        if not same:
            differs = list(map(operator.is_not, self._open, after))
            same = differs.index(True) if True in differs else len(differs)
        for before, now in zip(self._open[same:], after[same:], strict=False):
            if before != now:
                break
            same += 1
        self._open = tail
        return keep + same, after[same:]


class _WholeRenderer:
    """Renders an entry whole after each change (tool calls, plans: replaced, not grown)."""

    def __init__(self, entry: Entry, entry_number: int, agent_name: str) -> None:
        self.entry = entry
        self.entry_number = entry_number
        self.agent_name = agent_name

    def update(self) -> tuple[int, list[Line]]:
        return 0, _render_whole(self.entry, self.entry_number)


def entry_renderer(entry: Entry, entry_number: int, agent_name: str = "agent") -> EntryRenderer:
    """The renderer of ``entry``: incremental for messages, whole for the others."""
    if isinstance(entry, MessageEntry):
        return MessageRenderer(entry, entry_number, agent_name)
    return _WholeRenderer(entry, entry_number, agent_name)


def _complete_lines(text: str) -> list[str]:
    """The lines of a finished text: a ``\r`` left at its very end was a CRLF's."""
    return split_lines(text[:-1] if text.endswith("\r") else text)


def _tool_output(entry: ToolCallEntry) -> list[Markup]:
    if not entry.content or entry.output.dropped:
        text = str(entry.output)
        return [[("body", line)] if line else [] for line in _complete_lines(text)] if text else []
    result: list[Markup] = []
    for item in entry.content:
        text = render_tool_content([item])
        if not text:
            continue
        is_diff = isinstance(item, schema.FileEditToolCallContent)
        for line in _complete_lines(text):
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
    return entry_renderer(entry, entry_number, agent_name).update()[1]


def _render_whole(entry: Entry, entry_number: int) -> list[Line]:
    builder = _Builder(entry_number)
    if isinstance(entry, ToolCallEntry):
        attribute = "error" if entry.status == "failed" else "type"
        heading: Markup = [(attribute, f"{glyphs.current().tool} {entry.heading}")]
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
        for line in split_lines(entry.text):
            builder.add(region, INDENT, [("body", line)] if line else [])
    return builder.lines


def render_notice(text: str, number: int) -> list[Line]:
    """A notice from the client itself (failures, stop reasons), in the error colour."""
    builder = _Builder(number)
    region = builder.new_region()
    for line in split_lines(text):
        builder.add(region, "", [("error", line)])
    return builder.lines


def plain_lines(lines: Iterable[Line]) -> Sequence[str]:
    """The drawn text of ``lines`` (for tests and captures)."""
    return ["".join(piece for _, piece in line.markup) for line in lines]
