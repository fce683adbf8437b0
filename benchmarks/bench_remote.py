"""
Remote ACP under load, on loopback: one bob process (``twistd -n acp-agent --engine echo
--listen http:tcp:0``) serving ``--connections`` (200) concurrent remote connections, each
doing one streamed turn, over WebSocket and over Streamable HTTP; beside it, in the same
run, the official Python SDK 0.12.1's server (``acp.http.asgi`` under uvicorn, one
process, benchmarks/remote_sdk_echo.py) with an echo agent streaming the same chunks.

The load comes from this process, with acpkit's own remote clients (``connect_remote``:
Autobahn for ``ws://``, treq for ``http://``, session streams on as the SDK's server
needs): the same client for both servers, so the ratios compare the servers. After a
warm-up (two connections, untimed), all connections are opened (initialize,
session/new) first; then every prompt is sent at
once. Measured per server and transport:

* round trip of each ``session/prompt`` (sent -> its answer, after all its chunks):
  p50 and p99 over the connections;
* notifications/s: the ``session/update`` chunks received by all clients, divided by the
  time from the first prompt sent to the last answer;
* the server process's CPU seconds during the turns (``/proc/<pid>/stat``);
* setup: the time to open and initialize all the connections.

Then the ratios acpkit/SDK (round trips: lower is better; notifications/s: higher).

bob allows 100 remote connections by default: it is started with ``--max-connections``
``--connections`` + 50.

Run: ``python benchmarks/bench_remote.py [--connections 200] [--words 50]``; needs the
``remote`` extra, the SDK (``acp``) and uvicorn. Linux (``/proc``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import Deferred, DeferredList, ensureDeferred

from acpkit import schema
from acpkit.connection import Client, ClientConnection
from acpkit.remote.connect import connect_remote

ROOT = Path(__file__).parent.parent
#: The echo engine cuts its answer at word boundaries into chunks of at most 24
#: characters: a word of 23 letters and a space is one chunk.
WORD = "abcdefghijklmnopqrstuvw "


def bob_command(connections: int, config: Path) -> list[str]:
    """twistd -n acp-agent allowing ``connections`` + 50 remote connections."""
    return [
        sys.executable,
        "-c",
        "from twisted.scripts.twistd import run; run()",
        "-n",
        "acp-agent",
        "--config",
        str(config),
        "--engine",
        "echo",
        "--listen",
        "http:tcp:0",
        "--max-connections",
        str(connections + 50),
    ]


def start_bob(connections: int, workdir: Path) -> tuple[subprocess.Popen[str], int]:
    config = workdir / "agent.toml"
    config.write_text("", encoding="utf-8")
    env = {**os.environ, "HOME": str(workdir), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        bob_command(connections, config),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=workdir,
        env=env,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if "listening on" in line:
            port = int(line.rsplit("port=", 1)[1].rstrip(")\n"))
            # keep draining stderr so bob never blocks on a full pipe
            drain = subprocess.Popen(["cat"], stdin=proc.stderr, stdout=subprocess.DEVNULL)
            proc._drain = drain  # type: ignore[attr-defined]
            return proc, port
    raise RuntimeError(f"bob exited ({proc.wait()}) without listening")


def start_sdk(workdir: Path) -> tuple[subprocess.Popen[str], int]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "remote_sdk_echo.py")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=workdir,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("PORT "):
        raise RuntimeError(f"the SDK server exited ({proc.wait()}) without listening")
    return proc, int(line.split()[1])


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Counting(Client):
    """Counts the agent's chunks; the turn's answer is awaited by the caller."""

    def __init__(self) -> None:
        self.chunks = 0
        self.text: list[str] = []

    def session_update(self, params: schema.SessionNotification) -> None:
        update = params.update
        if isinstance(update, schema.AgentMessageChunk) and isinstance(
            update.content, schema.TextContentBlock
        ):
            self.chunks += 1
            self.text.append(update.content.text)


async def open_one(url: str) -> tuple[ClientConnection, Counting, str]:
    client = Counting()
    conn = await connect_remote(reactor, url, client)
    await conn.initialize()
    session = await conn.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))
    return conn, client, session.session_id


async def gather(ds: list[Deferred[Any]]) -> list[Any]:
    results = await DeferredList(ds, consumeErrors=True)
    failures = [value for ok, value in results if not ok]
    if failures:
        raise RuntimeError(f"{len(failures)} of {len(ds)} failed; first: {failures[0].value!r}")
    return [value for _, value in results]


async def measure(url: str, connections: int, words: int, pid: int) -> dict[str, Any]:
    """Open ``connections``, then one turn on each at once; the figures."""
    started = time.monotonic()
    opened = await gather([ensureDeferred(open_one(url)) for _ in range(connections)])
    setup = time.monotonic() - started
    text = WORD * words
    expected = "Echo: " + text
    cpu_before = cpu_seconds(pid)
    rtts: list[float] = []
    first = time.monotonic()

    async def turn(conn: ClientConnection, sid: str) -> None:
        sent = time.monotonic()
        response = await conn.prompt(
            schema.PromptRequest(session_id=sid, prompt=[schema.TextContentBlock(text=text)])
        )
        rtts.append(time.monotonic() - sent)
        assert response.stop_reason == schema.StopReason.END_TURN

    await gather([ensureDeferred(turn(conn, sid)) for conn, _, sid in opened])
    elapsed = time.monotonic() - first
    cpu = cpu_seconds(pid) - cpu_before
    notifications = sum(client.chunks for _, client, _ in opened)
    for _, client, _ in opened:
        assert "".join(client.text) == expected, "a turn's chunks were lost or reordered"
    for conn, _, _ in opened:
        conn.close()
    await gather([conn.closed for conn, _, _ in opened])
    rtts.sort()
    return {
        "connections": connections,
        "setup_s": round(setup, 3),
        "p50_ms": round(1000 * statistics.median(rtts), 1),
        "p99_ms": round(1000 * rtts[min(len(rtts) - 1, int(0.99 * len(rtts)))], 1),
        "notifications": notifications,
        "notifications_per_s": round(notifications / elapsed),
        "turns_s": round(elapsed, 3),
        "server_cpu_s": round(cpu, 3),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-remote-"))
    bob, bob_port = start_bob(args.connections, workdir)
    sdk, sdk_port = start_sdk(workdir)
    results: dict[str, Any] = {}
    try:
        servers = {"acpkit": (bob_port, bob.pid), "sdk": (sdk_port, sdk.pid)}
        for transport in ("ws", "http"):
            for name, (port, pid) in servers.items():
                url = f"{transport}://127.0.0.1:{port}/acp"
                await measure(url, 2, 2, pid)  # warm-up: imports, first connections
                figures = await measure(url, args.connections, args.words, pid)
                results[f"{name} {transport}"] = figures
                print(f"{name:6} {transport:4} {json.dumps(figures)}", flush=True)
    finally:
        for proc in (bob, sdk):
            proc.terminate()
            proc.wait(30)
    ratios = {}
    for transport in ("ws", "http"):
        ours, theirs = results[f"acpkit {transport}"], results[f"sdk {transport}"]
        ratios[transport] = {
            key: round(ours[key] / theirs[key], 2)
            for key in ("p50_ms", "p99_ms", "notifications_per_s", "server_cpu_s", "setup_s")
        }
        print(f"acpkit/sdk {transport:4} {json.dumps(ratios[transport])}", flush=True)
    results["ratios acpkit/sdk"] = ratios
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--words", type=int, default=50, help="prompt words (one chunk each)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON too")
    options = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    outcome: dict[str, Any] = {}

    def done(result: Any) -> None:
        outcome["result"] = result
        reactor.stop()

    def failed(failure: Any) -> None:
        outcome["error"] = failure
        reactor.stop()

    reactor.callWhenRunning(lambda: ensureDeferred(main(options)).addCallbacks(done, failed))
    reactor.run()
    if "error" in outcome:
        outcome["error"].printTraceback()
        sys.exit(1)
    if options.json:
        print(json.dumps(outcome["result"], indent=2))
