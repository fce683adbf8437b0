"""
One agent under test: the run's configuration, starting and initializing an agent process,
sessions, and one prompt turn.

Used by the fixed probes (`acpkit.conformance.probes`) and the explorer
(`acpkit.conformance.machine`). Time is never a rule: a step that exceeds the step timeout is
recorded with `acpkit.conformance.observer.Verdicts.slow` ("could not judge"), never as a
violation; an agent that *exits* with a request of ours unanswered is a finding.

Prompts the tester sends are plain text blocks. With a model server (``--model-server``) each
one carries a directive for the conformance model (`acpkit.conformance.model`), which then
plays a scenario with the agent's own tools: write / edit / read a file in the session
directory, run a shell command, a long command to cancel.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import attrs

from acpkit.conformance.driver import AgentDriver, AgentGone, ClientPolicy, StepTimeout
from acpkit.conformance.observer import Observer, Pending, Transcript, Verdicts, id_key
from acpkit.conformance.scenarios import SAMPLE_FILE, SAMPLE_TEXT, Stimuli
from acpkit.conformance.tls import SYSTEM_TLS, TLSSettings

__all__ = [
    "ALL_SERVICES",
    "MODEL_SCENARIOS",
    "PROFILES",
    "PROTOCOL_VERSION",
    "SCENARIOS",
    "SERVICE_RULES",
    "Agent",
    "CannotTest",
    "Profile",
    "SuiteConfig",
    "TurnOutcome",
    "client_capabilities",
    "explain_services",
    "prompt_blocks",
    "run_turn",
    "running_agent",
    "settle",
    "start_agent",
]

PROTOCOL_VERSION = 1
CANCELLED = {"result": {"outcome": {"outcome": "cancelled"}}}
META = {"_meta": {"acpkit.dev/conformance": True}}

#: What each scenario (a behaviour of `acpkit.conformance.scenarios.BEHAVIOURS`) asks, in
#: words: the prompt when no scenario file, model or discovered command provides one (the
#: directive for the conformance model follows it when a model serves).
SCENARIOS: dict[str, str] = {
    "text": "Say hello in one short sentence.",
    "write": "Create a small text file in the working directory.",
    "edit": "Create a small text file in the working directory, then edit one line of it.",
    "read": "Create a small text file in the working directory, then read it back.",
    "shell": "Run the shell command `echo acpkit-conformance`.",
    "tools": "Create a file, edit it, read it back, then run `echo acpkit-conformance`.",
    "slow": "Run the shell command `sleep 30` and wait for it.",
    "permission": "Create a small text file in the working directory (ask me first).",
    "ask": "Ask me a question before you answer.",
    "plan": "Make a short plan of three steps, then follow it.",
    "usage": "How much of your context window is used?",
    "mode": "Switch to another mode.",
}
#: The conformance model's scenario for each behaviour it can play.
MODEL_SCENARIOS = {
    "text": "text",
    "write": "write",
    "edit": "edit",
    "read": "read",
    "shell": "shell",
    "tools": "tools",
    "slow": "slow",
    "permission": "write",
    "ask": "ask",
}


@attrs.frozen
class Profile:
    """How much the explorer does, and how much shrinking a failure may cost."""

    name: str
    examples: int
    steps: int
    long_line: int
    shrink_replays: int = 0
    shrink_seconds: float = 0.0
    explore_seconds: float = 60.0
    #: how long trying the agent's commands may take (`acpkit.conformance.discovery`)
    discovery_seconds: float = 30.0


PROFILES: dict[str, Profile] = {
    "smoke": Profile(
        "smoke",
        examples=2,
        steps=4,
        long_line=1 << 20,
        explore_seconds=20.0,
        discovery_seconds=15.0,
    ),
    "quick": Profile(
        "quick",
        examples=5,
        steps=6,
        long_line=1 << 20,
        shrink_replays=4,
        shrink_seconds=15.0,
        explore_seconds=25.0,
    ),
    "full": Profile(
        "full",
        examples=40,
        steps=20,
        long_line=16 << 20,
        shrink_replays=40,
        shrink_seconds=150.0,
        explore_seconds=360.0,
        discovery_seconds=90.0,
    ),
}


@attrs.frozen
class SuiteConfig:
    """Everything a run needs: the agent command and the run's options."""

    argv: tuple[str, ...]
    cwd: str | None = None
    env: Mapping[str, str] | None = None
    timeout: float = 10.0
    profile: Profile = PROFILES["quick"]
    seed: int = 0
    rules: frozenset[str] = frozenset()
    #: a conformance model serves the agent: prompts carry scenario directives
    model: bool = False
    #: a remote agent's URL (ws, wss, http, https) instead of ``argv``
    url: str | None = None
    #: headers sent on every request to ``url`` (never recorded in a report)
    headers: tuple[tuple[str, str], ...] = ()
    #: the TLS settings of every connection to an ``https://`` or ``wss://`` ``url``
    tls: TLSSettings = SYSTEM_TLS
    #: the prompts of the user's scenario file, and those learned from the agent's commands
    scenarios: Stimuli = attrs.field(factory=Stimuli)
    discovered: Stimuli = attrs.field(factory=Stimuli)
    #: with a model server: how many tool calls the model asked for under a directive token
    model_tool_calls: Callable[[str], int] | None = attrs.field(default=None, eq=False)

    @property
    def remote(self) -> bool:
        """The agent is reached by URL, not spawned."""
        return self.url is not None

    @property
    def agent_name(self) -> str:
        """The command line, or the URL without user info or query (safe for a report)."""
        if self.url is not None:
            from acpkit.conformance.wire import RemoteURL

            return RemoteURL.parse(self.url).display()
        return " ".join(self.argv)


