"""
``python -m acpkit.demo``: one ACP prompt turn between an in-memory client and agent,
with every message printed as it crosses the wire.

It needs nothing but acpkit: no model, no process, no network.  The agent echoes the
prompt back as streamed ``agent_message_chunk`` updates, announces a tool call and
finishes it, then ends the turn.
"""

from __future__ import annotations

import sys
from typing import TextIO

from acpkit import schema
from acpkit.connection import Agent, AgentConnection, Client, negotiate_version
from acpkit.testing.pair import connected_pair


class EchoAgent(Agent):
    """The smallest useful agent: it streams the prompt back, word by word."""

    def __init__(self, conn: AgentConnection) -> None:
        self.conn = conn

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=negotiate_version(params.protocol_version),
            agent_info=schema.Implementation(name="echo", version="1.0"),
        )

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id="demo-session")

    async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        sid = params.session_id
        words = " ".join(
            block.text for block in params.prompt if isinstance(block, schema.TextContentBlock)
        ).split(" ")
        await self.conn.session_update(
            sid,
            schema.ToolCallStart(
                tool_call_id="call_1",
                title="echo: the prompt",
                kind=schema.ToolKind.OTHER,
                status=schema.ToolCallStatus.PENDING,
            ),
        )
        for i, word in enumerate(words):
            chunk = word if i == 0 else " " + word
            await self.conn.session_update(
                sid, schema.AgentMessageChunk(content=schema.TextContentBlock(text=chunk))
            )
        await self.conn.session_update(
            sid,
            schema.ToolCallProgress(tool_call_id="call_1", status=schema.ToolCallStatus.COMPLETED),
        )
        return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)


class PrintingClient(Client):
    """A client that keeps the agent's text."""

    def __init__(self) -> None:
        self.text: list[str] = []

    def session_update(self, params: schema.SessionNotification) -> None:
        update = params.update
        if isinstance(update, schema.AgentMessageChunk) and isinstance(
            update.content, schema.TextContentBlock
        ):
            self.text.append(update.content.text)


class _WireTracer:
    """Prints each line the client sends (``->``) and receives (``<-``)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def received(self, line: bytes) -> None:
        self.out.write("<- " + line.decode("utf-8") + "\n")

    def sent(self, line: bytes) -> None:
        self.out.write("-> " + line.decode("utf-8") + "\n")


def main(out: TextIO = sys.stdout) -> int:
    """Play one turn and print the traffic; return the process exit status."""
    client = PrintingClient()
    pair = connected_pair(EchoAgent, client)
    pair.client.protocol.tracer = _WireTracer(out)
    pair.result(pair.client.initialize())
    session = pair.result(
        pair.client.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))
    )
    prompt = schema.PromptRequest(
        session_id=session.session_id,
        prompt=[schema.TextContentBlock(text="Hello from acpkit, one JSON message per line.")],
    )
    response = pair.result(pair.client.prompt(prompt))
    out.write(f"\nagent said: {''.join(client.text)}\nstop reason: {response.stop_reason}\n")
    return 0 if response.stop_reason == schema.StopReason.END_TURN else 1


if __name__ == "__main__":
    raise SystemExit(main())
