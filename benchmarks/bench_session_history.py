"""
Long sessions: bob's CPU per turn against the length of the history, sessions enabled.

A turn here is what bob does around the model for one turn with one tool call: append the
user message, the assistant's tool call, the tool output (10-100 KB, cycling) and the final
answer, estimate the tokens in context (``Session.used_tokens``), then save the session
file (``DiskSessionStore.write``: the whole file, atomically).  Two ways, interleaved turn
by turn in the same run so that the machine's load falls on both:

- ``before``: the seed's way (the whole history re-encoded at each save and at each
  estimate: ``json.dumps`` of the document, ``estimate_tokens`` of the history);
- ``after``: the store as it is (each message encoded once, the file written from the
  kept bytes).

For each history length (turns already in the session), ``--reps`` turns of each way are
timed (process CPU, split into the encoding, everything up to the file's bytes, and the
writing of the file; and wall); printed: the median per-turn CPU and its spread (min-max),
and for each way the ratio of the per-turn CPU (all of it, and the encoding alone) at the
longest history to the shortest (flat is 1.0).  The writing stays proportional to the
file's size: the file is rewritten whole, atomically, after each turn.

Run: ``python benchmarks/bench_session_history.py [--turns 10,100,1000,5000] [--reps 3]``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import string
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

from acpkit_agent.session import Session, estimate_tokens  # noqa: E402
from acpkit_agent.store import (  # noqa: E402
    DiskSessionStore,
    atomic_write,
    session_file_chunks,
    session_to_document,
)

SIZES = [10_000, 40_000, 70_000, 100_000]


def outputs() -> list[str]:
    """Tool outputs of 10-100 KB: printable text with newlines, quotes and tabs."""
    rng = random.Random(25)
    alphabet = string.ascii_letters + string.digits + " \n\t\"'{}[]:,.-_/é"
    return ["".join(rng.choices(alphabet, k=size)) for size in SIZES]


def add_turn(session: Session, number: int, texts: list[str]) -> None:
    call_id = f"m{number}"
    call = {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    session.history += [
        {"role": "user", "content": f"question {number}: run the tests"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": texts[number % len(texts)]},
        {"role": "assistant", "content": f"answer {number}: the tests pass"},
    ]
    session.record_call_id(call_id, f"call_{number}")


def turn_before(store: DiskSessionStore, session: Session, number: int, texts: list[str]) -> float:
    """The seed's turn: the history re-encoded for the estimate and for the file."""
    start = time.process_time()
    add_turn(session, number, texts)
    estimate_tokens(session.history)
    data = json.dumps(session_to_document(session), ensure_ascii=False, indent=1)
    chunks = [data.encode("utf-8") + b"\n"]
    encoded = time.process_time() - start
    atomic_write(store.path_for(session.id, session.cwd), chunks)
    return encoded


def turn_after(store: DiskSessionStore, session: Session, number: int, texts: list[str]) -> float:
    """The store's turn (what ``DiskSessionStore.write`` does, timed in two parts)."""
    start = time.process_time()
    add_turn(session, number, texts)
    session.used_tokens()
    chunks = session_file_chunks(session)
    encoded = time.process_time() - start
    atomic_write(store.path_for(session.id, session.cwd), chunks)
    return encoded


#: A turn; returns the CPU seconds spent before writing the file.
Turn = Callable[[DiskSessionStore, Session, int, list[str]], float]


def timed(
    turn: Turn, store: DiskSessionStore, session: Session, number: int, texts: list[str]
) -> tuple[float, float, float]:
    """(encoding CPU, writing CPU, wall) seconds of one turn (process CPU clock)."""
    cpu, wall = time.process_time(), time.perf_counter()
    encoded = turn(store, session, number, texts)
    total = time.process_time() - cpu
    return encoded, total - encoded, time.perf_counter() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--turns", default="10,100,1000,5000")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    lengths = [int(n) for n in args.turns.split(",")]
    texts = outputs()
    results: dict[str, dict[int, list[tuple[float, float, float]]]] = {"before": {}, "after": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for length in lengths:
            store = DiskSessionStore(".sessions")
            sessions: dict[str, Session] = {}
            for way in ("before", "after"):
                session = Session.create(f"{way}-{length}", tmp)
                for number in range(length):
                    add_turn(session, number, texts)
                session.used_tokens()  # the state after the previous turn's save
                sessions[way] = session
            turns: dict[str, Turn] = {"before": turn_before, "after": turn_after}
            for way in ("before", "after"):
                results[way][length] = []
            for rep in range(args.reps):
                order = ("before", "after") if rep % 2 == 0 else ("after", "before")
                for way in order:
                    sample = timed(turns[way], store, sessions[way], length + rep, texts)
                    results[way][length].append(sample)
            del sessions
    header = f"{'turns':>6}  {'way':<7}{'CPU ms/turn: median (min-max)':>32}"
    print(f"{header}{'encode':>8}{'write':>8}{'wall':>8}")
    for length in lengths:
        for way in ("before", "after"):
            samples = results[way][length]
            cpu = [(u + s) * 1e3 for u, s, _ in samples]
            encode, write, wall = (statistics.median(x[i] * 1e3 for x in samples) for i in range(3))
            spread = f"{statistics.median(cpu):.1f} ({min(cpu):.1f}-{max(cpu):.1f})"
            print(f"{length:>6}  {way:<7}{spread:>32}{encode:>8.1f}{write:>8.1f}{wall:>8.1f}")
    first, last = lengths[0], lengths[-1]
    for way in ("before", "after"):
        for label, pick in (("CPU", (0, 1)), ("encoding CPU", (0,))):
            at_last, at_first = (
                statistics.median(sum(x[i] for i in pick) for x in results[way][length])
                for length in (last, first)
            )
            ratio = at_last / at_first
            print(f"{way}: per-turn {label} at {last} turns / at {first} turns = {ratio:.1f}")


if __name__ == "__main__":
    main()
