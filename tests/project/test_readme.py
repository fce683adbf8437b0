"""The README's two commands stay true."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent.parent
README = (ROOT / "README.md").read_text()


def commands() -> list[str]:
    """The shell commands of the README's first two code blocks."""
    return re.findall(r"```sh\n(.+?)\n```", README)[:2]


def test_readme_opens_with_the_two_commands() -> None:
    """
    The first command installs every extra a user runs (the main job needs the agent and
    the client) and runs the main job; the second installs and tests.
    """
    main_job, test_suite = commands()
    assert main_job.startswith("python -m pip install '.[all]' && ")
    assert test_suite == "python -m pip install '.[test]' && python -m pytest"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "README.md" in ci and 'eval "$test_command"' in ci


@pytest.mark.process
def test_main_job_runs_offline(tmp_path: Path) -> None:
    """The main job (after the install) answers through the reference agent, exit 0."""
    main_job = shlex.split(commands()[0].split(" && ", 1)[1])
    assert main_job[0] == "python"
    argv = [sys.executable, *main_job[1:]]
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    env.pop("ACPKIT_DIR", None)
    env["HOME"] = str(tmp_path)  # no user agents file or agent config
    done = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "hello from bob" in done.stdout
