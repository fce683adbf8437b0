"""The status bar: a transient message on the left, the front window's token count on the right.

The token count is the front window's last ``usage_update`` as ``used / size`` (``used``
alone when the agent gave no context size). A message
(e.g. "3 lines copied") stays :data:`MESSAGE_SECONDS` seconds on the injected clock.
"""

from __future__ import annotations

from typing import Any

import urwid
from twisted.internet.interfaces import IDelayedCall

from acpkit_client.conversation import Usage

__all__ = ["MESSAGE_SECONDS", "StatusBar", "format_usage"]

#: How long a transient message stays.
MESSAGE_SECONDS = 4.0


def format_usage(usage: Usage | None) -> str:
    """
    ``used / size tokens``; ``used tokens`` when the agent gave no context size (0);
    empty when no usage was reported.
    """
    if usage is None:
        return ""
    if usage.size <= 0:
        return f"{usage.used:,} tokens"
    return f"{usage.used:,} / {usage.size:,} tokens"


class StatusBar(urwid.WidgetWrap[urwid.Widget]):
    """One row at the bottom of the screen."""

    def __init__(self, clock: Any) -> None:
        self._clock = clock
        self._left = urwid.Text("", wrap="clip")
        self._right = urwid.Text("", align="right", wrap="clip")
        self._expiry: IDelayedCall | None = None
        columns = urwid.Columns([self._left, ("pack", self._right)], dividechars=1)
        super().__init__(urwid.AttrMap(columns, "status"))
        #: The message shown, if any.
        self.message = ""
        self.hint = ""

    def set_usage(self, usage: Usage | None) -> None:
        """Show the front window's last usage (None: nothing)."""
        self._right.set_text(format_usage(usage) + " ")

    def set_hint(self, hint: str) -> None:
        """The text shown when no message is (key hints)."""
        self.hint = hint
        if not self.message:
            self._left.set_text(hint)

    def show_message(self, message: str) -> None:
        """Show ``message`` for :data:`MESSAGE_SECONDS` seconds."""
        self.message = message
        self._left.set_text(("status.message", f" {message}"))
        if self._expiry is not None and self._expiry.active():
            self._expiry.cancel()
        self._expiry = self._clock.callLater(MESSAGE_SECONDS, self._expire)

    def _expire(self) -> None:
        self.message = ""
        self._expiry = None
        self._left.set_text(self.hint)
