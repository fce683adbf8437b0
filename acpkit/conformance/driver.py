"""
The client side that talks to the agent under test: a blocking, byte-level driver over real
pipes.

The tester does not use acpkit's connection layer for the client side: the framing rules it
checks are about bytes, so `AgentDriver` writes raw bytes (optionally split into pieces with
small pauses between them, see `acpkit.conformance.faults`) and reads stdout with
``selectors`` and a deadline. Every line is recorded and checked by an
`acpkit.conformance.observer.Observer`.

Requests the agent sends to us are answered by a `ClientPolicy` (permission choice, fs
served from the session directories, simulated terminals and elicitation answers from
`acpkit.conformance.services`, everything else ``-32601``); a policy may hold a
permission request unanswered so that a test can cancel the turn while it is pending.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from acpkit.conformance.observer import Observer, id_key
from acpkit.conformance.services import Draw, FakeTerminals, elicitation_answer

__all__ = [
    "AgentDriver",
    "AgentGone",
    "ClientPolicy",
    "StepTimeout",
    "encode",
]

_READ_SIZE = 1 << 16
_STDERR_TAIL = 8192


class AgentGone(Exception):
    """The agent closed its stdout or exited while we were waiting for it."""

    def __init__(self, returncode: int | None, stderr_tail: str, what: str) -> None:
        super().__init__(
            f"agent went away while {what} (exit status {returncode}); stderr tail:\n"
            f"{stderr_tail[-1500:]}"
        )
        self.returncode = returncode
        self.stderr_tail = stderr_tail


class StepTimeout(Exception):
    """The agent did not answer within the step timeout."""

    #: the id of the request whose answer was awaited, when there was one (its late answer
    #: can still be judged: `acpkit.conformance.observer.Observer.when_answered`)
    request_id: Any = None


def encode(message: Any) -> bytes:
    """A message as one compact UTF-8 JSON line without its line end."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@attrs.define
class ClientPolicy:
    """
    How the tester answers the agent's requests.

    ``permission``: ``"allow"`` (first allow option, else the first option), ``"reject"``
    (first reject option, else the last option) or ``"hold"`` (leave it pending; the driver
    answers ``cancelled`` after a ``session/cancel``). ``roots``: directories whose files
    ``fs/*`` may read and write. ``terminals``: the simulated terminal service for
    ``terminal/*``. ``elicitation``: the answer to ``elicitation/create`` (``accept``,
    ``decline`` or ``cancel``); ``draw`` draws accepted form content from a strategy (the state
    machine passes Hypothesis' ``data.draw``; without it a deterministic filler is used).
    """

    permission: str = "allow"
    roots: list[str] = attrs.field(factory=list)
    terminals: FakeTerminals = attrs.field(factory=FakeTerminals)
    elicitation: str = "accept"
    draw: Draw | None = None

    def _inside(self, path: Any) -> bool:
        if not isinstance(path, str) or not os.path.isabs(path):
            return False
        real = os.path.realpath(path)
        return any(
            real == os.path.realpath(r) or real.startswith(os.path.realpath(r) + os.sep)
            for r in self.roots
        )

    def answer(self, method: str, params: Any) -> dict[str, Any] | None:
        """The response body (``{"result": …}`` or ``{"error": …}``), or ``None`` to hold."""
        p = params if isinstance(params, dict) else {}
        if method == "session/request_permission":
            options = [o for o in p.get("options", []) if isinstance(o, dict)]
            if self.permission == "hold":
                return None
            if self.permission == "cancelled":
                return {"result": {"outcome": {"outcome": "cancelled"}}}
            if not options:
                return {"result": {"outcome": {"outcome": "cancelled"}}}
            wanted = "allow" if self.permission == "allow" else "reject"
            chosen = next(
                (o for o in options if str(o.get("kind", "")).startswith(wanted)),
                options[0] if wanted == "allow" else options[-1],
            )
            return {
                "result": {"outcome": {"outcome": "selected", "optionId": chosen.get("optionId")}}
            }
        if method == "fs/read_text_file":
            path = p.get("path")
            if not self._inside(path):
                return {"error": {"code": -32602, "message": f"path outside the session: {path}"}}
            try:
                with open(str(path), encoding="utf-8") as f:
                    lines = f.read().splitlines(keepends=True)
            except OSError as e:
                return {"error": {"code": -32002, "message": f"cannot read {path}: {e}"}}
            line = p.get("line")
            limit = p.get("limit")
            start = max(0, line - 1) if isinstance(line, int) else 0
            chosen_lines = lines[start:]
            if isinstance(limit, int):
                chosen_lines = chosen_lines[:limit]
            return {"result": {"content": "".join(chosen_lines)}}
        if method == "fs/write_text_file":
            path = p.get("path")
            if not self._inside(path):
                return {"error": {"code": -32602, "message": f"path outside the session: {path}"}}
            try:
                with open(str(path), "w", encoding="utf-8") as f:
                    f.write(str(p.get("content", "")))
            except OSError as e:
                return {"error": {"code": -32603, "message": f"cannot write {path}: {e}"}}
            return {"result": {}}
        if method.startswith("terminal/"):
            return self.terminals.answer(method, p)
        if method == "elicitation/create":
            return elicitation_answer(p, self.elicitation, self.draw)
        return {"error": {"code": -32601, "message": f"Method not found: {method}"}}


