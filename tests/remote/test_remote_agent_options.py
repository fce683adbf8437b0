"""
bob's remote limits on the command line: ``twistd -n acp-agent --listen http:ENDPOINT
--max-connections N --max-message-size BYTES`` (positive integers; anything else, or
either without ``--listen http:``, exits 1 with one line naming the option).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from acpkit_agent.tap import AgentService, Options, makeService
from tests.listening_bob import start_bob


def _options(tmp_path: Path, *args: str) -> Options:
    config = tmp_path / "agent.toml"
    config.write_text("", encoding="utf-8")
    options = Options()
    options.parseOptions(["--config", str(config), *args])
    return options


@pytest.mark.parametrize("option", ["--max-connections", "--max-message-size"])
@pytest.mark.parametrize("value", ["0", "-3", "many", "1.5", ""])
def test_a_limit_that_is_not_a_positive_integer_exits_1_with_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    """--max-connections / --max-message-size must be positive integers: else exit 1, one line."""
    with pytest.raises(SystemExit) as caught:
        makeService(_options(tmp_path, "--listen", "http:tcp:0", option, value))
    assert caught.value.code == 1
    out, err = capfd.readouterr()
    assert out == ""
    assert err == f"acp-agent: {option} {value}: not a positive integer\n"


@pytest.mark.parametrize("listen", ["stdio", "tcp:0"])
def test_a_limit_without_listen_http_exits_1_with_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], listen: str
) -> None:
    """The remote limits apply to --listen http: only: given otherwise, exit 1, one line."""
    with pytest.raises(SystemExit) as caught:
        makeService(_options(tmp_path, "--listen", listen, "--max-connections", "5"))
    assert caught.value.code == 1
    _, err = capfd.readouterr()
    assert err == (
        "acp-agent: --max-connections applies only to remote ACP (--listen http:ENDPOINT)\n"
    )


def test_the_limits_reach_the_remote_endpoint(tmp_path: Path) -> None:
    """The values given are the served endpoint's RemoteLimits (the others keep their defaults)."""
    options = _options(
        tmp_path,
        "--listen",
        "http:tcp:0",
        "--max-connections",
        "7",
        "--max-message-size",
        "4096",
    )
    service = makeService(options)
    assert isinstance(service, AgentService)
    service.startService()
    try:
        assert service.port is not None
        site: Any = service.port.factory
        assert site.acp.limits.max_connections == 7
        assert site.acp.limits.max_message_size == 4096
        assert site.max_body == 4096
        assert site.acp.limits.grace_period == 60.0
    finally:
        service.stopService()


def _post_initialize(url: str, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Accept": "application/json", **headers},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.process
def test_bob_with_max_connections_1_answers_a_second_initialize_503(tmp_path: Path) -> None:
    """End to end: bob --max-connections 1 serves one connection; a second initialize is 503."""
    bob = start_bob(tmp_path, "--listen", "http:tcp:0", "--max-connections", "1")
    try:
        assert bob.token is not None, bob.stderr()
        status, answer = _post_initialize(bob.url, bob.headers())
        assert status == 200 and "result" in answer
        status, answer = _post_initialize(bob.url, bob.headers())
        assert status == 503
        assert answer["error"]["message"] == "too many open connections (1)"
    finally:
        bob.stop()


# -- --tls-client-ca ------------------------------------------------------------------------


def _ssl_listen(tmp_path: Path, interface: str = "127.0.0.1") -> tuple[str, Path]:
    """An http:ssl: --listen value with a server certificate, and the CA file."""
    from tests.tls_certificates import make_authority

    ca = make_authority(tmp_path / "certs")
    server = ca.issue("localhost", server=True)
    listen = (
        f"http:ssl:0:interface={interface}:privateKey={server.key}:certKey={server.certificate}"
    )
    return listen, ca.certificate_file


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "cannot read the CA file {path}: No such file or directory"),
        ("", "the CA file {path} holds no PEM certificate"),
        ("name = 'not a certificate'\n", "the CA file {path} holds no PEM certificate"),
    ],
    ids=["missing", "empty", "not PEM"],
)
def test_a_bad_tls_client_ca_exits_1_with_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], content: str | None, why: str
) -> None:
    """--tls-client-ca FILE missing, empty or not PEM: exit 1, one line naming option and file."""
    listen, _ca = _ssl_listen(tmp_path)
    path = tmp_path / "ca.pem"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as caught:
        makeService(_options(tmp_path, "--listen", listen, "--tls-client-ca", str(path)))
    assert caught.value.code == 1
    out, err = capfd.readouterr()
    assert out == ""
    assert err == f"acp-agent: --tls-client-ca {path}: {why.format(path=path)}\n"


