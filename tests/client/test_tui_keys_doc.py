"""The keys reference page (docs/reference/client-keys.md) stays true to the terminal UI.

The page's tables are parsed. Every row has a check here that presses its keys on the real
widgets (an App on a Clock, agent windows on the in-memory tiny agent) and asserts the
effect; the check also names a phrase its row's effect must contain. A row without a
check, a check without a row, or a key the code compares against that no table of its
context mentions, fails.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from acpkit import schema
from acpkit_client.session import AgentWindow
from acpkit_client.tui.agent_window import AgentWindowWidget
from acpkit_client.tui.completion_list import MAX_ROWS
from acpkit_client.tui.conversation_view import WHEEL_ROWS
from acpkit_client.tui.copy import osc52_sequence
from acpkit_client.tui.menu import MenuItem
from acpkit_client.tui.permission_modal import ModalPermissionPrompt, PermissionModal
from acpkit_client.tui.status_window import TextWindow
from tests.client.test_tui_window import ENTRY, SIZE, Harness

ROOT = Path(__file__).resolve().parent.parent.parent
PAGE = ROOT / "docs" / "reference" / "client-keys.md"
TUI = ROOT / "acpkit_client" / "tui"

#: The page's key names, as urwid names the keys.
KEY_NAMES = {
    "Enter": "enter",
    "Alt-Enter": "meta enter",
    "Space": " ",
    "Tab": "tab",
    "Esc": "esc",
    "Backspace": "backspace",
    "Del": "delete",
    "Home": "home",
    "End": "end",
    "PgUp": "page up",
    "PgDn": "page down",
    "↑": "up",
    "↓": "down",
    "←": "left",
    "→": "right",
    "Ctrl-C": "ctrl c",
    "Ctrl-Ins": "ctrl insert",
    "Shift-Ins": "shift insert",
    "Ctrl-W": "ctrl w",
    "Ctrl-Q": "ctrl q",
    "F5": "f5",
    "F6": "f6",
    "F10": "f10",
    # A paste is framed by these two (urwid's names): they are not keys one presses.
    "begin paste": "begin paste",
    "end paste": "end paste",
}


def urwid_key(name: str) -> str:
    """The urwid key for one of the page's key names (``Alt-A``, ``Shift-↑``, ``F6``...)."""
    if name in KEY_NAMES:
        return KEY_NAMES[name]
    if name.startswith("Alt-") and len(name) == 5:
        return "meta " + name[4:].lower()
    if name.startswith("Shift-") and name[6:] in KEY_NAMES:
        return "shift " + KEY_NAMES[name[6:]]
    if len(name) == 1 and name.isprintable():
        return name
    raise AssertionError(f"the page names a key the test does not know: {name!r}")


def key_names(cell: str) -> list[str]:
    """The key names in a table cell: its backquoted spans, with ``A-1`` … ``A-9`` expanded."""
    names: list[str] = []
    for match in re.finditer(r"`([^`]+)`(\s*…\s*`([^`]+)`)?", cell):
        first, last = match.group(1), match.group(3)
        if last is None:
            names.append(first)
            continue
        prefix = first[:-1]
        assert last.startswith(prefix), cell
        names.extend(f"{prefix}{n}" for n in range(int(first[-1]), int(last[-1]) + 1))
    return names


def page_tables(text: str) -> dict[str, list[list[str]]]:
    """Each ``##`` section's first table, as rows of cells (the header row left out)."""
    tables: dict[str, list[list[str]]] = {}
    for section in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        title, _, body = section.partition("\n")
        rows = []
        for line in body.splitlines():
            if line.startswith("|"):
                rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
            elif rows:
                break
        if rows:
            assert set(rows[1][0]) <= {"-", " "}, f"{title}: no header separator"
            tables[title.strip()] = rows[2:]
    return tables


TABLES = page_tables(PAGE.read_text(encoding="utf-8"))


# -- helpers -----------------------------------------------------------------------------------


def with_text(ui: Harness, text: str) -> AgentWindowWidget:
    """A window whose conversation holds one agent message ``text``."""
    window = ui.open()
    assert ui.session is not None
    ui.session.conversation.apply(
        schema.AgentMessageChunk(content=schema.TextContentBlock(text=text))
    )
    ui.screen()
    return window


def more_windows(ui: Harness, count: int) -> list[AgentWindowWidget]:
    """``count`` more windows on sessions that are not started (enough for window keys)."""
    return [
        ui.app.attach_window(AgentWindow(ENTRY, str(ui.root), environ={})) for _ in range(count)
    ]


def menu_items(ui: Harness, key: str) -> list[MenuItem]:
    """Open a menu with ``key``; its entries as drawn."""
    ui.press(key)
    assert ui.app.dropdown is not None
    return ui.app.dropdown.items


def choose(ui: Harness, key: str, label: str) -> None:
    """Open a menu with ``key`` and choose ``label`` with the arrows and Enter."""
    menu_items(ui, key)
    dropdown = ui.app.dropdown
    assert dropdown is not None
    for _ in range(len(dropdown.items)):
        if dropdown.items[dropdown.listbox.focus_position].label == label:
            break
        ui.press("down")
    assert dropdown.items[dropdown.listbox.focus_position].label == label
    ui.press("enter")


def item(items: list[MenuItem], label: str) -> MenuItem:
    """The entry called ``label``."""
    return next(entry for entry in items if entry.label == label)


