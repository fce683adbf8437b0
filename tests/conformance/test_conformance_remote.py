"""
``acpkit-conformance --url``: a remote agent tested over Streamable HTTP and WebSocket, with
the transport rules of the RFD (HTTP-001..011, WS-001..003).

Servers run in subprocesses (they print their URL or port); the tester itself is blocking
and runs in the test's thread. Each server is stopped by closing its stdin or killing it.
"""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from acpkit.conformance.cli import main, run_suite
from acpkit.conformance.remote_driver import jsonrpc_body
from acpkit.conformance.report import SuiteResult
from acpkit.conformance.rules import RULES
from acpkit.remote.security import tls_serving_problem
from tests.helpers import child_env
from tests.listening_bob import ListeningBob, start_bob

# One xdist worker runs this file's tests: its module-scoped fixtures (acpkit's and
# bob's servers) then run once, not once per worker.
pytestmark = [pytest.mark.process, pytest.mark.xdist_group("conformance_remote")]

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
HTTP_RULES = [r.id for r in RULES if r.id.startswith("HTTP-")]
#: every HTTP rule but HTTP-011 (HTTP/2 by ALPN: judged over TLS only)
CLEARTEXT_HTTP_RULES = [r for r in HTTP_RULES if r != "HTTP-011"]
WS_RULES = [r.id for r in RULES if r.id.startswith("WS-")]


