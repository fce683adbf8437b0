"""
The ``[mcp.servers.<name>]`` tables of ``agent.toml``: the MCP servers bob is configured
with, validated into :class:`McpStdioServer` / :class:`McpHttpServer`.

One table per server; its name is the table's key (letters, digits, ``_`` and ``-``: it
namespaces the server's tools). A server is either *stdio* (``command``, optional
``args``, ``env``, ``cwd``) or *Streamable HTTP* (``url``, optional ``headers``), never
both. Both kinds take ``permissions`` (``"ask"``: a permission request for each call
even under ``yolo = true``; absent: follow ``yolo``), ``tools`` (an allow-list of the
server's tool names; absent: all of them) and ``timeout`` (seconds a call may go without
an answer or a progress notification before it is cancelled; default
:data:`DEFAULT_CALL_TIMEOUT`).

``[mcp] useClientServers = true`` (default false) makes bob also connect, for each
session, to the MCP servers the client passes in ``session/new`` / ``session/load``
(``mcpServers``); otherwise those are counted in the log and ignored, as the seed says.
:mod:`acpkit_agent.mcp_servers` runs the servers, :mod:`acpkit_agent.mcp_tools` turns
their tools into bob's tools.

The servers are per process (like the engine): a session's project file that sets
``[mcp]`` differently is logged and not obeyed (see :mod:`acpkit_agent.config`). Layered
files merge ``[mcp.servers]`` by server name: an upper file's server replaces the lower
file's server of the same name whole, and the other servers are kept.

Errors are :class:`ValueError` whose message starts with the key
(``mcp.servers.time.args must be a list of strings, not 'x'``); the configuration
loader prefixes the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

import attrs

from acpkit_agent.server_tables import (
    SERVER_NAME,
    merge_server_tables,
    string,
    string_table,
    strings,
)

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "McpHttpServer",
    "McpServerConfig",
    "McpStdioServer",
    "merge_mcp_tables",
    "parse_mcp",
    "parse_use_client_servers",
]

_COMMON_KEYS = ("permissions", "tools", "timeout")
_MCP_KEYS = ("servers", "useClientServers")

DEFAULT_CALL_TIMEOUT = 300.0
"""Seconds a tool call may wait for its answer (each progress notification restarts it)."""
_STDIO_KEYS = ("command", "args", "env", "cwd")
_HTTP_KEYS = ("url", "headers")


@attrs.frozen(kw_only=True)
class McpStdioServer:
    """An MCP server bob starts as a child process and speaks to over its stdin/stdout."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = attrs.field(factory=dict)
    """Variables added to bob's environment for the server process."""
    cwd: str | None = None
    """The server's working directory (None: bob's)."""
    permissions: Literal["ask"] | None = None
    """``"ask"``: every call asks permission, even under ``yolo``; None: follow ``yolo``."""
    tools: tuple[str, ...] | None = None
    """The tool names to expose (None: every tool the server lists)."""
    timeout: float = DEFAULT_CALL_TIMEOUT
    """Seconds a call may go without an answer or a progress notification."""

    @property
    def transport(self) -> Literal["stdio"]:
        """The transport's name, as the banner shows it."""
        return "stdio"


@attrs.frozen(kw_only=True)
class McpHttpServer:
    """An MCP server bob reaches over Streamable HTTP at ``url``."""

    name: str
    url: str
    headers: Mapping[str, str] = attrs.field(factory=dict)
    """HTTP headers sent with every request (``Authorization``, ...), as written."""
    permissions: Literal["ask"] | None = None
    """``"ask"``: every call asks permission, even under ``yolo``; None: follow ``yolo``."""
    tools: tuple[str, ...] | None = None
    """The tool names to expose (None: every tool the server lists)."""
    timeout: float = DEFAULT_CALL_TIMEOUT
    """Seconds a call may go without an answer or a progress notification."""

    @property
    def transport(self) -> Literal["http"]:
        """The transport's name, as the banner shows it."""
        return "http"


McpServerConfig: TypeAlias = McpStdioServer | McpHttpServer


def _timeout(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key} must be a number of seconds, not {value!r}")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{key} must be a number of seconds > 0, not {value!r}")
    return float(value)


def _server(name: str, table: Any) -> McpServerConfig:
    prefix = f"mcp.servers.{name}"
    if not SERVER_NAME.fullmatch(name):
        raise ValueError(f"{prefix}: a server name is letters, digits, _ and - only")
    if not isinstance(table, dict):
        raise ValueError(f"{prefix} must be a table, not {table!r}")
    for key in table:
        if key not in (*_COMMON_KEYS, *_STDIO_KEYS, *_HTTP_KEYS):
            raise ValueError(f"{prefix}.{key} is not a key this file has")
    if "command" in table and "url" in table:
        raise ValueError(f"{prefix} has both command (stdio) and url (Streamable HTTP)")
    if "command" not in table and "url" not in table:
        raise ValueError(f"{prefix} needs command (stdio) or url (Streamable HTTP)")
    permissions = table.get("permissions")
    if permissions is not None and permissions != "ask":
        raise ValueError(
            f'{prefix}.permissions must be "ask" (absent: follow yolo), not {permissions!r}'
        )
    tools = table.get("tools")
    allowed = None if tools is None else strings(f"{prefix}.tools", tools, empty_items=False)
    timeout = _timeout(f"{prefix}.timeout", table.get("timeout", DEFAULT_CALL_TIMEOUT))
    if "command" in table:
        for key in _HTTP_KEYS:
            if key in table:
                raise ValueError(f"{prefix}.{key} is for url servers, not command (stdio) ones")
        cwd = table.get("cwd")
        return McpStdioServer(
            name=name,
            command=string(f"{prefix}.command", table["command"]),
            args=strings(f"{prefix}.args", table.get("args", []), empty_items=True),
            env=string_table(f"{prefix}.env", table.get("env", {})),
            cwd=None if cwd is None else string(f"{prefix}.cwd", cwd),
            permissions=permissions,
            tools=allowed,
            timeout=timeout,
        )
    for key in _STDIO_KEYS:
        if key in table:
            raise ValueError(f"{prefix}.{key} is for command (stdio) servers, not url ones")
    url = string(f"{prefix}.url", table["url"])
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{prefix}.url must be an http:// or https:// URL, not {url!r}")
    return McpHttpServer(
        name=name,
        url=url,
        headers=string_table(f"{prefix}.headers", table.get("headers", {})),
        permissions=permissions,
        tools=allowed,
        timeout=timeout,
    )


def parse_mcp(value: Any) -> tuple[McpServerConfig, ...]:
    """Validate the ``[mcp]`` table: its servers, in the file's order."""
    if not isinstance(value, dict):
        raise ValueError(f"mcp must be a table, not {value!r}")
    for key in value:
        if key not in _MCP_KEYS:
            raise ValueError(f"mcp.{key} is not a key this file has")
    parse_use_client_servers(value)
    servers = value.get("servers", {})
    if not isinstance(servers, dict):
        raise ValueError(f"mcp.servers must be a table, not {servers!r}")
    return tuple(_server(name, table) for name, table in servers.items())


def parse_use_client_servers(value: Any) -> bool:
    """``mcp.useClientServers`` of the ``[mcp]`` table (default false)."""
    flag = value.get("useClientServers", False) if isinstance(value, dict) else False
    if not isinstance(flag, bool):
        raise ValueError(f"mcp.useClientServers must be a boolean, not {flag!r}")
    return flag


merge_mcp_tables = merge_server_tables
"""``upper``'s ``[mcp]`` over ``lower``'s: servers merged by name, each replaced whole."""
