"""
The stimulus probes of the session lifecycle and of the client's answers: the rules that need
the client to do something before the agent's traffic can be judged.

Groups (each called by `acpkit.conformance.probes.run_probes` inside its guard):

- `probe_baseline`: the baseline methods (INIT-005), the initialize result (INIT-003 / 004,
  MCP-001), an error message (RPC-012), and session/new and a prompt with unusual _meta
  values (EXT-005);
- `probe_capability_extremes`: initialize with ``clientCapabilities`` ``{}`` and with every
  capability, then ``session/new`` and a text prompt (INIT-006);
- `probe_lifecycle`: ``session/list`` (LIST-001..003), ``session/delete`` (DELETE-001 / 002),
  ``session/resume`` (SESSION-006), ``session/close`` mid-turn (SESSION-007), ``set_mode``
  mid-turn (MODE-001) and ``set_config_option`` (CONFIG-003); an advertised delete, resume
  or close answered -32601 (CAP-005); the traffic checks judge the modes and config options
  of every result;
- `probe_authentication`: ``authenticate`` with a method the agent handles itself, then
  ``session/new`` (AUTH-002);
- `probe_spawn_directory`: the agent spawned in a directory other than the session cwd
  (SESSION-009 / 010);
- `probe_client_answers`: elicitations answered decline / cancel / an error (ELICIT-007),
  permissions allowed (TOOL-001) and cancelled turns (CANCEL-003 / 004, TURN-007).

Mid-turn steps hold the agent's permission request unanswered (when it asks one) so that the
turn is certainly still running when the client acts. A capability the agent does not
advertise makes its rules not applicable (`Verdicts.skip`); a step that times out is "could
not judge" (`Verdicts.slow`); an agent that exits mid-step propagates `AgentGone`, which the
guard files under the step's rule.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from acpkit.conformance.driver import AgentGone, ClientPolicy, StepTimeout
from acpkit.conformance.harness import (
    CANCELLED,
    Agent,
    CannotTest,
    SuiteConfig,
    client_capabilities,
    one_line,
    run_turn,
    running_agent,
)
from acpkit.conformance.observer import Verdicts
from acpkit.jsonrpc import jsonbytes

__all__ = [
    "EVERY_CAPABILITY",
    "UNUSUAL_META",
    "probe_authentication",
    "probe_baseline",
    "probe_capability_extremes",
    "probe_client_answers",
    "probe_lifecycle",
    "probe_mcp",
    "probe_spawn_directory",
]

#: Every client capability ACP v1 defines (INIT-006's second run).
EVERY_CAPABILITY: dict[str, Any] = {
    **client_capabilities(
        True, True, terminal=True, elicitation=("form", "url"), notices=True, compaction=True
    ),
    "auth": {"terminal": True},
}
EVERY_CAPABILITY["session"] = {**EVERY_CAPABILITY["session"], "configOptions": {"boolean": {}}}

#: The services the client-answers probe offers (elicitation in both modes).
_ANSWER_SERVICES = client_capabilities(
    True, True, terminal=True, elicitation=("form", "url"), notices=True, compaction=True
)

#: _meta values of every JSON type under keys nobody defines (EXT-005: an implementation makes
#: no assumptions about values at _meta keys).
UNUSUAL_META: dict[str, Any] = {
    "acpkit.dev/null": None,
    "acpkit.dev/number": -1.5e300,
    "acpkit.dev/list": [1, "two", {"three": [None, False]}],
    "acpkit.dev/object": {"nested": {"deeper": True}, "": 0},
    "acpkit.dev/text": "\u00fcn\u00efc\u00f8d\u00e9 \u2028 \U0001f600",
}

_META_TEXT = jsonbytes.dumps(UNUSUAL_META).decode("utf-8")

_INVALID_CURSOR = "acpkit-invalid-cursor"
_MAX_PAGES = 20

Fresh = Callable[..., Any]


def _request(
    agent: Agent, method: str, params: Any, request_id: Any = None
) -> tuple[dict[str, Any] | None, StepTimeout | None]:
    """A request and its response, or ``(None, timeout)``; `AgentGone` propagates."""
    try:
        return agent.driver.request(method, params, request_id=request_id), None
    except StepTimeout as e:
        return None, e


def _started(agent: Agent) -> Agent:
    """Judge the initialize result of the first agent a probe of this run started."""
    if "INIT-004" not in agent.observer.verdicts.exercised:
        agent.observer.checks.judge_initialize(agent.init_result)
    return agent


def _session_capability(agent: Agent, name: str) -> bool:
    caps = agent.capabilities.get("sessionCapabilities")
    return isinstance(caps, dict) and isinstance(caps.get(name), dict)


def _new_session(agent: Agent) -> tuple[str | None, dict[str, Any]]:
    """``session/new`` in a fresh directory: the id (``None`` on an error) and the result."""
    cwd = agent.new_directory()
    agent.driver.policy.roots.append(cwd)
    response = agent.driver.request("session/new", {"cwd": cwd, "mcpServers": []})
    result = response.get("result")
    if isinstance(result, dict) and isinstance(result.get("sessionId"), str):
        session_id = str(result["sessionId"])
        agent.session_cwd[session_id] = cwd
        agent.driver.drain(0.05)
        return session_id, result
    return None, {}


def _error_text(response: Mapping[str, Any]) -> str:
    return str(response.get("error"))[:200]


def _advertised_method_exists(agent: Agent, name: str, response: Mapping[str, Any]) -> bool:
    """
    CAP-005 ("respond with ... the capabilities it supports"): the method of an advertised
    ``sessionCapabilities.<name>`` is not answered -32601 (Method not found); whether it is.
    Any other answer is the method's own rules' to judge.
    """
    error = response.get("error")
    if isinstance(error, dict) and error.get("code") == -32601:
        agent.observer.violation(
            "CAP-005",
            f"sessionCapabilities.{name} is advertised but session/{name} is answered -32601 "
            f"(method not found): {_error_text(response)}",
        )
        return False
    agent.observer.verdicts.ok("CAP-005")
    return True


# -- mid-turn helpers ------------------------------------------------------------------------


@attrs.define
class _HeldTurn:
    """A session/prompt in progress, its permission request (if any) held unanswered."""

    request_id: int
    running: bool


def _start_held_turn(agent: Agent, session_id: str, scenario: str) -> _HeldTurn:
    """
    Send a prompt and wait until the turn is visibly running: its first update or request
    arrived (a permission request is held unanswered) and it is not answered yet.
    """
    driver = agent.driver
    driver.policy.permission = "hold"
    rid = driver.next_id()
    start = len(driver.inbox)
    driver.send(
        {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "session/prompt",
            "params": {"sessionId": session_id, "prompt": agent.prompt(session_id, scenario)},
        }
    )

    def ours(message: Mapping[str, Any]) -> bool:
        return "method" not in message and message.get("id") == rid

    try:
        found = driver.wait_for(
            lambda m: "method" in m or ours(m), "waiting for the turn to start", start=start
        )
        driver.inbox.insert(start, found)
        if not driver.held:
            driver.drain(0.3)  # a permission request may follow the first update
    except StepTimeout:
        pass  # a long turn that reports nothing yet is running too
    running = not any(ours(m) for m in driver.inbox[start:])
    return _HeldTurn(rid, running)


def _release_held(agent: Agent, allow: bool) -> None:
    """Answer the held permission requests (allow, or cancelled) and stop holding."""
    driver = agent.driver
    driver.policy.permission = "allow" if allow else "cancelled"
    held, driver.held = driver.held, []
    for message in held:
        body = driver.policy.answer(str(message.get("method")), message.get("params"))
        driver.respond(message["id"], body if body is not None else CANCELLED)
    driver.policy.permission = "allow"


def _finish_turn(agent: Agent, turn: _HeldTurn, session_id: str, rule_id: str) -> bool:
    """Wait for the held turn's answer; on a timeout record ``rule_id`` slow and cancel."""
    try:
        agent.driver.response_to(turn.request_id, "waiting for the session/prompt response")
        return True
    except StepTimeout as e:
        agent.observer.verdicts.slow(rule_id, f"the turn did not end: {one_line(e)}")
        agent.driver.notify("session/cancel", {"sessionId": session_id})
        agent.driver.answer_held(CANCELLED)
        return False


