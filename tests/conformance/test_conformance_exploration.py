"""
The explorer never stops at the first finding (issue 23, item 1): a fault that every session
repeats does not mask another, each rule is recorded once, and exploration goes on until the
profile's budget (real pipes against tests/fixtures/broken_agents/raw_agent.py, with faults
planted two at a time).
"""

from __future__ import annotations

import sys
from pathlib import Path

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acpkit.conformance.cli import run_suite
from acpkit.conformance.harness import PROFILES, SuiteConfig
from acpkit.conformance.machine import Exploration, run_machine
from acpkit.conformance.observer import Verdicts

pytestmark = pytest.mark.process

RAW_AGENT = str(Path(__file__).parent.parent / "fixtures" / "broken_agents" / "raw_agent.py")

#: Faults the agent shows in every session (at initialize or in the session/new result, or
#: right after it), with their rule: each would end an exploration that stops at a finding.
EVERY_SESSION = {
    "banner": "FRAME-003",
    "terminal_auth_always": "AUTH-001",
    "custom_root_field": "EXT-001",
    "bad_category": "CONFIG-007",
    "unprefixed_method": "EXT-004",
}

#: Faults shown only later, independent of the faults above: during any prompt turn, or
#: only after a step Hypothesis' first (simplest) example does not have (a second
#: session/new, a notification of the client).
LATER = {
    "bad_schema": "SCHEMA-001",
    "updates_after_response": "TURN-002",
    "relative_location": "PATH-001",
    "cancelled_without_cancel": "TURN-007",
    "bad_traceparent": "EXT-002",
    "answer_notifications": "RPC-002",
}

#: A budget where the examples, not the time, bound exploration on a loaded machine: eight
#: examples, about 28 steps; each step sends a notification (an unknown one, a cancel) with a
#: chance near one in two, so missing one in every step has a chance below 1 in 10 million.
PROFILE = attrs.evolve(PROFILES["quick"], examples=8, explore_seconds=600.0, shrink_replays=0)


def _exploration(faults: list[str], seed: int = 0) -> tuple[Verdicts, Exploration]:
    verdicts = Verdicts()
    config = SuiteConfig(
        argv=(sys.executable, RAW_AGENT, ",".join(faults)),
        timeout=5.0,
        profile=PROFILE,
        seed=seed,
    )
    return verdicts, run_machine(config, verdicts)


def _explore(faults: list[str], seed: int = 0) -> Verdicts:
    return _exploration(faults, seed)[0]


# the explorer is a Hypothesis test of its own, run inside this one on purpose
@settings(
    max_examples=min(settings().max_examples, 6),
    deadline=None,
    suppress_health_check=[HealthCheck.nested_given],
)
@given(
    every=st.sampled_from(sorted(EVERY_SESSION)),
    later=st.sampled_from(sorted(LATER)),
    seed=st.integers(min_value=0, max_value=1 << 16),
)
def test_two_independent_faults_are_both_reported(every: str, later: str, seed: int) -> None:
    """
    For a fault every session shows and one shown only later, planted together, the
    explorer alone reports both rules, whatever its seed: the first finding does not end
    exploration.
    """
    verdicts = _explore([every, later], seed)
    found = {f.rule_id for f in verdicts.findings}
    assert {EVERY_SESSION[every], LATER[later]} <= found, found


def test_a_fault_in_every_session_does_not_hide_a_second_session_fault() -> None:
    """
    A custom field in every session/new result (EXT-001, in the first example's first
    session) does not stop exploration before a later example creates a second session
    and sees the session id reused (SESSION-001). (Seed 0 draws a session/new step in a
    later example.)
    """
    verdicts = _explore(["custom_root_field", "reuse_session_ids"], seed=0)
    assert {"EXT-001", "SESSION-001"} <= {f.rule_id for f in verdicts.findings}


def test_each_rule_is_recorded_once() -> None:
    """A rule every example breaks is one finding; the other examples' are counted."""
    verdicts = _explore(["custom_root_field"])
    ext = [f for f in verdicts.findings if f.rule_id == "EXT-001"]
    assert len(ext) == 1
    assert verdicts.repeated.get("EXT-001", 0) >= PROFILE.examples - 1


def test_exploration_runs_every_example_despite_findings() -> None:
    """With a finding in the first session, exploration still runs every example of the
    profile, and the turn rules are exercised."""
    verdicts, exploration = _exploration(["custom_root_field"])
    assert exploration.examples == PROFILE.examples
    assert verdicts.exercised.get("TURN-001", 0) > PROFILE.examples


def test_the_suite_reports_both_faults_and_one_example_per_explored_rule() -> None:
    """
    The whole suite (probes, then exploration) on an agent with a custom field in every
    session/new result and a chunk after every prompt response reports both rules (exit 1);
    each rule the explorer broke first has its own example in the report, naming it.
    """
    result = run_suite(
        [sys.executable, RAW_AGENT, "custom_root_field,updates_after_response"],
        profile="quick",
        timeout=5.0,
    )
    assert result.error is None, result.error
    assert {"EXT-001", "TURN-002"} <= {r.rule.id for r in result.found}
    assert result.exit_code == 1
    assert len({e.rule_id for e in result.explored}) == len(result.explored)
    for explored in result.explored:
        assert f"failed: {explored.rule_id}: " in explored.steps
        assert explored.transcript
