"""
:class:`ClientFileAccess`: the tools' :class:`~acpkit_agent.tools.base.IFileAccess` through
the client's ``fs/read_text_file`` and ``fs/write_text_file``, so that unsaved editor
buffers are read and edits land in the editor.

Used when the client advertised ``fs.readTextFile`` and ``fs.writeTextFile`` at
``initialize``; the agent falls back to :class:`~acpkit_agent.tools.base.DiskFileAccess`
otherwise (see :func:`file_access_for`).
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure
from zope.interface import implementer

from acpkit import schema
from acpkit.connection import AgentConnection
from acpkit.errors import RPCError
from acpkit_agent.tools.base import DiskFileAccess, IFileAccess

__all__ = ["ClientFileAccess", "client_error_as_oserror", "file_access_for"]

_RESOURCE_NOT_FOUND = -32002
_MISSING_WORDS = ("not found", "no such file", "does not exist", "enoent")


def client_error_as_oserror(error: BaseException, path: str) -> BaseException:
    """
    The :class:`OSError` a client's error stands for: :class:`FileNotFoundError` for a
    missing file (``-32002`` or a "not found" message), else ``OSError(message)``.
    Cancellation and other local errors are returned unchanged.
    """
    if not isinstance(error, RPCError):
        return error
    detail = error.message
    if isinstance(error.data, dict) and isinstance(error.data.get("reason"), str):
        detail = f"{detail} ({error.data['reason']})"
    lowered = detail.lower()
    if error.code == _RESOURCE_NOT_FOUND or any(word in lowered for word in _MISSING_WORDS):
        return FileNotFoundError(2, f"the editor says: {detail}", path)
    return OSError(5, f"the editor says: {detail}", path)


@implementer(IFileAccess)
class ClientFileAccess:
    """Reads and writes text files through the client (an ``AgentConnection``)."""

    def __init__(self, conn: AgentConnection, session_id: str) -> None:
        self._conn = conn
        self._session_id = session_id

    def _translate(self, failure: Failure, path: str) -> Failure:
        error = failure.value
        assert isinstance(error, BaseException)
        translated = client_error_as_oserror(error, path)
        return failure if translated is error else Failure(translated)

    def read_text(
        self, path: str, line: int | None = None, limit: int | None = None
    ) -> Deferred[str]:
        """``fs/read_text_file`` for ``path`` (1-based ``line``, ``limit`` lines)."""
        request = schema.ReadTextFileRequest(
            session_id=self._session_id, path=path, line=line, limit=limit
        )
        d: Deferred[Any] = self._conn.read_text_file(request)
        d.addCallback(lambda response: response.content)
        d.addErrback(self._translate, path)
        return d

    def write_text(self, path: str, content: str) -> Deferred[None]:
        """``fs/write_text_file`` of ``content`` to ``path``."""
        request = schema.WriteTextFileRequest(
            session_id=self._session_id, path=path, content=content
        )
        d: Deferred[Any] = self._conn.write_text_file(request)
        d.addCallback(lambda _: None)
        d.addErrback(self._translate, path)
        return d


def file_access_for(conn: AgentConnection, session_id: str) -> IFileAccess:
    """The client's file system when it offers both reading and writing, else the disk."""
    caps = getattr(conn, "client_capabilities", None)
    fs = getattr(caps, "fs", None) if caps is not None else None
    if fs is not None and fs.read_text_file and fs.write_text_file:
        return ClientFileAccess(conn, session_id)
    return DiskFileAccess()
