"""
The ``lsp`` tool end to end: whole bob turns driven by the scripted model server (the
``openai`` engine), with real language servers (``python-lsp-server`` and
``jedi-language-server`` from PyPI, ``pyright`` from npm, installed by
``.ci/install-real-agents``; see tests/real_peers.py) on a small two-file project, and a
client that advertises its file system.

Also: a server that is not installed, a server that crashes mid-request (the fixture
``tests/fixtures/lsp_servers/crashing_server.py``), and bob's exit sending ``shutdown`` /
``exit`` to the servers it started (``twistd -n acp-agent`` as a real process).
"""

from __future__ import annotations

import functools
import json
import os
import re
import stat
import sys
import tempfile
from collections.abc import Callable, Coroutine
from typing import Any

import attrs
import pytest
from twisted.internet import reactor
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.trial.unittest import TestCase

from acpkit import schema
from acpkit.connection import ClientConnection
from acpkit.io import connect, spawn_agent
from acpkit.testing.modelserver import ScriptedModelServer
from acpkit.testing.script import parse_script
from acpkit_agent.config import AgentConfig
from acpkit_agent.lsp_config import LspServerConfig
from acpkit_agent.tap import AgentService, build_runtime, stop_language_servers
from tests.fixtures.agent.harness import RecordingClient
from tests.helpers import wait_until
from tests.real_peers import JEDI_LS, PYLSP, PYRIGHT_LS, require_peer

pytestmark = [pytest.mark.process, pytest.mark.real_agent]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CRASHING = os.path.join(ROOT, "tests", "fixtures", "lsp_servers", "crashing_server.py")

LIB = 'def greet(name):\n    """Say hello."""\n    return "héllo " + name\n'
MAIN = 'from lib import greet\n\nprint("çà et là", greet("bob"), greet("ann"))\n'
BROKEN = 'import os\n\nprint("ü", ünknown +)\n'

FS = schema.ClientCapabilities(
    fs=schema.FileSystemCapabilities(read_text_file=True, write_text_file=True)
)


def deferred_test(
    fn: Callable[[Any], Coroutine[Any, Any, None]],
) -> Callable[[Any], Deferred[None]]:
    """Run an ``async def`` test method on the reactor (trial waits for its Deferred)."""

    @functools.wraps(fn)
    def run(self: Any) -> Deferred[None]:
        return ensureDeferred(fn(self))

    return run


def _close(conn: ClientConnection) -> None:
    transport = conn.protocol.transport
    if transport is not None:
        transport.loseConnection()


def call(action: str, **arguments: Any) -> dict[str, Any]:
    return {"name": "lsp", "arguments": {"action": action, **arguments}}


def outputs(client: RecordingClient) -> list[tuple[str, str]]:
    """(status, output) of each tool call that ended, in order."""
    return [
        (u["status"], u["rawOutput"]["output"])
        for u in client.tool_updates()
        if u.get("status") in ("completed", "failed")
    ]


