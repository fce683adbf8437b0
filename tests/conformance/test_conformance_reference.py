"""
The conformance tester against real agents: the acpkit interop fixture, the official-SDK
fixture and the reference agent bob (real processes; probes only, to stay fast).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from acpkit.conformance.cli import run_suite

pytestmark = pytest.mark.process  # every test here starts a child process

CHECKOUT = str(Path(__file__).parent.parent.parent)
INTEROP = Path(__file__).parent.parent / "fixtures" / "interop"
ENV = {**os.environ, "PYTHONPATH": CHECKOUT}


#: The interop fixture's genuine findings: it is deliberately minimal.
INTEROP_FINDINGS = {
    "SESSION-001": "one fixed session id for every session/new ('MUST respond with a unique "
    "Session ID')",
    "SESSION-002": "a relative cwd is accepted (NewSessionRequest.cwd 'Must be an absolute path')",
    "INIT-003": "no agentInfo ('Agents SHOULD provide information about their implementation')",
    "MCP-001": "mcpCapabilities.http false ('new Agents SHOULD support the HTTP transport')",
    "PATH-001": "fs/read_text_file with the prompt text as the path, e.g. 'hi' ('All file paths "
    "in the protocol MUST be absolute')",
    "TOOL-002": "SHOULD: session/request_permission for toolCallId 'call_1', which no tool_call "
    "announced (schema.json ToolCallUpdate: 'An update to an existing tool call.')",
    "MCP-002": "SHOULD: the stdio MCP server given in session/new is never started ('Agents SHOULD "
    "connect to all MCP servers specified by the Client')",
}


def test_acpkit_interop_agent_only_breaks_its_genuine_rules() -> None:
    """
    The acpkit interop fixture (a fixed session id, no cwd check, no agentInfo, the prompt
    text used as a file path, a permission asked for a tool call never announced) breaks
    exactly the rules of `INTEROP_FINDINGS`, each genuine.
    """
    result = run_suite(
        [sys.executable, str(INTEROP / "acpkit_agent.py")],
        profile="smoke",
        timeout=5.0,
        env=ENV,
        explore=False,
    )
    assert result.error is None, result.error
    assert {r.rule.id for r in result.found} == set(INTEROP_FINDINGS)


def test_sdk_agent_crashes_on_a_batch_line() -> None:
    """
    True finding on the official Python SDK: a JSON array line kills the agent process; it
    is filed under RPC-004, the rule of the batch probe that killed it, with the traceback.
    """
    result = run_suite(
        [sys.executable, str(INTEROP / "sdk_agent.py")],
        profile="smoke",
        timeout=2.0,
        env=ENV,
        explore=False,
        only=["RPC-004", "RPC-007"],
    )
    findings = [(f.rule_id, f.message) for r in result.found for f in r.findings]
    assert any(
        rule == "RPC-004"
        and "went away during a batch" in message
        and "AttributeError: 'list' object has no attribute 'get'" in message
        for rule, message in findings
    ), findings


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
    assert [f.message for r in result.found for f in r.findings if r.rule.level == "MUST"] == []


#: bob's genuine findings, with the spec sentence each breaks.
BOB_FINDINGS = {
    "MCP-001": "mcpCapabilities.http is false: 'new Agents SHOULD support the HTTP transport' "
    "(session-setup, MCP Servers); bob connects to no MCP server yet",
    "MCP-002": "the stdio MCP server of session/new is never started: 'Agents SHOULD connect to "
    "all MCP servers specified by the Client' (session-setup, Checking Transport Support); "
    "bob connects to the client's MCP servers only with [mcp] useClientServers = true",
}

BOB = [sys.executable, "-c", "from twisted.scripts.twistd import run; run()", "-n", "acp-agent"]

#: bob as a careful user runs it: asks before tools that change things, keeps sessions.
CAREFUL = """\
yolo = false

[sessions]
enabled = true

[engine]
name = "openai"
"""


def test_bob_on_the_model_server_runs_real_turns(tmp_path: Path) -> None:
    """
    With ``--model-server`` the conformance model drives bob's openai engine through real
    turns with bob's own tools (found by their schemas): files are written, edited and read
    through fs/* (CAP-001), permissions are asked and cancelled while pending (CANCEL-002),
    a long shell command is cancelled (CANCEL-001), tool calls reach a final status
    (TURN-003), sessions are loaded and replayed (CAP-005, SESSION-004, SESSION-005), and
    ``ask_user`` goes through elicitation/create (CAP-003, ELICIT-001); bob, a conformant
    agent, has no finding.
    Its one finding is genuine: MCP-001 (SHOULD), bob has no MCP client yet.
    """
    config = tmp_path / "agent.toml"
    config.write_text(CAREFUL)
    result = run_suite(
        [*BOB, "--config", str(config)],
        profile="quick",
        timeout=10.0,
        env=ENV,
        use_model_server=True,
    )
    assert result.error is None, result.error
    assert {r.rule.id for r in result.found} == set(BOB_FINDINGS), [
        f.message for r in result.found for f in r.findings
    ]
    statuses = {r.rule.id: r.status for r in result.results}
    for rule_id in (
        "TURN-003",
        "CAP-001",
        "CANCEL-001",
        "CANCEL-002",
        "CAP-005",
        "SESSION-004",
        "SESSION-005",
        "CAP-003",
        "ELICIT-001",
    ):
        assert statuses[rule_id] == "pass", rule_id
    assert any("tools it called by role" in note for note in result.notes), result.notes
