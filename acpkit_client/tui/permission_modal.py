"""The permission modal, and the :class:`IPermissionPrompt` that opens it.

The modal names the tool call (title, kind, and the command or the diff it carries) and
offers the agent's own options as buttons. ``Esc`` rejects once: the ``reject_once``
option (else no answer, which the library turns into a reject, never an allow); it never
answers ``cancelled``, which is reserved for a cancelled turn. When the turn is cancelled
while the modal is open, the request's Deferred is cancelled and the modal closes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

import urwid
from twisted.internet.defer import Deferred
from zope.interface import implementer

from acpkit import schema
from acpkit_client.conversation import render_tool_content
from acpkit_client.interfaces import IPermissionPrompt
from acpkit_client.permissions import option_of_kind
from acpkit_client.tui.sizes import Size

__all__ = ["ModalHost", "ModalPermissionPrompt", "PermissionModal", "describe_tool_call"]

#: At most this many lines of a command or diff are shown in the modal.
MAX_DETAIL_LINES = 12


class ModalHost(Protocol):
    """Where modals are shown (the application)."""

    def open_modal(self, widget: urwid.Widget) -> None:
        """Show ``widget`` over everything and give it the keys."""

    def close_modal(self, widget: urwid.Widget) -> None:
        """Take ``widget`` away."""


def describe_tool_call(tool_call: Any) -> list[tuple[str, str]]:
    """``(label, text)`` pairs naming a tool call: title, kind, command, diff or content."""
    described: list[tuple[str, str]] = []
    title = getattr(tool_call, "title", None)
    described.append(
        ("tool", str(title) if title else str(getattr(tool_call, "tool_call_id", "?")))
    )
    kind = getattr(tool_call, "kind", None)
    if kind is not None:
        described.append(("kind", str(kind)))
    raw_input = getattr(tool_call, "raw_input", None)
    if isinstance(raw_input, dict) and isinstance(raw_input.get("command"), str):
        described.append(("command", raw_input["command"]))
    elif raw_input is not None:
        described.append(("input", json.dumps(raw_input, ensure_ascii=False, sort_keys=True)))
    content = getattr(tool_call, "content", None)
    if content:
        text = render_tool_content(content)
        has_diff = any(isinstance(item, schema.FileEditToolCallContent) for item in content)
        if text:
            described.append(("diff" if has_diff else "content", text))
    return described


def _detail_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if len(lines) > MAX_DETAIL_LINES:
        rest = len(lines) - MAX_DETAIL_LINES
        lines = [*lines[:MAX_DETAIL_LINES], f"… {rest} more lines"]
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
        rows.append(urwid.GridFlow(mapped, width, 2, 0, "left"))
        rows.append(urwid.Text(("modal", "Esc: reject once")))
        pile = urwid.Pile(rows)
        pile.focus_position = len(rows) - 2
        box = urwid.LineBox(pile, title=f"{agent_name} asks permission")
        super().__init__(urwid.AttrMap(box, "modal"))
        self.answered = False

    def rows_wanted(self, width: int) -> int:
        """Rows the modal needs at ``width``."""
        return int(self._w.rows((width,)))  # type: ignore[attr-defined]

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
