"""
The base of the two HTTP client transports (acpkit.http.transport): what it does on its
own, beside what tests/mcp/test_mcp_http.py and tests/remote/test_remote_http_client.py check
through MCP's and ACP's transports.
"""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.web.client import ResponseDone

from acpkit.http.transport import (
    ERROR_BODY_KEPT,
    HTTPTransportBase,
    check_http_url,
    pop_request,
)


class _Transport(HTTPTransportBase):
    protocol_name = "TEST"

    @staticmethod
    def _error_detail(body: bytes) -> str:
        return f"{len(body)} bytes"


class _Response:
    """The part of IResponse an error status reads: code, phrase, deliverBody."""

    def __init__(self, code: int, phrase: bytes = b"Phrase") -> None:
        self.code = code
        self.phrase = phrase
        self.protocol: Any = None
        self.transport = StringTransport()

    def deliverBody(self, protocol: Any) -> None:
        self.protocol = protocol
        protocol.makeConnection(self.transport)


def _transport() -> _Transport:
    # An http_client is given: no treq, no connection pool.
    return _Transport(
        None,
        "http://example.test/x",
        None,
        name="t",
        connect_timeout=1,
        http_client=object(),
        http2="never",
    )


def test_an_error_body_is_read_up_to_its_first_4_kib() -> None:
    """An error status's body is read for the server's explanation up to
    ERROR_BODY_KEPT bytes, then no further (the body is stopped); the report comes
    once, with exactly that much of the body."""
    reports: list[str] = []
    response = _Response(500, b"Internal Server Error")
    _transport()._read_error(response, "HTTP 500 Internal Server Error from x", reports.append)  # type: ignore[arg-type]
    response.protocol.dataReceived(b"e" * 3000)
    assert reports == []
    response.protocol.dataReceived(b"e" * 3000)
    assert reports == [f"HTTP 500 Internal Server Error from x: {ERROR_BODY_KEPT} bytes"]
    assert response.transport.producerState == "stopped"
    response.protocol.dataReceived(b"e" * 10)
    response.protocol.connectionLost(Failure(ResponseDone()))
    assert len(reports) == 1


@pytest.mark.parametrize(
    ("status", "note"),
    [
        (302, " (redirects are not followed)"),
        (401, " (check the configured headers)"),
        (403, " (check the configured headers)"),
        (500, ""),
    ],
)
def test_an_error_status_says_what_to_check(status: int, note: str) -> None:
    """A redirect says it is not followed, 401 and 403 say to check the configured
    headers, after the headline and before the server's explanation."""
    reports: list[str] = []
    response = _Response(status)
    _transport()._read_error(response, "headline", reports.append)  # type: ignore[arg-type]
    response.protocol.dataReceived(b"abc")
    response.protocol.connectionLost(Failure(ResponseDone()))
    assert reports == [f"headline{note}: 3 bytes"]


def test_a_response_names_a_request_by_its_id_or_the_decimal_string_of_it() -> None:
    """pop_request finds a request by its id, an integer id by its ASCII decimal string
    too; a bool, a float, a non-ASCII digit or an unknown id find nothing."""
    table: dict[Any, str] = {1: "one", "a": "A", 7: "seven", 3: "three"}
    assert pop_request(table, 1) == "one"
    assert pop_request(table, "a") == "A"
    assert pop_request(table, "7") == "seven"
    for nothing in (True, 3.0, "\u0663", "8", None, [3]):
        assert pop_request(table, nothing) is None
    assert table == {3: "three"}


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://host/x", "an MCP Streamable HTTP URL must be http"),
        ("http:///x", "must be http"),
        ("https://u:p@host/x", "with user info"),
    ],
)
def test_a_url_that_is_not_http_host_is_refused_naming_the_protocol(url: str, why: str) -> None:
    """check_http_url: ValueError for anything but http(s)://host..., or user info."""
    with pytest.raises(ValueError, match=why):
        check_http_url(url, "MCP")
