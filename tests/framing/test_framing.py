"""Tests for acpkit.framing: the linear-time NDJSON LineReceiver with half-close."""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import defer, reactor
from twisted.internet.interfaces import IHalfCloseableProtocol
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase

from acpkit.framing import DEFAULT_MAX_LENGTH, OVERSIZED_HEAD, NDJSONProtocol
from tests.helpers import connected

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "agent_fixture.py")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Collector(NDJSONProtocol):
    """Records every callback, and optionally pauses after a given line."""

    def __init__(self, max_length: int | None = None) -> None:
        super().__init__()
        if max_length is not None:
            self.MAX_LENGTH = max_length
        self.lines: list[bytes] = []
        self.exceeded: list[bytes] = []
        self.ended = 0
        self.pause_after: bytes | None = None
        self.peak_buffer = 0

    def lineReceived(self, line: bytes) -> None:
        self.lines.append(line)
        if line == self.pause_after:
            self.pauseProducing()

    def lineLengthExceeded(self, line: bytes) -> None:
        self.exceeded.append(line)

    def inputEnded(self) -> None:
        self.ended += 1
        super().inputEnded()

    def dataReceived(self, data: bytes) -> None:
        super().dataReceived(data)
        self.peak_buffer = max(self.peak_buffer, self.pendingBytes)


def feed_in_chunks(proto: NDJSONProtocol, data: bytes, cuts: list[int]) -> None:
    """Feed ``data`` split at the (sorted, deduplicated) positions ``cuts``."""
    positions = sorted({c for c in cuts if 0 < c < len(data)})
    start = 0
    for position in [*positions, len(data)]:
        proto.dataReceived(data[start:position])
        start = position


# Line contents: any bytes but \n, including multibyte UTF-8, U+2028/U+2029 and \r in the
# middle; a content never ends with \r (one trailing \r is framing, by definition).
line_content = st.one_of(
    st.binary(max_size=40),
    st.text(
        alphabet=st.sampled_from(["a", "é", "€", "𝄞", "\u2028", "\u2029", "\r", " ", "{", '"'])
        | st.characters(),
        max_size=30,
    ).map(lambda t: t.encode("utf-8", "surrogatepass")),
).map(lambda b: b.replace(b"\n", b"").rstrip(b"\r"))


@st.composite
def framed_streams(draw: st.DrawFn) -> tuple[list[bytes], bytes, list[int]]:
    """Some lines, their encoding with LF or CRLF endings (last maybe unterminated), cuts."""
    lines = draw(st.lists(line_content, max_size=12))
    parts = []
    for line in lines:
        parts.append(line + draw(st.sampled_from([b"\n", b"\r\n"])))
    data = b"".join(parts)
    if lines and lines[-1] and draw(st.booleans()):
        data = data[: -(2 if data.endswith(b"\r\n") else 1)]
    cuts = draw(st.lists(st.integers(0, max(len(data), 1)), max_size=20))
    return lines, data, cuts


@given(framed_streams())
def test_any_chunking_yields_the_same_lines(stream: tuple[list[bytes], bytes, list[int]]) -> None:
    """However a stream of LF/CRLF lines (UTF-8 split anywhere) is cut, the same lines come out."""
    lines, data, cuts = stream
    proto = Collector()
    connected(proto)
    feed_in_chunks(proto, data, cuts)
    proto.readConnectionLost()
    assert proto.lines == lines
    assert proto.exceeded == []


@given(framed_streams(), st.integers(1, 64))
def test_oversized_lines_never_break_the_stream(
    stream: tuple[list[bytes], bytes, list[int]], max_length: int
) -> None:
    """Any MAX_LENGTH: short lines come out in order, long ones are reported, buffer bounded."""
    lines, data, cuts = stream
    proto = Collector(max_length)
    connected(proto)
    feed_in_chunks(proto, data, cuts)
    proto.readConnectionLost()
    assert proto.lines == [line for line in lines if len(line) <= max_length]
    too_long = [line for line in lines if len(line) > max_length]
    assert len(proto.exceeded) == len(too_long)
    for head, line in zip(proto.exceeded, too_long, strict=True):
        assert line.startswith(head)
    assert proto.peak_buffer <= max_length + 1


class PausingCollector(Collector):
    """Pauses itself after delivering the n-th line, for each n in ``pause_at``."""

    def __init__(self, pause_at: set[int]) -> None:
        super().__init__()
        self.pause_at = pause_at

    def lineReceived(self, line: bytes) -> None:
        super().lineReceived(line)
        if len(self.lines) in self.pause_at:
            self.pauseProducing()


