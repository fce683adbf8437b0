"""TUI benchmark: streaming into the conversation, pasting and typing into the input.

Run from the repository root::

    python -m benchmarks.bench_tui_stream [--quick] [--only NAME ...]

Sections (``--only`` picks some: ``length``, ``ratio``, ``streamed``, ``paste``,
``typing``):

``length``

For an agent message that already holds 100, 10,000 and 100,000 lines, it streams more
chunks into it (three chunks per line) and times what the terminal UI does for each: the
``session/update`` folded into the conversation, then the conversation pane drawn
(80 by 24, following the end).  Two kinds of message are measured: a fenced Python code
block (coloured by Pygments) and plain prose.  It prints the mean milliseconds per chunk
and the ratio of the 100,000-line cost to the 100-line cost, measured in the same run:
a ratio near 1 means a chunk costs the same whatever the entry's length.

The number of chunks timed per case adapts to a time budget (at least one chunk), so the
benchmark stays short even where a chunk is slow.

``ratio``
    A chunk inside a code block against a prose chunk: 5,000 chunks (three a line, every
    line different, so that no cache is flattered) streamed into a fresh entry, the pane
    drawn after each chunk (the worst case: one frame per chunk).  Code and prose rounds
    are interleaved and repeated; it prints each kind's median CPU milliseconds per chunk
    with the spread (min-max over the rounds), and the code/prose ratio per round.

``streamed``
    The same chunks streamed through the application as an agent sends them (2,000 a
    second, 4 a read, in the reactor simulation of ``typing`` below, without keys): the
    screen is drawn when the application asks, so what a chunk costs includes its share
    of the draws.  CPU milliseconds per chunk, code against prose, interleaved rounds.

``paste``
    The application (in process, on a ``Clock``, its own screen model: urwid canvases)
    gets a bracketed paste of 1,000 and 10,000 lines as urwid reports it (``begin
    paste``, a key per character, ``end paste``), read by read (4,096 keys a read, each
    read through the application's input filter when it has one, as urwid's main loop
    does); timed until the screen is drawn.  Then 20 keys are typed, the screen drawn
    after each: the per-key milliseconds.  Wall time, then CPU time (the machine may be
    shared).

``typing``
    Keystroke-to-screen latency while code streams: an agent sends 5,000 code chunks at
    2,000 a second (4 per read) while a key is typed every 50 ms; the client reads the
    agent's bytes (``session/update`` lines) through its real protocol stack, in memory.
    The run is a simulation of the single-threaded reactor: every event (a read of
    chunks, a timer, a key) costs what it really costs on this machine (measured), and
    an event waits while the UI is busy with earlier ones; a key's latency is from its
    arrival to the end of the screen drawn after it. The screen is drawn when the
    application asks (its timers) and after each key, as urwid's main loop does.

Every section drives only public names present in earlier trees too (``App``,
``AgentWindow``, ``Conversation``, ``ConversationView``), so the same file measures an
older tree (copy it there, run it with that tree first on ``PYTHONPATH``): the table in
``docs/reference/client-protocol.md`` comes from such a pair of runs.
"""

from __future__ import annotations

import argparse
import atexit
import functools
import gc
import heapq
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from types import SimpleNamespace
from typing import Any, cast

from twisted.internet.task import Clock

from acpkit import schema
from acpkit.connection import Agent, AgentConnection
from acpkit.testing.pair import connected_pair
from acpkit_client.config import AgentEntry
from acpkit_client.conversation import Conversation
from acpkit_client.session import AgentWindow
from acpkit_client.tui.app import App
from acpkit_client.tui.conversation_view import ConversationView

SIZE = (80, 24)
LENGTHS = (100, 10_000, 100_000)

CODE_LINES = [
    "def handle(request, *, retries=3):",
    '    """Answer one request, retrying on transient errors."""',
    "    for attempt in range(retries):",
    "        try:",
    "            return backend.send(request, timeout=2.5)  # may raise",
    "        except TransientError as error:",
    '            log.warning("attempt %d failed: %s", attempt, error)',
    "    raise GaveUp(request)",
    "",
]

PROSE_LINES = [
    "The client folds each chunk into the entry it belongs to, then the pane is drawn",
    "again; only the lines that changed should cost anything, whatever came before.",
    "",
]


def _lines(kind: str, count: int, start: int = 0) -> Iterator[str]:
    source = CODE_LINES if kind == "code" else PROSE_LINES
    for number in range(start, start + count):
        yield source[number % len(source)]


def _chunk(text: str) -> schema.AgentMessageChunk:
    return schema.AgentMessageChunk(content=schema.TextContentBlock(text=text))


