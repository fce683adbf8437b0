"""
Sessions on disk (``sessions.enabled``): ``<cwd>/<sessions.dir>/<id>.json``.

:class:`DiskSessionStore` is a :class:`acpkit_agent.session.SessionStore` that also writes
each session when it is registered and after each turn, ``/new`` and ``/compact``
(:meth:`DiskSessionStore.saved`).  Writes are atomic (:func:`atomic_write`: a temporary
file in the same directory, fsync, rename over the old file, fsync of the directory), so a
crash mid-write leaves the previous good file — and its temporary file
(``.<id>.json.<random>.tmp``), which the store removes the first time it uses that
directory again (a session created or loaded there), once older than
:data:`STALE_TEMP_AGE` seconds (:meth:`DiskSessionStore.clean`).

The file is a JSON object::

    {"format": "acpkit-agent-session", "version": 1, "id": "...", "cwd": "...",
     "updated": "2026-09-16T10:15:30+02:00", "history": [...],
     "totals": {"inputTokens": 0, "outputTokens": 0, "thoughtTokens": null,
                "cachedReadTokens": null, "reported": false},
     "lastMeasure": 0}

The file is written from each history message's text encoded once
(:mod:`acpkit_agent.history_encoding`, :func:`session_file_chunks`): a turn encodes only
its own messages, whatever the length of the history; the bytes are those
``json.dumps(session_to_document(session), ensure_ascii=False, indent=1)`` and a newline
give.

The remembered permission answers are not saved (a loaded session starts with an empty
"always allow" set).  A file of another format version fails to load with a clear
:class:`SessionFileError` (never a traceback).

A failed write (full disk, unwritable directory) never fails the turn: it is logged each
time, and :meth:`DiskSessionStore.take_warning` gives one line for the user, once until a
write of that session succeeds again.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from twisted.logger import Logger

from acpkit_agent.config import AgentConfig
from acpkit_agent.session import (
    MemorySessionStore,
    Session,
    SessionStore,
    SessionTotals,
    new_session_id,
)

__all__ = [
    "FILE_FORMAT",
    "FORMAT_VERSION",
    "DiskSessionStore",
    "SessionFileError",
    "atomic_write",
    "remove_stale_temporaries",
    "session_file_chunks",
    "session_from_document",
    "session_store_for",
    "session_to_document",
]

_log = Logger()

FILE_FORMAT = "acpkit-agent-session"
FORMAT_VERSION = 1
"""The version this agent writes and reads."""
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
TEMP_SUFFIX = ".tmp"
"""The suffix of :func:`atomic_write`'s temporary files: ``.<id>.json.<random>.tmp``."""
_TEMP_FILE = re.compile(r"\.[A-Za-z0-9][A-Za-z0-9_.-]*\.json\.[^/]+\.tmp")
STALE_TEMP_AGE = 60.0
"""
Seconds after which a temporary session file is a leftover of a crash mid-save (a save
takes milliseconds; a younger one may be another agent's save in progress).
"""


def remove_stale_temporaries(
    directory: str, *, now: float | None = None, age: float = STALE_TEMP_AGE
) -> list[str]:
    """
    Remove the temporary files a crash mid-save left in a sessions ``directory``
    (``.<id>.json.<random>.tmp`` last changed more than ``age`` seconds before ``now``);
    session files and anything else are kept.  Returns the paths removed; a directory that
    does not exist or cannot be listed, and a file that cannot be removed, are skipped.
    """
    now = time.time() if now is None else now
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed: list[str] = []
    for name in sorted(names):
        if _TEMP_FILE.fullmatch(name) is None:
            continue
        path = os.path.join(directory, name)
        try:
            if not os.path.isfile(path) or now - os.lstat(path).st_mtime <= age:
                continue
            os.unlink(path)
        except OSError:
            continue
        removed.append(path)
    return removed


class SessionFileError(Exception):
    """A session file that cannot be loaded; the message says why in one line."""


def atomic_write(
    path: str,
    data: bytes | Iterable[bytes],
    *,
    replace: Callable[[str, str], None] = os.replace,
) -> None:
    """
    Write ``data`` (bytes, or chunks written one after the other) to ``path`` atomically:
    temporary file in the same directory, fsync, ``replace`` (rename) over ``path``, fsync
    of the directory.  Creates the directory.
    On any failure the temporary file is removed and ``path`` is untouched.
    """
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, temporary = tempfile.mkstemp(
        dir=directory, prefix="." + os.path.basename(path) + ".", suffix=TEMP_SUFFIX
    )
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.writelines((data,) if isinstance(data, bytes) else data)
            stream.flush()
            os.fsync(stream.fileno())
        replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def _now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def session_to_document(session: Session, *, updated: str | None = None) -> dict[str, Any]:
    """The JSON document of a session file (``updated``: the time it says; default now)."""
    return _document(session, session.history, updated)


