"""The terminal UI at widget level: an App on a Clock, agent windows on in-memory agents.

Screens are read from urwid canvases (``render(size)`` then ``canvas.text``); keys are
fed with ``keypress(size, key)``. The agent is the library's tiny test agent over an
in-memory pair: it announces ``/web <query>`` and ``/help``, asks permission, answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from twisted.internet.task import Clock

from acpkit import schema
from acpkit.connection import AgentConnection
from acpkit.testing.pair import ConnectedPair, connected_pair
from acpkit_client.agents import DEFAULT_HANDSHAKE_TIMEOUT, AgentState
from acpkit_client.config import AgentEntry
from acpkit_client.session import AgentWindow
from acpkit_client.tui.agent_window import AgentWindowWidget
from acpkit_client.tui.app import App
from acpkit_client.tui.copy import osc52_sequence
from acpkit_client.tui.permission_modal import ModalPermissionPrompt
from acpkit_client.tui.rule import spinner_frame
from acpkit_client.tui.statusbar import MESSAGE_SECONDS
from tests.fixtures.client.tiny_agent import TinyAgent
from tests.helpers import MemoryAgentReactor

SIZE = (80, 24)
ENTRY = AgentEntry(name="tiny", command="python", source="test")


class Harness:
    """An App, one window on a tiny agent, and helpers to type and read the screen."""

    def __init__(self, root: Path, mode: str = "normal") -> None:
        self.clock = Clock()
        self.written: list[str] = []
        self.root = root
        self.app = App(
            str(root),
            self.clock,
            environ={"ACPKIT_DIR": str(root / "no-user-dir")},
            write_terminal=self.written.append,
        )
        self.agents: list[TinyAgent] = []
        self.pair: ConnectedPair | None = None
        self.session: AgentWindow | None = None
        self.window: AgentWindowWidget | None = None
        self.mode = mode

    def open(self) -> AgentWindowWidget:
        def make(conn: AgentConnection) -> TinyAgent:
            self.agents.append(TinyAgent(conn, self.mode))
            return self.agents[-1]

        prompt = ModalPermissionPrompt(self.app, ENTRY.name)
        self.session = AgentWindow(ENTRY, str(self.root), permission_prompt=prompt, environ={})
        self.pair = connected_pair(make, self.session)
        self.window = self.app.attach_window(self.session)
        assert self.pair.result(self.session.open_on(self.pair.client)) == "s1"
        return self.window

    def press(self, *keys: str) -> None:
        for key in keys:
            self.app.root.keypress(SIZE, key)
            if self.pair is not None:
                self.pair.pump()

    def type(self, text: str) -> None:
        self.press(*text)

    def screen(self) -> str:
        canvas = self.app.root.render(SIZE, focus=True)
        return "\n".join(row.decode("utf-8") for row in canvas.text)

    @property
    def input_text(self) -> str:
        assert self.window is not None
        return str(self.window.input.edit_text)


@pytest.fixture
def ui(tmp_path: Path) -> Iterator[Harness]:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("n\n", encoding="utf-8")
    harness = Harness(tmp_path)
    yield harness


def test_slash_list_shows_announced_commands_with_descriptions_and_hints(ui: Harness) -> None:
    """``/`` first opens the agent's commands: name, description and ``<hint>``."""
    ui.open()
    ui.type("/")
    screen = ui.screen()
    assert "/web  Search the web <query>" in screen
    assert "/help  Show help" in screen
    ui.type("h")
    screen = ui.screen()
    assert "/help  Show help" in screen and "/web" not in screen


def test_slash_tab_completes_with_a_space_for_a_command_taking_input(ui: Harness) -> None:
    """Tab takes the highlighted command; one with an input gets a trailing space."""
    ui.open()
    ui.type("/w")
    ui.press("tab")
    assert ui.input_text == "/web "
    assert ui.window is not None and not ui.window.list_open


def test_slash_enter_on_a_complete_command_sends_it(ui: Harness) -> None:
    """Enter completes ``/he`` to ``/help``; Enter again on the complete word sends it."""
    ui.open()
    ui.type("/he")
    ui.press("enter")
    assert ui.input_text == "/help"
    ui.press("enter")
    assert ui.input_text == ""
    assert ui.agents[0].prompts[0].prompt[0].text == "/help"  # type: ignore[union-attr]


def test_esc_closes_the_list_until_the_text_changes(ui: Harness) -> None:
    """Esc with a list open closes it; it stays closed until the text changes."""
    ui.open()
    ui.type("/")
    ui.press("esc")
    assert "Search the web" not in ui.screen()
    ui.press("left", "right")
    assert "Search the web" not in ui.screen()
    ui.type("w")
    assert "Search the web" in ui.screen()


