"""``/`` commands and ``@`` file mentions in the prompt input: pure functions, no UI.

Words
    A word ends at whitespace (space, tab, newline...). Nothing else ends it.

``/`` — the agent's commands
    Only when ``/`` is the *first character of the input* and the cursor is in that first
    word, and only when the agent announced commands (otherwise ``/`` is just a
    character). The text between ``/`` and the cursor is matched against the start of
    each name, ignoring case; the list keeps the agent's order. A command that takes an
    input is completed with a trailing space, one that does not is completed to its name
    alone. On the wire a command is plain text.

``@`` — a project file
    The files are the project's as git sees them (:mod:`acpkit_client.project_files`:
    ``.gitignore`` honoured). ``@`` at the start of any word (not only at the start of
    the input) opens the list;
    so may ``@`` right after opening punctuation ``( [ { " ' ` ``. An ``@`` inside a word,
    as in an e-mail address, is just a character. The text between ``@`` and the cursor
    narrows the list, ignoring case: files whose own name (basename) starts with it come
    first, then files whose path merely contains it, each group in walk order. At most
    200 are shown. Completion replaces the word with ``@<path>`` and a space; closing
    punctuation that ends the word is kept, and then no space is added (``(@gu)`` becomes
    ``(@docs/guide.md)``).

Mentions at send time (:func:`find_mentions`)
    ``@<path>`` names a known file only if the path is *exactly* a known file and the word
    ends right after it, except for closing punctuation ``. , ; : ! ? ) ] } " ' ` ``: so
    ``see @README.md, then`` mentions ``README.md`` (the comma stays text) while
    ``@main.go`` does not designate ``main.gopher``, and ``@main.gopher`` does not mention
    ``main.go``. The longest known path wins, which lets a completed path that contains
    spaces be found again. What becomes of an ``@word`` that names no known file is
    :mod:`acpkit_client.prompt`'s business (a file on the disk, or an unresolved mention).

Replacement spans
    A completion replaces the whole word the cursor is in (from ``/`` or ``@`` to the next
    whitespace; for a mention, closing punctuation ending the word is left in place, as long
    as it lies after the cursor). When the replacement ends with a space and a space
    already follows the word, that space is taken into the span, so no double space
    appears; the caret goes after ``start + len(replacement)``.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    import pathspec

__all__ = [
    "MAX_FILES_SHOWN",
    "MAX_FILES_WALKED",
    "CommandInfo",
    "Completion",
    "MentionSpan",
    "find_mentions",
    "is_complete_command",
    "mention_completions",
    "mention_words",
    "shown_hint",
    "slash_completions",
    "split_prompt",
    "walk_project",
]

#: At most this many files are walked by :func:`walk_project` (and listed for ``@``).
MAX_FILES_WALKED = 100_000
#: At most this many files are offered by :func:`mention_completions`.
MAX_FILES_SHOWN = 200

#: Characters that may come right before the ``@`` of a mention, in the same word.
OPENING_PUNCTUATION = frozenset("([{\"'`")
#: Characters that may end a mention's word after the path without being part of it.
CLOSING_PUNCTUATION = frozenset(".,;:!?)]}\"'`")


@attrs.frozen
class CommandInfo:
    """A command the agent announced in ``available_commands_update``."""

    #: The name, without the ``/``.
    name: str
    #: The agent's description of it.
    description: str
    #: What the command expects after its name, or ``None`` when it takes no input.
    input_hint: str | None = None


def shown_hint(hint: str | None) -> str:
    """
    A command's input hint as shown, ``<hint>``: the brackets an agent already put around
    it are not doubled (``<description>`` stays so), and an empty hint shows nothing.
    """
    text = (hint or "").strip()
    while text.startswith("<") and text.endswith(">"):
        text = text[1:-1].strip()
    return f"<{text}>" if text else ""


@attrs.frozen
class Completion:
    """One entry of an open list: what to show and how to apply it.

    Applying it replaces ``text[start:end]`` with ``replacement``.
    """

    #: What the list shows first: ``/name`` or the file's relative path.
    label: str
    #: What it shows next: the description and ``<hint>`` of a command; empty for a file.
    detail: str
    #: The text that replaces the typed token, trailing space included when the rule adds one.
    replacement: str
    #: Start of the span of the input text to replace.
    start: int
    #: End (exclusive) of the span of the input text to replace.
    end: int


@attrs.frozen
class MentionSpan:
    """An ``@path`` in the prompt text that names a known file."""

    #: Index of the ``@``.
    start: int
    #: Index just after the path.
    end: int
    #: The file's path relative to the project root, with ``/``.
    path: str


def _word_end(text: str, index: int) -> int:
    """Return the index of the first whitespace at or after ``index`` (or ``len(text)``)."""
    while index < len(text) and not text[index].isspace():
        index += 1
    return index


def _word_start(text: str, index: int) -> int:
    """Return the index just after the last whitespace before ``index`` (or 0)."""
    while index > 0 and not text[index - 1].isspace():
        index -= 1
    return index


def _span_end(text: str, end: int, replacement: str) -> int:
    """Take one following space into the span when the replacement already ends with one."""
    if replacement.endswith(" ") and text[end : end + 1] == " ":
        return end + 1
    return end


def _check_cursor(text: str, cursor: int) -> None:
    """Refuse a cursor outside the text."""
    if not 0 <= cursor <= len(text):
        raise ValueError(f"cursor {cursor} is outside the text (length {len(text)})")


def slash_completions(
    text: str, cursor: int, commands: Sequence[CommandInfo]
) -> list[Completion] | None:
    """Return the command list to show for ``text`` with the caret at ``cursor``.

    ``None`` means no list opens: no command was announced, ``/`` is not the first
    character, or the cursor is not in the first word (after the ``/``). An empty list
    means the list is open but nothing matches.
    """
    _check_cursor(text, cursor)
    if not commands or not text.startswith("/"):
        return None
    end = _word_end(text, 0)
    if not 1 <= cursor <= end:
        return None
    typed = text[1:cursor].casefold()
    completions = []
    for command in commands:
        if not command.name.casefold().startswith(typed):
            continue
        takes_input = command.input_hint is not None
        replacement = f"/{command.name} " if takes_input else f"/{command.name}"
        detail = command.description
        hint = shown_hint(command.input_hint)
        if hint:
            detail = f"{detail} {hint}" if detail else hint
        completions.append(
            Completion(
                label=f"/{command.name}",
                detail=detail,
                replacement=replacement,
                start=0,
                end=_span_end(text, end, replacement),
            )
        )
    return completions


def is_complete_command(text: str, commands: Sequence[CommandInfo]) -> bool:
    """Tell whether the first word of ``text`` already reads exactly as a command.

    That is when ``Enter`` sends instead of completing. The comparison is exact (case
    included); ``text`` must start with ``/``.
    """
    if not text.startswith("/"):
        return False
    word = text[1 : _word_end(text, 0)]
    return any(command.name == word for command in commands)


def _read_ignore_file(directory: str) -> pathspec.GitIgnoreSpec | None:
    """The patterns of ``directory``'s ``.gitignore``, if it has a readable one."""
    try:
        with open(os.path.join(directory, ".gitignore"), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    import pathspec  # on the first .gitignore read: ``ask`` without mentions needs none

    spec = pathspec.GitIgnoreSpec.from_lines(lines)
    return spec if len(spec) else None


def _ignored(rules: Sequence[tuple[str, pathspec.GitIgnoreSpec]], path: str) -> bool:
    """Whether ``path`` (relative to the root, ``/`` at the end for a directory) is ignored:
    the deepest ``.gitignore`` with a pattern that matches decides, like git."""
    for base, spec in reversed(rules):
        result = spec.check_file(path[len(base) :])
        if result.include is not None:
            return bool(result.include)
    return False


def walk_project(root: str, *, max_files: int = MAX_FILES_WALKED) -> list[str]:
    """List the project's files, relative to ``root`` with ``/``, at most ``max_files``.

    The walk is breadth first (a directory's files before those of deeper directories,
    names sorted within a directory), so when the limit cuts it the files nearest the
    root are kept. ``.git`` (directory or file) is skipped, and so is what a
    ``.gitignore`` on the way ignores (git's pattern rules, a deeper file's patterns
    winning; an ignored directory is not entered). Symbolic links to directories are
    not followed (links to files are listed), unreadable directories are skipped.
    """
    files: list[str] = []
    if max_files <= 0:
        return files
    Rules = tuple[tuple[str, "pathspec.GitIgnoreSpec"], ...]
    pending: deque[tuple[str, str, Rules]] = deque([(root, "", ())])
    while pending:
        directory, prefix, rules = pending.popleft()
        spec = _read_ignore_file(directory)
        if spec is not None:
            rules = (*rules, (prefix, spec))
        try:
            with os.scandir(directory) as scan:
                entries = sorted(scan, key=lambda entry: entry.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name == ".git":
                continue
            relative = prefix + entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    if not _ignored(rules, relative + "/"):
                        pending.append((entry.path, relative + "/", rules))
                    continue
                if not entry.is_file():
                    continue
            except OSError:
                continue
            if _ignored(rules, relative):
                continue
            files.append(relative)
            if len(files) >= max_files:
                return files
    return files


def _mention_start(text: str, cursor: int) -> int | None:
    """Return the index of the ``@`` that starts the mention the cursor is typing, if any."""
    start = _word_start(text, cursor)
    while start < cursor and text[start] in OPENING_PUNCTUATION:
        start += 1
    if start < cursor and text[start] == "@":
        return start
    return None


def mention_completions(
    text: str, cursor: int, files: Sequence[str], *, max_shown: int = MAX_FILES_SHOWN
) -> list[Completion] | None:
    """Return the file list to show for ``text`` with the caret at ``cursor``.

    ``None`` means no list opens: the cursor is not in a word that starts with ``@``
    (see the module docstring). The list may be empty when nothing matches.
    """
    _check_cursor(text, cursor)
    at = _mention_start(text, cursor)
    if at is None:
        return None
    typed = text[at + 1 : cursor].casefold()
    by_name: list[str] = []
    by_path: list[str] = []
    for path in files:
        folded = path.casefold()
        if folded.rpartition("/")[2].startswith(typed):
            by_name.append(path)
        elif typed in folded:
            by_path.append(path)
    end = _word_end(text, cursor)
    while end > cursor and text[end - 1] in CLOSING_PUNCTUATION:
        end -= 1
    space = "" if text[end : end + 1] in CLOSING_PUNCTUATION and end < len(text) else " "
    completions = []
    for path in (by_name + by_path)[: max(max_shown, 0)]:
        replacement = f"@{path}{space}"
        completions.append(
            Completion(
                label=path,
                detail="",
                replacement=replacement,
                start=at,
                end=_span_end(text, end, replacement),
            )
        )
    return completions


def _is_mention_start(text: str, index: int) -> bool:
    """Tell whether the ``@`` at ``index`` starts a word (possibly after opening punctuation)."""
    before = index
    while before > 0 and text[before - 1] in OPENING_PUNCTUATION:
        before -= 1
    return before == 0 or text[before - 1].isspace()


def _ends_word(text: str, index: int) -> bool:
    """Tell whether only closing punctuation lies between ``index`` and the word's end."""
    end = _word_end(text, index)
    return all(char in CLOSING_PUNCTUATION for char in text[index:end])


def find_mentions(text: str, files: Collection[str]) -> list[MentionSpan]:
    """Find each ``@path`` of ``text`` that names a file of ``files`` exactly.

    The rules are in the module docstring: the ``@`` starts a word, the path is exactly
    a known file, and nothing but closing punctuation follows it in its word; the longest
    such path wins. Spans come in text order and never overlap.
    """
    known = files if isinstance(files, set | frozenset) else frozenset(files)
    if not known:
        return []
    longest = max(len(path) for path in known)
    mentions: list[MentionSpan] = []
    index = text.find("@")
    while index != -1:
        found = None
        if _is_mention_start(text, index):
            first = index + 1
            for end in range(min(len(text), first + longest), first, -1):
                if text[first:end] in known and _ends_word(text, end):
                    found = MentionSpan(start=index, end=end, path=text[first:end])
                    break
        if found is not None:
            mentions.append(found)
            index = text.find("@", found.end)
        else:
            index = text.find("@", index + 1)
    return mentions


def mention_words(text: str) -> list[tuple[int, str]]:
    """Each ``@word`` of ``text`` that could be a mention: the index of its ``@`` and what
    follows it up to the next whitespace (closing punctuation included), in text order."""
    words: list[tuple[int, str]] = []
    index = text.find("@")
    while index != -1:
        if _is_mention_start(text, index):
            end = _word_end(text, index)
            words.append((index, text[index + 1 : end]))
            index = text.find("@", end)
        else:
            index = text.find("@", index + 1)
    return words


def split_prompt(text: str, mentions: Sequence[MentionSpan]) -> list[str | MentionSpan]:
    """Cut ``text`` into text pieces and mentions, in order, dropping empty pieces.

    ``"explain @docs/README.md please"`` gives ``["explain ", <mention>, " please"]``.
    Raises ``ValueError`` when a span lies outside the text, overlaps another, or does
    not read ``@<path>``.
    """
    pieces: list[str | MentionSpan] = []
    position = 0
    for mention in sorted(mentions, key=lambda span: span.start):
        if mention.start < position or mention.end > len(text):
            raise ValueError(f"mention {mention!r} overlaps another or lies outside the text")
        if text[mention.start : mention.end] != f"@{mention.path}":
            raise ValueError(f"mention {mention!r} does not match the text")
        if mention.start > position:
            pieces.append(text[position : mention.start])
        pieces.append(mention)
        position = mention.end
    if position < len(text):
        pieces.append(text[position:])
    return pieces
