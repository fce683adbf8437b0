"""
bob's memory when the client stops reading: a real ``twistd -n acp-agent`` process (echo
engine) is asked for an answer of ``--chunks`` streamed ``agent_message_chunk`` updates,
and its stdout is not read until its resident size has stopped changing.

Measured: the agent's peak resident set (``VmHWM``) before we read anything, its resident
size when it settled, how many bytes it had written into the pipe meanwhile, then (reading
everything) that every chunk arrived, in order, before the response, how long reading took
and the peak resident set at the end.  ``--settle 0`` reads at once (a client that keeps up).

Run: ``python benchmarks/bench_agent_backpressure.py [--chunks 160000]``.  It needs Linux
(``/proc``).  With back-pressure the agent stops at about one transport buffer (64 KiB)
past what the pipe holds; without it, it buffers the whole answer.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parent.parent
TWISTD = ["-c", "from twisted.scripts.twistd import run; run()", "-n", "acp-agent"]
#: The echo engine cuts its answer into chunks of at most 24 characters at word
#: boundaries: a word of 23 letters and a space is exactly one chunk.
WORD = "abcdefghijklmnopqrstuvw "


def status_kib(pid: int, field: str) -> int:
    """A ``/proc/<pid>/status`` field in KiB (``VmRSS``, ``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def send(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()


def read_until_response(proc: subprocess.Popen[bytes], request_id: int) -> list[dict[str, Any]]:
    assert proc.stdout is not None
    seen = []
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("the agent closed its output")
        message = json.loads(line)
        seen.append(message)
        if message.get("id") == request_id and "method" not in message:
            return seen


def pipe_bytes(fd: int) -> int:
    """Bytes waiting unread in a pipe (FIONREAD)."""
    import array
    import termios

    buf = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, buf)
    return int(buf[0])


def run(chunks: int, settle: float) -> dict[str, Any]:
    home = tempfile.mkdtemp(prefix="bob-home-")
    cwd = tempfile.mkdtemp(prefix="bob-cwd-")
    env = {**os.environ, "HOME": home, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, *TWISTD],
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        send(
            proc,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"protocolVersion": 1, "clientCapabilities": {}},
            },
        )
        read_until_response(proc, 1)
        send(
            proc,
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "session/new",
                "params": {"cwd": cwd, "mcpServers": []},
            },
        )
        session_id = read_until_response(proc, 2)[-1]["result"]["sessionId"]
        idle_kib = status_kib(proc.pid, "VmRSS")
        text = WORD * chunks
        send(
            proc,
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "session/prompt",
                "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]},
            },
        )
        # Not reading: wait until the agent's resident size stops changing.
        last, stable_since, started = -1, time.monotonic(), time.monotonic()
        while settle > 0 and time.monotonic() - stable_since < settle:
            rss = status_kib(proc.pid, "VmRSS")
            if rss != last:
                last, stable_since = rss, time.monotonic()
            time.sleep(0.1)
        settled_kib = last if last >= 0 else idle_kib
        peak_kib = status_kib(proc.pid, "VmHWM")
        assert proc.stdout is not None
        in_pipe = pipe_bytes(proc.stdout.fileno())
        # Read everything now.
        read_started = time.monotonic()
        messages = read_until_response(proc, 3)
        read_seconds = time.monotonic() - read_started
        peak_end_kib = status_kib(proc.pid, "VmHWM")
        texts = [
            m["params"]["update"]["content"]["text"]
            for m in messages
            if m.get("method") == "session/update"
            and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        ]
        expected = "Echo: " + text
        return {
            "chunks": chunks,
            "chunks_received": len(texts),
            "text_complete_in_order": "".join(texts) == expected,
            "stop_reason": messages[-1]["result"]["stopReason"],
            "idle_rss_mib": round(idle_kib / 1024, 1),
            "settled_rss_mib": round(settled_kib / 1024, 1),
            "peak_rss_mib": round(peak_kib / 1024, 1),
            "peak_over_idle_mib": round((peak_kib - idle_kib) / 1024, 1),
            "peak_rss_mib_after_reading": round(peak_end_kib / 1024, 1),
            "unread_in_pipe_kib": round(in_pipe / 1024, 1),
            "seconds_to_settle": round(stable_since - started, 1),
            "seconds_to_read_all": round(read_seconds, 1),
        }
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=160_000)
    parser.add_argument(
        "--settle",
        type=float,
        default=3.0,
        help="seconds without RSS change = settled (0: read at once, a client that keeps up)",
    )
    args = parser.parse_args()
    print(json.dumps(run(args.chunks, args.settle), indent=2))


if __name__ == "__main__":
    main()
