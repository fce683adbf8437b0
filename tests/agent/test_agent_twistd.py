"""
bob under the real ``twistd`` and ``twist`` runners: stdout carries only ACP frames under
both, ``twistd`` without ``-n`` refuses to daemonize an agent on stdio, and with
``--listen`` it daemonizes and says where its log and pid file are.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

import pytest
from twisted.trial.unittest import TestCase

from tests.agent.test_agent_process import ENV, INIT, frames, process_gone
from tests.helpers import wait_until

pytestmark = pytest.mark.process

TWISTD = [sys.executable, "-c", "from twisted.scripts.twistd import run; run()"]
TWIST = [sys.executable, "-c", "from twisted.application.twist._twist import Twist; Twist.main()"]


class RunnerTests(TestCase):
    """Real ``twistd``/``twist`` processes in a fresh directory."""

    timeout = 60

    def setUp(self) -> None:
        self.cwd = os.path.realpath(tempfile.mkdtemp(prefix="bob-twistd-"))
        self.home = tempfile.mkdtemp(prefix="bob-twistd-home-")
        self.addCleanup(shutil.rmtree, self.cwd, True)
        self.addCleanup(shutil.rmtree, self.home, True)

    def run_agent(self, argv: list[str], stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            argv,
            cwd=self.cwd,
            env={**os.environ, **ENV, "HOME": self.home},
            input=stdin,
            capture_output=True,
            timeout=60,
        )

    def session_new(self) -> dict[str, object]:
        return {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "session/new",
            "params": {"cwd": self.cwd, "mcpServers": []},
        }

    def assert_only_frames(self, stdout: bytes, count: int) -> None:
        """Every stdout line is a JSON-RPC frame, and there are ``count`` of them."""
        lines = stdout.decode().splitlines()
        decoded = [json.loads(line) for line in lines]
        assert all(m.get("jsonrpc") == "2.0" for m in decoded), lines
        assert len(decoded) == count, lines

    def test_twistd_without_n_refuses_on_stdio(self) -> None:
        """`twistd acp-agent` (no -n, stdio): exit 1, one line on stderr, nothing else."""
        proc = self.run_agent([*TWISTD, "acp-agent"], frames(INIT))
        assert proc.returncode == 1
        assert proc.stdout == b""
        lines = proc.stderr.decode().splitlines()
        assert lines == [
            "acp-agent: cannot run in the background on stdio: an ACP agent talks on its "
            "stdin/stdout; run twistd -n acp-agent (or give --listen ENDPOINT to serve "
            "sockets in the background)"
        ], lines
        assert os.listdir(self.cwd) == []

    async def test_twistd_without_n_listen_daemonizes_and_says_where(self) -> None:
        """`twistd acp-agent --listen unix:S` daemonizes, names its log and pid file, serves."""
        sock = os.path.join(self.cwd, "bob.sock")
        proc = self.run_agent([*TWISTD, "acp-agent", "--listen", f"unix:{sock}"])
        log = os.path.join(self.cwd, "twistd.log")
        pidfile = os.path.join(self.cwd, "twistd.pid")
        assert proc.returncode == 0, proc.stderr.decode()
        assert proc.stdout == b""
        assert proc.stderr.decode().splitlines() == [
            f"acp-agent: running in the background, serving unix:{sock}; "
            f"log: {log}; pid file: {pidfile}"
        ]
        with open(pidfile) as stream:
            pid = int(stream.read())
        self.addCleanup(self._kill, pid)
        with socket.socket(socket.AF_UNIX) as client:
            client.settimeout(30)
            client.connect(sock)
            client.sendall(frames(INIT))
            answer = client.makefile("rb").readline()
        assert json.loads(answer)["result"]["agentInfo"]["name"] == "bob"
        os.kill(pid, signal.SIGTERM)
        await wait_until(lambda: process_gone(pid))
        with open(log) as stream:
            assert "bob " in stream.read()

    @staticmethod
    def _kill(pid: int) -> None:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass

    def test_twist_stdout_is_frames_only(self) -> None:
        """`twist acp-agent`: stdout holds only the frames; the log is plain lines on stderr."""
        proc = self.run_agent([*TWIST, "acp-agent"], frames(INIT, self.session_new()))
        assert proc.returncode == 0, proc.stderr.decode()
        self.assert_only_frames(proc.stdout, 3)
        err = proc.stderr.decode()
        assert "bob " in err and "[acp] initialize: client" in err
        assert not err.lstrip().startswith("{"), err[:200]

    def test_twist_log_file_dash_still_keeps_stdout_for_frames(self) -> None:
        """`twist --log-file - acp-agent`: the log still goes to stderr, not among frames."""
        proc = self.run_agent([*TWIST, "--log-file", "-", "acp-agent"], frames(INIT))
        assert proc.returncode == 0, proc.stderr.decode()
        self.assert_only_frames(proc.stdout, 1)
        assert "[acp] initialize: client" in proc.stderr.decode()

    def test_twist_log_file_path_is_kept(self) -> None:
        """`twist --log-file PATH acp-agent`: the log goes to that file."""
        path = os.path.join(self.cwd, "bob.log")
        proc = self.run_agent([*TWIST, "--log-file", path, "acp-agent"], frames(INIT))
        assert proc.returncode == 0, proc.stderr.decode()
        self.assert_only_frames(proc.stdout, 1)
        with open(path) as stream:
            assert "[acp] initialize: client" in stream.read()
