"""
The conformance tester reports each deliberately broken agent with the right rule id, and
nothing on a correct one (tests/fixtures/broken_agents/raw_agent.py, real pipes).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from acpkit.conformance.cli import run_suite
from acpkit.conformance.harness import PROFILES, SuiteConfig, run_turn, running_agent
from acpkit.conformance.machine import run_machine
from acpkit.conformance.observer import Verdicts

pytestmark = pytest.mark.process  # every test here starts a child process

RAW_AGENT = str(Path(__file__).parent.parent / "fixtures" / "broken_agents" / "raw_agent.py")

#: fault -> (rule that must fail, run the state machine too?)
BROKEN = {
    "banner": "FRAME-003",
    "wrong_id_type": "RPC-001",
    "answer_notifications": "RPC-002",
    "result_for_unknown_method": "RPC-005",
    "end_turn_after_cancel": "CANCEL-002",
    "die_on_long_line": "FRAME-007",
    "fs_without_capability": "CAP-001",
    "updates_after_response": "TURN-002",
    "reuse_session_ids": "SESSION-001",
    "wrong_version": "INIT-002",
    "bad_schema": "SCHEMA-001",
    "unfinished_tool": "TURN-003",
    "ignore_eof": "FRAME-009",
    "exit_without_answer": "FRAME-010",
    "decode_utf8_per_read": "FRAME-004",
    "decode_each_read": "FRAME-004",
    "terminal_after_release": "TERMINAL-001",
    "keep_terminal": "TERMINAL-002",
    "url_elicitation_without_cap": "CAP-003",
    "nested_form": "ELICIT-001",
    "complete_unknown_elicitation": "ELICIT-002",
    "empty_notice": "NOTICE-001",
    "bad_compaction": "NOTICE-002",
}

#: Faults in the use of the client services (terminal, elicitation, notices, compaction).
SERVICE_FAULTS = (
    "terminal_after_release",
    "keep_terminal",
    "url_elicitation_without_cap",
    "nested_form",
    "complete_unknown_elicitation",
    "empty_notice",
    "bad_compaction",
)


def _failed(fault: str, timeout: float, only: list[str]) -> set[str]:
    result = run_suite(
        [sys.executable, RAW_AGENT, fault],
        profile="smoke",
        timeout=timeout,
        explore=False,
        only=only,
    )
    assert result.error is None, result.error
    return {r.rule.id for r in result.found}


def test_correct_raw_agent_has_no_finding() -> None:
    """The correct raw agent passes every applicable rule, probes and state machine (exit 0)."""
    result = run_suite([sys.executable, RAW_AGENT], profile="smoke", timeout=5.0)
    assert result.error is None
    assert [f.message for r in result.found for f in r.findings] == []
    assert result.exit_code == 0
    statuses = {r.rule.id: r.status for r in result.results}
    assert statuses["CANCEL-002"] == "pass"
    # no loadSession, but its advertised session/resume, close and delete exist (CAP-005)
    assert statuses["CAP-005"] == "pass"
    for served in ("CAP-002", "CAP-003", "CAP-004", "TERMINAL-001", "TERMINAL-002"):
        assert statuses[served] == "pass", served
    for served in ("ELICIT-001", "NOTICE-001", "NOTICE-002"):
        assert statuses[served] == "pass", served


def test_correct_raw_agent_completes_url_elicitations_it_started() -> None:
    """
    Offered the url elicitation mode, the correct raw agent's elicitation/complete for its
    own url elicitation passes ELICIT-002 (and its url request passes CAP-003 / ELICIT-001).
    """
    verdicts = Verdicts()
    config = SuiteConfig(argv=(sys.executable, RAW_AGENT), timeout=3.0)
    capabilities: dict[str, Any] = {"elicitation": {"url": {}}}
    with running_agent(config, verdicts, capabilities=capabilities) as agent:
        session = agent.new_session()
        assert session is not None
        outcome = run_turn(agent, session, [{"type": "text", "text": "sign in"}])
        agent.driver.drain(0.2)
    assert outcome.stop_reason == "end_turn"
    assert verdicts.findings == []
    assert {"ELICIT-001", "ELICIT-002", "CAP-003"} <= set(verdicts.exercised)


@pytest.mark.parametrize("fault", sorted(BROKEN))
def test_broken_agent_is_reported_with_its_rule(fault: str) -> None:
    """Each broken behaviour is reported under the rule it breaks."""
    timeout = 1.0 if fault == "ignore_eof" else 3.0
    # the client-service faults only need the probes of their rule (keeps the file fast)
    narrow = (
        "ignore_eof",
        "exit_without_answer",
        "decode_each_read",
        "decode_utf8_per_read",
        *SERVICE_FAULTS,
    )
    only = [BROKEN[fault]] if fault in narrow else []
    assert BROKEN[fault] in _failed(fault, timeout, only)


def test_agent_that_never_initializes_cannot_be_tested() -> None:
    """An agent that never answers initialize gives exit status 2 and says why."""
    result = run_suite(
        [sys.executable, RAW_AGENT, "never_initialize"], profile="smoke", timeout=0.5
    )
    assert result.exit_code == 2
    assert result.error is not None and "initialize" in result.error


def test_missing_command_cannot_be_tested() -> None:
    """A command that does not exist gives exit status 2."""
    result = run_suite(["/nonexistent/agent-binary"], profile="smoke", timeout=1.0)
    assert result.exit_code == 2
    assert result.error is not None and "cannot start" in result.error


def test_state_machine_shrinks_to_a_minimal_transcript() -> None:
    """A failure found by the state machine is shrunk; its transcript is in trace format."""
    config = SuiteConfig(
        argv=(sys.executable, RAW_AGENT, "reuse_session_ids"),
        timeout=3.0,
        profile=PROFILES["quick"],
    )
    found = run_machine(config, Verdicts())
    (explored,) = [e for e in found.failures if e.rule_id == "SESSION-001"]
    assert "session/new" in explored.transcript
    assert " -> agent " in explored.transcript
    # the minimal sequence: initialize, two session/new calls (plus the EOF note)
    assert explored.transcript.count('"method":"session/new"') == 2
    assert explored.shrink.startswith("shrunk from")