class CannotTest(Exception):
    """The agent could not be tested: it does not start or never answers ``initialize``."""


def client_capabilities(
    fs_read: bool = False,
    fs_write: bool = False,
    *,
    terminal: bool = False,
    elicitation: Sequence[str] = (),
    notices: bool = False,
    compaction: bool = False,
) -> dict[str, Any]:
    """``clientCapabilities``; ``elicitation`` lists the advertised modes (``form``, ``url``)."""
    capabilities: dict[str, Any] = {
        "fs": {"readTextFile": fs_read, "writeTextFile": fs_write},
        "terminal": terminal,
    }
    if elicitation:
        capabilities["elicitation"] = {mode: {} for mode in elicitation}
    session: dict[str, Any] = {}
    if notices:
        session["notices"] = {}
    if compaction:
        session["compaction"] = {}
    if session:
        capabilities["session"] = session
    return capabilities


#: Every client service the tester can serve, advertised by the services probe (elicitation:
#: form only, so that an agent that asks for a url anyway is caught by CAP-003).
ALL_SERVICES = client_capabilities(
    True, True, terminal=True, elicitation=("form",), notices=True, compaction=True
)

#: The rules that need a client capability, with the capability path that enables them.
SERVICE_RULES = {
    "TERMINAL-001": ("terminal",),
    "TERMINAL-002": ("terminal",),
    "ELICIT-001": ("elicitation",),
    "ELICIT-002": ("elicitation", "url"),
    "NOTICE-001": ("session", "notices"),
    "NOTICE-002": ("session", "compaction"),
}


def _advertised(capabilities: Mapping[str, Any], path: Sequence[str]) -> bool:
    value: Any = capabilities
    for part in path:
        if not isinstance(value, Mapping):
            return False
        value = value.get(part)
    return value is True or isinstance(value, Mapping)