def _document(session: Session, history: Any, updated: str | None) -> dict[str, Any]:
    totals = session.totals
    return {
        "format": FILE_FORMAT,
        "version": FORMAT_VERSION,
        "id": session.id,
        "cwd": session.cwd,
        "updated": updated if updated is not None else _now(),
        "history": history,
        "totals": {
            "inputTokens": totals.input_tokens,
            "outputTokens": totals.output_tokens,
            "thoughtTokens": totals.thought_tokens,
            "cachedReadTokens": totals.cached_read_tokens,
            "reported": totals.reported,
        },
        "lastMeasure": session.last_measure,
    }


#: Stands for the history in the document :func:`session_file_chunks` encodes around it
#: (a string no session id, path or time holds).
_HISTORY_MARK = "\x00acpkit-history\x00"
_HISTORY_MARK_JSON = json.dumps(_HISTORY_MARK)


def session_file_chunks(session: Session, *, updated: str | None = None) -> list[bytes]:
    """
    The session file's bytes, in chunks: the bytes of
    ``json.dumps(session_to_document(session), ensure_ascii=False, indent=1)`` and a
    newline, with each history message's text encoded once per message, not once per save
    (:class:`~acpkit_agent.history_encoding.HistoryEncoding`).  ``TypeError``/``ValueError``
    for a history ``json`` cannot encode.
    """
    document = _document(session, _HISTORY_MARK, updated)
    head, tail = json.dumps(document, ensure_ascii=False, indent=1).split(_HISTORY_MARK_JSON)
    entries = session.encoding.file_entries(session.history)
    if not entries:
        return [(head + "[]" + tail + "\n").encode("utf-8")]
    # each entry is "\n  <json>,": the last one loses its comma before the list's end
    return [
        (head + "[").encode("utf-8"),
        *entries[:-1],
        entries[-1][:-1],
        ("\n ]" + tail + "\n").encode("utf-8"),
    ]


