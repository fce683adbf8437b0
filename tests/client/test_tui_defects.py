"""Defects of the terminal UI (issue 13): each test states the behaviour that was wrong."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import urwid.testing
from twisted.internet.task import Clock

from acpkit_client.session import AgentWindow
from acpkit_client.tui.app import App
from acpkit_client.tui.permission_modal import ModalPermissionPrompt
from tests.client.test_tui_sizes import long_request
from tests.client.test_tui_window import ENTRY, SIZE, Harness


@pytest.fixture
def ui(tmp_path: Path) -> Harness:
    (tmp_path / "notes.txt").write_text("n\n", encoding="utf-8")
    (tmp_path / "notes.txt.bak").write_text("n\n", encoding="utf-8")
    return Harness(tmp_path)


def click(ui: Harness, column: int, row: int) -> None:
    ui.app.root.mouse_event(SIZE, "mouse press", 1, column, row, True)
    ui.app.root.mouse_event(SIZE, "mouse release", 0, column, row, True)


def test_the_maximise_box_of_a_back_window_maximises_that_window(ui: Harness) -> None:
    """Tiled, a click on ``[■]`` of a window that is not in front maximises *that* window."""
    first = ui.open()
    second = ui.app.attach_window(AgentWindow(ENTRY, str(ui.root), environ={}))
    ui.press("f5")
    assert ui.app.tiled and ui.app.front_window is second
    lines = ui.screen().split("\n")
    row = next(n for n, line in enumerate(lines) if line.startswith("[x] 1 tiny"))
    assert lines[row].rstrip().endswith("[■]")
    click(ui, SIZE[0] - 2, row)
    assert not ui.app.tiled
    assert ui.app.front_window is first
    assert ui.screen().split("\n")[1].startswith("[x] 1 tiny")


def test_the_maximise_box_of_the_front_window_tiles_again(ui: Harness) -> None:
    """Maximised, ``[■]`` of the (front) window tiles the windows, the front one unchanged."""
    ui.open()
    second = ui.app.attach_window(AgentWindow(ENTRY, str(ui.root), environ={}))
    click(ui, SIZE[0] - 2, 1)
    assert ui.app.tiled and ui.app.front_window is second


@pytest.mark.process
def test_enter_on_a_mention_already_complete_sends(ui: Harness) -> None:
    """With ``@notes.txt`` typed whole and highlighted in the list, Enter sends the prompt."""
    window = ui.open()
    ui.type("see @notes.txt")
    assert window.list_open and window.list.current() is not None
    ui.press("enter")
    assert ui.input_text == ""
    assert ui.agents[0].prompts, "the prompt was sent"


@pytest.mark.process
def test_enter_on_an_unfinished_mention_still_completes(ui: Harness) -> None:
    """``@notes`` is not complete: Enter takes the highlighted file, sends nothing."""
    ui.open()
    ui.type("see @notes")
    ui.press("enter")
    assert ui.input_text == "see @notes.txt "
    assert not ui.agents[0].prompts


@pytest.mark.process
def test_enter_on_a_complete_mention_with_another_file_highlighted_takes_it(ui: Harness) -> None:
    """Only the highlighted entry counts: moving to ``notes.txt.bak`` and Enter takes it."""
    window = ui.open()
    ui.type("@notes.txt")
    ui.press("down")
    current = window.list.current()
    assert current is not None and current.label == "notes.txt.bak"
    ui.press("enter")
    assert ui.input_text == "@notes.txt.bak "


def agents_file(root: Path, names: list[str]) -> Path:
    path = root / ".acpkit" / "acp.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(
        "".join(f'[[agent]]\nname = "{name}"\ncommand = "true"\n' for name in names),
        encoding="utf-8",
    )
    return path


def menu_labels(ui: Harness) -> list[str]:
    ui.press("meta a")
    assert ui.app.dropdown is not None
    labels = [item.label for item in ui.app.dropdown.items]
    ui.press("esc")
    return labels


def test_agents_file_edits_apply_when_the_agent_menu_opens(tmp_path: Path) -> None:
    """An agent added to ``acp.toml`` after start is in the Agent menu the next time it opens."""
    agents_file(tmp_path, ["One"])
    ui = Harness(tmp_path)
    assert menu_labels(ui)[0] == "One"
    agents_file(tmp_path, ["One", "Two"])
    assert menu_labels(ui)[:2] == ["One", "Two"]


def test_a_bad_edit_shows_its_error_and_keeps_the_last_good_agents(tmp_path: Path) -> None:
    """A file broken by an edit: the menu keeps its last good agents, the bar and Agent
    status say what is wrong; once fixed, the new list is used."""
    path = agents_file(tmp_path, ["One", "Two"])
    ui = Harness(tmp_path)
    path.write_text('[[agent]]\nname = "One"\ncomand = "x"\n', encoding="utf-8")
    assert menu_labels(ui)[:2] == ["One", "Two"]
    screen = ui.screen()
    assert "agent.comand is not a key" in screen
    ui.app.show_status()
    status = "\n".join(ui.app.text_window.lines if ui.app.text_window else [])
    assert f"Refused {path}: agent.comand is not a key this file has" in status
    assert "kept until it is fixed" in status
    ui.press("esc")
    agents_file(tmp_path, ["Three"])
    assert menu_labels(ui)[0] == "Three"
    assert not ui.app.config.errors


def test_a_file_bad_from_the_start_keeps_nothing(tmp_path: Path) -> None:
    """A file already refused at start has no last good agents: the menu lists none."""
    path = agents_file(tmp_path, [])
    path.write_text("[[agent]\n", encoding="utf-8")
    ui = Harness(tmp_path)
    assert menu_labels(ui)[0] == "Create agents file"


@pytest.mark.parametrize("size", [(71, 24), (40, 10), (30, 8), (20, 6)])
def test_the_permission_modal_fits_a_small_screen_and_answers(
    ui: Harness, size: tuple[int, int]
) -> None:
    """On a screen narrower than 72 columns or shorter than the request, the modal is drawn
    inside the screen with its buttons visible, and Enter answers."""
    ui.open()
    ui.type("go")
    ui.press("enter")
    assert ui.app.modals
    text = urwid.testing.render_text(ui.app.root, size)
    assert len(text) == size[1] and all(len(line) == size[0] for line in text)
    assert "Allow" in "\n".join(text)
    ui.app.root.keypress(size, "enter")
    assert ui.pair is not None
    ui.pair.pump()
    assert not ui.app.modals
    assert ui.agents[0].outcomes[0].option_id == "allow"


def test_resizing_with_the_permission_modal_open(ui: Harness) -> None:
    """Resizes while the modal is open (wide, narrow, short, back) draw it each time."""
    ui.open()
    ui.type("go")
    ui.press("enter")
    for size in [(100, 30), (60, 20), (20, 6), (25, 7), (72, 12), (200, 60), (80, 24)]:
        text = urwid.testing.render_text(ui.app.root, size)
        assert len(text) == size[1]
        assert "asks" in "".join(text) or size[0] < 30
    ui.press("esc")
    assert not ui.app.modals


def test_the_screen_under_the_minimum_says_so() -> None:
    """Under 20x6 the screen asks for a larger terminal instead of drawing a broken layout."""
    app = App("/", Clock(), environ={"ACPKIT_DIR": "/nonexistent"})
    text = "".join(urwid.testing.render_text(app.root, (19, 6)))
    assert "Enlarge the terminal to 20x6" in text


def test_a_window_one_row_high_shows_its_input(ui: Harness) -> None:
    """Tiled on a short screen a window may get one row: it shows the input being typed
    (not the rule), and gets the rule back when it grows."""
    window = ui.open()
    ui.type("hello")
    assert urwid.testing.render_text(window, (30, 1), strip=True) == ["hello"]
    text = urwid.testing.render_text(window, (30, 4), strip=True)
    assert text[-2].startswith("──") and text[-1] == "hello"


def test_a_modal_with_long_option_names_fits_a_narrow_screen_quietly(ui: Harness) -> None:
    """Options wider than the screen are drawn in cells as wide as the modal: no urwid
    warning (it would go to the log on every draw), and the option can still be chosen."""
    ui.open()
    assert ui.session is not None
    prompt = ui.session.permission_prompt
    assert isinstance(prompt, ModalPermissionPrompt)
    answers: list[str | None] = []
    prompt.choose(long_request()).addCallback(answers.append)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for size in [(20, 6), (30, 12), (80, 24)]:
            text = urwid.testing.render_text(ui.app.root, size)
            assert "Allowthis" in "".join(text).replace(" ", "").replace("│", "")
        ui.app.root.keypress((20, 6), "enter")
    assert answers == ["ok"]


def test_a_title_too_long_for_the_screen_is_cut_before_the_maximise_box(ui: Harness) -> None:
    """On a narrow screen the title is cut with "…" and ``[■]`` stays drawn at the right
    edge, where a click on it acts."""
    ui.open()
    first = urwid.testing.render_text(ui.app.root, (20, 6))[1]
    assert first == "[x] 1 tiny       [■]"
    ui.app.windows[0].session.run.entry = ENTRY.__class__(
        name="a rather long agent name", command="python", source="test"
    )
    ui.app.relayout()
    first = urwid.testing.render_text(ui.app.root, (20, 6))[1]
    assert first == "[x] 1 a rather … [■]"
    ui.app.root.mouse_event((20, 6), "mouse press", 1, 18, 1, True)
    assert ui.app.tiled