def test_slash_without_commands_is_a_character_and_tab_switches_focus(tmp_path: Path) -> None:
    """With no announced command, ``/`` is just typed and Tab moves the focus."""
    harness = Harness(tmp_path)
    window = harness.open()
    assert harness.session is not None
    harness.session.conversation.commands = []
    harness.type("/x")
    assert not window.list_open
    harness.press("tab")
    assert not window.input_focused
    harness.press("tab")
    assert window.input_focused


def test_typing_while_the_conversation_has_focus_goes_to_the_input(tmp_path: Path) -> None:
    """Characters typed with the focus on the conversation are not dropped: the input
    takes the focus and them; keys the conversation uses (arrows) stay there."""
    harness = Harness(tmp_path)
    window = harness.open()
    harness.type("fix ")
    harness.press("tab")
    assert not window.input_focused
    harness.press("up")
    assert not window.input_focused
    harness.type("it é")
    assert window.input_focused
    assert harness.input_text == "fix it é"


@pytest.mark.process
def test_at_list_narrows_and_completes_a_project_file(ui: Harness) -> None:
    """``@`` lists project files; typing narrows; Tab completes with a space."""
    ui.open()
    ui.type("see @")
    screen = ui.screen()
    assert "notes.txt" in screen and "docs/guide.md" in screen
    ui.type("gu")
    screen = ui.screen()
    assert "docs/guide.md" in screen and "notes.txt" not in screen
    ui.press("tab")
    assert ui.input_text == "see @docs/guide.md "


@pytest.mark.process
def test_at_list_moves_with_arrows_and_enter_takes(ui: Harness) -> None:
    """Down moves the highlight; Enter takes the highlighted file."""
    ui.open()
    ui.type("@")
    ui.press("down", "enter")
    assert ui.input_text == "@docs/guide.md "


@pytest.mark.process
def test_at_list_walks_again_when_it_reopens(ui: Harness) -> None:
    """A file created after the list closed appears when ``@`` opens it again."""
    ui.open()
    ui.type("@")
    ui.press("esc")
    (ui.root / "fresh.txt").write_text("x", encoding="utf-8")
    ui.press("backspace")
    ui.type("@")
    assert "fresh.txt" in ui.screen()


def test_alt_enter_inserts_a_newline_and_enter_sends(ui: Harness) -> None:
    """Alt-Enter breaks the line; Enter sends both lines as one prompt."""
    ui.open()
    ui.type("one")
    ui.press("meta enter")
    ui.type("two")
    assert ui.input_text == "one\ntwo"
    ui.press("enter")
    assert ui.app.modals, "the tiny agent asks permission"
    assert "you\n  one\n  two" in "\n".join(line.rstrip() for line in ui.screen().split("\n"))


def test_permission_modal_names_the_tool_and_offers_the_agents_options(ui: Harness) -> None:
    """The modal shows the tool call's title and one button per option; Enter chooses."""
    ui.open()
    ui.type("go")
    ui.press("enter")
    screen = ui.screen()
    assert "tiny asks permission" in screen
    assert "tool: Write out.txt" in screen
    assert "< Allow" in screen and "< Reject" in screen
    ui.press("enter")
    assert not ui.app.modals
    assert ui.session is not None
    tool = ui.session.conversation.tool_call("t1")
    assert tool is not None and tool.status == "completed"
    assert "Write out.txt (edit) [completed]" in ui.screen()
    assert "read back: written" in ui.screen()


def test_esc_in_the_modal_rejects_once(ui: Harness) -> None:
    """Esc answers the reject_once option (never cancelled): the tool call fails."""
    ui.open()
    ui.type("go")
    ui.press("enter", "esc")
    assert not ui.app.modals
    assert ui.session is not None
    tool = ui.session.conversation.tool_call("t1")
    assert tool is not None and tool.status == "failed"
    assert not (ui.root / "out.txt").exists()
    assert "permission refused" in ui.screen()


