"""
`RemoteDriver`: the blocking agent driver (`acpkit.conformance.driver.AgentDriver`) over a
remote agent's URL instead of a child process's pipes.

Every message the tester writes is one ``POST`` body (Streamable HTTP) or one text frame
(WebSocket); every message the agent sends, read from the connection's SSE stream or its
text frames, is handed to the observer as one line, so every traffic check of the stdio
suite applies unchanged. While it runs it judges the transport rules visible in ordinary
traffic (HTTP-001, HTTP-002, HTTP-009, WS-001, WS-002); the probes that need a
deliberately wrong request are in `acpkit.conformance.probes_transport`.

Over Streamable HTTP the tester reads every stream an agent may use. The RFD (since its
2026-05-04 revision) has one connection-scoped ``GET`` stream and one session-scoped ``GET``
(``Acp-Connection-Id`` + ``Acp-Session-Id``) per session, which carries all of that
session's messages. The tester starts with the connection stream; when a wait has heard
nothing for `RemoteDriver.session_stream_grace` seconds it also opens the session-scoped
``GET`` of every session it knows (a server may hold a session's messages until its stream
opens), so that the agent's ACP behaviour is judged whatever its routing (a server of the
2026-04-23 revision sends everything on the connection stream); a refusal of that ``GET``
is only noted here. The routing itself is HTTP-012, judged by
`acpkit.conformance.probes_transport` on a connection that opens the session's stream at
once and notes on which stream each message arrives (`read_session_streams` off).
"""

from __future__ import annotations

import http.client
import queue
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from acpkit.conformance.driver import AgentDriver, AgentGone, ClientPolicy, StepTimeout
from acpkit.conformance.observer import Observer, id_key
from acpkit.conformance.tls import SYSTEM_TLS, TLSSettings
from acpkit.conformance.wire import (
    MAX_MESSAGE,
    CookieJar,
    HTTPAnswer,
    RemoteURL,
    WebSocket,
    WebSocketError,
    http_request,
    open_stream,
)
from acpkit.http.sse import SSEEventTooLarge, SSEParser
from acpkit.jsonrpc import jsonbytes

__all__ = ["CONNECTION_ID", "SESSION_ID", "Refused", "RemoteDriver", "jsonrpc_body"]

CONNECTION_ID = "Acp-Connection-Id"
SESSION_ID = "Acp-Session-Id"
_END = object()


class Refused(StepTimeout):
    """
    The server refused the ``POST`` of a message with an HTTP error status (a transport
    answer, before the agent saw it): whatever the tester waits for will never come. A
    `StepTimeout`, so every wait that gives up on a slow agent gives up on it at once, with
    the status and body as the reason.
    """

    def __init__(self, status: int, body: bytes, what: str) -> None:
        shown = body[:160].decode("utf-8", "replace").strip()
        super().__init__(
            f"the server refused the POST of {what} with HTTP {status}"
            + (f" {shown}" if shown else "")
            + ": the agent never saw it"
        )
        self.status = status


def _one_line(data: bytes) -> bytes:
    """A message as one observer line (newlines between JSON tokens are whitespace)."""
    return data.replace(b"\r", b" ").replace(b"\n", b" ")


