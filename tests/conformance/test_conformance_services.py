"""
The client services of the conformance tester (simulated terminals, elicitation answers) and
the observer's checks of their use (TERMINAL, ELICIT, NOTICE rules), without processes.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from acpkit.conformance.driver import ClientPolicy, encode
from acpkit.conformance.harness import ALL_SERVICES, explain_services
from acpkit.conformance.observer import Observer, Verdicts, form_schema_problem
from acpkit.conformance.report import rule_results
from acpkit.conformance.rules import RULES
from acpkit.conformance.services import FakeTerminals, elicitation_answer, fill_form

_FORM = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 2, "maxLength": 5},
        "age": {"type": "integer", "minimum": 3, "maximum": 9},
        "ratio": {"type": "number"},
        "ok": {"type": "boolean"},
        "colour": {"type": "string", "enum": ["red", "blue"]},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
    },
    "required": ["name", "age", "ok"],
}


def _observer(capabilities: dict[str, Any]) -> Observer:
    observer = Observer()
    observer.sent(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": 1, "clientCapabilities": capabilities},
        }
    )
    observer.received(b'{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}')
    observer.sent({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/"}})
    observer.received(b'{"jsonrpc":"2.0","id":2,"result":{"sessionId":"s"}}')
    return observer


def _open_turn(observer: Observer, rid: int = 3) -> None:
    observer.sent(
        {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "session/prompt",
            "params": {"sessionId": "s", "prompt": [{"type": "text", "text": "x"}]},
        }
    )


def _agent_call(
    observer: Observer, policy: ClientPolicy, rid: str, method: str, params: dict[str, Any]
) -> dict[str, Any]:
    """The agent sends a request; the policy answers it and the observer sees the answer."""
    observer.received(encode({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}))
    body = policy.answer(method, params)
    assert body is not None
    observer.sent({"jsonrpc": "2.0", "id": rid, **body})
    return body


def _end_turn(observer: Observer, rid: int = 3) -> None:
    observer.received(encode({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}}))


def _rules(observer: Observer) -> set[str]:
    return {f.rule_id for f in observer.verdicts.findings}


def test_fake_terminal_lifecycle_follows_the_spec() -> None:
    """create answers an id at once; output/wait/kill work on it; after release it is invalid."""
    terminals = FakeTerminals()
    created = terminals.answer(
        "terminal/create", {"sessionId": "s", "command": "echo", "args": ["hi"]}
    )
    terminal_id = created["result"]["terminalId"]
    ids = {"sessionId": "s", "terminalId": terminal_id}
    output = terminals.answer("terminal/output", ids)["result"]
    assert output["output"].startswith("$ echo hi\n") and output["truncated"] is False
    assert output["exitStatus"] == {"exitCode": 0, "signal": None}
    assert terminals.answer("terminal/wait_for_exit", ids) == {
        "result": {"exitCode": 0, "signal": None}
    }
    assert terminals.answer("terminal/kill", ids) == {"result": {}}
    assert "result" in terminals.answer("terminal/output", ids)  # still valid after kill
    assert terminals.answer("terminal/release", ids) == {"result": {}}
    for method in ("terminal/output", "terminal/wait_for_exit", "terminal/kill"):
        error = terminals.answer(method, ids)["error"]
        assert error["code"] == -32602 and "released" in error["message"]
    assert terminals.answer("terminal/create", {"sessionId": "s"})["error"]["code"] == -32602


@given(limit=st.integers(min_value=0, max_value=60), word=st.text(min_size=1, max_size=20))
def test_fake_terminal_output_limit_cuts_the_beginning_on_a_character_boundary(
    limit: int, word: str
) -> None:
    """Output over outputByteLimit keeps its end, within the limit, as whole characters."""
    terminals = FakeTerminals()
    params = {"sessionId": "s", "command": word, "outputByteLimit": limit}
    terminal_id = terminals.answer("terminal/create", params)["result"]["terminalId"]
    result = terminals.answer("terminal/output", {"sessionId": "s", "terminalId": terminal_id})
    output = result["result"]["output"]
    full = f"$ {word}\n(simulated by acpkit-conformance)\n"
    assert len(output.encode("utf-8")) <= limit
    assert full.endswith(output)
    assert result["result"]["truncated"] is (len(full.encode("utf-8")) > limit)


def test_fill_form_is_valid_against_the_requested_schema() -> None:
    """The deterministic filler gives content valid against a form with every primitive type."""
    content = fill_form(_FORM)
    schema = {**_FORM, "additionalProperties": False}
    assert list(Draft202012Validator(schema).iter_errors(content)) == []


@given(data=st.data(), action=st.sampled_from(["accept", "decline", "cancel"]))
def test_elicitation_answers_are_valid_responses(data: st.DataObject, action: str) -> None:
    """accept carries content valid against the form (drawn); decline / cancel carry none."""
    params = {"sessionId": "s", "mode": "form", "message": "?", "requestedSchema": _FORM}
    body = elicitation_answer(params, action, data.draw)
    result = body["result"]
    assert result["action"] == action
    if action == "accept":
        schema = {**_FORM, "additionalProperties": False}
        assert list(Draft202012Validator(schema).iter_errors(result["content"])) == []
    else:
        assert "content" not in result


def test_elicitation_answer_declines_a_form_it_cannot_fill() -> None:
    """A form whose required field cannot be satisfied is declined rather than answered badly."""
    impossible = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 1}},
        "required": ["n"],
    }
    params = {"mode": "form", "requestedSchema": impossible}
    assert elicitation_answer(params, "accept")["result"] == {"action": "decline"}
    url = {"mode": "url", "elicitationId": "e", "url": "https://example.com"}
    assert elicitation_answer(url, "accept")["result"] == {"action": "accept"}


def test_observer_terminal_ids_are_used_only_while_live() -> None:
    """Use after release and use of an id never created break TERMINAL-001; live use holds."""
    observer = _observer({"terminal": True})
    policy = ClientPolicy()
    _open_turn(observer)
    body = _agent_call(
        observer, policy, "a1", "terminal/create", {"sessionId": "s", "command": "ls"}
    )
    ids = {"sessionId": "s", "terminalId": body["result"]["terminalId"]}
    _agent_call(observer, policy, "a2", "terminal/output", ids)
    _agent_call(observer, policy, "a3", "terminal/release", ids)
    assert _rules(observer) == set()
    _agent_call(observer, policy, "a4", "terminal/wait_for_exit", ids)
    _agent_call(observer, policy, "a5", "terminal/kill", {"sessionId": "s", "terminalId": "nope"})
    messages = [f.message for f in observer.verdicts.findings]
    assert _rules(observer) == {"TERMINAL-001"}
    assert any("after its release" in m for m in messages)
    assert any("never created" in m for m in messages)


def test_observer_terminals_must_be_released_before_the_turn_ends() -> None:
    """A terminal created in a turn and still live at its response breaks TERMINAL-002."""
    observer = _observer({"terminal": True})
    policy = ClientPolicy()
    _open_turn(observer)
    _agent_call(observer, policy, "a1", "terminal/create", {"sessionId": "s", "command": "ls"})
    _end_turn(observer)
    assert _rules(observer) == {"TERMINAL-002"}
    released = _observer({"terminal": True})
    _open_turn(released)
    body = _agent_call(
        released, policy, "b1", "terminal/create", {"sessionId": "s", "command": "x"}
    )
    ids = {"sessionId": "s", "terminalId": body["result"]["terminalId"]}
    _agent_call(released, policy, "b2", "terminal/release", ids)
    _end_turn(released)
    assert _rules(released) == set()
    assert released.verdicts.exercised["TERMINAL-002"] == 1


def test_form_schema_problem_accepts_flat_primitive_forms_only() -> None:
    """Flat primitive forms pass the ELICIT-001 shape check; nested or bad ones fail."""
    assert form_schema_problem(_FORM) is None
    assert form_schema_problem({"properties": {}}) is None
    nested = {"type": "object", "properties": {"o": {"type": "object"}}}
    assert "not a primitive" in str(form_schema_problem(nested))
    assert "not 'object'" in str(form_schema_problem({"type": "array"}))
    bad_required = {"type": "object", "properties": {}, "required": ["ghost"]}
    assert "unknown properties" in str(form_schema_problem(bad_required))
    objects = {
        "type": "object",
        "properties": {"l": {"type": "array", "items": {"type": "object"}}},
    }
    assert "items are not strings" in str(form_schema_problem(objects))
    assert form_schema_problem("schema") is not None


def test_observer_elicitation_complete_needs_a_url_elicitation_it_saw() -> None:
    """elicitation/complete for a url elicitation started holds; any other id breaks ELICIT-002."""
    observer = _observer({"elicitation": {"url": {}, "form": {}}})
    policy = ClientPolicy()
    url = {
        "sessionId": "s",
        "mode": "url",
        "message": "m",
        "elicitationId": "e1",
        "url": "https://x",
    }
    _agent_call(observer, policy, "a1", "elicitation/create", url)
    observer.received(
        encode(
            {"jsonrpc": "2.0", "method": "elicitation/complete", "params": {"elicitationId": "e1"}}
        )
    )
    assert _rules(observer) == set()
    observer.received(
        encode(
            {"jsonrpc": "2.0", "method": "elicitation/complete", "params": {"elicitationId": "e9"}}
        )
    )
    assert _rules(observer) == {"ELICIT-002"}
    bad_url = {"sessionId": "s", "mode": "url", "message": "m", "url": "https://x"}
    _agent_call(observer, policy, "a2", "elicitation/create", bad_url)
    assert "ELICIT-001" in _rules(observer)


def _update(update: dict[str, Any]) -> bytes:
    return encode(
        {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": "s", "update": update},
        }
    )


def test_observer_checks_notices_and_compaction_updates_when_advertised() -> None:
    """Advertised notices / compaction updates must be well-formed (NOTICE-001 / NOTICE-002)."""
    observer = _observer({"session": {"notices": {}, "compaction": {}}})
    observer.received(_update({"sessionUpdate": "notice", "severity": "info", "title": "Hi"}))
    observer.received(
        _update({"sessionUpdate": "compaction_update", "compactionId": "k", "status": "completed"})
    )
    chunk = {"type": "text", "text": "summary"}
    observer.received(
        _update(
            {"sessionUpdate": "compaction_summary_chunk", "compactionId": "k", "content": chunk}
        )
    )
    assert _rules(observer) == set()
    assert observer.verdicts.exercised["NOTICE-002"] == 2
    observer.received(_update({"sessionUpdate": "notice", "severity": "info", "title": ""}))
    observer.received(_update({"sessionUpdate": "compaction_summary_chunk", "compactionId": "k"}))
    assert {"NOTICE-001", "NOTICE-002"} <= _rules(observer)


def test_unadvertised_services_are_reported_not_applicable_with_the_reason() -> None:
    """explain_services names the missing capability for each service rule."""
    observer = _observer({"terminal": True})
    explain_services(observer)
    reasons = observer.verdicts.not_applicable
    assert "TERMINAL-001" not in reasons
    assert reasons["ELICIT-002"] == "clientCapabilities.elicitation.url was not advertised"
    assert reasons["NOTICE-001"] == "clientCapabilities.session.notices was not advertised"
    everything = _observer(json.loads(json.dumps(ALL_SERVICES)))
    explain_services(everything)
    assert set(everything.verdicts.not_applicable) == {"ELICIT-002"}
    assert "TERMINAL-002" in everything.verdicts.offered


def test_report_says_when_an_advertised_service_was_never_used() -> None:
    """A service rule offered in one run and never used says so, even if another run did not
    advertise it."""
    verdicts = Verdicts()
    verdicts.skip("TERMINAL-001", "clientCapabilities.terminal was not advertised")
    verdicts.skip("TERMINAL-002", "clientCapabilities.terminal was not advertised")
    other = Verdicts()
    other.offer("TERMINAL-001")
    verdicts.merge(other)
    results = {r.rule.id: r for r in rule_results(verdicts, RULES)}
    assert results["TERMINAL-001"].status == "not-applicable"
    assert "never used it" in results["TERMINAL-001"].reason
    assert results["TERMINAL-002"].reason == "clientCapabilities.terminal was not advertised"