def permission_request(with_reject: bool = True) -> schema.RequestPermissionRequest:
    """A request with an allow option (``ok``) and, optionally, a reject_once one (``no``)."""
    options = [
        schema.PermissionOption(
            option_id="ok", name="Allow", kind=schema.PermissionOptionKind.ALLOW_ONCE
        )
    ]
    if with_reject:
        options.append(
            schema.PermissionOption(
                option_id="no", name="Reject", kind=schema.PermissionOptionKind.REJECT_ONCE
            )
        )
    return schema.RequestPermissionRequest(
        session_id="s1",
        tool_call=schema.ToolCallUpdate(tool_call_id="x", title="edit a.txt"),
        options=options,
    )


def ask(ui: Harness, with_reject: bool = True) -> list[str | None]:
    """Open a permission modal on the front window; the answers it gives."""
    assert ui.session is not None
    prompt = ui.session.permission_prompt
    assert isinstance(prompt, ModalPermissionPrompt)
    answers: list[str | None] = []
    prompt.choose(permission_request(with_reject)).addCallback(answers.append)
    assert isinstance(ui.app.modals[-1], PermissionModal)
    return answers


def slow(ui: Harness) -> Harness:
    """A harness like ``ui`` whose agent keeps its turn running until cancelled."""
    (ui.root / "slow").mkdir()
    return Harness(ui.root / "slow", mode="slow")


# -- the Agent menu ------------------------------------------------------------------------------


def agent_menu_per_agent(ui: Harness) -> None:
    """Each configured agent is an active entry; choosing it starts that agent."""
    started: list[str] = []
    ui.app.start_agent = lambda entry: started.append(entry.name)  # type: ignore[assignment,method-assign,return-value]
    items = menu_items(ui, "meta a")
    names = [entry.name for entry in ui.app.config.agents]
    assert [entry.label for entry in items[: len(names)]] == names
    assert all(entry.enabled for entry in items[: len(names)])
    ui.press("esc")
    choose(ui, "meta a", names[0])
    assert started == [names[0]]


def agent_menu_create(ui: Harness) -> None:
    """Create agents file is active without a file, writes and shows it, then is inactive."""
    assert item(menu_items(ui, "meta a"), "Create agents file").enabled
    ui.press("esc")
    choose(ui, "meta a", "Create agents file")
    assert (ui.root / ".acpkit" / "acp.toml").exists()
    assert ui.app.text_window is not None and "[[agent]]" in ui.screen()
    ui.press("esc")
    assert not item(menu_items(ui, "meta a"), "Create agents file").enabled


def agent_menu_cancel(ui: Harness) -> None:
    """Cancel turn (shown with Esc) is inactive when idle and cancels a running turn."""
    harness = slow(ui)
    harness.open()
    cancel = item(menu_items(harness, "meta a"), "Cancel turn")
    assert not cancel.enabled and cancel.shortcut == "Esc"
    harness.press("esc")
    harness.type("wait")
    harness.press("enter")
    assert harness.session is not None and harness.session.turn_running
    choose(harness, "meta a", "Cancel turn")
    assert not harness.session.turn_running
    assert "turn ended: cancelled" in harness.screen()


def agent_menu_status(ui: Harness) -> None:
    """Agent status is always active and opens the report."""
    assert item(menu_items(ui, "meta a"), "Agent status").enabled
    ui.press("esc")
    choose(ui, "meta a", "Agent status")
    assert ui.app.text_window is not None and ui.app.text_window.title == "Agent status"
    assert "No agents file found" in ui.screen()


# -- the Window menu -----------------------------------------------------------------------------


def window_menu_tile(ui: Harness) -> None:
    """Tile needs a window, tiles, and is then offered as Maximise, which maximises."""
    assert not item(menu_items(ui, "meta w"), "Tile").enabled
    ui.press("esc")
    ui.open()
    assert item(menu_items(ui, "meta w"), "Tile").enabled
    ui.press("esc")
    choose(ui, "meta w", "Tile")
    assert ui.app.tiled
    assert item(menu_items(ui, "meta w"), "Maximise").enabled
    ui.press("esc")
    choose(ui, "meta w", "Maximise")
    assert not ui.app.tiled


def window_menu_next(ui: Harness) -> None:
    """Next window needs a window and brings the next one to the front."""
    assert not item(menu_items(ui, "meta w"), "Next window").enabled
    ui.press("esc")
    first = ui.open()
    more_windows(ui, 1)
    choose(ui, "meta w", "Next window")
    assert ui.app.front_window is first


def window_menu_each(ui: Harness) -> None:
    """The first nine windows are listed with Alt-1 ... Alt-9; choosing one fronts it."""
    windows = [ui.open(), *more_windows(ui, 10)]
    items = menu_items(ui, "meta w")
    per_window = [entry for entry in items if entry.label == windows[0].title]
    assert [entry.shortcut for entry in per_window] == [f"Alt-{n}" for n in range(1, 10)]
    assert all(entry.enabled for entry in per_window)
    ui.press("esc")
    per_window[1].action()
    assert ui.app.front_window is windows[1]


def window_menu_close(ui: Harness) -> None:
    """Close window needs a window and closes the front one, stopping its agent."""
    assert not item(menu_items(ui, "meta w"), "Close window").enabled
    ui.press("esc")
    ui.open()
    choose(ui, "meta w", "Close window")
    assert ui.app.windows == []
    assert "tiny stopped" in ui.screen()


