"""
Start an agent, send it one prompt, print what it streams back.

    python minimal_client.py "Hello, agent" -- python minimal_agent.py
"""

import os
import sys

from acpkit import run_client, schema
from acpkit.connection import Client, ClientConnection


class PrintingClient(Client):
    """Writes the agent's message chunks to stdout as they arrive."""

    def session_update(self, params: schema.SessionNotification) -> None:
        update = params.update
        if isinstance(update, schema.AgentMessageChunk) and isinstance(
            update.content, schema.TextContentBlock
        ):
            sys.stdout.write(update.content.text)
            sys.stdout.flush()


async def ask(conn: ClientConnection, prompt: str) -> None:
    await conn.initialize()
    session = await conn.new_session(schema.NewSessionRequest(cwd=os.getcwd(), mcp_servers=[]))
    response = await conn.prompt(
        schema.PromptRequest(
            session_id=session.session_id, prompt=[schema.TextContentBlock(text=prompt)]
        )
    )
    sys.stdout.write(f"\n[stop reason: {response.stop_reason}]\n")


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: minimal_client.py PROMPT -- AGENT-COMMAND [ARGS...]")
    prompt, command = sys.argv[1], sys.argv[3:]
    # Start the agent, run ask(), then close the agent's stdin and wait for it to exit.
    run_client(lambda conn: ask(conn, prompt), command, client=PrintingClient())
