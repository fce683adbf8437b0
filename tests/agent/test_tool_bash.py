"""Tests for the ``bash`` tool: real processes, output capping, timeout and cancellation."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import reactor
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase, TestCase

from acpkit_agent.tools import builtin_tools
from acpkit_agent.tools.base import DiskFileAccess, ToolContext, ToolResult
from acpkit_agent.tools.bash import BashRun, BashTool, OutputCap, find_shell
from acpkit_agent.tools.plan import PlanState


def make_context(cwd: str, the_reactor: Any = reactor) -> ToolContext:
    """A context on the real reactor for ``cwd``."""
    return ToolContext(
        cwd=cwd,
        files=DiskFileAccess(),
        reactor=the_reactor,
        plan=PlanState(),
        send_plan=lambda entries: None,
    )


def is_gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs (absent, or a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as stream:
            stat = stream.read()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def temp_dir(case: SynchronousTestCase) -> str:
    """A fresh absolute temporary directory, removed after the test (keeps the tree clean)."""
    path = os.path.realpath(tempfile.mkdtemp(prefix="acpkit-tools-"))
    case.addCleanup(shutil.rmtree, path, True)
    return path


class BashDescriptionTests(SynchronousTestCase):
    """Name, kind, title, locations and permission of the tool."""

    def test_metadata(self) -> None:
        """bash is an `execute` tool titled `bash: <command>` that always asks permission."""
        tool = builtin_tools()["bash"]
        self.assertEqual(tool.name, "bash")
        self.assertEqual(tool.kind, "execute")
        self.assertEqual(tool.title({"command": "ls -l"}), "bash: ls -l")
        self.assertEqual(tool.title({}), "bash: ")
        self.assertEqual(tool.locations({"command": "ls"}, "/tmp"), [])
        self.assertTrue(tool.needs_permission({"command": "ls"}))
        self.assertEqual(tool.parameters["required"], ["command"])

    def test_shell_found(self) -> None:
        """The shell is bash from PATH when there is one, else /bin/sh."""
        self.assertTrue(os.path.basename(find_shell()) in ("bash", "sh"))


class BashArgumentTests(SynchronousTestCase):
    """Bad arguments give failed results at once, and no process."""

    def failed_output(self, args: dict[str, Any], cwd: str = "/") -> str:
        """Run with ``args`` on a fake clock (nothing must be spawned) and return the output."""
        result = self.successResultOf(BashTool().run(make_context(cwd, Clock()), args))
        self.assertTrue(result.failed)
        self.assertIsNone(result.exit_status)
        return result.output

    def test_missing_command(self) -> None:
        """A missing command is reported by name."""
        self.assertEqual(
            self.failed_output({}), "bash: missing required argument 'command' (a string)"
        )

    def test_command_not_a_string(self) -> None:
        """A non-string command is reported with its type."""
        self.assertIn("must be a string, got list", self.failed_output({"command": ["ls"]}))

    def test_empty_command(self) -> None:
        """A blank command is refused."""
        self.assertEqual(self.failed_output({"command": "  "}), "bash: the command is empty")

    def test_bad_timeout(self) -> None:
        """A non-positive or non-numeric timeout is refused."""
        self.assertIn("must be positive", self.failed_output({"command": "ls", "timeout": 0}))
        self.assertIn("must be a number", self.failed_output({"command": "ls", "timeout": "9"}))

    def test_missing_cwd(self) -> None:
        """A session cwd that does not exist is reported."""
        output = self.failed_output({"command": "ls"}, cwd="/no/such/dir")
        self.assertEqual(output, "bash: the working directory /no/such/dir does not exist")


class OutputCapTests(SynchronousTestCase):
    """The head-and-tail output cap."""

    def test_small_output_kept(self) -> None:
        """Output under the limit is kept whole, whatever the chunking."""
        cap = OutputCap(limit=10)
        for chunk in (b"abc", b"", b"defg"):
            cap.feed(chunk)
        self.assertEqual(cap.text(), "abcdefg")
        self.assertEqual(cap.omitted, 0)

    def test_marker(self) -> None:
        """Past the limit, the head and the tail are kept around an omission marker."""
        cap = OutputCap(limit=8)
        cap.feed(b"0123456789abcdefghij")
        self.assertEqual(cap.text(), "0123\n[… 12 bytes omitted …]\nghij")

    @given(st.lists(st.binary(max_size=40), max_size=20), st.integers(min_value=2, max_value=64))
    def test_head_and_tail_any_chunking(self, chunks: list[bytes], limit: int) -> None:
        """For any chunking, the cap keeps exactly the first and last bytes of the stream."""
        cap = OutputCap(limit=limit)
        for chunk in chunks:
            cap.feed(chunk)
        stream = b"".join(chunks)
        self.assertEqual(cap.total, len(stream))
        head, tail = limit // 2, limit - limit // 2
        if len(stream) <= limit:
            self.assertEqual(cap.omitted, 0)
            self.assertEqual(bytes(cap._head + cap._tail), stream)
        else:
            self.assertEqual(bytes(cap._head), stream[:head])
            self.assertEqual(bytes(cap._tail), stream[-tail:])
            self.assertEqual(cap.omitted, len(stream) - limit)


@pytest.mark.process
class BashProcessTests(TestCase):
    """Real commands on the real reactor."""

    timeout = 20

    def setUp(self) -> None:
        self.cwd = temp_dir(self)
        self.ctx = make_context(self.cwd)

    def run_bash(self, tool: BashTool, **args: Any) -> Deferred[ToolResult]:
        """Run ``tool`` with ``args``."""
        return tool.run(self.ctx, args)

    async def test_success_in_cwd(self) -> None:
        """The command runs in the session cwd; a zero exit status gives a plain output."""
        result = await self.run_bash(BashTool(), command="pwd; echo hello")
        self.assertEqual(result, ToolResult(output=f"{self.cwd}\nhello\n", exit_status=0))

    async def test_stderr_interleaved(self) -> None:
        """Standard output and error are captured together, in order."""
        command = "echo one; echo two >&2; echo three; echo four >&2"
        result = await self.run_bash(BashTool(), command=command)
        self.assertEqual(result.output, "one\ntwo\nthree\nfour\n")

    async def test_stdin_closed(self) -> None:
        """Standard input is closed: a command reading it sees end of file at once."""
        result = await self.run_bash(BashTool(), command="cat; echo done")
        self.assertEqual(result.output, "done\n")

    async def test_nonzero_exit(self) -> None:
        """A non-zero exit status fails the call and is reported after the output."""
        result = await self.run_bash(BashTool(), command="echo oops; exit 3")
        self.assertEqual(result, ToolResult("oops\n[exit status 3]", failed=True, exit_status=3))

    async def test_command_not_found(self) -> None:
        """An unknown command gives the shell's message and its exit status 127."""
        result = await self.run_bash(BashTool(), command="no-such-command-xyz")
        self.assertTrue(result.failed)
        self.assertEqual(result.exit_status, 127)
        self.assertIn("no-such-command-xyz", result.output)
        self.assertTrue(result.output.endswith("[exit status 127]"))

    async def test_no_output(self) -> None:
        """A silent successful command says so."""
        result = await self.run_bash(BashTool(), command="true")
        self.assertEqual(result, ToolResult("[no output]", exit_status=0))

    async def test_output_capped(self) -> None:
        """Long output keeps its head and tail with the omitted byte count."""
        command = "for i in $(seq 1 2000); do echo line$i; done"
        result = await self.run_bash(BashTool(output_limit=100), command=command)
        total = sum(len(f"line{i}\n") for i in range(1, 2001))
        self.assertTrue(result.output.startswith("line1\nline2\n"))
        self.assertTrue(result.output.endswith("line2000\n"))
        self.assertIn(f"[… {total - 100} bytes omitted …]", result.output)

    async def test_runs_with_bash(self) -> None:
        """Commands use bash syntax when bash is installed."""
        result = await self.run_bash(BashTool(), command='echo "${BASH_VERSION:+bash}"')
        expected = "bash\n" if find_shell().endswith("bash") else "\n"
        self.assertEqual(result.output, expected)

    async def test_sh_fallback(self) -> None:
        """With /bin/sh as the shell (bash missing), commands still run."""
        result = await self.run_bash(BashTool(shell="/bin/sh"), command="echo $0; exit 2")
        self.assertEqual(result, ToolResult("/bin/sh\n[exit status 2]", failed=True, exit_status=2))

    async def test_leads_its_process_group(self) -> None:
        """The command is the leader of its own process group, apart from the agent's."""
        run = BashTool().start(self.ctx, {"command": "ps -o pgid= -p $$"})
        result = await run.result
        self.assertEqual(int(result.output), run.pid)
        self.assertNotEqual(run.pid, os.getpgrp())

    async def test_timeout_kills_group(self) -> None:
        """A timeout stops the command and its children, and fails with a clear note."""
        pids: list[int] = []
        tool = BashTool(kill_grace=5)
        run = tool.start(
            self.ctx,
            {"command": "sleep 30 & echo $!; echo partial; wait", "timeout": 0.5},
            on_output=lambda data: pids.extend(int(w) for w in data.split() if w.isdigit()),
        )
        result = await run.result
        await run.ended
        self.assertTrue(result.failed)
        self.assertIn("partial", result.output)
        self.assertIn("[timed out after 0.5 s; the command was stopped]", result.output)
        self.assertIn("[killed by signal 15]", result.output)
        self.assertEqual(len(pids), 1)
        self.assertTrue(is_gone(pids[0]))

    async def test_cancel_kills_children(self) -> None:
        """Cancelling fails the Deferred with CancelledError at once and kills the whole group."""
        run, pids = await self.started("echo $$; sleep 30 & echo $!; sleep 30 & echo $!; wait", 3)
        self.assertEqual(pids[0], run.pid)
        run.result.cancel()
        self.failureResultOf(run.result, CancelledError)
        await run.ended
        for pid in pids:
            self.assertTrue(is_gone(pid), f"pid {pid} survived")

    async def test_cancel_escalates_to_sigkill(self) -> None:
        """Processes that ignore SIGTERM are killed with SIGKILL after the grace period."""
        command = "trap '' TERM; sh -c 'trap \"\" TERM; sleep 30' & echo $$; echo $!; wait"
        run, pids = await self.started(command, 2, BashTool(kill_grace=0.3))
        run.result.cancel()
        self.failureResultOf(run.result, CancelledError)
        await run.ended
        for pid in pids:
            self.assertTrue(is_gone(pid), f"pid {pid} survived")

    async def started(
        self, command: str, count: int, tool: BashTool | None = None
    ) -> tuple[BashRun, list[int]]:
        """Start ``command`` and wait until it printed ``count`` pids."""
        pids: list[int] = []
        printed: Deferred[None] = Deferred()

        def observe(data: bytes) -> None:
            pids.extend(int(word) for word in data.split() if word.isdigit())
            if len(pids) >= count and not printed.called:
                printed.callback(None)

        run = (tool or BashTool()).start(self.ctx, {"command": command}, on_output=observe)
        await printed
        return run, pids
