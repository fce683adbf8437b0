"""
The SSE event writer (:func:`acpkit.http.sse.encode_event`) against the shared parser: what
one writes, the other reads back whole.  (The parser's own rules are tested in
tests/mcp/test_mcp_http.py, its first user.)
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acpkit.http.sse import KEEPALIVE, SSEEvent, SSEParser, encode_event

_no_line_end = st.text(
    alphabet=st.characters(blacklist_characters="\r\n\x00", blacklist_categories=["Cs"]),
    max_size=20,
)


@given(
    data=st.binary(max_size=200),
    event_id=st.none() | _no_line_end,
    event_type=st.none() | _no_line_end.filter(bool),
    cut=st.integers(min_value=0, max_value=400),
)
def test_an_encoded_event_is_read_back_whole(
    data: bytes, event_id: str | None, event_type: str | None, cut: int
) -> None:
    """An event's data (line ends normalised to LF), id and type survive the parser, in
    any two chunks."""
    wire = encode_event(data, event_id=event_id, event_type=event_type)
    parser = SSEParser(max_event_size=1 << 20)
    events = parser.feed(wire[:cut]) + parser.feed(wire[cut:])
    normalised = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    assert events == [SSEEvent(normalised, event_type or "message", event_id)]


def test_a_json_message_is_one_data_line() -> None:
    """A compact JSON message is written as one ``data:`` line and a blank line."""
    assert encode_event(b'{"jsonrpc":"2.0"}') == b'data: {"jsonrpc":"2.0"}\n\n'


def test_the_keepalive_is_a_comment_the_parser_ignores() -> None:
    """The keep-alive is a comment: no event, and the next event still parses."""
    parser = SSEParser(max_event_size=100)
    assert parser.feed(KEEPALIVE + encode_event(b"x")) == [SSEEvent(b"x")]


def test_a_line_end_in_the_id_is_refused() -> None:
    """An id holding a line end would inject fields: ValueError."""
    with pytest.raises(ValueError, match="line end"):
        encode_event(b"x", event_id="a\nb")