# -- INIT-005, RPC-012 -----------------------------------------------------------------------


def probe_baseline(config: SuiteConfig, verdicts: Verdicts, fresh: Fresh) -> None:
    """INIT-005: session/new, session/prompt and session/cancel work; RPC-012 on an error."""
    with fresh() as agent:
        observer = _started(agent).observer
        with observer.probe("INIT-005", "session/new"):
            session_id = agent.new_session()
        if session_id is None:
            verdicts.skip("EXT-005", "session/new failed (without _meta)")
        else:
            with observer.probe("INIT-005", "a text session/prompt"):
                plain = run_turn(agent, session_id, agent.prompt(session_id, "text"))
            prompted = plain.response is not None and "result" in plain.response
            with observer.probe("EXT-005", "session/new and a prompt with unusual _meta values"):
                _probe_unusual_meta(agent, prompted)
            with observer.probe("INIT-005", "session/cancel during a turn"):
                run_turn(agent, session_id, agent.prompt(session_id, "slow"), cancel="first_update")
        with observer.probe("RPC-012", "an unknown method (its error message is judged)"):
            response, late = _request(agent, "_acpkit.dev/no_such_method", {})
            if response is None:
                verdicts.slow("RPC-012", f"an unknown method: {late}")


def _probe_unusual_meta(agent: Agent, prompted: bool) -> None:
    """
    EXT-005: ``session/new``, then a text ``session/prompt`` (``_meta`` on its params and on
    its text block), each carrying `UNUSUAL_META`, are answered as they were without it: an
    error for either, which the same request without ``_meta`` did not get, is a finding.
    The prompt is judged only when the one without ``_meta`` got a result (``prompted``).
    """
    observer = agent.observer
    cwd = agent.new_directory()
    agent.driver.policy.roots.append(cwd)
    params = {"cwd": cwd, "mcpServers": [], "_meta": UNUSUAL_META}
    response, late = _request(agent, "session/new", params)
    if response is None:
        observer.verdicts.slow("EXT-005", f"session/new with unusual _meta values: {late}")
        return
    result = response.get("result")
    if not (isinstance(result, dict) and isinstance(result.get("sessionId"), str)):
        observer.violation(
            "EXT-005",
            f"session/new with _meta {_META_TEXT} was refused "
            f"({_error_text(response)}), though session/new without _meta succeeded",
        )
        return
    observer.verdicts.ok("EXT-005")
    session_id = str(result["sessionId"])
    agent.session_cwd[session_id] = cwd
    agent.driver.drain(0.05)
    if not prompted:
        observer.note("EXT-005: the prompt without _meta failed; the one with it is not sent")
        return
    blocks = [{**block, "_meta": UNUSUAL_META} for block in agent.prompt(session_id, "text")]
    prompt_params: dict[str, Any] = {
        "sessionId": session_id,
        "prompt": blocks,
        "_meta": UNUSUAL_META,
    }
    response, late = _request(agent, "session/prompt", prompt_params)
    if response is None:
        observer.verdicts.slow("EXT-005", f"a prompt with unusual _meta values: {late}")
        agent.driver.notify("session/cancel", {"sessionId": session_id})
    elif "error" in response:
        observer.violation(
            "EXT-005",
            f"a text session/prompt with _meta {_META_TEXT} (on its "
            f"params and its text block) was answered with an error ({_error_text(response)}), "
            "though the same prompt without _meta got a result",
        )
    else:
        observer.verdicts.ok("EXT-005")


