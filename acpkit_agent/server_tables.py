"""
What the ``[mcp.servers.<name>]`` and ``[lsp.servers.<name>]`` tables of ``agent.toml``
share (:mod:`acpkit_agent.mcp_config`, :mod:`acpkit_agent.lsp_config`): the server-name
rule, the value checks (each raising a :class:`ValueError` whose message starts with the
key) and how layered files merge the servers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["SERVER_NAME", "merge_server_tables", "string", "string_table", "strings"]

#: A server's name: it names its table and namespaces its tools.
SERVER_NAME = re.compile(r"[A-Za-z0-9_-]+")


def string(key: str, value: Any) -> str:
    """A non-blank string."""
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string, not {value!r}")
    if not value.strip():
        raise ValueError(f"{key} must not be empty")
    return value


def strings(key: str, value: Any, *, empty_items: bool) -> tuple[str, ...]:
    """A list of strings (non-blank ones unless ``empty_items``)."""
    if not isinstance(value, list):
        raise ValueError(f"{key} must be a list of strings, not {value!r}")
    for item in value:
        if not isinstance(item, str) or (not empty_items and not item.strip()):
            kind = "strings" if empty_items else "non-empty strings"
            raise ValueError(f"{key} must hold {kind}, not {item!r}")
    return tuple(value)


def string_table(key: str, value: Any) -> dict[str, str]:
    """A table whose values are strings."""
    if not isinstance(value, dict):
        raise ValueError(f"{key} must be a table of strings, not {value!r}")
    for name, item in value.items():
        if not isinstance(item, str):
            raise ValueError(f"{key}.{name} must be a string, not {item!r}")
    return dict(value)


def merge_server_tables(lower: Mapping[str, Any], upper: Mapping[str, Any]) -> dict[str, Any]:
    """``upper``'s table over ``lower``'s: servers merged by name, each replaced whole."""
    merged = {**lower, **upper}
    below, above = lower.get("servers"), upper.get("servers")
    if isinstance(below, dict) and isinstance(above, dict):
        merged["servers"] = {**below, **above}
    return merged
