"""
An agent whose answers stream from an OpenAI-compatible model through the ``openai``
SDK, an asyncio library: it runs on the asyncio reactor.

    OPENAI_BASE_URL=http://127.0.0.1:8080/v1 python model_agent.py
"""

import itertools
import os

import openai
from openai.types.chat import ChatCompletionMessageParam

from acpkit import run_agent, schema
from acpkit.connection import Agent, AgentConnection, negotiate_version


class ModelAgent(Agent):
    """Sends each session's conversation to the model and streams the answer back."""

    def __init__(self, conn: AgentConnection) -> None:
        self.conn = conn
        self.model = openai.AsyncOpenAI(
            base_url=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"),
            api_key=os.environ.get("OPENAI_API_KEY", "none"),
        )
        self.model_name = os.environ.get("OPENAI_MODEL", "default")
        self.histories: dict[str, list[ChatCompletionMessageParam]] = {}
        self.numbers = itertools.count(1)

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=negotiate_version(params.protocol_version),
            agent_info=schema.Implementation(name="model", version="1.0"),
        )

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        session_id = f"model-{next(self.numbers)}"
        self.histories[session_id] = []
        return schema.NewSessionResponse(session_id=session_id)

    async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        history = self.histories[params.session_id]
        text = "".join(b.text for b in params.prompt if isinstance(b, schema.TextContentBlock))
        history.append({"role": "user", "content": text})
        said: list[str] = []
        try:
            # The openai SDK (asyncio) and acpkit's session_update (a Deferred) are
            # awaited in the same coroutine.
            stream = await self.model.chat.completions.create(
                model=self.model_name, messages=history, stream=True
            )
            async with stream:  # closes the HTTP response, also when cancelled
                async for chunk in stream:
                    delta = chunk.choices[0].delta.content if chunk.choices else None
                    if delta:
                        said.append(delta)
                        await self.conn.session_update(
                            params.session_id,
                            schema.AgentMessageChunk(content=schema.TextContentBlock(text=delta)),
                        )
        finally:
            # Stopped by the user (asyncio.CancelledError) or not: the model will know
            # what it said so far.
            history.append({"role": "assistant", "content": "".join(said)})
        return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)


if __name__ == "__main__":
    run_agent(ModelAgent, reactor="asyncio")
