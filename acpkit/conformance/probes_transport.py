"""
The transport probes of a remote agent (``acpkit-conformance --url``): raw HTTP requests and
WebSocket frames that a well-behaved client never sends, for the rules of the RFD
"Streamable HTTP & WebSocket Transport" that need them (HTTP-003..013, WS-003).

The rules visible in ordinary traffic (HTTP-001, HTTP-002, HTTP-009's framing, WS-001,
WS-002) are judged by `acpkit.conformance.remote_driver.RemoteDriver` in every run.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from acpkit.conformance.driver import StepTimeout
from acpkit.conformance.harness import (
    PROTOCOL_VERSION,
    CannotTest,
    SuiteConfig,
    client_capabilities,
    run_turn,
)
from acpkit.conformance.observer import Verdicts, id_key
from acpkit.conformance.remote_driver import CONNECTION_ID, SESSION_ID, RemoteDriver
from acpkit.conformance.tls import TLSFailure
from acpkit.conformance.wire import CookieJar, HTTPAnswer, RemoteURL, http_request

__all__ = [
    "HTTP_RULES",
    "PROCESS_RULES",
    "WS_RULES",
    "check_tls",
    "run_transport_probes",
    "skip_process_rules",
]

#: Rules about a child process's pipes, exit or working directory, with why they are not
#: judged for an agent reached by URL.
PROCESS_RULES: dict[str, str] = {
    "FRAME-004": "stdio framing: remotely a message is one POST body or one text frame",
    "FRAME-005": "stdio framing: remotely a message is one POST body or one text frame",
    "FRAME-006": "stdio line ends: remotely a message is one POST body or one text frame",
    "FRAME-007": "stdio line length: a remote server's message size limit is its own",
    "FRAME-008": "stdio junk lines: remotely a message is one POST body or one text frame",
    "FRAME-009": "EOF on stdin and the exit status belong to a child process, not a URL",
    "FRAME-010": "answers before exit at EOF belong to a child process, not a URL",
    "SESSION-009": "the tester cannot choose the working directory of an agent it reaches by URL",
}


def check_tls(config: SuiteConfig) -> None:
    """
    Before any rule is judged, one plain ``GET`` of an ``https://`` or ``wss://`` URL:
    raises `CannotTest` saying why in words when the TLS handshake fails (a certificate
    not trusted, a client certificate required or refused), which would otherwise show in
    every rule. Any HTTP answer will do; another failure is left to the run to report.
    """
    if config.url is None:
        return
    url = RemoteURL.parse(config.url)
    if not url.secure:
        return
    try:
        http_request(
            url, "GET", {"Accept": "text/event-stream"}, timeout=config.timeout, tls=config.tls
        )
    except TLSFailure as e:
        raise CannotTest(f"cannot connect to {url.display()}: {e}") from None
    except OSError:
        return


def skip_process_rules(verdicts: Verdicts) -> None:
    """Mark every process-level rule not applicable, with its reason."""
    for rule_id, reason in PROCESS_RULES.items():
        verdicts.skip(rule_id, f"agent tested by URL: {reason}")


def _initialize_body(request_id: int = 1) -> bytes:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": client_capabilities(),
                "clientInfo": {"name": "acpkit-conformance", "version": "1"},
            },
        }
    ).encode()


class _Raw:
    """Raw requests to one URL with the user's headers and one cookie jar."""

    def __init__(self, config: SuiteConfig, verdicts: Verdicts) -> None:
        assert config.url is not None
        self.url = RemoteURL.parse(config.url)
        self.headers = dict(config.headers)
        self.timeout = config.timeout
        self.tls = config.tls
        self.verdicts = verdicts
        self.jar = CookieJar()

    def request(
        self, method: str, headers: Mapping[str, str], body: bytes | None = None
    ) -> HTTPAnswer:
        try:
            return http_request(
                self.url,
                method,
                {**self.headers, **headers},
                body,
                timeout=self.timeout,
                tls=self.tls,
                jar=self.jar,
            )
        except OSError as e:  # judged by `expect` as "no answer"
            return HTTPAnswer(0, {}, f"no HTTP answer: {e}".encode())

    def initialize(self) -> str | None:
        """A fresh connection: its id, or ``None`` (HTTP-001 judges the driver's own)."""
        answer = self.request("POST", _json_headers(), _initialize_body())
        return answer.header(CONNECTION_ID) if answer.status == 200 else None

    def expect(self, rule_id: str, what: str, answer: HTTPAnswer, *statuses: int) -> bool:
        if answer.status in statuses:
            self.verdicts.ok(rule_id)
            return True
        wanted = " or ".join(str(s) for s in statuses)
        body = answer.body[:160].decode("utf-8", "replace")
        if answer.status == 0:
            self.verdicts.violation(rule_id, f"{what} got {body}, not {wanted}")
            return False
        self.verdicts.violation(
            rule_id,
            f"{what} was answered {answer.status}, not {wanted}",
            f"{answer.version} {answer.status}\n{body}" if body else "",
        )
        return False