def test_modal_shows_the_command_and_a_diff(ui: Harness) -> None:
    """A request carrying a command (rawInput) and a diff shows both."""
    ui.open()
    answers: list[str | None] = []
    request = schema.RequestPermissionRequest(
        session_id="s1",
        tool_call=schema.ToolCallUpdate(
            tool_call_id="x",
            title="edit a.txt",
            kind=schema.ToolKind.EDIT,
            raw_input={"command": "sed -i s/a/b/ a.txt"},
            content=[schema.FileEditToolCallContent(path="a.txt", old_text="a\n", new_text="b\n")],
        ),
        options=[
            schema.PermissionOption(
                option_id="ok", name="Allow", kind=schema.PermissionOptionKind.ALLOW_ONCE
            ),
            schema.PermissionOption(
                option_id="no", name="Reject", kind=schema.PermissionOptionKind.REJECT_ONCE
            ),
        ],
    )
    assert ui.session is not None
    prompt = ui.session.permission_prompt
    assert isinstance(prompt, ModalPermissionPrompt)
    prompt.choose(request).addCallback(answers.append)
    screen = ui.screen()
    assert "sed -i s/a/b/ a.txt" in screen
    assert "-a" in screen and "+b" in screen and "kind: edit" in screen
    ui.press("right", "enter")
    assert answers == ["no"]


def test_cancelled_request_closes_the_modal(ui: Harness) -> None:
    """When the turn is cancelled while the modal is open, the modal goes away."""
    ui.open()
    ui.type("go")
    ui.press("enter")
    assert ui.app.modals
    assert ui.session is not None
    ui.session.cancel()
    assert ui.pair is not None
    ui.pair.pump()
    assert not ui.app.modals


def test_tool_call_update_folds_into_its_line(ui: Harness) -> None:
    """A tool_call_update changes the one line of its toolCallId; no second line appears."""
    ui.open()
    assert ui.session is not None
    conversation = ui.session.conversation
    conversation.apply(
        schema.ToolCallStart(tool_call_id="b1", title="bash: make", kind=schema.ToolKind.EXECUTE)
    )
    assert "bash: make (execute) [pending]" in ui.screen()
    conversation.apply(
        schema.ToolCallProgress(
            tool_call_id="b1",
            status=schema.ToolCallStatus.COMPLETED,
            content=[schema.ContentToolCallContent(content=schema.TextContentBlock(text="built"))],
        )
    )
    screen = ui.screen()
    assert screen.count("bash: make") == 1
    assert "bash: make (execute) [completed]" in screen
    assert "    built" in screen


def test_status_bar_shows_the_front_windows_usage(ui: Harness) -> None:
    """The last usage_update of the front window shows as ``used / size tokens``."""
    ui.open()
    assert ui.session is not None
    ui.session.conversation.apply(schema.UsageUpdate(used=1234, size=32768))
    assert "1,234 / 32,768 tokens" in ui.screen().split("\n")[-1]


def test_a_usage_without_a_context_size_shows_the_tokens_alone() -> None:
    """An agent reporting no context size (0): ``15 tokens``, not ``15 / 0 tokens``."""
    from acpkit_client.conversation import Usage
    from acpkit_client.tui.statusbar import format_usage

    assert format_usage(Usage(used=15, size=0)) == "15 tokens"
    assert format_usage(Usage(used=1234, size=32768)) == "1,234 / 32,768 tokens"
    assert format_usage(None) == ""


def test_copy_region_under_cursor_and_status_message(ui: Harness) -> None:
    """Ctrl-C copies the cursor's region (indent removed), OSC 52 too; the bar counts lines."""
    ui.open()
    assert ui.session is not None
    ui.session.conversation.apply(
        schema.AgentMessageChunk(
            content=schema.TextContentBlock(text="Try:\n```bash\nmake\nmake test\n```\nok")
        )
    )
    ui.press("tab", "up", "up")
    ui.press("ctrl c")
    assert ui.app.clipboards.text == "make\nmake test\n"
    assert ui.written[-1] == osc52_sequence("make\nmake test\n")
    assert "2 lines copied" in ui.screen().split("\n")[-1]
    ui.clock.advance(MESSAGE_SECONDS + 0.1)
    assert "lines copied" not in ui.screen()


def test_shift_selection_copies_whole_lines_and_esc_abandons_it(ui: Harness) -> None:
    """Shift-Up extends a whole-line selection; Ctrl-Ins copies it; Esc drops it."""
    ui.open()
    assert ui.session is not None
    ui.session.conversation.apply(
        schema.AgentMessageChunk(content=schema.TextContentBlock(text="a\nb\nc"))
    )
    ui.press("tab", "shift up")
    ui.press("ctrl insert")
    assert ui.app.clipboards.text == "b\nc\n"
    assert ui.window is not None
    ui.press("esc")
    assert ui.window.view.selection is None


def test_paste_inserts_the_clients_clipboard(ui: Harness) -> None:
    """Shift-Ins pastes what the client copied into the input."""
    ui.open()
    ui.app.clipboards.text = "pasted"
    ui.press("shift insert")
    assert ui.input_text == "pasted"


