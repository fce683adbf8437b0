"""Codec micro-benchmark: acpkit against orjson (the parser it uses), msgspec's typed
structs and this design's floor; then against the json floor, an earlier acpkit codec and
the official Python SDK (``acp``), in one run.

Run from the repository root::

    python -m benchmarks.bench_codec [--quick] [--baseline REV] [--only orjson|json]

First table (:func:`run_orjson`, ``--only orjson``): per line (agent_message_chunk,
tool_call, tool_call_update, three-block prompt, initialize response) and per message of
a 50-update turn, the ratios of acpkit decode / ``orjson.loads`` of the same bytes and
acpkit encode / ``orjson.dumps`` of the same dict, beside the strict decode, msgspec
(``pip install msgspec``: a benchmark-only dependency; its column is ``-`` without it),
the floor of the codec's design (:mod:`benchmarks.codec_floor`) and acpkit's
``loads``/``dumps`` layer alone.  Each ratio is the median of per-round ratios (the
functions interleaved in each round), with the spread.

Second table (``--only json``) prints microseconds per message for three cases, with
ratios:

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
import itertools
import json
import os
import re
import statistics
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
    parser.add_argument(
        "--only",
        choices=["orjson", "json"],
        help="only the table against orjson (and msgspec), or only the json/SDK one",
    )
    args = parser.parse_args(argv)
    quick = args.quick
    if args.only != "json":
        run_orjson(quick)
        if args.only == "orjson":
            return

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


# ------------------------------------------------------------------ against orjson
# The codec parses and writes with orjson: its floor is orjson.loads / orjson.dumps of
# the same bytes / dict, and msgspec's typed-struct decode is the anchor of what a typed
# decode can cost beside it.

INITIALIZE_RESPONSE_LINE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 0,
        "result": {
            "protocolVersion": 1,
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": {"image": True, "audio": False, "embeddedContext": True},
                "mcpCapabilities": {"http": True, "sse": False},
                "sessionCapabilities": {},
                "auth": {},
            },
            "authMethods": [{"id": "api-key", "name": "API key", "description": "Set ACME_KEY"}],
            "agentInfo": {"name": "bob", "title": "Bob", "version": "0.9.0"},
        },
    },
    separators=(",", ":"),
)


def _update_line(update: dict[str, Any]) -> str:
    params = {"sessionId": "20260916-101530-4f2a9c1e", "update": update}
    msg = {"jsonrpc": "2.0", "method": "session/update", "params": params}
    return json.dumps(msg, separators=(",", ":"), ensure_ascii=False)


def _chunk(kind: str, text: str) -> dict[str, Any]:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


TOOL_CALL_UPDATE = {
    "sessionUpdate": "tool_call",
    "toolCallId": "call_7",
    "title": "Read src/app.py",
    "kind": "read",
    "status": "pending",
    "locations": [{"path": "/home/me/project/src/app.py", "line": 12}],
    "rawInput": {"path": "src/app.py", "offset": 0, "limit": 200},
}

TOOL_CALL_PROGRESS_UPDATE = {
    "sessionUpdate": "tool_call_update",
    "toolCallId": "call_7",
    "status": "completed",
    "content": [
        {"type": "content", "content": {"type": "text", "text": "import os\nimport sys\n"}},
        {
            "type": "diff",
            "path": "/home/me/project/src/app.py",
            "oldText": "import sys\n",
            "newText": "import os\nimport sys\n",
        },
    ],
}

PLAN_UPDATE = {
    "sessionUpdate": "plan",
    "entries": [
        {"content": "Read the failing test", "priority": "high", "status": "completed"},
        {"content": "Fix the import", "priority": "medium", "status": "in_progress"},
    ],
}


def turn_lines() -> list[str]:
    """50 ``session/update`` lines, as a turn that reads a file, edits it and answers:
    thought chunks, a plan, tool calls and their updates, message chunks."""
    words = "Let me look at the failing test first, then fix the import it needs.".split()
    lines = [_update_line(_chunk("agent_thought_chunk", f"{w} ")) for w in words[:6]]
    lines.append(_update_line(PLAN_UPDATE))
    for _ in range(2):
        lines.append(_update_line(TOOL_CALL_UPDATE))
        lines.append(_update_line({**TOOL_CALL_PROGRESS_UPDATE, "status": "in_progress"}))
        lines.append(_update_line(TOOL_CALL_PROGRESS_UPDATE))
    text = "The test imports os before the module sets its path; I moved the import. " * 3
    chunks = text.split(" ")
    while len(lines) < 50:
        lines.append(_update_line(_chunk("agent_message_chunk", chunks.pop(0) + " ")))
    return lines


def orjson_cases() -> list[tuple[str, type, str, list[bytes]]]:
    """(name, params class, envelope key, lines) of each case against orjson."""
    one = [
        ("session/update agent_message_chunk", schema.SessionNotification, "params", UPDATE_LINE),
        (
            "same, its text saying null",
            schema.SessionNotification,
            "params",
            _update_line(_chunk("agent_message_chunk", "`x` is null here.")),
        ),
        (
            "session/update tool_call",
            schema.SessionNotification,
            "params",
            _update_line(TOOL_CALL_UPDATE),
        ),
        (
            "session/update tool_call_update (text, diff)",
            schema.SessionNotification,
            "params",
            _update_line(TOOL_CALL_PROGRESS_UPDATE),
        ),
        ("session/prompt (text, link, resource)", schema.PromptRequest, "params", PROMPT_LINE),
        ("initialize response", schema.InitializeResponse, "result", INITIALIZE_RESPONSE_LINE),
    ]
    cases = [(name, cls, key, [line.encode()]) for name, cls, key, line in one]
    turn = [line.encode() for line in turn_lines()]
    cases.append(("turn of 50 session/update", schema.SessionNotification, "params", turn))
    return cases


def ratio_text(ratios: list[float]) -> str:
    """``median (min-max)`` of per-round ratios."""
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


def orjson_timers(
    cls: Any, key: str, lines: list[bytes], pool_size: int = 200
) -> dict[str, Callable[[], Any]]:
    """The functions timed for one case, by column: each runs over all of ``lines``.
    Each encode call takes the next of a pool of distinct instances (and its floor the
    next of as many distinct dicts), so nothing can be kept from one call to the next."""
    import orjson

    from benchmarks.codec_floor import decode_floor, encode_floor

    dicts = [orjson.loads(b) for b in lines]
    envelopes = [{k: v for k, v in d.items() if k != key} for d in dicts]
    env = envelopes[0]
    assert all(e == env for e in envelopes)  # one envelope for all the case's lines
    models = [decode(cls, d[key]) for d in dicts]
    for model, d in zip(models, dicts, strict=True):
        assert orjson.loads(dumps({**env, key: encode(model)})) == d
    decoders = [decode_floor(m, d[key]) for m, d in zip(models, dicts, strict=True)]
    encoders = [encode_floor(m) for m in models]
    for model, fn, enc, d in zip(models, decoders, encoders, dicts, strict=True):
        assert fn(d[key]) == model and enc(model) == encode(model)
    model_pool = [[decode(cls, orjson.loads(b)[key]) for b in lines] for _ in range(pool_size)]
    dict_pool = [[orjson.loads(b) for b in lines] for _ in range(pool_size)]
    floor_pool = [list(zip(pool, encoders, strict=True)) for pool in model_pool]
    models_at = itertools.cycle(model_pool).__next__
    dicts_at = itertools.cycle(dict_pool).__next__
    floors_at = itertools.cycle(floor_pool).__next__
    decoding = list(zip(lines, decoders, strict=True))
    oj_loads, oj_dumps = orjson.loads, orjson.dumps

    def orjson_loads() -> None:
        for b in lines:
            oj_loads(b)

    def acpkit_loads() -> None:
        for b in lines:
            loads(b)

    def acpkit_decode() -> None:
        for b in lines:
            decode(cls, loads(b)[key])

    def acpkit_decode_strict() -> None:
        for b in lines:
            decode(cls, loads(b)[key], strict=True)

    def floor_decode() -> None:
        for b, fn in decoding:
            fn(oj_loads(b)[key])

    def orjson_dumps() -> None:
        for d in dicts_at():
            oj_dumps(d)

    def acpkit_dumps() -> None:
        for d in dicts_at():
            dumps(d)

    def acpkit_encode() -> None:
        for model in models_at():
            dumps({**env, key: encode(model)})

    def floor_encode() -> None:
        for model, fn in floors_at():
            oj_dumps({**env, key: fn(model)})

    timers: dict[str, Callable[[], Any]] = {
        "orjson.loads": orjson_loads,
        "loads": acpkit_loads,
        "decode": acpkit_decode,
        "strict": acpkit_decode_strict,
        "floor decode": floor_decode,
        "orjson.dumps": orjson_dumps,
        "dumps": acpkit_dumps,
        "encode": acpkit_encode,
        "floor encode": floor_encode,
    }
    try:
        import msgspec

        from benchmarks import msgspec_models
    except ImportError:  # benchmark-only dependency
        return timers
    envelope: type = msgspec_models.Response
    if key == "params":
        envelope = msgspec_models.Request if "id" in dicts[0] else msgspec_models.Notification
    decoder: Any = msgspec.json.Decoder(envelope)
    for b in lines:
        struct = decoder.decode(b)
        assert decoder.decode(msgspec.json.encode(struct)) == struct
    struct_pool = [[decoder.decode(b) for b in lines] for _ in range(pool_size)]
    structs_at = itertools.cycle(struct_pool).__next__
    ms_decode, ms_encode = decoder.decode, msgspec.json.Encoder().encode

    def msgspec_decode() -> None:
        for b in lines:
            ms_decode(b)

    def msgspec_encode() -> None:
        for s in structs_at():
            ms_encode(s)

    timers["msgspec decode"] = msgspec_decode
    timers["msgspec encode"] = msgspec_encode
    return timers


ORJSON_TABLES = [
    (
        "decode",
        "orjson.loads",
        ["decode", "strict", "floor decode", "msgspec decode", "loads"],
    ),
    (
        "encode",
        "orjson.dumps",
        ["encode", "floor encode", "msgspec encode", "dumps"],
    ),
]


def run_orjson(quick: bool) -> None:
    """Time each case against orjson, interleaved in rounds (each function the best of 5
    repeats per round), and print the median of the per-round ratios and their spread.

    decode: ``decode`` is acpkit's (``acpkit.codec.loads`` then ``decode`` of the
    params or result), ``strict`` the same with ``strict=True``, ``floor decode``
    ``orjson.loads`` then this design's floor (:mod:`benchmarks.codec_floor`),
    ``msgspec decode`` msgspec's typed structs (envelope included), ``loads``
    ``acpkit.codec.loads`` alone; each over ``orjson.loads`` of the same bytes.
    encode: ``encode`` is acpkit's ``encode`` put in the envelope and
    ``acpkit.codec.dumps``, ``floor encode`` the floor's dict through ``orjson.dumps``,
    ``msgspec encode`` msgspec's, ``dumps`` ``acpkit.codec.dumps`` of the dict alone;
    each over ``orjson.dumps`` of the same dict."""
    rounds = 5 if quick else 11
    results: list[tuple[str, float, dict[str, list[float]]]] = []
    for name, cls, key, lines in orjson_cases():
        timers = orjson_timers(cls, key, lines)
        number = max(1, (300 if quick else 1_000) // len(lines))
        times: dict[str, list[float]] = {column: [] for column in timers}
        for fn in timers.values():  # warm up: hooks made, caches filled
            timeit.timeit(fn, number=number)
        for _ in range(rounds):
            for column, fn in timers.items():
                best = min(timeit.repeat(fn, number=number, repeat=5))
                times[column].append(best / number * 1e6 / len(lines))
        results.append((name, len(lines), times))
    print(f"against orjson: median of {rounds} rounds (min-max); times per message")
    for title, floor, columns in ORJSON_TABLES:
        header = f"{title + ' / ' + floor:<46} {floor:>13}"
        header += "".join(f" {column + '/':>18}" for column in columns)
        print(header)
        for name, _, times in results:
            row = f"{name:<46} {statistics.median(times[floor]):>12.2f}u"
            for column in columns:
                if column not in times:
                    row += f" {'-':>18}"
                    continue
                pairs = zip(times[column], times[floor], strict=True)
                row += f" {ratio_text([a / b for a, b in pairs]):>18}"
            print(row)


if __name__ == "__main__":
    main()
