"""The whole terminal UI renders at every size from 20x6 up, and across resizes.

A Hypothesis state machine drives an App on a Clock with agent windows on in-memory tiny
agents: it opens and closes windows, tiles them, opens the menus, the Agent status window,
the ``/`` and ``@`` lists and permission modals (small ones and ones with a long command
and diff), fills the conversation, the usage and the input, pastes, presses keys and clicks, and
resizes the screen between steps. After every step the screen must render to a canvas of exactly the
screen's size (urwid raises ``WidgetError`` when a widget draws a canvas of another size).
Below 20x6 the UI draws a notice asking for a larger terminal, and keys still work.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import urwid
import urwid.testing
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from twisted.internet.task import Clock

from acpkit import schema
from acpkit.connection import AgentConnection
from acpkit.testing.pair import ConnectedPair, connected_pair
from acpkit_client.config import AgentEntry
from acpkit_client.session import AgentWindow
from acpkit_client.tui.app import App
from acpkit_client.tui.permission_modal import ModalPermissionPrompt
from acpkit_client.tui.sizes import MIN_COLUMNS, MIN_ROWS
from tests.client.test_tui_pty import TINY_AGENT, Terminal
from tests.fixtures.client.tiny_agent import TinyAgent
from tests.helpers import examples

ENTRY = AgentEntry(name="tiny", command="python", source="test")

#: Screen sizes the machine resizes to: mostly small, sometimes large.
SIZES = st.tuples(
    st.one_of(st.integers(MIN_COLUMNS, 40), st.integers(41, 200)),
    st.one_of(st.integers(MIN_ROWS, 14), st.integers(15, 70)),
)

#: Keys pressed at random (no Ctrl-Q: quitting is tested elsewhere).
KEYS = st.sampled_from(
    [
        "up",
        "down",
        "left",
        "right",
        "page up",
        "page down",
        "home",
        "end",
        "tab",
        "enter",
        "esc",
        "backspace",
        "meta enter",
        "shift up",
        "shift page down",
        "f5",
        "f6",
        "meta a",
        "meta w",
        "meta 2",
        "a",
        "/",
        "@",
        " ",
    ]
)


def long_request() -> schema.RequestPermissionRequest:
    """A permission request with a long title, command and diff, and long option names."""
    old = "".join(f"old line {n} " + "x" * 90 + "\n" for n in range(30))
    new = "".join(f"new line {n}\n" for n in range(30))
    return schema.RequestPermissionRequest(
        session_id="s1",
        tool_call=schema.ToolCallUpdate(
            tool_call_id="x",
            title="Edit a file with a rather long name " + "y" * 80,
            kind=schema.ToolKind.EDIT,
            raw_input={"command": "sed -i s/a/b/ " + "z" * 150 + "\nsecond line"},
            content=[schema.FileEditToolCallContent(path="a.txt", old_text=old, new_text=new)],
        ),
        options=[
            schema.PermissionOption(
                option_id="ok",
                name="Allow this time and every later time in this session",
                kind=schema.PermissionOptionKind.ALLOW_ALWAYS,
            ),
            schema.PermissionOption(
                option_id="once", name="Allow", kind=schema.PermissionOptionKind.ALLOW_ONCE
            ),
            schema.PermissionOption(
                option_id="no", name="Reject", kind=schema.PermissionOptionKind.REJECT_ONCE
            ),
        ],
    )


class WholeApp(RuleBasedStateMachine):
    """The App at a size that changes between steps; every step must render at that size."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="acpkit-sizes-"))
        (self.root / ".acpkit").mkdir()
        # An agents file with no agent: no menu entry spawns a process.
        (self.root / ".acpkit" / "acp.toml").write_text("", encoding="utf-8")
        for n in range(12):
            (self.root / f"file{n}-{'long' * n}.txt").write_text("x\n", encoding="utf-8")
        self.clock = Clock()
        self.app = App(
            str(self.root),
            self.clock,
            environ={"ACPKIT_DIR": str(self.root / "no-user-dir")},
            write_terminal=lambda _text: None,
        )
        self.pairs: list[ConnectedPair] = []
        self.size: tuple[int, int] = (80, 24)

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def pump(self) -> None:
        for pair in self.pairs:
            pair.pump()

    def press(self, *keys: str) -> None:
        for key in keys:
            self.app.root.keypress(self.size, key)
            self.pump()

    @property
    def free(self) -> bool:
        """No modal, menu or status window over the agent windows."""
        app = self.app
        return not app.modals and app.dropdown is None and app.text_window is None

    @property
    def ready_front(self) -> bool:
        front = self.app.front_window
        return (
            self.free
            and front is not None
            and front.session.session_id is not None
            and not front.session.turn_running
        )

    # -- what is on the screen ----------------------------------------------------------

    @precondition(lambda self: len(self.app.windows) < 4)
    @rule()
    def open_window(self) -> None:
        def make(conn: AgentConnection) -> TinyAgent:
            return TinyAgent(conn, "normal")

        prompt = ModalPermissionPrompt(self.app, ENTRY.name)
        session = AgentWindow(ENTRY, str(self.root), permission_prompt=prompt, environ={})
        pair = connected_pair(make, session)
        self.pairs.append(pair)
        self.app.attach_window(session)
        session.open_on(pair.client)
        self.pump()

    @precondition(lambda self: self.ready_front)
    @rule()
    def prompt_asking_permission(self) -> None:
        front = self.app.front_window
        assert front is not None
        front.focus_input()
        front.input.set_edit_text("go")
        self.press("enter")

    @precondition(lambda self: self.free and self.app.front_window is not None)
    @rule()
    def long_permission_request(self) -> None:
        front = self.app.front_window
        assert front is not None
        prompt = front.session.permission_prompt
        assert isinstance(prompt, ModalPermissionPrompt)
        prompt.choose(long_request())

    @precondition(lambda self: self.app.front_window is not None)
    @rule(lines=st.integers(1, 80), width=st.integers(1, 300))
    def agent_writes(self, lines: int, width: int) -> None:
        front = self.app.front_window
        assert front is not None
        text = "\n".join(f"{n} " + "w" * width for n in range(lines))
        front.session.conversation.apply(
            schema.AgentMessageChunk(content=schema.TextContentBlock(text=text))
        )

    @precondition(lambda self: self.app.front_window is not None)
    @rule(used=st.integers(0, 10**12))
    def usage(self, used: int) -> None:
        front = self.app.front_window
        assert front is not None
        front.session.conversation.apply(schema.UsageUpdate(used=used, size=10**12))

    @precondition(lambda self: self.free and self.app.front_window is not None)
    @rule(text=st.sampled_from(["/", "/he", "@", "@file", "see @fi", "@nothing-matches"]))
    def open_a_list(self, text: str) -> None:
        front = self.app.front_window
        assert front is not None
        front.focus_input()
        front.input.set_edit_text("")
        for character in text:
            self.press(character)

    @precondition(lambda self: self.free and self.app.front_window is not None)
    @rule(lines=st.integers(1, 60))
    def long_input(self, lines: int) -> None:
        front = self.app.front_window
        assert front is not None
        front.focus_input()
        front.input.set_edit_text("\n".join("typed " * 20 for _ in range(lines)))

    @precondition(lambda self: self.free)
    @rule()
    def agent_status(self) -> None:
        self.app.show_status()

    @rule(index=st.sampled_from([0, 1]))
    def open_menu(self, index: int) -> None:
        if not self.app.modals:
            self.app.open_menu(index)

    @rule(key=KEYS)
    def press_key(self, key: str) -> None:
        self.press(key)

    @rule(column=st.integers(0, 199), row=st.integers(0, 69), button=st.sampled_from([1, 4, 5]))
    def click(self, column: int, row: int, button: int) -> None:
        columns, rows = self.size
        self.app.root.mouse_event(
            self.size, "mouse press", button, column % columns, row % rows, True
        )
        self.app.root.mouse_event(self.size, "mouse release", 0, column % columns, row % rows, True)
        self.pump()

    @rule(text=st.text(st.sampled_from("ab é\n\t@/"), max_size=40))
    def paste(self, text: str) -> None:
        named = {"\n": "enter", "\t": "tab"}
        self.press("begin paste", *(named.get(c, c) for c in text), "end paste")

    @rule(size=SIZES)
    def resize(self, size: tuple[int, int]) -> None:
        self.size = size

    @invariant()
    def renders_at_the_screen_size(self) -> None:
        canvas = self.app.root.render(self.size, focus=True)
        assert (canvas.cols(), canvas.rows()) == self.size
        cursor = canvas.cursor
        if cursor is not None:
            assert 0 <= cursor[0] < self.size[0] and 0 <= cursor[1] < self.size[1]


