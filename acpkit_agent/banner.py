"""The startup banner the agent writes to stderr (through the log): who it is and how it runs."""

from __future__ import annotations

import os

from acpkit_agent.config import AgentConfig
from acpkit_agent.hooks import hook_banner_lines
from acpkit_agent.skills import SkillLibrary, catalog_banner_lines

__all__ = [
    "YOLO_WARNING",
    "banner_lines",
    "lsp_banner_lines",
    "mcp_banner_lines",
    "mcp_server_line",
]

YOLO_WARNING = (
    "yolo: runs commands and changes files WITHOUT ASKING "
    "(put yolo = false in <project>/.acpkit/agent.toml to be asked first)"
)
"""Appended to the first banner line when the process's ``yolo`` is true (the default)."""


def banner_lines(
    config: AgentConfig,
    engine_description: str,
    version: str,
    *,
    cwd: str | None = None,
    home: str | None = None,
) -> list[str]:
    """
    The banner: name and version (with :data:`YOLO_WARNING` when ``yolo`` is true), engine,
    configuration files (or "none"), policy, how sessions pick their configuration, then
    the skills seen from ``cwd`` (default: the process's) and each skill skipped or not
    announced.
    """
    title = f" — {config.title}" if config.title else ""
    warning = f" — {YOLO_WARNING}" if config.yolo else ""
    permissions = "yolo (no permission requests)" if config.yolo else "asks before changes"
    window = (
        f"{config.context_window} tokens (configured)"
        if config.context_window
        else "asked from the engine"
    )
    return [
        f"{config.name} {version}{title}{warning}",
        f"  engine:      {engine_description}",
        f"  config:      {config.describe_sources()}",
        f"  permissions: {permissions}",
        "  sessions:    each takes yolo, hooks and compaction from its cwd's "
        ".acpkit/agent.toml (logged per session)",
        f"  context:     {window}",
        *hook_banner_lines(config.hooks),
        *mcp_banner_lines(config),
        *lsp_banner_lines(config),
        *catalog_banner_lines(
            SkillLibrary(config.skills_dirs, home).catalog(cwd if cwd is not None else os.getcwd())
        ),
    ]


def mcp_banner_lines(config: AgentConfig) -> list[str]:
    """
    The MCP servers being started (each then gets its :func:`mcp_server_line` once it
    answered or failed) and whether the client's ``mcpServers`` are used; nothing when
    neither applies.
    """
    lines = []
    if config.mcp_servers:
        names = ", ".join(f"{server.name} ({server.transport})" for server in config.mcp_servers)
        lines.append(f"  mcp:         starting {names}")
    if config.mcp_use_client_servers:
        lines.append(
            "  mcp:         also connects to the client's mcpServers (mcp.useClientServers)"
        )
    return lines


def lsp_banner_lines(config: AgentConfig) -> list[str]:
    """
    The language servers of the ``lsp`` tool and the files each serves, started on first
    use: ``lsp: pylsp (*.py), ts (*.ts, *.tsx); started on first use``; nothing without.
    """
    if not config.lsp_servers:
        return []
    names = ", ".join(f"{server.name} ({', '.join(server.files)})" for server in config.lsp_servers)
    return [f"  lsp:         {names}; started on first use"]


def mcp_server_line(label: str, summary: str) -> str:
    """One MCP server's banner line: ``mcp: time (stdio): 2 tools`` (or ``failed: …``)."""
    return f"  mcp:         {label}: {summary}"