# -- INIT-006 --------------------------------------------------------------------------------


@attrs.define
class _Run:
    """How far one capability combination got: the failing step and its error, if any."""

    name: str
    failed_step: str | None = None
    error: str = ""
    slow: bool = False


def _one_combination(fresh: Fresh, verdicts: Verdicts, name: str, caps: dict[str, Any]) -> _Run:
    run = _Run(name)
    try:
        manager = fresh(capabilities=caps)
        agent = manager.__enter__()
    except CannotTest as e:
        run.failed_step, run.error = "initialize", one_line(e)
        run.slow = "never answered" in str(e) and "went away" not in str(e)
        return run
    try:
        observer = _started(agent).observer
        with observer.probe("INIT-006", f"session/new with {name}"):
            try:
                session_id, _ = _new_session(agent)
            except StepTimeout as e:
                run.slow, run.failed_step, run.error = True, "session/new", one_line(e)
                return run
        if session_id is None:
            run.failed_step = "session/new"
            run.error = "session/new failed"
            return run
        with observer.probe("INIT-006", f"a text prompt with {name}"):
            outcome = run_turn(agent, session_id, agent.prompt(session_id, "text"))
        if outcome.timed_out:
            run.slow, run.failed_step = True, "session/prompt"
        elif outcome.response is not None and "error" in outcome.response:
            run.failed_step, run.error = "session/prompt", _error_text(outcome.response)
        return run
    finally:
        manager.__exit__(None, None, None)


def probe_capability_extremes(config: SuiteConfig, verdicts: Verdicts, fresh: Fresh) -> None:
    """
    INIT-006: initialize with ``clientCapabilities`` ``{}`` and with every capability, then
    session/new and a text prompt. A step that fails in one combination but succeeds in the
    other is a finding; one that fails in both is about the agent, not the capabilities.
    """
    runs = [
        _one_combination(fresh, verdicts, "clientCapabilities {}", {}),
        _one_combination(fresh, verdicts, "every client capability", EVERY_CAPABILITY),
    ]
    steps = ("initialize", "session/new", "session/prompt")
    for run, other in (runs, runs[::-1]):
        if run.failed_step is None:
            continue
        if run.slow:
            verdicts.slow("INIT-006", f"{run.failed_step} with {run.name} timed out")
            continue
        got_past = other.failed_step is None or steps.index(other.failed_step) > steps.index(
            run.failed_step
        )
        if got_past and not other.slow:
            verdicts.violation(
                "INIT-006",
                f"with {run.name}, {run.failed_step} failed ({run.error}), though it succeeded "
                f"with {other.name}",
            )
        elif other.failed_step == run.failed_step:
            verdicts.skip(
                "INIT-006",
                f"{run.failed_step} fails whatever the client capabilities ({run.error})",
            )
    if all(run.failed_step is None for run in runs):
        verdicts.ok("INIT-006")


# -- the session lifecycle -------------------------------------------------------------------


def _list_all(
    agent: Agent, params: dict[str, Any], rule_id: str
) -> tuple[list[dict[str, Any]] | None, str | None]:
    """
    Every page of ``session/list`` for ``params``: the sessions, or ``None`` and why (an
    error, or a result without a sessions array, is a finding of ``rule_id``).
    """
    sessions: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = dict(params) if cursor is None else {**params, "cursor": cursor}
        response, late = _request(agent, "session/list", page)
        if response is None:
            agent.observer.verdicts.slow(rule_id, f"session/list: {late}")
            return None, None
        result = response.get("result")
        if "error" in response:
            return None, f"session/list {page} was answered with an error: {_error_text(response)}"
        if not isinstance(result, dict) or not isinstance(result.get("sessions"), list):
            return None, f"session/list {page} result has no sessions array: {str(result)[:120]}"
        sessions += [s for s in result["sessions"] if isinstance(s, dict)]
        next_cursor = result.get("nextCursor")
        if not isinstance(next_cursor, str) or not next_cursor:
            return sessions, None
        cursor = next_cursor
    return sessions, None


