"""
No file of the project names a path of the machine it was written or built on.

Commands copied from a terminal (``/…/venv/bin/python -m pytest``), generated pages and
docstrings leaked the build machine's checkout, virtual environment and Python prefix into
committed files (issue 14). Such a path means nothing to a reader and breaks the example
on any other machine: the documentation writes ``python …`` from the repository root.

The paths looked for: this checkout's own path, the home directory, the Python prefix when
it is a pyenv (or any) installation under the home directory, and the known paths of the
project's development machines (checkout, shared virtual environment, pyenv root), so
that a clean clone elsewhere (CI) still catches them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent

#: The development machines' checkout, shared virtual environment and pyenv root, built
#: from pieces so that this file does not hold the paths it looks for (it is checked too).
_WORK = "/" + "work"
KNOWN_MACHINE_PATHS = (_WORK + "/main", _WORK + "/venv", "/" + "root/.pyenv")


def machine_paths() -> set[str]:
    """The paths that only make sense on this machine (and the known development ones)."""
    paths = set(KNOWN_MACHINE_PATHS)
    paths.add(str(ROOT))
    home = os.path.expanduser("~")
    if home not in ("", "/", "~"):
        paths.add(home.rstrip("/") + "/")
    for prefix in (sys.base_prefix, os.environ.get("PYENV_ROOT", "")):
        if prefix and (".pyenv" in prefix or prefix.startswith(home.rstrip("/") + "/")):
            paths.add(prefix)
    return paths


def project_files() -> list[str]:
    """The committed files, and the new ones git would commit (not the ignored ones)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an unpacked sdist): no list of committed files")
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    return sorted({name for name in out.decode().split("\0") if name})


def find_machine_paths(text: str, paths: set[str]) -> list[tuple[int, str]]:
    """``(line number, path)`` for each line of ``text`` naming one of ``paths``."""
    return [
        (number, path)
        for number, line in enumerate(text.splitlines(), 1)
        for path in sorted(paths)
        if path in line
    ]


def test_the_detector_finds_a_leaked_path() -> None:
    """A line naming the checkout or the virtual environment is reported with its number."""
    venv = KNOWN_MACHINE_PATHS[1]
    text = f"Run it::\n\n    {venv}/bin/python -m x\n" + f"see {ROOT}/docs\n"
    found = find_machine_paths(text, machine_paths())
    assert (3, venv) in found
    assert (4, str(ROOT)) in found


@pytest.mark.process
def test_no_project_file_names_a_path_of_this_machine() -> None:
    """No committed (or about to be committed) text file names a path of this machine,
    this test's own file included."""
    paths = machine_paths()
    leaks = []
    assert "tests/project/test_no_machine_paths.py" in project_files()
    for name in project_files():
        try:
            data = (ROOT / name).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            continue  # deleted in the work tree, or a submodule
        if b"\0" in data:
            continue  # binary
        text = data.decode("utf-8", errors="replace")
        leaks += [f"{name}:{line}: {path}" for line, path in find_machine_paths(text, paths)]
    assert not leaks, "paths of this machine in project files (write them generically):\n" + (
        "\n".join(leaks)
    )
