"""An echo agent: it streams the prompt back to the client, on stdin/stdout."""

import itertools

from acpkit import run_agent, schema
from acpkit.connection import Agent, AgentConnection, negotiate_version


class EchoAgent(Agent):
    """Answers every prompt with its own text, streamed word by word."""

    def __init__(self, conn: AgentConnection) -> None:
        self.conn = conn  # to send session/update notifications to the client
        self.session_numbers = itertools.count(1)

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=negotiate_version(params.protocol_version),
            agent_info=schema.Implementation(name="echo", version="1.0"),
        )

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id=f"echo-{next(self.session_numbers)}")

    async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        text = " ".join(b.text for b in params.prompt if isinstance(b, schema.TextContentBlock))
        for i, word in enumerate(text.split(" ")):
            chunk = schema.TextContentBlock(text=word if i == 0 else " " + word)
            await self.conn.session_update(
                params.session_id, schema.AgentMessageChunk(content=chunk)
            )
        return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)


if __name__ == "__main__":
    run_agent(EchoAgent)  # serve on stdin/stdout; exit when the client closes stdin
