"""Keystroke-to-screen latency in a real terminal (tmux) while an agent streams code.

Run from the repository root (``tmux`` installed)::

    python -m benchmarks.bench_tui_tmux [--chunks 5000] [--rate 2000] [--keys 30]

The terminal UI runs in a detached tmux session (100 x 30) on a project whose agents
file names one agent, ``benchmarks/tui_stream_agent.py``: a prompt makes it stream
``--chunks`` chunks of a Python block at ``--rate`` a second.  Once the stream shows,
keys are typed one at a time (every 50 ms at most); each key's latency is from
``tmux send-keys`` until ``tmux capture-pane`` shows it (polled, so it includes a few
milliseconds of tmux itself).  The same is measured idle, after the stream, as the
floor.  Then ``--paste`` lines (10,000) are pasted (``tmux paste-buffer -p``: bracketed)
and timed until the last one shows, and keys are typed again.  Prints the median and the
spread of each.

``PYTHONPATH=OTHER-TREE`` runs another tree's UI (the agent and this driver come from
this one).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UI = "import sys; from acpkit_client.tui.app import main; sys.exit(main(sys.argv[1:]))"
TYPED = "QZXJ" * 50


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def _wait(session: str, condition: str, timeout: float = 60.0) -> float:
    """Poll the pane until ``condition`` is on it; the time it took."""
    started = time.perf_counter()
    while True:
        if condition in _tmux("capture-pane", "-p", "-t", session):
            return time.perf_counter() - started
        if time.perf_counter() - started > timeout:
            raise TimeoutError(
                f"{condition!r} not on screen:\n" + _tmux("capture-pane", "-p", "-t", session)
            )


def _wait_gone(session: str, text: str, timeout: float = 60.0) -> None:
    """Poll the pane until ``text`` is no longer on it."""
    started = time.perf_counter()
    while text in _tmux("capture-pane", "-p", "-t", session):
        if time.perf_counter() - started > timeout:
            raise TimeoutError(f"{text!r} still on screen")
        time.sleep(0.05)


def _type(session: str, count: int, typed: str) -> tuple[list[float], str]:
    latencies = []
    for _ in range(count):
        key = TYPED[len(typed)]
        typed += key
        started = time.perf_counter()
        _tmux("send-keys", "-t", session, "-l", key)
        _wait(session, typed[-8:], timeout=30.0)
        latencies.append(time.perf_counter() - started)
        time.sleep(max(0.0, 0.05 - latencies[-1]))
    return latencies, typed


def _paste(session: str, project: Path, lines: int) -> float:
    """Seconds from a bracketed paste of ``lines`` lines until its last line shows."""
    if not lines:
        return 0.0
    text = "\n".join(f"pasted line {n}: some words of a long paste" for n in range(lines))
    text += "\nEND-OF-PASTE"
    (project / "paste.txt").write_text(text, encoding="utf-8")
    _tmux("load-buffer", "-b", "bench", str(project / "paste.txt"))
    started = time.perf_counter()
    _tmux("paste-buffer", "-p", "-b", "bench", "-t", session)
    _wait(session, "END-OF-PASTE", timeout=300.0)
    return time.perf_counter() - started


def run(
    chunks: int, rate: float, keys: int, ui_path: str, paste_lines: int
) -> tuple[list[float], list[float], float, list[float]]:
    """Latencies while streaming, then idle; a paste's time; latencies after it."""
    project = Path(tempfile.mkdtemp(prefix="bench-tui-tmux-"))
    session = f"acpkit-bench-{os.getpid()}"
    try:
        (project / ".acpkit").mkdir()
        agent = ROOT / "benchmarks" / "tui_stream_agent.py"
        (project / ".acpkit" / "acp.toml").write_text(
            "[[agent]]\n"
            'name = "stream"\n'
            f"command = {str(sys.executable)!r}\n"
            f"args = [{str(agent)!r}, 'code', '{chunks}', '{rate}']\n"
            f"env = {{ PYTHONPATH = {str(ROOT)!r} }}\n",
            encoding="utf-8",
        )
        env = f"ACPKIT_DIR={project / 'none'} PYTHONPATH={ui_path} TERM=xterm-256color"
        command = f"cd {project} && env {env} {sys.executable} -c {UI!r}"
        _tmux("new-session", "-d", "-s", session, "-x", "100", "-y", "30", command)
        _wait(session, "No agent window is open")
        _tmux("send-keys", "-t", session, "M-a")
        _wait(session, "stream")
        _tmux("send-keys", "-t", session, "Enter")
        _wait(session, "1 stream")  # the window
        _wait_gone(session, "starting")  # the agent started and answered the handshake
        _wait_gone(session, "not started")
        _tmux("send-keys", "-t", session, "-l", "go")
        _tmux("send-keys", "-t", session, "Enter")
        _wait(session, "def handle_")  # streaming
        streaming, typed = _type(session, keys, "")
        idle_after = chunks / rate
        time.sleep(max(0.0, idle_after))
        idle, typed = _type(session, min(keys, 20), typed)
        pasted = _paste(session, project, paste_lines)
        after_paste, _ = _type(session, min(keys, 20), "END-OF-PASTE")
        return streaming, idle, pasted, after_paste
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        shutil.rmtree(project, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    """Run and print."""
    parser = argparse.ArgumentParser(description="acpkit TUI latency in tmux")
    parser.add_argument("--chunks", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=2000.0)
    parser.add_argument("--keys", type=int, default=30)
    parser.add_argument("--paste", type=int, default=10_000, help="lines pasted (0: none)")
    options = parser.parse_args(argv)
    ui_path = os.environ.get("PYTHONPATH", str(ROOT))
    streaming, idle, pasted, after_paste = run(
        options.chunks, options.rate, options.keys, ui_path, options.paste
    )
    if options.paste:
        print(f"a {options.paste:,}-line paste on screen: {pasted * 1000:.0f} ms")
    lists = [("while streaming", streaming), ("idle", idle)]
    if options.paste:
        lists.append((f"after the {options.paste:,}-line paste", after_paste))
    for name, values in lists:
        values_ms = [value * 1000 for value in values]
        print(
            f"key to screen {name}: median {statistics.median(values_ms):.0f} ms "
            f"({min(values_ms):.0f}-{max(values_ms):.0f}, {len(values_ms)} keys)"
        )


if __name__ == "__main__":
    main()
