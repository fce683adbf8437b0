"""
Unit tests of the conformance tester's parts without processes: the rule catalogue and its
generated page, the observer's checks on raw lines, the fault helpers, reports and the CLI.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from xml.etree import ElementTree

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acpkit.conformance import cli, faults
from acpkit.conformance.driver import encode
from acpkit.conformance.observer import Observer, Verdicts
from acpkit.conformance.report import SuiteResult, format_report, rule_results
from acpkit.conformance.rules import RULES, UnknownRule, render_markdown, select_rules

DOC = Path(__file__).parent.parent.parent / "docs" / "reference" / "conformance-rules.md"


def test_generated_rule_page_is_current() -> None:
    """docs/reference/conformance-rules.md is exactly what render_markdown() produces."""
    assert DOC.read_text(encoding="utf-8") == render_markdown()


def test_rules_have_unique_ids_levels_and_quotes() -> None:
    """Every rule has a unique FAMILY-NNN id, MUST/SHOULD, a page and a quote."""
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    for rule in RULES:
        assert rule.level in ("MUST", "SHOULD")
        assert rule.page and rule.quote and "-" in rule.id


def test_select_rules_by_prefix_and_skip() -> None:
    """--rules keeps a family by prefix, --skip removes ids; an unknown selector is an error."""
    frame = select_rules(["FRAME"])
    assert frame and all(r.family == "FRAME" for r in frame)
    assert "FRAME-003" not in {r.id for r in select_rules(["frame"], ["FRAME-003"])}
    with pytest.raises(UnknownRule):
        select_rules(["NOPE"])


def _observer() -> Observer:
    observer = Observer()
    observer.sent({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
    observer.received(b'{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}')
    return observer


def _rules(observer: Observer) -> set[str]:
    return {f.rule_id for f in observer.verdicts.findings}


def test_observer_flags_banner_invalid_utf8_and_batches() -> None:
    """Non-JSON, non-UTF-8 and array lines on stdout are framing findings."""
    observer = _observer()
    observer.received(b"Starting agent v1.0")
    observer.received(b"\xff\xfe")
    observer.received(b'[{"jsonrpc":"2.0","method":"x"}]')
    assert _rules(observer) == {"FRAME-003", "FRAME-001", "FRAME-002"}


def test_observer_flags_id_type_change() -> None:
    """A response echoing id 5 as "5" breaks RPC-001."""
    observer = _observer()
    observer.sent({"jsonrpc": "2.0", "id": 5, "method": "x"})
    observer.received(b'{"jsonrpc":"2.0","id":"5","error":{"code":-32601,"message":"no"}}')
    assert _rules(observer) == {"RPC-001"}


def test_observer_names_the_field_and_constraint_of_schema_violations() -> None:
    """An invalid session/update names the path and the JSON-Schema keyword broken."""
    observer = _observer()
    observer.received(
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s",'
        b'"update":{"sessionUpdate":"usage_update","used":"lots"}}}'
    )
    messages = [f.message for f in observer.verdicts.findings if f.rule_id == "SCHEMA-001"]
    assert messages and messages[0].startswith("params")
    assert "UsageUpdate" in messages[0] or "SessionNotification" in messages[0]
    assert "TURN-006" in _rules(observer)


def test_observer_flags_capability_violations() -> None:
    """fs, terminal, elicitation and notice traffic without the capability are findings."""
    observer = _observer()
    for line in (
        b'{"jsonrpc":"2.0","id":"a","method":"fs/read_text_file",'
        b'"params":{"sessionId":"s","path":"/x"}}',
        b'{"jsonrpc":"2.0","id":"b","method":"terminal/create",'
        b'"params":{"sessionId":"s","command":"ls"}}',
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s",'
        b'"update":{"sessionUpdate":"notice","message":"hi"}}}',
    ):
        observer.received(line)
    assert {"CAP-001", "CAP-002", "CAP-004"} <= _rules(observer)


def test_observer_turn_bookkeeping() -> None:
    """Updates after the response, unfinished and reused tool calls are turn findings."""
    observer = _observer()
    observer.sent(
        {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": "s"}}
    )
    call = b'{"sessionUpdate":"tool_call","toolCallId":"t","title":"x"}'
    update = b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":%s}}'
    observer.received(update % call)
    observer.received(update % call)
    observer.received(b'{"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}')
    observer.received(update % b'{"sessionUpdate":"plan","entries":[]}')
    assert {"TURN-002", "TURN-003"} <= _rules(observer)


def test_observer_flags_answers_to_notifications_and_double_answers() -> None:
    """A response with id null after a notification, and a second answer, are findings (the
    second answer breaks the request-response pair, RPC-013: no $/cancel_request was sent,
    so RPC-010 is not the rule)."""
    observer = _observer()
    observer.sent({"jsonrpc": "2.0", "method": "_x/note"})
    observer.received(b'{"jsonrpc":"2.0","id":null,"result":null}')
    observer.received(b'{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}')
    assert _rules(observer) == {"RPC-002", "RPC-013"}


@given(st.text(min_size=1, max_size=30), st.data())
def test_utf8_cut_points_are_inside_characters(text: str, data: st.DataObject) -> None:
    """Every offset from utf8_cut_points splits a character (its halves are not valid UTF-8)."""
    raw = text.encode("utf-8")
    cuts = faults.utf8_cut_points(raw)
    if cuts:
        cut = data.draw(st.sampled_from(cuts))
        with pytest.raises(UnicodeDecodeError):
            raw[:cut].decode("utf-8")


def test_padded_request_has_the_requested_size() -> None:
    """padded_request pads one line to the size asked for."""
    line = encode(faults.padded_request(1, "_x/y", 100_000))
    assert len(line) == 100_000
    assert json.loads(line)["method"] == "_x/y"


def _result(verdicts: Verdicts) -> SuiteResult:
    return SuiteResult(
        agent="agent",
        results=rule_results(verdicts, select_rules(skip=["CAP-005"])),
        seed=3,
        profile="smoke",
        elapsed=1.0,
        replay="acpkit-conformance --seed 3 -- agent",
    )


def test_reports_in_three_formats() -> None:
    """text, json and junit reports carry statuses, findings and the replay command."""
    verdicts = Verdicts()
    verdicts.ok("FRAME-001")
    verdicts.violation("FRAME-003", "stdout line is not JSON", "<- agent hello\n")
    verdicts.skip("SESSION-004", "loadSession is not advertised")
    result = _result(verdicts)
    assert result.exit_code == 1
    text = format_report(result, "text")
    assert "FAIL  FRAME-003" in text and "replay: acpkit-conformance --seed 3" in text
    document = json.loads(format_report(result, "json"))
    statuses = {r["id"]: r["status"] for r in document["rules"]}
    assert statuses["FRAME-001"] == "pass" and statuses["CAP-005"] == "skipped"
    assert statuses["SESSION-004"] == "not-applicable"
    suite = ElementTree.fromstring(format_report(result, "junit"))
    assert suite.get("failures") == "1"
    assert len(suite.findall("testcase")) == len(RULES)


def test_cli_rejects_bad_options() -> None:
    """No command, a bad --env or an unknown rule selector exit with status 2."""
    assert cli.main([], out=io.StringIO()) == 2
    assert cli.main(["--env", "novalue", "--", "true"], out=io.StringIO()) == 2
    assert cli.main(["--rules", "NOPE", "--", "true"], out=io.StringIO()) == 2


def test_cli_lists_rules() -> None:
    """--list-rules prints one line per rule and exits 0."""
    out = io.StringIO()
    assert cli.main(["--list-rules"], out=out) == 0
    assert len(out.getvalue().splitlines()) == len(RULES)
