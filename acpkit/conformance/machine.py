"""
What the tester does to an agent: fixed probes, then a Hypothesis rule-based state machine.

Fixed probes (`run_probes`) each start a fresh agent process and check the rules that need a
precise stimulus: version negotiation, the JSON-RPC envelope (ids, -32700/-32600/-32601/-32602,
notifications), sessions (unique ids, relative cwd, unknown session), content, cancellation
while a permission request is pending, ``$/cancel_request``, ``session/load``, turns with
every client service advertised (`probe_services`), and the byte faults of
`acpkit.conformance.faults`.

`ConformanceMachine` plays the client. **Each Hypothesis example runs against a fresh agent
process** (started in ``__init__``, stopped in ``teardown``) so that examples are independent
and a shrunk failure replays from a clean agent. It draws the client capabilities (fs,
terminal, elicitation modes, session notices and compaction, served by the driver's
`acpkit.conformance.driver.ClientPolicy`), creates
sessions in fresh temporary directories, sends prompts whose content is generated from the
schema (gated by the agent's ``promptCapabilities``), runs the commands the agent announces,
answers permission requests (allow / reject / hold then cancel), cancels at random moments,
sends unknown methods, ``_meta`` and ``$/cancel_request``. After every step the invariant
fails the example if the observer recorded a finding, so Hypothesis shrinks the sequence.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import attrs
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.reporting import with_reporter
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from acpkit.conformance import faults
from acpkit.conformance.driver import AgentDriver, AgentGone, ClientPolicy, StepTimeout
from acpkit.conformance.observer import Observer, Transcript, Verdicts
from acpkit.conformance.services import ELICITATION_ACTIONS
from acpkit.testing.jsonschema import for_definition

__all__ = [
    "PROFILES",
    "CannotTest",
    "ConformanceMachine",
    "MachineFailure",
    "Profile",
    "SuiteConfig",
    "run_machine",
    "run_probes",
]

PROTOCOL_VERSION = 1
_CANCELLED = {"result": {"outcome": {"outcome": "cancelled"}}}
_META = {"_meta": {"acpkit.dev/conformance": True}}


@attrs.frozen
class Profile:
    """How much the state machine explores."""

    name: str
    examples: int
    steps: int
    long_line: int
    shrink: bool = True


PROFILES: dict[str, Profile] = {
    "smoke": Profile("smoke", examples=2, steps=5, long_line=1 << 20, shrink=False),
    "quick": Profile("quick", examples=8, steps=10, long_line=1 << 20),
    "full": Profile("full", examples=60, steps=25, long_line=16 << 20),
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
    cancel_grace: float = 2.0


class CannotTest(Exception):
    """The agent could not be tested: it does not start or never answers ``initialize``."""


@attrs.frozen
class MachineFailure:
    """The minimal failing example the state machine found."""

    steps: str
    transcript: str


# -- one agent process -------------------------------------------------------------------


@attrs.define
class Agent:
    """An initialized agent process with its driver, observer and temporary directories."""

    driver: AgentDriver
    observer: Observer
    init_result: dict[str, Any]
    tmp: str

    @property
    def capabilities(self) -> dict[str, Any]:
        """``agentCapabilities`` from the ``initialize`` result."""
        caps = self.init_result.get("agentCapabilities")
        return caps if isinstance(caps, dict) else {}

    def new_directory(self) -> str:
        """A fresh absolute directory for a session."""
        return tempfile.mkdtemp(prefix="session-", dir=self.tmp)

    def new_session(self) -> str | None:
        """``session/new`` in a fresh directory: the session id, or ``None`` on an error."""
        cwd = self.new_directory()
        self.driver.policy.roots.append(cwd)
        response = self.driver.request("session/new", {"cwd": cwd, "mcpServers": []})
        result = response.get("result")
        if isinstance(result, dict) and isinstance(result.get("sessionId"), str):
            return str(result["sessionId"])
        return None


def _client_capabilities(
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
ALL_SERVICES = _client_capabilities(
    True, True, terminal=True, elicitation=("form",), notices=True, compaction=True
)

#: The rules that need a client capability, with the capability path that enables them.
_SERVICE_RULES = {
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
    for rule_id, path in _SERVICE_RULES.items():
        if _advertised(observer.client_capabilities, path):
            observer.verdicts.offer(rule_id)
        else:
            observer.verdicts.skip(
                rule_id, f"clientCapabilities.{'.'.join(path)} was not advertised"
            )


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
        raise CannotTest(f"cannot start {' '.join(config.argv)}: {e}") from None
    params = {
        "protocolVersion": version,
        "clientCapabilities": capabilities if capabilities is not None else _client_capabilities(),
        "clientInfo": {"name": "acpkit-conformance", "version": "1"},
    }
    try:
        response = driver.request("initialize", params)
    except (StepTimeout, AgentGone) as e:
        driver.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        raise CannotTest(f"the agent never answered initialize: {e}") from None
    result = response.get("result")
    if not isinstance(result, dict):
        driver.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        raise CannotTest(f"initialize failed: {response.get('error')!r}")
    return Agent(driver, observer, result, tmp)


@contextmanager
def running_agent(config: SuiteConfig, verdicts: Verdicts, **options: Any) -> Iterator[Agent]:
    """`start_agent` as a context manager that always stops the process."""
    agent = start_agent(config, verdicts, **options)
    try:
        yield agent
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
    held permission request is pending). Timeouts are findings (TURN-001).
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
                driver.answer_held(_CANCELLED)
        outcome.response = driver.response_to(rid, "waiting for the session/prompt response")
        outcome.answered_at = time.monotonic()
        outcome.agent_requests = len(agent.observer.agent_requests) - requests_before
    except StepTimeout:
        agent.observer.violation(
            "TURN-001", f"session/prompt got no response within {driver.timeout:g}s"
        )
    finally:
        driver.policy.permission = "allow"
        driver.answer_held(_CANCELLED)
    response = outcome.response
    if response is not None and "result" in response:
        if isinstance(outcome.stop_reason, str):
            agent.observer.verdicts.ok("TURN-001")
    if outcome.cancelled_at is not None and response is not None:
        _judge_cancel(agent, outcome, cancel)
    return outcome


def _judge_cancel(agent: Agent, outcome: TurnOutcome, cancel: str | None) -> None:
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
    grace = 2.0
    if late > grace:
        observer.violation(
            rule_id,
            f"turn answered {late:.1f}s after session/cancel with {got}, not "
            "stopReason 'cancelled'",
        )
    else:
        observer.note(
            f"cancel raced the end of the turn ({got} {late:.2f}s after the cancel): inconclusive"
        )


def _prompt_error_is_not_applicable(agent: Agent, outcome: TurnOutcome) -> bool:
    response = outcome.response
    if response is not None and "error" in response:
        for rule_id in ("TURN-001", "TURN-002", "TURN-003", "CANCEL-001"):
            agent.observer.verdicts.skip(
                rule_id, f"the agent answered session/prompt with an error: {response['error']}"
            )
        return True
    return False


def _one_line(error: Exception) -> str:
    """The first line of an error, plus the last stderr line of a dead agent."""
    text = str(error).splitlines()[0].removesuffix("; stderr tail:")
    if isinstance(error, AgentGone):
        tail = [line for line in error.stderr_tail.splitlines() if line.strip()]
        if tail:
            text += f"; last stderr line: {tail[-1][:200]}"
    return text


# -- fixed probes --------------------------------------------------------------------------


def _expect_error(
    agent: Agent, rule_id: str, response: dict[str, Any] | None, codes: Sequence[int], what: str
) -> None:
    error = response.get("error") if response else None
    code = error.get("code") if isinstance(error, dict) else None
    if response is None:
        agent.observer.violation(rule_id, f"no response to {what}")
    elif code in codes:
        agent.observer.verdicts.ok(rule_id)
    elif code is None:
        agent.observer.violation(
            rule_id, f"{what} succeeded; expected an error {'/'.join(map(str, codes))}"
        )
    else:
        agent.observer.violation(
            rule_id, f"{what} got error code {code}; expected {'/'.join(map(str, codes))}"
        )


def _safe_request(agent: Agent, method: str, params: Any, **kw: Any) -> dict[str, Any] | None:
    try:
        return agent.driver.request(method, params, **kw)
    except (StepTimeout, AgentGone):
        return None


def probe_initialize(config: SuiteConfig, verdicts: Verdicts) -> Agent | None:
    """INIT-001/002 with version 1 (same version expected) and with a future version."""
    with running_agent(config, verdicts) as agent:
        result = agent.init_result
        version = result.get("protocolVersion")
        capabilities = result.get("agentCapabilities", {})
        if not isinstance(version, int) or not isinstance(capabilities, dict):
            agent.observer.violation(
                "INIT-001",
                "initialize result needs an integer protocolVersion (and agentCapabilities, "
                f"when present, an object): got {version!r}, {capabilities!r}",
            )
        else:
            verdicts.ok("INIT-001")
        if version == PROTOCOL_VERSION:
            verdicts.ok("INIT-002")
        else:
            agent.observer.violation(
                "INIT-002",
                f"asked for version {PROTOCOL_VERSION} (which a v1 agent supports), "
                f"got protocolVersion {version!r}",
            )
    try:
        with running_agent(config, verdicts, version=999) as agent:
            version = agent.init_result.get("protocolVersion")
            if version == 999 or not isinstance(version, int):
                agent.observer.violation(
                    "INIT-002",
                    f"asked for unsupported version 999, got protocolVersion {version!r} "
                    "instead of the agent's latest",
                )
            else:
                verdicts.ok("INIT-002")
    except CannotTest as e:
        verdicts.violation("INIT-002", f"initialize with protocolVersion 999 failed: {e}")
    return None


def probe_envelope(agent: Agent) -> None:
    """RPC-001..009: ids, error codes, notifications, extension methods."""
    observer = agent.observer
    driver = agent.driver
    response = _safe_request(agent, "_acpkit.dev/unknown", {}, request_id="abc-1")
    _expect_error(agent, "RPC-005", response, (-32601,), "an unknown method")
    response = _safe_request(agent, "no/such_method", _META, request_id=2**40)
    _expect_error(agent, "RPC-005", response, (-32601,), "an unknown method (numeric id)")
    response = _safe_request(agent, "_vendor.example/request", {"x": 1})
    _expect_error(agent, "RPC-008", response, (-32601,), "an unknown _vendor request")
    for method in ("no/such_notification", "_vendor.example/notice"):
        driver.notify(method, {"x": 1, **_META})
    driver.notify("session/cancel", {"sessionId": "no-such-session"})
    driver.drain(0.3)
    response = _safe_request(agent, "_acpkit.dev/still_there", {})
    if response is None:
        observer.violation("RPC-007", "agent stopped answering after unknown notifications")
    else:
        verdicts = observer.verdicts
        if not any(f.rule_id == "RPC-002" for f in verdicts.findings):
            verdicts.ok("RPC-002")
        verdicts.ok("RPC-007")
    # -32700 and -32600
    observer.expect_null_id_error()
    driver.write(b'{"jsonrpc": "2.0", "id": 77, "method": \n')
    response = _null_or(agent, 77, "a line that is not JSON")
    _expect_error(agent, "RPC-003", response, (-32700,), "a line that is not JSON")
    invalid = [
        (b'[{"jsonrpc":"2.0","id":78,"method":"initialize"}]', 78, "a batch (array)"),
        (b'{"id":79,"method":"_acpkit.dev/x"}', 79, "a request without jsonrpc"),
        (b'{"jsonrpc":"2.0","id":{"bad":1},"method":"_acpkit.dev/x"}', None, "an object id"),
    ]
    for line, rid, what in invalid:
        if rid is not None:  # an agent may answer with the id it could read
            observer.sent({"id": rid, "method": "_acpkit.dev/invalid"})
        observer.expect_null_id_error()
        driver.write(line + b"\n")
        response = _null_or(agent, rid, what)
        _expect_error(agent, "RPC-004", response, (-32600,), what)
    # -32602
    response = _safe_request(agent, "session/new", {"cwd": 42, "mcpServers": "none"})
    _expect_error(agent, "RPC-006", response, (-32602,), "session/new with cwd 42")


def _null_or(agent: Agent, rid: Any, what: str) -> dict[str, Any] | None:
    def match(message: Mapping[str, Any]) -> bool:
        if "method" in message:
            return False
        return message.get("id") == rid or (message.get("id") is None and "error" in message)

    try:
        return agent.driver.wait_for(match, f"waiting for the error for {what}")
    except (StepTimeout, AgentGone):
        return None


def probe_sessions(agent: Agent) -> list[str]:
    """SESSION-001/002/003 and CONTENT-001; returns the sessions created."""
    sessions = [s for s in (agent.new_session() for _ in range(3)) if s is not None]
    if not sessions:
        for rule_id in ("SESSION-001", "CONTENT-001", "TURN-001"):
            agent.observer.verdicts.skip(rule_id, "session/new failed")
        return []
    response = _safe_request(agent, "session/new", {"cwd": "relative/dir", "mcpServers": []})
    _expect_error(
        agent,
        "SESSION-002",
        response,
        (-32602, -32600, -32603, -32000),
        "session/new with the relative cwd 'relative/dir'",
    )
    response = _safe_request(
        agent,
        "session/prompt",
        {"sessionId": "acpkit-no-such-session", "prompt": [{"type": "text", "text": "hi"}]},
    )
    error = response.get("error") if response else None
    if response is None:
        agent.observer.violation("SESSION-003", "no answer to a prompt for an unknown session")
    elif error is None:
        agent.observer.violation("SESSION-003", "a prompt for an unknown sessionId succeeded")
    else:
        agent.observer.verdicts.ok("SESSION-003")
    for block in (
        {"type": "text", "text": "Say hello. " + faults.TRICKY_TEXT},
        {"type": "resource_link", "uri": "file:///etc/hostname", "name": "hostname"},
    ):
        outcome = run_turn(agent, sessions[0], [block])
        error = outcome.response.get("error") if outcome.response else None
        if isinstance(error, dict) and error.get("code") == -32602 and not outcome.agent_requests:
            agent.observer.violation(
                "CONTENT-001", f"a {block['type']} prompt was rejected as invalid params: {error}"
            )
        elif outcome.response is not None and error is None:
            agent.observer.verdicts.ok("CONTENT-001")
        else:
            _prompt_error_is_not_applicable(agent, outcome)
    return sessions


def probe_cancel(agent: Agent, session_id: str) -> None:
    """CANCEL-001/002: cancel while a permission request is pending, and mid-turn."""
    outcome = run_turn(
        agent, session_id, [{"type": "text", "text": "Please run a tool."}], cancel="permission"
    )
    if outcome.cancelled_at is None or not outcome.held_at_cancel:
        agent.observer.verdicts.skip("CANCEL-002", "the agent asked no permission during a turn")
    run_turn(agent, session_id, [{"type": "text", "text": "Count to ten."}], cancel="first_update")


def probe_cancel_request(agent: Agent, session_id: str) -> None:
    """RPC-010: ``$/cancel_request`` for a running prompt, then for an answered id."""
    driver = agent.driver
    rid = driver.next_id()
    driver.send(
        {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "session/prompt",
            "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": "hi"}]},
        }
    )
    driver.notify("$/cancel_request", {"requestId": rid})
    try:
        response = driver.response_to(rid, "waiting for the answer to a cancelled request")
    except (StepTimeout, AgentGone):
        response = None
    if response is None:
        agent.observer.violation("RPC-010", "a request cancelled by $/cancel_request got no answer")
        return
    # Answered once: a result, -32800, or (an implementation may ignore $/ notifications)
    # the error the request would have got anyway; a second answer is flagged by the observer.
    agent.observer.verdicts.ok("RPC-010")
    driver.notify("$/cancel_request", {"requestId": rid})
    driver.drain(0.3)


def probe_load(agent: Agent, session_id: str) -> None:
    """CAP-005 / SESSION-004: session/load of a session that had a turn replays it first."""
    if agent.capabilities.get("loadSession") is not True:
        for rule_id in ("CAP-005", "SESSION-004"):
            agent.observer.verdicts.skip(rule_id, "loadSession is not advertised")
        return
    outcome = run_turn(agent, session_id, [{"type": "text", "text": "Remember this."}])
    had_turn = outcome.stop_reason is not None
    cwd = agent.driver.policy.roots[0] if agent.driver.policy.roots else agent.tmp
    response = _safe_request(
        agent, "session/load", {"sessionId": session_id, "cwd": cwd, "mcpServers": []}
    )
    if response is None or "error" in response:
        agent.observer.violation(
            "CAP-005",
            f"loadSession is advertised but session/load failed: "
            f"{response.get('error') if response else 'no answer'}",
        )
        return
    agent.observer.verdicts.ok("CAP-005")
    replayed = agent.observer.replayed.get(session_id, 0)
    if had_turn and replayed == 0:
        agent.observer.violation(
            "SESSION-004", "session/load answered without replaying the conversation first"
        )
    elif had_turn:
        agent.observer.verdicts.ok("SESSION-004")


#: Prompts for the services probe: they invite an agent driven by a model to use tools.
SERVICE_PROMPTS = (
    "Run `echo conformance` in a terminal, then ask me one question with a form.",
    "Read and write a file named conformance.txt in the working directory.",
)


def probe_services(agent: Agent) -> None:
    """
    TERMINAL / ELICIT / NOTICE (and CAP-001..004 with the capabilities advertised): turns with
    every client service offered; elicitations answered accept, then decline, then cancel.
    """
    session = agent.new_session()
    if session is None:
        agent.observer.verdicts.skip("TERMINAL-001", "session/new failed")
        return
    for number, action in enumerate(("accept", "decline", "cancel")):
        agent.driver.policy.elicitation = action
        text = SERVICE_PROMPTS[number % len(SERVICE_PROMPTS)]
        run_turn(agent, session, [{"type": "text", "text": text}])
    agent.driver.policy.elicitation = "accept"
    agent.driver.drain(0.2)
    explain_services(agent.observer)


def run_probes(config: SuiteConfig, verdicts: Verdicts) -> list[Transcript]:
    """Run every fixed probe (each group on a fresh agent); the transcripts of the runs."""
    transcripts: list[Transcript] = []

    def fresh(**options: Any) -> Any:
        transcript = Transcript(name="agent")
        transcripts.append(transcript)
        return running_agent(config, verdicts, transcript=transcript, **options)

    def guarded(rule_id: str, what: str, group: Callable[[], None], families: str) -> None:
        if config.rules and not any(r.startswith(tuple(families.split())) for r in config.rules):
            return
        try:
            group()
        except (StepTimeout, AgentGone) as e:
            excerpt = transcripts[-1].excerpt() if transcripts else ""
            verdicts.violation(rule_id, f"during {what}: {_one_line(e)}", excerpt)

    def envelope() -> None:
        with fresh() as agent:
            probe_envelope(agent)

    def sessions_and_turns() -> None:
        capabilities = _client_capabilities(fs_read=True, fs_write=True)
        with fresh(capabilities=capabilities) as agent:
            sessions = probe_sessions(agent)
            if sessions:
                probe_cancel(agent, sessions[0])
                probe_cancel_request(agent, sessions[-1])
                probe_load(agent, sessions[1] if len(sessions) > 1 else sessions[0])

    def framing() -> None:
        with fresh() as agent:
            directory = tempfile.mkdtemp(prefix="é中😀-", dir=agent.tmp)
            faults.probe_split(agent.driver, directory)
            faults.probe_batched_write(agent.driver)
            faults.probe_crlf(agent.driver)
            faults.probe_junk(agent.driver)

    def long_line() -> None:
        with fresh() as agent:
            faults.probe_long_line(agent.driver, config.profile.long_line)

    def eof() -> None:
        with fresh() as agent:
            session = agent.new_session()
            if session is None:
                verdicts.skip("FRAME-009", "session/new failed")
            else:
                faults.probe_eof_mid_turn(agent.driver, session, config.timeout)

    def initialization() -> None:
        probe_initialize(config, verdicts)

    def services() -> None:
        with fresh(capabilities=ALL_SERVICES) as agent:
            probe_services(agent)

    # Each group runs only when one of the rule id prefixes listed last is selected.
    guarded("INIT-001", "the initialize probes", initialization, "INIT SCHEMA RPC-001")
    guarded("RPC-007", "the envelope probes", envelope, "RPC SCHEMA FRAME-00")
    guarded(
        "TURN-001",
        "the session and turn probes",
        sessions_and_turns,
        "SESSION CONTENT TURN CANCEL CAP RPC-010 SCHEMA",
    )
    guarded(
        "TERMINAL-001",
        "the client services probe",
        services,
        "TERMINAL ELICIT NOTICE CAP SCHEMA TURN",
    )
    guarded(
        "FRAME-004",
        "the framing probes",
        framing,
        "FRAME-004 FRAME-005 FRAME-006 FRAME-008 RPC-003",
    )
    guarded("FRAME-007", "the long-line probe", long_line, "FRAME-007")
    guarded("FRAME-009", "the EOF probe", eof, "FRAME-009")
    return transcripts


# -- the state machine ---------------------------------------------------------------------


def _prompt_blocks(capabilities: Mapping[str, Any]) -> st.SearchStrategy[list[Any]]:
    prompt_caps = capabilities.get("promptCapabilities")
    caps = prompt_caps if isinstance(prompt_caps, dict) else {}
    kinds = [
        for_definition("TextContent").map(lambda b: {**b, "type": "text"}),
        for_definition("ResourceLink").map(lambda b: {**b, "type": "resource_link"}),
    ]
    if caps.get("image") is True:
        kinds.append(for_definition("ImageContent").map(lambda b: {**b, "type": "image"}))
    if caps.get("audio") is True:
        kinds.append(for_definition("AudioContent").map(lambda b: {**b, "type": "audio"}))
    if caps.get("embeddedContext") is True:
        kinds.append(for_definition("EmbeddedResource").map(lambda b: {**b, "type": "resource"}))
    plain = st.text(min_size=1, max_size=40).map(lambda t: {"type": "text", "text": t})
    return st.lists(st.one_of(plain, *kinds), min_size=1, max_size=3)


class ConformanceMachine(RuleBasedStateMachine):
    """The client, played by Hypothesis; subclassed per run by `run_machine` with a config."""

    config: SuiteConfig
    collector: _Collector

    def __init__(self) -> None:
        super().__init__()
        self.verdicts = Verdicts()
        self.transcript = Transcript(name="agent")
        self.agent: Agent | None = None
        self.commands: list[dict[str, Any]] = []
        self.sessions: list[str] = []
        self.collector.current = self

    @initialize(
        fs_read=st.booleans(),
        fs_write=st.booleans(),
        meta=st.booleans(),
        terminal=st.booleans(),
        form=st.booleans(),
        url=st.booleans(),
        notices=st.booleans(),
        compaction=st.booleans(),
    )
    def start(
        self,
        fs_read: bool,
        fs_write: bool,
        meta: bool,
        terminal: bool,
        form: bool,
        url: bool,
        notices: bool,
        compaction: bool,
    ) -> None:
        """Start a fresh agent with drawn client capabilities (fs, terminal, elicitation
        modes, session notices and compaction)."""
        capabilities = _client_capabilities(
            fs_read,
            fs_write,
            terminal=terminal,
            elicitation=[m for m, on in (("form", form), ("url", url)) if on],
            notices=notices,
            compaction=compaction,
        )
        if meta:
            capabilities.update(_META)
        self.agent = start_agent(
            self.config, self.verdicts, capabilities=capabilities, transcript=self.transcript
        )
        self.new_session()

    def _agent(self) -> Agent:
        assert self.agent is not None
        return self.agent

    @rule()
    def new_session(self) -> None:
        """``session/new`` in a fresh directory."""
        session = None
        with self._survives("SESSION-001", "session/new"):
            session = self._agent().new_session()
        self.sessions.append(session if session is not None else "acpkit-failed-session")

    def _session(self, data: st.DataObject) -> str:
        return data.draw(st.sampled_from(self.sessions), label="session")

    @rule(
        data=st.data(),
        cancel=st.sampled_from([None, None, "now", "first_update", "permission"]),
        permission=st.sampled_from(["allow", "reject"]),
        elicitation=st.sampled_from(ELICITATION_ACTIONS),
    )
    def prompt(
        self, data: st.DataObject, cancel: str | None, permission: str, elicitation: str
    ) -> None:
        """A prompt turn with generated content, maybe cancelled at some moment; an
        elicitation during it is answered ``elicitation`` (accepted content is drawn)."""
        agent = self._agent()
        session = self._session(data)
        blocks = data.draw(_prompt_blocks(agent.capabilities), label="prompt")
        policy = agent.driver.policy
        policy.elicitation, policy.draw = elicitation, data.draw
        try:
            with self._survives("TURN-001", "a prompt turn"):
                run_turn(agent, session, blocks, cancel=cancel, permission=permission)
        finally:
            policy.elicitation, policy.draw = "accept", None
        self._learn_commands()

    @contextmanager
    def _survives(self, rule_id: str, what: str) -> Iterator[None]:
        try:
            yield
        except (StepTimeout, AgentGone) as e:
            self._agent().observer.violation(rule_id, f"during {what}: {_one_line(e)}")

    def _learn_commands(self) -> None:
        for message in self._agent().driver.updates():
            update = message.get("params", {}).get("update", {})
            if (
                isinstance(update, dict)
                and update.get("sessionUpdate") == "available_commands_update"
            ):
                commands = update.get("availableCommands")
                if isinstance(commands, list):
                    self.commands = [c for c in commands if isinstance(c, dict) and "name" in c]

    @rule(data=st.data(), with_input=st.booleans())
    def run_command(self, data: st.DataObject, with_input: bool) -> None:
        """Run one of the announced slash commands as a prompt."""
        self._learn_commands()
        if not self.commands:
            return
        session = self._session(data)
        command = data.draw(st.sampled_from(self.commands), label="command")
        text = "/" + str(command["name"]) + (" some input" if with_input else "")
        with self._survives("TURN-001", f"the command {text}"):
            run_turn(self._agent(), session, [{"type": "text", "text": text}])

    @rule(method=st.sampled_from(["_acpkit.dev/probe", "unknown/method", "session/unknown"]))
    def unknown_method(self, method: str) -> None:
        """An unknown request must get -32601."""
        agent = self._agent()
        response = _safe_request(agent, method, _META)
        _expect_error(agent, "RPC-005", response, (-32601,), f"unknown method {method}")

    @rule(method=st.sampled_from(["_acpkit.dev/note", "unknown/notification"]))
    def unknown_notification(self, method: str) -> None:
        """An unknown notification is ignored (the next request is still answered)."""
        agent = self._agent()
        with self._survives("RPC-007", f"the notification {method}"):
            agent.driver.notify(method, _META)
        response = _safe_request(agent, "_acpkit.dev/ping", {})
        if response is None:
            agent.observer.violation("RPC-007", f"no answer after the notification {method}")
        else:
            agent.observer.verdicts.ok("RPC-007")

    @rule(data=st.data())
    def cancel_request(self, data: st.DataObject) -> None:
        """``$/cancel_request`` for a running prompt."""
        session = self._session(data)
        with self._survives("RPC-010", "$/cancel_request"):
            probe_cancel_request(self._agent(), session)

    @invariant()
    def no_findings(self) -> None:
        """Every rule held so far in this example."""
        if self.agent is not None and self.verdicts.findings:
            first = self.verdicts.findings[0]
            raise AssertionError(f"{first.rule_id}: {first.message}")

    def teardown(self) -> None:
        """Stop the agent process of this example and hand its verdicts to the collector."""
        if self.agent is not None:
            explain_services(self.agent.observer)
            self.agent.driver.stop()
            shutil.rmtree(self.agent.tmp, ignore_errors=True)
        if self.verdicts.findings:
            self.collector.failing = self
        else:
            self.collector.verdicts.merge(self.verdicts)


@attrs.define
class _Collector:
    """Keeps the verdicts of every example and the last failing example's evidence."""

    verdicts: Verdicts
    current: ConformanceMachine | None = None
    failing: ConformanceMachine | None = None


def run_machine(
    config: SuiteConfig,
    verdicts: Verdicts,
    log: Callable[[str], None] | None = None,
) -> MachineFailure | None:
    """Explore with the state machine; merge results into ``verdicts``; the failure found."""
    collector = _Collector(verdicts)
    machine = type(
        "ConformanceRun",
        (ConformanceMachine,),
        {"config": config, "collector": collector},
    )
    machine._hypothesis_internal_use_seed = config.seed  # type: ignore[attr-defined]
    profile = config.profile
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if profile.shrink else [])
    run_settings = settings(
        max_examples=profile.examples,
        stateful_step_count=profile.steps,
        deadline=None,
        database=None,
        phases=phases,
        print_blob=False,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )
    steps: list[str] = []
    try:
        with with_reporter(lambda text: steps.append(str(text))):
            run_state_machine_as_test(machine, settings=run_settings)
    except CannotTest:
        raise
    except (AssertionError, StepTimeout, AgentGone) as e:
        steps.extend(str(note) for note in getattr(e, "__notes__", ()))
        steps.append(f"failed: {e}")
    failing = collector.failing
    if failing is None:
        return None
    verdicts.merge(failing.verdicts)
    return MachineFailure(steps="\n".join(steps), transcript=failing.transcript.render())
