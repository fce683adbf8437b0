"""
Byte-stream fault injection: the framing faults the tester throws at an agent's stdin.

Each probe takes an initialized `AgentDriver` and checks one ``FRAME`` rule:

- `probe_split`: a request whose id holds multi-byte characters, cut at byte offsets (one
  inside such a character of the id), written in pieces with pauses between them; the answer
  must echo the id intact (FRAME-004). It needs no session: an unknown ``_acpkit.dev``
  method, answered with anything, proves the line was read whole;
- `probe_batched_write`: several messages in a single write (FRAME-005);
- `probe_crlf`: a message ended by ``\\r\\n`` (FRAME-006);
- `probe_long_line`: a 1 MiB (or larger) line, then a normal request (FRAME-007);
- `probe_junk`: junk lines (not JSON, invalid UTF-8, a JSON scalar), then a request (FRAME-008,
  and RPC-003 for the -32700 answer);
- `probe_eof`: stdin closed before ``initialize``, with a request pending, or during a prompt
  turn; the agent exits (FRAME-009) after answering what it read (FRAME-010).

`utf8_cut_points` and `split_points` produce the cut offsets (Hypothesis draws them in the
state machine; the probes take them as arguments so a failure replays exactly).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

from acpkit.conformance.driver import AgentDriver, AgentGone, StepTimeout, encode
from acpkit.conformance.observer import Observer

__all__ = [
    "JUNK_LINES",
    "LONG_LINE_SIZES",
    "padded_request",
    "probe_batched_write",
    "probe_crlf",
    "probe_eof",
    "probe_junk",
    "probe_long_line",
    "probe_split",
    "split_id",
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


#: The id of the split request: multi-byte characters of 2, 3 and 4 bytes that a reader which
#: decodes each read on its own would mangle.
SPLIT_ID_PREFIX = "acpkit-é中😀-split-"
#: Seconds between the pieces of a split line: long enough for the agent to read each piece
#: on its own (one write of the whole line would hide a reader that parses each read).
SPLIT_PAUSE = 0.05


def split_id(number: int) -> str:
    """The request id of the ``number``-th split probe."""
    return f"{SPLIT_ID_PREFIX}{number}"


def _id_cut(data: bytes, request_id: str) -> int | None:
    """An offset inside the 4-byte character of ``request_id`` in the encoded line."""
    start = data.find(json.dumps(request_id, ensure_ascii=False).encode("utf-8"))
    emoji = data.find("😀".encode(), start)
    return emoji + 2 if start != -1 and emoji != -1 else None


def probe_split(
    driver: AgentDriver, cuts: Sequence[int] | None = None, pause: float = SPLIT_PAUSE
) -> None:
    """
    FRAME-004: an unknown ``_acpkit.dev/split`` request whose id and ``_meta`` text hold
    multi-byte characters, written in pieces (one cut inside a character of the id) with
    ``pause`` seconds between them. Any answer with the id intact holds (the method needs no
    session, no login); an id-null error (a piece was parsed), -32700 / -32600, or the id
    back with other characters (a read decoded on its own) is a finding; no answer while
    the next request is answered is one too (the line was dropped).
    """
    rid = split_id(driver.next_id())
    message = {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "_acpkit.dev/split",
        "params": {"_meta": {"acpkit.dev/text": TRICKY_TEXT}},
    }
    data = encode(message) + b"\n"
    if cuts is None:
        rng = random.Random(rid)
        chosen = set(split_points(data, 3, rng))
        inside = _id_cut(data, rid)
        if inside is not None:
            chosen.add(inside)
        cuts = sorted(chosen)
    chosen_cuts = list(cuts)
    observer = driver.observer
    with observer.probe("FRAME-004", "an unknown request written in pieces"):
        observer.note(f"the next line is written in pieces cut at {chosen_cuts}")
        # an agent that parses the pieces answers them with id-null errors: judged here
        before = observer.expected_null_id_errors
        observer.expected_null_id_errors += len(chosen_cuts) + 1
        start = len(driver.inbox)
        driver.write(data, chosen_cuts, pause)
        late: StepTimeout | None = None

        def answer(m: dict[str, Any]) -> bool:
            if "method" in m:
                return False
            got = m.get("id")
            return got == rid or (got is None and "error" in m) or _mangled(got, rid)

        try:
            response = driver.wait_for(answer, "reading a split message", start=start)
        except StepTimeout as e:
            response = None
            late = e
        finally:
            observer.expected_null_id_errors = before
        what = f"a request cut at {chosen_cuts} (pieces {pause:g}s apart)"
        if response is None:
            if _follow_up_answered(driver, "split"):
                observer.judged_unanswered(rid)
                observer.violation(
                    "FRAME-004",
                    f"{what} got no answer while the request sent after it was answered: "
                    "the pieces were not read as one message",
                )
            else:
                observer.verdicts.slow("FRAME-004", f"{what}: {late}")
            return
        got = response.get("id")
        if got is None:
            observer.violation(
                "FRAME-004",
                f"{what} was answered with an id-null error {response.get('error')!r}: the "
                "agent parsed a piece, not the whole line",
            )
        elif got != rid:
            observer.violation(
                "FRAME-004",
                f"{what} was answered with the id {got!r} instead of {rid!r}: the characters "
                "cut between two writes did not survive the split",
            )
        else:
            _judge(driver, "FRAME-004", response, what)


def _mangled(got: Any, rid: str) -> bool:
    """``got`` is the split request's id with some characters replaced or lost."""
    return (
        isinstance(got, str)
        and got != rid
        and got.startswith("acpkit-")
        and got.endswith(rid.rsplit("-", 1)[1])
    )


