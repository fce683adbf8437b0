"""
What one idle remote connection holds in a server's Python heap, and where it was made.

A minimal acpkit agent (``remote_acpkit_echo.py``) serves on loopback in this process,
under :mod:`tracemalloc`; a child process opens one WebSocket connection to ``/acp`` (so
that what the first connection imports is not counted), then ``--n`` more, and holds them
open without sending anything.  Between the two, this process takes a snapshot of its
heap; once the ``--n`` connections are open, another.  Printed: the heap grown per
connection (bytes), then the ``--top`` lines of code whose allocations grew most, per
connection.

Run: ``python benchmarks/profile_connection_memory.py [--n 200] [--top 15]``; compare two
trees with ``PYTHONPATH=<other tree>`` (the first line says which ``acpkit``).
"""

from __future__ import annotations

import argparse
import gc
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent

#: The child: opens connections on a signal line from stdin, reports on stdout.
CLIENT = r"""
import base64, os, socket, sys
port, path = int(sys.argv[1]), sys.argv[2]
held = []

def websocket():
    s = socket.create_connection(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
               "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(4096)
    assert head.startswith(b"HTTP/1.1 101"), head[:200]
    held.append(s)

for line in sys.stdin:
    for _ in range(int(line)):
        websocket()
    print("opened", len(held), flush=True)
"""


def heap_per_connection(n: int, top: int) -> None:
    tracemalloc.start(1)
    sys.path.insert(0, str(HERE))
    # Imported after tracemalloc starts, so that their allocations are traced too.
    import remote_acpkit_echo as echo  # type: ignore[import-not-found]
    from twisted.internet import reactor
    from twisted.internet.threads import deferToThread

    import acpkit
    from acpkit.remote import RemoteLimits, serve_remote

    print(f"acpkit from {Path(acpkit.__file__).parent.parent}")
    r: Any = reactor

    def listening(port: Any) -> Any:
        child = subprocess.Popen(
            [sys.executable, "-c", CLIENT, str(port.getHost().port), "/acp"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert child.stdin is not None and child.stdout is not None

        def ask(count: int) -> str:
            assert child.stdin is not None and child.stdout is not None
            child.stdin.write(f"{count}\n")
            child.stdin.flush()
            return child.stdout.readline()

        async def run() -> None:
            await deferToThread(ask, 1)
            gc.collect()
            before = tracemalloc.take_snapshot()
            await deferToThread(ask, n)
            gc.collect()
            after = tracemalloc.take_snapshot()
            stats = after.compare_to(before, "lineno")
            print(
                f"heap per idle WebSocket connection: {sum(s.size_diff for s in stats) / n:.0f} B"
            )
            for stat in stats[:top]:
                frame = stat.traceback[0]
                print(
                    f"{stat.size_diff / n:8.0f} B {stat.count_diff / n:5.1f} objects  "
                    f"{frame.filename}:{frame.lineno}"
                )

        from twisted.internet.defer import ensureDeferred

        def done(result: object) -> object:
            child.kill()
            child.wait()
            r.stop()
            return result

        return ensureDeferred(run()).addBoth(done)

    limits = RemoteLimits(max_connections=n + 10)
    serve_remote(r, "tcp:0", echo.EchoAgent, no_token=True, limits=limits).addCallback(listening)
    r.run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    heap_per_connection(args.n, args.top)


if __name__ == "__main__":
    main()
