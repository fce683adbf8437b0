"""An agent for the terminal-UI benchmark in a real terminal: a prompt streams code.

``python benchmarks/tui_stream_agent.py KIND CHUNKS RATE`` (repository root on
``PYTHONPATH``): each prompt is answered with ``CHUNKS`` chunks of a fenced Python block
(``KIND`` ``code``) or of prose (``prose``), ``RATE`` chunks a second, four per write,
every line different (see ``bench_tui_stream.numbered_pieces``).
"""

from __future__ import annotations

import sys

from twisted.internet import defer, task

from acpkit import schema
from acpkit.connection import Agent, AgentConnection
from benchmarks.bench_tui_stream import numbered_pieces


class StreamAgent(Agent):
    """Answers each prompt with the benchmark's chunks (see the module docstring)."""

    def __init__(self, connection: AgentConnection, kind: str, chunks: int, rate: float) -> None:
        self.connection = connection
        self.kind, self.chunks, self.rate = kind, chunks, rate

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(protocol_version=1)

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id="s1")

    async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        from twisted.internet import reactor

        opening = "```python\n" if self.kind == "code" else ""
        pieces = [opening, *numbered_pieces(self.kind, self.chunks // 3 + 1)[: self.chunks]]
        for start in range(0, len(pieces), 4):
            for piece in pieces[start : start + 4]:
                chunk = schema.AgentMessageChunk(content=schema.TextContentBlock(text=piece))
                self.connection.session_update(params.session_id, chunk)
            await task.deferLater(reactor, 4 / self.rate, lambda: None)
        await defer.succeed(None)
        return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)


def main() -> None:
    """Serve on stdio."""
    from acpkit import run_agent

    kind, chunks, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    run_agent(lambda connection: StreamAgent(connection, kind, chunks, rate))


if __name__ == "__main__":
    main()
