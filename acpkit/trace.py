"""
ACP traffic traces: record every line in both directions, read, print and replay them.

Set ``ACPKIT_TRACE=<file>`` and every connection that has a tracer (agents spawned
with :func:`acpkit.endpoints.spawn_agent`, protocols served with
:func:`acpkit.endpoints.serve_stdio`) appends one record per line::

    2026-11-29T19:45:01.123456Z -> bob {"jsonrpc":"2.0","id":0,"method":"initialize",...}
    2026-11-29T19:45:01.125002Z <- bob {"jsonrpc":"2.0","id":0,"result":{...}}

``->`` is a line we sent, ``<-`` a line we received, then the peer's name and the line
exactly as it was on the wire.  Tracing never breaks a connection: a file that cannot
be opened or written means no trace and one warning in the log.

Command line::

    python -m acpkit.trace print FILE
    python -m acpkit.trace replay [--timeout S] FILE -- CMD ARGS...
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import IO, Any

import attr
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure

from acpkit.framing import NDJSONProtocol
from acpkit.jsonbytes import NestingTooDeep, loads

__all__ = [
    "TRACE_VARIABLE",
    "MalformedTraceLine",
    "TraceFile",
    "TraceRecord",
    "Tracer",
    "format_record",
    "main",
    "open_trace_file",
    "read_trace",
    "replay",
    "tracer_from_environment",
]

_log = Logger(namespace="acpkit.trace")

#: The environment variable naming the trace file.
TRACE_VARIABLE = "ACPKIT_TRACE"

SENT = "->"
RECEIVED = "<-"
_TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def _now() -> datetime:
    return datetime.now(UTC)


def format_timestamp(when: datetime) -> str:
    """``when`` as the trace writes it: UTC ISO-8601 with microseconds and ``Z``."""
    return when.astimezone(UTC).strftime(_TIMESTAMP_FORMAT)


def format_record(when: datetime, direction: str, name: str, line: bytes) -> bytes:
    """One trace record, newline included."""
    head = f"{format_timestamp(when)} {direction} {name} ".encode()
    return head + line + b"\n"


def _clean_name(name: str) -> str:
    """A peer name usable as one field of a record (no whitespace)."""
    cleaned = "_".join(name.split())
    return cleaned or "_"


# -- writing ---------------------------------------------------------------------------


class TraceFile:
    """
    One trace file, opened once (append mode) and shared by every tracer using its path.

    Each record is one ``write()`` call on an unbuffered descriptor opened with
    ``O_APPEND``, so records from several connections (or processes) never interleave
    within a line.  A failed write closes the file and logs one warning.
    """

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @property
    def broken(self) -> bool:
        """True once a write failed (nothing more is written)."""
        return self._fd is None

    def append(self, record: bytes) -> None:
        """Append one record; never raises."""
        fd = self._fd
        if fd is None:
            return
        try:
            view = memoryview(record)
            while view:
                written = os.write(fd, view)
                view = view[written:]
        except OSError as e:
            self._fd = None
            _log.warn(
                "cannot write trace file {path}: {error}; tracing stops", path=self.path, error=e
            )
            try:
                os.close(fd)
            except OSError:
                pass

    def close(self) -> None:
        """Close the file (used by tests; tracers sharing it stop writing)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


_open_files: dict[str, TraceFile] = {}
_failed_paths: set[str] = set()


