"""
``acpkit-conformance --url`` against every remote peer we have, each verdict pinned: the
official Python SDK 0.12.1's server (``acp.http`` under uvicorn) over Streamable HTTP and
over WebSocket (serving a well-behaved agent, tests/fixtures/conformance_remote/
sdk_conformance_agent.py, and the interop tests' toy agents), the official TypeScript SDK
2.4.0's server (``AcpServer`` behind Node's http server and ``ws``) over both, and bob
(``twistd -n acp-agent --listen``) over both.

Each test asserts the status of every rule (fixed probes, no exploration), so a regression
either way (a finding lost, a false finding, a "could not judge") fails. The verdicts:

- The SDK servers deliver a session's messages on its session-scoped ``GET``, as the RFD's
  current revision (2026-05-04) has it: HTTP-012 passes for both; the tester reads every
  stream, so the agents' ACP behaviour is judged (no "could not judge"): through the
  Python SDK's server the well-behaved agent passes TURN-001 and CANCEL-001.
- The TypeScript server answers a batch ``POST`` with ``400`` and a -32600 error, not the
  RFD's ``501`` (HTTP-007), and opens a ``GET`` naming an ``Acp-Session-Id`` it never
  issued instead of answering 404 (HTTP-013).
- The Python SDK's JSON-RPC layer answers a request without ``jsonrpc`` and one with an
  object id with -32601, not -32600 (RPC-004, SHOULD); its WebSocket server drops text
  that is not JSON without an answer (RPC-003, SHOULD). Over HTTP both SDKs refuse such a
  body with ``400`` before JSON-RPC: RPC-003 is not applicable there (the RFD is silent).
- The SDK peers' agents are the interop tests' toy agents (tests/fixtures/interop/
  sdk_agent.py, remote_ws/sdk_ws_server.py, interop_ts/ts_agent.mjs): one fixed session
  id (SESSION-001), any cwd accepted (SESSION-002), the prompt text read as a file path
  whatever the client's capabilities (CAP-001, PATH-001; the TypeScript one sends no path
  for a resource_link prompt, SCHEMA-001), no agentInfo (INIT-003), the Python ones no
  agentCapabilities (INIT-004), the TypeScript one no MCP over HTTP (MCP-001), and a turn
  cancelled during its permission request ends with an error (CANCEL-002). Every prompt
  of the tester is answered with an error (the path is outside the session), so TURN-001
  and CANCEL-001 are not applicable, with that reason.
- bob breaks only MCP-001 (SHOULD: MCP over HTTP is off by default).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from acpkit.conformance.cli import run_suite
from acpkit.conformance.report import SuiteResult
from acpkit.conformance.rules import RULES, RULES_BY_ID
from tests.conformance.test_conformance_remote import _start, remote_bob
from tests.conformance.test_pytest_plugin_cost import plugin_option
from tests.conformance.test_pytest_plugin_cost import run as run_pytest_command
from tests.listening_bob import ListeningBob
from tests.real_peers import NODE22, TS_SDK_MODULES, peer, require_peer

# One xdist worker runs this file's tests: its module-scoped fixture (the SDKs' servers) then
# runs once, not once per worker.
pytestmark = [pytest.mark.process, pytest.mark.xdist_group("conformance_remote_peers")]

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
__all__ = ["remote_bob"]  # the fixture, shared with tests/conformance/test_conformance_remote.py

COMMON_PASS = (
    "FRAME-001 FRAME-002 FRAME-003 RPC-001 RPC-002 RPC-005 RPC-006 RPC-007 RPC-008 RPC-009 "
    "RPC-010 RPC-012 RPC-013 INIT-001 INIT-002 INIT-005 SESSION-003 AUTH-001 EXT-001 EXT-004 "
    "EXT-005"
).split()
#: Genuine SHOULD warnings of every peer: none starts the stdio MCP server of session/new
#: ('Agents SHOULD connect to all MCP servers specified by the Client'; bob only with
#: [mcp] useClientServers).
COMMON_WARN = ["MCP-002"]
#: every HTTP rule judged over cleartext (HTTP-011 needs TLS)
HTTP_PASS = [f"HTTP-{n:03d}" for n in (*range(1, 11), 12, 13)]
WS_PASS = ["WS-001", "WS-002", "WS-003"]
#: The toy agents' genuine findings; TOOL-002: they ask permission for tool call 'call_1',
#: which no tool_call announced.
TOY_AGENT_FAIL = [
    *"INIT-003 CAP-001 PATH-001 SESSION-001 SESSION-002 CANCEL-002 TOOL-002".split(),
    *COMMON_WARN,
]
TOY_AGENT_PASS = ["RPC-011", "TURN-002", "CANCEL-004"]
#: A prompt for an unknown session is refused with -32002 or -32602 wherever it reaches the
#: agent; the Python SDK's HTTP server refuses it itself (HTTP 404): RPC-014 not applicable.
REACHES_AGENT = ["RPC-014"]

CONFORMING_PASS = [
    *COMMON_PASS,
    *"SCHEMA-001 INIT-003 INIT-004 INIT-006 CONTENT-001 SESSION-001 SESSION-002".split(),
    *"TURN-001 TURN-002 TURN-007 CANCEL-001 CANCEL-003 CANCEL-004 MCP-001".split(),
]

#: peer -> (rules that pass, rules that fail); every other rule is not applicable
VERDICTS: dict[str, tuple[list[str], list[str]]] = {
    "python-sdk-conforming-http": (
        [*CONFORMING_PASS, *HTTP_PASS],
        ["RPC-004", *COMMON_WARN],
    ),
    "python-sdk-conforming-ws": (
        [*CONFORMING_PASS, *WS_PASS, *REACHES_AGENT],
        ["RPC-003", "RPC-004", *COMMON_WARN],
    ),
    "python-sdk-http": (
        [*COMMON_PASS, *TOY_AGENT_PASS, "SCHEMA-001", *HTTP_PASS],
        [*TOY_AGENT_FAIL, "RPC-004", "INIT-004"],
    ),
    "python-sdk-ws": (
        [*COMMON_PASS, *TOY_AGENT_PASS, "SCHEMA-001", *WS_PASS, *REACHES_AGENT],
        [*TOY_AGENT_FAIL, "RPC-003", "RPC-004", "INIT-004"],
    ),
    "typescript-sdk-http": (
        [
            *COMMON_PASS,
            *TOY_AGENT_PASS,
            *REACHES_AGENT,
            "RPC-004",
            "INIT-004",
            *(r for r in HTTP_PASS if r not in ("HTTP-007", "HTTP-013")),
        ],
        [*TOY_AGENT_FAIL, "SCHEMA-001", "MCP-001", "HTTP-007", "HTTP-013"],
    ),
    "typescript-sdk-ws": (
        [*COMMON_PASS, *TOY_AGENT_PASS, *REACHES_AGENT, "RPC-003", "RPC-004", "INIT-004", *WS_PASS],
        [*TOY_AGENT_FAIL, "SCHEMA-001", "MCP-001"],
    ),
}
BOB_PASS = [
    *COMMON_PASS,
    *"RPC-003 RPC-004 SCHEMA-001 INIT-003 INIT-004 INIT-006 CONTENT-001".split(),
    *"SESSION-001 SESSION-002 TURN-001 TURN-002 TURN-006".split(),
    *REACHES_AGENT,
]
VERDICTS["bob-http"] = ([*BOB_PASS, *HTTP_PASS], ["MCP-001", *COMMON_WARN])
VERDICTS["bob-ws"] = ([*BOB_PASS, *WS_PASS], ["MCP-001", *COMMON_WARN])


def _check(peer_name: str, url: str, headers: Sequence[tuple[str, str]] = ()) -> SuiteResult:
    """Run the fixed probes against ``url``; every rule's status is the one pinned."""
    result = run_suite([], url=url, timeout=5.0, explore=False, headers=headers)
    assert result.error is None, result.error
    passing, failing = VERDICTS[peer_name]
    expected = {rule.id: "not-applicable" for rule in RULES}
    expected.update(dict.fromkeys(passing, "pass"))
    # a SHOULD finding is a warning (issue 23: only MUST findings fail a run)
    expected.update({r: "fail" if RULES_BY_ID[r].level == "MUST" else "warn" for r in failing})
    got = {r.rule.id: r.status for r in result.results}
    wrong = {
        rule_id: (got[rule_id], expected[rule_id])
        for rule_id in expected
        if got[rule_id] != expected[rule_id]
    }
    details = {r.rule.id: r.reason or [f.message for f in r.findings] for r in result.results}
    assert wrong == {}, {rule_id: (wrong[rule_id], details[rule_id]) for rule_id in wrong}
    return result