def explain_services(observer: Observer) -> None:
    """Record, per service rule, whether its capability was advertised (offered) or why not."""
    for rule_id, path in SERVICE_RULES.items():
        if _advertised(observer.client_capabilities, path):
            observer.verdicts.offer(rule_id)
        else:
            observer.verdicts.skip(
                rule_id, f"clientCapabilities.{'.'.join(path)} was not advertised"
            )


# -- one agent process -------------------------------------------------------------------


#: The conformance model's directive tokens: unique in the run (the model server sees every
#: agent process of the run, and TOOL-004 counts its tool calls by token).
_PROMPT_TOKENS = itertools.count(1)


@attrs.define
class Agent:
    """An initialized agent process with its driver, observer and temporary directories."""

    driver: AgentDriver
    observer: Observer
    init_result: dict[str, Any]
    tmp: str
    model: bool = False
    session_cwd: dict[str, str] = attrs.field(factory=dict)
    prompts: int = 0
    scenarios: Stimuli = attrs.field(factory=Stimuli)
    discovered: Stimuli = attrs.field(factory=Stimuli)
    model_tool_calls: Callable[[str], int] | None = None

    @property
    def capabilities(self) -> dict[str, Any]:
        """``agentCapabilities`` from the ``initialize`` result."""
        caps = self.init_result.get("agentCapabilities")
        return caps if isinstance(caps, dict) else {}

    @property
    def timeout(self) -> float:
        """The step timeout."""
        return self.driver.timeout

    def new_directory(self) -> str:
        """A fresh absolute directory for a session, with the sample file prompts name."""
        directory = tempfile.mkdtemp(prefix="session-", dir=self.tmp)
        with open(os.path.join(directory, SAMPLE_FILE), "w", encoding="utf-8") as f:
            f.write(SAMPLE_TEXT)
        return directory

    def new_session(self) -> str | None:
        """``session/new`` in a fresh directory: the session id, or ``None`` on an error."""
        cwd = self.new_directory()
        self.driver.policy.roots.append(cwd)
        response = self.driver.request("session/new", {"cwd": cwd, "mcpServers": []})
        result = response.get("result")
        if isinstance(result, dict) and isinstance(result.get("sessionId"), str):
            session_id = str(result["sessionId"])
            self.session_cwd[session_id] = cwd
            # commands and modes are often announced right after session/new
            self.driver.drain(0.05)
            return session_id
        return None

    def cwd_of(self, session_id: str) -> str:
        """The directory a session was created in (the tester's temporary root if unknown)."""
        return self.session_cwd.get(session_id, self.tmp)

    def prompt(self, session_id: str, scenario: str = "text") -> list[dict[str, Any]]:
        """
        A one-block text prompt for ``scenario`` in the session's directory: the user's
        scenario file's, else the conformance model's (when a model serves and plays it),
        else the agent's own command that does it (discovered), else plain words.
        """
        self.prompts += 1
        token = f"p{next(_PROMPT_TOKENS)}"
        cwd = self.cwd_of(session_id)
        given = self.scenarios.text(scenario, cwd)
        if given is not None:
            return [{"type": "text", "text": given}]
        if not (self.model and scenario in MODEL_SCENARIOS):
            learned = self.discovered.text(scenario, cwd)
            if learned is not None:
                return [{"type": "text", "text": learned}]
        return prompt_blocks(scenario, cwd, token, self.model)

    def can(self, scenario: str) -> bool:
        """Something in this run provokes ``scenario`` (not only plain words)."""
        return (
            scenario in self.scenarios.prompts
            or scenario in self.discovered.prompts
            or (self.model and scenario in MODEL_SCENARIOS)
        )


def prompt_blocks(scenario: str, directory: str, token: str, model: bool) -> list[dict[str, Any]]:
    """The prompt for ``scenario``: its words, and the model directive when a model serves
    and plays it."""
    text = SCENARIOS[scenario]
    if model and scenario in MODEL_SCENARIOS:
        from acpkit.conformance.model import directive

        text += "\n\n" + directive(MODEL_SCENARIOS[scenario], directory, token)
    return [{"type": "text", "text": text}]


