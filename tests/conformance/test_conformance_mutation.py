"""
The conformance mutation harness (issue 23, "How to know it works").

Two conformant reference agents with no model (tests/fixtures/conformance_reference: the
same behaviours behind slash commands worded differently) and their single-fault variants,
each breaking one rule of the catalogue. The tester is run as a user runs it
(``python -m acpkit.conformance --profile quick ... -- python agent_a.py FAULT``, real
processes, several at a time): it must pass both reference agents (exit 0) and report each
variant under the variant's own rule. The mutation score (killed / total, per family) and
the survivors, each with why it survived, are printed::

    python -m pytest tests/conformance/test_conformance_mutation.py -s

Three matrices, chosen by ``ACPKIT_MUTATION_MATRIX``:

- ``ci`` (the default): `CI_VARIANTS`, a representative subset (every family, every way
  the tester finds a fault: a fixed probe, the explorer, a discovered command, an
  unanswered request, the process's exit), each on agent A, the command-gated ones of
  `CI_ON_B` on agent B too (B's commands are worded differently: discovery must learn
  them), and both reference agents. A minute or so.
- ``all``: every variant on A; on B the variants whose fault shows only through a command
  (the others are the same bytes on both). Several minutes: run it when the tester or the
  variants change.
- ``full``: every variant on both.

`MUST_BE_KILLED` is asserted in every matrix for the variants that matrix runs.

`MUST_BE_KILLED` is the one list of variants the test asserts killed: every variant today's
tester kills reliably. The others are reported, not asserted: tighten the list as the
tester learns to find them (the printout names the variants killed but not listed).

The other tests drive each command through the tester's harness (each command-gated fault
too), so a survivor is never a fault that does not work: it is one the tester did not find.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest

from acpkit.conformance.harness import (
    Agent,
    SuiteConfig,
    client_capabilities,
    run_turn,
    running_agent,
)
from acpkit.conformance.observer import Verdicts
from acpkit.conformance.rules import RULES_BY_ID
from tests.fixtures.conformance_reference.faults import FAMILIES, VARIANTS, Variant
from tests.fixtures.conformance_reference.sessions import STORE_VARIABLE
from tests.fixtures.conformance_reference.wordings import (
    BEHAVIOURS,
    PERSONA_A,
    PERSONA_B,
    Persona,
)

REFERENCE = Path(__file__).parent.parent / "fixtures" / "conformance_reference"
AGENTS: dict[str, str] = {"a": str(REFERENCE / "agent_a.py"), "b": str(REFERENCE / "agent_b.py")}
PERSONAS: dict[str, Persona] = {"a": PERSONA_A, "b": PERSONA_B}

#: The tester's step timeout for these agents (they answer in milliseconds; a fault that
#: leaves a request unanswered costs this much per request).
STEP_TIMEOUT = 3.0
#: Tester runs at a time, each with agent processes of its own: a run mostly waits (on the
#: agent, on step timeouts, on its own drains) and costs about 2 CPU-seconds;
#: ``ACPKIT_MUTATION_WORKERS`` overrides.
WORKERS = int(os.environ.get("ACPKIT_MUTATION_WORKERS", "12"))
#: A run that takes longer is a tester bug: stop it.
RUN_LIMIT = 300.0

#: The variants the tester must report under their own rule, on every agent they run on:
#: every variant today's tester kills reliably. The lead tightens this list as the tester
#: improves (the printed score names the variants killed but not listed).
MUST_BE_KILLED: frozenset[str] = frozenset(
    {
        # framing
        "banner",
        "pretty_print",
        "decode_each_read",
        "die_on_long_line",
        "die_on_junk",
        # envelope
        "parse_error_code",
        "invalid_request_code",
        "result_for_unknown_method",
        "invalid_params_code",
        "error_code_as_string",
        # ids
        "string_ids",
        "fractional_request_ids",  # the explorer runs the write command (fs with an id 1.5)
        "reuse_message_ids",
        # notifications
        "answer_notifications",
        "die_on_unknown_notification",
        "updates_after_response",
        # versions
        "downgrade_unknown_version",
        "echo_any_version",
        "version_as_string",
        "no_agent_info",
        # sessions
        "duplicate_session_ids",
        "accept_relative_cwd",
        "load_without_replay",
        "resume_replays",
        "resume_not_implemented",
        "list_ignores_cwd",
        "modes_out_of_sync",
        # prompts
        "reject_resource_link",
        "cancelled_without_cancel",
        "usage_without_size",  # the explorer runs the usage command
        # cancellation
        "answer_late_cancel_request",
        # paths
        "relative_list_cwd",
        # process lifetime
        "ignore_eof",
        # extensibility
        "vendor_request_unanswered",  # since wt-conf: an unanswered request is a finding
        "custom_root_field",
        "custom_error_field",  # issue 23 item 5: error objects are spec-typed
        "unadvertised_extension",
        "unprefixed_extension",
        # _meta
        "bad_traceparent",
        "meta_not_object",
        "reject_meta",
        "meta_values_are_strings",
        # killed since discovery, unanswered requests as findings, FRAME-010 and the
        # tool-call lifecycle rules (issue 23)
        *("latin1_output", "first_line_per_read", "hang_on_early_eof", "exit_before_answering"),
        *("reuse_tool_call_ids", "close_keeps_turn", "no_stop_reason"),
        *("ignore_cancel", "ignore_cancel_request"),
        *("unannounced_tool_update", "status_backwards", "unfinished_tool"),
        *("plan_entry_vanishes", "plan_entry_without_priority"),
        *("end_turn_after_permission_cancel", "allowed_tool_not_run"),
        *("read_without_capability", "write_without_capability"),
        *("terminal_without_capability", "terminal_never_released", "terminal_after_release"),
        *("relative_read_path", "relative_terminal_cwd", "zero_line", "read_outside_cwd"),
    }
)

#: The CI matrix's variants (agent A): one or more per family, and each way the tester finds
#: a fault (see the module docstring).
CI_VARIANTS: frozenset[str] = frozenset(
    {
        *("banner", "decode_each_read", "die_on_long_line"),  # framing
        *("parse_error_code", "invalid_params_code"),  # envelope
        *("string_ids", "fractional_request_ids"),  # ids (a permission command)
        *("answer_notifications", "updates_after_response"),  # notifications
        "echo_any_version",  # versions
        *("duplicate_session_ids", "load_without_replay", "close_keeps_turn"),  # sessions
        *("cancelled_without_cancel", "usage_without_size"),  # prompts (the explorer)
        *("ignore_cancel", "answer_late_cancel_request"),  # cancellation
        "unannounced_tool_update",  # tool-call lifecycle
        "plan_entry_vanishes",  # plans
        "allowed_tool_not_run",  # permissions
        *("read_without_capability", "terminal_never_released"),  # fs and terminal
        *("relative_read_path", "relative_list_cwd"),  # paths
        "ignore_eof",  # process lifetime
        *("vendor_request_unanswered", "custom_root_field"),  # extensibility (unanswered)
        *("bad_traceparent", "meta_values_are_strings"),  # _meta
    }
)
#: The command-gated CI variants run on agent B too: one per way a command is discovered
#: (a long turn, a tool call, a permission request, a file read, a terminal).
CI_ON_B: frozenset[str] = frozenset(
    {"ignore_cancel", "unannounced_tool_update", "fractional_request_ids"}
    | {"read_without_capability", "terminal_never_released"}
)

#: Killed in most runs, not asserted: the tester's cancel lands in the 20 ms an echo turn
#: takes only when the machine is not too busy (a cancel that races the end of the turn is
#: inconclusive by design).
KILLED_WHEN_THE_CANCEL_WINS_THE_RACE = frozenset({"error_on_cancel", "tool_after_cancel"})


# -- running the tester --------------------------------------------------------------------


@attrs.frozen
class Run:
    """One ``acpkit-conformance --profile quick`` run on one agent (and fault)."""

    agent: str
    fault: str
    exit_code: int
    #: rule id -> (status, reason, number of findings), from the JSON report
    rules: Mapping[str, tuple[str, str, int]]
    error: str | None
    seconds: float

    @property
    def reported(self) -> frozenset[str]:
        """The rules with at least one finding."""
        return frozenset(r for r, (_, _, findings) in self.rules.items() if findings)

    @property
    def killed(self) -> bool:
        """The variant's own rule was reported."""
        return VARIANTS[self.fault].rule in self.reported

    def describe(self) -> str:
        """``agent:fault`` for messages."""
        return f"{self.agent}:{self.fault or 'reference'}"


