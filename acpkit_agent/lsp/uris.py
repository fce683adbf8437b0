"""``file://`` URIs of paths and back, as language servers write them."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlparse

__all__ = ["path_to_uri", "uri_to_path"]


def path_to_uri(path: str) -> str:
    """The ``file://`` URI of ``path`` (made absolute; characters percent-encoded)."""
    return Path(os.path.abspath(path)).as_uri()


def uri_to_path(uri: str) -> str:
    """
    The local path of a ``file://`` URI (``%xx`` decoded); :class:`ValueError` for
    another scheme or a remote host.
    """
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        raise ValueError(f"not a file:// URI: {uri!r}")
    if parsed.netloc not in ("", "localhost"):
        raise ValueError(f"a file:// URI on another host: {uri!r}")
    return os.path.normpath(unquote(parsed.path))
