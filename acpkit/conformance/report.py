"""
Results of a conformance run and their formats: ``text`` (for people), ``json`` (for tools)
and ``junit`` (for CI dashboards: one test case per rule).

A rule's status is one of ``pass`` (checked at least once, never broken), ``fail`` (a MUST
rule with at least one finding), ``warn`` (a SHOULD rule with findings: a warning), ``xfail``
(findings of a rule the baseline accepts, see `acpkit.conformance.baseline`), ``xpass`` (the
baseline lists the rule but it was judged and held: a stale entry), ``slow`` (it could not be
judged: each time it was about to be checked, the agent did not answer within the step
timeout — time is never a rule), ``not-applicable`` (with the reason: the capability is not
advertised, the agent answered prompts with an error, …) or ``skipped`` (deselected with
``--rules`` / ``--skip``).

The exit status (`SuiteResult.exit_code`) is 1 for a MUST finding, a stale baseline entry, or
(with ``strict``) a warning; 2 when nothing could be judged or the agent could not be tested;
else 0: SHOULD findings alone are warnings.

Every finding, in every format, carries the rule's spec sentence (quoted verbatim) and the page
it comes from, not only the rule id.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from xml.etree import ElementTree

import attrs

from acpkit.conformance.coverage import Coverage, applies, coverage_of
from acpkit.conformance.observer import Finding, Verdicts
from acpkit.conformance.rules import RULES, Rule

__all__ = [
    "FORMATS",
    "ExploredFailure",
    "RuleResult",
    "SuiteResult",
    "format_report",
    "rule_results",
]

FORMATS = ("text", "json", "junit")


@attrs.frozen
class RuleResult:
    """The outcome of one rule."""

    rule: Rule
    status: str
    findings: tuple[Finding, ...] = ()
    reason: str = ""
    checks: int = 0
    #: further findings of the rule that were only counted (repeats, beyond the first few)
    repeated: int = 0

    @property
    def found(self) -> bool:
        """The rule has findings (``fail``, ``warn`` or ``xfail``)."""
        return bool(self.findings)


@attrs.frozen
class ExploredFailure:
    """The (shrunk) example of the explorer that first broke one rule."""

    rule_id: str
    #: the example's steps, as the report shows them, and the finding
    steps: str
    #: its transcript (``ACPKIT_TRACE`` format)
    transcript: str
    #: what the shrinker did, in one line
    shrink: str = ""


@attrs.frozen
class SuiteResult:
    """The outcome of a whole run."""

    agent: str
    results: tuple[RuleResult, ...]
    seed: int
    profile: str
    elapsed: float
    replay: str
    #: the explorer's minimal failing example of each rule the probes did not break
    explored: tuple[ExploredFailure, ...] = ()
    #: rule id -> the command line that replays that rule's findings alone
    replays: Mapping[str, str] = attrs.field(factory=dict)
    error: str | None = None
    timeout: float = 10.0
    notes: tuple[str, ...] = ()
    #: warnings (SHOULD findings) fail the run too
    strict: bool = False
    #: how the agent was reached: ``stdio``, ``http``, ``https`` or ``websocket``
    transport: str = "stdio"

    @property
    def coverage(self) -> Coverage:
        """How much of the catalogue the run judged (`acpkit.conformance.coverage`)."""
        return coverage_of(self.results, self.transport)

    @property
    def machine_steps(self) -> str:
        """The steps of the explorer's first failing example ("" when none)."""
        return self.explored[0].steps if self.explored else ""

    @property
    def machine_transcript(self) -> str:
        """The transcript of the explorer's first failing example ("" when none)."""
        return self.explored[0].transcript if self.explored else ""

    @property
    def failed(self) -> list[RuleResult]:
        """The MUST rules with findings the baseline does not accept."""
        return [r for r in self.results if r.status == "fail"]

    @property
    def warned(self) -> list[RuleResult]:
        """The SHOULD rules with findings the baseline does not accept (warnings)."""
        return [r for r in self.results if r.status == "warn"]

    @property
    def found(self) -> list[RuleResult]:
        """Every rule with findings, whatever its level and the baseline."""
        return [r for r in self.results if r.found]

    @property
    def stale(self) -> list[RuleResult]:
        """Rules the baseline lists that were judged and held (stale entries)."""
        return [r for r in self.results if r.status == "xpass"]

    @property
    def judged(self) -> int:
        """How many rules were judged at all (held, or broken)."""
        return sum(r.status in _JUDGED for r in self.results)

    @property
    def exit_code(self) -> int:
        """0: no MUST rule is violated (SHOULD findings are warnings); 1: a MUST rule is
        violated, a baseline entry is stale, or (``strict``) a SHOULD rule is violated; 2: could
        not test (the agent did not start, never answered ``initialize``, nothing could be
        judged in time, or the tester itself failed)."""
        if self.error is not None:
            return 2
        if self.failed or self.stale or (self.strict and self.warned):
            return 1
        return 0 if self.judged else 2


