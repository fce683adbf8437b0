"""The conversation model of one agent window, independent of any front end.

A :class:`Conversation` is an ordered list of entries fed by ``session/update``
notifications (:meth:`Conversation.apply`) and by the window itself (the user's line,
turn start and end, cancellation).  Observers (:class:`~acpkit_client.interfaces.
IConversationObserver`) are told about each change so that a UI can redraw incrementally.

How each ``sessionUpdate`` is shown (the seed's table):

=============================  ==========================================================
``agent_message_chunk``        appended to the last agent entry; a new entry when the
                               speaker or the ``messageId`` changes
``agent_thought_chunk``        the same, as a *thought* entry
``user_message_chunk``         a *you* entry (replays, echoes), appended like the others
``tool_call``                  one entry per ``toolCallId``: title, kind, status, output
``tool_call_update``           folded into the entry of its ``toolCallId``; new
                               ``content`` replaces the old; an unknown id makes an entry
                               that says so (nothing invented)
``plan``                       the turn's plan entry, whole list replaced
``available_commands_update``  :attr:`Conversation.commands`
``usage_update``               :attr:`Conversation.usage`
anything else                  ignored and counted (:attr:`Conversation.ignored`)
=============================  ==========================================================

Every entry's text is capped at :data:`ENTRY_TEXT_CAP` bytes (UTF-8) by default; what
was dropped is said in the entry itself.  ``Conversation(text_cap=None)`` keeps all of
each message (``acpkit-client ask`` streams to a pipe, not a window); tool output stays
capped.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
from twisted.logger import Logger

from acpkit import codec, schema
from acpkit_client.completion import CommandInfo
from acpkit_client.interfaces import IConversationObserver

__all__ = [
    "ENTRY_TEXT_CAP",
    "Conversation",
    "Entry",
    "EntryKind",
    "IgnoredUpdates",
    "MessageEntry",
    "PlanEntry",
    "PlanItem",
    "ToolCallEntry",
    "Usage",
    "render_content_block",
    "render_tool_content",
]

log = Logger()

#: An entry keeps at most this many bytes of text (UTF-8).
ENTRY_TEXT_CAP = 1024 * 1024

#: Tool call statuses after which a call is finished.
FINISHED_STATUSES = frozenset({"completed", "failed", "cancelled"})

#: Status a tool call gets locally when the client cancelled its turn.
CANCELLED_STATUS = "cancelled"

#: Update kinds the schema knows that this client does not show (ignored and counted).
NOT_SHOWN = "not shown by acpkit-client"


class EntryKind(enum.Enum):
    """Who or what an entry is."""

    YOU = "you"
    AGENT = "agent"
    THOUGHT = "thought"
    TOOL_CALL = "tool_call"
    PLAN = "plan"


class CappedText:
    """Text that keeps at most ``cap`` UTF-8 bytes (None: no cap) and counts what it dropped."""

    def __init__(self, cap: int | None = ENTRY_TEXT_CAP) -> None:
        self.cap = cap
        self._parts: list[str] = []
        self._size = 0
        #: Characters kept (the length of :attr:`kept`).
        self.length = 0
        #: Bytes that did not fit and were dropped.
        self.dropped = 0

    def append(self, text: str) -> None:
        """Add ``text`` at the end, dropping what goes over the cap."""
        if not text:
            return
        if self.cap is None:
            self._parts.append(text)
            self.length += len(text)
            return
        room = self.cap - self._size
        if room <= 0:
            self.dropped += len(text.encode("utf-8"))
            return
        data = text.encode("utf-8")
        if len(data) <= room:
            self._parts.append(text)
            self._size += len(data)
            self.length += len(text)
            return
        kept = data[:room].decode("utf-8", errors="ignore")
        kept_size = len(kept.encode("utf-8"))
        self._parts.append(kept)
        self._size += kept_size
        self.length += len(kept)
        self.dropped += len(data) - kept_size

    def replace(self, text: str) -> None:
        """Start again with ``text`` alone."""
        self._parts = []
        self._size = 0
        self.length = 0
        self.dropped = 0
        self.append(text)

    def since(self, start: int) -> str:
        """What was kept from character ``start`` on; costs only the text after ``start``."""
        if start >= self.length:
            return ""
        tail: list[str] = []
        position = self.length
        for part in reversed(self._parts):
            if position <= start:
                break
            position -= len(part)
            tail.append(part if position >= start else part[start - position :])
        return "".join(reversed(tail))

    @property
    def kept(self) -> str:
        """What was kept, without the dropped note."""
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def __str__(self) -> str:
        if not self.dropped:
            return self.kept
        return f"{self.kept}\n[… {self.dropped:,} bytes dropped …]"


def render_content_block(block: object) -> str:
    """Show one content block as text (non-text blocks as a bracketed one-liner)."""
    if isinstance(block, schema.TextContentBlock):
        return block.text
    if isinstance(block, schema.ResourceLinkContentBlock):
        return f"[file {block.name}: {block.uri}]"
    if isinstance(block, schema.EmbeddedResourceContentBlock):
        resource = block.resource
        text = getattr(resource, "text", None)
        uri = getattr(resource, "uri", "?")
        if isinstance(text, str):
            return f"[file {uri}]\n{text}"
        return f"[binary resource {uri}]"
    if isinstance(block, schema.ImageContentBlock):
        return f"[image {block.mime_type}]"
    if isinstance(block, schema.AudioContentBlock):
        return f"[audio {block.mime_type}]"
    raw = getattr(block, "raw", None)
    kind = raw.get("type") if isinstance(raw, dict) else None
    return f"[unknown content {kind!r}]"


def render_tool_content(items: Iterable[object]) -> str:
    """Show a tool call's ``content`` list as text: blocks, diffs, terminals."""
    parts: list[str] = []
    for item in items:
        if isinstance(item, schema.ContentToolCallContent):
            parts.append(render_content_block(item.content))
        elif isinstance(item, schema.FileEditToolCallContent):
            old = item.old_text if isinstance(item.old_text, str) else ""
            diff = difflib.unified_diff(
                old.splitlines(keepends=True),
                item.new_text.splitlines(keepends=True),
                fromfile=item.path if isinstance(item.old_text, str) else "/dev/null",
                tofile=item.path,
            )
            parts.append("".join(line if line.endswith("\n") else line + "\n" for line in diff))
        elif isinstance(item, schema.TerminalToolCallContent):
            parts.append(f"[terminal {item.terminal_id}]")
        else:
            raw = getattr(item, "raw", None)
            kind = raw.get("type") if isinstance(raw, dict) else None
            parts.append(f"[unknown tool content {kind!r}]")
    return "\n".join(part.rstrip("\n") for part in parts)


