"""
The rules added with the session-lifecycle probes and the traffic checks: each deliberately
broken raw agent is reported under its rule (real pipes, only that rule's probes), the correct
raw agent passes them all, and the traffic checks judge raw lines fed to an `Observer`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from acpkit.conformance import checks
from acpkit.conformance.cli import run_suite
from acpkit.conformance.observer import Observer
from tests.conformance.traffic import json_line, observer_with_session, update

RAW_AGENT = str(Path(__file__).parent.parent / "fixtures" / "broken_agents" / "raw_agent.py")

#: fault of raw_agent.py -> the rule it breaks
BROKEN = {
    "fractional_request_id": "RPC-011",
    "long_error_message": "RPC-012",
    "no_agent_info": "INIT-003",
    "no_agent_capabilities": "INIT-004",
    "no_prompt_method": "INIT-005",
    "fail_without_capabilities": "INIT-006",
    "relative_location": "PATH-001",
    "zero_line": "FS-001",
    "embed_released_terminal": "TERMINAL-003",
    "relative_terminal_cwd": "TERMINAL-004",
    "kill_without_release": "TERMINAL-005",
    "reuse_elicitation_id": "ELICIT-003",
    "url_in_form": "ELICIT-004",
    "token_in_url": "ELICIT-005",
    "http_url": "ELICIT-006",
    "die_on_declined_elicitation": "ELICIT-007",
    "replay_on_resume": "SESSION-006",
    "resume_not_implemented": "CAP-005",
    "updates_after_close": "SESSION-007",
    "spawn_cwd": "SESSION-009",
    "read_outside_roots": "SESSION-010",
    "list_ignores_cwd": "LIST-001",
    "accept_bad_cursor": "LIST-002",
    "list_nothing": "LIST-003",
    "info_with_session_id": "LIST-004",
    "delete_unknown_fails": "DELETE-001",
    "delete_keeps_listing": "DELETE-002",
    "set_mode_busy": "MODE-001",
    "bad_current_mode": "MODE-002",
    "boolean_without_cap": "CONFIG-001",
    "bad_current_value": "CONFIG-002",
    "stale_config_result": "CONFIG-003",
    "partial_config_update": "CONFIG-004",
    "modes_only": "CONFIG-005",
    "modes_out_of_sync": "CONFIG-006",
    "bad_category": "CONFIG-007",
    "cancelled_without_cancel": "TURN-007",
    "allowed_tool_not_run": "TOOL-001",
    "error_after_cancel": "CANCEL-003",
    "tool_after_cancel": "CANCEL-004",
    "no_mcp_http": "MCP-001",
    "terminal_auth_always": "AUTH-001",
    "auth_required_after_login": "AUTH-002",
    "custom_root_field": "EXT-001",
    "bad_traceparent": "EXT-002",
    "unadvertised_extension": "EXT-003",
    "unprefixed_method": "EXT-004",
    "meta_values_are_strings": "EXT-005",
    "drop_custom_request": "RPC-008",
    "drop_unknown_method": "RPC-013",
    "ignore_mcp_servers": "MCP-002",
    "unknown_session_internal_error": "RPC-014",
    "login_wrong_code": "AUTH-003",
    "secret_in_form": "ELICIT-008",
}

#: New rules the raw agent cannot exercise (it does not support session/load); unit-tested.
UNIT_ONLY = ("SESSION-008",)
#: Rules the correct raw agent leaves not applicable: it needs no login (AUTH-003 holds on
#: the quirky agent needs_login, tests/conformance/test_conformance_false_findings.py).
NOT_APPLICABLE = ("AUTH-003",)


@pytest.mark.process
def test_correct_raw_agent_passes_every_new_rule() -> None:
    """The correct raw agent exercises every new rule (but SESSION-008) with no finding."""
    rules = sorted({*BROKEN.values(), *UNIT_ONLY})
    result = run_suite(
        [sys.executable, RAW_AGENT], profile="smoke", timeout=3.0, explore=False, only=rules
    )
    assert result.error is None, result.error
    assert [f.message for r in result.found for f in r.findings] == []
    statuses = {r.rule.id: r.status for r in result.results}
    assert {
        rule: statuses[rule]
        for rule in BROKEN.values()
        if statuses[rule] != "pass" and rule not in NOT_APPLICABLE
    } == {}


@pytest.mark.process
@pytest.mark.parametrize("fault", sorted(BROKEN))
def test_broken_agent_is_reported_under_its_rule(fault: str) -> None:
    """Each broken behaviour is reported under the rule it breaks (only that rule's probes)."""
    rule = BROKEN[fault]
    result = run_suite(
        [sys.executable, RAW_AGENT, fault],
        profile="smoke",
        timeout=3.0,
        explore=False,
        only=[rule],
    )
    assert result.error is None, result.error
    assert rule in {r.rule.id for r in result.found}


# -- the traffic checks on raw lines ----------------------------------------------------------


def _prompt(observer: Observer, rid: int = 2) -> None:
    observer.sent(
        {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "session/prompt",
            "params": {"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}]},
        }
    )


def _findings(observer: Observer) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for finding in observer.verdicts.findings:
        found.setdefault(finding.rule_id, []).append(finding.message)
    return found


def test_relative_paths_and_line_zero_are_findings() -> None:
    """A relative fs path and line 0 break PATH-001 / FS-001; absolute and 1 pass."""
    observer = observer_with_session({"fs": {"readTextFile": True}})
    for rid, path, line in (("a", "notes.txt", 0), ("b", "/w/notes.txt", 1)):
        params = {"sessionId": "s", "path": path, "line": line}
        observer.received(
            json_line(
                {"jsonrpc": "2.0", "id": rid, "method": "fs/read_text_file", "params": params}
            )
        )
    found = _findings(observer)
    assert found["PATH-001"] == ["fs/read_text_file params.path is the relative path 'notes.txt'"]
    assert len(found["FS-001"]) == 1 and "is 0" in found["FS-001"][0]
    assert observer.verdicts.exercised["PATH-001"] == 2


def test_tool_call_locations_diffs_and_terminals_are_judged() -> None:
    """A relative diff path, a location line 0 and an unknown embedded terminal are findings."""
    observer = observer_with_session()
    _prompt(observer)
    observer.received(
        update(
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "t",
                "title": "edit",
                "locations": [{"path": "/w/a.txt", "line": 0}],
                "content": [
                    {"type": "diff", "path": "a.txt", "newText": "x"},
                    {"type": "terminal", "terminalId": "never"},
                ],
            }
        )
    )
    assert {"PATH-001", "FS-001", "TERMINAL-003"} <= set(_findings(observer))


def test_fs_path_outside_the_session_roots_is_a_session_010_finding() -> None:
    """An fs path outside cwd and additionalDirectories breaks SESSION-010 (SHOULD)."""
    observer = observer_with_session({"fs": {"readTextFile": True}})
    for rid, path in (("a", "/w/sub/ok.txt"), ("b", "/etc/passwd")):
        params = {"sessionId": "s", "path": path}
        observer.received(
            json_line(
                {"jsonrpc": "2.0", "id": rid, "method": "fs/read_text_file", "params": params}
            )
        )
    assert _findings(observer)["SESSION-010"] == [
        "fs/read_text_file params.path '/etc/passwd' is outside the session's roots (/w)"
    ]


def test_null_request_ids_and_long_error_messages_are_findings() -> None:
    """A request with id null (RPC-011) and a multi-line error message (RPC-012)."""
    observer = observer_with_session({"fs": {"readTextFile": True}})
    params = {"sessionId": "s", "path": "/w/a"}
    observer.received(
        json_line({"jsonrpc": "2.0", "id": None, "method": "fs/read_text_file", "params": params})
    )
    observer.sent({"jsonrpc": "2.0", "id": 9, "method": "_x/y", "params": {}})
    error = {"code": -32601, "message": "Method not found\nTraceback: ..."}
    observer.received(json_line({"jsonrpc": "2.0", "id": 9, "error": error}))
    assert {"RPC-011", "RPC-012"} <= set(_findings(observer))


def test_custom_root_fields_are_ext_001_findings_but_meta_and_unstable_keys_are_not() -> None:
    """
    A key no schema type defines is EXT-001; keys inside _meta are free, and a key only the
    unstable schema defines (PromptResponse.usage) is noted in the transcript, not a finding.
    """
    observer = observer_with_session()
    _prompt(observer)
    observer.received(
        update(
            {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": "hi", "_meta": {"anything": 1}},
                "vendorField": True,
            }
        )
    )
    usage = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}
    result = {"stopReason": "end_turn", "usage": usage}
    observer.received(json_line({"jsonrpc": "2.0", "id": 2, "result": result}))
    found = _findings(observer)
    assert len(found["EXT-001"]) == 1
    assert "params.update.vendorField" in found["EXT-001"][0]
    assert "session/prompt result.usage" in observer.transcript.render()


