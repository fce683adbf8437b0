"""
The ``[lsp.servers.<name>]`` tables of ``agent.toml``: the language servers bob's ``lsp``
tool uses, validated into :class:`LspServerConfig`.

One table per server; its name is the table's key (letters, digits, ``_`` and ``-``).

==========================  ==============  ========  =======================================
key                         type            default   meaning
==========================  ==============  ========  =======================================
``command``                 string          required  the program (looked up in ``PATH``
                                                      unless it holds a ``/``)
``args``                    list of         ``[]``    its arguments (``["--stdio"]``)
                            strings
``files``                   list of         required  glob patterns of the files it serves:
                            non-empty                 a pattern without ``/`` matches the
                            strings                   file name (``*.py``), one with ``/``
                                                      the path relative to the session's cwd
                                                      (``src/**/*.ts``)
``languageId``              string          from the  the ``languageId`` sent in ``didOpen``
                                            extension (absent: by the file's extension,
                                                      see :mod:`acpkit_agent.lsp.languages`)
``initializationOptions``   table           none      sent as ``initializationOptions`` in
                                                      ``initialize``, as written
``env``                     table of        ``{}``    variables added to bob's environment
                            strings                   for the server process
==========================  ==============  ========  =======================================

A file is served by the first server, in the file's order, whose ``files`` match it.
There is no default server: bob starts no program the configuration does not name
(the ``lsp`` tool answers that no language server is configured for the file).

The servers are per process (like the MCP servers and the engine): a session's project
file that sets ``[lsp]`` differently is logged and not obeyed (see
:mod:`acpkit_agent.config`).  Layered files merge ``[lsp.servers]`` by server name: an
upper file's server replaces the lower file's server of the same name whole.

Errors are :class:`ValueError` whose message starts with the key
(``lsp.servers.pylsp.args must be a list of strings, not 'x'``); the configuration
loader prefixes the file.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from typing import Any

import attrs

from acpkit_agent.server_tables import (
    SERVER_NAME,
    merge_server_tables,
    string,
    string_table,
    strings,
)

__all__ = ["LspServerConfig", "merge_lsp_tables", "parse_lsp"]

_KEYS = ("command", "args", "files", "languageId", "initializationOptions", "env")


@attrs.frozen(kw_only=True)
class LspServerConfig:
    """One configured language server."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    files: tuple[str, ...]
    """Glob patterns of the files it serves (see :meth:`serves`)."""
    language_id: str | None = None
    """The ``languageId`` for ``didOpen`` (None: by the file's extension)."""
    initialization_options: Mapping[str, Any] | None = None
    """Sent as ``initializationOptions`` in ``initialize`` (None: not sent)."""
    env: Mapping[str, str] = attrs.field(factory=dict)
    """Variables added to bob's environment for the server process."""

    def serves(self, path: str, root: str) -> bool:
        """
        Whether ``path`` matches one of :attr:`files`: a pattern without ``/`` is
        matched against the file name, one with ``/`` against the path relative to
        ``root`` (``/``-separated; ``*`` also crosses ``/``, as :mod:`fnmatch` does).
        """
        full = os.path.join(root, path)
        name = os.path.basename(full)
        relative = os.path.relpath(full, root).replace(os.sep, "/")
        for pattern in self.files:
            if "/" in pattern:
                if fnmatch.fnmatchcase(relative, pattern.removeprefix("./")):
                    return True
            elif fnmatch.fnmatchcase(name, pattern):
                return True
        return False


def _server(name: str, table: Any) -> LspServerConfig:
    prefix = f"lsp.servers.{name}"
    if not SERVER_NAME.fullmatch(name):
        raise ValueError(f"{prefix}: a server name is letters, digits, _ and - only")
    if not isinstance(table, dict):
        raise ValueError(f"{prefix} must be a table, not {table!r}")
    for key in table:
        if key not in _KEYS:
            raise ValueError(f"{prefix}.{key} is not a key this file has")
    for key in ("command", "files"):
        if key not in table:
            raise ValueError(f"{prefix} needs {key}")
    files = strings(f"{prefix}.files", table["files"], empty_items=False)
    if not files:
        raise ValueError(f'{prefix}.files must name at least one pattern (like "*.py")')
    language_id = table.get("languageId")
    options = table.get("initializationOptions")
    if options is not None and not isinstance(options, dict):
        raise ValueError(f"{prefix}.initializationOptions must be a table, not {options!r}")
    return LspServerConfig(
        name=name,
        command=string(f"{prefix}.command", table["command"]),
        args=strings(f"{prefix}.args", table.get("args", []), empty_items=True),
        files=files,
        language_id=None if language_id is None else string(f"{prefix}.languageId", language_id),
        initialization_options=options,
        env=string_table(f"{prefix}.env", table.get("env", {})),
    )


def parse_lsp(value: Any) -> tuple[LspServerConfig, ...]:
    """Validate the ``[lsp]`` table: its servers, in the file's order."""
    if not isinstance(value, dict):
        raise ValueError(f"lsp must be a table, not {value!r}")
    for key in value:
        if key != "servers":
            raise ValueError(f"lsp.{key} is not a key this file has")
    servers = value.get("servers", {})
    if not isinstance(servers, dict):
        raise ValueError(f"lsp.servers must be a table, not {servers!r}")
    return tuple(_server(name, table) for name, table in servers.items())


merge_lsp_tables = merge_server_tables
"""``upper``'s ``[lsp]`` over ``lower``'s: servers merged by name, each replaced whole."""
