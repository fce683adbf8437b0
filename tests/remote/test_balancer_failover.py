"""
Issue 27, end to end: three bobs behind HAProxy (the documented configuration), 30
clients each running 20 turns with sessions saved; one bob is SIGKILLed, another
SIGTERMed mid-run.

What must hold:

- every client finishes its 20 turns through the survivors (``connect_resumable``:
  reconnect, ``session/load``, turns in flight reported interrupted and sent again);
- every turn answered ``end_turn`` (before the faults or after) is in its session's
  file afterwards: zero confirmed turns lost;
- no session is attached twice at any moment: from the bobs' logs (each attach,
  takeover and detach, with its time, pid and connection; the killed bob's sessions end
  when it is killed), and from the lock holders (``/proc/locks``, sampled through the
  run: a session's lock file is only ever locked by the pid its holder line names, and
  nothing stays locked once the bobs are gone);
- the SIGTERMed bob drained (its running turns answered) and exited by itself;
- nothing is left running (bobs, HAProxy, their children).

Timing is never asserted: every wait is bounded and on a condition.  The figures
(turns, interrupted turns, reconnections, which bob served what) are printed for the
record (``pytest -s``).
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from twisted.internet import reactor
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase
from zope.interface import implementer

from acpkit import schema
from acpkit.connection import Client
from acpkit.remote.connect import connect_resumable
from acpkit.remote.reconnect import IReconnectObserver, RetryPolicy, TurnInterrupted
from acpkit_agent.attachments import LOCK_SUFFIX
from tests.balancer import (
    all_healthy,
    json_events,
    start_bob_behind,
    start_haproxy,
    write_token,
)
from tests.remote.test_attack_soak import alive, descendants_of

pytestmark = pytest.mark.process

CLIENTS = 30
TURNS = 20
#: Confirmed turns (of 600) after which bob1 is SIGKILLed, then bob2 SIGTERMed.
KILL_AFTER = 200
TERM_AFTER = 400
#: A turn sent again at most this many times (each send interrupted by a fault).
MAX_SENDS = 6
#: The clients' retries: 12 attempts, delays from 0.2 s doubling up to 4 s (about 30 s).
POLICY = RetryPolicy(attempts=12, first_delay=0.2, factor=2.0, max_delay=4.0, step_timeout=60)


async def until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await deferLater(reactor, 0.05, lambda: None)


class Quiet(Client):
    """The clients' IClient: bob's updates are not needed here."""


@implementer(IReconnectObserver)
@attrs.define
class Told:
    """What one client's resumable connection told it."""

    events: Counter[str] = attrs.Factory(Counter)
    reasons: list[str] = attrs.Factory(list)

    def connection_lost(self, reason: str) -> None:
        self.events["lost"] += 1
        self.reasons.append(reason)

    def retrying(self, attempt: int, attempts: int, delay: float, reason: str) -> None:
        self.events["attempts"] += 1

    def resumed(self, session_ids: list[str]) -> None:
        self.events["resumed"] += 1

    def session_lost(self, session_id: str, reason: str) -> None:
        self.events["session_lost"] += 1
        self.reasons.append(reason)

    def turn_interrupted(self, session_id: str, reason: str) -> None:
        self.events["interrupted"] += 1

    def gave_up(self, reason: str) -> None:
        self.events["gave_up"] += 1
        self.reasons.append(reason)


@attrs.define
class Outcome:
    """One client's run: its session, the turns confirmed (text), sends interrupted."""

    session_id: str
    confirmed: list[str]
    interrupted: int
    told: Told


