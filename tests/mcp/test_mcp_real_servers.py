"""
acpkit's MCP client against real MCP servers over stdio, and misbehaving fixture servers.

Real servers (installed by ``.ci/install-real-agents``; see tests/real_peers.py):
``mcp-server-time`` and ``mcp-server-git`` from PyPI, ``@modelcontextprotocol/server-everything``
from npm.  The fixture ``tests/fixtures/mcp_servers/misbehaving_server.py`` hangs, crashes
mid-call, writes junk, or ignores the end of its input and SIGTERM.  Every test checks
that no process of the server's group is left.
"""

from __future__ import annotations

import base64
import functools
import os
import subprocess
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from twisted.internet import reactor
from twisted.internet.defer import CancelledError, Deferred, ensureDeferred
from twisted.trial.unittest import TestCase

from acpkit.errors import RequestTimeout, RPCError
from acpkit.io.process_groups import ChildGroups
from acpkit.mcp.client import McpClient, McpHandshakeError, McpHandshakeTimeout, McpServerGone
from acpkit.mcp.schema import (
    BlobResourceContents,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
)
from acpkit.mcp.stdio import McpServerNotStarted, connect_stdio
from tests.real_peers import MCP_EVERYTHING, MCP_GIT, MCP_TIME, require_peer

# One xdist worker runs them all, one after the other: fixture_processes() looks for the
# fixture servers of a mode among every process of the machine, so another test of this
# file running at the same time would be counted as a leftover.
pytestmark = [
    pytest.mark.process,
    pytest.mark.real_agent,
    pytest.mark.xdist_group("mcp_real_servers"),
]

FIXTURE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "fixtures",
    "mcp_servers",
    "misbehaving_server.py",
)


def deferred_test(
    fn: Callable[[Any], Coroutine[Any, Any, None]],
) -> Callable[[Any], Deferred[None]]:
    """Run an ``async def`` test method on the reactor (trial waits for its Deferred)."""

    @functools.wraps(fn)
    def run(self: Any) -> Deferred[None]:
        return ensureDeferred(fn(self))

    return run


def group_gone(pgid: int) -> bool:
    """Whether no process of group ``pgid`` is left."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def fixture_processes(mode: str) -> list[int]:
    """Pids of fixture servers still running in ``mode`` (zombies count as gone)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as f:
                zombie = f.read().split(") ", 1)[1].startswith("Z")
        except OSError:
            continue
        if not zombie and FIXTURE.encode() in argv and mode.encode() in argv:
            pids.append(int(entry))
    return pids


def text_of(blocks: list[Any]) -> str:
    return "\n".join(b.text for b in blocks if isinstance(b, TextContent))


class McpServerTestCase(TestCase):
    """Each test gets its clients closed and their process groups checked gone."""

    timeout = 60

    def setUp(self) -> None:
        self.clients: list[McpClient] = []

    async def connect(self, path: str, args: list[str] | None = None, **kw: Any) -> McpClient:
        client = await connect_stdio(reactor, path, args or [], name=os.path.basename(path), **kw)
        self.clients.append(client)
        self.addCleanup(self._close, client)
        return client

    async def fixture(self, mode: str, **kw: Any) -> McpClient:
        client = await connect_stdio(
            reactor, sys.executable, [FIXTURE, mode], name=f"fixture-{mode}", **kw
        )
        self.clients.append(client)
        self.addCleanup(self._close, client)
        return client

    def _close(self, client: McpClient) -> Deferred[None]:
        async def close() -> None:
            await client.close()
            assert client.process is not None and client.process.pid is not None
            assert group_gone(client.process.pid), f"{client.name}'s process group is left"

        return ensureDeferred(close())


class TimeServerTests(McpServerTestCase):
    """mcp-server-time (PyPI)."""

    @deferred_test
    async def test_lists_and_calls_get_current_time(self) -> None:
        """get_current_time for Etc/UTC answers the UTC time; closing ends the server (status 0)."""
        client = await self.connect(require_peer(MCP_TIME))
        assert client.server_info is not None and client.server_info.name == "mcp-time"
        tools = await client.list_tools()
        names = {t.name for t in tools}
        assert {"get_current_time", "convert_time"} <= names
        result = await client.call_tool("get_current_time", {"timezone": "Etc/UTC"})
        assert not result.is_error
        assert "Etc/UTC" in text_of(result.content)
        assert result.structured_content is not None
        assert result.structured_content["timezone"] == "Etc/UTC"
        await client.close()
        assert client.closed is not None and client.closed.exit_code == 0
        assert client.closed.requested

    @deferred_test
    async def test_bad_timezone_is_error_and_unknown_tool_is_an_rpc_error(self) -> None:
        """A bad timezone is an isError result; an unknown tool a -32602 error answer."""
        client = await self.connect(require_peer(MCP_TIME))
        result = await client.call_tool("get_current_time", {"timezone": "Mars/Olympus"})
        assert result.is_error
        assert "Mars/Olympus" in text_of(result.content)
        with pytest.raises(RPCError) as caught:
            await client.call_tool("no_such_tool", {})
        assert caught.value.code == -32602


