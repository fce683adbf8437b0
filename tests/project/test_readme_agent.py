"""
The README's minimal agent, run as written: it answers a prompt, and exits with status 0
once its stdin is closed.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from twisted.internet import reactor
from twisted.trial.unittest import TestCase

from acpkit import schema
from acpkit.connection import Client, ClientConnection
from acpkit.io import spawn_agent

pytestmark = pytest.mark.process

ROOT = Path(__file__).parent.parent.parent


def readme_agent() -> str:
    """The README's first Python block (the minimal agent)."""
    blocks = re.findall(r"```python\n(.+?)```", (ROOT / "README.md").read_text(), re.S)
    assert blocks, "the README has no Python block"
    return str(blocks[0])


class Chunks(Client):
    def __init__(self) -> None:
        self.texts: list[str] = []

    def session_update(self, params: schema.SessionNotification) -> None:
        update = params.update
        if isinstance(update, schema.AgentMessageChunk) and isinstance(
            update.content, schema.TextContentBlock
        ):
            self.texts.append(update.content.text)


class ReadmeAgentTests(TestCase):
    timeout = 60

    async def test_answers_then_exits_when_stdin_closes(self) -> None:
        """
        The README's agent answers a prompt with its echo; closing its stdin makes it
        exit by itself with status 0 (``AgentProcess.stop`` closes stdin first and would
        report a signal had it to end the process).
        """
        directory = Path(self.mktemp())
        directory.mkdir()
        program = directory / "echo_agent.py"
        program.write_text(readme_agent())
        client = Chunks()
        conn = ClientConnection(client)
        env = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        agent = spawn_agent(reactor, conn.protocol, sys.executable, [str(program)], env=env)
        self.addCleanup(agent.kill)
        await conn.initialize()
        session = await conn.new_session(
            schema.NewSessionRequest(cwd=str(directory.resolve()), mcp_servers=[])
        )
        response = await conn.prompt(
            schema.PromptRequest(
                session_id=session.session_id, prompt=[schema.TextContentBlock(text="hello")]
            )
        )
        self.assertEqual(response.stop_reason, schema.StopReason.END_TURN)
        self.assertEqual(client.texts, ["hello"])
        exited = await agent.stop(grace=20)
        self.assertEqual((exited.exit_code, exited.signal), (0, None), exited.stderr_tail)
        await conn.closed  # succeeds: a clean close
