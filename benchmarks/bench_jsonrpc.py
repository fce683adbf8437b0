"""
The JSON-RPC engine's per-message cost, in memory (no reactor, no pipe).

Measured, each the best of ``--repeat`` runs of ``--n`` messages, in µs of this
process's CPU time per message (``time.process_time``: less disturbed than wall time by
other work on a shared machine; nothing here waits):

- ``notifications in``: notifications read in 64 KiB reads, handled by a no-op handler;
- ``requests in``: requests read in 64 KiB reads, answered by a synchronous handler
  (the answers are written to a ``StringTransport``);
- ``notify out``: ``notify()`` calls;
- ``round trip``: ``request()`` on one protocol, answered by another, both in memory;
- the first two again over ``Content-Length`` framing (LSP).

Run: ``python benchmarks/bench_jsonrpc.py [--n 20000] [--repeat 5]``.  To compare two
trees, run it with ``PYTHONPATH=<other tree>`` back to back (the first line printed says
which ``acpkit`` was measured).
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from collections.abc import Callable
from typing import Any

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

import acpkit
from acpkit.jsonrpc import JSONRPCProtocol, MethodRegistry
from acpkit.jsonrpc.content_length import ContentLengthJSONRPCProtocol

READ = 64 * 1024


def registry() -> MethodRegistry:
    reg = MethodRegistry()
    reg.add_request("echo", lambda r: r.params)
    reg.add_notification("note", lambda params, meta: None)
    return reg


def reads(data: bytes) -> list[bytes]:
    return [data[i : i + READ] for i in range(0, len(data), READ)]


def ndjson(messages: list[bytes]) -> bytes:
    return b"".join(m + b"\n" for m in messages)


def content_length(messages: list[bytes]) -> bytes:
    return b"".join(b"Content-Length: %d\r\n\r\n%s" % (len(m), m) for m in messages)


def best(fn: Callable[[], float], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()
        times.append(fn())
    return min(times)


def inbound(
    cls: type[Any], frame: Callable[[list[bytes]], bytes], messages: list[bytes]
) -> Callable[[], float]:
    chunks = reads(frame(messages))

    def run() -> float:
        proto = cls(registry(), clock=Clock())
        transport = StringTransport()
        proto.makeConnection(transport)
        t = time.process_time()
        for chunk in chunks:
            proto.dataReceived(chunk)
            transport.clear()
        return time.process_time() - t

    return run


def notify_out(n: int) -> Callable[[], float]:
    params = {"sessionId": "s1", "update": {"text": "hello"}}

    def run() -> float:
        proto = JSONRPCProtocol(registry(), clock=Clock())
        transport = StringTransport()
        proto.makeConnection(transport)
        t = time.process_time()
        for i in range(n):
            proto.notify("note", params)
            if not i % 1000:
                transport.clear()
        return time.process_time() - t

    return run


def round_trip(n: int) -> Callable[[], float]:
    def run() -> float:
        client = JSONRPCProtocol(MethodRegistry(), clock=Clock(), name="agent")
        server = JSONRPCProtocol(registry(), clock=Clock(), name="client")
        ct, st = StringTransport(), StringTransport()
        client.makeConnection(ct)
        server.makeConnection(st)
        done = [0]

        def count(_: object) -> None:
            done[0] += 1

        t = time.process_time()
        for _ in range(n):
            client.request("echo", {"x": 1}).addCallback(count)
            server.dataReceived(ct.value())
            ct.clear()
            client.dataReceived(st.value())
            st.clear()
        elapsed = time.process_time() - t
        assert done[0] == n
        return elapsed

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    n = args.n
    notes = [
        json.dumps(
            {"jsonrpc": "2.0", "method": "note", "params": {"i": i, "text": "x" * 40}}
        ).encode()
        for i in range(n)
    ]
    requests = [
        json.dumps(
            {"jsonrpc": "2.0", "id": i, "method": "echo", "params": {"text": "x" * 40}}
        ).encode()
        for i in range(n)
    ]
    print(f"acpkit from {acpkit.__file__}")
    cases: list[tuple[str, Callable[[], float]]] = [
        ("notifications in (ndjson)", inbound(JSONRPCProtocol, ndjson, notes)),
        ("requests in (ndjson)", inbound(JSONRPCProtocol, ndjson, requests)),
        ("notify out (ndjson)", notify_out(n)),
        ("round trip (ndjson)", round_trip(n)),
        (
            "notifications in (content-length)",
            inbound(ContentLengthJSONRPCProtocol, content_length, notes),
        ),
        (
            "requests in (content-length)",
            inbound(ContentLengthJSONRPCProtocol, content_length, requests),
        ),
    ]
    for label, fn in cases:
        seconds = best(fn, args.repeat)
        print(f"{label:36} {seconds / n * 1e6:8.2f} µs/message")


if __name__ == "__main__":
    main()
