"""
The official Python SDK's side of ``bench_ask.py``: an SDK client that does what
``acpkit-client ask PROMPT`` does, driving an SDK agent that answers like bob's echo engine.

- ``ask_sdk_pair.py client PROMPT``: spawns ``ask_sdk_pair.py agent`` (this file, the same
  interpreter), sends ``initialize``, ``session/new`` and one ``session/prompt``, writes the
  streamed ``agent_message_chunk`` texts to stdout, and exits when the turn ends (0 on
  ``end_turn``), terminating the agent at once (the SDK would wait for up to 2 s);
- ``ask_sdk_pair.py agent``: the SDK agent on stdio, answering a prompt with
  ``Echo: <prompt>`` in ``agent_message_chunk`` updates of at most 24 characters cut at
  word boundaries (bob's echo chunks), each awaited.

Neither imports acpkit: the SDK side pays only for the SDK (``agent-client-protocol``,
``pip install '.[bench]'``).
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import Iterator
from typing import Any, cast

_PIECE = re.compile(r"\S+\s*|\s+")


def chunks(text: str, size: int = 24) -> Iterator[str]:
    """``text`` in chunks of at most ``size`` characters at word boundaries (bob's echo)."""
    current = ""
    for match in _PIECE.finditer(text):
        piece = match.group()
        if current and len(current) + len(piece) <= size:
            current += piece
        else:
            if current:
                yield current
            current = piece
    if current:
        yield current


def run_agent() -> None:
    from acp import PROTOCOL_VERSION, update_agent_message_text
    from acp import run_agent as sdk_run_agent
    from acp.interfaces import Agent
    from acp.schema import InitializeResponse, NewSessionResponse, PromptResponse

    class EchoAgent:
        def on_connect(self, conn: Any) -> None:
            self.conn = conn

        async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
            return InitializeResponse(protocol_version=PROTOCOL_VERSION)

        async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
            return NewSessionResponse(session_id="echo-1")

        async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
            text = "Echo: " + "".join(getattr(block, "text", "") for block in prompt)
            for chunk in chunks(text):
                await self.conn.session_update(session_id, update_agent_message_text(chunk))
            return PromptResponse(stop_reason="end_turn")

    # A partial agent (the SDK answers method-not-found for the rest), cast to its protocol.
    asyncio.run(sdk_run_agent(cast(Agent, EchoAgent())))


async def ask(prompt: str) -> int:
    from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
    from acp.interfaces import Client

    class PrintingClient:
        def on_connect(self, conn: Any) -> None:
            pass

        async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
            if getattr(update, "session_update", None) == "agent_message_chunk":
                sys.stdout.write(update.content.text)

    client = cast(Client, PrintingClient())
    # The SDK's agent does not exit promptly when its stdin closes (the SDK waits up to
    # shutdown_timeout, 2 s by default, then terminates it): terminated at once here, so
    # that the SDK side is timed at its fastest.
    spawned = spawn_agent_process(
        client, sys.executable, __file__, "agent", transport_kwargs={"shutdown_timeout": 0.0}
    )
    async with spawned as (conn, _):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        session = await conn.new_session(cwd=os.getcwd(), mcp_servers=[])
        answer = await conn.prompt(session_id=session.session_id, prompt=[text_block(prompt)])
    sys.stdout.write("\n")
    sys.stdout.flush()
    return 0 if answer.stop_reason == "end_turn" else 1


if __name__ == "__main__":
    if sys.argv[1] == "agent":
        run_agent()
    else:
        sys.exit(asyncio.run(ask(sys.argv[2])))