def open_trace_file(path: str) -> TraceFile | None:
    """
    The shared :class:`TraceFile` for ``path`` (opened on first use), or ``None`` when it
    cannot be opened (one warning per path is logged).
    """
    key = os.path.abspath(os.path.expanduser(path))
    existing = _open_files.get(key)
    if existing is not None and not existing.broken:
        return existing
    if key in _failed_paths:
        return None
    try:
        fd = os.open(key, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as e:
        _failed_paths.add(key)
        _log.warn("cannot open trace file {path}: {error}; not tracing", path=key, error=e)
        return None
    trace_file = TraceFile(key, fd)
    _open_files[key] = trace_file
    return trace_file


class Tracer:
    """Records the lines of one connection with the peer's name (a ``framing.LineTracer``)."""

    def __init__(
        self, name: str, trace_file: TraceFile, clock: Callable[[], datetime] = _now
    ) -> None:
        self.name = _clean_name(name)
        self.file = trace_file
        self._clock = clock

    def received(self, line: bytes) -> None:
        """Record a line read from the peer."""
        self.file.append(format_record(self._clock(), RECEIVED, self.name, line))

    def sent(self, line: bytes) -> None:
        """Record a line written to the peer."""
        self.file.append(format_record(self._clock(), SENT, self.name, line))


def tracer_from_environment(name: str, environ: Mapping[str, str] | None = None) -> Tracer | None:
    """
    A :class:`Tracer` for peer ``name`` if ``ACPKIT_TRACE`` names a usable file.

    ``environ`` defaults to ``os.environ`` as it is at the time of the call.
    """
    path = (os.environ if environ is None else environ).get(TRACE_VARIABLE)
    if not path:
        return None
    trace_file = open_trace_file(path)
    if trace_file is None:
        return None
    return Tracer(name, trace_file)


# -- reading ---------------------------------------------------------------------------


class MalformedTraceLine(ValueError):
    """A line of a trace file is not a record; ``line_number`` counts from 1."""

    def __init__(self, path: str, line_number: int, reason: str) -> None:
        super().__init__(f"{path}:{line_number}: {reason}")
        self.path = path
        self.line_number = line_number
        self.reason = reason


_NOT_JSON = object()


@attr.s(frozen=True, auto_attribs=True, kw_only=True)
class TraceRecord:
    """One record: when, which direction (``"->"`` sent / ``"<-"`` received), peer, line."""

    timestamp: datetime
    direction: str
    name: str
    message: bytes
    line_number: int

    @property
    def sent(self) -> bool:
        """True for a line we sent."""
        return self.direction == SENT

    def json(self) -> Any:
        """The message parsed as JSON (raises ``ValueError`` if it is not JSON, or is
        nested deeper than :data:`acpkit.jsonbytes.MAX_NESTING_DEPTH`)."""
        return loads(self.message)

    def to_bytes(self) -> bytes:
        """The record as it appears in a trace file."""
        return format_record(self.timestamp, self.direction, self.name, self.message)


def parse_record(raw: bytes, path: str = "<trace>", line_number: int = 1) -> TraceRecord:
    """Parse one trace line (without its newline); raises :class:`MalformedTraceLine`."""
    parts = raw.split(b" ", 3)
    if len(parts) != 4:
        raise MalformedTraceLine(path, line_number, "expected 'TIMESTAMP DIRECTION NAME MESSAGE'")
    stamp, direction, name, message = parts
    try:
        timestamp = datetime.strptime(stamp.decode("ascii"), _TIMESTAMP_FORMAT).replace(tzinfo=UTC)
    except (UnicodeDecodeError, ValueError):
        raise MalformedTraceLine(path, line_number, f"bad timestamp {stamp[:40]!r}") from None
    if direction not in (b"->", b"<-"):
        raise MalformedTraceLine(path, line_number, f"bad direction {direction[:10]!r}")
    try:
        peer = name.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedTraceLine(path, line_number, "peer name is not UTF-8") from None
    return TraceRecord(
        timestamp=timestamp,
        direction=direction.decode("ascii"),
        name=peer,
        message=message,
        line_number=line_number,
    )


def read_trace(
    path: str, on_error: Callable[[MalformedTraceLine], None] | None = None
) -> Iterator[TraceRecord]:
    """
    The records of a trace file, in order.

    A malformed line raises :class:`MalformedTraceLine` (with its line number), unless
    ``on_error`` is given: then it is called with that exception and reading goes on.
    """
    with open(path, "rb") as f:
        for line_number, raw in enumerate(f, 1):
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            try:
                yield parse_record(raw, path, line_number)
            except MalformedTraceLine as e:
                if on_error is None:
                    raise
                on_error(e)


# -- printing --------------------------------------------------------------------------


def _describe(message: Any) -> str:
    """A short summary of a JSON-RPC message: kind, id, method."""
    if not isinstance(message, dict):
        return "not a JSON-RPC object"
    has_id = "id" in message
    if "method" in message:
        method = message["method"]
        if has_id:
            return f"request {json.dumps(message['id'])} {method}"
        return f"notification {method}"
    if has_id:
        kind = "error" if "error" in message else "response"
        return f"{kind} {json.dumps(message['id'])}"
    return "not a JSON-RPC message"


def pretty_record(record: TraceRecord) -> str:
    """A record as several readable lines: a header, then the message indented."""
    try:
        message = record.json()
    except ValueError as e:
        body = "    " + record.message.decode("utf-8", "replace")
        summary = f"not JSON: {e}" if isinstance(e, NestingTooDeep) else "not JSON"
    else:
        body = "\n".join(
            "    " + line for line in json.dumps(message, indent=2, ensure_ascii=False).splitlines()
        )
        summary = _describe(message)
    header = f"{format_timestamp(record.timestamp)} {record.direction} {record.name}  {summary}"
    return f"{header}\n{body}\n"


# -- replaying -------------------------------------------------------------------------


def _id_key(value: Any) -> str:
    """A JSON-RPC id as a key that keeps ``1`` and ``"1"`` apart."""
    return json.dumps(value, sort_keys=True)


@attr.s(frozen=True, auto_attribs=True)
class _Step:
    """One line to send, and what must have come back before sending it."""

    line: bytes
    responses_before: frozenset[str]  # ids of our requests answered earlier in the trace
    answers_request: str | None  # the agent's request id this line answers, if any


def _plan(records: Sequence[TraceRecord]) -> tuple[str | None, list[_Step], frozenset[str]]:
    """
    From a trace: the first peer's name, the ``->`` lines to send to it with their
    preconditions, and the ids of all our requests whose responses the trace holds.
    """
    if not records:
        return None, [], frozenset()
    peer = records[0].name
    our_requests: set[str] = set()
    answered: set[str] = set()
    steps: list[_Step] = []
    for record in records:
        if record.name != peer:
            continue
        try:
            message = record.json()
        except ValueError:
            message = None
        is_dict = isinstance(message, dict)
        if record.sent:
            answers = None
            if is_dict and "id" in message:
                if "method" in message:
                    our_requests.add(_id_key(message["id"]))
                else:
                    answers = _id_key(message["id"])
            steps.append(_Step(record.message, frozenset(answered), answers))
        elif is_dict and "id" in message and "method" not in message:
            key = _id_key(message["id"])
            if key in our_requests:
                answered.add(key)
    return peer, steps, frozenset(answered)


class _ReplayProtocol(NDJSONProtocol):
    """Collects what the agent sends and prints it in trace format."""

    def __init__(self, name: str, out: IO[str], changed: Callable[[], None]) -> None:
        super().__init__()
        self.name = _clean_name(name)
        self.out = out
        self.changed = changed
        self.responses: set[str] = set()
        self.requests: set[str] = set()
        self.lost: Failure | None = None

    def emit(self, direction: str, line: bytes) -> None:
        """Print one line in trace format."""
        record = format_record(_now(), direction, self.name, line)
        self.out.write(record.decode("utf-8", "replace"))
        self.out.flush()

    def send(self, line: bytes) -> None:
        """Send a line to the agent and print it."""
        self.emit(SENT, line)
        self.sendLine(line)

    def lineReceived(self, line: bytes) -> None:
        """Print the agent's line and note responses and requests by id."""
        self.emit(RECEIVED, line)
        try:
            message = loads(line)
        except ValueError:  # not JSON, or nested too deep
            return
        if isinstance(message, dict) and "id" in message:
            key = _id_key(message["id"])
            (self.requests if "method" in message else self.responses).add(key)
            self.changed()

    def inputEnded(self) -> None:
        """The agent closed its stdout: wait for the process to end."""

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        """The agent is gone: stop waiting."""
        super().connectionLost(reason)
        self.lost = reason
        self.changed()


async def replay(
    reactor: Any,
    records: Sequence[TraceRecord],
    command: str,
    args: Sequence[str] = (),
    *,
    out: IO[str] | None = None,
    timeout: float = 30.0,
    name: str | None = None,
) -> int:
    """
    Replay a trace against a new agent process; returns an exit status (0 = complete).

    The ``->`` lines of the trace's first peer are sent in order.  Before each one,
    every response to our requests that the trace shows earlier must have come back
    (matched by id), and a line answering an agent request waits for that request.
    Everything sent and received is printed to ``out`` in trace format.  At the end
    the remaining recorded responses are awaited, then the agent is stopped.
    """
    from acpkit.endpoints import spawn_agent

    output = out if out is not None else sys.stdout
    peer, steps, all_answered = _plan(records)
    agent_name = name or peer or os.path.basename(command)
    waiters: list[tuple[Callable[[], bool], Deferred[bool]]] = []

    def changed() -> None:
        for entry in list(waiters):
            condition, d = entry
            if condition() or protocol.lost is not None:
                waiters.remove(entry)
                d.callback(condition())

    protocol = _ReplayProtocol(agent_name, output, changed)
    protocol.tracer = None
    try:
        agent = spawn_agent(reactor, protocol, command, args, name=agent_name)
    except OSError as e:
        _log.error("cannot start the agent: {error}", error=e)
        return 1

    async def wait_for(condition: Callable[[], bool], what: str) -> bool:
        if condition():
            return True
        if protocol.lost is not None:
            _log.error("agent ended while waiting for {what}", what=what)
            return False
        d: Deferred[bool] = Deferred()
        entry = (condition, d)
        waiters.append(entry)

        def expire() -> None:
            if entry in waiters:
                waiters.remove(entry)
                d.callback(False)

        call = reactor.callLater(timeout, expire)
        ok = await d
        if call.active():
            call.cancel()
        if not ok:
            if protocol.lost is not None:
                _log.error("agent ended while waiting for {what}", what=what)
            else:
                _log.error(
                    "timed out after {timeout}s waiting for {what}", timeout=timeout, what=what
                )
        return ok

    status = 0
    for step in steps:
        needed = step.responses_before
        if not await wait_for(
            partial(operator.le, needed, protocol.responses),
            f"responses {sorted(needed - protocol.responses)}",
        ):
            status = 1
            break
        answers = step.answers_request
        if answers is not None and not await wait_for(
            partial(operator.contains, protocol.requests, answers),
            f"the agent's request {answers}",
        ):
            status = 1
            break
        if protocol.lost is not None:
            status = 1
            break
        protocol.send(step.line)
    if status == 0 and not await wait_for(
        partial(operator.le, all_answered, protocol.responses),
        f"responses {sorted(all_answered - protocol.responses)}",
    ):
        status = 1
    exited = await agent.stop(grace=2.0)
    if status != 0 and exited.stderr_tail:
        _log.error("{exited}", exited=exited)
    return status


# -- command line ----------------------------------------------------------------------


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


if __name__ == "__main__":
    sys.exit(main())
