"""The file tools: ``read_file``, ``write_file`` and ``edit_file``.

They go through ``ctx.files`` (the client's file system or the local disk), resolve relative
paths against the session cwd and ``~`` against the home directory, and turn every I/O error
into a failed result with a message for the model.  ``write_file`` and ``edit_file`` return a
:class:`~acpkit_agent.tools.base.Diff` of the whole file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from twisted.internet.defer import CancelledError, Deferred

from acpkit_agent.tools.base import (
    ArgumentError,
    Diff,
    ToolContext,
    ToolResult,
    cancellable,
    describe_error,
    int_arg,
    resolve_path,
    text_arg,
    title_text,
)

__all__ = ["EditFileTool", "ReadFileTool", "WriteFileTool", "count_occurrences"]


def _path_location(args: Mapping[str, Any], cwd: str, name: str = "path") -> list[str]:
    value = args.get(name)
    if isinstance(value, str) and value:
        return [resolve_path(value, cwd)]
    return []


def _path_arg(args: Mapping[str, Any], cwd: str) -> str:
    path = text_arg(args, "path")
    assert path is not None
    if not path.strip():
        raise ArgumentError("argument 'path' is empty")
    return resolve_path(path, cwd)


def _read_error(tool: str, path: str, error: Exception) -> str:
    if isinstance(error, FileNotFoundError):
        return f"{tool}: no such file: {path}"
    if isinstance(error, IsADirectoryError):
        return f"{tool}: {path} is a directory, not a file"
    if isinstance(error, PermissionError):
        return f"{tool}: permission denied reading {path}"
    return f"{tool}: cannot read {path}: {describe_error(error)}"


def _write_error(tool: str, path: str, error: Exception) -> str:
    if isinstance(error, PermissionError):
        return f"{tool}: permission denied writing {path}"
    if isinstance(error, IsADirectoryError):
        return f"{tool}: {path} is a directory, not a file"
    return f"{tool}: cannot write {path}: {describe_error(error)}"


def _line_count(text: str) -> int:
    return len(text.splitlines())


def count_occurrences(text: str, needle: str) -> int:
    """How many times ``needle`` occurs in ``text``, overlapping occurrences included."""
    count = 0
    start = text.find(needle)
    while start != -1:
        count += 1
        start = text.find(needle, start + 1)
    return count


@attrs.define
class ReadFileTool:
    """Reads a text file, whole or from a 1-based ``line`` for ``limit`` lines, with a size cap."""

    max_chars: int = 256 * 1024
    """Longer contents are cut at a line boundary, with a marker saying how to read on."""

    name: str = attrs.field(default="read_file", init=False)
    kind: str = attrs.field(default="read", init=False)
    description: str = attrs.field(
        default=(
            "Read a UTF-8 text file. 'path' is absolute, relative to the session's working "
            "directory, or starts with ~. 'line' (1-based) and 'limit' (a number of lines) read "
            "part of a long file."
        ),
        init=False,
    )
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The file to read."},
                "line": {"type": "integer", "minimum": 1, "description": "First line (1-based)."},
                "limit": {"type": "integer", "minimum": 1, "description": "Lines to read."},
            },
            "required": ["path"],
            "additionalProperties": False,
        },
        init=False,
    )

    def title(self, args: Mapping[str, Any]) -> str:
        """``read_file: <path>``."""
        return f"read_file: {title_text(args, 'path')}"

    def locations(self, args: Mapping[str, Any], cwd: str) -> list[str]:
        """The file read, as an absolute path."""
        return _path_location(args, cwd)

    def needs_permission(self, args: Mapping[str, Any]) -> bool:
        """Never: reading is always allowed."""
        return False

    def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Deferred[ToolResult]:
        """Read the file through ``ctx.files``."""
        return cancellable(Deferred.fromCoroutine(self._run(ctx, args)))

    async def _run(self, ctx: ToolContext, args: Mapping[str, Any]) -> ToolResult:
        try:
            path = _path_arg(args, ctx.cwd)
            line = int_arg(args, "line", minimum=1)
            limit = int_arg(args, "limit", minimum=1)
        except ArgumentError as error:
            return ToolResult(output=f"read_file: {error}", failed=True)
        try:
            text = await ctx.files.read_text(path, line, limit)
        except CancelledError:
            raise
        except Exception as error:
            return ToolResult(output=_read_error("read_file", path, error), failed=True)
        if not text and (line or 1) > 1:
            return ToolResult(output=f"[{path} has no line {line}: it is shorter than that]")
        if not text:
            return ToolResult(output=f"[{path} is empty]")
        return ToolResult(output=self._capped(text, line or 1))

    def _capped(self, text: str, first_line: int) -> str:
        if len(text) <= self.max_chars:
            return text
        cut = text.rfind("\n", 0, self.max_chars) + 1
        if cut == 0:
            rest = len(text) - self.max_chars
            return (
                f"{text[: self.max_chars]}\n[… {rest} more characters not shown: line "
                f"{first_line} alone is longer than {self.max_chars} characters …]"
            )
        shown = text[:cut]
        next_line = first_line + shown.count("\n")
        rest = len(text) - cut
        return (
            f"{shown}[… {rest} more characters not shown; "
            f"read on with line={next_line} and a limit …]"
        )


@attrs.define
class WriteFileTool:
    """Writes a whole text file (creating it and its directories), returning the diff."""

    name: str = attrs.field(default="write_file", init=False)
    kind: str = attrs.field(default="edit", init=False)
    description: str = attrs.field(
        default=(
            "Create or overwrite a UTF-8 text file with 'content'. Parent directories are "
            "created. To change part of an existing file, prefer edit_file."
        ),
        init=False,
    )
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The file to write."},
                "content": {"type": "string", "description": "The complete new content."},
            },
            "required": ["path", "content"],
            "additionalProperties": False,
        },
        init=False,
    )

    def title(self, args: Mapping[str, Any]) -> str:
        """``write_file: <path>``."""
        return f"write_file: {title_text(args, 'path')}"

    def locations(self, args: Mapping[str, Any], cwd: str) -> list[str]:
        """The file written, as an absolute path."""
        return _path_location(args, cwd)

    def needs_permission(self, args: Mapping[str, Any]) -> bool:
        """Always: writing changes the user's files."""
        return True

    def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Deferred[ToolResult]:
        """Read the old text (for the diff), then write the new one through ``ctx.files``."""
        return cancellable(Deferred.fromCoroutine(self._run(ctx, args)))

    async def _run(self, ctx: ToolContext, args: Mapping[str, Any]) -> ToolResult:
        try:
            path = _path_arg(args, ctx.cwd)
            content = text_arg(args, "content")
        except ArgumentError as error:
            return ToolResult(output=f"write_file: {error}", failed=True)
        assert content is not None
        old_text: str | None
        try:
            old_text = await ctx.files.read_text(path)
        except CancelledError:
            raise
        except FileNotFoundError:
            old_text = None
        except Exception as error:
            message = _read_error("write_file", path, error)
            return ToolResult(output=f"{message}; nothing was written", failed=True)
        try:
            await ctx.files.write_text(path, content)
        except CancelledError:
            raise
        except Exception as error:
            return ToolResult(output=_write_error("write_file", path, error), failed=True)
        lines = _line_count(content)
        if old_text is None:
            summary = f"created {path} ({lines} lines, {len(content)} characters)"
        elif old_text == content:
            summary = f"wrote {path} ({lines} lines): the content was already identical"
        else:
            summary = f"wrote {path} ({lines} lines, {len(content)} characters)"
        return ToolResult(output=summary, diff=Diff(path, old_text, content))


