"""
The content checks: what the agent sends, judged against the session, turn, service and
extension rules whenever it sends it.

The observer (`acpkit.conformance.observer.Observer`) classifies each line (framing,
envelope, ids) and calls one object, `Checks`, through five methods: `Checks.request_sent`
and `Checks.notification_sent` for what the client sends, `Checks.client_answered` for the
client's answers to the agent's requests, `Checks.agent_message` for every request and
notification of the agent, and `Checks.response` for every answer of the agent.

`Checks` updates the shared bookkeeping (`state.Conversation`: sessions, turns, replays) and
hands each event, in context, to one object per rule family, each with the state its own
rules need and a table of what it judges in its module docstring:

- framing and envelope: `envelope`: RPC-011, RPC-012, INIT-003..005, MCP-001, AUTH-001
- sessions: `sessions`: SESSION-001/004/006, LIST-004, MODE-002, CONFIG-001..007
- turns and tool calls: `turns`: TURN-001..007, SESSION-008, TOOL-001..003
- cancellation: `cancellation`: CANCEL-003, CANCEL-004
- capabilities and paths: `capabilities`: CAP-001..004, TERMINAL, ELICIT-001..006, NOTICE,
  PATH-001, FS-001, SESSION-009/010
- extensibility: `extensibility`: EXT-001..004

The framing and envelope rules on bytes and ids are the observer's own; the remote
transport's rules (HTTP, WS) are judged by `acpkit.conformance.remote_driver`; the rules that
need a stimulus are probes (`acpkit.conformance.probes`, `probes_session`, `faults`).
This package imports nothing of the observer: it sees it through `base.Judge`.
"""

from __future__ import annotations

from typing import Any

from acpkit.conformance.checks.base import Family, Judge, PendingRequest, describe
from acpkit.conformance.checks.cancellation import CancellationChecks
from acpkit.conformance.checks.capabilities import (
    CapabilityChecks,
    form_schema_problem,
    url_is_plain_http,
    url_secret_problem,
)
from acpkit.conformance.checks.envelope import EnvelopeChecks
from acpkit.conformance.checks.extensibility import ExtensibilityChecks, custom_fields
from acpkit.conformance.checks.sessions import SessionChecks
from acpkit.conformance.checks.state import REPLAY_KINDS, TURN_UPDATES, Conversation, Replay
from acpkit.conformance.checks.turns import TurnChecks

__all__ = [
    "REPLAY_KINDS",
    "TURN_UPDATES",
    "Checks",
    "Family",
    "Judge",
    "custom_fields",
    "describe",
    "form_schema_problem",
    "url_is_plain_http",
    "url_secret_problem",
]


class Checks:
    """The families of content checks behind the one interface the observer calls."""

    def __init__(self, judge: Judge) -> None:
        self.state = Conversation()
        self.envelope = EnvelopeChecks(judge, self.state)
        self.families: tuple[Family, ...] = (
            self.envelope,
            SessionChecks(judge, self.state),
            TurnChecks(judge, self.state),
            CancellationChecks(judge, self.state),
            CapabilityChecks(judge, self.state),
            ExtensibilityChecks(judge, self.state),
        )

    # -- the observer's calls ----------------------------------------------------------------

    def request_sent(self, key: str, method: str, params: Any) -> None:
        """A request of the client (valid envelope); ``key`` is its id's key."""
        p = params if isinstance(params, dict) else {}
        self.state.request_sent(key, method, p)
        for family in self.families:
            family.request_sent(key, method, p)

    def notification_sent(self, method: str, params: Any) -> None:
        """A notification of the client."""
        p = params if isinstance(params, dict) else {}
        self.state.notification_sent(method, p)
        for family in self.families:
            family.notification_sent(method, p)

    def client_answered(self, request: dict[str, Any], response: dict[str, Any]) -> None:
        """The client answered one of the agent's requests."""
        self.state.client_answered(request, response)
        for family in self.families:
            family.client_answered(request, response)

    def agent_message(self, method: str, params: Any, is_request: bool, index: int) -> None:
        """A request or notification of the agent."""
        p = params if isinstance(params, dict) else {}
        for family in self.families:
            family.agent_message(method, p, params, is_request, index)
        if method == "session/update":
            context = self.state.update(p)
            if context is not None:
                for family in self.families:
                    family.session_update(context, index)

    def response(
        self, pending: PendingRequest, key: str, message: dict[str, Any], index: int
    ) -> None:
        """The agent answered one of the client's requests."""
        context = self.state.response(pending, key, message)
        for family in self.families:
            family.response(context, index)

    # -- what the probes read ---------------------------------------------------------------

    @property
    def finished_replays(self) -> dict[str, list[Replay]]:
        """Per session, its completed session/load replays."""
        return self.state.finished_replays

    @property
    def replayed(self) -> dict[str, int]:
        """Per session, the number of replayed updates of its last completed load."""
        return {
            session: len(replays[-1].updates)
            for session, replays in self.state.finished_replays.items()
        }

    @property
    def spawn_dir(self) -> str | None:
        """The directory the agent was spawned in, when it is not the session cwd."""
        return self.state.spawn_dir

    @spawn_dir.setter
    def spawn_dir(self, directory: str | None) -> None:
        self.state.spawn_dir = directory

    def turn_kinds(self, request_key: str) -> list[str]:
        """The kinds of the live updates of the turn of ``request_key`` (open or ended)."""
        return self.state.turn_kinds(request_key)

    def judge_initialize(self, result: dict[str, Any], index: int | None = None) -> None:
        """INIT-003, INIT-004 and MCP-001 on an initialize result (the probes call it)."""
        self.envelope.judge_initialize(result, index)
