"""
ACP's Streamable HTTP client over TLS and HTTP/2 (:mod:`acpkit.remote.http_client` with
:mod:`acpkit.http2_agent`): the ``tls`` option on a loopback twisted.web server with a
certificate of our own, and real HTTP/2 peers end to end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from twisted.internet import reactor
from twisted.trial.unittest import TestCase
from twisted.web.server import Site

from acpkit import schema
from acpkit.errors import ConnectionLost
from acpkit.remote.http_client import connect_http
from acpkit.remote.security import tls_serving_problem
from acpkit.remote.tls import ClientTLS
from tests.test_remote_http_client import FakeAcpServer, RecordingClient, scripted_agent
from tests.test_remote_websocket import self_signed_localhost

NO_TLS_SERVING = tls_serving_problem()


def write_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed ``localhost`` key and certificate written as PEM files."""
    key_pem, cert_pem = self_signed_localhost()
    key, cert = directory / "key.pem", directory / "cert.pem"
    key.write_bytes(key_pem)
    cert.write_bytes(cert_pem)
    return key, cert


@pytest.mark.skipif(NO_TLS_SERVING is not None, reason=NO_TLS_SERVING or "")
class TLSOptionTests(TestCase):
    """connect_http's ``tls`` (a ClientTLS) over HTTP/1.1 to a loopback TLS server."""

    timeout = 30

    def setUp(self) -> None:
        from twisted.internet.ssl import PrivateCertificate

        directory = Path(self.mktemp())
        directory.mkdir()
        key, self.cert = write_certificate(directory)
        self.server = FakeAcpServer()
        self.server.answer = scripted_agent
        options = PrivateCertificate.loadPEM(key.read_bytes() + self.cert.read_bytes()).options()
        port = cast(Any, reactor).listenSSL(0, Site(self.server), options, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        self.url = f"https://localhost:{port.getHost().port}/acp"

    async def test_tls_trust_root_is_used_for_https(self) -> None:
        """With ``tls=ClientTLS(trust_root=the server's certificate)`` a session starts
        over https; without it the platform's authorities refuse the self-signed
        certificate and initialize fails saying so."""
        conn = await connect_http(
            reactor, self.url, RecordingClient(), tls=ClientTLS(trust_root=self.cert)
        )
        await conn.initialize()
        new = await conn.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))
        self.assertEqual(new.session_id, "s1")
        conn.close()
        await conn.closed

        untrusting = await connect_http(reactor, self.url, RecordingClient())
        with self.assertRaises(ConnectionLost) as caught:
            await untrusting.initialize()
        self.assertIn("certificate verify failed", str(caught.exception))

    async def test_an_unreadable_tls_file_fails_at_once(self) -> None:
        """A trust root that does not exist is a ValueError naming it, before anything
        is sent."""
        missing = Path(self.mktemp()) / "nowhere.pem"
        with self.assertRaises(ValueError) as caught:
            await connect_http(
                reactor, self.url, RecordingClient(), tls=ClientTLS(trust_root=missing)
            )
        self.assertIn("nowhere.pem", str(caught.exception))
        self.assertEqual(self.server.requests, [])
