"""Lexing with one joined expression per state gives Pygments' own tokens.

For every language the TUI colours with a ``RegexLexer``, any text (made of pieces of
code in all those languages, so that every state gets visited) is cut into the same
tokens, with the same types, as Pygments' own ``get_tokens_unprocessed`` cuts it.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pygments.lexers import get_lexer_by_name

from acpkit.compat import regex_lexer_states
from acpkit_client.tui.highlight import HIGHLIGHTED_LANGUAGES, resumable_tokens
from acpkit_client.tui.lexer_states import state_matcher
from tests.helpers import examples

PIECES = [
    "def f(x, *a, **k):\n",
    "    return x  # done\n",
    's = """two\nlines"""\n',
    "f'{x!r:>{width}}' b'\\x00' r'\\d+'\n",
    "@decorator\nclass C(Base, metaclass=M):\n",
    "import os.path as p\nfrom . import (a, b)\n",
    "/* a comment\n   over lines */\n",
    'func main() { fmt.Println("hi\\n") }\n',
    "key: value\n- item\n  nested: {a: 1, b: [2, 3]}\n",
    "[table]\nname = 'x'\nlist = [1, 2.5, true]\n",
    '<div class="a">&amp; <b>x</b></div>\n',
    "<?xml version='1.0'?><r a='1'/>\n",
    "FROM python:3.12\nRUN pip install -r req.txt\n",
    'echo "$HOME" ${x:-y} $(ls) | grep -E "a|b" > /dev/null\n',
    "# Title\n*em* **strong** `code` [link](http://x)\n",
    "```js\nconst x = () => `t${y}`;\n```\n",
    "0x1F 1e-3 1_000 07 .5j\n",
    "\\\n",
    "\t\n",
    "  \n",
    "é 界 \u00a0\n",
    "'unterminated\n",
    '"""open\n',
]


def test_the_joined_matchers_are_used() -> None:
    """The Python lexer's busiest states are joined, and Python is lexed by our loop."""
    states = regex_lexer_states(get_lexer_by_name("python"))
    assert states is not None
    assert state_matcher(states, "root") is not None
    assert state_matcher(states, "expr") is not None
    assert resumable_tokens("python", "x = 1\n") is not None


@settings(max_examples=examples(2), deadline=None)
@given(
    language=st.sampled_from(sorted(HIGHLIGHTED_LANGUAGES)),
    text=st.lists(st.sampled_from(PIECES), max_size=20).map("".join),
)
def test_joined_lexing_cuts_what_pygments_cuts(language: str, text: str) -> None:
    """Our loop (joined expressions) yields Pygments' own tokens for the same text."""
    text += "\n"
    ours = resumable_tokens(language, text)
    if ours is None:  # not lexed by our loop
        return
    lexer = get_lexer_by_name(HIGHLIGHTED_LANGUAGES[language], stripnl=False)
    assert ours == list(lexer.get_tokens_unprocessed(text))
