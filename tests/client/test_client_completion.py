"""Tests for ``/`` command and ``@`` file completion (acpkit_client.completion)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acpkit_client.completion import (
    MAX_FILES_SHOWN,
    MAX_FILES_WALKED,
    CommandInfo,
    Completion,
    MentionSpan,
    find_mentions,
    is_complete_command,
    mention_completions,
    shown_hint,
    slash_completions,
    split_prompt,
    walk_project,
)

COMMANDS = [
    CommandInfo("web", "Search the web", "query"),
    CommandInfo("help", "Show help", None),
    CommandInfo("Webhook", "Manage webhooks", None),
    CommandInfo("plan", "", "goal"),
]


def apply(text: str, completion: Completion) -> str:
    """Apply a completion to ``text``."""
    return text[: completion.start] + completion.replacement + text[completion.end :]


def labels(completions: list[Completion] | None) -> list[str]:
    """The labels of a list that must be open."""
    assert completions is not None
    return [c.label for c in completions]


# ---------------------------------------------------------------------------- slash


def test_slash_lists_all_commands_in_agent_order() -> None:
    """``/`` alone lists every announced command, in the agent's order."""
    assert labels(slash_completions("/", 1, COMMANDS)) == ["/web", "/help", "/Webhook", "/plan"]


def test_slash_prefix_ignores_case() -> None:
    """The typed text matches the start of the name, ignoring case."""
    assert labels(slash_completions("/WE", 3, COMMANDS)) == ["/web", "/Webhook"]
    assert labels(slash_completions("/webh", 5, COMMANDS)) == ["/Webhook"]
    assert labels(slash_completions("/eb", 3, COMMANDS)) == []


def test_slash_detail_has_description_and_hint() -> None:
    """The detail is the description, then the expected input between chevrons."""
    completions = slash_completions("/", 1, COMMANDS)
    assert completions is not None
    assert [c.detail for c in completions] == [
        "Search the web <query>",
        "Show help",
        "Manage webhooks",
        "<goal>",
    ]


@pytest.mark.parametrize(
    ("hint", "shown"),
    [
        ("query", "<query>"),
        ("<description>", "<description>"),
        ("<<x>>", "<x>"),
        ("", ""),
        ("  ", ""),
        ("<>", ""),
        (None, ""),
    ],
)
def test_a_hint_is_shown_once_between_chevrons(hint: str | None, shown: str) -> None:
    """Chevrons the agent already wrote are not doubled; an empty hint shows no ``<>``."""
    assert shown_hint(hint) == shown
    completions = slash_completions("/d", 2, [CommandInfo("do", "Do it", hint)])
    assert completions is not None
    assert completions[0].detail == ("Do it " + shown).strip()


def test_slash_trailing_space_only_with_input() -> None:
    """A command with input completes with a trailing space; one without, to its name."""
    web, help_ = slash_completions("/", 1, COMMANDS)[:2]  # type: ignore[index]
    assert apply("/", web) == "/web "
    assert apply("/", help_) == "/help"


def test_slash_replaces_whole_first_word() -> None:
    """The completion replaces the whole first word, not just up to the cursor."""
    (web,) = slash_completions("/wXYZ", 2, [COMMANDS[0]]) or []
    assert (web.start, web.end) == (0, 5)
    assert apply("/wXYZ", web) == "/web "


def test_slash_no_double_space() -> None:
    """When a space already follows the word, completing does not add a second one."""
    text = "/we agent client protocol"
    (web, _hook) = slash_completions(text, 3, COMMANDS) or []
    assert apply(text, web) == "/web agent client protocol"
    assert web.start + len(web.replacement) == len("/web ")
    (help_,) = slash_completions("/he rest", 3, COMMANDS) or []
    assert apply("/he rest", help_) == "/help rest"


def test_slash_only_as_first_character() -> None:
    """A ``/`` anywhere but the first character is just a character."""
    assert slash_completions(" /web", 2, COMMANDS) is None
    assert slash_completions("see /web", 6, COMMANDS) is None
    assert slash_completions("a/b", 2, COMMANDS) is None


def test_slash_only_while_cursor_in_first_word() -> None:
    """Once the caret leaves the first word (or sits before the ``/``), no list opens."""
    assert slash_completions("/web query", 6, COMMANDS) is None
    assert slash_completions("/web query", 0, COMMANDS) is None
    assert slash_completions("/web\nmore", 6, COMMANDS) is None
    assert labels(slash_completions("/web query", 4, COMMANDS)) == ["/web", "/Webhook"]


def test_slash_without_commands_is_a_character() -> None:
    """With no announced command, ``/`` opens nothing."""
    assert slash_completions("/", 1, []) is None


