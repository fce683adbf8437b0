"""
The HAProxy configuration the how-to documents (docs/how-to/haproxy.cfg) is the one
CI runs: the page includes the file itself, every directive the page explains is in it,
and HAProxy accepts it.
"""

from __future__ import annotations

import os
import subprocess

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