def _json_headers(**more: str) -> dict[str, str]:
    return {"Content-Type": "application/json", "Accept": "application/json", **more}


def _request_body(method: str, params: Any = None, request_id: Any = 900) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode()


def _probe_http_validation(config: SuiteConfig, verdicts: Verdicts) -> None:
    """HTTP-003..008: each wrong request on a connection of its own."""
    raw = _Raw(config, verdicts)
    stream = {"Accept": "text/event-stream"}
    unknown = f"acpkit-conformance-unknown-{uuid.uuid4()}"
    cid = raw.initialize()
    if cid is None:
        for rule_id in ("HTTP-003", "HTTP-004", "HTTP-007", "HTTP-008"):
            verdicts.skip(rule_id, "a raw initialize POST got no Acp-Connection-Id")
    else:
        probe = _request_body("_acpkit.dev/conformance_probe", {})
        answer = raw.request("POST", {"Content-Type": "text/plain", CONNECTION_ID: cid}, probe)
        raw.expect("HTTP-003", "a POST with Content-Type text/plain", answer, 415)
        answer = raw.request("GET", {"Accept": "application/json", CONNECTION_ID: cid})
        raw.expect("HTTP-004", "a GET with Accept: application/json", answer, 406)
        batch = b"[" + _request_body("_acpkit.dev/in_a_batch", {}, 901) + b"]"
        answer = raw.request("POST", _json_headers(**{CONNECTION_ID: cid}), batch)
        raw.expect("HTTP-007", "a POST of a one-request batch", answer, 501)
        answer = raw.request("DELETE", {CONNECTION_ID: cid})
        if raw.expect("HTTP-008", "DELETE of an initialized connection", answer, 202):
            answer = raw.request("POST", _json_headers(**{CONNECTION_ID: cid}), probe)
            raw.expect("HTTP-008", "a POST with the id of a deleted connection", answer, 404)
            answer = raw.request("GET", {**stream, CONNECTION_ID: cid})
            raw.expect("HTTP-008", "a GET with the id of a deleted connection", answer, 404)
    answer = raw.request("GET", stream)
    raw.expect("HTTP-005", "a GET without Acp-Connection-Id", answer, 400)
    answer = raw.request("POST", _json_headers(), _request_body("session/new", {}))
    raw.expect("HTTP-005", "a POST of session/new without Acp-Connection-Id", answer, 400)
    answer = raw.request("DELETE", {})
    raw.expect("HTTP-005", "a DELETE without Acp-Connection-Id", answer, 400)
    answer = raw.request("GET", {**stream, CONNECTION_ID: unknown})
    raw.expect("HTTP-006", "a GET with an unknown Acp-Connection-Id", answer, 404)
    answer = raw.request(
        "POST", _json_headers(**{CONNECTION_ID: unknown}), _request_body("session/new", {})
    )
    raw.expect("HTTP-006", "a POST with an unknown Acp-Connection-Id", answer, 404)


