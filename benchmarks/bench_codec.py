"""Codec micro-benchmark: acpkit vs the json floor, an earlier acpkit codec and the
official Python SDK (``acp``), in one run.

Run from the repository root::

    python -m benchmarks.bench_codec [--quick] [--baseline REV]

Prints microseconds per message for three cases, with ratios:

1. decode a ``session/update`` line with an ``agent_message_chunk`` (JSON text -> model);
2. encode that notification (model -> JSON line);
3. decode a ``session/prompt`` request with text, resource_link and embedded resource blocks;

then the ``python -X importtime`` totals of ``import acpkit.codec`` (and of the baseline's)
and ``import acp``.

Columns: ``json`` is the floor, ``json.loads`` / ``json.dumps`` alone of the same bytes or
dict; ``acpkit`` is this tree's codec end to end (``acpkit.codec.loads`` / ``dumps``, the
orjson layer, plus ``decode`` / ``encode``); ``base`` is the codec of git revision REV
(``--baseline``, extracted with ``git archive`` into a temporary directory and imported as
``acpkit_baseline_codec`` over this tree's models, with ``json`` as it was; omitted without
``--baseline``); ``sdk`` is ``json`` plus the SDK's pydantic models. The envelope
(``jsonrpc``/``method``/``params``) is handled the same way for all.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import timeit
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from acpkit import schema
from acpkit.codec import decode, dumps, encode, loads

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


def import_time_us(module: str, cache: Path, pythonpath: Path | None = None) -> int:
    """Cumulative ``-X importtime`` microseconds of importing *module* in a fresh
    interpreter (from *pythonpath* first when given), best of 5 after a warm-up run that
    writes the bytecode under *cache* (``PYTHONPYCACHEPREFIX``: the tree is not written),
    so that neither side pays for compiling its sources."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    best = None
    for attempt in range(6):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", f"import {module}"],
            cwd=pythonpath or ROOT,
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        if attempt == 0:
            continue
        last = [ln for ln in done.stderr.splitlines() if re.search(rf"\|\s*{module}$", ln)]
        total = int(last[-1].split("|")[1])
        best = total if best is None else min(best, total)
    assert best is not None
    return best


def extract_baseline(rev: str, into: Path) -> Path:
    """``git archive REV acpkit`` unpacked under *into*; returns the tree's root."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", rev, "acpkit"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def load_baseline_codec(tree: Path) -> ModuleType:
    """The baseline's ``acpkit/codec.py`` as module ``acpkit_baseline_codec`` (it imports
    this tree's ``acpkit.schema``, so both codecs decode the same classes)."""
    spec = importlib.util.spec_from_file_location(
        "acpkit_baseline_codec", tree / "acpkit" / "codec.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print a table."""
    parser = argparse.ArgumentParser(description="acpkit codec benchmark")
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    parser.add_argument("--baseline", metavar="REV", help="also time the codec of git REV")
    args = parser.parse_args(argv)
    quick = args.quick

    import acp.schema as sdk  # the official SDK (agent-client-protocol)

    with tempfile.TemporaryDirectory(prefix="acpkit-bench-") as tmp:
        base = None
        base_tree = None
        if args.baseline:
            base_tree = extract_baseline(args.baseline, Path(tmp) / "baseline")
            base = load_baseline_codec(base_tree)
        run(sdk, base, quick)
        cache = Path(tmp) / "pycache"
        ours_import = import_time_us("acpkit.codec", cache)
        base_import = import_time_us("acpkit.codec", cache, base_tree) if base_tree else None
        sdk_import = import_time_us("acp", cache)
    line = f"import time: acpkit.codec {ours_import / 1000:.1f} ms"
    if base_import is not None:
        line += f", baseline {base_import / 1000:.1f} ms ({ours_import / base_import:.2f}x)"
    line += f", acp {sdk_import / 1000:.1f} ms ({sdk_import / ours_import:.2f}x ours)"
    print(line)


def run(sdk: Any, base: ModuleType | None, quick: bool) -> None:
    """Time the three cases and print one row each."""
    update_bytes = UPDATE_LINE.encode()
    prompt_bytes = PROMPT_LINE.encode()
    update_obj = json.loads(update_bytes)
    notification = decode(schema.SessionNotification, update_obj["params"])
    sdk_notification = sdk.SessionNotification.model_validate(update_obj["params"])

    def acp_encode() -> bytes:
        return dumps({"jsonrpc": "2.0", "method": "session/update", "params": encode(notification)})

    def sdk_encode() -> bytes:
        params = sdk_notification.model_dump(by_alias=True, exclude_none=True)
        return _dumps({"jsonrpc": "2.0", "method": "session/update", "params": params}).encode()

    assert json.loads(acp_encode()) == json.loads(sdk_encode()) == update_obj
    floor_obj = json.loads(update_bytes)

    def absent() -> None:
        return None

    base_cases: list[Callable[[], Any]] = [absent, absent, absent]
    if base is not None:
        old = base
        base_notification = old.decode(schema.SessionNotification, update_obj["params"])

        def base_encode() -> bytes:
            params = old.encode(base_notification)
            msg = {"jsonrpc": "2.0", "method": "session/update", "params": params}
            return _dumps(msg).encode()

        assert json.loads(base_encode()) == update_obj
        base_cases = [
            lambda: old.decode(schema.SessionNotification, json.loads(update_bytes)["params"]),
            base_encode,
            lambda: old.decode(schema.PromptRequest, json.loads(prompt_bytes)["params"]),
        ]

    cases = [
        (
            "decode session/update agent_message_chunk",
            lambda: json.loads(update_bytes),
            lambda: decode(schema.SessionNotification, loads(update_bytes)["params"]),
            base_cases[0],
            lambda: sdk.SessionNotification.model_validate(json.loads(update_bytes)["params"]),
        ),
        (
            "encode session/update agent_message_chunk",
            lambda: _dumps(floor_obj).encode(),
            acp_encode,
            base_cases[1],
            sdk_encode,
        ),
        (
            "decode session/prompt (text, link, resource)",
            lambda: json.loads(prompt_bytes),
            lambda: decode(schema.PromptRequest, loads(prompt_bytes)["params"]),
            base_cases[2],
            lambda: sdk.PromptRequest.model_validate(json.loads(prompt_bytes)["params"]),
        ),
    ]
    print(
        f"{'case':<46} {'json':>8} {'acpkit':>8} {'base':>8} {'sdk':>8}"
        f" {'acp/json':>9} {'acp/base':>9} {'sdk/acp':>8}"
    )
    for name, floor, ours, baseline, theirs in cases:
        fns = [floor, ours, theirs] if base is None else [floor, ours, theirs, baseline]
        times = per_call_us(fns, quick)
        f, o, t = times[:3]
        b = times[3] if base is not None else float("nan")
        print(
            f"{name:<46} {f:>7.2f}u {o:>7.2f}u {b:>7.2f}u {t:>7.2f}u"
            f" {o / f:>8.2f}x {o / b:>8.2f}x {t / o:>7.2f}x"
        )


if __name__ == "__main__":
    main()