def _probe_list(agent: Agent) -> None:
    """LIST-001 / 002 / 003."""
    observer = agent.observer
    with observer.probe("LIST-003", "session/new, a turn, then session/list with its cwd"):
        session_id, _ = _new_session(agent)
        if session_id is None:
            observer.verdicts.skip("LIST-003", "session/new failed")
            return
        outcome = run_turn(agent, session_id, agent.prompt(session_id, "text"))
        cwd = agent.cwd_of(session_id)
        sessions, problem = _list_all(agent, {"cwd": cwd}, "LIST-003")
    if problem is not None:
        observer.violation("LIST-003", problem)
    elif sessions is not None:
        listed = {s.get("sessionId") for s in sessions}
        if session_id in listed:
            observer.verdicts.ok("LIST-003")
        elif outcome.stop_reason is not None:
            observer.violation(
                "LIST-003",
                f"session/list with cwd {cwd} does not list session {session_id}, created "
                f"there and prompted once (listed: {sorted(map(str, listed))[:5]})",
            )
        else:
            observer.note(
                "the session's only turn failed: its absence from session/list is not judged"
            )
    with observer.probe("LIST-001", "session/list with the cwd of an unused directory"):
        empty = agent.new_directory()
        sessions, problem = _list_all(agent, {"cwd": empty}, "LIST-001")
    if problem is not None:
        observer.violation("LIST-001", problem)
    elif sessions is not None:
        here = {os.path.realpath(empty), os.path.normpath(empty)}
        others = [
            s.get("sessionId")
            for s in sessions
            if not (isinstance(s.get("cwd"), str) and os.path.realpath(s["cwd"]) in here)
        ]
        if others:
            observer.violation(
                "LIST-001",
                f"session/list with the cwd {empty} of a directory no session used listed "
                f"sessions of other directories: {others[:5]} (an empty array was due)",
            )
        else:
            observer.verdicts.ok("LIST-001")
    with observer.probe("LIST-002", f"session/list with the invalid cursor {_INVALID_CURSOR!r}"):
        response, late = _request(agent, "session/list", {"cursor": _INVALID_CURSOR})
    if response is None:
        observer.verdicts.slow("LIST-002", f"session/list with an invalid cursor: {late}")
    elif "error" in response:
        observer.verdicts.ok("LIST-002")
    else:
        observer.violation(
            "LIST-002",
            f"session/list with the invalid cursor {_INVALID_CURSOR!r} succeeded: "
            f"{str(response.get('result'))[:120]}",
        )


def _probe_delete(agent: Agent) -> None:
    """DELETE-001 / 002."""
    observer = agent.observer
    with observer.probe("DELETE-001", "session/delete of a session id never created"):
        response, late = _request(agent, "session/delete", {"sessionId": "acpkit-never-created"})
    if response is None:
        observer.verdicts.slow("DELETE-001", f"session/delete of an unknown id: {late}")
    elif not _advertised_method_exists(agent, "delete", response):
        for rule_id in ("DELETE-001", "DELETE-002"):
            observer.verdicts.skip(rule_id, "session/delete is not implemented (CAP-005)")
        return
    elif "error" in response:
        observer.violation(
            "DELETE-001",
            "session/delete of the never-created id 'acpkit-never-created' was answered with "
            f"an error: {_error_text(response)}",
        )
    else:
        observer.verdicts.ok("DELETE-001")
    with observer.probe("DELETE-002", "session/new, a turn, session/delete of it"):
        session_id, _ = _new_session(agent)
        if session_id is None:
            observer.verdicts.skip("DELETE-002", "session/new failed")
            return
        run_turn(agent, session_id, agent.prompt(session_id, "text"))
        response, late = _request(agent, "session/delete", {"sessionId": session_id})
    if response is None:
        observer.verdicts.slow("DELETE-002", f"session/delete: {late}")
        return
    if "error" in response:
        observer.note(f"session/delete of a live session failed: {_error_text(response)}")
        observer.verdicts.skip("DELETE-002", "session/delete of a live session failed")
        return
    with observer.probe("DELETE-001", "a second session/delete of the deleted session"):
        again, late = _request(agent, "session/delete", {"sessionId": session_id})
    if again is None:
        observer.verdicts.slow("DELETE-001", f"a second session/delete: {late}")
    elif "error" in again:
        observer.violation(
            "DELETE-001",
            f"a second session/delete of the deleted session {session_id} was answered with an "
            f"error: {_error_text(again)}",
        )
    else:
        observer.verdicts.ok("DELETE-001")
    if not _session_capability(agent, "list"):
        observer.verdicts.skip("DELETE-002", "sessionCapabilities.list is not advertised")
        return
    with observer.probe("DELETE-002", "session/list after the delete"):
        sessions, problem = _list_all(agent, {"cwd": agent.cwd_of(session_id)}, "DELETE-002")
    if sessions is None:
        if problem is not None:
            observer.note(f"session/list after a delete: {problem}")
        return
    if any(s.get("sessionId") == session_id for s in sessions):
        observer.violation(
            "DELETE-002", f"session/list still lists session {session_id} after its deletion"
        )
    else:
        observer.verdicts.ok("DELETE-002")


