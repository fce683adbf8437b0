"""The seams a front end (terminal UI, editor plugin, bot) plugs into the client library.

- :class:`IBufferProvider`: where ``fs/read_text_file`` and ``fs/write_text_file`` (and
  ``@`` mentions) read and write: the editor's open buffers first, the disk otherwise.
  :class:`acpkit_client.fs.DiskBufferProvider` is the default (no buffers, only the disk).
- :class:`IPermissionPrompt`: answers ``session/request_permission`` with one of the
  agent's own options (or no answer). :mod:`acpkit_client.permissions` has the policies.
- :class:`IFormPrompt`: answers a form elicitation (``elicitation/create``, ``form``
  mode) by asking the user; with one, the client announces ``elicitation.form``.
- :class:`IConversationObserver`: told about every change of a
  :class:`acpkit_client.conversation.Conversation`, so that a UI redraws incrementally.
- :class:`IAgentObserver`: told when an agent window's agent changes state (started,
  ready, failed, exited).
"""

from __future__ import annotations

from typing import Any

from zope.interface import Interface

__all__ = [
    "IAgentObserver",
    "IBufferProvider",
    "IConversationObserver",
    "IFormPrompt",
    "IPermissionPrompt",
]


class IBufferProvider(Interface):
    """Text of files as the editor sees them: open buffers first, the disk otherwise."""

    def read_text(path: str) -> str:
        """
        The text of the absolute ``path``: the open buffer's text when the file is open
        and modified, the file on disk otherwise.  Raises ``FileNotFoundError`` when
        there is neither, ``IsADirectoryError`` for a directory, ``UnicodeDecodeError``
        for a file that is not UTF-8 text, ``OSError`` for other failures.
        """

    def write_text(path: str, content: str) -> None:
        """
        Replace the text of the absolute ``path`` with ``content``: into the buffer when
        the file is open, onto the disk otherwise (creating the file).  Raises ``OSError``
        when that fails.
        """


class IPermissionPrompt(Interface):
    """Chooses an answer to one ``session/request_permission``."""

    def choose(request: Any) -> Any:
        """
        Given the :class:`acpkit.schema.RequestPermissionRequest` (the tool call and the
        agent's own ``options``), return the chosen ``optionId`` or ``None`` for "no
        answer" (then a reject option is chosen, never an allow one); or a Deferred or
        coroutine of that.  An id that is not among the options counts as no answer.
        """


class IFormPrompt(Interface):
    """Asks the user the fields of one form elicitation."""

    def answer(message: str, fields: Any) -> Any:
        """
        Given the agent's ``message`` and the form's fields (a list of
        :class:`acpkit_client.forms.FormField`), return the answers, a dict of field
        name to value (``accept``), or ``"decline"`` or ``"cancel"``; or a Deferred or
        coroutine of that.
        """


class IConversationObserver(Interface):
    """Told about changes of one conversation (all calls happen on the reactor thread)."""

    def entry_added(entry: Any) -> None:
        """A new entry was appended at the end of the conversation."""

    def entry_changed(entry: Any) -> None:
        """An existing entry changed (text appended, tool call updated, plan replaced)."""

    def commands_changed(commands: Any) -> None:
        """The agent announced a new list of commands (a sequence of ``CommandInfo``)."""

    def usage_changed(usage: Any) -> None:
        """A new ``usage_update`` arrived (a ``Usage``: ``used`` and ``size``)."""

    def turn_changed(running: bool) -> None:
        """A turn started (``True``) or ended (``False``)."""


class IAgentObserver(Interface):
    """Told when the agent behind an agent window changes state."""

    def agent_state_changed(run: Any) -> None:
        """``run`` (an :class:`acpkit_client.agents.AgentRun`) has a new ``state``."""
