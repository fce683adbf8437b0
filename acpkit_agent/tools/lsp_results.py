"""
The ``lsp`` tool's answers, made compact for the model.

Every place is ``path:line:column`` with the path relative to the session cwd (absolute
outside it), line and column counted from 1 in characters (as the model gives them), and,
when the file could be read, the line's text.  Lists stop after ``limit`` entries with a
line saying how many were left out; the whole answer is cut at ``max_chars``.

The functions take lsprotocol results as the server sent them (every shape the
specification allows: ``Location`` or ``LocationLink`` lists, hierarchical
``DocumentSymbol`` or flat ``SymbolInformation``, the three hover content forms) and the
texts of the files they name (:class:`~acpkit_agent.tools.lsp_positions.LineIndex`, by
absolute path), read through the tool context beforehand.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

import attrs
from lsprotocol import types as lsp

from acpkit_agent.tools.lsp_positions import UTF16, LineIndex, column_of

__all__ = [
    "Place",
    "cut",
    "display_path",
    "format_diagnostics",
    "format_document_symbols",
    "format_hover",
    "format_places",
    "format_workspace_symbols",
    "path_of_uri",
    "places_of",
    "uri_of_path",
    "workspace_symbol_places",
]

_SEVERITY = {1: "error", 2: "warning", 3: "info", 4: "hint"}


def uri_of_path(path: str) -> str:
    """The ``file://`` URI of an absolute path (percent-encoded as LSP expects)."""
    from pathlib import Path

    return Path(path).as_uri()


def path_of_uri(uri: str) -> str | None:
    """The absolute path of a ``file://`` URI; None for another scheme."""
    parts = urlsplit(uri)
    if parts.scheme != "file":
        return None
    path = unquote(parts.path)
    if parts.netloc and parts.netloc != "localhost":
        path = f"//{parts.netloc}{path}"
    return os.path.normpath(path)


def display_path(path: str, cwd: str) -> str:
    """``path`` relative to ``cwd`` when it is inside, else absolute."""
    try:
        relative = os.path.relpath(path, cwd)
    except ValueError:
        return path
    return path if relative == ".." or relative.startswith("../") else relative


@attrs.frozen
class Place:
    """A position in a file, as the server gave it (0-based line, code-unit character)."""

    path: str
    line: int
    character: int
    label: str = ""
    """What is there (a symbol's kind and name), shown before the line's text."""


def places_of(result: Any) -> list[Place]:
    """
    The places of a definition or references answer: None, one ``Location``, or a list of
    ``Location`` / ``LocationLink`` (non-file URIs are left out).
    """
    if result is None:
        return []
    items: Iterable[Any] = result if isinstance(result, Sequence) else [result]
    places: list[Place] = []
    for item in items:
        if isinstance(item, lsp.LocationLink):
            uri, start = item.target_uri, item.target_selection_range.start
        elif isinstance(item, lsp.Location):
            uri, start = item.uri, item.range.start
        else:
            continue
        path = path_of_uri(uri)
        if path is not None:
            places.append(Place(path, start.line, start.character))
    return places


def _symbol_kind(kind: Any) -> str:
    try:
        return lsp.SymbolKind(kind).name.lower()
    except ValueError:
        return "symbol"


def workspace_symbol_places(result: Any) -> list[Place]:
    """The places of a ``workspace/symbol`` answer, labelled ``kind name (in container)``."""
    places: list[Place] = []
    for item in result or []:
        if not isinstance(item, lsp.SymbolInformation | lsp.WorkspaceSymbol):
            continue
        label = f"{_symbol_kind(item.kind)} {item.name}"
        if item.container_name:
            label += f" (in {item.container_name})"
        location = item.location
        path = path_of_uri(location.uri)
        if path is None:
            continue
        if isinstance(location, lsp.Location):
            start = location.range.start
            places.append(Place(path, start.line, start.character, label))
        else:
            places.append(Place(path, -1, 0, label))
    return places


def _place_text(
    place: Place, cwd: str, texts: Mapping[str, LineIndex], encoding: str, *, with_path: bool
) -> str:
    shown = display_path(place.path, cwd) if with_path else ""
    if place.line < 0:
        where = shown
        snippet = ""
    else:
        index = texts.get(place.path)
        if index is None:
            column = place.character + 1
            snippet = ""
        else:
            line = index.line(place.line)
            column = column_of(line, place.character, encoding) + 1
            snippet = line.strip()
        where = f"{shown}:{place.line + 1}:{column}" if with_path else f"{place.line + 1}:{column}"
    text = where
    if place.label:
        text += f": {place.label}"
    if snippet:
        text += f": {snippet}"
    return text


