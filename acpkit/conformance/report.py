"""
Results of a conformance run and their formats: ``text`` (for people), ``json`` (for tools)
and ``junit`` (for CI dashboards: one test case per rule).

A rule's status is one of ``pass`` (checked at least once, never broken), ``fail`` (at least
one finding), ``slow`` (it could not be judged: each time it was about to be checked, the agent
did not answer within the step timeout — time is never a rule), ``not-applicable`` (with the
reason: the capability is not advertised, the agent answered prompts with an error, …) or
``skipped`` (deselected with ``--rules`` / ``--skip``).

Every finding, in every format, carries the rule's spec sentence (quoted verbatim) and the page
it comes from, not only the rule id.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from xml.etree import ElementTree

import attrs

from acpkit.conformance.observer import Finding, Verdicts
from acpkit.conformance.rules import RULES, Rule

__all__ = [
    "FORMATS",
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


@attrs.frozen
class SuiteResult:
    """The outcome of a whole run."""

    agent: str
    results: tuple[RuleResult, ...]
    seed: int
    profile: str
    elapsed: float
    replay: str
    machine_steps: str = ""
    machine_transcript: str = ""
    error: str | None = None
    timeout: float = 10.0
    notes: tuple[str, ...] = ()

    @property
    def failed(self) -> list[RuleResult]:
        """The rules with findings."""
        return [r for r in self.results if r.status == "fail"]

    @property
    def judged(self) -> int:
        """How many rules passed or failed (were judged at all)."""
        return sum(r.status in ("pass", "fail") for r in self.results)

    @property
    def exit_code(self) -> int:
        """0: every applicable rule holds; 1: a rule is violated; 2: could not test (the agent
        did not start, never answered ``initialize``, nothing could be judged in time, or the
        tester itself failed)."""
        if self.error is not None:
            return 2
        if self.failed:
            return 1
        return 0 if self.judged else 2


def rule_results(
    verdicts: Verdicts, selected: Sequence[Rule], rules: Sequence[Rule] = RULES
) -> tuple[RuleResult, ...]:
    """Turn collected verdicts into one `RuleResult` per catalogue rule."""
    chosen = {r.id for r in selected}
    results = []
    for rule in rules:
        findings = tuple(f for f in verdicts.findings if f.rule_id == rule.id)
        checks = verdicts.exercised.get(rule.id, 0)
        if rule.id not in chosen:
            results.append(RuleResult(rule, "skipped", reason="deselected"))
        elif findings:
            repeated = verdicts.repeated.get(rule.id, 0)
            results.append(RuleResult(rule, "fail", findings, checks=checks, repeated=repeated))
        elif checks:
            results.append(RuleResult(rule, "pass", checks=checks))
        elif rule.id in verdicts.undecided:
            reason = "could not judge: " + "; ".join(verdicts.undecided[rule.id][:2])
            results.append(RuleResult(rule, "slow", reason=reason))
        else:
            if rule.id in verdicts.offered:
                reason = "the client advertised the capability but the agent never used it"
            else:
                reason = verdicts.not_applicable.get(rule.id, "never exercised by this run")
            results.append(RuleResult(rule, "not-applicable", reason=reason))
    return tuple(results)


def _source(rule: Rule) -> str:
    return f"{rule.page} ({rule.section})" if rule.section else rule.page


def _finding_dict(rule: Rule, finding: Finding) -> dict[str, str]:
    return {**finding.as_dict(), "level": rule.level, "quote": rule.quote, "page": _source(rule)}


_MARKS = {
    "pass": "ok  ",
    "fail": "FAIL",
    "slow": "slow",
    "not-applicable": "n/a ",
    "skipped": "skip",
}


def _text(result: SuiteResult) -> str:
    out = [f"acpkit-conformance: {result.agent}"]
    if result.error is not None:
        out.append(f"CANNOT TEST: {result.error}")
        return "\n".join(out) + "\n"
    counts: dict[str, int] = {}
    for r in result.results:
        counts[r.status] = counts.get(r.status, 0) + 1
    for r in result.results:
        line = f"{_MARKS[r.status]} {r.rule.id:<12} {r.rule.level:<6} {r.rule.title}"
        if r.status in ("not-applicable", "slow"):
            line += f"  ({r.reason})"
        out.append(line)
    for r in result.failed:
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
    if result.machine_steps:
        out += ["", "--- minimal failing sequence (Hypothesis):", result.machine_steps.rstrip()]
    if result.machine_transcript:
        out += ["", "--- its transcript (ACPKIT_TRACE format):", result.machine_transcript.rstrip()]
    for note in result.notes:
        out += ["", f"note: {note}"]
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    out += [
        "",
        f"{summary}; profile {result.profile}, seed {result.seed}, step timeout "
        f"{result.timeout:g}s, {result.elapsed:.1f}s",
    ]
    if not result.judged:
        out.append("nothing could be judged (see the slow rules): exit status 2")
    if result.failed:
        out.append(f"replay: {result.replay}")
    return "\n".join(out) + "\n"


def _json(result: SuiteResult) -> str:
    document = {
        "agent": result.agent,
        "exit_code": result.exit_code,
        "error": result.error,
        "seed": result.seed,
        "profile": result.profile,
        "elapsed": round(result.elapsed, 3),
        "timeout": result.timeout,
        "replay": result.replay,
        "notes": list(result.notes),
        "rules": [
            {
                "id": r.rule.id,
                "title": r.rule.title,
                "level": r.rule.level,
                "status": r.status,
                "reason": r.reason,
                "checks": r.checks,
                "repeated": r.repeated,
                "quote": r.rule.quote,
                "page": _source(r.rule),
                "findings": [_finding_dict(r.rule, f) for f in r.findings],
            }
            for r in result.results
        ],
        "machine": {"steps": result.machine_steps, "transcript": result.machine_transcript},
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def _junit(result: SuiteResult) -> str:
    suite = ElementTree.Element(
        "testsuite",
        name="acpkit-conformance",
        tests=str(len(result.results)),
        failures=str(len(result.failed)),
        errors="1" if result.error else "0",
        skipped=str(sum(r.status in ("skipped", "not-applicable", "slow") for r in result.results)),
        time=f"{result.elapsed:.3f}",
    )
    properties = ElementTree.SubElement(suite, "properties")
    for name, value in (
        ("profile", result.profile),
        ("seed", str(result.seed)),
        ("timeout", f"{result.timeout:g}"),
        ("replay", result.replay),
    ):
        ElementTree.SubElement(properties, "property", name=name, value=value)
    if result.error is not None:
        case = ElementTree.SubElement(suite, "testcase", classname="agent", name="start")
        ElementTree.SubElement(case, "error", message=result.error)
    for r in result.results:
        case = ElementTree.SubElement(
            suite, "testcase", classname=r.rule.family, name=f"{r.rule.id} {r.rule.title}"
        )
        if r.status == "fail":
            failure = ElementTree.SubElement(case, "failure", message=r.findings[0].message)
            spec = f'spec ({r.rule.level}, {_source(r.rule)}): "{r.rule.quote}"'
            failure.text = "\n\n".join([spec, *(f"{f.message}\n{f.excerpt}" for f in r.findings)])
        elif r.status in ("skipped", "not-applicable", "slow"):
            ElementTree.SubElement(case, "skipped", message=r.reason or r.status)
    ElementTree.indent(suite)
    return ElementTree.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def format_report(result: SuiteResult, fmt: str) -> str:
    """``result`` in ``fmt`` (one of `FORMATS`)."""
    if fmt == "json":
        return _json(result)
    if fmt == "junit":
        return _junit(result)
    if fmt == "text":
        return _text(result)
    raise ValueError(f"unknown report format {fmt!r}; choose one of {', '.join(FORMATS)}")
