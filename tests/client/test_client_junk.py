"""Junk on an agent's stdout (lines that are not JSON) is named in the errors, without -v.

The JSON-RPC layer counts the incoming lines that are not a JSON object and keeps the
first one; the agent window quotes it (cut at ``JUNK_SHOWN`` characters) in the error
of a failed start or turn, and in a note (Agent status, and ``ask``'s stderr when the
agent works anyway).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import TestCase

from acpkit import schema
from acpkit.jsonrpc import JUNK_LINE_KEPT, JSONRPCProtocol
from acpkit.testing.pair import connected_pair
from acpkit_client import cli
from acpkit_client.agents import HandshakeTimeout
from acpkit_client.config import AgentEntry
from acpkit_client.session import JUNK_SHOWN, AgentWindow, TurnError
from acpkit_client.status import agent_lines
from tests.fixtures.client.junk_agent import LONG
from tests.fixtures.client.tiny_agent import TinyAgent

REPO = Path(__file__).resolve().parent.parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "client" / "junk_agent.py"

# -- the JSON-RPC layer keeps the first junk line -----------------------------------------


def test_protocol_counts_junk_and_keeps_the_first_line() -> None:
    """Lines that are not UTF-8, not JSON, or JSON but not an object are junk: counted,
    the first kept (bounded); a malformed JSON-RPC object is not junk."""
    protocol = JSONRPCProtocol()
    protocol.makeConnection(StringTransport())
    assert (protocol.junk_lines, protocol.first_junk_line) == (0, None)
    protocol.dataReceived(b'{"jsonrpc":"2.0","method":5}\n')
    assert protocol.junk_lines == 0
    long = b"Loading " + b"." * (2 * JUNK_LINE_KEPT)
    protocol.dataReceived(long + b"\n42\n\xff\xfe\nnot json either\n")
    assert protocol.junk_lines == 4
    assert protocol.first_junk_line == long[:JUNK_LINE_KEPT]


# -- the window names it ----------------------------------------------------------------


class Mute(TinyAgent):
    """Never answers ``initialize``."""

    def initialize(self, params: schema.InitializeRequest) -> Any:
        return Deferred()


class Failing(TinyAgent):
    """Answers each prompt with an error."""

    def prompt(self, params: schema.PromptRequest) -> Any:
        from acpkit.errors import RPCError

        raise RPCError(-32603, "Internal error")


def window_with(tmp_path: Path, agent: type[TinyAgent]) -> tuple[AgentWindow, Any, Clock]:
    clock = Clock()
    window = AgentWindow(
        AgentEntry(name="junky", command="python", source="test"),
        str(tmp_path),
        environ={},
        handshake_timeout=5,
    )
    pair = connected_pair(lambda conn: agent(conn, "normal"), window, clock=clock)
    return window, pair, clock


def test_failed_start_quotes_the_first_junk_line(tmp_path: Path) -> None:
    """A handshake that times out after the agent printed junk says so, quoting the
    first junk line; Agent status has the note too."""
    window, pair, clock = window_with(tmp_path, Mute)
    started = window.open_on(pair.client, clock)
    pair.client.protocol.dataReceived(b"Starting server on port 8080\nready\n")
    pair.advance(5)
    with pytest.raises(HandshakeTimeout) as raised:
        pair.result(started)
    message = str(raised.value)
    assert message.startswith("no answer to initialize within 5 s\n")
    assert (
        "the agent wrote 2 lines that are not JSON on its stdout (ignored; stdout is for "
        "ACP messages only), the first: 'Starting server on port 8080'"
    ) in message
    assert raised.value.method == "initialize"
    status = "\n".join(agent_lines(window.run))
    assert "note: the agent wrote 2 lines" in status


def test_failed_turn_quotes_the_first_junk_line(tmp_path: Path) -> None:
    """A turn failing after junk names the junk; a very long line is cut."""
    window, pair, clock = window_with(tmp_path, Failing)
    pair.result(window.open_on(pair.client, clock))
    assert window.junk_note() is None
    pair.client.protocol.dataReceived(b"\x1b[1m" + b"y" * 1000 + b"\n")
    with pytest.raises(TurnError) as raised:
        pair.result(window.send_prompt("hi", files=[]))
    first, note = str(raised.value).split("\n")
    assert first == "the agent answered Internal error (code -32603)"
    quoted = note.split("the first: ", 1)[1]
    assert quoted.startswith("'\\x1b[1myyy") and quoted.endswith("…'")
    assert len(quoted) < JUNK_SHOWN + 10


def test_no_junk_no_note(tmp_path: Path) -> None:
    """Without junk, errors are as before and there is no note."""
    window, pair, clock = window_with(tmp_path, Failing)
    pair.result(window.open_on(pair.client, clock))
    with pytest.raises(TurnError) as raised:
        pair.result(window.send_prompt("hi", files=[]))
    assert "\n" not in str(raised.value)
    assert window.run.notes == []


# -- ask, on real processes ---------------------------------------------------------------


@pytest.mark.process
class AskJunkTests(TestCase):
    """``ask`` (without -v) on an agent writing junk on its stdout."""

    timeout = 60

    def setUp(self) -> None:
        self.root = Path(tempfile.mkdtemp())
        self.project = self.root / "project"
        (self.project / ".acpkit").mkdir(parents=True)
        blocks = [
            f'[[agent]]\nname = "{mode}"\ncommand = "{sys.executable}"\n'
            f'args = ["{FIXTURE}", "{mode}"]\nenv = {{ PYTHONPATH = "{REPO}" }}\n'
            for mode in ("usage", "banner", "crash", "oversized")
        ]
        (self.project / ".acpkit" / "acp.toml").write_text("\n".join(blocks), encoding="utf-8")

    def ask(self, agent: str) -> Deferred[tuple[bytes, bytes, int]]:
        env = dict(os.environ, PYTHONPATH=str(REPO), ACPKIT_DIR=str(self.root / "user"))
        env.pop("ACPKIT_TRACE", None)
        result: Deferred[tuple[bytes, bytes, int]] = getProcessOutputAndValue(
            sys.executable,
            ["-m", "acpkit_client", "ask", "--agent", agent, "hi"],
            env=env,
            path=str(self.project),
        )
        return result

    async def test_not_an_agent(self) -> None:
        """A command that prints its usage and exits: the error quotes the usage line."""
        out, err, code = await self.ask("usage")
        self.assertEqual((code, out), (cli.EXIT_AGENT_FAILED, b""), err)
        text = err.decode()
        self.assertIn("exited with status 2", text)
        self.assertIn(
            "the agent wrote 2 lines that are not JSON on its stdout (ignored; stdout is for "
            "ACP messages only), the first: 'Usage: junk-agent [--serve] [--port N]'",
            text,
        )
        self.assertNotIn("#info]", text)  # no -v needed

    async def test_banner_on_a_working_agent_is_a_note(self) -> None:
        """An agent that works after a banner: the answer, and one note quoting the
        banner with its escape sequences made visible."""
        out, err, code = await self.ask("banner")
        self.assertEqual((code, out), (cli.EXIT_REFUSED, b"no\n"), err)
        text = err.decode()
        self.assertEqual(text.count("the agent wrote a line that is not JSON"), 1, text)
        self.assertIn("acpkit-client: note: the agent wrote a line", text)
        self.assertIn("'Loading model weights... done (\\x1b[32mok\\x1b[0m)'", text)

    async def test_junk_then_death_mid_turn(self) -> None:
        """Junk printed mid-turn before the agent dies: the error has the exit status and
        the junk line, cut at JUNK_SHOWN characters."""
        _out, err, code = await self.ask("crash")
        self.assertEqual(code, cli.EXIT_AGENT_FAILED, err)
        text = err.decode()
        self.assertIn("exited with status 3", text)
        self.assertIn("the first: 'panic: xxx", text)
        self.assertIn("x…'", text)
        self.assertNotIn("x" * (JUNK_SHOWN + 1), text)
        self.assertGreater(LONG, JUNK_SHOWN)

    async def test_a_message_over_the_size_limit_is_said(self) -> None:
        """
        A message over the line limit is dropped (what the agent said around it is
        printed), and ``ask`` says so on stderr instead of staying silent.
        """
        out, err, code = await self.ask("oversized")
        self.assertEqual((code, out), (cli.EXIT_OK, b"before after\n"), err)
        self.assertIn(
            b"acpkit-client: warning: the agent sent 1 message over the size limit "
            b"(67,108,864 bytes): dropped unread, so what it said may be incomplete\n",
            err,
        )
