"""
Sequential round trips over pipes: acpkit's agent against a raw floor agent and the SDK's.

Each agent (``pipes_agents.py``) is a child process on pipes: ``floor`` (a blocking
``json.loads``/``json.dumps`` loop, no framework), ``twisted`` (the same answers from a bare
Twisted protocol: the floor on Twisted's reactor), ``acpkit`` (a minimal acpkit agent),
``sdk`` (the official SDK's), and with ``--baseline DIR`` ``acpkit-before`` (acpkit's agent
importing acpkit from ``DIR``, a checkout of another commit).  Two clients drive each of
them, one request at a time (send, wait for the answer, send the next):

- ``raw``: a blocking loop in this process writing prepared request lines on the pipe and
  reading the answer line back, the same for every agent, so that only the agent differs;
- ``acpkit``: acpkit's :class:`~acpkit.connection.ClientConnection` on the reactor.

Two requests: ``session/new`` and an empty prompt (one empty text block, answered
``end_turn`` at once).  Each round runs ``--per-round`` requests of each kind against
every agent with every client, the agents in a rotating order; each round gives each
agent's p50 and p99 (µs), and the ratios of the round: acpkit / floor, acpkit / twisted,
SDK / acpkit, the same with acpkit-before, and acpkit / acpkit-before.  Printed: the
median of each over the rounds, with the min-max.

Run: ``python benchmarks/bench_roundtrip.py [--rounds 9] [--per-round 400]
[--baseline DIR] [--clients raw,acpkit]``.
The official SDK is the ``agent-client-protocol`` package (``pip install '.[bench]'``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

KINDS = ("session/new", "prompt")
#: (client, agent, kind) → the per-round (p50, p99) in µs.
Results = dict[tuple[str, str, str], list[tuple[float, float]]]


def child_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH", "")]))
    return env


def agent_command(agent: str, baseline: Path | None) -> tuple[list[str], dict[str, str]]:
    kind = "acpkit" if agent == "acpkit-before" else agent
    root = baseline if agent == "acpkit-before" and baseline is not None else ROOT
    return [sys.executable, str(HERE / "pipes_agents.py"), kind], child_env(root)


def percentiles(latencies: list[float]) -> tuple[float, float]:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered) * 1e6, p99 * 1e6


def request_line(number: int, kind: str) -> bytes:
    params: dict[str, Any]
    if kind == "session/new":
        method, params = "session/new", {"cwd": "/", "mcpServers": []}
    else:
        method = "session/prompt"
        params = {"sessionId": "s1", "prompt": [{"type": "text", "text": ""}]}
    message = {"jsonrpc": "2.0", "id": number, "method": method, "params": params}
    return json.dumps(message).encode() + b"\n"


class RawAgent:
    """An agent process driven by blocking writes and reads on its pipes."""

    def __init__(self, agent: str, baseline: Path | None) -> None:
        argv, env = agent_command(agent, baseline)
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.stdin, self.stdout = self.process.stdin, self.process.stdout
        self.number = 0
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
        self.stdin.write(json.dumps(init).encode() + b"\n")
        self.stdin.flush()
        self.stdout.readline()

    def run(self, kind: str, n: int) -> list[float]:
        lines = [request_line(self.number + i + 1, kind) for i in range(n)]
        self.number += n
        write, flush, readline = self.stdin.write, self.stdin.flush, self.stdout.readline
        clock = time.perf_counter
        latencies = []
        for line in lines:
            start = clock()
            write(line)
            flush()
            if not readline():
                raise SystemExit("the agent closed its output")
            latencies.append(clock() - start)
        return latencies

    def close(self) -> None:
        self.stdin.close()
        self.process.wait(30)


class AcpkitClientAgent:
    """An agent process driven by acpkit's client connection."""

    def __init__(self, agent: str, baseline: Path | None) -> None:
        from twisted.internet import reactor

        from acpkit import schema
        from acpkit.connection import Client, ClientConnection
        from acpkit.io import spawn_agent

        argv, env = agent_command(agent, baseline)
        self.conn = ClientConnection(Client())
        self.process = spawn_agent(reactor, self.conn.protocol, argv[0], argv[1:], env=env)
        self.new = schema.NewSessionRequest(cwd="/", mcp_servers=[])
        self.prompt = schema.PromptRequest(
            session_id="s1", prompt=[schema.TextContentBlock(text="")]
        )

    async def start(self) -> None:
        await self.conn.initialize()
        await self.conn.new_session(self.new)

    async def run(self, kind: str, n: int) -> list[float]:
        clock = time.perf_counter
        latencies = []
        if kind == "session/new":
            new_session, new = self.conn.new_session, self.new
            for _ in range(n):
                start = clock()
                await new_session(new)
                latencies.append(clock() - start)
        else:
            prompt, request = self.conn.prompt, self.prompt
            for _ in range(n):
                start = clock()
                await prompt(request)
                latencies.append(clock() - start)
        return latencies

    async def close(self) -> None:
        await self.process.stop()


