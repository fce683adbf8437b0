"""
Pipelined requests over pipes: wall throughput of acpkit's agent against a raw floor agent.

The client is a plain Python process with two threads on raw pipes (the same for every
agent, so that only the agent differs): one thread writes ``N`` ``session/new`` requests
while the other reads the ``N`` answers.  Two ways of writing:

- ``burst``: every request in one ``write`` (the client has written everything before it
  reads anything back, as a client that queues all its requests at once);
- ``lines``: one ``write`` per request while the answers are read (a client that reads
  while writing).

The agents (``pipes_agents.py``): ``floor`` (a blocking ``json.loads``/``json.dumps``
loop, no framework), ``twisted`` (the same answers from a bare Twisted protocol on stock
``StandardIO``: the floor of any agent on Twisted's reactor), ``acpkit`` (a minimal acpkit
agent), ``sdk`` (the official SDK's).
Each round runs every agent once per size and way, in a rotating order.  Printed: requests
per second (median and min-max over the rounds), the agent's CPU share of the wall time,
and each agent's per-round throughput ratio to the floor and to the ``twisted`` agent
(median, min-max).

``--baseline DIR`` adds ``acpkit-before``: acpkit's agent with ``PYTHONPATH=DIR``, a
checkout of another commit, in the same rounds.

Run: ``python benchmarks/bench_pipelining.py [--baseline DIR] [--sizes 1000,10000,100000]
[--rounds 3] [--agents floor,twisted,acpkit,sdk]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parent
TICK = os.sysconf("SC_CLK_TCK")


def child_env(root: Path = ROOT) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH", "")]))
    return env


#: Where ``acpkit-before`` imports acpkit from (``--baseline``).
BASELINE: list[Path] = []


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process used so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def request(number: int) -> bytes:
    params = {"cwd": "/", "mcpServers": []}
    message = {"jsonrpc": "2.0", "id": number, "method": "session/new", "params": params}
    return json.dumps(message).encode() + b"\n"


def run_once(agent: str, n: int, way: str) -> tuple[float, float]:
    """(requests per second, agent CPU share of the wall time) for one run."""
    env = child_env(BASELINE[0]) if agent == "acpkit-before" else child_env()
    kind = "acpkit" if agent == "acpkit-before" else agent
    process = subprocess.Popen(
        [sys.executable, str(HERE / "pipes_agents.py"), kind],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, bufsize=0,
    )  # fmt: skip
    assert process.stdin is not None and process.stdout is not None
    stdin, stdout = process.stdin, process.stdout
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
    stdin.write(json.dumps(init).encode() + b"\n")
    reader = os.fdopen(os.dup(stdout.fileno()), "rb")
    reader.readline()
    lines = [request(number) for number in range(1, n + 1)]
    blob = b"".join(lines)

    def write() -> None:
        if way == "burst":
            stdin.write(blob)
        else:
            for line in lines:
                stdin.write(line)

    cpu_before = cpu_seconds(process.pid)
    start = time.perf_counter()
    writer = threading.Thread(target=write)
    writer.start()
    for _ in range(n):
        if not reader.readline():
            raise SystemExit(f"{agent}: the agent closed its output")
    wall = time.perf_counter() - start
    cpu = cpu_seconds(process.pid) - cpu_before
    writer.join()
    stdin.close()
    process.wait(60)
    reader.close()
    return n / wall, cpu / wall


def spread(values: list[float], digits: int = 0) -> str:
    low, mid, high = (
        f"{x:.{digits}f}" for x in (min(values), statistics.median(values), max(values))
    )
    return f"{mid} ({low}-{high})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--agents", default="floor,twisted,acpkit,sdk")
    parser.add_argument("--ways", default="burst,lines")
    parser.add_argument("--baseline", type=Path, default=None)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    agents = args.agents.split(",")
    if args.baseline is not None:
        BASELINE.append(args.baseline.resolve())
        agents.append("acpkit-before")
    ways = args.ways.split(",")
    runs: dict[tuple[str, int, str], list[tuple[float, float]]] = {}
    for round_ in range(args.rounds):
        for n in sizes:
            for way in ways:
                order = agents[round_ % len(agents) :] + agents[: round_ % len(agents)]
                for agent in order:
                    runs.setdefault((agent, n, way), []).append(run_once(agent, n, way))
    print(f"{'agent':<14}{'N':>8} {'way':<7}{'requests/s: median (min-max)':>32}{'CPU':>7}"
          f"{'/ floor':>22}{'/ twisted':>22}")  # fmt: skip
    for n in sizes:
        for way in ways:
            for agent in agents:
                samples = runs[(agent, n, way)]
                rates = [rate for rate, _ in samples]
                share = statistics.median(cpu for _, cpu in samples)
                ratios = [ratio_to(runs, rates, peer, n, way) for peer in ("floor", "twisted")]
                print(f"{agent:<14}{n:>8} {way:<7}{spread(rates):>32}{share:>6.0%}"
                      f"{ratios[0]:>22}{ratios[1]:>22}")  # fmt: skip


def ratio_to(
    runs: dict[tuple[str, int, str], list[tuple[float, float]]],
    rates: list[float],
    peer: str,
    n: int,
    way: str,
) -> str:
    """Per-round throughput ratio to ``peer`` (median, min-max), or "" if it did not run."""
    if (peer, n, way) not in runs:
        return ""
    others = [rate for rate, _ in runs[(peer, n, way)]]
    return spread([a / b for a, b in zip(rates, others, strict=True)], 2)


if __name__ == "__main__":
    main()