def start_agent(
    config: SuiteConfig,
    verdicts: Verdicts,
    *,
    capabilities: dict[str, Any] | None = None,
    version: int = PROTOCOL_VERSION,
    transcript: Transcript | None = None,
) -> Agent:
    """Start the agent, send ``initialize``; raises `CannotTest` when that fails."""
    observer = Observer(transcript, verdicts)
    tmp = tempfile.mkdtemp(prefix="acpkit-conformance-")
    driver: AgentDriver
    if config.url is not None:
        from acpkit.conformance.remote_driver import RemoteDriver

        driver = RemoteDriver(
            config.url,
            observer,
            headers=config.headers,
            timeout=config.timeout,
            tls=config.tls,
            policy=ClientPolicy(roots=[]),
        )
    else:
        driver = AgentDriver(
            config.argv,
            observer,
            cwd=config.cwd,
            env=config.env,
            timeout=config.timeout,
            policy=ClientPolicy(roots=[]),
        )
    try:
        driver.start()
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        verb = "connect to" if config.url is not None else "start"
        raise CannotTest(f"cannot {verb} {config.agent_name}: {e}") from None
    params = {
        "protocolVersion": version,
        "clientCapabilities": capabilities if capabilities is not None else client_capabilities(),
        "clientInfo": {"name": "acpkit-conformance", "version": "1"},
    }
    # A first initialize may be slow (npx, a JIT, a cold cache): allow three step timeouts.
    try:
        response = driver.request("initialize", params, timeout=3 * config.timeout)
    except (StepTimeout, AgentGone) as e:
        driver.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        raise CannotTest(f"the agent never answered initialize: {e}") from None
    result = response.get("result")
    if not isinstance(result, dict):
        driver.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        raise CannotTest(f"initialize failed: {response.get('error')!r}")
    return Agent(
        driver,
        observer,
        result,
        tmp,
        model=config.model,
        scenarios=config.scenarios,
        discovered=config.discovered,
        model_tool_calls=config.model_tool_calls,
    )


#: How many step timeouts a request may take before, unanswered while a later request was
#: answered, it counts as dropped: a prompt (a model may be slow to stop), any other request.
PROMPT_PATIENCE = 5.0
REQUEST_PATIENCE = 3.0
#: At most this many seconds of waiting for such late answers when an agent is stopped.
LATE_ANSWER_WAIT = 30.0


def patience(timeout: float) -> Callable[[Pending], float]:
    """How long (seconds) each request may stay unanswered before it counts as dropped."""

    def of(pending: Pending) -> float:
        factor = PROMPT_PATIENCE if pending.method == "session/prompt" else REQUEST_PATIENCE
        return factor * timeout

    return of


def settle(agent: Agent) -> None:
    """
    Before an agent process is stopped: while a request is unanswered although a later one
    was answered, keep reading until it has had its patience (`patience`; its answer may
    still come), then judge what is still unanswered
    (`acpkit.conformance.observer.Observer.judge_unanswered`). Nothing is judged when the
    agent is gone or its stdin was closed: a probe judges that.
    """
    driver, observer = agent.driver, agent.observer
    if driver.stdin_closed or driver.returncode is not None:
        return
    allowed = patience(driver.timeout)
    stop_at = time.monotonic() + LATE_ANSWER_WAIT
    try:
        # what the agent wrote while nobody read (an agent kept for a later probe group)
        driver.drain(0.05)
        while True:
            waiting = [p.sent_at + allowed(p) for _, p in observer.overtaken()]
            now = time.monotonic()
            if not waiting or now >= min(max(waiting), stop_at):
                break
            driver.drain(min(0.25, max(waiting) - now))
    except (AgentGone, StepTimeout):
        return
    if driver.returncode is None:
        # a server that routes a session's messages to a stream of their own (HTTP-012) may
        # have answered where the tester was not reading yet: its silence proves nothing
        observer.judge_unanswered(allowed, conclusive=not driver.session_streams_used)


