"""The UI's glyphs: Unicode on a UTF-8 terminal, ASCII on any other (``LC_ALL=C``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from acpkit_client.tui import glyphs
from acpkit_client.tui.rule import Rule
from acpkit_client.tui.windows import TitleBar


@pytest.fixture
def ascii_glyphs() -> Iterator[None]:
    glyphs.use(glyphs.ASCII)
    try:
        yield
    finally:
        glyphs.use(glyphs.UNICODE)


@pytest.mark.parametrize(
    ("codeset", "utf8"),
    [("UTF-8", True), ("utf8", True), ("ANSI_X3.4-1968", False), ("ISO-8859-1", False)],
)
def test_utf8_is_read_from_the_codeset(codeset: str, utf8: bool) -> None:
    """Only a UTF-8 codeset counts as UTF-8 (the C locale's is ANSI_X3.4-1968)."""
    assert glyphs.terminal_is_utf8(codeset) is utf8


def _text(canvas: object) -> str:
    return b"".join(getattr(canvas, "text", [])).decode("utf-8")


@pytest.mark.usefixtures("ascii_glyphs")
def test_ascii_rule_and_title_bar() -> None:
    """With the ASCII glyphs the spinner and the tile button are ASCII."""
    rule = Rule(lambda: 0.0)
    rule.set_state(True, "working")
    title = TitleBar(1, "bob", True, lambda: None, lambda: None)
    drawn = _text(rule.render((30,))) + _text(title.render((30,)))
    assert " | " in drawn and drawn.endswith("[#]")
    assert "■" not in drawn and "⠋" not in drawn


def test_unicode_title_bar() -> None:
    """On a UTF-8 terminal the tile button is ``[■]``."""
    title = TitleBar(1, "bob", True, lambda: None, lambda: None)
    assert _text(title.render((30,))).endswith("[■]")