def test_cursor_outside_text_is_refused() -> None:
    """A caret outside the text is a caller bug and raises ValueError."""
    with pytest.raises(ValueError, match="outside"):
        slash_completions("/w", 5, COMMANDS)
    with pytest.raises(ValueError, match="outside"):
        mention_completions("@a", -1, ["a"])


def test_is_complete_command() -> None:
    """Enter sends when the first word already reads exactly as a command."""
    assert is_complete_command("/web", COMMANDS)
    assert is_complete_command("/web agent client protocol", COMMANDS)
    assert is_complete_command("/help", COMMANDS)
    assert not is_complete_command("/we", COMMANDS)
    assert not is_complete_command("/WEB", COMMANDS)
    assert not is_complete_command("web", COMMANDS)
    assert not is_complete_command("/", COMMANDS)
    assert not is_complete_command("/web", [])


@given(st.text(alphabet="/abwEH \n", max_size=12), st.data())
def test_slash_completion_invariants(text: str, data: st.DataObject) -> None:
    """Any list is well-formed: spans inside the text, applying gives ``/name`` first."""
    cursor = data.draw(st.integers(0, len(text)))
    completions = slash_completions(text, cursor, COMMANDS)
    if completions is None:
        return
    assert text.startswith("/")
    for completion in completions:
        assert 0 == completion.start < completion.end <= len(text)
        result = apply(text, completion)
        assert result.startswith(completion.label)
        assert is_complete_command(result, COMMANDS)


# ---------------------------------------------------------------------------- walk


def make_tree(root: Path, paths: list[str]) -> None:
    """Create empty files at ``paths`` under ``root``."""
    for relative in paths:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("", encoding="utf-8")


def test_walk_breadth_first_sorted_and_git_excluded(tmp_path: Path) -> None:
    """The walk lists files with "/", root files first, names sorted, no .git."""
    make_tree(
        tmp_path,
        [
            "b.txt",
            "a.txt",
            "src/z.py",
            "src/pkg/mod.py",
            "docs/README.md",
            ".git/HEAD",
            ".git/objects/ab/cd",
            "sub/.git",
            ".github/ci.yml",
        ],
    )
    assert walk_project(str(tmp_path)) == [
        "a.txt",
        "b.txt",
        ".github/ci.yml",
        "docs/README.md",
        "src/z.py",
        "src/pkg/mod.py",
    ]


def test_walk_is_deterministic(tmp_path: Path) -> None:
    """Two walks of the same tree give the same list."""
    make_tree(tmp_path, [f"d{i % 7}/f{i}.txt" for i in range(60)])
    assert walk_project(str(tmp_path)) == walk_project(str(tmp_path))


def test_walk_limit_default(tmp_path: Path) -> None:
    """At most MAX_FILES_WALKED (100,000) files are walked by default; a walk cut by its
    limit keeps the shallow files."""
    make_tree(tmp_path, ["top.txt"])
    deep = tmp_path / "deep"
    deep.mkdir()
    for i in range(60):
        (deep / f"f{i:05d}").touch()
    files = walk_project(str(tmp_path), max_files=50)
    assert MAX_FILES_WALKED == 100_000
    assert len(files) == 50
    assert files[0] == "top.txt"
    assert files[-1] == "deep/f00048"


def test_walk_custom_limit(tmp_path: Path) -> None:
    """max_files bounds the walk; zero gives nothing."""
    make_tree(tmp_path, ["a", "b", "c/d", "c/e"])
    assert walk_project(str(tmp_path), max_files=3) == ["a", "b", "c/d"]
    assert walk_project(str(tmp_path), max_files=0) == []


def test_walk_symlinks(tmp_path: Path) -> None:
    """Links to files are listed; links to directories are not followed (no loops)."""
    make_tree(tmp_path, ["real/file.txt"])
    os.symlink(tmp_path / "real" / "file.txt", tmp_path / "link.txt")
    os.symlink(tmp_path, tmp_path / "real" / "loop")
    os.symlink(tmp_path / "missing", tmp_path / "broken")
    assert walk_project(str(tmp_path)) == ["link.txt", "real/file.txt"]


def test_walk_missing_root(tmp_path: Path) -> None:
    """A root that does not exist gives an empty list, not an error."""
    assert walk_project(str(tmp_path / "nope")) == []


# ---------------------------------------------------------------------------- mention lists

FILES = [
    "README.md",
    "main.go",
    "main.gopher",
    "docs/README.md",
    "docs/guide.md",
    "src/readme_parser.py",
    "src/main_test.go",
    "tools/domain.txt",
]


def test_at_lists_all_files() -> None:
    """``@`` alone lists every file, in walk order."""
    assert labels(mention_completions("@", 1, FILES)) == FILES


