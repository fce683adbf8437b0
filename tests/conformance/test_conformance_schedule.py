"""
Speed and feedback (issue 23, item 10): probe groups run in lanes at the same time and share
agent processes when they can; exploration runs examples at the same time; the run reports
progress; every finding has a replay line with every option the run used.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import pytest

from acpkit.conformance import cli
from acpkit.conformance.cli import run_suite
from acpkit.conformance.harness import PROFILES, SuiteConfig
from acpkit.conformance.observer import Verdicts
from acpkit.conformance.report import format_report
from acpkit.conformance.schedule import Group, Lane, run_lanes

pytestmark = pytest.mark.process

RAW_AGENT = str(Path(__file__).parent.parent / "fixtures" / "broken_agents" / "raw_agent.py")


def _config(*faults: str) -> SuiteConfig:
    return SuiteConfig(
        argv=(sys.executable, RAW_AGENT, ",".join(faults)), timeout=3.0, profile=PROFILES["smoke"]
    )


def test_groups_of_a_lane_share_an_agent_process_per_set_of_capabilities() -> None:
    """Two groups asking for the same capabilities get the same process; other
    capabilities, or a group that must not reuse, get their own."""
    seen: list[int] = []

    def pid(fresh: Any, verdicts: Verdicts, config: SuiteConfig, **options: Any) -> None:
        with fresh(**options) as agent:
            assert agent.driver.process is not None
            seen.append(agent.driver.process.pid)

    groups = (
        Group("RPC-001", "a", "RPC", pid),
        Group("RPC-001", "b", "RPC", pid),
        Group("RPC-001", "c", "RPC", lambda f, v, c: pid(f, v, c, capabilities={"terminal": True})),
        Group("RPC-001", "d", "RPC", lambda f, v, c: pid(f, v, c, reuse=False)),
    )
    run_lanes(_config(), Verdicts(), [Lane("one", groups)])
    assert seen[0] == seen[1]
    assert len(set(seen)) == 3


def test_a_group_whose_agent_dies_leaves_the_next_group_a_fresh_one() -> None:
    """The agent exiting during a group is a finding under that group's rule, and the next
    group of the lane starts a new process."""
    seen: list[int] = []

    def junk(fresh: Any, verdicts: Verdicts, config: SuiteConfig) -> None:
        with fresh() as agent:
            agent.driver.write(b"x" * 70000 + b"\n")
            agent.driver.request("_acpkit.dev/ping", {})

    def after(fresh: Any, verdicts: Verdicts, config: SuiteConfig) -> None:
        with fresh() as agent:
            assert agent.driver.process is not None
            seen.append(agent.driver.process.pid)
            agent.driver.request("_acpkit.dev/ping", {})

    verdicts = Verdicts()
    groups = (
        Group("FRAME-007", "a long line", "FRAME", junk),
        Group("RPC-001", "then a request", "RPC", after),
    )
    run_lanes(_config("die_on_long_line"), verdicts, [Lane("one", groups)])
    assert [f.rule_id for f in verdicts.findings] == ["FRAME-007"]
    assert "went away during a long line" in verdicts.findings[0].message
    assert len(seen) == 1


def test_lanes_run_at_the_same_time_and_merge_in_lane_order() -> None:
    """Three lanes whose groups each wait on the others only finish if they run at once;
    their verdicts are merged in lane order whatever finished first."""
    import threading

    barrier = threading.Barrier(3, timeout=30)

    def meet(rule_id: str) -> Any:
        def run(fresh: Any, verdicts: Verdicts, config: SuiteConfig) -> None:
            barrier.wait()
            verdicts.violation(rule_id, f"{rule_id} found")

        return run

    lanes = [
        Lane(name, (Group(rule, name, "RPC", meet(rule)),))
        for name, rule in (("x", "RPC-003"), ("y", "RPC-001"), ("z", "RPC-002"))
    ]
    verdicts = Verdicts()
    run_lanes(_config(), verdicts, lanes)
    assert [f.rule_id for f in verdicts.findings] == ["RPC-003", "RPC-001", "RPC-002"]


def test_the_whole_suite_reports_progress_and_replays_each_finding_alone(tmp_path: Path) -> None:
    """
    run_suite calls progress as it goes; each rule with findings has a replay line that
    judges it alone and carries --cwd and --env (its value taken from the shell).
    """
    lines: list[str] = []
    result = run_suite(
        [sys.executable, RAW_AGENT, "custom_root_field"],
        profile="smoke",
        timeout=3.0,
        cwd=str(tmp_path),
        progress=lines.append,
        replay_env=["SECRET_KEY"],
    )
    assert result.error is None, result.error
    assert any(line.startswith("fixed probes") for line in lines)
    assert any("the envelope probes:" in line for line in lines)
    replay = result.replays["EXT-001"]
    assert "--rules EXT-001 " in replay
    assert f"--cwd {tmp_path}" in replay
    assert '--env SECRET_KEY="$SECRET_KEY"' in replay
    assert "replay EXT-001 alone: " in format_report(result, "text")


def test_progress_goes_to_stderr_unless_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    """The command line writes progress lines on stderr; --quiet silences them."""
    argv = ["--profile", "smoke", "--timeout", "3", "--rules", "RPC-005", "--"]
    argv += [sys.executable, RAW_AGENT]
    assert cli.main(argv, out=io.StringIO()) == 0
    assert "acpkit-conformance: fixed probes" in capsys.readouterr().err
    assert cli.main(["--quiet", *argv], out=io.StringIO()) == 0
    assert capsys.readouterr().err == ""


def test_exploration_in_parallel_reports_the_same_as_one_at_a_time() -> None:
    """Examples run at the same time give the same findings, in the same order, as the
    same examples run one after the other."""
    from acpkit.conformance.machine import run_machine

    config = _config("custom_root_field", "answer_notifications")
    together, alone = Verdicts(), Verdicts()
    run_machine(config, together, workers=3)
    run_machine(config, alone, workers=1)
    assert [f.rule_id for f in together.findings] == [f.rule_id for f in alone.findings]
    assert {"EXT-001", "RPC-002"} <= {f.rule_id for f in together.findings}


def test_the_authentication_probe_never_shares_its_agent_process() -> None:
    """A login changes the agent's state (an interactive one may block its next
    session/new): the authentication probe asks for a process no other group reuses."""
    from acpkit.conformance.probes_session import probe_authentication

    asked: list[dict[str, Any]] = []

    class Asked(Exception):
        pass

    def fresh(**options: Any) -> Any:
        asked.append(options)
        raise Asked

    with pytest.raises(Asked):
        probe_authentication(_config(), Verdicts(), fresh)
    assert asked == [{"reuse": False}]
