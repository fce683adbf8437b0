"""
The agent side of pipelined requests, in process: µs of CPU per ``session/new`` and a profile.

A minimal acpkit agent (the ``acpkit`` agent of ``pipes_agents.py``) is connected to a
``StringTransport`` (``--transport string``) or to acpkit's stdio transport on a pipe that
is never written and ``/dev/null`` (``--transport stdio``: its held writes, written to the
descriptor once per read, as over a real pipe; the reactor is not run); ``--n``
``session/new`` requests (after an ``initialize``) are given to it in 64 KiB reads, as a
pipe delivers a burst.  Printed: the best of
``--repeat`` runs in µs of this process's CPU per request; with ``--profile``, the
cProfile of one more run (sorted by ``--sort``, the first ``--top`` lines).

``--method prompt`` sends empty prompts (an ``async def`` handler that awaits nothing)
instead of ``session/new``; ``--sequential`` gives one request per read, as a client that
waits for each answer does (the sequential round trip's agent side, without the pipes).

``--agent twisted`` measures instead the ``twisted`` agent of ``pipes_agents.py`` (a bare
Twisted protocol: ``json.loads`` of each line, ``transport.write`` of each answer's
``json.dumps``) on a ``StringTransport``: the floor of an agent on Twisted, in process.

Run: ``python benchmarks/profile_pipelined.py [--n 20000] [--repeat 5] [--profile]
[--transport string|stdio] [--agent acpkit|twisted] [--method new|prompt] [--sequential]``.
Compare two trees with ``PYTHONPATH=<other tree>`` (the first line says which ``acpkit``).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import time

from pipes_agents import twisted_floor  # type: ignore[import-not-found]
from twisted.internet.testing import StringTransport

import acpkit
from acpkit import schema
from acpkit.connection import Agent, AgentConnection, negotiate_version
from acpkit.io import serve_stdio

READ = 64 * 1024


class BenchAgent(Agent):
    """The ``acpkit`` agent of ``pipes_agents.py``, for the requests measured here."""

    def __init__(self, conn: AgentConnection) -> None:
        self.conn = conn
        self.count = 0

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        version = negotiate_version(params.protocol_version)
        return schema.InitializeResponse(protocol_version=version)

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        self.count += 1
        return schema.NewSessionResponse(session_id=f"s{self.count}")

    async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        self.count += 1
        return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)


#: Each measured method's params.
PARAMS: dict[str, dict[str, object]] = {
    "session/new": {"cwd": "/", "mcpServers": []},
    "session/prompt": {"sessionId": "s1", "prompt": []},
}


def request_lines(n: int, method: str = "session/new") -> list[bytes]:
    params = PARAMS[method]
    return [
        json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}).encode() + b"\n"
        for i in range(1, n + 1)
    ]


INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
#: Before the measured requests: initialize, then the session the prompts name.
SETUP = (
    json.dumps(INIT).encode()
    + b"\n"
    + json.dumps(
        {"jsonrpc": "2.0", "id": -1, "method": "session/new", "params": PARAMS["session/new"]}
    ).encode()
    + b"\n"
)


def run_string(chunks: list[bytes], n: int) -> float:
    """CPU seconds to answer the requests in ``chunks`` on a ``StringTransport``."""
    conn = AgentConnection(BenchAgent)
    transport = StringTransport()
    conn.protocol.makeConnection(transport)
    receive = conn.protocol.dataReceived
    receive(SETUP)
    transport.clear()
    answered = 0
    gc.collect()
    start = time.process_time()
    for chunk in chunks:
        receive(chunk)
        answered += transport.value().count(b"\n")
        transport.clear()
    elapsed = time.process_time() - start
    assert answered == n, (answered, n)
    return elapsed


def run_twisted(chunks: list[bytes], n: int) -> float:
    """CPU seconds for the bare Twisted agent to answer the requests in ``chunks``."""
    protocol = twisted_floor()
    transport = StringTransport()
    protocol.makeConnection(transport)
    answered = 0
    gc.collect()
    start = time.process_time()
    for chunk in chunks:
        protocol.dataReceived(chunk)
        answered += transport.value().count(b"\n")
        transport.clear()
    elapsed = time.process_time() - start
    assert answered == n, (answered, n)
    return elapsed


def run_stdio(chunks: list[bytes], n: int) -> float:
    """CPU seconds to answer the requests in ``chunks`` on the stdio transport."""
    read_end, write_end = os.pipe()
    sink = os.open(os.devnull, os.O_WRONLY)
    try:
        conn = AgentConnection(BenchAgent)
        transport = serve_stdio(conn.protocol, stdin=read_end, stdout=sink)
        transport.childDataReceived("read", SETUP)
        gc.collect()
        start = time.process_time()
        for chunk in chunks:
            transport.childDataReceived("read", chunk)
        elapsed = time.process_time() - start
        handler = conn.handler
        assert isinstance(handler, BenchAgent) and handler.count == n + 1, n
        assert conn.protocol.requests_in_progress == 0
        transport.loseConnection()
        return elapsed
    finally:
        os.close(write_end)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--sort", default="tottime")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--transport", choices=["string", "stdio"], default="string")
    parser.add_argument("--agent", choices=["acpkit", "twisted"], default="acpkit")
    parser.add_argument("--method", choices=["new", "prompt"], default="new")
    parser.add_argument("--sequential", action="store_true")
    args = parser.parse_args()
    method = f"session/{args.method}"
    lines = request_lines(args.n, method)
    if args.sequential:
        chunks, how = lines, "one per read"
    else:
        data = b"".join(lines)
        chunks = [data[i : i + READ] for i in range(0, len(data), READ)]
        how = "pipelined in 64 KiB reads"
    run = run_stdio if args.transport == "stdio" else run_string
    label = args.transport
    if args.agent == "twisted":
        run, label = run_twisted, "bare Twisted agent, string"
    print(f"acpkit from {acpkit.__file__}")
    best = min(run(chunks, args.n) for _ in range(args.repeat))
    print(f"{method}, {args.n} {how} ({label}): {best / args.n * 1e6:.2f} µs/request")
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(run, chunks, args.n)
        pstats.Stats(profile).sort_stats(args.sort).print_stats(args.top)


if __name__ == "__main__":
    main()
