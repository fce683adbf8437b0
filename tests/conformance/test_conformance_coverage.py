"""
Coverage said plainly (issue 23, item 8): the report's first lines say how many applicable
MUST and SHOULD rules were judged, what was not exercised and what would exercise it, say
loudly when no turn-level rule was judged, and hide the rules that never apply over the
transport unless asked. Units on `acpkit.conformance.coverage` and the report, no process.
"""

from __future__ import annotations

import io
import json
import re

import pytest

from acpkit.conformance import cli
from acpkit.conformance.coverage import TURN_LEVEL, applies
from acpkit.conformance.observer import Verdicts
from acpkit.conformance.report import SuiteResult, format_report, rule_results
from acpkit.conformance.rules import RULES, RULES_BY_ID, select_rules


def _result(verdicts: Verdicts, transport: str = "stdio") -> SuiteResult:
    return SuiteResult(
        agent="agent",
        results=rule_results(verdicts, select_rules()),
        seed=0,
        profile="smoke",
        elapsed=1.0,
        replay="acpkit-conformance -- agent",
        transport=transport,
    )


def _echo_agent_verdicts() -> Verdicts:
    """An agent that answers every prompt and does nothing else: no turn-level rule."""
    verdicts = Verdicts()
    for rule_id in ("FRAME-001", "RPC-001", "TURN-001", "TURN-002", "SESSION-001"):
        verdicts.ok(rule_id)
    verdicts.skip("CAP-005", "loadSession is not advertised")
    verdicts.skip("LIST-001", "sessionCapabilities.list is not advertised")
    verdicts.slow("RPC-005", "no answer within 1s")
    return verdicts


def test_coverage_counts_judged_and_applicable_rules_by_level() -> None:
    """judged / applicable per level; the HTTP and WS rules do not apply over stdio."""
    coverage = _result(_echo_agent_verdicts()).coverage
    stdio_rules = [r for r in RULES if r.transport is None]
    musts = sum(r.level == "MUST" for r in stdio_rules)
    assert coverage.by_level["MUST"] == (5, musts)
    assert coverage.by_level["SHOULD"] == (0, len(stdio_rules) - musts)
    assert coverage.hidden == len(RULES) - len(stdio_rules)
    assert coverage.slow == ["RPC-005"]


def test_rules_not_exercised_are_grouped_by_what_would_exercise_them() -> None:
    """A capability the agent lacks and turns that do nothing are said in words."""
    coverage = _result(_echo_agent_verdicts()).coverage
    remedies = {rule: remedy for remedy, rules in coverage.not_exercised.items() for rule in rules}
    assert remedies["CAP-005"] == "the agent does not advertise loadSession"
    assert "session capability" in remedies["LIST-001"]
    assert "--model-server" in remedies["TOOL-001"] and "--scenarios" in remedies["TOOL-001"]
    assert "commands" in remedies["CANCEL-001"]


def test_no_turn_level_rule_is_said_loudly_at_the_top() -> None:
    """The text report's first lines: the verdict, the coverage, and the loud warning."""
    text = format_report(_result(_echo_agent_verdicts()), "text")
    head = text.splitlines()[:4]
    assert head[1].startswith("exit status 0")
    assert head[2].startswith("coverage: judged 5 of ")
    assert "NO TURN-LEVEL RULE WAS JUDGED" in head[3]
    verdicts = _echo_agent_verdicts()
    verdicts.ok("TOOL-001")
    assert "NO TURN-LEVEL" not in format_report(_result(verdicts), "text")
    assert "TOOL-001" in TURN_LEVEL


def test_rules_of_other_transports_are_hidden_unless_asked() -> None:
    """Over stdio the HTTP/WS rules are not listed (the summary says how many are not);
    with show_all they are; by URL the process rules are the hidden ones."""
    result = _result(_echo_agent_verdicts())
    text = format_report(result, "text")
    assert "HTTP-001" not in text
    assert "16 not shown: they never apply over stdio" in text  # HTTP-001..013, WS-001..003
    assert "HTTP-001" in format_report(result, "text", show_all=True)
    assert not applies(RULES_BY_ID["FRAME-009"], "websocket")
    assert not applies(RULES_BY_ID["HTTP-011"], "http")
    assert applies(RULES_BY_ID["HTTP-011"], "https")
    assert not applies(RULES_BY_ID["WS-001"], "https")


def test_json_carries_the_coverage() -> None:
    """The json report has the coverage and, per rule, whether it applies."""
    document = json.loads(format_report(_result(_echo_agent_verdicts()), "json"))
    assert document["coverage"]["judged"]["MUST"] == 5
    assert document["coverage"]["no_turn_level_rule_judged"] is True
    applies_by_id = {r["id"]: r["applies"] for r in document["rules"]}
    assert applies_by_id["HTTP-001"] is False and applies_by_id["FRAME-001"] is True


def test_every_option_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    """--help gives every option a help text (--show-all and --version among them)."""
    assert cli.main(["--help"], out=io.StringIO()) == 0
    options = capsys.readouterr().out.split("options:", 1)[1]
    entries = re.split(r"\n(?=  -)", options.strip("\n"))
    assert any(e.lstrip().startswith("--show-all") for e in entries)
    assert any(e.lstrip().startswith("--version") for e in entries)
    for entry in entries:
        words = entry.split()
        # the option's own spelling, then its help text
        spelling = [w for w in words if w.startswith("-") or w.isupper() or w.startswith("{")]
        assert len(words) > len(spelling), entry
