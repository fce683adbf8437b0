"""
One owner per session, end to end (issue 22, item 5): real ``twistd -n acp-agent
--listen http:...`` processes with sessions enabled, and clients over Streamable HTTP.

- One bob, two clients: A new, A prompt, B load, B prompt, A prompt: A is refused
  (-32002 naming the takeover) and the file keeps both confirmed turns.
- Two bobs sharing a project (so a sessions directory): a load in the second is refused
  while a connection of the first holds the session, accepted once it ended; when the
  second is SIGKILLed while it holds the session, the first loads it (the kernel released
  the lock).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import reactor
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from acpkit import schema
from acpkit.connection import Client, ClientConnection
from acpkit.errors import RPCError
from acpkit.remote.connect import connect_remote

ROOT = Path(__file__).parent.parent.parent
TWISTD = ["-c", "from twisted.scripts.twistd import run; run()", "-n", "acp-agent"]
SESSIONS = ".acpkit/sessions"

pytestmark = pytest.mark.process


#: The token file the bobs of a test share (in the test's base directory).
TOKEN_FILE = "bob.token"


@contextmanager
def running_bob(directory: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """
    bob (echo engine, sessions enabled) serving remote ACP on a loopback port: the
    process and its /acp URL; stopped on exit.  The one place that starts bob here.
    Every bob requires the token of ``TOKEN_FILE`` in ``directory``'s parent (the
    first creates it, 0600), which the test's clients send.
    """
    (directory / "home").mkdir(parents=True, exist_ok=True)
    config = directory / "agent.toml"
    config.write_text("[sessions]\nenabled = true\n", encoding="utf-8")
    bob = subprocess.Popen(
        [
            sys.executable,
            *TWISTD,
            *("--config", str(config), "--engine", "echo", "--listen", "http:tcp:0"),
            *("--token-file", str(directory.parent / TOKEN_FILE)),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "HOME": str(directory / "home")},
    )
    try:
        assert bob.stderr is not None
        said: list[str] = []
        port = None
        for line in bob.stderr:
            said.append(line)
            if "[acp] listening on" in line:
                port = int(line.rsplit("port=", 1)[1].rstrip(")\n"))
            if "remote ACP authentication" in line:
                break
        assert port is not None, "bob did not start: " + "".join(said)
        yield bob, f"http://127.0.0.1:{port}/acp"
    finally:
        if bob.poll() is None:
            bob.send_signal(signal.SIGTERM)
            try:
                bob.wait(30)
            except subprocess.TimeoutExpired:
                bob.kill()
                bob.wait(30)
        if bob.stderr is not None:
            bob.stderr.close()


class Texts(Client):
    """Keeps the text of the agent's message chunks."""

    def __init__(self) -> None:
        self.chunks: list[str] = []

    def session_update(self, params: schema.SessionNotification) -> None:
        update = params.update
        if isinstance(update, schema.AgentMessageChunk) and isinstance(
            update.content, schema.TextContentBlock
        ):
            self.chunks.append(update.content.text)


def user_turns(project: Path, sid: str) -> list[str]:
    document: dict[str, Any] = json.loads((project / SESSIONS / f"{sid}.json").read_text())
    return [m["content"] for m in document["history"] if m["role"] == "user"]


class SessionOwnerEndToEnd(TestCase):
    timeout = 120

    def setUp(self) -> None:
        self.base = Path(self.mktemp()).absolute()
        self.project = self.base / "project"
        self.project.mkdir(parents=True)

    async def client(self, url: str) -> ClientConnection:
        conn = await connect_remote(reactor, url, Texts(), token_file=self.base / TOKEN_FILE)
        self.addCleanup(self.closed, conn)
        await conn.initialize(schema.InitializeRequest(protocol_version=1))
        return conn

    async def closed(self, conn: ClientConnection) -> None:
        conn.close()
        try:
            await conn.closed
        except Exception:
            pass  # a connection to a bob that was killed

    async def new(self, conn: ClientConnection) -> str:
        response = await conn.new_session(
            schema.NewSessionRequest(cwd=str(self.project), mcp_servers=[])
        )
        return response.session_id

    async def load(self, conn: ClientConnection, sid: str) -> None:
        await conn.load_session(
            schema.LoadSessionRequest(session_id=sid, cwd=str(self.project), mcp_servers=[])
        )

    async def prompt(self, conn: ClientConnection, sid: str, text: str) -> str:
        response = await conn.prompt(
            schema.PromptRequest(session_id=sid, prompt=[schema.TextContentBlock(text=text)])
        )
        return str(response.stop_reason)

    async def refusal(self, d: Any) -> RPCError:
        try:
            await d
        except RPCError as error:
            return error
        raise AssertionError("expected an error")

    async def load_within(self, conn: ClientConnection, sid: str, seconds: float) -> None:
        """Load, retried every 0.1 s while refused as attached elsewhere, for ``seconds``."""
        tries = int(seconds / 0.1)
        for attempt in range(tries):
            try:
                await self.load(conn, sid)
                return
            except RPCError as error:
                if error.code != -32002 or attempt == tries - 1:
                    raise
            await deferLater(reactor, 0.1, lambda: None)

    async def test_a_load_on_another_connection_takes_over(self) -> None:
        """A new, A prompt, B load, B prompt, A prompt refused naming the takeover."""
        with running_bob(self.base / "bob") as (_bob, url):
            a, b = await self.client(url), await self.client(url)
            sid = await self.new(a)
            self.assertEqual(await self.prompt(a, sid, "from a"), "end_turn")
            await self.load(b, sid)
            self.assertEqual(await self.prompt(b, sid, "from b"), "end_turn")
            error = await self.refusal(self.prompt(a, sid, "a again"))
            self.assertEqual(error.code, -32002)
            self.assertIn("taken over", error.message)
            self.assertEqual(error.data, {"sessionId": sid, "reason": "takenOver"})
            self.assertEqual(user_turns(self.project, sid), ["from a", "from b"])

    async def test_two_processes_one_sessions_directory(self) -> None:
        """
        bob 1 holds a session: bob 2 refuses to load it, naming bob 1's pid; once the
        connection to bob 1 ended, bob 2 loads it.  bob 2 is SIGKILLed while it holds
        the session: bob 1 loads it.  The file keeps every confirmed turn.
        """
        with (
            running_bob(self.base / "bob1") as (bob1, url1),
            running_bob(self.base / "bob2") as (bob2, url2),
        ):
            a = await self.client(url1)
            sid = await self.new(a)
            self.assertEqual(await self.prompt(a, sid, "one"), "end_turn")
            b = await self.client(url2)
            error = await self.refusal(self.load(b, sid))
            self.assertEqual(error.code, -32002)
            self.assertIn(f"process {bob1.pid}", error.message)
            self.assertEqual(error.data["reason"], "attachedElsewhere")
            self.assertEqual(await self.prompt(a, sid, "two"), "end_turn")
            await self.closed(a)
            await self.load_within(b, sid, 10.0)
            self.assertEqual(await self.prompt(b, sid, "three"), "end_turn")
            bob2.kill()
            bob2.wait(30)
            c = await self.client(url1)
            await self.load_within(c, sid, 10.0)
            self.assertEqual(await self.prompt(c, sid, "four"), "end_turn")
            self.assertEqual(user_turns(self.project, sid), ["one", "two", "three", "four"])