@contextmanager
def running_agent(config: SuiteConfig, verdicts: Verdicts, **options: Any) -> Iterator[Agent]:
    """`start_agent` as a context manager that always stops the process (judging the
    requests it left unanswered first, see `settle`)."""
    agent = start_agent(config, verdicts, **options)
    try:
        yield agent
        settle(agent)
    finally:
        agent.driver.stop()
        shutil.rmtree(agent.tmp, ignore_errors=True)


# -- prompt turns --------------------------------------------------------------------------


@attrs.define
class TurnOutcome:
    """What happened during one prompt turn."""

    response: dict[str, Any] | None
    agent_requests: int = 0
    cancelled_at: float | None = None
    held_at_cancel: int = 0
    answered_at: float | None = None
    timed_out: bool = False
    #: the kinds of the turn's live session updates, in order (from the observer)
    kinds: list[str] = attrs.field(factory=list)

    def updates_of(self, kind: str) -> int:
        """How many updates of ``kind`` arrived during the turn."""
        return self.kinds.count(kind)

    @property
    def stop_reason(self) -> str | None:
        """The ``stopReason`` of a successful response."""
        result = self.response.get("result") if self.response else None
        return result.get("stopReason") if isinstance(result, dict) else None


def run_turn(
    agent: Agent,
    session_id: str,
    prompt: list[Any],
    *,
    cancel: str | None = None,
    permission: str = "allow",
) -> TurnOutcome:
    """
    One ``session/prompt``. ``cancel``: ``None`` (no cancel), ``"now"`` (right after sending),
    ``"first_update"`` (after the first update or agent request) or ``"permission"`` (while a
    held permission request is pending). A turn not answered within the step timeout is
    recorded as slow (TURN-001 could not be judged), then cancelled so that it ends.
    """
    driver = agent.driver
    driver.policy.permission = "hold" if cancel == "permission" else permission
    driver.inbox = [m for m in driver.inbox if not ("method" in m and "id" in m)]
    start = len(driver.inbox)
    rid = driver.next_id()
    driver.send(
        {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "session/prompt",
            "params": {"sessionId": session_id, "prompt": prompt},
        }
    )
    outcome = TurnOutcome(None)
    requests_before = len(agent.observer.agent_requests)

    def ours(message: Mapping[str, Any]) -> bool:
        return "method" not in message and message.get("id") == rid

    try:
        if cancel is not None:
            if cancel != "now":
                wanted = (
                    (lambda m: m.get("method") == "session/request_permission")
                    if cancel == "permission"
                    else (lambda m: "method" in m or ours(m))
                )
                try:
                    found = driver.wait_for(
                        lambda m: wanted(m) or ours(m), "waiting for the turn", start=start
                    )
                    driver.inbox.insert(start, found)
                except StepTimeout:
                    pass
            if not any(ours(m) for m in driver.inbox[start:]):
                outcome.held_at_cancel = len(driver.held)
                driver.notify("session/cancel", {"sessionId": session_id})
                outcome.cancelled_at = time.monotonic()
                driver.policy.permission = "cancelled"
                driver.answer_held(CANCELLED)
        outcome.response = driver.response_to(rid, "waiting for the session/prompt response")
        outcome.answered_at = time.monotonic()
        outcome.agent_requests = len(agent.observer.agent_requests) - requests_before
    except StepTimeout as e:
        outcome.timed_out = True
        agent.observer.verdicts.slow("TURN-001", f"session/prompt: {e}")
        agent.observer.note(f"the turn exceeded the step timeout ({driver.timeout:g}s)")
        if outcome.cancelled_at is None:
            driver.notify("session/cancel", {"sessionId": session_id})
        agent.observer.when_answered(rid, lambda message: _judge_late(agent, outcome, message))
    finally:
        driver.policy.permission = "allow"
        driver.answer_held(CANCELLED)
    outcome.kinds = agent.observer.checks.turn_kinds(id_key(rid))
    response = outcome.response
    if response is not None and "result" in response:
        if isinstance(outcome.stop_reason, str):
            agent.observer.verdicts.ok("TURN-001")
    if outcome.cancelled_at is not None and response is not None:
        judge_cancel(agent, outcome)
    if outcome.stop_reason == "end_turn" and outcome.cancelled_at is None:
        judge_reported_tools(agent, prompt, outcome)
    elif outcome.cancelled_at is not None and outcome.timed_out:
        rule_id = "CANCEL-002" if outcome.held_at_cancel else "CANCEL-001"
        agent.observer.verdicts.slow(
            rule_id, f"the cancelled turn was not answered within {driver.timeout:g}s"
        )
    return outcome


