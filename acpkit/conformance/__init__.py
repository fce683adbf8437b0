"""
acpkit-conformance: property-based conformance testing of third-party ACP agents.

Run ``acpkit-conformance [options] -- AGENT_COMMAND [ARGS…]`` (or
``python -m acpkit.conformance``), or use the pytest plugin (``pytest --acp-agent "CMD …"``).
Modules: `rules` (the catalogue), `observer` (checks every message), `driver` (blocking
byte-level client over real pipes), `faults` (byte-stream faults), `machine` (probes and the
Hypothesis state machine), `report` (text / json / junit), `cli` (options, exit codes).
"""

from acpkit.conformance.cli import main, run_suite
from acpkit.conformance.report import SuiteResult
from acpkit.conformance.rules import RULES, Rule

__all__ = ["RULES", "Rule", "SuiteResult", "main", "run_suite"]