def test_esc_without_selection_cancels_the_running_turn(tmp_path: Path) -> None:
    """Esc with nothing selected sends session/cancel; the turn ends cancelled."""
    harness = Harness(tmp_path, mode="slow")
    harness.open()
    harness.type("wait")
    harness.press("enter")
    assert harness.session is not None and harness.session.turn_running
    assert spinner_frame(harness.clock.seconds()) in harness.screen()
    harness.press("esc")
    assert not harness.session.turn_running
    assert "turn ended: cancelled" in harness.screen()


def test_the_status_bar_says_the_turn_was_cancelled_once_it_ends(tmp_path: Path) -> None:
    """ "cancelling the turn" gives way to "turn cancelled" as soon as the turn ends."""
    harness = Harness(tmp_path, mode="slow")
    harness.open()
    harness.type("wait")
    harness.press("enter")
    assert harness.session is not None
    harness.press("esc")
    assert not harness.session.turn_running
    screen = harness.screen()
    assert "cancelling the turn" not in screen
    assert "turn cancelled" in screen


def test_agent_menu_entries_and_their_active_state(ui: Harness) -> None:
    """Alt-A lists the agents, Create agents file (no file yet), Cancel turn, Agent status."""
    ui.press("meta a")
    screen = ui.screen()
    assert "Bob (reference agent)" in screen
    assert "Create agents file" in screen and "Cancel turn" in screen
    assert "Agent status" in screen
    items = {item.label: item for item in ui.app.agent_menu_items()}
    assert items["Create agents file"].enabled
    assert not items["Cancel turn"].enabled
    ui.press("esc")
    assert "Create agents file" not in ui.screen()


def test_create_agents_file_writes_it_and_disables_the_entry(ui: Harness) -> None:
    """Create agents file writes the starter file, shows it, and is then inactive."""
    ui.press("meta a")
    labels = [item.label for item in ui.app.agent_menu_items()]
    for _ in range(labels.index("Create agents file")):
        ui.press("down")
    ui.press("enter")
    assert (ui.root / ".acpkit" / "acp.toml").exists()
    assert "[[agent]]" in ui.screen()
    items = {item.label: item for item in ui.app.agent_menu_items()}
    assert not items["Create agents file"].enabled


def test_cancel_turn_is_active_only_while_the_front_turn_runs(tmp_path: Path) -> None:
    """Cancel turn is enabled while the front window's turn runs, and cancels it."""
    harness = Harness(tmp_path, mode="slow")
    harness.open()
    harness.type("wait")
    harness.press("enter")
    items = {item.label: item for item in harness.app.agent_menu_items()}
    assert items["Cancel turn"].enabled
    items["Cancel turn"].action()
    assert harness.pair is not None
    harness.pair.pump()
    assert harness.session is not None and not harness.session.turn_running


def test_agent_status_window_lists_the_report(ui: Harness) -> None:
    """Agent status opens a window with the library's report (commands included)."""
    ui.open()
    ui.app.show_status()
    screen = ui.screen()
    assert "Agent status" in screen
    assert "No agents file found" in screen
    assert "/web <query> — Search the web" in screen
    ui.press("esc")
    assert "Agent status" not in ui.screen()


def test_windows_cycle_jump_tile_and_close(ui: Harness) -> None:
    """F6 cycles, Alt-2 jumps, F5 tiles, Ctrl-W closes the front window and stops it."""
    first = ui.open()
    second_harness_session = AgentWindow(ENTRY, str(ui.root), environ={})
    second = ui.app.attach_window(second_harness_session)
    assert ui.app.front_window is second
    ui.press("f6")
    assert ui.app.front_window is first
    ui.press("meta 2")
    assert ui.app.front_window is second
    ui.press("f5")
    assert ui.screen().count("tiny") >= 2
    ui.press("ctrl w")
    assert ui.app.windows == [first]
    assert "tiny stopped" in ui.screen()


def test_title_is_the_name_and_the_spinner_is_on_the_rule(tmp_path: Path) -> None:
    """The title never changes during a turn; the rule's frame follows the clock."""
    harness = Harness(tmp_path, mode="slow")
    harness.open()
    harness.type("wait")
    harness.press("enter")
    lines = harness.screen().split("\n")
    assert lines[1].startswith("[x] 1 tiny ")
    frame = spinner_frame(harness.clock.seconds())
    rule = next(line for line in lines if line.startswith("──"))
    assert frame in rule
    harness.clock.advance(0.125)
    lines_later = harness.screen().split("\n")
    assert lines_later[1] == lines[1]
    assert spinner_frame(harness.clock.seconds()) != frame
    assert spinner_frame(harness.clock.seconds()) in "\n".join(lines_later)


