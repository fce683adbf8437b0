"""
TLS client authentication end to end, over loopback TLS with certificates made here:
``serve_remote(client_ca=...)`` and bob's ``--tls-client-ca`` on the server side,
:class:`~acpkit.http.tls.ClientTLS` through ``connect_remote`` (WebSocket and
Streamable HTTP), the agents file's ``tls`` table, and the official Python SDK's
clients presenting a certificate.  A client without a certificate, with one from
another CA, or with an expired one is refused at the handshake with an error that says
so in words.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import reactor
from twisted.internet.interfaces import IListeningPort
from twisted.logger import ILogObserver, formatEvent, globalLogPublisher
from twisted.trial.unittest import TestCase
from zope.interface import implementer

from acpkit import schema
from acpkit.connection import Client, ClientConnection
from acpkit.http.tls import ClientTLS
from acpkit.remote.connect import connect_remote
from acpkit.remote.security import ClientAuthError, tls_serving_problem
from acpkit.remote.server import serve_remote
from acpkit_client.agents import AgentRun, AgentStartError
from acpkit_client.config import parse_agents_text
from tests.remote.test_remote_server import RemoteAgent, text
from tests.tls_certificates import Issued, make_authority

ROOT = Path(__file__).parent.parent.parent
NO_TLS_SERVING = tls_serving_problem()
SDK_CLIENT = ROOT / "tests" / "fixtures" / "remote_tls" / "sdk_tls_client.py"

#: The words each refusal is explained with (acpkit.http.tls_errors).
NO_CERTIFICATE = "the server requires a TLS client certificate and none was presented"
OTHER_CA = "not signed by a certificate authority the server trusts"
EXPIRED = "the server refused the TLS client certificate: it has expired"


class ChunkClient(Client):
    """Keeps the text of the agent's message chunks."""

    def __init__(self) -> None:
        self.chunks: list[str] = []

    def session_update(self, params: schema.SessionNotification) -> None:
        update = params.update
        if isinstance(update, schema.AgentMessageChunk) and isinstance(
            update.content, schema.TextContentBlock
        ):
            self.chunks.append(update.content.text)


class Certificates:
    """A CA and what it signs, another CA and what that signs, in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.ca = make_authority(directory, "good")
        self.other_ca = make_authority(directory, "other")
        self.server = self.ca.issue("localhost", server=True)
        self.alice = self.ca.issue("alice")
        self.expired = self.ca.issue("olde", expired=True)
        self.mallory = self.other_ca.issue("mallory")

    def tls(self, client: Issued | None) -> ClientTLS:
        """Trusting the server's CA, presenting ``client`` (None: no certificate)."""
        if client is None:
            return ClientTLS(trust_root=self.ca.certificate_file)
        return ClientTLS(
            trust_root=self.ca.certificate_file,
            certificate=client.certificate,
            private_key=client.key,
        )

    def endpoint(self, interface: str = "127.0.0.1") -> str:
        return (
            f"ssl:0:interface={interface}:privateKey={self.server.key}"
            f":certKey={self.server.certificate}"
        )


