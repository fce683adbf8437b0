"""
Byte-stream fault injection: the framing faults the tester throws at an agent's stdin.

Each probe takes an initialized `AgentDriver` and checks one ``FRAME`` rule:

- `probe_split`: a request cut at arbitrary byte offsets (always one inside a multi-byte UTF-8
  character), written in pieces with small pauses between them (FRAME-004);
- `probe_batched_write`: several messages in a single write (FRAME-005);
- `probe_crlf`: a message ended by ``\\r\\n`` (FRAME-006);
- `probe_long_line`: a 1 MiB (or larger) line, then a normal request (FRAME-007);
- `probe_junk`: junk lines (not JSON, invalid UTF-8, a JSON scalar), then a request (FRAME-008,
  and RPC-003 for the -32700 answer);
- `probe_eof_mid_turn`: stdin closed during a prompt turn; the agent must exit (FRAME-009).

`utf8_cut_points` and `split_points` produce the cut offsets (Hypothesis draws them in the
state machine; the probes take them as arguments so a failure replays exactly).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from acpkit.conformance.driver import AgentDriver, AgentGone, StepTimeout, encode

__all__ = [
    "JUNK_LINES",
    "LONG_LINE_SIZES",
    "padded_request",
    "probe_batched_write",
    "probe_crlf",
    "probe_eof_mid_turn",
    "probe_junk",
    "probe_long_line",
    "probe_split",
    "split_points",
    "utf8_cut_points",
]

#: Lines that are not ACP messages (the agent should answer -32700 / -32600 or ignore them).
JUNK_LINES: tuple[bytes, ...] = (
    b"this is not json",
    b'{"jsonrpc":"2.0","id":',
    b"\xff\xfe\xfd not utf-8",
    b"42",
)

#: Long-line size per profile.
LONG_LINE_SIZES = {"smoke": 1 << 20, "quick": 1 << 20, "full": 16 << 20}

#: Text with multi-byte UTF-8 characters (2, 3 and 4 bytes long).
TRICKY_TEXT = "é中😀 café ☃ \u2028 done"


def utf8_cut_points(data: bytes) -> list[int]:
    """Offsets that fall inside a multi-byte UTF-8 character of ``data``."""
    return [i for i in range(1, len(data)) if data[i] & 0xC0 == 0x80]


def split_points(data: bytes, count: int, rng: random.Random) -> list[int]:
    """``count`` sorted distinct cut offsets, the first one inside a UTF-8 character."""
    inner = utf8_cut_points(data)
    chosen = {rng.choice(inner)} if inner else set()
    while len(chosen) < min(count, len(data) - 1):
        chosen.add(rng.randrange(1, len(data)))
    return sorted(chosen)


def padded_request(request_id: Any, method: str, size: int) -> dict[str, Any]:
    """A request for ``method`` whose ``params._meta`` pads its line to about ``size`` bytes."""
    message: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": method,
        "params": {"_meta": {"acpkit.dev/padding": ""}},
    }
    overhead = len(encode(message))
    message["params"]["_meta"]["acpkit.dev/padding"] = "x" * max(0, size - overhead)
    return message


def _answered(driver: AgentDriver, request_id: Any, what: str) -> dict[str, Any] | None:
    try:
        return driver.response_to(request_id, what)
    except (StepTimeout, AgentGone):
        return None


def probe_split(
    driver: AgentDriver, cwd: str, cuts: Sequence[int] | None = None, pause: float = 0.005
) -> None:
    """FRAME-004: a ``session/new`` with a multi-byte ``_meta`` text, cut into pieces."""
    rid = driver.next_id()
    message = {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "session/new",
        "params": {"cwd": cwd, "mcpServers": [], "_meta": {"acpkit.dev/text": TRICKY_TEXT}},
    }
    data = encode(message) + b"\n"
    chosen = list(cuts) if cuts is not None else split_points(data, 4, random.Random(rid))
    driver.observer.sent(message)
    driver.observer.note(f"the next line is written in pieces cut at {chosen}")
    driver.write(data, chosen, pause)
    if _answered(driver, rid, "reading a split message") is None:
        driver.observer.violation(
            "FRAME-004", f"no answer to a session/new written in pieces (cut at {chosen})"
        )
    else:
        driver.observer.verdicts.ok("FRAME-004")


def probe_batched_write(driver: AgentDriver) -> None:
    """FRAME-005: three requests in one write, each answered."""
    ids = [driver.next_id() for _ in range(3)]
    messages = [
        {"jsonrpc": "2.0", "id": rid, "method": f"_acpkit.dev/batched_{n}", "params": {}}
        for n, rid in enumerate(ids)
    ]
    for message in messages:
        driver.observer.sent(message)
    driver.write(b"".join(encode(m) + b"\n" for m in messages))
    missing = [rid for rid in ids if _answered(driver, rid, "reading batched messages") is None]
    if missing:
        driver.observer.violation(
            "FRAME-005", f"of three messages written at once, ids {missing} got no answer"
        )
    else:
        driver.observer.verdicts.ok("FRAME-005")


def probe_crlf(driver: AgentDriver) -> None:
    """FRAME-006: a request ended by CRLF is answered."""
    rid = driver.next_id()
    driver.send({"jsonrpc": "2.0", "id": rid, "method": "_acpkit.dev/crlf"}, line_end=b"\r\n")
    if _answered(driver, rid, "reading a CRLF-terminated message") is None:
        driver.observer.violation("FRAME-006", "no answer to a request ended by \\r\\n")
    else:
        driver.observer.verdicts.ok("FRAME-006")


def probe_long_line(driver: AgentDriver, size: int) -> None:
    """FRAME-007: a ``size``-byte request line, then a small one; both must be answered."""
    rid = driver.next_id()
    big = padded_request(rid, "_acpkit.dev/long_line", size)
    driver.observer.sent(big)
    try:
        driver.write(encode(big) + b"\n")
    except (StepTimeout, AgentGone) as e:
        driver.observer.violation("FRAME-007", f"writing a {size}-byte line failed: {e}")
        return
    first = _answered(driver, rid, f"reading a {size}-byte line")
    follow = driver.next_id()
    try:
        driver.send({"jsonrpc": "2.0", "id": follow, "method": "_acpkit.dev/after_long_line"})
        second = _answered(driver, follow, "answering after a long line")
    except (StepTimeout, AgentGone):
        second = None
    if first is None or second is None:
        which = "the long line" if first is None else "the request after it"
        status = driver.returncode
        died = f" (agent exited with status {status})" if status is not None else ""
        driver.observer.violation(
            "FRAME-007", f"no answer to {which} after a {size}-byte line{died}"
        )
    else:
        driver.observer.verdicts.ok("FRAME-007")


def probe_junk(driver: AgentDriver, lines: Sequence[bytes] = JUNK_LINES) -> None:
    """FRAME-008 (still alive after junk) and RPC-003 (-32700 for text that is not JSON)."""
    for line in lines:
        driver.observer.expect_null_id_error()
        driver.write(line + b"\n")
    rid = driver.next_id()
    try:
        driver.send({"jsonrpc": "2.0", "id": rid, "method": "_acpkit.dev/after_junk"})
    except (StepTimeout, AgentGone):
        pass
    if _answered(driver, rid, "answering after junk lines") is None:
        driver.observer.violation(
            "FRAME-008", f"no answer to a request sent after {len(lines)} junk lines"
        )
        return
    driver.observer.verdicts.ok("FRAME-008")
    parse_errors = [
        m
        for m in driver.inbox
        if "method" not in m
        and isinstance(m.get("error"), dict)
        and m["error"].get("code") == -32700
    ]
    if parse_errors:
        driver.observer.verdicts.ok("RPC-003")
    else:
        driver.observer.violation(
            "RPC-003", "a line that is not JSON got no -32700 (parse error) response"
        )


def probe_eof_mid_turn(driver: AgentDriver, session_id: str, grace: float) -> None:
    """FRAME-009: close stdin right after a prompt; the agent must exit within ``grace``."""
    driver.send(
        {
            "jsonrpc": "2.0",
            "id": driver.next_id(),
            "method": "session/prompt",
            "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": "hello"}]},
        }
    )
    driver.close_stdin()
    status = driver.wait_exit(grace)
    if status is None:
        driver.observer.violation(
            "FRAME-009", f"agent still running {grace:g}s after its stdin was closed mid-turn"
        )
    else:
        driver.observer.verdicts.ok("FRAME-009")