class RemoteDriver(AgentDriver):
    """
    One remote agent connection, driven synchronously. ``headers`` are sent on every request
    (an ``Authorization`` header, say) and never recorded. Cookies the server sets are kept
    for the connection's life and sent back.
    """

    _sent_words = "sent {count} message(s)"
    _silence_words = "sent nothing on any stream it opened"

    #: seconds a wait hears nothing before the session-scoped streams are opened too
    session_stream_grace = 0.5

    def __init__(
        self,
        url: str,
        observer: Observer,
        *,
        headers: Sequence[tuple[str, str]] = (),
        timeout: float = 10.0,
        policy: ClientPolicy | None = None,
        tls: TLSSettings = SYSTEM_TLS,
    ) -> None:
        super().__init__((), observer, timeout=timeout, policy=policy)
        self.url = RemoteURL.parse(url)
        #: the TLS settings of every connection (https:// and wss:// only)
        self.tls = tls
        self.headers = dict(headers)
        self.jar = CookieJar()
        self.connection_id: str | None = None
        self._queue: queue.Queue[object] = queue.Queue()
        self._socket: WebSocket | None = None
        self._stream: http.client.HTTPConnection | None = None
        #: the session-scoped GET streams opened (session id -> its HTTP connection, or
        #: ``None`` when the server refused it); attempted once per session
        self._session_streams: dict[str, http.client.HTTPConnection | None] = {}
        #: open session-scoped GETs when a wait hears nothing (off: the RFD's single stream)
        self.read_session_streams = True
        #: the sessions the tester knows on this connection, in order
        self.sessions: list[str] = []
        #: every message read from a session-scoped GET: (session id, message)
        self.session_arrivals: list[tuple[str, dict[str, Any]]] = []
        #: every message read from the connection's GET stream, in order
        self.connection_arrivals: list[dict[str, Any]] = []
        #: the session and method of each request the tester posted with a session id
        self._posted: dict[str, tuple[str | None, str]] = {}
        #: the requests whose POST the server refused (id -> the refusal)
        self._refused: dict[str, Refused] = {}
        #: the refusal of the last message posted, if it was refused
        self.last_refusal: Refused | None = None
        self._reader: threading.Thread | None = None
        self._agent_sessions: dict[str, str] = {}
        self._closed = False
        self._ended = threading.Event()
        #: every message read from the agent, in arrival order (for the ordering checks)
        self.arrivals: list[dict[str, Any]] = []
        self.accepted = 0

    # -- process-like life -----------------------------------------------------------------

    def start(self) -> None:
        """Open the WebSocket (WS-001 judged on its answer); HTTP opens at ``initialize``."""
        if not self.url.websocket:
            return
        try:
            websocket = WebSocket.connect(
                self.url, self.headers, timeout=self.timeout, tls=self.tls, jar=self.jar
            )
        except WebSocketError as e:
            raise OSError(str(e)) from None
        self._socket = websocket
        self.connection_id = websocket.answer.header(CONNECTION_ID)
        if self.connection_id:
            self.observer.verdicts.ok("WS-001")
        else:
            self.observer.violation(
                "WS-001", f"the WebSocket upgrade answer (101) has no {CONNECTION_ID} header"
            )
        self._reader = threading.Thread(target=self._read_socket, args=(websocket,), daemon=True)
        self._reader.start()

    @property
    def returncode(self) -> int | None:
        """A remote agent has no exit status."""
        return None

    @property
    def stderr_tail(self) -> str:
        """A remote agent has no stderr."""
        return ""

    def close_stdin(self) -> None:
        """End the connection: ``DELETE`` (HTTP) or a close frame (WebSocket)."""
        if self.stdin_closed:
            return
        self.stdin_closed = True
        self.observer.note("connection closed by the tester")
        if self._socket is not None:
            self._socket.close()
        elif self.connection_id is not None:
            try:
                answer = http_request(
                    self.url,
                    "DELETE",
                    {**self.headers, CONNECTION_ID: self.connection_id},
                    timeout=self.timeout,
                    tls=self.tls,
                    jar=self.jar,
                )
            except OSError:
                return
            wait = min(2.0, self.timeout)
            if answer.status == 202 and self._stream is not None and not self._ended.wait(wait):
                self.observer.violation(
                    "HTTP-008",
                    f"the GET stream was still open {wait:g}s after DELETE was answered 202",
                )

    def wait_exit(self, timeout: float) -> int | None:
        """Nothing to wait for: a remote agent does not exit."""
        return None

    def stop(self) -> None:
        """Close the connection and the SSE stream."""
        self.close_stdin()
        streams = [self._stream, *self._session_streams.values()]
        for stream in streams:
            if stream is None:
                continue
            sock = stream.sock
            if sock is not None:  # wakes the reader thread before the close takes its lock
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            stream.close()
        self._closed = True

    # -- writing -------------------------------------------------------------------------

    def write(self, data: bytes, pieces: Sequence[int] = (), pause: float = 0.0) -> None:
        """Each line of ``data`` is one message (``pieces`` do not apply remotely)."""
        self.observer.sent_bytes(data)
        for line in data.split(b"\n"):
            line = line.rstrip(b"\r")
            if line:
                self._send_message(line)

    def send_binary(self, data: bytes) -> None:
        """A binary WebSocket frame (WS-003): recorded as a note, not as a message."""
        assert self._socket is not None
        self.observer.note(f"binary frame sent ({len(data)} bytes)")
        self._socket.send(data, opcode=2)

    def _send_message(self, body: bytes) -> None:
        if self.stdin_closed:
            raise AgentGone(None, "", "writing after the connection was closed")
        if self._socket is not None:
            try:
                self._socket.send(body)
            except OSError as e:
                raise AgentGone(None, "", f"writing ({e})") from None
            return
        self._post(body)

    def _post(self, body: bytes) -> None:
        try:
            message = jsonbytes.loads(body)
        except ValueError:
            message = None
        single = isinstance(message, dict) and message.get("jsonrpc") == "2.0"
        method = message.get("method") if isinstance(message, dict) else None
        headers = {**self.headers, "Content-Type": "application/json"}
        headers["Accept"] = "application/json, text/event-stream"
        initialize = method == "initialize" and self.connection_id is None
        if self.connection_id is not None:
            headers[CONNECTION_ID] = self.connection_id
        session = self._session_of(message)
        if session is not None:
            headers[SESSION_ID] = session
            self._know(session)
        if isinstance(message, dict) and "method" in message and "id" in message:
            self._posted[id_key(message["id"])] = (session, str(method))
        try:
            answer = http_request(
                self.url, "POST", headers, body, timeout=self.timeout, tls=self.tls, jar=self.jar
            )
        except TimeoutError:
            # no HTTP answer at all within the step: not gone, but not "202 immediately"
            what = str(method) if method else "a response"
            if not initialize and single:
                self.observer.violation(
                    "HTTP-002",
                    f"a POST of {what} got no HTTP answer within {self.timeout:g}s: every "
                    "POST but initialize is answered 202 Accepted immediately (its answer "
                    "comes on the stream)",
                )
            raise StepTimeout(f"posting {what}: no HTTP answer within {self.timeout:g}s") from None
        except OSError as e:
            raise AgentGone(None, "", f"posting a message ({e})") from None
        if initialize:
            self._initialized(answer)
            return
        self.last_refusal = None
        if answer.status >= 400 and jsonrpc_body(answer.body) is None:
            # an answer without a JSON-RPC message: nothing will ever answer this one
            what = str(method) if method else "a message that is not a JSON-RPC request"
            self.last_refusal = Refused(answer.status, answer.body, what)
            if isinstance(message, dict) and "method" in message and "id" in message:
                self._refused[id_key(message["id"])] = self.last_refusal
                # the transport's refusal is its answer: not an unanswered request
                self.observer.judged_unanswered(message["id"])
        if answer.status == 202:
            if single:
                self.accepted += 1
                self.observer.verdicts.ok("HTTP-002")
            return
        if single and 200 <= answer.status < 300:
            self.observer.violation(
                "HTTP-002",
                f"a POST of {method or 'a response'} was answered {answer.status}, not 202 "
                "Accepted",
            )
        elif answer.status >= 400:
            self.observer.note(f"POST answered {answer.status}")
        self._body_messages(answer)

    def _session_of(self, message: Any) -> str | None:
        if not isinstance(message, dict):
            return None
        params = message.get("params")
        if isinstance(params, dict) and isinstance(params.get("sessionId"), str):
            return str(params["sessionId"])
        if "method" not in message and "id" in message:
            return self._agent_sessions.get(id_key(message["id"]))
        return None

    def _body_messages(self, answer: HTTPAnswer) -> None:
        """A JSON-RPC message in a POST answer's body goes to the observer like any other;
        another body (an HTTP error's ``{"error": "…"}``, say) is only noted."""
        body = jsonrpc_body(answer.body)
        if body is not None:
            self._queue.put(body)
        elif answer.body.strip():
            self.observer.note(
                f"POST answer {answer.status} with a body that is not JSON-RPC: "
                f"{answer.body[:200]!r}"
            )

    def _initialized(self, answer: HTTPAnswer) -> None:
        problems = []
        if answer.status != 200:
            problems.append(f"status {answer.status}, not 200")
        content_type = (answer.header("content-type") or "").split(";")[0].strip().lower()
        if answer.status == 200 and content_type != "application/json":
            problems.append(f"Content-Type {content_type or '(none)'}, not application/json")
        self.connection_id = answer.header(CONNECTION_ID)
        if not self.connection_id:
            problems.append(f"no {CONNECTION_ID} header")
            self._body_messages(answer)
            result = _parse(answer.body)
            found = result.get("result") if isinstance(result, dict) else None
            fallback = found.get("connectionId") if isinstance(found, dict) else None
            if isinstance(fallback, str):
                self.connection_id = fallback
        else:
            self._body_messages(answer)
        if problems:
            self.observer.violation(
                "HTTP-001", "the POST of initialize was answered with " + ", ".join(problems)
            )
        else:
            self.observer.verdicts.ok("HTTP-001")
        if self.connection_id is not None and answer.status == 200:
            self._open_stream()

    def _know(self, session: str) -> None:
        if session not in self.sessions:
            self.sessions.append(session)

    def open_session_streams(self) -> bool:
        """Open the session-scoped ``GET`` of every known session not tried yet; True when
        one was tried."""
        pending = [s for s in self.sessions if s not in self._session_streams]
        for session in pending:
            self._open_session_stream(session)
        return bool(pending)

    def _open_session_stream(self, session: str) -> None:
        """
        Open the session-scoped ``GET`` of ``session`` once (waiting for its answer's
        headers). The RFD has no such stream: a refusal is noted, never judged.
        """
        if (
            self.url.websocket
            or self.connection_id is None
            or self.stdin_closed
            or session in self._session_streams
        ):
            return
        self._session_streams[session] = None
        headers = {**self.headers, "Accept": "text/event-stream"}
        headers[CONNECTION_ID] = self.connection_id
        headers[SESSION_ID] = session
        try:
            answer, response, connection = open_stream(
                self.url, headers, timeout=self.timeout, tls=self.tls, jar=self.jar
            )
        except OSError as e:
            self.observer.note(f"the session-scoped GET of {session!r} failed: {e}")
            return
        if response is None:
            self.observer.note(
                f"the session-scoped GET of {session!r} was answered {answer.status}: "
                "nothing to read there"
            )
            return
        self._session_streams[session] = connection
        self.observer.note(f"session-scoped GET of {session!r} open: read like the other")
        reader = threading.Thread(target=self._read_stream, args=(response, session), daemon=True)
        reader.start()

    @property
    def session_streams_used(self) -> bool:
        """A session-scoped GET was opened: the server routes a session's messages there."""
        return any(connection is not None for connection in self._session_streams.values())

    def _open_stream(self) -> None:
        assert self.connection_id is not None
        headers = {**self.headers, "Accept": "text/event-stream"}
        headers[CONNECTION_ID] = self.connection_id
        try:
            answer, response, connection = open_stream(
                self.url, headers, timeout=self.timeout, tls=self.tls, jar=self.jar
            )
        except OSError as e:
            self.observer.violation("HTTP-009", f"the GET stream could not be opened: {e}")
            return
        content_type = (answer.header("content-type") or "").split(";")[0].strip().lower()
        if response is None or content_type != "text/event-stream":
            self.observer.violation(
                "HTTP-009",
                f"the GET stream was answered {answer.status} with Content-Type "
                f"{content_type or '(none)'}, not 200 text/event-stream",
            )
            if response is None:
                return
        self._stream = connection
        self._reader = threading.Thread(
            target=self._read_stream, args=(response, None), daemon=True
        )
        self._reader.start()

    # -- reading threads -----------------------------------------------------------------

    def _read_stream(self, response: http.client.HTTPResponse, session: str | None) -> None:
        """Read one SSE stream: the connection's (``session`` None; its end is the end of
        the connection) or a session-scoped one."""
        parser = SSEParser(MAX_MESSAGE)
        kind = "sse" if session is None else "session-sse"
        try:
            while True:
                chunk = response.read1(65536)
                if not chunk:
                    break
                for event in parser.feed(chunk):
                    if event.data:
                        self._queue.put((kind, event.data, session))
        except SSEEventTooLarge:
            self._queue.put(("note", f"an SSE event larger than {MAX_MESSAGE} bytes"))
        except (OSError, ValueError, http.client.HTTPException, AttributeError):
            pass  # AttributeError: http.client's answer to a connection closed by `stop`
        if session is not None:
            self._queue.put(("note", f"the session-scoped GET stream of {session!r} ended"))
            return
        self._ended.set()
        self._queue.put(_END)

    def _read_socket(self, websocket: WebSocket) -> None:
        try:
            while True:
                received = websocket.recv()
                if received is None:
                    break
                opcode, payload = received
                if opcode == 2:
                    self._queue.put(("binary", payload))
                else:
                    self._queue.put(("text", payload))
        except WebSocketError as e:
            self._queue.put(("note", f"WebSocket framing broken: {e}"))
        self._queue.put(_END)

    def _read(self, timeout: float) -> bool:
        """Dispatch what arrived within ``timeout``; False at the end of the connection."""
        if self._eof:
            return False
        try:
            item = (
                self._queue.get(timeout=max(0.0, timeout)) if timeout else self._queue.get_nowait()
            )
        except queue.Empty:
            return True
        while True:
            if item is _END:
                self._eof = True
                self.observer.flush()
                return False
            self._take(item)
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return True

    def _take(self, item: object) -> None:
        if isinstance(item, bytes):  # a POST answer's body
            self._dispatch(item)
            return
        assert isinstance(item, tuple)
        kind, payload, *scope = item
        if kind == "note":
            self.observer.note(str(payload))
            return
        if kind == "binary":
            self.observer.violation(
                "WS-002", f"the agent sent a binary frame ({len(payload)} bytes), not text"
            )
            return
        value = _parse(payload)
        rule = "HTTP-009" if kind in ("sse", "session-sse") else "WS-002"
        where = "an SSE event" if rule == "HTTP-009" else "a text frame"
        if isinstance(value, dict):
            self.observer.verdicts.ok(rule)
        elif value is not None:
            self.observer.violation(
                rule, f"{where} carries {type(value).__name__} JSON, not one JSON-RPC message"
            )
        else:
            self.observer.violation(rule, f"{where} is not one JSON value: {payload[:120]!r}")
        if isinstance(value, dict) and kind == "session-sse" and scope:
            self.session_arrivals.append((str(scope[0]), value))
        elif isinstance(value, dict) and kind == "sse":
            self.connection_arrivals.append(value)
        self._dispatch(_one_line(payload))

    def session_stream_refusal(self, session: str) -> str | None:
        """Why the session-scoped GET of ``session`` is not open (``None`` when it is)."""
        if self._session_streams.get(session) is not None:
            return None
        if session not in self._session_streams:
            return "it was never opened"
        return "it was refused or failed (see the notes)"

    def session_of_message(self, message: dict[str, Any]) -> str | None:
        """The session an agent message belongs to: the ``sessionId`` of its params (a
        notification or a request), or the ``Acp-Session-Id`` the tester posted the request
        it answers with; ``None`` for a connection-level message."""
        params = message.get("params")
        if "method" in message:
            if isinstance(params, dict) and isinstance(params.get("sessionId"), str):
                return str(params["sessionId"])
            return None
        session, _ = self._posted.get(id_key(message.get("id")), (None, ""))
        return session

    def describe(self, message: dict[str, Any]) -> str:
        """What an agent message is, for a finding."""
        if "method" in message:
            kind = "request" if "id" in message else "notification"
            return f"the {kind} {message['method']}"
        key = id_key(message.get("id"))
        _, method = self._posted.get(key, (None, "a request"))
        return f"the response to {method} (id {key})"

    def _dispatch(self, line: bytes) -> None:
        message = _parse(line)
        if isinstance(message, dict):
            self.arrivals.append(message)
            params = message.get("params")
            if "method" in message and "id" in message and isinstance(params, dict):
                session = params.get("sessionId")
                if isinstance(session, str):
                    self._agent_sessions[id_key(message["id"])] = session
        super()._dispatch(line)
        result = message.get("result") if isinstance(message, dict) else None
        if isinstance(message, dict) and "method" not in message and isinstance(result, dict):
            session = result.get("sessionId")
            if isinstance(session, str):  # a new session
                self._know(session)

    def wait_for(
        self,
        predicate: Callable[[dict[str, Any]], bool],
        what: str,
        timeout: float | None = None,
        start: int = 0,
    ) -> dict[str, Any]:
        """`AgentDriver.wait_for`; over Streamable HTTP, after `session_stream_grace`
        seconds without the awaited message, the known sessions' session-scoped streams are
        opened too (once each) and the wait goes on for the rest of the step."""
        limit = self.timeout if timeout is None else timeout
        grace = self.session_stream_grace
        if self.url.websocket or not self.read_session_streams or limit <= grace:
            return super().wait_for(predicate, what, timeout, start)
        first_record = len(self.observer.transcript.records)
        try:
            return super().wait_for(predicate, what, grace, start)
        except StepTimeout:
            self.open_session_streams()
        try:
            return super().wait_for(predicate, what, limit - grace, start)
        except StepTimeout:
            raise StepTimeout(
                f"no answer within {limit:g}s while {what}; {self._received_since(first_record)}"
            ) from None

    def response_to(
        self, request_id: Any, what: str, timeout: float | None = None
    ) -> dict[str, Any]:
        """Wait for the response to ``request_id``; `Refused` at once when its POST was."""
        refusal = self._refused.get(id_key(request_id))
        if refusal is not None:
            raise refusal
        return super().response_to(request_id, what, timeout)

    def wait_until(self, deadline: float) -> None:
        """Read until ``deadline`` (monotonic) or the end."""
        while time.monotonic() < deadline and self._read(max(0.0, deadline - time.monotonic())):
            pass


def jsonrpc_body(body: bytes) -> bytes | None:
    """``body`` as one observer line when it is a JSON-RPC message (an object with
    ``jsonrpc``, or an array of such objects), else ``None``."""
    value = _parse(body)
    items = value if isinstance(value, list) else [value]
    if items and all(isinstance(item, dict) and "jsonrpc" in item for item in items):
        return _one_line(body.strip())
    return None


def _parse(data: bytes) -> Any:
    try:
        return jsonbytes.loads(data)
    except ValueError:
        return None


def describe_headers(headers: Mapping[str, str]) -> str:
    """Header names only (values may be tokens): for notes and reports."""
    return ", ".join(sorted(headers)) or "(none)"
