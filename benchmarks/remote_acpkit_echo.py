"""
The control of benchmarks/bench_remote.py: a minimal acpkit agent behind
:func:`acpkit.remote.serve_remote`, answering like bob's echo engine (and like
remote_sdk_echo.py and remote_ts_echo.mjs): ``Echo: <prompt>`` in
``agent_message_chunk`` updates of at most 24 characters cut at word boundaries, each
awaited.

``python remote_acpkit_echo.py [ENDPOINT [MAX_CONNECTIONS]]`` (default ``tcp:0``, loopback,
no token; an ``ssl:0:privateKey=…:certKey=…`` endpoint serves HTTPS, HTTP/2 by ALPN;
``MAX_CONNECTIONS``, default 1000, as bob's ``--max-connections``).  Prints
``PORT <n>`` on stdout once listening; runs until killed.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator

from twisted.internet import reactor
from twisted.internet.interfaces import IListeningPort

from acpkit import schema
from acpkit.connection import Agent, AgentConnection, negotiate_version
from acpkit.remote import RemoteLimits, serve_remote

#: A word and the whitespace after it (bob's echo engine cuts the same way).
_PIECE = re.compile(r"\S+\s*|\s+")


def chunks(text: str, size: int = 24) -> Iterator[str]:
    """``text`` in chunks of at most ``size`` characters at word boundaries."""
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


class EchoAgent(Agent):
    def __init__(self, conn: AgentConnection) -> None:
        self.conn = conn
        self.sessions = 0

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=negotiate_version(params.protocol_version)
        )

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        self.sessions += 1
        return schema.NewSessionResponse(session_id=f"echo-{self.sessions}")

    async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        text = "Echo: " + "".join(
            block.text for block in params.prompt if isinstance(block, schema.TextContentBlock)
        )
        for chunk in chunks(text):
            await self.conn.session_update(
                params.session_id,
                schema.AgentMessageChunk(content=schema.TextContentBlock(text=chunk)),
            )
        return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)


def main() -> None:
    endpoint = sys.argv[1] if len(sys.argv) > 1 else "tcp:0"
    options = {} if endpoint.startswith("unix:") else {"no_token": True}
    max_connections = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    limits = RemoteLimits(max_connections=max_connections)

    def listening(port: IListeningPort) -> None:
        print(f"PORT {port.getHost().port}", flush=True)  # type: ignore[attr-defined]

    def failed(failure: object) -> None:
        print(f"FAILED {failure}", flush=True)
        reactor.stop()

    serve_remote(reactor, endpoint, EchoAgent, limits=limits, **options).addCallbacks(
        listening, failed
    )
    reactor.run()


if __name__ == "__main__":
    main()