def window_menu_quit(ui: Harness) -> None:
    """Quit is always active and stops every agent."""
    assert item(menu_items(ui, "meta w"), "Quit").enabled
    ui.press("esc")
    ui.open()
    choose(ui, "meta w", "Quit")
    assert ui.app.stopping is not None and ui.app.windows == []


# -- anywhere ------------------------------------------------------------------------------------


def any_agent_menu(ui: Harness) -> None:
    """Alt-A and F10 open the Agent menu."""
    for key in ("meta a", "f10"):
        assert any(entry.label == "Agent status" for entry in menu_items(ui, key))
        assert ui.app.menubar.open_index == 0
        ui.press("esc")


def any_window_menu(ui: Harness) -> None:
    """Alt-W opens the Window menu."""
    assert any(entry.label == "Quit" for entry in menu_items(ui, "meta w"))
    assert ui.app.menubar.open_index == 1


def any_next(ui: Harness) -> None:
    """F6 cycles through the windows."""
    first = ui.open()
    (second,) = more_windows(ui, 1)
    ui.press("f6")
    assert ui.app.front_window is first
    ui.press("f6")
    assert ui.app.front_window is second


def any_jump(ui: Harness) -> None:
    """Alt-n brings window n to the front."""
    windows = [ui.open(), *more_windows(ui, 9)]
    for number in range(9, 0, -1):
        ui.press(f"meta {number}")
        assert ui.app.front_window is windows[number - 1]
        assert f"[x] {number} tiny" in ui.screen()


def any_tile(ui: Harness) -> None:
    """F5 tiles the windows, and maximises the front one again."""
    ui.open()
    more_windows(ui, 1)
    ui.press("f5")
    assert ui.app.tiled and "[x] 1 tiny" in ui.screen() and "[x] 2 tiny" in ui.screen()
    ui.press("f5")
    assert not ui.app.tiled and "[x] 1 tiny" not in ui.screen()


def any_close(ui: Harness) -> None:
    """Ctrl-W closes the front window and says its agent stopped."""
    first = ui.open()
    more_windows(ui, 1)
    ui.press("ctrl w")
    assert ui.app.windows == [first]
    assert "tiny stopped" in ui.screen()


def any_quit(ui: Harness) -> None:
    """Ctrl-Q quits, closing every window."""
    ui.open()
    ui.press("ctrl q")
    assert ui.app.stopping is not None and ui.app.windows == []


# -- with a menu open ----------------------------------------------------------------------------


def menu_move(ui: Harness) -> None:
    """The arrows move between the active entries, skipping the inactive ones."""
    items = menu_items(ui, "meta a")
    dropdown = ui.app.dropdown
    assert dropdown is not None
    active = [index for index, entry in enumerate(items) if entry.enabled]
    assert len(active) < len(items), "the fixture has an inactive entry to skip"
    assert dropdown.listbox.focus_position == active[0]
    for index in active[1:]:
        ui.press("down")
        assert dropdown.listbox.focus_position == index
    for index in reversed(active[:-1]):
        ui.press("up")
        assert dropdown.listbox.focus_position == index


def menu_choose(ui: Harness) -> None:
    """Enter and Space choose the highlighted entry."""
    for key in ("enter", " "):
        items = menu_items(ui, "meta a")
        for _ in range(items.index(item(items, "Agent status"))):
            ui.press("down")
        ui.press(key)
        assert ui.app.dropdown is None and ui.app.text_window is not None
        assert ui.app.text_window.title == "Agent status"
        ui.press("esc")


def menu_left_right(ui: Harness) -> None:
    """The left and right arrows open the neighbouring menu."""
    menu_items(ui, "meta a")
    ui.press("right")
    assert ui.app.menubar.open_index == 1
    ui.press("left")
    assert ui.app.menubar.open_index == 0
    ui.press("left")
    assert ui.app.menubar.open_index == 1


def menu_switch(ui: Harness) -> None:
    """A menu's key opens it from the other one, and closes it when it is open."""
    menu_items(ui, "meta a")
    ui.press("meta w")
    assert ui.app.menubar.open_index == 1
    ui.press("meta a")
    assert ui.app.menubar.open_index == 0
    ui.press("meta a")
    assert ui.app.dropdown is None


def menu_close(ui: Harness) -> None:
    """Esc and F10 close the menu."""
    for key in ("esc", "f10"):
        menu_items(ui, "meta w")
        ui.press(key)
        assert ui.app.dropdown is None and ui.app.menubar.open_index is None


def menu_other(ui: Harness) -> None:
    """Other keys, Ctrl-Q included, do nothing while a menu is open."""
    window = ui.open()
    menu_items(ui, "meta a")
    ui.press("ctrl q", "x", "f6", "ctrl w")
    assert ui.app.dropdown is not None
    assert ui.app.stopping is None and ui.app.windows == [window]
    assert ui.input_text == ""


# -- with the Agent status window open -----------------------------------------------------------


def status_scroll(ui: Harness) -> None:
    """The arrows and the page keys scroll the status window."""
    ui.app.open_text_window(TextWindow("Agent status", [f"line {n}" for n in range(100)]))
    assert ui.app.text_window is not None
    listbox = ui.app.text_window.listbox
    ui.press("down", "down")
    assert listbox.focus_position == 2
    ui.press("page down")
    assert listbox.focus_position > 2 + 5
    ui.press("page up")
    assert listbox.focus_position == 2
    ui.press("up")
    assert listbox.focus_position == 1


