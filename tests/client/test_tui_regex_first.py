"""The first characters of a lexer rule's match, and the per-character matchers built on them.

:func:`~acpkit_client.tui.regex_first.first_characters` may over-estimate, never
under-estimate: wherever a rule of a coloured language matches, at an ASCII character,
that character is in the rule's estimate (or the rule may match the empty string).
A state's table then tries, per character, only the rules that may match there, and
lexing with it still cuts Pygments' own tokens (:mod:`test_tui_lexer_states`).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pygments.lexers import get_lexer_by_name

from acpkit.compat import regex_lexer_states
from acpkit_client.tui.highlight import HIGHLIGHTED_LANGUAGES, resumable_tokens
from acpkit_client.tui.lexer_states import state_matcher, state_table
from acpkit_client.tui.regex_first import ASCII, first_characters
from tests.client.test_tui_lexer_states import PIECES
from tests.helpers import examples

LANGUAGES = sorted(set(HIGHLIGHTED_LANGUAGES.values()))


def rule_patterns(language: str) -> list[re.Pattern[str]]:
    states = regex_lexer_states(get_lexer_by_name(language))
    if states is None:
        return []
    patterns = []
    for rules in states.values():
        for match, _action, _state in rules:
            pattern = getattr(match, "__self__", None)
            if isinstance(pattern, re.Pattern) and isinstance(pattern.pattern, str):
                patterns.append(pattern)
    return patterns


@pytest.mark.parametrize(
    ("expression", "chars", "empty"),
    [
        (r"abc", {"a"}, False),
        (r"(?i)abc", {"a", "A"}, False),
        (r"x?y", {"x", "y"}, False),
        (r"(?:ab|cd)+", {"a", "c"}, False),
        (r"[^\S\n]+", {" ", "\t", "\x0b", "\x0c", "\r", "\x1c", "\x1d", "\x1e", "\x1f"}, False),
        (r"\d(?:_?\d)*", set("0123456789"), False),
        (r"(?<!\.)\bdef\b", {"d"}, False),
        (r"^(\s*)(#)", {" ", "\t", "\n", "\x0b", "\x0c", "\r", "#", *"\x1c\x1d\x1e\x1f"}, False),
        (r"a*", {"a"}, True),
        (r"(?=x)", set(), True),
        (r".", set(ASCII), False),
        (r"[^a]", set(ASCII) - {"a"}, False),
        (r"(?i:\u212a)", set(ASCII), False),  # the Kelvin sign matches k case-blind
        (r"(a)\1", {"a"}, False),
    ],
)
def test_first_characters_of_an_expression(expression: str, chars: set[str], empty: bool) -> None:
    """The estimate of simple expressions: exact where it can be, everything where a
    case-blind non-ASCII letter may match an ASCII one, through anchors and look-arounds."""
    assert first_characters(re.compile(expression)) == (frozenset(chars), empty)


@settings(max_examples=examples(2), deadline=None)
@given(
    language=st.sampled_from(LANGUAGES),
    text=st.one_of(
        st.text(st.characters(max_codepoint=127), max_size=40),
        st.lists(st.sampled_from(PIECES), max_size=6).map("".join),
    ),
)
def test_a_rule_matches_only_where_its_first_characters_are(language: str, text: str) -> None:
    """At every ASCII position of any text, a rule that matches there either starts with a
    character of its estimate or may match the empty string (no under-estimate)."""
    for pattern in rule_patterns(language):
        first = first_characters(pattern)
        assert first is not None
        chars, empty = first
        if empty:
            continue
        for position, char in enumerate(text):
            if char in ASCII and char not in chars:
                assert pattern.match(text, position) is None, (pattern.pattern, text, position)


def test_a_letter_tries_a_few_of_the_python_root_rules() -> None:
    """In Python's busiest state, a letter's matcher tries a few of the fifty-odd rules,
    and a character no rule starts with gets a matcher that never matches."""
    states = regex_lexer_states(get_lexer_by_name("python"))
    assert states is not None
    whole = state_matcher(states, "root")
    table = state_table(states, "root")
    assert whole is not None and table is not None
    rules = {index for index in table["x"][1] if index >= 0}
    assert 0 < len(rules) < len(states["root"]) // 4
    assert table["é"] is whole  # non-ASCII: the whole state
    assert table[""] is whole  # the end of the text


@settings(max_examples=examples(2), deadline=None)
@given(
    language=st.sampled_from(sorted(HIGHLIGHTED_LANGUAGES)),
    text=st.text(st.characters(max_codepoint=0x2FF), max_size=80),
)
def test_lexing_any_text_cuts_what_pygments_cuts(language: str, text: str) -> None:
    """Our loop (a matcher per character) yields Pygments' own tokens for any text."""
    text += "\n"
    ours = resumable_tokens(language, text)
    if ours is None:
        return
    lexer = get_lexer_by_name(HIGHLIGHTED_LANGUAGES[language], stripnl=False)
    assert ours == list(lexer.get_tokens_unprocessed(text))