def judge_reported_tools(agent: Agent, prompt: Sequence[Any], outcome: TurnOutcome) -> None:
    """TOOL-004: the tool calls the conformance model asked for in a turn were reported."""
    if agent.model_tool_calls is None:
        return
    from acpkit.conformance.model import parse_directive

    text = " ".join(str(b.get("text", "")) for b in prompt if isinstance(b, dict))
    found = parse_directive(text)
    if found is None or not found.token:
        return
    asked = agent.model_tool_calls(found.token)
    if not asked:
        return
    if outcome.updates_of("tool_call"):
        agent.observer.verdicts.ok("TOOL-004")
    else:
        agent.observer.violation(
            "TOOL-004",
            f"the agent ran {asked} tool call(s) the conformance model asked for in this turn "
            "(their results came back to the model), and the turn ended end_turn without any "
            "tool_call update",
        )


def _judge_late(agent: Agent, outcome: TurnOutcome, message: dict[str, Any]) -> None:
    """A turn answered after the step timeout: TURN-001, and the cancel if one was sent."""
    outcome.response = message
    outcome.answered_at = time.monotonic()
    if "result" in message and isinstance(outcome.stop_reason, str):
        agent.observer.verdicts.ok("TURN-001")
    if outcome.cancelled_at is not None:
        judge_cancel(agent, outcome)


#: After a cancel, an answer other than "cancelled" that arrives within this many seconds may
#: have been on its way before the agent read the cancel: the check is then inconclusive.
CANCEL_RACE = 1.0


def judge_cancel(agent: Agent, outcome: TurnOutcome) -> None:
    """CANCEL-001/002: a turn the client cancelled ends with stopReason ``cancelled``."""
    observer = agent.observer
    stop = outcome.stop_reason
    rule_id = "CANCEL-002" if outcome.held_at_cancel else "CANCEL-001"
    if stop == "cancelled":
        observer.verdicts.ok(rule_id)
        return
    got = f"stopReason {stop!r}" if stop is not None else "an error"
    if outcome.held_at_cancel:
        observer.violation(
            rule_id,
            f"turn cancelled while a permission request was pending ended with {got}, "
            "not stopReason 'cancelled'",
        )
        return
    late = (outcome.answered_at or 0.0) - (outcome.cancelled_at or 0.0)
    if late > CANCEL_RACE:
        observer.violation(
            rule_id,
            f"turn answered {late:.1f}s after session/cancel with {got}, not "
            "stopReason 'cancelled'",
        )
    else:
        observer.note(
            f"cancel raced the end of the turn ({got} {late:.2f}s after the cancel): inconclusive"
        )


def one_line(error: Exception) -> str:
    """The first line of an error, plus the last stderr line of a dead agent."""
    text = str(error).splitlines()[0].removesuffix("; stderr tail:")
    if isinstance(error, AgentGone):
        tail = [line for line in error.stderr_tail.splitlines() if line.strip()]
        if tail:
            text += f"; last stderr line: {tail[-1][:200]}"
    return text