def _probe_resume(agent: Agent) -> None:
    """SESSION-006 (judged by the traffic checks while the resume is pending)."""
    observer = agent.observer
    with observer.probe("SESSION-006", "a turn, then session/resume of the session"):
        session_id, _ = _new_session(agent)
        if session_id is None:
            observer.verdicts.skip("SESSION-006", "session/new failed")
            return
        run_turn(agent, session_id, agent.prompt(session_id, "text"))
        agent.driver.drain(0.1)
        response, late = _request(
            agent,
            "session/resume",
            {"sessionId": session_id, "cwd": agent.cwd_of(session_id), "mcpServers": []},
        )
    if response is None:
        observer.verdicts.slow("SESSION-006", f"session/resume: {late}")
    elif not _advertised_method_exists(agent, "resume", response):
        observer.verdicts.skip("SESSION-006", "session/resume is not implemented (CAP-005)")
    elif "error" in response:
        observer.note(f"session/resume failed: {_error_text(response)}")
        observer.verdicts.skip("SESSION-006", "session/resume of a session with a turn failed")
    agent.driver.drain(0.1)


def _probe_close(agent: Agent) -> None:
    """
    SESSION-007: session/close during a turn ends the turn as a session/cancel would: the
    prompt is answered ``cancelled``, and no update for the session comes after the close's
    answer (more than a second after it: what was on its way may still arrive).
    """
    observer = agent.observer
    driver = agent.driver
    with observer.probe("SESSION-007", "session/close during a turn"):
        session_id, _ = _new_session(agent)
        if session_id is None:
            observer.verdicts.skip("SESSION-007", "session/new failed")
            return
        turn = _start_held_turn(agent, session_id, "slow")
        if not turn.running:
            _release_held(agent, allow=True)
            observer.verdicts.skip("SESSION-007", "the turn ended before session/close was sent")
            return
        first_record = len(observer.transcript.records)
        close_id = driver.next_id()
        response, late = _request(
            agent, "session/close", {"sessionId": session_id}, request_id=close_id
        )
        _release_held(agent, allow=False)
        if response is None:
            observer.verdicts.slow("SESSION-007", f"session/close: {late}")
            _finish_turn(agent, turn, session_id, "SESSION-007")
            return
        if not _advertised_method_exists(agent, "close", response):
            observer.verdicts.skip("SESSION-007", "session/close is not implemented (CAP-005)")
            _finish_turn(agent, turn, session_id, "SESSION-007")
            return
        if "error" in response:
            observer.note(f"session/close failed: {_error_text(response)}")
            observer.verdicts.skip("SESSION-007", "session/close during a turn failed")
            _finish_turn(agent, turn, session_id, "SESSION-007")
            return
        closed_at = time.monotonic()
        observer.when_answered(
            turn.request_id, lambda message: _judge_closed_turn(agent, message, closed_at)
        )
        try:
            driver.response_to(turn.request_id, "waiting for the closed session's prompt")
            ended = True
        except StepTimeout as e:
            ended = False
            driver.notify("session/cancel", {"sessionId": session_id})
            driver.answer_held(CANCELLED)
            late = e
        driver.drain(0.3)
    records = observer.transcript.records[first_record:]
    # after the close's answer: at once when the turn had ended too, else after the race
    kinds = _updates_after(records, (close_id, turn.request_id), session_id, 0.0)
    kinds = kinds or _updates_after(records, (close_id,), session_id, CLOSE_RACE)
    if kinds:
        observer.violation(
            "SESSION-007",
            "after session/close was answered (and the turn ended, or more than "
            f"{CLOSE_RACE:g}s after), the agent still sent session/update(s) for the closed "
            f"session: {', '.join(kinds[:6])}" + (" (its turn had not ended)" if not ended else ""),
        )
    elif ended:
        observer.verdicts.ok("SESSION-007")
    else:
        observer.verdicts.slow("SESSION-007", f"the closed session's turn did not end: {late}")


#: After session/close is answered, what arrives within this many seconds may have been on
#: its way already (as for a cancel).
CLOSE_RACE = 1.0


def _judge_closed_turn(agent: Agent, message: dict[str, Any], closed_at: float) -> None:
    """The prompt of a session closed mid-turn: cancelled, as a session/cancel would end it."""
    result = message.get("result")
    stop = result.get("stopReason") if isinstance(result, dict) else None
    late = time.monotonic() - closed_at
    if stop == "cancelled" or late <= CLOSE_RACE:
        return
    got = f"stopReason {stop!r}" if stop is not None else f"the error {message.get('error')}"
    agent.observer.violation(
        "SESSION-007",
        f"the prompt of the session closed mid-turn was answered {late:.1f}s after the close "
        f"with {got}, not stopReason 'cancelled' (as if session/cancel had been called)",
    )


def _updates_after(
    records: Sequence[tuple[Any, str, bytes]],
    ids: tuple[int, ...],
    session_id: str,
    grace: float,
) -> list[str]:
    """The kinds of the session's updates received more than ``grace`` seconds after the
    answers to all of ``ids`` (the close, and the turn)."""
    answered: set[Any] = set()
    closed: Any = None
    kinds = []
    for when, direction, line in records:
        if direction != "<-":
            continue
        try:
            message = jsonbytes.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict):
            continue
        if closed is None:
            if "method" not in message and message.get("id") in ids:
                answered.add(message.get("id"))
                if len(answered) == len(ids):
                    closed = when
            continue
        params = message.get("params")
        if (
            (when - closed).total_seconds() > grace
            and message.get("method") == "session/update"
            and isinstance(params, dict)
            and params.get("sessionId") == session_id
        ):
            update = params.get("update")
            kinds.append(str(update.get("sessionUpdate") if isinstance(update, dict) else None))
    return kinds