def _follow_up_answered(driver: AgentDriver, name: str) -> bool:
    """A request sent now is answered: the agent is alive and reading (not merely slow)."""
    try:
        driver.request(f"_acpkit.dev/after_{name}", {})
    except StepTimeout:
        return False
    return True


def probe_batched_write(driver: AgentDriver) -> None:
    """FRAME-005: three requests in one write, each answered (in any order)."""
    ids = [driver.next_id() for _ in range(3)]
    messages = [
        {"jsonrpc": "2.0", "id": rid, "method": f"_acpkit.dev/batched_{n}", "params": {}}
        for n, rid in enumerate(ids)
    ]
    observer = driver.observer
    with observer.probe("FRAME-005", "three requests in one write"):
        driver.write(b"".join(encode(m) + b"\n" for m in messages))
        for rid in ids:
            what = f"request {rid} of three written at once"
            try:
                response: dict[str, Any] | None = driver.response_to(rid, what)
            except StepTimeout as e:
                response = None
                if _follow_up_answered(driver, "batched_write"):
                    observer.judged_unanswered(rid)
                    observer.violation(
                        "FRAME-005",
                        f"{what} got no answer while a request sent later was answered: "
                        "the agent did not read every message of the write",
                    )
                else:
                    observer.verdicts.slow("FRAME-005", f"{what}: {e}")
            _judge(driver, "FRAME-005", response, what)


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
    # every line that is not JSON is owed a -32700 (a JSON scalar is an invalid request)
    not_json = sum(1 for line in lines if not _is_json(line))
    parse_errors = codes.count(-32700)
    if parse_errors >= not_json:
        observer.verdicts.ok("RPC-003")
    elif codes:
        observer.violation(
            "RPC-003",
            f"the {not_json} junk lines that are not JSON got {parse_errors} -32700 (parse "
            f"error) answer(s); the {len(lines)} junk lines were answered with error code(s) "
            f"{codes}",
        )
    else:
        observer.violation(
            "RPC-003",
            f"none of the {len(lines)} junk lines (not JSON) got an error response "
            "(expected -32700, parse error)",
        )


def _is_json(line: bytes) -> bool:
    """``line`` is a JSON text (UTF-8, parseable)."""
    try:
        json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return False
    return True


#: How often the EOF probe looks whether the request it sent before the EOF is answered.
_EOF_POLL = 0.05


def _waiting_for(observer: Observer, method: str) -> bool:
    """Whether a request of ``method`` the tester sent is still unanswered."""
    return any(p.method == method for _, p in observer.unanswered())


def _answered_or_exited(driver: AgentDriver, method: str, grace: float) -> tuple[int | None, bool]:
    """
    Wait up to ``grace`` seconds (counted in the driver's waits) until the agent has
    answered the request of ``method`` sent before the EOF, or has exited: its exit status
    (None: still running) and whether the request is answered.
    """
    left = grace
    while True:
        status = driver.wait_exit(min(_EOF_POLL, max(0.0, left)))
        answered = not _waiting_for(driver.observer, method)
        left -= _EOF_POLL
        if status is not None or answered or left <= 0:
            return status, answered


def probe_eof(
    driver: AgentDriver,
    grace: float,
    *,
    session_id: str | None = None,
    pending: bool = True,
    closed: bool = False,
    grace_said: float | None = None,
) -> None:
    """
    FRAME-009 and FRAME-010: close stdin and wait up to ``grace`` seconds for the agent to
    exit; when a request was sent before the EOF, up to ``grace`` seconds for its answer,
    then up to ``grace`` more, from the answer, for the exit. With ``session_id``, right
    after a ``session/prompt`` (mid-turn); else, with ``pending``, right after an unknown
    ``_acpkit.dev`` request (no session needed); else at once (a driver that has not sent
    ``initialize`` tests EOF before it). Every request written before the EOF must be
    answered before the agent exits (FRAME-010). With ``closed``, the caller closed stdin
    already: the agent is only waited on (``grace`` is what is left of the wait;
    ``grace_said`` the whole wait, for the finding's text).
    """
    observer = driver.observer
    if session_id is not None:
        what = "stdin closed in the middle of a turn"
        message: dict[str, Any] | None = {
            "jsonrpc": "2.0",
            "id": driver.next_id(),
            "method": "session/prompt",
            "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": "hello"}]},
        }
    elif pending:
        what = "stdin closed with a request just sent"
        message = {"jsonrpc": "2.0", "id": driver.next_id(), "method": "_acpkit.dev/before_eof"}
    else:
        what = "stdin closed before initialize"
        message = None
    with observer.probe("FRAME-009", what):
        if message is not None:
            driver.send(message)
        if not closed:
            driver.close_stdin()
        if message is None:
            status = driver.wait_exit(grace)
            after = what
        else:
            # The agent answers what it read, then exits (FRAME-010, FRAME-009): the
            # answer gets a step, as any answer does, and the exit a step of its own from
            # the answer, so that a turn that ends late in its step is not read as
            # "never exits".  An agent that neither answers nor exits gets one step.
            status, answered = _answered_or_exited(driver, message["method"], grace)
            if status is None and answered:
                status = driver.wait_exit(grace)
                after = f"it answered the {message['method']} request it read before {what}"
            else:
                after = what
        if status is None:
            waited = grace if grace_said is None else grace_said
            observer.violation("FRAME-009", f"agent still running {waited:g}s after {after} (EOF)")
        else:
            observer.verdicts.ok("FRAME-009")
    if message is None or status is None:
        return
    if _waiting_for(observer, message["method"]):
        observer.judged_unanswered(message["id"])  # judged here, not again when stopped
        observer.violation(
            "FRAME-010",
            f"the agent exited (status {status}) after {what} without answering the "
            f"{message['method']} request it was sent before the EOF",
        )
    else:
        observer.verdicts.ok("FRAME-010")
