"""The reference agent's built-in tools, independent of the ACP core.

``builtin_tools()`` returns fresh instances, keyed by the name the model calls them with.
The contract (``Tool``, ``ToolContext``, ``ToolResult``, ``Diff``, ``IFileAccess``) is in
:mod:`acpkit_agent.tools.base`; ``docs/reference/agent-tools.md`` documents each tool.

The ``lsp`` tool (and with it ``lsprotocol``) is imported only when bob is given language
servers: ``LspTool`` is resolved on first use of the name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from acpkit_agent.skills import SkillLibrary
from acpkit_agent.tools.ask_agent import AskAgentTool
from acpkit_agent.tools.ask_user import AskUserTool
from acpkit_agent.tools.base import (
    Diff,
    DiskFileAccess,
    IFileAccess,
    Tool,
    ToolContext,
    ToolResult,
    resolve_path,
)
from acpkit_agent.tools.bash import BashTool
from acpkit_agent.tools.fetch import FetchContentTool
from acpkit_agent.tools.files import EditFileTool, ReadFileTool, WriteFileTool
from acpkit_agent.tools.plan import PlanEntry, PlanState, PlanTool
from acpkit_agent.tools.skill import ReadSkillTool

if TYPE_CHECKING:
    from acpkit_agent.tools.lsp import ILanguageServers, LspTool

__all__ = [
    "AskAgentTool",
    "AskUserTool",
    "BashTool",
    "Diff",
    "DiskFileAccess",
    "EditFileTool",
    "FetchContentTool",
    "IFileAccess",
    "LspTool",
    "PlanEntry",
    "PlanState",
    "PlanTool",
    "ReadFileTool",
    "ReadSkillTool",
    "Tool",
    "ToolContext",
    "ToolResult",
    "WriteFileTool",
    "builtin_tools",
    "resolve_path",
]


def builtin_tools(
    skills: SkillLibrary | None = None, language_servers: ILanguageServers | None = None
) -> dict[str, Tool]:
    """
    Fresh instances of bash, read_file, write_file, edit_file, fetch_content, plan,
    read_skill (reading the skills of ``skills``, default: the standard directories),
    ask_user and ask_agent, then ``lsp`` on ``language_servers`` when given (bob gives
    it when ``[lsp.servers]`` names at least one server).
    """
    tools: list[Tool] = [
        BashTool(),
        ReadFileTool(),
        WriteFileTool(),
        EditFileTool(),
        FetchContentTool(),
        PlanTool(),
        ReadSkillTool(skills if skills is not None else SkillLibrary()),
        AskUserTool(),
        AskAgentTool(),
    ]
    if language_servers is not None:
        from acpkit_agent.tools.lsp import LspTool

        tools.append(LspTool(language_servers))
    return {tool.name: tool for tool in tools}


def __getattr__(name: str) -> Any:
    """``LspTool``, imported on first use (it loads ``lsprotocol``)."""
    if name == "LspTool":
        from acpkit_agent.tools.lsp import LspTool

        return LspTool
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
