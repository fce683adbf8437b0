"""The Agent status report."""

from __future__ import annotations

from pathlib import Path

import pytest

from acpkit_client.agents import AgentRun, AgentStartError
from acpkit_client.config import load_agents
from acpkit_client.conversation import Conversation
from acpkit_client.status import agent_lines, status_report, status_text
from tests.client.test_client_session import open_window, start


def write_project_file(root: Path, text: str) -> None:
    (root / ".acpkit").mkdir(exist_ok=True)
    (root / ".acpkit" / "acp.toml").write_text(text, encoding="utf-8")


def test_loaded_files_and_command_lines(tmp_path: Path) -> None:
    """The report names the loaded files and each agent's command line."""
    write_project_file(
        tmp_path,
        '[[agent]]\nname = "Bob"\ncommand = "bob"\nargs = ["serve", "a b"]\n',
    )
    config = load_agents(str(tmp_path), {"ACPKIT_DIR": str(tmp_path / "user")})
    lines = status_report(config)
    assert f"Loaded {tmp_path / '.acpkit' / 'acp.toml'}" in lines
    assert any(line.startswith("  Bob: bob serve 'a b'") for line in lines)


def test_builtin_default_and_refused_file(tmp_path: Path) -> None:
    """No file: the built-in agent is said; a refused file is named with its reason."""
    config = load_agents(str(tmp_path), {"ACPKIT_DIR": str(tmp_path / "user")})
    assert status_report(config)[0] == ("No agents file found: using the built-in reference agent.")
    write_project_file(tmp_path, '[[agent]]\nname = "Bob"\ncomand = "x"\n')
    config = load_agents(str(tmp_path), {"ACPKIT_DIR": str(tmp_path / "user")})
    text = status_text(status_report(config))
    assert "agent.comand is not a key this file has" in text
    assert "Refused" in text


def test_spawn_failure_is_reported(tmp_path: Path) -> None:
    """A command that cannot be found is reported with the PATH searched."""
    write_project_file(tmp_path, '[[agent]]\nname = "Ghost"\ncommand = "no-such-agent-xyz"\n')
    config = load_agents(str(tmp_path), {"ACPKIT_DIR": str(tmp_path / "user")})
    run = AgentRun(config.agents[0], str(tmp_path), {"PATH": "/nonexistent"})
    with pytest.raises(AgentStartError):
        run.spawn(object(), object())  # type: ignore[arg-type]
    lines = agent_lines(run)
    assert lines[0] == "Agent 'Ghost': failed"
    assert any("not found in PATH (/nonexistent)" in line for line in lines)


def test_running_agent_commands_and_ignored_updates(tmp_path: Path) -> None:
    """A running agent's commands with descriptions, and the ignored-update count and last."""
    window, pair, _agents = open_window(tmp_path)
    start(window, pair)
    window.conversation.ignore({"sessionUpdate": "future"}, "unknown sessionUpdate 'future'")
    lines = agent_lines(window.run, window.conversation)
    assert lines[0] == "Agent 'tiny': ready"
    assert "  agent: tiny 1.0, protocol version 1" in lines
    assert "    /web <query> — Search the web" in lines
    assert "    /help — Show help" in lines
    assert "  ignored updates: 1" in lines
    assert '    last: {"sessionUpdate": "future"}' in lines
    assert "    why: unknown sessionUpdate 'future'" in lines


def test_login_note_and_exit_are_reported(tmp_path: Path) -> None:
    """The listed authMethods and the -32000 failure (which says a login is needed) are
    listed, with no "requires a login" note of its own; no commands means it says so."""
    window, pair, _agents = open_window(tmp_path, mode="auth")
    with pytest.raises(AgentStartError):
        start(window, pair)
    lines = agent_lines(window.run, Conversation())
    assert not any(line.startswith("  note:") for line in lines)
    assert "  login methods listed (acpkit-client cannot log in): Log in with tiny" in lines
    assert any(
        line.startswith("  failed: session/new failed: the agent requires a login")
        for line in lines
    )
    assert "  commands: none announced" in lines
