"""``acpkit-client ask`` end to end, in real processes, against real agents."""

from __future__ import annotations

import io
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.protocol import ProcessProtocol
from twisted.internet.utils import getProcessOutputAndValue
from twisted.python.failure import Failure
from twisted.trial.unittest import SkipTest, TestCase

from acpkit import schema
from acpkit_client import cli
from tests.fixtures.client.tiny_agent import TinyAgent
from tests.helpers import MemoryAgentReactor, write

REPO = Path(__file__).resolve().parent.parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "client"
PLUGIN = REPO / "twisted" / "plugins" / "acpkit_agent.py"


#: ``ask``'s handshake limit in the tests that do not test it: the agent's start (a Python
#: interpreter importing acpkit, or the SDK, or twistd) counts, and on a loaded machine it
#: took longer than the default 30 s. A test of the limit gives its own, which wins.
HANDSHAKE = ("--handshake-timeout", "120")


def agents_file(*agents: tuple[str, str, list[str]]) -> str:
    blocks = []
    for name, command, args in agents:
        quoted = ", ".join(f'"{arg}"' for arg in args)
        blocks.append(
            f'[[agent]]\nname = "{name}"\ncommand = "{command}"\nargs = [{quoted}]\n'
            f'env = {{ PYTHONPATH = "{REPO}" }}\n'
        )
    return "\n".join(blocks)


def tiny(name: str, mode: str) -> tuple[str, str, list[str]]:
    return (name, sys.executable, [str(FIXTURES / "tiny_agent.py"), mode])