def spread(values: list[float], digits: int = 2) -> str:
    if not values:
        return "-"
    low, mid, high = (
        f"{x:.{digits}f}" for x in (min(values), statistics.median(values), max(values))
    )
    return f"{mid} ({low}-{high})"


async def measure(args: argparse.Namespace, agents: list[str], clients: list[str]) -> Results:
    results: Results = {}
    raw: dict[str, RawAgent] = {}
    ours: dict[str, AcpkitClientAgent] = {}
    try:
        for agent in agents:
            if "raw" in clients:
                raw[agent] = RawAgent(agent, args.baseline)
            if "acpkit" in clients:
                ours[agent] = AcpkitClientAgent(agent, args.baseline)
                await ours[agent].start()

        async def run(client: str, agent: str, kind: str, n: int) -> list[float]:
            if client == "raw":
                return raw[agent].run(kind, n)
            return await ours[agent].run(kind, n)

        for client in clients:  # warm-up
            for agent in agents:
                for kind in KINDS:
                    await run(client, agent, kind, args.warmup)
        for round_ in range(args.rounds):
            order = agents[round_ % len(agents) :] + agents[: round_ % len(agents)]
            for client in clients:
                for agent in order:
                    for kind in KINDS:
                        latencies = await run(client, agent, kind, args.per_round)
                        results.setdefault((client, agent, kind), []).append(percentiles(latencies))
    finally:
        for raw_agent in raw.values():
            raw_agent.close()
        for our_agent in ours.values():
            await our_agent.close()
    return results


def ratios(results: Results, client: str, kind: str, top: str, bottom: str, at: int) -> list[float]:
    if (client, top, kind) not in results or (client, bottom, kind) not in results:
        return []
    pairs = zip(results[(client, top, kind)], results[(client, bottom, kind)], strict=True)
    return [a[at] / b[at] for a, b in pairs]


def report(results: Results, agents: list[str], clients: list[str], as_json: bool) -> None:
    comparisons = [
        ("acpkit", "floor"),
        ("acpkit-before", "floor"),
        ("acpkit", "twisted"),
        ("sdk", "acpkit"),
        ("sdk", "acpkit-before"),
        ("acpkit", "acpkit-before"),
    ]
    out: dict[str, Any] = {}
    comparisons = [(t, b) for t, b in comparisons if t in agents and b in agents]
    header = f"{'client':<8}{'request':<13}{'':<4}" + "".join(f"{a:>15}" for a in agents)
    lines = [header + "".join(f"{f'{t} / {b}':>26}" for t, b in comparisons)]
    for client in clients:
        for kind in KINDS:
            for at, name in ((0, "p50"), (1, "p99")):
                row = f"{client:<8}{kind:<13}{name:<4}"
                for agent in agents:
                    value = statistics.median(r[at] for r in results[(client, agent, kind)])
                    out[f"{client} {kind} {name} {agent} µs"] = value
                    row += f"{value:>15.1f}"
                for top, bottom in comparisons:
                    values = ratios(results, client, kind, top, bottom, at)
                    out[f"{client} {kind} {name} {top}/{bottom}"] = values
                    row += f"{spread(values):>26}"
                lines.append(row)
    if as_json:
        print(json.dumps(out, indent=1))
    else:
        print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--per-round", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--agents", default="floor,twisted,acpkit,sdk")
    parser.add_argument("--clients", default="raw,acpkit")
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    agents = args.agents.split(",")
    if args.baseline is not None:
        args.baseline = args.baseline.resolve()
        agents.append("acpkit-before")
    clients = args.clients.split(",")

    from twisted.internet import task
    from twisted.internet.defer import Deferred

    results: Results = {}

    def go(reactor: Any) -> Deferred[None]:
        async def run() -> None:
            results.update(await measure(args, agents, clients))

        coroutine: Coroutine[Any, Any, None] = run()
        return Deferred.fromCoroutine(coroutine)

    react: Callable[[Callable[[Any], Deferred[None]]], None] = task.react
    try:
        react(go)
    except SystemExit as exit_:
        if exit_.code:
            raise
    report(results, agents, clients, args.json)


if __name__ == "__main__":
    main()
