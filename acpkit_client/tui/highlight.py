"""Syntax colouring of a fenced code block that grows line by line, at a bounded cost.

A :class:`CodeHighlighter` takes a block's finished lines one at a time
(:meth:`~CodeHighlighter.add`) and hands back the coloured lines it *freezes*: lines
whose colours will not change any more.  It keeps the last :data:`OPEN_LINES` or so
finished lines open, with the lexer's state at the first of them, and
:meth:`~CodeHighlighter.render` colours those open lines plus any unfinished ones by
lexing only them.  So the work per added line, and per redraw of the block's tail, does
not depend on the block's length.

Rules of the colouring:

- A finished line is first coloured on its own, from the lexer's state where the line
  before it ended (so one line of work per line, and per redraw only the unfinished line
  is lexed).  Once :data:`FREEZE_STEP` more than :data:`OPEN_LINES` finished lines
  are open, they are lexed again together and all but the last :data:`OPEN_LINES` or
  so are frozen, at a point where the
  lexer is between two tokens at the start of a line (the state there is kept and the
  lexing resumes from it); a closed block's open lines are lexed together too.  So a
  token spanning lines (a ``/* … */`` comment matched by one pattern) gets its colours
  when its lines are frozen, provided it is complete within the open lines then.
- The frozen result depends only on the lines, never on how the text was cut into
  chunks: colouring a whole block at once (:func:`highlight_lines`) gives what
  streaming it gave, once it is closed or its lines are frozen.
- Lexers built on Pygments' ``RegexLexer`` resume from their exact state; any other
  lexer (YAML's) restarts from scratch at a line that starts in column 0, and lexes its
  open lines again at each redraw (fewer than ``OPEN_LINES + FREEZE_STEP``).
- When no line can be frozen (one token over every open line), lines are frozen anyway
  once :data:`MAX_OPEN_LINES` are open, resuming from the last known state: the cost
  stays bounded, the colours of such a token may break there.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import attrs
from pygments.lexer import Lexer, RegexLexer
from pygments.lexers import get_lexer_by_name
from pygments.token import Error, Token, Whitespace

from acpkit.compat import regex_lexer_states
from acpkit_client.tui.lexer_states import state_table
from acpkit_client.tui.theme import token_attribute

if TYPE_CHECKING:  # annotations only; at run time the class is type(Token)
    from pygments.token import _TokenType

__all__ = [
    "FREEZE_STEP",
    "HIGHLIGHTED_LANGUAGES",
    "MAX_OPEN_LINES",
    "OPEN_LINES",
    "WORK",
    "CodeHighlighter",
    "Markup",
    "WorkCounter",
    "highlight_lines",
    "resumable_tokens",
]

#: A list of ``(palette entry, text)`` segments.
Markup = list[tuple[str, str]]

#: Finished lines kept open (re-lexed with what follows) before they are frozen.
OPEN_LINES = 16
#: Lines frozen at a time: the open lines are lexed together again once this many more
#: than :data:`OPEN_LINES` are open (so each line is lexed about 1.25 times in all).
FREEZE_STEP = 64
#: Open lines after which lines are frozen even without a clean resumption point.
MAX_OPEN_LINES = 256

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

#: A lexer's state: its stack of state names.
Stack = tuple[str, ...]
ROOT: Stack = ("root",)


@attrs.define
class WorkCounter:
    """How much rendering work was done (for the tests and the benchmark, never timed)."""

    #: Lines handed to a lexer.
    lines_lexed: int = 0
    #: Display lines built (see :mod:`acpkit_client.tui.render`).
    lines_built: int = 0


#: The process-wide work counter.
WORK = WorkCounter()

#: The class of Pygments' token types (its name, ``_TokenType``, is private).
_TOKEN_TYPE = type(Token)
_ATTRIBUTES: dict[_TokenType, str] = {}


def _attribute(token: _TokenType) -> str:
    attribute = _ATTRIBUTES.get(token)
    if attribute is None:
        attribute = _ATTRIBUTES[token] = token_attribute(token)
    return attribute


def _lexer(language: str) -> Lexer | None:
    name = HIGHLIGHTED_LANGUAGES.get(language.lower())
    if name is None:
        return None
    return get_lexer_by_name(name, stripnl=False)


_RESUMABLE: dict[type[Lexer], bool] = {}


def _resumable(lexer: Lexer) -> bool:
    """Whether ``lexer`` runs Pygments' own ``RegexLexer`` loop (so its state can be kept)."""
    known = _RESUMABLE.get(type(lexer))
    if known is None:
        known = _RESUMABLE[type(lexer)] = (
            isinstance(lexer, RegexLexer)
            and type(lexer).get_tokens_unprocessed is RegexLexer.get_tokens_unprocessed
            and regex_lexer_states(lexer) is not None
        )
    return known


