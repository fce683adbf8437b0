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
* the server process's CPU seconds during the turns (``/proc/<pid>/stat``), and this
  process's (the clients');
* setup: the time to open and initialize all the connections.

Then the ratios acpkit/SDK (round trips: lower is better; notifications/s: higher).

HTTP/2 (``--part http2``, also in the default ``all``): the same figures for acpkit's
Streamable HTTP client over HTTP/2 and over HTTP/1.1 against one bob served over TLS
(``--listen http:ssl:...``, a throwaway self-signed certificate), ``http2="auto"`` (ALPN
picks h2) against ``http2="never"``, plus the server's open file descriptors once every
connection is open (HTTP/1.1 holds a TCP connection per SSE stream and more for the
POSTs; HTTP/2 one per client connection). Ratios HTTP/2 / HTTP/1.1. Skipped where
Twisted cannot serve TLS (``acpkit.remote.security.tls_serving_problem``).

bob allows 100 remote connections by default: it is started with ``--max-connections``
``--connections`` + 50.

Run: ``python benchmarks/bench_remote.py [--connections 200] [--words 50]
[--part all|servers|http2]``; needs the ``remote`` extra, the SDK (``acp``) and uvicorn.
Linux (``/proc``).
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
from acpkit.remote.http_client import connect_http

ROOT = Path(__file__).parent.parent
#: The echo engine cuts its answer at word boundaries into chunks of at most 24
#: characters: a word of 23 letters and a space is one chunk.
WORD = "abcdefghijklmnopqrstuvw "


def bob_command(connections: int, config: Path, listen: str = "http:tcp:0") -> list[str]:
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
        listen,
        "--max-connections",
        str(connections + 50),
    ]


def start_bob(
    connections: int, workdir: Path, listen: str = "http:tcp:0"
) -> tuple[subprocess.Popen[str], int]:
    config = workdir / "agent.toml"
    config.write_text("", encoding="utf-8")
    env = {**os.environ, "HOME": str(workdir), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        bob_command(connections, config, listen),
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


def client_cpu_seconds() -> float:
    """This process's (the clients') user + system CPU seconds."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def open_fds(pid: int) -> int:
    """How many file descriptors a process has open (its sockets among them)."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def self_signed(workdir: Path) -> tuple[Path, Path]:
    """A throwaway key and certificate for ``localhost``, as PEM files in ``workdir``."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_path, cert_path = workdir / "key.pem", workdir / "cert.pem"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path


async def open_one(url: str, **options: Any) -> tuple[ClientConnection, Counting, str]:
    """One connection with a session: ``connect_remote``, or ``connect_http`` given
    ``options`` (``tls``, ``http2``)."""
    client = Counting()
    if options:
        conn = await connect_http(reactor, url, client, **options)
    else:
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


async def measure(
    url: str, connections: int, words: int, pid: int, **options: Any
) -> dict[str, Any]:
    """Open ``connections``, then one turn on each at once; the figures."""
    started = time.monotonic()
    opened = await gather([ensureDeferred(open_one(url, **options)) for _ in range(connections)])
    setup = time.monotonic() - started
    server_fds = open_fds(pid)
    text = WORD * words
    expected = "Echo: " + text
    cpu_before = cpu_seconds(pid)
    client_before = client_cpu_seconds()
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
    client_cpu = client_cpu_seconds() - client_before
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
        "client_cpu_s": round(client_cpu, 3),
        "server_fds": server_fds,
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    if args.part in ("all", "servers"):
        results.update(await compare_servers(args))
    if args.part in ("all", "http2"):
        results.update(await compare_http_versions(args))
    return results


async def compare_http_versions(args: argparse.Namespace) -> dict[str, Any]:
    """acpkit's HTTP client over HTTP/2 and HTTP/1.1 against one bob over TLS."""
    from acpkit.http.tls import ClientTLS
    from acpkit.remote.security import tls_serving_problem

    problem = tls_serving_problem()
    if problem is not None:
        print(f"http2: skipped ({problem})", flush=True)
        return {}
    workdir = Path(tempfile.mkdtemp(prefix="bench-remote-h2-"))
    key, cert = self_signed(workdir)
    listen = f"http:ssl:0:privateKey={key}:certKey={cert}"
    bob, port = start_bob(args.connections, workdir, listen)
    url = f"https://localhost:{port}/acp"
    tls = ClientTLS(trust_root=cert)
    results: dict[str, Any] = {}
    try:
        for version, mode in (("HTTP/1.1", "never"), ("HTTP/2", "auto")):
            await measure(url, 2, 2, bob.pid, tls=tls, http2=mode)  # warm-up
            figures = await measure(url, args.connections, args.words, bob.pid, tls=tls, http2=mode)
            results[f"acpkit https {version}"] = figures
            print(f"acpkit https {version:8} {json.dumps(figures)}", flush=True)
    finally:
        bob.terminate()
        bob.wait(30)
    ours, theirs = results["acpkit https HTTP/2"], results["acpkit https HTTP/1.1"]
    keys = (
        "p50_ms",
        "p99_ms",
        "notifications_per_s",
        "server_cpu_s",
        "client_cpu_s",
        "setup_s",
        "server_fds",
    )
    ratios = {key: round(ours[key] / theirs[key], 2) for key in keys if theirs[key]}
    print(f"HTTP/2 / HTTP/1.1 {json.dumps(ratios)}", flush=True)
    results["ratios HTTP/2 / HTTP/1.1"] = ratios
    return results


async def compare_servers(args: argparse.Namespace) -> dict[str, Any]:
    """bob and the SDK's server, over WebSocket and HTTP/1.1, with acpkit's clients."""
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
    parser.add_argument(
        "--part",
        choices=("all", "servers", "http2"),
        default="all",
        help="servers: bob vs the SDK's; http2: HTTP/2 vs HTTP/1.1 against bob over TLS",
    )
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