def _start(argv: list[str], cwd: Path | None = None) -> tuple[subprocess.Popen[str], str]:
    env = child_env()
    process = subprocess.Popen(
        [sys.executable, *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=cwd,
    )
    assert process.stdout is not None
    first = process.stdout.readline().strip()  # blocks until the server listens (or dies)
    if not first:
        process.kill()
        raise AssertionError(f"{argv} printed nothing")
    return process, first


def _stop(process: subprocess.Popen[str]) -> None:
    if process.stdin is not None:
        process.stdin.close()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def acpkit_url() -> Iterator[str]:
    """acpkit's interop agent served by acpkit.remote.serve_remote (HTTP and WebSocket)."""
    process, url = _start([str(FIXTURES / "interop" / "remote_agent.py")])
    try:
        yield url
    finally:
        _stop(process)


def _statuses(result: SuiteResult) -> dict[str, str]:
    return {r.rule.id: r.status for r in result.results}


def _transport(url: str, rules: list[str] | None = None) -> SuiteResult:
    return run_suite([], url=url, only=rules or ["HTTP", "WS"], timeout=5.0, explore=False)


def test_acpkit_server_passes_every_http_rule(acpkit_url: str) -> None:
    """Over Streamable HTTP, serve_remote passes every HTTP rule but HTTP-011 (TLS only),
    which is not applicable, as are the WebSocket rules, each with its reason."""
    result = _transport(acpkit_url)
    assert result.error is None, result.error
    statuses = _statuses(result)
    assert {statuses[r] for r in CLEARTEXT_HTTP_RULES} == {"pass"}, statuses
    assert statuses["HTTP-011"] == "not-applicable"
    assert {statuses[r] for r in WS_RULES} == {"not-applicable"}


def test_acpkit_server_passes_every_websocket_rule(acpkit_url: str) -> None:
    """Over WebSocket, serve_remote passes WS-001..003; the HTTP rules are not applicable."""
    result = _transport(acpkit_url.replace("http://", "ws://"))
    assert result.error is None, result.error
    statuses = _statuses(result)
    assert {statuses[r] for r in WS_RULES} == {"pass"}, statuses
    assert {statuses[r] for r in HTTP_RULES} == {"not-applicable"}


@pytest.mark.skipif(tls_serving_problem() is not None, reason=tls_serving_problem() or "")
def test_acpkit_server_over_tls_speaks_http2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over https (a self-signed certificate, trusted through
    ACPKIT_CONFORMANCE_INSECURE_TLS=1), serve_remote chooses h2 by ALPN (HTTP-011) and
    still passes every other HTTP rule."""
    pytest.importorskip("h2")
    pytest.importorskip("cryptography")
    monkeypatch.setenv("ACPKIT_CONFORMANCE_INSECURE_TLS", "1")
    process, url = _start([str(FIXTURES / "interop" / "remote_agent.py"), "--tls"], tmp_path)
    try:
        assert url.startswith("https://")
        result = _transport(url, ["HTTP"])
    finally:
        _stop(process)
    assert result.error is None, result.error
    statuses = _statuses(result)
    assert {statuses[r] for r in HTTP_RULES} == {"pass"}, statuses


@pytest.fixture(scope="module")
def remote_bob(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ListeningBob]:
    """bob (twistd -n acp-agent --listen http:tcp:0) on a loopback port it reports,
    requiring the bearer token it made."""
    bob = start_bob(tmp_path_factory.mktemp("bob"), "--listen", "http:tcp:0")
    try:
        assert bob.token is not None, bob.stderr()
        yield bob
    finally:
        bob.stop()


@pytest.mark.parametrize("scheme", ["http", "ws"])
def test_bob_served_remotely_breaks_no_must_rule(remote_bob: ListeningBob, scheme: str) -> None:
    """The whole suite (probes and exploration) runs by URL against bob served remotely,
    with the bearer token bob requires: every MUST rule that applies holds, over
    Streamable HTTP and over WebSocket."""
    url = remote_bob.url.replace("http://", f"{scheme}://")
    headers = list(remote_bob.headers().items())
    result = run_suite([], url=url, timeout=10.0, headers=headers)
    assert result.error is None, result.error
    broken = [
        f"{r.rule.id}: {r.findings[0].message}"
        for r in result.results
        if r.status == "fail" and r.rule.level == "MUST"
    ]
    assert broken == []
    assert sum(r.status == "pass" for r in result.results) > 30


def test_process_rules_are_not_applicable_with_a_reason(acpkit_url: str) -> None:
    """By URL, the stdio framing, EOF and spawn-directory rules are reported not applicable
    with the reason (never silently dropped); the report names the URL only."""
    rules = ["FRAME-004", "FRAME-009", "SESSION-009", "HTTP-001"]
    result = run_suite([], url=acpkit_url, only=rules, timeout=5.0, explore=False)
    by_id = {r.rule.id: r for r in result.results}
    for rule_id in ("FRAME-004", "FRAME-009", "SESSION-009"):
        assert by_id[rule_id].status == "not-applicable"
        assert "agent tested by URL" in by_id[rule_id].reason
    assert result.agent == acpkit_url


def test_header_values_never_reach_the_report(acpkit_url: str) -> None:
    """``--header`` values (tokens) appear nowhere in the report or its replay command;
    their names do."""
    out = io.StringIO()
    secret = "s3cr3t-token-value"
    status = main(
        [
            "--url",
            acpkit_url,
            "--header",
            f"Authorization:Bearer {secret}",
            "--rules",
            "HTTP-001",
            "--report",
            "text",
        ],
        out=out,
    )
    assert status in (0, 1)
    assert secret not in out.getvalue()
    assert "Authorization" in out.getvalue()


def test_only_jsonrpc_bodies_of_post_answers_are_judged_as_messages() -> None:
    """A POST answer's body reaches the observer only when it is a JSON-RPC message: the
    Python SDK answers a bad POST with 400 and ``{"error": "Invalid JSON"}``, an HTTP error
    body, which is not an agent message breaking RPC-009."""
    assert jsonrpc_body(b'{"error": "Invalid JSON"}') is None
    assert jsonrpc_body(b"not json") is None
    assert jsonrpc_body(b"") is None
    assert jsonrpc_body(b"[]") is None
    message = b'{"jsonrpc": "2.0", "id": 1,\n "result": {}}'
    assert jsonrpc_body(message) == b'{"jsonrpc": "2.0", "id": 1,  "result": {}}'
    assert jsonrpc_body(b'[{"jsonrpc": "2.0", "id": 1, "result": {}}]') is not None


def test_url_and_command_together_are_refused() -> None:
    """``--url`` with an agent command is a usage error (exit status 2)."""
    assert main(["--url", "ws://127.0.0.1:9/acp", "--", "bob"], out=io.StringIO()) == 2
    assert main(["--url", "ftp://127.0.0.1/acp"], out=io.StringIO()) == 2


BROKEN = [
    ("post-200", "HTTP-002", "answered 200, not 202"),
    ("no-connection-id", "HTTP-001", "no Acp-Connection-Id header"),
    ("wrong-415", "HTTP-003", "answered 400, not 415"),
    ("no-406", "HTTP-004", "answered 200, not 406"),
    ("missing-id-200", "HTTP-005", "answered 200, not 400"),
    # a deleted connection's id is an unknown id: HTTP-008 fails with it (also true)
    ("unknown-id-400", "HTTP-006 HTTP-008", "answered 400, not 404"),
    ("batch-202", "HTTP-007", "answered 202, not 501"),
    ("delete-keeps", "HTTP-008", "deleted connection was answered"),
    ("out-of-order", "HTTP-009", "after the turn's session/prompt response"),
    ("no-session-header-ok", "HTTP-010", "answered 202, not 400"),
    ("post-held", "HTTP-002", "got no HTTP answer within 5s"),
    ("one-stream", "HTTP-012", "the connection's GET stream delivered the notification"),
    ("unknown-session-200", "HTTP-013", "answered 200, not 404"),
]


@pytest.mark.parametrize(("fault", "rule_id", "words"), BROKEN)
def test_a_broken_server_is_caught_rule_by_rule(fault: str, rule_id: str, words: str) -> None:
    """Each deliberately broken transport behaviour fails exactly its rule(s), the first
    with a finding that says what was wrong; no other HTTP rule fails."""
    process, url = _start([str(FIXTURES / "conformance_remote" / "broken_server.py"), fault])
    try:
        result = _transport(url, ["HTTP"])
    finally:
        _stop(process)
    assert result.error is None, result.error
    failed = {r.rule.id: r for r in result.results if r.found}
    expected = rule_id.split()
    assert set(failed) == set(expected), {
        k: [f.message for f in v.findings] for k, v in failed.items()
    }
    findings = failed[expected[0]].findings
    assert any(words in f.message for f in findings), findings


def test_the_conforming_fixture_server_passes_and_needs_its_cookie() -> None:
    """The fixture without a fault (which refuses requests lacking the cookie it set at
    initialize) passes every HTTP rule: the tester keeps and returns cookies."""
    process, url = _start([str(FIXTURES / "conformance_remote" / "broken_server.py"), "none"])
    try:
        result = _transport(url, ["HTTP"])
    finally:
        _stop(process)
    assert result.error is None, result.error
    statuses = _statuses(result)
    assert {statuses[r] for r in CLEARTEXT_HTTP_RULES} == {"pass"}, statuses


def _sdk_server(script: str) -> Iterator[str]:
    pytest.importorskip("acp.http.asgi")
    pytest.importorskip("uvicorn")
    process, line = _start([str(FIXTURES / script)])
    try:
        yield f"http://127.0.0.1:{line.split()[1]}/acp"
    finally:
        process.kill()
        process.wait()


def test_official_python_sdk_http_server_passes_the_http_rules() -> None:
    """The official Python SDK 0.12.1's Streamable HTTP server (acp.http under uvicorn)
    passes every HTTP rule but HTTP-011 (TLS only): it delivers a session's messages on
    the session-scoped GET, as the RFD's current revision has it (HTTP-012)."""
    for url in _sdk_server("remote/sdk_http_server.py"):
        result = _transport(url, ["HTTP"])
        assert result.error is None, result.error
        statuses = _statuses(result)
        assert {statuses[r] for r in CLEARTEXT_HTTP_RULES} == {"pass"}, statuses


def test_official_python_sdk_websocket_server_passes_the_websocket_rules() -> None:
    """The official Python SDK 0.12.1's WebSocket server passes WS-001..003."""
    pytest.importorskip("acp.ws")
    for url in _sdk_server("remote_ws/sdk_ws_server.py"):
        result = _transport(url.replace("http://", "ws://"), ["WS"])
        assert result.error is None, result.error
        statuses = _statuses(result)
        assert {statuses[r] for r in WS_RULES} == {"pass"}, statuses


def _turns_and_http_rules(mode: str) -> tuple[SuiteResult, dict[str, str]]:
    """TURN-001, TURN-002 and the HTTP rules judged against the broken server in ``mode``:
    the result and each rule's status."""
    process, url = _start([str(FIXTURES / "conformance_remote" / "broken_server.py"), mode])
    try:
        result = run_suite(
            [], url=url, only=["TURN-001", "TURN-002", "HTTP"], timeout=5.0, explore=False
        )
    finally:
        _stop(process)
    assert result.error is None, result.error
    return result, _statuses(result)


def test_turns_routed_to_session_streams_are_still_judged() -> None:
    """A server that holds a session's messages for its session-scoped GET (the official
    SDK servers' routing, the RFD's current one) has its turns judged: the tester opens
    that stream once the connection stream stays silent, TURN-001 and TURN-002 pass, and
    so does every HTTP rule (HTTP-012 included)."""
    result, statuses = _turns_and_http_rules("session-streams")
    assert statuses["TURN-001"] == "pass", statuses
    assert statuses["TURN-002"] == "pass", statuses
    assert not result.failed, statuses
    assert {statuses[r] for r in CLEARTEXT_HTTP_RULES} == {"pass"}, statuses


def test_turns_of_a_one_stream_server_are_still_judged() -> None:
    """A server of the RFD's 2026-04-23 revision (every message on the connection's GET,
    a session's GET opened idle) has its turns judged all the same: TURN-001 and TURN-002
    pass and only HTTP-012 fails, naming what the connection stream carried."""
    result, statuses = _turns_and_http_rules("one-stream")
    assert statuses["TURN-001"] == "pass", statuses
    assert statuses["TURN-002"] == "pass", statuses
    assert {r.rule.id for r in result.failed} == {"HTTP-012"}, statuses
    (failed,) = result.failed
    assert any("the response to session/prompt" in f.message for f in failed.findings)