@attrs.define
class LockSampler:
    """
    A thread reading ``/proc/locks`` and the sessions directory's lock files every few
    milliseconds: which pid holds which session's lock, checked against the holder line
    the lock file names.
    """

    directory: Path
    samples: int = 0
    holders: dict[str, set[int]] = attrs.Factory(lambda: defaultdict(set))
    mismatches: list[str] = attrs.Factory(list)
    _stop: threading.Event = attrs.Factory(threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="locks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def locked(self) -> dict[int, set[int]]:
        """Inode -> the pids holding a flock on it (this host's /proc/locks)."""
        found: dict[int, set[int]] = defaultdict(set)
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if "->" in fields:  # a waiter, not a holder
                continue
            if len(fields) < 6 or fields[1] != "FLOCK":
                continue
            inode = int(fields[5].rsplit(":", 1)[1])
            found[inode].add(int(fields[4]))
        return found

    def lock_files(self) -> dict[str, tuple[int, str]]:
        """Session file name -> (its lock file's inode, the holder line in it)."""
        files: dict[str, tuple[int, str]] = {}
        if not self.directory.is_dir():
            return files
        for path in self.directory.glob(f".*.json{LOCK_SUFFIX}"):
            try:
                inode = path.stat().st_ino
                line = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            files[path.name[1 : -len(LOCK_SUFFIX)]] = (inode, line)
        return files

    def sample(self) -> None:
        locked = self.locked()
        for session, (inode, line) in self.lock_files().items():
            pids = locked.get(inode, set())
            if len(pids) > 1:
                self.mismatches.append(f"{session}: locked by {sorted(pids)} at once")
            for pid in pids:
                self.holders[session].add(pid)
                # the holder line is written right after the lock is taken: an empty
                # one is a lock being taken now
                if line and f"pid={pid} " not in line:
                    self.mismatches.append(f"{session}: locked by {pid}, its file says {line!r}")
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(0.005)

    def still_locked(self) -> list[str]:
        locked = self.locked()
        return [s for s, (inode, _) in self.lock_files().items() if locked.get(inode)]


def attachment_overlaps(
    events: list[dict[str, Any]], killed: dict[int, float]
) -> tuple[list[str], Counter[int]]:
    """
    Replay every bob's attach, takeover and detach lines in time order: a session
    attached to a connection while another (pid, connection) holds it is an overlap.
    A killed bob's attachments end when it was killed (``killed``: pid -> the time just
    before the signal); its lines logged after that are ignored.  Returns the
    overlaps and, per pid, how many attaches it made.
    """
    holding: dict[str, set[tuple[int, str]]] = defaultdict(set)
    attaches: Counter[int] = Counter()
    overlaps = []
    marks = [(when, -1, pid) for pid, when in killed.items()]
    timeline: list[tuple[float, int, Any]] = [(e["log_time"], i, e) for i, e in enumerate(events)]
    for when, _, item in sorted([*timeline, *marks], key=lambda t: (t[0], t[1])):
        if isinstance(item, int):  # a kill: that pid holds nothing from now on
            for held in holding.values():
                held -= {h for h in held if h[0] == item}
            continue
        pid = item["pid"]
        if pid in killed and when > killed[pid]:
            continue
        sid, connection = item["sid"], item["connection"]
        kind = item["log_format"].split(": ", 1)[1].split(" ", 1)[0]
        if kind == "attached":
            others = holding[sid] - {(pid, connection)}
            if others:
                overlaps.append(f"{sid}: attached to {pid}/{connection} while {others} held it")
            holding[sid].add((pid, connection))
            attaches[pid] += 1
        else:  # taken (over from ``connection``, same pid) or detached
            holding[sid].discard((pid, connection))
    return overlaps, attaches


def saved_user_turns(path: Path) -> list[str]:
    import json

    document = json.loads(path.read_text(encoding="utf-8"))
    return [str(m.get("content")) for m in document["history"] if m.get("role") == "user"]


class FailoverTests(TestCase):
    timeout = 300

    async def test_three_bobs_one_killed_one_drained_no_turn_lost(self) -> None:
        """
        30 clients x 20 turns through HAProxy over three bobs; bob1 SIGKILLed after 200
        confirmed turns, bob2 SIGTERMed after 400: every client ends its 20 turns, every
        confirmed turn is in its session file, no session is ever attached twice, bob2
        drains and exits 0, nothing is left running.
        """
        started = time.monotonic()
        tmp = Path(self.mktemp()).resolve()
        tmp.mkdir(parents=True)
        project = tmp / "project"
        project.mkdir()
        token = write_token(tmp / "token")
        bobs = [start_bob_behind(tmp, f"bob{n}", tmp / "token") for n in (1, 2, 3)]
        for bob in bobs:
            self.addCleanup(bob.stop)
            assert bob.port is not None, bob.stderr()
        balancer = start_haproxy(tmp, [f"127.0.0.1:{bob.port}" for bob in bobs])
        self.addCleanup(balancer.stop)
        all_healthy(balancer)
        sampler = LockSampler(project / ".acpkit" / "sessions")
        sampler.start()
        self.addCleanup(sampler.stop)
        pids = {bob.process.pid for bob in bobs}
        children: set[int] = set()
        confirmed_total = 0
        killed: dict[int, float] = {}

        async def one_client(number: int) -> Outcome:
            told = Told()
            connection = connect_resumable(
                reactor,
                balancer.url,
                Quiet(),
                headers={"Authorization": f"Bearer {token}"},
                policy=POLICY,
                observer=told,
                name=f"client {number}",
            )
            try:
                await connection.open()
                new = schema.NewSessionRequest(cwd=str(project), mcp_servers=[])
                session_id = (await connection.new_session(new)).session_id
                confirmed: list[str] = []
                interrupted = 0
                for turn in range(TURNS):
                    for send in range(MAX_SENDS):
                        text = f"client {number} turn {turn} send {send}"
                        request = schema.PromptRequest(
                            session_id=session_id, prompt=[schema.TextContentBlock(text=text)]
                        )
                        try:
                            answer = await connection.prompt(request, timeout=60)
                        except TurnInterrupted:
                            interrupted += 1
                            continue
                        except Exception as error:
                            raise AssertionError(
                                f"client {number} turn {turn}: {type(error).__name__}: {error}"
                                f"\nHAProxy's errors:\n{balancer_errors()}"
                            ) from None
                        assert answer.stop_reason == schema.StopReason.END_TURN, answer
                        confirmed.append(text)
                        nonlocal confirmed_total
                        confirmed_total += 1
                        break
                    else:
                        raise AssertionError(f"client {number}: turn {turn} never answered")
                return Outcome(session_id, confirmed, interrupted, told)
            finally:
                await connection.close()

        async def faults() -> None:
            await until(lambda: confirmed_total >= KILL_AFTER, 120, f"{KILL_AFTER} turns")
            victim = bobs[0].process
            children.update(descendants_of(victim.pid))
            killed[victim.pid] = time.time()
            victim.send_signal(signal.SIGKILL)
            await until(lambda: confirmed_total >= TERM_AFTER, 120, f"{TERM_AFTER} turns")
            children.update(descendants_of(bobs[1].process.pid))
            bobs[1].process.send_signal(signal.SIGTERM)

        def balancer_errors() -> str:
            """HAProxy's log lines of answers other than 2xx (its own, or a bob's)."""
            odd = [
                line
                for line in balancer.lines
                if re.search(r" (?:[0-9]+/){4}[0-9]+ (?!2)[0-9]{3} ", line)
            ]
            return "".join(odd[-40:])

        faulting = Deferred.fromCoroutine(faults())
        outcomes: list[Outcome] = await gatherResults(
            [Deferred.fromCoroutine(one_client(n)) for n in range(CLIENTS)]
        )
        await faulting
        run_seconds = time.monotonic() - started

        # bob2 drained and left by itself; bob3 is stopped now (it drains too).
        bobs[0].process.wait(30)
        await until(lambda: bobs[1].process.poll() is not None, 60, "bob2 to exit")
        children.update(descendants_of(bobs[2].process.pid))
        bob3_status = bobs[2].stop()
        sampler.stop()
        balancer_status = balancer.stop()
        await until(
            lambda: not any(alive(p) for p in pids | children | {balancer.process.pid}),
            30,
            "every process to end",
        )

        # -- the figures --------------------------------------------------------------------
        events = [
            e
            for n in (1, 2, 3)
            for e in json_events(tmp / f"bob{n}")
            if "session_file" in e and "sid" in e
        ]
        overlaps, attaches = attachment_overlaps(events, killed)
        told = Counter[str]()
        for outcome in outcomes:
            told.update(outcome.told.events)
        figures = {
            "turns confirmed": sum(len(o.confirmed) for o in outcomes),
            "sends interrupted (sent again)": sum(o.interrupted for o in outcomes),
            "clients' events": dict(told),
            "attaches per bob (pid)": dict(attaches),
            "lock samples": sampler.samples,
            "exit statuses (bob1 killed, bob2 drained, bob3, haproxy)": (
                bobs[0].process.returncode,
                bobs[1].process.returncode,
                bob3_status,
                balancer_status,
            ),
            "seconds": round(run_seconds, 1),
        }
        print("\nload balancer failover figures:")
        for name, value in figures.items():
            print(f"  {name}: {value}")

        # -- every client finished its turns -----------------------------------------------
        for number, outcome in enumerate(outcomes):
            self.assertEqual(len(outcome.confirmed), TURNS, f"client {number}")
            self.assertEqual(outcome.told.events["gave_up"], 0, outcome.told.reasons)
            self.assertEqual(outcome.told.events["session_lost"], 0, outcome.told.reasons)
        # the faults reached clients: connections were lost and resumed
        self.assertGreater(told["resumed"], 0)
        # -- zero confirmed turns lost ---------------------------------------------------------
        sessions = project / ".acpkit" / "sessions"
        for outcome in outcomes:
            saved = saved_user_turns(sessions / f"{outcome.session_id}.json")
            in_order = [text for text in saved if text in set(outcome.confirmed)]
            self.assertEqual(in_order, outcome.confirmed, outcome.session_id)
        # -- never attached twice ----------------------------------------------------------------
        self.assertEqual(overlaps, [])
        self.assertEqual(sampler.mismatches, [])
        self.assertGreater(sampler.samples, 0)
        self.assertEqual(sampler.still_locked(), [])
        self.assertTrue(
            all(holders <= pids for holders in sampler.holders.values()), sampler.holders
        )
        # sessions moved: the killed bob's and the drained bob's clients went elsewhere
        self.assertGreater(attaches[bobs[0].process.pid], 0)
        self.assertGreater(attaches[bobs[2].process.pid], CLIENTS // 3)
        # -- the drain -------------------------------------------------------------------------
        self.assertEqual(bobs[0].process.wait(30), -signal.SIGKILL)
        self.assertEqual(bobs[1].process.returncode, 0, bobs[1].stderr()[-3000:])
        self.assertIn("drained: every connection ended; exiting", bobs[1].stderr())
        for bob in bobs:
            self.assertNotIn("Traceback", bob.stderr())