# The @ list asks git for the project's files: a child process.
TestWholeApp = pytest.mark.process(WholeApp.TestCase)
TestWholeApp.settings = settings(
    max_examples=examples(1),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_below_the_minimum_a_notice_is_drawn_and_keys_still_work() -> None:
    """Under 20x6 the screen says how large it must be; a key still reaches the UI."""
    with tempfile.TemporaryDirectory() as directory:
        app = App(directory, Clock(), environ={"ACPKIT_DIR": str(Path(directory) / "u")})
        for columns in range(1, MIN_COLUMNS + 3):
            for rows in range(1, MIN_ROWS + 2):
                canvas = app.root.render((columns, rows), focus=True)
                assert (canvas.cols(), canvas.rows()) == (columns, rows)
        text = "\n".join(urwid.testing.render_text(app.root, (19, 5)))
        assert "20x6" in text.replace("\n", "")
        app.root.keypress((10, 3), "meta a")
        assert app.dropdown is not None


def resize(terminal: Terminal, columns: int, rows: int) -> None:
    """Resize the pseudo-terminal (the UI gets SIGWINCH) and the screen model with it."""
    terminal.screen.resize(rows, columns)
    terminal.child.setwinsize(rows, columns)


@pytest.mark.process
def test_in_a_terminal_resizing_with_a_permission_request_open(tmp_path: Path) -> None:
    """A real terminal narrower than the modal and shorter than the request, resized down to
    20x6 and below and back while the request is open: the UI keeps drawing it, then
    Esc rejects once and Ctrl-Q quits with status 0."""
    (tmp_path / ".acpkit").mkdir()
    (tmp_path / ".acpkit" / "acp.toml").write_text(
        f'[[agent]]\nname = "Tiny"\ncommand = {sys.executable!r}\n'.replace("'", '"')
        + f"args = [{str(TINY_AGENT)!r}]\n".replace("'", '"'),
        encoding="utf-8",
    )
    terminal = Terminal(tmp_path)
    try:
        terminal.wait_for(" Agent  Window ")
        resize(terminal, 50, 12)
        terminal.send("\x1ba")
        terminal.wait_for("Agent status")
        terminal.send("\r")
        terminal.wait_for("[x] 1 Tiny")
        terminal.wait(lambda s: "starting" not in s, "the agent to be ready")
        terminal.send("go\r")
        terminal.wait_for("Tiny asks permission")
        terminal.wait_for("< Allow")
        for columns, rows in [(30, 9), (20, 6), (24, 7), (12, 4), (70, 10), (100, 30)]:
            resize(terminal, columns, rows)
            if columns >= 20 and rows >= 6:
                terminal.wait_for("Reject")
            else:
                terminal.wait(lambda s: "Enlarge" in s.replace("\n", ""), "the size notice")
        terminal.wait_for("Tiny asks permission")
        terminal.send("\x1b")
        terminal.wait_for("permission refused")
        terminal.send("\x11")
        assert terminal.wait_exit() == 0
    finally:
        terminal.close()
