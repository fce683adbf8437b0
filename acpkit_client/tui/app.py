"""The application: menu bar, window manager, modals, status bar, main loop.

``acpkit-client`` with no sub-command calls :func:`main`. One reactor runs the UI and the
agents (urwid's ``TwistedEventLoop``). Global keys:

=================  =====================================================
``Alt-A``          the **Agent** menu (also ``F10``, or a click)
``Alt-W``          the **Window** menu
``F6``             the next window
``Alt-1``…``9``    that window
``F5``             tile the windows, or maximise the front one
``Ctrl-W``         close the front window (and stop its agent)
``Ctrl-Q``         quit (stopping every agent)
=================  =====================================================

The **Agent** menu has the seed's entries: one per agent, **Create agents file** (only
when the project has none), **Cancel turn** (while the front window's turn runs),
**Agent status**; opening it reads the agents files again.

A paste (the terminal's bracketed paste, turned on here) goes into the front window's
input and is never sent by itself. Every part is laid out for the screen's size at each
draw, from :data:`~acpkit_client.tui.sizes.MIN_COLUMNS` x
:data:`~acpkit_client.tui.sizes.MIN_ROWS` up; under that the screen asks for a larger
terminal and keys act as on the smallest screen.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any, cast

import urwid
from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.task import LoopingCall
from twisted.logger import (
    ILogObserver,
    LogLevel,
    formatEventAsClassicLogText,
    globalLogBeginner,
)
from twisted.python.failure import Failure
from zope.interface import implementer

from acpkit_client.agents import DEFAULT_HANDSHAKE_TIMEOUT, AgentStartError, HandshakeTimeout
from acpkit_client.config import AgentEntry, AgentsConfig, load_agents, project_agents_file
from acpkit_client.options import seconds
from acpkit_client.session import AgentWindow
from acpkit_client.starter import create_agents_file
from acpkit_client.status import status_report
from acpkit_client.tui.agent_window import AgentWindowWidget
from acpkit_client.tui.copy import Clipboards
from acpkit_client.tui.fitted_overlay import FittedOverlay, centered, dropped_from
from acpkit_client.tui.glyphs import use_terminal_encoding
from acpkit_client.tui.menu import Menu, MenuBar, MenuDropdown, MenuItem
from acpkit_client.tui.paste import PasteCollector
from acpkit_client.tui.permission_modal import ModalPermissionPrompt, PermissionModal
from acpkit_client.tui.rule import FRAMES_PER_SECOND
from acpkit_client.tui.sizes import MIN_COLUMNS, MIN_ROWS, Size, box_size
from acpkit_client.tui.status_window import TextWindow
from acpkit_client.tui.statusbar import StatusBar
from acpkit_client.tui.theme import PALETTE
from acpkit_client.tui.windows import TitleBar, WindowFrame

__all__ = ["App", "main"]

HINT = " Alt-A agents  F6 next  F5 tile  Ctrl-W close  Ctrl-Q quit"

#: What a screen under the minimum size shows.
TOO_SMALL = f"Enlarge the terminal to {MIN_COLUMNS}x{MIN_ROWS} at least."

#: The widest a permission modal is (it is narrower on a narrower screen).
MODAL_WIDTH = 72

WELCOME = (
    "No agent window is open.\n\n"
    "Alt-A (or F10) opens the Agent menu: choose an agent to start it in a window.\n"
    "Ctrl-Q quits."
)


class _Desktop(urwid.WidgetWrap[urwid.Widget]):
    """The root widget: routes keys to the application first."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.placeholder: urwid.WidgetPlaceholder[urwid.Widget] = urwid.WidgetPlaceholder(
            urwid.SolidFill(" ")
        )
        super().__init__(self.placeholder)

    def render(self, size: Size, focus: bool = False) -> urwid.Canvas:
        columns, rows = box_size(size)
        if columns < MIN_COLUMNS or rows < MIN_ROWS:
            return _too_small(columns, rows)
        return super().render(size, focus)

    def keypress(self, size: Size, key: str) -> str | None:
        # Under the minimum the keys still act, on the layout of the smallest screen.
        columns, rows = box_size(size)
        return self.app.keypress((max(columns, MIN_COLUMNS), max(rows, MIN_ROWS)), key)

    def mouse_event(
        self, size: Size, event: str, button: int, col: int, row: int, focus: bool
    ) -> bool | None:
        columns, rows = box_size(size)
        if columns < MIN_COLUMNS or rows < MIN_ROWS:
            return False
        handled: bool | None = super().mouse_event(size, event, button, col, row, focus)
        self.app.sync_front_from_focus()
        return handled


