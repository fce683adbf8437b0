"""
Start an agent, send it one prompt, print what it streams back.

    python minimal_client.py "Hello, agent" -- python minimal_agent.py
"""

import os
import sys

from twisted.internet.interfaces import IReactorProcess
from twisted.internet.task import react

from acpkit import schema
from acpkit.connection import Client, ClientConnection
from acpkit.endpoints import spawn_agent


class PrintingClient(Client):
    """Writes the agent's message chunks to stdout as they arrive."""

    def session_update(self, params: schema.SessionNotification) -> None:
        update = params.update
        if isinstance(update, schema.AgentMessageChunk) and isinstance(
            update.content, schema.TextContentBlock
        ):
            sys.stdout.write(update.content.text)
            sys.stdout.flush()


async def main(reactor: IReactorProcess, prompt: str, command: list[str]) -> None:
    conn = ClientConnection(PrintingClient())
    agent = spawn_agent(reactor, conn.protocol, command[0], command[1:])
    try:
        await conn.initialize()
        session = await conn.new_session(schema.NewSessionRequest(cwd=os.getcwd(), mcp_servers=[]))
        response = await conn.prompt(
            schema.PromptRequest(
                session_id=session.session_id, prompt=[schema.TextContentBlock(text=prompt)]
            )
        )
        sys.stdout.write(f"\n[stop reason: {response.stop_reason}]\n")
    finally:
        await agent.stop()  # close its stdin, wait for it to exit


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: minimal_client.py PROMPT -- AGENT-COMMAND [ARGS...]")
    react(lambda reactor: main(reactor, sys.argv[1], sys.argv[3:]))