@attrs.define
class EditFileTool:
    """Replaces one exact, unique occurrence of ``old_text`` by ``new_text`` in a file."""

    name: str = attrs.field(default="edit_file", init=False)
    kind: str = attrs.field(default="edit", init=False)
    description: str = attrs.field(
        default=(
            "Edit a text file by replacing 'old_text', which must occur exactly once in the "
            "file (copy it exactly, whitespace included, with enough surrounding lines to be "
            "unique), by 'new_text'."
        ),
        init=False,
    )
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The file to edit."},
                "old_text": {"type": "string", "description": "The exact text to replace."},
                "new_text": {"type": "string", "description": "The replacement text."},
            },
            "required": ["path", "old_text", "new_text"],
            "additionalProperties": False,
        },
        init=False,
    )

    def title(self, args: Mapping[str, Any]) -> str:
        """``edit_file: <path>``."""
        return f"edit_file: {title_text(args, 'path')}"

    def locations(self, args: Mapping[str, Any], cwd: str) -> list[str]:
        """The file edited, as an absolute path."""
        return _path_location(args, cwd)

    def needs_permission(self, args: Mapping[str, Any]) -> bool:
        """Always: editing changes the user's files."""
        return True

    def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Deferred[ToolResult]:
        """Read the file, check that ``old_text`` is unique, write the edited text."""
        return cancellable(Deferred.fromCoroutine(self._run(ctx, args)))

    async def _run(self, ctx: ToolContext, args: Mapping[str, Any]) -> ToolResult:
        try:
            path = _path_arg(args, ctx.cwd)
            old = text_arg(args, "old_text")
            new = text_arg(args, "new_text")
        except ArgumentError as error:
            return ToolResult(output=f"edit_file: {error}", failed=True)
        assert old is not None and new is not None
        if not old:
            return _refused("edit_file: 'old_text' is empty; to create a file use write_file")
        if old == new:
            return _refused("edit_file: 'old_text' and 'new_text' are identical; nothing to change")
        try:
            text = await ctx.files.read_text(path)
        except CancelledError:
            raise
        except FileNotFoundError:
            return _refused(f"edit_file: no such file: {path}; use write_file to create it")
        except Exception as error:
            return _refused(_read_error("edit_file", path, error))
        count = count_occurrences(text, old)
        if count == 0:
            return _refused(
                f"edit_file: old_text was not found in {path}; read the file again and copy "
                "the exact text to replace (whitespace and indentation included)"
            )
        if count > 1:
            return _refused(
                f"edit_file: old_text matches {count} times in {path}; include more "
                "surrounding lines to make it unique"
            )
        edited = text.replace(old, new, 1)
        try:
            await ctx.files.write_text(path, edited)
        except CancelledError:
            raise
        except Exception as error:
            return ToolResult(output=_write_error("edit_file", path, error), failed=True)
        line = text[: text.find(old)].count("\n") + 1
        removed, added = _line_count(old) or 1, _line_count(new)
        return ToolResult(
            output=f"edited {path}: replaced {removed} line(s) at line {line} with {added} line(s)",
            diff=Diff(path, text, edited),
        )


def _refused(message: str) -> ToolResult:
    return ToolResult(output=f"{message}; the file was not changed", failed=True)
