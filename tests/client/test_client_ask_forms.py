"""
``acpkit-client ask`` and form elicitations, end to end: on a terminal (a pty) the form
is announced and asked field by field; through pipes it is not announced.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
TINY_AGENT = ROOT / "tests" / "fixtures" / "client" / "tiny_agent.py"
TIMEOUT = 30

pytestmark = pytest.mark.process


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / ".acpkit").mkdir()
    (tmp_path / ".acpkit" / "acp.toml").write_text(
        f'[[agent]]\nname = "tiny"\ncommand = "{sys.executable}"\n'
        f'args = ["{TINY_AGENT}", "form"]\n',
        encoding="utf-8",
    )
    return tmp_path


def _env(project: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), ACPKIT_DIR=str(project / "no-user-config"))
    env.pop("ACPKIT_TRACE", None)
    return env


def test_on_a_terminal_the_form_is_asked(project: Path) -> None:
    """The agent sees ``elicitation.form``; each field is asked; a wrong number is asked
    again; the answers reach the agent as ``accept``."""
    child = pexpect.spawn(
        sys.executable,
        ["-m", "acpkit_client", "ask", "hi"],
        cwd=str(project),
        env=_env(project),
        timeout=TIMEOUT,
        encoding="utf-8",
    )
    try:
        child.expect_exact("The agent asks: Pick a colour")
        child.expect_exact("2. blue")
        child.sendline("2")
        child.expect_exact("How many?")
        child.sendline("0")
        child.expect_exact("at least 1")
        child.sendline("3")
        child.expect_exact('form: {"action": "accept", "content": {"colour": "blue", "count": 3}}')
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0


def test_without_a_terminal_no_form_is_announced(project: Path) -> None:
    """Through pipes nobody can answer: the capability is not announced."""
    done = subprocess.run(
        [sys.executable, "-m", "acpkit_client", "ask", "hi"],
        cwd=project,
        env=_env(project),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "form: not announced\n"
