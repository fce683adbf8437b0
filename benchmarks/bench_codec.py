"""Codec micro-benchmark: acpkit vs the json floor vs the official Python SDK (``acp``).

Run from the repository root::

    python -m benchmarks.bench_codec [--quick]

Prints microseconds per message for three cases, with ratios:

1. decode a ``session/update`` line with an ``agent_message_chunk`` (JSON text -> model);
2. encode that notification (model -> JSON line);
3. decode a ``session/prompt`` request with text, resource_link and embedded resource blocks;

then the ``python -X importtime`` totals of ``import acpkit.codec`` and ``import acp``.
The acpkit and SDK figures include the ``json.loads`` / ``json.dumps`` they need, and the
envelope (``jsonrpc``/``method``/``params``) is handled the same way for all three.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

from acpkit import schema
from acpkit.codec import decode, encode

ROOT = Path(__file__).resolve().parent.parent

UPDATE_LINE = json.dumps(
    {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {
            "sessionId": "20260916-101530-4f2a9c1e",
            "update": {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": "Hello! I'll look at the failing test first."},
            },
        },
    },
    separators=(",", ":"),
)

PROMPT_LINE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "session/prompt",
        "params": {
            "sessionId": "20260916-101530-4f2a9c1e",
            "prompt": [
                {"type": "text", "text": "Why does @src/app.py fail on import?"},
                {
                    "type": "resource_link",
                    "uri": "file:///home/me/project/src/app.py",
                    "name": "app.py",
                    "mimeType": "text/x-python",
                },
                {
                    "type": "resource",
                    "resource": {
                        "uri": "file:///home/me/project/README.md",
                        "mimeType": "text/markdown",
                        "text": "# Project\n\nRun `make test`.\n",
                    },
                },
            ],
        },
    },
    separators=(",", ":"),
)

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def per_call_us(fns: list[Callable[[], Any]], quick: bool) -> list[float]:
    """Best microseconds per call of each function, measured interleaved (the machine is
    shared: interleaving exposes every function to the same background load)."""
    number = 2_000 if quick else 10_000
    best = [float("inf")] * len(fns)
    for _ in range(3 if quick else 15):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], timeit.timeit(fn, number=number) / number * 1e6)
    return best


def import_time_us(module: str) -> int:
    """Cumulative ``-X importtime`` microseconds of importing *module* in a fresh interpreter."""
    best = None
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", f"import {module}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        last = [ln for ln in done.stderr.splitlines() if re.search(rf"\|\s*{module}$", ln)]
        total = int(last[-1].split("|")[1])
        best = total if best is None else min(best, total)
    assert best is not None
    return best


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print a table."""
    parser = argparse.ArgumentParser(description="acpkit codec benchmark")
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    args = parser.parse_args(argv)
    quick = args.quick

    import acp.schema as sdk  # the official SDK (agent-client-protocol)

    update_obj = json.loads(UPDATE_LINE)
    notification = decode(schema.SessionNotification, update_obj["params"])
    sdk_notification = sdk.SessionNotification.model_validate(update_obj["params"])

    def acp_encode() -> str:
        msg = {"jsonrpc": "2.0", "method": "session/update", "params": encode(notification)}
        return _dumps(msg)

    def sdk_encode() -> str:
        params = sdk_notification.model_dump(by_alias=True, exclude_none=True)
        return _dumps({"jsonrpc": "2.0", "method": "session/update", "params": params})

    assert json.loads(acp_encode()) == json.loads(sdk_encode()) == update_obj
    floor_obj = json.loads(UPDATE_LINE)

    cases = [
        (
            "decode session/update agent_message_chunk",
            lambda: json.loads(UPDATE_LINE),
            lambda: decode(schema.SessionNotification, json.loads(UPDATE_LINE)["params"]),
            lambda: sdk.SessionNotification.model_validate(json.loads(UPDATE_LINE)["params"]),
        ),
        (
            "encode session/update agent_message_chunk",
            lambda: _dumps(floor_obj),
            acp_encode,
            sdk_encode,
        ),
        (
            "decode session/prompt (text, link, resource)",
            lambda: json.loads(PROMPT_LINE),
            lambda: decode(schema.PromptRequest, json.loads(PROMPT_LINE)["params"]),
            lambda: sdk.PromptRequest.model_validate(json.loads(PROMPT_LINE)["params"]),
        ),
    ]
    print(f"{'case':<46} {'json':>8} {'acpkit':>8} {'sdk':>8} {'acp/json':>9} {'sdk/acp':>8}")
    for name, floor, ours, theirs in cases:
        f, o, t = per_call_us([floor, ours, theirs], quick)
        print(f"{name:<46} {f:>7.2f}u {o:>7.2f}u {t:>7.2f}u {o / f:>8.2f}x {t / o:>7.2f}x")
    ours_import = import_time_us("acpkit.codec")
    sdk_import = import_time_us("acp")
    print(
        f"import time: acpkit.codec {ours_import / 1000:.1f} ms, acp {sdk_import / 1000:.1f} ms"
        f" ({sdk_import / ours_import:.2f}x)"
    )


if __name__ == "__main__":
    main()
