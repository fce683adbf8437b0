"""
The conformance plugin's test items: one `ConformanceItem` per rule, sharing one run of the
suite against the agent.

Imported by `acpkit.conformance.pytest_plugin` only when ``--acp-agent`` or ``--acp-url`` is
given, so that a pytest run that does not test an agent loads none of this (nor the rule
catalogue).
"""

from __future__ import annotations

import shlex
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from acpkit.conformance.rules import RULES, Rule, split_selectors

if TYPE_CHECKING:
    from acpkit.conformance.report import SuiteResult

__all__ = [
    "ConformanceFailure",
    "ConformanceItem",
    "ConformanceWarning",
    "conformance_items",
    "suite_result",
]

_RESULT_KEY = pytest.StashKey["SuiteResult"]()


def conformance_items(session: pytest.Session) -> list[pytest.Item]:
    """One item per rule of the catalogue, under one collector named ``acp-conformance``."""
    parent = _ConformanceCollector.from_parent(session, name="acp-conformance")
    return [ConformanceItem.from_parent(parent, name=rule.id, rule=rule) for rule in RULES]


class _ConformanceCollector(pytest.Collector):
    """The parent of the rule items (one agent run shared by all of them)."""

    def collect(self) -> Iterator[pytest.Item]:
        return iter(())


def _result(config: pytest.Config) -> SuiteResult:
    stash = config.stash
    if _RESULT_KEY not in stash:
        from acpkit.conformance.cli import run_suite  # the tester's machinery, when used
        from acpkit.conformance.pytest_options import headers_of, tls_of

        command = config.getoption("--acp-agent")
        stash[_RESULT_KEY] = run_suite(
            shlex.split(command) if command else [],
            url=config.getoption("--acp-url"),
            headers=headers_of(config.getoption("--acp-header")),
            tls=tls_of(config),
            profile=config.getoption("--acp-profile"),
            seed=config.getoption("--acp-seed"),
            timeout=config.getoption("--acp-timeout"),
            use_model_server=config.getoption("--acp-model-server"),
            only=split_selectors(config.getoption("--acp-rules")),
            skip=split_selectors(config.getoption("--acp-skip")),
            strict=config.getoption("--acp-strict"),
            expected_failures=config.getoption("--acp-expected-failures"),
            scenarios=config.getoption("--acp-scenarios"),
            discovery=config.getoption("--acp-discovery"),
        )
    return stash[_RESULT_KEY]


def suite_result(config: pytest.Config) -> SuiteResult | None:
    """The run's result, once an item ran it (``None`` before, or when no item ran)."""
    return config.stash.get(_RESULT_KEY, None)


class ConformanceFailure(Exception):
    """A rule was violated (the message lists the findings)."""


class ConformanceWarning(pytest.PytestWarning):
    """A SHOULD rule was violated: its item passes with this warning (``--acp-strict`` makes
    it a failure)."""


class ConformanceItem(pytest.Item):
    """One rule of the catalogue, checked against the agent under test."""

    def __init__(self, *, rule: Rule, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rule = rule

    def runtest(self) -> None:
        """Pass, fail with the findings, or skip when not applicable."""
        result = _result(self.config)
        if result.error is not None:
            pytest.fail(f"cannot test the agent: {result.error}", pytrace=False)
        outcome = next(r for r in result.results if r.rule.id == self.rule.id)
        rule = self.rule
        text = "\n\n".join(f"{f.message}\n{f.excerpt}" for f in outcome.findings)
        evidence = f'spec: "{rule.quote}" ({rule.page}, {rule.section})\n\n{text}'
        if outcome.status == "fail" or (outcome.status == "warn" and result.strict):
            raise ConformanceFailure(f"{rule.id} ({rule.level}) violated:\n{evidence}")
        if outcome.status == "warn":
            messages = "; ".join(f.message for f in outcome.findings)
            # raised while the item runs: pytest lists it in the warnings summary under it
            warnings.warn(
                ConformanceWarning(f"{rule.id} (SHOULD) violated: {messages}"), stacklevel=1
            )
        elif outcome.status == "xpass":
            raise ConformanceFailure(f"{rule.id}: stale baseline entry: {outcome.reason}")
        elif outcome.status == "xfail":
            pytest.xfail(f"{rule.id}: {outcome.reason}")
        elif outcome.status in ("not-applicable", "skipped", "slow"):
            pytest.skip(f"{self.rule.id}: {outcome.reason}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        """The findings, without a Python traceback."""
        if isinstance(excinfo.value, ConformanceFailure):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[str, int | None, str]:
        """Where the item comes from (the rule, not a file)."""
        return ("acp-conformance", None, f"{self.rule.id}: {self.rule.title}")
