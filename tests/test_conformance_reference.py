"""
The conformance tester against real agents: the acpkit interop fixture, the official-SDK
fixture and the reference agent bob (real processes; probes only, to stay fast).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from acpkit.conformance.cli import run_suite

CHECKOUT = str(Path(__file__).parent.parent)
INTEROP = Path(__file__).parent / "fixtures" / "interop"
ENV = {**os.environ, "PYTHONPATH": CHECKOUT}


def test_acpkit_interop_agent_only_breaks_session_rules() -> None:
    """The acpkit interop fixture (a fixed session id, no cwd check) breaks only those rules."""
    result = run_suite(
        [sys.executable, str(INTEROP / "acpkit_agent.py")],
        profile="smoke",
        timeout=5.0,
        env=ENV,
        explore=False,
    )
    assert result.error is None, result.error
    assert {r.rule.id for r in result.failed} == {"SESSION-001", "SESSION-002"}


def test_sdk_agent_crashes_on_a_batch_line() -> None:
    """True finding on the official Python SDK: a JSON array line kills the agent process."""
    result = run_suite(
        [sys.executable, str(INTEROP / "sdk_agent.py")],
        profile="smoke",
        timeout=2.0,
        env=ENV,
        explore=False,
        only=["RPC-004", "RPC-007"],
    )
    findings = [f.message for r in result.failed for f in r.findings]
    assert any("AttributeError: 'list' object has no attribute 'get'" in m for m in findings)


def test_bob_passes_every_must_rule() -> None:
    """bob (twistd -n acp-agent) breaks no MUST rule (it accepts a relative cwd: SHOULD)."""
    result = run_suite(
        [sys.executable, "-c", "from twisted.scripts.twistd import run; run()", "-n", "acp-agent"],
        profile="smoke",
        timeout=10.0,
        env=ENV,
        explore=False,
    )
    assert result.error is None, result.error
    assert [f.message for r in result.failed for f in r.findings if r.rule.level == "MUST"] == []


def test_bob_on_the_model_server_runs_real_turns() -> None:
    """
    With ``--model-server``, bob's openai engine talks to the scripted model server: its
    turns stream text and call tools (TURN-003 is exercised and holds); its read_file /
    write_file go through fs/* when fs is advertised (CAP-001 exercised) and its ask_user
    through elicitation/create (CAP-003, ELICIT-001); no rule fails.
    """
    result = run_suite(
        [
            sys.executable,
            "-c",
            "from twisted.scripts.twistd import run; run()",
            "-n",
            "acp-agent",
            "--engine",
            "openai",
        ],
        profile="smoke",
        timeout=10.0,
        env=ENV,
        use_model_server=True,
    )
    assert result.error is None, result.error
    assert [f.message for r in result.failed for f in r.findings] == []
    statuses = {r.rule.id: r.status for r in result.results}
    assert statuses["TURN-003"] == "pass"
    for rule_id in ("CAP-001", "CAP-003", "ELICIT-001"):
        assert statuses[rule_id] == "pass", rule_id
