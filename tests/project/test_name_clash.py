"""
Another distribution's ``acpkit`` package (the PyPI project ``acpkit`` is unrelated to us and
installs its own top-level ``acpkit/``) is named in one line by our commands, which then exit
2, instead of failing deep inside an import.

The clash is simulated in a subprocess: a temporary directory put first on ``PYTHONPATH``
holds a foreign ``acpkit/__init__.py`` (which fails loudly if anything imports it) and the
``acpkit-0.1.dist-info`` of its distribution, as pip would install it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from acpkit_client import launch

ROOT = Path(__file__).resolve().parent.parent.parent

FOREIGN_INIT = 'raise ImportError("the foreign acpkit package was imported")\n'


def foreign_acpkit(tmp_path: Path, *, top_level: bool = True, dist_info: bool = True) -> Path:
    """
    A ``sys.path`` entry holding a foreign ``acpkit`` package and, with ``dist_info``, the
    ``acpkit-0.1.dist-info`` that owns it (with ``top_level.txt`` or, as hatchling and flit
    build wheels, with only its ``RECORD``).
    """
    entry = tmp_path / "site"
    package = entry / "acpkit"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(FOREIGN_INIT)
    (package / "client.py").write_text("")
    if dist_info:
        info = entry / "acpkit-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acpkit\nVersion: 0.1\n")
        (info / "RECORD").write_text(
            "acpkit/__init__.py,,\nacpkit/client.py,,\n"
            "acpkit-0.1.dist-info/METADATA,,\nacpkit-0.1.dist-info/RECORD,,\n"
        )
        if top_level:
            (info / "top_level.txt").write_text("acpkit\n")
    return entry


def run_with(entry: Path | None, argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """
    Run ``argv`` in ``cwd`` (not the checkout, which ``python -c`` would put first on
    ``sys.path``) with ``entry`` first on ``PYTHONPATH`` and our checkout after it.
    """
    env = dict(os.environ)
    paths = [str(entry)] if entry is not None else []
    env["PYTHONPATH"] = os.pathsep.join([*paths, str(ROOT)])
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


def console_script(name: str) -> str:
    """The installed console script ``name`` of the running environment."""
    script = Path(sys.executable).parent / name
    if not script.exists():
        pytest.skip(f"{name} is not installed beside {sys.executable}")
    return str(script)


def assert_clash_reported(result: subprocess.CompletedProcess[str], command: str) -> None:
    """Exit 2 and exactly one line on stderr naming the other distribution and the fix."""
    assert result.returncode == launch.CLASH_EXIT_STATUS, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith(f"{command}: cannot start: "), line
    assert "'acpkit' 0.1" in line
    assert "python -m pip uninstall acpkit" in line
    assert "separate virtual environment" in line
    assert "foreign acpkit package was imported" not in result.stderr
    assert result.stdout == ""


def call(function: str) -> list[str]:
    """
    A Python command line calling a launcher function as its console script does (with
    ``--help``, so that a missed clash prints the usage instead of opening the UI).
    """
    code = (
        f"import sys; sys.argv[1:] = ['--help']; "
        f"from acpkit_client.launch import {function}; sys.exit({function}())"
    )
    return [sys.executable, "-c", code]


def test_our_own_acpkit_is_no_clash() -> None:
    """In this environment the ``acpkit`` Python imports is ours: no problem reported."""
    assert launch.acpkit_owner_problem() is None


@pytest.mark.process
def test_the_check_imports_no_acpkit(tmp_path: Path) -> None:
    """Importing the launcher and checking ownership leaves ``acpkit`` unimported."""
    code = (
        "import sys; from acpkit_client.launch import acpkit_owner_problem as p; "
        "assert p() is None; print(sorted(m for m in sys.modules if m.startswith('acpkit')))"
    )
    result = run_with(None, [sys.executable, "-c", code], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['acpkit_client', 'acpkit_client.launch']"


@pytest.mark.process
@pytest.mark.parametrize("top_level", [True, False], ids=["top_level.txt", "RECORD-only"])
@pytest.mark.parametrize(
    ("function", "command"),
    [
        ("acpkit_client", "acpkit-client"),
        ("acpkit_conformance", "acpkit-conformance"),
        ("acp_agent", "acp-agent"),
    ],
)
def test_console_script_function_names_the_other_distribution(
    tmp_path: Path, function: str, command: str, top_level: bool
) -> None:
    """Each console script's function reports the foreign owner in one line and exits 2."""
    result = run_with(foreign_acpkit(tmp_path, top_level=top_level), call(function), tmp_path)
    assert_clash_reported(result, command)


@pytest.mark.process
@pytest.mark.parametrize("command", ["acpkit-client", "acpkit-conformance", "acp-agent"])
def test_installed_console_scripts_report_the_clash(tmp_path: Path, command: str) -> None:
    """The installed ``acpkit-client``, ``acpkit-conformance`` and ``acp-agent`` check."""
    result = run_with(foreign_acpkit(tmp_path), [console_script(command), "--help"], tmp_path)
    assert_clash_reported(result, command)


@pytest.mark.process
def test_python_m_acpkit_client_reports_the_clash(tmp_path: Path) -> None:
    """``python -m acpkit_client`` reports it too."""
    argv = [sys.executable, "-m", "acpkit_client", "-h"]
    result = run_with(foreign_acpkit(tmp_path), argv, tmp_path)
    assert_clash_reported(result, "acpkit-client")


@pytest.mark.process
def test_python_m_acpkit_agent_reports_the_clash(tmp_path: Path) -> None:
    """``python -m acpkit_agent`` reports it too."""
    argv = [sys.executable, "-m", "acpkit_agent", "--help"]
    result = run_with(foreign_acpkit(tmp_path), argv, tmp_path)
    assert_clash_reported(result, "acp-agent")


@pytest.mark.process
def test_both_distributions_in_one_site_packages_is_a_clash(tmp_path: Path) -> None:
    """Ours and the other one installed side by side (their files mixed): still reported."""
    entry = foreign_acpkit(tmp_path)
    ours = entry / "txacpkit-0.1.0.dist-info"
    ours.mkdir()
    (ours / "METADATA").write_text("Metadata-Version: 2.1\nName: txacpkit\nVersion: 0.1.0\n")
    (ours / "top_level.txt").write_text("acpkit\nacpkit_agent\nacpkit_client\ntwisted\n")
    (entry / "acpkit" / "schemas" / "v1").mkdir(parents=True)
    (entry / "acpkit" / "schemas" / "v1" / "NOTICE").write_text("")
    assert_clash_reported(run_with(entry, call("acpkit_client"), tmp_path), "acpkit-client")


@pytest.mark.process
def test_a_stray_acpkit_without_distribution_is_reported(tmp_path: Path) -> None:
    """An ``acpkit`` directory that no distribution owns and that is not ours is reported."""
    result = run_with(foreign_acpkit(tmp_path, dist_info=False), call("acpkit_client"), tmp_path)
    assert result.returncode == launch.CLASH_EXIT_STATUS, result.stderr
    (line,) = result.stderr.splitlines()
    assert "not txacpkit" in line and "separate virtual environment" in line, line


@pytest.mark.process
def test_no_clash_starts_the_command(tmp_path: Path) -> None:
    """Without a clash the console script runs the command (here its ``--version``)."""
    result = run_with(None, [console_script("acpkit-client"), "--version"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith(launch_version())


def launch_version() -> str:
    """Our version, read without importing the package under test's ``__init__``."""
    namespace: dict[str, str] = {}
    exec((ROOT / "acpkit" / "_version.py").read_text(), namespace)
    return namespace["__version__"]
