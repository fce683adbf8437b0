"""
Remote ACP interop with the official TypeScript SDK (@agentclientprotocol/sdk 2.4.0, its
``experimental/*`` remote transports) and with ``acp-http-client`` 0.4.2, both from npm
(.ci/install-real-agents installs them; a missing peer skips, or fails under
``ACPKIT_REAL_AGENTS_REQUIRED=1``).

Both directions, over WebSocket and over Streamable HTTP: acpkit's agent served by
``serve_remote`` (tests/fixtures/interop/remote_agent.py) driven by the SDK's clients
(tests/fixtures/interop_ts/ts_client.mjs), and acpkit's ``connect_remote`` driving the
SDK's own remote agent (tests/fixtures/interop_ts/ts_agent.mjs, the SDK's ``AcpServer``
behind Node's http server and ``ws``). The scenario each time: initialize, session/new, a
streamed prompt with a permission round trip and fs read/write, then a prompt cancelled by
``session/cancel``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase

from acpkit import schema
from acpkit.remote.connect import connect_remote
from tests.helpers import InteropClient, child_env
from tests.real_peers import (
    ACP_HTTP_CLIENT_MODULES,
    NODE22,
    TS_SDK_MODULES,
    peer,
    require_peer,
)

pytestmark = [pytest.mark.real_agent, pytest.mark.process]

ROOT = Path(__file__).parent.parent.parent
FIXTURES = Path(__file__).parent.parent / "fixtures"
TS = FIXTURES / "interop_ts"


def node() -> str:
    """Node 22 from the real peers, else the system's node (the SDK needs 20 or later)."""
    found = peer(NODE22) or shutil.which("node")
    if found is None:
        require_peer(NODE22)
    assert found is not None
    return found


def ts_sdk() -> str:
    """The node_modules directory holding the TypeScript SDK and ``ws``."""
    modules = require_peer(TS_SDK_MODULES)
    require_peer(os.path.join(TS_SDK_MODULES, "@agentclientprotocol/sdk/dist/transports"))
    require_peer(os.path.join(TS_SDK_MODULES, "ws"))
    return modules


# -- the SDK's clients against acpkit's serve_remote -----------------------------------------


