"""
``acpkit-client ask`` end to end against the official SDK doing the same, as whole processes.

Each side is one command, timed from spawn to exit (wall time, and the CPU time of the
process and its children from ``os.wait4``-style accounting):

- ``acpkit``: ``acpkit-client ask PROMPT`` with no agents file, so it runs the built-in
  reference agent (bob, ``twistd -n acp-agent --engine echo``): spawn bob, ``initialize``,
  ``session/new``, one ``session/prompt`` answered by bob's offline echo engine, the answer
  printed, bob ended, exit;
- ``sdk``: ``ask_sdk_pair.py client PROMPT``, an SDK client driving an SDK agent that
  answers like bob's echo engine (``agent-client-protocol``, ``pip install '.[bench]'``).

``--baseline DIR`` adds ``acpkit-before``: the same ``acpkit`` command with
``PYTHONPATH=DIR``, a checkout of another commit (``git worktree add DIR <commit>``).

The rounds interleave the commands in a rotating order (the machine's load falls on all of
them alike); the bytecode is written once, in a warm-up round, under a temporary
``PYTHONPYCACHEPREFIX`` (the tree is not written), so that no side compiles its sources in
the timed rounds.  Printed: each command's median wall and CPU time with their spread
(min-max), then the ratios to ``sdk``, each the median of the per-round ratios.

Run: ``python benchmarks/bench_ask.py [--rounds 20] [--baseline DIR]``.
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
PROMPT = "hello there, how are you doing today my friend"


def child_env(home: Path, pythonpath: Path) -> dict[str, str]:
    """An empty home (no agents file: the built-in bob), bytecode under *home*."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(home / "pycache")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    env["HOME"] = str(home)
    env["XDG_CONFIG_HOME"] = str(home / "config")
    env["XDG_RUNTIME_DIR"] = str(home)
    env.pop("ACPKIT_DIR", None)
    return env


def commands() -> dict[str, list[str]]:
    ask = "from acpkit_client.launch import acpkit_client; acpkit_client()"
    return {
        "acpkit": [sys.executable, "-c", ask, "ask", PROMPT],
        "sdk": [sys.executable, str(HERE / "ask_sdk_pair.py"), "client", PROMPT],
    }


def run_once(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall seconds from spawn to exit, and the CPU seconds of the process and its children."""
    start = time.perf_counter()
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        cwd=cwd, env=env,
    )  # fmt: skip
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    assert process.stdout is not None and process.stderr is not None
    out, err = process.stdout.read(), process.stderr.read()
    process.stdout.close()
    process.stderr.close()
    if process.returncode != 0 or f"Echo: {PROMPT}".encode() not in out:
        raise SystemExit(f"{argv}: exit {process.returncode}, answer {out!r}: {err[-2000:]!r}")
    return elapsed, usage.ru_utime + usage.ru_stime


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--baseline", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        project = home / "project"  # the cwd: an empty project
        project.mkdir()
        argvs = commands()
        envs = {name: child_env(home, ROOT) for name in argvs}
        if args.baseline is not None:
            argvs["acpkit-before"] = argvs["acpkit"]
            envs["acpkit-before"] = child_env(home / "before", args.baseline.resolve())
            (home / "before").mkdir()
        names = list(argvs)
        for name in names:  # warm the file cache and write the bytecode
            run_once(argvs[name], envs[name], project)
        wall: dict[str, list[float]] = {name: [] for name in names}
        cpu: dict[str, list[float]] = {name: [] for name in names}
        for round_ in range(args.rounds):
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            for name in order:
                elapsed, used = run_once(argvs[name], envs[name], project)
                wall[name].append(elapsed)
                cpu[name].append(used)
    print(f"{'command':<15}{'wall s: median (min-max)':>28}{'cpu s: median (min-max)':>28}")
    for name in names:
        print(f"{name:<15}{spread(wall[name]):>28}{spread(cpu[name]):>28}")
    for name in (n for n in names if n != "sdk"):
        for label, figures in (("wall", wall), ("cpu", cpu)):
            ratios = [a / b for a, b in zip(figures[name], figures["sdk"], strict=True)]
            print(f"{name + ' / sdk, ' + label:<24} {spread(ratios)}  (per-round ratio)")


if __name__ == "__main__":
    main()
