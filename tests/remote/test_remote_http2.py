"""
ACP's Streamable HTTP client over TLS and HTTP/2 (:mod:`acpkit.remote.http_client` with
:mod:`acpkit.http.http2`): the ``tls`` option on a loopback twisted.web server with a
certificate of our own, and real HTTP/2 peers end to end.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, cast

import pytest
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase
from twisted.web.server import Site

from acpkit import schema
from acpkit.errors import ConnectionLost
from acpkit.http.tls import ClientTLS
from acpkit.io.pem import certificate_options
from acpkit.remote.http_client import HTTPClientTransport, connect_http
from acpkit.remote.security import tls_serving_problem
from tests.helpers import InteropClient, start_port_server
from tests.remote import test_remote_http_client
from tests.remote.test_remote_http_client import (
    FakeAcpServer,
    run_scenario,
    scripted_agent,
)
from tests.remote.test_remote_websocket import self_signed_localhost

ROOT = Path(__file__).parent.parent.parent
SERVER = Path(__file__).parent.parent / "fixtures" / "remote" / "sdk_http2_server.py"
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
        from twisted.internet.ssl import CertificateOptions, PrivateCertificate

        directory = Path(self.mktemp())
        directory.mkdir()
        key, self.cert = write_certificate(directory)
        self.server = FakeAcpServer()
        self.server.answer = scripted_agent
        options = CertificateOptions(
            **certificate_options(
                PrivateCertificate.loadPEM(key.read_bytes() + self.cert.read_bytes())
            )
        )
        port = cast(Any, reactor).listenSSL(0, Site(self.server), options, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        self.url = f"https://localhost:{port.getHost().port}/acp"

    async def test_tls_trust_root_is_used_for_https(self) -> None:
        """With ``tls=ClientTLS(trust_root=the server's certificate)`` a session starts
        over https, on HTTP/1.1 (``http2="never"``: Twisted's Agent) and on HTTP/2 (ALPN,
        the default: twisted.web serves h2); without it the platform's authorities refuse
        the self-signed certificate and initialize fails saying so."""
        for mode, version in (("never", "HTTP/1.1"), ("auto", "HTTP/2")):
            conn = await connect_http(
                reactor,
                self.url,
                InteropClient(),
                tls=ClientTLS(trust_root=self.cert),
                http2=mode,  # type: ignore[arg-type]
                # (no session stream: twisted.web's HTTP/2 server raises when a GET and
                # its RST_STREAM come in one read, as close() right after would do)
                session_streams=False,
            )
            await conn.initialize()
            new = await conn.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))
            self.assertEqual(new.session_id, "s1")
            self.assertEqual(cast(Any, conn.protocol.transport).http_version, version)
            conn.close()
            await conn.closed

        for mode in ("never", "auto"):
            untrusting = await connect_http(
                reactor,
                self.url,
                InteropClient(),
                http2=mode,  # type: ignore[arg-type]
            )
            with self.assertRaises(ConnectionLost) as caught:
                await untrusting.initialize()
            self.assertIn("certificate verify failed", str(caught.exception))

    async def test_an_unreadable_tls_file_fails_at_once(self) -> None:
        """A trust root that does not exist is a ValueError naming it, before anything
        is sent."""
        missing = Path(self.mktemp()) / "nowhere.pem"
        with self.assertRaises(ValueError) as caught:
            await connect_http(
                reactor, self.url, InteropClient(), tls=ClientTLS(trust_root=missing)
            )
        self.assertIn("nowhere.pem", str(caught.exception))
        self.assertEqual(self.server.requests, [])


# -- real peers, end to end ------------------------------------------------------------------


async def start_child(case: TestCase, *args: str) -> int:
    """Run the SDK server fixture with ``args`` (killed at cleanup); return its port."""
    port, _ = await start_child_process(case, *args)
    return port


async def start_child_process(case: TestCase, *args: str) -> tuple[int, Any]:
    """:func:`start_child`, with the child's process transport."""
    pytest.importorskip("acp.http.asgi")
    port, process, _ = await start_port_server(
        case.addCleanup, [sys.executable, str(SERVER), *args]
    )
    return port, process


async def scenario_with(
    case: TestCase, url: str, session_id: str, **options: Any
) -> HTTPClientTransport:
    """tests/remote/test_remote_http_client.py's whole scenario (initialize, session/new, a
    streamed prompt with a permission round trip and fs, a cancelled prompt, close)
    with connect_http given ``options``; the connection's transport."""
    made: list[HTTPClientTransport] = []

    def connecting(reactor: Any, url: str, client: Any, **kwargs: Any) -> Deferred[Any]:
        d = connect_http(reactor, url, client, **kwargs, **options)

        def keep(conn: Any) -> Any:
            made.append(conn.protocol.transport)
            return conn

        return d.addCallback(keep)

    case.patch(test_remote_http_client, "connect_http", connecting)
    await run_scenario(case, url, session_id)
    return made[0]


def access_log(path: Path) -> list[str]:
    """hypercorn's access log: ``METHOD /path PROTOCOL STATUS`` per request (the
    logging prefix, ``[date] [pid] [INFO]``, cut)."""
    return [line.rsplit("] ", 1)[-1] for line in path.read_text().splitlines()]


@pytest.mark.process
class HypercornTests(TestCase):
    """acpkit's client over HTTP/2 to the official Python SDK 0.12.1's ASGI app served
    by hypercorn (uvicorn has no HTTP/2), and over HTTP/1.1 to uvicorn over TLS."""

    timeout = 60

    def setUp(self) -> None:
        pytest.importorskip("hypercorn")
        self.dir = Path(self.mktemp())
        self.dir.mkdir()
        self.key, self.cert = write_certificate(self.dir)
        self.log = self.dir / "access.log"

    async def test_sdk_server_over_tls_chooses_http2_by_alpn(self) -> None:
        """https:// with the default http2="auto": ALPN picks h2; the whole scenario runs
        over HTTP/2 (the initialize answer's version, and every request in hypercorn's
        access log)."""
        port = await start_child(self, "hypercorn", str(self.log), str(self.cert), str(self.key))
        url = f"https://localhost:{port}/acp"
        transport = await scenario_with(
            self, url, "sdk-session", tls=ClientTLS(trust_root=self.cert)
        )
        self.assertEqual(transport.http_version, "HTTP/2")
        lines = access_log(self.log)
        self.assertTrue(any(line.startswith("POST /acp HTTP/2") for line in lines), lines)
        self.assertTrue(any(line.startswith("GET /acp HTTP/2") for line in lines), lines)
        self.assertEqual([line for line in lines if " HTTP/2 " not in line], [])

    async def test_sdk_server_over_h2c_prior_knowledge(self) -> None:
        """http:// with http2="prior-knowledge": HTTP/2 in cleartext from the first byte;
        the scenario runs over it."""
        port = await start_child(self, "hypercorn", str(self.log))
        url = f"http://127.0.0.1:{port}/acp"
        transport = await scenario_with(self, url, "sdk-session", http2="prior-knowledge")
        self.assertEqual(transport.http_version, "HTTP/2")
        lines = access_log(self.log)
        self.assertTrue(lines)
        self.assertEqual([line for line in lines if " HTTP/2 " not in line], [])

    async def test_http11_by_default_on_cleartext(self) -> None:
        """http:// with the default http2="auto" stays HTTP/1.1 (no prior knowledge)."""
        port = await start_child(self, "hypercorn", str(self.log))
        url = f"http://127.0.0.1:{port}/acp"
        transport = await scenario_with(self, url, "sdk-session")
        self.assertEqual(transport.http_version, "HTTP/1.1")
        self.assertEqual([line for line in access_log(self.log) if " HTTP/1.1 " not in line], [])

    async def test_a_server_gone_mid_turn_fails_the_turn_promptly(self) -> None:
        """The server process is killed while a prompt waits over HTTP/2: the prompt
        fails at once with ConnectionLost saying the SSE stream dropped (the HTTP/2
        connection's loss reaches every stream on it)."""
        port, process = await start_child_process(
            self, "hypercorn", str(self.log), str(self.cert), str(self.key)
        )
        client = InteropClient()
        conn = await connect_http(
            reactor, f"https://localhost:{port}/acp", client, tls=ClientTLS(trust_root=self.cert)
        )
        await conn.initialize()
        session = await conn.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))
        self.assertEqual(cast(Any, conn.protocol.transport).http_version, "HTTP/2")
        pending = conn.prompt(
            schema.PromptRequest(
                session_id=session.session_id, prompt=[schema.TextContentBlock(text="wait")]
            )
        )
        await client.waiting
        process.signalProcess("KILL")
        with self.assertRaises(ConnectionLost) as caught:
            await pending
        self.assertIn("SSE stream", str(caught.exception))
        self.assertIn("dropped", str(caught.exception))

    async def test_prior_knowledge_to_a_server_without_h2c_fails_clearly(self) -> None:
        """http2="prior-knowledge" to uvicorn (HTTP/1.1 only): initialize fails at once
        with ConnectionLost saying the server does not speak HTTP/2 with prior
        knowledge."""
        pytest.importorskip("uvicorn")
        port = await start_child(self, "uvicorn", str(self.log))
        conn = await connect_http(
            reactor, f"http://127.0.0.1:{port}/acp", InteropClient(), http2="prior-knowledge"
        )
        with self.assertRaises(ConnectionLost) as caught:
            await conn.initialize()
        self.assertIn("does not speak HTTP/2 with prior knowledge", str(caught.exception))

    async def test_uvicorn_over_tls_falls_back_to_http11(self) -> None:
        """uvicorn has no HTTP/2: ALPN picks http/1.1, the agent remembers the origin as
        HTTP/1.1 and the whole scenario runs through Twisted's HTTP/1.1 agent."""
        pytest.importorskip("uvicorn")
        port = await start_child(self, "uvicorn", str(self.log), str(self.cert), str(self.key))
        url = f"https://localhost:{port}/acp"
        transport = await scenario_with(
            self, url, "sdk-session", tls=ClientTLS(trust_root=self.cert)
        )
        self.assertEqual(transport.http_version, "HTTP/1.1")
        agent = transport._agent
        assert agent is not None
        self.assertEqual(agent.http11_origins, {(b"https", b"localhost", port)})


