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
    except StepTimeout as e:
        driver.observer.verdicts.slow(_rule_of(driver), f"{what}: {e}")
        return None


def _rule_of(driver: AgentDriver) -> str:
    step = driver.observer.step
    return step[0] if step is not None else "FRAME-004"


def _judge(
    driver: AgentDriver,
    rule_id: str,
    response: dict[str, Any] | None,
    what: str,
    *,
    success: bool = False,
) -> None:
    """
    ``response`` proves the line was read as one message: an unknown ``_acpkit.dev/…`` method
    answered -32601 (or a success: an agent may implement anything), or with ``success`` a
    result. A -32700 / -32600 answer means the agent did not read the message whole.
    """
    if response is None:
        return  # timed out: recorded as slow by _answered
    error = response.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    if success and "result" not in response:
        driver.observer.violation(rule_id, f"{what} was answered with error {error!r}")
    elif code in (-32700, -32600):
        driver.observer.violation(
            rule_id, f"{what} was answered {code}: the agent did not read it as one message"
        )
    else:
        driver.observer.verdicts.ok(rule_id)


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
    observer = driver.observer
    with observer.probe("FRAME-004", "a session/new written in pieces"):
        observer.note(f"the next line is written in pieces cut at {chosen}")
        # an agent that parses the pieces answers them with id-null errors: judged here
        before = observer.expected_null_id_errors
        observer.expected_null_id_errors += len(chosen) + 1
        driver.write(data, chosen, pause)
        try:
            response = driver.wait_for(
                lambda m: (
                    "method" not in m
                    and (m.get("id") == rid or (m.get("id") is None and "error" in m))
                ),
                "reading a split message",
            )
        except StepTimeout as e:
            observer.verdicts.slow("FRAME-004", f"a session/new written in pieces: {e}")
            return
        finally:
            observer.expected_null_id_errors = before
        if response.get("id") is None:
            observer.violation(
                "FRAME-004",
                f"one valid session/new written in pieces (cut at {chosen}) was answered with "
                f"an id-null error {response.get('error')!r}: the agent parsed a piece, not "
                "the whole line",
            )
            return
        _judge(driver, "FRAME-004", response, f"a session/new cut at {chosen}", success=True)


def probe_batched_write(driver: AgentDriver) -> None:
    """FRAME-005: three requests in one write, each answered (in any order)."""
    ids = [driver.next_id() for _ in range(3)]
    messages = [
        {"jsonrpc": "2.0", "id": rid, "method": f"_acpkit.dev/batched_{n}", "params": {}}
        for n, rid in enumerate(ids)
    ]
    with driver.observer.probe("FRAME-005", "three requests in one write"):
        driver.write(b"".join(encode(m) + b"\n" for m in messages))
        for rid in ids:
            response = _answered(driver, rid, f"request {rid} of three written at once")
            _judge(driver, "FRAME-005", response, f"request {rid} of three written at once")


def probe_crlf(driver: AgentDriver) -> None:
    """FRAME-006: a request ended by CRLF is answered."""
    rid = driver.next_id()
    with driver.observer.probe("FRAME-006", "a request ended by CRLF"):
        driver.send({"jsonrpc": "2.0", "id": rid, "method": "_acpkit.dev/crlf"}, line_end=b"\r\n")
        response = _answered(driver, rid, "reading a CRLF-terminated message")
        _judge(driver, "FRAME-006", response, "a request ended by \\r\\n")


def probe_long_line(driver: AgentDriver, size: int) -> None:
    """FRAME-007: a ``size``-byte request line, then a small one; both must be answered."""
    rid = driver.next_id()
    big = padded_request(rid, "_acpkit.dev/long_line", size)
    with driver.observer.probe("FRAME-007", f"a {size}-byte request line"):
        try:
            driver.write(encode(big) + b"\n")
        except StepTimeout as e:
            driver.observer.verdicts.slow("FRAME-007", f"writing a {size}-byte line: {e}")
            return
        first = _answered(driver, rid, f"reading a {size}-byte line")
        follow = driver.next_id()
        try:
            driver.send({"jsonrpc": "2.0", "id": follow, "method": "_acpkit.dev/after_long_line"})
            second = _answered(driver, follow, "answering after a long line")
        except AgentGone:
            second = None
        if driver.returncode is not None and (first is None or second is None):
            which = "the long line" if first is None else "the request after it"
            driver.observer.violation(
                "FRAME-007",
                f"no answer to {which} after a {size}-byte line: the agent exited with status "
                f"{driver.returncode}",
            )
            return
        _judge(driver, "FRAME-007", first, f"a {size}-byte line")
        _judge(driver, "FRAME-007", second, "the request after a long line")


def probe_junk(driver: AgentDriver, lines: Sequence[bytes] = JUNK_LINES) -> None:
    """FRAME-008 (still alive after junk) and RPC-003 (-32700 for text that is not JSON)."""
    observer = driver.observer
    with observer.probe("FRAME-008", f"{len(lines)} junk lines, then a request"):
        start = len(driver.inbox)
        for number, line in enumerate(lines):
            observer.fault(f"junk-{number + 1}", "FRAME-008", f"the junk line {line[:30]!r}")
            driver.write(line + b"\n")
        rid = driver.next_id()
        driver.send({"jsonrpc": "2.0", "id": rid, "method": "_acpkit.dev/after_junk"})
        response = _answered(driver, rid, "answering after junk lines")
        _judge(driver, "FRAME-008", response, "the request after junk lines")
    if response is None:
        return
    codes = [
        m["error"].get("code")
        for m in driver.inbox[start:]
        if "method" not in m and m.get("id") is None and isinstance(m.get("error"), dict)
    ]
    if -32700 in codes:
        observer.verdicts.ok("RPC-003")
    elif codes:
        observer.violation(
            "RPC-003",
            f"the {len(lines)} junk lines were answered with error code(s) {codes}, none of "
            "them -32700 (parse error)",
        )
    else:
        observer.violation(
            "RPC-003",
            f"none of the {len(lines)} junk lines (not JSON) got an error response "
            "(expected -32700, parse error)",
        )


def probe_eof_mid_turn(driver: AgentDriver, session_id: str, grace: float) -> None:
    """FRAME-009: close stdin right after a prompt; the agent must exit within ``grace``."""
    with driver.observer.probe("FRAME-009", "stdin closed in the middle of a turn"):
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
