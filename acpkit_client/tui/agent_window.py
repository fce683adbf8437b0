"""One agent window: the conversation above, the rule with the spinner, the input area below.

Keys handled here (the application handles ``F6``, ``Alt-1``…``Alt-9``, ``Ctrl-W``):

==================  ===============================================================
``Enter``           send the input as a prompt (list open: take the entry; on a
                    command or file already complete: send)
``Alt-Enter``       a line break in the input
``Tab``             list open: take the entry; otherwise move the focus between the
                    conversation and the input
``Ctrl-C``          copy the selection, or the region under the cursor
``Ctrl-Ins``        the same
``Shift-Ins``       paste the client's clipboard into the input
``Esc``             list open: close it until the text changes; else drop the
                    selection; else cancel the running turn
``↑ ↓ PgUp PgDn``   list open: move in the list
==================  ===============================================================

The ``/`` list comes from :func:`~acpkit_client.completion.slash_completions` over the
commands the agent announced; the ``@`` list from
:func:`~acpkit_client.completion.mention_completions` over the project's files as git sees
them (:mod:`~acpkit_client.project_files`), listed again off the UI's path each time the
list opens. A prompt with an ``@path`` that names no file is not sent: a notice names it,
and ``Enter`` again sends the text as typed.
"""

from __future__ import annotations

from typing import Any, Protocol

import urwid
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure
from zope.interface import implementer

from acpkit_client.agents import AgentRun, AgentState
from acpkit_client.completion import (
    Completion,
    is_complete_command,
    mention_completions,
    slash_completions,
)
from acpkit_client.interfaces import IAgentObserver, IConversationObserver
from acpkit_client.project_files import ProjectFiles, load_project_files
from acpkit_client.prompt import unlisted_mentions, unresolved_mentions
from acpkit_client.session import AgentWindow, TurnError
from acpkit_client.tui.completion_list import CompletionList
from acpkit_client.tui.conversation_view import ConversationView
from acpkit_client.tui.copy import Clipboards, copied_text
from acpkit_client.tui.input_area import InputArea, InputBox
from acpkit_client.tui.rule import Rule
from acpkit_client.tui.sizes import Size, box_size

__all__ = ["AgentWindowWidget", "WindowHost"]

_LIST_MOVES = {"up": -1, "down": 1}


class WindowHost(Protocol):
    """What an agent window needs from the application."""

    clipboards: Clipboards

    def show_message(self, message: str) -> None:
        """Show a transient message in the status bar."""

    def request_redraw(self) -> None:
        """Redraw the screen soon (the model changed outside urwid's own events)."""

    def seconds(self) -> float:
        """The clock's time (the spinner's frame comes from it)."""


def _already_taken(text: str, completion: Completion) -> bool:
    """Whether the word ``completion`` would replace already reads as it (the space aside)."""
    word = text[completion.start : completion.end]
    return word in (completion.replacement, completion.replacement.rstrip(" "))