@pytest.mark.process
class AskTests(TestCase):
    """Each test runs ``python -m acpkit_client ask`` in a temporary project."""

    # Each test starts one or two agents: on a loaded machine a minute was not enough.
    timeout = 180

    def setUp(self) -> None:
        self.root = Path(tempfile.mkdtemp())
        self.project = self.root / "project"
        (self.project / ".acpkit").mkdir(parents=True)
        (self.project / "notes.txt").write_text("the notes\n", encoding="utf-8")
        self.trace = self.root / "trace.log"
        (self.project / ".acpkit" / "acp.toml").write_text(
            agents_file(
                tiny("tiny", "normal"),
                tiny("refuser", "refuse"),
                tiny("crasher", "crash"),
                tiny("slow", "slow"),
                tiny("stubborn", "stubborn"),
                tiny("locked", "auth"),
                ("sdk", sys.executable, [str(FIXTURES / "sdk_agent.py")]),
            ),
            encoding="utf-8",
        )

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            PYTHONPATH=str(REPO),
            ACPKIT_DIR=str(self.root / "user"),
            ACPKIT_TRACE=str(self.trace),
        )
        return env

    def ask(self, *args: str, project: Path | None = None) -> Deferred[tuple[bytes, bytes, int]]:
        result: Deferred[tuple[bytes, bytes, int]] = getProcessOutputAndValue(
            sys.executable,
            ["-m", "acpkit_client", "ask", *HANDSHAKE, *args],
            env=self.env(),
            path=str(project or self.project),
        )
        return result

    async def test_answer_on_stdout_tools_on_stderr_deny_by_default(self) -> None:
        """The answer streams to stdout, tool calls and plan to stderr; default is deny."""
        out, err, code = await self.ask("--agent", "tiny", "explique @notes.txt s'il te plaît")
        uri = (self.project / "notes.txt").as_uri()
        self.assertEqual(code, cli.EXIT_OK, err)
        self.assertEqual(out.decode(), f"echo: explique <resource {uri} 10 chars> s'il te plaît\n")
        self.assertIn(b"[plan]", err)
        self.assertIn(b"[tool] Write out.txt (edit) [failed]", err)
        self.assertFalse((self.project / "out.txt").exists())
        trace = self.trace.read_text(encoding="utf-8")
        self.assertIn(" -> tiny ", trace)
        self.assertIn(" <- tiny ", trace)

    async def test_unopenable_trace_file_changes_nothing(self) -> None:
        """An ACPKIT_TRACE that cannot be opened means no trace, and nothing else."""
        self.trace = self.root / "no-such-dir" / "trace.log"
        out, err, code = await self.ask("--agent", "refuser", "x")
        self.assertEqual((code, out), (cli.EXIT_REFUSED, b"no\n"), err)
        self.assertFalse(self.trace.exists())

    async def test_allow_flag(self) -> None:
        """--allow chooses allow_once: the agent writes through fs/write_text_file."""
        _out, err, code = await self.ask("--allow", "go")
        self.assertEqual(code, cli.EXIT_OK, err)
        self.assertEqual((self.project / "out.txt").read_text(encoding="utf-8"), "written\n")
        self.assertIn(b"[completed]", err)

    async def test_sdk_agent(self) -> None:
        """Against an agent built on the official Python SDK: links, permission, fs read."""
        out, err, code = await self.ask("--agent", "sdk", "--allow", "hello @notes.txt")
        self.assertEqual(code, cli.EXIT_OK, err)
        self.assertEqual(out, b"sdk says: hello \n")
        self.assertIn(b"[tool] Read notes.txt (read) [completed]", err)
        out, err, code = await self.ask("--agent", "sdk", "hello")
        self.assertEqual(code, cli.EXIT_OK, err)
        self.assertIn(b"[tool] Read notes.txt (read) [failed]", err)

    async def test_refusal_exit_code(self) -> None:
        """A refusal exits 4."""
        out, err, code = await self.ask("--agent", "refuser", "x")
        self.assertEqual(code, cli.EXIT_REFUSED, err)
        self.assertEqual(out, b"no\n")

    async def test_crash_exit_code_and_stderr_tail(self) -> None:
        """An agent dying mid-turn exits 1 and shows its exit status and stderr tail."""
        _out, err, code = await self.ask("--agent", "crasher", "x")
        self.assertEqual(code, cli.EXIT_AGENT_FAILED, err)
        self.assertIn(b"exited with status 3", err)
        self.assertIn(b"tiny: something broke", err)

    async def test_login_required(self) -> None:
        """An agent requiring a login exits 1 and says that acpkit-client cannot log in."""
        _out, err, code = await self.ask("--agent", "locked", "x")
        self.assertEqual(code, cli.EXIT_AGENT_FAILED, err)
        self.assertIn(b"requires a login", err)

    async def test_config_errors(self) -> None:
        """An unknown agent name, or a refused agents file, exits 3 saying why."""
        _out, err, code = await self.ask("--agent", "nobody", "x")
        self.assertEqual(code, cli.EXIT_CONFIG)
        self.assertIn(b"no agent is called 'nobody'", err)
        (self.project / ".acpkit" / "acp.toml").write_text(
            '[[agent]]\nname = "x"\n', encoding="utf-8"
        )
        _out, err, code = await self.ask("x")
        self.assertEqual(code, cli.EXIT_CONFIG)
        self.assertIn(b'agent "x" has no command', err)

    async def test_missing_command(self) -> None:
        """A command not found exits 1 naming it."""
        (self.project / ".acpkit" / "acp.toml").write_text(
            '[[agent]]\nname = "x"\ncommand = "no-such-agent-command"\n', encoding="utf-8"
        )
        _out, err, code = await self.ask("x")
        self.assertEqual(code, cli.EXIT_AGENT_FAILED)
        self.assertIn(b'command "no-such-agent-command" not found', err)

    def scripted(self, name: str, body: str) -> None:
        """Add agent ``name``: tiny_agent.main() with TinyAgent replaced by ``body``'s class
        ``Agent`` (a TinyAgent subclass), written to a temporary script."""
        script = self.root / f"{name}.py"
        script.write_text(
            "from typing import Any\n"
            "from twisted.internet.defer import Deferred\n"
            "from acpkit import schema\n"
            "from acpkit.errors import RPCError\n"
            "from tests.fixtures.client import tiny_agent\n"
            "from tests.fixtures.client.tiny_agent import TinyAgent, text\n"
            f"{body}\n"
            "tiny_agent.TinyAgent = Agent\n"
            "tiny_agent.main()\n",
            encoding="utf-8",
        )
        agents = self.project / ".acpkit" / "acp.toml"
        extra = agents_file((name, sys.executable, [str(script)]))
        agents.write_text(agents.read_text(encoding="utf-8") + "\n" + extra, encoding="utf-8")

    async def test_handshake_timeout_on_initialize(self) -> None:
        """An agent that never answers initialize: after --handshake-timeout, one line
        naming initialize, exit 124, and the agent is stopped."""
        mute = self.root / "mute.py"
        mute.write_text("import sys\nsys.stdin.read()\n", encoding="utf-8")
        agents = self.project / ".acpkit" / "acp.toml"
        extra = agents_file(("mute", sys.executable, [str(mute)]))
        agents.write_text(agents.read_text(encoding="utf-8") + "\n" + extra, encoding="utf-8")
        out, err, code = await self.ask("--agent", "mute", "--handshake-timeout", "0.3", "x")
        self.assertEqual(code, cli.EXIT_TIMEOUT, err)
        self.assertEqual(out, b"")
        self.assertEqual(
            err,
            b"acpkit-client: agent 'mute': no answer to initialize within 0.3 s "
            b"(--handshake-timeout); stopping the agent\n",
        )

    async def test_long_answer_is_not_cut(self) -> None:
        """An answer of 3 MiB (a window keeps 1 MiB) reaches stdout whole; exit 0."""
        self.scripted(
            "long",
            "class Agent(TinyAgent):\n"
            "    async def prompt(self, params: Any) -> Any:\n"
            "        for i in range(3072):\n"
            "            line = f'{i:07d}' + 'x' * 1016 + '\\n'\n"
            "            await self.conn.session_update(\n"
            "                params.session_id, schema.AgentMessageChunk(content=text(line))\n"
            "            )\n"
            "        return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)\n",
        )
        out, err, code = await self.ask("--agent", "long", "x")
        self.assertEqual(code, cli.EXIT_OK, err)
        expected = "".join(f"{i:07d}" + "x" * 1016 + "\n" for i in range(3072))
        self.assertEqual(len(out), 3 * 1024 * 1024)
        self.assertEqual(out.decode(), expected)
        self.assertNotIn(b"dropped", err)

    async def test_agent_error_with_data(self) -> None:
        """A prompt answered -32603 with data: the message once, the code once, the data."""
        self.scripted(
            "failing",
            "class Agent(TinyAgent):\n"
            "    def prompt(self, params: Any) -> Any:\n"
            "        raise RPCError(-32603, 'Internal error', {'details': 'API key not set'})\n",
        )
        _out, err, code = await self.ask("--agent", "failing", "x")
        self.assertEqual(code, cli.EXIT_AGENT_FAILED, err)
        self.assertEqual(
            err,
            b"acpkit-client: agent 'failing': the agent answered Internal error "
            b'(code -32603; data: {"details":"API key not set"})\n',
        )

    async def test_auth_methods_on_a_working_agent_say_nothing(self) -> None:
        """An agent that lists authMethods and answers gets no "requires a login" note."""
        self.scripted(
            "listed",
            "import attrs\n"
            "class Agent(TinyAgent):\n"
            "    def initialize(self, params: Any) -> Any:\n"
            "        methods = [schema.AuthMethodAgent(id='login', name='Log in')]\n"
            "        return attrs.evolve(super().initialize(params), auth_methods=methods)\n",
        )
        out, err, code = await self.ask("--agent", "listed", "hi")
        self.assertEqual((code, out), (cli.EXIT_OK, b"echo: hi\n"), err)
        self.assertNotIn(b"login", err)

    async def test_verbose_after_ask(self) -> None:
        """ask -v (after the sub-command) is accepted and logs to stderr."""
        out, err, code = await self.ask("-v", "--agent", "refuser", "x")
        self.assertEqual((code, out), (cli.EXIT_REFUSED, b"no\n"), err)
        self.assertIn(b"#info]", err)

    def interrupt(self, agent: str, times: int) -> Deferred[tuple[int | None, bytes]]:
        """Run ``ask`` on ``agent``; send SIGINT ``times`` times once the answer starts."""
        done: Deferred[tuple[int | None, bytes]] = Deferred()

        class Watcher(ProcessProtocol):
            out = b""
            err = b""
            sent = 0

            def outReceived(self, data: bytes) -> None:
                self.out += data
                if b"thinking..." in self.out:
                    self.send()

            def errReceived(self, data: bytes) -> None:
                self.err += data
                if b"cancelling the turn" in self.err:
                    self.send()

            def send(self) -> None:
                wanted = 1 if b"cancelling the turn" not in self.err else times
                if self.sent < wanted:
                    self.sent += 1
                    assert self.transport is not None
                    self.transport.signalProcess("INT")

            def processEnded(self, reason: Failure) -> None:
                done.callback((getattr(reason.value, "exitCode", None), self.err))

        reactor.spawnProcess(
            Watcher(),
            sys.executable,
            [sys.executable, "-m", "acpkit_client", "ask", *HANDSHAKE, "--agent", agent, "wait"],
            env=self.env(),
            path=str(self.project),
        )
        return done

    async def test_ctrl_c_cancels_the_turn(self) -> None:
        """SIGINT during a turn sends session/cancel, waits for cancelled, and exits 130."""
        code, err = await self.interrupt("slow", 1)
        self.assertEqual(code, cli.EXIT_CANCELLED, err)
        self.assertIn(b"the turn ended: cancelled", err)
        trace = self.trace.read_text(encoding="utf-8")
        self.assertIn('"method":"session/cancel"', trace)
        self.assertIn('"stopReason":"cancelled"', trace)

    async def test_second_ctrl_c_stops_the_agent(self) -> None:
        """When the agent ignores the cancel, a second SIGINT stops it; exit 130."""
        code, err = await self.interrupt("stubborn", 2)
        self.assertEqual(code, cli.EXIT_CANCELLED, err)
        self.assertIn(b"stopping the agent", err)

    async def test_reference_agent_echo_engine(self) -> None:
        """With no agents file, the built-in reference agent (echo engine) answers."""
        if not PLUGIN.exists():
            raise SkipTest("twisted/plugins/acpkit_agent.py is not in the tree yet")
        empty = self.root / "empty"
        empty.mkdir()
        out, err, code = await self.ask("hello reference", project=empty)
        self.assertEqual(code, cli.EXIT_OK, err)
        self.assertIn(b"hello reference", out)


