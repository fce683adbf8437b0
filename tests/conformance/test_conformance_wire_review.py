"""
The wire rules' checks held against their quoted sentences (issue 23, item 5): each test
feeds the tester the traffic a sentence speaks of and states what the check must conclude.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, cast

from acpkit.conformance.driver import AgentDriver, AgentGone, StepTimeout
from acpkit.conformance.faults import probe_eof, probe_junk
from acpkit.conformance.harness import SuiteConfig
from acpkit.conformance.observer import Observer, Verdicts
from acpkit.conformance.probes import probe_initialize, probe_unknown_notifications
from acpkit.conformance.probes_transport import run_transport_probes
from acpkit.conformance.remote_driver import RemoteDriver
from tests.conformance.traffic import json_line, observer_with_session


def _fresh_answering(
    verdicts: Verdicts, versions: dict[int, Any]
) -> Any:  # a stand-in for the harness's `fresh`: initialize answered from ``versions``
    @contextmanager
    def fresh(version: int = 1, **_: Any) -> Iterator[Any]:
        result = {"protocolVersion": versions[version], "agentCapabilities": {}}
        yield SimpleNamespace(init_result=result, observer=Observer(verdicts=verdicts))

    return fresh


def _rules(verdicts: Verdicts) -> set[str]:
    return {f.rule_id for f in verdicts.findings}


def test_init_002_an_older_version_than_one_supported_is_not_the_latest() -> None:
    """INIT-002: an agent that answers 1 to protocolVersion 1 supports 1; answering 0 to an
    unsupported version is not 'the latest version it supports'."""
    verdicts = Verdicts()
    probe_initialize(
        SuiteConfig(argv=("agent",)), verdicts, _fresh_answering(verdicts, {1: 1, 999: 0})
    )
    assert _rules(verdicts) == {"INIT-002"}
    assert "older than version 1" in verdicts.findings[0].message


def test_init_002_the_supported_version_for_an_unknown_one_holds() -> None:
    """INIT-002: answering 1 to both protocolVersion 1 and 999 holds."""
    verdicts = Verdicts()
    probe_initialize(
        SuiteConfig(argv=("agent",)), verdicts, _fresh_answering(verdicts, {1: 1, 999: 1})
    )
    assert verdicts.findings == []
    assert verdicts.exercised["INIT-002"] == 2


def _request(observer: Observer, request_id: int, method: str = "_x/y") -> None:
    observer.sent({"jsonrpc": "2.0", "id": request_id, "method": method, "params": {}})


def test_rpc_013_a_second_answer_without_a_cancel_request_is_not_rpc_010() -> None:
    """A request answered twice breaks the request-response pair (RPC-013); RPC-010, whose
    sentence is about $/cancel_request, is not blamed when no $/cancel_request was sent."""
    observer = observer_with_session()
    _request(observer, 5)
    for _ in range(2):
        observer.received(json_line({"jsonrpc": "2.0", "id": 5, "result": {}}))
    assert _rules(observer.verdicts) == {"RPC-013"}


def test_rpc_010_a_second_answer_after_a_cancel_request() -> None:
    """After $/cancel_request the request is answered exactly once: a second answer is
    RPC-010's."""
    observer = observer_with_session()
    _request(observer, 6, "session/prompt")
    observer.sent({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 6}})
    for _ in range(2):
        observer.received(
            json_line({"jsonrpc": "2.0", "id": 6, "error": {"code": -32800, "message": "x"}})
        )
    assert _rules(observer.verdicts) == {"RPC-010"}


def test_ext_001_a_custom_field_at_the_root_of_an_error_object() -> None:
    """EXT-001: the JSON-RPC error object is a spec type (schema.json Error: code, message,
    data); a custom key at its root is a violation, details belong in data."""
    observer = observer_with_session()
    _request(observer, 7)
    error = {"code": -32601, "message": "Method not found", "details": "x"}
    observer.received(json_line({"jsonrpc": "2.0", "id": 7, "error": error}))
    assert _rules(observer.verdicts) == {"EXT-001"}
    assert "details" in observer.verdicts.findings[0].message


