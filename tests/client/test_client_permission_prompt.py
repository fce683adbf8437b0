"""A permission prompt shows the tool call as the agent announced it, not only its id.

Agents often announce a tool call (``tool_call`` / ``tool_call_update``: title, kind,
rawInput with the command, a diff, locations) and then ask permission with a
``toolCall`` holding little more than ``toolCallId``.  The session completes the
request with what was announced (``merge_tool_call``), and both ``ask``'s terminal
prompt and the terminal UI's modal show the completed call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import urwid
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from zope.interface import implementer

from acpkit import schema
from acpkit.connection import AgentConnection
from acpkit.testing.pair import connected_pair
from acpkit_client import cli
from acpkit_client.config import AgentEntry
from acpkit_client.conversation import Conversation
from acpkit_client.interfaces import IPermissionPrompt
from acpkit_client.permissions import describe_tool_call, merge_tool_call
from acpkit_client.session import AgentWindow
from acpkit_client.tui.permission_modal import PermissionModal
from tests.fixtures.client.tiny_agent import TinyAgent

DIFF = schema.FileEditToolCallContent(path="/p/src/app.py", old_text="x = 1\n", new_text="x = 2\n")
OPTIONS = [
    schema.PermissionOption(
        option_id="allow", name="Allow", kind=schema.PermissionOptionKind.ALLOW_ONCE
    ),
    schema.PermissionOption(
        option_id="reject", name="Reject", kind=schema.PermissionOptionKind.REJECT_ONCE
    ),
]


def announce(conversation: Conversation, call_id: str = "call_1") -> None:
    """What an agent typically sends before asking: a tool_call, then an update."""
    conversation.apply(
        schema.ToolCallStart(
            tool_call_id=call_id,
            title="Edit src/app.py",
            kind=schema.ToolKind.EDIT,
            status=schema.ToolCallStatus.PENDING,
            raw_input={"command": "sed -i s/1/2/ src/app.py"},
            locations=[schema.ToolCallLocation(path="/p/src/app.py", line=1)],
        )
    )
    conversation.apply(schema.ToolCallProgress(tool_call_id=call_id, content=[DIFF]))


def bare_request(call_id: str = "call_1", **fields: Any) -> schema.RequestPermissionRequest:
    return schema.RequestPermissionRequest(
        session_id="s1",
        tool_call=schema.ToolCallUpdate(tool_call_id=call_id, **fields),
        options=OPTIONS,
    )


# -- the merge ----------------------------------------------------------------------------


def test_merge_fills_what_the_request_leaves_out() -> None:
    """A request naming only the id gets the announced title, kind, status, command,
    diff and files."""
    conversation = Conversation()
    announce(conversation)
    merged = merge_tool_call(conversation.tool_call("call_1"), bare_request().tool_call)
    assert merged.tool_call_id == "call_1"
    assert merged.title == "Edit src/app.py"
    assert merged.kind == schema.ToolKind.EDIT
    assert merged.status == schema.ToolCallStatus.PENDING
    assert merged.raw_input == {"command": "sed -i s/1/2/ src/app.py"}
    assert merged.content == [DIFF]
    assert merged.locations is not None
    assert [location.path for location in merged.locations] == ["/p/src/app.py"]


def test_merge_keeps_the_requests_own_fields() -> None:
    """Fields the request carries are newer than the announcement and win."""
    conversation = Conversation()
    announce(conversation)
    own = bare_request(
        title="Edit src/app.py again",
        kind=schema.ToolKind.DELETE,
        raw_input={"command": "rm src/app.py"},
        locations=[schema.ToolCallLocation(path="/p/other.py", line=7)],
    ).tool_call
    merged = merge_tool_call(conversation.tool_call("call_1"), own)
    assert merged.title == "Edit src/app.py again"
    assert merged.kind == schema.ToolKind.DELETE
    assert merged.raw_input == {"command": "rm src/app.py"}
    assert merged.locations == own.locations
    assert merged.content == [DIFF]  # not in the request: the announced diff


def test_merge_without_an_announcement_changes_nothing() -> None:
    """No announced entry (or one for another id): the request's tool call as it is."""
    conversation = Conversation()
    announce(conversation, "call_9")
    request = bare_request(title="Run make")
    assert merge_tool_call(None, request.tool_call) is request.tool_call
    assert merge_tool_call(conversation.tool_call("call_9"), request.tool_call) is (
        request.tool_call
    )


