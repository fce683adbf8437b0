"""
bob's MCP tools end to end (issue 15): a real ``twistd -n acp-agent`` with the ``openai``
engine on the scripted model server and real MCP servers (``mcp-server-time`` from PyPI,
``@modelcontextprotocol/server-everything`` from npm, and the misbehaving fixture server),
driven by an ACP client through whole turns.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
from typing import Any

import pytest
from twisted.internet import reactor
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.trial.unittest import TestCase

from acpkit import schema
from acpkit.connection import ClientConnection
from acpkit.errors import RPCError
from acpkit.io import AgentProcess, spawn_agent
from acpkit.testing.modelserver import ScriptedModelServer
from acpkit.testing.script import parse_script
from tests.fixtures.agent.harness import RecordingClient
from tests.helpers import free_port, wait_until
from tests.real_peers import MCP_EVERYTHING, MCP_GIT, MCP_TIME, require_peer

pytestmark = pytest.mark.process

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TWISTD = ["-c", "from twisted.scripts.twistd import run; run()", "-n", "acp-agent"]
MISBEHAVING = os.path.join(ROOT, "tests", "fixtures", "mcp_servers", "misbehaving_server.py")


def processes() -> list[tuple[int, int, int]]:
    """``(pid, ppid, pgid)`` of every live process (zombies left out)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(") ", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if fields[0] in ("Z", "X"):
            continue
        found.append((int(entry), int(fields[1]), int(fields[2])))
    return found


def server_groups_of(pid: int) -> set[int]:
    """The process groups led by ``pid``'s children that run an MCP server."""
    groups = set()
    for child, ppid, pgid in processes():
        if ppid != pid or pgid != child:
            continue
        try:
            with open(f"/proc/{child}/cmdline", "rb") as stream:
                command = stream.read()
        except FileNotFoundError:
            continue
        if b"mcp-server-" in command or b"misbehaving_server" in command:
            groups.add(pgid)
    return groups


def group_alive(pgid: int) -> bool:
    return any(group == pgid for _, _, group in processes())


def toml_string(value: str) -> str:
    return json.dumps(value)


class Bob:
    """One bob process, its client connection and the scripted model server behind it."""

    def __init__(
        self,
        conn: ClientConnection,
        client: RecordingClient,
        agent: AgentProcess,
        model: ScriptedModelServer,
    ) -> None:
        self.conn = conn
        self.client = client
        self.agent = agent
        self.model = model
        self.sid = ""

    async def prompt(self, text: str = "go") -> Any:
        """One turn; an error answer fails with bob's last stderr lines."""
        try:
            return await self.conn.prompt(
                schema.PromptRequest(
                    session_id=self.sid, prompt=[schema.TextContentBlock(text=text)]
                )
            )
        except RPCError as error:
            raise AssertionError(f"{error}\nbob's stderr:\n{self.agent.stderr_tail()}") from None

    def tool_messages(self) -> list[str]:
        """What the model received as tool results, in order."""
        last = self.model.requests[-1]["messages"]
        return [str(m["content"]) for m in last if m.get("role") == "tool"]


class McpRealTests(TestCase):
    """bob with MCP servers, as a real process."""

    timeout = 180

    def setUp(self) -> None:
        self.cwd = tempfile.mkdtemp(prefix="bob-mcp-")
        self.home = tempfile.mkdtemp(prefix="bob-mcp-home-")

    async def bob(
        self,
        turns: list[dict[str, Any]],
        mcp: str,
        *,
        mcp_servers: list[Any] | None = None,
        yolo: bool = True,
    ) -> Bob:
        model = ScriptedModelServer(parse_script({"turn": turns}), reactor=reactor)
        base = await model.start()
        self.addCleanup(model.stop)
        path = os.path.join(self.cwd, "agent.toml")
        with open(path, "w") as stream:
            stream.write(
                f"yolo = {'true' if yolo else 'false'}\n"
                "[context]\ncontextWindow = 100000\n"
                f'[engine]\nname = "openai"\nbase_url = {toml_string(base)}\n'
                'model = "scripted"\ntimeout = 30\n' + mcp
            )
        client = RecordingClient()
        conn = ClientConnection(client)
        agent = spawn_agent(
            reactor,
            conn.protocol,
            sys.executable,
            [*TWISTD, "--config", path],
            env={"PYTHONPATH": ROOT, "HOME": self.home},
            cwd=self.cwd,
        )
        self.addCleanup(agent.stop)
        await conn.initialize()
        session = await conn.new_session(
            schema.NewSessionRequest(cwd=self.cwd, mcp_servers=mcp_servers or [])
        )
        running = Bob(conn, client, agent, model)
        running.sid = session.session_id
        # bob's first turn waits for its servers a bounded time (TURN_WAIT), then goes on
        # without them: on a loaded machine a server may take longer to start. These tests
        # are about a turn with the servers, so they wait until bob said each one settled.
        names = re.findall(r"^\[mcp\.servers\.([\w-]+)\]", mcp, re.M)

        def settled() -> bool:
            tail = agent.stderr_tail()
            # "time (stdio): 2 tools" once listed, "time (stdio): failed: ..." if not
            return all(re.search(rf"\b{re.escape(name)} \(\w+\): ", tail) for name in names)

        try:
            await wait_until(settled, timeout=120.0, interval=0.05)
        except AssertionError:
            raise AssertionError(f"bob's stderr:\n{agent.stderr_tail()}") from None
        return running

    @pytest.mark.real_agent
    def test_time_server_through_a_whole_turn(self) -> Deferred[None]:
        """The model calls time__get_current_time: kind read, the result reaches the model."""
        time_server = require_peer(MCP_TIME)

        async def run() -> None:
            bob = await self.bob(
                [
                    {
                        "tool_calls": [
                            {"name": "time__get_current_time", "arguments": {"timezone": "Etc/UTC"}}
                        ]
                    },
                    {"chunks": ["It is now."]},
                ],
                f"[mcp.servers.time]\ncommand = {toml_string(time_server)}\n",
            )
            response = await bob.prompt("what time is it?")
            assert response.stop_reason == schema.StopReason.END_TURN
            start, *_, done = bob.client.tool_updates()
            assert start["kind"] == "read"
            assert start["title"] == 'time: get_current_time {"timezone": "Etc/UTC"}'
            assert done["status"] == "completed"
            offered = {t["function"]["name"] for t in bob.model.requests[0]["tools"]}
            assert {"time__get_current_time", "time__convert_time"} <= offered
            (result,) = bob.tool_messages()
            assert '"timezone": "Etc/UTC"' in result and "datetime" in result
            assert "  mcp:         time (stdio): 2 tools" in bob.agent.stderr_tail()

        return ensureDeferred(run())

    @pytest.mark.real_agent
    def test_permissions_ask_asks_under_yolo(self) -> Deferred[None]:
        """permissions = "ask" with yolo = true: the call waits for the user's answer."""
        time_server = require_peer(MCP_TIME)

        async def run() -> None:
            bob = await self.bob(
                [
                    {
                        "tool_calls": [
                            {"name": "time__get_current_time", "arguments": {"timezone": "Etc/UTC"}}
                        ]
                    },
                    {
                        "tool_calls": [
                            {
                                "name": "time__get_current_time",
                                "arguments": {"timezone": "Asia/Tokyo"},
                            }
                        ]
                    },
                    {"chunks": ["ok"]},
                ],
                f'[mcp.servers.time]\ncommand = {toml_string(time_server)}\npermissions = "ask"\n',
            )
            bob.client.answers = ["reject", "allow"]
            response = await bob.prompt()
            assert response.stop_reason == schema.StopReason.END_TURN
            titles = [r.tool_call.title for r in bob.client.permission_requests]
            assert titles == [
                'time: get_current_time {"timezone": "Etc/UTC"}',
                'time: get_current_time {"timezone": "Asia/Tokyo"}',
            ]
            rejected, allowed = bob.tool_messages()
            assert rejected == "[time__get_current_time rejected by the user]"
            assert "Asia/Tokyo" in allowed

        return ensureDeferred(run())

    @pytest.mark.real_agent
    def test_everything_image_and_progress(self) -> Deferred[None]:
        """server-everything: an image is image content; progress shows as progress lines."""
        everything = require_peer(MCP_EVERYTHING)

        async def run() -> None:
            bob = await self.bob(
                [
                    {"tool_calls": [{"name": "everything__get-tiny-image", "arguments": {}}]},
                    {
                        "tool_calls": [
                            {
                                "name": "everything__trigger-long-running-operation",
                                "arguments": {"duration": 1, "steps": 2},
                            }
                        ]
                    },
                    {"chunks": ["seen"]},
                ],
                f"[mcp.servers.everything]\ncommand = {toml_string(everything)}\n",
            )
            response = await bob.prompt()
            assert response.stop_reason == schema.StopReason.END_TURN
            updates = bob.client.tool_updates()
            image_done = next(
                u
                for u in updates
                if u.get("toolCallId") == "call_1" and u.get("status") == "completed"
            )
            images = [
                c["content"] for c in image_done["content"] if c["content"]["type"] == "image"
            ]
            assert images and images[0]["mimeType"] == "image/png" and images[0]["data"]
            image_text, progress_result = bob.tool_messages()
            assert "[image: image/png, " in image_text
            progress = [
                u["content"][0]["content"]["text"]
                for u in updates
                if u.get("toolCallId") == "call_2" and "status" not in u and u.get("content")
            ]
            assert progress and progress[-1].endswith("2/2"), progress
            assert "completed" in progress_result.lower()

        return ensureDeferred(run())

    def test_a_crashing_server_is_reported_once_and_its_tool_fails_clearly(
        self,
    ) -> Deferred[None]:
        """The server exits mid-call: that call and the next fail saying so; one log line."""

        async def run() -> None:
            bob = await self.bob(
                [
                    {"tool_calls": [{"name": "crashy__work", "arguments": {}}]},
                    {"tool_calls": [{"name": "crashy__work", "arguments": {}}]},
                    {"chunks": ["gave up"]},
                ],
                f"[mcp.servers.crashy]\ncommand = {toml_string(sys.executable)}\n"
                f'args = [{toml_string(MISBEHAVING)}, "crash"]\n',
            )
            response = await bob.prompt()
            assert response.stop_reason == schema.StopReason.END_TURN
            first, second = bob.tool_messages()
            assert "exited with status 3" in first, first
            assert second.startswith(
                '[crashy__work: the MCP server crashy is not running (MCP server "crashy" '
                "exited with status 3 (last stderr line: RuntimeError: boom))]"
            ), second
            statuses = [u["status"] for u in bob.client.tool_updates() if "status" in u]
            assert statuses.count("failed") == 2
            await wait_until(
                lambda: "[mcp] crashy (stdio) stopped" in bob.agent.stderr_tail(), timeout=60.0
            )
            assert bob.agent.stderr_tail().count("[mcp] crashy (stdio) stopped") == 1

        return ensureDeferred(run())

    def test_a_hanging_call_times_out_and_a_cancelled_one_is_cancelled(self) -> Deferred[None]:
        """timeout = 1: the call fails after 1 s; session/cancel: the server is told."""

        async def run() -> None:
            bob = await self.bob(
                [
                    {"tool_calls": [{"name": "slow__work", "arguments": {}}]},
                    {"chunks": ["too slow"]},
                    {"tool_calls": [{"name": "slow__work", "arguments": {}}]},
                ],
                f"[mcp.servers.slow]\ncommand = {toml_string(sys.executable)}\n"
                f'args = [{toml_string(MISBEHAVING)}, "slow"]\ntimeout = 1\n',
            )
            response = await bob.prompt()
            assert response.stop_reason == schema.StopReason.END_TURN
            assert bob.tool_messages() == [
                "[slow__work: no answer from the MCP server slow in 1 s: the call was cancelled]"
            ]
            await wait_until(lambda: bob.agent.stderr_tail().count("cancelled ") >= 1, timeout=60.0)
            pending = ensureDeferred(bob.prompt())
            await wait_until(lambda: len(bob.client.tool_updates()) >= 5, timeout=60.0)
            bob.conn.cancel(bob.sid)
            assert (await pending).stop_reason == schema.StopReason.CANCELLED
            await wait_until(lambda: bob.agent.stderr_tail().count("cancelled ") >= 2, timeout=60.0)

        return ensureDeferred(run())

    @pytest.mark.real_agent
    def test_client_servers_opt_in_over_acp(self) -> Deferred[None]:
        """mcp.useClientServers: the session's mcpServers (stdio) give the model their tools."""
        time_server = require_peer(MCP_TIME)

        async def run() -> None:
            bob = await self.bob(
                [
                    {
                        "tool_calls": [
                            {
                                "name": "clock__get_current_time",
                                "arguments": {"timezone": "Etc/UTC"},
                            }
                        ]
                    },
                    {"chunks": ["ok"]},
                ],
                "[mcp]\nuseClientServers = true\n",
                mcp_servers=[
                    schema.McpServerStdio(name="clock", command=time_server, args=[], env=[])
                ],
            )
            response = await bob.prompt()
            assert response.stop_reason == schema.StopReason.END_TURN
            (result,) = bob.tool_messages()
            assert "datetime" in result

        return ensureDeferred(run())

    @pytest.mark.real_agent
    def test_bob_exit_ends_every_server_process(self) -> Deferred[None]:
        """
        stdin closed: bob exits and no server process is left, not even one that ignores
        its input's end and SIGTERM; bob killed by SIGKILL: the watchdog ends them.
        """
        time_server = require_peer(MCP_TIME)
        everything = require_peer(MCP_EVERYTHING)
        servers = (
            f"[mcp.servers.time]\ncommand = {toml_string(time_server)}\n"
            f"[mcp.servers.everything]\ncommand = {toml_string(everything)}\n"
            # ignores the end of its input and SIGTERM: only bob's SIGKILL ends it
            f"[mcp.servers.stubborn]\ncommand = {toml_string(sys.executable)}\n"
            f'args = [{toml_string(MISBEHAVING)}, "stubborn"]\n'
        )

        async def started_bob() -> tuple[Bob, set[int]]:
            bob = await self.bob([{"chunks": ["ready"]}], servers)
            await bob.prompt()  # waits for both servers to be up
            pid = bob.agent.pid
            assert pid is not None
            groups = server_groups_of(pid)
            assert len(groups) == 3, groups
            return bob, groups

        async def run() -> None:
            bob, groups = await started_bob()
            transport: Any = bob.conn.protocol.transport
            transport.loseConnection()  # bob's stdin ends
            exited = await bob.agent.exited
            assert exited is not None
            await wait_until(lambda: not any(group_alive(g) for g in groups), timeout=20)

            bob, groups = await started_bob()
            pid = bob.agent.pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            await bob.agent.exited
            await wait_until(lambda: not any(group_alive(g) for g in groups), timeout=20)

        return ensureDeferred(run())

    @pytest.mark.real_agent
    def test_everything_over_streamable_http(self) -> Deferred[None]:
        """A url server: started at bob's start, its tool called, the result to the model."""
        everything = require_peer(MCP_EVERYTHING)
        port = free_port()
        with open(os.path.join(self.cwd, "everything.log"), "wb") as log:
            server = subprocess.Popen(
                [everything, "streamableHttp"],
                env={**os.environ, "PORT": str(port)},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def stop() -> None:
            try:
                os.killpg(server.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            server.wait(10)

        self.addCleanup(stop)

        async def run() -> None:
            await wait_until(lambda: port_listens(port), timeout=30)
            bob = await self.bob(
                [
                    {"tool_calls": [{"name": "web__get-sum", "arguments": {"a": 2, "b": 40}}]},
                    {"chunks": ["42"]},
                ],
                f'[mcp.servers.web]\nurl = "http://127.0.0.1:{port}/mcp"\n',
            )
            response = await bob.prompt()
            assert response.stop_reason == schema.StopReason.END_TURN
            (result,) = bob.tool_messages()
            assert "42" in result
            assert bob.client.tool_updates()[0]["kind"] == "read"
            assert "  mcp:         web (http): " in bob.agent.stderr_tail()

        return ensureDeferred(run())

    @pytest.mark.real_agent
    def test_git_status_through_the_allow_list(self) -> Deferred[None]:
        """tools = ["git_status"]: one of the server's tools offered; it reads the repository."""
        git_server = require_peer(MCP_GIT)
        subprocess.run(["git", "init", "-q", self.cwd], check=True)
        with open(os.path.join(self.cwd, "new.txt"), "w") as stream:
            stream.write("x\n")

        async def run() -> None:
            bob = await self.bob(
                [
                    {
                        "tool_calls": [
                            {"name": "git__git_status", "arguments": {"repo_path": self.cwd}}
                        ]
                    },
                    {"chunks": ["clean enough"]},
                ],
                f"[mcp.servers.git]\ncommand = {toml_string(git_server)}\n"
                f'args = ["--repository", {toml_string(self.cwd)}]\ntools = ["git_status"]\n',
            )
            response = await bob.prompt()
            assert response.stop_reason == schema.StopReason.END_TURN
            offered = {t["function"]["name"] for t in bob.model.requests[0]["tools"]}
            assert {name for name in offered if name.startswith("git__")} == {"git__git_status"}
            (result,) = bob.tool_messages()
            assert "new.txt" in result, result
            assert "git (stdio): 1 of " in bob.agent.stderr_tail()
            assert "tools (tools allow-list)" in bob.agent.stderr_tail()

        return ensureDeferred(run())


def port_listens(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
