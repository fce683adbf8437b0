"""
Positions between the model and a language server, and text edits applied to a file.

The model counts lines and columns from 1, in characters (Unicode code points) as
``read_file`` shows them.  LSP counts both from 0, and columns in code units of the
position encoding the server chose at ``initialize`` (UTF-16 unless it said ``utf-8`` or
``utf-32``): ``é`` is one unit in UTF-16, ``U+1D538`` (outside the BMP) is two.  Lines end at
``\\n``, ``\\r\\n`` or ``\\r``, as LSP says, and nowhere else (not at ``\\f`` or
``U+2028``, where :meth:`str.splitlines` would split).

:func:`apply_text_edits` applies one document's LSP text edits (all relative to the same
original text) the way the specification orders them: by start position, inserts at the
same position in the order given; overlapping edits are refused.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

import attrs

__all__ = [
    "EditError",
    "LineIndex",
    "PlainEdit",
    "apply_text_edits",
    "code_units",
    "column_of",
]

_LINE_END = re.compile(r"\r\n|\r|\n")

UTF8 = "utf-8"
UTF16 = "utf-16"
UTF32 = "utf-32"


def _units(char: str, encoding: str) -> int:
    code = ord(char)
    if encoding == UTF32:
        return 1
    if encoding == UTF8:
        return 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4
    return 2 if code >= 0x10000 else 1


def code_units(text: str, encoding: str = UTF16) -> int:
    """How many code units of ``encoding`` ``text`` takes (an LSP ``character`` offset)."""
    if encoding == UTF32:
        return len(text)
    if encoding == UTF8:
        return len(text.encode("utf-8", "surrogatepass"))
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def column_of(line: str, character: int, encoding: str = UTF16) -> int:
    """
    The 0-based code-point column of the LSP ``character`` (code units of ``encoding``) in
    ``line``; past the end of the line it is the line's length (as LSP says), and in the
    middle of a character it is that character's end.
    """
    if encoding == UTF32:
        return max(0, min(character, len(line)))
    count = 0
    for index, char in enumerate(line):
        if count >= character:
            return index
        count += _units(char, encoding)
    return len(line)


@attrs.frozen
class LineIndex:
    """The lines of one text, for conversions between offsets and LSP positions."""

    text: str
    starts: tuple[int, ...]
    """Where each line starts (offsets in ``text``)."""
    ends: tuple[int, ...]
    """Where each line's content ends, before its line break."""

    @classmethod
    def of(cls, text: str) -> LineIndex:
        """Index ``text``: a text of N line breaks has N + 1 lines (the last may be empty)."""
        starts, ends = [0], []
        for match in _LINE_END.finditer(text):
            ends.append(match.start())
            starts.append(match.end())
        ends.append(len(text))
        return cls(text=text, starts=tuple(starts), ends=tuple(ends))

    @property
    def line_count(self) -> int:
        """How many lines, counting the empty one after a final line break."""
        return len(self.starts)

    def line(self, number: int) -> str:
        """Line ``number`` (0-based) without its line break; empty past the end."""
        if not 0 <= number < len(self.starts):
            return ""
        return self.text[self.starts[number] : self.ends[number]]

    def offset(self, line: int, character: int, encoding: str = UTF16) -> int:
        """
        The offset in the text of the LSP position (0-based ``line``; ``character`` in
        code units); a line past the end is the end of the text.
        """
        if line >= len(self.starts):
            return len(self.text)
        if line < 0:
            return 0
        start = self.starts[line]
        return start + column_of(self.line(line), character, encoding)

    def lsp_character(self, line: int, column: int, encoding: str = UTF16) -> int:
        """The LSP ``character`` of the 0-based code-point ``column`` of 0-based ``line``."""
        return code_units(self.line(line)[:column], encoding)


class EditError(ValueError):
    """A text edit that cannot be applied (overlapping ranges, a range that ends first)."""


@attrs.frozen
class PlainEdit:
    """One LSP text edit reduced to what applying it needs (0-based, code units)."""

    start_line: int
    start_character: int
    end_line: int
    end_character: int
    new_text: str


def apply_text_edits(text: str, edits: Sequence[PlainEdit], encoding: str = UTF16) -> str:
    """
    ``text`` with ``edits`` applied: every range refers to ``text`` as given (none sees
    another's result), so the edits are sorted by position and the new text is built in
    one pass; inserts at the same position keep the order given.  Raises
    :class:`EditError` for overlapping ranges or a range whose end comes before its start.
    """
    index = LineIndex.of(text)
    spans: list[tuple[int, int, int, str]] = []
    for order, edit in enumerate(edits):
        start = index.offset(edit.start_line, edit.start_character, encoding)
        end = index.offset(edit.end_line, edit.end_character, encoding)
        if end < start:
            raise EditError(
                f"an edit ends (line {edit.end_line + 1}) before it starts "
                f"(line {edit.start_line + 1})"
            )
        spans.append((start, end, order, edit.new_text))
    spans.sort(key=lambda span: (span[0], span[1], span[2]))
    for before, after in itertools.pairwise(spans):
        if after[0] < before[1]:
            line = text.count("\n", 0, after[0]) + 1
            raise EditError(f"two edits overlap near line {line}")
    pieces: list[str] = []
    cursor = 0
    for start, end, _, new_text in spans:
        pieces.append(text[cursor:start])
        pieces.append(new_text)
        cursor = end
    pieces.append(text[cursor:])
    return "".join(pieces)