def test_describe_names_command_files_and_diff() -> None:
    """describe_tool_call lists tool, kind, command, files (with lines) and the diff; an
    argv command is shown as one shell line."""
    conversation = Conversation()
    announce(conversation)
    merged = merge_tool_call(conversation.tool_call("call_1"), bare_request().tool_call)
    described = dict(describe_tool_call(merged))
    assert described["tool"] == "Edit src/app.py"
    assert described["kind"] == "edit"
    assert described["command"] == "sed -i s/1/2/ src/app.py"
    assert described["files"] == "/p/src/app.py"  # the conversation keeps paths only
    assert "-x = 1" in described["diff"] and "+x = 2" in described["diff"]
    argv = bare_request(raw_input={"command": ["bash", "-lc", "make test"]}).tool_call
    assert dict(describe_tool_call(argv))["command"] == "bash -lc 'make test'"
    lined = bare_request(locations=[schema.ToolCallLocation(path="/p/a.py", line=3)])
    assert dict(describe_tool_call(lined.tool_call))["files"] == "/p/a.py:3"


# -- the session gives the prompt the completed call ---------------------------------------------


@implementer(IPermissionPrompt)
class Recording:
    """Remembers each request and rejects."""

    def __init__(self) -> None:
        self.requests: list[schema.RequestPermissionRequest] = []

    def choose(self, request: schema.RequestPermissionRequest) -> str | None:
        self.requests.append(request)
        return "reject"


class AnnouncingAgent(TinyAgent):
    """Announces call_1 (title, kind, command, diff, file) then asks with the id alone;
    in the next turn asks about a call_1 it never announced in that turn."""

    def __init__(self, conn: AgentConnection, mode: str = "normal") -> None:
        super().__init__(conn, mode)
        self.turns = 0

    async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        self.turns += 1
        sid = params.session_id
        if self.turns == 1:
            await self.conn.session_update(
                sid,
                schema.ToolCallStart(
                    tool_call_id="call_1",
                    title="Edit src/app.py",
                    kind=schema.ToolKind.EDIT,
                    raw_input={"command": "sed -i s/1/2/ src/app.py"},
                    locations=[schema.ToolCallLocation(path="/p/src/app.py")],
                ),
            )
            await self.conn.session_update(
                sid, schema.ToolCallProgress(tool_call_id="call_1", content=[DIFF])
            )
        await self.conn.request_permission(bare_request())
        return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)


def open_window(tmp_path: Path, prompt: IPermissionPrompt) -> tuple[AgentWindow, Any]:
    clock = Clock()
    window = AgentWindow(
        AgentEntry(name="announcer", command="python", source="test"),
        str(tmp_path),
        permission_prompt=prompt,
        environ={},
    )
    pair = connected_pair(lambda conn: AnnouncingAgent(conn), window, clock=clock)
    pair.result(window.open_on(pair.client, clock))
    return window, pair


def test_window_asks_about_the_announced_call(tmp_path: Path) -> None:
    """The window's prompt gets the request completed with this turn's announcement."""
    prompt = Recording()
    window, pair = open_window(tmp_path, prompt)
    assert pair.result(window.send_prompt("go", files=[])) == "end_turn"
    [request] = prompt.requests
    described = dict(describe_tool_call(request.tool_call))
    assert described["tool"] == "Edit src/app.py"
    assert described["command"] == "sed -i s/1/2/ src/app.py"
    assert "+x = 2" in described["diff"]
    assert request.options == OPTIONS


