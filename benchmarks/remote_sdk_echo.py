"""
The official Python SDK 0.12.1's remote server (``acp.http.asgi``: Streamable HTTP and
WebSocket on one ASGI app, under uvicorn) serving an echo agent that answers like bob's
echo engine: ``Echo: <prompt>`` in ``agent_message_chunk`` updates of at most 24
characters cut at word boundaries (the same chunks, from bob's own chunker), each awaited.

``remote_sdk_echo.py [KEY CERT]``: with a PEM key and certificate, HTTPS (HTTP/1.1:
uvicorn serves no HTTP/2).  Prints ``PORT <n>`` on stdout once listening on a free loopback
port; runs until killed.
For benchmarks/bench_remote.py.
"""

import asyncio
import socket
import sys
from collections.abc import Callable
from typing import Any, cast

import uvicorn
from acp import PROTOCOL_VERSION, update_agent_message_text
from acp.http.asgi import create_asgi_app
from acp.interfaces import Agent
from acp.schema import InitializeResponse, NewSessionResponse, PromptResponse

from acpkit_agent.engines.echo import _chunks


class SdkEchoAgent:
    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.sessions = 0

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(protocol_version=PROTOCOL_VERSION)

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        self.sessions += 1
        return NewSessionResponse(session_id=f"echo-{self.sessions}")

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        text = "Echo: " + "".join(getattr(block, "text", "") for block in prompt)
        for chunk in _chunks(text):
            await self.conn.session_update(session_id, update_agent_message_text(chunk))
        return PromptResponse(stop_reason="end_turn")


async def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    factory = cast("Callable[[Any], Agent]", SdkEchoAgent)
    tls: dict[str, Any] = {}
    if len(sys.argv) == 3:
        tls = {"ssl_keyfile": sys.argv[1], "ssl_certfile": sys.argv[2]}
    config = uvicorn.Config(
        create_asgi_app(factory), log_level="warning", lifespan="off", backlog=1024, **tls
    )
    server = uvicorn.Server(config)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    await server.serve(sockets=[sock])


if __name__ == "__main__":
    asyncio.run(main())
