"""``fs/read_text_file`` and ``fs/write_text_file`` for an agent window.

:class:`FileAccess` answers the two requests through an
:class:`~acpkit_client.interfaces.IBufferProvider` (the editor's buffers first, the disk
otherwise; :class:`DiskBufferProvider`, the default, is the disk alone).

Rules (ACP file-system page, and the seed):

- paths must be absolute, else ``-32602``;
- by default only paths under the allowed roots (the project root, the session's ``cwd``
  and additional directories) are read or written; others are refused with a ``-32602``
  naming the roots.  ``allow_outside_roots=True`` widens it to everything;
- ``line`` is 1-based and ``limit`` a maximum number of lines;
- a missing file is ``-32002`` (resource not found);
- writing creates the file (and its missing parent directories);
- writes to files that decide what runs next are refused with ``-32602`` naming the
  path and why, wherever they are (symbolic links resolved first): ``.acpkit/acp.toml``
  (the agents this client starts), ``.acpkit/agent.toml`` (bob's project configuration,
  e.g. ``yolo``), ``.git/config`` and anything under ``.git/hooks/`` (git runs them).
  ``allow_protected_writes=True`` lets them through.  Reads are not affected.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from twisted.logger import Logger
from zope.interface import implementer

from acpkit import schema
from acpkit.errors import InternalError, InvalidParams, ResourceNotFound
from acpkit_client.interfaces import IBufferProvider

__all__ = [
    "DiskBufferProvider",
    "FileAccess",
    "OverlayBufferProvider",
    "protected_write_reason",
    "select_lines",
]

log = Logger()


@implementer(IBufferProvider)
class DiskBufferProvider:
    """No buffers: reads and writes go to the disk (UTF-8, newlines kept as they are)."""

    def read_text(self, path: str) -> str:
        """The file's text, decoded as UTF-8."""
        with open(path, encoding="utf-8", newline="") as f:
            return f.read()

    def write_text(self, path: str, content: str) -> None:
        """Write ``content`` to the file, creating it and its missing parent directories."""
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(content)


@implementer(IBufferProvider)
class OverlayBufferProvider:
    """
    Open buffers kept in memory over another provider (the disk by default).

    ``open_buffers`` maps absolute paths to ``(text, modified)``.  A read gets the
    buffer's text when it is open and modified, the underlying file otherwise; a write
    goes into the buffer when it is open (which becomes modified), onto the disk otherwise.
    """

    def __init__(
        self,
        open_buffers: Mapping[str, tuple[str, bool]] | None = None,
        underlying: IBufferProvider | None = None,
    ) -> None:
        self.open_buffers: dict[str, tuple[str, bool]] = dict(open_buffers or {})
        self.underlying: IBufferProvider = (
            underlying if underlying is not None else DiskBufferProvider()
        )

    def read_text(self, path: str) -> str:
        """The modified buffer's text, or the underlying provider's."""
        buffer = self.open_buffers.get(path)
        if buffer is not None and buffer[1]:
            return buffer[0]
        return self.underlying.read_text(path)

    def write_text(self, path: str, content: str) -> None:
        """Into the open buffer (now modified), or through the underlying provider."""
        if path in self.open_buffers:
            self.open_buffers[path] = (content, True)
            return
        self.underlying.write_text(path, content)


def select_lines(text: str, line: int | None, limit: int | None) -> str:
    """The part of ``text`` from 1-based ``line`` (default 1), at most ``limit`` lines."""
    if line is None and limit is None:
        return text
    lines = text.splitlines(keepends=True)
    start = (line or 1) - 1
    end = None if limit is None else start + limit
    return "".join(lines[start:end])


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


#: (directory, file name or None for "anything under it"): why an agent may not write it.
_PROTECTED: tuple[tuple[str, str | None, str], ...] = (
    (".acpkit", "acp.toml", "it lists the agents this client starts (what it runs next time)"),
    (
        ".acpkit",
        "agent.toml",
        "it is the agent's project configuration (which commands run without asking)",
    ),
    (".git", "config", "git runs commands it names (core.hooksPath, core.fsmonitor...)"),
    (".git/hooks", None, "git runs the programs in .git/hooks"),
)


