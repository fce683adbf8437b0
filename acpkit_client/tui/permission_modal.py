"""The permission modal, and the :class:`IPermissionPrompt` that opens it.

The modal names the tool call as the agent announced it (title, kind, the command, the
files and the diff: :func:`~acpkit_client.permissions.describe_tool_call` of the call the
session completed with what was announced for its id) and offers the agent's own options
as buttons. ``Esc`` rejects once: the ``reject_once`` option (else no answer, which the
library turns into a reject, never an allow); it never answers ``cancelled``, which is
reserved for a cancelled turn. When the turn is cancelled while the modal is open, the
request's Deferred is cancelled and the modal closes.

The application sizes the modal (:meth:`PermissionModal.rows_wanted`, cut to the screen);
when it is shorter than the request, the tool call's lines scroll (``↑ ↓ PgUp PgDn``) and
the buttons stay in view.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, cast

import urwid
from twisted.internet.defer import Deferred
from zope.interface import implementer

from acpkit import schema
from acpkit_client.interfaces import IPermissionPrompt
from acpkit_client.permissions import describe_tool_call, option_of_kind
from acpkit_client.tui import glyphs
from acpkit_client.tui.sizes import Size, box_size

__all__ = ["ModalHost", "ModalPermissionPrompt", "PermissionModal", "describe_tool_call"]

#: At most this many lines of a command or diff are shown in the modal.
MAX_DETAIL_LINES = 12

#: Keys that scroll the tool call's lines when the modal is too short for them.
_SCROLL_KEYS = ("up", "down", "page up", "page down")


class ModalHost(Protocol):
    """Where modals are shown (the application)."""

    def open_modal(self, widget: urwid.Widget) -> None:
        """Show ``widget`` over everything and give it the keys."""

    def close_modal(self, widget: urwid.Widget) -> None:
        """Take ``widget`` away."""


def _detail_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if len(lines) > MAX_DETAIL_LINES:
        rest = len(lines) - MAX_DETAIL_LINES
        lines = [*lines[:MAX_DETAIL_LINES], f"{glyphs.current().cut} {rest} more lines"]
    return lines


class PermissionModal(urwid.WidgetWrap[urwid.Widget]):
    """One permission request: the tool call and a button per option."""

    def __init__(
        self,
        request: schema.RequestPermissionRequest,
        agent_name: str,
        on_answer: Callable[[str | None], None],
    ) -> None:
        self.request = request
        self._on_answer = on_answer
        rows: list[urwid.Widget] = []
        for label, text in describe_tool_call(request.tool_call):
            if label in ("command", "diff", "content"):
                rows.append(urwid.Text(("modal", f"{label}:")))
                for line in _detail_lines(text):
                    rows.append(urwid.Text(_diff_markup(line) if label == "diff" else line))
            else:
                rows.append(urwid.Text(("modal", f"{label}: {text}")))
        rows.append(urwid.Divider())
        self.buttons: list[urwid.Button] = []
        for option in request.options:
            button = urwid.Button(option.name)
            urwid.connect_signal(button, "click", self._clicked, user_args=[option.option_id])
            self.buttons.append(button)
        mapped = [urwid.AttrMap(b, "button", "button.focus") for b in self.buttons]
        width = max((len(option.name) for option in request.options), default=4) + 4
        grid = urwid.GridFlow(mapped, width, 2, 0, "left")
        self._grid, self._cell_width = grid, width
        # Layout (any size): the tool call's lines scroll in a list that gets the rows
        # left over; the buttons and the Esc line keep theirs and the focus, so an answer
        # can always be seen and given, even on a screen shorter than the request.
        self._detail_rows = rows
        self._details = urwid.ListBox(urwid.SimpleListWalker(cast(Any, rows)))
        self._actions = urwid.Pile([grid, urwid.Text(("modal", "Esc: reject once"))])
        self._pile = urwid.Pile([("weight", 1, self._details), ("pack", self._actions)])
        self._pile.focus_position = 1
        box = urwid.LineBox(self._pile, title=f"{agent_name} asks permission")
        super().__init__(urwid.AttrMap(box, "modal"))
        self.answered = False

    def _fit_cells(self, columns: int) -> None:
        """Narrow the buttons' cells to the modal's inside when it is narrower than one."""
        cell_width = max(1, min(self._cell_width, columns - 2))
        if self._grid.cell_width != cell_width:
            self._grid.cell_width = cell_width

    def rows_wanted(self, width: int) -> int:
        """Rows the modal needs to show everything at ``width`` columns (frame included)."""
        self._fit_cells(width)
        inner = (max(1, width - 2),)
        details = sum(row.pack(inner)[1] for row in self._detail_rows)
        return details + int(self._actions.rows(inner)) + 2

    def _scroll_details(self, size: Size, key: str) -> None:
        """Scroll the tool call's lines (when they do not all fit)."""
        columns, rows = box_size(size)
        inner = (max(1, columns - 2), max(0, rows - 2))
        shown = self._pile.get_item_rows(inner, True)[0]
        if shown:
            self._details.keypress((inner[0], shown), key)

    def render(self, size: Size, focus: bool = False) -> urwid.Canvas:
        self._fit_cells(box_size(size)[0])
        return super().render(size, focus)

    def mouse_event(
        self, size: Size, event: str, button: int, col: int, row: int, focus: bool
    ) -> bool | None:
        self._fit_cells(box_size(size)[0])
        handled: bool | None = super().mouse_event(size, event, button, col, row, focus)
        return handled

    def _clicked(self, option_id: str, _button: urwid.Button) -> None:
        self.answer(option_id)

    def answer(self, option_id: str | None) -> None:
        """Answer once with ``option_id`` (None: no answer, i.e. a reject)."""
        if self.answered:
            return
        self.answered = True
        self._on_answer(option_id)

    def reject_once(self) -> None:
        """What ``Esc`` does: the ``reject_once`` option, else no answer."""
        self.answer(option_of_kind(self.request.options, "reject_once"))

    def keypress(self, size: Size, key: str) -> str | None:
        if key == "esc":
            self.reject_once()
            return None
        if key in _SCROLL_KEYS:
            self._scroll_details(size, key)
            return None
        self._fit_cells(box_size(size)[0])
        result: str | None = super().keypress(size, key)
        if result in ("left", "right", "up", "down", "tab"):
            return None
        return result


