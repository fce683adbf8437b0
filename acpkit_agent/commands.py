"""
The reference agent's slash commands: ``/new`` and ``/compact`` (intercepted by
``session/prompt``, no generation) and one command per skill (advertised; rewritten to
``$name`` and run as a normal turn).

=============  ================================================  ================================
``name``       ``description``                                   ``input``
=============  ================================================  ================================
``new``        ``Clear the history and start a new session``     none
``compact``    ``Compress the history now, keeping the last      none
               turns``
one per skill  the skill's ``description``                       ``{"hint": "parameters, if
                                                                 this skill needs any"}``
=============  ================================================  ================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import attrs
from twisted.internet.defer import Deferred, ensureDeferred, succeed
from twisted.logger import Logger

from acpkit import schema
from acpkit_agent.compaction import compact
from acpkit_agent.skills import SKILL_HINT, SkillCatalog, SkillLibrary
from acpkit_agent.tools.skill import ReadSkillTool

if TYPE_CHECKING:
    from acpkit_agent.session import Session, SessionStore
    from acpkit_agent.turn import AgentRuntime

__all__ = [
    "COMPACT_DESCRIPTION",
    "NEW_DESCRIPTION",
    "CommandRegistry",
    "SlashCommand",
    "advertised_commands",
    "builtin_commands",
    "clear_history",
    "skill_library_for",
]

_log = Logger()

NEW_DESCRIPTION = "Clear the history and start a new session"
COMPACT_DESCRIPTION = "Compress the history now, keeping the last turns"


@attrs.frozen
class SlashCommand:
    """
    A command ``session/prompt`` intercepts: the flattened prompt, stripped, is exactly
    ``/<name>``.  ``run(session)`` does the work and gives the confirmation line sent as an
    ``agent_message_chunk``.
    """

    name: str
    description: str
    run: Callable[[Session], Deferred[str]]
    hint: str | None = None
    """``input.hint`` of the advertised command (None: no input)."""

    def advertised(self) -> schema.AvailableCommand:
        """The command as listed in ``available_commands_update``."""
        return schema.AvailableCommand(
            name=self.name,
            description=self.description,
            input=None if self.hint is None else schema.UnstructuredCommandInput(hint=self.hint),
        )


class CommandRegistry:
    """The slash commands the agent handles, in the order they are advertised."""

    def __init__(self) -> None:
        self._commands: dict[str, SlashCommand] = {}

    def register(self, command: SlashCommand) -> None:
        """Add a command; a second command with the same name is an error."""
        if command.name in self._commands:
            raise ValueError(f"a slash command named {command.name!r} is already registered")
        self._commands[command.name] = command

    def __contains__(self, name: object) -> bool:
        return name in self._commands

    def __iter__(self) -> Iterator[SlashCommand]:
        return iter(list(self._commands.values()))

    def match(self, text: str) -> SlashCommand | None:
        """The command ``text`` is, once stripped of whitespace (``/new``), or None."""
        stripped = text.strip()
        if not stripped.startswith("/"):
            return None
        return self._commands.get(stripped[1:])

    def advertised(self) -> list[schema.AvailableCommand]:
        """Every command as an ACP ``AvailableCommand``."""
        return [command.advertised() for command in self]


def clear_history(session: Session) -> int:
    """Reset the history to its system prompt; returns how many messages were forgotten."""
    head = 0
    while head < len(session.history) and session.history[head].get("role") == "system":
        head += 1
    forgotten = len(session.history) - head
    del session.history[head:]
    session.last_measure = 0
    return forgotten


def _archiver(store: SessionStore) -> Callable[[Session], str | None] | None:
    archive = getattr(store, "archive", None)
    return archive if callable(archive) else None


def builtin_commands(runtime: AgentRuntime, store: SessionStore) -> list[SlashCommand]:
    """``new`` and ``compact`` for sessions of ``store`` (turns of ``runtime``)."""

    def run_new(session: Session) -> Deferred[str]:
        archive = _archiver(store)
        if archive is not None:
            kept = archive(session)
            if kept is not None:
                _log.info(
                    "[acp] session {sid}: previous conversation kept as {kept}",
                    sid=session.id,
                    kept=kept,
                )
        forgotten = clear_history(session)
        _log.info(
            "[acp] session {sid}: new session, {n} message(s) forgotten",
            sid=session.id,
            n=forgotten,
        )
        return succeed(f"🆕 New session: {forgotten} message(s) forgotten.")

    async def compact_now(session: Session) -> str:
        result = await compact(
            session,
            runtime.engine,
            (session.config or runtime.config).keep_last_turns,
            _seconds(runtime.reactor),
        )
        _log.info("[acp] session {sid}: /compact — {line}", sid=session.id, line=result.line)
        return result.line

    def run_compact(session: Session) -> Deferred[str]:
        return ensureDeferred(compact_now(session))

    return [
        SlashCommand(name="new", description=NEW_DESCRIPTION, run=run_new),
        SlashCommand(name="compact", description=COMPACT_DESCRIPTION, run=run_compact),
    ]


def _seconds(reactor: Any) -> Callable[[], float]:
    seconds = getattr(reactor, "seconds", None)
    if callable(seconds):
        return seconds  # type: ignore[no-any-return]
    import time

    return time.monotonic


def advertised_commands(
    registry: CommandRegistry, catalog: SkillCatalog
) -> list[schema.AvailableCommand]:
    """The registry's commands, then one per announced skill not named like one of them."""
    commands = registry.advertised()
    for skill in catalog.announced():
        if skill.name in registry:
            continue
        commands.append(
            schema.AvailableCommand(
                name=skill.name,
                description=skill.description,
                input=schema.UnstructuredCommandInput(hint=SKILL_HINT),
            )
        )
    return commands


def skill_library_for(runtime: AgentRuntime) -> SkillLibrary:
    """
    The skill library of ``runtime``: its ``read_skill`` tool's, given the configured
    ``skills.dirs`` (set on the tool when it was built without them), else a new one.
    """
    dirs = tuple(getattr(runtime.config, "skills_dirs", ()))
    tool = runtime.tools.get("read_skill")
    if isinstance(tool, ReadSkillTool):
        if dirs and tool.library.extra_dirs != dirs:
            tool.library = attrs.evolve(tool.library, extra_dirs=dirs)
        return tool.library
    return SkillLibrary(extra_dirs=dirs)
