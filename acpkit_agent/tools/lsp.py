"""
The ``lsp`` tool: code navigation and rename through the configured language servers.

One tool, one ``action`` argument:

=====================  =========  ==========  ===============================================
action                 kind       permission  arguments
=====================  =========  ==========  ===============================================
``definition``         search     never       ``path``, ``line``, ``character`` or ``symbol``
``references``         search     never       ``path``, ``line``, ``character`` or ``symbol``
``hover``              read       never       ``path``, ``line``, ``character`` or ``symbol``
``document_symbols``   read       never       ``path``
``workspace_symbols``  search     never       ``path`` (picks the server), ``query``
``diagnostics``        read       never       ``path``
``rename``             edit       like        ``path``, ``line``, ``character`` or
                                  edit_file   ``symbol``, ``new_name``
=====================  =========  ==========  ===============================================

Lines and columns are 1-based and count characters (code points) as ``read_file`` shows
them; ``symbol`` (a name on that line) can stand for the column.  They are converted to
LSP's 0-based positions in the server's encoding (UTF-16 by default) by
:mod:`~acpkit_agent.tools.lsp_positions`.

Before each request the file is read through ``ctx.files`` (the client's file system when
it offers one, so unsaved editor buffers count) and synced to the server.  ``rename`` asks
``prepareRename`` first when the server offers it, then applies the returned
``WorkspaceEdit`` through ``ctx.files`` (:mod:`~acpkit_agent.tools.lsp_edits`), one
``diff`` per changed file, and syncs the new texts back.  Every failure — no server for
the file, a server that cannot start or crashes, an error answer, a timeout — is one
failed result line; the other tools are not affected.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs
from lsprotocol import types as lsp
from twisted.internet.defer import CancelledError, Deferred

from acpkit_agent.lsp.errors import LanguageServerError
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
from acpkit_agent.tools.lsp_edits import (
    FileChange,
    WorkspaceEditRefused,
    plan_workspace_edit,
    write_changes,
)
from acpkit_agent.tools.lsp_positions import UTF8, UTF16, UTF32, LineIndex
from acpkit_agent.tools.lsp_results import (
    Place,
    cut,
    display_path,
    format_diagnostics,
    format_document_symbols,
    format_hover,
    format_places,
    places_of,
    uri_of_path,
    workspace_symbol_places,
)

__all__ = ["ACTIONS", "ILanguageServer", "ILanguageServers", "LspTool"]

ACTIONS: Mapping[str, str] = {
    "definition": "search",
    "references": "search",
    "hover": "read",
    "document_symbols": "read",
    "workspace_symbols": "search",
    "diagnostics": "read",
    "rename": "edit",
}
"""Each action and the ACP ``ToolKind`` its calls are announced with."""

_POSITIONAL = frozenset({"definition", "references", "hover", "rename"})

_PROVIDERS = {
    "definition": ("definition_provider", "textDocument/definition"),
    "references": ("references_provider", "textDocument/references"),
    "hover": ("hover_provider", "textDocument/hover"),
    "document_symbols": ("document_symbol_provider", "textDocument/documentSymbol"),
    "workspace_symbols": ("workspace_symbol_provider", "workspace/symbol"),
    "rename": ("rename_provider", "textDocument/rename"),
}


class ILanguageServer(Protocol):
    """What the tool needs of one running language server (``acpkit_agent.lsp``)."""

    name: str
    root: str
    capabilities: lsp.ServerCapabilities

    def sync(self, path: str, text: str) -> None:
        """Tell the server the file's current text (``didOpen``, then ``didChange``)."""
        ...

    def request(self, method: str, params: Any) -> Deferred[Any]:
        """Send a request; fires with the structured lsprotocol result."""
        ...

    def diagnostics(self, path: str, *, timeout: float) -> Deferred[list[lsp.Diagnostic]]:
        """The diagnostics the server published for ``path`` (waiting up to ``timeout``)."""
        ...


class ILanguageServers(Protocol):
    """The configured language servers, started on first use (``acpkit_agent.lsp``)."""

    def server_for(self, path: str, root: str) -> Deferred[Any]:
        """The server for ``path`` in the workspace ``root``; fails with a clear message."""
        ...


class _Failed(Exception):
    """A call that ends with one failed line for the model (the message)."""


