"""The contract shared by the reference agent's tools and the turn loop that runs them.

A tool is a small object with a name, an ACP ``ToolKind`` string, a description and a JSON
schema for the model, plus three pure functions of its arguments (``title``, ``locations``,
``needs_permission``) and ``run``, which does the work and returns a Deferred
:class:`ToolResult`.  ``run`` never raises for bad arguments or I/O errors: it returns a
failed result whose ``output`` tells the model what went wrong.  Cancelling the Deferred stops
the work and fails it with :class:`twisted.internet.defer.CancelledError`.

File tools read and write through an :class:`IFileAccess`: :class:`DiskFileAccess` (the local
disk) by default, or the client's file system when the turn loop provides one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import attrs
from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.python.failure import Failure
from zope.interface import Interface, implementer

if TYPE_CHECKING:
    from acpkit_agent.tools.plan_state import PlanEntry, PlanState

__all__ = [
    "Diff",
    "DiskFileAccess",
    "IFileAccess",
    "Tool",
    "ToolContext",
    "ToolResult",
    "cancellable",
    "resolve_path",
]

_T = TypeVar("_T")


class IFileAccess(Interface):
    """How file tools read and write text files (the local disk or the client's file system).

    Paths given to these methods are absolute.  A missing file MUST fail the read with
    :class:`FileNotFoundError` (tools rely on it to tell "new file" from "unreadable file").
    """

    def read_text(path: str, line: int | None = None, limit: int | None = None) -> Deferred[str]:
        """Read a UTF-8 text file, optionally from 1-based ``line`` and at most ``limit`` lines."""

    def write_text(path: str, content: str) -> Deferred[None]:
        """Write ``content`` to a file, replacing it (creating it when it does not exist)."""


@implementer(IFileAccess)
@attrs.define
class DiskFileAccess:
    """:class:`IFileAccess` on the local disk: UTF-8, line endings kept exactly as stored.

    Writing creates missing parent directories.  Errors are the usual :class:`OSError`
    subclasses and :class:`UnicodeDecodeError`, delivered as failed Deferreds.
    """

    encoding: str = "utf-8"

    def read_text(
        self, path: str, line: int | None = None, limit: int | None = None
    ) -> Deferred[str]:
        """Read ``path``; ``line`` is 1-based, ``limit`` counts lines."""
        try:
            return succeed(self._read(path, line, limit))
        except Exception as error:
            return fail(error)

    def write_text(self, path: str, content: str) -> Deferred[None]:
        """Write ``content`` to ``path``, creating parent directories as needed."""
        try:
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            with open(path, "w", encoding=self.encoding, newline="") as stream:
                stream.write(content)
        except Exception as error:
            return fail(error)
        return succeed(None)

    def _read(self, path: str, line: int | None, limit: int | None) -> str:
        with open(path, encoding=self.encoding, newline="") as stream:
            if line is None and limit is None:
                return stream.read()
            first = max(line or 1, 1)
            kept: list[str] = []
            for number, text in enumerate(stream, start=1):
                if number < first:
                    continue
                if limit is not None and len(kept) >= limit:
                    break
                kept.append(text)
            return "".join(kept)


@attrs.define
class ToolContext:
    """What a tool may use while it runs, provided by the turn loop for one session."""

    cwd: str
    """The session's absolute working directory; relative paths resolve against it."""
    files: IFileAccess
    """How file tools read and write (the client's file system or the local disk)."""
    reactor: Any
    """An ``IReactorProcess`` and ``IReactorTime`` provider (a real reactor or test fakes)."""
    plan: PlanState
    """The session's plan, maintained by the ``plan`` tool."""
    send_plan: Callable[[list[PlanEntry]], None]
    """Sends the ACP ``plan`` update; always called with the complete list of entries."""
    http_agent: Any | None = None
    """A ``treq.client.HTTPClient`` for ``fetch_content``; None builds one on ``reactor``."""
    progress: Callable[[str], None] | None = None
    """Shows a progress line in the running tool call (an ACP ``tool_call_update`` whose
    content is that text); None where nobody watches (tests, replays)."""


@attrs.frozen
class Diff:
    """A file change, for the ACP ``diff`` tool-call content (absolute path, whole texts)."""

    path: str
    old_text: str | None
    """None when the file is new."""
    new_text: str


@attrs.frozen
class ToolResult:
    """The outcome of one tool call."""

    output: str
    """What the model receives; also carried as ``rawOutput.output``."""
    failed: bool = False
    diff: Diff | None = None
    """Set by ``write_file`` and ``edit_file`` when they changed a file."""
    exit_status: int | None = None
    """The command's exit status (``bash`` only; None when killed by a signal or not run)."""
    diffs: tuple[Diff, ...] = ()
    """More changed files, after ``diff`` (a rename across files); each shown as a diff."""
    content: tuple[Any, ...] = ()
    """ACP ``ToolCallContent`` items the client sees instead of ``output`` as text (an MCP
    tool's images and resources); diffs, when any, are shown after them."""


class Tool(Protocol):
    """One model-callable tool (see the module docstring for the contract)."""

    name: str
    """The tool name the model calls, e.g. ``"bash"``."""
    kind: str
    """The ACP ``ToolKind`` string: ``execute``, ``read``, ``edit``, ``fetch``, ``think``…"""
    description: str
    """What the tool does, for the model."""
    parameters: Mapping[str, Any]
    """The JSON schema of the arguments, for the model."""

    # Optional attributes, read with getattr by the turn loop:
    #   always_asks: bool      -- ask permission even under ``yolo = true`` (an MCP server
    #                             configured with ``permissions = "ask"``); default False
    #   permission_key: str    -- the name the "always"/"never" answers are remembered
    #                             under (``lsp`` rename shares ``edit_file``'s); default name
    #   kind_for(args) -> str  -- the kind of one call, when it depends on the arguments
    #                             (``lsp``: ``edit`` for rename, ``read``/``search``
    #                             otherwise); default ``kind``

    def title(self, args: Mapping[str, Any]) -> str:
        """The tool-call title, e.g. ``"bash: ls -l"``; never raises."""
        ...

    def locations(self, args: Mapping[str, Any], cwd: str) -> list[str]:
        """The absolute paths the call concerns (may be empty); never raises."""
        ...

    def needs_permission(self, args: Mapping[str, Any]) -> bool:
        """Whether the call must be allowed by the user first; never raises."""
        ...

    def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Deferred[ToolResult]:
        """Do the work; failures are failed results, cancellation stops the work."""
        ...


def resolve_path(path: str, cwd: str) -> str:
    """Make ``path`` absolute: expand ``~``, resolve relative paths against ``cwd``, normalise."""
    expanded = os.path.expanduser(path)
    if not os.path.isabs(expanded):
        expanded = os.path.join(cwd, expanded)
    return os.path.normpath(expanded)


class ArgumentError(ValueError):
    """A tool argument is missing or has the wrong type; the message is meant for the model."""


def text_arg(args: Mapping[str, Any], name: str, *, required: bool = True) -> str | None:
    """The string argument ``name``; raises :class:`ArgumentError` when invalid."""
    value = args.get(name)
    if value is None:
        if required:
            raise ArgumentError(f"missing required argument {name!r} (a string)")
        return None
    if not isinstance(value, str):
        raise ArgumentError(f"argument {name!r} must be a string, got {type(value).__name__}")
    return value


def int_arg(args: Mapping[str, Any], name: str, *, minimum: int) -> int | None:
    """The optional integer argument ``name`` (at least ``minimum``); raises ArgumentError."""
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentError(f"argument {name!r} must be an integer, got {value!r}")
    if value < minimum:
        raise ArgumentError(f"argument {name!r} must be at least {minimum}, got {value}")
    return value


def number_arg(args: Mapping[str, Any], name: str) -> float | None:
    """The optional positive number argument ``name``; raises ArgumentError."""
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise ArgumentError(f"argument {name!r} must be a number, got {value!r}")
    if value <= 0:
        raise ArgumentError(f"argument {name!r} must be positive, got {value!r}")
    return float(value)


def title_text(args: Mapping[str, Any], name: str) -> str:
    """The argument ``name`` as shown in a title (empty when absent, ``str()`` otherwise)."""
    value = args.get(name)
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def describe_error(error: BaseException) -> str:
    """A one-line description of an I/O error, without the Python exception noise."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    if isinstance(error, UnicodeDecodeError):
        return "the file is not valid UTF-8 text"
    text = str(error).strip() or type(error).__name__
    return " ".join(text.split())


def cancellable(work: Deferred[_T]) -> Deferred[_T]:
    """Wrap ``work`` so that cancelling fails with CancelledError at once, whatever ``work`` does.

    Cancelling the returned Deferred cancels ``work`` (which stops the I/O it waits on), but
    ``work`` may still end with a value or another error (a coroutine that catches errors, a
    client request failing with its own error); that late outcome is dropped.
    """

    def cancel(result: Deferred[_T]) -> None:
        result.errback(Failure(CancelledError()))
        work.cancel()

    result: Deferred[_T] = Deferred(cancel)

    def forward(outcome: _T | Failure) -> None:
        if not result.called:
            if isinstance(outcome, Failure):
                result.errback(outcome)
            else:
                result.callback(outcome)

    work.addBoth(forward)
    return result
