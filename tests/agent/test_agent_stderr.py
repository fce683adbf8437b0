"""
What bob writes on stderr during real turns: one line per event, under the right names
(issue 26, item 11).  A real bob process (``python -m acpkit_agent``) with the ``openai``
engine on the scripted model server, an MCP server and a language server that crash in
the middle of a call; its whole stderr is read and its lines asserted.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import reactor
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.trial.unittest import TestCase

from acpkit import schema
from acpkit.connection import ClientConnection
from acpkit.io import AgentProcess, spawn_agent
from acpkit.testing.modelserver import ScriptedModelServer
from acpkit.testing.script import parse_script
from tests.fixtures.agent.harness import RecordingClient
from tests.helpers import wait_until

pytestmark = pytest.mark.process

ROOT = Path(__file__).parent.parent.parent
MCP_CRASHING = ROOT / "tests" / "fixtures" / "mcp_servers" / "misbehaving_server.py"
LSP_CRASHING = ROOT / "tests" / "fixtures" / "lsp_servers" / "crashing_server.py"
MAIN = 'from lib import greet\n\nprint(greet("bob"))\n'
LIB = "def greet(name):\n    return name\n"


class BobStderrTests(TestCase):
    """bob's stderr through whole turns."""

    timeout = 120

    def setUp(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="bob-stderr-"))
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.cwd = self.tmp / "project"
        self.home = self.tmp / "home"
        self.cwd.mkdir(parents=True)
        self.home.mkdir()
        (self.cwd / "main.py").write_text(MAIN)
        (self.cwd / "lib.py").write_text(LIB)

    async def bob(
        self, turns: list[dict[str, Any]], extra: str = ""
    ) -> tuple[ClientConnection, AgentProcess]:
        """A bob process on the scripted model server; its client connection and session."""
        model = ScriptedModelServer(parse_script({"turn": turns}), reactor=reactor)
        base = await model.start()
        self.addCleanup(model.stop)
        config = self.cwd / "agent.toml"
        config.write_text(
            "[context]\ncontextWindow = 100000\n"
            f'[engine]\nname = "openai"\nbase_url = {json.dumps(base)}\nmodel = "scripted"\n'
            + extra
        )
        client = RecordingClient()
        conn = ClientConnection(client)
        agent = spawn_agent(
            reactor,
            conn.protocol,
            sys.executable,
            ["-m", "acpkit_agent", "--config", str(config)],
            env={"PYTHONPATH": str(ROOT), "HOME": str(self.home)},
            cwd=str(self.cwd),
            stderr_tail_lines=1000,
        )
        self.addCleanup(agent.stop)
        return conn, agent

    @staticmethod
    def lines(agent: AgentProcess) -> list[str]:
        return agent.stderr_tail().splitlines()

    def test_crashing_children_and_sigterm_one_line_each(self) -> Deferred[None]:
        """
        Two model calls print no HTTP factory lines; an MCP server's and a language
        server's stderr lines are each written once, named by what the child is (never
        "agent"); each crash is one line; SIGTERM is not logged as stdin closing; the
        initialize line names the negotiated protocol version.
        """

        async def run() -> None:
            conn, agent = await self.bob(
                [
                    {"tool_calls": [{"name": "crashy__work", "arguments": {}}]},
                    {
                        "tool_calls": [
                            {
                                "name": "lsp",
                                "arguments": {
                                    "action": "definition",
                                    "path": "main.py",
                                    "line": 3,
                                    "symbol": "greet",
                                },
                            }
                        ]
                    },
                    {"chunks": ["done"]},
                ],
                f"[mcp.servers.crashy]\ncommand = {json.dumps(sys.executable)}\n"
                f'args = [{json.dumps(str(MCP_CRASHING))}, "crash"]\n'
                f"[lsp.servers.pyls]\ncommand = {json.dumps(sys.executable)}\n"
                f'args = [{json.dumps(str(LSP_CRASHING))}]\nfiles = ["*.py"]\n',
            )
            init = await conn.initialize(
                schema.InitializeRequest(
                    protocol_version=99, client_capabilities=schema.ClientCapabilities()
                )
            )
            assert init.protocol_version == 1
            session = await conn.new_session(
                schema.NewSessionRequest(cwd=str(self.cwd), mcp_servers=[])
            )
            await conn.prompt(
                schema.PromptRequest(
                    session_id=session.session_id, prompt=[schema.TextContentBlock(text="go")]
                )
            )
            await wait_until(lambda: "[acp] turn done" in agent.stderr_tail())
            assert agent.pid is not None
            os.kill(agent.pid, signal.SIGTERM)
            await agent.exited
            lines = self.lines(agent)
            text = "\n".join(lines)
            assert not [line for line in lines if "factory" in line.lower()], text
            assert "agent crashy" not in text and 'agent "' not in text, text
            assert (
                "[acp] initialize: client (unnamed client), protocol version 1 (the client"
                " asked for 99), elicitation(form)=false" in lines
            ), text
            # the MCP server: its two stderr lines once each, its end once
            assert lines.count("MCP server crashy stderr: Traceback (most recent call last):") == 1
            assert lines.count("MCP server crashy stderr: RuntimeError: boom") == 1
            assert sum("RuntimeError: boom" in line for line in lines) == 2, text
            ends = [line for line in lines if "exited with status 3" in line]
            assert len(ends) == 2, text  # one for each server
            assert ends[0].startswith("[mcp] crashy (stdio) stopped: "), text
            assert ends[1].startswith("language server pyls exited with status 3"), text
            # SIGTERM: twistd says so; nothing claims that stdin closed
            after = lines[lines.index("Received SIGTERM, shutting down.") :]
            assert not [line for line in after if "stdin" in line], after
            assert "connection lost" not in text, text

        return ensureDeferred(run())

    def test_stdin_closed_is_one_line(self) -> Deferred[None]:
        """The client closing bob's stdin between turns: one line, then bob exits 0."""

        async def run() -> None:
            conn, agent = await self.bob([{"chunks": ["hi"]}])
            await conn.initialize()
            session = await conn.new_session(
                schema.NewSessionRequest(cwd=str(self.cwd), mcp_servers=[])
            )
            await conn.prompt(
                schema.PromptRequest(
                    session_id=session.session_id, prompt=[schema.TextContentBlock(text="go")]
                )
            )
            transport = conn.protocol.transport
            assert transport is not None
            transport.loseConnection()
            exited = await agent.exited
            assert exited.exit_code == 0
            lines = self.lines(agent)
            start = next(i for i, line in enumerate(lines) if line.startswith("[acp] turn done"))
            assert lines[start + 1 :] == [
                "[acp] stdin closed: exiting",
                "Main loop terminated.",
                "Server Shut Down.",
            ], lines

        return ensureDeferred(run())
