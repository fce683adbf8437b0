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
  path and why (``allow_protected_writes=True`` lets them through; reads are not
  affected):

  - wherever they are: ``.acpkit/acp.toml`` (the agents this client starts),
    ``.acpkit/agent.toml`` (bob's project configuration, e.g. ``yolo``), and ``.git``
    and everything under it (git runs the commands its configurations name and the
    programs in its hooks, a submodule's and a worktree's too);
  - the user's agents file (``$ACPKIT_DIR/acp.toml`` or ``~/.config/acpkit/acp.toml``),
    and everything under ``~/.config/acpkit/`` and ``$XDG_CONFIG_HOME/acpkit/`` (bob's
    ``agent.toml``...), inside or outside the allowed roots;
  - the ``protected_paths`` given (the files the client reads when it starts the
    agent: its executable and the files its command line names, its TLS files).

  The path is resolved once (symbolic links and ``..``), and that resolved path is
  what is checked and written.  Names are compared as a case-insensitive filesystem
  that drops trailing dots and spaces would (``.ACPKIT./ACP.TOML ``).  The write opens
  every directory of the resolved path and the file itself without following a
  symbolic link (one swapped in after the check makes the write fail: nothing is
  written), creates nothing but regular files and directories, refuses a file that is
  not a regular file (a FIFO would block) and a file that is a hard link of a
  protected one (checked on the open file, before anything is written).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from twisted.logger import Logger
from zope.interface import implementer

from acpkit import schema
from acpkit.errors import InternalError, InvalidParams, ResourceNotFound
from acpkit_client.config import user_agents_file
from acpkit_client.interfaces import IBufferProvider

__all__ = [
    "DiskBufferProvider",
    "FileAccess",
    "NotARegularFile",
    "OverlayBufferProvider",
    "ProtectedFileError",
    "protected_write_reason",
    "select_lines",
    "user_config_locations",
    "write_text_no_follow",
]

log = Logger()


class ProtectedFileError(Exception):
    """The file about to be written is a protected one (``str()`` says which and why)."""


class NotARegularFile(OSError):
    """The path names something else than a regular file (a FIFO, a device, a socket)."""


_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _open_directory(name: str, parent: int) -> int:
    """Open the directory ``name`` of ``parent`` (never a link), creating it if missing."""
    try:
        return os.open(name, _DIRECTORY_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        try:
            os.mkdir(name, 0o777, dir_fd=parent)
        except FileExistsError:
            pass
        return os.open(name, _DIRECTORY_FLAGS, dir_fd=parent)


def write_text_no_follow(
    path: str, content: str, *, guard: Callable[[os.stat_result], None] | None = None
) -> None:
    """
    Write ``content`` (UTF-8, newlines as they are) to the absolute, resolved ``path``
    without following a symbolic link anywhere in it: each directory is opened from the
    root with ``O_NOFOLLOW`` (a missing one is created), then the file, also
    ``O_NOFOLLOW`` (created when missing).  A link in the way fails with ``OSError``
    (``ELOOP`` or ``ENOTDIR``); something else than a regular file with
    :class:`NotARegularFile`, before anything is written; ``guard`` sees the open
    file's ``stat`` and may raise to refuse it.  The file is rewritten in place (its
    inode, owner and mode are kept).
    """
    if not os.path.isabs(path):
        raise ValueError(f"not an absolute path: {path!r}")
    parts = Path(path).parts
    directory = os.open(parts[0], _DIRECTORY_FLAGS)
    try:
        for name in parts[1:-1]:
            inner = _open_directory(name, directory)
            os.close(directory)
            directory = inner
        fd = os.open(parts[-1], _FILE_FLAGS, 0o666, dir_fd=directory)
    finally:
        os.close(directory)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotARegularFile(errno.EINVAL, "not a regular file", path)
        if guard is not None:
            guard(info)
        os.ftruncate(fd, 0)
        data = memoryview(content.encode("utf-8"))
        while data:
            written = os.write(fd, data)
            data = data[written:]
    finally:
        os.close(fd)


@implementer(IBufferProvider)
class DiskBufferProvider:
    """
    No buffers: reads and writes go to the disk (UTF-8, newlines kept as they are).

    Writes never follow a symbolic link (:func:`write_text_no_follow`): the path must be
    resolved already, as :class:`FileAccess` does; ``guard`` sees each file opened for
    writing, before it is changed.
    """

    def __init__(self, guard: Callable[[os.stat_result], None] | None = None) -> None:
        self.guard = guard

    def read_text(self, path: str) -> str:
        """The file's text, decoded as UTF-8."""
        with open(path, encoding="utf-8", newline="") as f:
            return f.read()

    def write_text(self, path: str, content: str) -> None:
        """Write ``content`` to the file, creating it and its missing parent directories."""
        write_text_no_follow(path, content, guard=self.guard)


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


#: (directory, file name or None for "it and anything under it"): why an agent may not
#: write it.
_PROTECTED: tuple[tuple[str, str | None, str], ...] = (
    (".acpkit", "acp.toml", "it lists the agents this client starts (what it runs next time)"),
    (
        ".acpkit",
        "agent.toml",
        "it is the agent's project configuration (which commands run without asking)",
    ),
    (
        ".git",
        None,
        "git runs the commands its configuration names (core.hooksPath, core.fsmonitor...)"
        " and the programs in its hooks",
    ),
)

_USER_FILE_WHY = "it is your agents file: it lists the agents this client starts"
_USER_DIR_WHY = (
    "it is in your acpkit configuration directory (the agents this client starts, bob's settings)"
)
_LAUNCH_WHY = "the client reads it when it starts the agent (at launch)"


def _fold(name: str) -> str:
    """A name as a case-insensitive filesystem that drops trailing dots and spaces sees it."""
    return (name.rstrip(". ") or name).casefold()


def _folded_parts(path: str) -> list[str]:
    return [_fold(part) for part in Path(path).parts]


def protected_write_reason(path: str) -> str | None:
    """
    Why an agent may not write ``path`` (resolved: symbolic links followed), or ``None``.

    Matched by the path's components wherever the file is (a project, a session ``cwd``,
    an additional directory), as a case-insensitive filesystem that drops trailing dots
    and spaces would compare them.
    """
    parts = _folded_parts(os.path.realpath(path))
    for directory, name, why in _PROTECTED:
        dirs = directory.split("/")
        if name is not None:
            if parts[-len(dirs) - 1 :] == [*dirs, name]:
                return why
            continue
        for i in range(len(parts) - len(dirs) + 1):
            if parts[i : i + len(dirs)] == dirs:
                return why
    return None


def user_config_locations(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """
    ``(path, why)`` of what configures the client (and bob) outside any project: the
    user's agents file, and the directories ``~/.config/acpkit`` and
    ``$XDG_CONFIG_HOME/acpkit`` (a directory covers everything under it).
    """
    home = environ.get("HOME") or os.path.expanduser("~")
    locations = [
        (user_agents_file(environ), _USER_FILE_WHY),
        (os.path.join(home, ".config", "acpkit"), _USER_DIR_WHY),
    ]
    xdg = environ.get("XDG_CONFIG_HOME", "")
    if os.path.isabs(xdg):
        locations.append((os.path.join(xdg, "acpkit"), _USER_DIR_WHY))
    return locations


def _under(parts: list[str], location: list[str]) -> bool:
    return parts[: len(location)] == location


class FileAccess:
    """The fs handlers of one session (see the module docstring)."""

    def __init__(
        self,
        roots: Iterable[str],
        buffers: IBufferProvider | None = None,
        *,
        allow_outside_roots: bool = False,
        allow_protected_writes: bool = False,
        environ: Mapping[str, str] | None = None,
        protected_paths: Iterable[str] = (),
    ) -> None:
        #: Absolute directories inside which files may be read and written.
        self.roots: list[str] = []
        for root in roots:
            self.add_root(root)
        self.buffers: IBufferProvider = (
            buffers if buffers is not None else DiskBufferProvider(guard=self._guard)
        )
        self.allow_outside_roots = allow_outside_roots
        #: Let agents write the protected files too (refused by default).
        self.allow_protected_writes = allow_protected_writes
        #: ``(resolved path, why)`` of the user's configuration and of ``protected_paths``
        #: (a directory covers everything under it).
        self.protected: list[tuple[str, str]] = [
            (os.path.realpath(path), why)
            for path, why in user_config_locations(environ if environ is not None else os.environ)
        ]
        self.protected.extend(
            (os.path.realpath(os.path.abspath(path)), _LAUNCH_WHY) for path in protected_paths
        )

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

    # -- protected files ----------------------------------------------------------------

    def protection_reason(self, real: str) -> str | None:
        """Why an agent may not write the resolved path ``real``, or ``None``."""
        why = protected_write_reason(real)
        if why is not None:
            return why
        parts = _folded_parts(real)
        for location, reason in self.protected:
            if _under(parts, _folded_parts(location)):
                return reason
        return None

    def _protected_files(self) -> Iterable[tuple[str, str]]:
        """The existing protected files a hard link could share an inode with."""
        for root in self.roots:
            yield os.path.join(root, ".acpkit", "acp.toml"), _PROTECTED[0][2]
            yield os.path.join(root, ".acpkit", "agent.toml"), _PROTECTED[1][2]
            yield os.path.join(root, ".git", "config"), _PROTECTED[2][2]
            yield from _files_under(os.path.join(root, ".git", "hooks"), _PROTECTED[2][2])
        for location, why in self.protected:
            if os.path.isdir(location):
                yield from _files_under(location, why)
            else:
                yield location, why

    def _hard_link_reason(self, info: os.stat_result) -> str | None:
        """Why the file with this ``stat`` may not be written: it is a protected file."""
        if not stat.S_ISREG(info.st_mode):
            return None
        for path, why in self._protected_files():
            try:
                other = os.stat(path)
            except OSError:
                continue
            if (other.st_dev, other.st_ino) == (info.st_dev, info.st_ino):
                return f"it is a hard link of {path}: {why}"
        return None

    def _guard(self, info: os.stat_result) -> None:
        """The disk provider's check of the file it opened, before it changes it."""
        if self.allow_protected_writes:
            return
        why = self._hard_link_reason(info)
        if why is not None:
            raise ProtectedFileError(why)

    def _refuse(self, path: str, why: str) -> InvalidParams:
        log.warn("refused an agent's write to {path}: {why}", path=path, why=why)
        return InvalidParams(
            "$.params.path", f"{path} is protected, agents may not write it: {why}"
        )

    def write_text_file(self, params: schema.WriteTextFileRequest) -> schema.WriteTextFileResponse:
        """
        Answer ``fs/write_text_file`` (creating the file when it does not exist): the path
        is resolved once, and the resolved path is checked and written.
        """
        path = params.path
        if not os.path.isabs(path):
            raise InvalidParams("$.params.path", f"the path must be absolute, got {path!r}")
        if "\0" in path:
            raise InvalidParams("$.params.path", f"the path contains a NUL character: {path!r}")
        real = os.path.realpath(os.path.normpath(path))
        if not self.allow_outside_roots and not any(_inside(real, root) for root in self.roots):
            raise InvalidParams(
                "$.params.path",
                f"{path} is outside the directories this client lets agents use "
                f"({', '.join(self.roots)})",
            )
        if not self.allow_protected_writes:
            why = self.protection_reason(real)
            if why is None:
                try:
                    why = self._hard_link_reason(os.stat(real))
                except OSError:
                    pass
            if why is not None:
                raise self._refuse(path, why)
        if os.path.isdir(real):
            raise InvalidParams("$.params.path", f"{path} is a directory")
        try:
            self.buffers.write_text(real, params.content)
        except ProtectedFileError as e:
            raise self._refuse(path, str(e)) from None
        except NotARegularFile:
            raise InvalidParams("$.params.path", f"{path} is not a regular file") from None
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                raise InvalidParams(
                    "$.params.path",
                    f"{path} changed while it was written (a symbolic link appeared in it);"
                    " nothing was written",
                ) from None
            raise InternalError(f"cannot write {path}: {e.strerror or e}") from None
        log.info("agent wrote {path}", path=path)
        return schema.WriteTextFileResponse()


def _files_under(directory: str, why: str, limit: int = 1000) -> Iterable[tuple[str, str]]:
    """The files under ``directory`` (at most ``limit``), each with ``why``."""
    count = 0
    for top, _dirs, files in os.walk(directory):
        for name in files:
            yield os.path.join(top, name), why
            count += 1
            if count >= limit:
                return
