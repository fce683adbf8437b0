"""
bob as one command, the way editors configure an agent: the ``acp-agent`` console script
and ``python -m acpkit_agent`` run what ``twistd -n acp-agent`` runs (same options, stdout
only frames, the log on stderr, no pid file), and say in one line what is wrong with a bad
option or a missing ``agent`` extra.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from acpkit_agent.cli import main
from acpkit_client import launch
from tests.agent.test_agent_process import ENV, INIT, frames
from tests.project.test_extras import _REFUSE
from tests.project.test_name_clash import console_script

ROOT = Path(__file__).parent.parent.parent


def test_the_help_names_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    """``acp-agent --help`` starts ``Usage: acp-agent [--config FILE]``, not ``twistd``."""
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("Usage: acp-agent [--config FILE]")


def test_a_bad_option_is_refused_before_twistd_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """An option the plugin does not have: one line on stderr, status 2, stdout untouched."""
    assert main(["--engine"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert (
        err == "acp-agent: option --engine requires argument (acp-agent --help lists the options)\n"
    )


def _new(cwd: Path) -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "session/new",
        "params": {"cwd": str(cwd), "mcpServers": []},
    }


def _run(argv: list[str], cwd: Path, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    home = cwd / "home"
    home.mkdir(exist_ok=True)
    return subprocess.run(
        argv,
        cwd=cwd,
        env={**os.environ, **ENV, "HOME": str(home)},
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


def _assert_serves_like_twistd(done: subprocess.CompletedProcess[bytes], cwd: Path) -> None:
    """Answers on stdout (frames only), the banner on stderr, exit 0, no pid file."""
    assert done.returncode == 0, done.stderr.decode()
    decoded = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert all(m.get("jsonrpc") == "2.0" for m in decoded), decoded
    assert decoded[0]["result"]["agentInfo"]["name"] == "bob"
    assert "sessionId" in decoded[1]["result"]
    err = done.stderr.decode()
    assert "bob " in err and "  engine:      echo" in err, err
    assert not (cwd / "twistd.pid").exists()


@pytest.mark.process
def test_python_m_acpkit_agent_serves_on_stdio(tmp_path: Path) -> None:
    """``python -m acpkit_agent --engine echo``: frames on stdout, log on stderr, no pid file."""
    argv = [sys.executable, "-m", "acpkit_agent", "--engine", "echo"]
    _assert_serves_like_twistd(_run(argv, tmp_path, frames(INIT, _new(tmp_path))), tmp_path)


@pytest.mark.process
def test_the_acp_agent_console_script_serves_on_stdio(tmp_path: Path) -> None:
    """The installed ``acp-agent`` script serves the same way."""
    argv = [console_script("acp-agent"), "--engine", "echo"]
    _assert_serves_like_twistd(_run(argv, tmp_path, frames(INIT, _new(tmp_path))), tmp_path)


@pytest.mark.process
def test_the_console_script_prints_the_version(tmp_path: Path) -> None:
    """``acp-agent --version`` is the agent's version, as ``twistd acp-agent --version``."""
    done = _run([console_script("acp-agent"), "--version"], tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    from acpkit_agent.agent import AGENT_VERSION

    assert done.stdout.decode() == f"{AGENT_VERSION}\n"


@pytest.mark.process
def test_a_bad_option_is_one_line_and_status_2(tmp_path: Path) -> None:
    """An unknown option: one line on stderr naming it, nothing on stdout, exit 2."""
    done = _run([sys.executable, "-m", "acpkit_agent", "--bogus"], tmp_path)
    assert done.returncode == 2
    assert done.stdout == b""
    assert done.stderr.decode() == (
        "acp-agent: option --bogus not recognized (acp-agent --help lists the options)\n"
    )


@pytest.mark.process
def test_a_bad_configuration_exits_1_as_under_twistd(tmp_path: Path) -> None:
    """A configuration error ends the command as it ends twistd: one line, exit 1."""
    path = tmp_path / "agent.toml"
    path.write_text("[context]\nkeepLastTurn = 3\n")
    done = _run([sys.executable, "-m", "acpkit_agent", "--config", str(path)], tmp_path)
    assert done.returncode == 1
    assert done.stdout == b""
    assert f"acp-agent: {path}: context.keepLastTurn is not a key this file has" in (
        done.stderr.decode()
    )


@pytest.mark.process
def test_without_the_agent_extra_it_says_which_to_install(tmp_path: Path) -> None:
    """``python -m acpkit_agent`` without treq and PyYAML: one line naming the extra, exit 2."""
    program = _REFUSE + textwrap.dedent(
        """
        import runpy

        sys.argv = ["acp-agent"]
        runpy.run_module("acpkit_agent", run_name="__main__", alter_sys=True)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program, "treq,yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == launch.MISSING_EXTRA_EXIT_STATUS, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith("acp-agent needs the 'agent' extra (treq, yaml missing)")
    assert done.stderr.count("\n") == 1, done.stderr
    assert "pip install 'txacpkit[agent]'" in done.stderr