def _probe_modes(agent: Agent) -> None:
    """MODE-001: session/set_mode during a turn is answered, with a success."""
    observer = agent.observer
    with observer.probe("MODE-001", "session/new (modes)"):
        session_id, result = _new_session(agent)
    modes = result.get("modes")
    available = modes.get("availableModes") if isinstance(modes, dict) else None
    ids = [m.get("id") for m in available or [] if isinstance(m, dict)]
    ids = [i for i in ids if isinstance(i, str)]
    if session_id is None or not ids or not isinstance(modes, dict):
        observer.verdicts.skip("MODE-001", "the session/new result has no modes")
        return
    current = modes.get("currentModeId")
    target = next((i for i in ids if i != current), ids[0])
    with observer.probe("MODE-001", f"session/set_mode {target!r} during a turn"):
        turn = _start_held_turn(agent, session_id, "slow")
        if not turn.running:
            _release_held(agent, allow=True)
            observer.verdicts.skip("MODE-001", "the turn ended before session/set_mode was sent")
            return
        response, late = _request(
            agent, "session/set_mode", {"sessionId": session_id, "modeId": target}
        )
        # the rule is about set_mode's answer: the long turn is cancelled, not waited out
        # (a `sleep 30` left running would hold an agent that runs one turn at a time)
        agent.driver.notify("session/cancel", {"sessionId": session_id})
        _release_held(agent, allow=False)
        _finish_turn(agent, turn, session_id, "MODE-001")
    if response is None:
        observer.verdicts.slow("MODE-001", f"session/set_mode during a turn: {late}")
    elif "error" in response:
        observer.violation(
            "MODE-001",
            f"session/set_mode to the advertised mode {target!r} during a turn was answered "
            f"with an error: {_error_text(response)}",
        )
    else:
        observer.verdicts.ok("MODE-001")
    with observer.probe("CONFIG-006", "a turn after the mode change"):
        run_turn(agent, session_id, agent.prompt(session_id, "text"))


def _select_values(option: Mapping[str, Any]) -> list[Any]:
    values: list[Any] = []
    for entry in option.get("options") or []:
        if isinstance(entry, dict) and isinstance(entry.get("options"), list):
            values += [o.get("value") for o in entry["options"] if isinstance(o, dict)]
        elif isinstance(entry, dict):
            values.append(entry.get("value"))
    return [v for v in values if isinstance(v, str)]


def _probe_config(agent: Agent) -> None:
    """CONFIG-003: set_config_option to a valid other value (the result is judged)."""
    observer = agent.observer
    with observer.probe("CONFIG-003", "session/new (config options)"):
        session_id, result = _new_session(agent)
    options = result.get("configOptions")
    choice: tuple[str, Any, dict[str, Any]] | None = None
    for option in options if isinstance(options, list) else []:
        if not isinstance(option, dict) or not isinstance(option.get("id"), str):
            continue
        if option.get("type") == "select":
            others = [v for v in _select_values(option) if v != option.get("currentValue")]
            if others:
                choice = (option["id"], others[0], {})
                break
        elif option.get("type") == "boolean" and isinstance(option.get("currentValue"), bool):
            choice = (option["id"], not option["currentValue"], {"type": "boolean"})
            break
    if session_id is None or choice is None:
        observer.verdicts.skip(
            "CONFIG-003", "no config option with another valid value in the session/new result"
        )
        return
    config_id, value, extra = choice
    with observer.probe("CONFIG-003", f"session/set_config_option {config_id!r} = {value!r}"):
        response, late = _request(
            agent,
            "session/set_config_option",
            {"sessionId": session_id, "configId": config_id, "value": value, **extra},
        )
    if response is None:
        observer.verdicts.slow("CONFIG-003", f"session/set_config_option: {late}")
    elif "error" in response:
        observer.note(f"session/set_config_option failed: {_error_text(response)}")
    with observer.probe("CONFIG-006", "a turn after the config change"):
        run_turn(agent, session_id, agent.prompt(session_id, "text"))


def probe_lifecycle(config: SuiteConfig, verdicts: Verdicts, fresh: Fresh) -> None:
    """LIST, DELETE, SESSION-006 / 007, MODE-001 and CONFIG-003 on one agent."""
    capabilities = client_capabilities(fs_read=True, fs_write=True)
    with fresh(capabilities=capabilities) as agent:
        _started(agent)
        steps: tuple[tuple[str, tuple[str, ...], Callable[[Agent], None]], ...] = (
            ("list", ("LIST-001", "LIST-002", "LIST-003"), _probe_list),
            ("delete", ("DELETE-001", "DELETE-002"), _probe_delete),
            ("resume", ("SESSION-006",), _probe_resume),
            ("close", ("SESSION-007",), _probe_close),
        )
        for name, rule_ids, step in steps:
            if _session_capability(agent, name):
                step(agent)
            else:
                for rule_id in rule_ids:
                    verdicts.skip(rule_id, f"sessionCapabilities.{name} is not advertised")
        _probe_modes(agent)
        _probe_config(agent)


# -- AUTH-002 --------------------------------------------------------------------------------