def _optional_int(value: Any, key: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SessionFileError(f"totals.{key} is not an integer")
    return value


def _totals(raw: Any) -> SessionTotals:
    if raw is None:
        return SessionTotals()
    if not isinstance(raw, dict):
        raise SessionFileError("totals is not an object")
    return SessionTotals(
        input_tokens=_optional_int(raw.get("inputTokens"), "inputTokens") or 0,
        output_tokens=_optional_int(raw.get("outputTokens"), "outputTokens") or 0,
        thought_tokens=_optional_int(raw.get("thoughtTokens"), "thoughtTokens"),
        cached_read_tokens=_optional_int(raw.get("cachedReadTokens"), "cachedReadTokens"),
        reported=bool(raw.get("reported", False)),
    )


def session_from_document(document: Any, session_id: str, cwd: str) -> Session:
    """
    A session from a decoded session file; :class:`SessionFileError` when it is not one,
    or when its format version is not :data:`FORMAT_VERSION`.
    """
    if not isinstance(document, dict) or document.get("format") != FILE_FORMAT:
        raise SessionFileError("not an acpkit agent session file")
    version = document.get("version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise SessionFileError(f"format version {version!r} is not a number")
    if version > FORMAT_VERSION:
        raise SessionFileError(
            f"written by a newer agent (format version {version}; this agent reads "
            f"version {FORMAT_VERSION}): upgrade the agent to load it"
        )
    if version < FORMAT_VERSION:
        raise SessionFileError(
            f"format version {version} is older than any this agent reads "
            f"(version {FORMAT_VERSION})"
        )
    history = document.get("history")
    if not isinstance(history, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) for m in history
    ):
        raise SessionFileError("history is not a list of messages with a role")
    last_measure = document.get("lastMeasure", 0)
    if isinstance(last_measure, bool) or not isinstance(last_measure, int):
        raise SessionFileError("lastMeasure is not an integer")
    return Session(
        id=session_id,
        cwd=cwd,
        history=history,
        totals=_totals(document.get("totals")),
        last_measure=last_measure,
    )


class DiskSessionStore:
    """Keeps sessions in memory and writes each one to ``<cwd>/<directory>/<id>.json``."""

    def __init__(
        self,
        directory: str,
        *,
        replace: Callable[[str, str], None] = os.replace,
        clock: Callable[[], float] = time.time,
    ):
        self.directory = directory
        self._replace = replace
        self._clock = clock
        self._sessions: dict[str, Session] = {}
        self._warnings: dict[str, str] = {}
        self._failing: set[str] = set()
        self._cleaned: set[str] = set()

    # -- SessionStore -----------------------------------------------------------------

    def add(self, session: Session) -> None:
        """Register a session (new or loaded); the first in a directory cleans it."""
        self.clean(session.cwd)
        self._sessions[session.id] = session

    def get(self, session_id: str) -> Session | None:
        """The session with this id, or None."""
        return self._sessions.get(session_id)

    def saved(self, session: Session) -> None:
        """Write the session's file; a failure is logged (the caller's turn goes on)."""
        self.write(session)

    def __iter__(self) -> Iterator[Session]:
        """Every session kept."""
        return iter(list(self._sessions.values()))

    # -- files ------------------------------------------------------------------------

    def sessions_dir(self, cwd: str) -> str:
        """The directory of the session files of ``cwd``."""
        return os.path.join(cwd, os.path.expanduser(self.directory))

    def path_for(self, session_id: str, cwd: str) -> str:
        """The file of a session (the id must be a plain file name)."""
        if _SESSION_ID.fullmatch(session_id) is None:
            raise SessionFileError(f"{session_id!r} is not a session id")
        return os.path.join(self.sessions_dir(cwd), session_id + ".json")

    def clean(self, cwd: str) -> None:
        """
        The first time this store uses the sessions directory of ``cwd`` (a session created
        or loaded there), remove the temporary files a crash mid-save left in it
        (:func:`remove_stale_temporaries`); each removal is logged.
        """
        directory = os.path.normpath(self.sessions_dir(cwd))
        if directory in self._cleaned:
            return
        self._cleaned.add(directory)
        for path in remove_stale_temporaries(directory, now=self._clock()):
            _log.info("[acp] removed {path}, left by a save that did not finish", path=path)

    def write(self, session: Session) -> bool:
        """Write the session's file now; False (logged) when it could not be written."""
        path = self.path_for(session.id, session.cwd)
        try:
            atomic_write(path, session_file_chunks(session), replace=self._replace)
        except (OSError, TypeError, ValueError) as error:
            why = _describe(error)
            _log.warn(
                "[acp] session {sid}: cannot save {path}: {why}", sid=session.id, path=path, why=why
            )
            if session.id not in self._failing:
                self._failing.add(session.id)
                self._warnings[session.id] = (
                    f"[session not saved: {why} ({path}); the conversation goes on in memory]"
                )
            return False
        if session.id in self._failing:
            self._failing.discard(session.id)
            _log.info("[acp] session {sid}: saved again to {path}", sid=session.id, path=path)
        return True

    def take_warning(self, session_id: str) -> str | None:
        """The line telling the user a save failed, once per failure streak (else None)."""
        return self._warnings.pop(session_id, None)

    def archive(self, session: Session) -> str | None:
        """
        Save a copy of ``session``'s conversation under a new id (for ``/new``); None when
        the conversation is empty (the system prompt only) or the copy could not be written.
        """
        if not any(message.get("role") != "system" for message in session.history):
            return None
        archive_id = new_session_id()
        while archive_id in self._sessions or os.path.exists(
            self.path_for(archive_id, session.cwd)
        ):
            archive_id = new_session_id()
        copy = Session(
            id=archive_id,
            cwd=session.cwd,
            history=[dict(message) for message in session.history],
            totals=SessionTotals(**_totals_fields(session.totals)),
            last_measure=session.last_measure,
        )
        if not self.write(copy):
            self._warnings.pop(archive_id, None)
            return None
        return archive_id

    def load(self, session_id: str, cwd: str) -> Session:
        """Read a session file; :class:`SessionFileError` (one line) when it cannot be used."""
        path = self.path_for(session_id, cwd)
        self.clean(cwd)
        try:
            with open(path, "rb") as stream:
                raw = stream.read()
        except FileNotFoundError:
            raise SessionFileError(
                f"no saved session {session_id!r} in {os.path.dirname(path)}"
            ) from None
        except OSError as error:
            raise SessionFileError(
                f"{os.path.basename(path)} cannot be read: {_describe(error)}"
            ) from None
        try:
            document = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as error:
            raise SessionFileError(f"{os.path.basename(path)} is not valid JSON: {error}") from None
        try:
            return session_from_document(document, session_id, cwd)
        except SessionFileError as error:
            raise SessionFileError(f"{os.path.basename(path)}: {error}") from None


def _totals_fields(totals: SessionTotals) -> dict[str, Any]:
    return {
        "input_tokens": totals.input_tokens,
        "output_tokens": totals.output_tokens,
        "thought_tokens": totals.thought_tokens,
        "cached_read_tokens": totals.cached_read_tokens,
        "reported": totals.reported,
    }


def _describe(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return " ".join((str(error) or type(error).__name__).split())


def session_store_for(config: AgentConfig) -> SessionStore:
    """A :class:`DiskSessionStore` when ``config.sessions_enabled``, else a memory store."""
    if config.sessions_enabled:
        return DiskSessionStore(config.sessions_dir)
    return MemorySessionStore()
