"""
The wire rules' checks held against their quoted sentences (issue 23, item 5): each test
feeds the tester the traffic a sentence speaks of and states what the check must conclude.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

from acpkit.conformance.harness import SuiteConfig
from acpkit.conformance.observer import Observer, Verdicts
from acpkit.conformance.probes import probe_initialize


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
