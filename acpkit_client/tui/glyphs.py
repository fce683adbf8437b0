"""
The characters the terminal UI draws with, Unicode or plain ASCII, chosen by the
terminal's locale.

A terminal whose locale is not UTF-8 (``LC_ALL=C``, ``LANG=en_US.ISO-8859-1``) gets no
UTF-8 bytes: :func:`use_terminal_encoding` (called once at start) tells urwid to encode
for ASCII, which draws frames with the terminal's line-drawing set (VT100 special
graphics) and writes ``?`` for any other character outside ASCII (an agent's ``é``), and
the UI's own glyphs become the ASCII ones below.  Python's UTF-8 mode (on by default in
the C locale) makes ``locale.getpreferredencoding()`` say UTF-8 there, so the terminal's
codeset is read from the locale itself (``nl_langinfo(CODESET)``).

===============  =========  =======
glyph            Unicode    ASCII
===============  =========  =======
spinner          ``⠋⠙⠹…``   ``|/-\\``
tile/maximise    ``■``      ``#``
cut text         ``…``      ``~``
tool call        ``⚙``      ``*``
===============  =========  =======
"""

from __future__ import annotations

import locale

import attrs

__all__ = [
    "ASCII",
    "UNICODE",
    "Glyphs",
    "current",
    "terminal_is_utf8",
    "use",
    "use_terminal_encoding",
]


@attrs.frozen
class Glyphs:
    """One set of the UI's characters."""

    #: The turn spinner's frames.
    spinner: str
    #: The tile/maximise button of a window's title bar (``[■]``).
    toggle: str
    #: The mark of a cut text (one column).
    cut: str
    #: The mark before a tool call's heading.
    tool: str


UNICODE = Glyphs(spinner="⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏", toggle="■", cut="…", tool="⚙")
ASCII = Glyphs(spinner="|/-\\", toggle="#", cut="~", tool="*")

_current = UNICODE


def current() -> Glyphs:
    """The glyphs in use (Unicode until :func:`use_terminal_encoding` says otherwise)."""
    return _current


def use(glyphs: Glyphs) -> None:
    """Draw with ``glyphs`` from now on."""
    global _current
    _current = glyphs


def terminal_is_utf8(codeset: str | None = None) -> bool:
    """Whether the terminal's locale (or ``codeset``) is UTF-8."""
    if codeset is None:
        try:
            locale.setlocale(locale.LC_CTYPE, "")
        except locale.Error:
            return False  # a locale the C library does not have: assume the worst
        codeset = locale.nl_langinfo(locale.CODESET)
    return codeset.replace("-", "").replace("_", "").lower() == "utf8"


def use_terminal_encoding(codeset: str | None = None) -> Glyphs:
    """Choose the glyphs, and urwid's output encoding, for the terminal; return them."""
    if terminal_is_utf8(codeset):
        use(UNICODE)
        return UNICODE
    import urwid

    urwid.set_encoding("ascii")
    use(ASCII)
    return ASCII
