"""
Replaying a trace against a new agent process: the ``->`` lines of its first peer are
sent in order, each once the responses and requests the trace shows before it have come
back (``python -m acpkit.trace replay``).
"""

from __future__ import annotations

import json
import operator
import os
import sys
from collections.abc import Callable, Sequence
from functools import partial
from typing import IO, Any

import attr
from twisted.internet.defer import Deferred
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure

from acpkit.framing import NDJSONProtocol
from acpkit.jsonrpc.jsonbytes import loads
from acpkit.trace.recording import RECEIVED, SENT, clean_name, format_record, now
from acpkit.trace.records import TraceRecord

__all__ = ["replay"]

_log = Logger(namespace="acpkit.trace")


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
        self.name = clean_name(name)
        self.out = out
        self.changed = changed
        self.responses: set[str] = set()
        self.requests: set[str] = set()
        self.lost: Failure | None = None

    def emit(self, direction: str, line: bytes) -> None:
        """Print one line in trace format."""
        record = format_record(now(), direction, self.name, line)
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
    from acpkit.io import spawn_agent

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
