"""
ACP traffic traces: print a trace file readably, or replay it against an agent command.

Usage::

    python -m acpkit.trace print FILE
    python -m acpkit.trace replay [--timeout S] FILE -- CMD ARGS...
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import IO, Any

from twisted.internet.defer import Deferred, ensureDeferred

from acpkit.trace.records import MalformedTraceLine, TraceRecord, pretty_record, read_trace
from acpkit.trace.replay import replay

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m acpkit.trace", description=__doc__.split("\n")[1]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    printer = commands.add_parser("print", help="print a trace file readably")
    printer.add_argument("file")
    replayer = commands.add_parser("replay", help="replay a trace against an agent command")
    replayer.add_argument("--timeout", type=float, default=30.0, help="seconds to wait per reply")
    replayer.add_argument("file")
    replayer.add_argument("agent", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    return parser


def _print(path: str, out: IO[str], err: IO[str]) -> int:
    problems = 0

    def report(error: MalformedTraceLine) -> None:
        nonlocal problems
        problems += 1
        err.write(f"malformed trace line {error}\n")

    for record in read_trace(path, on_error=report):
        out.write(pretty_record(record))
    return 1 if problems else 0


def _run_replay(records: list[TraceRecord], agent: list[str], timeout: float) -> int:
    from twisted.internet.task import react
    from twisted.logger import globalLogBeginner, textFileLogObserver

    globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stderr)], redirectStandardIO=False)
    statuses: list[int] = []

    def run(reactor: Any) -> Deferred[None]:
        d = ensureDeferred(replay(reactor, records, agent[0], agent[1:], timeout=timeout))
        return d.addCallback(statuses.append)

    try:
        react(run)
    except SystemExit:
        pass
    return statuses[0] if statuses else 1


def main(argv: Sequence[str] | None = None, out: IO[str] | None = None) -> int:
    """The ``python -m acpkit.trace`` command; returns the exit status."""
    output = out if out is not None else sys.stdout
    options = _parser().parse_args(list(argv) if argv is not None else None)
    try:
        if options.command == "print":
            return _print(options.file, output, sys.stderr)
        agent = list(options.agent)
        if agent and agent[0] == "--":
            agent = agent[1:]
        if not agent:
            sys.stderr.write("replay: give the agent command after --\n")
            return 2
        records = list(read_trace(options.file))
    except (OSError, MalformedTraceLine) as e:
        sys.stderr.write(f"{e}\n")
        return 1
    return _run_replay(records, agent, options.timeout)
