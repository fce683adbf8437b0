"""Which ASCII characters a regular expression's match can start with (over-estimated).

A lexer state tries its rules in order at each position; most rules cannot match at all
where the text holds, say, a letter (a string's quote, a number's digit, a comment's
``#``).  :func:`first_characters` reads a compiled expression's syntax tree and gives
the set of ASCII characters its match may start with, and whether it may match the empty
string (then it may match whatever comes).  The answer is an over-estimate, never an
under-estimate: what cannot be worked out exactly counts as "any character" (case-blind
classes, look-behinds and anchors seen through, back-references, the unknown).  So the
rules left out for a character are rules that cannot match there, and trying only the
others finds the same first matching rule.

The syntax tree is the standard library's own parser (``re._parser``, private, the one
``re.compile`` uses): where it is missing or changed, :func:`first_characters` gives
None and the caller tries every rule.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from typing import Any

__all__ = ["ASCII", "first_characters"]

#: The characters the estimate is about.
ASCII = frozenset(chr(code) for code in range(128))

_NOTHING: frozenset[str] = frozenset()

#: A pattern's first characters and whether it may match the empty string.
First = tuple[frozenset[str], bool]


def _stdlib_parser() -> tuple[Any, Any] | None:
    """``(re._parser, re._constants)``, or None on a Python without them."""
    try:
        parser = importlib.import_module("re._parser")
        constants = importlib.import_module("re._constants")
    except ImportError:
        return None
    return parser, constants


class _Reader:
    """Walks one parsed expression (see the module docstring)."""

    def __init__(self, constants: Any) -> None:
        self.c = constants
        self.categories = {
            constants.CATEGORY_DIGIT: r"\d",
            constants.CATEGORY_NOT_DIGIT: r"\D",
            constants.CATEGORY_WORD: r"\w",
            constants.CATEGORY_NOT_WORD: r"\W",
            constants.CATEGORY_SPACE: r"\s",
            constants.CATEGORY_NOT_SPACE: r"\S",
        }

    def category(self, category: Any, ascii_only: bool) -> frozenset[str] | None:
        expression = self.categories.get(category)
        if expression is None:
            return None
        compiled = re.compile(expression, re.ASCII if ascii_only else 0)
        return frozenset(char for char in ASCII if compiled.match(char))

    def char_class(
        self, items: Iterable[tuple[Any, Any]], blind: bool, ascii_only: bool
    ) -> frozenset[str]:
        c = self.c
        chars: set[str] = set()
        negate = False
        for op, value in items:
            if op is c.NEGATE:
                negate = True
            elif op is c.LITERAL:
                if value >= 128 and blind:
                    return ASCII  # a non-ASCII letter may fold to an ASCII one
                if value < 128:
                    chars.add(chr(value))
            elif op is c.RANGE:
                low, high = value
                if high >= 128 and blind:
                    return ASCII
                chars.update(chr(code) for code in range(low, min(high, 127) + 1))
            elif op is c.CATEGORY:
                members = self.category(value, ascii_only)
                if members is None:
                    return ASCII
                chars |= members
            else:
                return ASCII
        if blind:
            chars |= {char.swapcase() for char in chars}
        return ASCII - chars if negate else frozenset(chars)

    def sequence(self, items: Iterable[tuple[Any, Any]], blind: bool, ascii_only: bool) -> First:
        found: set[str] = set()
        for op, value in items:
            chars, empty = self.item(op, value, blind, ascii_only)
            found |= chars
            if not empty:
                return frozenset(found), False
        return frozenset(found), True

    def item(self, op: Any, value: Any, blind: bool, ascii_only: bool) -> First:
        c = self.c
        if op is c.LITERAL:
            if value >= 128:
                return (ASCII if blind else _NOTHING), False
            char = chr(value)
            return (frozenset({char, char.swapcase()}) if blind else frozenset({char})), False
        if op is c.NOT_LITERAL:
            return (ASCII if blind or value >= 128 else ASCII - {chr(value)}), False
        if op is c.ANY:
            return ASCII, False
        if op is c.IN:
            return self.char_class(value, blind, ascii_only), False
        if op is c.AT or op is c.ASSERT or op is c.ASSERT_NOT:
            return _NOTHING, True  # zero width: what follows says (over-estimated)
        if op is c.BRANCH:
            found: set[str] = set()
            empty = False
            for branch in value[1]:
                chars, may_be_empty = self.sequence(branch, blind, ascii_only)
                found |= chars
                empty = empty or may_be_empty
            return frozenset(found), empty
        if op is c.SUBPATTERN:
            _group, add, remove, pattern = value
            blind = (blind or bool(add & re.IGNORECASE)) and not remove & re.IGNORECASE
            ascii_only = (ascii_only or bool(add & re.ASCII)) and not remove & re.ASCII
            return self.sequence(pattern, blind, ascii_only)
        if op is c.ATOMIC_GROUP:
            return self.sequence(value, blind, ascii_only)
        if op is c.MAX_REPEAT or op is c.MIN_REPEAT or op is c.POSSESSIVE_REPEAT:
            low, _high, pattern = value
            chars, empty = self.sequence(pattern, blind, ascii_only)
            return chars, empty or low == 0
        return ASCII, True  # back-references, conditionals, the unknown: anything


def first_characters(pattern: re.Pattern[str]) -> First | None:
    """The ASCII characters a match of ``pattern`` may start with, and whether it may
    match the empty string; None when the expression cannot be read."""
    stdlib = _stdlib_parser()
    if stdlib is None:
        return None
    parser, constants = stdlib
    try:
        parsed = parser.parse(pattern.pattern, pattern.flags)
        flags = parsed.state.flags
        return _Reader(constants).sequence(
            parsed, bool(flags & re.IGNORECASE), bool(flags & re.ASCII)
        )
    except Exception:  # a parser that changed: no estimate, every rule tried
        return None