def status_close(ui: Harness) -> None:
    """Esc and Ctrl-W close the status window and leave the agent window open."""
    ui.open()
    for key in ("esc", "ctrl w"):
        ui.app.show_status()
        assert "Agent status" in ui.screen()
        ui.press(key)
        assert ui.app.text_window is None and "Agent status" not in ui.screen()
        assert len(ui.app.windows) == 1


def status_ignored(ui: Harness) -> None:
    """F6 and F5 do nothing while the status window is open."""
    ui.open()
    more_windows(ui, 1)
    ui.app.show_status()
    ui.press("f6", "f5")
    assert ui.app.front == 1 and not ui.app.tiled and ui.app.text_window is not None


# -- keys in an agent window ---------------------------------------------------------------------


def window_enter(ui: Harness) -> None:
    """Enter sends the input from the input area only, and never an empty one."""
    window = ui.open()
    ui.press("enter")
    ui.type("   ")
    ui.press("enter")
    ui.type("hi")
    ui.press("tab", "enter", "tab")
    assert ui.agents[0].prompts == [] and ui.input_text == "   hi"
    assert window.input_focused
    ui.press("enter")
    assert ui.input_text == ""
    assert [block.text for block in ui.agents[0].prompts[0].prompt] == ["   hi"]  # type: ignore[union-attr]


def window_alt_enter(ui: Harness) -> None:
    """Alt-Enter inserts a line break."""
    ui.open()
    ui.type("a")
    ui.press("meta enter")
    ui.type("b")
    assert ui.input_text == "a\nb"


def window_tab(ui: Harness) -> None:
    """Tab moves the focus between the conversation and the input area."""
    window = ui.open()
    assert window.input_focused
    ui.press("tab")
    assert not window.input_focused
    ui.press("tab")
    assert window.input_focused


def window_copy(ui: Harness) -> None:
    """Ctrl-C and Ctrl-Ins copy the cursor's region, or the selection, to both clipboards."""
    window = with_text(ui, "Try:\n```bash\nmake\nmake test\n```\nok")
    for key in ("ctrl c", "ctrl insert"):
        ui.app.clipboards.text = ""
        ui.press("tab", "up", "up", key)
        assert ui.app.clipboards.text == "make\nmake test\n"
        assert ui.written[-1] == osc52_sequence("make\nmake test\n")
        assert "2 lines copied" in ui.screen()
        ui.press("shift down", key)
        assert ui.app.clipboards.text == "make test\n```\n"
        ui.press("esc", "end", "tab")
        assert window.input_focused


def window_paste(ui: Harness) -> None:
    """Shift-Ins pastes the client's clipboard at the caret."""
    ui.open()
    ui.type("say ")
    ui.app.clipboards.text = "pasted"
    ui.press("shift insert")
    assert ui.input_text == "say pasted"


def window_esc(ui: Harness) -> None:
    """Esc drops the selection first, then cancels the running turn."""
    harness = slow(ui)
    window = harness.open()
    harness.type("wait")
    harness.press("enter")
    assert harness.session is not None and harness.session.turn_running
    harness.press("tab", "shift up")
    assert window.view.selection is not None
    harness.press("esc")
    assert window.view.selection is None and harness.session.turn_running
    harness.press("esc")
    assert not harness.session.turn_running
    assert "turn ended: cancelled" in harness.screen()


def window_close(ui: Harness) -> None:
    """Ctrl-W closes the agent window."""
    ui.open()
    ui.press("ctrl w")
    assert ui.app.windows == [] and "tiny stopped" in ui.screen()


# -- with the input area in front ----------------------------------------------------------------


def input_arrows(ui: Harness) -> None:
    """The arrows move the caret; up on the first line moves into the conversation."""
    window = with_text(ui, "above")
    ui.type("ab")
    ui.press("left")
    assert window.input.edit_pos == 1
    ui.press("right")
    assert window.input.edit_pos == 2
    ui.press("meta enter")
    ui.type("cd")
    ui.press("up")
    assert window.input.edit_pos == 2 and window.input_focused
    ui.press("down")
    assert window.input.edit_pos == 5
    ui.press("up", "up")
    assert not window.input_focused


def input_home_end(ui: Harness) -> None:
    """Home and End go to the start and end of the caret's line."""
    window = ui.open()
    ui.type("ab")
    ui.press("meta enter")
    ui.type("cd")
    ui.press("home")
    assert window.input.edit_pos == 3
    ui.press("end")
    assert window.input.edit_pos == 5


def input_edit(ui: Harness) -> None:
    """Backspace and Del edit; backspace at a line start joins the lines."""
    ui.open()
    ui.type("ab")
    ui.press("meta enter")
    ui.type("cd")
    ui.press("home", "backspace")
    assert ui.input_text == "abcd"
    ui.press("delete")
    assert ui.input_text == "abd"
    ui.press("backspace")
    assert ui.input_text == "ad"


def input_slash(ui: Harness) -> None:
    """A first-character slash opens the commands; elsewhere or without commands it is text."""
    window = ui.open()
    ui.type("/")
    assert window.list_kind == "/" and "Search the web" in ui.screen()
    ui.press("backspace")
    ui.type("x /")
    assert not window.list_open
    assert ui.session is not None
    ui.session.conversation.commands = []
    ui.press("home", "delete", "delete", "delete")
    ui.type("/")
    assert not window.list_open and ui.input_text == "/"


