"""
Discovery of advertised commands and the scenario file (issue 23, item 3): the tester learns
what each command does by trying it, with an argument made from its hint, and uses what it
learned as stimuli, on agents it has never seen (the two reference agents of
tests/fixtures/conformance_reference word every command differently); a scenario file gives
the prompts for agents whose behaviours cannot be discovered.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest

from acpkit.conformance import cli
from acpkit.conformance.cli import run_suite
from acpkit.conformance.discovery import (
    Command,
    argument_for,
    commands_of,
    discover,
    scaled,
)
from acpkit.conformance.harness import PROFILES, SuiteConfig
from acpkit.conformance.observer import Verdicts
from acpkit.conformance.scenarios import (
    BEHAVIOURS,
    SAMPLE_FILE,
    ScenarioError,
    load_scenarios,
    parse_scenarios,
)

REFERENCE = Path(__file__).parent.parent / "fixtures" / "conformance_reference"
AGENTS = {"a": str(REFERENCE / "agent_a.py"), "b": str(REFERENCE / "agent_b.py")}
#: Each behaviour the reference agents have a command for (their ``mode`` command changes
#: the mode; ``edit`` is a tool call with a diff; ``ask`` they do not have).
EXPECTED = {
    "slow",
    "tools",
    "edit",
    "permission",
    "read",
    "write",
    "shell",
    "plan",
    "usage",
    "mode",
}


# -- arguments from hints ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hint", "argument"),
    [
        (None, ""),
        ("number of seconds", "2"),
        ("duration, e.g. 3s", "3s"),
        ("how many times", "2"),
        ("file name", SAMPLE_FILE),
        ("path of a file in the session directory", SAMPLE_FILE),
        ("document location, relative to the project", SAMPLE_FILE),
        ("plain or loud", "loud"),
        ("quiet or shouty", "shouty"),
        ("words to echo", "conformance"),
        ("the risky action", "conformance"),
    ],
)
def test_an_argument_is_made_from_the_hint(hint: str | None, argument: str) -> None:
    """A number, the example given, the sample file, the last alternative, or a word."""
    assert argument_for(hint) == argument


def test_a_turn_worth_cancelling_gets_a_larger_number() -> None:
    """The number of a command that counts time is raised for a turn to cancel."""
    assert scaled("2") == "6"
    assert scaled("3s") == "6s"
    assert scaled("conformance") == "conformance"


def test_commands_are_read_from_the_last_announcement() -> None:
    """The last available_commands_update wins; a command without input has no hint."""

    def announce(*names: str) -> dict[str, object]:
        commands = [{"name": n, "description": n, "input": {"hint": "x"}} for n in names]
        commands.append({"name": "plain", "description": "no input"})
        return {
            "method": "session/update",
            "params": {
                "sessionId": "s",
                "update": {
                    "sessionUpdate": "available_commands_update",
                    "availableCommands": commands,
                },
            },
        }

    found = commands_of([announce("one"), announce("two", "three")])
    assert found == [
        Command("two", "two", "x"),
        Command("three", "three", "x"),
        Command("plain", "no input", None),
    ]


# -- discovery on agents it has never seen -----------------------------------------------------


@pytest.mark.process
@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_discovery_learns_every_behaviour_of_both_reference_agents(agent: str) -> None:
    """
    On both reference agents, whose commands share no name, description or hint, trying
    each command finds a command for every behaviour they have, from what its turn did.
    """
    config = SuiteConfig(
        argv=(sys.executable, AGENTS[agent]), timeout=3.0, profile=PROFILES["quick"]
    )
    verdicts = Verdicts()
    learned = discover(config, verdicts, [])
    assert set(learned.stimuli.prompts) == EXPECTED, learned.note
    assert all(p.startswith("/") for p in learned.stimuli.prompts.values())
    assert learned.stimuli.prompts["slow"].endswith("6") or learned.stimuli.prompts[
        "slow"
    ].endswith("6s")
    assert verdicts.findings == []


@pytest.mark.process
def test_discovered_commands_exercise_the_turn_level_rules() -> None:
    """
    With discovery, the reference agent's turn-level rules are judged (cancellation,
    permissions, tool calls, plans, usage, fs, terminals); without it, they are not.
    """
    turn_rules = (
        "CANCEL-001",
        "CANCEL-002",
        "TOOL-001",
        "TURN-003",
        "TURN-004",
        "TURN-006",
        "CAP-001",
        "CAP-002",
        "TERMINAL-002",
        "TOOL-003",
    )
    argv = [sys.executable, AGENTS["b"]]
    on = run_suite(argv, profile="smoke", timeout=3.0, explore=False)
    assert on.error is None and on.exit_code == 0, [f.message for r in on.found for f in r.findings]
    statuses = {r.rule.id: r.status for r in on.results}
    assert {rule: statuses[rule] for rule in turn_rules} == dict.fromkeys(turn_rules, "pass")
    off = run_suite(argv, profile="smoke", timeout=3.0, explore=False, discovery="off")
    statuses = {r.rule.id: r.status for r in off.results}
    assert all(statuses[rule] != "pass" for rule in ("CANCEL-002", "TOOL-001", "TURN-004"))


# -- the scenario file ----------------------------------------------------------------------------


def test_a_scenario_file_names_behaviours() -> None:
    """The [scenarios] table maps behaviours to prompts; {file} and {cwd} are filled in."""
    stimuli = parse_scenarios('[scenarios]\nread = "Show {file} from {cwd}"\nslow = "/wait 9"\n')
    assert stimuli.text("read", "/w") == f"Show {SAMPLE_FILE} from /w"
    assert stimuli.text("slow", "/w") == "/wait 9"
    assert stimuli.text("plan", "/w") is None


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[scenarios]\nfly = 'x'\n", "'fly' is not a behaviour"),
        ("[scenarios]\nslow = ''\n", "slow needs a prompt"),
        ("[prompts]\nslow = 'x'\n", "unknown key(s) prompts"),
        ("[scenarios\n", "not valid TOML"),
    ],
)
def test_a_bad_scenario_file_is_a_clear_error(text: str, words: str) -> None:
    """An unknown behaviour, an empty prompt, another table or bad TOML: ScenarioError."""
    with pytest.raises(ScenarioError) as raised:
        parse_scenarios(text)
    assert words in str(raised.value)


def test_every_behaviour_is_documented_in_the_module() -> None:
    """The module docstring's sample file names every behaviour."""
    from acpkit.conformance import scenarios

    assert all(f"\n    {name} = " in (scenarios.__doc__ or "") for name in BEHAVIOURS)