def quick(agent: str, fault: str, store: Path) -> Run:
    """Run the tester's CLI (``--profile quick``, JSON report) on one agent."""
    argv = [sys.executable, "-m", "acpkit.conformance", "--profile", "quick"]
    argv += ["--timeout", f"{STEP_TIMEOUT:g}", "--report", "json", "--"]
    argv += [sys.executable, AGENTS[agent], *([fault] if fault else [])]
    store.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, STORE_VARIABLE: str(store)}
    env.pop("ACPKIT_REFERENCE_FAULT", None)
    started = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=RUN_LIMIT)
    except subprocess.TimeoutExpired:
        return Run(agent, fault, -1, {}, f"the tester ran over {RUN_LIMIT:g}s", RUN_LIMIT)
    seconds = time.monotonic() - started
    try:
        report = json.loads(done.stdout)
    except ValueError:
        tail = (done.stdout + done.stderr)[-600:]
        return Run(agent, fault, done.returncode, {}, f"no JSON report: {tail}", seconds)
    rules = {
        str(r["id"]): (str(r["status"]), str(r.get("reason") or ""), len(r.get("findings") or []))
        for r in report.get("rules", [])
    }
    return Run(agent, fault, done.returncode, rules, report.get("error"), seconds)


#: Variants whose runs wait for step timeouts (unanswered requests, a process that does not
#: exit): started first, so that they do not stretch the end of the matrix.
STARTS_FIRST = ("vendor_request_unanswered", "ignore_eof", "first_line_per_read")


MATRICES = ("ci", "all", "full")


