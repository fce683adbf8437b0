"""The reference agent's built-in tools, independent of the ACP core.

``builtin_tools()`` returns fresh instances, keyed by the name the model calls them with.
The contract (``Tool``, ``ToolContext``, ``ToolResult``, ``Diff``, ``IFileAccess``) is in
:mod:`acpkit_agent.tools.base`; ``docs/reference/agent-tools.md`` documents each tool.

Each name here is imported from its module on first use, so that importing one tool's
module does not import the others; bob gives its runtime :class:`BuiltinTools`, made on
the first lookup.  The ``lsp`` tool (and with it ``lsprotocol``) is imported only when bob
is given language servers.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from acpkit_agent.tools.lsp import ILanguageServers, LspTool
    from acpkit_agent.tools.plan import PlanEntry, PlanState, PlanTool
    from acpkit_agent.tools.skill import ReadSkillTool

#: Where each name of ``__all__`` is defined: imported on first use (PEP 562), so that
#: importing one tool's module (``acpkit_agent.tools.base`` for the contract) does not
#: import every tool.
_LAZY = {
    "AskAgentTool": "acpkit_agent.tools.ask_agent",
    "AskUserTool": "acpkit_agent.tools.ask_user",
    "BashTool": "acpkit_agent.tools.bash",
    "Diff": "acpkit_agent.tools.base",
    "DiskFileAccess": "acpkit_agent.tools.base",
    "EditFileTool": "acpkit_agent.tools.files",
    "FetchContentTool": "acpkit_agent.tools.fetch",
    "IFileAccess": "acpkit_agent.tools.base",
    "LspTool": "acpkit_agent.tools.lsp",
    "PlanEntry": "acpkit_agent.tools.plan",
    "PlanState": "acpkit_agent.tools.plan",
    "PlanTool": "acpkit_agent.tools.plan",
    "ReadFileTool": "acpkit_agent.tools.files",
    "ReadSkillTool": "acpkit_agent.tools.skill",
    "Tool": "acpkit_agent.tools.base",
    "ToolContext": "acpkit_agent.tools.base",
    "ToolResult": "acpkit_agent.tools.base",
    "WriteFileTool": "acpkit_agent.tools.files",
    "resolve_path": "acpkit_agent.tools.base",
}

__all__ = [
    "AskAgentTool",
    "AskUserTool",
    "BashTool",
    "BuiltinTools",
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
    from acpkit_agent.skills import SkillLibrary
    from acpkit_agent.tools.ask_agent import AskAgentTool
    from acpkit_agent.tools.ask_user import AskUserTool
    from acpkit_agent.tools.bash import BashTool
    from acpkit_agent.tools.fetch import FetchContentTool
    from acpkit_agent.tools.files import EditFileTool, ReadFileTool, WriteFileTool
    from acpkit_agent.tools.plan import PlanTool
    from acpkit_agent.tools.skill import ReadSkillTool

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


class BuiltinTools(Mapping[str, "Tool"]):
    """
    :func:`builtin_tools` made on first use (a lookup, an iteration, ``len``): the tools'
    modules are not imported before a session needs a tool, so that bob answers
    ``initialize`` without them.
    """

    def __init__(
        self, skills: SkillLibrary | None = None, language_servers: ILanguageServers | None = None
    ) -> None:
        self._skills = skills
        self._language_servers = language_servers
        self._tools: dict[str, Tool] | None = None

    @property
    def made(self) -> bool:
        """Whether the tools were made (a first use happened)."""
        return self._tools is not None

    def _made(self) -> dict[str, Tool]:
        if self._tools is None:
            self._tools = builtin_tools(self._skills, self._language_servers)
        return self._tools

    def __getitem__(self, name: str) -> Tool:
        return self._made()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._made())

    def __len__(self) -> int:
        return len(self._made())


def __getattr__(name: str) -> Any:
    """The names of ``__all__``, each imported from its module on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
