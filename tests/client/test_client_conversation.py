"""The conversation model fed with recorded ``session/update`` sequences."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from zope.interface import implementer

from acpkit import codec, schema
from acpkit_client.completion import CommandInfo
from acpkit_client.conversation import (
    ENTRY_TEXT_CAP,
    Conversation,
    EntryKind,
    MessageEntry,
    PlanEntry,
    ToolCallEntry,
    Usage,
)
from acpkit_client.interfaces import IConversationObserver


def feed(conversation: Conversation, *updates: dict[str, Any]) -> None:
    """Decode each wire update the way the connection does, then apply it."""
    for update in updates:
        notification = codec.decode(
            schema.SessionNotification, {"sessionId": "s", "update": update}
        )
        conversation.apply(notification.update)


def chunk(kind: str, text: str, message_id: str | None = None) -> dict[str, Any]:
    update: dict[str, Any] = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
    if message_id is not None:
        update["messageId"] = message_id
    return update


@implementer(IConversationObserver)
class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def entry_added(self, entry: Any) -> None:
        self.events.append(("added", entry))

    def entry_changed(self, entry: Any) -> None:
        self.events.append(("changed", entry))

    def commands_changed(self, commands: Any) -> None:
        self.events.append(("commands", commands))

    def usage_changed(self, usage: Any) -> None:
        self.events.append(("usage", usage))

    def turn_changed(self, running: bool) -> None:
        self.events.append(("turn", running))


def test_chunks_append_until_speaker_or_message_changes() -> None:
    """Agent chunks join one entry; a thought, or a new messageId, starts a new entry."""
    c = Conversation()
    c.start_turn("hello @x")
    feed(
        c,
        chunk("agent_message_chunk", "Hel"),
        chunk("agent_message_chunk", "lo"),
        chunk("agent_thought_chunk", "hmm"),
        chunk("agent_message_chunk", "A", "m1"),
        chunk("agent_message_chunk", "B", "m1"),
        chunk("agent_message_chunk", "C", "m2"),
    )
    kinds = [(e.kind, e.text) for e in c.entries]
    assert kinds == [
        (EntryKind.YOU, "hello @x"),
        (EntryKind.AGENT, "Hello"),
        (EntryKind.THOUGHT, "hmm"),
        (EntryKind.AGENT, "AB"),
        (EntryKind.AGENT, "C"),
    ]


def test_replayed_user_chunks_show_as_you() -> None:
    """
    A replay's user_message_chunk shows as a *you* entry; agent replies follow; each
    replayed user message begins a turn (so ids reused across turns stay apart).
    """
    c = Conversation()
    feed(
        c,
        chunk("user_message_chunk", "old question", "u1"),
        chunk("agent_message_chunk", "old answer", "a1"),
        chunk("user_message_chunk", "second ", "u2"),
        chunk("user_message_chunk", "question", "u2"),
    )
    assert [(e.kind, e.text) for e in c.entries] == [
        (EntryKind.YOU, "old question"),
        (EntryKind.AGENT, "old answer"),
        (EntryKind.YOU, "second question"),
    ]
    assert c.turn == 2


def test_typed_line_is_kept_as_typed_and_echo_is_separate() -> None:
    """The user's typed line is never merged with the agent's echo of it."""
    c = Conversation()
    c.start_turn("explain @a.py")
    feed(c, chunk("user_message_chunk", "explain <file>"))
    assert [e.text for e in c.entries] == ["explain @a.py", "explain <file>"]
    assert isinstance(c.entries[0], MessageEntry) and c.entries[0].typed


def test_tool_call_folds_updates_and_new_content_replaces_old() -> None:
    """One entry per toolCallId; a missing status is pending; new content replaces old."""
    c = Conversation()
    feed(
        c,
        {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Read", "kind": "read"},
    )
    entry = c.tool_call("t1")
    assert entry is not None and entry.status == "pending"
    feed(
        c,
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "t1",
            "status": "in_progress",
            "content": [{"type": "content", "content": {"type": "text", "text": "partial"}}],
        },
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "t1",
            "status": "completed",
            "content": [{"type": "content", "content": {"type": "text", "text": "final"}}],
        },
    )
    assert len(c.entries_of(EntryKind.TOOL_CALL)) == 1
    assert entry.status == "completed"
    assert entry.title == "Read" and entry.tool_kind == "read"
    assert entry.text == "Read (read) [completed]\nfinal"


def test_update_for_unknown_tool_call_is_shown_honestly() -> None:
    """An update whose toolCallId was never started says so, and is not made a failure."""
    c = Conversation()
    feed(c, {"sessionUpdate": "tool_call_update", "toolCallId": "ghost", "status": "completed"})
    entry = c.tool_call("ghost")
    assert isinstance(entry, ToolCallEntry)
    assert not entry.known
    assert entry.status == "completed"
    assert entry.heading == "update for unknown tool call ghost [completed]"


def test_tool_call_arriving_after_its_update_keeps_the_newer_fields() -> None:
    """Out of order: the late tool_call fills title/kind but not the status the update set."""
    c = Conversation()
    feed(
        c,
        {"sessionUpdate": "tool_call_update", "toolCallId": "t", "status": "completed"},
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "t",
            "title": "Edit",
            "kind": "edit",
            "status": "pending",
        },
    )
    entries = c.entries_of(EntryKind.TOOL_CALL)
    assert len(entries) == 1
    entry = c.tool_call("t")
    assert entry is not None and entry.known
    assert (entry.title, entry.tool_kind, entry.status) == ("Edit", "edit", "completed")


def test_diff_content_is_rendered_as_a_unified_diff() -> None:
    """A diff tool content shows as a unified diff (a new file from /dev/null)."""
    c = Conversation()
    feed(
        c,
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "d",
            "title": "Write",
            "content": [
                {"type": "diff", "path": "/p/a.txt", "oldText": "one\n", "newText": "two\n"},
                {"type": "diff", "path": "/p/new.txt", "oldText": None, "newText": "x\n"},
            ],
        },
    )
    entry = c.tool_call("d")
    assert entry is not None
    assert "-one\n+two" in entry.text
    assert "--- /dev/null" in entry.text and "+x" in entry.text


def test_plan_is_replaced_whole_within_a_turn() -> None:
    """Each plan update replaces the turn's plan entry; a new turn gets a new entry."""
    c = Conversation()
    c.start_turn("go")
    plan1 = {
        "sessionUpdate": "plan",
        "entries": [
            {"content": "a", "priority": "high", "status": "pending"},
            {"content": "b", "priority": "low", "status": "pending"},
        ],
    }
    plan2 = {
        "sessionUpdate": "plan",
        "entries": [{"content": "a", "priority": "high", "status": "completed"}],
    }
    feed(c, plan1, chunk("agent_message_chunk", "working"), plan2)
    plans = c.entries_of(EntryKind.PLAN)
    assert len(plans) == 1
    assert isinstance(plans[0], PlanEntry)
    assert plans[0].text == "[completed] a"
    c.end_turn("end_turn")
    c.start_turn("again")
    feed(c, plan1)
    assert len(c.entries_of(EntryKind.PLAN)) == 2