@given(framed_streams(), st.sets(st.integers(1, 12)), st.booleans())
def test_pauses_never_lose_or_reorder_lines(
    stream: tuple[list[bytes], bytes, list[int]], pause_at: set[int], stay_paused: bool
) -> None:
    """
    Pausing after any lines, resuming after any read, even ending the input while
    paused: the same lines come out in order, then inputEnded exactly once.
    """
    lines, data, cuts = stream
    proto = PausingCollector(pause_at)
    connected(proto)
    positions = sorted({c for c in cuts if 0 < c < len(data)})
    start = 0
    for position in [*positions, len(data)]:
        proto.dataReceived(data[start:position])
        start = position
        if proto.paused and not stay_paused:
            proto.resumeProducing()
    proto.readConnectionLost()
    if proto.paused:
        assert proto.ended == 0
    while proto.paused:
        proto.resumeProducing()
    assert proto.lines == lines
    assert proto.ended == 1


def test_input_end_while_paused_waits_for_resume() -> None:
    """EOF while paused: held lines and the last unterminated one come on resume, then the end."""
    proto = Collector()
    transport = connected(proto)
    proto.pause_after = b"1"
    proto.dataReceived(b"1\n2\n3")
    proto.readConnectionLost()
    assert (proto.lines, proto.ended, transport.disconnecting) == ([b"1"], 0, False)
    proto.resumeProducing()
    assert (proto.lines, proto.ended, transport.disconnecting) == ([b"1", b"2", b"3"], 1, True)
    assert transport.producerState == "paused"  # the ended input is not resumed


def test_multibyte_utf8_split_between_reads() -> None:
    """A character split across reads is delivered whole: lines are bytes until complete."""
    proto = Collector()
    connected(proto)
    payload = '{"text":"héllo €𝄞"}'.encode()
    for i in range(len(payload)):
        proto.dataReceived(payload[i : i + 1])
    proto.dataReceived(b"\n")
    assert proto.lines == [payload]
    assert proto.lines[0].decode("utf-8") == '{"text":"héllo €𝄞"}'


def test_crlf_strips_exactly_one_carriage_return() -> None:
    """CRLF endings lose their \\r; only one trailing \\r is stripped; inner \\r stays."""
    proto = Collector()
    connected(proto)
    proto.dataReceived(b"a\r\nb\r\r\nc\rd\n\r\n")
    assert proto.lines == [b"a", b"b\r", b"c\rd", b""]


def test_crlf_split_between_reads() -> None:
    """A \\r at the end of one read and the \\n in the next still form one CRLF."""
    proto = Collector()
    connected(proto)
    proto.dataReceived(b'{"x":1}\r')
    proto.dataReceived(b'\n{"y":2}\r')
    proto.dataReceived(b"\n")
    assert proto.lines == [b'{"x":1}', b'{"y":2}']


def test_unicode_line_separators_do_not_split() -> None:
    """U+2028 and U+2029 are part of a line: only \\n ends it."""
    proto = Collector()
    connected(proto)
    line = '{"t":"a\u2028b\u2029c\x85d"}'.encode()
    proto.dataReceived(line + b"\n")
    assert proto.lines == [line]


def test_last_line_without_newline_delivered_at_eof() -> None:
    """A last line without a newline is delivered on half-close, then inputEnded, once."""
    proto = Collector()
    transport = connected(proto)
    proto.dataReceived(b'{"a":1}\n{"b":2}')
    assert proto.lines == [b'{"a":1}']
    proto.readConnectionLost()
    assert proto.lines == [b'{"a":1}', b'{"b":2}']
    assert proto.ended == 1
    assert transport.disconnecting
    proto.connectionLost(Failure(Exception("gone")))
    assert proto.lines == [b'{"a":1}', b'{"b":2}']


def test_last_line_delivered_on_connection_lost() -> None:
    """Without a half-close, connectionLost still delivers the unterminated last line."""
    proto = Collector()
    connected(proto)
    proto.dataReceived(b'{"b":2}')
    proto.connectionLost(Failure(Exception("gone")))
    assert proto.lines == [b'{"b":2}']