def _too_small(columns: int, rows: int) -> urwid.Canvas:
    """The screen under the minimum size: a notice, cut to what fits."""
    notice = urwid.Text(TOO_SMALL, wrap="any")
    canvas = urwid.CompositeCanvas(notice.render((columns,)))
    canvas.pad_trim_top_bottom(0, rows - canvas.rows())
    return canvas


class App:
    """The terminal UI over the client library (see the module docstring)."""

    def __init__(
        self,
        project_root: str,
        reactor: Any,
        *,
        environ: Mapping[str, str] = os.environ,
        write_terminal: Callable[[str], None] | None = None,
        handshake_timeout: float | None = DEFAULT_HANDSHAKE_TIMEOUT,
    ) -> None:
        self.project_root = os.path.abspath(project_root)
        self.reactor = reactor
        self.environ = environ
        #: Seconds a started agent has to answer ``initialize`` and ``session/new``;
        #: past it the window says so and the agent is stopped (None: no limit).
        self.handshake_timeout = handshake_timeout
        self.config: AgentsConfig = load_agents(self.project_root, environ)
        self.clipboards = Clipboards(write_terminal)
        self.windows: list[AgentWindowWidget] = []
        #: The front window's index.
        self.front = 0
        #: Whether windows are tiled (else the front one is maximised).
        self.tiled = False
        self.modals: list[urwid.Widget] = []
        self.text_window: TextWindow | None = None
        self.dropdown: MenuDropdown | None = None
        self.agent_menu = Menu("Agent", "meta a", self.agent_menu_items)
        self.menus = [self.agent_menu, Menu("Window", "meta w", self.window_menu_items)]
        self.menubar = MenuBar(self.menus, self.open_menu)
        self.statusbar = StatusBar(reactor)
        self.statusbar.set_hint(HINT)
        self.root = _Desktop(self)
        self.loop: urwid.MainLoop | None = None
        self._redraw_pending = False
        self._area: urwid.Widget = urwid.SolidFill(" ")
        self._spinner = LoopingCall(self._tick)
        self._spinner.clock = reactor
        self.stopping: Deferred[Any] | None = None
        self.pastes = PasteCollector()
        self.relayout()

    # -- WindowHost ------------------------------------------------------------------------

    def show_message(self, message: str) -> None:
        """A transient message in the status bar."""
        self.statusbar.show_message(message)
        self.request_redraw()

    def seconds(self) -> float:
        """The clock's time."""
        return float(self.reactor.seconds())

    def request_redraw(self) -> None:
        """Redraw soon (coalesced)."""
        self._refresh_usage()
        if self._redraw_pending or self.loop is None:
            return
        self._redraw_pending = True
        self.reactor.callLater(0, self._draw)

    def _draw(self) -> None:
        self._redraw_pending = False
        if self.loop is not None and self.loop.screen.started:
            self.loop.draw_screen()

    def _tick(self) -> None:
        running = [w for w in self.windows if w.session.conversation.turn_running]
        for window in running:
            window.rule.tick()
        if running:
            self.request_redraw()

    def _refresh_usage(self) -> None:
        window = self.front_window
        self.statusbar.set_usage(window.session.conversation.usage if window else None)

    # -- ModalHost ---------------------------------------------------------------------------

    def open_modal(self, widget: urwid.Widget) -> None:
        """Show ``widget`` over everything; it gets every key until closed."""
        self.modals.append(widget)
        self.relayout()

    def close_modal(self, widget: urwid.Widget) -> None:
        """Take ``widget`` away."""
        if widget in self.modals:
            self.modals.remove(widget)
            self.relayout()

    # -- windows --------------------------------------------------------------------------------

    @property
    def front_window(self) -> AgentWindowWidget | None:
        """The front agent window, if any."""
        if 0 <= self.front < len(self.windows):
            return self.windows[self.front]
        return None

    def start_agent(self, entry: AgentEntry) -> AgentWindowWidget:
        """Start ``entry``'s agent and open a window on it (in front)."""
        prompt = ModalPermissionPrompt(self, entry.name)
        session = AgentWindow(
            entry,
            self.project_root,
            permission_prompt=prompt,
            environ=self.environ,
            handshake_timeout=self.handshake_timeout,
        )
        widget = AgentWindowWidget(session, self)
        self.windows.append(widget)
        self.front = len(self.windows) - 1
        self.relayout()
        started = session.start(self.reactor)

        def failed(failure: Failure) -> None:
            failure.trap(AgentStartError)
            why = str(failure.value)
            if isinstance(failure.value, HandshakeTimeout):
                why += " (--handshake-timeout); the agent was stopped"
                session.close()
            widget.view.add_notice(f"could not start {entry.name}: {why}")
            self.show_message(f"{entry.name} could not start (see Agent status)")

        started.addCallbacks(lambda _: self.request_redraw(), failed)
        return widget

    def attach_window(self, session: AgentWindow) -> AgentWindowWidget:
        """Open a window on an already built session (tests, in-memory agents)."""
        widget = AgentWindowWidget(session, self)
        self.windows.append(widget)
        self.front = len(self.windows) - 1
        self.relayout()
        return widget

    def focus_window(self, index: int) -> None:
        """Bring window ``index`` to the front."""
        if 0 <= index < len(self.windows):
            self.front = index
            self.relayout()

    def next_window(self) -> None:
        """``F6``."""
        if self.windows:
            self.focus_window((self.front + 1) % len(self.windows))

    def toggle_tiling(self) -> None:
        """Tile the windows, or maximise the front one."""
        self.tiled = not self.tiled
        self.relayout()

    def close_window(self, index: int | None = None) -> Deferred[Any] | None:
        """Close a window (the front one by default) and stop its agent."""
        index = self.front if index is None else index
        if not 0 <= index < len(self.windows):
            return None
        window = self.windows.pop(index)
        prompt = window.session.permission_prompt
        if isinstance(prompt, ModalPermissionPrompt):
            for modal in list(prompt.open):
                modal.answer(None)
        self.front = min(self.front, max(len(self.windows) - 1, 0))
        self.relayout()
        name = window.title
        stopped = window.close()

        def done(result: object) -> object:
            self.show_message(f"{name} stopped")
            return result

        stopped.addBoth(done)
        return stopped

    def _close_clicked(self, index: int) -> None:
        self.close_window(index)

    def _toggle_clicked(self, index: int) -> None:
        """``[■]`` of window ``index``: that window comes to the front, then tile/maximise."""
        if 0 <= index < len(self.windows):
            self.front = index
        self.toggle_tiling()

    def sync_front_from_focus(self) -> None:
        """After a click, the tiled window that got the focus is the front one."""
        if self.tiled and isinstance(self._area, urwid.Pile) and self.windows:
            position = self._area.focus_position
            if isinstance(position, int) and position != self.front:
                self.front = position
                self.relayout()

    # -- menus ----------------------------------------------------------------------------------

    def agent_menu_items(self) -> list[MenuItem]:
        """The Agent menu, as it is now."""
        items = [
            MenuItem(entry.name, functools.partial(self.start_agent, entry))
            for entry in self.config.agents
        ]
        has_file = os.path.exists(project_agents_file(self.project_root))
        front = self.front_window
        running = front is not None and front.session.turn_running
        items.append(MenuItem("Create agents file", self.create_agents_file, not has_file))
        items.append(MenuItem("Cancel turn", self.cancel_turn, running, "Esc"))
        items.append(MenuItem("Agent status", self.show_status))
        return items

    def window_menu_items(self) -> list[MenuItem]:
        """The Window menu."""
        has = bool(self.windows)
        items = [
            MenuItem("Tile" if not self.tiled else "Maximise", self.toggle_tiling, has, "F5"),
            MenuItem("Next window", self.next_window, has, "F6"),
        ]
        for number, window in enumerate(self.windows[:9]):
            items.append(
                MenuItem(
                    window.title,
                    functools.partial(self.focus_window, number),
                    True,
                    f"Alt-{number + 1}",
                )
            )
        items.append(MenuItem("Close window", self.close_window, has, "Ctrl-W"))
        items.append(MenuItem("Quit", self.quit, True, "Ctrl-Q"))
        return items

    def open_menu(self, index: int) -> None:
        """Open menu ``index`` (closing any open one); the Agent menu reads the files again."""
        if self.menus[index] is self.agent_menu:
            self.reload_agents()
        self.menubar.open_index = index
        self.dropdown = MenuDropdown(self.menus[index].items(), self._chosen)
        self.menubar._invalidate()
        self.relayout()

    def close_menu(self) -> None:
        """Close the open menu."""
        self.menubar.open_index = None
        self.dropdown = None
        self.menubar._invalidate()
        self.relayout()

    def _chosen(self, item: MenuItem) -> None:
        self.close_menu()
        if item.enabled:
            item.action()

    def reload_agents(self) -> None:
        """Read the agents files again (edits apply without a restart).

        A file refused now keeps the agents it gave before (see
        :func:`~acpkit_client.config.load_agents`); the bar shows the refusal.
        """
        self.config = load_agents(self.project_root, self.environ, previous=self.config)
        if self.config.errors:
            error = self.config.errors[0]
            kept = " (last good agents kept)" if error.path in self.config.kept else ""
            self.show_message(f"agents file refused: {error.reason}{kept}; see Agent status")

    def create_agents_file(self) -> None:
        """Write the starter agents file, reload the agents, and show the file."""
        try:
            path = create_agents_file(self.project_root)
        except OSError as e:
            self.show_message(f"Create agents file: {e}")
            return
        self.config = load_agents(self.project_root, self.environ)
        with open(path, encoding="utf-8") as stream:
            lines = stream.read().splitlines()
        self.open_text_window(TextWindow(path, lines))
        self.show_message(f"created {path}")

    def cancel_turn(self) -> None:
        """Cancel the front window's turn."""
        front = self.front_window
        if front is not None:
            front.cancel_turn()

    def show_status(self) -> None:
        """The Agent status window."""
        agents = [(w.session.run, w.session.conversation) for w in self.windows]
        self.open_text_window(TextWindow("Agent status", status_report(self.config, agents)))

    def open_text_window(self, window: TextWindow) -> None:
        """Show a read-only text window over the agent windows."""
        self.text_window = window
        self.relayout()

    def quit(self) -> Deferred[Any]:
        """Stop every agent, then the reactor."""
        if self.stopping is None:
            stops = [window.close() for window in self.windows]
            self.windows = []
            self.relayout()
            self.stopping = DeferredList(stops, consumeErrors=True)
            self.stopping.addBoth(lambda _: self._stop_loop())
        return self.stopping

    def _stop_loop(self) -> None:
        if self._spinner.running:
            self._spinner.stop()
        if self.loop is not None and self.reactor.running:
            self.reactor.stop()

    # -- layout --------------------------------------------------------------------------------

    def relayout(self) -> None:
        """Rebuild the widget tree from the state."""
        self._area = self._window_area()
        body: urwid.Widget = self._area
        if self.text_window is not None:
            body = urwid.Overlay(
                self.text_window, body, "center", ("relative", 90), "middle", ("relative", 90)
            )
        frame: urwid.Widget = urwid.Frame(
            urwid.AttrMap(body, "body"), header=self.menubar, footer=self.statusbar
        )
        if self.dropdown is not None:
            left = self.menubar.offset(self.menubar.open_index or 0)
            place = dropped_from(left, 1, self.dropdown.size)
            frame = FittedOverlay(self.dropdown, frame, place)
        if self.modals:
            modal = self.modals[-1]
            wanted = modal.rows_wanted if isinstance(modal, PermissionModal) else _modal_rows
            frame = FittedOverlay(modal, frame, centered(wanted, MODAL_WIDTH))
        self.root.placeholder.original_widget = frame
        self._refresh_usage()
        self.request_redraw()

    def _window_area(self) -> urwid.Widget:
        if not self.windows:
            return urwid.Filler(urwid.Text(WELCOME, align="center"), valign="middle")
        frames = [
            WindowFrame(
                TitleBar(
                    number + 1,
                    window.title,
                    number == self.front,
                    functools.partial(self._close_clicked, number),
                    functools.partial(self._toggle_clicked, number),
                ),
                window,
            )
            for number, window in enumerate(self.windows)
        ]
        if not self.tiled:
            return frames[self.front]
        pile = urwid.Pile([("weight", 1, frame) for frame in frames])
        pile.focus_position = self.front
        return pile

    # -- keys ------------------------------------------------------------------------------------

    def keypress(self, size: Size, key: str) -> str | None:
        """A paste, then global keys, then the open modal, menu, text window or front window."""
        if self.pastes.wants(key):
            text = self.pastes.feed(key)
            if text is not None:
                self.paste(text)
            return None
        frame: urwid.Widget = self.root.placeholder.original_widget
        if self.modals:
            frame.keypress(size, key)
            return None
        if self.dropdown is not None:
            return self._menu_key(size, key)
        for index, menu in enumerate(self.menus):
            if key == menu.key:
                self.open_menu(index)
                return None
        if key == "f10":
            self.open_menu(0)
            return None
        if key == "ctrl q":
            self.quit()
            return None
        if self.text_window is not None:
            if key in ("esc", "ctrl w"):
                self.text_window = None
                self.relayout()
                return None
            frame.keypress(size, key)
            return None
        if key == "f6":
            self.next_window()
            return None
        if key.startswith("meta ") and key[5:].isdigit() and key[5:] != "0":
            self.focus_window(int(key[5:]) - 1)
            return None
        if key == "f5":
            self.toggle_tiling()
            return None
        if key == "ctrl w":
            self.close_window()
            return None
        result = frame.keypress(size, key)
        return result

    def paste(self, text: str) -> None:
        """Text the terminal pasted: into the front window's input, never sent by itself.

        With a permission request, a menu or the status window open it is not used
        (the bar says so): none of them takes text, and a line break would choose.
        """
        if not text:
            return
        front = self.front_window
        if self.modals or self.dropdown is not None or self.text_window is not None:
            self.show_message("paste ignored: close what is open first")
            return
        if front is None:
            self.show_message("paste ignored: no agent window is open")
            return
        front.paste_text(text)
        self.request_redraw()

    def _menu_key(self, size: Size, key: str) -> str | None:
        open_index = self.menubar.open_index or 0
        if key in ("esc", "f10") or key == self.menus[open_index].key:
            self.close_menu()
            return None
        if key in ("left", "right"):
            step = -1 if key == "left" else 1
            self.open_menu((open_index + step) % len(self.menus))
            return None
        for index, menu in enumerate(self.menus):
            if key == menu.key:
                self.open_menu(index)
                return None
        frame: urwid.Widget = self.root.placeholder.original_widget
        frame.keypress(size, key)
        return None

    # -- running ---------------------------------------------------------------------------------

    def run(self) -> None:
        """Run the UI until quit (starts and stops the reactor)."""
        event_loop = urwid.TwistedEventLoop(reactor=self.reactor, manage_reactor=True)
        # Bracketed paste: a pasted line break must not send the prompt (see tui.paste).
        screen = urwid.raw_display.Screen(bracketed_paste_mode=True)
        self.loop = urwid.MainLoop(
            self.root, cast(Any, PALETTE), screen=screen, event_loop=event_loop, handle_mouse=True
        )
        screen.tty_signal_keys(
            intr="undefined", quit="undefined", start="undefined", stop="undefined"
        )
        self._spinner.start(1.0 / FRAMES_PER_SECOND, now=False)
        try:
            self.loop.run()
        finally:
            if self._spinner.running:
                self._spinner.stop()
            self.loop = None


