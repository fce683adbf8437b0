"""
The exit policy (issue 23, item 7): SHOULD findings are warnings, exit 1 only for a MUST
finding, a stale baseline entry or (``--strict``) a warning; the baseline of accepted findings
(``--expected-failures``); the same in every report format and in the pytest plugin.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from acpkit.conformance import cli
from acpkit.conformance.baseline import BaselineError, load_baseline, parse_baseline
from acpkit.conformance.observer import Verdicts
from acpkit.conformance.report import SuiteResult, format_report, rule_results
from acpkit.conformance.rules import RULES_BY_ID, select_rules

RAW_AGENT = str(Path(__file__).parent.parent / "fixtures" / "broken_agents" / "raw_agent.py")


def _result(
    verdicts: Verdicts, *, strict: bool = False, expected: dict[str, str] | None = None
) -> SuiteResult:
    return SuiteResult(
        agent="agent",
        results=rule_results(verdicts, select_rules(), expected=expected),
        seed=0,
        profile="smoke",
        elapsed=1.0,
        replay="acpkit-conformance -- agent",
        strict=strict,
    )


def _verdicts(*findings: str, held: tuple[str, ...] = ("FRAME-001",)) -> Verdicts:
    verdicts = Verdicts()
    for rule_id in held:
        verdicts.ok(rule_id)
    for rule_id in findings:
        verdicts.violation(rule_id, f"{rule_id} broken", "")
    return verdicts


def _status(result: SuiteResult, rule_id: str) -> str:
    return next(r.status for r in result.results if r.rule.id == rule_id)


def test_should_findings_are_warnings_and_exit_zero() -> None:
    """A SHOULD finding alone is status ``warn`` and exit status 0; the text says why."""
    assert RULES_BY_ID["MCP-001"].level == "SHOULD"
    result = _result(_verdicts("MCP-001"))
    assert _status(result, "MCP-001") == "warn"
    assert result.warned and not result.failed
    assert result.exit_code == 0
    text = format_report(result, "text")
    assert "WARN  MCP-001" in text
    assert "exit status 0: 1 SHOULD rule(s) violated (warnings)" in text


def test_must_findings_exit_one() -> None:
    """A MUST finding is status ``fail`` and exit status 1, whatever the warnings."""
    result = _result(_verdicts("FRAME-003", "MCP-001"))
    assert _status(result, "FRAME-003") == "fail"
    assert result.exit_code == 1
    assert "exit status 1: 1 MUST rule(s) violated" in format_report(result, "text")


def test_strict_makes_warnings_fail() -> None:
    """With ``strict`` a SHOULD finding alone is exit status 1 (still status ``warn``)."""
    result = _result(_verdicts("MCP-001"), strict=True)
    assert _status(result, "MCP-001") == "warn"
    assert result.exit_code == 1


def test_baseline_accepts_listed_findings() -> None:
    """A finding of a rule the baseline lists is ``xfail`` and does not fail the run."""
    result = _result(_verdicts("FRAME-003"), expected={"FRAME-003": "known banner"})
    assert _status(result, "FRAME-003") == "xfail"
    assert result.exit_code == 0
    assert "expected failure: known banner" in format_report(result, "text")


def test_stale_baseline_entry_fails_the_run() -> None:
    """A listed rule that was judged and held is ``xpass``: a stale entry, exit status 1."""
    result = _result(_verdicts(held=("FRAME-001",)), expected={"FRAME-001": "old"})
    assert _status(result, "FRAME-001") == "xpass"
    assert result.exit_code == 1
    assert "1 stale baseline entry" in format_report(result, "text")


def test_listed_rule_not_judged_is_neither_stale_nor_accepted() -> None:
    """A listed rule the run could not judge stays not applicable and says it is listed."""
    verdicts = _verdicts()
    verdicts.skip("CAP-005", "loadSession is not advertised")
    result = _result(verdicts, expected={"CAP-005": "no load yet"})
    outcome = next(r for r in result.results if r.rule.id == "CAP-005")
    assert outcome.status == "not-applicable"
    assert "the baseline lists it" in outcome.reason
    assert result.exit_code == 0


def test_json_and_junit_carry_the_policy() -> None:
    """json has the verdict and strictness; junit fails a warning only under strict, shows
    it as output otherwise, skips an accepted finding and fails a stale entry."""
    verdicts = _verdicts("MCP-001", "FRAME-003", held=("FRAME-001", "RPC-001"))
    expected = {"FRAME-003": "banner", "RPC-001": "stale"}
    for strict, failures in ((False, 1), (True, 2)):
        result = _result(verdicts, strict=strict, expected=expected)
        document = json.loads(format_report(result, "json"))
        assert document["strict"] is strict and document["exit_code"] == 1
        assert document["verdict"].startswith("exit status 1")
        suite = ElementTree.fromstring(format_report(result, "junit"))
        assert suite.get("failures") == str(failures)
        cases = {case.get("name", "").split()[0]: case for case in suite.iter("testcase")}
        mcp = cases["MCP-001"]
        if strict:
            assert mcp.find("failure") is not None
        else:
            assert mcp.find("failure") is None
            out = mcp.find("system-out")
            assert out is not None and (out.text or "").startswith("WARNING (SHOULD)")
        assert cases["FRAME-003"].find("skipped") is not None
        stale = cases["RPC-001"].find("failure")
        assert stale is not None and "stale baseline entry" in stale.get("message", "")


def test_baseline_file_format(tmp_path: Path) -> None:
    """The baseline is TOML with an [expected-failures] table of RULE-ID = "reason"."""
    path = tmp_path / "baseline.toml"
    path.write_text('[expected-failures]\nSESSION-002 = "relative cwd on purpose"\n')
    assert load_baseline(path) == {"SESSION-002": "relative cwd on purpose"}


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[expected-failures]\nNOPE-001 = 'x'\n", "'NOPE-001' is not a rule id"),
        ("[expected-failures]\nRPC-003 = ''\n", "RPC-003 needs a reason"),
        ("[expected-failures]\nRPC-003 = 3\n", "RPC-003 needs a reason"),
        ("[expected]\nRPC-003 = 'x'\n", "unknown key(s) expected"),
        ("expected-failures = 'RPC-003'\n", "must be a table"),
        ("[expected-failures\n", "not valid TOML"),
    ],
)
def test_bad_baseline_is_a_clear_error(text: str, words: str) -> None:
    """A baseline that cannot be used raises BaselineError naming the problem."""
    with pytest.raises(BaselineError, match=None) as raised:
        parse_baseline(text)
    assert words in str(raised.value)


def test_cli_refuses_an_unusable_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--expected-failures naming a missing or bad file is a usage error (exit 2), said in
    one line, before any agent is started."""
    missing = tmp_path / "missing.toml"
    assert cli.main(["--expected-failures", str(missing), "--", "true"], out=io.StringIO()) == 2
    assert "cannot read the baseline" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text("[expected-failures]\nNOPE = 'x'\n")
    assert cli.main(["--expected-failures", str(bad), "--", "true"], out=io.StringIO()) == 2
    assert "'NOPE' is not a rule id" in capsys.readouterr().err