_JUDGED = frozenset({"pass", "fail", "warn", "xfail", "xpass"})


def rule_results(
    verdicts: Verdicts,
    selected: Sequence[Rule],
    rules: Sequence[Rule] = RULES,
    expected: Mapping[str, str] | None = None,
) -> tuple[RuleResult, ...]:
    """
    Turn collected verdicts into one `RuleResult` per catalogue rule; ``expected`` is the
    baseline (rule id -> why its findings are accepted).
    """
    chosen = {r.id for r in selected}
    accepted = expected or {}
    results = []
    for rule in rules:
        findings = tuple(f for f in verdicts.findings if f.rule_id == rule.id)
        checks = verdicts.exercised.get(rule.id, 0)
        if rule.id not in chosen:
            results.append(RuleResult(rule, "skipped", reason="deselected"))
        elif findings:
            repeated = verdicts.repeated.get(rule.id, 0)
            if rule.id in accepted:
                status, reason = "xfail", f"expected failure: {accepted[rule.id]}"
            else:
                status, reason = ("fail" if rule.level == "MUST" else "warn"), ""
            results.append(
                RuleResult(rule, status, findings, reason, checks=checks, repeated=repeated)
            )
        elif checks and rule.id in accepted:
            reason = f"the baseline expects a finding ({accepted[rule.id]}), but the rule held"
            results.append(RuleResult(rule, "xpass", reason=reason, checks=checks))
        elif checks:
            results.append(RuleResult(rule, "pass", checks=checks))
        elif rule.id in verdicts.undecided:
            reason = "could not judge: " + "; ".join(verdicts.undecided[rule.id][:2])
            results.append(RuleResult(rule, "slow", reason=_listed(reason, rule.id, accepted)))
        else:
            if rule.id in verdicts.offered:
                reason = "the client advertised the capability but the agent never used it"
            else:
                reason = verdicts.not_applicable.get(rule.id, "never exercised by this run")
            results.append(
                RuleResult(rule, "not-applicable", reason=_listed(reason, rule.id, accepted))
            )
    return tuple(results)


def _listed(reason: str, rule_id: str, accepted: Mapping[str, str]) -> str:
    if rule_id not in accepted:
        return reason
    return f"{reason}; the baseline lists it, but this run could not judge it"


def _source(rule: Rule) -> str:
    return f"{rule.page} ({rule.section})" if rule.section else rule.page


def _finding_dict(rule: Rule, finding: Finding) -> dict[str, str]:
    return {**finding.as_dict(), "level": rule.level, "quote": rule.quote, "page": _source(rule)}


_MARKS = {
    "pass": "ok   ",
    "fail": "FAIL ",
    "warn": "WARN ",
    "xfail": "xfail",
    "xpass": "XPASS",
    "slow": "slow ",
    "not-applicable": "n/a  ",
    "skipped": "skip ",
}
_WITH_REASON = frozenset({"not-applicable", "slow", "xfail", "xpass"})
#: The order of the statuses in the summary line.
_STATUS_ORDER = ("fail", "warn", "xfail", "xpass", "pass", "slow", "not-applicable", "skipped")