@attrs.define(eq=False)
class Entry:
    """One entry of the conversation; ``text`` is what a front end shows under its label."""

    kind: EntryKind
    #: Which turn the entry belongs to (0 before the first prompt: replays, greetings).
    turn: int

    @property
    def text(self) -> str:
        """The entry's text, with the dropped note when it was capped."""
        raise NotImplementedError


@attrs.define(eq=False)
class MessageEntry(Entry):
    """A run of message chunks from one speaker: you, the agent, or its thoughts."""

    message_id: str | None = None
    #: True for the line the user typed (as typed), False for chunks the agent sent.
    typed: bool = False
    body: CappedText = attrs.field(factory=CappedText)

    @property
    def text(self) -> str:
        return str(self.body)


@attrs.define(eq=False)
class ToolCallEntry(Entry):
    """One tool call, folded from its ``tool_call`` and ``tool_call_update``\\ s."""

    tool_call_id: str = ""
    title: str = ""
    tool_kind: str | None = None
    #: ``pending`` when the agent gave none; ``cancelled`` when cancelled locally.
    status: str = "pending"
    #: False while only ``tool_call_update``\\ s were seen for this id.
    known: bool = True
    content: list[Any] = attrs.field(factory=list)
    locations: list[str] = attrs.field(factory=list)
    raw_input: Any = None
    raw_output: Any = None
    output: CappedText = attrs.field(factory=CappedText)
    #: Fields set by updates before the ``tool_call`` itself arrived (they win over it).
    updated_fields: set[str] = attrs.field(factory=set)

    @property
    def finished(self) -> bool:
        """Whether the call reached a final status."""
        return self.status in FINISHED_STATUSES

    @property
    def heading(self) -> str:
        """One line naming the call: title, kind and status."""
        title = self.title if self.known else f"update for unknown tool call {self.tool_call_id}"
        kind = f" ({self.tool_kind})" if self.tool_kind else ""
        return f"{title}{kind} [{self.status}]"

    @property
    def text(self) -> str:
        output = str(self.output)
        return f"{self.heading}\n{output}" if output else self.heading


