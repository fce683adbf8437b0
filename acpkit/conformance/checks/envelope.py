"""
Framing and envelope (the content side; the observer judges the bytes, the JSON-RPC envelope
and the ids): the ids of the agent's own requests, error messages, and what the
``initialize`` result states.

- RPC-011: every request of the agent: its id is not null, not fractional
- RPC-012: every error answer: a concise single sentence
- INIT-003, INIT-004, MCP-001: the initialize result (`judge_initialize`, called by the probes)
- INIT-005: session/new and session/prompt (of a session the agent made) answered -32601
- AUTH-001: the initialize result's terminal auth methods, against auth.terminal
"""

from __future__ import annotations

from typing import Any

from acpkit.conformance.checks.base import Family, describe
from acpkit.conformance.checks.state import AnswerContext

__all__ = ["EnvelopeChecks"]


class EnvelopeChecks(Family):
    """See the module docstring."""

    rules = ("RPC-011", "RPC-012", "INIT-003", "INIT-004", "INIT-005", "MCP-001", "AUTH-001")

    def agent_message(
        self, method: str, params: dict[str, Any], raw_params: Any, is_request: bool, index: int
    ) -> None:
        """RPC-011: the agent's request ids are not null and not fractional."""
        if not is_request or not self.judge.agent_requests:
            return
        request_id = self.judge.agent_requests[-1].get("id")
        if request_id is None:
            self.violation("RPC-011", f"the agent's {method} request has id null", index)
        elif isinstance(request_id, float) and not request_id.is_integer():
            self.violation(
                "RPC-011", f"the agent's {method} request has the fractional id {request_id}", index
            )
        else:
            self.ok("RPC-011")

    def response(self, context: AnswerContext, index: int) -> None:
        """RPC-012 and INIT-005 on errors; INIT-005 and AUTH-001 on results."""
        method = context.method
        message = context.message
        if "error" in message:
            error = message.get("error")
            self.judge_error_message(method, error, index)
            code = error.get("code") if isinstance(error, dict) else None
            own_session = context.pending.session_id in self.state.created
            if code == -32601 and (
                method == "session/new" or (method == "session/prompt" and own_session)
            ):
                self.violation(
                    "INIT-005", f"{method} was answered -32601 (method not found)", index
                )
            return
        if method in ("session/new", "session/prompt"):
            self.ok("INIT-005")
        result = context.result
        if method == "initialize" and isinstance(result, dict):
            self._auth_methods(result, index)

    def judge_error_message(self, method: str, error: Any, index: int) -> None:
        """RPC-012 on any error answer (the observer also calls it for the answers to
        malformed lines, which reach no other check)."""
        text = error.get("message") if isinstance(error, dict) else None
        if not isinstance(text, str):
            return
        if not text.strip() or "\n" in text.strip() or len(text) > 300:
            self.violation(
                "RPC-012",
                f"the error answering {method} has the message {describe(text, 120)} "
                f"({len(text)} characters): not one concise sentence (details belong in "
                "error.data)",
                index,
            )
        else:
            self.ok("RPC-012")

    def _auth_methods(self, result: dict[str, Any], index: int) -> None:
        """AUTH-001: no terminal auth method unless the client enabled auth.terminal."""
        methods = result.get("authMethods")
        terminal = [
            m.get("id")
            for m in (methods if isinstance(methods, list) else [])
            if isinstance(m, dict) and m.get("type") == "terminal"
        ]
        if terminal and self.capability("auth", "terminal") is not True:
            self.violation(
                "AUTH-001",
                f"the initialize result advertises terminal auth method(s) {terminal} but the "
                "client did not set clientCapabilities.auth.terminal",
                index,
            )
        else:
            self.ok("AUTH-001")

    def judge_initialize(self, result: dict[str, Any], index: int | None = None) -> None:
        """
        INIT-003, INIT-004 and MCP-001 on an initialize result (called by the probes for the
        agents they start, so that a unit observer fed a bare result is not judged).
        """
        info = result.get("agentInfo")
        if not isinstance(info, dict):
            self.violation("INIT-003", "the initialize result has no agentInfo", index)
        else:
            missing = [k for k in ("name", "version") if not isinstance(info.get(k), str)]
            if missing:
                self.violation(
                    "INIT-003",
                    f"the initialize result's agentInfo lacks {' and '.join(missing)}: "
                    f"{describe(info)}",
                    index,
                )
            else:
                self.ok("INIT-003")
        caps = result.get("agentCapabilities")
        if not isinstance(caps, dict):
            self.violation(
                "INIT-004",
                f"the initialize result has no agentCapabilities object (got {describe(caps)})",
                index,
            )
            return
        self.ok("INIT-004")
        mcp = caps.get("mcpCapabilities")
        http = mcp.get("http") if isinstance(mcp, dict) else None
        if http is True:
            self.ok("MCP-001")
        else:
            self.violation(
                "MCP-001",
                "the initialize result's agentCapabilities.mcpCapabilities.http is "
                f"{'absent' if http is None else describe(http)}: MCP over HTTP not supported",
                index,
            )
