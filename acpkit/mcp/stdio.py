"""
MCP over stdio: start a server as a child process and hand back a started :class:`McpClient`.

The server runs in its own process group (:func:`acpkit.endpoints.spawn_agent`), one
JSON-RPC message per line on its stdin/stdout (:class:`acpkit.jsonrpc.JSONRPCProtocol`
with :data:`acpkit.rpc_cancel.MCP_CANCELLATION`); its stderr is drained, logged and its
tail kept for the errors.  Shutdown follows the MCP spec's stdio section: close the
server's stdin, wait for it to exit, then SIGTERM, then SIGKILL (its whole group).

====================================  ==================================================
what happens                          outcome of :func:`connect_stdio`
====================================  ==================================================
command not found / not executable    fails at once with :class:`McpServerNotStarted`,
                                      one line naming the server and the command
server exits during ``initialize``    :class:`McpHandshakeError`: exit status, stderr
                                      tail, and the first non-JSON line it wrote
no ``initialize`` answer in time      :class:`McpHandshakeTimeout` (``handshake_timeout``
                                      seconds); the process group is killed
unsupported protocol version          :class:`McpVersionError`; the process group is
                                      killed
====================================  ==================================================
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from twisted.internet.defer import Deferred, fail
from twisted.python.failure import Failure

from acpkit.endpoints import AgentNotFoundError, AgentProcess, spawn_agent
from acpkit.jsonrpc import JSONRPCProtocol, MethodRegistry
from acpkit.mcp.client import DEFAULT_CLIENT_INFO, McpClient, McpError
from acpkit.mcp.schema import Implementation
from acpkit.process_groups import ChildGroups
from acpkit.rpc_cancel import MCP_CANCELLATION

__all__ = [
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "DEFAULT_SHUTDOWN_GRACE",
    "McpServerNotStarted",
    "connect_stdio",
    "mcp_stdio_protocol",
]

#: Seconds a server has to answer ``initialize``.
DEFAULT_HANDSHAKE_TIMEOUT = 30.0

#: Seconds a server has to exit after its stdin is closed (then after SIGTERM).
DEFAULT_SHUTDOWN_GRACE = 2.0


class McpServerNotStarted(McpError):
    """The server's process could not be started (command missing, not executable, bad cwd)."""


def mcp_stdio_protocol(reactor: Any, name: str) -> JSONRPCProtocol:
    """The JSON-RPC engine for MCP over stdio: NDJSON framing, MCP cancellation."""
    return JSONRPCProtocol(
        MethodRegistry(), clock=reactor, name=name, cancellation=MCP_CANCELLATION
    )


def connect_stdio(
    reactor: Any,
    command: str,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    *,
    name: str,
    handshake_timeout: float | None = DEFAULT_HANDSHAKE_TIMEOUT,
    shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE,
    client_info: Implementation = DEFAULT_CLIENT_INFO,
    stderr_tail_lines: int = 50,
    groups: ChildGroups | None = None,
) -> Deferred[McpClient]:
    """
    Start ``command args...`` (no shell) and initialize it; fires with the started client.

    ``env``: ``None`` inherits our environment; a mapping is added over it.  The
    client's :attr:`McpClient.process` is the :class:`acpkit.endpoints.AgentProcess`;
    :meth:`McpClient.close` closes stdin, waits ``shutdown_grace`` seconds, then sends
    SIGTERM, waits again, then SIGKILL to the server's process group.  Failures are
    listed in the module docstring; on any of them no process is left behind.

    ``groups`` (for example :data:`acpkit.process_groups.child_groups`): the server's
    process group is added to it as soon as it is spawned, before the handshake, so a
    watchdog ends it even if this process is killed while the server is starting.
    """
    protocol = mcp_stdio_protocol(reactor, name)
    try:
        process = spawn_agent(
            reactor,
            protocol,
            command,
            args,
            env=env,
            cwd=cwd,
            name=name,
            stderr_tail_lines=stderr_tail_lines,
            kind="MCP server",
        )
    except (AgentNotFoundError, PermissionError, NotADirectoryError) as e:
        what = str(e).removeprefix("agent ")
        return fail(McpServerNotStarted(f'MCP server "{name}" cannot start: {what}'))
    except OSError as e:
        return fail(McpServerNotStarted(f'MCP server "{name}" cannot start: {e}'))

    if groups is not None and process.pid is not None:
        groups.add(process.pid)

    def shutdown() -> Deferred[Any]:
        return process.stop(shutdown_grace)

    client = McpClient(
        protocol, name=name, clock=reactor, client_info=client_info, shutdown=shutdown
    )
    client.process = process
    done: Deferred[McpClient] = Deferred()

    def started(_: object) -> None:
        done.callback(client)

    def failed(f: Failure) -> None:
        _kill_then(process, f, done)

    client.start(timeout=handshake_timeout).addCallbacks(started, failed)
    return done


def _kill_then(process: AgentProcess, f: Failure, done: Deferred[McpClient]) -> None:
    """Kill what is left of the server's group, then fail ``done`` with ``f``."""
    process.kill().addBoth(lambda _: done.errback(f))
