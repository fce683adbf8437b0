"""One regular expression per Pygments lexer state: which of its rules matches, in one call.

Pygments' ``RegexLexer`` tries a state's rules in order at each position, one Python
call per rule, until one matches: lexing a line of Python tries some fifteen rules per
token.  A regular expression alternation tries its branches in order too and takes the
first that matches, so the rules of a state joined as ``(?:rule0)|(?:rule1)|…``, each in
a group of its own, find the same rule in one call (the group closed last, ``lastindex``,
says which).  The rule's own expression is then matched once more, so that the tokens
and the groups its action reads are exactly the rule's.

A state is left to the rule-by-rule loop (:func:`state_matcher` gives None) when its
rules cannot be joined without changing what they mean: back-references (``\\1``,
``(?P=name)``, conditional groups) count groups, which the joining renumbers; and some
expressions do not compile joined (a group name used twice, say).  A rule with global
flags of its own (``(?i)`` at its start) has them scoped to its branch (``(?i:…)``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["StateMatcher", "state_matcher"]

#: Text of a pattern that joining could change the meaning of (see the module docstring).
_UNJOINABLE = re.compile(r"\\[1-9]|\(\?P=|\(\?\(|\\g<")

#: ``(match, rule index by group)``: the joined expression's ``match`` and, for each
#: group number, the index of the rule it wraps (-1 for the rules' own groups).
#: Global inline flags at the start of a pattern (only the scoped-able letters).
_GLOBAL_FLAGS = re.compile(r"\(\?([imsx]+)\)")

StateMatcher = tuple[Callable[[str, int], "re.Match[str] | None"], list[int]]

_cache: dict[tuple[int, str], tuple[Any, StateMatcher | None]] = {}


def _joined(rules: Sequence[tuple[Any, Any, Any]]) -> StateMatcher | None:
    patterns: list[re.Pattern[str]] = []
    for match, _action, _state in rules:
        pattern = getattr(match, "__self__", None)
        if not isinstance(pattern, re.Pattern) or not isinstance(pattern.pattern, str):
            return None
        if _UNJOINABLE.search(pattern.pattern):
            return None
        patterns.append(pattern)
    if not patterns:
        return None
    common = patterns[0].flags
    for pattern in patterns:
        common &= pattern.flags
    rule_of_group = [-1]
    branches = []
    for index, pattern in enumerate(patterns):
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


def state_matcher(states: dict[str, Any], state: str) -> StateMatcher | None:
    """The joined matcher of ``state`` in a lexer's compiled ``states`` (kept), or None
    when its rules must be tried one by one."""
    key = (id(states), state)
    known = _cache.get(key)
    if known is not None and known[0] is states:
        return known[1]
    matcher = _joined(states[state])
    _cache[key] = (states, matcher)
    return matcher