def input_at(ui: Harness) -> None:
    """@ opens the project's files, narrowed by what follows."""
    window = ui.open()
    ui.type("see @")
    assert window.list_kind == "@"
    assert "notes.txt" in ui.screen() and "docs/guide.md" in ui.screen()
    ui.type("gu")
    assert "docs/guide.md" in ui.screen() and "notes.txt" not in ui.screen()


# -- with the conversation in front --------------------------------------------------------------


def lines_window(ui: Harness, count: int = 60) -> AgentWindowWidget:
    """A window with ``count`` rows of agent text and the conversation in front."""
    window = with_text(ui, "\n".join(f"row {n}" for n in range(count)))
    ui.press("tab")
    assert not window.input_focused
    return window


def conversation_up_down(ui: Harness) -> None:
    """Up and down move the cursor a line; back on the last line the view follows."""
    window = lines_window(ui)
    last = window.view.cursor
    ui.press("up")
    assert window.view.cursor == last - 1 and not window.view.follow
    ui.press("down")
    assert window.view.cursor == last and window.view.follow


def conversation_pages(ui: Harness) -> None:
    """PgUp and PgDn move the cursor a screen (its height less one row)."""
    window = lines_window(ui)
    last = window.view.cursor
    ui.press("page up")
    height = window.view._height
    assert last - window.view.cursor == height - 1
    ui.press("page down")
    assert window.view.cursor == last


def conversation_home_end(ui: Harness) -> None:
    """Home and End move the cursor to the first and last lines."""
    window = lines_window(ui)
    last = window.view.cursor
    ui.press("home")
    assert window.view.cursor == 0 and "you" not in ui.screen().split("\n")[2]
    ui.press("end")
    assert window.view.cursor == last


def conversation_shift(ui: Harness) -> None:
    """Shift with each move extends a whole-line selection; a plain move drops it."""
    window = lines_window(ui)
    last = window.view.cursor
    for move in ("up", "page up", "home"):
        ui.press("end", f"shift {move}")
        selection = window.view.selection
        assert selection is not None and selection[-1] == last
        assert selection[0] == window.view.cursor < last
    ui.press("home", "shift down", "shift page down")
    selection = window.view.selection
    assert selection is not None and selection[0] == 0 and len(selection) > 2
    ui.press("shift end")
    assert window.view.selection == range(0, last + 1)
    ui.press("up")
    assert window.view.selection is None


def conversation_drag(ui: Harness) -> None:
    """Dragging with button 1 selects the lines dragged over."""
    window = lines_window(ui, 5)
    ui.press("home")
    root = ui.app.root
    top = next(row for row, text in enumerate(ui.screen().split("\n")) if "row 1" in text)
    root.mouse_event(SIZE, "mouse press", 1, 4, top, True)
    root.mouse_event(SIZE, "mouse drag", 1, 4, top + 2, True)
    root.mouse_event(SIZE, "mouse release", 0, 4, top + 2, True)
    selection = window.view.selection
    assert selection is not None
    assert [window.view.lines[index].text for index in selection] == ["row 1", "row 2", "row 3"]


def conversation_wheel(ui: Harness) -> None:
    """The wheel scrolls three rows without moving the cursor or the focus."""
    window = with_text(ui, "\n".join(f"row {n}" for n in range(60)))
    for focused in (True, False):
        top, cursor = window.view.top, window.view.cursor
        ui.app.root.mouse_event(SIZE, "mouse press", 4, 5, 5, True)
        assert window.view.top == top - WHEEL_ROWS and window.view.cursor == cursor
        ui.app.root.mouse_event(SIZE, "mouse press", 5, 5, 5, True)
        assert window.view.top == top
        assert window.input_focused is focused
        ui.press("tab")


def conversation_typing(ui: Harness) -> None:
    """A character typed with the conversation in front goes to the input, now in front."""
    window = with_text(ui, "hello")
    ui.press("tab")
    assert not window.input_focused
    ui.press("a", " ", "1")
    assert window.input_focused
    assert window.input.edit_text == "a 1"


# -- with a list open ----------------------------------------------------------------------------


def list_up_down(ui: Harness) -> None:
    """Up and down move the highlight and keep the input area in front."""
    window = ui.open()
    ui.type("@")
    assert window.list.highlight == 0
    ui.press("down")
    assert window.list.highlight == 1 and window.input_focused
    ui.press("up")
    assert window.list.highlight == 0 and window.input_focused


def list_pages(ui: Harness) -> None:
    """PgUp and PgDn move the highlight by the rows shown."""
    for number in range(20):
        (ui.root / f"file{number:02}.txt").write_text("x", encoding="utf-8")
    window = ui.open()
    ui.type("@")
    ui.press("page down")
    assert window.list.highlight == MAX_ROWS
    ui.press("page up")
    assert window.list.highlight == 0


def list_tab(ui: Harness) -> None:
    """Tab takes the highlighted entry; with no match it does nothing."""
    window = ui.open()
    ui.type("/w")
    ui.press("tab")
    assert ui.input_text == "/web " and window.input_focused
    ui.type("x @zzz")
    assert window.list_open and window.list.current() is None
    ui.press("tab")
    assert window.input_focused and ui.input_text == "/web x @zzz"


