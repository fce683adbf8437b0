"""
acpkit-conformance: property-based conformance testing of third-party ACP agents.

Run ``acpkit-conformance [options] -- AGENT_COMMAND [ARGS…]`` (or
``python -m acpkit.conformance``), or use the pytest plugin (``pytest --acp-agent "CMD …"``).
Modules: `rules` (the catalogue), `observer` (checks every message), `driver` (blocking
byte-level client over real pipes), `services` (the simulated terminals and elicitation
answers it serves), `faults` (byte-stream faults), `machine` (probes and the
Hypothesis state machine), `report` (text / json / junit), `cli` (options, exit codes).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from acpkit.conformance.cli import main, run_suite
    from acpkit.conformance.report import SuiteResult
    from acpkit.conformance.rules import RULES, Rule

__all__ = ["RULES", "Rule", "SuiteResult", "main", "run_suite"]

# Imported on first use: the pytest plugin loads this package in every pytest run of a
# project that installed acpkit, and the tester's machinery (Hypothesis, jsonschema) is
# only needed when it actually tests an agent.
_WHERE = {
    "RULES": "rules",
    "Rule": "rules",
    "SuiteResult": "report",
    "main": "cli",
    "run_suite": "cli",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"acpkit.conformance.{_WHERE[name]}"), name)
