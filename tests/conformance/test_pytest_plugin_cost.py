"""
The conformance pytest plugin (``pytest11`` entry point ``acpkit_conformance``) is loaded by
every pytest run of a project that installed acpkit: it is inert and costs nothing unless
``--acp-agent`` is given. Importing it imports neither pytest nor the rule catalogue nor the
tester's machinery (Hypothesis, jsonschema, Twisted); a pytest run without ``--acp-agent``
leaves them unimported too; with ``--acp-agent`` it collects one item per rule.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent

#: What the plugin must not import before ``--acp-agent`` asks for it.
HEAVY = (
    "hypothesis",
    "jsonschema",
    "twisted",
    "attrs",
    "acpkit.conformance.harness",
    "acpkit.conformance.cli",
    "acpkit.conformance.rules",
    "acpkit.conformance.pytest_items",
)


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``argv`` in ``cwd`` with the checkout importable."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=300, check=False
    )


def plugin_option() -> list[str]:
    """Nothing when the entry point is installed, ``-p MODULE`` from a bare checkout."""
    names = {ep.name for ep in importlib.metadata.entry_points(group="pytest11")}
    return [] if "acpkit_conformance" in names else ["-p", "acpkit.conformance.pytest_plugin"]


@pytest.mark.process
def test_importing_the_plugin_imports_nothing_heavy(tmp_path: Path) -> None:
    """``import acpkit.conformance.pytest_plugin`` loads none of HEAVY, nor pytest."""
    code = (
        "import sys, acpkit.conformance.pytest_plugin; "
        f"print([m for m in {(*HEAVY, 'pytest')!r} if m in sys.modules])"
    )
    result = run([sys.executable, "-c", code], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_conformance_item_is_still_importable_from_the_plugin() -> None:
    """``ConformanceItem`` is importable from the plugin module (loaded on first use)."""
    from acpkit.conformance import pytest_items, pytest_plugin

    assert pytest_plugin.ConformanceItem is pytest_items.ConformanceItem


@pytest.mark.process
def test_a_pytest_run_without_acp_agent_loads_no_tester(tmp_path: Path) -> None:
    """
    In a project's own pytest run (no ``--acp-agent``) the plugin is loaded, adds nothing to
    the collection and imports neither the catalogue nor the tester.
    """
    (tmp_path / "test_project.py").write_text(
        "import sys\n\n\n"
        "def test_nothing_heavy(request):\n"
        "    manager = request.config.pluginmanager\n"
        "    assert any(\n"
        "        getattr(plugin, '__name__', '') == 'acpkit.conformance.pytest_plugin'\n"
        "        for plugin in manager.get_plugins()\n"
        "    )\n"
        f"    loaded = [m for m in {HEAVY[1:]!r} if m in sys.modules]\n"
        "    assert loaded == []\n"
    )
    result = run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *plugin_option(), "-q"],
        tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


@pytest.mark.process
def test_acp_agent_collects_one_item_per_rule(tmp_path: Path) -> None:
    """With ``--acp-agent`` every rule of the catalogue is collected (nothing is run)."""
    from acpkit.conformance.rules import RULES

    result = run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            *plugin_option(),
            "--collect-only",
            "-q",
            "--acp-agent",
            "no-such-agent",
        ],
        tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    collected = [line for line in result.stdout.splitlines() if "acp-conformance::" in line]
    assert [line.rsplit("::", 1)[1] for line in collected] == [rule.id for rule in RULES]
