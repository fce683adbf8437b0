"""
Every use acpkit makes of another library's private internals, in one place.

Each one has a test that the internal still exists on the installed release
(``tests/io/test_compat.py``; CI runs it on the lowest and the newest Twisted supported), and
a fallback or a clear error when it does not:

- ``StandardIO._writer`` (`stdio_writer`): closing stdio when stdout was lost first, and
  flushing stdout now. Without it: `TwistedInternalsChanged`, naming the attribute and
  the Twisted release.
- ``FileDescriptor._tempDataLen`` and ``_writeDisconnecting`` (`flush_writer`): writing a
  transport's buffer now instead of on the reactor's next turn. Without them: no flush
  now; the reactor writes on its next turn, as stock Twisted does (slower, never wrong).
  The same, with ``_writeDisconnected`` (`writer_idle`, `write_now`): writing to an idle
  descriptor at once, without registering it with the reactor. Without them: not idle,
  so the descriptor's ``write``, as stock Twisted does.
- ``Process.pipes`` (`process_pipe`): the child's stdin writer (to flush it) and stdout
  reader (to pause reading it). Without it: ``None``, so no flush now and no pausing of
  the child's stdout (no back-pressure).
- Pygments' ``RegexLexer._tokens`` (`regex_lexer_states`): resuming highlighting at a line
  start. Without it: ``None``, and the caller lexes the whole block each time (slower).
- ``twisted.internet.endpoints._parse`` (`endpoint_arguments`): the positional and keyword
  arguments of a server endpoint string, escapes undone, as ``serverFromString`` reads
  them (the bind policy and the TLS server endpoint read ``interface=``, ``mode=`` and
  the ``ssl:`` parameters from it). Without it: `TwistedInternalsChanged`; guessing at
  the grammar would let a bind check and Twisted read one string two ways.
- ``HTTPConnectionPool._factory`` (`quiet_http_pool`): the factory class of the pool's
  connections, replaced by a subclass with ``noisy = False``, so that an HTTP client does
  not log "Starting factory" and "Stopping factory" for each connection. Without it: the
  stock pool, which logs those two lines (noisy, never wrong).

- ``asyncio._get_running_loop`` (`running_asyncio_loop`): the running loop or ``None``,
  without raising and catching ``RuntimeError`` as ``get_running_loop`` does when there is
  none (asked once or twice per request). Without it: ``get_running_loop``.

``StandardIO`` itself comes from the public ``twisted.internet.stdio`` (on POSIX, the
only platform acpkit supports, it is the class of ``twisted.internet._posixstdio``, which
only the type checker imports). Pygments is not imported here: it is the
client extra's, and this module is part of the core.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the class the public name is on POSIX, whose attributes mypy checks
    from twisted.internet._posixstdio import StandardIO
else:
    from twisted.internet.stdio import StandardIO

__all__ = [
    "StandardIO",
    "TwistedInternalsChanged",
    "endpoint_arguments",
    "flush_writer",
    "http_request_path",
    "process_pipe",
    "quiet_http_pool",
    "regex_lexer_states",
    "running_asyncio_loop",
    "stdio_writer",
    "write_now",
    "writer_idle",
]


class TwistedInternalsChanged(RuntimeError):
    """This Twisted release no longer has a private attribute acpkit relies on."""

    def __init__(self, where: str, name: str) -> None:
        from twisted import __version__

        super().__init__(
            f"acpkit needs {where}.{name}, a private attribute this Twisted ({__version__}) "
            f"does not have: install a Twisted release acpkit supports (setup.cfg's "
            f"install_requires; CI tests the lowest and the newest) or report it"
        )


def stdio_writer(transport: StandardIO) -> Any:
    """
    The writer of ``transport``'s stdout (a ``FileDescriptor``), or ``None`` once stdout
    is closed (``StandardIO._writer``). Raises `TwistedInternalsChanged` when this
    Twisted's ``StandardIO`` has no such attribute: there is no safe guess.
    """
    try:
        return transport._writer
    except AttributeError:
        raise TwistedInternalsChanged("twisted.internet.stdio.StandardIO", "_writer") from None


def flush_writer(writer: Any) -> None:
    """
    Write what ``writer`` (a Twisted ``FileDescriptor``) has buffered now, instead of on
    the reactor's next turn.

    Twisted buffers every write until the reactor polls the descriptor again: one more
    loop iteration per message, which is most of a request's round-trip time over a pipe.
    Nothing happens while the writer is closing (the reactor finishes that itself), or
    when this Twisted's ``FileDescriptor`` lacks the private ``_tempDataLen`` (the reactor
    then writes it on its next turn, as usual). An error is left for the reactor to find
    on its own next write attempt (``doWrite`` returns it rather than raising).  A writer
    whose last write left bytes unsent (the peer is not keeping up) is left to the
    reactor too.
    """
    if writer is None or writer.disconnected or writer.disconnecting:
        return
    if getattr(writer, "_writeDisconnecting", False):
        return
    pending = getattr(writer, "_tempDataLen", None)
    if pending is None:
        return
    if len(writer.dataBuffer) - getattr(writer, "offset", 0) > 0:
        # The last write left bytes unsent: the pipe was full, and the reactor writes
        # when it drains.  Trying now would fail again, after copying the unsent bytes
        # and the new ones into one buffer (up to SEND_LIMIT, 128 KiB, per message).
        return
    if pending:
        writer.doWrite()


def writer_idle(writer: Any) -> bool:
    """
    Whether ``writer`` (a Twisted ``FileDescriptor``) is connected, not closing, and has
    nothing buffered (``_tempDataLen``, ``_writeDisconnecting``, ``_writeDisconnected``).
    False without those internals.
    """
    try:
        return bool(
            writer.connected
            and not writer.disconnecting
            and writer._writeDisconnecting is False
            and writer._writeDisconnected is False
            and writer._tempDataLen == 0
            and len(writer.dataBuffer) <= writer.offset
        )
    except AttributeError:  # None, or a Twisted without these
        return False


def write_now(writer: Any, data: bytes) -> None:
    """
    Write ``data`` to ``writer`` (a Twisted ``FileDescriptor``) at once when it is idle
    (`writer_idle`), else as its ``write`` does (buffered for the reactor).

    An idle descriptor is written with ``writeSomeData``, and not registered with the
    reactor for writing (its ``write`` registers it, and once written, unregisters it:
    two ``epoll_ctl`` calls and their bookkeeping per message).  What the pipe did not
    take, and everything when the write failed, goes to ``write``: the reactor writes it
    when the pipe drains, or finds the error on its own next write attempt, as usual.
    """
    if writer is None or not data:
        return
    if writer_idle(writer):
        try:
            written = writer.writeSomeData(data)
        except OSError:
            written = 0  # the reactor's own attempt meets the error again
        if type(written) is int and written > 0:
            if written >= len(data):
                return
            data = data[written:]
    writer.write(data)


def _running_loop_or_none() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


#: The asyncio event loop running in this thread, or ``None``
#: (``asyncio._get_running_loop``, else the same through ``get_running_loop``).
running_asyncio_loop: Any = getattr(asyncio, "_get_running_loop", _running_loop_or_none)


def process_pipe(process: Any, fd: int) -> Any:
    """
    The reader or writer of a spawned process's descriptor ``fd`` (``Process.pipes``),
    or ``None`` when it is closed or this Twisted's process has no ``pipes``.
    """
    pipes = getattr(process, "pipes", None)
    return None if pipes is None else pipes.get(fd)


def regex_lexer_states(lexer: object) -> dict[str, Any] | None:
    """
    The compiled state table of a Pygments ``RegexLexer`` (``RegexLexer._tokens``:
    state name to a list of ``(match, action, new_state)``), or ``None`` when ``lexer``
    has none, as a Pygments release without it would.
    """
    tokens = getattr(lexer, "_tokens", None)
    return tokens if isinstance(tokens, dict) else None


def http_request_path(channel: object) -> bytes | None:
    """
    The path (the query cut off) of the HTTP/1.x request whose head an
    ``HTTPChannel`` is reading (``HTTPChannel._path``, set from the request line until
    the request is complete), or ``None`` when it has none (another channel, or a
    Twisted without it: the caller then treats the request like any other).
    """
    target = getattr(channel, "_path", None)
    if not isinstance(target, bytes):
        return None
    return target.split(b"?", 1)[0]


def endpoint_arguments(description: str) -> tuple[list[str], dict[str, str]]:
    """
    The arguments ``serverFromString`` reads from ``description``: the positional ones
    (the endpoint type first) and the ``key=value`` ones, escapes undone
    (``twisted.internet.endpoints._parse``).  ``ValueError`` for a string it cannot
    split; `TwistedInternalsChanged` when this Twisted has no such function.
    """
    from twisted.internet import endpoints

    parse = getattr(endpoints, "_parse", None)
    if parse is None:
        raise TwistedInternalsChanged("twisted.internet.endpoints", "_parse")
    try:
        args, kwargs = parse(description)
    except (ValueError, IndexError) as e:
        raise ValueError(f"{description!r} is not an endpoint string: {e}") from None
    return [str(a) for a in args], {str(k): str(v) for k, v in kwargs.items()}


def quiet_http_pool(reactor: Any, *, persistent: bool) -> Any:
    """
    A ``twisted.web.client.HTTPConnectionPool`` whose connection factories are not
    ``noisy``: no "Starting factory" / "Stopping factory" log line per connection (the
    pool's ``_factory`` class, subclassed).  Without that attribute, the stock pool.
    """
    from twisted.web.client import HTTPConnectionPool

    pool: Any = HTTPConnectionPool(reactor, persistent=persistent)
    factory = getattr(pool, "_factory", None)
    if isinstance(factory, type):
        pool._factory = type(f"Quiet{factory.__name__}", (factory,), {"noisy": False})
    return pool