def list_enter(ui: Harness) -> None:
    """Enter takes the entry, and sends on a complete command."""
    ui.open()
    ui.type("/he")
    ui.press("enter")
    assert ui.input_text == "/help"
    ui.press("enter")
    assert ui.input_text == ""
    assert ui.agents[0].prompts[0].prompt[0].text == "/help"  # type: ignore[union-attr]


def list_esc(ui: Harness) -> None:
    """Esc closes the list until the text changes."""
    harness = slow(ui)
    window = harness.open()
    harness.type("/")
    harness.press("esc")
    assert not window.list_open and "Search the web" not in harness.screen()
    harness.press("left", "right")
    assert not window.list_open
    harness.type("w")
    assert window.list_open


# -- in a permission request ---------------------------------------------------------------------


def modal_choose(ui: Harness) -> None:
    """Enter and Space answer with the focused option."""
    ui.open()
    for key in ("enter", " "):
        answers = ask(ui)
        ui.press(key)
        assert answers == ["ok"] and not ui.app.modals


def modal_left_right(ui: Harness) -> None:
    """The left and right arrows move between the options."""
    ui.open()
    answers = ask(ui)
    ui.press("right", "enter")
    assert answers == ["no"]
    answers = ask(ui)
    ui.press("right", "left", "enter")
    assert answers == ["ok"]


def modal_kept(ui: Harness) -> None:
    """Keys that do not answer stay in the modal: nothing behind it moves."""
    window = ui.open()
    answers = ask(ui)
    ui.press("up", "down", "tab", "ctrl q", "f6", "meta a", "x")
    assert ui.app.modals and answers == []
    assert window.input_focused and ui.input_text == ""
    assert ui.app.stopping is None and ui.app.dropdown is None
    ui.press("enter")
    assert answers == ["ok"]


def modal_scroll(ui: Harness) -> None:
    """A request taller than the screen: the arrows and pages scroll its lines, the
    options stay in view and nothing is answered."""
    ui.open()
    assert ui.session is not None
    prompt = ui.session.permission_prompt
    assert isinstance(prompt, ModalPermissionPrompt)
    steps = "\n".join(f"step {n}" for n in range(40))
    request = schema.RequestPermissionRequest(
        session_id="s1",
        tool_call=schema.ToolCallUpdate(
            tool_call_id="x",
            title="edit a.txt",
            raw_input={"command": steps},
            content=[schema.FileEditToolCallContent(path="a.txt", old_text=steps, new_text="")],
        ),
        options=permission_request().options,
    )
    answers: list[str | None] = []
    prompt.choose(request).addCallback(answers.append)
    assert "tool: edit a.txt" in ui.screen()
    ui.press("down")
    assert "tool: edit a.txt" not in ui.screen() and "< Reject >" in ui.screen()
    ui.press("up")
    assert "tool: edit a.txt" in ui.screen()
    ui.press("page down")
    assert "tool: edit a.txt" not in ui.screen() and "< Reject >" in ui.screen()
    ui.press("page up")
    assert "tool: edit a.txt" in ui.screen()
    assert ui.app.modals and answers == []


def any_paste(ui: Harness) -> None:
    """A paste goes into the input area with its line break; nothing is sent."""
    ui.open()
    ui.press("begin paste", "a", "enter", "b", "end paste")
    assert ui.input_text == "a\nb" and not ui.agents[0].prompts


def modal_esc(ui: Harness) -> None:
    """Esc answers reject_once, or no answer when the agent offers none."""
    ui.open()
    answers = ask(ui)
    ui.press("esc")
    assert answers == ["no"] and not ui.app.modals
    answers = ask(ui, with_reject=False)
    ui.press("esc")
    assert answers == [None] and not ui.app.modals


Check = tuple[str, Callable[[Harness], None]]

