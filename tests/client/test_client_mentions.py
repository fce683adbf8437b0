"""The ``@`` list's files as git sees them, and ``@`` mentions that name no file.

The listing (:mod:`acpkit_client.project_files`) is checked on a real git repository in a
temporary directory and on a plain directory; the window's refusal of an unresolved
mention with the widget-level harness of the terminal UI.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from twisted.internet.defer import Deferred

from acpkit import schema
from acpkit_client import cli
from acpkit_client.completion import walk_project
from acpkit_client.project_files import ProjectFiles, list_project_files
from acpkit_client.prompt import build_prompt, unlisted_mentions, unresolved_mentions
from tests.client.test_tui_window import Harness
from tests.helpers import write

NEEDS_GIT = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

BUTTON = "src/components/Button.tsx"


def node_project(root: Path) -> None:
    """A project whose ignored ``node_modules`` holds 6,000 files, more than the old
    walk's 5,000 limit, and sorts before ``src``."""
    write(root / ".gitignore", "node_modules/\n*.log\n")
    write(root / "README.md", "# app\n")
    write(root / BUTTON, "export const Button = () => null;\n")
    write(root / "debug.log")
    for package in range(60):
        folder = root / "node_modules" / f"pkg{package:02d}"
        folder.mkdir(parents=True)
        for number in range(100):
            (folder / f"f{number:03d}.js").write_bytes(b"")


def git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", *args],
        cwd=root,
        check=True,
        capture_output=True,
        env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(root)},
    )


@pytest.mark.process
@NEEDS_GIT
def test_in_a_git_repository_the_list_is_what_git_sees(tmp_path: Path) -> None:
    """In a git work tree the list holds tracked files and untracked ones that are not
    ignored; an ignored node_modules of 6,000 files does not hide the project's own files;
    a tracked file deleted from the disk is left out."""
    node_project(tmp_path)
    write(tmp_path / "gone.txt")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "README.md", ".gitignore", "gone.txt")
    (tmp_path / "gone.txt").unlink()
    listing = list_project_files(str(tmp_path))
    assert listing.source == "git" and not listing.cut
    assert set(listing.files) == {".gitignore", "README.md", BUTTON}


@pytest.mark.process
@NEEDS_GIT
def test_in_a_subdirectory_of_a_repository_paths_are_relative_to_it(tmp_path: Path) -> None:
    """A project root inside a repository lists its own files, relative to itself."""
    node_project(tmp_path)
    git(tmp_path, "init", "-q")
    listing = list_project_files(str(tmp_path / "src"))
    assert listing.source == "git" and listing.files == ("components/Button.tsx",)


@pytest.mark.process
def test_without_git_the_gitignore_files_are_honoured(tmp_path: Path) -> None:
    """Outside a git work tree (or with git missing) the walk honours each directory's
    .gitignore with git's rules: ignored directories are not entered, a deeper file's
    negation wins."""
    node_project(tmp_path)
    write(tmp_path / "src/gen/out.js")
    write(tmp_path / "src/gen/keep.js")
    write(tmp_path / "src/.gitignore", "gen/*\n!gen/keep.js\n")
    for git_command in (None, str(tmp_path / "no-such-git"), "git"):
        listing = list_project_files(str(tmp_path), git=git_command)
        assert listing.source == "walk"
        assert set(listing.files) == {
            ".gitignore",
            "README.md",
            "src/.gitignore",
            BUTTON,
            "src/gen/keep.js",
        }
    assert BUTTON in walk_project(str(tmp_path))


def test_a_cut_list_says_so_and_keeps_the_files_nearest_the_root(tmp_path: Path) -> None:
    """Past the limit the list is cut, the shallow files kept, and it says it was cut."""
    for number in range(30):
        write(tmp_path / f"deep/f{number:02d}.txt")
    write(tmp_path / "top.txt")
    listing = list_project_files(str(tmp_path), max_files=10, git=None)
    assert listing.cut and len(listing.files) == 10 and listing.files[0] == "top.txt"
    assert not list_project_files(str(tmp_path), max_files=31, git=None).cut


def test_unresolved_mentions_are_the_path_like_words_naming_no_file(tmp_path: Path) -> None:
    """``@`` words that look like paths but name no file are unresolved; files on the disk
    (ignored ones too), decorators, e-mail addresses and names are not."""
    node_project(tmp_path)
    write(tmp_path / "node_modules/pkg00/index.js")
    text = (
        "fix @src/components/Buton.tsx, see @README.md. and @node_modules/pkg00/index.js; "
        "ping @bob about @property, mail bob@example.com, and @docs/missing.md"
    )
    assert unresolved_mentions(text, str(tmp_path), []) == [
        "@src/components/Buton.tsx",
        "@docs/missing.md",
    ]
    assert unresolved_mentions("@../outside.txt", str(tmp_path / "src")) == ["@../outside.txt"]


def test_a_file_missing_from_the_list_is_still_sent_as_a_file(tmp_path: Path) -> None:
    """A mention of a file that is on the disk but not in the given list (past a limit,
    or ignored) becomes a file block, never text."""
    node_project(tmp_path)
    blocks = build_prompt(f"explain @{BUTTON}", str(tmp_path), ["README.md"])
    assert isinstance(blocks[1], schema.ResourceLinkContentBlock)
    assert blocks[1].name == "Button.tsx"


