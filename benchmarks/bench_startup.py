"""
Startup: spawn → ``initialize`` answered, for bob, a minimal acpkit agent and an SDK agent.

Each round spawns the agents one after the other (in a rotating order, so that the
machine's load falls on all of them alike), sends ``initialize`` at once and times until its
answer line is read (wall time), then reads the CPU time the agent has used so far
(``/proc/PID/schedstat``, in nanoseconds): on a loaded machine the wall times spread
widely, the CPU times much less.  The bytecode is written once, in a warm-up round
(under a temporary ``PYTHONPYCACHEPREFIX``): a ``PYTHONDONTWRITEBYTECODE`` environment
would otherwise make every spawn compile its sources, bob's more than the others'.
Printed: each agent's median and spread (min-max) over the rounds, wall and CPU, then
the ratios (bob / minimal acpkit, bob / SDK), each the median of the per-round ratios
with its spread.

- ``bob``: ``twistd -n acp-agent --engine echo`` (an empty configuration: no language
  server, no MCP server);
- ``minimal``: the acpkit agent of ``pipes_agents.py``;
- ``sdk``: the official SDK's agent of ``pipes_agents.py`` (``agent-client-protocol``,
  ``pip install '.[bench]'``).

``--baseline DIR`` adds ``bob-before``: the same bob command with ``PYTHONPATH=DIR``, a
checkout of another commit (``git worktree add DIR <commit>``), in the same rounds.

Run: ``python benchmarks/bench_startup.py [--rounds 30] [--baseline DIR]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parent

INITIALIZE = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'


def child_env(home: Path) -> dict[str, str]:
    """The agents' environment: an empty home, and the bytecode written under *home*
    (``PYTHONPYCACHEPREFIX``, the tree is not written) so that, after the warm-up, no agent
    pays for compiling its sources, as none does once installed."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(home / "pycache")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env["HOME"] = str(home)
    env["XDG_CONFIG_HOME"] = str(home / "config")
    env["XDG_RUNTIME_DIR"] = str(home)
    return env


def commands(config: Path) -> dict[str, list[str]]:
    twistd = ["-c", "from twisted.scripts.twistd import run; run()", "-n", "acp-agent"]
    return {
        "bob": [sys.executable, *twistd, "--config", str(config), "--engine", "echo"],
        "minimal": [sys.executable, str(HERE / "pipes_agents.py"), "acpkit"],
        "sdk": [sys.executable, str(HERE / "pipes_agents.py"), "sdk"],
    }


def cpu_seconds(pid: int) -> float:
    """The CPU time a live process has run so far (``/proc/PID/schedstat``, nanoseconds)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


def spawn_to_initialize(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Seconds from spawn to the ``initialize`` answer line read, wall and the agent's CPU."""
    start = time.perf_counter()
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        cwd=cwd, env=env,
    )  # fmt: skip
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(INITIALIZE)
    process.stdin.flush()
    line = process.stdout.readline()
    elapsed = time.perf_counter() - start
    cpu = cpu_seconds(process.pid)
    process.stdin.close()
    process.wait(30)
    if b'"result"' not in line:
        raise SystemExit(f"{argv}: no initialize answer: {line!r}")
    return elapsed, cpu


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--baseline", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        config = home / "agent.toml"
        config.write_text("", encoding="utf-8")
        env = child_env(home)
        argvs = commands(config)
        envs = {name: env for name in argvs}
        if args.baseline is not None:
            argvs["bob-before"] = argvs["bob"]
            envs["bob-before"] = {**env, "PYTHONPATH": str(args.baseline.resolve())}
        names = list(argvs)
        for name in names:  # warm the file cache and the bytecode
            spawn_to_initialize(argvs[name], envs[name], home)
        wall: dict[str, list[float]] = {name: [] for name in names}
        cpu: dict[str, list[float]] = {name: [] for name in names}
        for round_ in range(args.rounds):
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            for name in order:
                elapsed, used = spawn_to_initialize(argvs[name], envs[name], home)
                wall[name].append(elapsed)
                cpu[name].append(used)
    print(f"{'agent':<12}{'spawn → initialize, s: wall':>30}{'CPU (the agent)':>26}")
    for name in names:
        print(f"{name:<12}{spread(wall[name]):>30}{spread(cpu[name]):>26}")
    bobs = [name for name in ("bob-before", "bob") if name in wall]
    for bob in bobs:
        for peer in ("minimal", "sdk"):
            for label, figures in (("wall", wall), ("CPU", cpu)):
                ratios = [b / p for b, p in zip(figures[bob], figures[peer], strict=True)]
                name = f"{bob} / {peer}, {label}"
                print(f"{name:<26} {spread(ratios)}  (per-round ratio)")


if __name__ == "__main__":
    main()