#: (section, first cell) -> (a phrase of the row's effect, the check).
CHECKS: dict[tuple[str, str], Check] = {
    ("The Agent menu", "*one entry per agent, by its name*"): (
        "Start that agent",
        agent_menu_per_agent,
    ),
    ("The Agent menu", "**Create agents file**"): ("starter file", agent_menu_create),
    ("The Agent menu", "**Cancel turn**"): ("`session/cancel`", agent_menu_cancel),
    ("The Agent menu", "**Agent status**"): ("what failed", agent_menu_status),
    ("The Window menu", "**Tile** / **Maximise**"): ("Tile the windows", window_menu_tile),
    ("The Window menu", "**Next window**"): ("next window", window_menu_next),
    ("The Window menu", "*one entry per window, by its title (the first nine)*"): (
        "that window",
        window_menu_each,
    ),
    ("The Window menu", "**Close window**"): ("stop its agent", window_menu_close),
    ("The Window menu", "**Quit**"): ("Stop every agent", window_menu_quit),
    ("Anywhere", "`Alt-A`, `F10`"): ("Agent menu", any_agent_menu),
    ("Anywhere", "`Alt-W`"): ("Window menu", any_window_menu),
    ("Anywhere", "`F6`"): ("next window", any_next),
    ("Anywhere", "`Alt-1` … `Alt-9`"): ("that window", any_jump),
    ("Anywhere", "`F5`"): ("Tile the windows", any_tile),
    ("Anywhere", "`Ctrl-W`"): ("Close the front window", any_close),
    ("Anywhere", "`Ctrl-Q`"): ("Quit", any_quit),
    (
        "Anywhere",
        "Pasted text (the terminal sends it between `begin paste` and `end paste`)",
    ): ("nothing is sent", any_paste),
    ("With a menu open", "`↑` `↓`"): ("active entries", menu_move),
    ("With a menu open", "`Enter`, `Space`"): ("Choose", menu_choose),
    ("With a menu open", "`←` `→`"): ("menu on the left or on the right", menu_left_right),
    ("With a menu open", "`Alt-A`, `Alt-W`"): ("own key closes it", menu_switch),
    ("With a menu open", "`Esc`, `F10`"): ("Close the menu", menu_close),
    ("With a menu open", "any other key"): ("Ignored", menu_other),
    ("With the Agent status window open", "`↑` `↓` `PgUp` `PgDn`"): ("Scroll", status_scroll),
    ("With the Agent status window open", "`Esc`, `Ctrl-W`"): ("Close the status", status_close),
    ("With the Agent status window open", "`F6`, `F5`"): ("Ignored", status_ignored),
    ("Keys in an agent window", "`Enter`"): ("Send the input area", window_enter),
    ("Keys in an agent window", "`Alt-Enter`"): ("line break", window_alt_enter),
    ("Keys in an agent window", "`Tab`"): ("Move the focus", window_tab),
    ("Keys in an agent window", "`Ctrl-C`, `Ctrl-Ins`"): ("Copy the selection", window_copy),
    ("Keys in an agent window", "`Shift-Ins`"): ("Paste", window_paste),
    ("Keys in an agent window", "`Esc`"): ("cancel the running turn", window_esc),
    ("Keys in an agent window", "`Ctrl-W`"): ("Close the window", window_close),
    ("With the input area in front", "`←` `→` `↑` `↓`"): ("into the conversation", input_arrows),
    ("With the input area in front", "`Home` `End`"): ("its line", input_home_end),
    ("With the input area in front", "`Backspace` `Del`"): ("joins it", input_edit),
    ("With the input area in front", "`/` as the first character"): (
        "agent's commands",
        input_slash,
    ),
    ("With the input area in front", "`@`"): ("project's files", input_at),
    ("With the conversation in front", "`↑` `↓`"): ("one line", conversation_up_down),
    ("With the conversation in front", "`PgUp` `PgDn`"): ("one screen", conversation_pages),
    ("With the conversation in front", "`Home` `End`"): ("its end", conversation_home_end),
    (
        "With the conversation in front",
        "`Shift-↑` `Shift-↓` `Shift-PgUp` `Shift-PgDn` `Shift-Home` `Shift-End`",
    ): ("Extend the selection", conversation_shift),
    ("With the conversation in front", "drag with button 1"): ("Select", conversation_drag),
    ("With the conversation in front", "wheel"): ("three lines", conversation_wheel),
    ("With the conversation in front", "a character (a letter, a digit, `Space`...)"): (
        "nothing typed is lost",
        conversation_typing,
    ),
    ("With a list open", "`↑` `↓`"): ("one entry", list_up_down),
    ("With a list open", "`PgUp` `PgDn`"): ("at most eight", list_pages),
    ("With a list open", "`Tab`"): ("Take the highlighted entry", list_tab),
    ("With a list open", "`Enter`"): ("already complete, send", list_enter),
    ("With a list open", "`Esc`"): ("until the text changes", list_esc),
    ("In a permission request", "`Enter`, `Space`"): ("focused option", modal_choose),
    ("In a permission request", "`←` `→`"): ("between the options", modal_left_right),
    ("In a permission request", "`↑` `↓` `PgUp` `PgDn`"): ("Scroll the tool call", modal_scroll),
    ("In a permission request", "`Tab`"): ("no key reaches", modal_kept),
    ("In a permission request", "`Esc`"): ("`reject_once`", modal_esc),
}

PAGE_ROWS = [(section, row) for section, rows in TABLES.items() for row in rows]


def test_every_row_has_a_check_and_every_check_a_row() -> None:
    """The page's rows and the checks below are the same set: neither side can drift alone."""
    documented = {(section, row[0]) for section, row in PAGE_ROWS}
    assert sorted(documented - set(CHECKS)) == [], "documented rows without a check"
    assert sorted(set(CHECKS) - documented) == [], "checks whose row left the page"


#: The rows whose check opens the @ list, which asks git for the project's files: a child
#: process, so these rows carry the process marker.
ASK_GIT = {
    ("With the input area in front", "`@`"),
    ("With a list open", "`↑` `↓`"),
    ("With a list open", "`PgUp` `PgDn`"),
    ("With a list open", "`Tab`"),
}