def per_chunk(kind: str, length: int, chunks: int, budget: float) -> tuple[float, int]:
    """Mean seconds per chunk appended to a ``kind`` message of ``length`` lines."""
    conversation = Conversation(text_cap=None)
    view = ConversationView(conversation, "bench")
    prefix = "```python\n" if kind == "code" else ""
    conversation.apply(_chunk(prefix + "\n".join(_lines(kind, length)) + "\n"))
    view.render(SIZE, focus=False)
    pieces: list[str] = []
    for line in _lines(kind, chunks, start=length):
        third = max(len(line) // 3, 1)
        pieces.extend([line[:third], line[third : 2 * third], line[2 * third :] + "\n"])
    done = 0
    started = time.perf_counter()
    for piece in pieces[:chunks]:
        conversation.apply(_chunk(piece))
        view.render(SIZE, focus=False)
        done += 1
        if time.perf_counter() - started > budget:
            break
    return (time.perf_counter() - started) / done, done


#: Every streamed line different (numbered), so that no per-line cache is flattered.
NUMBERED_CODE = [
    "def handle_{n}(request, *, retries={n}):",
    '    """Answer request {n}, retrying on transient errors."""',
    "    for attempt_{n} in range(retries):",
    "        try:",
    "            return backend.send(request, timeout={n}.5)  # may raise {n}",
    "        except TransientError as error_{n}:",
    '            log.warning("attempt %d failed: %s ({n})", attempt_{n}, error_{n})',
    "    raise GaveUp(request, {n})",
    "",
]
NUMBERED_PROSE = [
    "The client folds chunk {n} into the entry it belongs to, then the pane is drawn",
    "again; only the lines that changed should cost anything, whatever came before {n}.",
    "",
]


def numbered_pieces(kind: str, lines: int) -> list[str]:
    """``lines`` different lines of ``kind``, cut three chunks a line."""
    source = NUMBERED_CODE if kind == "code" else NUMBERED_PROSE
    pieces: list[str] = []
    for number in range(lines):
        line = source[number % len(source)].format(n=number) + "\n"
        third = max(len(line) // 3, 1)
        pieces.extend([line[:third], line[third : 2 * third], line[2 * third :]])
    return pieces


def stream_cpu(kind: str, chunks: int) -> float:
    """CPU seconds per chunk streamed into a fresh ``kind`` entry, drawn after each."""
    conversation = Conversation(text_cap=None)
    view = ConversationView(conversation, "bench")
    if kind == "code":
        conversation.apply(_chunk("Here it is:\n```python\n"))
    view.render(SIZE, focus=False)
    pieces = numbered_pieces(kind, chunks // 3 + 1)[:chunks]
    started = time.process_time()
    for piece in pieces:
        conversation.apply(_chunk(piece))
        view.render(SIZE, focus=False)
    return (time.process_time() - started) / len(pieces)


def _spread(values: Sequence[float], scale: float = 1000.0, digits: int = 3) -> str:
    """``median (min-max)`` of ``values`` times ``scale``."""
    return (
        f"{statistics.median(values) * scale:.{digits}f} "
        f"({min(values) * scale:.{digits}f}-{max(values) * scale:.{digits}f})"
    )


def ratio_section(rounds: int, chunks: int) -> None:
    """Code chunk against prose chunk, interleaved rounds."""
    code: list[float] = []
    prose: list[float] = []
    for _ in range(rounds):
        code.append(stream_cpu("code", chunks))
        prose.append(stream_cpu("prose", chunks))
    ratios = [c / p for c, p in zip(code, prose, strict=True)]
    print(
        f"\nratio: {chunks:,} chunks a round, {rounds} rounds, CPU ms per chunk, median (min-max)"
    )
    print(f"  code   {_spread(code)}")
    print(f"  prose  {_spread(prose)}")
    print(f"  code/prose  {_spread(ratios, 1.0, 2)}")


class _Loop:
    """What the application draws through (urwid's main loop, without a terminal)."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.screen = SimpleNamespace(started=True)
        self.draws = 0

    def draw_screen(self) -> None:
        self.draws += 1
        canvas = self.app.root.render(SIZE, focus=True)
        for _row in canvas.content():  # what a screen reads of it to write it out
            pass


class _Agent(Agent):
    """Answers the handshake; the chunks are written to the client as bytes."""

    def __init__(self, connection: AgentConnection) -> None:
        self.connection = connection

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(protocol_version=1)

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id="s1")


def update_line(text: str) -> bytes:
    """The ``session/update`` line an agent writes for a chunk of ``text``."""
    message = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {
            "sessionId": "s1",
            "update": {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": text},
            },
        },
    }
    return json.dumps(message).encode() + b"\n"


def _app() -> tuple[App, AgentWindow, Clock, _Loop, Callable[[bytes], None]]:
    """The application with a window on an in-memory agent (handshake done), and what
    hands the client bytes read from the agent (as its transport would)."""
    clock = Clock()
    root = tempfile.mkdtemp(prefix="bench-tui-")
    atexit.register(shutil.rmtree, root, True)
    app = App(root, clock, environ={"ACPKIT_DIR": root + "/none"})
    session = AgentWindow(AgentEntry(name="bench", command="bench", source="bench"), root)
    pair = connected_pair(_Agent, session)
    app.attach_window(session)
    opened = session.open_on(pair.client, clock)
    for _ in range(20):
        pair.pump()
        clock.advance(0)
    assert opened.called
    loop = _Loop(app)
    app.loop = cast(Any, loop)
    loop.draw_screen()
    return app, session, clock, loop, pair.client.protocol.dataReceived


#: Keys of one read from the terminal during a paste (a 4 KiB read of ASCII text).
READ_KEYS = 4096


def paste_keys(text: str) -> list[str]:
    """The keys urwid reports for ``text`` pasted with bracketed paste."""
    named = {"\n": "enter", "\t": "tab"}
    return ["begin paste", *(named.get(c, c) for c in text), "end paste"]


def paste_once(lines: int, typed: int, clock: Callable[[], float]) -> tuple[float, list[float]]:
    """Seconds until a paste of ``lines`` lines is drawn; then seconds per typed key
    (measured with ``clock``)."""
    app, _session, _clock, loop, _feed = _app()
    text = "\n".join(
        f"pasted line {n}: some words of a long paste, {n * 7} units" for n in range(lines)
    )
    keys = paste_keys(text)
    # as urwid's main loop: the keys of each read (4 KiB) through the input filter, if
    # the application has one, then to the widgets one by one
    filter_input = getattr(app, "filter_input", lambda keys, raw: keys)
    gc.collect()
    started = clock()
    for start in range(0, len(keys), READ_KEYS):
        for key in filter_input(keys[start : start + READ_KEYS], []):
            app.root.keypress(SIZE, key)
    loop.draw_screen()
    pasted = clock() - started
    per_key = []
    for key in ("x y z " * typed)[:typed]:
        started = clock()
        app.root.keypress(SIZE, key)
        loop.draw_screen()
        per_key.append(clock() - started)
    return pasted, per_key


def paste_section(rounds: int, sizes: Sequence[int]) -> None:
    """Paste then type, per paste size."""
    for name, clock in (("wall", time.perf_counter), ("CPU", time.process_time)):
        print(f"\npaste: {rounds} rounds, {name} ms, median (min-max)")
        for lines in sizes:
            pastes: list[float] = []
            keys: list[float] = []
            for _ in range(rounds):
                pasted, per_key = paste_once(lines, 20, clock)
                pastes.append(pasted)
                keys.extend(per_key)
            print(f"  {lines:>6,} lines on screen  {_spread(pastes, digits=1)}")
            print(f"  {lines:>6,} lines, then a key  {_spread(keys, digits=2)}")


def simulate(
    kind: str, chunks: int, rate: float, per_read: int, key_every: float | None
) -> tuple[list[float], float, int]:
    """The reactor simulation (see the module docstring): ``chunks`` of ``kind`` arrive at
    ``rate`` a second, ``per_read`` a read, and a key every ``key_every`` seconds.

    Returns the keys' latencies, the UI's busy seconds in all, and the screens drawn.
    Costs are CPU seconds (the machine is shared: CPU time is what the UI itself spent).
    """
    app, _session, clock, loop, feed = _app()
    feed(update_line("Here it is:\n```python\n" if kind == "code" else "Here:\n"))
    lines = [update_line(piece) for piece in numbered_pieces(kind, chunks // 3 + 1)[:chunks]]
    reads = [b"".join(lines[i : i + per_read]) for i in range(0, len(lines), per_read)]
    events: list[tuple[float, int, str, Any]] = []
    for number, read in enumerate(reads):
        events.append((number * per_read / rate, len(events), "read", read))
    end = len(reads) * per_read / rate
    if key_every is not None:
        for number in range(int(end / key_every)):
            key = "abcdefgh"[number % 8]
            events.append(((number + 0.5) * key_every, len(events), "key", key))
    heapq.heapify(events)
    draws_before = loop.draws
    busy_until = 0.0
    busy = 0.0
    latencies: list[float] = []

    def run(work: Callable[[], None]) -> float:
        nonlocal busy
        started = time.process_time()
        work()
        cost = time.process_time() - started
        busy += cost
        return cost

    def advance_to(moment: float) -> float:
        """Run the timers due by ``moment``; their cost."""
        return run(lambda: clock.advance(max(moment - clock.seconds(), 0.0)))

    def timers_until(moment: float) -> None:
        """Run the timers due before the UI is free at ``moment`` (they come first)."""
        nonlocal busy_until
        while True:
            due = [call.getTime() for call in clock.getDelayedCalls()]
            if not due or min(due) > max(moment, busy_until):
                return
            at = max(min(due), busy_until)
            busy_until = at + advance_to(at)

    while events:
        arrival, _, what, payload = heapq.heappop(events)
        timers_until(arrival)
        start = max(arrival, busy_until)
        busy_until = start + advance_to(start)
        if what == "read":
            busy_until += run(functools.partial(feed, payload))
        else:

            def press(key: str = payload) -> None:
                app.root.keypress(SIZE, key)
                loop.draw_screen()

            busy_until += run(press)
            latencies.append(busy_until - arrival)
    timers_until(busy_until + 1.0)  # the last frame
    return latencies, busy, loop.draws - draws_before


def typing_section(rounds: int, chunks: int) -> None:
    """Keystroke latency while code streams."""
    latencies: list[float] = []
    medians: list[float] = []
    for _ in range(rounds):
        measured, _, _ = simulate("code", chunks, rate=2000.0, per_read=4, key_every=0.05)
        latencies.extend(measured)
        medians.append(statistics.median(measured))
    print(f"\ntyping: {chunks:,} code chunks at 2,000/s, a key every 50 ms, {rounds} rounds")
    print(f"  key to screen (ms), median of each round (min-max)  {_spread(medians, digits=1)}")
    median, worst = statistics.median(latencies) * 1000, max(latencies) * 1000
    print(f"  every key: median {median:.1f} ms, max {worst:.1f} ms")


def streamed_section(rounds: int, chunks: int) -> None:
    """Code against prose streamed through the application (its own draws), no keys."""
    code: list[float] = []
    prose: list[float] = []
    draws: dict[str, int] = {}
    for _ in range(rounds):
        for kind, costs in (("code", code), ("prose", prose)):
            _, busy, drawn = simulate(kind, chunks, rate=2000.0, per_read=4, key_every=None)
            costs.append(busy / chunks)
            draws[kind] = drawn
    ratios = [c / p for c, p in zip(code, prose, strict=True)]
    print(
        f"\nstreamed: {chunks:,} chunks at 2,000/s through the application, {rounds} rounds, "
        "UI CPU ms per chunk, median (min-max)"
    )
    print(f"  code   {_spread(code)}  ({draws['code']} screens drawn)")
    print(f"  prose  {_spread(prose)}  ({draws['prose']} screens drawn)")
    print(f"  code/prose  {_spread(ratios, 1.0, 2)}")


def length_section(quick: bool) -> None:
    """The original table: a chunk's cost against the entry's length."""
    chunks = 150 if quick else 600
    budget = 2.0 if quick else 6.0
    print(f"{'message':<8} {'lines':>8} {'chunks':>7} {'ms/chunk':>9}")
    for kind in ("code", "prose"):
        costs = {}
        for length in LENGTHS:
            cost, done = per_chunk(kind, length, chunks, budget)
            costs[length] = cost
            print(f"{kind:<8} {length:>8,} {done:>7} {cost * 1000:>9.3f}")
        ratio = costs[LENGTHS[-1]] / costs[LENGTHS[0]]
        print(f"{kind:<8} ratio {LENGTHS[-1]:,} lines / {LENGTHS[0]} lines: {ratio:.2f}x")


SECTIONS = ("length", "ratio", "streamed", "paste", "typing")


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its tables."""
    parser = argparse.ArgumentParser(description="acpkit TUI benchmark")
    parser.add_argument("--quick", action="store_true", help="fewer chunks and rounds")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    options = parser.parse_args(argv)
    quick = options.quick
    if "length" in options.only:
        length_section(quick)
    if "ratio" in options.only:
        ratio_section(rounds=3 if quick else 5, chunks=1500 if quick else 5000)
    if "streamed" in options.only:
        streamed_section(rounds=3 if quick else 5, chunks=1500 if quick else 5000)
    if "paste" in options.only:
        paste_section(rounds=1 if quick else 3, sizes=(1_000, 10_000))
    if "typing" in options.only:
        typing_section(rounds=1 if quick else 3, chunks=1500 if quick else 5000)


if __name__ == "__main__":
    main()
