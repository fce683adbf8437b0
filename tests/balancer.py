"""
Several real bobs behind a real HAProxy on loopback, for the load-balancer tests and
benchmark: the bobs share a token file and a project (so a sessions directory), each
listens on ``http:haproxy:tcp:0`` (the PROXY protocol) and writes its log as JSON too
(:mod:`tests.lb_logger`); HAProxy runs the documented configuration
(``docs/how-to/haproxy.cfg``), its frontend on a loopback socket bound to port 0 here
and handed over (``ACP_FRONTEND=fd@N``).

HAProxy is the Debian package's (``/usr/sbin/haproxy``); without it the tests are
skipped, unless ``ACPKIT_HAPROXY_REQUIRED`` is set (CI installs it): then they fail.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests.lb_logger import JSON_LOG
from tests.listening_bob import ROOT, ListeningBob, start_bob

#: The configuration the how-to documents, used as it is.
HAPROXY_CONFIG = ROOT / "docs" / "how-to" / "haproxy.cfg"
#: bob's configuration behind the balancer: sessions saved (in the project).
BOB_CONFIG = "[sessions]\nenabled = true\n"


def haproxy_binary() -> str:
    """HAProxy's path; skips the test without it (fails when CI requires it)."""
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")
    if found is None:
        if os.environ.get("ACPKIT_HAPROXY_REQUIRED"):
            pytest.fail("HAProxy is required (ACPKIT_HAPROXY_REQUIRED) but not installed")
        pytest.skip("HAProxy is not installed (apt-get install haproxy)")
    return found


def config_for(bobs: int) -> str:
    """The documented configuration with only its first ``bobs`` server lines."""
    text = HAPROXY_CONFIG.read_text(encoding="utf-8")
    kept = []
    for line in text.splitlines():
        server = re.match(r"\s*server bob(\d+) ", line)
        if server is None or int(server.group(1)) <= bobs:
            kept.append(line)
    return "\n".join(kept) + "\n"


def write_token(path: Path) -> str:
    """A new bearer token in ``path`` (0600), the file every bob reads."""
    token = secrets.token_urlsafe(32)
    path.write_text(token + "\n", encoding="ascii")
    path.chmod(0o600)
    return token


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``predicate`` (blocking) until true; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


@attrs.define(eq=False)
class Balancer:
    """A running HAProxy: its process, frontend port and stderr lines."""

    process: subprocess.Popen[str]
    port: int
    lines: list[str] = attrs.Factory(list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/acp"

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)

    def stderr(self) -> str:
        return "".join(self.lines)

    def health(self) -> int:
        """The status of GET /healthz through the balancer (0: no answer)."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.port}/healthz", timeout=5
            ) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as error:
            return int(error.code)
        except OSError:
            return 0

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM (HAProxy's hard stop), then SIGKILL; the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        return self.process.returncode


def start_haproxy(
    workdir: Path, bob_addresses: list[str], *, config: str | None = None
) -> Balancer:
    """
    HAProxy with the documented configuration (or ``config``'s text), the bobs at
    ``bob_addresses`` (``host:port``), its frontend on a loopback port bound here.
    """
    binary = haproxy_binary()
    path = HAPROXY_CONFIG
    if config is not None:
        path = workdir / "haproxy.cfg"
        path.write_text(config, encoding="utf-8")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    env = {**os.environ, "ACP_FRONTEND": f"fd@{listener.fileno()}"}
    for number, address in enumerate(bob_addresses, start=1):
        env[f"ACP_BOB{number}"] = address
    try:
        process = subprocess.Popen(
            [binary, "-db", "-f", str(path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            pass_fds=[listener.fileno()],
            start_new_session=True,
        )
    finally:
        listener.close()
    balancer = Balancer(process, port)
    threading.Thread(target=balancer._read, daemon=True).start()
    return balancer


def start_bob_behind(tmp: Path, name: str, token_file: Path, *args: str) -> ListeningBob:
    """
    A bob for the balancer (``http:haproxy:tcp:0``, the shared token file, sessions on),
    its files in ``tmp/name``, its JSON log ``tmp/name/log.jsonl``.
    """
    home = tmp / name
    home.mkdir()
    return start_bob(
        home,
        "--listen",
        "http:haproxy:tcp:0",
        "--token-file",
        str(token_file),
        *args,
        config=BOB_CONFIG,
        twistd=("--logger", "tests.lb_logger.observer"),
        env={JSON_LOG: str(home / "log.jsonl"), "PYTHONPATH": str(ROOT)},
    )


def json_events(bob_home: Path) -> list[dict[str, Any]]:
    """Every event of a bob's JSON log, in order (a half-written last line is left out)."""
    events = []
    path = bob_home / "log.jsonl"
    if not path.exists():
        return []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def all_healthy(balancer: Balancer, timeout: float = 60) -> None:
    """Until the balancer's health check (through to a bob) answers 200 five times in a row."""
    streak = 0

    def healthy() -> bool:
        nonlocal streak
        streak = streak + 1 if balancer.health() == 200 else 0
        if balancer.process.poll() is not None:
            raise AssertionError(f"HAProxy exited:\n{balancer.stderr()}")
        return streak >= 5

    wait_for(healthy, timeout, "the balancer to reach its bobs")