def _probe_http_session(config: SuiteConfig, verdicts: Verdicts, fresh: Callable[..., Any]) -> None:
    """HTTP-009's ordering and HTTP-010, on a connection driven like any other."""
    with fresh() as agent:
        driver = agent.driver
        assert isinstance(driver, RemoteDriver)
        session_id = agent.new_session()
        if session_id is None:
            verdicts.skip("HTTP-009", "session/new failed")
            verdicts.skip("HTTP-010", "session/new failed")
            return
        first = len(driver.arrivals)
        with agent.observer.probe("HTTP-009", "a prompt turn read on the GET stream"):
            outcome = run_turn(agent, session_id, agent.prompt(session_id))
            driver.drain(0.3)
        if outcome.response is not None:
            _judge_order(agent.observer.verdicts, driver, first, session_id)
        raw = _Raw(config, verdicts)
        raw.jar = driver.jar
        assert driver.connection_id is not None
        body = _request_body(
            "session/prompt",
            {"sessionId": session_id, "prompt": [{"type": "text", "text": "hello"}]},
            request_id="no-session-header",
        )
        answer = raw.request("POST", _json_headers(**{CONNECTION_ID: driver.connection_id}), body)
        raw.expect("HTTP-010", f"a session/prompt POST without {SESSION_ID}", answer, 400)
        if answer.status == 202:  # it runs: let it end before the connection closes
            with agent.observer.probe("HTTP-010", "cancelling the prompt posted without it"):
                driver.notify("session/cancel", {"sessionId": session_id})
                driver.drain(0.3)


def _probe_http_routing(verdicts: Verdicts, fresh: Callable[..., Any]) -> None:
    """
    HTTP-012, as a client of the RFD sees it: session/new with the connection's GET stream
    open, then the session's GET opened at once and a prompt turn read on both; each
    message is judged by the stream it arrived on.
    """
    with fresh() as agent:
        driver = agent.driver
        assert isinstance(driver, RemoteDriver)
        driver.read_session_streams = False
        session_id = agent.new_session()
        if session_id is None:
            verdicts.skip("HTTP-012", "session/new failed")
            return
        if not any(_creates(m, session_id) for m in driver.connection_arrivals):
            verdicts.violation(
                "HTTP-012",
                "the response to session/new did not arrive on the connection's GET stream "
                "(the client has no sessionId to open a session-scoped stream with yet)",
            )
        with agent.observer.probe("HTTP-012", "a prompt turn with the session's GET open"):
            driver.open_session_streams()
            refusal = driver.session_stream_refusal(session_id)
            if refusal is not None:
                verdicts.violation(
                    "HTTP-012",
                    f"the session-scoped GET of a session of the connection "
                    f"({SESSION_ID}: {session_id}) is not open: {refusal}",
                )
                return
            # what the server sent before the session's stream opened may be anywhere
            driver.drain(0.3)
            first = len(driver.connection_arrivals)
            outcome = run_turn(agent, session_id, agent.prompt(session_id))
            driver.drain(0.3)
        misrouted = [
            driver.describe(m)
            for m in driver.connection_arrivals[first:]
            if driver.session_of_message(m) == session_id
        ]
        if misrouted:
            shown = ", ".join(dict.fromkeys(misrouted))
            verdicts.violation(
                "HTTP-012",
                f"with the session-scoped GET ({SESSION_ID}: {session_id}) open, the "
                f"connection's GET stream delivered {shown}: the session's stream carries all "
                "messages for the session, and a client reading it for them never sees these",
            )
            return
        if outcome.response is None:
            verdicts.slow("HTTP-012", "the prompt turn was not answered within the step timeout")
            return
        verdicts.ok("HTTP-012")


def _creates(message: dict[str, Any], session_id: str) -> bool:
    """``message`` is the response that created ``session_id`` (session/new's)."""
    result = message.get("result")
    return (
        "method" not in message
        and isinstance(result, dict)
        and result.get("sessionId") == session_id
    )


def _probe_unknown_session(config: SuiteConfig, verdicts: Verdicts) -> None:
    """HTTP-013: a GET with an initialized connection's id and a session id never issued."""
    raw = _Raw(config, verdicts)
    cid = raw.initialize()
    if cid is None:
        verdicts.skip("HTTP-013", "a raw initialize POST got no Acp-Connection-Id")
        return
    unknown = f"acpkit-conformance-unknown-session-{uuid.uuid4()}"
    headers = {"Accept": "text/event-stream", CONNECTION_ID: cid, SESSION_ID: unknown}
    answer = raw.request("GET", headers)
    raw.expect("HTTP-013", f"a GET with an unknown {SESSION_ID}", answer, 404)
    raw.request("DELETE", {CONNECTION_ID: cid})