def format_places(
    places: Sequence[Place],
    cwd: str,
    texts: Mapping[str, LineIndex],
    *,
    encoding: str = UTF16,
    limit: int,
) -> list[str]:
    """One line per place (``path:line:col: text``), at most ``limit`` plus a count."""
    lines = [_place_text(place, cwd, texts, encoding, with_path=True) for place in places[:limit]]
    if len(places) > limit:
        lines.append(f"[… {len(places) - limit} more not shown]")
    return lines


def format_document_symbols(
    result: Any, index: LineIndex, *, encoding: str = UTF16, limit: int
) -> list[str]:
    """
    One line per symbol, ``line:col kind name`` (with its detail), children indented under
    their parent; flat ``SymbolInformation`` lists come out in the order given.
    """
    lines: list[str] = []
    total = 0

    def where(position: lsp.Position) -> str:
        column = column_of(index.line(position.line), position.character, encoding) + 1
        return f"{position.line + 1}:{column}"

    def walk(symbols: Iterable[Any], depth: int) -> None:
        nonlocal total
        for symbol in symbols:
            if isinstance(symbol, lsp.DocumentSymbol):
                start = symbol.selection_range.start
                children: Iterable[Any] = symbol.children or []
                detail = f" — {symbol.detail}" if symbol.detail else ""
            elif isinstance(symbol, lsp.SymbolInformation):
                start = symbol.location.range.start
                children = []
                detail = f" (in {symbol.container_name})" if symbol.container_name else ""
            else:
                continue
            total += 1
            if len(lines) < limit:
                text = f"{'  ' * depth}{where(start)} {_symbol_kind(symbol.kind)} {symbol.name}"
                lines.append(text + detail)
            walk(children, depth + 1)

    walk(result or [], 0)
    if total > limit:
        lines.append(f"[… {total - limit} more not shown]")
    return lines


def format_workspace_symbols(
    result: Any,
    cwd: str,
    texts: Mapping[str, LineIndex],
    *,
    encoding: str = UTF16,
    limit: int,
) -> list[str]:
    """One line per symbol: ``path:line:col: kind name (in container)``."""
    return format_places(
        workspace_symbol_places(result), cwd, texts, encoding=encoding, limit=limit
    )


def format_hover(result: Any) -> str:
    """The hover text (markdown or plain, code blocks fenced); empty when there is none."""
    if result is None:
        return ""
    contents = result.contents if isinstance(result, lsp.Hover) else result
    items: Iterable[Any] = (
        contents if isinstance(contents, Sequence) and not isinstance(contents, str) else [contents]
    )
    parts: list[str] = []
    for item in items:
        if isinstance(item, lsp.MarkupContent):
            parts.append(item.value.strip())
        elif isinstance(item, lsp.MarkedStringWithLanguage):
            parts.append(f"```{item.language}\n{item.value.strip()}\n```")
        elif isinstance(item, str):
            parts.append(item.strip())
    return "\n\n".join(part for part in parts if part)


def format_diagnostics(
    diagnostics: Sequence[lsp.Diagnostic],
    index: LineIndex,
    *,
    encoding: str = UTF16,
    limit: int,
) -> list[str]:
    """One line per diagnostic, by position: ``line:col: severity: message [source code]``."""
    ordered = sorted(
        diagnostics, key=lambda d: (d.range.start.line, d.range.start.character, d.message)
    )
    lines: list[str] = []
    for diagnostic in ordered[:limit]:
        start = diagnostic.range.start
        column = column_of(index.line(start.line), start.character, encoding) + 1
        severity = _SEVERITY.get(int(diagnostic.severity or 0), "problem")
        message = " ".join(diagnostic.message.split())
        origin = " ".join(
            str(part) for part in (diagnostic.source, diagnostic.code) if part not in (None, "")
        )
        suffix = f" [{origin}]" if origin else ""
        lines.append(f"{start.line + 1}:{column}: {severity}: {message}{suffix}")
    if len(ordered) > limit:
        lines.append(f"[… {len(ordered) - limit} more not shown]")
    return lines


def cut(text: str, max_chars: int) -> str:
    """``text`` cut at a line boundary before ``max_chars``, saying how much was left out."""
    if len(text) <= max_chars:
        return text
    keep = text.rfind("\n", 0, max_chars)
    keep = keep if keep > 0 else max_chars
    return f"{text[:keep]}\n[… {len(text) - keep} more characters not shown]"
