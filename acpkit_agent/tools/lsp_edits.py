"""
Applying a language server's ``WorkspaceEdit`` through an
:class:`~acpkit_agent.tools.base.IFileAccess` (the client's file system or the disk).

Two steps, so that a refusal changes nothing:

1. :func:`plan_workspace_edit` reads every file the edit touches and computes its new
   text in memory: ``documentChanges`` when present (applied in order, so a second edit
   of a file sees the first one's result), else ``changes``.  ``CreateFile`` is
   supported (an empty file, following ``overwrite`` / ``ignoreIfExists``);
   ``RenameFile`` and ``DeleteFile`` are refused (the client's file system has no rename
   or delete), as are snippet edits, non-``file:`` URIs, files outside the allowed root,
   a file that cannot be read, and edits that overlap.  Any refusal raises
   :class:`WorkspaceEditRefused` before anything is written.
2. :func:`write_changes` writes the changed files in order and stops at the first write
   that fails, saying which files were written and which were not.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import attrs
from lsprotocol import types as lsp
from twisted.internet.defer import CancelledError

from acpkit_agent.tools.base import IFileAccess, describe_error
from acpkit_agent.tools.lsp_positions import UTF16, EditError, PlainEdit, apply_text_edits
from acpkit_agent.tools.lsp_results import display_path, path_of_uri

__all__ = [
    "FileChange",
    "WorkspaceEditRefused",
    "WriteOutcome",
    "plan_workspace_edit",
    "write_changes",
]


class WorkspaceEditRefused(Exception):
    """The edit cannot be applied; the message says why, and nothing was changed."""


@attrs.frozen
class FileChange:
    """One file's change: its text before (None when the edit creates it) and after."""

    path: str
    old_text: str | None
    new_text: str
    edits: int
    """How many text edits changed it."""


@attrs.define
class _Working:
    old_text: str | None
    text: str
    edits: int = 0


def _inside(path: str, root: str) -> bool:
    root = os.path.normpath(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _plain(edit: lsp.TextEdit | lsp.AnnotatedTextEdit) -> PlainEdit:
    start, end = edit.range.start, edit.range.end
    return PlainEdit(start.line, start.character, end.line, end.character, edit.new_text)


async def plan_workspace_edit(
    edit: lsp.WorkspaceEdit,
    files: IFileAccess,
    *,
    root: str,
    encoding: str = UTF16,
) -> list[FileChange]:
    """
    The files ``edit`` changes, with their new texts (files left unchanged are omitted);
    raises :class:`WorkspaceEditRefused` (nothing written) when it cannot be applied.
    """
    working: dict[str, _Working] = {}

    def resolve(uri: str) -> str:
        path = path_of_uri(uri)
        if path is None:
            raise WorkspaceEditRefused(f"the edit names {uri}, which is not a local file")
        if not _inside(path, root):
            raise WorkspaceEditRefused(
                f"the edit would change {path}, outside the session's directory {root}"
            )
        return path

    async def current(path: str, *, missing_ok: bool = False) -> _Working | None:
        if path in working:
            return working[path]
        try:
            text = await files.read_text(path)
        except CancelledError:
            raise
        except FileNotFoundError:
            if missing_ok:
                return None
            raise WorkspaceEditRefused(
                f"the edit changes {display_path(path, root)}, which does not exist"
            ) from None
        except Exception as error:
            raise WorkspaceEditRefused(
                f"cannot read {display_path(path, root)}: {describe_error(error)}"
            ) from None
        working[path] = _Working(old_text=text, text=text)
        return working[path]

    async def text_edits(uri: str, edits: Sequence[object]) -> None:
        path = resolve(uri)
        plain: list[PlainEdit] = []
        for item in edits:
            if isinstance(item, lsp.SnippetTextEdit):
                raise WorkspaceEditRefused(
                    "the edit contains snippet edits, which bob cannot apply"
                )
            if isinstance(item, lsp.TextEdit | lsp.AnnotatedTextEdit):
                plain.append(_plain(item))
        state = await current(path)
        assert state is not None
        try:
            state.text = apply_text_edits(state.text, plain, encoding)
        except EditError as error:
            raise WorkspaceEditRefused(
                f"cannot apply the edit to {display_path(path, root)}: {error}"
            ) from None
        state.edits += len(plain)

    async def create(operation: lsp.CreateFile) -> None:
        path = resolve(operation.uri)
        options = operation.options or lsp.CreateFileOptions()
        state = await current(path, missing_ok=True)
        if state is None:
            working[path] = _Working(old_text=None, text="")
        elif options.overwrite:
            state.text = ""
        elif not options.ignore_if_exists:
            raise WorkspaceEditRefused(
                f"the edit creates {display_path(path, root)}, which already exists"
            )

    if edit.document_changes is not None:
        refused = [
            op for op in edit.document_changes if isinstance(op, lsp.RenameFile | lsp.DeleteFile)
        ]
        if refused:
            raise WorkspaceEditRefused(_file_operations(refused, root))
        for operation in edit.document_changes:
            if isinstance(operation, lsp.TextDocumentEdit):
                await text_edits(operation.text_document.uri, operation.edits)
            elif isinstance(operation, lsp.CreateFile):
                await create(operation)
    else:
        for uri, edits in (edit.changes or {}).items():
            await text_edits(uri, edits)
    return [
        FileChange(path, state.old_text, state.text, state.edits)
        for path, state in working.items()
        if state.old_text != state.text
    ]


def _file_operations(operations: Sequence[lsp.RenameFile | lsp.DeleteFile], root: str) -> str:
    shown: list[str] = []
    for op in operations:
        if isinstance(op, lsp.RenameFile):
            old = path_of_uri(op.old_uri) or op.old_uri
            new = path_of_uri(op.new_uri) or op.new_uri
            shown.append(f"rename {display_path(old, root)} to {display_path(new, root)}")
        else:
            shown.append(f"delete {display_path(path_of_uri(op.uri) or op.uri, root)}")
    return (
        f"the edit would also {', '.join(shown)}; bob cannot rename or delete files "
        "through the editor, so nothing was changed (move the file with bash, then rename)"
    )


@attrs.frozen
class WriteOutcome:
    """What :func:`write_changes` did."""

    written: tuple[FileChange, ...]
    failed: FileChange | None = None
    error: str = ""
    """Why ``failed`` could not be written."""
    not_written: tuple[FileChange, ...] = ()
    """The files after the failed one, left as they were."""


async def write_changes(changes: Sequence[FileChange], files: IFileAccess) -> WriteOutcome:
    """Write ``changes`` in order; stop at the first failure (reported, not raised)."""
    written: list[FileChange] = []
    for position, change in enumerate(changes):
        try:
            await files.write_text(change.path, change.new_text)
        except CancelledError:
            raise
        except Exception as error:
            return WriteOutcome(
                written=tuple(written),
                failed=change,
                error=describe_error(error),
                not_written=tuple(changes[position + 1 :]),
            )
        written.append(change)
    return WriteOutcome(written=tuple(written))