@pytest.mark.process
def test_cli_exit_status_for_a_should_finding(tmp_path: Path) -> None:
    """
    The raw agent without MCP over HTTP breaks only MCP-001 (SHOULD): exit 0 with a warning,
    exit 1 with --strict, exit 0 again with the rule in a baseline under --strict; the
    replay line carries --strict and the baseline.
    """
    command = ["--", sys.executable, RAW_AGENT, "no_mcp_http"]
    options = ["--profile", "smoke", "--timeout", "5", "--rules", "MCP-001"]
    out = io.StringIO()
    assert cli.main([*options, *command], out=out) == 0
    assert "WARN  MCP-001" in out.getvalue()
    out = io.StringIO()
    assert cli.main([*options, "--strict", *command], out=out) == 1
    assert "--strict" in out.getvalue().split("replay: ", 1)[1]
    baseline = tmp_path / "baseline.toml"
    baseline.write_text('[expected-failures]\nMCP-001 = "no MCP client yet"\n')
    out = io.StringIO()
    code = cli.main([*options, "--strict", "--expected-failures", str(baseline), *command], out=out)
    assert code == 0, out.getvalue()
    assert f"--expected-failures {baseline}" in out.getvalue()


# -- the pytest plugin --------------------------------------------------------------------


def _plugin_option() -> list[str]:
    import importlib.metadata

    names = {ep.name for ep in importlib.metadata.entry_points(group="pytest11")}
    return [] if "acpkit_conformance" in names else ["-p", "acpkit.conformance.pytest_plugin"]


def _pytest(options: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *_plugin_option(), *options],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.process
def test_plugin_warns_on_should_findings_and_fails_under_strict(tmp_path: Path) -> None:
    """
    In the pytest plugin a SHOULD finding passes its item with a ConformanceWarning;
    --acp-strict fails it; --acp-expected-failures makes it xfail, and a listed rule that
    holds fails its item as a stale entry.
    """
    agent = f"{sys.executable} {RAW_AGENT} no_mcp_http"
    base = ["--acp-agent", agent, "--acp-profile", "smoke", "--acp-timeout", "5", "-rxXs"]
    base += ["--acp-rules", "MCP-001,INIT-003"]
    plain = _pytest(base, tmp_path)
    assert plain.returncode == 0, plain.stdout[-3000:]
    assert "ConformanceWarning: MCP-001 (SHOULD) violated" in plain.stdout
    strict = _pytest([*base, "--acp-strict"], tmp_path)
    assert strict.returncode == 1, strict.stdout[-3000:]
    assert "MCP-001 (SHOULD) violated" in strict.stdout
    baseline = tmp_path / "baseline.toml"
    baseline.write_text('[expected-failures]\nMCP-001 = "no MCP yet"\nINIT-003 = "stale"\n')
    listed = _pytest([*base, "--acp-strict", "--acp-expected-failures", str(baseline)], tmp_path)
    assert listed.returncode == 1, listed.stdout[-3000:]
    assert "XFAIL" in listed.stdout and "no MCP yet" in listed.stdout
    assert "INIT-003: stale baseline entry" in listed.stdout
    summary = listed.stdout.strip().splitlines()[-1]
    assert "1 failed" in summary and "1 xfailed" in summary, summary


@pytest.mark.process
def test_plugin_refuses_an_unusable_baseline(tmp_path: Path) -> None:
    """--acp-expected-failures naming a bad file is a usage error (pytest exit status 4)."""
    bad = tmp_path / "bad.toml"
    bad.write_text("[expected-failures]\nNOPE = 'x'\n")
    result = _pytest(["--acp-agent", "true", "--acp-expected-failures", str(bad)], tmp_path)
    assert result.returncode == 4, result.stdout + result.stderr
    assert "'NOPE' is not a rule id" in result.stderr