def _regex_tokens(
    lexer: RegexLexer, text: str, stack: Stack, states: dict[int, Stack]
) -> Iterator[tuple[int, Any, str]]:
    """Pygments' ``RegexLexer`` loop, started in ``stack``, noting the state at line starts.

    ``states`` receives, for each line start that falls between two matches, the stack
    there.  The loop is adapted from Pygments' ``RegexLexer.get_tokens_unprocessed``
    (Pygments 2.x, BSD-2-Clause, copyright the Pygments team); only the noting is added,
    and the rule that matches is found with one joined expression per state where the
    rules allow it, chosen by the character at the position
    (:mod:`acpkit_client.tui.lexer_states`).
    """
    pos = 0
    tokendefs = regex_lexer_states(lexer)
    assert tokendefs is not None  # _resumable() checked it
    statestack = list(stack)
    statetokens = tokendefs[statestack[-1]]
    table = state_table(tokendefs, statestack[-1])
    while True:
        if (pos == 0 or text[pos - 1] == "\n") and pos not in states:
            states[pos] = tuple(statestack)
        m: re.Match[str] | None = None
        if table is not None:
            matcher = table[text[pos : pos + 1]]
            m = matcher[0](text, pos)
            if m is not None:
                rexmatch, action, new_state = statetokens[matcher[1][m.lastindex or 0]]
                if action is not None and type(action) is not _TOKEN_TYPE:
                    m = rexmatch(text, pos)  # the rule's own groups, for its action
                    assert m is not None
        else:
            for rexmatch, action, new_state in statetokens:  # noqa: B007 (used after the loop)
                m = rexmatch(text, pos)
                if m:
                    break
        if m is not None:
            if action is not None:
                if type(action) is _TOKEN_TYPE:
                    yield pos, action, m.group()
                else:
                    yield from action(lexer, m)
            pos = m.end()
            if new_state is not None:
                if isinstance(new_state, tuple):
                    for state in new_state:
                        if state == "#pop":
                            if len(statestack) > 1:
                                statestack.pop()
                        elif state == "#push":
                            statestack.append(statestack[-1])
                        else:
                            statestack.append(state)
                elif isinstance(new_state, int):
                    if abs(new_state) >= len(statestack):
                        del statestack[1:]
                    else:
                        del statestack[new_state:]
                elif new_state == "#push":
                    statestack.append(statestack[-1])
                statetokens = tokendefs[statestack[-1]]
                table = state_table(tokendefs, statestack[-1])
        else:
            if pos >= len(text):
                return
            if text[pos] == "\n":
                statestack = ["root"]
                statetokens = tokendefs["root"]
                table = state_table(tokendefs, "root")
                yield pos, Whitespace, "\n"
                pos += 1
                continue
            yield pos, Error, text[pos]
            pos += 1


def resumable_tokens(language: str, text: str) -> list[tuple[int, Any, str]] | None:
    """The tokens the highlighter's own lexing loop cuts ``text`` into, from the start
    state, for fence ``language``; None when that language is not lexed so."""
    lexer = _lexer(language)
    if lexer is None or not _resumable(lexer):
        return None
    assert isinstance(lexer, RegexLexer)
    return list(_regex_tokens(lexer, text, ROOT, {}))


def _lex(
    lexer: Lexer, lines: Sequence[str], stack: Stack
) -> tuple[list[Markup], list[Stack | None], Stack | None]:
    """Colour ``lines`` from state ``stack``.

    Returns one markup per line; per line, the state at its start when lexing can resume
    there (None where it cannot); and the state after the last line (None if unknown).
    """
    WORK.lines_lexed += len(lines)
    text = "\n".join(lines) + "\n"
    states: dict[int, Stack] = {}
    tokens: Iterator[tuple[int, Any, str]]
    resumable = _resumable(lexer)
    if resumable:
        assert isinstance(lexer, RegexLexer)
        tokens = _regex_tokens(lexer, text, stack, states)
    else:
        tokens = lexer.get_tokens_unprocessed(text)
    current: Markup = []
    result: list[Markup] = [current]
    starts: set[int] = {0}
    attributes = _ATTRIBUTES
    for index, token, value in tokens:
        if not resumable and (index == 0 or text[index - 1] == "\n"):
            starts.add(index)
        attribute = attributes.get(token)
        if attribute is None:
            attribute = _attribute(token)
        if "\n" not in value:
            if value:
                current.append((attribute, value))
            continue
        pieces = value.split("\n")
        if pieces[0]:
            current.append((attribute, pieces[0]))
        for piece in pieces[1:]:
            current = []
            result.append(current)
            if piece:
                current.append((attribute, piece))
    while len(result) < len(lines):
        result.append([])
    resume: list[Stack | None] = []
    position = 0
    for line in lines:
        if resumable:
            resume.append(states.get(position))
        elif position in starts and line[:1].strip():
            resume.append(ROOT)
        else:
            resume.append(None)
        position += len(line) + 1
    if resume:
        resume[0] = stack
    return result[: len(lines)], resume, states.get(len(text))


