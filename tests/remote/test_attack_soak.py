"""
A soak test bounded in time (issue 22): a real bob with 1,024 descriptors (soft and hard
limit) under 2,000 slow connections, while 50 legitimate clients each run a whole turn.

The slow connections are non-blocking sockets held by a thread of this test, from eight
loopback addresses (127.0.0.2-9: eight peers), each trickling one byte of a request
head that never ends every few seconds and reconnecting at once when bob closes it (as
an attacker would).  The legitimate clients are acpkit's own Streamable HTTP client
(``connect_remote``) in this process's reactor, with the token bob printed.

What must hold: every turn ends ``end_turn``; bob's descriptors never reach its limit;
its memory stays bounded (see :data:`RSS_GROWTH_BOUND`); once bob is stopped, neither it
nor any child of it is left.  The figures (connections held, what bob's summary lines
counted, turns, memory) are printed for the record (``pytest -s`` shows them).
"""

from __future__ import annotations

import os
import re
import resource
import selectors
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from twisted.internet import reactor
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.task import LoopingCall, deferLater
from twisted.trial.unittest import TestCase

from acpkit import schema
from acpkit.connection import Client
from acpkit.remote.connect import connect_remote
from tests.listening_bob import start_bob

pytestmark = pytest.mark.process

#: bob's descriptor limit (soft and hard: bob raises its soft limit to the hard one).
DESCRIPTORS = 1024
#: Slow connections the attacker holds, and the addresses it spreads them over.
SLOW_CONNECTIONS = 2000
SOURCES = tuple(f"127.0.0.{n}" for n in range(2, 10))
#: Seconds between two bytes of one slow connection.
TRICKLE_INTERVAL = 3.0
#: Legitimate clients, each one whole turn, all at once.
CLIENTS = 50
#: How much bob's resident memory may grow over its size before the attack (about 86 MiB).
#: Measured: 5 to 11 MiB.  The pending pool holds at most 256 connections whatever the
#: attacker holds (a few KiB each), the 50 clients' connections and sessions a few MiB;
#: the bound leaves room for the allocator on a loaded machine, while memory growing
#: with the attacker's 2,000 connections, or with its 10,000 and more reconnections
#: (a leak per connection of a few KiB), would pass it.
RSS_GROWTH_BOUND = 64 * 1024  # KiB
#: The whole soak must end well inside two minutes.
SOAK_DEADLINE = 100.0

#: bob's summary line (acpkit.io.admission), counted per kind.
SUMMARY = re.compile(r"connections refused or closed early in the last \S+ s \(([^)]*)\)")