def test_an_id_from_an_earlier_turn_is_not_merged(tmp_path: Path) -> None:
    """An id reused in a later turn names another call: its old announcement is not shown."""
    prompt = Recording()
    window, pair = open_window(tmp_path, prompt)
    pair.result(window.send_prompt("one", files=[]))
    pair.result(window.send_prompt("two", files=[]))
    assert dict(describe_tool_call(prompt.requests[1].tool_call)) == {"tool": "call_1"}


# -- what the user sees ---------------------------------------------------------------------


def completed_request() -> schema.RequestPermissionRequest:
    conversation = Conversation()
    announce(conversation)
    window_request = bare_request()
    merged = merge_tool_call(conversation.tool_call("call_1"), window_request.tool_call)
    return schema.RequestPermissionRequest(session_id="s1", tool_call=merged, options=OPTIONS)


def test_ask_prompt_text_shows_the_announced_call() -> None:
    """ask's terminal prompt names the title and kind, the command, the files, the diff,
    then the options by number."""
    text = cli.permission_prompt_text(completed_request())
    lines = text.splitlines()
    assert lines[0] == "The agent asks permission: Edit src/app.py"
    assert "  kind: edit" in lines
    assert "  command: sed -i s/1/2/ src/app.py" in lines
    assert "  files: /p/src/app.py" in lines
    assert "  diff:" in lines
    assert "    -x = 1" in lines and "    +x = 2" in lines
    assert lines[-2:] == ["  1. Allow (allow_once)", "  2. Reject (reject_once)"]
    assert "call_1" not in text


def test_ask_prompt_text_bounds_and_escapes() -> None:
    """A long diff is cut at PROMPT_DETAIL_LINES lines with a count of the rest; escape
    sequences from the agent are shown, not sent to the terminal."""
    long = schema.FileEditToolCallContent(
        path="big.txt", old_text=None, new_text="".join(f"{n}\n" for n in range(200))
    )
    request = bare_request(title="\x1b[2Jwipe", content=[long])
    text = cli.permission_prompt_text(request)
    assert "\x1b" not in text and "\\x1b[2Jwipe" in text
    diff_lines = [line for line in text.splitlines() if line.startswith("    ")]
    assert len(diff_lines) == cli.PROMPT_DETAIL_LINES + 1
    assert diff_lines[-1].endswith("more lines")


def test_ask_prompt_without_announcement_names_the_id() -> None:
    """With nothing announced and no title, the id is all there is to show."""
    text = cli.permission_prompt_text(bare_request())
    assert text.splitlines()[0] == "The agent asks permission: call_1"


def test_modal_shows_the_announced_call() -> None:
    """The terminal UI's modal shows the title, kind, command, files and diff."""
    modal = PermissionModal(completed_request(), "announcer", lambda answer: None)
    canvas = modal.render((80, modal.rows_wanted(80)), focus=True)
    screen = "\n".join(row.decode("utf-8") for row in canvas.text)
    assert "tool: Edit src/app.py" in screen
    assert "kind: edit" in screen
    assert "sed -i s/1/2/ src/app.py" in screen
    assert "files: /p/src/app.py" in screen
    assert "-x = 1" in screen and "+x = 2" in screen
    assert "call_1" not in screen
    assert isinstance(modal, urwid.Widget)


def test_deferred_prompts_get_the_completed_call_too(tmp_path: Path) -> None:
    """A prompt answering later (a Deferred, like the modal's) sees the same request."""

    @implementer(IPermissionPrompt)
    class Later:
        def __init__(self) -> None:
            self.pending: list[tuple[Any, Deferred[str | None]]] = []

        def choose(self, request: Any) -> Deferred[str | None]:
            d: Deferred[str | None] = Deferred()
            self.pending.append((request, d))
            return d

    prompt = Later()
    window, pair = open_window(tmp_path, prompt)
    turn = window.send_prompt("go", files=[])
    pair.pump()
    [(request, answer)] = prompt.pending
    assert request.tool_call.title == "Edit src/app.py"
    answer.callback("allow")
    assert pair.result(turn) == "end_turn"
