"""
Every ```python sample in ``docs/**/*.md`` runs.

A sample is run with ``exec`` in a fresh namespace, in a temporary working directory,
with ``docs/examples`` importable (as if it were saved next to the example programs);
then the functions named ``test_*`` it defined are called (samples may be tests).
A MyST comment on the line right before the fence changes that:

- ``<!-- sample: skip (reason) -->``: not run (a fragment, an API synopsis...); the
  reason is required;
- ``<!-- sample: continue -->``: run in the namespace of the page's previous sample (a
  tutorial that builds a program step by step);
- ``<!-- sample: subprocess -->``: run as ``python sample.py`` (whole programs that start
  a reactor); samples that call ``reactor.run()`` or ``react(`` are run that way anyway.

Whole example programs live in ``docs/examples/`` and are shown with ``{literalinclude}``
(they are run by ``tests/project/test_docs_examples.py``): every include must name an existing
file, and every example must be shown by some page.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

ROOT = Path(__file__).parent.parent.parent
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"

_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$", re.MULTILINE
)
_MARKER = re.compile(r"^<!--\s*sample:\s*(?P<kind>[a-z]+)\s*(?:\((?P<reason>.*)\))?\s*-->$")
_PYTHON_INFOS = {"python", "py", "python3", "{code-block} python", "{code} python"}
_REACTOR_STARTERS = ("reactor.run(", "react(")


@attrs.frozen
class Sample:
    """One fenced Python block of a page."""

    page: str  # relative to docs/
    line: int  # 1-based line of the opening fence
    code: str
    marker: str | None  # skip, continue, subprocess, or None
    reason: str | None

    @property
    def id(self) -> str:
        """``page.md:LINE``."""
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    """Every Markdown page of the site (the build output excluded)."""
    return sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.relative_to(DOCS).parts)


def extract(text: str, page: str) -> list[Sample]:
    """The Python samples of one page, with the marker (if any) right before each."""
    samples: list[Sample] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        fence, info, indent = m["fence"], m["info"].strip(), m["indent"]
        end = i + 1
        while end < len(lines):
            close = lines[end].strip()
            if close.startswith(fence[0] * len(fence)) and set(close) == {fence[0]}:
                break
            end += 1
        if info.lower() in _PYTHON_INFOS:
            body = [ln[len(indent) :] if ln.startswith(indent) else ln for ln in lines[i + 1 : end]]
            # Directive options (``:caption: ...``) at the top of a ``{code-block}``.
            while body and info.startswith("{") and body[0].startswith(":"):
                body.pop(0)
            prev = next((ln.strip() for ln in reversed(lines[:i]) if ln.strip()), "")
            marker = _MARKER.match(prev)
            samples.append(
                Sample(
                    page=page,
                    line=i + 1,
                    code="\n".join(body) + "\n",
                    marker=marker["kind"] if marker else None,
                    reason=marker["reason"] if marker else None,
                )
            )
        i = end + 1
    return samples


def all_samples() -> list[Sample]:
    """Every Python sample of every page, in page order."""
    found: list[Sample] = []
    for path in pages():
        found.extend(extract(path.read_text(encoding="utf-8"), str(path.relative_to(DOCS))))
    return found


SAMPLES = all_samples()


def _namespace_chain(sample: Sample) -> list[Sample]:
    """The samples to run, in order, for ``sample`` (itself and what it continues)."""
    same_page = [s for s in SAMPLES if s.page == sample.page and s.line <= sample.line]
    chain = [same_page.pop()]
    while chain[0].marker == "continue" and same_page:
        chain.insert(0, same_page.pop())
    return [s for s in chain if s.marker != "skip"]


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("ACPKIT_TRACE", None)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(EXAMPLES), str(ROOT), env.get("PYTHONPATH", "")])
    )
    return env


def _fail_help(sample: Sample) -> str:
    return (
        f"docs/{sample.id}: this ```python sample failed. Make it run on its own, or put "
        "`<!-- sample: skip (why) -->` (or `continue`, `subprocess`) on the line before "
        "its fence."
    )


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.id for s in SAMPLES])
def test_sample_runs(sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each unmarked sample runs without error (skips carry a reason)."""
    if sample.marker == "skip":
        assert sample.reason and sample.reason.strip(), f"docs/{sample.id}: skip needs a reason"
        pytest.skip(f"sample: skip ({sample.reason})")
    assert sample.marker in (None, "continue", "subprocess"), (
        f"docs/{sample.id}: unknown sample marker {sample.marker!r}"
    )
    chain = _namespace_chain(sample)
    code = "\n".join(s.code for s in chain)
    if sample.marker == "subprocess" or any(s in code for s in _REACTOR_STARTERS):
        script = tmp_path / "sample.py"
        script.write_text(code, encoding="utf-8")
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=_child_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, (
            f"{_fail_help(sample)}\nexit status {done.returncode}\n"
            f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
        )
        return
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    namespace: dict[str, Any] = {"__name__": "__docs_sample__"}
    for part in chain:
        try:
            exec(compile(part.code, f"docs/{part.id}", "exec"), namespace)
        except Exception as error:
            raise AssertionError(f"{_fail_help(part)}\n{type(error).__name__}: {error}") from error
    tests = [
        fn
        for name, fn in namespace.items()
        if name.startswith("test_")
        and inspect.isfunction(fn)
        and fn.__module__ == "__docs_sample__"
    ]
    for fn in tests:
        try:
            fn()
        except Exception as error:
            message = (
                f"{_fail_help(sample)}\n{fn.__name__}() failed: {type(error).__name__}: {error}"
            )
            raise AssertionError(message) from error