def matrix_jobs(matrix: str) -> list[tuple[str, str]]:
    """(agent, fault) pairs: both references, then (``all``) every variant on A and on B the
    variants whose fault needs a command, (``full``) every variant on both, or (``ci``)
    `CI_VARIANTS` on A and `CI_ON_B` on B; the slow ones first."""
    if matrix not in MATRICES:
        raise ValueError(f"ACPKIT_MUTATION_MATRIX is one of {', '.join(MATRICES)}: {matrix!r}")
    jobs = [(agent, "") for agent in AGENTS]
    for fault, variant in VARIANTS.items():
        if matrix == "ci":
            if fault in CI_VARIANTS:
                jobs.append(("a", fault))
            if fault in CI_ON_B:
                jobs.append(("b", fault))
            continue
        jobs.append(("a", fault))
        if matrix == "full" or variant.shows != "always":
            jobs.append(("b", fault))
    return sorted(jobs, key=lambda job: job[1] not in STARTS_FIRST)


def run_matrix(root: Path, jobs: list[tuple[str, str]]) -> list[Run]:
    """The tester on every job, ``WORKERS`` at a time."""

    def one(job: tuple[str, str]) -> Run:
        agent, fault = job
        return quick(agent, fault, root / f"{agent}-{fault or 'reference'}")

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        return list(pool.map(one, jobs))


# -- the score -----------------------------------------------------------------------------


def why_survived(run: Run) -> str:
    """Why a variant's rule was not reported, in the report's own words."""
    variant = VARIANTS[run.fault]
    if run.error is not None:
        return f"the tester gave up (exit 2): {run.error.splitlines()[0][:140]}"
    if variant.rule not in RULES_BY_ID:
        return "the catalogue has no such rule yet"
    status, reason, _ = run.rules.get(variant.rule, ("missing", "", 0))
    if status == "pass":
        why = "its rule passed (exercised, the fault unseen)"
    elif status == "slow":
        why = f"could not be judged in time ({reason})"
    else:
        why = f"{status}: {reason or 'no reason given'}"
    if variant.shows != "always":
        command = PERSONAS[run.agent].commands[variant.shows].name
        why += f"; the fault shows only when /{command} runs"
    others = sorted(run.reported)
    if others:
        why += f"; reported instead: {', '.join(others)}"
    return why


def _killed_everywhere(runs: list[Run]) -> dict[str, bool]:
    """fault -> killed on every agent it ran on."""
    verdict: dict[str, bool] = {}
    for run in runs:
        if run.fault:
            verdict[run.fault] = verdict.get(run.fault, True) and run.killed
    return verdict


def render_score(runs: list[Run]) -> str:
    """The mutation score, per family and per agent, the survivors and the times."""
    variants = [r for r in runs if r.fault]
    by_fault = _killed_everywhere(runs)
    killed = sum(by_fault.values())
    lines = [
        f"mutation score: {killed} / {len(by_fault)} variants killed on every agent they ran "
        f"on ({100 * killed / max(1, len(by_fault)):.0f}%); "
        f"{sum(r.killed for r in variants)} / {len(variants)} runs",
    ]
    for agent in AGENTS:
        mine = [r for r in variants if r.agent == agent]
        lines.append(f"  agent {agent}: {sum(r.killed for r in mine)} / {len(mine)} variants")
    lines.append("per family (variants killed on every agent):")
    for family in FAMILIES:
        faults = [f for f in by_fault if VARIANTS[f].family == family]
        lines.append(f"  {family:<30} {sum(by_fault[f] for f in faults):>3} / {len(faults)}")
    for run in runs:
        if not run.fault:
            warnings = ", ".join(sorted(run.reported)) or "none"
            lines.append(
                f"reference {run.agent}: exit {run.exit_code}, findings: {warnings}, "
                f"{run.seconds:.1f}s"
            )
    lines.append("survivors:")
    for run in variants:
        if not run.killed:
            variant = VARIANTS[run.fault]
            lines.append(
                f"  {run.describe():<36} {variant.rule:<12} {variant.family}: {why_survived(run)}"
            )
    unlisted = sorted(f for f, dead in by_fault.items() if dead and f not in MUST_BE_KILLED)
    if unlisted:
        lines.append(f"killed but not in MUST_BE_KILLED: {', '.join(unlisted)}")
    seconds = sorted(r.seconds for r in runs)
    slowest = sorted(runs, key=lambda r: r.seconds)[-5:]
    lines.append(
        f"run times: median {seconds[len(seconds) // 2]:.1f}s, total {sum(seconds):.0f}s; "
        f"slowest: {', '.join(f'{r.describe()} {r.seconds:.0f}s' for r in reversed(slowest))}"
    )
    return "\n".join(lines)