class AgentDriver:
    """
    One agent process under test, driven synchronously over its stdin / stdout pipes.

    ``timeout`` bounds each wait (seconds). ``pause`` is called between the pieces of a split
    write (default: `time.sleep`).
    """

    def __init__(
        self,
        argv: Sequence[str],
        observer: Observer,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        policy: ClientPolicy | None = None,
        pause: Callable[[float], None] = time.sleep,
    ) -> None:
        self.argv = list(argv)
        self.observer = observer
        self.cwd = cwd
        self.env = dict(env) if env is not None else None
        self.timeout = timeout
        self.policy = policy if policy is not None else ClientPolicy()
        self.pause = pause
        self.process: subprocess.Popen[bytes] | None = None
        self._buffer = bytearray()
        self._eof = False
        self._stderr: collections.deque[bytes] = collections.deque()
        self._stderr_size = 0
        self._stderr_thread: threading.Thread | None = None
        self._next_id = 0
        self.inbox: list[dict[str, Any]] = []
        self.held: list[dict[str, Any]] = []
        self.stdin_closed = False

    # -- process -----------------------------------------------------------------------

    def start(self) -> None:
        """Spawn the agent in its own process group; its stderr is drained continuously."""
        self.process = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=self.cwd,
            env=self.env,
            bufsize=0,
            start_new_session=True,
        )
        assert self.process.stdout is not None and self.process.stdin is not None
        os.set_blocking(self.process.stdout.fileno(), False)
        os.set_blocking(self.process.stdin.fileno(), False)
        self._stderr_thread = threading.Thread(target=self._drain_stderr, daemon=True)
        self._stderr_thread.start()

    def _drain_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        stream = self.process.stderr
        while True:
            try:
                chunk = stream.read(4096)
            except (OSError, ValueError):
                return
            if not chunk:
                return
            self._stderr.append(chunk)
            self._stderr_size += len(chunk)
            while self._stderr_size > _STDERR_TAIL and len(self._stderr) > 1:
                self._stderr_size -= len(self._stderr.popleft())

    @property
    def stderr_tail(self) -> str:
        """The last few KiB the agent wrote on stderr."""
        return b"".join(self._stderr).decode("utf-8", "replace")

    @property
    def returncode(self) -> int | None:
        """The exit status, or ``None`` while the agent runs."""
        return None if self.process is None else self.process.poll()

    @property
    def session_streams_used(self) -> bool:
        """Messages came on streams of their own, opened late (a remote driver's concern)."""
        return False

    def close_stdin(self) -> None:
        """Close the agent's stdin (EOF)."""
        if self.process is not None and self.process.stdin is not None and not self.stdin_closed:
            self.stdin_closed = True
            self.observer.stdin_closed = True
            self.observer.note("stdin closed (EOF)")
            try:
                self.process.stdin.close()
            except OSError:
                pass

    def wait_exit(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds for the agent to exit (reading its stdout meanwhile)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.returncode is not None:
                # what it wrote before exiting may still be in the pipe: read to its end
                # (bounded: a child of the agent may hold the pipe open)
                rest = time.monotonic() + 0.5
                while time.monotonic() < rest and self._read(0.05):
                    pass
                return self.returncode
            self._read(min(0.05, max(0.0, deadline - time.monotonic())))
        return self.returncode

    def stop(self) -> None:
        """Close stdin, give the agent a moment, then kill its whole process group."""
        if self.process is None:
            return
        self.close_stdin()
        try:
            self.process.wait(timeout=min(2.0, self.timeout))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except OSError:
                pass
            self.process.wait()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass

    # -- writing -----------------------------------------------------------------------

    def next_id(self) -> int:
        """A fresh integer request id."""
        self._next_id += 1
        return self._next_id

    def write(self, data: bytes, pieces: Sequence[int] = (), pause: float = 0.0) -> None:
        """
        Write raw bytes, cut at the offsets ``pieces`` (sorted, inside ``data``) with ``pause``
        seconds between pieces. Lines are recorded in the transcript as written.
        """
        self.observer.sent_bytes(data)
        cuts = [0, *sorted(c for c in pieces if 0 < c < len(data)), len(data)]
        for number, (start, end) in enumerate(itertools.pairwise(cuts)):
            if number and pause:
                self.pause(pause)
            self._write_all(data[start:end])

    def _write_all(self, data: bytes) -> None:
        assert self.process is not None and self.process.stdin is not None
        if self.stdin_closed:
            raise AgentGone(self.returncode, self.stderr_tail, "writing after EOF")
        view = memoryview(data)
        deadline = time.monotonic() + self.timeout
        fd = self.process.stdin.fileno()
        while view:
            try:
                written = os.write(fd, view)
                view = view[written:]
                continue
            except BlockingIOError:
                pass
            except (BrokenPipeError, OSError) as e:
                raise AgentGone(self.returncode, self.stderr_tail, f"writing ({e})") from None
            if time.monotonic() > deadline:
                raise StepTimeout(f"agent did not read its stdin within {self.timeout}s")
            with selectors.DefaultSelector() as sel:
                sel.register(fd, selectors.EVENT_WRITE)
                sel.select(0.02)
            self._read(0)

    def send(self, message: Any, line_end: bytes = b"\n") -> None:
        """Send one message as one line (the observer accounts for it from the bytes)."""
        self.write(encode(message) + line_end)

    def notify(self, method: str, params: Any = None) -> None:
        """Send a notification."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def respond(self, request_id: Any, body: Mapping[str, Any]) -> None:
        """Answer one of the agent's requests with ``body`` (``result`` or ``error``)."""
        self.send({"jsonrpc": "2.0", "id": request_id, **body})

    # -- reading -----------------------------------------------------------------------

    def _read(self, timeout: float) -> bool:
        """Read what is available within ``timeout``; dispatch whole lines. False at EOF."""
        if self._eof:
            return False
        assert self.process is not None and self.process.stdout is not None
        fd = self.process.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            ready = sel.select(timeout)
        if not ready:
            return True
        while True:
            try:
                chunk = os.read(fd, _READ_SIZE)
            except BlockingIOError:
                break
            if not chunk:
                self._eof = True
                break
            start = len(self._buffer)
            self._buffer += chunk
            newline = self._buffer.find(b"\n", start)
            while newline != -1:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                self._dispatch(line)
                newline = self._buffer.find(b"\n")
        if self._eof and self._buffer:
            line, self._buffer = bytes(self._buffer), bytearray()
            self._dispatch(line)
        if self._eof:
            self.observer.flush()
        return not self._eof

    def _dispatch(self, line: bytes) -> None:
        message = self.observer.received(line)
        if message is None:
            return
        if "method" in message and "id" in message:
            body = self.policy.answer(str(message["method"]), message.get("params"))
            if self.stdin_closed:
                pass  # nobody can answer any more
            elif body is None:
                self.held.append(message)
            else:
                self.respond(message["id"], body)
            self.inbox.append(message)
        else:
            self.inbox.append(message)

    def answer_held(self, body: Mapping[str, Any]) -> int:
        """Answer every held request with ``body``; the number answered."""
        held, self.held = self.held, []
        for message in held:
            self.respond(message["id"], body)
        return len(held)

    def wait_for(
        self,
        predicate: Callable[[dict[str, Any]], bool],
        what: str,
        timeout: float | None = None,
        start: int = 0,
    ) -> dict[str, Any]:
        """
        Read until a message satisfying ``predicate`` arrives at inbox position ``start`` or
        later (it is removed from the inbox, the others stay). Raises `StepTimeout` or
        `AgentGone`.
        """
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        checked = min(start, len(self.inbox))
        first_record = len(self.observer.transcript.records)
        while True:
            for position in range(checked, len(self.inbox)):
                if predicate(self.inbox[position]):
                    return self.inbox.pop(position)
            checked = len(self.inbox)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise StepTimeout(
                    f"no answer within {limit:g}s while {what}; "
                    f"{self._received_since(first_record)}"
                )
            if not self._read(min(remaining, 0.25)):
                if self._eof:
                    for position in range(checked, len(self.inbox)):
                        if predicate(self.inbox[position]):
                            return self.inbox.pop(position)
                    self.wait_exit(min(1.0, self.timeout))
                    raise AgentGone(self.returncode, self.stderr_tail, what)

    #: How evidence names what the agent sent, and its silence (a remote driver's words
    #: differ: messages on streams, not lines on stdout).
    _sent_words = "wrote {count} line(s)"
    _silence_words = "wrote nothing on stdout"

    def _received_since(self, first_record: int) -> str:
        """What the agent sent since transcript record ``first_record`` (for evidence)."""
        lines = [
            line
            for _, direction, line in self.observer.transcript.records[first_record:]
            if direction == "<-"
        ]
        if not lines:
            return f"meanwhile the agent {self._silence_words}"
        last = lines[-1][:160].decode("utf-8", "replace")
        return f"meanwhile the agent {self._sent_words.format(count=len(lines))}, the last: {last}"

    def drain(self, seconds: float) -> None:
        """Read and dispatch for ``seconds`` (to catch late or unexpected messages)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self._read(max(0.0, deadline - time.monotonic())):
            pass

    def response_to(
        self, request_id: Any, what: str, timeout: float | None = None
    ) -> dict[str, Any]:
        """Wait for the response to ``request_id`` (an id of another JSON type also matches,
        so that an id-type violation is reported instead of timing out)."""
        key = id_key(request_id)
        loose = str(request_id)

        def match(message: dict[str, Any]) -> bool:
            if "method" in message or "id" not in message:
                return False
            return id_key(message["id"]) == key or str(message["id"]) == loose

        return self.wait_for(match, what, timeout)

    def request(
        self,
        method: str,
        params: Any = None,
        *,
        request_id: Any = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Send a request and wait for its response (the whole response message)."""
        rid = self.next_id() if request_id is None else request_id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        try:
            return self.response_to(rid, f"waiting for the answer to {method}", timeout)
        except StepTimeout as e:
            e.request_id = rid
            raise

    def updates(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """Take the ``session/update`` notifications from the inbox (optionally one session's)."""
        taken, kept = [], []
        for message in self.inbox:
            params = message.get("params")
            if (
                message.get("method") == "session/update"
                and "id" not in message
                and (
                    session_id is None
                    or (isinstance(params, dict) and params.get("sessionId") == session_id)
                )
            ):
                taken.append(message)
            else:
                kept.append(message)
        self.inbox = kept
        return taken