def test_long_line_in_64k_reads() -> None:
    """A 10 MB line fed in 64 KiB reads comes out whole, and the buffer is then empty."""
    proto = Collector()
    connected(proto)
    line = b'{"data":"' + b"A" * (10 * 1024 * 1024) + b'"}'
    data = line + b"\n"
    for i in range(0, len(data), 65536):
        proto.dataReceived(data[i : i + 65536])
    assert proto.lines == [line]
    assert proto.pendingBytes == 0


def test_default_max_length_is_64_mib() -> None:
    """The default limit is 64 MiB, and a subclass or instance can change it."""
    assert NDJSONProtocol.MAX_LENGTH == DEFAULT_MAX_LENGTH == 64 * 1024 * 1024
    assert Collector(10).MAX_LENGTH == 10


def test_oversized_line_recovery_and_memory_bound() -> None:
    """
    An oversized line arriving in small reads is dropped without buffering it past
    MAX_LENGTH + one read; frames before it are dispatched, frames after it too.
    """
    proto = Collector(1000)
    connected(proto)
    proto.dataReceived(b'{"before":1}\n{"x":"')
    big = b"B" * 50_000
    for i in range(0, len(big), 512):
        proto.dataReceived(big[i : i + 512])
        assert proto.pendingBytes <= 1000 + 1
    proto.dataReceived(b'"}\n{"after":2}\n')
    assert proto.lines == [b'{"before":1}', b'{"after":2}']
    assert len(proto.exceeded) == 1
    assert proto.exceeded[0].startswith(b'{"x":"BBB')
    assert len(proto.exceeded[0]) <= OVERSIZED_HEAD


def test_oversized_line_in_one_read() -> None:
    """A complete oversized line inside one read is reported; its neighbours are delivered."""
    proto = Collector(10)
    connected(proto)
    proto.dataReceived(b"short\n" + b"x" * 11 + b"\nok\n")
    assert proto.lines == [b"short", b"ok"]
    assert proto.exceeded == [b"x" * 11]


def test_limit_is_inclusive_and_ignores_the_carriage_return() -> None:
    """A line of exactly MAX_LENGTH bytes passes, also with CRLF; one more byte does not."""
    proto = Collector(5)
    connected(proto)
    proto.dataReceived(b"12345\r")
    proto.dataReceived(b"\n123456\r\n12345\n")
    assert proto.lines == [b"12345", b"12345"]
    assert proto.exceeded == [b"123456"]


def test_oversized_line_at_eof_is_reported_once() -> None:
    """An oversized unterminated line at EOF is reported once and never delivered."""
    proto = Collector(4)
    connected(proto)
    proto.dataReceived(b"ok\n" + b"z" * 20)
    proto.readConnectionLost()
    proto.connectionLost(Failure(Exception("gone")))
    assert proto.lines == [b"ok"]
    assert len(proto.exceeded) == 1


def test_default_line_length_exceeded_keeps_the_connection() -> None:
    """The default lineLengthExceeded logs but does not drop the connection."""

    class Plain(NDJSONProtocol):
        MAX_LENGTH = 3

        def __init__(self) -> None:
            super().__init__()
            self.lines: list[bytes] = []

        def lineReceived(self, line: bytes) -> None:
            self.lines.append(line)

    proto = Plain()
    transport = connected(proto)
    proto.dataReceived(b"toolong\nabc\n")
    assert proto.lines == [b"abc"]
    assert not transport.disconnecting


def test_pause_and_resume_keep_every_line_in_order() -> None:
    """
    Pausing inside lineReceived stops delivery (the transport is paused too); lines that
    were already buffered or arrive while paused come out, in order, on resume.
    """
    proto = Collector()
    transport = connected(proto)
    proto.pause_after = b"2"
    proto.dataReceived(b"1\n2\n3\n4")
    assert proto.lines == [b"1", b"2"]
    assert transport.producerState == "paused"
    proto.dataReceived(b"\n5\n")
    assert proto.lines == [b"1", b"2"]
    proto.resumeProducing()
    assert transport.producerState == "producing"
    assert proto.lines == [b"1", b"2", b"3", b"4", b"5"]
    proto.dataReceived(b"6\n")
    assert proto.lines[-1] == b"6"


def test_reentrant_data_received_keeps_order() -> None:
    """Data fed from inside lineReceived (a synchronous peer) is delivered after, in order."""

    class Reentrant(Collector):
        def lineReceived(self, line: bytes) -> None:
            super().lineReceived(line)
            if line == b"a":
                self.dataReceived(b"c\nd")

    proto = Reentrant()
    connected(proto)
    proto.dataReceived(b"a\nb\n")
    proto.dataReceived(b"\n")
    assert proto.lines == [b"a", b"b", b"c", b"d"]