@attrs.frozen
class PlanItem:
    """One line of a plan."""

    content: str
    status: str
    priority: str


@attrs.define(eq=False)
class PlanEntry(Entry):
    """The agent's plan for a turn; the whole list is replaced by each ``plan`` update."""

    items: list[PlanItem] = attrs.field(factory=list)

    @property
    def text(self) -> str:
        body = CappedText()
        body.append("\n".join(f"[{item.status}] {item.content}" for item in self.items))
        return str(body)


@attrs.frozen
class Usage:
    """The last ``usage_update``: tokens used in the context and its size."""

    used: int
    size: int


@attrs.define
class IgnoredUpdates:
    """Updates that were not shown: how many, the last one, and why."""

    count: int = 0
    #: The last ignored update, as sent (a dict), or ``None``.
    last: Any = None
    #: Why the last one was ignored.
    last_error: str | None = None


def _tag_of(update: object) -> str:
    """The wire ``sessionUpdate`` tag of a decoded update."""
    tag = getattr(type(update), "__acp_tag__", None)
    if tag is not None:
        return str(tag[1])
    raw = getattr(update, "raw", None)
    if isinstance(raw, dict):
        return str(raw.get("sessionUpdate"))
    return type(update).__name__


class Conversation:
    """The model of one agent window's conversation (see the module docstring)."""

    def __init__(self, text_cap: int | None = ENTRY_TEXT_CAP) -> None:
        #: The most bytes a message entry's text keeps (None: no cap; tool output is
        #: always capped at :data:`ENTRY_TEXT_CAP`).
        self.text_cap = text_cap
        #: The entries, in order.
        self.entries: list[Entry] = []
        #: The commands the agent announced, in its order.
        self.commands: list[CommandInfo] = []
        #: The last ``usage_update``, if any.
        self.usage: Usage | None = None
        #: Whether a turn is running.
        self.turn_running = False
        #: The number of the current (or last) turn; 0 before the first prompt.
        self.turn = 0
        #: The stop reason of the last finished turn (or the error that ended it).
        self.last_stop: str | None = None
        #: Updates ignored (unknown kinds, kinds not shown, undecodable ones).
        self.ignored = IgnoredUpdates()
        self._tool_calls: dict[str, ToolCallEntry] = {}
        self._observers: list[IConversationObserver] = []

    # -- observers -------------------------------------------------------------------

    def subscribe(self, observer: IConversationObserver) -> None:
        """Tell ``observer`` about every later change."""
        self._observers.append(observer)

    def unsubscribe(self, observer: IConversationObserver) -> None:
        """Stop telling ``observer``."""
        if observer in self._observers:
            self._observers.remove(observer)

    def _notify(self, method: str, *args: Any) -> None:
        for observer in list(self._observers):
            try:
                getattr(observer, method)(*args)
            except Exception:
                log.failure("conversation observer {observer!r} failed", observer=observer)

    def _add(self, entry: Entry) -> Entry:
        self.entries.append(entry)
        self._notify("entry_added", entry)
        return entry

    def _changed(self, entry: Entry) -> None:
        self._notify("entry_changed", entry)

    # -- the window's own events ------------------------------------------------------------

    def start_turn(self, typed: str) -> MessageEntry:
        """The user sent ``typed``: a *you* entry with the line as typed; a turn runs."""
        self.turn += 1
        entry = MessageEntry(kind=EntryKind.YOU, turn=self.turn, typed=True)
        entry.body.append(typed)
        self._add(entry)
        self._set_running(True)
        return entry

    def end_turn(self, stop_reason: str) -> None:
        """The turn ended with ``stop_reason`` (or an error's description)."""
        self.last_stop = stop_reason
        if stop_reason == "cancelled":
            self.mark_cancelled()
        self._set_running(False)

    def mark_cancelled(self) -> None:
        """The client sent ``session/cancel``: unfinished tool calls of the turn are cancelled."""
        for entry in self._tool_calls.values():
            if entry.turn == self.turn and not entry.finished:
                entry.status = CANCELLED_STATUS
                self._changed(entry)

    def _set_running(self, running: bool) -> None:
        if self.turn_running != running:
            self.turn_running = running
            self._notify("turn_changed", running)

    # -- session/update ----------------------------------------------------------------

    def ignore(self, update: Any, error: str) -> None:
        """Count an update that is not shown: ``update`` as sent, ``error`` why."""
        self.ignored.count += 1
        self.ignored.last = update
        self.ignored.last_error = error
        log.debug("ignored a session update: {error}", error=error)

    def apply(self, update: object) -> None:
        """Fold one decoded ``SessionUpdate`` into the conversation."""
        try:
            self._apply(update)
        except Exception as e:
            log.failure("could not apply a session update")
            self.ignore(_as_wire(update), f"{type(e).__name__}: {e}")

    def _apply(self, update: object) -> None:
        if isinstance(update, schema.AgentMessageChunk):
            self._chunk(EntryKind.AGENT, update)
        elif isinstance(update, schema.AgentThoughtChunk):
            self._chunk(EntryKind.THOUGHT, update)
        elif isinstance(update, schema.UserMessageChunk):
            self._chunk(EntryKind.YOU, update)
        elif isinstance(update, schema.ToolCallStart):
            self._tool_call(update)
        elif isinstance(update, schema.ToolCallProgress):
            self._tool_call_update(update)
        elif isinstance(update, schema.AgentPlanUpdate):
            self._plan(update)
        elif isinstance(update, schema.AvailableCommandsUpdate):
            self.commands = [_command_info(command) for command in update.available_commands]
            self._notify("commands_changed", list(self.commands))
        elif isinstance(update, schema.UsageUpdate):
            self.usage = Usage(used=update.used, size=update.size)
            self._notify("usage_changed", self.usage)
        elif isinstance(update, schema.UnknownSessionUpdate):
            self.ignore(update.raw, f"unknown sessionUpdate {_tag_of(update)!r}")
        else:
            self.ignore(_as_wire(update), f"sessionUpdate {_tag_of(update)!r} {NOT_SHOWN}")

    def _chunk(self, kind: EntryKind, update: schema.ContentChunk) -> None:
        text = render_content_block(update.content)
        last = self.entries[-1] if self.entries else None
        if (
            isinstance(last, MessageEntry)
            and last.kind is kind
            and not last.typed
            and last.message_id == update.message_id
        ):
            last.body.append(text)
            self._changed(last)
            return
        if kind is EntryKind.YOU and not self.turn_running:
            # A user message outside a live turn (a session/load replay) begins a turn.
            self.turn += 1
        entry = MessageEntry(
            kind=kind,
            turn=self.turn,
            message_id=update.message_id,
            body=CappedText(self.text_cap),
        )
        entry.body.append(text)
        self._add(entry)

    def _tool_call(self, update: schema.ToolCallStart) -> None:
        entry = self._tool_calls.get(update.tool_call_id)
        if entry is None or entry.turn != self.turn:
            # New, or an id an earlier turn used (agents that number calls per turn):
            # another call, with an entry of its own.
            entry = ToolCallEntry(
                kind=EntryKind.TOOL_CALL, turn=self.turn, tool_call_id=update.tool_call_id
            )
            self._tool_calls[update.tool_call_id] = entry
            self._fold(entry, update, skip=frozenset())
            self._add(entry)
            return
        # A repeated tool_call, or one that arrives after its updates: updates are newer.
        entry.known = True
        self._fold(entry, update, skip=frozenset(entry.updated_fields))
        self._changed(entry)

    def _tool_call_update(self, update: schema.ToolCallProgress) -> None:
        entry = self._tool_calls.get(update.tool_call_id)
        if entry is not None and entry.turn != self.turn and entry.finished:
            entry = None  # a finished call of an earlier turn: this id names a new one
        new = entry is None
        if entry is None:
            entry = ToolCallEntry(
                kind=EntryKind.TOOL_CALL,
                turn=self.turn,
                tool_call_id=update.tool_call_id,
                known=False,
            )
            self._tool_calls[update.tool_call_id] = entry
        changed = self._fold(entry, update, skip=frozenset())
        if not entry.known:
            entry.updated_fields.update(changed)
        if new:
            self._add(entry)
        else:
            self._changed(entry)

    def _fold(
        self,
        entry: ToolCallEntry,
        update: schema.ToolCallStart | schema.ToolCallProgress,
        skip: frozenset[str],
    ) -> set[str]:
        """Copy the fields ``update`` carries into ``entry``; return their names."""
        changed: set[str] = set()

        def take(name: str) -> bool:
            return name not in skip and getattr(update, name, None) is not None

        if take("title"):
            entry.title = str(update.title)
            changed.add("title")
        if take("kind"):
            entry.tool_kind = str(update.kind)
            changed.add("kind")
        if take("status"):
            entry.status = str(update.status)
            changed.add("status")
        if take("content"):
            entry.content = list(update.content or [])
            entry.output.replace(render_tool_content(entry.content))
            changed.add("content")
        if take("locations"):
            entry.locations = [location.path for location in update.locations or []]
            changed.add("locations")
        if take("raw_input"):
            entry.raw_input = update.raw_input
            changed.add("raw_input")
        if take("raw_output"):
            entry.raw_output = update.raw_output
            changed.add("raw_output")
        return changed

    def _plan(self, update: schema.AgentPlanUpdate) -> None:
        items = [
            PlanItem(content=item.content, status=str(item.status), priority=str(item.priority))
            for item in update.entries
        ]
        for entry in reversed(self.entries):
            if entry.turn != self.turn:
                break
            if isinstance(entry, PlanEntry):
                entry.items = items
                self._changed(entry)
                return
        self._add(PlanEntry(kind=EntryKind.PLAN, turn=self.turn, items=items))

    # -- queries -------------------------------------------------------------------------

    def tool_call(self, tool_call_id: str) -> ToolCallEntry | None:
        """The entry of ``tool_call_id``, if any."""
        return self._tool_calls.get(tool_call_id)

    def entries_of(self, kind: EntryKind) -> Sequence[Entry]:
        """The entries of one kind, in order."""
        return [entry for entry in self.entries if entry.kind is kind]


def _command_info(command: schema.AvailableCommand) -> CommandInfo:
    hint = getattr(command.input, "hint", None) if command.input is not None else None
    return CommandInfo(
        name=command.name,
        description=command.description,
        input_hint=hint if isinstance(hint, str) else None,
    )


def _as_wire(update: object) -> Any:
    """``update`` as it was on the wire (best effort)."""
    try:
        return codec.encode(update)
    except Exception:
        return repr(update)
