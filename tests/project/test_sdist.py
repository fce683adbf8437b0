"""
The sdist holds everything pytest and the docs build need, and tests run from it.

Built with setuptools' own PEP 517 hook (``setuptools.build_meta.build_sdist``, what
``python -m build --sdist`` calls, without the isolated environment that would need the
network), unpacked in a temporary directory, then: every file git tracks under the test,
docs, tools and benchmarks directories is in it, and a fast subset of the tests runs from
the unpacked tree. Marked ``sdist`` (about 30 s): ``-m "not sdist"`` leaves it out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent.parent
# One xdist worker runs this file's tests: its module-scoped fixture (the sdist, built) then
# runs once, not once per worker.
pytestmark = [pytest.mark.sdist, pytest.mark.xdist_group("sdist")]

#: What the tests, the docs build and CONTRIBUTING.md's instructions read, besides the
#: packages themselves.
NEEDED = (
    "setup.cfg",
    "pyproject.toml",
    "MANIFEST.in",
    "README.md",
    "CHANGELOG.md",
    "CONTRIBUTING.md",
    "LICENSE",
    "NOTICE",
    ".ci/run",
    ".ci/install-real-agents",
    ".readthedocs.yaml",
    "tests/conftest.py",
    "tests/fixtures",
    "docs/conf.py",
    "docs/index.md",
    "tools/generate_schema.py",
    "benchmarks",
)
#: Run from the unpacked sdist: the codec and framing (Hypothesis, "fast" profile), the
#: package surface, the README's commands and the machine-path grep.
FAST_SUBSET = (
    "tests/codec/test_codec.py",
    "tests/framing/test_framing.py",
    "tests/project/test_package.py",
    "tests/project/test_readme.py",
    "tests/project/test_no_machine_paths.py",
)
#: The tracked directories the sdist must hold whole.
TRACKED = ("tests", "docs", "tools", "benchmarks", ".ci", "acpkit", "acpkit_agent")


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist of this checkout, built and unpacked; the unpacked directory."""
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from setuptools import build_meta; "
            "print(build_meta.build_sdist(sys.argv[1]))",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    archive = out / built.stdout.strip().splitlines()[-1]
    unpacked = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(archive) as tar:
        tar.extractall(unpacked, filter="data")
    (top,) = unpacked.iterdir()
    return top


def _tracked(directory: str) -> list[str]:
    done = subprocess.run(
        ["git", "ls-files", "--", directory],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip("not a git checkout: nothing to compare the sdist with")
    return [line for line in done.stdout.splitlines() if (ROOT / line).exists()]


def test_sdist_holds_what_tests_and_docs_need(sdist: Path) -> None:
    """The configuration, the notices, the CI script, fixtures, docs, tools, benchmarks."""
    missing = [name for name in NEEDED if not (sdist / name).exists()]
    assert missing == []


@pytest.mark.parametrize("directory", TRACKED)
def test_sdist_holds_every_tracked_file(sdist: Path, directory: str) -> None:
    """Every file git tracks under ``directory`` is in the sdist (no manifest gaps)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    missing = [name for name in _tracked(directory) if not (sdist / name).is_file()]
    assert missing == []


def test_sdist_holds_no_build_litter(sdist: Path) -> None:
    """No bytecode, Hypothesis database, docs build or plugin cache is shipped."""
    litter = [
        str(path.relative_to(sdist))
        for path in sdist.rglob("*")
        if path.suffix == ".pyc"
        or path.name in {"__pycache__", ".hypothesis", "_build", "dropin.cache"}
    ]
    assert litter == []


def test_tests_run_from_the_sdist(sdist: Path) -> None:
    """
    A fast subset of the tests passes in the unpacked sdist, importing acpkit from the
    sdist's own files (the fixtures and the rest are checked by the file lists above).
    """
    env = dict(os.environ, PYTHONPATH=str(sdist), HYPOTHESIS_PROFILE="fast")
    env.pop("PYTEST_ADDOPTS", None)  # no coverage of the unpacked copy
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-m",
            "not process",
            *FAST_SUBSET,
        ],
        cwd=sdist,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    assert " passed" in ran.stdout
    where = subprocess.run(
        [sys.executable, "-c", "import acpkit; print(acpkit.__file__)"],
        cwd=sdist,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(sdist)
