"""
Flattening a ``session/prompt``'s content blocks into the text of the user message.

- ``text`` blocks are concatenated;
- a ``resource_link`` becomes ``\\n[attached file: <path without file://>]``;
- other block types (image, audio, embedded resource, unknown) are ignored;
- then each ``@path`` mention in the text naming an existing file or directory under the
  session's cwd (or an absolute / ``~`` path) appends ``\\n[attached file: <absolute path>]``
  or ``\\n[attached directory: <absolute path>]``, once per path.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from urllib.parse import unquote, urlparse

import attrs

from acpkit import schema

__all__ = ["FlatPrompt", "find_mentions", "flatten_prompt", "link_path"]

# An @ at the start or after whitespace, then a run of non-space characters.
_MENTION = re.compile(r"(?:(?<=\s)|^)@(\S+)")
_TRAILING = ".,;:!?)]}'\"`"


@attrs.frozen
class FlatPrompt:
    """The user message text and the absolute paths its ``@`` mentions attached."""

    text: str
    attached: tuple[str, ...]


def link_path(uri: str) -> str:
    """The path of a ``resource_link`` URI: ``file://`` removed (and %-escapes decoded)."""
    if uri.startswith("file://"):
        parsed = urlparse(uri)
        return unquote(parsed.path) if parsed.path else uri[len("file://") :]
    return uri


def _resolve(mention: str, cwd: str) -> str | None:
    """The absolute path a mention names, or None when it is outside cwd or missing."""
    expanded = os.path.expanduser(mention)
    if os.path.isabs(expanded):
        path = os.path.normpath(expanded)
    else:
        root = os.path.normpath(cwd)
        path = os.path.normpath(os.path.join(root, expanded))
        if path != root and not path.startswith(root.rstrip(os.sep) + os.sep):
            return None
    return path if os.path.exists(path) else None


def find_mentions(text: str, cwd: str) -> list[str]:
    """The absolute paths of the existing files and directories ``text`` mentions, once each."""
    found: list[str] = []
    for match in _MENTION.finditer(text):
        candidate = match.group(1)
        path = _resolve(candidate, cwd)
        stripped = candidate.rstrip(_TRAILING)
        if path is None and stripped and stripped != candidate:
            path = _resolve(stripped, cwd)
        if path is not None and path not in found:
            found.append(path)
    return found


def flatten_prompt(blocks: Iterable[object], cwd: str) -> FlatPrompt:
    """Flatten ``blocks`` (``acpkit.schema`` content blocks) into the user message."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, schema.TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, schema.ResourceLinkContentBlock):
            parts.append(f"\n[attached file: {link_path(block.uri)}]")
    text = "".join(parts)
    attached = find_mentions(text, cwd)
    for path in attached:
        what = "directory" if os.path.isdir(path) else "file"
        text += f"\n[attached {what}: {path}]"
    return FlatPrompt(text=text, attached=tuple(attached))