def serve_acpkit_agent(tmp_path: Path, extra: list[str]) -> tuple[subprocess.Popen[str], str]:
    """The interop agent built on acpkit, served by serve_remote in a child; its URL."""
    env = child_env()
    child = subprocess.Popen(
        [sys.executable, str(FIXTURES / "interop" / "remote_agent.py"), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert child.stdout is not None
    url = child.stdout.readline().strip()
    assert url.startswith("http://"), url
    return child, url


def stop(child: subprocess.Popen[str]) -> None:
    """End a fixture child by closing its stdin (it stops on end of input)."""
    assert child.stdin is not None
    child.stdin.close()
    child.wait(30)


def run_ts_client(transport: str, url: str, target: Path, token: str | None) -> list[Any]:
    """ts_client.mjs over ``transport`` (``ws`` or ``http``): the JSON lines it printed."""
    args = [node(), str(TS / "ts_client.mjs"), ts_sdk(), transport, url, str(target)]
    done = subprocess.run(
        [*args, *([token] if token else [])], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def check_scenario(lines: list[Any], transport: str, target: Path, session_id: str) -> None:
    """The TS client's summary and what it saw: the whole scenario, in order."""
    summary = lines[-1]["summary"]
    assert summary == {
        "transport": transport,
        "protocolVersion": 1,
        "sessionId": session_id,
        "chunks": ["one", " two", " three", "waiting"],
        "permissions": [f"write_file: {target}"],
        "first": "end_turn",
        "second": "cancelled",
    }
    seen = [line["seen"] for line in lines[:-1]]
    assert seen == [
        "response",  # initialize
        "response",  # session/new
        *["session/update"] * 3,
        "session/request_permission",
        "fs/read_text_file",
        "fs/write_text_file",
        "response",  # the first prompt: end_turn
        "session/update",  # waiting
        "response",  # the cancelled prompt
    ]
    assert Path(f"{target}.out").read_text() == "HELLOallow"


@pytest.mark.parametrize("transport", ["ws", "http"])
def test_typescript_sdk_client_drives_an_acpkit_agent(tmp_path: Path, transport: str) -> None:
    """
    The TypeScript SDK's WebSocket client (``experimental/ws-client`` with ``ws``) and its
    Streamable HTTP client (``experimental/http-client``) run the whole scenario against
    an acpkit agent served by serve_remote with a bearer token.
    """
    ts_sdk()
    target = tmp_path / "note.txt"
    target.write_text("hello")
    child, url = serve_acpkit_agent(tmp_path, ["--token", "tok"])
    try:
        lines = run_ts_client(transport, url, target, "tok")
    finally:
        stop(child)
    check_scenario(lines, transport, target, "acpkit-session")


# -- acp-http-client against acpkit's serve_remote -------------------------------------------


def test_acp_http_client_speaks_an_older_dialect(tmp_path: Path) -> None:
    """
    acp-http-client 0.4.2 (npm) predates the RFD's connection id: it never sends
    ``Acp-Connection-Id``. Against serve_remote its ``initialize`` POST works (200 with the
    agent's result), its ``GET`` streams are refused ``400`` and so is its next POST
    (``session/new``), with the reason in the body; the client errors its stream, and the
    server stays up for the next client.
    """
    modules = require_peer(ACP_HTTP_CLIENT_MODULES)
    require_peer(os.path.join(ACP_HTTP_CLIENT_MODULES, "acp-http-client/dist/index.js"))
    target = tmp_path / "note.txt"
    target.write_text("hello")
    child, url = serve_acpkit_agent(tmp_path, [])
    try:
        done = subprocess.run(
            [node(), str(TS / "acp_http_client.mjs"), modules, url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout)
        # the server is unharmed: a conforming client's whole scenario still works
        if peer(os.path.join(TS_SDK_MODULES, "@agentclientprotocol/sdk")):
            lines = run_ts_client("http", url, target, None)
            check_scenario(lines, "http", target, "acpkit-session")
    finally:
        stop(child)
    assert result["initialize"]["ok"]["protocolVersion"] == 1
    assert result["newSession"] == {"error": "stream failed: Request failed with status 400"}
    assert all(not request["connectionId"] for request in result["requests"])
    statuses = {(r["method"], r["status"]) for r in result["requests"]}
    assert statuses == {("POST", 200), ("GET", 400), ("POST", 400)}


# -- acpkit's connect_remote against the SDK's remote agent ----------------------------------


class _NodeAgent(ProcessProtocol):
    """ts_agent.mjs: its URL (first stdout line) and its end."""

    def __init__(self) -> None:
        self.url: Deferred[str] = Deferred()
        self.ended: Deferred[None] = Deferred()
        self.out = b""
        self.err = b""

    def outReceived(self, data: bytes) -> None:
        self.out += data
        if not self.url.called and b"\n" in self.out:
            self.url.callback(self.out.split(b"\n", 1)[0].decode().strip())

    def errReceived(self, data: bytes) -> None:
        self.err += data

    def processEnded(self, reason: Failure) -> None:
        if not self.url.called:
            self.url.errback(RuntimeError(f"ts_agent.mjs exited: {self.err.decode()[-2000:]}"))
        self.ended.callback(None)


async def start_ts_agent(case: TestCase) -> str:
    """Start the SDK's remote agent (stopped at cleanup by closing its stdin); its URL."""
    executable = node()
    modules = ts_sdk()
    proto = _NodeAgent()
    process = reactor.spawnProcess(
        proto, executable, [executable, str(TS / "ts_agent.mjs"), modules], env=dict(os.environ)
    )

    def end() -> Deferred[None]:
        if not proto.ended.called:
            process.closeStdin()
        return proto.ended

    case.addCleanup(end)
    return await proto.url


class AcpkitClientAgainstTypescriptAgent(TestCase):
    """acpkit's connect_remote driving the TypeScript SDK's own remote agent."""

    timeout = 60

    async def scenario(self, url: str) -> None:
        """The whole scenario through connect_remote; the connection closed at the end."""
        tmp = Path(self.mktemp())
        tmp.mkdir()
        target = (tmp / "note.txt").resolve()
        target.write_text("hello")
        client = InteropClient()
        conn = await connect_remote(reactor, url, client)
        init = await conn.initialize(
            client_capabilities=schema.ClientCapabilities(
                fs=schema.FileSystemCapabilities(read_text_file=True, write_text_file=True)
            )
        )
        self.assertEqual(init.protocol_version, 1)
        session = await conn.new_session(
            schema.NewSessionRequest(cwd=str(tmp.resolve()), mcp_servers=[])
        )
        self.assertEqual(session.session_id, "ts-session")
        first = await conn.prompt(
            schema.PromptRequest(
                session_id=session.session_id, prompt=[schema.TextContentBlock(text=str(target))]
            )
        )
        self.assertEqual(first.stop_reason, schema.StopReason.END_TURN)
        self.assertEqual(client.chunks, ["one", " two", " three"])
        self.assertEqual(client.permissions, [f"write_file: {target}"])
        self.assertEqual((tmp / "note.txt.out").read_text(), "HELLOallow")
        second = conn.prompt(
            schema.PromptRequest(
                session_id=session.session_id, prompt=[schema.TextContentBlock(text="wait")]
            )
        )
        await client.waiting
        conn.cancel(session.session_id)
        response = await second
        self.assertEqual(response.stop_reason, schema.StopReason.CANCELLED)
        conn.close()
        await conn.closed

    async def test_over_websocket(self) -> None:
        """ws:// to the SDK's AcpServer (upgrade through ``ws``): the whole scenario."""
        url = await start_ts_agent(self)
        await self.scenario(url.replace("http://", "ws://", 1))

    async def test_over_streamable_http(self) -> None:
        """http:// to the SDK's AcpServer (Node's http server): the whole scenario."""
        url = await start_ts_agent(self)
        await self.scenario(url)