@implementer(ILogObserver)
class _BufferedLog:
    """Keeps log events while the screen is in use; writes them to a file as they come."""

    def __init__(self, path: str | None, keep: int = 200) -> None:
        self.events: deque[dict[str, Any]] = deque(maxlen=keep)
        self.stream: IO[str] | None = None
        if path is not None:
            self.stream = open(path, "a", encoding="utf-8")

    def __call__(self, event: dict[str, Any]) -> None:
        text = formatEventAsClassicLogText(event)
        if text is None:
            return
        if self.stream is not None:
            self.stream.write(text)
            self.stream.flush()
        level = event.get("log_level")
        if level is not None and level >= LogLevel.warn:
            self.events.append(event)

    def flush_to(self, stream: IO[str]) -> None:
        """Write the kept warnings and errors to ``stream`` (stderr, once the screen is gone)."""
        for event in self.events:
            text = formatEventAsClassicLogText(event)
            if text:
                stream.write(text)
        stream.flush()
        if self.stream is not None:
            self.stream.close()


def _modal_rows(_width: int) -> int:
    """Rows given to a modal that does not say what it needs."""
    return 12


def _write_terminal(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def main(argv: Sequence[str]) -> int:
    """``acpkit-client`` without a sub-command: the terminal UI in the project ``--cwd``."""
    parser = argparse.ArgumentParser(
        prog="acpkit-client", description="Talk to coding agents in a terminal UI."
    )
    parser.add_argument("--cwd", default=".", help="the project root (default: here)")
    parser.add_argument("--log", default=None, help="also write the log to this file")
    parser.add_argument(
        "--handshake-timeout",
        type=seconds,
        default=DEFAULT_HANDSHAKE_TIMEOUT,
        metavar="SECONDS",
        help="stop an agent that has not answered initialize and session/new within this "
        f"time (default: {DEFAULT_HANDSHAKE_TIMEOUT:g}); closing its window gives up sooner",
    )
    try:
        options = parser.parse_args(list(argv))
    except SystemExit as e:
        return int(e.code or 0)
    if not os.path.isdir(options.cwd):
        sys.stderr.write(f"acpkit-client: {options.cwd}: not a directory\n")
        return 2
    use_terminal_encoding()  # ASCII on a terminal whose locale is not UTF-8
    log = _BufferedLog(options.log)
    globalLogBeginner.beginLoggingTo([log], redirectStandardIO=False)
    from twisted.internet import reactor

    app = App(
        options.cwd,
        reactor,
        write_terminal=_write_terminal,
        handshake_timeout=options.handshake_timeout,
    )
    try:
        app.run()
    finally:
        log.flush_to(sys.stderr)
    return 0