class GitServerTests(McpServerTestCase):
    """mcp-server-git (PyPI) on a temporary repository."""

    @deferred_test
    async def test_git_status_on_a_temp_repo(self) -> None:
        """git_status names the untracked file of a fresh repository."""
        repo = self.mktemp()
        os.makedirs(repo)
        subprocess.run(["git", "init", "-q", repo], check=True)
        with open(os.path.join(repo, "hello.txt"), "w") as f:
            f.write("hi\n")
        client = await self.connect(require_peer(MCP_GIT), ["--repository", repo])
        tools = {t.name for t in await client.list_tools()}
        assert "git_status" in tools
        result = await client.call_tool("git_status", {"repo_path": repo})
        assert not result.is_error, text_of(result.content)
        assert "hello.txt" in text_of(result.content)


class EverythingServerTests(McpServerTestCase):
    """@modelcontextprotocol/server-everything over stdio."""

    async def everything(self) -> McpClient:
        return await self.connect(require_peer(MCP_EVERYTHING))

    @deferred_test
    async def test_initialize_and_tools(self) -> None:
        """Its info, capabilities and instructions are kept; its tools listed (one page)."""
        client = await self.everything()
        assert client.server_info is not None
        assert client.capabilities is not None and client.capabilities.tools is not None
        assert client.instructions
        tools = {t.name for t in await client.list_tools()}
        assert {"echo", "get-tiny-image", "trigger-long-running-operation"} <= tools
        # we declared neither sampling nor elicitation nor roots: those tools are not offered
        assert "trigger-sampling-request" not in tools
        assert "get-roots-list" not in tools

    @deferred_test
    async def test_progress_of_the_long_running_tool(self) -> None:
        """trigger-long-running-operation reports each step to the progress callback."""
        client = await self.everything()
        seen: list[tuple[float, float | None, str | None]] = []
        result = await client.call_tool(
            "trigger-long-running-operation",
            {"duration": 0.4, "steps": 4},
            progress=lambda p, t, m: seen.append((p, t, m)),
        )
        assert not result.is_error
        assert [(p, t) for p, t, _ in seen] == [(1, 4), (2, 4), (3, 4), (4, 4)]

    @deferred_test
    async def test_image_result(self) -> None:
        """get-tiny-image gives an image block holding a PNG."""
        client = await self.everything()
        result = await client.call_tool("get-tiny-image", {})
        images = [b for b in result.content if isinstance(b, ImageContent)]
        assert len(images) == 1 and images[0].mime_type == "image/png"
        assert base64.b64decode(images[0].data).startswith(b"\x89PNG")

    @deferred_test
    async def test_embedded_resource_and_resource_links(self) -> None:
        """get-resource-reference embeds a resource; get-resource-links gives resource_links."""
        client = await self.everything()
        result = await client.call_tool(
            "get-resource-reference", {"resourceType": "Blob", "resourceId": 2}
        )
        embedded = [b for b in result.content if isinstance(b, EmbeddedResource)]
        assert len(embedded) == 1
        resource = embedded[0].resource
        assert isinstance(resource, BlobResourceContents)
        assert resource.uri == "demo://resource/dynamic/blob/2"
        links = await client.call_tool("get-resource-links", {"count": 2})
        assert len([b for b in links.content if isinstance(b, ResourceLink)]) == 2

    @deferred_test
    async def test_structured_content(self) -> None:
        """get-structured-content returns structuredContent matching its outputSchema's keys."""
        client = await self.everything()
        tools = {t.name: t for t in await client.list_tools()}
        schema = tools["get-structured-content"].output_schema
        assert schema is not None
        result = await client.call_tool("get-structured-content", {"location": "Chicago"})
        assert result.structured_content is not None
        assert set(schema["required"]) <= set(result.structured_content)

    @deferred_test
    async def test_invalid_arguments_and_unknown_tool_are_is_error_results(self) -> None:
        """Bad arguments and an unknown tool come back as isError results (this server's choice)."""
        client = await self.everything()
        bad = await client.call_tool("get-sum", {"a": 1, "b": "two"})
        assert bad.is_error
        unknown = await client.call_tool("no-such-tool", {})
        assert unknown.is_error and "no-such-tool" in text_of(unknown.content)

    @deferred_test
    async def test_cancel_mid_call(self) -> None:
        """Cancelled after its first progress: CancelledError at once; the server lives on."""
        client = await self.everything()
        first: Deferred[None] = Deferred()
        seen: list[float] = []

        def progress(p: float, total: float | None, message: str | None) -> None:
            seen.append(p)
            if not first.called:
                first.callback(None)

        call = client.call_tool(
            "trigger-long-running-operation", {"duration": 30, "steps": 30}, progress=progress
        )
        await first
        call.cancel()
        with pytest.raises(CancelledError):
            await call
        count = len(seen)
        await client.ping()
        echo = await client.call_tool("echo", {"message": "still here"})
        assert text_of(echo.content) == "Echo: still here"
        assert len(seen) == count  # no progress reaches a cancelled call
        assert client.closed is None

    @deferred_test
    async def test_huge_result(self) -> None:
        """An 8 MiB echo comes back whole (64 MiB line limit)."""
        client = await self.everything()
        message = "x" * (8 * 1024 * 1024)
        result = await client.call_tool("echo", {"message": message})
        assert text_of(result.content) == "Echo: " + message

    @deferred_test
    async def test_ping(self) -> None:
        """ping is answered."""
        client = await self.everything()
        await client.ping(timeout=10)


