"""
connect_remote: one entry point choosing the transport by the URL's scheme.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
from twisted.internet import reactor
from twisted.trial.unittest import TestCase

from acpkit.connection import Client
from acpkit.remote.connect import check_remote_url, connect_remote
from acpkit.remote.http_client import HTTPClientTransport
from tests.helpers import refused_port


@pytest.mark.parametrize(
    ("url", "scheme"),
    [
        ("ws://127.0.0.1:8765/acp", "ws"),
        ("WSS://agent.example/acp", "wss"),
        ("http://[::1]:8080/acp", "http"),
        ("https://agent.example", "https"),
    ],
)
def test_accepted_schemes(url: str, scheme: str) -> None:
    """ws, wss, http and https URLs with a host are accepted; the scheme is returned."""
    assert check_remote_url(url) == scheme


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://host/acp", "ws://, wss://, http:// or https://"),
        ("127.0.0.1:8765", "scheme"),
        ("http:///acp", "no host"),
        ("ws://user:pw@host/acp", "user info"),
        ("http://host:99999/acp", "not a valid URL"),
    ],
)
def test_refused_urls_say_why(url: str, why: str) -> None:
    """Anything else is a ValueError saying what is wrong."""
    with pytest.raises(ValueError, match=why):
        check_remote_url(url)


class ConnectRemoteTests(TestCase):
    timeout = 30

    async def test_http_urls_get_the_streamable_http_transport(self) -> None:
        """An http:// URL gives a ClientConnection over HTTPClientTransport at once
        (nothing is sent before initialize)."""
        conn = await connect_remote(
            reactor, f"http://127.0.0.1:{refused_port(self.addCleanup)}/acp", Client()
        )
        self.assertIsInstance(conn.protocol.transport, HTTPClientTransport)
        conn.close()
        await conn.closed

    async def test_the_http2_policy_reaches_the_http_transport(self) -> None:
        """``http2=`` is the HTTP transport's version policy (default ``"auto"``)."""
        url = f"http://127.0.0.1:{refused_port(self.addCleanup)}/acp"
        for given, expected in ((None, "auto"), ("never", "never")):
            kwargs: dict[str, Any] = {} if given is None else {"http2": given}
            conn = await connect_remote(reactor, url, Client(), **kwargs)
            transport = conn.protocol.transport
            assert isinstance(transport, HTTPClientTransport)
            self.assertEqual(cast(Any, transport)._agent.http2, expected)
            conn.close()
            await conn.closed

    async def test_ws_urls_go_to_the_websocket_client(self) -> None:
        """A ws:// URL is connected by the WebSocket client: nobody listening fails the
        Deferred with its connect error."""
        from acpkit.remote.websocket import WebSocketConnectError

        with self.assertRaises(WebSocketConnectError):
            await connect_remote(
                reactor, f"ws://127.0.0.1:{refused_port(self.addCleanup)}/acp", Client()
            )

    async def test_a_bad_url_fails_the_deferred(self) -> None:
        """A refused URL fails the Deferred with ValueError (no exception raised)."""
        d = connect_remote(reactor, "gopher://host/", Client())
        with self.assertRaises(ValueError):
            await d
