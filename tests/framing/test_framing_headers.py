"""Tests for acpkit.framing: linear, bounded Content-Length framing (LSP)."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.interfaces import IHalfCloseableProtocol

from acpkit.framing import (
    DEFAULT_MAX_HEADER_LENGTH,
    OVERSIZED_HEAD,
    ContentLengthProtocol,
    HeaderError,
    parse_headers,
)
from tests.helpers import connected


class Collector(ContentLengthProtocol):
    """Records every callback, and optionally pauses after a given body."""

    def __init__(self, max_length: int | None = None) -> None:
        super().__init__()
        if max_length is not None:
            self.MAX_LENGTH = max_length
        self.bodies: list[bytes] = []
        self.exceeded: list[bytes] = []
        self.malformed: list[str] = []
        self.ended = 0
        self.pause_after: bytes | None = None
        self.peak_buffer = 0

    def messageReceived(self, body: bytes) -> None:
        self.bodies.append(body)
        if body == self.pause_after:
            self.pauseProducing()

    def messageLengthExceeded(self, head: bytes) -> None:
        self.exceeded.append(head)

    def malformedHeader(self, reason: str) -> None:
        self.malformed.append(reason)
        super().malformedHeader(reason)

    def inputEnded(self) -> None:
        self.ended += 1
        super().inputEnded()

    def dataReceived(self, data: bytes) -> None:
        super().dataReceived(data)
        self.peak_buffer = max(self.peak_buffer, self.pendingBytes)


def frame(body: bytes, extra: bytes = b"") -> bytes:
    return b"Content-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def feed_in_chunks(proto: ContentLengthProtocol, data: bytes, cuts: list[int]) -> None:
    positions = sorted({c for c in cuts if 0 < c < len(data)})
    start = 0
    for position in [*positions, len(data)]:
        proto.dataReceived(data[start:position])
        start = position


header_extras = st.sampled_from(
    [
        b"",
        b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n",
        b"X-Other: 1\r\n",
    ]
)


@st.composite
def framed_streams(draw: st.DrawFn) -> tuple[list[bytes], bytes, list[int]]:
    bodies = draw(st.lists(st.binary(max_size=60), max_size=8))
    data = b"".join(frame(b, draw(header_extras)) for b in bodies)
    cuts = draw(st.lists(st.integers(0, max(len(data), 1)), max_size=12))
    return bodies, data, cuts


@given(framed_streams())
def test_any_chunking_yields_the_same_messages(
    stream: tuple[list[bytes], bytes, list[int]],
) -> None:
    """However the stream is cut into reads, the same bodies come out, in order."""
    bodies, data, cuts = stream
    proto = Collector()
    connected(proto)
    feed_in_chunks(proto, data, cuts)
    assert proto.bodies == bodies
    assert proto.pendingBytes == 0
    assert not proto.malformed


@given(framed_streams(), st.integers(1, 40))
def test_oversized_bodies_never_break_the_stream(
    stream: tuple[list[bytes], bytes, list[int]], limit: int
) -> None:
    """A body over the limit is reported once with its head; the others arrive intact."""
    bodies, data, cuts = stream
    proto = Collector(max_length=limit)
    connected(proto)
    feed_in_chunks(proto, data, cuts)
    assert proto.bodies == [b for b in bodies if len(b) <= limit]
    assert proto.exceeded == [b[:OVERSIZED_HEAD] for b in bodies if len(b) > limit]
    # Never more than a header block, a head and one read are buffered.
    assert proto.peak_buffer <= DEFAULT_MAX_HEADER_LENGTH + OVERSIZED_HEAD + len(data)


@given(framed_streams(), st.sets(st.integers(0, 8)))
def test_pauses_never_lose_or_reorder_messages(
    stream: tuple[list[bytes], bytes, list[int]], pause_at: set[int]
) -> None:
    """Pausing after any message and resuming delivers every message once, in order."""
    bodies, data, cuts = stream
    proto = Collector()
    connected(proto)
    pauses = [bodies[i] for i in sorted(pause_at) if i < len(bodies)]
    proto.pause_after = pauses.pop(0) if pauses else None
    feed_in_chunks(proto, data, cuts)
    while proto.paused:
        proto.pause_after = pauses.pop(0) if pauses else None
        proto.resumeProducing()
    assert proto.bodies == bodies


def test_header_names_are_case_insensitive_and_others_ignored() -> None:
    """``content-length`` in any case frames the body; Content-Type is ignored."""
    proto = Collector()
    connected(proto)
    proto.dataReceived(b"content-LENGTH:  2 \r\nContent-Type: x\r\n\r\n{}")
    assert proto.bodies == [b"{}"]


@pytest.mark.parametrize(
    ("block", "why"),
    [
        (b"Content-Type: x", "no Content-Length"),
        (b"Content-Length 2", "without ':'"),
        (b"Content-Length: 2\r\nContent-Length: 2", "more than one"),
        (b"Content-Length: -2", "not a decimal"),
        (b"Content-Length: 0x10", "not a decimal"),
        (b"Content-Length: \xd9\xa3", "not a decimal"),
        (b"Content-Length: ", "not a decimal"),
    ],
)
def test_malformed_header_is_a_clear_error(block: bytes, why: str) -> None:
    """A header block that frames nothing: malformedHeader with the reason, then close."""
    with pytest.raises(HeaderError, match=why):
        parse_headers(block)
    proto = Collector()
    transport = connected(proto)
    proto.dataReceived(block + b"\r\n\r\n{}" + frame(b"[]"))
    assert len(proto.malformed) == 1 and why in proto.malformed[0]
    assert proto.bodies == []
    assert transport.disconnecting
    proto.dataReceived(frame(b"{}"))
    assert proto.bodies == []


def test_header_block_limit_bounds_memory() -> None:
    """Header bytes without an end are never buffered past MAX_HEADER_LENGTH."""
    proto = Collector()
    connected(proto)
    proto.MAX_HEADER_LENGTH = 100
    for _ in range(20):
        proto.dataReceived(b"X-Padding: " + b"a" * 20)
    assert len(proto.malformed) == 1 and "longer than 100" in proto.malformed[0]
    assert proto.pendingBytes == 0


def test_huge_body_is_skipped_in_64k_reads_with_bounded_memory() -> None:
    """A 10 MB body over the limit is skipped as it arrives; the next message is read."""
    proto = Collector(max_length=1000)
    connected(proto)
    body = b"x" * 10_000_000
    data = frame(body) + frame(b"next")
    for k in range(0, len(data), 65536):
        proto.dataReceived(data[k : k + 65536])
    assert proto.exceeded == [body[:OVERSIZED_HEAD]]
    assert proto.bodies == [b"next"]
    assert proto.peak_buffer <= 2 * 65536


def test_large_body_in_small_reads_is_linear() -> None:
    """A 10 MB body in 64 KiB reads: under a second (a quadratic framing takes minutes)."""
    proto = Collector()
    connected(proto)
    data = frame(b"y" * 10_000_000)
    started = time.perf_counter()
    for k in range(0, len(data), 65536):
        proto.dataReceived(data[k : k + 65536])
    assert time.perf_counter() - started < 5
    assert len(proto.bodies) == 1 and len(proto.bodies[0]) == 10_000_000


def test_many_small_messages_in_one_read_are_linear() -> None:
    """Bodies are sliced once: 100,000 messages in one read do not rescan the buffer."""
    proto = Collector()
    connected(proto)
    data = frame(b"{}") * 100_000
    started = time.perf_counter()
    proto.dataReceived(data)
    assert time.perf_counter() - started < 5
    assert len(proto.bodies) == 100_000


def test_send_message_writes_header_and_body_and_traces() -> None:
    """sendMessage writes Content-Length, the blank line and the body; the tracer sees it."""
    seen: list[tuple[str, bytes]] = []

    class Tracer:
        def received(self, line: bytes) -> None:
            seen.append(("in", line))

        def sent(self, line: bytes) -> None:
            seen.append(("out", line))

    proto = Collector()
    proto.tracer = Tracer()
    transport = connected(proto)
    proto.sendMessage("é".encode())
    assert transport.value() == b"Content-Length: 2\r\n\r\n\xc3\xa9"
    proto.dataReceived(frame(b"{}"))
    assert seen == [("out", "é".encode()), ("in", b"{}")]


def test_half_close_drops_a_partial_message_then_ends() -> None:
    """A message cut by the end of input is dropped; inputEnded is called once."""
    proto = Collector()
    transport = connected(proto)
    assert IHalfCloseableProtocol.providedBy(proto)
    proto.dataReceived(frame(b"{}") + b"Content-Length: 10\r\n\r\n{")
    proto.readConnectionLost()
    proto.readConnectionLost()
    assert proto.bodies == [b"{}"]
    assert proto.ended == 1
    assert proto.pendingBytes == 0
    assert transport.disconnecting


def test_input_end_while_paused_waits_for_resume() -> None:
    """Messages held by a pause are delivered before inputEnded."""
    proto = Collector()
    connected(proto)
    proto.pause_after = b"1"
    proto.dataReceived(frame(b"1") + frame(b"2"))
    proto.readConnectionLost()
    assert proto.bodies == [b"1"] and proto.ended == 0
    proto.resumeProducing()
    assert proto.bodies == [b"1", b"2"] and proto.ended == 1


def test_zero_length_body() -> None:
    """Content-Length: 0 delivers an empty body (the engine ignores it like a blank line)."""
    proto = Collector()
    connected(proto)
    proto.dataReceived(frame(b"") + frame(b"x"))
    assert proto.bodies == [b"", b"x"]
