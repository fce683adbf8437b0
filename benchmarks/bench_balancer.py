"""
Several bobs behind HAProxy, on loopback: throughput and turn latency with one and two
instances behind the balancer, against clients talking to one bob directly.

Three setups, each a fresh set of processes:

* ``direct``: one bob (``--listen http:tcp:0``), the clients connect to it;
* ``haproxy x1``: HAProxy with the documented configuration (docs/how-to/haproxy.cfg,
  cut to one server) in front of one bob (``--listen http:haproxy:tcp:0``);
* ``haproxy x2``: the same with two bobs.

Every bob runs the echo engine with sessions saved (``sessions.enabled``: each turn
writes its session file, fsync included), all in one project directory.  The load comes
from this process: ``--clients`` (20) concurrent clients (acpkit's Streamable HTTP
client, ``connect_resumable``), each opening a session then running ``--turns`` (25)
turns one after the other.  After a warm-up turn per client (untimed), measured:

* turns/s: all the turns divided by the time from the first prompt to the last answer;
* p50 and p99 of one turn (``session/prompt`` sent -> its answer);

then the ratios: the balancer's overhead (``haproxy x1`` against ``direct``) and what a
second instance gives (``haproxy x2`` against ``haproxy x1``).  bob runs one turn at a
time per process (its turns are serialized), so a second instance is the only way to
run two turns at once; on a 2-core machine that also runs the clients and HAProxy,
expect far less than twice.

Run: ``python benchmarks/bench_balancer.py [--clients 20] [--turns 25] [--json]``; needs
HAProxy (``apt-get install haproxy``) and the ``remote`` extra; Linux.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import Deferred, gatherResults

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT))

from acpkit import schema  # noqa: E402
from acpkit.connection import Client  # noqa: E402
from acpkit.remote.connect import connect_resumable  # noqa: E402
from tests.balancer import (  # noqa: E402
    BOB_CONFIG,
    Balancer,
    all_healthy,
    config_for,
    start_bob_behind,
    start_haproxy,
    write_token,
)
from tests.listening_bob import ListeningBob, start_bob  # noqa: E402


class Quiet(Client):
    """The clients' IClient: the chunks are not kept."""


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


async def load(url: str, token: str, project: Path, clients: int, turns: int) -> dict[str, Any]:
    """Every client: a session, one warm-up turn, then ``turns`` timed turns."""
    started = Deferred[None]()
    ready = 0
    latencies: list[float] = []

    async def one(number: int) -> None:
        nonlocal ready
        connection = connect_resumable(
            reactor, url, Quiet(), headers={"Authorization": f"Bearer {token}"}
        )
        try:
            await connection.open()
            new = schema.NewSessionRequest(cwd=str(project), mcp_servers=[])
            sid = (await connection.new_session(new)).session_id

            def request(text: str) -> schema.PromptRequest:
                return schema.PromptRequest(
                    session_id=sid, prompt=[schema.TextContentBlock(text=text)]
                )

            await connection.prompt(request("warm up"), timeout=120)
            ready += 1
            if ready == clients:
                started.callback(None)
            await started
            for turn in range(turns):
                sent = time.perf_counter()
                answer = await connection.prompt(request(f"{number}/{turn}"), timeout=120)
                latencies.append(time.perf_counter() - sent)
                assert answer.stop_reason == schema.StopReason.END_TURN
        finally:
            await connection.close()

    runs = [Deferred.fromCoroutine(one(n)) for n in range(clients)]
    await started
    first = time.perf_counter()
    await gatherResults(runs)
    elapsed = time.perf_counter() - first
    return {
        "turns": len(latencies),
        "seconds": round(elapsed, 2),
        "turns_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 1),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
        "mean_ms": round(statistics.fmean(latencies) * 1000, 1),
    }


async def setup(kind: str, work: Path, clients: int, turns: int) -> dict[str, Any]:
    """One setup (``direct``, ``haproxy x1``, ``haproxy x2``): start, load, stop."""
    work.mkdir()
    project = work / "project"
    project.mkdir()
    token = write_token(work / "token")
    bobs: list[ListeningBob] = []
    balancer: Balancer | None = None
    try:
        if kind == "direct":
            home = work / "bob"
            home.mkdir()
            bob = start_bob(
                home,
                "--listen",
                "http:tcp:0",
                "--token-file",
                str(work / "token"),
                config=BOB_CONFIG,
            )
            bobs.append(bob)
            url = bob.url
        else:
            count = int(kind.rsplit("x", 1)[1])
            bobs = [start_bob_behind(work, f"bob{n}", work / "token") for n in range(1, count + 1)]
            balancer = start_haproxy(
                work, [f"127.0.0.1:{b.port}" for b in bobs], config=config_for(count)
            )
            all_healthy(balancer)
            url = balancer.url
        return await load(url, token, project, clients, turns)
    finally:
        if balancer is not None:
            balancer.stop()
        for bob in bobs:
            bob.stop()


async def main(arguments: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--turns", type=int, default=25)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    options = parser.parse_args(arguments)
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-balancer-") as tmp:
        for kind in ("direct", "haproxy x1", "haproxy x2"):
            work = Path(tmp) / kind.replace(" ", "-")
            figures[kind] = await setup(kind, work, options.clients, options.turns)
            if not options.json:
                print(f"{kind:>11}: {figures[kind]}", flush=True)
    direct, one, two = figures["direct"], figures["haproxy x1"], figures["haproxy x2"]
    figures["ratios"] = {
        "balancer throughput (haproxy x1 / direct)": round(
            one["turns_per_s"] / direct["turns_per_s"], 2
        ),
        "balancer p50 (haproxy x1 / direct)": round(one["p50_ms"] / direct["p50_ms"], 2),
        "balancer p99 (haproxy x1 / direct)": round(one["p99_ms"] / direct["p99_ms"], 2),
        "second instance throughput (x2 / x1)": round(two["turns_per_s"] / one["turns_per_s"], 2),
        "second instance p50 (x2 / x1)": round(two["p50_ms"] / one["p50_ms"], 2),
    }
    figures["load"] = {"clients": options.clients, "turns_per_client": options.turns}
    if options.json:
        print(json.dumps(figures, indent=2))
    else:
        for name, value in figures["ratios"].items():
            print(f"  {name}: {value}")
    return 0


if __name__ == "__main__":
    outcome: list[int] = []

    async def run() -> None:
        try:
            outcome.append(await main(sys.argv[1:]))
        finally:
            reactor.stop()

    reactor.callWhenRunning(lambda: Deferred.fromCoroutine(run()))
    reactor.run()
    sys.exit(outcome[0] if outcome else 1)