def test_mention_name_prefix_before_path_contains() -> None:
    """Files whose basename starts with the text come first, then paths containing it."""
    assert labels(mention_completions("@main", 5, FILES)) == [
        "main.go",
        "main.gopher",
        "src/main_test.go",
        "tools/domain.txt",
    ]
    assert labels(mention_completions("@do", 3, FILES)) == [
        "tools/domain.txt",
        "docs/README.md",
        "docs/guide.md",
    ]


def test_mention_ignores_case() -> None:
    """The narrowing ignores case."""
    assert labels(mention_completions("@readme", 7, FILES)) == [
        "README.md",
        "docs/README.md",
        "src/readme_parser.py",
    ]


def test_mention_path_with_slash() -> None:
    """Text with a slash matches paths containing it."""
    assert labels(mention_completions("@docs/RE", 8, FILES)) == ["docs/README.md"]


def test_mention_completion_adds_space() -> None:
    """Taking an entry writes ``@path`` and a space, replacing what was typed."""
    text = "explain @gui"
    (guide,) = mention_completions(text, len(text), FILES) or []
    assert apply(text, guide) == "explain @docs/guide.md "
    assert (guide.start, guide.end, guide.detail) == (8, 12, "")


def test_mention_completion_in_the_middle() -> None:
    """Completing a mention typed in the middle keeps the text around it, one space only."""
    text = "see @gui and more"
    (guide,) = mention_completions(text, 8, FILES) or []
    assert apply(text, guide) == "see @docs/guide.md and more"


def test_mention_anywhere_but_not_inside_a_word() -> None:
    """``@`` opens the list at any word start (and after "("), never inside an e-mail."""
    assert mention_completions("mail me@exa", 11, FILES) is None
    assert labels(mention_completions("(@guide", 7, FILES)) == ["docs/guide.md"]
    assert labels(mention_completions("line one\n@gui", 13, FILES)) == ["docs/guide.md"]
    assert mention_completions("@guide done", 11, FILES) is None
    assert mention_completions("no mention", 3, FILES) is None


def test_mention_limit_200_shown() -> None:
    """At most 200 entries are shown, in ranking order; max_shown can lower that."""
    files = [f"dir/file{i:04d}.txt" for i in range(1000)]
    shown = mention_completions("@", 1, files)
    assert MAX_FILES_SHOWN == 200
    assert labels(shown) == files[:200]
    assert labels(mention_completions("@file09", 7, files)) == files[900:1000]
    assert labels(mention_completions("@", 1, files, max_shown=3)) == files[:3]


def test_mention_no_files_is_an_empty_list() -> None:
    """With no files, ``@`` opens an empty list (nothing to take)."""
    assert mention_completions("@", 1, []) == []


def test_mention_completion_then_found(tmp_path: Path) -> None:
    """What a completion writes is found again as a mention of that file."""
    make_tree(tmp_path, ["notes/meeting notes.md", "a.py"])
    files = walk_project(str(tmp_path))
    text = "summarise @meet"
    (entry,) = mention_completions(text, len(text), files) or []
    written = apply(text, entry)
    assert written == "summarise @notes/meeting notes.md "
    assert find_mentions(written, files) == [MentionSpan(10, 33, "notes/meeting notes.md")]


# ---------------------------------------------------------------------------- find_mentions


def test_find_mentions_basic() -> None:
    """Each @path naming a known file exactly gives a span from ``@`` to the path's end."""
    text = "explain @docs/README.md please"
    assert find_mentions(text, FILES) == [MentionSpan(8, 23, "docs/README.md")]


def test_name_must_end_the_word() -> None:
    """``@main.go`` is not ``main.gopher``, and ``@main.gopher`` does not mention main.go."""
    assert find_mentions("look at @main.go", ["main.gopher"]) == []
    assert find_mentions("look at @main.gopher", ["main.go"]) == []
    assert find_mentions("look at @main.gopher", FILES) == [MentionSpan(8, 20, "main.gopher")]
    assert find_mentions("look at @main.go", FILES) == [MentionSpan(8, 16, "main.go")]


def test_email_is_not_a_mention() -> None:
    """An e-mail address stays text, even when its domain is a file name."""
    assert find_mentions("write to bob@main.go", FILES) == []
    assert find_mentions("write to bob@example.com", ["example.com"]) == []


def test_unknown_word_stays_text() -> None:
    """An ``@word`` naming no known file is not a mention."""
    assert find_mentions("@nobody here", FILES) == []
    assert find_mentions("@", FILES) == []
    assert find_mentions("@readme.md", FILES) == []  # exact, case included


