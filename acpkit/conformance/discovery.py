"""
Discovery: learn what each slash command an agent advertises does by trying it, and use what
it does as stimuli (`acpkit.conformance.scenarios.Stimuli`).

An agent without a model (scripted, rule-based, a proxy, an echo agent with commands)
answers the tester's words at once, so its cancellation, permissions, file system, terminals,
tool calls, plans and usage would never be exercised. Its commands are often how it does
those things. `discover` starts the agent with every client service offered, reads its
``available_commands_update``, and runs each command once in a fresh session, with an
argument made from the command's input hint (`argument_for`: a number, a file of the session
directory, a word), watching what the turn does: how long it lasts, which updates it sends,
which requests it makes. Each behaviour (`acpkit.conformance.scenarios.BEHAVIOURS`) gets the
first command that showed it; a command whose turn lasts gets a larger number to make a turn
worth cancelling.

Nothing here knows a command's name: only its hint and what it did. The discovery turns are
real traffic: the observer judges them like any other.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from acpkit.conformance.driver import AgentGone, StepTimeout
from acpkit.conformance.harness import (
    ALL_SERVICES,
    Agent,
    CannotTest,
    SuiteConfig,
    run_turn,
    running_agent,
)
from acpkit.conformance.observer import Transcript, Verdicts
from acpkit.conformance.scenarios import SAMPLE_FILE, Stimuli

__all__ = [
    "Behaviour",
    "Command",
    "Discovery",
    "argument_for",
    "commands_of",
    "discover",
    "scaled",
]

#: A turn that lasts this long (seconds) is one worth cancelling.
LONG_TURN = 1.0
#: The number a command that counts time is given for a turn to cancel.
LONG_NUMBER = 6
#: At most this many commands are tried.
MAX_COMMANDS = 24

_NUMBER_WORDS = re.compile(
    r"\b(number|seconds?|secs?|minutes?|duration|count|how many|how long|times?|amount|"
    r"delay|ticks?|steps?|n)\b",
    re.IGNORECASE,
)
_PATH_WORDS = re.compile(
    r"\b(path|file|files|filename|document|documents|location|dir|directory|folder)\b",
    re.IGNORECASE,
)
_EXAMPLE = re.compile(r"\b(?:e\.g\.|eg|for example|like|such as)[,:]?\s+([^\s,;)]+)", re.I)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_ALTERNATIVES = re.compile(r"^\s*([\w.-]+)(?:\s*(?:,|\bor\b|\|)\s*([\w.-]+))+\s*$", re.I)


@attrs.frozen
class Command:
    """A slash command as the agent advertises it."""

    name: str
    description: str = ""
    #: the input hint, or ``None`` when the command takes no input
    hint: str | None = None


@attrs.frozen
class Behaviour:
    """What one command did when tried once."""

    command: Command
    argument: str
    seconds: float
    #: the behaviours (`acpkit.conformance.scenarios.BEHAVIOURS`) it showed
    shows: frozenset[str]
    stop_reason: str | None = None

    def describe(self) -> str:
        """``/name arg (slow, tools)``."""
        shown = ", ".join(sorted(self.shows)) or "nothing"
        return f"/{self.command.name}{' ' + self.argument if self.argument else ''} ({shown})"


@attrs.frozen
class Discovery:
    """What discovery learned: each command's behaviour, and the stimuli made from them."""

    behaviours: tuple[Behaviour, ...] = ()
    stimuli: Stimuli = attrs.field(factory=Stimuli)
    note: str = ""


def commands_of(updates: Sequence[Mapping[str, Any]]) -> list[Command]:
    """The commands of the last ``available_commands_update`` among ``updates``."""
    commands: list[Command] = []
    for message in updates:
        params = message.get("params")
        update = params.get("update") if isinstance(params, dict) else None
        if not isinstance(update, dict):
            continue
        if update.get("sessionUpdate") != "available_commands_update":
            continue
        listed = update.get("availableCommands")
        commands = []
        for entry in listed if isinstance(listed, list) else []:
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                continue
            given = entry.get("input")
            hint = given.get("hint") if isinstance(given, dict) else None
            commands.append(
                Command(
                    str(entry["name"]).lstrip("/"),
                    str(entry.get("description") or ""),
                    hint if isinstance(hint, str) else None,
                )
            )
    return commands


def argument_for(hint: str | None) -> str:
    """
    An argument made from an input hint: nothing without a hint; the example it gives
    ("duration, e.g. 3s"); a small number when it asks for one; the sample file of the
    session directory when it asks for a path or a file; the last of its alternatives
    ("plain or loud": likely not the current one); else a word.
    """
    if hint is None or not hint.strip():
        return ""
    example = _EXAMPLE.search(hint)
    if example:
        return example.group(1)
    if _NUMBER_WORDS.search(hint):
        return "2"
    if _PATH_WORDS.search(hint):
        return SAMPLE_FILE
    alternatives = _ALTERNATIVES.match(hint)
    if alternatives:
        words = re.split(r"\s*(?:,|\bor\b|\|)\s*", hint.strip(), flags=re.I)
        return [w for w in words if w][-1]
    return "conformance"


