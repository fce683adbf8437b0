"""
The explorer: Hypothesis draws client sessions, each example against a fresh agent process,
and a bounded shrinker reduces a failing one.

**Generation.** `run_machine` runs a Hypothesis test (``@given(st.data())``, seeded with the
run's seed) whose every example draws client capabilities (fs read / write, terminal,
elicitation modes, session notices and compaction, ``_meta``), starts a fresh agent, creates a
session and draws a sequence of `Step` values: new sessions, prompt turns (content generated
from the schema without invented root fields, gated by ``promptCapabilities``; a scenario for
the conformance model; a cancel at some moment; permissions allowed or rejected; elicitations
accepted, declined or cancelled), announced slash commands, unknown methods and notifications,
``$/cancel_request``. Every draw has a fixed shape: a choice that depends on what the agent
announced asynchronously (a session, a command) is drawn as an index and applied modulo what
is known when the step runs. The test never fails a Hypothesis example — findings are
recorded, not raised — so Hypothesis never replays or shrinks, and no "flaky" error can arise
from an agent's timing.

**A finding never masks another.** Exploration goes on after a finding, until the profile's
examples or its exploration time are spent: an agent that breaks a rule in every session
(a custom field in every ``session/new`` result) is still explored for every other rule. Each
rule is recorded once: the first example that breaks it is kept (the findings of a rule the
probes or an earlier example already broke are only counted).

**Shrinking.** The steps of a failing example are plain values (`Step`), so the shrinker
(`shrink`) replays candidate sub-sequences on fresh agents: it removes chunks of steps, then
simplifies the remaining prompts, keeping a candidate when the same rule fails again. Each
rule's example is shrunk in turn, all within one budget, ``profile.shrink_replays`` replays or
``profile.shrink_seconds``; the report says what was done (`ShrinkReport`): a
timing-dependent finding that does not reproduce is shown as found.
"""

from __future__ import annotations

import shutil
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import attrs
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from acpkit.conformance.discovery import Command, argument_for, commands_of
from acpkit.conformance.driver import AgentGone, StepTimeout
from acpkit.conformance.harness import (
    META,
    SCENARIOS,
    Agent,
    CannotTest,
    SuiteConfig,
    client_capabilities,
    explain_services,
    one_line,
    run_turn,
    settle,
    start_agent,
)
from acpkit.conformance.observer import Transcript, Verdicts
from acpkit.conformance.probes import expect_error, probe_cancel_request, request
from acpkit.conformance.report import ExploredFailure
from acpkit.conformance.services import ELICITATION_ACTIONS
from acpkit.testing.jsonschema import for_definition

__all__ = [
    "Example",
    "Exploration",
    "Explorer",
    "MachineFailure",
    "ShrinkBudget",
    "ShrinkReport",
    "Step",
    "run_machine",
    "shrink",
]

STEP_KINDS = (
    "prompt",
    "prompt",
    "prompt",
    "new_session",
    "run_command",
    "unknown_method",
    "unknown_notification",
    "cancel_request",
)
_UNKNOWN_METHODS = ("_acpkit.dev/probe", "unknown/method", "session/unknown")
_UNKNOWN_NOTIFICATIONS = ("_acpkit.dev/note", "unknown/notification")
_SIMPLE_PROMPT = [{"type": "text", "text": "hi"}]


@attrs.frozen
class Step:
    """One client action, as plain values (so that it can be replayed exactly)."""

    kind: str
    args: Mapping[str, Any] = attrs.field(factory=dict)

    def describe(self) -> str:
        """One line for the report."""
        shown = {k: v for k, v in self.args.items() if k != "blocks"}
        if "blocks" in self.args:
            shown["blocks"] = [b.get("type") for b in self.args["blocks"]]
        inner = ", ".join(f"{k}={v!r}" for k, v in shown.items())
        return f"{self.kind}({inner})"