def _plain(line: str) -> Markup:
    return [("code", line)] if line else []


class CodeHighlighter:
    """Colours one code block line by line (see the module docstring)."""

    def __init__(self, language: str) -> None:
        self._lexer = _lexer(language)
        self._resumable = self._lexer is not None and _resumable(self._lexer)
        #: Finished lines not frozen yet.
        self._open: list[str] = []
        #: The lexer's state at the first open line.
        self._stack: Stack = ROOT
        #: Colours of the first open lines (computed when drawn, then kept).
        self._markups: list[Markup] = []
        #: The lexer's state after the lines of ``_markups`` (None: unknown).
        self._end: Stack | None = ROOT if self._resumable else None

    def copy(self) -> CodeHighlighter:
        """A highlighter in the same state, to try lines on without changing this one
        (the open lines' colours are computed first, so that both keep them)."""
        if self._lexer is not None:
            self._colour_open_lines()
        twin = CodeHighlighter.__new__(CodeHighlighter)
        twin._lexer = self._lexer
        twin._resumable = self._resumable
        twin._open = list(self._open)
        twin._stack = self._stack
        twin._markups = list(self._markups)
        twin._end = self._end
        return twin

    def _relex(self) -> tuple[list[Markup], list[Stack | None]]:
        assert self._lexer is not None
        markups, resume, end = _lex(self._lexer, self._open, self._stack)
        self._markups = list(markups)
        self._end = end if self._resumable else None
        return markups, resume

    def add(self, line: str) -> list[Markup]:
        """Take one finished line; return the lines frozen by it, in order."""
        if self._lexer is None:
            return [_plain(line)]
        self._open.append(line)
        if len(self._open) < OPEN_LINES + FREEZE_STEP:
            return []
        markups, resume = self._relex()
        limit = len(self._open) - OPEN_LINES
        cut = next((i for i in range(limit, 0, -1) if resume[i] is not None), 0)
        if cut:
            stack = resume[cut]
            assert stack is not None
        elif len(self._open) >= MAX_OPEN_LINES:
            cut, stack = limit, self._stack
        else:
            return []
        del self._open[:cut]
        self._stack = stack
        del self._markups[:cut]
        return markups[:cut]

    def _colour_open_lines(self) -> bool:
        """Give the open lines their colours, each from where the one before ended;
        False when the lexer cannot resume so (the open lines are then lexed whole)."""
        assert self._lexer is not None
        if len(self._markups) == len(self._open):
            return True
        if self._end is None:
            return False
        for line in self._open[len(self._markups) :]:
            markups, _, self._end = _lex(self._lexer, [line], self._end)
            self._markups.extend(markups)
            if self._end is None:
                return len(self._markups) == len(self._open)
        return True

    def render(self, unfinished: Sequence[str] = ()) -> list[Markup]:
        """The open lines then ``unfinished`` ones, coloured; nothing is frozen.

        The open lines keep the colours they were given line by line (a token spanning
        lines gets its colours when the lines are frozen or the block is closed).
        """
        if self._lexer is None:
            return [_plain(line) for line in unfinished]
        if not self._colour_open_lines():
            lines = [*self._open, *unfinished]
            return _lex(self._lexer, lines, self._stack)[0] if lines else []
        if not unfinished:
            return list(self._markups)
        if self._end is not None:
            if len(unfinished) == 1 and not unfinished[0]:
                return [*self._markups, []]  # an empty line has no colours, whatever the state
            return [*self._markups, *_lex(self._lexer, unfinished, self._end)[0]]
        return _lex(self._lexer, [*self._open, *unfinished], self._stack)[0]

    def finish(self) -> list[Markup]:
        """The block is closed: return the open lines coloured as a whole, and forget them."""
        if self._lexer is None or not self._open:
            return []
        markups, _ = self._relex()
        self._open.clear()
        self._stack = ROOT
        self._markups = []
        self._end = ROOT if self._resumable else None
        return markups


def highlight_lines(lines: Sequence[str], language: str) -> list[Markup]:
    """Colour a whole block's ``lines`` as streaming them line by line would."""
    highlighter = CodeHighlighter(language)
    result: list[Markup] = []
    for line in lines:
        result.extend(highlighter.add(line))
    result.extend(highlighter.finish())
    return result