@pytest.mark.process
def test_mutation_score(tmp_path: Path) -> None:
    """
    The tester (``--profile quick``) passes both reference agents (exit 0, no MUST finding;
    a SHOULD finding is a warning, printed) and
    reports every variant of `MUST_BE_KILLED` under its own rule on every agent it runs on;
    the score is printed.
    """
    started = time.monotonic()
    matrix = os.environ.get("ACPKIT_MUTATION_MATRIX", "ci")
    runs = run_matrix(tmp_path, matrix_jobs(matrix))
    took = time.monotonic() - started
    print(f"\n{render_score(runs)}\nthe {matrix} matrix took {took:.0f}s")
    problems = []
    for run in runs:
        musts = sorted(r for r in run.reported if RULES_BY_ID[r].level == "MUST")
        if not run.fault and (run.exit_code != 0 or musts or run.error is not None):
            problems.append(f"{run.describe()}: exit {run.exit_code}, {musts}, {run.error}")
        elif run.fault in MUST_BE_KILLED and not run.killed:
            rule = VARIANTS[run.fault].rule
            problems.append(f"{run.describe()} ({rule}) survived: {why_survived(run)}")
    assert problems == []


def test_the_matrix_runs_every_variant_and_both_references() -> None:
    """In the ``all`` matrix A runs every variant, B the command-gated ones (every one in the
    ``full`` matrix); every matrix runs both references."""
    jobs = matrix_jobs("all")
    assert {f for a, f in jobs if a == "a"} == {"", *VARIANTS}
    gated = {f for f, v in VARIANTS.items() if v.shows != "always"}
    assert {f for a, f in jobs if a == "b"} == {"", *gated}
    assert len(matrix_jobs("full")) == 2 * (len(VARIANTS) + 1)
    with pytest.raises(ValueError, match="one of ci, all, full"):
        matrix_jobs("everything")


def test_the_ci_matrix_covers_every_family_with_asserted_variants() -> None:
    """The CI subset has a variant of every family, every one of them in `MUST_BE_KILLED`
    (a CI run asserts each), and runs B on command-gated variants of five behaviours."""
    jobs = matrix_jobs("ci")
    assert {f for a, f in jobs if a == "a"} == {"", *CI_VARIANTS}
    assert {f for a, f in jobs if a == "b"} == {"", *CI_ON_B}
    assert CI_ON_B <= CI_VARIANTS <= MUST_BE_KILLED
    assert {VARIANTS[f].family for f in CI_VARIANTS} == set(FAMILIES)
    assert len({VARIANTS[f].shows for f in CI_ON_B}) == len(CI_ON_B)


def test_must_be_killed_names_variants() -> None:
    """The asserted list names known variants, none of them timing-dependent."""
    assert MUST_BE_KILLED <= set(VARIANTS)
    assert set(STARTS_FIRST) <= set(VARIANTS)
    assert not MUST_BE_KILLED & KILLED_WHEN_THE_CANCEL_WINS_THE_RACE


# -- the variants and the wordings themselves ----------------------------------------------


def test_there_are_at_least_forty_variants_covering_every_family() -> None:
    """At least 40 variants; every family of the issue has one; each names a known family."""
    assert len(VARIANTS) >= 40
    assert {v.family for v in VARIANTS.values()} == set(FAMILIES)
    assert {v.shows for v in VARIANTS.values()} <= {"always", *BEHAVIOURS}


def test_variants_name_catalogue_rules_except_the_proposed_lifecycle_ones() -> None:
    """Each variant names a rule of the catalogue, or one of the tool-call lifecycle rules
    the catalogue does not have yet (reported as surviving for want of a rule)."""
    unknown = {f: v.rule for f, v in VARIANTS.items() if v.rule not in RULES_BY_ID}
    assert set(unknown) <= {"unannounced_tool_update", "status_backwards"}


def test_the_two_agents_word_every_command_differently() -> None:
    """No command name, hint or mode of one agent appears in the other's wording."""
    a, b = PERSONA_A, PERSONA_B
    assert set(a.commands) == set(b.commands) == set(BEHAVIOURS)

    def words(persona: Persona) -> set[str]:
        text = " ".join(
            f"{w.name} {w.description} {w.hint or ''}" for w in persona.commands.values()
        )
        return {word.strip(".,;:()").lower() for word in text.split()}

    for key in BEHAVIOURS:
        assert a.commands[key].name not in words(b), key
        assert b.commands[key].name not in words(a), key
        assert a.commands[key].hint != b.commands[key].hint or a.commands[key].hint is None
    assert not {m[0] for m in a.modes} & {m[0] for m in b.modes}


# -- each command, and each command-gated fault, driven by the tester's harness ------------

ALL_CAPABILITIES = client_capabilities(True, True, terminal=True)


@contextmanager
def agent_of(
    agent: str, fault: str, tmp_path: Path, capabilities: dict[str, Any] | None = None
) -> Iterator[tuple[Agent, Verdicts]]:
    """A started reference agent (with ``fault``) under the tester's observer."""
    verdicts = Verdicts()
    env = {**os.environ, STORE_VARIABLE: str(tmp_path / "store")}
    argv = (sys.executable, AGENTS[agent], *([fault] if fault else []))
    config = SuiteConfig(argv=argv, env=env, timeout=STEP_TIMEOUT)
    caps = ALL_CAPABILITIES if capabilities is None else capabilities
    with running_agent(config, verdicts, capabilities=caps) as started:
        yield started, verdicts


