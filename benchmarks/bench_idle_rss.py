"""
Idle RSS of a minimal remote agent: what a listening server holds before its first
connection, and how much of it is TLS support that a plain-TCP server never uses.

Each round starts every server fresh (in a rotating order), waits for its ``PORT`` line
(listening), then reads its resident set (``VmRSS``) and stops it:

- ``acpkit``: ``remote_acpkit_echo.py`` (a minimal acpkit agent behind
  ``acpkit.remote.serve_remote``, plain TCP);
- ``acpkit-no-openssl``: the same program with pyOpenSSL made unimportable
  (``sys.modules["OpenSSL"] = None``) before Twisted's reactor is imported, an experiment
  only: it shows what Twisted's reactor pays for its TLS support (the reactor then has no
  ``listenSSL``, ``connectSSL`` or ``startTLS``);
- ``acpkit-no-openssl-h2``: the same, with h2 unimportable too (twisted.web then has no
  HTTP/2);
- ``sdk``: ``remote_sdk_echo.py`` (the Python SDK's ASGI server under uvicorn).

Printed: each server's median idle RSS (MiB) with its spread, and its ratio to ``sdk``
(the median of the per-round ratios, with their spread).
Run: ``python benchmarks/bench_idle_rss.py [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parent

_BLOCKED = (
    "import runpy, sys\n"
    "for name in sys.argv[1].split(','): sys.modules[name] = None\n"
    "sys.argv = sys.argv[2:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


def commands() -> dict[str, list[str]]:
    acpkit = str(HERE / "remote_acpkit_echo.py")
    return {
        "acpkit": [sys.executable, acpkit],
        "acpkit-no-openssl": [sys.executable, "-c", _BLOCKED, "OpenSSL", acpkit],
        "acpkit-no-openssl-h2": [sys.executable, "-c", _BLOCKED, "OpenSSL,h2", acpkit],
        "sdk": [sys.executable, str(HERE / "remote_sdk_echo.py")],
    }


def idle_rss_mib(argv: list[str], env: dict[str, str]) -> float:
    """The resident set of a fresh server once it printed its port, in MiB."""
    server = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env=env,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        if not line.startswith(b"PORT "):
            raise SystemExit(f"{argv}: no PORT line: {line!r}")
        status = Path(f"/proc/{server.pid}/status").read_text()
        rss = next(int(row.split()[1]) for row in status.splitlines() if row.startswith("VmRSS:"))
        return rss / 1024
    finally:
        server.kill()
        server.wait()


def spread(values: list[float], digits: int) -> str:
    """The median and the range of ``values``."""
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        argvs = commands()
        names = list(argvs)
        for name in names:  # write the bytecode
            idle_rss_mib(argvs[name], env)
        rss: dict[str, list[float]] = {name: [] for name in names}
        for round_ in range(args.rounds):
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                rss[name].append(idle_rss_mib(argvs[name], env))
    print(f"{'server':<22}{'idle RSS, MiB: median (min-max)':>34}{'/ sdk, per round':>26}")
    for name in names:
        values = rss[name]
        ratios = [mine / sdk for mine, sdk in zip(values, rss["sdk"], strict=True)]
        print(f"{name:<22}{spread(values, 1):>34}{spread(ratios, 2):>26}")


if __name__ == "__main__":
    main()