class MisbehavingServerTests(McpServerTestCase):
    """The fixture servers: each misbehaviour has a clear outcome and leaves no process."""

    @deferred_test
    async def test_command_not_found_is_one_line(self) -> None:
        """A missing command fails at once with one line naming the server and command."""
        with pytest.raises(McpServerNotStarted) as caught:
            await connect_stdio(reactor, "no-such-mcp-server-xyz", name="ghost")
        text = str(caught.value)
        assert "\n" not in text
        assert 'MCP server "ghost"' in text and "no-such-mcp-server-xyz" in text

    @deferred_test
    async def test_server_that_never_answers_times_out(self) -> None:
        """No initialize answer: McpHandshakeTimeout after handshake_timeout; the group killed."""
        with pytest.raises(McpHandshakeTimeout) as caught:
            await connect_stdio(
                reactor, sys.executable, [FIXTURE, "hang"], name="hang", handshake_timeout=1.0
            )
        assert 'MCP server "hang" did not answer initialize within 1 s' in str(caught.value)
        assert fixture_processes("hang") == []

    @deferred_test
    async def test_group_is_tracked_from_spawn_not_from_the_handshake(self) -> None:
        """With ``groups``, the server's group is tracked while initialize is still unanswered."""
        tracked: list[int] = []

        class Groups(ChildGroups):
            def add(self, pgid: int) -> None:
                tracked.append(pgid)

        starting = connect_stdio(
            reactor,
            sys.executable,
            [FIXTURE, "hang"],
            name="hang",
            handshake_timeout=1.0,
            groups=Groups(),
        )
        assert len(tracked) == 1 and tracked[0] > 0
        with pytest.raises(McpHandshakeTimeout):
            await starting
        assert fixture_processes("hang") == []

    @deferred_test
    async def test_junk_then_exit_during_initialize(self) -> None:
        """A banner on stdout then exit 2: the error quotes the banner, the status and stderr."""
        with pytest.raises(McpHandshakeError) as caught:
            await connect_stdio(reactor, sys.executable, [FIXTURE, "junk"], name="junk")
        text = str(caught.value)
        assert "exited with status 2" in text
        assert "fatal: no config file" in text
        assert "Welcome to the best MCP server!" in text
        assert fixture_processes("junk") == []

    @deferred_test
    async def test_crash_mid_call(self) -> None:
        """The server exits during tools/call: McpServerGone with status 3 and its traceback."""
        client = await self.fixture("crash")
        progress: list[float] = []
        with pytest.raises(McpServerGone) as caught:
            await client.call_tool("work", {}, progress=lambda p, t, m: progress.append(p))
        text = str(caught.value)
        assert "exited with status 3" in text and "RuntimeError: boom" in text
        assert "tools/call" in text
        assert progress == [1]
        closed = await client.when_closed()
        assert closed.exit_code == 3 and not closed.requested
        with pytest.raises(McpServerGone):
            await client.call_tool("work", {})

    @deferred_test
    async def test_call_timeout_sends_cancelled(self) -> None:
        """A call that never ends: RequestTimeout; the server receives notifications/cancelled."""
        client = await self.fixture("slow")
        with pytest.raises(RequestTimeout):
            await client.call_tool("work", {}, timeout=0.5)
        await client.ping()  # the notification was written before the ping
        assert client.process is not None
        await client.close()
        lines = client.process.stderr_tail().splitlines()
        assert [x for x in lines if x.startswith("cancelled ")] == ["cancelled 2"]  # 1: initialize

    @deferred_test
    async def test_stubborn_server_is_killed_on_close(self) -> None:
        """Ignoring stdin's end and SIGTERM: close() ends it with SIGKILL after the graces."""
        client = await self.fixture("stubborn", shutdown_grace=0.3)
        assert await client.list_tools()
        await client.close()
        assert client.closed is not None and client.closed.signal == 9