def scaled(argument: str) -> str:
    """The argument of a command that counts time, made long enough to cancel a turn."""
    return (
        _NUMBER.sub(str(LONG_NUMBER), argument, count=1) if _NUMBER.search(argument) else argument
    )


def _prompt(command: Command, argument: str) -> str:
    return f"/{command.name} {argument}".rstrip()


def _shows(
    updates: Sequence[Mapping[str, Any]], requests: Sequence[Mapping[str, Any]], seconds: float
) -> frozenset[str]:
    shows: set[str] = set()
    kinds = []
    for message in updates:
        params = message.get("params")
        update = params.get("update") if isinstance(params, dict) else None
        if isinstance(update, dict):
            kinds.append(update.get("sessionUpdate"))
            contents = update.get("content")
            if update.get("sessionUpdate") in ("tool_call", "tool_call_update") and isinstance(
                contents, list
            ):
                if any(isinstance(c, dict) and c.get("type") == "diff" for c in contents):
                    shows.add("edit")
    methods = {str(r.get("method")) for r in requests}
    if seconds >= LONG_TURN:
        shows.add("slow")
    if "tool_call" in kinds:
        shows.add("tools")
    if "plan" in kinds:
        shows.add("plan")
    if "usage_update" in kinds:
        shows.add("usage")
    if "current_mode_update" in kinds or "config_option_update" in kinds:
        shows.add("mode")
    for method, behaviour in (
        ("session/request_permission", "permission"),
        ("fs/read_text_file", "read"),
        ("fs/write_text_file", "write"),
        ("terminal/create", "shell"),
        ("elicitation/create", "ask"),
    ):
        if method in methods:
            shows.add(behaviour)
    if not shows and "agent_message_chunk" in kinds:
        shows.add("text")
    return frozenset(shows)


def _try(agent: Agent, command: Command) -> Behaviour | None:
    """Run one command in a fresh session and watch its turn."""
    session = agent.new_session()
    if session is None:
        return None
    agent.driver.updates(session)  # what the session announced before the turn
    argument = argument_for(command.hint)
    requests_before = len(agent.observer.agent_requests)
    started = time.monotonic()
    with agent.observer.probe("TURN-001", f"discovery: the command /{command.name}"):
        outcome = run_turn(agent, session, [{"type": "text", "text": _prompt(command, argument)}])
    seconds = (outcome.answered_at or time.monotonic()) - started
    if outcome.timed_out:
        seconds = max(seconds, agent.timeout)
    agent.driver.drain(0.05)
    updates = agent.driver.updates(session)
    requests = agent.observer.agent_requests[requests_before:]
    return Behaviour(
        command, argument, seconds, _shows(updates, requests, seconds), outcome.stop_reason
    )


def _stimuli(behaviours: Sequence[Behaviour]) -> Stimuli:
    prompts: dict[str, str] = {}
    sources: dict[str, str] = {}
    for behaviour in behaviours:
        for shown in sorted(behaviour.shows):
            if shown in prompts:
                continue
            argument = behaviour.argument
            if shown == "slow":
                argument = scaled(argument)
            prompts[shown] = _prompt(behaviour.command, argument)
            sources[shown] = f"the command /{behaviour.command.name} (discovered)"
    return Stimuli(prompts, sources)


def discover(config: SuiteConfig, verdicts: Verdicts, transcripts: list[Transcript]) -> Discovery:
    """
    Learn the agent's commands and what each does (see the module docstring); the turns are
    judged into ``verdicts``. Never raises for the agent's sake: an agent that cannot start
    or dies is a note (the probes will say what is wrong).
    """
    transcript = Transcript(name="agent")
    transcripts.append(transcript)
    behaviours: list[Behaviour] = []
    deadline = time.monotonic() + config.profile.discovery_seconds
    try:
        with running_agent(
            config, verdicts, capabilities=ALL_SERVICES, transcript=transcript
        ) as agent:
            session = agent.new_session()
            if session is None:
                return Discovery(note="discovery: session/new failed, no command tried")
            agent.driver.drain(0.3)  # commands are often announced just after session/new
            commands = commands_of(agent.driver.updates(session))
            if not commands:
                return Discovery(note="discovery: the agent advertises no command")
            for command in commands[:MAX_COMMANDS]:
                if time.monotonic() > deadline:
                    break
                behaviour = _try(agent, command)
                if behaviour is not None:
                    behaviours.append(behaviour)
    except CannotTest as e:
        return Discovery(note=f"discovery: {e}")
    except (AgentGone, StepTimeout) as e:
        first = str(e).splitlines()[0]
        if isinstance(e, AgentGone):
            verdicts.violation(
                "TURN-001",
                f"the agent went away during a discovery turn: {first}",
                transcript.excerpt(),
            )
        note = f"discovery stopped: {first}"
        return Discovery(tuple(behaviours), _stimuli(behaviours), note)
    tried = "; ".join(b.describe() for b in behaviours)
    note = f"discovery: {len(behaviours)} command(s) tried: {tried}"
    return Discovery(tuple(behaviours), _stimuli(behaviours), note)
