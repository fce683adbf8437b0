"""
``serve_stdio``'s writes (and a spawned agent's transport's): what the protocol writes
while it processes a read goes out once the read is processed, in one write, without
registering the descriptor with the reactor when nothing else waits to be written;
anything else is written as before (``acpkit.io.held_writes``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, cast

import pytest
from twisted.internet import process as process_module
from twisted.internet.abstract import FileDescriptor
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Protocol
from twisted.internet.testing import MemoryReactor
from zope.interface import implementer

from acpkit.compat import StandardIO, stdio_writer
from acpkit.io import serve_stdio
from acpkit.io.held_writes import ReadWrites
from acpkit.io.spawn import AgentTransport


@pytest.fixture
def pipes() -> Iterator[tuple[int, int, int]]:
    """(our stdin's descriptor, our stdout's, the end that reads what we write)."""
    stdin_read, stdin_write = os.pipe()
    out_read, out_write = os.pipe()
    yield stdin_read, out_write, out_read
    for fd in (stdin_read, stdin_write, out_read, out_write):
        try:
            os.close(fd)
        except OSError:
            pass


class Answering(Protocol):
    """Answers each read with two writes: a ``write`` and a ``writeSequence``."""

    def dataReceived(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(b"got " + data)
        self.transport.writeSequence([b" and", b" done\n"])


def serve(protocol: Protocol, pipes: tuple[int, int, int]) -> tuple[StandardIO, MemoryReactor]:
    reactor = MemoryReactor()
    transport = serve_stdio(protocol, reactor, stdin=pipes[0], stdout=pipes[1])
    return transport, reactor


def readable(fd: int) -> bytes:
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 65536)
    except BlockingIOError:
        return b""


def test_writes_made_during_a_read_are_written_at_its_end_in_one_write(
    pipes: tuple[int, int, int],
) -> None:
    """The answers to a read are in the pipe when the read is processed, and stdout was
    never registered with the reactor for writing."""
    transport, reactor = serve(Answering(), pipes)
    writer = stdio_writer(transport)
    transport.childDataReceived("read", b"ping")
    assert readable(pipes[2]) == b"got ping and done\n"
    assert writer not in reactor.getWriters()


def test_writes_outside_a_read_are_buffered_for_the_reactor(
    pipes: tuple[int, int, int],
) -> None:
    """A write made outside a read is buffered and stdout registered, as Twisted does;
    ``flushNow`` writes it."""
    transport, reactor = serve(Protocol(), pipes)
    writer = stdio_writer(transport)
    transport.write(b"unprompted\n")
    assert readable(pipes[2]) == b""
    assert writer in reactor.getWriters()
    transport.flushNow()  # type: ignore[attr-defined]
    assert readable(pipes[2]) == b"unprompted\n"


def test_writes_during_a_read_follow_what_waits_in_the_buffer(
    pipes: tuple[int, int, int],
) -> None:
    """When stdout has data waiting for the reactor, what a read writes goes after it,
    through the same buffer: the order on the pipe is the order of the writes."""
    transport, _ = serve(Answering(), pipes)
    writer = stdio_writer(transport)
    transport.write(b"first\n")
    transport.childDataReceived("read", b"ping")
    assert readable(pipes[2]) == b""
    writer.doWrite()
    assert readable(pipes[2]) == b"first\ngot ping and done\n"


def test_flush_now_during_a_read_writes_what_is_held(pipes: tuple[int, int, int]) -> None:
    """``flushNow`` called while a read is processed writes what the read wrote so far."""
    seen: list[bytes] = []

    class Flushing(Protocol):
        def dataReceived(self, data: bytes) -> None:
            assert self.transport is not None
            self.transport.write(b"early\n")
            self.transport.flushNow()  # type: ignore[attr-defined]
            seen.append(readable(pipes[2]))
            self.transport.write(b"late\n")

    transport, _ = serve(Flushing(), pipes)
    transport.childDataReceived("read", b"x")
    assert seen == [b"early\n"]
    assert readable(pipes[2]) == b"late\n"


def test_closing_during_a_read_writes_what_is_held_first(pipes: tuple[int, int, int]) -> None:
    """A protocol that writes and then closes within a read: its last words are written
    before stdout closes."""

    class Closing(Protocol):
        def dataReceived(self, data: bytes) -> None:
            assert self.transport is not None
            self.transport.write(b"bye\n")
            self.transport.loseConnection()

    transport, _ = serve(Closing(), pipes)
    transport.childDataReceived("read", b"x")
    assert readable(pipes[2]) == b"bye\n"


def test_a_read_writing_more_than_the_buffer_pauses_the_producer(
    pipes: tuple[int, int, int],
) -> None:
    """Writes of a read beyond the writer's buffer size go to its buffer (after what was
    held), so that a streaming producer is paused as Twisted pauses it."""

    @implementer(IPushProducer)
    class Producer:
        paused = 0

        def pauseProducing(self) -> None:
            self.paused += 1

        def resumeProducing(self) -> None:
            pass

        def stopProducing(self) -> None:
            pass

    class Big(Protocol):
        def dataReceived(self, data: bytes) -> None:
            assert self.transport is not None
            self.transport.write(b"x" * 100)
            self.transport.write(b"y" * (stdio_writer(transport).bufferSize + 1))

    producer = Producer()
    transport, _ = serve(Big(), pipes)
    transport.registerProducer(producer, True)
    transport.childDataReceived("read", b"x")
    assert producer.paused == 1
    assert readable(pipes[2]) == b"x" * 100  # what was held, then the rest is buffered
    writer = stdio_writer(transport)
    writer.doWrite()
    assert readable(pipes[2]).startswith(b"y")


class _Process:
    """The part of a Twisted process transport ``AgentTransport`` uses: its stdin."""

    def __init__(self, writer: Any) -> None:
        self.pipes = {0: writer}

    def write(self, data: bytes) -> None:
        self.pipes[0].write(data)

    def writeSequence(self, data: list[bytes]) -> None:
        self.pipes[0].writeSequence(data)


def test_a_spawned_agents_transport_writes_a_reads_answers_at_its_end(
    pipes: tuple[int, int, int],
) -> None:
    """Writes to a spawned agent made while a read of its stdout is processed go to its
    stdin at the end of the read, without registering stdin with the reactor; outside a
    read they are buffered for the reactor as before."""
    reactor = MemoryReactor()
    writer = process_module.ProcessWriter(reactor, None, "stdin", pipes[1])
    transport = AgentTransport(cast(Any, None), cast(Any, _Process(writer)))
    protocol = Answering()
    protocol.makeConnection(cast(Any, transport))
    transport._deliver(protocol, b"ping")
    assert readable(pipes[2]) == b"got ping and done\n"
    assert writer not in reactor.getWriters()
    transport.write(b"later\n")
    assert writer in reactor.getWriters()
    transport.flushNow()
    assert readable(pipes[2]) == b"later\n"


def test_the_writes_of_one_read_look_at_the_descriptor_once(
    pipes: tuple[int, int, int],
) -> None:
    """Many writes held during one read look the descriptor up (and check that it is
    idle) once, not once per write; after the descriptor was written to (a flush, a write
    that did not fit), the next write looks again."""
    transport, _ = serve(Protocol(), pipes)
    looked: list[object] = []

    def descriptor() -> Any:
        looked.append(None)
        return stdio_writer(transport)

    writes = ReadWrites(descriptor)
    writes.reading = True
    for number in range(100):
        assert writes.hold([b"%d\n" % number], 2)
    assert len(looked) == 1
    writes.release()
    assert writes.hold([b"after\n"], 6)
    assert len(looked) == 3  # (the release wrote to it; the next hold looked again)
    writes.reading = False
    writes.release()
    expected = b"".join(b"%d\n" % number for number in range(100)) + b"after\n"
    assert readable(pipes[2]) == expected


def test_a_write_after_one_that_did_not_fit_follows_it(pipes: tuple[int, int, int]) -> None:
    """In one read: a small write, one larger than the writer's buffer, a small one: the
    pipe receives them in that order."""
    big = b"y" * (FileDescriptor.bufferSize + 1)

    class Three(Protocol):
        def dataReceived(self, data: bytes) -> None:
            assert self.transport is not None
            self.transport.write(b"x\n")
            self.transport.write(big)
            self.transport.write(b"z\n")

    transport, _ = serve(Three(), pipes)
    writer = stdio_writer(transport)
    assert writer.bufferSize == FileDescriptor.bufferSize
    transport.childDataReceived("read", b"go")
    received = b""
    for _ in range(100):
        received += readable(pipes[2])
        if len(received) == 4 + len(big):
            break
        writer.doWrite()
    assert received == b"x\n" + big + b"z\n"
