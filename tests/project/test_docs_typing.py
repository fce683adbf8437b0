"""
The documentation's Python code type-checks with ``mypy --strict`` (the project's
configuration): every example program of ``docs/examples/`` and every ```python sample of
the pages that is run (``tests/project/test_docs_samples.py``; a sample that ``continue``s another
is checked with what it continues, as it runs).  Readers copy this code; it must be
the typed code we ask of them.

One mypy run over all of it (``mypy.api``), with its cache in the temporary directory.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import attrs
import pytest

from tests.project.test_docs_samples import EXAMPLES, ROOT, SAMPLES, Sample, _namespace_chain

mypy_api = pytest.importorskip("mypy.api")

_ERROR = re.compile(r"^(?P<file>[^:]+\.py):(?P<line>\d+): error: (?P<text>.*)$")


@attrs.frozen
class _Part:
    """Where one sample starts in a checked file."""

    sample: Sample
    first_line: int  # 1-based, in the file


def _checked_chains() -> list[list[Sample]]:
    """Each run sample with what it continues; a sample continued later is checked there."""
    chains = []
    for i, sample in enumerate(SAMPLES):
        if sample.marker == "skip":
            continue
        following = SAMPLES[i + 1] if i + 1 < len(SAMPLES) else None
        if following and following.page == sample.page and following.marker == "continue":
            continue
        chains.append(_namespace_chain(sample))
    return chains


def _write_chain(chain: list[Sample], path: Path) -> list[_Part]:
    parts, lines = [], 0
    for sample in chain:
        parts.append(_Part(sample, lines + 1))
        lines += sample.code.count("\n") + 1
    path.write_text("\n".join(s.code for s in chain), encoding="utf-8")
    return parts


def _where(parts: list[_Part], line: int) -> str:
    """``docs/page.md:LINE`` for a line of a checked chain file."""
    part = max((p for p in parts if p.first_line <= line), key=lambda p: p.first_line)
    # The code starts on the line after the opening fence.
    return f"docs/{part.sample.page}:{part.sample.line + line - part.first_line + 1}"


def _cache_dir() -> str:
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.path.join(tempfile.gettempdir(), f"acpkit-tests-mypy-cache-{uid}")


def test_examples_and_samples_pass_mypy_strict(tmp_path: Path) -> None:
    """docs/examples/**/*.py and the run samples of every page pass mypy --strict."""
    examples = sorted(str(p) for p in EXAMPLES.rglob("*.py"))
    assert examples, "no example programs found"
    chains = _checked_chains()
    assert any(chain[-1].page.startswith("tutorials/") for chain in chains)
    files: dict[str, list[_Part]] = {}
    for n, chain in enumerate(chains):
        path = tmp_path / f"docs_sample_{n}.py"
        files[path.name] = _write_chain(chain, path)
    # From the checkout's root (an editable install's import hook is invisible to mypy);
    # docs/examples on the path, as the samples run with it importable.
    here = os.getcwd()
    os.chdir(ROOT)
    try:
        stdout, stderr, _status = mypy_api.run(
            [
                "--config-file",
                str(ROOT / "pyproject.toml"),
                "--cache-dir",
                _cache_dir(),
                "--no-error-summary",
                "--show-error-codes",
                "--hide-error-context",
                # Errors in acpkit itself are `python -m mypy`'s to report, not this test's.
                "--follow-imports=silent",
                *examples,
                *(str(tmp_path / name) for name in files),
            ]
        )
    finally:
        os.chdir(here)
    assert not stderr.strip(), stderr
    errors = []
    for line in stdout.splitlines():
        m = _ERROR.match(line)
        if m is None:
            continue
        name = Path(m["file"]).name
        where = _where(files[name], int(m["line"])) if name in files else m["file"]
        errors.append(f"{where}: {m['text']}")
    assert errors == [], "mypy --strict on the docs' code:\n" + "\n".join(errors)