def _encoding(server: ILanguageServer) -> str:
    value = getattr(getattr(server, "capabilities", None), "position_encoding", None)
    text = str(getattr(value, "value", value) or UTF16).lower()
    return text if text in (UTF8, UTF16, UTF32) else UTF16


def _offers(server: ILanguageServer, attribute: str) -> bool:
    value = getattr(getattr(server, "capabilities", None), attribute, None)
    return value is not None and value is not False


def _prepare_offered(server: ILanguageServer) -> bool:
    value = getattr(getattr(server, "capabilities", None), "rename_provider", None)
    return isinstance(value, lsp.RenameOptions) and bool(value.prepare_provider)


@attrs.frozen
class _Target:
    """Where a positional action points: the file, its text and the LSP position."""

    path: str
    index: LineIndex
    line: int
    """0-based."""
    column: int
    """0-based, in code points."""

    def position(self, encoding: str) -> lsp.Position:
        return lsp.Position(
            line=self.line, character=self.index.lsp_character(self.line, self.column, encoding)
        )


@attrs.define
class LspTool:
    """The ``lsp`` tool over ``servers`` (see the module docstring)."""

    servers: ILanguageServers
    max_results: int = 50
    """Locations, symbols or diagnostics listed at most (then a count of the rest)."""
    max_chars: int = 8000
    """The answer is cut at a line boundary past this many characters."""
    diagnostics_timeout: float = 10.0
    """Seconds to wait for the server to publish diagnostics for the file."""

    name: str = attrs.field(default="lsp", init=False)
    kind: str = attrs.field(default="search", init=False)
    permission_key: str = attrs.field(default="edit_file", init=False)
    """``rename`` is remembered under edit_file's "always"/"never" answer."""
    description: str = attrs.field(
        default=(
            "Ask the language server about code. 'action' is one of: definition, references, "
            "hover (type and documentation), document_symbols (outline of 'path'), "
            "workspace_symbols (search 'query' across the project; 'path' is any file of "
            "the language), diagnostics (errors and warnings of 'path'), rename (rename the "
            "symbol everywhere to 'new_name', editing the files). definition, references, "
            "hover and rename point at a symbol: 'line' (1-based) and either 'character' "
            "(1-based column, counted in characters) or 'symbol' (the name as written on "
            "that line). Results are path:line:column, 1-based, paths relative to the "
            "working directory."
        ),
        init=False,
    )
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": list(ACTIONS)},
                "path": {"type": "string", "description": "The file (relative or absolute)."},
                "line": {"type": "integer", "minimum": 1, "description": "1-based line."},
                "character": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "1-based column in characters (code points), tabs count 1.",
                },
                "symbol": {
                    "type": "string",
                    "description": "The name on 'line' to point at, instead of 'character'.",
                },
                "query": {"type": "string", "description": "workspace_symbols: the name."},
                "new_name": {"type": "string", "description": "rename: the new name."},
            },
            "required": ["action", "path"],
            "additionalProperties": False,
        },
        init=False,
    )

    # -- the pure functions of the arguments ---------------------------------------------

    def kind_for(self, args: Mapping[str, Any]) -> str:
        """The call's ACP kind: ``edit`` for rename, ``read``/``search`` for navigation."""
        return ACTIONS.get(str(args.get("action")), self.kind)

    def title(self, args: Mapping[str, Any]) -> str:
        """``lsp <action>: <path>:<line>[:<col>|:<symbol>]`` (`` → new`` for rename)."""
        action = title_text(args, "action") or "?"
        where = title_text(args, "path")
        if args.get("line") is not None:
            where += f":{title_text(args, 'line')}"
            if args.get("character") is not None:
                where += f":{title_text(args, 'character')}"
            elif args.get("symbol") is not None:
                where += f" {title_text(args, 'symbol')}"
        if action == "workspace_symbols":
            where = title_text(args, "query")
        if action == "rename" and args.get("new_name") is not None:
            where += f" → {title_text(args, 'new_name')}"
        return f"lsp {action}: {where}"

    def locations(self, args: Mapping[str, Any], cwd: str) -> list[str]:
        """The file the call is about, absolute."""
        value = args.get("path")
        return [resolve_path(value, cwd)] if isinstance(value, str) and value else []

    def needs_permission(self, args: Mapping[str, Any]) -> bool:
        """Only ``rename`` (it edits files); navigation never asks."""
        return args.get("action") == "rename"

    # -- running ---------------------------------------------------------------------------

    def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Deferred[ToolResult]:
        """Sync the file, ask the server, format the answer (or apply the rename)."""
        return cancellable(Deferred.fromCoroutine(self._run(ctx, args)))

    async def _run(self, ctx: ToolContext, args: Mapping[str, Any]) -> ToolResult:
        action = str(args.get("action"))
        try:
            return await self._action(ctx, args, action)
        except (ArgumentError, _Failed, WorkspaceEditRefused) as error:
            return ToolResult(output=f"lsp {action}: {error}", failed=True)

    async def _action(self, ctx: ToolContext, args: Mapping[str, Any], action: str) -> ToolResult:
        if action not in ACTIONS:
            raise ArgumentError(f"'action' must be one of {', '.join(ACTIONS)}, got {action!r}")
        path = text_arg(args, "path")
        assert path is not None
        if not path.strip():
            raise ArgumentError("argument 'path' is empty")
        path = resolve_path(path, ctx.cwd)
        query = text_arg(args, "query", required=action == "workspace_symbols")
        new_name = text_arg(args, "new_name", required=action == "rename")
        if action == "rename" and not (new_name or "").strip():
            raise ArgumentError("argument 'new_name' is empty")
        line = int_arg(args, "line", minimum=1)
        character = int_arg(args, "character", minimum=1)
        symbol = text_arg(args, "symbol", required=False)
        if action in _POSITIONAL and line is None:
            raise ArgumentError(f"{action} needs 'line' (1-based)")
        if action in _POSITIONAL and character is None and not symbol:
            raise ArgumentError(f"{action} needs 'character' (1-based) or 'symbol'")

        # The file and the position are checked before any server is started.
        index = await self._read(ctx, path)
        target = None
        if action in _POSITIONAL:
            assert line is not None
            target = _target(path, index, line, character, symbol, ctx.cwd)
        server = await self._server(ctx, path)
        self._sync(server, path, index)
        if action == "diagnostics":
            return await self._diagnostics(ctx, server, path, index)
        attribute, method = _PROVIDERS[action]
        if not _offers(server, attribute):
            raise _Failed(f"the language server {server.name} does not offer {method}")
        if action == "workspace_symbols":
            assert query is not None
            result = await self._request(
                ctx, server, method, lsp.WorkspaceSymbolParams(query=query)
            )
            return await self._workspace_symbols(ctx, server, query, result)
        if action == "document_symbols":
            params = lsp.DocumentSymbolParams(text_document=_document(path))
            result = await self._request(ctx, server, method, params)
            return self._document_symbols(ctx, server, path, index, result)
        assert target is not None
        if action == "rename":
            assert new_name is not None
            return await self._rename(ctx, server, target, new_name)
        return await self._navigate(ctx, server, action, method, target)

    async def _server(self, ctx: ToolContext, path: str) -> ILanguageServer:
        try:
            server: ILanguageServer = await self.servers.server_for(path, ctx.cwd)
        except CancelledError:
            raise
        except Exception as error:
            raise _Failed(describe_error(error)) from None
        return server

    async def _read(self, ctx: ToolContext, path: str) -> LineIndex:
        """Read ``path`` through ``ctx.files`` (what the client holds, unsaved buffers too)."""
        shown = display_path(path, ctx.cwd)
        try:
            text = await ctx.files.read_text(path)
        except CancelledError:
            raise
        except FileNotFoundError:
            raise _Failed(f"no such file: {shown}") from None
        except Exception as error:
            raise _Failed(f"cannot read {shown}: {describe_error(error)}") from None
        return LineIndex.of(text)

    @staticmethod
    def _sync(server: ILanguageServer, path: str, index: LineIndex) -> None:
        """Give the text just read to the server (``didOpen`` / ``didChange``)."""
        try:
            server.sync(path, index.text)
        except Exception as error:
            raise _Failed(_server_failure(server, "didOpen", error)) from None

    async def _request(
        self, ctx: ToolContext, server: ILanguageServer, method: str, params: Any
    ) -> Any:
        try:
            return await server.request(method, params)
        except CancelledError:
            raise
        except Exception as error:
            raise _Failed(_server_failure(server, method, error)) from None

    async def _texts(self, ctx: ToolContext, places: Sequence[Place]) -> dict[str, LineIndex]:
        """The texts of the files named by the places shown (unreadable ones left out)."""
        texts: dict[str, LineIndex] = {}
        for place in places[: self.max_results]:
            if place.path in texts or place.line < 0:
                continue
            try:
                texts[place.path] = LineIndex.of(await ctx.files.read_text(place.path))
            except CancelledError:
                raise
            except Exception:
                continue
        return texts

    # -- the actions -----------------------------------------------------------------------

    async def _navigate(
        self, ctx: ToolContext, server: ILanguageServer, action: str, method: str, target: _Target
    ) -> ToolResult:
        encoding = _encoding(server)
        document, position = _document(target.path), target.position(encoding)
        params: Any
        if action == "references":
            params = lsp.ReferenceParams(
                text_document=document,
                position=position,
                context=lsp.ReferenceContext(include_declaration=True),
            )
        elif action == "hover":
            params = lsp.HoverParams(text_document=document, position=position)
        else:
            params = lsp.DefinitionParams(text_document=document, position=position)
        result = await self._request(ctx, server, method, params)
        at = _at(target, ctx.cwd)
        if action == "hover":
            text = format_hover(result)
            return ToolResult(output=cut(text, self.max_chars) if text else f"no hover at {at}")
        places = places_of(result)
        if not places:
            return ToolResult(output=f"no {action} found for {at}")
        texts = await self._texts(ctx, places)
        lines = format_places(places, ctx.cwd, texts, encoding=encoding, limit=self.max_results)
        noun = "definition" if action == "definition" else "reference"
        heading = f"{len(places)} {noun}{'s' if len(places) != 1 else ''} of {at}:"
        return ToolResult(output=cut("\n".join([heading, *lines]), self.max_chars))

    def _document_symbols(
        self, ctx: ToolContext, server: ILanguageServer, path: str, index: LineIndex, result: Any
    ) -> ToolResult:
        shown = display_path(path, ctx.cwd)
        lines = format_document_symbols(
            result, index, encoding=_encoding(server), limit=self.max_results
        )
        if not lines:
            return ToolResult(output=f"no symbols in {shown}")
        return ToolResult(output=cut("\n".join([f"symbols of {shown}:", *lines]), self.max_chars))

    async def _workspace_symbols(
        self, ctx: ToolContext, server: ILanguageServer, query: str, result: Any
    ) -> ToolResult:
        places = workspace_symbol_places(result)
        if not places:
            return ToolResult(output=f"no symbols match {query!r}")
        texts = await self._texts(ctx, places)
        lines = format_places(
            places, ctx.cwd, texts, encoding=_encoding(server), limit=self.max_results
        )
        heading = f"{len(places)} symbol(s) match {query!r}:"
        return ToolResult(output=cut("\n".join([heading, *lines]), self.max_chars))

    async def _diagnostics(
        self, ctx: ToolContext, server: ILanguageServer, path: str, index: LineIndex
    ) -> ToolResult:
        shown = display_path(path, ctx.cwd)
        try:
            found = await server.diagnostics(path, timeout=self.diagnostics_timeout)
        except CancelledError:
            raise
        except Exception as error:
            raise _Failed(
                _server_failure(server, "textDocument/publishDiagnostics", error)
            ) from None
        lines = format_diagnostics(found, index, encoding=_encoding(server), limit=self.max_results)
        if not lines:
            return ToolResult(output=f"no diagnostics for {shown}")
        heading = f"{len(found)} diagnostic(s) in {shown}:"
        return ToolResult(output=cut("\n".join([heading, *lines]), self.max_chars))

    async def _rename(
        self, ctx: ToolContext, server: ILanguageServer, target: _Target, new_name: str
    ) -> ToolResult:
        encoding = _encoding(server)
        document, position = _document(target.path), target.position(encoding)
        at = _at(target, ctx.cwd)
        old_name = _word_at(target)
        if _prepare_offered(server):
            prepared = await self._request(
                ctx,
                server,
                "textDocument/prepareRename",
                lsp.PrepareRenameParams(text_document=document, position=position),
            )
            if prepared is None:
                raise _Failed(f"nothing that can be renamed at {at}; nothing was changed")
            if isinstance(prepared, lsp.PrepareRenamePlaceholder):
                old_name = prepared.placeholder
            elif isinstance(prepared, lsp.Range):
                start = target.index.offset(prepared.start.line, prepared.start.character, encoding)
                end = target.index.offset(prepared.end.line, prepared.end.character, encoding)
                old_name = target.index.text[start:end] or old_name
        params = lsp.RenameParams(text_document=document, position=position, new_name=new_name)
        edit = await self._request(ctx, server, "textDocument/rename", params)
        if edit is None:
            raise _Failed(f"the language server {server.name} found nothing to rename at {at}")
        changes = await plan_workspace_edit(edit, ctx.files, root=ctx.cwd, encoding=encoding)
        if not changes:
            return ToolResult(output=f"renaming {old_name!r} to {new_name!r} changes no file")
        outcome = await write_changes(changes, ctx.files)
        for change in outcome.written:
            try:
                server.sync(change.path, change.new_text)
            except Exception:  # the server is told again before its next request
                pass
        diffs = [Diff(c.path, c.old_text, c.new_text) for c in outcome.written]
        first, rest = (diffs[0] if diffs else None), tuple(diffs[1:])
        written = _summary(outcome.written, ctx.cwd)
        if outcome.failed is None:
            edits = sum(c.edits for c in outcome.written)
            return ToolResult(
                output=(
                    f"renamed {old_name!r} to {new_name!r}: {edits} edit(s) in "
                    f"{len(outcome.written)} file(s): {written}"
                ),
                diff=first,
                diffs=rest,
            )
        failed = display_path(outcome.failed.path, ctx.cwd)
        untouched = [failed, *(display_path(c.path, ctx.cwd) for c in outcome.not_written)]
        return ToolResult(
            output=(
                f"lsp rename: the rename of {old_name!r} to {new_name!r} stopped halfway: "
                f"cannot write {failed}: {outcome.error}. Changed: {written or 'none'}. "
                f"Not changed: {', '.join(untouched)}."
            ),
            failed=True,
            diff=first,
            diffs=rest,
        )


