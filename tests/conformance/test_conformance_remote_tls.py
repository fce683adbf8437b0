"""
``acpkit-conformance --url https://… / wss://…`` against an agent whose certificate is
signed by a private CA and which requires a TLS client certificate
(``serve_remote(..., client_ca=...)``): the ``--tls-trust-root``, ``--tls-certificate``
and ``--tls-private-key`` options (and the pytest plugin's ``--acp-tls-*``).

The agent (acpkit's interop agent) is served in a subprocess, which prints its port and
stops when its stdin closes; the tester is blocking and runs in the test's thread.
"""

from __future__ import annotations

import importlib.util
import io
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from acpkit.conformance.cli import main, run_suite
from acpkit.conformance.report import SuiteResult
from acpkit.conformance.rules import RULES
from acpkit.conformance.tls import TLSSettings
from acpkit.http.tls_errors import ssl_error_text
from acpkit.remote.security import tls_serving_problem
from tests.helpers import child_env

# One xdist worker runs this file's tests: its module-scoped fixture (the TLS servers) then
# runs once, not once per worker.
pytestmark = [pytest.mark.process, pytest.mark.xdist_group("conformance_remote_tls")]

ROOT = Path(__file__).resolve().parent.parent.parent
INTEROP = Path(__file__).resolve().parent.parent / "fixtures" / "interop"
HTTP_RULES = [r.id for r in RULES if r.id.startswith("HTTP-")]
WS_RULES = [r.id for r in RULES if r.id.startswith("WS-")]

#: The words each refusal is explained with (acpkit.http.tls_errors).
NO_CERTIFICATE = "the server requires a TLS client certificate and none was presented"
OTHER_CA = "not signed by a certificate authority the server trusts"
EXPIRED = "the server refused the TLS client certificate: it has expired"
NOT_TRUSTED = "the server's TLS certificate is not trusted"

#: serve_remote with client_ca on a loopback ssl: port; prints the port, stops at EOF.
SERVER = """
import sys
sys.path.insert(0, sys.argv[1])
from twisted.internet import reactor, stdio
from twisted.internet.protocol import Protocol
from acpkit.remote import serve_remote
from acpkit_agent import InteropAgent

key, cert, client_ca = sys.argv[2:5]

class StopOnEOF(Protocol):
    def connectionLost(self, reason=None):
        if reactor.running:
            reactor.stop()

def listening(port):
    print(port.getHost().port, flush=True)

def failed(failure):
    print(f"error: {failure}", flush=True)
    reactor.stop()

serve_remote(
    reactor,
    f"ssl:0:interface=127.0.0.1:privateKey={key}:certKey={cert}",
    InteropAgent,
    client_ca=client_ca,
).addCallbacks(listening, failed)
stdio.StandardIO(StopOnEOF())
reactor.run()
"""


class Served:
    """The agent's port and the certificate files: its CA, a client of that CA, and
    another CA with a client of its own."""

    def __init__(self, directory: Path, port: int) -> None:
        self.directory = directory
        self.port = port

    def url(self, scheme: str) -> str:
        return f"{scheme}://localhost:{self.port}/acp"

    @property
    def ca(self) -> str:
        return str(self.directory / "good-ca.pem")

    @property
    def other_ca(self) -> str:
        return str(self.directory / "other-ca.pem")

    def client(self, name: str = "good-alice") -> tuple[str, str]:
        """(certificate, private key) files of client certificate ``CA-NAME``."""
        stem = self.directory / name
        return f"{stem}-cert.pem", f"{stem}-key.pem"

    def options(self, *, ca: str = "good", client: str | None = "good-alice") -> list[str]:
        """The ``--tls-*`` options trusting ``ca`` and presenting ``client``'s certificate."""
        options = ["--tls-trust-root", str(self.directory / f"{ca}-ca.pem")]
        if client is not None:
            certificate, key = self.client(client)
            options += ["--tls-certificate", certificate, "--tls-private-key", key]
        return options


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """acpkit's interop agent on ``ssl:`` with a private CA's certificate, requiring a
    client certificate signed by that CA."""
    problem = tls_serving_problem()
    if problem is not None:
        pytest.skip(problem)
    pytest.importorskip("cryptography")
    from tests.tls_certificates import make_authority

    directory = tmp_path_factory.mktemp("tls")
    ca = make_authority(directory, "good")
    server = ca.issue("localhost", server=True)
    ca.issue("alice")
    ca.issue("olde", expired=True)
    make_authority(directory, "other").issue("mallory")
    env = child_env()
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            SERVER,
            str(INTEROP),
            str(server.key),
            str(server.certificate),
            str(ca.certificate_file),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert process.stdout is not None and process.stdin is not None
    try:
        first = process.stdout.readline().strip()  # blocks until it listens (or dies)
        assert first.isdigit(), f"the TLS server said {first!r}"
        yield Served(directory, int(first))
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _statuses(result: SuiteResult) -> dict[str, str]:
    return {r.rule.id: r.status for r in result.results}