def probe_authentication(config: SuiteConfig, verdicts: Verdicts, fresh: Fresh) -> None:
    """
    AUTH-002: ``authenticate`` with an auth method the agent handles itself (type ``agent``,
    the default; terminal methods need a user at a terminal), then ``session/new``. A method
    that fails or does not answer within the step timeout (it waits for a user) is skipped.
    The agent process is its own: a login (perhaps one still waiting for a person) changes
    what the agent does next, so no later probe group may share it.
    """
    with fresh(reuse=False) as agent:
        observer = _started(agent).observer
        methods = agent.init_result.get("authMethods")
        methods = [m for m in methods if isinstance(m, dict)] if isinstance(methods, list) else []
        if not methods:
            for rule_id in ("AUTH-002", "AUTH-003"):
                verdicts.skip(rule_id, "the agent lists no authMethods")
            return
        # before any authenticate: a refusal that a login then lifts was about
        # authentication, and its code says so (AUTH-003)
        with observer.probe("AUTH-003", "session/new before authenticate"):
            cwd = agent.new_directory()
            agent.driver.policy.roots.append(cwd)
            before, _ = _request(agent, "session/new", {"cwd": cwd, "mcpServers": []})
        refused = before.get("error") if before is not None else None
        candidates = [
            str(m["id"])
            for m in methods
            if m.get("type", "agent") == "agent" and isinstance(m.get("id"), str)
        ]
        if not candidates:
            verdicts.skip(
                "AUTH-002", "the agent lists only terminal auth methods (they need a user)"
            )
            return
        reasons = []
        for method_id in candidates:
            with observer.probe("AUTH-002", f"authenticate with {method_id!r}"):
                response, late = _request(agent, "authenticate", {"methodId": method_id})
            if response is None:
                reasons.append(f"{method_id!r} did not answer ({late})")
                continue
            if "error" in response:
                reasons.append(f"{method_id!r} failed ({_error_text(response)})")
                continue
            with observer.probe("AUTH-002", "session/new after a successful authenticate"):
                cwd = agent.new_directory()
                agent.driver.policy.roots.append(cwd)
                created, late = _request(agent, "session/new", {"cwd": cwd, "mcpServers": []})
            error = created.get("error") if created is not None else None
            if created is None:
                verdicts.slow("AUTH-002", f"session/new after authenticate: {late}")
            elif isinstance(error, dict) and error.get("code") == -32000:
                observer.violation(
                    "AUTH-002",
                    f"authenticate with {method_id!r} succeeded, then session/new was refused "
                    f"as auth_required (-32000): {error}",
                )
            else:
                verdicts.ok("AUTH-002")
                _judge_auth_code(observer, refused, created is not None and "result" in created)
            return
        verdicts.skip(
            "AUTH-002", "no auth method succeeded without a user: " + "; ".join(reasons)[:300]
        )
        verdicts.skip("AUTH-003", "no auth method succeeded without a user")


def _judge_auth_code(observer: Any, refused: Any, lifted: bool) -> None:
    """AUTH-003: a session/new refused before authenticate, accepted after, was refused
    because authentication was required: its code is -32000 (auth_required)."""
    if not isinstance(refused, dict):
        observer.verdicts.skip(
            "AUTH-003", "session/new succeeded before authenticate: nothing was refused"
        )
        return
    if not lifted:
        return
    if refused.get("code") == -32000:
        observer.verdicts.ok("AUTH-003")
    else:
        observer.violation(
            "AUTH-003",
            f"session/new was refused before authenticate with {refused} and accepted after "
            "it: authentication was required, whose error code is -32000 (auth_required)",
        )


# -- MCP-002 -----------------------------------------------------------------------------------


def probe_mcp(config: SuiteConfig, verdicts: Verdicts, fresh: Fresh) -> None:
    """
    MCP-002: session/new names a stdio MCP server (`acpkit.conformance.mcp_probe_server`,
    which records what it receives); after a text turn, the agent has started it and sent
    ``initialize``. A session/new that fails with the server is not judged.
    """
    from acpkit.conformance import mcp_probe_server

    with fresh() as agent:
        observer = _started(agent).observer
        marker = os.path.join(agent.tmp, "mcp-probe-events.txt")
        server = {
            "name": "acpkit-conformance",
            "command": sys.executable,
            "args": [mcp_probe_server.__file__, marker],
            "env": [],
        }
        with observer.probe("MCP-002", "session/new with a stdio MCP server"):
            cwd = agent.new_directory()
            agent.driver.policy.roots.append(cwd)
            created, late = _request(agent, "session/new", {"cwd": cwd, "mcpServers": [server]})
        result = created.get("result") if created is not None else None
        if created is None:
            verdicts.slow("MCP-002", f"session/new with an MCP server: {late}")
            return
        if not isinstance(result, dict) or not isinstance(result.get("sessionId"), str):
            verdicts.skip(
                "MCP-002", f"session/new with an MCP server failed: {_error_text(created)}"
            )
            return
        session_id = str(result["sessionId"])
        agent.session_cwd[session_id] = cwd
        with observer.probe("MCP-002", "a text turn in the session with the MCP server"):
            run_turn(agent, session_id, agent.prompt(session_id, "text"))
        deadline = time.monotonic() + agent.timeout
        events: list[str] = []
        while time.monotonic() < deadline:
            events = _events(marker)
            if "initialize" in events:
                break
            agent.driver.drain(0.2)
        if "initialize" in events:
            verdicts.ok("MCP-002")
        else:
            seen = "was started but sent no initialize" if events else "was never started"
            observer.violation(
                "MCP-002",
                f"the stdio MCP server given in session/new {seen} (after session/new and a "
                f"turn, {agent.timeout:g}s more)",
            )


