"""
ACP over real pipes: acpkit client ↔ acpkit agent beside SDK client ↔ SDK agent, in one run.

The agent is a child process (``pipes_agents.py``), the client is this process.  Measured:

- 2000 sequential ``session/new`` round trips (µs, p50 and p99);
- 2000 pipelined ``session/new`` (all sent, then all awaited; requests per second);
- one prompt streaming 10,000 ``agent_message_chunk`` notifications (notifications per second).

Run: ``python benchmarks/bench_pipes.py [--n 2000] [--chunks 10000]``.
The official SDK is the ``agent-client-protocol`` package (``pip install '.[bench]'``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, cast

HERE = Path(__file__).parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return env


def summarise(latencies: list[float]) -> tuple[float, float]:
    ordered = sorted(latencies)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return p50 * 1e6, p99 * 1e6


async def bench_sdk(n: int, chunks: int) -> dict[str, float]:
    from acp import PROTOCOL_VERSION, text_block
    from acp.interfaces import Client as SdkClient
    from acp.stdio import spawn_agent_process

    class Counter:
        received = 0

        def on_connect(self, conn: Any) -> None:
            pass

        async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
            self.received += 1

    client = Counter()
    # A partial client (the SDK answers method-not-found for the rest), cast to its protocol.
    async with spawn_agent_process(
        cast(SdkClient, client),
        sys.executable,
        str(HERE / "pipes_agents.py"),
        "sdk",
        env=child_env(),
    ) as (conn, _process):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        latencies = []
        for _ in range(n):
            t = time.perf_counter()
            await conn.new_session(cwd="/", mcp_servers=[])
            latencies.append(time.perf_counter() - t)
        t = time.perf_counter()
        await asyncio.gather(*(conn.new_session(cwd="/", mcp_servers=[]) for _ in range(n)))
        pipelined = n / (time.perf_counter() - t)
        t = time.perf_counter()
        await conn.prompt(session_id="s1", prompt=[text_block(f"stream {chunks}")])
        stream = client.received / (time.perf_counter() - t)
    p50, p99 = summarise(latencies)
    return {"p50": p50, "p99": p99, "pipelined": pipelined, "stream": stream}


async def bench_acpkit(n: int, chunks: int) -> dict[str, float]:
    from twisted.internet import reactor
    from twisted.internet.defer import gatherResults

    from acpkit import schema
    from acpkit.connection import Client, ClientConnection
    from acpkit.io import spawn_agent

    class Counter(Client):
        received = 0

        def session_update(self, params: schema.SessionNotification) -> None:
            self.received += 1

    client = Counter()
    conn = ClientConnection(client)
    process = spawn_agent(
        reactor,
        conn.protocol,
        sys.executable,
        [str(HERE / "pipes_agents.py"), "acpkit"],
        env=child_env(),
        name="bench",
    )
    new = schema.NewSessionRequest(cwd="/", mcp_servers=[])
    try:
        await conn.initialize()
        latencies = []
        for _ in range(n):
            t = time.perf_counter()
            await conn.new_session(new)
            latencies.append(time.perf_counter() - t)
        t = time.perf_counter()
        await gatherResults([conn.new_session(new) for _ in range(n)])
        pipelined = n / (time.perf_counter() - t)
        t = time.perf_counter()
        await conn.prompt(
            schema.PromptRequest(
                session_id="s1", prompt=[schema.TextContentBlock(text=f"stream {chunks}")]
            )
        )
        stream = client.received / (time.perf_counter() - t)
    finally:
        await process.stop()
    p50, p99 = summarise(latencies)
    return {"p50": p50, "p99": p99, "pipelined": pipelined, "stream": stream}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--chunks", type=int, default=10_000)
    args = parser.parse_args()

    sdk = asyncio.run(bench_sdk(args.n, args.chunks))

    from twisted.internet import task
    from twisted.internet.defer import Deferred

    results: dict[str, dict[str, float]] = {}

    def run(reactor: Any) -> Deferred[None]:
        async def go() -> None:
            results["acpkit"] = await bench_acpkit(args.n, args.chunks)

        return Deferred.fromCoroutine(go())

    try:
        task.react(run)
    except SystemExit:
        pass
    acpkit = results["acpkit"]
    rows = [
        ("sequential session/new p50 (µs)", "p50", False),
        ("sequential session/new p99 (µs)", "p99", False),
        ("pipelined session/new (req/s)", "pipelined", True),
        (f"stream of {args.chunks} chunks (notif/s)", "stream", True),
    ]
    print(f"{'measure':<40}{'acpkit':>12}{'SDK':>12}{'acpkit advantage':>18}")
    for label, key, higher_is_better in rows:
        ratio = acpkit[key] / sdk[key] if higher_is_better else sdk[key] / acpkit[key]
        print(f"{label:<40}{acpkit[key]:>12.1f}{sdk[key]:>12.1f}{ratio:>17.2f}x")


if __name__ == "__main__":
    main()