def test_sending_before_the_agent_is_ready_says_so(tmp_path: Path) -> None:
    """Enter while the session is not open keeps the text and explains in the status bar."""
    harness = Harness(tmp_path)
    session = AgentWindow(ENTRY, str(tmp_path), environ={})
    harness.window = harness.app.attach_window(session)
    harness.type("hi")
    harness.press("enter")
    assert harness.input_text == "hi"
    assert "tiny is not ready" in harness.screen()


def test_a_long_input_keeps_the_conversation_visible_and_the_caret_in_view(ui: Harness) -> None:
    """A pasted 60-line input takes at most a third of the window and shows the caret's line."""
    ui.open()
    assert ui.session is not None
    ui.session.conversation.apply(
        schema.AgentMessageChunk(content=schema.TextContentBlock(text="still here"))
    )
    ui.app.clipboards.text = "\n".join(f"line{n}" for n in range(60))
    ui.press("shift insert")
    lines = ui.screen().split("\n")
    assert "  still here" in "\n".join(lines)
    assert any(line.startswith("──") for line in lines)
    assert lines[-2].rstrip() == "line59"
    assert "line0" not in "\n".join(lines)


def test_menu_opens_with_a_click_and_the_close_box_closes(ui: Harness) -> None:
    """A click on **Agent** opens the menu; a click on ``[x]`` closes the window."""
    ui.open()
    ui.app.root.mouse_event(SIZE, "mouse press", 1, 2, 0, True)
    assert "Agent status" in ui.screen()
    ui.press("esc")
    ui.app.root.mouse_event(SIZE, "mouse press", 1, 1, 1, True)
    assert ui.app.windows == []
    assert "No agent window is open" in ui.screen()


def test_wheel_over_the_conversation_keeps_the_input_focused(ui: Harness) -> None:
    """The wheel scrolls the conversation three rows; the focus stays in the input area."""
    window = ui.open()
    assert ui.session is not None
    text = "\n".join(f"row {n}" for n in range(60))
    ui.session.conversation.apply(
        schema.AgentMessageChunk(content=schema.TextContentBlock(text=text))
    )
    ui.screen()
    top = window.view.top
    ui.app.root.mouse_event(SIZE, "mouse press", 4, 5, 5, True)
    assert window.view.top == top - 3
    assert window.input_focused


def test_an_agent_that_cannot_start_says_why_in_its_window(ui: Harness) -> None:
    """Starting an agent whose command does not exist leaves a notice and a status message."""
    ghost = AgentEntry(name="ghost", command="/no/such/agent", source="test")
    ui.app.start_agent(ghost)
    screen = ui.screen()
    assert "could not start ghost" in screen and "does not exist" in screen
    assert "ghost could not start (see Agent status)" in screen


def test_an_agent_that_never_answers_is_given_up_after_the_handshake_timeout(
    tmp_path: Path,
) -> None:
    """
    The window shows "starting" while the agent has not answered; after the handshake
    timeout it says which request went unanswered and the agent is stopped.
    """
    clock = MemoryAgentReactor()  # its agents never answer
    app = App(str(tmp_path), clock, environ={"ACPKIT_DIR": str(tmp_path / "none")})
    assert app.handshake_timeout == DEFAULT_HANDSHAKE_TIMEOUT
    widget = app.start_agent(AgentEntry(name="mute", command="sh", source="test"))
    assert widget.session.run.state is AgentState.STARTING
    clock.advance(DEFAULT_HANDSHAKE_TIMEOUT - 1)
    assert widget.session.run.state is AgentState.STARTING
    clock.advance(2)
    canvas = app.root.render(SIZE, focus=True)
    screen = "\n".join(line.decode("utf-8", "replace") for line in canvas.text)
    assert "no answer to initialize within 30 s (--handshake-timeout)" in screen
    assert "the agent was stopped" in screen
    (process,) = clock.processes
    assert process.disconnecting


def test_closing_a_starting_window_gives_up_on_the_agent(tmp_path: Path) -> None:
    """Closing the window of an agent still starting stops it, without waiting."""
    clock = MemoryAgentReactor()  # its agents never answer
    app = App(str(tmp_path), clock, environ={"ACPKIT_DIR": str(tmp_path / "none")})
    app.start_agent(AgentEntry(name="mute", command="sh", source="test"))
    app.close_window()
    assert app.windows == []
    (process,) = clock.processes
    assert process.disconnecting