def test_trace_context_and_extension_methods() -> None:
    """A bad traceparent (EXT-002), an unadvertised _method (EXT-003), an unprefixed one
    (EXT-004)."""
    observer = observer_with_session()
    observer.received(
        update(
            {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": "x"},
                "_meta": {"traceparent": "abc", "tracestate": "k=v"},
            }
        )
    )
    observer.received(json_line({"jsonrpc": "2.0", "method": "_vendor/ping", "params": {}}))
    observer.received(json_line({"jsonrpc": "2.0", "method": "vendor/ping", "params": {}}))
    assert {"EXT-002", "EXT-003", "EXT-004"} <= set(_findings(observer))


def test_cancelled_stop_reason_needs_a_cancel() -> None:
    """stopReason cancelled without session/cancel is TURN-007; after a cancel it passes."""
    observer = observer_with_session()
    _prompt(observer, 2)
    observer.received(json_line({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "cancelled"}}))
    _prompt(observer, 3)
    observer.sent({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s"}})
    observer.received(json_line({"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "cancelled"}}))
    assert len(_findings(observer)["TURN-007"]) == 1
    assert observer.verdicts.exercised["TURN-007"] == 2


def test_cancelled_turn_error_and_new_tool_work_after_the_race_margin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """
    Later than CANCEL_RACE after session/cancel, a new tool_call is CANCEL-004 and an error
    answer CANCEL-003; within the margin an error is only noted (it may predate the cancel).
    """
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])  # the checks' clock
    observer = observer_with_session()
    _prompt(observer, 2)
    observer.sent({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s"}})
    clock[0] += 0.5
    error = {"code": -32603, "message": "Aborted."}
    observer.received(json_line({"jsonrpc": "2.0", "id": 2, "error": error}))
    assert "CANCEL-003" not in _findings(observer)
    _prompt(observer, 3)
    observer.sent({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s"}})
    clock[0] += 2.0
    observer.received(update({"sessionUpdate": "tool_call", "toolCallId": "n", "title": "x"}))
    observer.received(json_line({"jsonrpc": "2.0", "id": 3, "error": error}))
    found = _findings(observer)
    assert len(found["CANCEL-003"]) == 1 and len(found["CANCEL-004"]) == 1


def test_allowed_tool_call_must_be_reported_running() -> None:
    """A tool call the client allowed, with no later status update, is TOOL-001 (SHOULD)."""
    observer = observer_with_session()
    _prompt(observer)
    params = {
        "sessionId": "s",
        "toolCall": {"toolCallId": "t"},
        "options": [{"optionId": "y", "name": "Yes", "kind": "allow_once"}],
    }
    observer.received(
        json_line(
            {"jsonrpc": "2.0", "id": "p", "method": "session/request_permission", "params": params}
        )
    )
    outcome = {"outcome": {"outcome": "selected", "optionId": "y"}}
    observer.sent({"jsonrpc": "2.0", "id": "p", "result": outcome})
    observer.received(json_line({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}}))
    assert "TOOL-001" in _findings(observer)


def test_url_and_form_elicitations_are_judged() -> None:
    """A clickable link in a form (ELICIT-004), a token and plain http in a url (005, 006), a
    reused outstanding elicitationId (003); https to a host without secrets passes."""
    observer = observer_with_session({"elicitation": {"form": {}, "url": {}}})
    form = {
        "sessionId": "s",
        "mode": "form",
        "message": "Read http://example.com first",
        "requestedSchema": {"type": "object", "properties": {"a": {"type": "string"}}},
    }
    requests: list[dict[str, Any]] = [form]
    for url in ("http://example.com/x?access_token=1", "http://example.com/y"):
        requests.append(
            {"sessionId": "s", "mode": "url", "message": "m", "elicitationId": "e", "url": url}
        )
    for number, params in enumerate(requests):
        message = {"jsonrpc": "2.0", "id": f"e{number}", "method": "elicitation/create"}
        observer.received(json_line({**message, "params": params}))
    found = _findings(observer)
    assert {"ELICIT-003", "ELICIT-004", "ELICIT-005", "ELICIT-006"} <= set(found)
    assert len(found["ELICIT-006"]) == 2
    assert checks.url_secret_problem("https://example.com/cb?state=1&code=2") is None
    assert not checks.url_is_plain_http("http://127.0.0.1:8080/cb")


def test_session_results_modes_and_config_options_are_judged() -> None:
    """An unknown currentModeId (MODE-002), a select value outside its options (CONFIG-002),
    a boolean the client did not accept (CONFIG-001), a reserved category (CONFIG-007), modes
    out of sync with the mode option (CONFIG-006)."""
    observer = observer_with_session()
    options = [
        {
            "id": "mode",
            "name": "Mode",
            "category": "mode",
            "type": "select",
            "currentValue": "b",
            "options": [{"value": "a", "name": "A"}, {"value": "b", "name": "B"}],
        },
        {
            "id": "m",
            "name": "Model",
            "category": "speed",
            "type": "select",
            "currentValue": "z",
            "options": [{"value": "x", "name": "X"}],
        },
        {"id": "f", "name": "Fast", "type": "boolean", "currentValue": False},
    ]
    modes = {
        "currentModeId": "a",
        "availableModes": [{"id": "a", "name": "A"}, {"id": "b", "name": "B"}],
    }
    observer.sent(
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "session/new",
            "params": {"cwd": "/v", "mcpServers": []},
        }
    )
    result = {"sessionId": "s2", "modes": modes, "configOptions": options}
    observer.received(json_line({"jsonrpc": "2.0", "id": 5, "result": result}))
    observer.received(update({"sessionUpdate": "current_mode_update", "currentModeId": "q"}, "s2"))
    found = _findings(observer)
    assert {"CONFIG-001", "CONFIG-002", "CONFIG-006", "CONFIG-007", "MODE-002"} <= set(found)
    assert "CONFIG-005" not in found


def test_partial_config_update_and_session_info_keys() -> None:
    """A config_option_update dropping an option while nothing changed (CONFIG-004), and a
    session_info_update carrying cwd (LIST-004)."""
    observer = observer_with_session()
    option = {
        "id": "m",
        "name": "Model",
        "type": "select",
        "currentValue": "x",
        "options": [{"value": "x", "name": "X"}],
    }
    other = {**option, "id": "n", "name": "Other"}
    observer.received(
        update({"sessionUpdate": "config_option_update", "configOptions": [option, other]})
    )
    observer.received(update({"sessionUpdate": "config_option_update", "configOptions": [option]}))
    observer.received(update({"sessionUpdate": "session_info_update", "title": "t", "cwd": "/w"}))
    assert {"CONFIG-004", "LIST-004"} <= set(_findings(observer))


def test_replayed_message_ids_are_unique() -> None:
    """During a session/load replay, a messageId reused by a later message is SESSION-008."""
    observer = observer_with_session()
    params = {"sessionId": "s", "cwd": "/w", "mcpServers": []}
    observer.sent({"jsonrpc": "2.0", "id": 7, "method": "session/load", "params": params})
    text = {"type": "text", "text": "x"}
    for kind in ("user_message_chunk", "agent_message_chunk", "user_message_chunk"):
        observer.received(update({"sessionUpdate": kind, "content": text, "messageId": "m1"}))
    observer.received(json_line({"jsonrpc": "2.0", "id": 7, "result": {}}))
    found = _findings(observer)
    assert "SESSION-008" in found and "TURN-005" not in found


def test_initialize_terminal_auth_method_needs_the_client_capability() -> None:
    """A terminal auth method while the client did not set auth.terminal is AUTH-001."""
    methods = [{"id": "t", "name": "T", "type": "terminal", "args": []}]
    observer = observer_with_session(authMethods=methods)
    assert "AUTH-001" in _findings(observer)
    allowed = observer_with_session({"auth": {"terminal": True}}, authMethods=methods)
    assert "AUTH-001" not in _findings(allowed)


def _session_result(
    modes: Mapping[str, object], options: Sequence[Mapping[str, object]]
) -> list[str]:
    observer = observer_with_session()
    observer.sent(
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "session/new",
            "params": {"cwd": "/v", "mcpServers": []},
        }
    )
    result = {"sessionId": "s2", "modes": modes, "configOptions": options}
    observer.received(json_line({"jsonrpc": "2.0", "id": 5, "result": result}))
    return list(_findings(observer))


def test_modes_sent_again_as_an_option_of_another_category_are_both_ways() -> None:
    """
    Modes whose ids are exactly the values of a select option of another category (pi's
    thinking levels under category thought_level) are mode-like configuration sent both
    ways: no CONFIG-005. Modes with no option holding their ids are a CONFIG-005 finding.
    """
    modes = {
        "currentModeId": "low",
        "availableModes": [{"id": "low", "name": "Low"}, {"id": "high", "name": "High"}],
    }
    levels = {
        "id": "thinking",
        "name": "Thinking",
        "type": "select",
        "category": "thought_level",
        "currentValue": "low",
        "options": [{"value": "low", "name": "Low"}, {"value": "high", "name": "High"}],
    }
    other = {**levels, "id": "model", "category": "model", "options": [{"value": "m", "name": "M"}]}
    assert "CONFIG-005" not in _session_result(modes, [levels])
    assert "CONFIG-005" in _session_result(modes, [{**other, "currentValue": "m"}])