@pytest.fixture
def ui(tmp_path: Path) -> Harness:
    node_project(tmp_path)
    return Harness(tmp_path)


@pytest.mark.process
def test_the_window_refuses_an_unresolved_mention_and_sends_on_a_second_enter(
    ui: Harness,
) -> None:
    """Enter on a prompt with an ``@path`` naming no file sends nothing: a notice in the
    window names it and the input is kept; Enter again sends the text as typed."""
    ui.open()
    ui.type("fix @src/components/Buton.tsx")
    ui.press("esc", "enter")
    assert ui.agents[0].prompts == []
    assert ui.input_text == "fix @src/components/Buton.tsx"
    assert "no such file in the project: @src/components/Buton.tsx" in ui.screen()
    ui.press("enter")
    assert [block.text for block in ui.agents[0].prompts[0].prompt] == [  # type: ignore[union-attr]
        "fix @src/components/Buton.tsx"
    ]


@pytest.mark.process
def test_the_window_sends_a_resolved_mention_as_a_file(ui: Harness) -> None:
    """A typed path to a project file (no list taken) is sent as a file block at once."""
    ui.open()
    ui.type(f"fix @{BUTTON}")
    ui.press("esc", "enter")
    blocks = ui.agents[0].prompts[0].prompt
    assert not isinstance(blocks[1], schema.TextContentBlock)


def test_the_list_is_filled_when_the_listing_arrives(ui: Harness) -> None:
    """The listing runs off the UI's path: the list opens at once and shows the files
    when they come; a listing that was cut says so."""
    window = ui.open()
    pending: Deferred[ProjectFiles] = Deferred()
    window.list_files = lambda root: pending
    ui.type("@Butt")
    assert window.list_open and BUTTON not in ui.screen()
    pending.callback(ProjectFiles(files=(BUTTON,), cut=True))
    screen = ui.screen()
    assert BUTTON in screen and "the @ list holds the first 1 files" in screen


def test_a_text_file_of_unknown_type_is_sent_as_text_plain(tmp_path: Path) -> None:
    """A mentioned file whose name says nothing of its type gets ``text/plain`` when its
    content is text, and no type when it is not (as a link and embedded alike)."""
    write(tmp_path / "settings.cfg", "answer = 42\n")
    (tmp_path / "blob.dat").write_bytes(b"\x00\x01\xff")
    link = build_prompt("@settings.cfg and @blob.dat", str(tmp_path), [])[0]
    assert isinstance(link, schema.ResourceLinkContentBlock)
    assert link.mime_type == "text/plain"
    blocks = build_prompt("@blob.dat", str(tmp_path), [])
    assert isinstance(blocks[0], schema.ResourceLinkContentBlock)
    assert blocks[0].mime_type is None
    caps = schema.AgentCapabilities(
        prompt_capabilities=schema.PromptCapabilities(embedded_context=True)
    )
    (embedded,) = build_prompt("@settings.cfg", str(tmp_path), [], caps)
    assert isinstance(embedded, schema.EmbeddedResourceContentBlock)
    assert embedded.resource.mime_type == "text/plain"


def test_unlisted_mentions_are_files_on_the_disk_outside_the_list(tmp_path: Path) -> None:
    """A typed ``@.env`` that the @ list (what git sees) does not hold is unlisted."""
    write(tmp_path / ".gitignore", ".env\n")
    write(tmp_path / ".env", "TOKEN=secret\n")
    write(tmp_path / "README.md", "# app\n")
    files = walk_project(str(tmp_path))
    assert ".env" not in files
    assert unlisted_mentions("see @.env and @README.md", str(tmp_path), files) == ["@.env"]


@pytest.mark.process
def test_the_window_asks_before_sending_an_ignored_file(ui: Harness) -> None:
    """Enter on a prompt naming an ignored file (``.env``) sends nothing: a notice says the
    whole file would go to the agent; Enter again sends it."""
    write(ui.root / ".env", "TOKEN=secret\n")
    write(ui.root / ".gitignore", "node_modules/\n*.log\n.env\n")
    ui.open()
    ui.type("read @.env")
    ui.press("esc", "enter")
    assert ui.agents[0].prompts == []
    assert ui.input_text == "read @.env"
    assert "@.env: not in the @ list (git ignores it)" in ui.screen()
    ui.press("enter")
    blocks = ui.agents[0].prompts[0].prompt
    assert isinstance(blocks[1], schema.EmbeddedResourceContentBlock)
    assert blocks[1].resource.uri.endswith("/.env")


@pytest.mark.process
def test_ask_says_when_it_sends_an_ignored_file(tmp_path: Path) -> None:
    """``ask`` names on stderr a mentioned file that git ignores (its text is sent)."""
    write(tmp_path / ".gitignore", ".env\n")
    write(tmp_path / ".env", "TOKEN=secret\n")
    err = io.StringIO()
    cli._note_unlisted_mentions("read @.env", str(tmp_path), err)
    assert err.getvalue() == (
        "acpkit-client: note: @.env is not in the project's file list (git ignores it): "
        "the whole file is sent to the agent\n"
    )