def _diff_markup(line: str) -> tuple[str, str] | str:
    if line.startswith(("+++", "---", "@@")):
        return ("diff.hunk", line)
    if line.startswith("+"):
        return ("diff.add", line)
    if line.startswith("-"):
        return ("diff.del", line)
    return line


@implementer(IPermissionPrompt)
class ModalPermissionPrompt:
    """Answers ``session/request_permission`` by asking the user in a modal."""

    def __init__(self, host: ModalHost, agent_name: str) -> None:
        self.host = host
        self.agent_name = agent_name
        #: The modals currently open for this prompt.
        self.open: list[PermissionModal] = []

    def choose(self, request: schema.RequestPermissionRequest) -> Deferred[str | None]:
        """Open a modal; fires with the chosen option id (or None) when the user answers."""
        modal: PermissionModal | None = None

        def cancelled(deferred: Deferred[str | None]) -> None:
            if modal is not None and not modal.answered:
                modal.answered = True
                self._close(modal)

        result: Deferred[str | None] = Deferred(cancelled)

        def answered(option_id: str | None) -> None:
            assert modal is not None
            self._close(modal)
            if not result.called:
                result.callback(option_id)

        modal = PermissionModal(request, self.agent_name, answered)
        self.open.append(modal)
        self.host.open_modal(modal)
        return result

    def _close(self, modal: PermissionModal) -> None:
        if modal in self.open:
            self.open.remove(modal)
        self.host.close_modal(modal)