def _limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS, DESCRIPTORS))


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def descendants_of(pid: int) -> set[int]:
    """The processes descending from ``pid`` (children, theirs...), from /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@attrs.define
class SlowLoris:
    """
    The attacker: a thread holding ``target`` connections to ``port`` from ``sources``,
    each sending one byte of an endless request head every ``interval`` seconds and
    replaced as soon as bob closes it.  Counts what it saw.
    """

    port: int
    target: int
    sources: tuple[str, ...]
    interval: float
    #: Connections open now (connected or connecting), and the most at once.
    held: int = 0
    most_held: int = 0
    #: Connections bob closed (evicted, timed out, refused), and connects refused.
    closed_by_bob: int = 0
    connect_errors: int = 0
    bytes_sent: int = 0
    _stop: threading.Event = attrs.Factory(threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="slowloris", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
            assert not self._thread.is_alive(), "the attacker thread did not stop"

    def _connect(self, selector: selectors.BaseSelector, n: int) -> None:
        sock = socket.socket()
        sock.setblocking(False)
        try:
            sock.bind((self.sources[n % len(self.sources)], 0))
            sock.connect_ex(("127.0.0.1", self.port))
        except OSError:
            self.connect_errors += 1
            sock.close()
            return
        # The next byte is due somewhere in the next interval: the trickle is spread.
        due = time.monotonic() + self.interval * (n % 97) / 97
        selector.register(sock, selectors.EVENT_READ, [due, 0])
        self.held += 1
        self.most_held = max(self.most_held, self.held)

    def _run(self) -> None:
        head = b"POST /acp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100_000
        made = 0
        with selectors.DefaultSelector() as selector:
            while not self._stop.is_set():
                # Top up to the target (at most 500 per round: the thread stays responsive).
                for _ in range(min(500, self.target - self.held)):
                    self._connect(selector, made)
                    made += 1
                now = time.monotonic()
                for key, _ in selector.select(0.05):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    try:
                        gone = sock.recv(4096) == b""
                    except BlockingIOError:
                        gone = False
                    except OSError:
                        gone = True
                    if gone:
                        self._drop(selector, sock)
                        self.closed_by_bob += 1
                for key in list(selector.get_map().values()):
                    due, sent = key.data
                    if due > now:
                        continue
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    try:
                        sock.send(head[sent % len(head) : sent % len(head) + 1])
                    except BlockingIOError:
                        pass  # still connecting
                    except OSError:
                        self._drop(selector, sock)
                        self.closed_by_bob += 1
                        continue
                    else:
                        key.data[1] = sent + 1
                        self.bytes_sent += 1
                    key.data[0] = now + self.interval
            for key in list(selector.get_map().values()):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                self._drop(selector, sock)

    def _drop(self, selector: selectors.BaseSelector, sock: socket.socket) -> None:
        selector.unregister(sock)
        sock.close()
        self.held -= 1


class Quiet(Client):
    """A client that collects the agent's text."""

    def __init__(self) -> None:
        self.text: list[str] = []

    def session_update(self, params: schema.SessionNotification) -> None:
        update = params.update
        if isinstance(update, schema.AgentMessageChunk) and isinstance(
            update.content, schema.TextContentBlock
        ):
            self.text.append(update.content.text)


@attrs.define
class Samples:
    """bob's memory and descriptors, sampled on the reactor."""

    pid: int
    rss: list[int] = attrs.Factory(list)
    fds: list[int] = attrs.Factory(list)

    def sample(self) -> None:
        try:
            self.rss.append(rss_kib(self.pid))
            self.fds.append(open_descriptors(self.pid))
        except (OSError, AssertionError):
            pass


async def until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Let the reactor turn (every 100 ms) until ``predicate()``; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await deferLater(reactor, 0.1, lambda: None)


def summary_counts(lines: list[str]) -> Counter[str]:
    """What bob's summary lines counted, by kind (``evicted pending``...)."""
    counts: Counter[str] = Counter()
    for line in lines:
        found = SUMMARY.search(line)
        if found is None:
            continue
        for part in found.group(1).split(", "):
            kind, _, number = part.rpartition(": ")
            counts[kind] += int(number)
    return counts


