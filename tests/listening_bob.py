"""
A real bob listening on a socket (``twistd -n acp-agent --listen ...``), for the tests
that talk to it as a client or attack it: its port, the token it made or read, its
stderr lines (read by a thread, so that bob never blocks on a full pipe).

``start_bob(tmp_path, "--listen", "http:tcp:0")`` gives a :class:`ListeningBob` once bob
said where it listens; ``XDG_RUNTIME_DIR`` points into ``tmp_path`` so that the token bob
makes never lands in the real home.  ``stop()`` ends it (SIGTERM, which drains, SIGTERM
again, then SIGKILL).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import attrs

ROOT = Path(__file__).parent.parent
TWISTD = ["-c", "from twisted.scripts.twistd import run; run()", "-n"]

_LISTENING = re.compile(r"listening on .*?(?:port=(\d+)|name='?([^')]+)|UNIXAddress\('([^']+)'\))")
_TOKEN = re.compile(r"wrote it to (.+?) \(readable by you only\): (\S+)")


@attrs.define(eq=False)
class ListeningBob:
    """A running bob: its process, port (None on a unix socket), token and stderr."""

    process: subprocess.Popen[str]
    runtime_dir: Path
    lines: list[str] = attrs.Factory(list)
    port: int | None = None
    token: str | None = None
    token_path: Path | None = None
    _ready: threading.Event = attrs.Factory(threading.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/acp"

    def headers(self) -> dict[str, str]:
        """The Authorization header to send (empty without a token)."""
        return {} if self.token is None else {"Authorization": f"Bearer {self.token}"}

    def stderr(self) -> str:
        return "".join(self.lines)

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            token = _TOKEN.search(line)
            if token is not None:
                self.token_path, self.token = Path(token.group(1)), token.group(2)
            listening = _LISTENING.search(line)
            if listening is not None and listening.group(1):
                self.port = int(listening.group(1))
            if listening is not None:
                self._ready.set()
        self._ready.set()

    def wait_said(self, timeout: float) -> bool:
        """Until bob said where it listens or ended (at most ``timeout`` s): whether it did."""
        return self._ready.wait(timeout)

    def stop(self, timeout: float = 30, drain: float = 2) -> int:
        """
        SIGTERM (bob drains: its running turns may finish), SIGTERM again after ``drain``
        seconds (bob exits now, running turns cancelled), then SIGKILL after ``timeout``;
        the exit status.
        """
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(drain)
            except subprocess.TimeoutExpired:
                self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        return self.process.returncode


def start_bob(
    tmp_path: Path,
    *args: str,
    config: str = "",
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
    ready: bool = True,
    preexec: Callable[[], None] | None = None,
    twistd: Sequence[str] = (),
) -> ListeningBob:
    """
    Start ``twistd -n TWISTD acp-agent --engine echo ARGS`` with ``config`` as its
    configuration; with ``ready``, wait (at most ``timeout`` s) until it says where it
    listens.  ``preexec`` runs in the child before bob (a descriptor limit, a umask);
    ``twistd``: twistd's own options (``--logger``...).
    """
    config_file = tmp_path / "agent.toml"
    config_file.write_text(config, encoding="utf-8")
    runtime_dir = tmp_path / "run"
    runtime_dir.mkdir(mode=0o700, exist_ok=True)
    environment = {**os.environ, "XDG_RUNTIME_DIR": str(runtime_dir), **(env or {})}
    process = subprocess.Popen(
        [
            sys.executable,
            *TWISTD,
            *twistd,
            "acp-agent",
            "--config",
            str(config_file),
            "--engine",
            "echo",
            *args,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=environment,
        preexec_fn=preexec,
    )
    bob = ListeningBob(process, runtime_dir)
    threading.Thread(target=bob._read, daemon=True).start()
    if ready and not bob._ready.wait(timeout):
        bob.stop()
        raise AssertionError(f"bob did not say where it listens:\n{bob.stderr()}")
    if ready and process.poll() is not None and not bob.port:
        raise AssertionError(f"bob exited {process.returncode}:\n{bob.stderr()}")
    return bob


def wait_exit(bob: ListeningBob, timeout: float = 60) -> int:
    """Bob's exit status once it exited by itself (at most ``timeout`` s)."""
    return bob.process.wait(timeout)
