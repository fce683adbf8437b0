"""Pasting into the terminal UI: bracketed paste, so a pasted line break never sends.

At widget level the terminal's paste is fed as urwid reports it (``begin paste``, a key per
character, ``enter`` for a line break, ``end paste``); in a real pseudo-terminal the UI must
ask for bracketed paste (``ESC [ ? 2004 h``) and a pasted text with line breaks must land
in the input area whole.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acpkit_client.tui.paste import PasteCollector, Pasted, pasted_character
from tests.client.test_tui_pty import Terminal
from tests.client.test_tui_window import Harness
from tests.helpers import examples


@pytest.fixture
def ui(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


def paste_keys(text: str) -> list[str]:
    """The keys urwid reports for ``text`` pasted in a terminal with bracketed paste."""
    named = {"\n": "enter", "\t": "tab"}
    return ["begin paste", *(named.get(c, c) for c in text), "end paste"]


def test_a_paste_goes_into_the_input_with_its_line_breaks_and_is_not_sent(ui: Harness) -> None:
    """Pasted lines land in the input area as they are (line breaks, tabs); nothing is sent
    until Enter, which then sends them all as one prompt."""
    window = ui.open()
    ui.type("before: ")
    ui.press(*paste_keys("first line\n\tsecond line\nthird"))
    assert ui.input_text == "before: first line\n\tsecond line\nthird"
    assert not ui.agents[0].prompts
    assert window.input.edit_pos == len(ui.input_text)
    ui.press("enter")
    sent = ui.agents[0].prompts[0].prompt[0]
    assert sent.text == "before: first line\n\tsecond line\nthird"  # type: ignore[union-attr]


def test_a_paste_goes_to_the_input_even_from_the_conversation(ui: Harness) -> None:
    """With the conversation in front, a paste still goes into the input area (focused)."""
    window = ui.open()
    ui.press("tab")
    assert not window.input_focused
    ui.press(*paste_keys("a\nb"))
    assert window.input_focused and ui.input_text == "a\nb"


def test_a_paste_with_a_permission_request_open_answers_nothing(ui: Harness) -> None:
    """A pasted line break does not choose a permission option: the paste is not used."""
    ui.open()
    ui.type("go")
    ui.press("enter")
    assert ui.app.modals
    ui.press(*paste_keys("oops\n"))
    assert ui.app.modals and not ui.agents[0].outcomes
    assert "paste ignored" in ui.screen()


def test_a_paste_with_a_menu_open_chooses_nothing(ui: Harness) -> None:
    """With a menu open, a pasted line break does not choose its entry."""
    ui.open()
    ui.press("meta w")
    ui.press(*paste_keys("x\n"))
    assert ui.app.dropdown is not None and ui.app.windows
    assert ui.input_text == ""


def test_the_collector_names_characters_and_drops_other_keys() -> None:
    """Inside a paste, ``enter`` and ``tab`` are characters; other named keys are dropped."""
    assert [pasted_character(k) for k in ("a", "é", "enter", "tab", "f5", "ctrl a")] == [
        "a",
        "é",
        "\n",
        "\t",
        "",
        "",
    ]
    collector = PasteCollector()
    assert not collector.wants("a")
    assert collector.wants("begin paste") and collector.feed("begin paste") is None
    assert collector.pasting and collector.wants("f5")
    for key in ("x", "enter", "f5", "y"):
        assert collector.feed(key) is None
    assert collector.feed("end paste") == "x\ny"
    assert not collector.pasting


@pytest.mark.process
def test_in_a_terminal_a_multi_line_paste_is_not_sent(tmp_path: Path) -> None:
    """The UI turns bracketed paste on; a two-line paste is in the input, not sent."""
    terminal = Terminal(tmp_path)
    try:
        terminal.wait_for(" Agent  Window ")
        terminal.send("\x1ba")
        terminal.wait_for("Create agents file")
        terminal.send("\r")
        terminal.wait_for("[x] 1 Bob (reference agent)")
        terminal.wait(lambda s: "starting" not in s, "the agent to be ready")
        assert b"\x1b[?2004h" in terminal.raw
        terminal.send("\x1b[200~first pasted line\rsecond pasted line\x1b[201~")
        screen = terminal.wait_for("second pasted line")
        conversation, _rule, input_area = screen.partition("─" * 20)
        assert "first pasted line" in input_area and "second pasted line" in input_area
        assert "pasted" not in conversation, "nothing was sent"
        terminal.send("\r")
        screen = terminal.wait_for("Echo: first pasted line")
        assert "you\n  first pasted line\n  second pasted line" in "\n".join(
            line.rstrip() for line in screen.splitlines()
        )
        terminal.send("\x11")
        assert terminal.wait_exit() == 0
    finally:
        terminal.close()


def test_the_filter_joins_a_paste_split_over_reads_in_place() -> None:
    """A paste cut over three reads, between typed keys, becomes one ``Pasted`` key in its
    place; the other keys pass in order, and named keys inside the paste are dropped."""
    collector = PasteCollector()
    keys = ["a", *paste_keys("x\ny\tz"), "b"]
    keys.insert(4, "f5")  # a named key inside the paste
    reads = [keys[:3], keys[3:7], keys[7:]]
    out = [key for read in reads for key in collector.filter(read)]
    assert out == ["a", "paste", "b"]
    assert isinstance(out[1], Pasted) and out[1].text == "x\ny\tz"
    assert not collector.pasting


@settings(max_examples=examples(1), deadline=None)
@given(
    before=st.text(alphabet="ab ", max_size=5),
    pasted=st.text(alphabet="xy\n\t é", max_size=60),
    cuts=st.lists(st.integers(min_value=0, max_value=80), max_size=6),
)
def test_reads_filtered_then_pressed_give_what_keys_one_by_one_give(
    tmp_path_factory: pytest.TempPathFactory, before: str, pasted: str, cuts: list[int]
) -> None:
    """However the terminal's reads cut a paste, filtering each read (as urwid's main loop
    does) puts the same text in the input as feeding the keys one by one."""
    keys = [*before, *paste_keys(pasted), "z"]
    one_by_one = Harness(tmp_path_factory.mktemp("one"))
    one_by_one.open()
    one_by_one.press(*keys)
    filtered = Harness(tmp_path_factory.mktemp("filtered"))
    filtered.open()
    points = sorted({0, len(keys), *(cut for cut in cuts if cut < len(keys))})
    for start, end in itertools.pairwise(points):
        filtered.press(*filtered.app.filter_input(keys[start:end], []))
    assert filtered.input_text == one_by_one.input_text == before + pasted + "z"
