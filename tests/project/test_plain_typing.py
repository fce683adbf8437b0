"""
The documentation's code type-checks for a user who knows nothing of ``mypy_zope``: plain
``mypy --strict`` (no plugin) and ``pyright`` accept every example program of
``docs/examples/``, every run ```python sample of the pages and the README's agent.
Without the plugin, neither checker knows that an :class:`~acpkit.connection.Agent`
subclass provides ``IAgent``, so the entry points (``run_agent``, ``run_client``,
``AgentConnection``, ``serve_stdio``...) name the base classes in their signatures.

Each checker runs once, as a child process, over copies of that code in a temporary
directory (with ``docs/examples`` copied beside them, as the samples import them).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.project.test_docs_samples import EXAMPLES, ROOT
from tests.project.test_docs_typing import _checked_chains, _write_chain
from tests.project.test_readme_agent import readme_agent

pytestmark = pytest.mark.process

# Plain strict mypy: no plugins; the project's own exceptions only (untyped libraries, and
# calls to Twisted's untyped functions such as ServiceMaker and Service.startService, as
# pyproject.toml allows them).
_MYPY_INI = """\
[mypy]
python_version = 3.11
strict = True
disallow_untyped_calls = False
follow_imports = silent
show_error_codes = True
[mypy-treq.*,urwid.*,pygments.*,acp.*,jsonschema.*]
ignore_missing_imports = True
"""


def _user_code(where: Path) -> list[str]:
    """Copy what a user reads into ``where``; the files to check, relative to it."""
    shutil.copytree(EXAMPLES, where, dirs_exist_ok=True)
    files = sorted(str(p.relative_to(where)) for p in where.rglob("*.py"))
    (where / "readme_agent.py").write_text(readme_agent(), encoding="utf-8")
    files.append("readme_agent.py")
    for n, chain in enumerate(_checked_chains()):
        _write_chain(chain, where / f"docs_sample_{n}.py")
        files.append(f"docs_sample_{n}.py")
    return files


def _env() -> dict[str, str]:
    # The checkout on the path whether the install is editable or not.
    return {**os.environ, "MYPYPATH": str(ROOT), "PYTHONPATH": str(ROOT)}


def test_docs_code_passes_plain_mypy_strict(tmp_path: Path) -> None:
    """``mypy --strict`` with no plugin reports no error in the docs' code."""
    pytest.importorskip("mypy")
    files = _user_code(tmp_path)
    (tmp_path / "mypy.ini").write_text(_MYPY_INI, encoding="utf-8")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            "mypy.ini",
            "--cache-dir",
            ".cache",
            *files,
        ],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert "plugin" not in (tmp_path / "mypy.ini").read_text()
    assert result.returncode == 0, result.stdout + result.stderr


def _pyright() -> str:
    """The pyright command (the PyPI package's, which fetches its Node part once)."""
    found = shutil.which(
        "pyright",
        path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    )
    if found is None:
        pytest.skip("pyright is not installed (pip install pyright: the test extra has it)")
    probe = subprocess.run([found, "--version"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"pyright cannot run here (offline?): {probe.stderr.strip()[:200]}")
    return found


def test_docs_code_passes_pyright(tmp_path: Path) -> None:
    """``pyright`` (its standard mode) reports no error in the docs' code."""
    pyright = _pyright()
    files = _user_code(tmp_path)
    config = {"pythonVersion": "3.11", "extraPaths": [str(ROOT)], "include": files}
    (tmp_path / "pyrightconfig.json").write_text(json.dumps(config), encoding="utf-8")
    result = subprocess.run(
        [pyright, "--pythonpath", sys.executable, "--outputjson"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    report = json.loads(result.stdout)
    errors = [
        f"{Path(d['file']).name}:{d['range']['start']['line'] + 1}: {d['message']}"
        for d in report["generalDiagnostics"]
        if d["severity"] == "error"
    ]
    assert errors == [], "\n".join(errors)
    assert report["summary"]["filesAnalyzed"] >= len(files)