def test_tls_client_ca_without_listen_exits_1(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """--tls-client-ca on stdio (no listener to authenticate on): exit 1, one line."""
    _listen, ca = _ssl_listen(tmp_path)
    with pytest.raises(SystemExit) as caught:
        makeService(_options(tmp_path, "--tls-client-ca", str(ca)))
    assert caught.value.code == 1
    _, err = capfd.readouterr()
    assert err == "acp-agent: --tls-client-ca applies only with --listen (an ssl: endpoint)\n"


def test_tls_client_ca_with_a_raw_tcp_listen_exits_1(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """--listen tcp:0 --tls-client-ca (raw NDJSON, no TLS): exit 1 saying only TLS
    carries client certificates."""
    _listen, ca = _ssl_listen(tmp_path)
    with pytest.raises(SystemExit) as caught:
        makeService(_options(tmp_path, "--listen", "tcp:0", "--tls-client-ca", str(ca)))
    assert caught.value.code == 1
    _, err = capfd.readouterr()
    assert err == (
        "acp-agent: --listen tcp:0: TLS client authentication needs an ssl: endpoint,"
        " not tcp: (only TLS carries client certificates)\n"
    )


def test_tls_client_ca_with_a_plain_tcp_listen_exits_1(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """--listen http:tcp:... --tls-client-ca: exit 1 saying only TLS carries certificates."""
    _listen, ca = _ssl_listen(tmp_path)
    with pytest.raises(SystemExit) as caught:
        makeService(_options(tmp_path, "--listen", "http:tcp:0", "--tls-client-ca", str(ca)))
    assert caught.value.code == 1
    _, err = capfd.readouterr()
    assert err == (
        "acp-agent: --listen http:tcp:0: TLS client authentication needs an ssl: endpoint,"
        " not tcp: (only TLS carries client certificates)\n"
    )


def test_tls_client_ca_allows_a_non_loopback_interface(tmp_path: Path) -> None:
    """Beyond loopback with --tls-client-ca and no token: bob listens, requiring client
    certificates (tests/remote/test_remote_client_auth.py shows the handshakes), and the service
    knows which authentication to announce."""
    listen, ca = _ssl_listen(tmp_path, "0.0.0.0")
    service = makeService(_options(tmp_path, "--listen", listen, "--tls-client-ca", str(ca)))
    assert isinstance(service, AgentService)
    service.startService()
    try:
        assert service.port is not None
        assert service.port.getHost().host == "0.0.0.0"
        assert service.authentication == (
            f"authentication: a TLS client certificate signed by a CA in {ca}"
        )
    finally:
        service.stopService()


def test_beyond_loopback_without_token_or_client_ca_names_both(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Neither --token-file nor --tls-client-ca beyond loopback: exit 1 naming both."""
    listen, _ca = _ssl_listen(tmp_path, "0.0.0.0")
    with pytest.raises(SystemExit):
        makeService(_options(tmp_path, "--listen", listen))
    _, err = capfd.readouterr()
    assert "not loopback" in err and "--token-file" in err and "--tls-client-ca" in err


# -- --request-timeout -----------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "-3", "soon", "nan", "inf", ""])
def test_a_request_timeout_that_is_not_a_positive_number_exits_1_with_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], value: str
) -> None:
    """--request-timeout must be a positive, finite number of seconds: else exit 1, one line."""
    with pytest.raises(SystemExit) as caught:
        makeService(_options(tmp_path, "--listen", "http:tcp:0", "--request-timeout", value))
    assert caught.value.code == 1
    out, err = capfd.readouterr()
    assert out == ""
    assert err == f"acp-agent: --request-timeout {value}: not a positive number of seconds\n"


def test_a_request_timeout_on_stdio_exits_1_with_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """--request-timeout bounds listeners' connections: on stdio, exit 1, one line."""
    with pytest.raises(SystemExit) as caught:
        makeService(_options(tmp_path, "--request-timeout", "5"))
    assert caught.value.code == 1
    _, err = capfd.readouterr()
    assert err == "acp-agent: --request-timeout applies only with --listen\n"


@pytest.mark.parametrize("extra", [(), ("--max-connections", "7")])
def test_the_request_timeout_reaches_the_remote_admission_table(
    tmp_path: Path, extra: tuple[str, ...]
) -> None:
    """--request-timeout 2.5 is the remote listener's pending and head deadlines (the
    other admission limits, and the other remote limits given, are kept)."""
    options = _options(tmp_path, "--listen", "http:tcp:0", "--request-timeout", "2.5", *extra)
    service = makeService(options)
    assert isinstance(service, AgentService)
    service.startService()
    try:
        assert service.port is not None
        site: Any = service.port.factory
        limits = site.admission.limits
        assert (limits.pending_timeout, limits.head_timeout) == (2.5, 2.5)
        assert limits.body_timeout == 30.0 and limits.max_pending == 256
        assert site.acp.limits.max_connections == (7 if extra else 100)
    finally:
        service.stopService()


def test_the_request_timeout_reaches_the_raw_admission_table(tmp_path: Path) -> None:
    """--request-timeout 3 is a raw NDJSON listener's pending deadline (its first line)."""
    options = _options(tmp_path, "--listen", "tcp:0", "--no-token", "--request-timeout", "3")
    service = makeService(options)
    assert isinstance(service, AgentService)
    service.startService()
    try:
        assert service.port is not None
        factory: Any = service.port.factory
        assert factory.admission.limits.pending_timeout == 3.0
        assert factory.admission.limits.head_timeout == 3.0
    finally:
        service.stopService()