def test_commands_and_usage() -> None:
    """available_commands_update sets the commands; usage_update the usage."""
    c = Conversation()
    recorder = Recorder()
    c.subscribe(recorder)
    feed(
        c,
        {
            "sessionUpdate": "available_commands_update",
            "availableCommands": [
                {"name": "web", "description": "Search", "input": {"hint": "query"}},
                {"name": "help", "description": "Help"},
            ],
        },
        {"sessionUpdate": "usage_update", "used": 10, "size": 100},
    )
    assert c.commands == [CommandInfo("web", "Search", "query"), CommandInfo("help", "Help")]
    assert c.usage == Usage(used=10, size=100)
    assert [name for name, _ in recorder.events] == ["commands", "usage"]


def test_unknown_and_unshown_updates_are_counted() -> None:
    """Unknown kinds and kinds this client does not show are ignored and counted."""
    c = Conversation()
    feed(
        c,
        {"sessionUpdate": "hologram", "data": 1},
        {"sessionUpdate": "current_mode_update", "currentModeId": "ask"},
    )
    assert c.entries == []
    assert c.ignored.count == 2
    assert c.ignored.last == {"sessionUpdate": "current_mode_update", "currentModeId": "ask"}
    assert c.ignored.last_error is not None and "not shown" in c.ignored.last_error
    c.ignore({"sessionUpdate": "tool_call"}, "undecodable: $.toolCallId: missing")
    assert c.ignored.count == 3


def test_cancel_marks_unfinished_tool_calls_of_the_turn() -> None:
    """After session/cancel, the turn's unfinished tool calls are marked cancelled locally."""
    c = Conversation()
    feed(c, {"sessionUpdate": "tool_call", "toolCallId": "old", "title": "Old"})
    c.start_turn("go")
    feed(
        c,
        {"sessionUpdate": "tool_call", "toolCallId": "a", "title": "A"},
        {"sessionUpdate": "tool_call", "toolCallId": "b", "title": "B", "status": "completed"},
    )
    c.mark_cancelled()
    states = {e.tool_call_id: e.status for e in c.entries if isinstance(e, ToolCallEntry)}
    assert states == {"old": "pending", "a": "cancelled", "b": "completed"}


def test_turn_state_is_notified() -> None:
    """Observers see entry_added for the typed line and turn started / ended."""
    c = Conversation()
    recorder = Recorder()
    c.subscribe(recorder)
    c.start_turn("hi")
    c.end_turn("end_turn")
    assert [name for name, _ in recorder.events] == ["added", "turn", "turn"]
    assert recorder.events[1][1] is True and recorder.events[2][1] is False
    assert c.last_stop == "end_turn"