def test_the_command_line_refuses_a_bad_scenario_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--scenarios naming a missing or bad file is a usage error (exit 2)."""
    assert (
        cli.main(["--scenarios", str(tmp_path / "none.toml"), "--", "true"], out=io.StringIO()) == 2
    )
    assert "cannot read the scenario file" in capsys.readouterr().err


@pytest.mark.process
def test_a_scenario_file_drives_an_agent_whose_commands_are_not_tried(tmp_path: Path) -> None:
    """
    With discovery off, a scenario file that names the reference agent's commands for a
    long turn and a permission request makes the cancellation rules judged; the replay
    line carries the file.
    """
    scenarios = tmp_path / "scenarios.toml"
    scenarios.write_text('[scenarios]\nslow = "/countdown 6"\npermission = "/guarded x"\n')
    assert set(load_scenarios(scenarios).prompts) == {"slow", "permission"}
    result = run_suite(
        [sys.executable, AGENTS["a"]],
        profile="smoke",
        timeout=3.0,
        explore=False,
        discovery="off",
        scenarios=str(scenarios),
        only=["CANCEL"],
    )
    statuses = {r.rule.id: r.status for r in result.results}
    assert statuses["CANCEL-001"] == "pass" and statuses["CANCEL-002"] == "pass"
    assert f"--scenarios {scenarios}" in result.replay
    assert any("stimuli: " in note for note in result.notes)


@pytest.mark.process
def test_the_pytest_plugin_takes_a_scenario_file(tmp_path: Path) -> None:
    """--acp-scenarios and --acp-discovery reach the run."""
    import subprocess

    scenarios = tmp_path / "scenarios.toml"
    scenarios.write_text('[scenarios]\nslow = "/countdown 6"\n')
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            *_plugin_option(),
            "--acp-agent",
            f"{sys.executable} {AGENTS['a']}",
            "--acp-profile",
            "smoke",
            "--acp-timeout",
            "3",
            "--acp-rules",
            "CANCEL-001",
            "--acp-discovery",
            "off",
            "--acp-scenarios",
            str(scenarios),
            "-q",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ},
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "1 passed" in result.stdout.strip().splitlines()[-1]


def _plugin_option() -> list[str]:
    import importlib.metadata

    names = {ep.name for ep in importlib.metadata.entry_points(group="pytest11")}
    return [] if "acpkit_conformance" in names else ["-p", "acpkit.conformance.pytest_plugin"]
