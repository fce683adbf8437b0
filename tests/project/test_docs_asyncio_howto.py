"""
The how-to "Use asyncio libraries in an agent" (docs/how-to/use-asyncio-libraries.md)
runs as written: ``docs/examples/model_agent.py`` streams its answers from the scripted
model server with the ``openai`` SDK on the asyncio reactor, is cancelled mid-stream,
keeps the partial answer in the conversation, and exits 0 when its stdin closes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase

from acpkit import schema
from acpkit.connection import Client, ClientConnection
from acpkit.io import spawn_agent
from acpkit.testing.modelserver import ScriptedModelServer
from acpkit.testing.script import parse_script

pytestmark = pytest.mark.process

ROOT = Path(__file__).parent.parent.parent
AGENT = ROOT / "docs" / "examples" / "model_agent.py"
HOWTO = ROOT / "docs" / "how-to" / "use-asyncio-libraries.md"

SCRIPT = {
    "model": "scripted",
    "turn": [
        {"chunks": ["Hello", ", ", "world"]},
        # Stalls after its first chunk: the turn is cancelled while the SDK waits.
        {"chunks": ["Once", " upon", " a time"], "delay": 3600},
        {"chunks": ["ok"]},
    ],
}


class Chunks(Client):
    """Keeps the text the agent streams; tells when a given text has arrived."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.waiting: dict[str, Deferred[None]] = {}

    def session_update(self, params: schema.SessionNotification) -> None:
        update = params.update
        if isinstance(update, schema.AgentMessageChunk) and isinstance(
            update.content, schema.TextContentBlock
        ):
            self.texts.append(update.content.text)
            d = self.waiting.pop(update.content.text, None)
            if d is not None:
                d.callback(None)

    def said(self, text: str) -> Deferred[None]:
        d: Deferred[None] = Deferred()
        self.waiting[text] = d
        return d


class UseAsyncioLibrariesTests(TestCase):
    timeout = 60

    def test_howto_shows_the_example(self) -> None:
        """The how-to includes the example file and runs it with the asyncio reactor."""
        page = HOWTO.read_text()
        self.assertIn("```{literalinclude} ../examples/model_agent.py", page)
        self.assertIn('run_agent(ModelAgent, reactor="asyncio")', AGENT.read_text())

    async def test_streams_cancels_and_exits(self) -> None:
        """
        A turn streams the model's chunks; a turn cancelled mid-stream ends
        ``cancelled`` and the SDK hangs up on the server; the next request to the model
        carries the partial answer; closing stdin ends the agent with status 0.
        """
        server = ScriptedModelServer(parse_script(SCRIPT, source="script"), reactor=reactor)
        base_url = await server.start()
        self.addCleanup(server.stop)
        client = Chunks()
        conn = ClientConnection(client)
        env = {
            "OPENAI_BASE_URL": base_url,
            "OPENAI_MODEL": "scripted",
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        agent = spawn_agent(reactor, conn.protocol, sys.executable, [str(AGENT)], env=env)
        self.addCleanup(agent.kill)
        await conn.initialize()
        session = await conn.new_session(schema.NewSessionRequest(cwd=str(ROOT), mcp_servers=[]))

        def ask(text: str) -> Deferred[schema.PromptResponse]:
            return conn.prompt(
                schema.PromptRequest(
                    session_id=session.session_id, prompt=[schema.TextContentBlock(text=text)]
                )
            )

        response = await ask("Hi")
        self.assertEqual(response.stop_reason, schema.StopReason.END_TURN)
        self.assertEqual(client.texts, ["Hello", ", ", "world"])

        first_chunk = client.said("Once")
        stalled = ask("Tell me a story")
        await first_chunk
        conn.cancel(session.session_id)
        response = await stalled
        self.assertEqual(response.stop_reason, schema.StopReason.CANCELLED)
        await server.wait_for_disconnects(1)

        response = await ask("Go on")
        self.assertEqual(response.stop_reason, schema.StopReason.END_TURN)
        self.assertEqual(
            server.requests[-1]["messages"],
            [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello, world"},
                {"role": "user", "content": "Tell me a story"},
                {"role": "assistant", "content": "Once"},
                {"role": "user", "content": "Go on"},
            ],
        )
        exited = await agent.stop(grace=20)
        self.assertEqual((exited.exit_code, exited.signal), (0, None), exited.stderr_tail)
