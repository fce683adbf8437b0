"""One regular expression per Pygments lexer state: which of its rules matches, in one call.

Pygments' ``RegexLexer`` tries a state's rules in order at each position, one Python
call per rule, until one matches: lexing a line of Python tries some fifteen rules per
token.  A regular expression alternation tries its branches in order too and takes the
first that matches, so the rules of a state joined as ``(?:rule0)|(?:rule1)|…``, each in
a group of its own, find the same rule in one call (the group closed last, ``lastindex``,
says which).  The rule's own expression is then matched once more, so that the tokens
and the groups its action reads are exactly the rule's.

Most rules cannot match where the text holds a given character (a string's rule where a
letter is, a number's where a space is): :func:`state_table` gives, per ASCII character
at the position, the joined expression of only the rules that may match there (found by
:func:`~acpkit_client.tui.regex_first.first_characters`, an over-estimate), in their
order; so the first rule that matches is the same, found trying a few branches instead
of the state's fifty.  Any other character (and the text's end) gets the whole state's
expression.

A state is left to the rule-by-rule loop (:func:`state_matcher` and :func:`state_table`
give None) when its rules cannot be joined without changing what they mean:
back-references (``\\1``, ``(?P=name)``, conditional groups) count groups, which the
joining renumbers; and some expressions do not compile joined (a group name used twice,
say).  A rule with global flags of its own (``(?i)`` at its start) has them scoped to its
branch (``(?i:…)``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from acpkit_client.tui.regex_first import ASCII, first_characters

__all__ = ["StateMatcher", "StateTable", "state_matcher", "state_table"]

#: Text of a pattern that joining could change the meaning of (see the module docstring).
_UNJOINABLE = re.compile(r"\\[1-9]|\(\?P=|\(\?\(|\\g<")

#: Global inline flags at the start of a pattern (only the scoped-able letters).
_GLOBAL_FLAGS = re.compile(r"\(\?([imsx]+)\)")

#: ``(match, rule index by group)``: the joined expression's ``match`` and, for each
#: group number, the index of the rule it wraps (-1 for the rules' own groups).
StateMatcher = tuple[Callable[[str, int], "re.Match[str] | None"], list[int]]

#: What never matches: the matcher of a character no rule of the state may start with.
_NO_RULE: StateMatcher = (re.compile("(?!)").match, [-1])


def _patterns(rules: Sequence[tuple[Any, Any, Any]]) -> list[re.Pattern[str]] | None:
    """The rules' compiled expressions, or None when they cannot be joined."""
    patterns: list[re.Pattern[str]] = []
    for match, _action, _state in rules:
        pattern = getattr(match, "__self__", None)
        if not isinstance(pattern, re.Pattern) or not isinstance(pattern.pattern, str):
            return None
        if _UNJOINABLE.search(pattern.pattern):
            return None
        patterns.append(pattern)
    return patterns or None


def _joined(patterns: Sequence[re.Pattern[str]], rules: Sequence[int]) -> StateMatcher | None:
    """The joined matcher of the ``rules`` (indexes into ``patterns``), in that order."""
    if not rules:
        return _NO_RULE
    chosen = [patterns[index] for index in rules]
    common = chosen[0].flags
    for pattern in chosen:
        common &= pattern.flags
    rule_of_group = [-1]
    branches = []
    for index, pattern in zip(rules, chosen, strict=True):
        text = pattern.pattern
        if pattern.flags != common:
            # a rule's own global flags, ``(?i)`` at its start, become scoped to it
            leading = _GLOBAL_FLAGS.match(text)
            if leading is None:
                return None
            text = f"(?{leading.group(1)}:{text[leading.end() :]})"
        branches.append(f"({text})")
        rule_of_group.append(index)
        rule_of_group.extend([-1] * pattern.groups)
    try:
        joined = re.compile("|".join(branches), common)
    except (re.error, OverflowError, RecursionError):
        return None
    if joined.groups != len(rule_of_group) - 1:
        return None
    return joined.match, rule_of_group


class StateTable(dict[str, StateMatcher]):
    """A state's matcher by the character at the position (see the module docstring):
    ``table[text[pos : pos + 1]]``.  Filled as characters are met."""

    def __init__(
        self,
        patterns: Sequence[re.Pattern[str]],
        whole: StateMatcher,
        firsts: Sequence[tuple[frozenset[str], bool]],
    ) -> None:
        super().__init__()
        self._patterns = patterns
        self._whole = whole
        self._firsts = firsts
        self._by_rules: dict[tuple[int, ...], StateMatcher] = {}

    def __missing__(self, char: str) -> StateMatcher:
        if char not in ASCII:  # another character, or the end of the text
            return self._whole
        rules = tuple(
            index for index, (chars, empty) in enumerate(self._firsts) if empty or char in chars
        )
        matcher = self._by_rules.get(rules)
        if matcher is None:
            matcher = _joined(self._patterns, rules) or self._whole
            self._by_rules[rules] = matcher
        self[char] = matcher
        return matcher


_cache: dict[tuple[int, str], tuple[Any, StateMatcher | None]] = {}
_tables: dict[tuple[int, str], tuple[Any, StateTable | None]] = {}


def state_matcher(states: dict[str, Any], state: str) -> StateMatcher | None:
    """The joined matcher of ``state`` in a lexer's compiled ``states`` (kept), or None
    when its rules must be tried one by one."""
    key = (id(states), state)
    known = _cache.get(key)
    if known is not None and known[0] is states:
        return known[1]
    patterns = _patterns(states[state])
    matcher = None if patterns is None else _joined(patterns, range(len(patterns)))
    _cache[key] = (states, matcher)
    return matcher


def state_table(states: dict[str, Any], state: str) -> StateTable | None:
    """The per-character matchers of ``state`` in a lexer's compiled ``states`` (kept),
    or None when its rules must be tried one by one."""
    key = (id(states), state)
    known = _tables.get(key)
    if known is not None and known[0] is states:
        return known[1]
    table = None
    whole = state_matcher(states, state)
    patterns = _patterns(states[state])
    if whole is not None and patterns is not None:
        firsts = [first_characters(pattern) for pattern in patterns]
        if all(first is not None for first in firsts):
            table = StateTable(patterns, whole, [first for first in firsts if first is not None])
        else:
            table = StateTable(patterns, whole, [(ASCII, True)] * len(patterns))
    _tables[key] = (states, table)
    return table