def _settings(served: Served) -> TLSSettings:
    certificate, key = served.client()
    return TLSSettings(trust_root=served.ca, certificate=certificate, private_key=key)


def _main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``acpkit-conformance ARGV``: the exit status and everything it wrote."""
    out = io.StringIO()
    status = main(argv, out=out)
    captured = capsys.readouterr()
    return status, out.getvalue() + captured.out + captured.err


# -- judged over TLS with the trust root and the client certificate -------------------------


def test_https_with_trust_root_and_client_certificate_passes_every_http_rule(
    served: Served,
) -> None:
    """Trusting the private CA and presenting a client certificate it signed, every HTTP
    rule is judged over https and passes, HTTP-011 (h2 chosen by ALPN) included."""
    pytest.importorskip("h2")
    result = run_suite(
        [],
        url=served.url("https"),
        only=["HTTP"],
        timeout=5.0,
        explore=False,
        tls=_settings(served),
    )
    assert result.error is None, result.error
    statuses = _statuses(result)
    assert {statuses[r] for r in HTTP_RULES} == {"pass"}, statuses


def test_wss_with_trust_root_and_client_certificate_passes_every_websocket_rule(
    served: Served,
) -> None:
    """The same settings over wss: WS-001..003 are judged and pass."""
    result = run_suite(
        [], url=served.url("wss"), only=["WS"], timeout=5.0, explore=False, tls=_settings(served)
    )
    assert result.error is None, result.error
    statuses = _statuses(result)
    assert {statuses[r] for r in WS_RULES} == {"pass"}, statuses


# -- a refused or untrusted handshake: cannot test, in words --------------------------------


@pytest.mark.parametrize("scheme", ["https", "wss"])
def test_no_client_certificate_cannot_test_in_words(
    served: Served, scheme: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a client certificate the agent refuses the handshake: exit 2 (cannot
    test), saying the server requires a client certificate, with no rule judged and no
    traceback."""
    status, text = _main(
        [
            "--url",
            served.url(scheme),
            "--rules",
            {"https": "HTTP", "wss": "WS"}[scheme],
            *served.options(client=None),
        ],
        capsys,
    )
    assert status == 2, text
    assert NO_CERTIFICATE in text, text
    assert "Traceback" not in text and "FAIL" not in text, text


