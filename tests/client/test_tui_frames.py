"""Drawing at most once per frame: many changes between two frames cost one draw.

The pacer runs on a :class:`~twisted.internet.task.Clock`; nothing here is timed.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from twisted.internet.task import Clock

from acpkit import schema
from acpkit_client.config import AgentEntry
from acpkit_client.session import AgentWindow
from acpkit_client.tui.app import App
from acpkit_client.tui.frames import FRAME_SECONDS, FramePacer

SIZE = (80, 24)


def test_many_requests_in_one_frame_draw_once() -> None:
    """A hundred requests before the clock moves give one draw, at once (no draw yet)."""
    clock = Clock()
    draws: list[float] = []
    pacer = FramePacer(clock, lambda: draws.append(clock.seconds()))
    for _ in range(100):
        pacer.request()
    clock.advance(0)
    assert draws == [0.0]
    assert not pacer.pending


def test_requests_after_a_draw_wait_for_the_next_frame() -> None:
    """Requests coming within a frame of the last draw are drawn once, a frame after it."""
    clock = Clock()
    draws: list[float] = []
    pacer = FramePacer(clock, lambda: draws.append(clock.seconds()))
    pacer.request()
    clock.advance(0)
    for _ in range(10):
        clock.advance(FRAME_SECONDS / 20)
        pacer.request()
    assert draws == [0.0]
    clock.advance(FRAME_SECONDS)
    assert len(draws) == 2
    assert draws[1] - draws[0] >= FRAME_SECONDS - 1e-9


def test_a_draw_made_elsewhere_satisfies_the_request() -> None:
    """When the screen is drawn for another reason (a key) after a request, the pacer
    does not draw it again for that request."""
    clock = Clock()
    draws: list[float] = []
    pacer = FramePacer(clock, lambda: draws.append(clock.seconds()))
    pacer.request()
    pacer.drawn()
    clock.advance(FRAME_SECONDS)
    assert draws == []


def test_no_request_no_draw() -> None:
    """Frames pass without a draw when nothing changed."""
    clock = Clock()
    draws: list[float] = []
    FramePacer(clock, lambda: draws.append(clock.seconds()))
    clock.pump([FRAME_SECONDS] * 10)
    assert draws == []


class _Loop:
    """The part of urwid's main loop the application draws through."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.screen = SimpleNamespace(started=True)
        self.screens: list[str] = []

    def draw_screen(self) -> None:
        canvas = self.app.root.render(SIZE, focus=True)
        self.screens.append("\n".join(row.decode("utf-8") for row in canvas.text))


def test_chunks_streamed_within_one_frame_are_drawn_once(tmp_path: Path) -> None:
    """Fifty chunks of a code block arriving one by one (the reactor turning between
    them) within one frame cause one draw, at the frame's end, showing the last of them."""
    clock = Clock()
    app = App(str(tmp_path), clock, environ={"ACPKIT_DIR": str(tmp_path / "none")})
    session = AgentWindow(AgentEntry(name="bob", command="bob", source="test"), str(tmp_path))
    app.attach_window(session)
    loop = _Loop(app)
    app.loop = cast(Any, loop)
    app.request_redraw()
    clock.advance(0)
    assert len(loop.screens) == 1
    session.conversation.apply(
        schema.AgentMessageChunk(content=schema.TextContentBlock(text="```python\n"))
    )
    for number in range(50):
        text = f"x{number} = {number}\n"
        session.conversation.apply(
            schema.AgentMessageChunk(content=schema.TextContentBlock(text=text))
        )
        clock.advance(FRAME_SECONDS / 100)
    assert len(loop.screens) == 1
    clock.advance(FRAME_SECONDS)
    assert len(loop.screens) == 2
    assert "x49 = 49" in loop.screens[-1]
    clock.advance(FRAME_SECONDS * 5)
    assert len(loop.screens) == 2