# -- time limits, in memory ---------------------------------------------------------------
# The agent is an in-memory TinyAgent and time is a Clock: what these check does not
# depend on how fast a child process starts (a limit that also covered the agent's start
# failed once on a loaded machine).


class NoSession(TinyAgent):
    """Answers ``initialize``, never ``session/new``."""

    def new_session(self, params: schema.NewSessionRequest) -> Any:
        return Deferred()


def ask_in_memory(
    tmp_path: Path, make_agent: Callable[[Any], TinyAgent], name: str, *args: str
) -> tuple[MemoryAgentReactor, Deferred[int], io.StringIO, io.StringIO]:
    """Run ``acpkit-client ask --agent NAME ARGS`` in this process, in a project whose
    agent ``name`` is ``make_agent`` spawned in memory; the run has not started yet."""
    project = tmp_path / "project"
    write(project / ".acpkit" / "acp.toml", agents_file(tiny(name, "normal")))
    options = cli._parser().parse_args(["ask", "--cwd", str(project), "--agent", name, *args])
    clock = MemoryAgentReactor(make_agent)
    out, err = io.StringIO(), io.StringIO()
    asked = Deferred.fromCoroutine(cli.ask(clock, options, out, err, False))
    return clock, asked, out, err


def ended(clock: MemoryAgentReactor, asked: Deferred[int]) -> int:
    """The exit status, once the agent was stopped (its grace, if any, on the clock)."""
    outcome: list[Any] = []
    asked.addBoth(outcome.append)
    for _ in range(10):
        if outcome:
            break
        clock.advance(1)
    assert outcome, "ask did not end"
    assert isinstance(outcome[0], int), outcome[0]
    return outcome[0]


