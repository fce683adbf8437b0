"""
The fixed probes: each group starts a fresh agent process and checks the rules that need a
precise stimulus.

Groups: version negotiation (`probe_initialize`); the JSON-RPC envelope (`probe_envelope`:
string and large numeric ids, unknown and ``_vendor`` methods and notifications, and the
named fault injections of `ENVELOPE_FAULTS`); sessions and content (`probe_sessions`);
cancellation (`probe_cancel`, `probe_cancel_request`); ``session/load`` (`probe_load`); turns
with every client service advertised (`probe_services`); and the byte faults of
`acpkit.conformance.faults`.

Every probe step runs inside ``observer.probe(RULE, what)``: when the agent dies during a
step, the finding is filed under the rule that step probes, with the line that killed it. A
step that times out is "could not judge" (`Verdicts.slow`), never a violation. Every check
looks at what the answer *is* (its code, its result), not only at whether one arrived.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from acpkit.conformance import faults
from acpkit.conformance.driver import AgentDriver, ClientPolicy, StepTimeout
from acpkit.conformance.harness import (
    ALL_SERVICES,
    META,
    PROTOCOL_VERSION,
    SERVICE_RULES,
    Agent,
    CannotTest,
    SuiteConfig,
    client_capabilities,
    explain_services,
    run_turn,
)
from acpkit.conformance.observer import BATCH_ANSWER, Observer, Transcript, Verdicts, id_key
from acpkit.conformance.remote_driver import Refused, RemoteDriver
from acpkit.conformance.schedule import Group, Lane, run_lanes

Fresh = Callable[..., Any]

__all__ = [
    "ENVELOPE_FAULTS",
    "SERVICE_BEHAVIOURS",
    "EnvelopeFault",
    "probe_cancel",
    "probe_cancel_request",
    "probe_capabilities_withheld",
    "probe_envelope",
    "probe_initialize",
    "probe_load",
    "probe_services",
    "probe_sessions",
    "probe_unknown_notifications",
    "run_probes",
]


@attrs.frozen
class EnvelopeFault:
    """A deliberately malformed line, the rule that says what must happen, and the answer."""

    name: str
    line: bytes
    request_id: Any
    rule_id: str
    codes: tuple[int, ...]
    what: str


#: The named fault injections of the envelope probe.
ENVELOPE_FAULTS: tuple[EnvelopeFault, ...] = (
    EnvelopeFault(
        "truncated-json",
        b'{"jsonrpc": "2.0", "id": 77, "method": ',
        77,
        "RPC-003",
        (-32700,),
        "a line that is not JSON",
    ),
    EnvelopeFault(
        "batch",
        b'[{"jsonrpc":"2.0","id":78,"method":"_acpkit.dev/in_a_batch"}]',
        78,
        "RPC-004",
        (-32600,),
        "a batch (array); ACP has no batches",
    ),
    EnvelopeFault(
        "no-jsonrpc-member",
        b'{"id":79,"method":"_acpkit.dev/x"}',
        79,
        "RPC-004",
        (-32600,),
        "a request without the jsonrpc member",
    ),
    EnvelopeFault(
        "object-id",
        b'{"jsonrpc":"2.0","id":{"bad":1},"method":"_acpkit.dev/x"}',
        {"bad": 1},
        "RPC-004",
        (-32600,),
        "a request whose id is an object",
    ),
)


#: ErrorCode "Authentication required".
AUTH_REQUIRED = -32000


def _error_code(response: Mapping[str, Any] | None) -> int | None:
    error = response.get("error") if response else None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, int) else None


def expect_error(
    agent: Agent,
    rule_id: str,
    response: dict[str, Any] | None,
    codes: Sequence[int],
    what: str,
    *,
    timeout: StepTimeout | None = None,
) -> None:
    """
    Judge ``response`` against ``codes``; ``None``: it timed out (see ``timeout``), so the
    rule could not be judged yet, and a late answer is judged when it arrives.
    """
    wanted = "/".join(map(str, codes))
    if isinstance(timeout, Refused):  # the transport's answer: the agent never saw it
        agent.observer.note(f"{what}: {timeout}")
        agent.observer.verdicts.skip(rule_id, f"{what}: {timeout}")
        return
    if response is None:
        reason = str(timeout) if timeout is not None else "no answer"
        agent.observer.verdicts.slow(rule_id, f"{what}: {reason}")
        if timeout is not None and timeout.request_id is not None:
            agent.observer.when_answered(
                timeout.request_id,
                lambda late: expect_error(agent, rule_id, late, codes, f"{what} (answered late)"),
            )
        return
    code = _error_code(response)
    if code in codes:
        agent.observer.verdicts.ok(rule_id)
    elif "error" not in response:
        agent.observer.violation(
            rule_id, f"{what} succeeded ({str(response.get('result'))[:80]}); expected {wanted}"
        )
    else:
        agent.observer.violation(rule_id, f"{what} got error code {code}; expected {wanted}")


def request(
    agent: Agent, method: str, params: Any, **kw: Any
) -> tuple[dict[str, Any] | None, StepTimeout | None]:
    """A request and its response, or ``(None, timeout)``; `AgentGone` propagates."""
    try:
        return agent.driver.request(method, params, **kw), None
    except StepTimeout as e:
        return None, e


def probe_initialize(config: SuiteConfig, verdicts: Verdicts, fresh: Callable[..., Any]) -> None:
    """INIT-001/002 with version 1 (same version expected) and with a future version."""
    supported: int | None = None
    with fresh() as agent:
        result = agent.init_result
        version = result.get("protocolVersion")
        if version == PROTOCOL_VERSION:
            supported = PROTOCOL_VERSION
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
        with fresh(version=999) as agent:
            version = agent.init_result.get("protocolVersion")
            if version == 999 or not isinstance(version, int):
                agent.observer.violation(
                    "INIT-002",
                    f"asked for unsupported version 999, got protocolVersion {version!r} "
                    "instead of the agent's latest",
                )
            elif supported is not None and version < supported:
                # it answered `supported` to a request for that version: it supports it,
                # so its latest is no older
                agent.observer.violation(
                    "INIT-002",
                    f"asked for unsupported version 999, got protocolVersion {version}, older "
                    f"than version {supported}, which it supports (it answered {supported} "
                    f"when asked for it): not the latest it supports",
                )
            else:
                verdicts.ok("INIT-002")
    except CannotTest as e:
        if "never answered" in str(e) and "went away" not in str(e):
            verdicts.slow("INIT-002", f"initialize with protocolVersion 999: {e}")
        else:
            verdicts.violation(
                "INIT-002",
                f"initialize with protocolVersion 999 failed instead of answering the agent's "
                f"latest version: {e}",
            )


def _error_for_line(rid: Any) -> Callable[[Mapping[str, Any]], bool]:
    """Whether a message is the error for a malformed line: one with the line's id (when it
    had one) or with id null (or the answer to a batch)."""

    def match(message: Mapping[str, Any]) -> bool:
        if "method" in message:
            return False
        if rid is not None and message.get("id") == rid:
            return True
        return message.get("id") is None and ("error" in message or BATCH_ANSWER in message)

    return match


def _null_or(
    agent: Agent, rid: Any, what: str, start: int = 0
) -> tuple[dict[str, Any] | None, StepTimeout | None]:
    """
    The error for a malformed line: one with our id (when it had one) or with id null, among
    the messages that arrived since inbox position ``start`` (an earlier id-less reply is not
    taken for this one's).
    """

    driver = agent.driver
    if isinstance(driver, RemoteDriver) and driver.last_refusal is not None:
        return None, driver.last_refusal
    match = _error_for_line(rid)
    try:
        return driver.wait_for(match, f"waiting for the error for {what}", start=start), None
    except StepTimeout as e:
        return None, e


#: How long an answer to a malformed line may trail the answer to the request written after
#: it: at least this many seconds, and at least `GRACE_ROUND_TRIPS` of that request's round
#: trip (never more than the step timeout).
GRACE_SECONDS = 1.0
GRACE_ROUND_TRIPS = 10


def _answer_or_sentinel(
    agent: Agent, fault_id: Any, name: str, what: str, start: int
) -> tuple[dict[str, Any] | None, StepTimeout | None, bool]:
    """
    The error for the malformed line ``what`` just written (as `_null_or`), with a
    *sentinel* request written right after it: an agent that drops the line silently answers
    the sentinel and never the line, so the wait for the line's error ends a grace after
    the sentinel's answer (`GRACE_SECONDS`, `GRACE_ROUND_TRIPS`) instead of at the step
    timeout. Returns the error (or None), the timeout, and whether the sentinel was
    answered while the line was not (the line was dropped).
    """
    driver = agent.driver
    sentinel = driver.next_id()
    sent_at = time.monotonic()
    driver.send({"jsonrpc": "2.0", "id": sentinel, "method": f"_acpkit.dev/after_{name}"})
    sentinel_key = id_key(sentinel)

    error_for_line = _error_for_line(fault_id)

    def either(message: Mapping[str, Any]) -> bool:
        if error_for_line(message):
            return True
        return "method" not in message and id_key(message.get("id")) == sentinel_key

    try:
        first = driver.wait_for(either, f"waiting for the error for {what}", start=start)
    except StepTimeout as e:
        return None, e, False
    if error_for_line(first):
        return first, None, False
    # the sentinel was answered first: give the line's error a grace to follow
    round_trip = time.monotonic() - sent_at
    grace = min(driver.timeout, max(GRACE_SECONDS, GRACE_ROUND_TRIPS * round_trip))
    try:
        late_error = driver.wait_for(
            error_for_line, f"waiting for the error for {what}", timeout=grace, start=start
        )
    except StepTimeout:
        agent.observer.note(f"{what}: no answer within {grace:.1f}s of the next request's")
        return None, None, True
    return late_error, None, False


def _dropped(agent: Agent, rule_id: str, what: str, codes: Sequence[int], grace: str) -> None:
    """``what`` was dropped silently: the request written after it was answered, it never
    was (a violation of ``rule_id``, RPC-003 or RPC-004, as in
    `acpkit.conformance.faults.probe_junk`)."""
    wanted = "/".join(map(str, codes))
    agent.observer.violation(
        rule_id,
        f"{what} got no answer, while the request written right after it was answered "
        f"({grace}): it was dropped silently (expected {wanted})",
    )


def probe_envelope(agent: Agent) -> None:
    """RPC-001..009: ids, error codes, notifications, extension methods, malformed lines."""
    observer = agent.observer
    driver = agent.driver
    for rid, method, rule_id, what in (
        ("abc-1", "_acpkit.dev/unknown", "RPC-005", "an unknown method (string id)"),
        (2**40, "no/such_method", "RPC-005", "an unknown method (large numeric id)"),
        (None, "_vendor.example/request", "RPC-008", "an unknown _vendor request"),
    ):
        with observer.probe(rule_id, what):
            params = META if rule_id == "RPC-005" else {"x": 1}
            response, late = request(agent, method, params, request_id=rid)
            if rule_id == "RPC-008":
                # the MUST is an answer with the provided id (never answered while later
                # requests are: a finding when the agent is stopped); its code is RPC-005's
                if response is None:
                    observer.verdicts.slow("RPC-008", f"{what}: {late}")
                    if late is not None and late.request_id is not None:
                        observer.when_answered(
                            late.request_id, lambda _: observer.verdicts.ok("RPC-008")
                        )
                else:
                    observer.verdicts.ok("RPC-008")
                rule_id = "RPC-005"
            expect_error(agent, rule_id, response, (-32601,), what, timeout=late)
    probe_unknown_notifications(agent)
    for fault in ENVELOPE_FAULTS:
        if fault.name == "batch" and isinstance(driver, RemoteDriver) and not driver.url.websocket:
            observer.note("batch fault skipped over Streamable HTTP: HTTP-007 judges it")
            continue
        with observer.probe(fault.rule_id, fault.what):
            observer.fault(fault.name, fault.rule_id, fault.what)
            if fault.name == "batch":
                observer.arrays_expected += 1
            driver.drain(0.05)
            start = len(driver.inbox)
            driver.write(fault.line + b"\n")
            if isinstance(driver, RemoteDriver) and driver.last_refusal is not None:
                response, late, dropped = None, driver.last_refusal, False
            elif isinstance(driver, RemoteDriver) and not driver.url.websocket:
                # one POST per line: its own answer, no sentinel needed
                response, late = _null_or(agent, fault.request_id, fault.what, start)
                dropped = False
            else:
                response, late, dropped = _answer_or_sentinel(
                    agent, fault.request_id, fault.name, fault.what, start
                )
            observer.arrays_expected = 0
            if dropped:
                grace = f"{GRACE_SECONDS:g}s or {GRACE_ROUND_TRIPS} of its round trips later"
                _dropped(agent, fault.rule_id, fault.what, fault.codes, grace)
                continue
            if response is not None and BATCH_ANSWER in response:
                continue  # judged by the observer (RPC-004)
            expect_error(agent, fault.rule_id, response, fault.codes, fault.what, timeout=late)
    with observer.probe("RPC-006", "session/new with invalid params (cwd 42)"):
        observer.fault("invalid-params", "RPC-006", "session/new with cwd 42, mcpServers 'none'")
        response, late = request(agent, "session/new", {"cwd": 42, "mcpServers": "none"})
        if _error_code(response) == AUTH_REQUIRED:
            # session/new is gated by a login: its params were never looked at
            observer.verdicts.skip(
                "RPC-006", "session/new needs authentication (-32000) before its params count"
            )
            return
        expect_error(agent, "RPC-006", response, (-32602,), "session/new with cwd 42", timeout=late)


def _replies_to_notifications(observer: Observer) -> int:
    """How many replies to notifications the observer has seen (RPC-002 findings)."""
    kept = sum(1 for f in observer.verdicts.findings if f.rule_id == "RPC-002")
    return kept + observer.verdicts.repeated.get("RPC-002", 0)


def probe_unknown_notifications(agent: Agent) -> None:
    """
    RPC-007: an unknown and a ``_vendor`` notification are ignored: no reply (the observer
    files any reply under RPC-002 too), no exit, the next request answered. Then a
    ``session/cancel`` for no session (a known notification: a reply to it is RPC-002's
    alone).
    """
    observer = agent.observer
    driver = agent.driver
    with observer.probe("RPC-007", "unknown and _vendor notifications, a cancel for no session"):
        before = _replies_to_notifications(observer)
        for method in ("no/such_notification", "_vendor.example/notice"):
            driver.notify(method, {"x": 1, **META})
        driver.drain(0.3)
        replied = _replies_to_notifications(observer) - before
        driver.notify("session/cancel", {"sessionId": "no-such-session"})
        driver.drain(0.3)
        response, late = request(agent, "_acpkit.dev/still_there", {})
        # still answering: any answer (its code is not what this rule is about)
        if replied:
            observer.violation(
                "RPC-007",
                f"the agent replied {replied} time(s) to an unknown and a _vendor notification "
                "instead of ignoring them",
            )
        elif response is None:
            observer.verdicts.slow("RPC-007", f"a request after notifications: {late}")
        else:
            observer.verdicts.ok("RPC-007")
        if response is not None and not _replies_to_notifications(observer):
            observer.verdicts.ok("RPC-002")


def probe_sessions(agent: Agent) -> list[str]:
    """SESSION-001/002/003 and CONTENT-001; returns the sessions created."""
    observer = agent.observer
    with observer.probe("SESSION-001", "three session/new calls"):
        sessions = [s for s in (agent.new_session() for _ in range(3)) if s is not None]
    if not sessions:
        for rule_id in ("SESSION-001", "CONTENT-001", "TURN-001"):
            observer.verdicts.skip(rule_id, "session/new failed")
        return []
    with observer.probe("SESSION-002", "session/new with a relative cwd"):
        response, late = request(agent, "session/new", {"cwd": "relative/dir", "mcpServers": []})
        if response is None:
            observer.verdicts.slow("SESSION-002", f"session/new with a relative cwd: {late}")
        elif "error" in response:
            observer.verdicts.ok("SESSION-002")
        else:
            observer.violation(
                "SESSION-002", "session/new with the relative cwd 'relative/dir' succeeded"
            )
    with observer.probe("SESSION-003", "a prompt for an unknown session id"):
        response, late = request(
            agent,
            "session/prompt",
            {"sessionId": "acpkit-no-such-session", "prompt": [{"type": "text", "text": "hi"}]},
        )
        if isinstance(late, Refused):
            # the server's transport refused the unknown session (the RFD does not say how
            # an unknown Acp-Session-Id is answered): an error answer, at once
            observer.note(f"a prompt for an unknown session: {late} (an error answer)")
            observer.verdicts.ok("SESSION-003")
        elif response is None:
            observer.verdicts.slow("SESSION-003", f"a prompt for an unknown session: {late}")
        else:
            # "Agents MAY return an error": an answer either way is conformant; only going
            # away (the guard files that under this rule) or never answering is not.
            if "error" not in response:
                observer.note("a prompt for an unknown session id succeeded (allowed: MAY)")
            else:
                expect_error(
                    agent,
                    "RPC-014",
                    response,
                    (-32002, -32602),
                    "a prompt for an unknown session id",
                )
            observer.verdicts.ok("SESSION-003")
    for block in (
        {"type": "text", "text": "Say hello. " + faults.TRICKY_TEXT},
        {"type": "resource_link", "uri": "file:///etc/hostname", "name": "hostname"},
    ):
        with observer.probe("CONTENT-001", f"a {block['type']} prompt"):
            outcome = run_turn(agent, sessions[0], [block])
        error = outcome.response.get("error") if outcome.response else None
        if isinstance(error, dict) and error.get("code") == -32602 and not outcome.agent_requests:
            observer.violation(
                "CONTENT-001", f"a {block['type']} prompt was rejected as invalid params: {error}"
            )
        elif outcome.response is not None and error is None:
            observer.verdicts.ok("CONTENT-001")
        elif outcome.response is not None:
            _prompt_error_is_not_applicable(agent, outcome.response)
    return sessions


def _prompt_error_is_not_applicable(agent: Agent, response: Mapping[str, Any]) -> None:
    for rule_id in ("TURN-001", "TURN-002", "TURN-003", "CANCEL-001"):
        agent.observer.verdicts.skip(
            rule_id, f"the agent answered session/prompt with an error: {response.get('error')}"
        )


def probe_cancel(agent: Agent, session_id: str) -> None:
    """CANCEL-001/002: cancel while a permission request is pending, and mid-turn."""
    observer = agent.observer
    with observer.probe("CANCEL-002", "session/cancel while a permission request is pending"):
        outcome = run_turn(
            agent, session_id, agent.prompt(session_id, "permission"), cancel="permission"
        )
    if outcome.cancelled_at is None or not outcome.held_at_cancel:
        observer.verdicts.skip("CANCEL-002", "the agent asked no permission during a turn")
    with observer.probe("CANCEL-001", "session/cancel after the first update of a long turn"):
        run_turn(agent, session_id, agent.prompt(session_id, "slow"), cancel="first_update")


def probe_cancel_request(agent: Agent, session_id: str) -> None:
    """RPC-010: ``$/cancel_request`` for a running prompt, then for an answered id."""
    driver = agent.driver
    observer = agent.observer
    with observer.probe("RPC-010", "$/cancel_request for a running session/prompt"):
        rid = driver.next_id()
        driver.send(
            {
                "jsonrpc": "2.0",
                "id": rid,
                "method": "session/prompt",
                "params": {"sessionId": session_id, "prompt": agent.prompt(session_id, "slow")},
            }
        )
        driver.drain(0.05)
        driver.notify("$/cancel_request", {"requestId": rid})
        try:
            driver.response_to(rid, "waiting for the answer to a cancelled request")
        except StepTimeout as e:
            observer.verdicts.slow("RPC-010", f"a request cancelled by $/cancel_request: {e}")
            driver.notify("session/cancel", {"sessionId": session_id})
            return
        # Answered once: a result, -32800, or (an implementation may ignore $/ notifications)
        # the answer it would have got anyway; a second answer is flagged by the observer.
        observer.verdicts.ok("RPC-010")
        driver.notify("$/cancel_request", {"requestId": rid})
        driver.drain(0.3)


def probe_load(agent: Agent, session_id: str) -> None:
    """
    CAP-005 / SESSION-004: ``session/load`` (in the session's own cwd) of a session that had a
    turn succeeds and replays that turn first, the user's words included.
    """
    observer = agent.observer
    if agent.capabilities.get("loadSession") is not True:
        for rule_id in ("CAP-005", "SESSION-004"):
            observer.verdicts.skip(rule_id, "loadSession is not advertised")
        return
    words = "Remember the word conformance-marker."
    with observer.probe("SESSION-004", "a turn to replay later"):
        outcome = run_turn(agent, session_id, [{"type": "text", "text": words}])
    had_turn = outcome.stop_reason is not None
    with observer.probe("CAP-005", "session/load of that session, in its own cwd"):
        response, late = request(
            agent,
            "session/load",
            {"sessionId": session_id, "cwd": agent.cwd_of(session_id), "mcpServers": []},
        )
    if response is None:
        observer.verdicts.slow("CAP-005", f"session/load: {late}")
        return
    if "error" in response and not had_turn:
        # an agent may keep only sessions with a conversation: the precondition failed
        observer.note(f"session/load of a session whose turn failed: {response.get('error')}")
        for rule_id in ("CAP-005", "SESSION-005"):
            observer.verdicts.skip(rule_id, "the turn before session/load failed")
        return
    if "error" in response:
        observer.violation(
            "CAP-005",
            f"loadSession is advertised but session/load of session {session_id} (in its own "
            f"cwd) failed: {response.get('error')}",
        )
        return
    observer.verdicts.ok("CAP-005")
    agent.driver.drain(0.3)  # a late replay is SESSION-004's; its content still counts here
    replays = observer.checks.finished_replays.get(session_id, [])
    updates = replays[-1].updates if replays else []
    if not had_turn:
        observer.verdicts.skip(
            "SESSION-005", "the turn to replay failed: there is no conversation to replay"
        )
        return
    if not updates:
        observer.violation(
            "SESSION-005", "session/load answered without replaying the conversation first"
        )
        return
    user_text = "".join(
        str(u.get("content", {}).get("text", ""))
        for u in updates
        if u.get("sessionUpdate") == "user_message_chunk" and isinstance(u.get("content"), dict)
    )
    agent_said = outcome.updates_of("agent_message_chunk")
    replayed_agent = [u for u in updates if u.get("sessionUpdate") == "agent_message_chunk"]
    if "conformance-marker" not in user_text:
        observer.violation(
            "SESSION-005",
            f"session/load replayed {len(updates)} update(s) but not the user's message "
            f"{words!r} of the earlier turn (the entire conversation must be replayed)",
        )
    elif agent_said and not replayed_agent:
        observer.violation(
            "SESSION-005",
            f"session/load replayed the user's message but none of the {agent_said} agent "
            "message chunk(s) of the earlier turn",
        )
    else:
        observer.verdicts.ok("SESSION-005")
    # SESSION-004 (replay before the response) is judged by the observer as updates arrive
    agent.driver.drain(0.2)


#: The behaviours the services probe runs when something provokes them (a scenario file, a
#: discovered command), each once, in this order.
SERVICE_BEHAVIOURS = (
    "tools",
    "edit",
    "read",
    "write",
    "shell",
    "ask",
    "permission",
    "plan",
    "usage",
)
#: The conformance model's plan: (elicitation answer, scenario, permission answer).
_MODEL_PLAN = (
    ("accept", "tools", "allow"),
    ("decline", "read", "allow"),
    ("cancel", "edit", "reject"),
)


def probe_services(agent: Agent) -> None:
    """
    TERMINAL / ELICIT / NOTICE (and CAP-001..004 with the capabilities advertised): turns with
    every client service offered. With the conformance model: files and the shell, the
    elicitations answered accept, then decline, then cancel, the last turn's permissions
    rejected. Otherwise every behaviour something provokes (`SERVICE_BEHAVIOURS`: a
    scenario file's, a discovered command's), once each, in one session, the elicitation
    answers rotating, the last one's permissions rejected; with none, the plain words of
    the first three.
    """
    observer = agent.observer
    session = agent.new_session()
    if session is None:
        for rule_id in SERVICE_RULES:
            observer.verdicts.skip(rule_id, "session/new failed (the services probe needs a turn)")
        return
    plan: tuple[tuple[str, str, str], ...] = _MODEL_PLAN
    if not agent.model:
        provoked = [b for b in SERVICE_BEHAVIOURS if agent.can(b)]
        if provoked:
            answers = ("accept", "decline", "cancel")
            plan = tuple(
                (answers[n % 3], b, "reject" if n == len(provoked) - 1 and n else "allow")
                for n, b in enumerate(provoked)
            )
    for action, scenario, permission in plan:
        agent.driver.policy.elicitation = action
        with observer.probe("TURN-003", f"a '{scenario}' turn with every client service offered"):
            run_turn(agent, session, agent.prompt(session, scenario), permission=permission)
    agent.driver.policy.elicitation = "accept"
    agent.driver.drain(0.2)
    explain_services(observer)


#: What the capabilities-withheld probe runs: the behaviours that use a client service.
WITHHELD_BEHAVIOURS = ("read", "write", "shell", "ask")


def probe_capabilities_withheld(agent: Agent) -> None:
    """
    CAP-001 / CAP-002 / CAP-003: with no client capability advertised, the turns that
    would read or write a file, open a terminal or ask a question (the behaviours something
    provokes) must not call the services the client did not offer.
    """
    provoked = [b for b in WITHHELD_BEHAVIOURS if agent.can(b)]
    if not provoked:
        return
    session = agent.new_session()
    if session is None:
        return
    for behaviour in provoked:
        with agent.observer.probe("CAP-001", f"a '{behaviour}' turn with no capability"):
            run_turn(agent, session, agent.prompt(session, behaviour))
    agent.driver.drain(0.2)


def eof_before_initialize(
    config: SuiteConfig, verdicts: Verdicts, transcripts: list[Transcript]
) -> Callable[[], None]:
    """
    FRAME-009: the agent, started and sent nothing, exits when its stdin is closed. The
    agent is started and its stdin closed now; the returned function waits (up to three
    step timeouts from now: a fresh agent may still be starting) and judges, so that the
    caller can run other probes meanwhile.
    """
    transcript = Transcript(name="agent")
    transcripts.append(transcript)
    observer = Observer(transcript, verdicts)
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
        verdicts.skip("FRAME-009", f"cannot start the agent: {e}")
        return lambda: None
    grace = 3 * config.timeout
    deadline = time.monotonic() + grace
    driver.close_stdin()

    def judge() -> None:
        try:
            faults.probe_eof(
                driver,
                max(0.0, deadline - time.monotonic()),
                pending=False,
                closed=True,
                grace_said=grace,
            )
        finally:
            driver.stop()

    return judge


def _sessions_and_turns(fresh: Fresh, verdicts: Verdicts, config: SuiteConfig) -> None:
    with fresh(capabilities=client_capabilities(fs_read=True, fs_write=True)) as agent:
        sessions = probe_sessions(agent)
        if sessions:
            probe_cancel(agent, sessions[0])
            probe_cancel_request(agent, sessions[-1])
            probe_load(agent, sessions[1] if len(sessions) > 1 else sessions[0])


def _envelope(fresh: Fresh, verdicts: Verdicts, config: SuiteConfig) -> None:
    with fresh() as agent:
        probe_envelope(agent)


def _framing(fresh: Fresh, verdicts: Verdicts, config: SuiteConfig) -> None:
    with fresh() as agent:
        faults.probe_split(agent.driver)
        faults.probe_batched_write(agent.driver)
        faults.probe_crlf(agent.driver)
        faults.probe_junk(agent.driver)


def _long_line(fresh: Fresh, verdicts: Verdicts, config: SuiteConfig) -> None:
    with fresh(reuse=False) as agent:
        faults.probe_long_line(agent.driver, config.profile.long_line)


def _eof(fresh: Fresh, verdicts: Verdicts, config: SuiteConfig) -> None:
    # the two EOF probes run on processes of their own, at the same time: an agent that
    # keeps running after EOF costs the longest wait, not the sum
    judge_early_eof = eof_before_initialize(config, verdicts, [])
    try:
        with fresh(reuse=False) as agent:
            # mid-turn when a session can be made; process lifetime needs no session
            session = agent.new_session()
            if session is None:
                agent.observer.note("session/new failed: stdin is closed after a request")
            faults.probe_eof(agent.driver, config.timeout, session_id=session)
    finally:
        judge_early_eof()


def _services(fresh: Fresh, verdicts: Verdicts, config: SuiteConfig) -> None:
    with fresh(capabilities=ALL_SERVICES) as agent:
        probe_services(agent)
    with fresh(capabilities=client_capabilities()) as agent:
        probe_capabilities_withheld(agent)


def _transport(fresh: Fresh, verdicts: Verdicts, config: SuiteConfig) -> None:
    from acpkit.conformance import probes_transport as transport

    # raw requests and frames a client never sends: a connection of their own each
    transport.run_transport_probes(config, verdicts, functools.partial(fresh, reuse=False))


def _lanes(remote: bool) -> tuple[Lane, ...]:
    """The probe groups in their lanes (see `acpkit.conformance.schedule`); each runs only
    when one of the rule id prefixes it lists is selected."""
    from acpkit.conformance import probes_session as more

    first: list[Group] = []
    if remote:
        first.append(Group("HTTP-001", "the transport probes", "HTTP WS", _transport))
    first += [
        Group("RPC-007", "the envelope probes", "RPC SCHEMA FRAME-00", _envelope),
        Group(
            "INIT-001",
            "the initialize probes",
            "INIT SCHEMA RPC-001",
            lambda fresh, verdicts, config: probe_initialize(config, verdicts, fresh),
        ),
        Group(
            "AUTH-002",
            "the authentication probe",
            "AUTH-002 AUTH-003",
            lambda fresh, verdicts, config: more.probe_authentication(config, verdicts, fresh),
        ),
        Group(
            "MCP-002",
            "the MCP server probe",
            "MCP-002",
            lambda fresh, verdicts, config: more.probe_mcp(config, verdicts, fresh),
        ),
    ]
    if not remote:  # stdio bytes and process exit (see probes_transport.PROCESS_RULES)
        first += [
            Group(
                "FRAME-004",
                "the framing probes",
                "FRAME-004 FRAME-005 FRAME-006 FRAME-008 RPC-003",
                _framing,
            ),
            Group("FRAME-007", "the long-line probe", "FRAME-007", _long_line),
        ]
    first.append(
        # a turn and a cancelled turn: with the stimuli, after the stimuli-free groups
        Group(
            "INIT-005",
            "the baseline-methods probe",
            "INIT-003 INIT-004 INIT-005 MCP AUTH-001 RPC-011 RPC-012 EXT",
            lambda fresh, verdicts, config: more.probe_baseline(config, verdicts, fresh),
            needs_stimuli=True,
        )
    )
    second = [
        Group(
            "TURN-001",
            "the session and turn probes",
            "SESSION CONTENT TURN CANCEL CAP RPC-010 RPC-014 SCHEMA",
            _sessions_and_turns,
        ),
    ]
    third = [
        # the longest groups (turns waited on, cancelled, closed) each lead a lane
        Group(
            "LIST-003",
            "the session-lifecycle probe",
            "LIST DELETE SESSION-006 SESSION-007 MODE CONFIG PATH TURN-007 EXT CAP-005",
            lambda fresh, verdicts, config: more.probe_lifecycle(config, verdicts, fresh),
            needs_stimuli=True,
        ),
        Group(
            "TERMINAL-001",
            "the client services probe",
            "TERMINAL ELICIT NOTICE CAP SCHEMA TURN",
            _services,
            needs_stimuli=True,
        ),
    ]
    fourth: list[Group] = []
    if not remote:
        # stdin closed before initialize and mid-turn: an agent that does not exit at EOF
        # is waited on for up to three step timeouts
        fourth.append(Group("FRAME-009", "the EOF probes", "FRAME-009 FRAME-010", _eof))
    fourth += [
        Group(
            "ELICIT-007",
            "the client-answers probe",
            "ELICIT TOOL TERMINAL CANCEL TURN-007 RPC-011 PATH FS EXT SESSION-010",
            lambda fresh, verdicts, config: more.probe_client_answers(config, verdicts, fresh),
            needs_stimuli=True,
        ),
        Group(
            "INIT-006",
            "the capability-extremes probe",
            "INIT-006 CONFIG-001 AUTH-001",
            lambda fresh, verdicts, config: more.probe_capability_extremes(config, verdicts, fresh),
            needs_stimuli=True,
        ),
    ]
    if not remote:
        fourth.append(
            Group(
                "SESSION-009",
                "the spawn-directory probe",
                "SESSION-009 SESSION-010 PATH FS TERMINAL-004",
                lambda fresh, verdicts, config: more.probe_spawn_directory(config, verdicts),
                needs_stimuli=True,
            )
        )
    return (
        Lane("probes-1", tuple(first)),
        Lane("probes-2", tuple(second), prepares=True),
        Lane("probes-3", tuple(third)),
        Lane("probes-4", tuple(fourth)),
    )


def run_probes(
    config: SuiteConfig,
    verdicts: Verdicts,
    *,
    prepare: Callable[[SuiteConfig, Verdicts], SuiteConfig] | None = None,
    progress: Callable[[str], None] | None = None,
    parallel: bool = True,
) -> tuple[list[Transcript], SuiteConfig]:
    """
    Run every fixed probe, in lanes at the same time (`acpkit.conformance.schedule`), after
    ``prepare`` (discovery) for the groups that need stimuli; the transcripts and the
    prepared configuration.
    """
    from acpkit.conformance import probes_transport as transport

    if config.remote:
        transport.skip_process_rules(verdicts)
    else:
        for rule_id in (*transport.HTTP_RULES, *transport.WS_RULES):
            verdicts.skip(rule_id, "the agent is tested over stdio (give --url to judge it)")
    return run_lanes(
        config,
        verdicts,
        _lanes(config.remote),
        prepare=prepare,
        progress=progress,
        parallel=parallel,
    )