def test_ext_001_an_error_object_with_data_holds() -> None:
    """EXT-001: an error object with code, message and data has no custom field."""
    observer = observer_with_session()
    _request(observer, 8)
    error = {"code": -32601, "message": "Method not found", "data": {"method": "_x/y"}}
    observer.received(json_line({"jsonrpc": "2.0", "id": 8, "error": error}))
    assert observer.verdicts.findings == []
    assert observer.verdicts.exercised["EXT-001"] >= 1


def test_ext_004_a_dollar_request_the_schema_does_not_define() -> None:
    """EXT-004: the schema's '$/' namespace is for notifications; a '$/' request it does not
    define is a method outside the spec without the '_' prefix."""
    observer = observer_with_session()
    observer.received(json_line({"jsonrpc": "2.0", "id": 1, "method": "$/progress"}))
    assert "EXT-004" in _rules(observer.verdicts)


def test_ext_004_a_dollar_notification_is_protocol_level() -> None:
    """EXT-004: a '$/' notification is in the schema's protocol-level namespace ('Notifications
    whose methods start with '$/' are messages which are protocol implementation
    dependent'): not a violation."""
    observer = observer_with_session()
    observer.received(json_line({"jsonrpc": "2.0", "method": "$/progress", "params": {}}))
    assert "EXT-004" not in _rules(observer.verdicts)


class _BinaryFrameDriver(RemoteDriver):
    """A WebSocket driver stand-in: each text request meets the next of ``outcomes`` (an
    answer, or an exception to raise)."""

    def __init__(self, observer: Observer, outcomes: list[Any]) -> None:  # no socket
        self.observer = observer
        self.arrivals: list[dict[str, Any]] = []
        self.outcomes = outcomes

    def send_binary(self, data: bytes) -> None:
        self.observer.note("binary frame sent")

    def request(self, method: str, params: Any = None, **_: Any) -> dict[str, Any]:
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return dict(outcome)

    def wait_until(self, deadline: float) -> None:
        return None


def _ws_probe(verdicts: Verdicts, outcomes: list[Any]) -> Observer:
    observer = Observer(verdicts=verdicts)
    agent = SimpleNamespace(driver=_BinaryFrameDriver(observer, outcomes), observer=observer)

    @contextmanager
    def fresh(**_: Any) -> Iterator[Any]:
        yield agent

    config = SuiteConfig(argv=(), url="ws://127.0.0.1:1/acp")
    try:
        run_transport_probes(config, verdicts, fresh)
    except AgentGone:
        pass
    return observer


def test_ws_003_a_connection_closed_by_a_binary_frame_is_filed_under_ws_003() -> None:
    """WS-003: the connection going away after a binary frame happens inside the WS-003
    step, so the run files it there (not under the transport group's HTTP-001)."""
    verdicts = Verdicts()
    observer = _ws_probe(verdicts, [AgentGone(None, "", "reading")])
    assert observer.failed_step is not None and observer.failed_step[0] == "WS-003"


def test_ws_003_a_text_request_dropped_after_a_binary_frame() -> None:
    """WS-003: the text request after a binary frame unanswered while the next one is
    answered: the binary frame was not ignored (a finding, not 'slow')."""
    verdicts = Verdicts()
    _ws_probe(verdicts, [StepTimeout("no answer"), {"jsonrpc": "2.0", "id": 2, "result": {}}])
    assert _rules(verdicts) == {"WS-003"}
    assert "not ignored" in verdicts.findings[0].message


def test_ws_003_both_unanswered_is_slow_not_a_finding() -> None:
    """WS-003: nothing answered at all is 'could not judge' (slow), not a finding."""
    verdicts = Verdicts()
    _ws_probe(verdicts, [StepTimeout("no answer"), StepTimeout("no answer")])
    assert verdicts.findings == []
    assert "WS-003" in verdicts.undecided


class _JunkDriver(AgentDriver):
    """A stdio driver stand-in: each junk line written is answered with the next of
    ``codes`` (an id-null error, or nothing for ``None``); a request gets -32601."""

    def __init__(self, observer: Observer, codes: list[int | None]) -> None:  # no process
        self.observer = observer
        self.inbox: list[dict[str, Any]] = []
        self.codes = codes
        self.ids = 100

    def next_id(self) -> int:
        self.ids += 1
        return self.ids

    def write(self, data: bytes, pieces: Sequence[int] = (), pause: float = 0.0) -> None:
        self.observer.sent_bytes(data)
        code = self.codes.pop(0)
        if code is not None:
            error = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": "Bad."}}
            self.observer.received(json_line(error))
            self.inbox.append(error)

    def send(self, message: Any, line_end: bytes = b"\n") -> None:
        self.observer.sent(message)

    def response_to(self, request_id: Any, what: str, timeout: float | None = None) -> Any:
        answer = {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "No."}}
        self.observer.received(json_line(answer))
        return answer