def test_mention_at_start_end_and_adjacent() -> None:
    """Mentions at the start, at the end, and one after another are all found."""
    text = "@main.go\n@README.md @docs/guide.md"
    assert find_mentions(text, FILES) == [
        MentionSpan(0, 8, "main.go"),
        MentionSpan(9, 19, "README.md"),
        MentionSpan(20, 34, "docs/guide.md"),
    ]


def test_trailing_punctuation_is_not_part_of_the_name() -> None:
    """Closing punctuation after the path ends the mention and stays text."""
    text = "see @README.md, then @main.go. Also (@docs/guide.md)!"
    assert [m.path for m in find_mentions(text, FILES)] == [
        "README.md",
        "main.go",
        "docs/guide.md",
    ]
    assert split_prompt(text, find_mentions(text, FILES))[2] == ", then "


def test_punctuation_then_letters_is_not_a_mention() -> None:
    """``@main.go,x`` is a word that does not end with the name: not a mention."""
    assert find_mentions("@main.go,x", FILES) == []
    assert find_mentions("@main.go@", FILES) == []


def test_file_names_ending_in_punctuation_win_when_known() -> None:
    """A known path that itself ends in punctuation is matched whole (longest wins)."""
    assert find_mentions("@notes. done", ["notes", "notes."]) == [MentionSpan(0, 7, "notes.")]


def test_paths_with_spaces_longest_wins() -> None:
    """A known path containing a space is found whole; a shorter known prefix is not chosen."""
    files = ["my", "my file.txt"]
    assert find_mentions("open @my file.txt now", files) == [MentionSpan(5, 17, "my file.txt")]
    assert find_mentions("open @my filer", files) == [MentionSpan(5, 8, "my")]


def test_find_mentions_accepts_any_collection() -> None:
    """Files may be given as a list, a set or a frozenset."""
    for files in (["a.py"], {"a.py"}, frozenset({"a.py"})):
        assert find_mentions("@a.py", files) == [MentionSpan(0, 5, "a.py")]
    assert find_mentions("@a.py", []) == []


# ---------------------------------------------------------------------------- split_prompt


def test_split_prompt_three_blocks() -> None:
    """Words around a mention stay text blocks: text, file, text."""
    text = "explain @docs/README.md please"
    mention = MentionSpan(8, 23, "docs/README.md")
    assert split_prompt(text, [mention]) == ["explain ", mention, " please"]


def test_split_prompt_edges() -> None:
    """No empty text pieces at the edges or between adjacent mentions; none is plain text."""
    text = "@a.py@b.py"
    spans = [MentionSpan(5, 10, "b.py"), MentionSpan(0, 5, "a.py")]
    assert split_prompt(text, spans) == [spans[1], spans[0]]
    assert split_prompt("just text", []) == ["just text"]
    assert split_prompt("", []) == []


def test_split_prompt_refuses_bad_spans() -> None:
    """Overlapping, out-of-range or mismatched spans raise ValueError."""
    with pytest.raises(ValueError, match="overlaps"):
        split_prompt("@a.py", [MentionSpan(0, 5, "a.py"), MentionSpan(2, 5, "py")])
    with pytest.raises(ValueError, match="outside"):
        split_prompt("@a", [MentionSpan(0, 5, "a.py")])
    with pytest.raises(ValueError, match="does not match"):
        split_prompt("@b.py", [MentionSpan(0, 5, "a.py")])


_WORDS = st.sampled_from(["@a.py", "@b c.md", "x@a.py", "see", "@zz", ",", "(@a.py)", "@b"])


@given(st.lists(_WORDS, max_size=8), st.lists(st.sampled_from([" ", "\n", "  "]), min_size=8))
def test_split_prompt_reassembles(words: list[str], spaces: list[str]) -> None:
    """Joining the pieces (mentions as ``@path``) gives back the typed line unchanged."""
    text = "".join(word + space for word, space in zip(words, spaces, strict=False))
    files = ["a.py", "b c.md", "b"]
    mentions = find_mentions(text, files)
    pieces = split_prompt(text, mentions)
    rebuilt = "".join(p if isinstance(p, str) else f"@{p.path}" for p in pieces)
    assert rebuilt == text
    assert all(piece != "" for piece in pieces)
    for mention in mentions:
        assert mention.start == 0 or text[mention.start - 1] in " \n("


def test_mention_completion_keeps_closing_punctuation() -> None:
    """Closing punctuation after the typed text is kept, and no space is put before it."""
    text = "(see @gu), ok"
    (guide,) = mention_completions(text, 8, FILES) or []
    assert apply(text, guide) == "(see @docs/guide.md), ok"
    assert find_mentions(apply(text, guide), FILES) == [MentionSpan(5, 19, "docs/guide.md")]
    text = "@gu."
    (guide,) = mention_completions(text, 3, FILES) or []
    assert apply(text, guide) == "@docs/guide.md."