@pytest.mark.parametrize(
    ("client", "words"), [("other-mallory", OTHER_CA), ("good-olde-expired", EXPIRED)]
)
def test_a_refused_client_certificate_cannot_test_in_words(
    served: Served, client: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A client certificate the agent does not accept (signed by another CA, expired):
    exit 2 saying why."""
    status, text = _main(
        ["--url", served.url("https"), "--rules", "HTTP", *served.options(client=client)],
        capsys,
    )
    assert status == 2, text
    assert words in text, text


def test_a_wrong_trust_root_cannot_test_naming_certificate_verification(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    """Trusting another CA than the agent's: exit 2 naming the failed verification of the
    server's certificate."""
    status, text = _main(
        ["--url", served.url("https"), "--rules", "HTTP", *served.options(ca="other")],
        capsys,
    )
    assert status == 2, text
    assert NOT_TRUSTED in text and "certificate verify failed" in text, text
    assert "Traceback" not in text, text


# -- option errors ---------------------------------------------------------------------------


def test_option_errors_are_usage_errors_naming_option_and_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing file, a file that is not PEM, a key without its certificate or not
    matching it, or the options with a cleartext URL: exit 2 with one line naming the
    option (and file), before anything is connected to (port 9 has no server)."""
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    missing = str(tmp_path / "missing.pem")
    cases = [
        (["--tls-trust-root", missing], f"--tls-trust-root {missing}: no such file"),
        (["--tls-trust-root", str(junk)], f"--tls-trust-root {junk}: not a usable PEM file"),
        (["--tls-certificate", missing], f"--tls-certificate {missing}: no such file"),
        (
            ["--tls-certificate", str(junk), "--tls-private-key", missing],
            f"--tls-private-key {missing}: no such file",
        ),
        (["--tls-certificate", str(junk)], f"--tls-certificate {junk}: not a usable PEM"),
        (["--tls-private-key", str(junk)], "needs --tls-certificate too"),
    ]
    if importlib.util.find_spec("cryptography") is not None:
        from tests.tls_certificates import make_authority

        ca = make_authority(tmp_path)
        alice, mallory = ca.issue("alice"), ca.issue("mallory")
        options = ["--tls-certificate", str(alice.certificate)]
        options += ["--tls-private-key", str(mallory.key)]
        cases.append((options, f"--tls-certificate {alice.certificate}: not a usable PEM"))
    for options, words in cases:
        status, text = _main(["--url", "https://127.0.0.1:9/acp", *options], capsys)
        assert status == 2, (options, text)
        assert words in text, (options, text)
        assert len(text.strip().splitlines()) == 1, (options, text)
    status, text = _main(["--url", "http://127.0.0.1:9/acp", "--tls-trust-root", str(junk)], capsys)
    assert status == 2
    assert "--tls-trust-root: only for an https:// or wss:// URL" in text, text


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (
            ssl.SSLError(
                1,
                "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate required"
                " (_ssl.c:2580)",
            ),
            "TLS handshake failed: " + NO_CERTIFICATE + " (tlsv13 alert certificate required)",
        ),
        (
            ssl.SSLError(1, "[SSL: SSLV3_ALERT_BAD_RECORD_MAC] sslv3 alert bad record mac"),
            "TLS handshake failed: sslv3 alert bad record mac",
        ),
        (
            ssl.SSLEOFError(8, "EOF occurred in violation of protocol (_ssl.c:2427)"),
            "it may require a TLS client certificate",
        ),
    ],
)
def test_stdlib_ssl_errors_in_words(error: ssl.SSLError, words: str) -> None:
    """A standard-library TLS error reads like acpkit's other TLS errors: the meaning of a
    certificate alert, OpenSSL's reason without its ``[SSL: …]`` code and source line."""
    text = ssl_error_text(error)
    assert words in text, text
    assert "_ssl.c" not in text and "[SSL:" not in text, text


# -- the pytest plugin -----------------------------------------------------------------------


def test_pytest_plugin_tls_options(served: Served, tmp_path: Path) -> None:
    """``pytest --acp-url https://… --acp-tls-trust-root CA --acp-tls-certificate …
    --acp-tls-private-key …`` judges the agent over TLS: HTTP-011 (h2 by ALPN) passes; a
    ``--acp-tls-*`` option with a missing file is a usage error (exit 4) naming it."""
    pytest.importorskip("h2")
    from tests.conformance.test_pytest_plugin_cost import plugin_option

    certificate, key = served.client()
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *plugin_option()]
    options = ["--acp-url", served.url("https"), "--acp-tls-trust-root", served.ca]
    options += ["--acp-tls-certificate", certificate, "--acp-tls-private-key", key]
    options += ["--acp-rules", "HTTP-011", "--acp-timeout", "5", "-rs"]
    env = child_env()
    result = subprocess.run(
        [*command, *options], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout.strip().splitlines()[-1], result.stdout[-2000:]
    missing = str(tmp_path / "missing.pem")
    result = subprocess.run(
        [*command, "--acp-url", served.url("https"), "--acp-tls-trust-root", missing],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 4, result.stdout + result.stderr
    assert f"--acp-tls-trust-root {missing}: no such file" in result.stderr, result.stderr
