"""
``ask_agent``: ask another ACP agent one question and return its answer.

The agent is named as in the agents file of the reference client
(:func:`acpkit_client.config.load_agents` on the session's cwd: ``$ACPKIT_DIR/acp.toml`` or
``~/.config/acpkit/acp.toml``, then ``<cwd>/.acpkit/acp.toml``).  Each call starts the agent
(:class:`acpkit_client.agents.AgentRun`, i.e. :func:`acpkit.io.spawn_agent`), sends
``initialize`` announcing ``elicitation.form``, ``session/new`` in the entry's cwd and one
``session/prompt`` with the question; the answer is the text of its
``agent_message_chunk`` updates.  The asked agent's process is stopped when the call ends,
fails or is cancelled.

While it works, the asked agent's questions go to OUR user, on our tool call
(:class:`~acpkit_agent.elicitation.UserAsker`): its ``elicitation/create`` forms are relayed
as ``elicitation/create`` when our client supports forms, else answered with an error; its
``session/request_permission`` requests are relayed with its own options.  It gets no file
system or terminal from us (not announced).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.logger import Logger
from zope.interface import implementer

from acpkit import __version__, schema
from acpkit.connection import Client, ClientConnection
from acpkit.errors import RPCError
from acpkit.interfaces import IClient
from acpkit_agent.elicitation import UserAsker
from acpkit_agent.tools.base import ArgumentError, ToolContext, ToolResult, text_arg

if TYPE_CHECKING:
    from acpkit_client.agents import AgentRun

__all__ = ["AskAgentTool", "AskingClient"]

_log = Logger()

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "agent": {
            "type": "string",
            "description": "The agent's name, as in the agents file (.acpkit/acp.toml).",
        },
        "question": {"type": "string", "description": "The question, with all the context."},
    },
    "required": ["agent", "question"],
}


@implementer(IClient)
class AskingClient(Client):
    """Our client side towards the asked agent: collects its answer, relays its questions."""

    def __init__(self, source: str, asker: UserAsker | None) -> None:
        self.source = source
        self.asker = asker
        self.session_id: str | None = None
        self.parts: list[str] = []

    def answer(self) -> str:
        """The answer so far: the text of the agent's message chunks."""
        return "".join(self.parts)

    def session_update(self, params: schema.SessionNotification) -> None:
        """Keep the text of ``agent_message_chunk`` updates of our session."""
        if self.session_id is not None and params.session_id != self.session_id:
            return
        update = params.update
        if isinstance(update, schema.AgentMessageChunk) and isinstance(
            update.content, schema.TextContentBlock
        ):
            self.parts.append(update.content.text)

    def request_permission(self, params: schema.RequestPermissionRequest) -> Any:
        """Relay to our user; without one (or on error) the answer is ``cancelled``."""
        cancelled = schema.RequestPermissionResponse(outcome=schema.CancelledPermissionOutcome())
        if self.asker is None:
            return cancelled
        d: Deferred[Any] = Deferred.fromCoroutine(self._relay_permission(params, cancelled))
        return d

    async def _relay_permission(
        self, params: schema.RequestPermissionRequest, cancelled: Any
    ) -> Any:
        assert self.asker is not None
        try:
            return await self.asker.relay_permission(params, self.source)
        except CancelledError:
            raise
        except Exception as error:
            _log.warn(
                "[acp] ask_agent {agent}: relaying a permission request failed ({error})",
                agent=self.source,
                error=str(error) or type(error).__name__,
            )
            return cancelled

    def create_elicitation(self, params: Any) -> Any:
        """Relay the form to our user (an error when nobody can be asked)."""
        if self.asker is None:
            raise RPCError(-32601, f"{self.source}: nobody can be asked here")
        return self.asker.relay_elicitation(params, self.source)


