"""
The baseline of accepted findings (``--expected-failures FILE``): the rules an agent is known
to break, each with the reason it is accepted, as MCP's conformance runner has.

The file is TOML with one table::

    [expected-failures]
    SESSION-002 = "we accept a relative cwd on purpose (issue 12)"
    RPC-003 = "the SDK's reader drops a truncated line; fixed upstream in 0.13"

A rule listed there that has findings is reported ``xfail`` and does not change the exit
status. A listed rule that was judged and held is ``xpass``: the entry is stale and the run
fails (exit 1), so the baseline shrinks as the agent is fixed. A listed rule the run could not
judge (not applicable, too slow, deselected) is neither: the report says so.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path

__all__ = ["TABLE", "BaselineError", "load_baseline", "parse_baseline"]

#: The name of the table that lists the accepted findings.
TABLE = "expected-failures"


class BaselineError(ValueError):
    """The baseline file cannot be used (unreadable, not TOML, an unknown rule id...)."""


def parse_baseline(text: str, where: str = "the baseline") -> dict[str, str]:
    """The accepted findings in ``text`` (rule id -> reason); `BaselineError` names the
    problem and ``where`` the file."""
    from acpkit.conformance.rules import RULES_BY_ID

    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BaselineError(f"{where} is not valid TOML: {e}") from None
    unknown_tables = sorted(set(document) - {TABLE})
    if unknown_tables:
        raise BaselineError(
            f"{where}: unknown key(s) {', '.join(unknown_tables)} (only [{TABLE}] is read)"
        )
    table = document.get(TABLE, {})
    if not isinstance(table, Mapping):
        raise BaselineError(f'{where}: {TABLE} must be a table of RULE-ID = "reason"')
    accepted: dict[str, str] = {}
    for rule_id, reason in table.items():
        if rule_id.upper() not in RULES_BY_ID:
            raise BaselineError(f"{where}: {rule_id!r} is not a rule id (see --list-rules)")
        if not isinstance(reason, str) or not reason.strip():
            raise BaselineError(f"{where}: {rule_id} needs a reason (a non-empty string)")
        accepted[rule_id.upper()] = reason.strip()
    return accepted


def load_baseline(path: str | Path) -> dict[str, str]:
    """The accepted findings of the baseline file at ``path`` (see `parse_baseline`)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BaselineError(f"cannot read the baseline {str(path)!r}: {e}") from None
    return parse_baseline(text, f"the baseline {str(path)!r}")
