"""
The HAProxy configuration the how-to documents (docs/how-to/haproxy.cfg) is the one
CI runs: the page includes the file itself, every directive the page explains is in it,
and HAProxy accepts it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.balancer import HAPROXY_CONFIG, config_for, haproxy_binary
from tests.listening_bob import ROOT

PAGE = ROOT / "docs" / "how-to" / "deploy-behind-a-load-balancer.md"


def test_the_page_includes_the_configuration_file() -> None:
    """The recipe shows the tested file, not a copy that could drift from it."""
    page = PAGE.read_text(encoding="utf-8")
    assert "```{literalinclude} haproxy.cfg" in page
    assert "server bob" not in page.split("```{literalinclude} haproxy.cfg", 1)[0]


@pytest.mark.parametrize(
    "directive",
    [
        "cookie ACPSRV insert indirect nocache",
        "option http-no-delay",
        "option persist",
        "option httpchk",
        "GET /healthz",
        "retry-on conn-failure 503",
        "option redispatch 1",
        "retries 3",
        "balance leastconn",
        "send-proxy-v2",
        "timeout tunnel 1h",
    ],
)
def test_every_directive_the_page_explains_is_in_the_file(directive: str) -> None:
    """What the page's table explains is what the file says (word for word)."""
    page = PAGE.read_text(encoding="utf-8")
    config = " ".join(HAPROXY_CONFIG.read_text(encoding="utf-8").split())
    assert f"`{directive}" in page, directive
    if directive == "GET /healthz":
        directive = "http-check send meth GET uri /healthz"
    assert directive in config, directive


def test_no_retry_of_what_a_bob_may_have_handled() -> None:
    """The file retries only what never reached a bob (no empty-response, no 502)."""
    (line,) = [
        line
        for line in HAPROXY_CONFIG.read_text(encoding="utf-8").splitlines()
        if line.strip().startswith("retry-on")
    ]
    assert line.split()[1:] == ["conn-failure", "503"]


def test_config_for_keeps_the_first_servers() -> None:
    """The benchmark's variants drop the server lines beyond the count, nothing else."""
    one = config_for(1)
    assert "server bob1 " in one and "server bob2 " not in one and "server bob3 " not in one
    assert one.count("\n") == HAPROXY_CONFIG.read_text(encoding="utf-8").count("\n") - 2


@pytest.mark.process
def test_haproxy_accepts_the_configuration() -> None:
    """``haproxy -c`` (the Debian package's, 2.6) finds the file valid."""
    binary = haproxy_binary()
    env = {
        **os.environ,
        "ACP_FRONTEND": "127.0.0.1:18080",
        "ACP_BOB1": "127.0.0.1:18801",
        "ACP_BOB2": "127.0.0.1:18802",
        "ACP_BOB3": "127.0.0.1:18803",
    }
    checked = subprocess.run(
        [binary, "-c", "-f", str(HAPROXY_CONFIG)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Configuration file is valid" in checked.stdout + checked.stderr


@pytest.mark.process
def test_a_proxy_protocol_listener_wants_the_header(tmp_path: Path) -> None:
    """
    bob on ``http:haproxy:tcp:0``: on loopback, with a token it made (as for
    ``tcp:0``); a connection that starts without a PROXY header is closed unanswered,
    one that starts with it (v1 here) is served: ``GET /healthz`` answers 200.
    """
    import socket

    from tests.listening_bob import start_bob

    bob = start_bob(tmp_path, "--listen", "http:haproxy:tcp:0")
    try:
        assert bob.port is not None and bob.token is not None, bob.stderr()
        assert "host='127.0.0.1'" in bob.stderr()
        request = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"

        def exchange(data: bytes) -> bytes:
            with socket.create_connection(("127.0.0.1", bob.port), timeout=30) as sock:
                sock.sendall(data)
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
                return answer

        assert exchange(request) == b""
        header = b"PROXY TCP4 203.0.113.7 127.0.0.1 40000 8080\r\n"
        assert exchange(header + request).startswith(b"HTTP/1.1 200 ")
    finally:
        bob.stop()
