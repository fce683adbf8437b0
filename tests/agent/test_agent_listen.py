"""
``twistd acp-agent --listen``: a bad endpoint string and a port that cannot be had exit
non-zero with one line (no traceback, no agent that keeps running and serves nothing).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred

from acpkit_agent.config import AgentConfig
from acpkit_agent.tap import AgentService, Options, build_runtime, makeService

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TWISTD = ["-c", "from twisted.scripts.twistd import run; run()", "-n", "acp-agent"]


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback TCP port someone already listens on."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def _options(tmp_path: Path, *args: str) -> Options:
    config = tmp_path / "agent.toml"
    config.write_text("", encoding="utf-8")
    options = Options()
    options.parseOptions(["--config", str(config), *args])
    return options


@pytest.mark.parametrize(
    ("listen", "words"),
    [
        ("bogus:1", "not a server endpoint string (Unknown endpoint type: 'bogus')"),
        ("tcp:notaport", "not a server endpoint string"),
        ("tcp:99999", "cannot listen"),
    ],
)
def test_bad_endpoint_string_exits_1_with_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], listen: str, words: str
) -> None:
    """A --listen value that is no server endpoint string: exit 1, one line, no traceback."""
    with pytest.raises(SystemExit) as caught:
        makeService(_options(tmp_path, "--listen", listen, "--no-token"))
    assert caught.value.code == 1
    out, err = capfd.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith(f"acp-agent: --listen {listen}: ")
    assert words in err and "Traceback" not in err


def test_busy_port_exits_1_with_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], busy_port: int
) -> None:
    """--listen on a port in use: makeService exits 1 with one line naming the port."""
    listen = f"tcp:{busy_port}:interface=127.0.0.1"
    with pytest.raises(SystemExit) as caught:
        makeService(_options(tmp_path, "--listen", listen, "--no-token"))
    assert caught.value.code == 1
    _, err = capfd.readouterr()
    assert err.count("\n") == 1
    assert err.startswith(f"acp-agent: --listen {listen}: cannot listen: ")
    assert "Address already in use" in err


def test_free_port_is_listened_on_by_make_service(tmp_path: Path) -> None:
    """A port that can be had is bound by makeService; the service reports it when started."""
    listen = "tcp:0:interface=127.0.0.1"
    service = makeService(_options(tmp_path, "--listen", listen, "--no-token"))
    assert isinstance(service, AgentService)
    service.startService()
    try:
        assert service.port is not None and service.port.getHost().port > 0
    finally:
        service.stopService()


class _StoppedReactor:
    """Just what AgentService needs to report a late listening failure."""

    running = False

    def __init__(self) -> None:
        self.when_running: list[Any] = []

    def callWhenRunning(self, fn: Any) -> None:
        self.when_running.append(fn)

    def stop(self) -> None:
        raise AssertionError("not running")


def test_late_listening_failure_sets_a_non_zero_exit_status() -> None:
    """An endpoint that fails after startService: exit status 1, the reactor is stopped."""
    from twisted.internet.task import Clock

    reactor = _StoppedReactor()
    runtime = build_runtime(AgentConfig(), Clock())
    pending: Deferred[Any] = Deferred()
    service = AgentService(runtime, "later:1", reactor, listening=pending)
    service.startService()
    assert service.exit_status == 0
    pending.errback(OSError("no such thing"))
    assert service.exit_status == 1
    assert reactor.when_running == [reactor.stop]


@pytest.mark.process
def test_twistd_on_a_busy_port_exits_1_with_one_line(tmp_path: Path, busy_port: int) -> None:
    """End to end: twistd -n acp-agent --listen on a busy port exits 1, one stderr line."""
    proc = subprocess.run(
        [sys.executable, *TWISTD, "--listen", f"tcp:{busy_port}:interface=127.0.0.1", "--no-token"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": ROOT, "HOME": str(tmp_path)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stdout == b""
    lines = proc.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert "Address already in use" in lines[0]


@pytest.mark.process
def test_twistd_with_a_bad_endpoint_exits_1_with_one_line(tmp_path: Path) -> None:
    """End to end: an unknown endpoint type prints one line, no traceback, exit 1."""
    proc = subprocess.run(
        [sys.executable, *TWISTD, "--listen", "bogus:1"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": ROOT, "HOME": str(tmp_path)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.decode().splitlines() == [
        "acp-agent: --listen bogus:1: not a server endpoint string (Unknown endpoint type: 'bogus')"
    ]