def test_rpc_003_every_line_that_is_not_json_is_owed_a_parse_error() -> None:
    """RPC-003: of the junk lines, the three that are not JSON each get -32700; one of them
    answered -32600 is a finding even when another got -32700 (the JSON scalar's -32600 is
    right: it is an invalid request)."""
    verdicts = Verdicts()
    probe_junk(_JunkDriver(Observer(verdicts=verdicts), [-32600, -32700, -32700, -32600]))
    assert _rules(verdicts) == {"RPC-003"}
    assert "got 2 -32700" in verdicts.findings[0].message


def test_rpc_003_a_parse_error_for_each_line_that_is_not_json_holds() -> None:
    """RPC-003: -32700 for the three lines that are not JSON, -32600 for the scalar: holds."""
    verdicts = Verdicts()
    probe_junk(_JunkDriver(Observer(verdicts=verdicts), [-32700, -32700, -32700, -32600]))
    assert verdicts.findings == []
    assert verdicts.exercised["RPC-003"] == 1


class _NotifiedDriver(AgentDriver):
    """A stdio driver stand-in that replies to the notifications named in ``answers`` with
    an id-null error, and answers every request -32601."""

    def __init__(self, observer: Observer, answers: frozenset[str]) -> None:  # no process
        self.observer = observer
        self.answers = answers
        self.ids = 0

    def notify(self, method: str, params: Any = None) -> None:
        self.observer.sent({"jsonrpc": "2.0", "method": method, "params": params})
        if method in self.answers:
            error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32601, "message": "No."}}
            self.observer.received(json_line(error))

    def drain(self, seconds: float) -> None:
        return None

    def request(self, method: str, params: Any = None, **_: Any) -> dict[str, Any]:
        self.ids += 1
        self.observer.sent({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": {}})
        answer = {"jsonrpc": "2.0", "id": self.ids, "error": {"code": -32601, "message": "No."}}
        self.observer.received(json_line(answer))
        return answer


def _notified(answers: frozenset[str]) -> Verdicts:
    observer = observer_with_session()
    driver = _NotifiedDriver(observer, answers)
    probe_unknown_notifications(cast(Any, SimpleNamespace(driver=driver, observer=observer)))
    return observer.verdicts


def test_rpc_007_a_reply_to_an_unknown_notification_is_not_ignoring_it() -> None:
    """RPC-007 ('implementations SHOULD ignore unrecognized notifications'): an error reply
    to the unknown notification is a finding of RPC-007, besides RPC-002's."""
    verdicts = _notified(frozenset({"no/such_notification"}))
    assert _rules(verdicts) == {"RPC-002", "RPC-007"}


def test_rpc_007_a_reply_to_a_cancel_for_no_session_is_rpc_002_only() -> None:
    """RPC-007 is about unrecognized notifications: a reply to session/cancel (a known one)
    is RPC-002's alone."""
    verdicts = _notified(frozenset({"session/cancel"}))
    assert _rules(verdicts) == {"RPC-002"}
    assert verdicts.exercised["RPC-007"] == 1


def test_rpc_007_ignored_notifications_hold() -> None:
    """No reply to any notification and the next request answered: RPC-007 and RPC-002
    hold."""
    verdicts = _notified(frozenset())
    assert verdicts.findings == []
    assert verdicts.exercised["RPC-007"] == 1 and verdicts.exercised["RPC-002"] == 1


def test_rpc_012_the_answer_to_a_malformed_line_is_judged_too() -> None:
    """RPC-012 ('The message should be limited to a concise single sentence.') holds for
    every error: the id-null answer to a line that is not JSON, with a traceback for a
    message, is a finding."""
    observer = observer_with_session()
    observer.sent_bytes(b"this is not json\n")
    message = "Parse error\nTraceback (most recent call last):\n  ..."
    error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": message}}
    observer.received(json_line(error))
    assert _rules(observer.verdicts) == {"RPC-012"}


def test_rpc_012_the_echoed_id_answer_to_a_malformed_request_is_judged_too() -> None:
    """RPC-012 also judges the answer to a request that is malformed (no jsonrpc member)
    when it echoes the request's id."""
    observer = observer_with_session()
    observer.sent_bytes(b'{"id":79,"method":"_acpkit.dev/x"}\n')
    error = {"jsonrpc": "2.0", "id": 79, "error": {"code": -32600, "message": "x" * 400}}
    observer.received(json_line(error))
    assert _rules(observer.verdicts) == {"RPC-012"}


class _ExitingDriver(AgentDriver):
    """A stdio driver stand-in whose agent exits at EOF without answering anything."""

    def __init__(self, observer: Observer) -> None:  # no process
        self.observer = observer
        self.ids = 0

    def next_id(self) -> int:
        self.ids += 1
        return self.ids

    def send(self, message: Any, line_end: bytes = b"\n") -> None:
        self.observer.sent(message)

    def close_stdin(self) -> None:
        self.observer.stdin_closed = True

    def wait_exit(self, timeout: float) -> int | None:
        return 0


def test_frame_010_the_request_is_judged_once() -> None:
    """FRAME-010: a request left unanswered by an agent that exits at EOF is judged under
    FRAME-010 alone (a SHOULD); the end-of-life judgement does not file it again as 'slow'
    under the rule of its method."""
    verdicts = Verdicts()
    observer = Observer(verdicts=verdicts)
    probe_eof(_ExitingDriver(observer), 1.0, session_id="s")
    observer.judge_unanswered(lambda _: 0.0)
    assert _rules(verdicts) == {"FRAME-010"}
    assert verdicts.undecided == {}


class _TimedDriver(_ExitingDriver):
    """A stdio driver stand-in on a clock of its own: its waits advance the clock; the
    agent answers the last request sent at ``answer_at`` (None: never) and exits at
    ``exit_at`` (None: never)."""

    def __init__(self, observer: Observer, answer_at: float | None, exit_at: float | None):
        super().__init__(observer)
        self.ids = 100  # after the ids observer_with_session used
        self.now = 0.0
        self.answer_at = answer_at
        self.exit_at = exit_at

    def wait_exit(self, timeout: float) -> int | None:
        self.now += timeout
        if self.answer_at is not None and self.now >= self.answer_at:
            self.answer_at = None
            answer = {"jsonrpc": "2.0", "id": self.ids, "result": {"stopReason": "end_turn"}}
            self.observer.received(json_line(answer))
        if self.exit_at is not None and self.now >= self.exit_at:
            return 0
        return None


def _eof_verdicts(answer_at: float | None, exit_at: float | None) -> tuple[Verdicts, float]:
    """The verdicts of the mid-turn EOF probe (grace 10 s) on a _TimedDriver, and how long
    it waited."""
    observer = observer_with_session()
    driver = _TimedDriver(observer, answer_at, exit_at)
    probe_eof(driver, 10.0, session_id="s")
    return observer.verdicts, driver.now


def test_frame_009_the_exit_is_awaited_from_the_answer() -> None:
    """FRAME-009: an agent that answers the turn it read late in the step (9 s of 10) and
    exits 9 s after that is judged to exit at EOF: the exit gets a step of its own from the
    answer, as the rule says (exit after answering what was read)."""
    verdicts, waited = _eof_verdicts(answer_at=9.0, exit_at=18.0)
    assert _rules(verdicts) == set()
    assert verdicts.exercised.get("FRAME-009") == 1 and verdicts.exercised.get("FRAME-010") == 1
    assert 17.99 <= waited < 19.1


def test_frame_009_an_agent_that_answers_and_stays_is_found() -> None:
    """FRAME-009: an agent that answers the turn and keeps running is found once a step
    has passed after the answer, not later."""
    verdicts, waited = _eof_verdicts(answer_at=2.0, exit_at=None)
    assert _rules(verdicts) == {"FRAME-009"}
    assert 11.99 <= waited < 12.2


def test_frame_009_an_agent_that_neither_answers_nor_exits_gets_one_step() -> None:
    """FRAME-009: an agent that neither answers the turn nor exits is found after one step
    (no second wait)."""
    verdicts, waited = _eof_verdicts(answer_at=None, exit_at=None)
    assert "FRAME-009" in _rules(verdicts)
    assert 9.99 <= waited < 10.2