def verdict_line(result: SuiteResult) -> str:
    """One sentence: the exit status and why."""
    failed, warned, stale = len(result.failed), len(result.warned), len(result.stale)
    parts = []
    if failed:
        parts.append(f"{failed} MUST rule(s) violated")
    if stale:
        parts.append(f"{stale} stale baseline entr{'y' if stale == 1 else 'ies'}")
    if warned:
        strict = " (--strict: they fail the run)" if result.strict else ""
        parts.append(f"{warned} SHOULD rule(s) violated (warnings){strict}")
    expected = sum(r.status == "xfail" for r in result.results)
    if expected:
        parts.append(f"{expected} expected failure(s) from the baseline")
    what = "; ".join(parts) if parts else "no rule violated"
    return f"exit status {result.exit_code}: {what}"


def _text(result: SuiteResult, show_all: bool = False) -> str:
    out = [f"acpkit-conformance: {result.agent}"]
    if result.error is not None:
        out.append(f"CANNOT TEST: {result.error}")
        return "\n".join(out) + "\n"
    if result.judged:
        out.append(verdict_line(result))
    out += result.coverage.lines()
    out.append("")
    counts: dict[str, int] = {}
    hidden = 0
    for r in result.results:
        if not show_all and not applies(r.rule, result.transport):
            hidden += 1
            continue
        counts[r.status] = counts.get(r.status, 0) + 1
        line = f"{_MARKS[r.status]} {r.rule.id:<12} {r.rule.level:<6} {r.rule.title}"
        if r.status in _WITH_REASON:
            line += f"  ({r.reason})"
        out.append(line)
    for r in result.found:
        for finding in r.findings:
            out += [
                "",
                f"--- {r.rule.id} ({r.rule.level}): {finding.message}",
                f'    spec: "{r.rule.quote}" ({_source(r.rule)})',
            ]
            if finding.excerpt:
                out.append(finding.excerpt.rstrip("\n"))
        if r.repeated:
            out += ["", f"--- {r.rule.id}: {r.repeated} more finding(s) like these, not shown"]
        if r.rule.id in result.replays:
            out.append(f"    replay {r.rule.id} alone: {result.replays[r.rule.id]}")
    for explored in result.explored:
        out += [
            "",
            f"--- minimal failing sequence for {explored.rule_id} (Hypothesis; {explored.shrink}):",
            explored.steps.rstrip(),
        ]
        if explored.transcript:
            out += ["", "--- its transcript (ACPKIT_TRACE format):", explored.transcript.rstrip()]
    for note in result.notes:
        out += ["", f"note: {note}"]
    summary = ", ".join(f"{counts[s]} {s}" for s in _STATUS_ORDER if counts.get(s))
    if hidden:
        summary += f" ({hidden} not shown: they never apply over {result.transport})"
    out += [
        "",
        f"{summary}; profile {result.profile}, seed {result.seed}, step timeout "
        f"{result.timeout:g}s, {result.elapsed:.1f}s",
    ]
    if not result.judged:
        out.append("nothing could be judged (see the slow rules): exit status 2")
    else:
        out.append(verdict_line(result))
    if result.found:
        out.append(f"replay: {result.replay}")
    return "\n".join(out) + "\n"