def _excerpt(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@attrs.define
class AskAgentTool:
    """Asks another configured ACP agent one question (module docstring)."""

    name: str = "ask_agent"
    kind: str = "other"
    description: str = (
        "Ask another coding agent (configured by name in the agents file, .acpkit/acp.toml) "
        "one question and get its answer. The agent starts for this question only and "
        "stops after it, so include all the context it needs."
    )
    parameters: Mapping[str, Any] = attrs.field(factory=lambda: dict(_PARAMETERS))
    environ: Mapping[str, str] | None = None
    """The environment for the agents-file lookup and the agent (None: ours)."""
    stop_grace: float = 2.0
    """Seconds the asked agent has to exit after its stdin closes (then SIGTERM, SIGKILL)."""

    def title(self, args: Mapping[str, Any]) -> str:
        """``ask_agent: <agent>: <question excerpt>``."""
        agent = args.get("agent")
        question = args.get("question")
        title = f"ask_agent: {agent}" if isinstance(agent, str) and agent else "ask_agent"
        if isinstance(question, str) and question.strip():
            title += f": {_excerpt(question)}"
        return title

    def locations(self, args: Mapping[str, Any], cwd: str) -> list[str]:
        """No files."""
        return []

    def needs_permission(self, args: Mapping[str, Any]) -> bool:
        """Always (when ``yolo = false``): it starts a program that may do anything."""
        return True

    def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Deferred[ToolResult]:
        """Start the agent, ask, stop it; cancelling stops it too."""
        try:
            agent = text_arg(args, "agent")
            question = text_arg(args, "question")
        except ArgumentError as error:
            return succeed(ToolResult(output=f"[ask_agent: {error}]", failed=True))
        assert agent is not None and question is not None
        if not question.strip():
            return succeed(ToolResult(output="[ask_agent: the question is empty]", failed=True))
        asker: UserAsker | None = getattr(ctx, "asker", None)
        return Deferred.fromCoroutine(self._ask(ctx, asker, agent, question))

    async def _ask(
        self, ctx: ToolContext, asker: UserAsker | None, name: str, question: str
    ) -> ToolResult:
        # The client's agent launcher loads on the first ask, not at bob's start.
        from acpkit_client.agents import AgentRun, AgentStartError
        from acpkit_client.config import load_agents

        environ = self.environ if self.environ is not None else os.environ
        agents = load_agents(ctx.cwd, environ)
        try:
            entry = agents.find(name)
        except KeyError:
            known = ", ".join(repr(a.name) for a in agents.agents) or "none"
            refused = "".join(f"; refused: {error}" for error in agents.errors)
            return ToolResult(
                output=f"[ask_agent: no agent named {name!r} (the agents are {known}){refused}]",
                failed=True,
            )
        run = AgentRun(entry, ctx.cwd, environ)
        client = AskingClient(entry.name, asker)
        try:
            conn = run.spawn(ctx.reactor, client)
        except AgentStartError as error:
            return ToolResult(output=f"[ask_agent: {name}: {error}]", failed=True)
        _log.info("[acp] ask_agent: started {agent} in {cwd}", agent=name, cwd=run.cwd)
        try:
            return await self._converse(conn, client, run, name, question)
        finally:
            await run.stop(self.stop_grace)
            _log.info("[acp] ask_agent: {agent} stopped", agent=name)

    async def _converse(
        self, conn: ClientConnection, client: AskingClient, run: AgentRun, name: str, question: str
    ) -> ToolResult:
        step = "initialize"
        try:
            await conn.initialize(
                client_capabilities=schema.ClientCapabilities(
                    elicitation=schema.ElicitationCapabilities(
                        form=schema.ElicitationFormCapabilities()
                    )
                ),
                client_info=schema.Implementation(
                    name="acpkit-agent",
                    title="ask_agent (acpkit reference agent)",
                    version=__version__,
                ),
            )
            step = "session/new"
            session = await conn.new_session(schema.NewSessionRequest(cwd=run.cwd, mcp_servers=[]))
            client.session_id = session.session_id
            step = "session/prompt"
            response = await conn.prompt(
                schema.PromptRequest(
                    session_id=session.session_id,
                    prompt=[schema.TextContentBlock(text=question)],
                )
            )
        except CancelledError:
            raise
        except Exception as error:
            reason = str(error) or type(error).__name__
            partial = client.answer()
            tail = f"\n{name} had answered so far:\n{partial}" if partial else ""
            output = f"[ask_agent: {name}: {step} failed: {reason}]{tail}"
            return ToolResult(output=output, failed=True)
        answer = client.answer()
        stop = str(response.stop_reason.value)
        if stop != "end_turn":
            note = f"[{name} stopped: {stop}]"
            return ToolResult(output=f"{answer}\n{note}" if answer else note, failed=not answer)
        return ToolResult(output=answer if answer else f"[{name} gave an empty answer]")