def command(agent: str, behaviour: str, arg: str = "") -> list[dict[str, Any]]:
    """The prompt that runs ``behaviour`` on ``agent``, as that agent words it."""
    name = PERSONAS[agent].commands[behaviour].name
    return [{"type": "text", "text": f"/{name} {arg}".strip()}]


def received(started: Agent) -> list[dict[str, Any]]:
    """Every message the agent wrote so far."""
    messages = []
    for _, direction, line in started.observer.transcript.records:
        if direction == "<-":
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict):
                messages.append(message)
    return messages


def tool_updates(started: Agent) -> list[dict[str, Any]]:
    """The tool_call and tool_call_update bodies, in order."""
    updates = []
    for message in received(started):
        params = message.get("params")
        update = params.get("update") if isinstance(params, dict) else None
        if isinstance(update, dict) and str(update.get("sessionUpdate")).startswith("tool_call"):
            updates.append(update)
    return updates


#: behaviour -> (input, how the turn runs: run_turn's ``cancel``, and the rules it must exercise)
COMMAND_TURNS: dict[str, tuple[str, str | None, tuple[str, ...]]] = {
    "stream": ("5", "first_update", ("CANCEL-001", "CANCEL-003", "TURN-001")),
    "tool": ("notes.txt", None, ("TURN-003", "PATH-001", "FS-001")),
    "permission": ("deploy", None, ("TOOL-001", "RPC-011")),
    "read": ("missing.txt", None, ("CAP-001", "PATH-001", "SESSION-010")),
    "write": ("note.txt", None, ("CAP-001", "PATH-001", "SESSION-010")),
    "terminal": ("hello", None, ("CAP-002", "TERMINAL-001", "TERMINAL-002", "TERMINAL-004")),
    "plan": ("ship it", None, ("TURN-004",)),
    "usage": ("", None, ("TURN-006",)),
    "mode": ("", None, ("TURN-001",)),
}


@pytest.mark.process
@pytest.mark.parametrize("behaviour", BEHAVIOURS)
@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_each_command_is_conformant(agent: str, behaviour: str, tmp_path: Path) -> None:
    """
    Each advertised command, run by the tester's harness with every capability offered,
    does what it says and breaks no rule; the rules its behaviour is about are exercised.
    """
    arg, cancel, rules = COMMAND_TURNS[behaviour]
    if behaviour == "mode":
        arg = PERSONAS[agent].modes[1][0]
    with agent_of(agent, "", tmp_path) as (started, verdicts):
        session = started.new_session()
        assert session is not None
        outcome = run_turn(started, session, command(agent, behaviour, arg), cancel=cancel)
        started.driver.drain(0.2)
    assert outcome.stop_reason == ("cancelled" if cancel else "end_turn")
    assert [f"{f.rule_id}: {f.message}" for f in verdicts.findings] == []
    assert set(rules) <= set(verdicts.exercised), set(rules) - set(verdicts.exercised)


@pytest.mark.process
@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_countdown_cancelled_by_cancel_request_is_answered_once(agent: str, tmp_path: Path) -> None:
    """``$/cancel_request`` for a running long turn: one answer, -32800, at once."""
    with agent_of(agent, "", tmp_path) as (started, _):
        session = started.new_session()
        rid = cancel_request_mid_turn(started, str(session))
        response = started.driver.response_to(rid, "the cancelled prompt")
        started.driver.drain(0.3)
    assert response.get("error", {}).get("code") == -32800
    assert [m for m in received(started) if m.get("id") == rid and "method" not in m] == [response]


def cancel_request_mid_turn(started: Agent, session: str) -> Any:
    """Start a 5 s countdown, wait for its first chunk, send ``$/cancel_request``: its id."""
    driver = started.driver
    rid = driver.next_id()
    agent = "a" if "agent_a" in " ".join(driver.argv) else "b"
    params = {"sessionId": session, "prompt": command(agent, "stream", "5")}
    driver.send({"jsonrpc": "2.0", "id": rid, "method": "session/prompt", "params": params})
    driver.wait_for(lambda m: m.get("method") == "session/update", "the first chunk")
    driver.notify("$/cancel_request", {"requestId": rid})
    return rid


@pytest.mark.process
@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_close_during_a_countdown_ends_it_before_the_close_answer(
    agent: str, tmp_path: Path
) -> None:
    """session/close mid-turn: the turn is answered cancelled, then the close; nothing after."""
    with agent_of(agent, "", tmp_path) as (started, verdicts):
        session = str(started.new_session())
        close_mid_turn(started, session)
        started.driver.drain(0.5)
    assert updates_after_close(started, session) == []
    assert verdicts.findings == []


def close_mid_turn(started: Agent, session: str) -> tuple[Any, dict[str, Any]]:
    """Start a 3 s countdown, close the session after its first chunk; the prompt's id and
    the close answer."""
    driver = started.driver
    rid = driver.next_id()
    agent = "a" if "agent_a" in " ".join(driver.argv) else "b"
    params = {"sessionId": session, "prompt": command(agent, "stream", "3")}
    driver.send({"jsonrpc": "2.0", "id": rid, "method": "session/prompt", "params": params})
    driver.wait_for(lambda m: m.get("method") == "session/update", "the first chunk")
    return rid, driver.request("session/close", {"sessionId": session})