def protected_write_reason(path: str) -> str | None:
    """
    Why an agent may not write ``path`` (resolved: symbolic links followed), or ``None``.

    Matched by the path's last components wherever the file is (a project, a session
    ``cwd``, an additional directory), case-insensitively (for case-insensitive disks).
    """
    parts = [part.casefold() for part in Path(os.path.realpath(path)).parts]
    for directory, name, why in _PROTECTED:
        dirs = directory.split("/")
        if name is not None:
            if parts[-len(dirs) - 1 :] == [*dirs, name]:
                return why
            continue
        for i in range(len(parts) - len(dirs)):
            if parts[i : i + len(dirs)] == dirs:
                return why
    return None


class FileAccess:
    """The fs handlers of one session (see the module docstring)."""

    def __init__(
        self,
        roots: Iterable[str],
        buffers: IBufferProvider | None = None,
        *,
        allow_outside_roots: bool = False,
        allow_protected_writes: bool = False,
    ) -> None:
        #: Absolute directories inside which files may be read and written.
        self.roots: list[str] = []
        for root in roots:
            self.add_root(root)
        self.buffers: IBufferProvider = buffers if buffers is not None else DiskBufferProvider()
        self.allow_outside_roots = allow_outside_roots
        #: Let agents write ``.acpkit/acp.toml``, ``.acpkit/agent.toml``, ``.git/config``
        #: and ``.git/hooks/`` too (refused by default).
        self.allow_protected_writes = allow_protected_writes

    def add_root(self, root: str) -> None:
        """Allow files under ``root`` too (the session's cwd, an additional directory)."""
        real = os.path.realpath(os.path.abspath(root))
        if real not in self.roots:
            self.roots.append(real)

    def check_path(self, path: str) -> str:
        """Return ``path`` normalised, or raise the RPCError the agent gets for it."""
        if not os.path.isabs(path):
            raise InvalidParams("$.params.path", f"the path must be absolute, got {path!r}")
        if "\0" in path:
            raise InvalidParams("$.params.path", f"the path contains a NUL character: {path!r}")
        normal = os.path.normpath(path)
        if self.allow_outside_roots:
            return normal
        real = os.path.realpath(normal)
        if not any(_inside(real, root) for root in self.roots):
            raise InvalidParams(
                "$.params.path",
                f"{path} is outside the directories this client lets agents use "
                f"({', '.join(self.roots)})",
            )
        return normal

    def read_text_file(self, params: schema.ReadTextFileRequest) -> schema.ReadTextFileResponse:
        """Answer ``fs/read_text_file``."""
        path = self.check_path(params.path)
        if params.line is not None and params.line < 1:
            raise InvalidParams("$.params.line", f"lines are 1-based, got {params.line}")
        if params.limit is not None and params.limit < 0:
            raise InvalidParams("$.params.limit", f"limit must not be negative: {params.limit}")
        try:
            text = self.buffers.read_text(path)
        except FileNotFoundError:
            raise ResourceNotFound(Path(path).as_uri()) from None
        except IsADirectoryError:
            raise InvalidParams("$.params.path", f"{path} is a directory") from None
        except UnicodeDecodeError:
            raise InvalidParams("$.params.path", f"{path} is not UTF-8 text") from None
        except OSError as e:
            raise InternalError(f"cannot read {path}: {e.strerror or e}") from None
        return schema.ReadTextFileResponse(content=select_lines(text, params.line, params.limit))

    def write_text_file(self, params: schema.WriteTextFileRequest) -> schema.WriteTextFileResponse:
        """Answer ``fs/write_text_file`` (creating the file when it does not exist)."""
        path = self.check_path(params.path)
        if not self.allow_protected_writes:
            why = protected_write_reason(path)
            if why is not None:
                log.warn("refused an agent's write to {path}: {why}", path=path, why=why)
                raise InvalidParams(
                    "$.params.path",
                    f"{path} is protected, agents may not write it: {why}",
                )
        if os.path.isdir(path):
            raise InvalidParams("$.params.path", f"{path} is a directory")
        try:
            self.buffers.write_text(path, params.content)
        except OSError as e:
            raise InternalError(f"cannot write {path}: {e.strerror or e}") from None
        log.info("agent wrote {path}", path=path)
        return schema.WriteTextFileResponse()