def test_markers_name_a_sample() -> None:
    """A ``<!-- sample: ... -->`` comment is always followed by a Python sample."""
    marked = {(s.page, s.line) for s in SAMPLES if s.marker is not None}
    stray: list[str] = []
    for path in pages():
        page = str(path.relative_to(DOCS))
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            if _MARKER.match(line.strip()):
                nxt = next(
                    (n for n in range(number, len(lines)) if lines[n].strip()), len(lines) - 1
                )
                if (page, nxt + 1) not in marked:
                    stray.append(f"docs/{page}:{number}")
    assert stray == [], f"sample markers not followed by a ```python fence: {stray}"


_INCLUDE = re.compile(r"^[ \t]*(?:`{3,}|~{3,}|:{3,})\{literalinclude\}[ \t]+(\S+)", re.MULTILINE)


def _includes() -> dict[Path, list[str]]:
    """Each file some page includes, with the pages that include it."""
    found: dict[Path, list[str]] = {}
    for path in pages():
        for target in _INCLUDE.findall(path.read_text(encoding="utf-8")):
            resolved = (
                DOCS / target.lstrip("/") if target.startswith("/") else path.parent / target
            ).resolve()
            found.setdefault(resolved, []).append(str(path.relative_to(DOCS)))
    return found


def test_literalincludes_exist() -> None:
    """Every ``{literalinclude}`` names an existing file."""
    missing = {str(t): p for t, p in _includes().items() if not t.is_file()}
    assert missing == {}


def test_every_example_is_shown() -> None:
    """Every program in ``docs/examples/`` is included by at least one page."""
    shown = set(_includes())
    examples = {
        p.resolve()
        for p in EXAMPLES.rglob("*")
        if p.is_file() and p.suffix in (".py", ".toml") and "__pycache__" not in p.parts
    }
    assert sorted(str(p.relative_to(EXAMPLES.resolve())) for p in examples - shown) == []


def test_extract_reads_markers_and_fences() -> None:
    """The extractor finds python fences (not others), their lines and their markers."""
    text = (
        "# Page\n\n"
        "<!-- sample: skip (a synopsis) -->\n"
        "```python\nf(x) -> y\n```\n\n"
        "```console\n$ ls\n```\n\n"
        "````{code-block} python\n:caption: c\nx = 1\n````\n\n"
        "<!-- sample: continue -->\n\n"
        "~~~py\nassert x == 1\n~~~\n"
    )
    samples = extract(text, "p.md")
    assert [(s.line, s.marker, s.reason, s.code) for s in samples] == [
        (4, "skip", "a synopsis", "f(x) -> y\n"),
        (12, None, None, "x = 1\n"),
        (19, "continue", None, "assert x == 1\n"),
    ]