def updates_after_close(started: Agent, session: str) -> list[str]:
    """The kinds of the session's updates written after the session/close answer."""
    kinds: list[str] = []
    closed = False
    for message in received(started):
        if message.get("result") == {} and not closed and "method" not in message:
            closed = True
            continue
        params = message.get("params")
        if closed and message.get("method") == "session/update" and isinstance(params, dict):
            if params.get("sessionId") == session:
                kinds.append(str(params["update"].get("sessionUpdate")))
    return kinds


def drive(agent: str, fault: str, tmp_path: Path, *, plant: bool = True) -> tuple[Agent, Verdicts]:
    """
    Run the command that shows ``fault`` the way that shows it (on the variant, or with
    ``plant`` false the same way on the reference agent); the agent and the verdicts.
    """
    variant = VARIANTS[fault]
    behaviour = variant.shows
    arg, cancel, _ = COMMAND_TURNS[behaviour]
    capabilities: dict[str, Any] | None = None
    if fault.endswith("_without_capability"):
        capabilities = {}
    permission = "allow"
    if fault == "end_turn_after_permission_cancel":
        cancel = "permission"
    if fault.startswith("ignore_cancel") or fault in ("error_on_cancel", "tool_after_cancel"):
        arg = "2"
    with agent_of(agent, fault if plant else "", tmp_path, capabilities) as (started, verdicts):
        session = started.new_session()
        assert session is not None
        if fault == "ignore_cancel_request":
            cancel_request_mid_turn(started, session)
            started.driver.drain(STEP_TIMEOUT)
        elif fault == "close_keeps_turn":
            close_mid_turn(started, session)
            started.driver.drain(3.5)
        else:
            turns = 2 if fault == "reuse_tool_call_ids" else 1
            for _ in range(turns):
                run_turn(
                    started,
                    session,
                    command(agent, behaviour, arg),
                    cancel=cancel,
                    permission=permission,
                )
        started.driver.drain(0.2)
    return started, verdicts


def _unannounced(started: Agent) -> bool:
    announced: set[Any] = set()
    for update in tool_updates(started):
        if update["sessionUpdate"] == "tool_call":
            announced.add(update.get("toolCallId"))
        elif update.get("toolCallId") not in announced:
            return True
    return False


def _backwards(started: Agent) -> bool:
    order = {"pending": 0, "in_progress": 1, "completed": 2, "failed": 2}
    last: dict[Any, int] = {}
    for update in tool_updates(started):
        status = update.get("status")
        if status in order:
            tool_id = update.get("toolCallId")
            if order[str(status)] < last.get(tool_id, 0):
                return True
            last[tool_id] = order[str(status)]
    return False


def _never_answered(started: Agent) -> bool:
    prompts = [m for m in received(started) if "method" not in m and "id" in m]
    return not any(m.get("error", {}).get("code") == -32800 for m in prompts) and not any(
        isinstance(m.get("result"), dict) and "stopReason" in m["result"] for m in prompts
    )


def _reused_tool_id(started: Agent) -> bool:
    announced = [
        u.get("toolCallId") for u in tool_updates(started) if u["sessionUpdate"] == "tool_call"
    ]
    return len(announced) != len(set(announced))


def _entry_came_back(started: Agent) -> bool:
    seen: set[str] = set()
    previous: set[str] = set()
    for message in received(started):
        params = message.get("params")
        update = params.get("update") if isinstance(params, dict) else None
        if isinstance(update, dict) and update.get("sessionUpdate") == "plan":
            now = {str(e.get("content")) for e in update.get("entries", [])}
            if (now - previous) & seen:
                return True
            seen |= now
            previous = now
    return False


#: The variants today's tester does not judge even when their command runs, with what the
#: traffic shows instead: the fault is real, the tester lacks the rule or its check is
#: narrower than the rule (a reported rule is welcome too).
SYMPTOMS: dict[str, tuple[str, Callable[[Agent], bool]]] = {
    "unannounced_tool_update": ("a tool_call_update for an id never announced", _unannounced),
    "status_backwards": ("a tool call status that moves backwards", _backwards),
    "ignore_cancel_request": ("no answer to the prompt after $/cancel_request", _never_answered),
    "reuse_tool_call_ids": ("one toolCallId announced twice in a session", _reused_tool_id),
    "plan_entry_vanishes": ("a plan entry that vanished and came back", _entry_came_back),
}

COMMAND_FAULTS = sorted(f for f, v in VARIANTS.items() if v.shows != "always")