def _judge_order(verdicts: Verdicts, driver: RemoteDriver, first: int, session_id: str) -> None:
    """A turn's session/update notifications arrive before the turn's response."""
    answered = None
    for position, message in enumerate(driver.arrivals[first:], first):
        if "method" not in message and message.get("id") is not None and answered is None:
            result = message.get("result")
            if isinstance(result, dict) and "stopReason" in result:
                answered = position
        elif answered is not None and message.get("method") == "session/update":
            params = message.get("params")
            if isinstance(params, dict) and params.get("sessionId") == session_id:
                verdicts.violation(
                    "HTTP-009",
                    "a session/update of the turn arrived on the stream after the turn's "
                    f"session/prompt response (id {id_key(driver.arrivals[answered]['id'])})",
                )
                return
    if answered is not None:
        verdicts.ok("HTTP-009")


def _probe_http2(config: SuiteConfig, verdicts: Verdicts) -> None:
    """HTTP-011: over TLS the server chooses h2 when offered."""
    from acpkit.conformance.wire import negotiated_alpn

    url = RemoteURL.parse(str(config.url))
    if not url.secure:
        verdicts.skip("HTTP-011", "cleartext http: HTTP/2 is negotiated by ALPN over TLS only")
        return
    chosen = negotiated_alpn(url, config.timeout, tls=config.tls)
    if chosen == "h2":
        verdicts.ok("HTTP-011")
    else:
        verdicts.violation(
            "HTTP-011", f"offered h2 and http/1.1 by ALPN, the server chose {chosen or 'none'}"
        )


def _probe_binary(verdicts: Verdicts, fresh: Callable[..., Any]) -> None:
    """
    WS-003: a binary frame is ignored and the connection goes on. Inside the probe step, so
    that a connection the frame closed is filed under WS-003; a text request left
    unanswered while the next one is answered is a finding (the frame broke the reading).
    """
    with fresh() as agent:
        driver = agent.driver
        assert isinstance(driver, RemoteDriver)
        observer = agent.observer
        ignored = "binary-frame-request"
        with observer.probe("WS-003", "a binary frame holding a request, then a text request"):
            driver.send_binary(_request_body("_acpkit.dev/in_a_binary_frame", {}, ignored))
            try:
                response = driver.request("_acpkit.dev/after_a_binary_frame", {})
            except StepTimeout as e:
                _after_binary_unanswered(verdicts, agent, e)
                return
            deadline = time.monotonic() + 0.3
            driver.wait_until(deadline)
        answered = [m for m in driver.arrivals if m.get("id") == ignored]
        if answered:
            verdicts.violation(
                "WS-003", "the request in a binary frame was answered: binary frames are ignored"
            )
        elif "id" in response:
            verdicts.ok("WS-003")


def _after_binary_unanswered(verdicts: Verdicts, agent: Any, timeout: StepTimeout) -> None:
    """The text request after a binary frame timed out: slow, or dropped when the next
    request is answered."""
    try:
        agent.driver.request("_acpkit.dev/after_a_binary_frame_again", {})
    except StepTimeout:
        verdicts.slow("WS-003", f"a text request after a binary frame: {timeout}")
        return
    if timeout.request_id is not None:
        agent.observer.judged_unanswered(timeout.request_id)
    verdicts.violation(
        "WS-003",
        "the text request sent after a binary frame got no answer while the next one was "
        "answered: the binary frame was not ignored",
    )


def run_transport_probes(
    config: SuiteConfig, verdicts: Verdicts, fresh: Callable[..., Any]
) -> None:
    """Every transport probe for ``config.url`` (HTTP or WebSocket)."""
    url = RemoteURL.parse(str(config.url))
    if url.websocket:
        for rule_id in HTTP_RULES:
            verdicts.skip(rule_id, "the agent is tested over WebSocket")
        _probe_binary(verdicts, fresh)
        return
    for rule_id in WS_RULES:
        verdicts.skip(rule_id, "the agent is tested over Streamable HTTP")
    _probe_http_validation(config, verdicts)
    _probe_http_session(config, verdicts, fresh)
    _probe_http_routing(verdicts, fresh)
    _probe_unknown_session(config, verdicts)
    _probe_http2(config, verdicts)


#: The transport rules of each remote profile.
HTTP_RULES = tuple(f"HTTP-{n:03d}" for n in range(1, 14))
WS_RULES = ("WS-001", "WS-002", "WS-003")