@pytest.mark.parametrize(
    ("section", "row"),
    [
        pytest.param(
            s,
            r,
            id=f"{s}: {r[0]}",
            marks=[pytest.mark.process] if (s, r[0]) in ASK_GIT else [],
        )
        for s, r in PAGE_ROWS
    ],
)
def test_documented_row_does_what_it_says(
    section: str, row: list[str], ui: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each row's keys, pressed on the real widgets, have the effect its last column states.

    The check must press every key its row names (the keys are recorded as they are fed).
    """
    if (section, row[0]) not in CHECKS:
        pytest.fail(f"{section}: {row[0]} has no check")
    phrase, check = CHECKS[(section, row[0])]
    assert phrase in row[-1], f"{section}: {row[0]}: the effect no longer says {phrase!r}"
    pressed: list[str] = []
    feed = Harness.press

    def recording_press(harness: Harness, *keys: str) -> None:
        pressed.extend(keys)
        feed(harness, *keys)

    monkeypatch.setattr(Harness, "press", recording_press)
    check(ui)
    named = {urwid_key(name) for name in key_names(row[0])}
    assert sorted(named - set(pressed)) == [], f"{section}: {row[0]}: keys never pressed"


@pytest.fixture
def ui(tmp_path: Path) -> Harness:
    """An App with no window yet, in a project with a few files and no agents file."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("n\n", encoding="utf-8")
    return Harness(tmp_path)


def test_window_menu_key_column_is_each_entrys_shortcut(ui: Harness) -> None:
    """The Window menu table's Key column is what each entry shows on its right."""
    ui.open()
    more_windows(ui, 1)
    items = ui.app.window_menu_items()
    for row in TABLES["The Window menu"]:
        labels = re.findall(r"\*\*([^*]+)\*\*", row[0])
        keys = key_names(row[2])
        if labels:
            shown = [entry for entry in items if entry.label in labels]
            assert [entry.shortcut for entry in shown] == keys, row
        else:
            shown = [entry for entry in items if entry.label == "tiny"]
            assert [entry.shortcut for entry in shown] == keys[: len(shown)], row


def test_menu_tables_list_the_entries_in_order(ui: Harness) -> None:
    """The bold entries of the two menu tables are the menus' fixed entries, in their order."""
    for title, build in (
        ("The Agent menu", ui.app.agent_menu_items),
        ("The Window menu", ui.app.window_menu_items),
    ):
        documented = [
            label for row in TABLES[title] for label in re.findall(r"\*\*([^*]+)\*\*", row[0])
        ]
        fixed = [entry.label for entry in build() if entry.label not in ("Maximise",)]
        agents = [entry.name for entry in ui.app.config.agents]
        fixed = [label for label in fixed if label not in agents]
        assert fixed == [label for label in documented if label != "Maximise"], title


#: Which tables document the keys each module compares against.
MODULE_TABLES = {
    "app.py": ["Anywhere", "With a menu open", "With the Agent status window open"],
    "menu.py": ["With a menu open"],
    "agent_window.py": ["Keys in an agent window", "With a list open"],
    "input_area.py": ["Keys in an agent window", "With the input area in front"],
    "conversation_view.py": ["With the conversation in front"],
    "permission_modal.py": ["In a permission request"],
    "status_window.py": ["With the Agent status window open"],
}

_KEY_VARIABLES = {"key", "move", "result"}


def code_keys(source: str) -> tuple[set[str], set[str]]:
    """The key strings a module compares ``key`` against (and the prefixes it tests for).

    Comparisons ``key == "x"`` / ``key in ("x", "y")``, module-level key maps and sets
    (``_LIST_MOVES``, ``_MOVES``), a menu's opening key (``Menu(title, key, ...)``), and
    ``key.startswith("meta ")`` prefixes.
    """
    keys: set[str] = set()
    prefixes: set[str] = set()

    def strings(node: ast.expr) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.Tuple | ast.Set | ast.List):
            return [s for element in node.elts for s in strings(element)]
        if isinstance(node, ast.Dict):
            return [s for k in node.keys if k is not None for s in strings(k)]
        return []

    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(isinstance(o, ast.Name) and o.id in _KEY_VARIABLES for o in operands):
                for operand in operands:
                    keys.update(strings(operand))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = node.func.value
            if (
                node.func.attr == "startswith"
                and isinstance(target, ast.Name)
                and target.id in _KEY_VARIABLES
            ):
                prefixes.update(s for arg in node.args for s in strings(arg))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Menu":
            keys.update(strings(node.args[1]))
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and all(
            isinstance(t, ast.Name) and t.id.startswith("_") and t.id.isupper()
            for t in statement.targets
        ):
            keys.update(strings(statement.value))
    return keys, prefixes


def test_the_code_handles_no_key_the_page_does_not_name() -> None:
    """Every key a TUI module compares against is in a table of that module's context."""
    handling = {path.name for path in TUI.glob("*.py") if "def keypress" in path.read_text()}
    assert handling <= set(MODULE_TABLES), "a new module handles keys: give it a table"
    for module, titles in MODULE_TABLES.items():
        documented = {
            urwid_key(name)
            for title in titles
            for row in TABLES[title]
            for name in key_names(row[0])
        }
        keys, prefixes = code_keys((TUI / module).read_text(encoding="utf-8"))
        assert sorted(keys - documented) == [], f"{module} handles keys the page does not name"
        for prefix in prefixes:
            assert any(key.startswith(prefix) for key in documented), (module, prefix)


def test_key_names_parse_ranges_and_lists() -> None:
    """The cell parser reads lists of keys and expands ``Alt-1`` … ``Alt-9``."""
    assert key_names("`Alt-A`, `F10`") == ["Alt-A", "F10"]
    assert key_names("`Alt-1` … `Alt-9`") == [f"Alt-{n}" for n in range(1, 10)]
    assert [urwid_key(name) for name in key_names("`Shift-PgUp` `↑` `Space`")] == [
        "shift page up",
        "up",
        " ",
    ]
    with pytest.raises(AssertionError):
        urwid_key("Hyper-X")