@pytest.mark.process
@pytest.mark.parametrize("fault", COMMAND_FAULTS)
@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_each_command_gated_fault_shows_when_its_command_runs(
    agent: str, fault: str, tmp_path: Path
) -> None:
    """
    Run through its command, each command-gated fault is reported under its rule by the
    tester's observer, or (for the checks the tester does not have) shows in the traffic.
    """
    started, verdicts = drive(agent, fault, tmp_path)
    variant: Variant = VARIANTS[fault]
    if fault == "close_keeps_turn":
        assert updates_after_close(started, next(iter(started.session_cwd))) != []
        return
    if fault in SYMPTOMS:
        what, shows = SYMPTOMS[fault]
        assert shows(started) or variant.rule in {f.rule_id for f in verdicts.findings}, what
        reference, _ = drive(agent, fault, tmp_path / "reference", plant=False)
        assert not shows(reference), f"the reference agent shows it too: {what}"
        return
    assert variant.rule in {f.rule_id for f in verdicts.findings}, [
        f"{f.rule_id}: {f.message}" for f in verdicts.findings
    ]


# -- the faults that need no command, on raw pipes -----------------------------------------


@attrs.define
class Pipe:
    """A reference agent on raw pipes: write bytes, read lines, watch it exit."""

    process: subprocess.Popen[bytes]
    buffer: bytes = b""
    lines: list[bytes] = attrs.field(factory=list)

    def write(self, *messages: dict[str, Any], close: bool = False) -> None:
        """All ``messages`` in one write (then close stdin)."""
        assert self.process.stdin is not None
        data = b"".join(json.dumps(m).encode() + b"\n" for m in messages)
        self.process.stdin.write(data)
        self.process.stdin.flush()
        if close:
            self.process.stdin.close()

    def read_until(self, done: Callable[[list[dict[str, Any]]], bool], seconds: float) -> bool:
        """Read lines until ``done(messages)`` or ``seconds`` pass (or stdout ends)."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + seconds
        while not done(self.messages()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            ready = selectors.DefaultSelector()
            ready.register(fd, selectors.EVENT_READ)
            events = ready.select(remaining)
            ready.close()
            if not events:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return done(self.messages())
            *complete, self.buffer = (self.buffer + chunk).split(b"\n")
            self.lines += complete
        return True

    def messages(self) -> list[dict[str, Any]]:
        """The lines read so far that are JSON objects."""
        found = []
        for line in self.lines:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict):
                found.append(message)
        return found

    def answer(self, rid: Any) -> dict[str, Any] | None:
        """The response with id ``rid`` read so far."""
        return next((m for m in self.messages() if m.get("id") == rid and "method" not in m), None)

    def exited_within(self, seconds: float) -> int | None:
        """The exit status if the process ends within ``seconds``."""
        try:
            return self.process.wait(seconds)
        except subprocess.TimeoutExpired:
            return None


@contextmanager
def pipe(fault: str, tmp_path: Path) -> Iterator[Pipe]:
    """Agent A (with ``fault``) on raw pipes; killed at the end."""
    env = {**os.environ, STORE_VARIABLE: str(tmp_path / "store")}
    argv = [sys.executable, AGENTS["a"], *([fault] if fault else [])]
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    try:
        yield Pipe(process)
    finally:
        process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None and not stream.closed:
                stream.close()


def request(rid: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """A request message."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        message["params"] = params
    return message


INITIALIZE = request(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})


def open_session(agent: Pipe, cwd: Path) -> str:
    """initialize and session/new; the session id."""
    agent.write(INITIALIZE, request(2, "session/new", {"cwd": str(cwd), "mcpServers": []}))
    assert agent.read_until(lambda ms: any(m.get("id") == 2 for m in ms), STEP_TIMEOUT)
    answer = agent.answer(2)
    assert answer is not None
    return str(answer["result"]["sessionId"])


def prompt(rid: int, session: str, text: str) -> dict[str, Any]:
    """A session/prompt with one text block."""
    blocks = [{"type": "text", "text": text}]
    return request(rid, "session/prompt", {"sessionId": session, "prompt": blocks})


def eof_after_a_prompt(agent: Pipe, tmp_path: Path) -> bool:
    """A prompt, then stdin closed at once: the prompt answered before the process exits."""
    session = open_session(agent, tmp_path)
    agent.write(prompt(3, session, "hello"), close=True)
    agent.read_until(lambda ms: False, STEP_TIMEOUT)  # until stdout ends
    answer = agent.answer(3)
    exited = agent.exited_within(STEP_TIMEOUT)
    return answer is not None and "stopReason" in answer.get("result", {}) and exited == 0


def eof_before_initialize(agent: Pipe, tmp_path: Path) -> bool:
    """stdin closed before anything: the process exits (status 0) within 2 s."""
    assert agent.process.stdin is not None
    agent.process.stdin.close()
    return agent.exited_within(2.0) == 0


def three_requests_in_one_write(agent: Pipe, tmp_path: Path) -> bool:
    """Three requests in one write: all three answered."""
    agent.write(INITIALIZE, *(request(10 + n, f"no/such_{n}") for n in range(3)))
    return agent.read_until(lambda ms: all(agent.answer(10 + n) for n in range(3)), 2.0)