@attrs.frozen
class Example:
    """The client capabilities of one example and its steps."""

    capabilities: Mapping[str, Any]
    steps: tuple[Step, ...]

    def describe(self) -> str:
        """The example as the report shows it."""
        lines = [f"initialize(clientCapabilities={dict(self.capabilities)!r})"]
        lines += ["new_session()"] + [step.describe() for step in self.steps]
        return "\n".join(lines)


@attrs.frozen
class ShrinkReport:
    """What the shrinker did."""

    original_steps: int
    final_steps: int
    replays: int
    reproduced: int
    seconds: float
    budget: str

    def describe(self) -> str:
        """One line for the report."""
        if not self.replays:
            return f"not shrunk ({self.budget}); the example is shown as found"
        line = (
            f"shrunk from {self.original_steps} to {self.final_steps} steps in "
            f"{self.replays} replays ({self.seconds:.1f}s, {self.budget}); the finding "
            f"reproduced in {self.reproduced} of them"
        )
        if not self.reproduced:
            line += " (timing-dependent?): the example is shown as found"
        return line


@attrs.frozen
class Exploration:
    """What exploration did and found beyond the probes: one minimal failing example per
    rule."""

    failures: tuple[ExploredFailure, ...] = ()
    #: why exploration stopped early, when it did
    note: str = ""
    #: how many examples ran (each on a fresh agent process)
    examples: int = 0


#: The former name of `Exploration`.
MachineFailure = Exploration


# -- strategies ----------------------------------------------------------------------------


def capabilities_strategy() -> st.SearchStrategy[dict[str, Any]]:
    """Drawn client capabilities (always the same shape of draws)."""

    def build(flags: tuple[bool, ...]) -> dict[str, Any]:
        fs_read, fs_write, terminal, form, url, notices, compaction, meta = flags
        caps = client_capabilities(
            fs_read,
            fs_write,
            terminal=terminal,
            elicitation=[m for m, on in (("form", form), ("url", url)) if on],
            notices=notices,
            compaction=compaction,
        )
        if meta:
            caps.update(META)
        return caps

    return st.tuples(*[st.booleans()] * 8).map(build)


#: Prompt content kinds beyond text and resource links, with the capability each needs.
_GATED_CONTENT = {"image": "ImageContent", "audio": "AudioContent", "resource": "EmbeddedResource"}
_CAPABILITY_OF = {"image": "image", "audio": "audio", "resource": "embeddedContext"}


def _prompt_content() -> st.SearchStrategy[list[Any]]:
    """
    Generated prompt blocks of every kind, valid against the schema and without invented
    fields at the root of any spec type (only ``_meta`` holds arbitrary keys). Blocks the
    agent's ``promptCapabilities`` do not allow are dropped when the step runs, so the draws
    never depend on the agent.
    """
    kinds = [
        for_definition("TextContent", unknown_keys=False).map(lambda b: {**b, "type": "text"}),
        for_definition("ResourceLink", unknown_keys=False).map(
            lambda b: {**b, "type": "resource_link"}
        ),
    ]
    for tag, definition in _GATED_CONTENT.items():
        kinds.append(for_definition(definition, unknown_keys=False).map(_tagger(tag)))
    plain = st.text(min_size=1, max_size=40).map(lambda t: {"type": "text", "text": t})
    return st.lists(st.one_of(plain, *kinds), min_size=0, max_size=2)


