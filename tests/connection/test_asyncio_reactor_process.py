"""
A real agent process on the asyncio reactor (``tests/fixtures/asyncio_agent.py``, run
with ``acpkit.run_agent(..., reactor="asyncio")``): its prompt handler awaits ``httpx``
(a real asyncio HTTP client) against a loopback server of this test, and acpkit's own
``fs/read_text_file`` and ``session_update``, in one coroutine; a cancellation while it
waits on ``httpx`` reaches it as ``asyncio.CancelledError``; it exits 0 when its stdin
closes.  The same agent on the default reactor answers -32603, as before the change.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from twisted.internet import reactor
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.trial.unittest import TestCase
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site

from acpkit import schema
from acpkit.connection import Client, ClientConnection
from acpkit.errors import RPCError
from acpkit.io import AgentProcess, spawn_agent
from acpkit.jsonrpc.handler_errors import ASYNCIO_HINT

pytestmark = pytest.mark.process

ROOT = Path(__file__).parent.parent.parent
AGENT = ROOT / "tests" / "fixtures" / "asyncio_agent.py"


class Loopback(Resource):
    """``/hello`` answers at once; ``/hang`` never answers and reports its arrival and end."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.arrived: list[Deferred[None]] = []
        self.gone: list[Deferred[None]] = []

    def expect_hang(self) -> tuple[Deferred[None], Deferred[None]]:
        """Deferreds for the next ``/hang``: it arrived; its connection was closed."""
        arrived: Deferred[None] = Deferred()
        gone: Deferred[None] = Deferred()
        self.arrived.append(arrived)
        self.gone.append(gone)
        return arrived, gone

    def render_GET(self, request: Request) -> bytes | int:
        if request.path == b"/hang":
            gone = self.gone.pop(0)
            request.notifyFinish().addBoth(lambda _: gone.callback(None))
            self.arrived.pop(0).callback(None)
            return NOT_DONE_YET
        return b"hello from loopback"


class NotesClient(Client):
    """Serves ``notes.txt``; keeps the text of the agent's message chunks."""

    def __init__(self) -> None:
        self.chunks: list[str] = []
        self.waiting: list[tuple[str, Deferred[None]]] = []

    def read_text_file(self, params: schema.ReadTextFileRequest) -> schema.ReadTextFileResponse:
        assert params.path.endswith("notes.txt"), params.path
        return schema.ReadTextFileResponse(content="the notes")

    def session_update(self, params: schema.SessionNotification) -> None:
        update = params.update
        if isinstance(update, schema.AgentMessageChunk) and isinstance(
            update.content, schema.TextContentBlock
        ):
            self.chunks.append(update.content.text)
            for text, d in list(self.waiting):
                if text == update.content.text:
                    self.waiting.remove((text, d))
                    d.callback(None)

    def said(self, text: str) -> Deferred[None]:
        """Fires once the agent has said ``text``."""
        d: Deferred[None] = Deferred()
        if text in self.chunks:
            d.callback(None)
        else:
            self.waiting.append((text, d))
        return d


class AsyncioReactorAgentTests(TestCase):
    timeout = 60

    async def start(self, reactor_name: str) -> tuple[ClientConnection, NotesClient, str]:
        site = Loopback()
        port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(Site(site))
        self.addCleanup(port.stopListening)
        self.site = site
        client = NotesClient()
        conn = ClientConnection(client)
        env = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self.agent: AgentProcess = spawn_agent(
            reactor, conn.protocol, sys.executable, [str(AGENT), reactor_name], env=env
        )
        self.addCleanup(self.agent.kill)
        await conn.initialize(
            client_capabilities=schema.ClientCapabilities(
                fs=schema.FileSystemCapabilities(read_text_file=True)
            )
        )
        await conn.new_session(schema.NewSessionRequest(cwd=str(ROOT), mcp_servers=[]))
        return conn, client, f"http://127.0.0.1:{port.getHost().port}"

    @staticmethod
    def prompt(conn: ClientConnection, url: str) -> Deferred[schema.PromptResponse]:
        return conn.prompt(
            schema.PromptRequest(session_id="s1", prompt=[schema.TextContentBlock(text=url)])
        )

    async def test_httpx_and_acpkit_calls_in_one_handler(self) -> None:
        """
        The handler reads a file through the client, then GETs the loopback server with
        httpx: its answer carries both; the process exits 0 once its stdin is closed.
        """
        conn, client, base = await self.start("asyncio")
        response = await self.prompt(conn, f"{base}/hello")
        self.assertEqual(response.stop_reason, schema.StopReason.END_TURN)
        self.assertEqual(client.chunks, ["200 hello from loopback / the notes"])
        exited = await self.agent.stop()
        self.assertEqual((exited.exit_code, exited.signal), (0, None), exited.stderr_tail)

    async def test_session_cancel_while_httpx_waits(self) -> None:
        """
        ``session/cancel`` while httpx waits for an answer that never comes: the handler
        sees ``asyncio.CancelledError``, httpx closes its connection, the turn answers
        ``cancelled``.
        """
        conn, client, base = await self.start("asyncio")
        arrived, gone = self.site.expect_hang()
        d = self.prompt(conn, f"{base}/hang")
        await arrived
        conn.cancel("s1")
        response = await d
        self.assertEqual(response.stop_reason, schema.StopReason.CANCELLED)
        self.assertEqual(client.chunks, ["cancelled: CancelledError"])
        await gone
        # The agent goes on: the next turn works.
        response = await self.prompt(conn, f"{base}/hello")
        self.assertEqual(response.stop_reason, schema.StopReason.END_TURN)

    async def test_cancel_request_while_httpx_waits(self) -> None:
        """
        ``$/cancel_request`` (the client cancels its prompt) while httpx waits: the
        handler sees ``asyncio.CancelledError`` too, and the server sees httpx go away.
        """
        conn, client, base = await self.start("asyncio")
        arrived, gone = self.site.expect_hang()
        d = self.prompt(conn, f"{base}/hang")
        await arrived
        d.cancel()
        with self.assertRaises(CancelledError):
            await d
        await client.said("cancelled: CancelledError")
        await gone

    async def test_default_reactor_has_no_event_loop(self) -> None:
        """
        On the default reactor no event loop runs, httpx cannot work in a handler: the
        prompt is answered -32603 with the explanation in ``data`` (the client developer
        learns to use the asyncio reactor, without the debug switch), and the agent's log
        line names its own side, the method and the explanation.
        """
        conn, _client, base = await self.start("default")
        with self.assertRaises(RPCError) as caught:
            await self.prompt(conn, f"{base}/hello")
        self.assertEqual(caught.exception.code, -32603)
        self.assertEqual(caught.exception.data, {"hint": ASYNCIO_HINT})
        exited = await self.agent.stop()
        line = "agent: handler for session/prompt (id 3, from the client) raised"
        self.assertIn(line, exited.stderr_tail)
        self.assertIn('reactor="asyncio"', exited.stderr_tail)
