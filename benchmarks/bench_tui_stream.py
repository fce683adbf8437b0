"""Streaming benchmark: the cost of one chunk appended to a long agent message, in the TUI.

Run from the repository root::

    python -m benchmarks.bench_tui_stream [--quick]

For an agent message that already holds 100, 10,000 and 100,000 lines, it streams more
chunks into it (three chunks per line) and times what the terminal UI does for each: the
``session/update`` folded into the conversation, then the conversation pane drawn
(80 by 24, following the end).  Two kinds of message are measured: a fenced Python code
block (coloured by Pygments) and plain prose.  It prints the mean milliseconds per chunk
and the ratio of the 100,000-line cost to the 100-line cost, measured in the same run:
a ratio near 1 means a chunk costs the same whatever the entry's length.

The number of chunks timed per case adapts to a time budget (at least one chunk), so the
benchmark stays short even where a chunk is slow.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator

from acpkit import schema
from acpkit_client.conversation import Conversation
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


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print a table."""
    parser = argparse.ArgumentParser(description="acpkit TUI streaming benchmark")
    parser.add_argument("--quick", action="store_true", help="fewer chunks per case")
    options = parser.parse_args(argv)
    chunks = 150 if options.quick else 600
    budget = 2.0 if options.quick else 6.0
    print(f"{'message':<8} {'lines':>8} {'chunks':>7} {'ms/chunk':>9}")
    for kind in ("code", "prose"):
        costs = {}
        for length in LENGTHS:
            cost, done = per_chunk(kind, length, chunks, budget)
            costs[length] = cost
            print(f"{kind:<8} {length:>8,} {done:>7} {cost * 1000:>9.3f}")
        ratio = costs[LENGTHS[-1]] / costs[LENGTHS[0]]
        print(f"{kind:<8} ratio {LENGTHS[-1]:,} lines / {LENGTHS[0]} lines: {ratio:.2f}x")


if __name__ == "__main__":
    main()
