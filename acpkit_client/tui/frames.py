"""Drawing at most once per frame, however many changes come in between.

A chunk streamed by an agent changes the conversation; drawing the screen after each one
would spend the UI's time drawing screens nobody sees (an agent sends hundreds of chunks
a second).  :class:`FramePacer` coalesces: :meth:`~FramePacer.request` asks for a draw,
and the draw happens once, at the start of the next frame (at once when the last draw
is a frame old or more).  A draw made for another reason (urwid draws after each key)
is reported with :meth:`~FramePacer.drawn`: it counts as the frame's draw, and a
request made before it is then satisfied.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["FRAME_SECONDS", "FramePacer"]

#: The shortest time between two draws of streamed changes (30 frames a second).
FRAME_SECONDS = 1 / 30


class FramePacer:
    """Coalesces draw requests to one draw per frame (see the module docstring)."""

    def __init__(
        self, clock: Any, draw: Callable[[], None], frame_seconds: float = FRAME_SECONDS
    ) -> None:
        self.clock = clock
        self.draw = draw
        self.frame_seconds = frame_seconds
        self._last_drawn: float | None = None
        self._wanted = False
        self._pending: Any = None
        #: Draws made through the pacer (for the tests).
        self.draws = 0

    @property
    def pending(self) -> bool:
        """Whether a draw is scheduled."""
        return self._pending is not None

    def request(self) -> None:
        """Something changed: draw at the next frame (once, however many requests)."""
        self._wanted = True
        if self._pending is not None:
            return
        now = float(self.clock.seconds())
        due = 0.0 if self._last_drawn is None else self._last_drawn + self.frame_seconds - now
        self._pending = self.clock.callLater(max(due, 0.0), self._fire)

    def drawn(self) -> None:
        """The screen was just drawn (by this pacer or anything else)."""
        self._last_drawn = float(self.clock.seconds())
        self._wanted = False

    def cancel(self) -> None:
        """Forget a scheduled draw (the screen is going away)."""
        if self._pending is not None and self._pending.active():
            self._pending.cancel()
        self._pending = None

    def _fire(self) -> None:
        self._pending = None
        if self._wanted:
            self.draws += 1
            self.draw()
            # a draw that did not reach the screen still ends the frame's request
            self._wanted = False
            self._last_drawn = float(self.clock.seconds())
