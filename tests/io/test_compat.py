"""
``acpkit.compat``: each private internal acpkit uses still exists on the installed
Twisted and Pygments, and each has its fallback or clear error when it does not.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import process as process_module
from twisted.internet import stdio
from twisted.internet.abstract import FileDescriptor
from twisted.internet.protocol import Protocol
from twisted.internet.testing import MemoryReactor

from acpkit import compat
from acpkit.io import serve_stdio

ROOT = Path(__file__).parent.parent.parent


class _Writer:
    """A stand-in for a ``FileDescriptor`` that records ``doWrite`` calls."""

    disconnected = False
    disconnecting = False
    _writeDisconnecting = False

    def __init__(self, buffered: bytes = b"", temp: int = 0) -> None:
        self.dataBuffer = buffered
        self.offset = 0
        self._tempDataLen = temp
        self.writes = 0

    def doWrite(self) -> None:
        self.writes += 1


@pytest.fixture
def pipes() -> Iterator[tuple[int, int]]:
    read, write = os.pipe()
    yield read, write
    for fd in (read, write):
        try:
            os.close(fd)
        except OSError:
            pass


# -- StandardIO --------------------------------------------------------------------------


def test_standard_io_is_twisteds_public_class() -> None:
    """The base class is the public ``twisted.internet.stdio.StandardIO`` (POSIX's)."""
    from twisted.internet import _posixstdio

    # For mypy, twisted.internet.stdio's StandardIO is its Windows branch's class.
    public: object = stdio.StandardIO
    assert compat.StandardIO is public is _posixstdio.StandardIO


def test_standard_io_has_a_writer(pipes: tuple[int, int]) -> None:
    """``StandardIO._writer`` exists: the stdout writer, a ``FileDescriptor``."""
    read, write = pipes
    transport = serve_stdio(Protocol(), MemoryReactor(), stdin=read, stdout=write)
    assert "_writer" in vars(transport)
    assert isinstance(compat.stdio_writer(transport), FileDescriptor)


def test_stdio_writer_without_the_attribute_is_a_clear_error() -> None:
    """Without ``_writer`` there is no safe guess: the error names it and Twisted's version."""
    with pytest.raises(compat.TwistedInternalsChanged, match=r"StandardIO\._writer.*Twisted \("):
        compat.stdio_writer(object())  # type: ignore[arg-type]


# -- FileDescriptor's buffer ----------------------------------------------------------------


def test_file_descriptor_has_the_buffer_internals() -> None:
    """``FileDescriptor`` still has ``dataBuffer``, ``_tempDataLen``, ``_writeDisconnecting``."""

    class Connected(FileDescriptor):
        connected = True

        def startWriting(self) -> None:
            pass  # no reactor polls it here

    writer = Connected(MemoryReactor())
    assert writer.dataBuffer == b""
    assert writer._tempDataLen == 0
    assert writer._writeDisconnecting is False
    writer.write(b"x")
    assert writer._tempDataLen == 1  # where a write waits for the reactor
    assert callable(writer.doWrite)


def test_flush_writer_writes_what_is_buffered() -> None:
    """
    A writer with new data (its list buffer) and nothing left unsent is written now, also
    when its last buffer was sent whole; an empty one is left alone.
    """
    sent, temp, empty = _Writer(b"data", temp=3), _Writer(temp=3), _Writer()
    sent.offset = 4  # the last write sent the whole buffer
    for writer in (sent, temp, empty):
        compat.flush_writer(writer)
    assert (sent.writes, temp.writes, empty.writes) == (1, 1, 0)


def test_flush_writer_leaves_a_writer_with_unsent_bytes_to_the_reactor() -> None:
    """
    A writer whose last write left bytes unsent (the pipe was full) is not written now:
    the reactor writes when the pipe drains, instead of a failed write per message, each
    after copying the unsent bytes and the new message into one buffer.
    """
    blocked, partly = _Writer(b"data", temp=3), _Writer(b"data", temp=3)
    partly.offset = 2
    for writer in (blocked, partly):
        compat.flush_writer(writer)
    assert (blocked.writes, partly.writes) == (0, 0)


def test_flush_writer_leaves_a_closing_writer_to_the_reactor() -> None:
    """A writer that is closing, or closed, is not written (the reactor finishes it)."""
    closing = _Writer(b"data")
    closing._writeDisconnecting = True
    compat.flush_writer(closing)
    compat.flush_writer(None)
    assert closing.writes == 0


def test_flush_writer_without_the_internals_leaves_it_to_the_reactor() -> None:
    """Without ``_tempDataLen``, nothing is flushed now: the reactor writes next turn."""
    writer = _Writer(b"data")
    del writer._tempDataLen
    compat.flush_writer(writer)
    assert writer.writes == 0


# -- Process.pipes ------------------------------------------------------------------------


@pytest.mark.process
def test_process_has_pipes() -> None:
    """``twisted.internet.process.Process`` still keeps its descriptors in ``pipes``."""
    from twisted.internet import reactor
    from twisted.internet.protocol import ProcessProtocol

    spawned = reactor.spawnProcess(
        ProcessProtocol(), sys.executable, [sys.executable, "-c", "pass"], env={}
    )
    assert isinstance(spawned, process_module.Process)
    try:
        assert isinstance(spawned.pipes, dict)
        assert compat.process_pipe(spawned, 0) is spawned.pipes[0]
        assert compat.process_pipe(spawned, 1) is spawned.pipes[1]
    finally:
        for pipe in list(spawned.pipes.values()):
            pipe.connectionLost(None)
        spawned.reapProcess()


def test_process_pipe_without_pipes_is_none() -> None:
    """A process object without ``pipes`` (or a closed descriptor) gives ``None``."""
    assert compat.process_pipe(object(), 0) is None

    class Closed:
        pipes: dict[int, object] = {}

    assert compat.process_pipe(Closed(), 1) is None


# -- Pygments -------------------------------------------------------------------------------


def test_regex_lexer_has_its_state_table() -> None:
    """A Pygments ``RegexLexer`` still has ``_tokens``: state name to compiled rules."""
    pytest.importorskip("pygments")
    from pygments.lexers import get_lexer_by_name

    states = compat.regex_lexer_states(get_lexer_by_name("python"))
    assert states is not None and "root" in states
    rule = states["root"][0]  # (match, action, new_state)
    assert len(rule) == 3 and callable(rule[0])


def test_regex_lexer_states_without_the_table_is_none() -> None:
    """A lexer without ``_tokens`` gives ``None``: the highlighter then does not resume."""
    assert compat.regex_lexer_states(object()) is None


# -- the tests' own private uses --------------------------------------------------------


def test_twist_runner_used_by_the_twistd_test_exists() -> None:
    """``tests/agent/test_agent_twistd.py`` runs ``twisted.application.twist._twist.Twist``."""
    from twisted.application.twist._twist import Twist

    assert callable(Twist.main)


def test_endpoint_arguments_reads_what_server_from_string_reads() -> None:
    """``endpoints._parse`` exists: a server endpoint string's positional and keyword
    arguments, escapes undone; a string it cannot split is a ValueError."""
    args, kwargs = compat.endpoint_arguments(r"tcp:8765:interface=\:\:1:backlog=5")
    assert args == ["tcp", "8765"]
    assert kwargs == {"interface": "::1", "backlog": "5"}
    assert compat.endpoint_arguments("unix:/tmp/s:mode=600") == (
        ["unix", "/tmp/s"],
        {"mode": "600"},
    )


def test_endpoint_arguments_without_the_parser_is_a_clear_error(monkeypatch: Any) -> None:
    """Without ``endpoints._parse`` no guess is made: the error names it."""
    from twisted.internet import endpoints

    monkeypatch.delattr(endpoints, "_parse")
    with pytest.raises(compat.TwistedInternalsChanged, match=r"endpoints\._parse"):
        compat.endpoint_arguments("tcp:0")


def test_http_pool_has_its_factory_class() -> None:
    """``HTTPConnectionPool._factory`` exists: the quiet pool's factories are not noisy."""
    from twisted.web.client import HTTPConnectionPool

    assert isinstance(HTTPConnectionPool._factory, type)
    pool = compat.quiet_http_pool(MemoryReactor(), persistent=False)
    assert isinstance(pool, HTTPConnectionPool)
    assert issubclass(pool._factory, HTTPConnectionPool._factory)
    assert pool._factory.noisy is False
    assert pool.persistent is False


def test_quiet_http_pool_logs_no_factory_lines() -> None:
    """A connection of the quiet pool logs no "Starting factory" / "Stopping factory"."""
    from tests.fixtures.agent.harness import captured_logs

    with captured_logs() as logs:
        pool = compat.quiet_http_pool(MemoryReactor(), persistent=False)
        factory = pool._factory(lambda _: None, "endpoint")
        factory.doStart()
        factory.doStop()
    assert logs.lines == []


def test_quiet_http_pool_without_the_attribute_is_the_stock_pool(monkeypatch: Any) -> None:
    """A Twisted without ``_factory``: the stock pool (noisy, never wrong)."""
    from twisted.web import client

    class Bare:
        def __init__(self, reactor: Any, persistent: bool) -> None:
            self.persistent = persistent

    monkeypatch.setattr(client, "HTTPConnectionPool", Bare)
    pool = compat.quiet_http_pool(MemoryReactor(), persistent=True)
    assert isinstance(pool, Bare) and not hasattr(pool, "_factory")


def test_an_http_channel_knows_the_path_of_the_request_it_reads() -> None:
    """``HTTPChannel._path`` holds the request line's target while the head is read."""
    from twisted.internet.testing import StringTransport
    from twisted.web.http import HTTPChannel, Request

    seen: list[bytes | None] = []

    class Recording(Request):
        def gotLength(self, length: int | None) -> None:
            seen.append(compat.http_request_path(self.channel))
            super().gotLength(length)

    channel = HTTPChannel()
    channel.requestFactory = Recording
    channel.makeConnection(StringTransport())
    channel.dataReceived(b"GET /healthz?x=1 HTTP/1.1\r\nHost: h\r\n\r\n")
    assert seen == [b"/healthz"]


def test_http_request_path_without_the_attribute_is_none() -> None:
    """Another channel (HTTP/2's, a test's): no path, no guess."""
    assert compat.http_request_path(object()) is None


def test_no_private_twisted_import_outside_compat() -> None:
    """Only ``acpkit/compat.py`` names a private Twisted module or attribute."""
    private = (
        "_posixstdio",
        "._writer",
        "_tempDataLen",
        "_writeDisconnecting",
        "_writeDisconnected",
        "._tokens",
        "endpoints import _parse",
        "endpoints._parse",
        "._factory",
        "_HTTP11ClientFactory",
        '"_path"',
    )
    offenders = []
    for package in ("acpkit", "acpkit_agent", "acpkit_client"):
        for path in (ROOT / package).rglob("*.py"):
            if path.name == "compat.py":
                continue
            text = path.read_text()
            offenders += [f"{path.relative_to(ROOT)}: {name}" for name in private if name in text]
    assert offenders == []


@pytest.mark.process
def test_compat_imports_no_pygments() -> None:
    """``acpkit.compat`` is part of the core: importing it does not import Pygments."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys, acpkit.compat; print('pygments' in sys.modules)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "False"


def test_file_descriptor_has_the_idle_internals() -> None:
    """``FileDescriptor`` still has ``_writeDisconnected`` and ``writeSomeData``: an idle
    connected descriptor is `writer_idle`, one with a buffered write is not."""

    class Connected(FileDescriptor):
        connected = True

        def startWriting(self) -> None:
            pass

    writer = Connected(MemoryReactor())
    assert writer._writeDisconnected is False
    assert callable(writer.writeSomeData)
    assert compat.writer_idle(writer)
    writer.write(b"x")
    assert not compat.writer_idle(writer)
    assert not compat.writer_idle(None)  # a closed stdout


class _DirectWriter:
    """A stand-in ``FileDescriptor`` whose pipe takes ``room`` bytes per write."""

    connected = True
    disconnecting = False
    _writeDisconnecting = False

    def __init__(self, room: int) -> None:
        self._writeDisconnected = False
        self.room = room
        self.dataBuffer = b""
        self.offset = 0
        self._tempDataLen = 0
        self.direct: list[bytes] = []
        self.buffered: list[bytes] = []

    def writeSomeData(self, data: bytes) -> int:
        self.direct.append(data[: self.room])
        return min(self.room, len(data))

    def write(self, data: bytes) -> None:
        self.buffered.append(data)
        self._tempDataLen += len(data)


def test_write_now_writes_an_idle_writer_directly() -> None:
    """An idle writer is written at once; what its pipe did not take is buffered, and a
    writer with data waiting gets the write buffered behind it."""
    whole, part = _DirectWriter(room=100), _DirectWriter(room=3)
    compat.write_now(whole, b"hello")
    compat.write_now(part, b"hello")
    assert (whole.direct, whole.buffered) == ([b"hello"], [])
    assert (part.direct, part.buffered) == ([b"hel"], [b"lo"])
    compat.write_now(part, b"more")
    assert (part.direct, part.buffered) == ([b"hel"], [b"lo", b"more"])


def test_write_now_without_the_internals_buffers_as_twisted_does() -> None:
    """Without ``_writeDisconnected`` the writer is not known idle: its ``write``."""
    writer = _DirectWriter(room=100)
    del writer._writeDisconnected
    compat.write_now(writer, b"hello")
    assert (writer.direct, writer.buffered) == ([], [b"hello"])


def test_running_asyncio_loop_is_asyncios_own() -> None:
    """``asyncio._get_running_loop`` exists and is what `running_asyncio_loop` is: None
    without a running loop, the loop inside one."""
    import asyncio

    assert compat.running_asyncio_loop is asyncio._get_running_loop
    assert compat.running_asyncio_loop() is None

    async def inside() -> object:
        return compat.running_asyncio_loop() is asyncio.get_running_loop()

    assert asyncio.run(inside()) is True
