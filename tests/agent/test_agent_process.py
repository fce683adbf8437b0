"""
End-to-end tests of ``twistd -n acp-agent`` as a real process, of ``--listen`` on loopback,
of cancelling a real ``bash`` command, and of the ``openai`` engine failing against the
scripted model server (unreachable, HTTP 500, garbage) while the agent stays up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

import pytest
from twisted.internet import reactor
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.protocol import ServerFactory
from twisted.trial.unittest import TestCase

from acpkit import schema
from acpkit.connection import ClientConnection
from acpkit.errors import RPCError
from acpkit.io import AgentProcess, connect, spawn_agent
from acpkit.testing.modelserver import ScriptedModelServer
from acpkit.testing.script import parse_script
from acpkit_agent.config import AgentConfig
from acpkit_agent.tap import AgentService, build_runtime
from tests.fixtures.agent.harness import RecordingClient
from tests.helpers import wait_until

pytestmark = pytest.mark.process

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TWISTD = ["-c", "from twisted.scripts.twistd import run; run()", "-n", "acp-agent"]
ENV = {"PYTHONPATH": ROOT}


def frames(*messages: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(m).encode() + b"\n" for m in messages)


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": 1, "clientCapabilities": {}},
}


def _close(conn: ClientConnection) -> None:
    transport = conn.protocol.transport
    if transport is not None:
        transport.loseConnection()


def process_gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1].startswith("Z")
    except FileNotFoundError:
        return True


class TwistdProcessTests(TestCase):
    """The agent as ``twistd -n acp-agent`` child processes."""

    def setUp(self) -> None:
        self.cwd = tempfile.mkdtemp(prefix="bob-")
        self.home = tempfile.mkdtemp(prefix="bob-home-")

    def _env(self) -> dict[str, str]:
        return {**os.environ, **ENV, "HOME": self.home}

    def test_two_agents_in_one_directory_stdout_only_frames(self) -> None:
        """Two agents in one cwd both answer; stdout is only JSON-RPC frames; no twistd.pid."""
        new = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "session/new",
            "params": {"cwd": self.cwd, "mcpServers": []},
        }
        procs = [
            subprocess.Popen(
                [sys.executable, *TWISTD],
                cwd=self.cwd,
                env=self._env(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for _ in range(2)
        ]
        outputs = [p.communicate(frames(INIT, new), timeout=60) for p in procs]
        for proc, (out, err) in zip(procs, outputs, strict=True):
            assert proc.returncode == 0, err.decode()
            lines = out.decode().splitlines()
            decoded = [json.loads(line) for line in lines]
            assert all(m["jsonrpc"] == "2.0" for m in decoded)
            assert decoded[0]["result"]["agentInfo"]["name"] == "bob"
            assert "sessionId" in decoded[1]["result"]
            assert decoded[2]["params"]["update"]["sessionUpdate"] == "available_commands_update"
            text = err.decode()
            assert "bob " in text and "config:      none" in text
            assert "[acp] initialize: client" in text
        assert not os.path.exists(os.path.join(self.cwd, "twistd.pid"))

    def test_bad_config_exits_with_a_clear_error(self) -> None:
        """A config with an unknown key: exit 1, the message on stderr, nothing on stdout."""
        path = os.path.join(self.cwd, ".acpkit", "agent.toml")
        os.makedirs(os.path.dirname(path))
        with open(path, "w") as stream:
            stream.write("[context]\nkeepLastTurn = 3\n")
        proc = subprocess.run(
            [sys.executable, *TWISTD],
            cwd=self.cwd,
            env=self._env(),
            input=b"",
            capture_output=True,
            timeout=60,
        )
        assert proc.returncode == 1
        assert proc.stdout == b""
        assert (
            f"acp-agent: {path}: context.keepLastTurn is not a key this file has"
            in proc.stderr.decode()
        )

    def _spawn(self, client: RecordingClient) -> tuple[ClientConnection, AgentProcess]:
        conn = ClientConnection(client)
        agent = spawn_agent(
            reactor,
            conn.protocol,
            sys.executable,
            TWISTD,
            env={**ENV, "HOME": self.home},
            cwd=self.cwd,
        )
        self.addCleanup(agent.stop)
        return conn, agent

    def test_spawned_agent_streams_an_echo_prompt(self) -> Deferred[None]:
        """initialize, session/new and a prompt streamed by the echo engine, over pipes."""

        async def run() -> None:
            client = RecordingClient()
            conn, agent = self._spawn(client)
            init = await conn.initialize(client_info=schema.Implementation(name="t", version="1"))
            assert init.agent_info is not None and init.agent_info.name == "bob"
            session = await conn.new_session(schema.NewSessionRequest(cwd=self.cwd, mcp_servers=[]))
            response = await conn.prompt(
                schema.PromptRequest(
                    session_id=session.session_id,
                    prompt=[schema.TextContentBlock(text="hello  there, bob")],
                )
            )
            assert response.stop_reason == schema.StopReason.END_TURN
            assert client.text() == "Echo: hello  there, bob"
            kinds = [u["sessionUpdate"] for u in client.wire_updates()]
            assert kinds[0] == "available_commands_update"
            assert "usage_update" in kinds
            await wait_until(
                lambda: (
                    "[acp] turn done: 0 command(s) · 0 file op(s) · 0 skill(s)"
                    in agent.stderr_tail()
                )
            )

        return ensureDeferred(run())

    def test_cancel_kills_the_running_bash_command(self) -> Deferred[None]:
        """Cancel during a real bash command: cancelled, the call failed, the child is gone."""

        async def run() -> None:
            client = RecordingClient()
            conn, _ = self._spawn(client)
            await conn.initialize()
            session = await conn.new_session(schema.NewSessionRequest(cwd=self.cwd, mcp_servers=[]))
            pidfile = os.path.join(self.cwd, "sleep.pid")
            d = conn.prompt(
                schema.PromptRequest(
                    session_id=session.session_id,
                    prompt=[
                        schema.TextContentBlock(
                            text=f"run: sleep 60 & echo $! > {pidfile}.tmp; "
                            f"mv {pidfile}.tmp {pidfile}; wait"
                        )
                    ],
                )
            )
            await wait_until(lambda: os.path.exists(pidfile))
            with open(pidfile) as stream:
                pid = int(stream.read())
            assert not process_gone(pid)
            conn.cancel(session.session_id)
            response = await d
            assert response.stop_reason == schema.StopReason.CANCELLED
            statuses = [u.get("status") for u in client.tool_updates()]
            assert statuses == ["pending", "in_progress", "failed"]
            await wait_until(lambda: process_gone(pid), timeout=10)

        return ensureDeferred(run())


class OpenAIEngineFailureTests(TestCase):
    """The openai engine against the scripted model server, served with --listen on TCP."""

    async def _agent(self, base_url: str) -> tuple[ClientConnection, RecordingClient, str]:
        config = AgentConfig(
            engine_name="openai",
            engine_settings={"base_url": base_url, "model": "scripted", "timeout": 5.0},
            context_window=1000,
        )
        service = AgentService(
            build_runtime(config, reactor), "tcp:0:interface=127.0.0.1", reactor, no_token=True
        )
        service.startService()
        self.addCleanup(service.stopService)
        await wait_until(lambda: service.port is not None)
        client = RecordingClient()
        conn = ClientConnection(client)
        await connect(reactor, f"tcp:127.0.0.1:{service.port.getHost().port}", conn.protocol)
        self.addCleanup(lambda: _close(conn))
        await conn.initialize()
        session = await conn.new_session(schema.NewSessionRequest(cwd="/tmp", mcp_servers=[]))
        return conn, client, session.session_id

    @staticmethod
    async def _prompt(conn: ClientConnection, sid: str, text: str) -> Any:
        return await conn.prompt(
            schema.PromptRequest(session_id=sid, prompt=[schema.TextContentBlock(text=text)])
        )

    async def _expect_internal_error(self, conn: ClientConnection, sid: str, words: str) -> None:
        try:
            await self._prompt(conn, sid, "q")
        except RPCError as error:
            assert error.code == -32603, error
            assert words in error.message, error.message
            assert "\n" not in error.message
        else:
            raise AssertionError("the turn should have failed")

    def test_http_500_and_garbage_then_recovery(self) -> Deferred[None]:
        """HTTP 500 and garbage answer -32603 in one line; the next turn succeeds."""

        async def run() -> None:
            script = parse_script(
                {
                    "turn": [
                        {"status": 500, "error": "server on fire"},
                        {"garbage": "this is not SSE"},
                        {"chunks": ["back ", "online"]},
                    ]
                }
            )
            server = ScriptedModelServer(script, reactor=reactor)
            base = await server.start()
            self.addCleanup(server.stop)
            conn, client, sid = await self._agent(base)
            await self._expect_internal_error(conn, sid, "500")
            await self._expect_internal_error(conn, sid, "model server")
            response = await self._prompt(conn, sid, "again")
            assert response.stop_reason == schema.StopReason.END_TURN
            assert client.text() == "back online"

        return ensureDeferred(run())

    def test_unreachable_server(self) -> Deferred[None]:
        """A model server nobody listens on: -32603 naming it; the agent answers the next turn."""

        async def run() -> None:
            port: Any = reactor.listenTCP(0, ServerFactory(), interface="127.0.0.1")
            closed = port.getHost().port
            await port.stopListening()
            base = f"http://127.0.0.1:{closed}/v1"
            conn, _, sid = await self._agent(base)
            await self._expect_internal_error(conn, sid, "127.0.0.1")
            await self._expect_internal_error(conn, sid, "127.0.0.1")

        return ensureDeferred(run())
