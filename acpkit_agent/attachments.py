"""
Which live connection a saved session is attached to: one at a time, in this process and
across the agent processes that share a sessions directory.

A session is *attached* by ``session/new`` and ``session/load`` and *detached* when its
connection ends (once the turn it may be running has finished).  The rules bob keeps
(:class:`~acpkit_agent.agent.BobAgent`):

=====================================  ================================================
what happens                           outcome
=====================================  ================================================
``session/load`` on another            **takeover**: the session moves to the loading
connection of this process             connection (after any turn running on the old
                                       one, which is saved first); the old connection's
                                       later requests on it are refused
                                       (:class:`SessionTakenOver`, ``-32002``)
``session/load`` while a connection    refused (:class:`AttachedElsewhere`, reported
of another process holds the session   as ``-32002``) until that connection ends or
                                       that process dies
``session/load`` on the connection     fine: the session is read again and replayed
that holds it
``session/new``                        a fresh id, never one attached anywhere or
                                       saved already
=====================================  ================================================

:class:`ISessionAttachments` is the seam; :class:`SessionAttachments` is its one
implementation.  In this process it is a table from session file to owner (any object:
bob uses the connection's agent).  Across processes it is a lock other processes see: an
exclusive ``flock`` on ``.<id>.json.lock`` beside the session file, held while any
connection of this process has the session attached and released on detach, or by the
kernel when the process dies (a killed agent never leaves a session locked).  The lock
file holds ``pid=… host=… since=…`` for the refusal message and is removed on release
(safely: whoever locks it checks it is still the file at that path).

``flock`` works on local filesystems; on NFS, Linux emulates it with byte-range locks,
which need the server's lock manager (NFSv4, or v3 with ``lockd``); a filesystem without
working locks gives no protection across processes.  When the lock file cannot be
created because the sessions directory cannot hold files (missing, not a directory, not
writable, read-only: the session cannot be saved there either), the session is attached
in this process only, and that is logged.  Any other failure refuses the attach.
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import os
import socket
from typing import Any

from twisted.logger import Logger
from zope.interface import Interface, implementer

from acpkit.errors import ResourceNotFound, RPCError, clip

__all__ = [
    "LOCK_SUFFIX",
    "AttachedElsewhere",
    "ISessionAttachments",
    "SessionAttachments",
    "SessionTakenOver",
    "lock_path_for",
]

_log = Logger()

LOCK_SUFFIX = ".lock"
"""The lock file of ``<id>.json`` is ``.<id>.json.lock``, in the same directory."""

#: A lock file that cannot be created for these reasons is in a directory where the
#: session cannot be saved either: the session is attached in this process only.
_UNSAVABLE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EROFS})


def lock_path_for(session_file: str) -> str:
    """The lock file beside a session file: ``.<id>.json.lock`` (hidden, like the store's
    temporary files)."""
    directory, name = os.path.split(session_file)
    return os.path.join(directory, "." + name + LOCK_SUFFIX)


class SessionTakenOver(RPCError):
    """
    ``-32002`` (ACP's *resource not found*: the session is not on this connection any
    more) for a request on a session another connection has since loaded; ``data`` holds
    the ``sessionId`` and ``reason: "takenOver"``.
    """

    CODE = ResourceNotFound.CODE

    def __init__(self, session_id: str) -> None:
        shown = clip(session_id)
        super().__init__(
            self.CODE,
            f"session {shown!r} was taken over: another connection loaded it "
            "(session/load), so this connection no longer holds it; load it again "
            "to continue here",
            {"sessionId": shown, "reason": "takenOver"},
        )


class AttachedElsewhere(Exception):
    """The session is attached to a connection of another process (``holder`` says which)."""

    def __init__(self, path: str, holder: str) -> None:
        super().__init__(f"{path} is locked by {holder}")
        self.path = path
        self.holder = holder

    def rpc_error(self, session_id: str) -> RPCError:
        """The ``-32002`` a ``session/load`` refused for this reason is answered with."""
        shown = clip(session_id)
        return RPCError(
            ResourceNotFound.CODE,
            f"session {shown!r} is attached to a connection of another agent process "
            f"({self.holder}); it can be loaded here once that connection ends",
            {"sessionId": shown, "reason": "attachedElsewhere", "holder": self.holder},
        )


class ISessionAttachments(Interface):
    """
    The owner of each attached session, keyed by the session file's path (absolute,
    symbolic links resolved: two spellings of one file are one key).
    """

    def attach(key: str, owner: object) -> object | None:
        """
        Attach the session to ``owner``; return the owner it was taken from in this
        process (None: it was not attached here, or ``owner`` had it already).  Raise
        :class:`AttachedElsewhere` when a connection of another process holds it, and
        ``OSError`` when that cannot be known.
        """

    def owner(key: str) -> object | None:
        """The session's owner in this process, or None."""

    def detach(key: str, owner: object) -> bool:
        """Detach the session if ``owner`` holds it (the last one releases the lock)."""