@pytest.mark.skipif(NO_TLS_SERVING is not None, reason=NO_TLS_SERVING or "")
class ClientAuthTests(TestCase):
    """serve_remote with client_ca, acpkit's own clients over wss:// and https://."""

    timeout = 60

    async def serve(self, *, token: str | None = None) -> int:
        self.certs = Certificates(Path(self.mktemp()).resolve())
        port: IListeningPort = await serve_remote(
            reactor,
            self.certs.endpoint(),
            RemoteAgent,
            client_ca=self.certs.ca.certificate_file,
            token=token,
        )
        self.addCleanup(port.stopListening)
        number: int = port.getHost().port  # type: ignore[attr-defined]
        return number

    async def turn(self, conn: ClientConnection, client: ChunkClient) -> list[str]:
        """initialize, session/new, a prompt streaming two chunks: the chunks."""
        await conn.initialize(schema.InitializeRequest(protocol_version=1))
        session = await conn.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))
        answer = await conn.prompt(
            schema.PromptRequest(session_id=session.session_id, prompt=[text("stream 2")])
        )
        self.assertEqual(answer.stop_reason, schema.StopReason.END_TURN)
        conn.close()
        await conn.closed
        return client.chunks

    async def connect(self, scheme: str, port: int, tls: ClientTLS, **kwargs: Any) -> Any:
        self.client = ChunkClient()
        return await connect_remote(
            reactor, f"{scheme}://localhost:{port}/acp", self.client, tls=tls, **kwargs
        )

    async def refusal(self, scheme: str, port: int, tls: ClientTLS) -> str:
        """The error the client sees when the handshake is refused (connect or initialize)."""
        try:
            conn = await self.connect(scheme, port, tls)
            await conn.initialize(schema.InitializeRequest(protocol_version=1))
        except Exception as e:
            return str(e)
        self.fail("the server accepted the connection")

    async def test_a_certificate_from_the_right_ca_runs_a_turn(self) -> None:
        """Over wss:// and https://, a client certificate the CA signed: a whole turn."""
        port = await self.serve()
        for scheme in ("wss", "https"):
            conn = await self.connect(scheme, port, self.certs.tls(self.certs.alice))
            self.assertEqual(await self.turn(conn, self.client), ["0", "1"], scheme)

    async def test_no_certificate_is_refused_in_words(self) -> None:
        """No client certificate: refused at the handshake; the error says one is required."""
        port = await self.serve()
        for scheme in ("wss", "https"):
            error = await self.refusal(scheme, port, self.certs.tls(None))
            self.assertIn(NO_CERTIFICATE, error, scheme)
            self.assertIn(f"{scheme}://localhost:{port}/acp", error)

    async def test_a_certificate_from_another_ca_is_refused_in_words(self) -> None:
        """A certificate another CA signed: refused; the error says the CA is not trusted."""
        port = await self.serve()
        for scheme in ("wss", "https"):
            error = await self.refusal(scheme, port, self.certs.tls(self.certs.mallory))
            self.assertIn(OTHER_CA, error, scheme)

    async def test_an_expired_certificate_is_refused_in_words(self) -> None:
        """An expired certificate from the right CA: refused; the error says it expired."""
        port = await self.serve()
        for scheme in ("wss", "https"):
            error = await self.refusal(scheme, port, self.certs.tls(self.certs.expired))
            self.assertIn(EXPIRED, error, scheme)

    async def test_token_and_client_auth_are_both_required(self) -> None:
        """With a token and a client CA: the certificate without the token is 401, the
        token without the certificate is refused at the handshake, both pass."""
        port = await self.serve(token="s3cret")
        bearer = {"Authorization": "Bearer s3cret"}
        for scheme in ("wss", "https"):
            conn = await self.connect(
                scheme, port, self.certs.tls(self.certs.alice), headers=bearer
            )
            self.assertEqual(await self.turn(conn, self.client), ["0", "1"], scheme)
            error = await self.refusal(scheme, port, self.certs.tls(self.certs.alice))
            self.assertIn("401", error, scheme)
            self.assertIn(NO_CERTIFICATE, await self.refusal(scheme, port, self.certs.tls(None)))

    async def test_a_bad_client_file_fails_before_connecting(self) -> None:
        """A client certificate file that is missing: the Deferred fails with ValueError
        naming the file; nothing is sent."""
        port = await self.serve()
        missing = ClientTLS(certificate=Path(self.mktemp()) / "nope.pem")
        for scheme in ("wss", "https"):
            with self.assertRaises(ValueError) as caught:
                await self.connect(scheme, port, missing)
            self.assertIn("cannot read the TLS client certificate", str(caught.exception))
            self.assertIn("nope.pem", str(caught.exception))

    async def test_the_agents_file_tls_table_connects(self) -> None:
        """A url agent whose tls table names the files relative to the agents file:
        AgentRun connects and hands shakes; without a certificate, AgentStartError
        saying one is required."""
        port = await self.serve()
        directory = self.certs.ca.directory
        agents_file = directory / "acp.toml"
        good, bare = parse_agents_text(
            str(agents_file),
            f'[[agent]]\nname = "far"\nurl = "wss://localhost:{port}/acp"\n'
            f'tls = {{ trust_root = "{self.certs.ca.certificate_file.name}",'
            f' certificate = "{self.certs.alice.certificate.name}",'
            f' private_key = "{self.certs.alice.key.name}" }}\n'
            f'[[agent]]\nname = "bare"\nurl = "https://localhost:{port}/acp"\n'
            f'tls = {{ trust_root = "{self.certs.ca.certificate_file}" }}\n',
        )
        run = AgentRun(good, "/tmp")
        await run.connect(reactor, Client())
        self.assertEqual(await run.handshake(), "s1")
        await run.stop()
        run = AgentRun(bare, "/tmp")
        await run.connect(reactor, Client())
        with self.assertRaises(AgentStartError) as caught:
            await run.handshake()
        self.assertIn(NO_CERTIFICATE, str(caught.exception))


