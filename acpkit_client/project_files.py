"""The project's files as git sees them: what the ``@`` list offers.

=============================  =============================================================
the project root is in a git   ``git ls-files --cached --others --exclude-standard``: tracked
work tree                      files and untracked ones that are not ignored (``.gitignore``
                               files, ``.git/info/exclude``, the user's global excludes), as
                               git itself decides; files deleted from the disk and
                               submodules are left out
not in a git work tree, or     the directories are walked and each directory's
``git`` is missing or fails    ``.gitignore`` is honoured with git's own pattern rules (the
                               ``pathspec`` library); ``.git`` is skipped, symbolic links to
                               directories are not followed
more than                      the files nearest the root are kept (fewest ``/`` first, then
:data:`MAX_PROJECT_FILES`      by path) and :attr:`ProjectFiles.cut` says the list was cut
=============================  =============================================================

Listing a large project takes a while: :func:`load_project_files` does it off the UI's
path (in a thread while the reactor runs).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable

import attrs
from twisted.internet.defer import Deferred, succeed
from twisted.internet.threads import deferToThread
from twisted.logger import Logger

from acpkit_client.completion import MAX_FILES_WALKED, walk_project

__all__ = [
    "GIT_TIMEOUT",
    "MAX_PROJECT_FILES",
    "ProjectFiles",
    "list_project_files",
    "load_project_files",
]

log = Logger()

#: At most this many files are listed (the list says when it was cut).
MAX_PROJECT_FILES = MAX_FILES_WALKED
#: Seconds ``git ls-files`` may take before the directories are walked instead.
GIT_TIMEOUT = 60.0


@attrs.frozen
class ProjectFiles:
    """The files of a project, relative to its root with ``/``."""

    files: tuple[str, ...]
    #: True when there were more than the limit and only the first ones are kept.
    cut: bool = False
    #: ``"git"`` or ``"walk"``: how the list was made.
    source: str = "walk"


def _nearest_first(path: str) -> tuple[int, str]:
    return (path.count("/"), path)


def _git_files(root: str, git: str | None) -> list[str] | None:
    """The files ``git ls-files`` lists under ``root``; None when git cannot say."""
    executable = shutil.which(git or "git")
    if executable is None:
        return None
    try:
        completed = subprocess.run(
            [executable, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=GIT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as e:
        log.info("git ls-files failed in {root}: {error}", root=root, error=e)
        return None
    if completed.returncode != 0:
        return None
    names = completed.stdout.decode("utf-8", errors="surrogateescape").split("\0")
    seen: set[str] = set()
    files = []
    for name in names:
        if not name or name in seen:
            continue
        seen.add(name)
        if os.path.isfile(os.path.join(root, name)):
            files.append(name)
    return files


def list_project_files(
    root: str, *, max_files: int = MAX_PROJECT_FILES, git: str | None = "git"
) -> ProjectFiles:
    """List the project's files (see the module docstring); ``git=None`` never asks git."""
    files = _git_files(root, git) if git is not None else None
    if files is not None:
        files.sort(key=_nearest_first)
        return ProjectFiles(
            files=tuple(files[: max(max_files, 0)]), cut=len(files) > max_files, source="git"
        )
    walked = walk_project(root, max_files=max_files + 1)
    return ProjectFiles(files=tuple(walked[:max_files]), cut=len(walked) > max_files)


def _off_the_ui_path(work: Callable[[], ProjectFiles]) -> Deferred[ProjectFiles]:
    """Run ``work`` in a thread while the reactor runs; at once otherwise (headless use)."""
    from twisted.internet import reactor

    if getattr(reactor, "running", False):
        return deferToThread(work)
    return succeed(work())


def load_project_files(root: str) -> Deferred[ProjectFiles]:
    """:func:`list_project_files` of ``root``, off the UI's path."""
    return _off_the_ui_path(lambda: list_project_files(root))