@implementer(IConversationObserver, IAgentObserver)
class AgentWindowWidget(urwid.WidgetWrap[urwid.Widget]):
    """The widget of one agent window over its :class:`~acpkit_client.session.AgentWindow`."""

    def __init__(self, session: AgentWindow, host: WindowHost) -> None:
        self.session = session
        self.host = host
        self.view = ConversationView(session.conversation, session.run.name)
        self.input = InputArea()
        self.list = CompletionList()
        self.rule = Rule(host.seconds)
        self.list_kind: str | None = None
        self._dismissed_text: str | None = None
        self._files: list[str] = []
        # Whether _files is the whole list (listed, and not cut at the limit).
        self._files_complete = False
        # The @ list's files are listed off the UI's path; this lists them.
        self.list_files = load_project_files
        self._listing: Deferred[None] | None = None
        # The text last refused for its unresolved mentions (Enter again sends it).
        self._refused_text: str | None = None
        # "cancelling the turn" is on the status bar until the turn ends.
        self._cancelling = False
        self._body_placeholder: urwid.WidgetPlaceholder[urwid.Widget] = urwid.WidgetPlaceholder(
            self.view
        )
        self._input_box = InputBox(self.input)
        self._input_height = 1
        self._rule_rows = 1
        self.pile = urwid.Pile(
            [
                ("weight", 1, self._body_placeholder),
                ("pack", self.rule),
                ("given", 1, self._input_box),
            ]
        )
        self.pile.focus_position = 2
        super().__init__(self.pile)
        session.conversation.subscribe(self)
        session.run.subscribe(self)
        self._update_rule()

    @property
    def title(self) -> str:
        """The window title: the agent's name (never animated)."""
        return self.session.run.name

    # -- observers ------------------------------------------------------------------------

    def entry_added(self, entry: Any) -> None:
        """Redraw."""
        self.host.request_redraw()

    def entry_changed(self, entry: Any) -> None:
        """Redraw."""
        self.host.request_redraw()

    def commands_changed(self, commands: Any) -> None:
        """The ``/`` list may change."""
        self.refresh_list()
        self.host.request_redraw()

    def usage_changed(self, usage: Any) -> None:
        """The status bar shows it (the application reads it)."""
        self.host.request_redraw()

    def turn_changed(self, running: bool) -> None:
        """The spinner starts or stops."""
        self._update_rule()
        self.host.request_redraw()

    def agent_state_changed(self, run: AgentRun) -> None:
        """The rule says the agent's state."""
        self._update_rule()
        self.host.request_redraw()

    def _update_rule(self) -> None:
        state = self.session.run.state
        label = "" if state is AgentState.READY else state.value
        self.rule.set_state(self.session.conversation.turn_running, label)

    # -- the list --------------------------------------------------------------------------

    @property
    def list_open(self) -> bool:
        """Whether the ``/`` or ``@`` list is shown."""
        return self.list_kind is not None

    def refresh_list(self) -> None:
        """Open, narrow or close the list for the current text and caret."""
        text, cursor = self.input.edit_text, self.input.edit_pos
        if self._dismissed_text is not None:
            if text == self._dismissed_text:
                self._set_list(None, [])
                return
            self._dismissed_text = None
        commands = self.session.conversation.commands
        items = slash_completions(text, cursor, commands)
        if items is not None:
            self._set_list("/", items)
            return
        if mention_completions(text, cursor, []) is None:
            self._set_list(None, [])
            return
        if self.list_kind != "@":
            self._start_listing()
        self._set_list("@", mention_completions(text, cursor, self._files) or [])

    def _start_listing(self) -> None:
        """List the project's files again; the open @ list follows when they come."""
        if self._listing is not None:
            return

        def listed(listing: ProjectFiles) -> None:
            self._listing = None
            self._files = list(listing.files)
            self._files_complete = not listing.cut
            if listing.cut:
                self.host.show_message(f"the @ list holds the first {len(listing.files):,} files")
            if self.list_kind == "@":
                text, cursor = self.input.edit_text, self.input.edit_pos
                self._set_list("@", mention_completions(text, cursor, self._files) or [])
                self.host.request_redraw()

        def failed(failure: Failure) -> None:
            self._listing = None
            self.host.show_message(f"could not list the project's files: {failure.value}")

        listing = self._listing = self.list_files(self.session.project_root).addCallbacks(
            listed, failed
        )
        if listing.called:  # listed at once (no reactor running): nothing in flight
            self._listing = None

    def _set_list(self, kind: str | None, items: list[Completion]) -> None:
        was = self.list_kind
        self.list_kind = kind
        if kind is None:
            self.list.set_items([])
            if was is not None:
                self._body_placeholder.original_widget = self.view
            return
        self.list.set_items(items)
        overlay = urwid.Overlay(
            self.list,
            self.view,
            align="left",
            width=("relative", 100),
            valign="bottom",
            height=self.list.wanted_rows(),
        )
        self._body_placeholder.original_widget = overlay

    def take(self, completion: Completion) -> None:
        """Apply ``completion`` to the input."""
        self.input.replace(completion.start, completion.end, completion.replacement)
        self.refresh_list()

    def dismiss_list(self) -> None:
        """Close the list until the text changes."""
        self._dismissed_text = self.input.edit_text
        self._set_list(None, [])

    # -- actions ---------------------------------------------------------------------------

    def send(self) -> Deferred[str] | None:
        """Send the input as a prompt; None when nothing was sent (and the bar says why)."""
        text = self.input.edit_text
        if not text.strip():
            return None
        if self.session.session_id is None:
            self.host.show_message(f"{self.title} is not ready ({self.session.run.state.value})")
            return None
        if self.session.turn_running:
            self.host.show_message("a turn is already running in this window")
            return None
        root = self.session.project_root
        unresolved = unresolved_mentions(text, root, self._files)
        unlisted = unlisted_mentions(text, root, self._files) if self._files_complete else []
        if (unresolved or unlisted) and text != self._refused_text:
            self._refused_text = text
            if unresolved:
                names = ", ".join(unresolved)
                self.view.add_notice(
                    f"no such file in the project: {names}; not sent (Enter again sends it as text)"
                )
            if unlisted:
                names = ", ".join(unlisted)
                self.view.add_notice(
                    f"{names}: not in the @ list (git ignores it): the whole file would be "
                    "sent to the agent; not sent (Enter again sends it)"
                )
            self.host.request_redraw()
            return None
        self._refused_text = None
        self.input.clear()
        self._dismissed_text = None
        self._set_list(None, [])
        turn = self.session.send_prompt(text, self._files or None)
        turn.addCallbacks(self._turn_ended, self._turn_failed)
        return turn

    def _turn_ended(self, stop: str) -> str:
        if stop != "end_turn":
            self.view.add_notice(f"turn ended: {stop}")
            self.host.request_redraw()
        self._cancel_done(f"turn {stop}" if stop == "cancelled" else f"turn ended: {stop}")
        return stop

    def _turn_failed(self, failure: Failure) -> None:
        failure.trap(TurnError)
        self.view.add_notice(f"turn failed: {failure.value}")
        self.host.request_redraw()
        self._cancel_done("turn failed")

    def _cancel_done(self, message: str) -> None:
        """The turn being cancelled ended: the status bar says so, not "cancelling"."""
        if self._cancelling:
            self._cancelling = False
            self.host.show_message(message)

    def cancel_turn(self) -> bool:
        """``session/cancel`` when a turn runs."""
        if self.session.cancel():
            self._cancelling = True
            self.host.show_message("cancelling the turn")
            return True
        return False

    def copy(self) -> int:
        """Copy the selection or the cursor's region to both clipboards; the lines count."""
        lines = self.view.copy_lines()
        if not lines:
            self.host.show_message("nothing to copy")
            return 0
        self.host.clipboards.copy(copied_text(lines))
        count = len(lines)
        self.host.show_message(f"{count} line{'s' if count != 1 else ''} copied")
        return count

    def paste(self) -> None:
        """Insert the client's clipboard at the caret."""
        self.paste_text(self.host.clipboards.text)

    def paste_text(self, text: str) -> None:
        """Insert ``text`` (line breaks included) at the input's caret; nothing is sent."""
        if text:
            self.focus_input()
            self.input.insert_text(text)
            self.refresh_list()

    @property
    def input_focused(self) -> bool:
        """Whether the input area has the focus."""
        return self.pile.focus_position == 2

    def focus_input(self, focused: bool = True) -> None:
        """Give the focus to the input area (or to the conversation)."""
        self.pile.focus_position = 2 if focused else 0

    # -- keys ------------------------------------------------------------------------------

    def _fit_input(self, size: Size) -> None:
        """Give the input area the rows it needs, at most a third of the window."""
        columns, rows = box_size(size)
        wanted = int(self.input.rows((columns,)))
        height = max(1, min(wanted, rows // 3))
        if height != self._input_height:
            self._input_height = height
            self.pile.contents[2] = (self._input_box, self.pile.options("given", height))
        # A window one row high (tiled on a short screen) shows the input, not the rule.
        rule_rows = 1 if rows >= 2 else 0
        if rule_rows != self._rule_rows:
            self._rule_rows = rule_rows
            if rule_rows:
                self.pile.contents[1] = (self.rule, self.pile.options("pack"))
            else:
                self.pile.contents[1] = (self.rule, self.pile.options("given", 0))

    def render(self, size: Size, focus: bool = False) -> urwid.Canvas:
        self._fit_input(size)
        return super().render(size, focus)

    def keypress(self, size: Size, key: str) -> str | None:
        self._fit_input(size)
        if self.list_open and self.input_focused:
            handled = self._list_key(size, key)
            if handled:
                return None
        if key == "tab":
            self.focus_input(not self.input_focused)
            return None
        if key in ("ctrl c", "ctrl insert"):
            self.copy()
            return None
        if key == "shift insert":
            self.paste()
            return None
        if key == "esc":
            if not self.view.abandon_selection():
                self.cancel_turn()
            return None
        if key == "enter" and self.input_focused:
            self.send()
            return None
        if not self.input_focused and _is_typing(key):
            # The conversation has no use for a character: it goes to the input, which
            # takes the focus, instead of being dropped.
            self.focus_input(True)
        before = (self.input.edit_text, self.input.edit_pos)
        result: str | None = super().keypress(size, key)
        if self.input_focused and (self.input.edit_text, self.input.edit_pos) != before:
            self.refresh_list()
        return result

    def _list_key(self, size: Size, key: str) -> bool:
        if key in _LIST_MOVES:
            self.list.move(_LIST_MOVES[key])
            return True
        if key in ("page up", "page down"):
            step = self.list.wanted_rows()
            self.list.move(-step if key == "page up" else step)
            return True
        if key == "esc":
            self.dismiss_list()
            return True
        if key in ("tab", "enter"):
            text = self.input.edit_text
            commands = self.session.conversation.commands
            if key == "enter" and self.list_kind == "/" and is_complete_command(text, commands):
                return False
            current = self.list.current()
            if current is None:
                return key == "tab"
            if key == "enter" and _already_taken(text, current):
                return False
            self.take(current)
            return True
        return False

    def mouse_event(
        self, size: Size, event: str, button: int, col: int, row: int, focus: bool
    ) -> bool | None:
        if event == "mouse press" and button in (4, 5) and len(size) == 2:
            columns, rows = box_size(size)
            body_rows = rows - self._rule_rows - self._input_height
            if row < body_rows:
                return bool(
                    self.view.mouse_event((columns, body_rows), event, button, col, row, focus)
                )
        handled: bool | None = super().mouse_event(size, event, button, col, row, focus)
        return handled

    def close(self) -> Deferred[Any]:
        """Stop observing and stop the agent."""
        self.session.conversation.unsubscribe(self)
        self.view.detach()
        return self.session.close()


def _is_typing(key: str) -> bool:
    """Whether ``key`` is a character typed (urwid names other keys with words)."""
    return len(key) == 1 and key.isprintable()