class StartupTests(TestCase):
    """serve_remote's startup with client_ca: the errors and the line it logs."""

    timeout = 30

    async def test_client_ca_on_a_tcp_endpoint_fails_naming_why(self) -> None:
        """client_ca with tcp: fails the Deferred with ClientAuthError: only TLS carries
        client certificates; nothing listens."""
        ca = make_authority(Path(self.mktemp()))
        with self.assertRaises(ClientAuthError) as caught:
            await serve_remote(reactor, "tcp:0", RemoteAgent, client_ca=ca.certificate_file)
        self.assertIn("needs an ssl: endpoint, not tcp:", str(caught.exception))

    @pytest.mark.skipif(NO_TLS_SERVING is not None, reason=NO_TLS_SERVING or "")
    async def test_a_bad_client_ca_file_fails_naming_it(self) -> None:
        """A client CA file holding no certificate fails the Deferred with ValueError
        naming it."""
        certs = Certificates(Path(self.mktemp()))
        junk = certs.ca.directory / "junk.pem"
        junk.write_text("junk")
        with self.assertRaises(ValueError) as caught:
            await serve_remote(reactor, certs.endpoint(), RemoteAgent, client_ca=junk)
        self.assertIn(f"TLS client CA file {junk} holds no PEM certificate", str(caught.exception))

    @pytest.mark.skipif(NO_TLS_SERVING is not None, reason=NO_TLS_SERVING or "")
    async def test_the_authentication_in_force_is_logged(self) -> None:
        """Beyond loopback with client_ca only: serve_remote listens and logs that a
        client certificate from that CA file is required."""
        certs = Certificates(Path(self.mktemp()).resolve())
        events: list[Any] = []

        @implementer(ILogObserver)
        def observe(event: Any) -> None:
            events.append(event)

        globalLogPublisher.addObserver(observe)
        self.addCleanup(globalLogPublisher.removeObserver, observe)
        port = await serve_remote(
            reactor,
            certs.endpoint("0.0.0.0"),
            RemoteAgent,
            client_ca=certs.ca.certificate_file,
        )
        self.addCleanup(port.stopListening)
        said = [formatEvent(e) for e in events if e.get("log_namespace") == "acpkit.remote"]
        self.assertEqual(len(said), 1, said)
        self.assertIn("remote ACP listening on", said[0])
        self.assertIn(
            "authentication: a TLS client certificate signed by a CA in"
            f" {certs.ca.certificate_file}",
            said[0],
        )


# -- bob and the official SDK's clients, in processes ----------------------------------------

TWISTD = ["-c", "from twisted.scripts.twistd import run; run()", "-n", "acp-agent"]


def _start_bob(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], int, list[str]]:
    """bob --engine echo with ``args``; its port and its stderr up to the startup lines."""
    config = tmp_path / "agent.toml"
    config.write_text("", encoding="utf-8")
    bob = subprocess.Popen(
        [sys.executable, *TWISTD, "--config", str(config), "--engine", "echo", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert bob.stderr is not None
    lines: list[str] = []
    port = None
    for line in bob.stderr:
        lines.append(line)
        if "listening on" in line:
            port = int(line.rsplit("port=", 1)[1].rstrip(")\n"))
        if "remote ACP authentication" in line:
            break
    if port is None:
        bob.kill()
        bob.wait(30)
        raise AssertionError("bob did not start: " + "".join(lines))
    return bob, port, lines


def _sdk_client(url: str, ca: Path, client: Issued | None) -> dict[str, Any]:
    files = [str(client.certificate), str(client.key)] if client is not None else []
    done = subprocess.run(
        [sys.executable, str(SDK_CLIENT), url, str(ca), *files],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.skipif(NO_TLS_SERVING is not None, reason=NO_TLS_SERVING or "")
@pytest.mark.process
def test_bob_with_tls_client_ca_beyond_loopback_and_the_sdk_clients(tmp_path: Path) -> None:
    """
    bob --listen http:ssl:...:interface=0.0.0.0 --tls-client-ca CA without a token
    starts and says which authentication is in force; the official SDK's HTTP client
    (httpx, HTTP/2 by ALPN) and its WebSocket transport (over websockets with ssl=)
    presenting a certificate from CA run a turn; without a certificate they are refused.
    """
    pytest.importorskip("httpx")
    pytest.importorskip("h2")
    pytest.importorskip("acp.http")
    certs = Certificates(tmp_path / "certs")
    ca = certs.ca.certificate_file
    bob, port, lines = _start_bob(
        tmp_path,
        *("--listen", "http:" + certs.endpoint("0.0.0.0"), "--tls-client-ca", str(ca)),
    )
    try:
        said = "".join(lines)
        assert "host='0.0.0.0'" in said
        assert f"remote ACP authentication: a TLS client certificate signed by a CA in {ca}" in said
        for scheme in ("https", "wss"):
            url = f"{scheme}://localhost:{port}/acp"
            result = _sdk_client(url, ca, certs.alice)
            assert result.get("stopReason") == "end_turn", result
            assert result["text"] == "Echo: hello over TLS"
            if scheme == "https":
                assert result["httpVersions"] == ["HTTP/2"]
            refused = _sdk_client(url, ca, None)
            assert "error" in refused, refused
            refused = _sdk_client(url, ca, certs.mallory)
            assert "error" in refused, refused
    finally:
        bob.terminate()
        bob.wait(30)
