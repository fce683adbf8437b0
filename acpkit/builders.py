"""Small typed constructors for the ACP messages agents and clients send most.

Only what reads better than the raw classes of :mod:`acpkit.schema`::

    from acpkit import builders as b

    conn.session_update(session_id, b.agent_message("Hello"))
    conn.session_update(session_id, b.tool_call_start("call_1", "bash: ls", kind="execute"))
    conn.session_update(
        session_id,
        b.tool_call_update("call_1", status="completed",
                           content=[b.tool_text("file.txt")], raw_output={"output": "file.txt"}),
    )
    conn.session_update(session_id, b.update_plan([b.plan_entry("Read"), b.plan_entry("Fix")]))

Session-update builders return one :data:`~acpkit.schema.SessionUpdate` variant: the
``update`` argument of :meth:`~acpkit.connection.AgentConnection.session_update`.
:func:`session_notification` wraps one in the whole ``session/update`` params
(:class:`~acpkit.schema.SessionNotification`: what a client's ``session_update`` handler
receives, and what a test builds to feed one). String arguments for enum fields are
converted to the enum (unknown strings are kept, as on decode).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from acpkit.schema import (
    ABSENT,
    AbsentType,
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AvailableCommand,
    AvailableCommandsUpdate,
    ContentBlock,
    ContentToolCallContent,
    Cost,
    EmbeddedResourceContentBlock,
    FileEditToolCallContent,
    ImageContentBlock,
    PermissionOption,
    PermissionOptionKind,
    PlanEntry,
    PlanEntryPriority,
    PlanEntryStatus,
    ResourceLinkContentBlock,
    SessionNotification,
    SessionUpdate,
    TerminalToolCallContent,
    TextContentBlock,
    TextResourceContents,
    ToolCallContent,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStart,
    ToolCallStatus,
    ToolKind,
    UnstructuredCommandInput,
    UsageUpdate,
    UserMessageChunk,
)

__all__ = [
    "agent_message",
    "available_commands",
    "command",
    "embedded_text_block",
    "image_block",
    "permission_option",
    "plan_entry",
    "resource_link_block",
    "session_notification",
    "text_block",
    "thought",
    "tool_call_start",
    "tool_call_update",
    "tool_diff",
    "tool_terminal",
    "tool_text",
    "update_plan",
    "usage_update",
    "user_message",
]


# ------------------------------------------------------------------ content blocks
def text_block(text: str) -> TextContentBlock:
    """A ``text`` content block."""
    return TextContentBlock(text=text)


def resource_link_block(
    uri: str,
    name: str,
    *,
    mime_type: str | None = None,
    title: str | None = None,
    description: str | None = None,
    size: int | None = None,
) -> ResourceLinkContentBlock:
    """A ``resource_link`` content block (what an editor's ``@`` mention sends)."""
    return ResourceLinkContentBlock(
        uri=uri, name=name, mime_type=mime_type, title=title, description=description, size=size
    )


def embedded_text_block(
    uri: str, text: str, *, mime_type: str | None = None
) -> EmbeddedResourceContentBlock:
    """A ``resource`` content block embedding a text resource."""
    return EmbeddedResourceContentBlock(
        resource=TextResourceContents(uri=uri, text=text, mime_type=mime_type)
    )


def image_block(data: str, mime_type: str, *, uri: str | None = None) -> ImageContentBlock:
    """An ``image`` content block (``data`` is base64)."""
    return ImageContentBlock(data=data, mime_type=mime_type, uri=uri)


# ------------------------------------------------------------------ session updates
def session_notification(
    session_id: str, update: SessionUpdate, *, meta: dict[str, Any] | None = None
) -> SessionNotification:
    """The whole ``session/update`` params carrying one update (what a client receives).

    An agent does not need it: ``conn.session_update(session_id, update)`` builds it.
    """
    return SessionNotification(session_id=session_id, update=update, meta=meta)


def _block(content: str | ContentBlock) -> ContentBlock:
    return TextContentBlock(text=content) if isinstance(content, str) else content


def agent_message(
    content: str | ContentBlock, *, message_id: str | None = None
) -> AgentMessageChunk:
    """An ``agent_message_chunk`` (a string becomes a text block)."""
    return AgentMessageChunk(content=_block(content), message_id=message_id)


def user_message(content: str | ContentBlock, *, message_id: str | None = None) -> UserMessageChunk:
    """A ``user_message_chunk`` (used when replaying a loaded session)."""
    return UserMessageChunk(content=_block(content), message_id=message_id)


def thought(content: str | ContentBlock, *, message_id: str | None = None) -> AgentThoughtChunk:
    """An ``agent_thought_chunk``."""
    return AgentThoughtChunk(content=_block(content), message_id=message_id)


def tool_text(text: str) -> ContentToolCallContent:
    """Tool call content showing a text block."""
    return ContentToolCallContent(content=TextContentBlock(text=text))


def tool_diff(
    path: str, new_text: str, old_text: str | AbsentType | None = ABSENT
) -> FileEditToolCallContent:
    """Tool call content showing a file edit; ``old_text=None`` marks a new file."""
    return FileEditToolCallContent(path=path, new_text=new_text, old_text=old_text)


def tool_terminal(terminal_id: str) -> TerminalToolCallContent:
    """Tool call content embedding a terminal created with ``terminal/create``."""
    return TerminalToolCallContent(terminal_id=terminal_id)


def _locations(paths: Iterable[str | ToolCallLocation] | None) -> list[ToolCallLocation] | None:
    if paths is None:
        return None
    return [ToolCallLocation(path=p) if isinstance(p, str) else p for p in paths]


def tool_call_start(
    tool_call_id: str,
    title: str,
    *,
    kind: ToolKind | str | None = None,
    status: ToolCallStatus | str | None = ToolCallStatus.PENDING,
    content: Sequence[ToolCallContent] | None = None,
    locations: Iterable[str | ToolCallLocation] | None = None,
    raw_input: Any = None,
) -> ToolCallStart:
    """A ``tool_call`` update announcing a tool call (``pending`` unless told otherwise)."""
    return ToolCallStart(
        tool_call_id=tool_call_id,
        title=title,
        kind=ToolKind(kind) if kind is not None else None,
        status=ToolCallStatus(status) if status is not None else None,
        content=list(content) if content is not None else None,
        locations=_locations(locations),
        raw_input=raw_input,
    )


def tool_call_update(
    tool_call_id: str,
    *,
    status: ToolCallStatus | str | None = None,
    title: str | None = None,
    kind: ToolKind | str | None = None,
    content: Sequence[ToolCallContent] | None = None,
    locations: Iterable[str | ToolCallLocation] | None = None,
    raw_input: Any = None,
    raw_output: Any = None,
) -> ToolCallProgress:
    """A ``tool_call_update``: only the fields given are sent (the others are unchanged)."""
    return ToolCallProgress(
        tool_call_id=tool_call_id,
        status=ToolCallStatus(status) if status is not None else None,
        title=title,
        kind=ToolKind(kind) if kind is not None else None,
        content=list(content) if content is not None else None,
        locations=_locations(locations),
        raw_input=raw_input,
        raw_output=raw_output,
    )


def plan_entry(
    content: str,
    *,
    priority: PlanEntryPriority | str = PlanEntryPriority.MEDIUM,
    status: PlanEntryStatus | str = PlanEntryStatus.PENDING,
) -> PlanEntry:
    """One entry of an agent plan."""
    return PlanEntry(
        content=content, priority=PlanEntryPriority(priority), status=PlanEntryStatus(status)
    )


def update_plan(entries: Iterable[PlanEntry]) -> AgentPlanUpdate:
    """A ``plan`` update (the whole plan, replacing the previous one)."""
    return AgentPlanUpdate(entries=list(entries))


def command(name: str, description: str, *, hint: str | None = None) -> AvailableCommand:
    """A slash command; ``hint`` describes the free-text input typed after the name."""
    return AvailableCommand(
        name=name,
        description=description,
        input=UnstructuredCommandInput(hint=hint) if hint is not None else None,
    )


def available_commands(commands: Iterable[AvailableCommand]) -> AvailableCommandsUpdate:
    """An ``available_commands_update`` (the whole list, replacing the previous one)."""
    return AvailableCommandsUpdate(available_commands=list(commands))


def usage_update(
    used: int,
    size: int,
    *,
    cost: float | None = None,
    currency: str = "USD",
) -> UsageUpdate:
    """A ``usage_update``: context tokens used out of the window ``size``, optional cost."""
    return UsageUpdate(
        used=used,
        size=size,
        cost=Cost(amount=cost, currency=currency) if cost is not None else None,
    )


def permission_option(
    option_id: str, name: str, kind: PermissionOptionKind | str
) -> PermissionOption:
    """One option of a ``session/request_permission`` request."""
    return PermissionOption(option_id=option_id, name=name, kind=PermissionOptionKind(kind))