def test_an_entry_is_capped_and_says_what_was_dropped() -> None:
    """An entry keeps one megabyte; the number of dropped bytes is said in the entry."""
    c = Conversation()
    piece = "é" * 300_000  # 600,000 bytes each
    feed(c, *[chunk("agent_message_chunk", piece) for _ in range(3)])
    entry = c.entries[0]
    assert isinstance(entry, MessageEntry)
    kept = entry.body.kept.encode("utf-8")
    assert len(kept) <= ENTRY_TEXT_CAP
    dropped = 3 * 600_000 - len(kept)
    assert entry.text.endswith(f"[… {dropped:,} bytes dropped …]")


def test_a_failing_observer_does_not_break_the_conversation() -> None:
    """An observer that raises is logged; the update is still applied."""

    @implementer(IConversationObserver)
    class Broken(Recorder):
        def entry_added(self, entry: Any) -> None:
            raise RuntimeError("boom")

    c = Conversation()
    c.subscribe(Broken())
    feed(c, chunk("agent_message_chunk", "ok"))
    assert [e.text for e in c.entries] == ["ok"]


tool_updates = st.lists(
    st.tuples(
        st.sampled_from(["tool_call", "tool_call_update"]),
        st.sampled_from(["a", "b", "c"]),
        st.one_of(st.none(), st.sampled_from(["pending", "in_progress", "completed", "failed"])),
        st.one_of(st.none(), st.text(max_size=5)),
    ),
    max_size=30,
)


@given(tool_updates)
def test_any_tool_call_sequence_gives_one_entry_per_id(updates: list[Any]) -> None:
    """Whatever the order, each toolCallId has exactly one entry and the last status wins."""
    c = Conversation()
    last_status: dict[str, str] = {}
    for kind, tid, status, output in updates:
        update: dict[str, Any] = {"sessionUpdate": kind, "toolCallId": tid}
        if kind == "tool_call":
            update["title"] = f"T{tid}"
        if status is not None:
            update["status"] = status
        if output is not None:
            update["content"] = [{"type": "content", "content": {"type": "text", "text": output}}]
        feed(c, update)
        entry = c.tool_call(tid)
        assert entry is not None
        if status is not None and (
            kind == "tool_call_update" or "status" not in entry.updated_fields
        ):
            last_status[tid] = status
    ids = [e.tool_call_id for e in c.entries if isinstance(e, ToolCallEntry)]
    assert sorted(ids) == sorted(set(ids))
    for tid, status in last_status.items():
        entry = c.tool_call(tid)
        assert entry is not None and entry.status == status
    assert c.ignored.count == 0


def test_a_tool_call_id_reused_in_a_later_turn_is_another_call() -> None:
    """Agents that number calls per turn reuse ids: a later turn's call gets its own entry."""
    c = Conversation()
    c.start_turn("one")
    feed(c, {"sessionUpdate": "tool_call", "toolCallId": "call_1", "title": "ls"})
    feed(c, {"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "status": "completed"})
    c.end_turn("end_turn")
    c.start_turn("two")
    feed(c, {"sessionUpdate": "tool_call", "toolCallId": "call_1", "title": "rm x"})
    calls = c.entries_of(EntryKind.TOOL_CALL)
    assert [(e.turn, e.title) for e in calls if isinstance(e, ToolCallEntry)] == [
        (1, "ls"),
        (2, "rm x"),
    ]
    assert c.tool_call("call_1") is calls[1]
    # An update alone, for a finished call of an earlier turn, also names a new call.
    feed(c, {"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "status": "completed"})
    c.end_turn("end_turn")
    c.start_turn("three")
    feed(c, {"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "status": "failed"})
    assert len(c.entries_of(EntryKind.TOOL_CALL)) == 3
    assert calls[1].status == "completed"


def test_an_unfinished_call_of_an_earlier_turn_keeps_its_updates() -> None:
    """A call still running when its turn ended is updated in place by a later update."""
    c = Conversation()
    c.start_turn("one")
    feed(c, {"sessionUpdate": "tool_call", "toolCallId": "bg", "title": "watch"})
    c.end_turn("end_turn")
    c.start_turn("two")
    feed(c, {"sessionUpdate": "tool_call_update", "toolCallId": "bg", "status": "completed"})
    calls = c.entries_of(EntryKind.TOOL_CALL)
    assert len(calls) == 1
    assert isinstance(calls[0], ToolCallEntry) and calls[0].status == "completed"


def test_a_replay_reusing_ids_across_turns_shows_each_call() -> None:
    """In a session/load replay each user message begins a turn, so reused ids stay apart."""
    c = Conversation()
    feed(
        c,
        chunk("user_message_chunk", "one"),
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "call_1",
            "title": "ls",
            "status": "completed",
        },
        chunk("user_message_chunk", "two"),
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "call_1",
            "title": "cat",
            "status": "completed",
        },
    )
    titles = [e.title for e in c.entries_of(EntryKind.TOOL_CALL) if isinstance(e, ToolCallEntry)]
    assert titles == ["ls", "cat"]
