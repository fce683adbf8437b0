"""
The ``languageId`` bob sends in ``textDocument/didOpen``, by file extension (the
identifiers the LSP specification lists), unless the server's configuration sets
``languageId``.  A file whose extension is not listed is opened as ``plaintext``.
"""

from __future__ import annotations

import os

__all__ = ["LANGUAGE_IDS", "language_id"]

LANGUAGE_IDS: dict[str, str] = {
    ".bat": "bat",
    ".bib": "bibtex",
    ".c": "c",
    ".cc": "cpp",
    ".clj": "clojure",
    ".cljs": "clojure",
    ".coffee": "coffeescript",
    ".cpp": "cpp",
    ".cs": "csharp",
    ".css": "css",
    ".cxx": "cpp",
    ".dart": "dart",
    ".diff": "diff",
    ".erl": "erlang",
    ".ex": "elixir",
    ".exs": "elixir",
    ".fs": "fsharp",
    ".go": "go",
    ".groovy": "groovy",
    ".h": "c",
    ".hpp": "cpp",
    ".hs": "haskell",
    ".html": "html",
    ".ini": "ini",
    ".java": "java",
    ".js": "javascript",
    ".json": "json",
    ".jsx": "javascriptreact",
    ".less": "less",
    ".lua": "lua",
    ".m": "objective-c",
    ".md": "markdown",
    ".mjs": "javascript",
    ".ml": "ocaml",
    ".php": "php",
    ".pl": "perl",
    ".ps1": "powershell",
    ".py": "python",
    ".pyi": "python",
    ".r": "r",
    ".rb": "ruby",
    ".rs": "rust",
    ".sass": "sass",
    ".scala": "scala",
    ".scss": "scss",
    ".sh": "shellscript",
    ".sql": "sql",
    ".swift": "swift",
    ".tex": "latex",
    ".toml": "toml",
    ".ts": "typescript",
    ".tsx": "typescriptreact",
    ".vb": "vb",
    ".xml": "xml",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".zig": "zig",
}
"""File extension (lower case, with its dot) -> LSP ``languageId``."""


def language_id(path: str, configured: str | None = None) -> str:
    """``configured`` when given, else the ``languageId`` of ``path``'s extension."""
    if configured is not None:
        return configured
    _, extension = os.path.splitext(path)
    return LANGUAGE_IDS.get(extension.lower(), "plaintext")