def _events(marker: str) -> list[str]:
    try:
        with open(marker, encoding="utf-8") as f:
            return f.read().split()
    except OSError:
        return []


# -- SESSION-009 / 010 -----------------------------------------------------------------------


def probe_spawn_directory(config: SuiteConfig, verdicts: Verdicts) -> None:
    """
    SESSION-009: the agent is spawned in a directory of its own, not the session cwd, and
    asked to write, read and run a command; every path it sends (fs, terminal cwd, tool call
    locations) is judged against both directories by the traffic checks (with SESSION-010).
    """
    spawn = tempfile.mkdtemp(prefix="acpkit-spawn-")
    capabilities = client_capabilities(True, True, terminal=True)
    what = "the spawn-directory probe"
    moved = attrs.evolve(config, argv=_absolute_argv(config), cwd=spawn)
    try:
        try:
            started = running_agent(moved, verdicts, capabilities=capabilities)
            agent = started.__enter__()
        except CannotTest as e:
            verdicts.skip(
                "SESSION-009", f"the agent could not be started in another directory: {e}"
            )
            return
        try:
            agent.observer.checks.spawn_dir = spawn
            observer = _started(agent).observer
            try:
                session_id = agent.new_session()
                if session_id is None:
                    verdicts.skip("SESSION-009", "session/new failed")
                    return
                for scenario in ("write", "read", "shell"):
                    what = f"a '{scenario}' turn spawned outside the session cwd"
                    with observer.probe("SESSION-009", what):
                        run_turn(agent, session_id, agent.prompt(session_id, scenario))
            except AgentGone as e:
                step = observer.failed_step or ("SESSION-009", what)
                observer.violation(step[0], f"the agent went away during {step[1]}: {one_line(e)}")
            except StepTimeout as e:
                verdicts.slow("SESSION-009", f"during {what}: {one_line(e)}")
        finally:
            started.__exit__(None, None, None)
    finally:
        shutil.rmtree(spawn, ignore_errors=True)


def _absolute_argv(config: SuiteConfig) -> tuple[str, ...]:
    """The command with its relative file arguments made absolute (it runs elsewhere now)."""
    base = config.cwd or os.getcwd()
    argv = []
    for part in config.argv:
        candidate = os.path.join(base, part)
        relative_file = os.sep in part or os.path.isfile(candidate)
        if not os.path.isabs(part) and relative_file and os.path.exists(candidate):
            part = os.path.abspath(candidate)
        argv.append(part)
    return tuple(argv)


# -- the client's answers --------------------------------------------------------------------


@attrs.define
class _FailingElicitations(ClientPolicy):
    """The usual policy, but elicitation/create is answered with a JSON-RPC error."""

    def answer(self, method: str, params: Any) -> dict[str, Any] | None:
        if method == "elicitation/create":
            return {"error": {"code": -32603, "message": "Elicitation failed (acpkit test)."}}
        return super().answer(method, params)


def _elicitations(agent: Agent) -> int:
    return sum(m.get("method") == "elicitation/create" for m in agent.observer.agent_requests)


def probe_client_answers(config: SuiteConfig, verdicts: Verdicts, fresh: Fresh) -> None:
    """
    ELICIT-007: turns whose elicitations are answered decline, cancel and with an error end
    (the agent neither exits nor hangs). Also the turns the traffic checks need: permissions
    allowed (TOOL-001), services offered (TERMINAL-003..005, ELICIT-003..006) and cancelled
    turns (CANCEL-003 / 004, TURN-007).
    """
    with fresh(capabilities=_ANSWER_SERVICES) as agent:
        observer = _started(agent).observer
        driver = agent.driver
        session_id = agent.new_session()
        if session_id is None:
            verdicts.skip("ELICIT-007", "session/new failed")
            return
        allowed = "permission" if agent.can("permission") and not agent.model else "tools"
        with observer.probe("TOOL-001", f"a '{allowed}' turn, permissions allowed"):
            run_turn(agent, session_id, agent.prompt(session_id, allowed))
        asking = "ask" if agent.can("ask") and not agent.model else "tools"
        original = driver.policy
        asked_any = False
        for action in ("decline", "cancel", "error"):
            if action == "error":
                driver.policy = _FailingElicitations(
                    roots=original.roots, terminals=original.terminals
                )
            else:
                original.elicitation = action
            before = _elicitations(agent)
            started = time.monotonic()
            try:
                with observer.probe("ELICIT-007", f"elicitations answered {action}"):
                    outcome = run_turn(agent, session_id, agent.prompt(session_id, asking))
            finally:
                driver.policy = original
                original.elicitation = "accept"
            if _elicitations(agent) == before:
                continue
            asked_any = True
            if outcome.response is not None:
                verdicts.ok("ELICIT-007")
            else:
                verdicts.slow(
                    "ELICIT-007",
                    f"the turn whose elicitation was answered {action} did not end within "
                    f"{time.monotonic() - started:.1f}s",
                )
        if not asked_any:
            verdicts.skip("ELICIT-007", "the agent sent no elicitation/create during a turn")
        with observer.probe("CANCEL-003", "session/cancel while a permission request is pending"):
            run_turn(agent, session_id, agent.prompt(session_id, "permission"), cancel="permission")
        with observer.probe("CANCEL-004", "session/cancel after the first update of a long turn"):
            run_turn(agent, session_id, agent.prompt(session_id, "slow"), cancel="first_update")
        driver.drain(0.2)
