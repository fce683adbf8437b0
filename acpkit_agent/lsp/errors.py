"""
The failures of bob's language-server client, each with a one-line message that can be
shown to the model as it is.
"""

from __future__ import annotations

__all__ = [
    "LanguageServerCrashed",
    "LanguageServerError",
    "LanguageServerRequestError",
    "LanguageServerTimeout",
    "NoLanguageServer",
]


class LanguageServerError(Exception):
    """Base class: ``str(error)`` is one line saying what went wrong."""


class NoLanguageServer(LanguageServerError):
    """
    :meth:`LanguageServers.server_for` cannot give a server: none is configured for the
    file, its command is not found, it crashed while starting (or failed too often), or
    it refused ``initialize`` or did not answer it in time.
    """


class LanguageServerCrashed(LanguageServerError):
    """The server process ended (or closed its output) before answering."""


class LanguageServerTimeout(LanguageServerError):
    """The server did not answer (or publish diagnostics) in time."""


class LanguageServerRequestError(LanguageServerError):
    """The server answered a request with a JSON-RPC error (``code``, ``message``)."""

    def __init__(self, text: str, code: int, message: str) -> None:
        super().__init__(text)
        self.code = code
        self.message = message
