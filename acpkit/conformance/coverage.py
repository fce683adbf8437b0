"""
What a run covered, said plainly at the top of its report: how many applicable MUST and
SHOULD rules were judged, how many were not exercised and what would exercise them (a model
server, a scenario file, commands, a capability), and, loudly, when no turn-level rule was
judged at all.

A rule *applies* unless it was deselected or can never apply on the transport the agent was
tested over (the HTTP and WebSocket rules over stdio; the process rules by URL); the rules
that can never apply are hidden from the text report unless asked for.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

import attrs

__all__ = [
    "TURN_LEVEL",
    "Coverage",
    "applies",
    "coverage_of",
]

#: Rules judged only on what the agent does in prompt turns beyond answering them: tool
#: calls, permissions, cancellation, files, terminals, plans, usage, elicitation, notices.
TURN_LEVEL = frozenset(
    {
        "TURN-003",
        "TURN-004",
        "TURN-006",
        "TOOL-001",
        "TOOL-002",
        "TOOL-003",
        "CANCEL-001",
        "CANCEL-002",
        "CANCEL-003",
        "CANCEL-004",
        "CAP-001",
        "CAP-002",
        "CAP-003",
        "CAP-004",
        "TERMINAL-001",
        "TERMINAL-002",
        "TERMINAL-003",
        "TERMINAL-004",
        "TERMINAL-005",
        "ELICIT-001",
        "ELICIT-002",
        "ELICIT-003",
        "ELICIT-004",
        "ELICIT-005",
        "ELICIT-006",
        "ELICIT-007",
        "NOTICE-001",
        "NOTICE-002",
        "FS-001",
    }
)
#: Other rules that only turns with that behaviour exercise (paths, the agent's requests).
_NEEDS_TURN_BEHAVIOUR = TURN_LEVEL | {
    "PATH-001",
    "SESSION-009",
    "SESSION-010",
    "TURN-002",
    "TURN-005",
    "TURN-007",
    "RPC-011",
}
#: What would exercise a rule a run never exercised, beyond turns that do things.
_HINTS = {
    "SESSION-005": "the agent does not advertise loadSession",
    "SESSION-008": "the agent does not advertise loadSession",
    "MODE-002": "the agent has no modes",
    "CONFIG-006": "the agent has no modes",
    "CONFIG-001": "the agent has no config options",
    "CONFIG-002": "the agent has no config options",
    "CONFIG-004": "the agent has no config options",
    "CONFIG-005": "the agent has neither modes nor config options",
    "CONFIG-007": "the agent has no config options",
    "LIST-004": "the agent sent no session_info_update (nothing provokes one)",
    "SESSION-003": "session/prompt for an unknown session was not sent",
}

#: The process rules: they belong to a child process on pipes, never to an agent by URL.
_PROCESS = frozenset(
    {
        "FRAME-004",
        "FRAME-005",
        "FRAME-006",
        "FRAME-007",
        "FRAME-008",
        "FRAME-009",
        "FRAME-010",
        "SESSION-009",
    }
)

#: What to do about a rule not exercised, by the start of its reason.
_REMEDIES: tuple[tuple[str, str], ...] = (
    ("loadSession is not advertised", "the agent does not advertise loadSession"),
    ("sessionCapabilities.", "the agent does not advertise the session capability it needs"),
    ("the session/new result has no modes", "the agent has no modes"),
    ("no config option", "the agent has no config option to change"),
    ("the agent lists no authMethods", "the agent lists no auth method"),
    ("the agent lists only terminal auth", "its only auth methods need a person"),
    ("session/new failed", "session/new failed (a login? see the probes' notes)"),
    ("the agent answered session/prompt with an error", "prompts failed (a model? a login?)"),
    ("the turn before session/load failed", "prompts failed (a model? a login?)"),
)

#: What exercises turn-level rules, in words.
_TURN_REMEDY = (
    "turns that do it: the agent's advertised commands are tried first; a model server "
    "(--model-server) or a scenario file (--scenarios FILE) provokes the rest"
)


class _Rule(Protocol):
    @property
    def id(self) -> str:
        """The rule id."""

    @property
    def level(self) -> str:
        """MUST or SHOULD."""

    @property
    def transport(self) -> str | None:
        """The only remote transport it applies to."""


class _Result(Protocol):
    @property
    def rule(self) -> _Rule:
        """The rule."""

    @property
    def status(self) -> str:
        """Its status."""

    @property
    def reason(self) -> str:
        """Why it is not applicable or slow."""


_JUDGED = frozenset({"pass", "fail", "warn", "xfail", "xpass"})


def applies(rule: _Rule, transport: str) -> bool:
    """Whether ``rule`` can ever apply to an agent tested over ``transport`` (``stdio``,
    ``http``, ``https``, ``websocket``)."""
    if transport == "stdio":
        return rule.transport is None
    if rule.id in _PROCESS:
        return False
    if rule.transport is None:
        return True
    if rule.transport == "https":
        return transport == "https"
    if rule.transport == "http":
        return transport in ("http", "https")
    return rule.transport == transport


@attrs.frozen
class Coverage:
    """How much of the catalogue a run judged, by level, and what was left."""

    #: level -> (judged, applicable)
    by_level: dict[str, tuple[int, int]]
    #: remedy -> the applicable rules not exercised for that reason
    not_exercised: dict[str, list[str]]
    #: rules that could not be judged in time
    slow: list[str]
    #: no turn-level rule was judged
    no_turn_rule: bool
    #: no prompt turn at all was judged (TURN-001)
    no_turn: bool
    hidden: int

    def lines(self) -> list[str]:
        """The coverage, in a few lines for the top of the text report."""
        judged = sum(j for j, _ in self.by_level.values())
        total = sum(n for _, n in self.by_level.values())
        parts = [f"{j} of {n} applicable {level} rules" for level, (j, n) in self.by_level.items()]
        out = [
            f"coverage: judged {' and '.join(parts)}; {total - judged} not exercised"
            + (f" ({len(self.slow)} too slow to judge)" if self.slow else "")
        ]
        if self.no_turn:
            out.append(
                "  NO PROMPT TURN WAS JUDGED: every turn rule is unexercised (see the notes: "
                "prompts failed or never ended)"
            )
        elif self.no_turn_rule:
            out.append(
                "  NO TURN-LEVEL RULE WAS JUDGED: the turns did nothing but answer (no tool "
                "call, permission, cancel, file, terminal, plan or usage)"
            )
        for remedy, rule_ids in self.not_exercised.items():
            out.append(f"  not exercised ({len(rule_ids)}): {_short(rule_ids)}: {remedy}")
        if self.hidden:
            out.append(
                f"  {self.hidden} rules that never apply over this transport are not shown "
                "(--show-all lists them)"
            )
        return out


def _short(rule_ids: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(rule_ids[:limit])
    return shown + (f" and {len(rule_ids) - limit} more" if len(rule_ids) > limit else "")


def _remedy(result: _Result) -> str:
    if result.rule.id in _NEEDS_TURN_BEHAVIOUR and (
        result.reason.startswith(("never exercised", "the client advertised"))
        or "during a turn" in result.reason
        or "before session/" in result.reason
    ):
        return _TURN_REMEDY
    for start, remedy in _REMEDIES:
        if result.reason.startswith(start):
            return remedy
    if result.reason.startswith("never exercised"):
        return _HINTS.get(result.rule.id, "nothing in this run provoked it")
    return result.reason.split(":", 1)[0]


def coverage_of(results: Iterable[_Result], transport: str) -> Coverage:
    """The coverage of a run's rule results over ``transport``."""
    by_level: dict[str, list[int]] = {"MUST": [0, 0], "SHOULD": [0, 0]}
    not_exercised: dict[str, list[str]] = {}
    slow: list[str] = []
    hidden = 0
    turn_judged = False
    turn_level_judged = False
    for result in results:
        rule = result.rule
        if not applies(rule, transport):
            hidden += 1
            continue
        if result.status == "skipped":
            continue
        counts = by_level.setdefault(rule.level, [0, 0])
        counts[1] += 1
        if result.status in _JUDGED:
            counts[0] += 1
            turn_judged |= rule.id == "TURN-001"
            turn_level_judged |= rule.id in TURN_LEVEL
        elif result.status == "slow":
            slow.append(rule.id)
        else:
            not_exercised.setdefault(_remedy(result), []).append(rule.id)
    return Coverage(
        by_level={level: (j, n) for level, (j, n) in by_level.items()},
        not_exercised=not_exercised,
        slow=slow,
        no_turn_rule=not turn_level_judged,
        no_turn=not turn_judged,
        hidden=hidden,
    )