def initialize_in_utf8(agent: Pipe, tmp_path: Path) -> bool:
    """The initialize answer is a line of UTF-8."""
    agent.write(INITIALIZE)
    agent.read_until(lambda ms: bool(agent.lines), STEP_TIMEOUT)
    try:
        agent.lines[0].decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def stop_reason_of_a_prompt(agent: Pipe, tmp_path: Path) -> bool:
    """A text prompt is answered with a stopReason."""
    session = open_session(agent, tmp_path)
    agent.write(prompt(3, session, "hello"))
    agent.read_until(lambda ms: agent.answer(3) is not None, STEP_TIMEOUT)
    answer = agent.answer(3)
    return answer is not None and "stopReason" in answer.get("result", {})


def vendor_request_answered(agent: Pipe, tmp_path: Path) -> bool:
    """An unknown ``_vendor`` request is answered (the request after it is, in any case)."""
    agent.write(INITIALIZE, request(3, "_vendor.example/request"), request(4, "no/such"))
    agent.read_until(lambda ms: agent.answer(4) is not None, STEP_TIMEOUT)
    agent.read_until(lambda ms: agent.answer(3) is not None, 0.5)
    return agent.answer(3) is not None


#: The variants that need no command and that the base tester missed, with what a client on
#: raw pipes sees: the check holds on the reference agent and fails on the variant.
WIRE_CHECKS: dict[str, Callable[[Pipe, Path], bool]] = {
    "exit_before_answering": eof_after_a_prompt,
    "hang_on_early_eof": eof_before_initialize,
    "first_line_per_read": three_requests_in_one_write,
    "latin1_output": initialize_in_utf8,
    "no_stop_reason": stop_reason_of_a_prompt,
    "vendor_request_unanswered": vendor_request_answered,
}


@pytest.mark.process
@pytest.mark.parametrize("fault", sorted(WIRE_CHECKS))
def test_each_wire_fault_shows_on_raw_pipes(fault: str, tmp_path: Path) -> None:
    """Each of these faults is real: its check holds on the reference agent, not on it."""
    check = WIRE_CHECKS[fault]
    with pipe("", tmp_path / "reference") as reference:
        assert check(reference, tmp_path), f"the reference agent fails {check.__name__}"
    with pipe(fault, tmp_path / "variant") as variant:
        assert not check(variant, tmp_path), f"the variant {fault} passes {check.__name__}"


@pytest.mark.process
def test_stdin_closed_mid_countdown_answers_the_turn_then_exits(tmp_path: Path) -> None:
    """
    stdin closed while a 30 s countdown runs: the reference agent stops it early, answers
    the prompt (end_turn: the client did not cancel it) and exits with status 0 at once.
    """
    with pipe("", tmp_path) as agent:
        session = open_session(agent, tmp_path)
        agent.write(prompt(3, session, "/countdown 30"))
        assert agent.read_until(lambda ms: "agent_message_chunk" in str(ms), STEP_TIMEOUT)
        assert agent.process.stdin is not None
        agent.process.stdin.close()
        agent.read_until(lambda ms: False, STEP_TIMEOUT)  # until stdout ends
        answer = agent.answer(3)
        assert agent.exited_within(STEP_TIMEOUT) == 0
    assert answer is not None and answer["result"] == {"stopReason": "end_turn"}


@pytest.mark.process
@pytest.mark.parametrize("where", ["../outside.txt", "link/hostname"])
def test_read_outside_the_session_directory_is_refused(where: str, tmp_path: Path) -> None:
    """A path that leaves the session's cwd (by ``..`` or by a symlink) is never read."""
    with agent_of("a", "", tmp_path) as (started, verdicts):
        session = started.new_session()
        assert session is not None
        os.symlink("/etc", os.path.join(started.cwd_of(session), "link"))
        outcome = run_turn(started, session, command("a", "read", where))
    assert outcome.stop_reason == "end_turn"
    assert not [m for m in received(started) if m.get("method") == "fs/read_text_file"]
    assert "outside the session directory" in json.dumps(received(started))
    assert verdicts.findings == []


@pytest.mark.process
def test_prompts_sent_together_run_one_after_the_other(tmp_path: Path) -> None:
    """Two prompts for one session without waiting: the second turn starts when the first
    ends; a ``$/cancel_request`` for the waiting one answers it -32800 before it starts."""
    with pipe("", tmp_path) as agent:
        session = open_session(agent, tmp_path)
        agent.write(prompt(3, session, "/countdown 0.5"), prompt(4, session, "first"))
        agent.write(prompt(5, session, "second"))
        agent.write({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 5}})
        assert agent.read_until(lambda ms: agent.answer(4) is not None, STEP_TIMEOUT)
    answers = [m.get("id") for m in agent.messages() if "method" not in m]
    assert answers[-3:] == [5, 3, 4]
    assert agent.answer(5) == {
        "jsonrpc": "2.0",
        "id": 5,
        "error": {"code": -32800, "message": "Request cancelled."},
    }
    said = [
        m["params"]["update"]["content"]["text"]
        for m in agent.messages()
        if m.get("method") == "session/update"
        and m["params"]["update"].get("sessionUpdate") == "agent_message_chunk"
    ]
    assert said[-1] == "You said: first"
    assert not any("second" in text for text in said)
