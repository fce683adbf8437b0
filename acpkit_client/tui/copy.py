"""Copying from a conversation: whole lines, regions, and the two clipboards.

- :func:`region_span`: with nothing selected, the lines of the region under the cursor.
- :func:`copied_text`: the text of lines, display indentation already removed.
- :class:`Clipboards`: the client's own clipboard (pasted with ``Shift-Ins``) and the
  system one through OSC 52 (``ESC ] 52 ; c ; <base64> BEL`` written to the terminal);
  nothing checks that the terminal accepted the second.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence

from acpkit_client.tui.render import Line

__all__ = ["Clipboards", "copied_text", "osc52_sequence", "region_span"]


def region_span(lines: Sequence[Line], index: int) -> tuple[int, int]:
    """The ``[start, end)`` of the region that line ``index`` belongs to."""
    if not 0 <= index < len(lines):
        raise IndexError(f"line {index} is outside the conversation ({len(lines)} lines)")
    region = lines[index].region
    start = index
    while start > 0 and lines[start - 1].region == region:
        start -= 1
    end = index + 1
    while end < len(lines) and lines[end].region == region:
        end += 1
    return start, end


def region_text(lines: Sequence[Line], index: int) -> list[str]:
    """The lines a copy with nothing selected takes: the cursor's region (fences left out)."""
    start, end = region_span(lines, index)
    chosen = [line.text for line in lines[start:end] if line.in_region_copy]
    if not chosen:
        chosen = [line.text for line in lines[start:end]]
    return chosen


def copied_text(texts: Sequence[str]) -> str:
    """Join copied lines; a copy of lines ends with a newline."""
    return "".join(text + "\n" for text in texts)


def osc52_sequence(text: str) -> str:
    """The OSC 52 sequence that puts ``text`` on the system clipboard."""
    encoded = base64.b64encode(text.encode("utf-8")).decode("ascii")
    return f"\x1b]52;c;{encoded}\x07"


class Clipboards:
    """The client's own clipboard, and the system one through the terminal (OSC 52)."""

    def __init__(self, write_terminal: Callable[[str], None] | None = None) -> None:
        #: What ``Shift-Ins`` pastes.
        self.text = ""
        self._write_terminal = write_terminal

    def copy(self, text: str) -> None:
        """Put ``text`` on both clipboards."""
        self.text = text
        if self._write_terminal is not None:
            self._write_terminal(osc52_sequence(text))