def _server_failure(server: ILanguageServer, method: str, error: BaseException) -> str:
    """One line: the client's own errors say it all; anything else is named with the server."""
    if isinstance(error, LanguageServerError):
        return describe_error(error)
    return f"the language server {server.name} failed during {method}: {describe_error(error)}"


def _document(path: str) -> lsp.TextDocumentIdentifier:
    return lsp.TextDocumentIdentifier(uri=uri_of_path(path))


def _summary(changes: Sequence[FileChange], cwd: str) -> str:
    return ", ".join(f"{display_path(c.path, cwd)} ({c.edits})" for c in changes)


def _at(target: _Target, cwd: str) -> str:
    return f"{display_path(target.path, cwd)}:{target.line + 1}:{target.column + 1}"


def _word_at(target: _Target) -> str:
    """The identifier under the target (for messages when the server does not say)."""
    line = target.index.line(target.line)
    start = end = min(target.column, len(line))
    while start > 0 and (line[start - 1].isalnum() or line[start - 1] == "_"):
        start -= 1
    while end < len(line) and (line[end].isalnum() or line[end] == "_"):
        end += 1
    return line[start:end] or line[target.column : target.column + 1]


def _target(
    path: str, index: LineIndex, line: int, character: int | None, symbol: str | None, cwd: str
) -> _Target:
    """The position the model pointed at; a clear error when the line or symbol is not there."""
    shown = display_path(path, cwd)
    lines = index.line_count
    if index.text.endswith(("\n", "\r")):
        lines -= 1  # the empty line after a final line break is not one the model sees
    if line > max(lines, 1):
        raise ArgumentError(f"{shown} has {lines} line(s); there is no line {line}")
    text = index.line(line - 1)
    if character is not None:
        if character > len(text) + 1:
            raise ArgumentError(
                f"line {line} of {shown} has {len(text)} character(s); there is no "
                f"character {character}"
            )
        return _Target(path, index, line - 1, character - 1)
    assert symbol is not None
    column = _find_symbol(text, symbol)
    if column < 0:
        raise ArgumentError(f"{symbol!r} is not on line {line} of {shown}: {text.strip()!r}")
    return _Target(path, index, line - 1, column)


def _find_symbol(text: str, symbol: str) -> int:
    """The column of ``symbol`` as a whole word on the line, else as a substring; -1 if absent."""
    start = text.find(symbol)
    first = start
    while start != -1:
        before = text[start - 1] if start > 0 else ""
        after = text[start + len(symbol)] if start + len(symbol) < len(text) else ""
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            return start
        start = text.find(symbol, start + 1)
    return first
