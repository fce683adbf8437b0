"""
How the fixed probes run: in lanes, at the same time, each lane reusing its agent processes.

Starting an agent is most of a run's time for agents that take seconds to start (Node
agents, npx). The probe groups are independent, so they run in four lanes, each in its own
thread with its own agent processes and its own `Verdicts` (merged, in lane order, when
all are done, so that the report does not depend on which lane finished first). Within a
lane, the groups that do not end their agent share one process per set of client
capabilities (`AgentPool`); a group that closes stdin, sends a huge line or initializes
with another version gets a process of its own, and after a group that failed (the agent
died, a step timed out) the lane starts afresh.

- Lane 1 starts without stimuli: the transport probes (by URL), the envelope, framing,
  initialization, authentication and MCP probes and the long line; then, with the
  stimuli, the baseline-methods probe.
- Lane 2 learns the stimuli first (discovery, `prepare`), then runs the session and turn
  probes. Once the stimuli are known, the explorer's examples start beside the lanes, on
  agents of their own (`acpkit.conformance.machine.start_machine`).
- Lane 3 waits for the stimuli, then runs the session-lifecycle probe and the services
  probes.
- Lane 4 closes stdin (stdio only: before ``initialize`` and in the middle of a turn, both
  at once, each on a process of its own; an agent that keeps running after EOF is waited
  on for up to three step timeouts), then, with the stimuli, runs the client-answers
  probe, the capability extremes and the spawn-directory probe.

The groups that wait on long turns (a cancelled ``sleep 30`` an agent may not stop) lead
lanes of their own, so that such an agent costs the longest lane, not the sum.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import attrs

from acpkit.conformance.driver import AgentGone, StepTimeout
from acpkit.conformance.harness import (
    PROTOCOL_VERSION,
    Agent,
    SuiteConfig,
    one_line,
    settle,
    start_agent,
)
from acpkit.conformance.observer import Transcript, Verdicts

__all__ = ["AgentPool", "Group", "Lane", "run_lanes"]

Fresh = Callable[..., Any]


class AgentPool:
    """
    The agent processes of one lane. ``fresh(**options)`` is a context manager giving an
    initialized agent: with ``reuse`` (the default, for version 1), a live process started
    earlier with the same options, else a new one that stays for the next group.
    """

    def __init__(
        self, config: SuiteConfig, verdicts: Verdicts, transcripts: list[Transcript]
    ) -> None:
        self.config = config
        self.verdicts = verdicts
        self.transcripts = transcripts
        self.agents: dict[str, Agent] = {}
        #: the agent the last ``fresh`` gave (the guard files a death under its step)
        self.last: Agent | None = None

    @contextmanager
    def fresh(self, *, reuse: bool = True, **options: Any) -> Iterator[Agent]:
        """An agent for one group (see the class docstring)."""
        reuse = reuse and options.get("version", PROTOCOL_VERSION) == PROTOCOL_VERSION
        key = json.dumps(options, sort_keys=True, default=str)
        agent = self.agents.get(key) if reuse else None
        if agent is not None and not _alive(agent):
            self._retire(key)
            agent = None
        if agent is None:
            transcript = Transcript(name="agent")
            self.transcripts.append(transcript)
            agent = start_agent(self.config, self.verdicts, transcript=transcript, **options)
            if reuse:
                self.agents[key] = agent
        agent.observer.failed_step = None
        self.last = agent
        try:
            yield agent
        finally:
            if not reuse:
                _finish(agent)
            elif not _alive(agent):
                self._retire(key)

    def _retire(self, key: str) -> None:
        agent = self.agents.pop(key, None)
        if agent is not None:
            _finish(agent)

    def close(self) -> None:
        """Judge what each agent left unanswered, and stop them all."""
        for key in list(self.agents):
            self._retire(key)


def _alive(agent: Agent) -> bool:
    return agent.driver.returncode is None and not agent.driver.stdin_closed


def _finish(agent: Agent) -> None:
    try:
        settle(agent)
    finally:
        agent.driver.stop()
        shutil.rmtree(agent.tmp, ignore_errors=True)


@attrs.frozen
class Group:
    """A probe group: the rule its failures are filed under, what it does, the rule id
    prefixes that select it, and the probe (given the lane's ``fresh``, verdicts, config)."""

    rule_id: str
    what: str
    families: str
    run: Callable[[Fresh, Verdicts, SuiteConfig], None]
    #: needs the stimuli (waits for the lane that learns them)
    needs_stimuli: bool = False


@attrs.frozen
class Lane:
    """Groups run one after the other on shared agent processes."""

    name: str
    groups: tuple[Group, ...]
    #: learns the stimuli before its groups (discovery): the config the other lanes wait for
    prepares: bool = False


def run_lanes(
    config: SuiteConfig,
    verdicts: Verdicts,
    lanes: Sequence[Lane],
    *,
    prepare: Callable[[SuiteConfig, Verdicts], SuiteConfig] | None = None,
    progress: Callable[[str], None] | None = None,
    parallel: bool = True,
) -> tuple[list[Transcript], SuiteConfig]:
    """
    Run ``lanes`` (at the same time with ``parallel``); merge their verdicts into
    ``verdicts`` in lane order. ``prepare`` (discovery) runs first in the lane that
    ``prepares``; the groups that need stimuli wait for it. Returns the transcripts and the
    prepared configuration.
    """
    transcripts: list[Transcript] = []
    prepared: list[SuiteConfig] = []
    ready = threading.Event()
    results = [Verdicts() for _ in lanes]
    errors: list[BaseException] = []

    def selected(group: Group) -> bool:
        chosen = config.rules
        return not chosen or any(r.startswith(tuple(group.families.split())) for r in chosen)

    def run_lane(number: int, lane: Lane) -> None:
        lane_verdicts = results[number]
        try:
            current = config
            if lane.prepares:
                try:
                    if prepare is not None:
                        current = prepare(config, lane_verdicts)
                finally:
                    prepared.append(current)
                    ready.set()
            pool = AgentPool(current, lane_verdicts, transcripts)
            try:
                for group in lane.groups:
                    if not selected(group):
                        continue
                    if group.needs_stimuli and not lane.prepares:
                        ready.wait()
                        if prepared and pool.config is not prepared[0]:
                            pool.close()
                            pool = AgentPool(prepared[0], lane_verdicts, transcripts)
                    started = time.monotonic()
                    if not _guarded(pool, lane_verdicts, group):
                        pool.close()  # a failed group: the next one starts afresh
                        pool = AgentPool(pool.config, lane_verdicts, transcripts)
                    if progress is not None:
                        progress(f"{group.what}: {time.monotonic() - started:.1f}s")
            finally:
                pool.close()
        except BaseException as e:  # the tester's own failure: reported by the caller
            errors.append(e)
            ready.set()

    if parallel:
        threads = [
            threading.Thread(target=run_lane, args=(n, lane), daemon=True, name=lane.name)
            for n, lane in enumerate(lanes)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        for number, lane in enumerate(lanes):
            run_lane(number, lane)
    for lane_verdicts in results:
        verdicts.merge(lane_verdicts)
    if errors:
        raise errors[0]
    return transcripts, prepared[0] if prepared else config


def _guarded(pool: AgentPool, verdicts: Verdicts, group: Group) -> bool:
    """Run one group; a step that timed out or an agent that died is filed under the rule
    of the step it happened in. False when the group failed so."""
    try:
        group.run(pool.fresh, verdicts, pool.config)
    except (StepTimeout, AgentGone) as e:
        agent = pool.last
        step = agent.observer.failed_step if agent is not None else None
        rule, during = step if step is not None else (group.rule_id, group.what)
        excerpt = agent.observer.transcript.excerpt() if agent is not None else ""
        if isinstance(e, StepTimeout):
            verdicts.slow(rule, f"during {during}: {one_line(e)}")
        else:
            verdicts.violation(rule, f"the agent went away during {during}: {one_line(e)}", excerpt)
        return False
    return True