@pytest.mark.skipif(NO_TLS_SERVING is not None, reason=NO_TLS_SERVING or "")
class ServeRemoteOverTLSTests(TestCase):
    """acpkit's client and acpkit's own server (serve_remote on ssl:), in process."""

    timeout = 60

    async def test_serve_remote_over_tls_speaks_http2_both_sides(self) -> None:
        """serve_remote on an ssl: endpoint with twisted[http2]: the client's ALPN picks
        h2, the scenario passes, and the server saw every request as HTTP/2."""
        pytest.importorskip("h2")
        from acpkit.remote import serve_remote
        from tests.fixtures.interop.acpkit_agent import InteropAgent

        directory = Path(self.mktemp())
        directory.mkdir()
        key, cert = write_certificate(directory)
        port = await serve_remote(
            reactor, f"ssl:0:privateKey={key}:certKey={cert}", InteropAgent, no_token=True
        )
        self.addCleanup(port.stopListening)
        site: Any = cast(Any, port).factory
        while not isinstance(site, Site):
            site = site.wrappedFactory
        seen: list[bytes] = []
        logged = site.log

        def log(request: Any) -> None:
            seen.append(request.clientproto)
            logged(request)

        cast(Any, site).log = log
        url = f"https://localhost:{cast(Any, port.getHost()).port}/acp"
        transport = await scenario_with(self, url, "acpkit-session", tls=ClientTLS(trust_root=cert))
        self.assertEqual(transport.http_version, "HTTP/2")
        self.assertTrue(seen)
        self.assertEqual(set(seen), {b"HTTP/2"})