class LspToolTurnTests(TestCase):
    """bob in-process (``--listen`` on loopback) with real language servers."""

    timeout = 120

    def setUp(self) -> None:
        self.project = tempfile.mkdtemp(prefix="bob-lsp-")
        self.texts = {"lib.py": LIB, "main.py": MAIN, "broken.py": BROKEN}
        for name, text in self.texts.items():
            with open(self.path(name), "w", encoding="utf-8") as stream:
                stream.write(text)

    def path(self, name: str) -> str:
        return os.path.join(self.project, name)

    async def turn(
        self,
        server: LspServerConfig,
        turns: list[dict[str, Any]],
        *,
        answers: list[str] | None = None,
    ) -> RecordingClient:
        """Serve bob with ``server`` configured, run one prompt whose model calls ``turns``."""
        # jedi (under pylsp and jedi-language-server) writes its cache under HOME: a
        # temporary one for the server, not ours.
        home = os.path.abspath(self.mktemp())
        os.makedirs(home)
        cache = os.path.join(home, ".cache")
        server = attrs.evolve(server, env={**server.env, "HOME": home, "XDG_CACHE_HOME": cache})
        model = ScriptedModelServer(parse_script({"turn": turns}), reactor=reactor)
        base = await model.start()
        self.addCleanup(model.stop)
        config = AgentConfig(
            engine_name="openai",
            engine_settings={"base_url": base, "model": "scripted", "timeout": 30.0},
            context_window=100_000,
            yolo=False,
            lsp_servers=(server,),
        )
        runtime = build_runtime(config, reactor)
        service = AgentService(runtime, "tcp:0:interface=127.0.0.1", reactor, no_token=True)
        service.startService()
        self.addCleanup(service.stopService)
        self.addCleanup(stop_language_servers, runtime)
        await wait_until(lambda: service.port is not None, timeout=30.0)
        client = RecordingClient()
        client.answers = list(answers or [])
        # The client's file system holds the project (as an editor's buffers would).
        client.files = {self.path(name): text for name, text in self.texts.items()}
        conn = ClientConnection(client)
        await connect(reactor, f"tcp:127.0.0.1:{service.port.getHost().port}", conn.protocol)
        self.addCleanup(_close, conn)
        await conn.initialize(client_capabilities=FS)
        session = await conn.new_session(schema.NewSessionRequest(cwd=self.project, mcp_servers=[]))
        response = await conn.prompt(
            schema.PromptRequest(
                session_id=session.session_id, prompt=[schema.TextContentBlock(text="go")]
            )
        )
        assert response.stop_reason == schema.StopReason.END_TURN
        return client

    def _rename_turn(self, server: LspServerConfig) -> Deferred[RecordingClient]:
        return ensureDeferred(
            self.turn(
                server,
                [
                    {
                        "tool_calls": [
                            call("definition", path="main.py", line=3, symbol="greet"),
                            call("rename", path="lib.py", line=1, symbol="greet", new_name="hello"),
                        ]
                    },
                    {"chunks": ["renamed"]},
                ],
                answers=["allow"],
            )
        )

    async def _check_rename(self, client: RecordingClient) -> None:
        ends = outputs(client)
        assert ends[0] == (
            "completed",
            "1 definition of main.py:3:19:\nlib.py:1:5: def greet(name):",
        )
        status, output = ends[1]
        assert status == "completed", output
        assert output.startswith("renamed 'greet' to 'hello': ")
        # pylsp sends each file whole, jedi one edit per changed piece: the counts differ.
        assert re.fullmatch(
            r"renamed 'greet' to 'hello': \d+ edit\(s\) in 2 file\(s\): "
            r"lib.py \(\d+\), main.py \(\d+\)",
            output,
        ), output
        # One permission request, for the rename only, asked like edit_file.
        [request] = client.permission_requests
        assert request.tool_call.kind == schema.ToolKind.EDIT
        assert request.tool_call.title == "lsp rename: lib.py:1 greet → hello"
        assert [s["kind"] for s in client.of_kind("tool_call")] == ["search", "edit"]
        # Two diffs, one per file, applied through the client's fs (the disk is untouched).
        done = [u for u in client.tool_updates() if u.get("status") == "completed"][1]
        diffs = [c for c in done["content"] if c["type"] == "diff"]
        assert [d["path"] for d in diffs] == [self.path("lib.py"), self.path("main.py")]
        assert diffs[0]["oldText"] == LIB and diffs[0]["newText"] == LIB.replace("greet", "hello")
        assert client.files[self.path("lib.py")] == LIB.replace("greet", "hello")
        assert client.files[self.path("main.py")] == MAIN.replace("greet", "hello")
        assert ("write", self.path("main.py")) in client.fs_calls
        with open(self.path("main.py"), encoding="utf-8") as stream:
            assert stream.read() == MAIN

    @deferred_test
    async def test_pylsp_definition_and_rename_across_two_files(self) -> None:
        """pylsp: definition, then a rename across two files through the client's fs."""
        command = require_peer(PYLSP)
        client = await self._rename_turn(
            LspServerConfig(name="pylsp", command=command, files=("*.py",))
        )
        await self._check_rename(client)

    @deferred_test
    async def test_jedi_definition_and_rename_across_two_files(self) -> None:
        """jedi-language-server: the same turn (its edits are per identifier, not whole files)."""
        command = require_peer(JEDI_LS)
        client = await self._rename_turn(
            LspServerConfig(name="jedi", command=command, files=("*.py",))
        )
        await self._check_rename(client)

    @deferred_test
    async def test_pyright_columns_and_rename_on_a_line_outside_the_bmp(self) -> None:
        """
        pyright counts UTF-16 units as LSP says: on a line holding U+1D538 (two units) the
        model's 1-based columns come back right, and prepareRename + rename edit it exactly.
        """
        command = require_peer(PYRIGHT_LS)
        main = (
            'from lib import greet\n\nprint("\U0001d538\U0001d538", greet("bob"), greet("ann"))\n'
        )
        self.texts["main.py"] = main
        with open(self.path("main.py"), "w", encoding="utf-8") as stream:
            stream.write(main)
        client = await self.turn(
            LspServerConfig(name="pyright", command=command, args=("--stdio",), files=("*.py",)),
            [
                {
                    "tool_calls": [
                        call("references", path="main.py", line=3, character=30),
                        call("rename", path="main.py", line=3, symbol="greet", new_name="hi"),
                    ]
                },
                {"chunks": ["ok"]},
            ],
            answers=["allow"],
        )
        (status, references), (status2, renamed) = outputs(client)
        assert status == status2 == "completed", renamed
        line = 'print("\U0001d538\U0001d538", greet("bob"), greet("ann"))'
        assert sorted(references.splitlines()[1:]) == [
            "lib.py:1:5: def greet(name):",
            "main.py:1:17: from lib import greet",
            f"main.py:3:13: {line}",
            f"main.py:3:27: {line}",
        ]
        assert renamed.startswith("renamed 'greet' to 'hi': "), renamed
        assert client.files[self.path("main.py")] == main.replace("greet", "hi")
        assert client.files[self.path("lib.py")] == LIB.replace("greet", "hi")

    @deferred_test
    async def test_each_navigation_action_with_jedi(self) -> None:
        """references, hover, document and workspace symbols: never a dialog."""
        command = require_peer(JEDI_LS)
        client = await self.turn(
            LspServerConfig(name="jedi", command=command, files=("*.py",)),
            [
                {
                    "tool_calls": [
                        call("references", path="lib.py", line=1, character=5),
                        call("hover", path="main.py", line=3, symbol="greet"),
                        call("document_symbols", path="lib.py"),
                        call("workspace_symbols", path="lib.py", query="greet"),
                    ]
                },
                {"chunks": ["ok"]},
            ],
        )
        assert client.permission_requests == []
        ends = outputs(client)
        assert [status for status, _ in ends] == ["completed"] * 4, ends
        references, hover, symbols, workspace = (text for _, text in ends)
        assert references.splitlines() == [
            "4 references of lib.py:1:5:",
            "lib.py:1:5: def greet(name):",
            "main.py:1:17: from lib import greet",
            'main.py:3:19: print("çà et là", greet("bob"), greet("ann"))',
            'main.py:3:33: print("çà et là", greet("bob"), greet("ann"))',
        ]
        assert "def greet(name)" in hover and "Say hello." in hover
        assert symbols.splitlines()[:2] == ["symbols of lib.py:", "1:5 function greet — def greet"]
        assert "lib.py:1:5: function greet" in workspace
        kinds = [s["kind"] for s in client.of_kind("tool_call")]
        assert kinds == ["search", "read", "read", "search"]

    @deferred_test
    async def test_diagnostics_with_jedi(self) -> None:
        """jedi-language-server's diagnostics (syntax errors) of a file, without a dialog."""
        command = require_peer(JEDI_LS)
        client = await self.turn(
            LspServerConfig(name="jedi", command=command, files=("*.py",)),
            [
                {
                    "tool_calls": [
                        call("diagnostics", path="broken.py"),
                        call("diagnostics", path="lib.py"),
                    ]
                },
                {"chunks": ["ok"]},
            ],
        )
        assert client.permission_requests == []
        [(status, broken), (status2, clean)] = outputs(client)
        assert status == status2 == "completed"
        heading, problem = broken.splitlines()
        assert heading == "1 diagnostic(s) in broken.py:"
        assert re.match(r"3:\d+: error: SyntaxError: .*\[compile\]$", problem), problem
        assert clean == "no diagnostics for lib.py"
        assert [s["kind"] for s in client.of_kind("tool_call")] == ["read", "read"]

    @deferred_test
    async def test_a_server_not_installed_fails_one_call_and_the_turn_goes_on(self) -> None:
        """A command that does not exist: one failed line; read_file works in the same turn."""
        missing = os.path.join(self.project, "no-such-language-server")
        client = await self.turn(
            LspServerConfig(name="ghost", command=missing, files=("*.py",)),
            [
                {
                    "tool_calls": [
                        call("definition", path="main.py", line=3, symbol="greet"),
                        {"name": "read_file", "arguments": {"path": "lib.py"}},
                    ]
                },
                {"chunks": ["ok"]},
            ],
        )
        (status, output), after = outputs(client)
        assert status == "failed"
        assert output.startswith("lsp definition: ") and "ghost" in output
        assert "\n" not in output
        assert after == ("completed", LIB)

    @deferred_test
    async def test_a_server_crashing_mid_request_is_one_line(self) -> None:
        """The server dies during textDocument/definition: that call fails in one line."""
        client = await self.turn(
            LspServerConfig(
                name="crashy", command=sys.executable, args=(CRASHING,), files=("*.py",)
            ),
            [
                {"tool_calls": [call("definition", path="main.py", line=3, symbol="greet")]},
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "lib.py"}}]},
                {"chunks": ["ok"]},
            ],
        )
        (status, output), after = outputs(client)
        assert status == "failed"
        assert output.startswith("lsp definition: language server crashy ")
        assert "textDocument/definition" in output and "\n" not in output
        assert after == ("completed", LIB)