def _tagger(tag: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def tagged(block: dict[str, Any]) -> dict[str, Any]:
        return {**block, "type": tag}

    return tagged


def allowed_blocks(blocks: Sequence[Any], agent_capabilities: Mapping[str, Any]) -> list[Any]:
    """The blocks the agent's ``promptCapabilities`` allow (text and links always)."""
    prompt_caps = agent_capabilities.get("promptCapabilities")
    caps = prompt_caps if isinstance(prompt_caps, dict) else {}
    return [
        b
        for b in blocks
        if b.get("type") not in _CAPABILITY_OF or caps.get(_CAPABILITY_OF[b["type"]]) is True
    ]


def step_strategy(kind: str) -> st.SearchStrategy[Step]:
    """The arguments of a step of ``kind`` (fixed shape; indices for agent-dependent picks)."""
    index = st.integers(min_value=0, max_value=1 << 16)
    if kind == "prompt":
        return st.fixed_dictionaries(
            {
                "session": index,
                "blocks": _prompt_content(),
                "scenario": st.sampled_from(sorted(SCENARIOS)),
                "cancel": st.sampled_from([None, None, "now", "first_update", "permission"]),
                "permission": st.sampled_from(["allow", "reject"]),
                "elicitation": st.sampled_from(ELICITATION_ACTIONS),
            }
        ).map(lambda args: Step("prompt", args))
    if kind == "run_command":
        return st.fixed_dictionaries(
            {"session": index, "command": index, "with_input": st.booleans()}
        ).map(lambda args: Step("run_command", args))
    if kind == "unknown_method":
        return st.sampled_from(_UNKNOWN_METHODS).map(
            lambda m: Step("unknown_method", {"method": m})
        )
    if kind == "unknown_notification":
        return st.sampled_from(_UNKNOWN_NOTIFICATIONS).map(
            lambda m: Step("unknown_notification", {"method": m})
        )
    if kind == "cancel_request":
        return index.map(lambda i: Step("cancel_request", {"session": i}))
    return st.just(Step("new_session"))


# -- running steps -------------------------------------------------------------------------


class Explorer:
    """Runs `Step` values against one agent; agent-dependent choices are taken modulo."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.sessions: list[str] = []
        self.commands: list[Command] = []

    @contextmanager
    def _survives(self, rule_id: str, what: str) -> Iterator[None]:
        observer = self.agent.observer
        try:
            yield
        except StepTimeout as e:
            observer.verdicts.slow(rule_id, f"during {what}: {one_line(e)}")
        except AgentGone as e:
            step = observer.failed_step or (rule_id, what)
            observer.violation(step[0], f"the agent went away during {step[1]}: {one_line(e)}")
            raise

    def _session(self, index: int) -> str | None:
        return self.sessions[index % len(self.sessions)] if self.sessions else None

    def run(self, step: Step) -> None:
        """Run one step (an `AgentGone` is recorded, then propagates: the example ends)."""
        getattr(self, f"_step_{step.kind}")(**step.args)
        self._learn_commands()

    def _step_new_session(self) -> None:
        with self._survives("SESSION-001", "session/new"):
            session = self.agent.new_session()
            if session is not None:
                self.sessions.append(session)

    def _step_prompt(
        self,
        session: int,
        blocks: list[Any],
        scenario: str,
        cancel: str | None,
        permission: str,
        elicitation: str,
    ) -> None:
        session_id = self._session(session)
        if session_id is None:
            return
        agent = self.agent
        prompt = allowed_blocks(blocks, agent.capabilities) + agent.prompt(session_id, scenario)
        policy = agent.driver.policy
        policy.elicitation = elicitation
        try:
            with self._survives("TURN-001", f"a prompt turn ({scenario})"):
                run_turn(agent, session_id, prompt, cancel=cancel, permission=permission)
        finally:
            policy.elicitation = "accept"

    def _learn_commands(self) -> None:
        announced = commands_of(self.agent.driver.updates())
        if announced:
            self.commands = announced

    def _step_run_command(self, session: int, command: int, with_input: bool) -> None:
        session_id = self._session(session)
        if session_id is None or not self.commands:
            self.agent.observer.note("run_command: no command announced yet (step skipped)")
            return
        chosen = self.commands[command % len(self.commands)]
        argument = argument_for(chosen.hint) if with_input else ""
        text = f"/{chosen.name} {argument}".rstrip()
        with self._survives("TURN-001", f"the command {text}"):
            run_turn(self.agent, session_id, [{"type": "text", "text": text}])

    def _step_unknown_method(self, method: str) -> None:
        with self._survives("RPC-005", f"the unknown method {method}"):
            response, late = request(self.agent, method, META)
            expect_error(
                self.agent, "RPC-005", response, (-32601,), f"unknown method {method}", timeout=late
            )

    def _step_unknown_notification(self, method: str) -> None:
        agent = self.agent
        with self._survives("RPC-007", f"the notification {method}"):
            agent.driver.notify(method, META)
            response, late = request(agent, "_acpkit.dev/ping", {})
            # still answering after it (any answer); a reply to the notification is RPC-002
            if response is None:
                agent.observer.verdicts.slow("RPC-007", f"a request after {method}: {late}")
            else:
                agent.observer.verdicts.ok("RPC-007")

    def _step_cancel_request(self, session: int) -> None:
        session_id = self._session(session)
        if session_id is None:
            return
        with self._survives("RPC-010", "$/cancel_request"):
            probe_cancel_request(self.agent, session_id)


def play(
    config: SuiteConfig,
    verdicts: Verdicts,
    capabilities: Mapping[str, Any],
    steps: Sequence[Step] | Callable[[Agent], Iterable[Step]],
    *,
    on_step: Callable[[Step], bool] | None = None,
) -> Transcript:
    """
    Start a fresh agent with ``capabilities``, create a session, run ``steps`` (or the steps
    ``steps(agent)`` yields, drawn lazily); ``on_step`` returns False to stop. The transcript.
    """
    transcript = Transcript(name="agent")
    agent = start_agent(config, verdicts, capabilities=dict(capabilities), transcript=transcript)
    explorer = Explorer(agent)
    try:
        explorer.run(Step("new_session"))
        for step in steps(agent) if callable(steps) else steps:
            explorer.run(step)
            if on_step is not None and not on_step(step):
                break
        agent.driver.drain(0.1)
        settle(agent)
    except AgentGone:
        pass
    finally:
        explain_services(agent.observer)
        agent.driver.stop()
        shutil.rmtree(agent.tmp, ignore_errors=True)
    return transcript


# -- shrinking -----------------------------------------------------------------------------


def _simpler(step: Step) -> Step | None:
    """The same prompt without generated content (and a plain text scenario if not
    cancelled); ``None`` when it is already that simple or not a prompt."""
    if step.kind != "prompt":
        return None
    args = dict(step.args)
    args["blocks"] = []
    if args["cancel"] is None:
        args["scenario"] = "text"
    simpler = Step("prompt", args)
    return None if simpler == step else simpler


@attrs.define
class ShrinkBudget:
    """The replays and seconds every shrink of one run shares."""

    replays: int
    seconds: float
    started: float = attrs.field(factory=time.monotonic)
    used: int = 0

    @classmethod
    def of(cls, config: SuiteConfig) -> ShrinkBudget:
        """The budget of ``config``'s profile."""
        return cls(config.profile.shrink_replays, config.profile.shrink_seconds)

    def exhausted(self) -> bool:
        """No replay left, or no time."""
        return self.used >= self.replays or time.monotonic() - self.started >= self.seconds

    def describe(self) -> str:
        """The budget in words."""
        return f"budget {self.replays} replays / {self.seconds:g}s"


def shrink(
    config: SuiteConfig, example: Example, rule_id: str, budget: ShrinkBudget | None = None
) -> tuple[Example, Transcript | None, ShrinkReport]:
    """Reduce ``example`` while ``rule_id`` still fails (bounded by ``budget``, by default
    the profile's)."""
    budget = budget if budget is not None else ShrinkBudget.of(config)
    started = time.monotonic()
    replays = reproduced = 0
    best = example
    best_transcript: Transcript | None = None

    def fails(candidate: tuple[Step, ...]) -> Transcript | None:
        nonlocal replays, reproduced
        replays += 1
        budget.used += 1
        verdicts = Verdicts()
        try:
            transcript = play(config, verdicts, example.capabilities, candidate)
        except CannotTest:
            return None
        if any(f.rule_id == rule_id for f in verdicts.findings):
            reproduced += 1
            return transcript
        return None

    size = max(1, len(best.steps) // 2)
    while size >= 1 and not budget.exhausted():
        position = 0
        while position < len(best.steps) and not budget.exhausted():
            candidate = best.steps[:position] + best.steps[position + size :]
            transcript = fails(candidate)
            if transcript is not None:
                best, best_transcript = Example(example.capabilities, candidate), transcript
            else:
                position += size
        size //= 2
    for number, step in enumerate(best.steps):
        if budget.exhausted():
            break
        simpler = _simpler(step)
        if simpler is None:
            continue
        candidate = (*best.steps[:number], simpler, *best.steps[number + 1 :])
        transcript = fails(candidate)
        if transcript is not None:
            best, best_transcript = Example(example.capabilities, candidate), transcript
    report = ShrinkReport(
        len(example.steps),
        len(best.steps),
        replays,
        reproduced,
        time.monotonic() - started,
        budget.describe(),
    )
    return best, best_transcript, report


# -- the run -------------------------------------------------------------------------------


@attrs.define
class _Collector:
    """What the examples found: the first failing example of each rule, a tester error."""

    verdicts: Verdicts
    #: rule id -> the first example that broke it (rules the probes broke are not here)
    failing: dict[str, tuple[Example, Transcript, str]] = attrs.field(factory=dict)
    error: str | None = None
    examples: int = 0

    def add(self, example: Example, found: Verdicts, transcript: Transcript) -> None:
        """
        Merge one example's verdicts: every count and reason; of the findings, one per rule
        the run has not broken yet (its example is kept for shrinking), the others counted.
        """
        broken = {f.rule_id for f in self.verdicts.findings}
        kept = Verdicts(
            exercised=dict(found.exercised),
            not_applicable=dict(found.not_applicable),
            offered=set(found.offered),
            undecided={k: list(v) for k, v in found.undecided.items()},
            repeated=dict(found.repeated),
        )
        for finding in found.findings:
            if finding.rule_id in broken:
                kept.repeated[finding.rule_id] = kept.repeated.get(finding.rule_id, 0) + 1
                continue
            broken.add(finding.rule_id)
            kept.findings.append(finding)
            self.failing[finding.rule_id] = (example, transcript, finding.message)
        self.verdicts.merge(kept)


#: Examples run at the same time, each on its own agent process.
EXAMPLE_WORKERS = 3

_Outcome = tuple[Example, Verdicts, Transcript] | str | None


def _run_examples(
    config: SuiteConfig,
    examples: Sequence[Example],
    out_of_time: Callable[[], bool],
    workers: int,
) -> list[_Outcome]:
    """
    Run the drawn examples, ``workers`` at a time; each outcome in the examples' order: the
    example as it ran (steps cut when time ran out), its verdicts and transcript; an error
    (``"cannot test: …"`` or the tester's own traceback); ``None`` when it did not start
    (out of time, or after an error).
    """
    stop = threading.Event()

    def run_one(example: Example) -> _Outcome:
        if stop.is_set() or out_of_time():
            return None
        example_verdicts = Verdicts()
        ran: list[Step] = []

        def keep_going(step: Step) -> bool:
            ran.append(step)
            return not out_of_time()

        try:
            transcript = play(
                config, example_verdicts, example.capabilities, example.steps, on_step=keep_going
            )
        except CannotTest as e:
            stop.set()
            return f"cannot test: {e}"
        except Exception:
            stop.set()
            return traceback.format_exc()
        return Example(example.capabilities, tuple(ran)), example_verdicts, transcript

    if workers <= 1:
        return [run_one(example) for example in examples]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="explore") as pool:
        return list(pool.map(run_one, examples))


def run_machine(
    config: SuiteConfig,
    verdicts: Verdicts,
    log: Callable[[str], None] | None = None,
    workers: int = EXAMPLE_WORKERS,
) -> Exploration:
    """
    Explore until the profile's examples or exploration time are spent, whatever is found,
    ``workers`` examples at a time (each on its own agent process; their verdicts are merged
    in the examples' order, so the report does not depend on which finished first); merge
    results into ``verdicts``. What it found beyond the probes (each rule's shrunk
    example), how many examples ran, and why exploration stopped early when it did (the
    agent would not start again). Raises `RuntimeError` with the traceback when the tester
    itself failed.
    """
    return start_machine(config, workers).finish(verdicts, log)


def start_machine(config: SuiteConfig, workers: int = EXAMPLE_WORKERS) -> ExplorationRun:
    """
    Draw the examples and start running them in the background (see `run_machine`): the
    caller runs the fixed probes meanwhile and calls `ExplorationRun.finish`, which merges
    the examples' verdicts after the probes' and shrinks, exactly as if exploration had
    run after them.
    """
    profile = config.profile
    drawn: list[Example] = []

    @settings(
        max_examples=profile.examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        print_blob=False,
        suppress_health_check=list(HealthCheck),
        derandomize=False,
    )
    @given(st.data())
    def explore(data: st.DataObject) -> None:
        # Everything is drawn before any agent runs, always in the same shape: the choices
        # never depend on the agent or on time, so Hypothesis sees a consistent test.
        capabilities = data.draw(capabilities_strategy(), label="client capabilities")
        count = data.draw(st.integers(min_value=1, max_value=profile.steps), label="steps")
        steps = tuple(
            data.draw(step_strategy(data.draw(st.sampled_from(STEP_KINDS), label="step")))
            for _ in range(count)
        )
        drawn.append(Example(capabilities, steps))

    hypothesis_seed(config.seed)(explore)()
    run = ExplorationRun(config)
    started = time.monotonic()

    def out_of_time() -> bool:
        return time.monotonic() - started >= profile.explore_seconds

    def work() -> None:
        try:
            run.outcomes = _run_examples(config, drawn, out_of_time, workers)
        except BaseException:  # the tester's own failure: reported by finish
            run.outcomes = [traceback.format_exc()]

    run.thread = threading.Thread(target=work, daemon=True, name="explore")
    run.thread.start()
    return run


@attrs.define
class ExplorationRun:
    """Examples running in the background (`start_machine`)."""

    config: SuiteConfig
    thread: threading.Thread | None = None
    outcomes: list[_Outcome] = attrs.field(factory=list)

    def wait(self) -> None:
        """Wait until every example has run (and its agent process ended)."""
        if self.thread is not None:
            self.thread.join()

    def finish(self, verdicts: Verdicts, log: Callable[[str], None] | None = None) -> Exploration:
        """Wait for the examples, merge their verdicts into ``verdicts`` and shrink (see
        `run_machine`)."""
        self.wait()
        config = self.config
        profile = config.profile
        collector = _Collector(verdicts)
        for outcome in self.outcomes:
            if outcome is None:
                continue
            if isinstance(outcome, str):
                collector.error = collector.error or outcome
                continue
            collector.examples += 1
            example, example_verdicts, transcript = outcome
            collector.add(example, example_verdicts, transcript)
        note = ""
        if collector.error is not None:
            if collector.error.startswith("cannot test: "):
                # the probes' verdicts stand; exploration stops where the agent would not start
                verdicts.skip("SESSION-001", collector.error)
                note = (
                    f"exploration stopped after {collector.examples} example(s): {collector.error}"
                )
            else:
                raise RuntimeError(f"the explorer failed:\n{collector.error}")
        if not collector.failing:
            return Exploration(note=note, examples=collector.examples)
        budget = ShrinkBudget.of(config)
        failures = []
        for rule_id, (example, transcript, message) in collector.failing.items():
            report: ShrinkReport | None = None
            if profile.shrink_replays and example.steps and not budget.exhausted():
                smaller, smaller_transcript, report = shrink(config, example, rule_id, budget)
                if smaller_transcript is not None:
                    example, transcript = smaller, smaller_transcript
                if log is not None:
                    log(report.describe())
            shrunk = report.describe() if report is not None else "not shrunk (budget spent)"
            if not profile.shrink_replays:
                shrunk = "not shrunk (the profile does not shrink)"
            failures.append(
                ExploredFailure(
                    rule_id=rule_id,
                    steps=example.describe() + f"\nfailed: {rule_id}: {message}",
                    transcript=transcript.render(),
                    shrink=shrunk,
                )
            )
        return Exploration(failures=tuple(failures), note=note, examples=collector.examples)
