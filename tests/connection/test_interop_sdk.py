"""
Interop over real pipes with the official Python SDK (``agent-client-protocol``):
an acpkit client drives an SDK agent, and an SDK client drives an acpkit agent, through
initialize, session/new, a prompt with streamed chunks, a permission request, fs read
and write, and cancel.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import TestCase

from acpkit import schema
from acpkit.connection import Client, ClientConnection
from acpkit.errors import ConnectionLost
from acpkit.io import spawn_agent
from tests.helpers import InteropClient, child_env

pytestmark = pytest.mark.process  # every test here starts a child process

FIXTURES = Path(__file__).parent.parent / "fixtures" / "interop"
ROOT = Path(__file__).parent.parent.parent


class AcpkitClientTests(TestCase):
    """An acpkit ClientConnection over real pipes."""

    timeout = 60

    async def scenario(self, command: list[str]) -> None:
        tmp = Path(self.mktemp())
        tmp.mkdir()
        target = tmp / "note.txt"
        target.write_text("hello")
        client = InteropClient()
        conn = ClientConnection(client)
        process = spawn_agent(
            reactor, conn.protocol, command[0], command[1:], env=child_env(), name="interop"
        )
        try:
            init = await conn.initialize(
                client_capabilities=schema.ClientCapabilities(
                    fs=schema.FileSystemCapabilities(read_text_file=True, write_text_file=True)
                )
            )
            self.assertEqual(init.protocol_version, 1)
            session = await conn.new_session(
                schema.NewSessionRequest(cwd=str(tmp.resolve()), mcp_servers=[])
            )
            first = await conn.prompt(
                schema.PromptRequest(
                    session_id=session.session_id,
                    prompt=[schema.TextContentBlock(text=str(target.resolve()))],
                )
            )
            self.assertEqual(first.stop_reason, schema.StopReason.END_TURN)
            self.assertEqual(client.chunks, ["one", " two", " three"])
            self.assertEqual(client.permissions, [f"write_file: {target.resolve()}"])
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
        finally:
            await process.stop()

    def test_acpkit_client_drives_sdk_agent(self) -> Deferred[None]:
        """An acpkit client completes the scenario against an agent built on the SDK."""
        return Deferred.fromCoroutine(
            self.scenario([sys.executable, str(FIXTURES / "sdk_agent.py")])
        )

    def test_acpkit_client_drives_acpkit_agent(self) -> Deferred[None]:
        """The same scenario between acpkit on both ends, over real pipes."""
        return Deferred.fromCoroutine(
            self.scenario([sys.executable, str(FIXTURES / "acpkit_agent.py")])
        )


class SdkClientTests(TestCase):
    """The SDK's client over real pipes."""

    timeout = 60

    async def run_sdk_client(self, agent: str) -> dict[str, Any]:
        tmp = Path(self.mktemp())
        tmp.mkdir()
        target = tmp / "note.txt"
        target.write_text("hello")
        out, err, code = await getProcessOutputAndValue(
            sys.executable,
            [
                str(FIXTURES / "sdk_client.py"),
                str(target.resolve()),
                "--",
                sys.executable,
                str(FIXTURES / agent),
            ],
            env=child_env(),
        )
        self.assertEqual(code, 0, err.decode("utf-8", "replace"))
        result: dict[str, Any] = json.loads(out)
        result["written"] = (tmp / "note.txt.out").read_text()
        result["target"] = str(target.resolve())
        return result

    async def check(self, agent: str, session_id: str) -> None:
        result = await self.run_sdk_client(agent)
        self.assertEqual(
            {k: v for k, v in result.items() if k not in ("target",)},
            {
                "protocolVersion": 1,
                "sessionId": session_id,
                "chunks": ["one", " two", " three", "waiting"],
                "permissions": [f"write_file: {result['target']}"],
                "first": "end_turn",
                "second": "cancelled",
                "written": "HELLOallow",
            },
        )

    def test_sdk_client_drives_acpkit_agent(self) -> Deferred[None]:
        """The SDK's client completes the scenario against an agent built on acpkit."""
        return Deferred.fromCoroutine(self.check("acpkit_agent.py", "acpkit-session"))

    def test_sdk_client_drives_sdk_agent(self) -> Deferred[None]:
        """Control: the SDK on both ends gives the same summary."""
        return Deferred.fromCoroutine(self.check("sdk_agent.py", "sdk-session"))


class CrashTests(TestCase):
    """A child agent that dies mid-turn."""

    timeout = 30

    async def crash(self) -> None:
        conn = ClientConnection(Client())
        process = spawn_agent(
            reactor,
            conn.protocol,
            sys.executable,
            [str(FIXTURES / "crashing_agent.py")],
            env=child_env(),
            name="doomed",
        )
        await conn.initialize()
        session = await conn.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))
        with self.assertRaises(ConnectionLost) as caught:
            await conn.prompt(
                schema.PromptRequest(
                    session_id=session.session_id, prompt=[schema.TextContentBlock(text="go")]
                )
            )
        message = str(caught.exception)
        self.assertIn("status 3", message)
        self.assertIn("out of cheese", message)
        exited = await process.exited
        self.assertEqual(exited.exit_code, 3)

    def test_crash_mid_turn_fails_the_prompt_with_status_and_stderr(self) -> Deferred[None]:
        """The pending prompt fails promptly with the exit status and the stderr tail."""
        return Deferred.fromCoroutine(self.crash())
