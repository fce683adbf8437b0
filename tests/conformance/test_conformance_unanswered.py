"""
Requests never answered (issue 23, item 2): a request the agent leaves unanswered while it
answers later ones is a finding of the rule that requires the answer; late answers are waited
for in the background and judged when they come; "slow" is left for an agent that answers
nothing in time. Unit tests on an `Observer` fed raw lines, and real pipes.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from acpkit.conformance.cli import run_suite
from acpkit.conformance.observer import Observer, Pending, answer_rule

FIXTURES = Path(__file__).parent.parent / "fixtures" / "broken_agents"
RAW_AGENT = str(FIXTURES / "raw_agent.py")
QUIRKY = str(FIXTURES / "quirky_agent.py")


def _none(_: Pending) -> float:
    return 0.0


def _forever(_: Pending) -> float:
    return 1e9


def _request(observer: Observer, rid: int, method: str, params: Any = None) -> None:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        message["params"] = params
    observer.sent_bytes(json.dumps(message).encode() + b"\n")


def _answer(observer: Observer, rid: int) -> None:
    observer.received(json.dumps({"jsonrpc": "2.0", "id": rid, "result": {}}).encode())


def _findings(observer: Observer) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for finding in observer.verdicts.findings:
        found.setdefault(finding.rule_id, []).append(finding.message)
    return found


def test_a_request_overtaken_by_an_answered_one_is_a_finding() -> None:
    """A _vendor request never answered while the next request was is RPC-008, saying so."""
    observer = Observer()
    _request(observer, 1, "_vendor.example/request", {})
    _request(observer, 2, "_acpkit.dev/ping", {})
    _answer(observer, 2)
    observer.judge_unanswered(_none)
    (message,) = _findings(observer)["RPC-008"]
    assert "_vendor.example/request (id 1) was never answered" in message
    assert "dropped, not slow" in message


def test_nothing_answered_after_it_is_slow_not_a_finding() -> None:
    """A request with no later request answered could not be judged: slow, no finding."""
    observer = Observer()
    _request(observer, 1, "_acpkit.dev/ping", {})
    _answer(observer, 1)
    _request(observer, 2, "session/list", {})
    observer.judge_unanswered(_none)
    assert observer.verdicts.findings == []
    assert "RPC-013" in observer.verdicts.undecided


def test_a_young_request_is_given_its_patience() -> None:
    """An overtaken request younger than its patience is slow, not yet dropped."""
    observer = Observer()
    _request(observer, 1, "session/list", {})
    _request(observer, 2, "_acpkit.dev/ping", {})
    _answer(observer, 2)
    observer.judge_unanswered(_forever)
    assert observer.verdicts.findings == []
    assert "RPC-013" in observer.verdicts.undecided


@pytest.mark.parametrize(
    ("method", "cancel", "rule_id"),
    [
        ("session/prompt", False, "TURN-001"),
        ("session/prompt", True, "CANCEL-001"),
        ("_vendor.example/x", False, "RPC-008"),
        ("session/new", False, "RPC-013"),
        ("no/such_method", False, "RPC-013"),
    ],
)
def test_the_rule_that_requires_the_answer(method: str, cancel: bool, rule_id: str) -> None:
    """A prompt needs a stop reason (the cancelled one after a session/cancel), a custom
    request an answer with its id, any other request an answer."""
    observer = Observer()
    _request(observer, 1, method, {"sessionId": "s"})
    if cancel:
        observer.sent_bytes(
            b'{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}\n'
        )
    assert answer_rule(observer.pending[json.dumps(1)]) == rule_id


def test_authenticate_may_wait_for_a_person() -> None:
    """authenticate never answered (a browser login) is not judged."""
    observer = Observer()
    _request(observer, 1, "authenticate", {"methodId": "oauth"})
    _request(observer, 2, "_acpkit.dev/ping", {})
    _answer(observer, 2)
    observer.judge_unanswered(_none)
    assert observer.verdicts.findings == []
    assert observer.verdicts.undecided == {}


def test_a_late_answer_is_judged_when_it_comes() -> None:
    """when_answered calls back with the answer, however late; never for answered ids."""
    observer = Observer()
    seen: list[dict[str, Any]] = []
    _request(observer, 1, "_acpkit.dev/slow", {})
    observer.when_answered(1, seen.append)
    _answer(observer, 1)
    observer.when_answered(1, seen.append)
    _answer(observer, 1)  # a second answer (RPC-013), no second call
    assert [m["id"] for m in seen] == [1]


@pytest.mark.process
def test_late_answers_are_judged_not_slow() -> None:
    """
    An agent that answers unknown methods -32601 two seconds late (step timeout 1 s): the
    answers are judged when they come, so RPC-005 passes instead of "slow", and nothing is
    reported dropped (a request may take three step timeouts before it counts as dropped).
    """
    result = run_suite(
        [sys.executable, QUIRKY, "slow_unknown"],
        env={**os.environ, "QUIRKY_SLOW_SECONDS": "2"},
        profile="smoke",
        timeout=1.0,
        explore=False,
        only=["RPC"],
    )
    assert result.error is None, result.error
    statuses = {r.rule.id: r.status for r in result.results}
    assert statuses["RPC-005"] == "pass"
    assert statuses["RPC-008"] == "pass"
    assert [f.message for r in result.found for f in r.findings] == []


@pytest.mark.process
def test_an_agent_that_drops_one_request_fails_with_exit_1() -> None:
    """The issue's case: every request is answered at once but one _vendor request is
    never answered; the run fails (exit 1) under RPC-008 instead of passing as 'slow'."""
    result = run_suite(
        [sys.executable, RAW_AGENT, "drop_custom_request"],
        profile="smoke",
        timeout=1.0,
        explore=False,
        only=["RPC"],
    )
    assert result.error is None, result.error
    assert {r.rule.id for r in result.failed} == {"RPC-008"}
    assert result.exit_code == 1