class BobExitTests(TestCase):
    """``twistd -n acp-agent`` with a language server: bob's exit shuts the server down."""

    timeout = 120

    @deferred_test
    async def test_exit_sends_shutdown_and_exit_to_the_language_server(self) -> None:
        """stdin ends: the server gets shutdown/exit and ends by itself (status 0), bob exits 0."""
        pylsp = require_peer(PYLSP)
        project = tempfile.mkdtemp(prefix="bob-lsp-exit-")
        home = tempfile.mkdtemp(prefix="bob-home-")
        with open(os.path.join(project, "lib.py"), "w", encoding="utf-8") as stream:
            stream.write(LIB)
        status_file = os.path.join(project, "server-status")
        wrapper = os.path.join(project, "pylsp-wrapper")
        with open(wrapper, "w") as stream:
            # Not exec: the shell outlives pylsp only if nobody kills the group.
            stream.write(f'#!/bin/sh\n"{pylsp}"\necho "exit $?" > "{status_file}"\n')
        os.chmod(wrapper, os.stat(wrapper).st_mode | stat.S_IXUSR)
        model = ScriptedModelServer(
            parse_script(
                {
                    "turn": [
                        {"tool_calls": [call("document_symbols", path="lib.py")]},
                        {"chunks": ["ok"]},
                    ]
                }
            ),
            reactor=reactor,
        )
        base = await model.start()
        self.addCleanup(model.stop)
        os.makedirs(os.path.join(project, ".acpkit"))
        with open(os.path.join(project, ".acpkit", "agent.toml"), "w") as stream:
            stream.write(
                "[engine]\n"
                f'name = "openai"\nbase_url = {json.dumps(base)}\nmodel = "scripted"\n'
                "[context]\ncontextWindow = 100000\n"
                "[lsp.servers.pylsp]\n"
                f'command = {json.dumps(wrapper)}\nfiles = ["*.py"]\n'
            )
        client = RecordingClient()
        conn = ClientConnection(client)
        agent = spawn_agent(
            reactor,
            conn.protocol,
            sys.executable,
            ["-c", "from twisted.scripts.twistd import run; run()", "-n", "acp-agent"],
            env={"PYTHONPATH": ROOT, "HOME": home},
            cwd=project,
        )
        self.addCleanup(agent.stop)
        await conn.initialize()
        session = await conn.new_session(schema.NewSessionRequest(cwd=project, mcp_servers=[]))
        await conn.prompt(
            schema.PromptRequest(
                session_id=session.session_id, prompt=[schema.TextContentBlock(text="go")]
            )
        )
        [(status, output)] = outputs(client)
        assert status == "completed" and output.startswith("symbols of lib.py:"), output
        assert not os.path.exists(status_file)
        exited = await agent.stop(grace=20.0)
        assert exited.exit_code == 0, agent.stderr_tail()
        with open(status_file) as stream:
            assert stream.read().strip() == "exit 0"
