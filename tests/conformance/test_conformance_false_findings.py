"""
Regression evidence for the tester's former false findings: for each cause, an agent that is
right where the tester used to blame it comes out clean, and an agent that is wrong there is
reported under the right rule with truthful evidence (tests/fixtures/broken_agents/
quirky_agent.py over real pipes, one quirk per cause).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from acpkit.conformance import machine, probes
from acpkit.conformance.cli import main, run_suite
from acpkit.conformance.harness import SuiteConfig, run_turn, running_agent
from acpkit.conformance.observer import Verdicts
from acpkit.conformance.report import SuiteResult

QUIRKY = str(Path(__file__).parent.parent / "fixtures" / "broken_agents" / "quirky_agent.py")

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}


def _run(
    quirk: str | None,
    *,
    only: Sequence[str] = (),
    timeout: float = 3.0,
    explore: bool = False,
    profile: str = "smoke",
    seed: int = 0,
    log: Path | None = None,
) -> SuiteResult:
    argv = [sys.executable, QUIRKY, *([quirk] if quirk else [])]
    env = None
    if log is not None:
        env = {**os.environ, "QUIRKY_AGENT_LOG": str(log)}
    return run_suite(
        argv,
        profile=profile,
        seed=seed,
        timeout=timeout,
        explore=explore,
        only=list(only),
        env=env,
    )


def _findings(result: SuiteResult) -> list[str]:
    """Every finding as ``RULE: message``."""
    return [f"{r.rule.id}: {f.message}" for r in result.found for f in r.findings]


def _statuses(result: SuiteResult) -> dict[str, str]:
    return {r.rule.id: r.status for r in result.results}


def _assert_clean(result: SuiteResult) -> None:
    assert result.error is None, result.error
    assert _findings(result) == []
    assert result.exit_code == 0


def _events(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def _exchange(quirk: str, *lines: Any) -> list[dict[str, Any]]:
    """Feed ``lines`` (messages, or raw bytes) to the agent, close stdin; what it wrote."""
    data = b"".join(
        (line if isinstance(line, bytes) else json.dumps(line).encode("utf-8")) + b"\n"
        for line in lines
    )
    done = subprocess.run(
        [sys.executable, QUIRKY, quirk], input=data, capture_output=True, timeout=30, check=False
    )
    return [json.loads(line) for line in done.stdout.splitlines()]


def _request(rid: Any, method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


# -- the fixture itself ----------------------------------------------------------------------


@pytest.mark.process
def test_correct_quirky_agent_has_no_finding() -> None:
    """Without a quirk the agent is correct: probes and explorer find nothing (exit 0)."""
    result = _run(None, explore=True)
    _assert_clean(result)
    statuses = _statuses(result)
    for rule_id in ("RPC-002", "RPC-003", "RPC-004", "CAP-005", "SESSION-005", "TURN-005"):
        assert statuses[rule_id] == "pass", rule_id


@pytest.mark.process
def test_quirks_are_in_effect(tmp_path: Path) -> None:
    """
    The quirks the tester must accept really happen (so that a clean report means something):
    the object id is echoed, a load in another cwd is refused, the replay reuses the live
    messageIds, a strict agent refuses an unknown field, an id-less error has no id.
    """
    bad_id = b'{"jsonrpc":"2.0","id":{"bad":1},"method":"_acpkit.dev/x"}'
    echoed = _exchange("echo_object_id", INITIALIZE, bad_id)[-1]
    assert echoed["id"] == {"bad": 1} and echoed["error"]["code"] == -32600

    home, elsewhere = str(tmp_path / "home"), str(tmp_path / "elsewhere")
    load = {"sessionId": "s1", "mcpServers": []}
    answers = _exchange(
        "load_own_cwd",
        INITIALIZE,
        _request(2, "session/new", {"cwd": home, "mcpServers": []}),
        _request(3, "session/load", {**load, "cwd": elsewhere}),
        _request(4, "session/load", {**load, "cwd": home}),
    )
    by_id = {a.get("id"): a for a in answers if "method" not in a}
    assert by_id[3]["error"]["code"] == -32602 and by_id[4]["result"] == {}

    allow = {"outcome": {"outcome": "selected", "optionId": "allow"}}
    answers = _exchange(
        "replay_live_ids",
        INITIALIZE,
        _request(2, "session/new", {"cwd": home, "mcpServers": []}),
        _request(
            3, "session/prompt", {"sessionId": "s1", "prompt": [{"type": "text", "text": "hi"}]}
        ),
        {"jsonrpc": "2.0", "id": "c1", "result": allow},
        _request(4, "session/load", {**load, "cwd": home}),
    )
    chunks = [
        a["params"]["update"]["messageId"]
        for a in answers
        if a.get("method") == "session/update"
        and a["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    ]
    assert chunks == ["m1", "m1"]  # live, then replayed with the same id

    strict = _exchange(
        "strict_fields",
        INITIALIZE,
        _request(2, "session/new", {"cwd": home, "mcpServers": []}),
        _request(
            3,
            "session/prompt",
            {"sessionId": "s1", "prompt": [{"type": "text", "text": "hi", "extra": 1}]},
        ),
    )[-1]
    assert strict["id"] == 3 and strict["error"]["code"] == -32602

    idless = _exchange("error_without_id", b"this is not json")[-1]
    assert "id" not in idless and idless["error"]["code"] == -32700


# -- 1. an echoed non-null, non-string/number id -------------------------------------------


@pytest.mark.process
def test_echoed_object_id_is_not_an_answer_to_a_notification() -> None:
    """
    The agent answers ``{"jsonrpc":"2.0","id":{"bad":1},...}`` with -32600 *echoing* that
    id: that is the answer to that line, not "an answer to a notification" (RPC-002).
    """
    result = _run("echo_object_id", only=["RPC"])
    _assert_clean(result)
    statuses = _statuses(result)
    assert statuses["RPC-002"] == "pass"
    assert statuses["RPC-004"] == "pass"


# -- 2. session/load in the session's own cwd ----------------------------------------------


@pytest.mark.process
def test_load_refused_in_another_cwd_is_not_a_broken_load() -> None:
    """
    The agent refuses a ``session/load`` whose cwd is not the session's own (correctly); the
    tester loads in the session's cwd, so loadSession works (CAP-005) and the replay of user
    and agent chunks is judged (SESSION-005).
    """
    result = _run("load_own_cwd", only=["CAP-005", "SESSION"])
    _assert_clean(result)
    statuses = _statuses(result)
    assert statuses["CAP-005"] == "pass"
    assert statuses["SESSION-004"] == "pass"
    assert statuses["SESSION-005"] == "pass"


# -- 3. a prompt answered after the step timeout -------------------------------------------


@pytest.mark.process
def test_prompt_slower_than_the_timeout_is_slow_not_a_finding() -> None:
    """
    The agent waits 3 s before answering each ``session/prompt`` (``--timeout 1``): never a
    finding; the late answers, waited for in the background, judge TURN-001 when they come
    (it holds), and the late updates and responses that arrive during later steps create no
    finding either (TURN-002, TURN-005, CANCEL, ...).
    """
    result = _run("slow_prompt", timeout=1.0)
    assert result.error is None, result.error
    assert _findings(result) == []
    assert result.exit_code != 1
    turn = next(r for r in result.results if r.rule.id == "TURN-001")
    assert turn.status == "pass"


@pytest.mark.process
def test_late_updates_of_an_open_turn_after_a_load_are_not_a_late_replay() -> None:
    """
    A prompt times out (the agent waits 3 s), the client loads the session, and the turn's
    late chunk and response arrive after the load's response: the chunk belongs to the open
    turn, not to the replay, so SESSION-004 must not be reported.
    """
    verdicts = Verdicts()
    config = SuiteConfig(argv=(sys.executable, QUIRKY, "slow_prompt"), timeout=1.0)
    with running_agent(config, verdicts) as agent:
        session = agent.new_session()
        assert session is not None
        outcome = run_turn(agent, session, [{"type": "text", "text": "hi"}])
        assert outcome.timed_out
        (prompt_key,) = [
            k for k, p in agent.observer.pending.items() if p.method == "session/prompt"
        ]
        load = {"sessionId": session, "cwd": agent.cwd_of(session), "mcpServers": []}
        assert "result" in agent.driver.request("session/load", load)
        late = agent.driver.response_to(
            json.loads(prompt_key), "the late prompt response", timeout=10.0
        )
        assert late.get("result") == {"stopReason": "cancelled"}
    assert [f"{f.rule_id}: {f.message}" for f in verdicts.findings] == []


# -- 4. messageIds repeated by a session/load replay ---------------------------------------


@pytest.mark.process
def test_replay_with_the_live_message_ids_is_clean() -> None:
    """
    The agent's ``session/load`` replay reuses the exact messageIds the client saw live:
    a replay is its own stream, so TURN-005 holds (and SESSION-008, the replay's own ids).
    """
    result = _run("replay_live_ids", only=["TURN-005", "SESSION", "CAP-005"])
    _assert_clean(result)
    statuses = _statuses(result)
    for rule_id in ("TURN-005", "SESSION-005", "SESSION-008"):
        assert statuses[rule_id] == "pass", rule_id


@pytest.mark.process
def test_repeated_loads_and_turns_with_live_message_ids_are_clean() -> None:
    """
    Two turns, a load (replaying both with their live ids), another turn, another load: no
    finding, and TURN-005 / SESSION-004 were checked.
    """
    verdicts = Verdicts()
    config = SuiteConfig(argv=(sys.executable, QUIRKY, "replay_live_ids"), timeout=3.0)
    with running_agent(config, verdicts) as agent:
        session = agent.new_session()
        assert session is not None
        load = {"sessionId": session, "cwd": agent.cwd_of(session), "mcpServers": []}
        for text in ("one", "two"):
            assert run_turn(agent, session, [{"type": "text", "text": text}]).stop_reason
        assert "result" in agent.driver.request("session/load", load)
        assert run_turn(agent, session, [{"type": "text", "text": "three"}]).stop_reason
        assert "result" in agent.driver.request("session/load", load)
        assert agent.observer.checks.replayed[session] == 6  # 3 turns: user + agent chunk each
    assert [f"{f.rule_id}: {f.message}" for f in verdicts.findings] == []
    # the live ids (TURN-005) and, within each replay, the replayed ids (SESSION-008)
    assert verdicts.exercised.get("TURN-005", 0) == 3
    assert verdicts.exercised.get("SESSION-008", 0) == 4 + 6
    assert verdicts.exercised.get("SESSION-004", 0) == 2


@pytest.mark.process
def test_message_id_reused_across_live_turns_is_reported() -> None:
    """
    Every turn streams a thought (fresh id), then an agent message with the messageId 'm1':
    a genuinely reused messageId across live turns is still TURN-005.
    """
    result = _run("reuse_message_id", only=["TURN-005"])
    assert result.error is None, result.error
    assert {r.rule.id for r in result.found} == {"TURN-005"}
    assert all("'m1'" in message for message in _findings(result))
    # TURN-005 is a SHOULD: a warning, exit status 0 unless --strict
    assert _statuses(result)["TURN-005"] == "warn"
    assert result.exit_code == 0


@pytest.mark.process
def test_message_id_reused_by_the_next_turn_alone_is_reported() -> None:
    """
    Every turn streams a single agent message, always with the messageId 'm1': two turns'
    messages are two messages, so this is TURN-005 as well.
    """
    result = _run("reuse_message_id_alone", only=["TURN-005"])
    assert {r.rule.id for r in result.found} == {"TURN-005"}


# -- 5. an error answer without an id member -----------------------------------------------


@pytest.mark.process
def test_error_without_id_is_rpc_009_not_no_response() -> None:
    """
    The agent answers malformed lines with ``{"jsonrpc":"2.0","error":{...}}`` (no id
    member): reported as RPC-009 "a response without an id member", and no finding claims
    there was no response (the answers were seen: RPC-003 and RPC-004 hold).
    """
    result = _run("error_without_id", only=["RPC", "FRAME"])
    assert result.error is None, result.error
    assert {r.rule.id for r in result.found} == {"RPC-009"}
    findings = _findings(result)
    assert findings and all("a response without an id member" in f for f in findings)
    for finding in findings:
        assert "no response" not in finding and "no answer" not in finding
    statuses = _statuses(result)
    assert statuses["RPC-003"] == "pass"
    assert statuses["RPC-004"] == "pass"
    assert result.exit_code == 1


@pytest.mark.process
def test_wrong_parse_error_code_is_reported_with_that_code() -> None:
    """The agent answers text that is not JSON with -32600: RPC-003 names the code it got."""
    result = _run("wrong_parse_code", only=["RPC", "FRAME"])
    assert result.error is None, result.error
    assert {r.rule.id for r in result.found} == {"RPC-003"}
    assert any("-32600" in finding for finding in _findings(result))


# -- 6. the agent exits on the batch line ---------------------------------------------------


@pytest.mark.process
def test_crash_on_a_batch_is_filed_under_the_batch_rule() -> None:
    """
    The agent exits on the line ``[ ... ]`` of the envelope probes: the finding is RPC-004
    (the batch probe's rule) and says the agent went away during that step, not RPC-007.
    """
    result = _run("die_on_batch", only=["RPC", "FRAME"])
    assert result.error is None, result.error
    assert {r.rule.id for r in result.found} == {"RPC-004"}
    (finding,) = _findings(result)
    assert finding.startswith("RPC-004: the agent went away during a batch")
    assert "exit status 3" in finding
    assert _statuses(result)["RPC-007"] not in ("fail", "warn")


# -- 7. a strict agent that rejects unknown fields ------------------------------------------


@pytest.mark.process
def test_strict_agent_is_never_sent_unknown_fields_by_the_probes(tmp_path: Path) -> None:
    """
    The agent rejects, with -32602, any field outside the schema at the root of the spec
    types it receives: the fixed probes never send one (no rejection, no finding).
    """
    log = tmp_path / "agent.log"
    result = _run("strict_fields", log=log)
    _assert_clean(result)
    assert [e for e in _events(log) if e["event"] == "rejected"] == []
    assert _statuses(result)["CONTENT-001"] == "pass"


@pytest.mark.process
def test_strict_agent_is_never_sent_unknown_fields_by_the_explorer(tmp_path: Path) -> None:
    """
    The explorer's generated prompts (``profile="quick"``, seeds 0, 1 and 2), of every content
    kind, never trigger the strict agent.
    """
    kinds: set[str] = set()
    for seed in (0, 1, 2):
        log = tmp_path / f"agent-{seed}.log"
        result = _run(
            "strict_fields",
            only=["CONTENT", "TURN", "SESSION-001"],
            explore=True,
            profile="quick",
            seed=seed,
            log=log,
        )
        _assert_clean(result)
        events = _events(log)
        assert [e for e in events if e["event"] == "rejected"] == [], seed
        kinds.update(kind for e in events if e["event"] == "prompt" for kind in e["types"])
    assert {"text", "resource_link"} <= kinds
    assert kinds & {"image", "audio", "resource"}  # generated blocks, not only the probes'


# -- 8. available_commands_update at random moments -----------------------------------------


@pytest.mark.process
def test_async_command_updates_do_not_upset_the_explorer() -> None:
    """
    The agent announces a changing command list 0-300 ms after session/new and after each
    turn: the explorer (``profile="quick"``) neither crashes nor hits a Hypothesis "flaky"
    error, and the run is clean.
    """
    result = _run("async_commands", explore=True, profile="quick", seed=1)
    _assert_clean(result)


@pytest.mark.process
def test_async_command_updates_with_the_full_profile(tmp_path: Path) -> None:
    """
    The same agent under ``profile="full"`` (40 examples of up to 20 steps, about half a
    minute): exit status 0, and the explorer did run announced commands.
    """
    log = tmp_path / "agent.log"
    result = _run("async_commands", explore=True, profile="full", log=log)
    _assert_clean(result)
    commands = [e["text"] for e in _events(log) if e["event"] == "prompt"]
    assert any(text.startswith("/cmd") for text in commands)


# -- 9. pretty-printed messages --------------------------------------------------------------


@pytest.mark.process
def test_pretty_printed_messages_are_frame_002_and_the_run_goes_on() -> None:
    """
    The agent writes every message with ``json.dumps(..., indent=2)``: reported FRAME-002
    (not exit 2 "never answered initialize"), and every other rule is still judged.
    """
    result = _run("pretty_print")
    assert result.error is None, result.error
    assert {r.rule.id for r in result.found} == {"FRAME-002"}
    assert all("written over" in finding for finding in _findings(result))
    assert result.exit_code == 1
    statuses = _statuses(result)
    for rule_id in ("INIT-001", "RPC-005", "SESSION-001", "TURN-001", "CAP-005", "SESSION-005"):
        assert statuses[rule_id] == "pass", rule_id


@pytest.mark.process
def test_pretty_printed_message_with_an_empty_object_is_still_frame_002() -> None:
    """
    The same, with ``"_meta": {"quirky.example/list": [{}]}`` in the initialize result (one of
    its lines is ``{}``): still FRAME-002, not "never answered initialize".
    """
    result = _run("pretty_print_empty_object", only=["FRAME", "INIT-001"], timeout=1.0)
    assert result.error is None, result.error
    assert {r.rule.id for r in result.found} == {"FRAME-002"}


# -- 10. a crash of the tester itself ---------------------------------------------------------


def _boom(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError("a bug in the tester")


@pytest.mark.process
def test_tester_crash_in_a_probe_is_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception inside a probe is "the tester failed" (exit 2), never a finding (exit 1)."""
    monkeypatch.setattr(probes, "probe_envelope", _boom)
    result = _run(None, only=["RPC-005"])
    assert result.exit_code == 2
    assert result.error is not None
    assert "tester itself failed" in result.error and "a bug in the tester" in result.error
    assert result.found == []
    out = io.StringIO()
    argv = ["--profile", "smoke", "--timeout", "3", "--rules", "RPC-005", "--"]
    assert main([*argv, sys.executable, QUIRKY], out=out) == 2
    assert "CANNOT TEST" in out.getvalue() and "a bug in the tester" in out.getvalue()
    out = io.StringIO()
    assert main(["--report", "json", *argv, sys.executable, QUIRKY], out=out) == 2
    assert json.loads(out.getvalue())["exit_code"] == 2


@pytest.mark.process
def test_tester_crash_in_the_explorer_is_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception inside the explorer is exit 2 with the traceback, not exit 1."""
    monkeypatch.setattr(machine.Explorer, "_step_new_session", _boom)
    result = _run(None, only=["RPC-005"], explore=True)
    assert result.exit_code == 2
    assert result.error is not None and "a bug in the tester" in result.error
    assert result.found == []


def test_tester_crash_outside_run_suite_is_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The last resort of ``main``: an exception escaping ``run_suite`` is exit 2 too."""
    monkeypatch.setattr("acpkit.conformance.cli.run_suite", _boom)
    assert main(["--profile", "smoke", "--", sys.executable, QUIRKY], out=io.StringIO()) == 2
    assert "the tester failed" in capsys.readouterr().err


# -- 9. probes whose precondition is not met (issue 23, item 4) ------------------------------


@pytest.mark.process
def test_an_agent_that_needs_a_login_gets_no_framing_or_process_finding() -> None:
    """
    session/new is refused with -32000 until the client logs in (only the authentication
    probe does): the split-write probe (an unknown request: no session needed) and the EOF
    probes (a pending request instead of a turn) still judge FRAME-004, FRAME-009 and
    FRAME-010, which hold; the refusal's code is the right one (AUTH-003); RPC-006 (sent
    through session/new) and the session rules are not applicable, with the reason; there is
    no finding at all.
    """
    result = _run("needs_login", timeout=2.0)
    assert result.error is None, result.error
    assert _findings(result) == []
    statuses = _statuses(result)
    for rule_id in ("FRAME-004", "FRAME-009", "FRAME-010", "AUTH-002", "AUTH-003"):
        assert statuses[rule_id] == "pass", rule_id
    reasons = {r.rule.id: r.reason for r in result.results}
    assert statuses["RPC-006"] == "not-applicable"
    assert "needs authentication" in reasons["RPC-006"]
    assert statuses["CONTENT-001"] == "not-applicable"
    assert "session/new failed" in reasons["CONTENT-001"]
