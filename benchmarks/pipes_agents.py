"""
The agents ``bench_pipes.py``, ``bench_pipelining.py`` and ``bench_roundtrip.py`` run as
child processes: ``acpkit``, ``sdk``, ``floor`` or ``twisted``.

``floor`` is the raw floor: a blocking loop that reads a line, ``json.loads`` it and writes
the ``json.dumps`` of its answer (flushed), with no framework.  ``twisted`` gives the same
answers from a bare Twisted protocol on stock ``StandardIO`` (``json.loads`` of each line,
``transport.write`` of each answer's ``json.dumps``): the floor of an agent on Twisted's
reactor.  All four answer
``session/new`` at once, and an empty prompt (one empty text block) with ``end_turn`` at
once; ``acpkit`` and ``sdk``, for a prompt ``stream N``, send N ``agent_message_chunk``
notifications before answering ``end_turn``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any, cast


def run_acpkit() -> None:
    from acpkit import run_agent, schema
    from acpkit.connection import Agent, AgentConnection, negotiate_version

    class BenchAgent(Agent):
        def __init__(self, conn: AgentConnection) -> None:
            self.conn = conn
            self.count = 0

        def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
            return schema.InitializeResponse(
                protocol_version=negotiate_version(params.protocol_version)
            )

        def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
            self.count += 1
            return schema.NewSessionResponse(session_id=f"s{self.count}")

        async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
            block = params.prompt[0]
            assert isinstance(block, schema.TextContentBlock)
            words = block.text.split()
            n = int(words[1]) if words else 0
            for i in range(n):
                await self.conn.session_update(
                    params.session_id,
                    schema.AgentMessageChunk(content=schema.TextContentBlock(text=f"chunk {i} ")),
                )
            return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)

    run_agent(BenchAgent)


def run_sdk() -> None:
    from acp import PROTOCOL_VERSION, run_agent, update_agent_message_text
    from acp.interfaces import Agent
    from acp.schema import InitializeResponse, NewSessionResponse, PromptResponse

    class BenchAgent:
        count = 0

        def on_connect(self, conn: Any) -> None:
            self.conn = conn

        async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
            return InitializeResponse(protocol_version=PROTOCOL_VERSION)

        async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
            self.count += 1
            return NewSessionResponse(session_id=f"s{self.count}")

        async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
            words = prompt[0].text.split()
            n = int(words[1]) if words else 0
            for i in range(n):
                await self.conn.session_update(session_id, update_agent_message_text(f"chunk {i} "))
            return PromptResponse(stop_reason="end_turn")

    # A partial agent (the SDK answers method-not-found for the rest), cast to its protocol.
    asyncio.run(run_agent(cast(Agent, BenchAgent())))


def run_floor() -> None:
    import json

    out = sys.stdout.buffer
    count = 0
    for line in sys.stdin.buffer:
        message = json.loads(line)
        if "method" not in message or "id" not in message:
            continue
        reply, count = answer(message, count)
        out.write(json.dumps(reply).encode() + b"\n")
        out.flush()


def answer(message: dict[str, Any], count: int) -> tuple[dict[str, Any], int]:
    """The floor's answer to a request, and the sessions made so far."""
    result: dict[str, Any]
    if message["method"] == "initialize":
        result = {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}
    elif message["method"] == "session/prompt":
        result = {"stopReason": "end_turn"}
    else:
        count += 1
        result = {"sessionId": f"s{count}"}
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}, count


def twisted_floor(on_lost: Callable[[], object] = lambda: None) -> Any:
    """
    The ``twisted`` agent's protocol: ``json.loads`` of each line, ``transport.write`` of
    each answer's ``json.dumps`` (the floor's answers); ``on_lost`` is called when its
    connection ends.  Twisted is imported here, not by the other agents.
    """
    import json

    from twisted.internet.protocol import Protocol

    class Floor(Protocol):
        buffer = b""
        count = 0

        def dataReceived(self, data: bytes) -> None:
            *lines, self.buffer = (self.buffer + data).split(b"\n")
            for line in lines:
                message = json.loads(line)
                if "method" in message and "id" in message:
                    reply, self.count = answer(message, self.count)
                    self.transport.write(json.dumps(reply).encode() + b"\n")  # type: ignore[union-attr]

        def connectionLost(self, reason: object = None) -> None:
            on_lost()

    return Floor()


def run_twisted() -> None:
    from twisted.internet import reactor, stdio

    stdio.StandardIO(twisted_floor(reactor.stop))
    reactor.run()


if __name__ == "__main__":
    {"acpkit": run_acpkit, "sdk": run_sdk, "floor": run_floor, "twisted": run_twisted}[
        sys.argv[1]
    ]()