class SoakTests(TestCase):
    timeout = 180

    def setUp(self) -> None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY and hard < SLOW_CONNECTIONS + 1000:
            self.skipTest(f"this process may open only {hard} descriptors")
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            self.addCleanup(resource.setrlimit, resource.RLIMIT_NOFILE, (soft, hard))

    async def test_two_thousand_slow_connections_and_fifty_clients(self) -> None:
        """
        bob (1,024 descriptors) under 2,000 slow connections: each of 50 clients with
        the token runs a whole turn (initialize, session/new, session/prompt) that ends
        ``end_turn``; bob's descriptors stay below 1,024, its memory grows by less than
        RSS_GROWTH_BOUND; SIGTERM ends it with nothing left running.
        """
        started = time.monotonic()
        tmp = Path(self.mktemp()).resolve()
        tmp.mkdir(parents=True)
        bob = start_bob(tmp, "--listen", "http:tcp:0", preexec=_limit_descriptors)
        self.addCleanup(bob.stop)
        assert bob.port is not None and bob.token is not None, bob.stderr()
        idle_rss = rss_kib(bob.process.pid)
        samples = Samples(bob.process.pid)
        sampler = LoopingCall(samples.sample)
        sampler.start(0.25)
        self.addCleanup(lambda: sampler.stop() if sampler.running else None)
        attacker = SlowLoris(bob.port, SLOW_CONNECTIONS, SOURCES, TRICKLE_INTERVAL)
        attacker.start()
        self.addCleanup(attacker.stop)
        await until(lambda: attacker.most_held >= SLOW_CONNECTIONS, 30, "2,000 slow connections")
        # The attack under way: as many bytes trickled as there are slow connections.
        await until(lambda: attacker.bytes_sent >= SLOW_CONNECTIONS, 30, "the trickle")
        attack_started = time.monotonic()

        async def one_turn(text: str) -> str:
            """One client's whole turn: its stop reason, or which step failed and why."""
            client = Quiet()
            step = "connect"
            conn = None
            try:
                conn = await connect_remote(
                    reactor, bob.url, client, headers={"Authorization": f"Bearer {bob.token}"}
                )
                step = "initialize"
                await conn.initialize(timeout=60)
                step = "session/new"
                new = await conn.new_session(schema.NewSessionRequest(cwd=str(tmp), mcp_servers=[]))
                step = "session/prompt"
                prompt: list[schema.ContentBlock] = [schema.TextContentBlock(text=text)]
                answer = await conn.prompt(
                    schema.PromptRequest(session_id=new.session_id, prompt=prompt), timeout=60
                )
                if not "".join(client.text).endswith(text):
                    return f"wrong text: {client.text}"
                return str(answer.stop_reason)
            except Exception as error:
                return f"{step}: {type(error).__name__}: {error}"
            finally:
                if conn is not None:
                    conn.close()
                    await conn.closed.addErrback(lambda _: None)

        turns = [Deferred.fromCoroutine(one_turn(f"hello {n}")) for n in range(CLIENTS)]
        stops = await gatherResults(turns)
        turns_seconds = time.monotonic() - attack_started
        print(f"\nthe 50 turns, in {turns_seconds:.1f} s: {dict(Counter(stops))}")
        held_during = attacker.held
        # One more turn runs a command that would last ten minutes: bob must end it too.
        last = Deferred.fromCoroutine(one_turn("run: sleep 600"))
        pid = bob.process.pid
        await until(lambda: bool(descendants_of(pid)), 30, "bob to run the command")
        children = descendants_of(pid)
        attacker.stop()
        sampler.stop()
        status = bob.stop()
        samples.sample()  # bob is gone: nothing more is sampled
        await until(lambda: not any(alive(c) for c in children), 30, "bob's children to end")
        await last  # ended by bob's end, whatever it says
        said = bob.stderr()
        counts = summary_counts(bob.lines)
        elapsed = time.monotonic() - started
        figures = {
            "slow connections held (most, at the end)": (attacker.most_held, held_during),
            "closed by bob as seen by the attacker": attacker.closed_by_bob,
            "attacker's connect errors": attacker.connect_errors,
            "bytes trickled": attacker.bytes_sent,
            "bob's summary counts": dict(counts),
            "turns ended end_turn": f"{stops.count('end_turn')}/{CLIENTS}",
            "turns that did not": Counter(s for s in stops if s != "end_turn"),
            "seconds for the 50 turns": round(turns_seconds, 1),
            "bob RSS KiB (idle, max)": (idle_rss, max(samples.rss)),
            "bob descriptors (max)": max(samples.fds),
            "bob's children at the stop, left after": (len(children), 0),
            "soak seconds": round(elapsed, 1),
        }
        print("\nsoak figures:")
        for name, value in figures.items():
            print(f"  {name}: {value}")
        self.assertEqual(stops, ["end_turn"] * CLIENTS)
        self.assertLess(max(samples.fds), DESCRIPTORS)
        self.assertLess(max(samples.rss) - idle_rss, RSS_GROWTH_BOUND)
        self.assertGreaterEqual(attacker.most_held, SLOW_CONNECTIONS)
        self.assertGreater(sum(counts.values()), 0, said[-3000:])
        self.assertNotIn("Too many open files", said)
        self.assertNotIn("Traceback", said)
        self.assertIn(status, (0, -15))
        self.assertFalse(alive(pid))
        self.assertLess(elapsed, SOAK_DEADLINE)