def _findings(result: SuiteResult, rule_id: str) -> list[str]:
    return [f.message for r in result.results if r.rule.id == rule_id for f in r.findings]


def _reason(result: SuiteResult, rule_id: str) -> str:
    return next(r.reason for r in result.results if r.rule.id == rule_id)


@pytest.fixture(scope="module")
def conforming_sdk_url() -> Iterator[str]:
    """The official Python SDK's ASGI app under uvicorn (HTTP and WebSocket) serving the
    well-behaved agent of tests/fixtures/conformance_remote/sdk_conformance_agent.py."""
    pytest.importorskip("acp.http.asgi")
    pytest.importorskip("uvicorn")
    script = FIXTURES / "conformance_remote" / "sdk_conformance_agent.py"
    process, line = _start([str(script)])
    try:
        yield f"http://127.0.0.1:{line.split()[1]}/acp"
    finally:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def python_sdk_url() -> Iterator[str]:
    """The official Python SDK's ASGI app under uvicorn (HTTP and WebSocket), serving the
    toy agent of tests/fixtures/remote_ws/sdk_ws_server.py."""
    pytest.importorskip("acp.http.asgi")
    pytest.importorskip("uvicorn")
    process, line = _start([str(FIXTURES / "remote_ws" / "sdk_ws_server.py")])
    try:
        yield f"http://127.0.0.1:{line.split()[1]}/acp"
    finally:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def python_sdk_http_url() -> Iterator[str]:
    """The official Python SDK's HTTP server (tests/fixtures/remote/sdk_http_server.py)
    serving the interop agent."""
    pytest.importorskip("acp.http.asgi")
    pytest.importorskip("uvicorn")
    process, line = _start([str(FIXTURES / "remote" / "sdk_http_server.py")])
    try:
        yield f"http://127.0.0.1:{line.split()[1]}/acp"
    finally:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def typescript_sdk_url() -> Iterator[str]:
    """The official TypeScript SDK's server (tests/fixtures/interop_ts/ts_agent.mjs) on
    Node 22; it exits when its stdin ends."""
    node = peer(NODE22)
    if node is None:
        node = require_peer(NODE22)
    modules = require_peer(TS_SDK_MODULES)
    require_peer(os.path.join(TS_SDK_MODULES, "ws"))
    process = subprocess.Popen(
        [node, str(FIXTURES / "interop_ts" / "ts_agent.mjs"), modules],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None and process.stdin is not None
    url = process.stdout.readline().strip()  # blocks until it listens (or dies)
    try:
        assert url.startswith("http://"), f"ts_agent.mjs printed {url!r}"
        yield url
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_python_sdk_server_judged_through_its_session_streams(conforming_sdk_url: str) -> None:
    """Through the Python SDK's Streamable HTTP server a well-behaved agent's turns and
    cancels are judged (TURN-001, CANCEL-001 pass: read on the session-scoped GET, where
    the RFD routes them, HTTP-012); the only finding is the SDK's JSON-RPC envelope's
    (RPC-004)."""
    result = _check("python-sdk-conforming-http", conforming_sdk_url)
    assert set(_findings(result, "RPC-004")) == {
        "a request without the jsonrpc member got error code -32601; expected -32600",
        "a request whose id is an object got error code -32601; expected -32600",
    }


def test_python_sdk_websocket_server_with_a_conforming_agent(conforming_sdk_url: str) -> None:
    """Over the Python SDK's WebSocket server the same agent passes every WS rule and its
    turn rules; text that is not JSON is dropped without an answer (RPC-003)."""
    result = _check("python-sdk-conforming-ws", conforming_sdk_url.replace("http://", "ws://"))
    assert any("dropped silently" in f for f in _findings(result, "RPC-003"))


def test_python_sdk_over_streamable_http(python_sdk_http_url: str) -> None:
    """The Python SDK's Streamable HTTP server: every HTTP rule judged over cleartext
    holds (HTTP-012: a session's messages on its session-scoped GET); its turns are read
    there (CANCEL-002 is judged: the turn's response was seen)."""
    result = _check("python-sdk-http", python_sdk_http_url)
    assert "HTTP 400" in _reason(result, "RPC-003")
    assert "answered session/prompt with an error" in _reason(result, "TURN-001")


def test_python_sdk_over_websocket(python_sdk_url: str) -> None:
    """The Python SDK's WebSocket server: WS-001..003 hold; text that is not JSON is
    dropped without an answer while later requests are answered (RPC-003)."""
    result = _check("python-sdk-ws", python_sdk_url.replace("http://", "ws://"))
    assert any("dropped silently" in f for f in _findings(result, "RPC-003"))


@pytest.mark.real_agent
def test_typescript_sdk_over_streamable_http(typescript_sdk_url: str) -> None:
    """The TypeScript SDK's Streamable HTTP server: a batch is answered 400, not 501
    (HTTP-007), a GET with an unknown Acp-Session-Id is opened, not answered 404
    (HTTP-013); a session's messages go to its session-scoped GET, as the RFD has it
    (HTTP-012 passes)."""
    result = _check("typescript-sdk-http", typescript_sdk_url)
    assert _findings(result, "HTTP-007") == [
        "a POST of a one-request batch was answered 400, not 501"
    ]
    assert _findings(result, "HTTP-013") == [
        "a GET with an unknown Acp-Session-Id was answered 200, not 404"
    ]


@pytest.mark.real_agent
def test_typescript_sdk_over_websocket(typescript_sdk_url: str) -> None:
    """The TypeScript SDK's WebSocket server: WS-001..003 and RPC-003/004 hold."""
    _check("typescript-sdk-ws", typescript_sdk_url.replace("http://", "ws://"))


@pytest.mark.parametrize("scheme", ["http", "ws"])
def test_bob(remote_bob: ListeningBob, scheme: str) -> None:
    """bob served remotely, with the bearer token it requires: every transport rule holds
    (HTTP-012 included: a session's messages on its session-scoped GET) and the only
    finding is MCP-001 (SHOULD)."""
    url = remote_bob.url.replace("http://", f"{scheme}://")
    _check(f"bob-{scheme}", url, list(remote_bob.headers().items()))


# -- the pytest plugin's --acp-url -----------------------------------------------------------


def test_pytest_plugin_tests_a_remote_agent_by_url(
    remote_bob: ListeningBob, tmp_path: Path
) -> None:
    """``pytest --acp-url URL`` collects one item per rule and runs them against the remote
    agent like ``acpkit-conformance --url``: bob passes the HTTP rules judged over cleartext
    (HTTP-011, TLS only, and every deselected rule are skipped); a header's value (bob's
    bearer token) never appears in the output."""
    secret = remote_bob.token
    assert secret is not None
    result = run_pytest(
        [
            *plugin_option(),
            "--acp-url",
            remote_bob.url,
            "--acp-header",
            f"Authorization:Bearer {secret}",
            "--acp-rules",
            "HTTP",
            "--acp-timeout",
            "5",
            "-rs",
        ],
        tmp_path,
    )
    summary = result.stdout.strip().splitlines()[-1]
    assert result.returncode == 0, summary + result.stderr[-2000:]
    assert f"{len(HTTP_PASS)} passed" in summary, summary
    assert f"{len(RULES) - len(HTTP_PASS)} skipped" in summary, summary  # HTTP-011 too
    assert "HTTP-011: cleartext http" in result.stdout
    assert secret not in result.stdout + result.stderr


def test_pytest_plugin_refuses_url_and_agent_together(tmp_path: Path) -> None:
    """``--acp-url`` with ``--acp-agent``, a URL of another scheme, or a header without a
    colon is a usage error (pytest's exit status 4) naming the problem."""
    cases = [
        (["--acp-url", "ws://127.0.0.1:9/acp", "--acp-agent", "bob"], "not both"),
        (["--acp-url", "ftp://127.0.0.1/acp"], "--acp-url: not a ws://"),
        (["--acp-url", "ws://127.0.0.1:9/acp", "--acp-header", "token"], "NAME:VALUE"),
    ]
    for options, words in cases:
        result = run_pytest([*plugin_option(), *options], tmp_path)
        assert result.returncode == 4, (options, result.stdout, result.stderr)
        assert words in result.stderr, (options, result.stderr)


def run_pytest(options: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m pytest OPTIONS`` in ``cwd`` (an empty directory: only the plugin's items)."""
    return run_pytest_command(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *options], cwd
    )