def test_no_more_lines_once_disconnecting() -> None:
    """Like LineReceiver, lines after a loseConnection() in lineReceived are not delivered."""

    class Closer(Collector):
        def lineReceived(self, line: bytes) -> None:
            super().lineReceived(line)
            assert self.transport is not None
            self.transport.loseConnection()

    proto = Closer()
    connected(proto)
    proto.dataReceived(b"a\nb\n")
    assert proto.lines == [b"a"]


def test_raw_mode_gets_the_rest() -> None:
    """setRawMode from lineReceived hands the remaining bytes to rawDataReceived."""

    class Raw(Collector):
        raw = b""

        def lineReceived(self, line: bytes) -> None:
            super().lineReceived(line)
            self.setRawMode()

        def rawDataReceived(self, data: bytes) -> None:
            self.raw += data

    proto = Raw()
    connected(proto)
    proto.dataReceived(b"head\nbody\nmore")
    assert proto.lines == [b"head"]
    assert proto.raw == b"body\nmore"


def test_send_line_and_tracer() -> None:
    """sendLine writes the line plus \\n; a tracer sees sent and received lines."""
    seen: list[tuple[str, bytes]] = []

    class Tracer:
        def received(self, line: bytes) -> None:
            seen.append(("<-", line))

        def sent(self, line: bytes) -> None:
            seen.append(("->", line))

    proto = Collector()
    transport = connected(proto)
    proto.tracer = Tracer()
    proto.sendLine(b'{"a":1}')
    proto.dataReceived(b'{"b":2}\r\n')
    assert transport.value() == b'{"a":1}\n'
    assert seen == [("->", b'{"a":1}'), ("<-", b'{"b":2}')]


def test_half_closeable() -> None:
    """NDJSONProtocol provides IHalfCloseableProtocol."""
    assert IHalfCloseableProtocol.providedBy(Collector())


def test_clear_line_buffer_returns_what_is_pending() -> None:
    """clearLineBuffer returns and forgets buffered bytes."""
    proto = Collector()
    connected(proto)
    proto.dataReceived(b"partial")
    assert proto.clearLineBuffer() == b"partial"
    proto.dataReceived(b"x\n")
    assert proto.lines == [b"x"]


class _Output(ProcessProtocol):
    def __init__(self) -> None:
        self.out = b""
        self.err = b""
        self.ended: defer.Deferred[None] = defer.Deferred()

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.transport.write(b'{"id":1,"method":"ping"}\n')
        self.transport.closeStdin()

    def outReceived(self, data: bytes) -> None:
        self.out += data

    def errReceived(self, data: bytes) -> None:
        self.err += data

    def processEnded(self, reason: Failure) -> None:
        self.ended.callback(None)


@pytest.mark.process
class HalfCloseProcessTests(TestCase):
    """End-to-end: a real child serving an echo NDJSONProtocol with serve_stdio."""

    def _echo(self, delay: str) -> defer.Deferred[None]:
        output = _Output()
        env = dict(os.environ, PYTHONPATH=REPO_ROOT)
        reactor.spawnProcess(
            output, sys.executable, [sys.executable, FIXTURE, "echo", delay], env=env
        )

        def check(_: None) -> None:
            self.assertEqual(output.out, b'{"id":1,"method":"ping"}\n', output.err)

        return output.ended.addCallback(check)

    def test_half_close_keeps_the_last_reply(self) -> defer.Deferred[None]:
        """Stdin closed right after a request: the child still writes its (delayed) reply."""
        return self._echo("0.2")

    def test_half_close_immediate_reply(self) -> defer.Deferred[None]:
        """Stdin closed right after a request answered synchronously: the reply arrives."""
        return self._echo("0")


def test_input_end_while_paused_with_subclass_resume() -> None:
    """A subclass whose resumeProducing only unpauses and calls dataReceived(b"") still ends."""

    class OwnResume(Collector):
        def pauseProducing(self) -> None:
            self.paused = True

        def resumeProducing(self) -> None:
            self.paused = False
            self.dataReceived(b"")

    proto = OwnResume()
    connected(proto)
    proto.pause_after = b"a"
    proto.dataReceived(b"a\nb")
    proto.readConnectionLost()
    assert (proto.lines, proto.ended) == ([b"a"], 0)
    proto.resumeProducing()
    assert (proto.lines, proto.ended) == ([b"a", b"b"], 1)