def _json(result: SuiteResult) -> str:
    document = {
        "agent": result.agent,
        "exit_code": result.exit_code,
        "verdict": verdict_line(result) if result.error is None else result.error,
        "strict": result.strict,
        "error": result.error,
        "seed": result.seed,
        "profile": result.profile,
        "elapsed": round(result.elapsed, 3),
        "timeout": result.timeout,
        "replay": result.replay,
        "transport": result.transport,
        "coverage": _coverage_dict(result.coverage),
        "notes": list(result.notes),
        "rules": [
            {
                "id": r.rule.id,
                "title": r.rule.title,
                "level": r.rule.level,
                "status": r.status,
                "applies": applies(r.rule, result.transport),
                "reason": r.reason,
                "checks": r.checks,
                "repeated": r.repeated,
                "quote": r.rule.quote,
                "page": _source(r.rule),
                "findings": [_finding_dict(r.rule, f) for f in r.findings],
                "replay": result.replays.get(r.rule.id, ""),
            }
            for r in result.results
        ],
        "explored": [
            {"rule": e.rule_id, "steps": e.steps, "transcript": e.transcript, "shrink": e.shrink}
            for e in result.explored
        ],
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def _coverage_dict(coverage: Coverage) -> dict[str, object]:
    return {
        "judged": {level: j for level, (j, _) in coverage.by_level.items()},
        "applicable": {level: n for level, (_, n) in coverage.by_level.items()},
        "not_exercised": coverage.not_exercised,
        "slow": coverage.slow,
        "no_turn_judged": coverage.no_turn,
        "no_turn_level_rule_judged": coverage.no_turn_rule,
    }


def _junit(result: SuiteResult) -> str:
    strict_warnings = len(result.warned) if result.strict else 0
    suite = ElementTree.Element(
        "testsuite",
        name="acpkit-conformance",
        tests=str(len(result.results)),
        failures=str(len(result.failed) + len(result.stale) + strict_warnings),
        errors="1" if result.error else "0",
        skipped=str(
            sum(r.status in ("skipped", "not-applicable", "slow", "xfail") for r in result.results)
        ),
        time=f"{result.elapsed:.3f}",
    )
    properties = ElementTree.SubElement(suite, "properties")
    for name, value in (
        ("profile", result.profile),
        ("seed", str(result.seed)),
        ("timeout", f"{result.timeout:g}"),
        ("replay", result.replay),
        ("strict", "true" if result.strict else "false"),
    ):
        ElementTree.SubElement(properties, "property", name=name, value=value)
    if result.error is not None:
        case = ElementTree.SubElement(suite, "testcase", classname="agent", name="start")
        ElementTree.SubElement(case, "error", message=result.error)
    for r in result.results:
        case = ElementTree.SubElement(
            suite, "testcase", classname=r.rule.family, name=f"{r.rule.id} {r.rule.title}"
        )
        spec = f'spec ({r.rule.level}, {_source(r.rule)}): "{r.rule.quote}"'
        evidence = "\n\n".join([spec, *(f"{f.message}\n{f.excerpt}" for f in r.findings)])
        if r.status == "fail" or (r.status == "warn" and result.strict):
            failure = ElementTree.SubElement(case, "failure", message=r.findings[0].message)
            failure.text = evidence
        elif r.status == "warn":
            # a warning: the case passes, the finding is in its output
            output = ElementTree.SubElement(case, "system-out")
            output.text = f"WARNING (SHOULD): {evidence}"
        elif r.status == "xpass":
            ElementTree.SubElement(case, "failure", message=f"stale baseline entry: {r.reason}")
        elif r.status == "xfail":
            skipped = ElementTree.SubElement(case, "skipped", message=r.reason)
            skipped.text = evidence
        elif r.status in ("skipped", "not-applicable", "slow"):
            ElementTree.SubElement(case, "skipped", message=r.reason or r.status)
    ElementTree.indent(suite)
    return ElementTree.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def format_report(result: SuiteResult, fmt: str, *, show_all: bool = False) -> str:
    """``result`` in ``fmt`` (one of `FORMATS`); the text lists the rules that never apply
    over the run's transport only with ``show_all``."""
    if fmt == "json":
        return _json(result)
    if fmt == "junit":
        return _junit(result)
    if fmt == "text":
        return _text(result, show_all)
    raise ValueError(f"unknown report format {fmt!r}; choose one of {', '.join(FORMATS)}")
