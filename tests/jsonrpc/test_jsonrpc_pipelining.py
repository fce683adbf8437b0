"""
Peers that write many requests before reading any answer (issue 13): write pressure
must never stop us reading, or two such peers deadlock.

The unit tests run the protocol over a simulated pipe: each side has Twisted's
unbounded user-space write buffer (which pauses its producer above a high-water mark
and resumes it once drained) in front of a small kernel buffer that the other side
drains only while it is reading.  The end-to-end test pipes 100,000 requests into a
real ``twistd -n acp-agent`` that is not read until they are all written.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from typing import Any, cast

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer, ITransport
from twisted.python.failure import Failure

from acpkit.errors import InternalError
from acpkit.jsonrpc import DEFAULT_MAX_BUFFERED_OUTPUT, JSONRPCProtocol, MethodRegistry

#: Bytes the simulated kernel buffer of each direction holds (a Linux pipe holds 64 KiB).
PIPE_CAPACITY = 4096
#: Above this many buffered bytes the simulated transport pauses its producer.
HIGH_WATER = 8192
#: How many bytes a reader takes from the pipe per read.
READ_SIZE = 1024


class SimTransport:
    """
    The transport of one side: what it writes is buffered without bound (as Twisted's
    ``FileDescriptor``) and its producer is paused above :data:`HIGH_WATER` bytes and
    resumed once the buffer is empty; ``pauseProducing`` stops the side's reading.
    """

    disconnecting = False

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.producer: IPushProducer | None = None
        self.producer_paused = False
        self.reading = True
        self.most_buffered = 0

    def registerProducer(self, producer: IPushProducer, streaming: bool) -> None:
        self.producer = producer

    def unregisterProducer(self) -> None:
        self.producer = None

    def write(self, data: bytes) -> None:
        self.buffer += data
        self.most_buffered = max(self.most_buffered, len(self.buffer))
        if len(self.buffer) > HIGH_WATER and self.producer and not self.producer_paused:
            self.producer_paused = True
            self.producer.pauseProducing()

    def writeSequence(self, data: list[bytes]) -> None:
        self.write(b"".join(data))

    def pauseProducing(self) -> None:
        self.reading = False

    def resumeProducing(self) -> None:
        self.reading = True

    def stopProducing(self) -> None:
        self.reading = False

    def loseConnection(self) -> None:
        self.disconnecting = True

    def drain_into(self, pipe: bytearray) -> bool:
        """Move buffered bytes into the kernel pipe as far as it has room."""
        room = PIPE_CAPACITY - len(pipe)
        if room <= 0 or not self.buffer:
            return False
        pipe += self.buffer[:room]
        del self.buffer[:room]
        if not self.buffer and self.producer_paused and self.producer is not None:
            self.producer_paused = False
            self.producer.resumeProducing()
        return True


def _as_transport(sim: SimTransport) -> ITransport:
    """A SimTransport has what the engine uses of a transport (writes, producers), not
    the rest of ITransport (addresses, loseConnection), which these tests never call."""
    return cast(ITransport, sim)


def read_from(pipe: bytearray, proto: JSONRPCProtocol, transport: SimTransport) -> bool:
    """Deliver one read from ``pipe`` to ``proto`` if it is reading."""
    if not pipe or not transport.reading:
        return False
    data = bytes(pipe[:READ_SIZE])
    del pipe[:READ_SIZE]
    proto.dataReceived(data)
    return True


def echo_registry() -> MethodRegistry:
    registry = MethodRegistry()
    registry.add_request("echo", lambda r: r.params)
    return registry


def requests(count: int, method: str = "echo") -> bytes:
    return b"".join(
        json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": {"n": i}}).encode()
        + b"\n"
        for i in range(count)
    )


def answers_by_id(data: bytes) -> dict[int, list[dict[str, Any]]]:
    found: dict[int, list[dict[str, Any]]] = {}
    for raw in data.split(b"\n"):
        if raw:
            message = json.loads(raw)
            found.setdefault(message["id"], []).append(message)
    return found


def run_raw_writer(proto: JSONRPCProtocol, data: bytes, expected: int) -> bytes:
    """
    A peer that writes all of ``data`` before it reads anything, then reads until it
    has ``expected`` lines.  Fails (instead of hanging) if nothing can move any more.
    """
    transport = SimTransport()
    proto.makeConnection(_as_transport(transport))
    to_agent, from_agent = bytearray(), bytearray()
    unsent = bytearray(data)
    received = bytearray()
    while received.count(b"\n") < expected:
        moved = False
        if unsent:  # the raw peer writes while it can, and reads nothing until done
            room = PIPE_CAPACITY - len(to_agent)
            if room > 0:
                to_agent += unsent[:room]
                del unsent[:room]
                moved = True
        elif from_agent:
            received += from_agent
            from_agent.clear()
            moved = True
        moved = read_from(to_agent, proto, transport) or moved
        moved = transport.drain_into(from_agent) or moved
        if not moved:
            answered = received.count(b"\n")
            raise AssertionError(
                f"deadlock: {len(unsent)} bytes unsent, {answered} of {expected} answers "
                f"read, reading={transport.reading}"
            )
    return bytes(received)


def test_a_peer_writing_all_requests_before_reading_gets_every_answer() -> None:
    """
    10,000 pipelined requests from a peer that reads only once it has written them
    all: every one is answered exactly once, and the transport's buffer holds no more
    than the answers the peer has not read yet (under ``max_buffered_output``).
    """
    proto = JSONRPCProtocol(echo_registry(), name="agent")
    received = run_raw_writer(proto, requests(10_000), 10_000)
    answers = answers_by_id(received)
    assert sorted(answers) == list(range(10_000))
    assert all(len(a) == 1 and a[0]["result"] == {"n": i} for i, a in answers.items())
    assert isinstance(proto.transport, SimTransport)
    assert proto.transport.most_buffered < DEFAULT_MAX_BUFFERED_OUTPUT


def test_beyond_the_output_budget_requests_queue_then_get_the_overload_error() -> None:
    """
    While the peer is not reading, once ``max_buffered_output`` bytes were written no
    new handler starts: requests wait in the queue (answered once the peer reads) and,
    the queue full, get -32603 "too many concurrent requests" at once.  Every request
    is answered exactly once, and the buffered output stays bounded.
    """
    proto = JSONRPCProtocol(
        echo_registry(), name="agent", max_buffered_output=2000, max_queued_requests=10
    )
    received = run_raw_writer(proto, requests(3000), 3000)
    answers = answers_by_id(received)
    assert sorted(answers) == list(range(3000))
    assert all(len(a) == 1 for a in answers.values())
    overloaded = [i for i, (a,) in answers.items() if "error" in a]
    assert overloaded, "the budget was never reached"
    for i, (a,) in answers.items():
        if "error" in a:
            assert a["error"] == InternalError("too many concurrent requests").to_json()
        else:
            assert a["result"] == {"n": i}
    # What is written while the peer does not read: the budget, then one small error per
    # further request (never a handler's output).
    longest_error = max(len(json.dumps(a[0])) for a in answers.values() if "error" in a[0])
    bound = HIGH_WATER + 2000 + 200 + (len(overloaded) + 10) * (longest_error + 1)
    assert isinstance(proto.transport, SimTransport)
    assert proto.transport.most_buffered <= bound


def test_two_peers_that_both_write_before_reading_do_not_deadlock() -> None:
    """
    Two JSONRPCProtocols each send 5,000 requests before either reads: both keep reading
    while their own output is paused, so every request on both sides gets its answer.
    """
    a = JSONRPCProtocol(echo_registry(), name="a")
    b = JSONRPCProtocol(echo_registry(), name="b")
    ta, tb = SimTransport(), SimTransport()
    a.makeConnection(_as_transport(ta))
    b.makeConnection(_as_transport(tb))
    results: list[object] = []
    for i in range(5000):
        a.request("echo", {"from": "a", "n": i}).addBoth(results.append)
        b.request("echo", {"from": "b", "n": i}).addBoth(results.append)
    assert ta.producer_paused and tb.producer_paused
    a_to_b, b_to_a = bytearray(), bytearray()
    while len(results) < 10_000:
        moved = ta.drain_into(a_to_b)
        moved = tb.drain_into(b_to_a) or moved
        moved = read_from(a_to_b, b, tb) or moved
        moved = read_from(b_to_a, a, ta) or moved
        if not moved:
            raise AssertionError(f"deadlock with {len(results)} of 10000 answers")
    assert not [r for r in results if isinstance(r, Failure)]
    assert sorted((r["from"], r["n"]) for r in results) == sorted(  # type: ignore[index]
        (side, n) for side in "ab" for n in range(5000)
    )


def test_writable_still_waits_for_the_peer_to_read() -> None:
    """writable() keeps its meaning: it waits while the transport has us paused."""
    proto = JSONRPCProtocol(echo_registry(), name="agent")
    transport = SimTransport()
    proto.makeConnection(_as_transport(transport))
    proto.notify("big", {"x": "y" * (HIGH_WATER + 1)})
    waiting: Deferred[None] = proto.writable()
    assert not waiting.called and transport.reading
    pipe = bytearray()
    while transport.buffer:
        transport.drain_into(pipe)
        pipe.clear()
    assert waiting.called


# -- end to end ----------------------------------------------------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TWISTD = ["-c", "from twisted.scripts.twistd import run; run()", "-n", "acp-agent"]
PIPELINED = 100_000


@pytest.mark.process
def test_bob_answers_100000_requests_from_a_client_that_reads_only_at_the_end() -> None:
    """
    A raw client writes ``initialize`` then 100,000 requests (every tenth an
    ``initialize``, the rest an unknown method) to a real bob over pipes without reading,
    then reads: bob never stops reading, and every request is answered exactly once (a
    result or -32601; the documented -32603 overload error is allowed too).
    """
    cwd, home = tempfile.mkdtemp(prefix="bob-"), tempfile.mkdtemp(prefix="bob-home-")
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": 1, "clientCapabilities": {}},
    }
    lines = [json.dumps(init)]
    for i in range(1, PIPELINED + 1):
        if i % 10 == 0:
            lines.append(json.dumps({**init, "id": i}))
        else:
            lines.append(json.dumps({"jsonrpc": "2.0", "id": i, "method": "x/nope", "params": {}}))
    data = ("\n".join(lines) + "\n").encode()
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(
            [sys.executable, *TWISTD],
            cwd=cwd,
            env={**os.environ, "PYTHONPATH": ROOT, "HOME": home},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
        try:
            assert proc.stdin is not None and proc.stdout is not None
            deadline = time.monotonic() + 240
            stdin, stdout = proc.stdin.fileno(), proc.stdout.fileno()
            os.set_blocking(stdin, False)
            sent = 0
            while sent < len(data):  # write everything, reading nothing
                assert time.monotonic() < deadline, f"bob stopped reading at byte {sent}"
                if select.select([], [stdin], [], 1)[1]:
                    try:
                        sent += os.write(stdin, data[sent : sent + 65536])
                    except BlockingIOError:
                        pass
            # stdin stays open while reading: bob exits STDIN_EOF_GRACE seconds after
            # its end, whatever it still has to write.
            received = bytearray()
            while received.count(b"\n") < PIPELINED + 1:
                assert time.monotonic() < deadline, "bob did not answer everything"
                if select.select([stdout], [], [], 1)[0]:
                    chunk = os.read(stdout, 1 << 20)
                    if not chunk:
                        break
                    received += chunk
        finally:
            proc.kill()
            proc.wait(30)
            proc.stdin.close()  # type: ignore[union-attr]
            proc.stdout.close()  # type: ignore[union-attr]
    answers = answers_by_id(bytes(received))
    assert sorted(answers) == list(range(PIPELINED + 1))
    for i, found in answers.items():
        assert len(found) == 1, f"request {i} answered {len(found)} times"
        (answer,) = found
        if i % 10 == 0:
            assert "result" in answer or answer["error"]["code"] == -32603, answer
        else:
            assert answer["error"]["code"] in (-32601, -32603), answer
