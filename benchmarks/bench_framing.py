"""
Benchmark: one 10 MB line through acpkit's NDJSONProtocol vs Twisted's LineReceiver.

Run from the repository root::

    python benchmarks/bench_framing.py [--size BYTES] [--read BYTES] [--no-pipe]

Two measurements, each for both protocols:

- in memory: the line is fed to ``dataReceived`` in reads of ``--read`` bytes (64 KiB);
- through a real pipe: a child process writes the line to its stdout, the reactor reads
  it (the kernel decides the read sizes) and feeds the protocol.

Prints the seconds for each and the ratio LineReceiver / NDJSONProtocol.  In memory,
also the same payload as one ``Content-Length`` message
(:class:`acpkit.framing.ContentLengthProtocol`, the LSP framing).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from twisted.internet.protocol import ProcessProtocol
from twisted.internet.testing import StringTransport
from twisted.protocols.basic import LineReceiver
from twisted.python.failure import Failure

from acpkit.framing import ContentLengthProtocol, NDJSONProtocol


class NDJSONSink(NDJSONProtocol):
    """Counts delivered lines."""

    def __init__(self) -> None:
        super().__init__()
        self.delivered: list[int] = []

    def lineReceived(self, line: bytes) -> None:
        self.delivered.append(len(line))


class ContentLengthSink(ContentLengthProtocol):
    """Counts delivered message bodies."""

    def __init__(self) -> None:
        super().__init__()
        self.delivered: list[int] = []

    def messageReceived(self, body: bytes) -> None:
        self.delivered.append(len(body))


def content_length_in_memory(size: int, read_size: int) -> float:
    """Seconds to deliver one ``size``-byte Content-Length message in reads of ``read_size``."""
    body = b"A" * (size - 1)
    data = b"Content-Length: %d\r\n\r\n" % len(body) + body
    proto = ContentLengthSink()
    proto.makeConnection(StringTransport())
    chunks = [data[i : i + read_size] for i in range(0, len(data), read_size)]
    started = time.perf_counter()
    for chunk in chunks:
        proto.dataReceived(chunk)
    elapsed = time.perf_counter() - started
    assert proto.delivered == [len(body)], proto.delivered
    return elapsed


class StockSink(LineReceiver):
    """Twisted's LineReceiver with the limit raised."""

    delimiter = b"\n"
    MAX_LENGTH = 64 * 1024 * 1024

    def __init__(self) -> None:
        self.delivered: list[int] = []

    def lineReceived(self, line: bytes) -> None:
        self.delivered.append(len(line))


Sink = NDJSONSink | StockSink


def in_memory(factory: Callable[[], Sink], data: bytes, read_size: int) -> float:
    """Seconds to deliver ``data`` (one line) in reads of ``read_size`` bytes."""
    proto = factory()
    proto.makeConnection(StringTransport())
    chunks = [data[i : i + read_size] for i in range(0, len(data), read_size)]
    started = time.perf_counter()
    for chunk in chunks:
        proto.dataReceived(chunk)
    elapsed = time.perf_counter() - started
    assert proto.delivered == [len(data) - 1], proto.delivered
    return elapsed


class _PipeReader(ProcessProtocol):
    def __init__(self, sink: Sink, done: Callable[[], None]) -> None:
        self.sink = sink
        self.done = done
        self.started: float | None = None
        self.finished: float | None = None
        self.reads = 0

    def outReceived(self, data: bytes) -> None:
        if self.started is None:
            self.started = time.perf_counter()
        self.reads += 1
        self.sink.dataReceived(data)
        if self.sink.delivered and self.finished is None:
            self.finished = time.perf_counter()

    def processEnded(self, reason: Failure) -> None:
        self.done()


def through_pipe(factory: Callable[[], Sink], size: int) -> tuple[float, int]:
    """Seconds from the first to the last read of a ``size``-byte line from a child, reads."""
    from twisted.internet import reactor

    sink = factory()
    sink.makeConnection(StringTransport())
    reader = _PipeReader(sink, reactor.stop)
    code = f"import sys; sys.stdout.buffer.write(b'A' * {size - 1} + b'\\n')"
    reactor.spawnProcess(reader, sys.executable, [sys.executable, "-c", code], env=None)
    reactor.run()
    assert reader.started is not None and reader.finished is not None, sink.delivered
    return reader.finished - reader.started, reader.reads


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--size", type=int, default=10 * 1000 * 1000, help="line size, bytes")
    parser.add_argument("--read", type=int, default=64 * 1024, help="in-memory read size")
    parser.add_argument("--no-pipe", action="store_true", help="skip the real-pipe measure")
    parser.add_argument("--child", choices=["ndjson", "stock"], help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        # One pipe measurement per process: the reactor cannot be restarted.
        factory = NDJSONSink if options.child == "ndjson" else StockSink
        seconds, reads = through_pipe(factory, options.size)
        sys.stdout.write(f"{seconds} {reads}\n")
        return
    data = b"A" * (options.size - 1) + b"\n"
    out = sys.stdout
    out.write(f"one {options.size:,}-byte line, {options.read:,}-byte reads, in memory\n")
    ours = in_memory(NDJSONSink, data, options.read)
    stock = in_memory(StockSink, data, options.read)
    out.write(f"  NDJSONProtocol  {ours:8.4f} s\n")
    out.write(f"  LineReceiver    {stock:8.4f} s\n")
    out.write(f"  ratio           {stock / ours:8.1f} x\n")
    headers = content_length_in_memory(options.size, options.read)
    out.write(f"  Content-Length  {headers:8.4f} s (the same bytes as one LSP-framed message)\n")
    if options.no_pipe:
        return
    import subprocess

    results = {}
    for kind in ("ndjson", "stock"):
        output = subprocess.run(
            [sys.executable, __file__, "--size", str(options.size), "--child", kind],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        results[kind] = (float(output[0]), int(output[1]))
    out.write(
        f"the same line through a real pipe from a child process ({results['ndjson'][1]} reads)\n"
    )
    out.write(f"  NDJSONProtocol  {results['ndjson'][0]:8.4f} s\n")
    out.write(f"  LineReceiver    {results['stock'][0]:8.4f} s\n")
    out.write(f"  ratio           {results['stock'][0] / results['ndjson'][0]:8.1f} x\n")


if __name__ == "__main__":
    main()