def test_handshake_timeout_on_session_new(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """initialize answered but session/new never: the message names session/new."""
    monkeypatch.setenv("ACPKIT_DIR", str(tmp_path / "user"))
    clock, asked, _out, err = ask_in_memory(
        tmp_path, NoSession, "nosession", "--handshake-timeout", "5", "x"
    )
    clock.advance(4.9)
    assert not asked.called
    clock.advance(0.1)
    code = ended(clock, asked)
    assert code == cli.EXIT_TIMEOUT, err.getvalue()
    assert "no answer to session/new within 5 s (--handshake-timeout)" in err.getvalue()


def test_turn_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--timeout limits the turn: the answer so far is printed, session/cancel is sent,
    one line names session/prompt, exit 124 (even for an agent ignoring the cancel)."""
    trace = tmp_path / "trace.log"
    monkeypatch.setenv("ACPKIT_DIR", str(tmp_path / "user"))
    monkeypatch.setenv("ACPKIT_TRACE", str(trace))
    clock, asked, out, err = ask_in_memory(
        tmp_path, lambda conn: TinyAgent(conn, "stubborn"), "stubborn", "--timeout", "0.5", "wait"
    )
    clock.advance(0.4)
    assert not asked.called
    clock.advance(0.1)
    code = ended(clock, asked)
    assert code == cli.EXIT_TIMEOUT, err.getvalue()
    assert out.getvalue() == "thinking...\n"
    assert (
        "acpkit-client: agent 'stubborn': no answer to session/prompt within 0.5 s "
        "(--timeout); stopping the agent\n"
    ) in err.getvalue()
    assert '"method":"session/cancel"' in trace.read_text(encoding="utf-8")


class TerminalPromptTests(TestCase):
    """The terminal permission prompt reads the user's choice through the reactor."""

    timeout = 10

    def ask_with(self, typed: bytes) -> Deferred[Any]:
        from acpkit import schema

        read_fd, write_fd = os.pipe()
        self.addCleanup(os.close, read_fd)
        err = io.StringIO()
        prompt = cli.TerminalPermissionPrompt(reactor, err, read_fd)
        request = schema.RequestPermissionRequest(
            session_id="s",
            tool_call=schema.ToolCallUpdate(tool_call_id="t", title="Delete build/"),
            options=[
                schema.PermissionOption(
                    option_id="ok", name="Allow", kind=schema.PermissionOptionKind.ALLOW_ONCE
                ),
                schema.PermissionOption(
                    option_id="no", name="Reject", kind=schema.PermissionOptionKind.REJECT_ONCE
                ),
            ],
        )
        d = Deferred.fromCoroutine(prompt.choose(request))
        os.write(write_fd, typed)
        os.close(write_fd)
        self.err = err
        return d

    async def test_number_chooses_option(self) -> None:
        """Typing 1 chooses the first option; the request and options were shown."""
        chosen = await self.ask_with(b"1\n")
        self.assertEqual(chosen, "ok")
        self.assertIn("Delete build/", self.err.getvalue())
        self.assertIn("2. Reject (reject_once)", self.err.getvalue())

    async def test_enter_or_eof_is_no_answer(self) -> None:
        """An empty line, or the end of input, is no answer (which rejects)."""
        self.assertIsNone(await self.ask_with(b"\n"))
        self.assertIsNone(await self.ask_with(b""))


def test_no_subcommand_opens_the_terminal_ui(monkeypatch: Any) -> None:
    """Without a sub-command, acpkit-client hands its arguments to the terminal UI."""
    import acpkit_client.tui.app

    seen: list[list[str]] = []

    def fake_main(argv: list[str]) -> int:
        seen.append(argv)
        return 0

    monkeypatch.setattr(acpkit_client.tui.app, "main", fake_main)
    assert cli.main([]) == 0
    assert cli.main(["--cwd", "/tmp", "-v"]) == 0
    assert seen == [[], ["--cwd", "/tmp"]]


def test_subcommand_and_help_stay_with_the_command_line(capsys: Any) -> None:
    """``ask`` and ``--help`` are this parser's; -v before ``ask`` is the global flag."""
    assert not cli._wants_terminal_ui(["ask", "hi"])
    assert not cli._wants_terminal_ui(["-v", "ask", "hi"])
    assert not cli._wants_terminal_ui(["--help"])
    assert cli._wants_terminal_ui(["--log", "ui.log"])
    assert cli.main(["--help"]) == 0
    assert "ask" in capsys.readouterr().out


def test_allow_and_deny_are_exclusive(capsys: Any) -> None:
    """--allow and --deny together are a usage error (exit 2)."""
    assert cli.main(["ask", "--allow", "--deny", "x"]) == cli.EXIT_USAGE


def test_printer_separates_messages() -> None:
    """Two agent messages are separated by a blank line; the answer ends with a newline."""
    from acpkit import codec, schema
    from acpkit_client.conversation import Conversation

    out, err = io.StringIO(), io.StringIO()
    c = Conversation()
    printer = cli.AskPrinter(out, err)
    c.subscribe(printer)
    for text, mid in (("a", "1"), ("b", "1"), ("c", "2")):
        update = codec.decode(
            schema.SessionNotification,
            {
                "sessionId": "s",
                "update": {
                    "sessionUpdate": "agent_message_chunk",
                    "messageId": mid,
                    "content": {"type": "text", "text": text},
                },
            },
        ).update
        c.apply(update)
    printer.finish()
    assert out.getvalue() == "ab\n\nc\n"
