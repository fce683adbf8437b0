"""The rule between the conversation and the input area, with the turn spinner.

The spinner's frame is computed from the clock (``int(seconds * FRAMES_PER_SECOND) %
len(FRAMES)``), not from a counter: two windows whose turns run at the same time spin in
phase, and nothing is reset when a turn starts. The window title is never animated.
"""

from __future__ import annotations

from collections.abc import Callable

import urwid

from acpkit_client.tui import glyphs
from acpkit_client.tui.sizes import Size, flow_width

__all__ = ["FRAMES", "FRAMES_PER_SECOND", "Rule", "spinner_frame"]

#: The spinner's frames (on a UTF-8 terminal; :mod:`acpkit_client.tui.glyphs`).
FRAMES = glyphs.UNICODE.spinner
#: How many frames a second.
FRAMES_PER_SECOND = 8


def spinner_frame(seconds: float) -> str:
    """The frame shown at time ``seconds``."""
    frames = glyphs.current().spinner
    return frames[int(seconds * FRAMES_PER_SECOND) % len(frames)]


class Rule(urwid.Widget):
    """One row: a line, with the spinner while a turn runs and a short state text."""

    _sizing = frozenset([urwid.Sizing.FLOW])
    _selectable = False

    def __init__(self, seconds: Callable[[], float]) -> None:
        super().__init__()
        self._seconds = seconds
        #: Whether a turn runs (the spinner turns).
        self.running = False
        #: A short text drawn on the rule (the agent's state), may be empty.
        self.label = ""

    def set_state(self, running: bool, label: str) -> None:
        """Update what the rule shows."""
        self.running, self.label = running, label
        self._invalidate()

    def tick(self) -> None:
        """Redraw (the frame depends on the time)."""
        self._invalidate()

    def rows(self, size: Size, focus: bool = False) -> int:
        return 1

    def render(self, size: Size, focus: bool = False) -> urwid.Canvas:
        maxcol = flow_width(size)
        markup: list[tuple[str, str]] = [("rule", "──")]
        used = 2
        if self.running:
            markup.append(("spinner", f" {spinner_frame(self._seconds())} "))
            used += 3
        if self.label:
            text = f" {self.label} "
            markup.append(("rule", text))
            used += len(text)
        markup.append(("rule", "─" * max(0, maxcol - used)))
        return urwid.Text(markup, wrap="clip").render((maxcol,))