@implementer(ISessionAttachments)
class SessionAttachments:
    """In-process owners plus an ``flock`` per attached session (see the module)."""

    def __init__(self, *, pid: int | None = None, host: str | None = None) -> None:
        self._owners: dict[str, object] = {}
        #: The open, locked lock file of each attached session (absent: in-process only).
        self._locks: dict[str, int] = {}
        self._pid = pid if pid is not None else os.getpid()
        self._host = host if host is not None else socket.gethostname()

    def attach(self, key: str, owner: object) -> object | None:
        """Attach ``key`` to ``owner`` (see :meth:`ISessionAttachments.attach`)."""
        previous = self._owners.get(key)
        if previous is None:
            self._lock(key)
        self._owners[key] = owner
        return None if previous is owner else previous

    def owner(self, key: str) -> object | None:
        """The owner in this process, or None."""
        return self._owners.get(key)

    def detach(self, key: str, owner: object) -> bool:
        """Detach when ``owner`` holds ``key``; the lock is released and its file removed."""
        if self._owners.get(key) is not owner:
            return False
        del self._owners[key]
        fd = self._locks.pop(key, None)
        if fd is not None:
            try:
                os.unlink(lock_path_for(key))  # while still locked: nobody can be fooled
            except OSError:
                pass
            os.close(fd)
        return True

    def __len__(self) -> int:
        return len(self._owners)

    # -- the lock file ------------------------------------------------------------------

    def _lock(self, key: str) -> None:
        path = lock_path_for(key)
        while True:
            try:
                fd = _open_lock_file(path)
            except OSError as error:
                if error.errno in _UNSAVABLE:
                    _log.info(
                        "[acp] cannot create {path} ({why}): the session is attached in "
                        "this process only",
                        path=path,
                        why=error.strerror or error,
                    )
                    return
                raise
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise AttachedElsewhere(path, holder) from None
            except BaseException:
                os.close(fd)
                raise
            # Locked: but a holder may have removed the file (and another process made a
            # new one) between our open and our lock.  Ours only if it is still the file.
            try:
                current = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                os.close(fd)
                continue
            mine = os.fstat(fd)
            if (current.st_dev, current.st_ino) != (mine.st_dev, mine.st_ino):
                os.close(fd)
                continue
            self._write_holder(fd)
            self._locks[key] = fd
            return

    def _write_holder(self, fd: int) -> None:
        since = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        line = f"pid={self._pid} host={self._host} since={since}\n".encode()
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, line, 0)
        except OSError:
            pass  # a read-only lock file still locks; the refusal names no pid then


def _open_lock_file(path: str) -> int:
    """Open (creating) the lock file, never through a symbolic link, not inherited."""
    flags = os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, flags | os.O_RDWR, 0o644)
    except PermissionError:
        # another user's lock file: a read-only descriptor locks it just as well
        return os.open(path, flags | os.O_RDONLY, 0o644)


def _read_holder(fd: int) -> str:
    """The holder a lock file names, in words."""
    try:
        raw = os.pread(fd, 200, 0)
    except OSError:
        raw = b""
    fields: dict[str, Any] = {}
    for part in raw.decode("utf-8", "replace").split():
        name, _, value = part.partition("=")
        fields[name] = value
    if "pid" in fields:
        host = fields.get("host") or "?"
        return f"process {fields['pid']} on {host}, since {fields.get('since') or '?'}"
    return "another process"
