"""
MCP's Streamable HTTP transport, client side (MCP 2025-11-25, "Transports").

The JSON-RPC engine and MCP's cancellation policy are the same as over stdio
(:class:`acpkit.jsonrpc.JSONRPCProtocol` with
:data:`acpkit.jsonrpc.cancel.MCP_CANCELLATION`): :class:`StreamableHTTPTransport` is the
engine's transport.  Each message the engine writes becomes one HTTP POST to the MCP
endpoint, and every message the server sends back (a JSON body, or the events of an SSE
stream) is fed into the engine as if it had been read from a pipe.  Nothing of MCP
itself is re-implemented here: the transport only looks at a message's ``id`` and
``method`` to know which HTTP exchange it belongs to.

==========================================  =============================================
situation                                   what the transport does
==========================================  =============================================
any message we send                         ``POST`` to the URL, ``Content-Type:
                                            application/json``, ``Accept:
                                            application/json, text/event-stream``, the
                                            configured ``headers`` (never logged)
answer ``application/json``                 its message is fed to the engine
answer ``text/event-stream``                each ``message`` event is fed in order
                                            (server requests and notifications before
                                            the response included); empty events
                                            (priming) are skipped
a notification or response we POST         202 (or any 2xx) expected; an error status
                                            is logged
the ``initialize`` answer's                 kept and sent as ``Mcp-Session-Id`` on every
``Mcp-Session-Id``                          later request (must be visible ASCII)
after ``initialize``                        ``MCP-Protocol-Version: <negotiated>`` on every
                                            request
``notifications/initialized`` sent          ``GET`` opens the server's stream for
                                            server-initiated messages; 405: the server
                                            has none (:attr:`get_stream` ``"none"``);
                                            :func:`connect_http` fires once that GET is
                                            answered (at most ``stream_timeout``,
                                            5 s, later): a server may drop what it sends
                                            while the stream is not open
an SSE stream ends before the response,     resumed with ``GET`` + ``Last-Event-ID`` after
an event id was seen                        the server's ``retry`` ms (default 1 s), at
                                            most ``max_resumes`` times in a row without
                                            a new event
an SSE stream ends before the response,     that request fails (:data:`HTTP_TRANSPORT_ERROR`,
no event id                                 ``data.reason``)
the GET stream ends, an event id was seen   reopened the same way; else left closed
an error status (4xx, 5xx, 3xx: redirects   that request fails with
are not followed) for a request             :data:`HTTP_TRANSPORT_ERROR`, ``data.status``,
                                            and the server's JSON-RPC error message if
                                            the body holds one
404 while a session id is held              the session is gone: the connection is lost
                                            (:class:`McpSessionExpired`), every pending
                                            request fails with ``ConnectionLost``
the server cannot be reached (connect or    the connection is lost
DNS failure)                                (:class:`McpServerUnreachable`)
a JSON body or SSE event longer than        that request fails with
``max_message_size``                        :class:`acpkit.errors.MessageTooLarge`
                                            (-32600, ``data.limit``); the body is not
                                            read further
the connection drops mid-body               resumed if an event id was seen, else that
                                            request fails with the reason
we cancel a request                         ``notifications/cancelled`` is POSTed, then
                                            the request's stream is closed
``close()``                                 streams are closed, ``DELETE`` with the
                                            session id (405 accepted), then the engine
                                            sees the connection end
==========================================  =============================================

A failed request fails with :class:`acpkit.errors.RPCError` of code
:data:`HTTP_TRANSPORT_ERROR` (or ``MessageTooLarge``): the transport reports through the
engine's public input, as an error response for that request's id.

``treq`` (the ``agent`` extra) is imported only when a transport is created.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.internet.defer import TimeoutError as DeferredTimeout
from twisted.internet.error import ConnectError, DNSLookupError
from twisted.logger import Logger
from twisted.python.failure import Failure

from acpkit.errors import clip
from acpkit.http import transport as http_transport
from acpkit.http.responses import (
    BodyReader,
    body_ended_cleanly,
    content_type,
    failure_text,
    visible_ascii,
)
from acpkit.http.sse import SSEParser
from acpkit.http.transport import (
    HTTPTransportBase,
    hashable_id,
    pop_request,
    status_line,
)
from acpkit.jsonrpc import JSONRPCProtocol, MethodRegistry
from acpkit.jsonrpc.cancel import MCP_CANCELLATION
from acpkit.jsonrpc.classify import read_envelope
from acpkit.jsonrpc.jsonbytes import NestingTooDeep, loads
from acpkit.mcp.client import DEFAULT_CLIENT_INFO, McpClient, McpHandshakeError
from acpkit.mcp.schema import Implementation

if TYPE_CHECKING:
    from twisted.web.iweb import IResponse

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "HTTP_TRANSPORT_ERROR",
    "McpHttpError",
    "McpServerUnreachable",
    "McpSessionExpired",
    "StreamableHTTPTransport",
    "connect_http",
    "mcp_http_protocol",
]

#: Error code of a request that failed in the HTTP transport (JSON-RPC's range for
#: implementation-defined errors); ``data`` holds ``reason`` and, for an HTTP error
#: status, ``status``.
HTTP_TRANSPORT_ERROR = http_transport.HTTP_TRANSPORT_ERROR

#: Default largest JSON body or SSE event accepted (the engine's default line limit).
DEFAULT_MAX_MESSAGE_SIZE = 64 * 1024 * 1024

#: How much of an error body is read to explain an HTTP error status.
ERROR_BODY_KEPT = http_transport.ERROR_BODY_KEPT

_log = Logger()

#: Wait before resuming a stream when the server gave no ``retry`` (ms).
DEFAULT_RETRY_MS = 1000

_ACCEPT_BOTH = b"application/json, text/event-stream"
_SESSION_HEADER = b"Mcp-Session-Id"
_VERSION_HEADER = b"MCP-Protocol-Version"


class McpHttpError(Exception):
    """The MCP Streamable HTTP connection cannot go on."""


class McpSessionExpired(McpHttpError):
    """The server answered 404 to a request carrying our session id: the session is gone."""


class McpServerUnreachable(McpHttpError):
    """The MCP server's URL could not be reached (connection or DNS failure)."""


@attrs.define(eq=False)
class _Pending:
    """One request of ours whose response has not been fed to the engine yet."""

    id: Any
    method: str
    cancelled: bool = False
    resumes: int = 0
    #: The body reader currently streaming this request's answer, if any.
    reader: BodyReader | None = None


class StreamableHTTPTransport(HTTPTransportBase):
    """
    The engine's transport over MCP Streamable HTTP (see the module docstring).

    ``headers`` are sent with every request (for example ``Authorization``) and never
    logged.  ``http_client``: a ``treq.client.HTTPClient`` to use instead of the one made
    here (its connection pool is then the caller's to close).  Requests go over HTTP/1.1
    (MCP does not ask for HTTP/2; the agent is :class:`acpkit.http.http2.HTTP2Agent`
    with ``http2="never"``, Twisted's own ``Agent``).
    """

    protocol_name = "MCP"
    session_name = "MCP session"
    delete_statuses = frozenset({200, 202, 204, 405})

    def __init__(
        self,
        reactor: Any,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        connect_timeout: float = 30.0,
        max_resumes: int = 3,
        name: str = "mcp",
        http_client: Any = None,
    ) -> None:
        if max_message_size < 1:
            raise ValueError("max_message_size must be positive")
        super().__init__(
            reactor,
            url,
            headers,
            name=name,
            connect_timeout=connect_timeout,
            http_client=http_client,
            http2="never",
        )
        self.max_message_size = max_message_size
        self.max_resumes = max_resumes
        #: The session id the server gave with its ``initialize`` answer, if any.
        self.session_id: str | None = None
        #: The protocol version the ``initialize`` answer negotiated, if any.
        self.protocol_version: str | None = None
        #: The server's own stream (GET): ``"unopened"``, ``"opening"`` (asked, not yet
        #: answered), ``"open"``, ``"none"`` (405), ``"failed"`` or ``"closed"``.
        self.get_stream = "unopened"
        self._get_waiters: list[Deferred[str]] = []
        self._init_id: Any = None
        self._out = bytearray()
        self._pending: dict[Any, _Pending] = {}
        self._get_reader: BodyReader | None = None
        self._get_last_event_id: str | None = None

    # -- ITransport, as the engine sees it ---------------------------------------------

    def write(self, data: bytes) -> None:
        """Take the engine's framed output: each complete line is one message to POST."""
        out = self._out
        out += data
        start = 0
        while (end := out.find(b"\n", start)) != -1:
            line = bytes(out[start:end])
            start = end + 1
            if line:
                self._send(line)
        if start:
            del out[:start]

    # -- what the base asks ----------------------------------------------------------------

    def _session_held(self) -> bool:
        return self.session_id is not None

    def _forget(self) -> None:
        self._pending.clear()
        self._get_answered()

    # -- the server's stream, as a caller sees it -----------------------------------------

    def when_server_stream_answered(self) -> Deferred[str]:
        """
        Fires with :attr:`get_stream` once the server has answered the GET that opens its
        own stream (``"open"``, ``"none"``, ``"failed"``; ``"closed"`` if the stream it
        opened has ended already), or at once when that is already so or the GET was
        never sent.  Fires with ``"lost"`` if the connection ends first.  Never fails.

        A server may drop what it sends while no GET stream is open (the TypeScript
        SDK's server does): a request that makes the server send something unrelated to
        it should wait for this first.  :func:`connect_http` does.
        """
        if self._lost:
            return succeed("lost")
        if self.get_stream != "opening":
            return succeed(self.get_stream)
        d: Deferred[str] = Deferred()
        self._get_waiters.append(d)
        return d

    def _get_answered(self) -> None:
        """Fire the waiters of :meth:`when_server_stream_answered` with the state now."""
        waiters, self._get_waiters = self._get_waiters, []
        state = "lost" if self._lost else self.get_stream
        for d in waiters:
            d.callback(state)

    @staticmethod
    def _error_detail(body: bytes) -> str:
        return _error_detail(body)

    # -- sending -------------------------------------------------------------------------

    def _headers(self, accept: bytes, *, content: bool = False) -> dict[bytes, list[bytes]]:
        headers = super()._headers(accept, content=content)
        if self.session_id is not None:
            headers[_SESSION_HEADER] = [self.session_id.encode("ascii")]
        if self.protocol_version is not None:
            headers[_VERSION_HEADER] = [self.protocol_version.encode("latin-1")]
        return headers

    def _send(self, line: bytes) -> None:
        if self.disconnecting or self._lost:
            return
        message = loads(line)
        method = message.get("method") if isinstance(message, dict) else None
        pending: _Pending | None = None
        if isinstance(method, str) and "id" in message:
            pending = _Pending(message["id"], method)
            self._pending[pending.id] = pending
            if method == "initialize":
                self._init_id = pending.id
        cancels: _Pending | None = None
        if method == "notifications/cancelled":
            params = message.get("params")
            target = params.get("requestId") if isinstance(params, dict) else None
            cancels = self._pending.pop(target, None) if hashable_id(target) else None
            if cancels is not None:
                cancels.cancelled = True
        d = self._request(b"POST", self._headers(_ACCEPT_BOTH, content=True), line)
        d.addCallback(self._posted, pending, method, cancels)
        d.addErrback(self._post_failed, pending, method)
        d.addErrback(self._bug)
        if method == "notifications/initialized" and self.get_stream == "unopened":
            # Now, not once the POST is answered: the GET then races only the
            # client's next requests, and when_server_stream_answered() closes that race.
            self.get_stream = "opening"
            self._open_get_stream()

    # -- answers to POST -----------------------------------------------------------------

    def _posted(
        self,
        response: IResponse,
        pending: _Pending | None,
        method: str | None,
        cancels: _Pending | None,
    ) -> None:
        if self._lost:
            self._discard(response)
            return
        status = response.code
        if pending is not None and pending.id == self._init_id and 200 <= status < 300:
            if not self._take_session_id(response, pending):
                return
        if self._session_ended(
            response,
            "answered 404 to our session: the session has ended (a new connection starts a "
            "new session)",
        ):
            return
        if cancels is not None and cancels.reader is not None:
            cancels.reader.abort()
        if pending is not None and pending.cancelled:
            # Cancelled before its answer began: notifications/cancelled is on its way.
            self._discard(response, abort=True)
            return
        if not 200 <= status < 300:
            self._error_status(response, pending, f"POST ({method or 'response'})")
            return
        if pending is None:
            if status == 202:
                self._discard(response)
                return
        ctype = content_type(response)
        if ctype == "text/event-stream":
            self._read_stream(response, pending, SSEParser(self.max_message_size))
        elif ctype == "application/json":
            self._read_json(response, pending)
        else:
            self._discard(response)
            if pending is not None:
                self._fail(
                    pending,
                    f"HTTP {status} answered {pending.method} with Content-Type "
                    f"{ctype or '(none)'}; Streamable HTTP answers a request with "
                    "application/json or text/event-stream",
                    status=status,
                )

    def _take_session_id(self, response: IResponse, pending: _Pending) -> bool:
        values = response.headers.getRawHeaders(_SESSION_HEADER)
        if not values:
            return True
        value = values[0].strip()
        if not visible_ascii(value):
            self._discard(response)
            self._fail(
                pending,
                "the server's Mcp-Session-Id is not visible ASCII (0x21-0x7E), as the "
                "MCP specification requires",
            )
            return False
        self.session_id = value.decode("ascii")
        return True

    def _post_failed(self, failure: Failure, pending: _Pending | None, method: str | None) -> None:
        if self._lost or self.disconnecting:
            return
        if failure.check(CancelledError) and pending is not None and pending.cancelled:
            return
        why = failure_text(failure)
        if failure.check(ConnectError, DNSLookupError):
            self._lose(
                McpServerUnreachable(f"cannot reach the MCP server at {self.shown_url}: {why}")
            )
            return
        if pending is not None:
            self._fail(pending, f"POST of {pending.method} to {self.shown_url} failed: {why}")
        else:
            self._log.warn(
                "{peer}: POST of {method} to {url} failed: {why}",
                peer=self.name,
                method=method or "a response",
                url=self.shown_url,
                why=why,
            )

    def _error_status(self, response: IResponse, pending: _Pending | None, what: str) -> None:
        status = response.code

        def report(text: str) -> None:
            if pending is not None:
                self._fail(pending, text, status=status)
            else:
                self._log.warn("{peer}: {text}", peer=self.name, text=text)

        self._read_error(
            response, f"{status_line(response)} from {what} to {self.shown_url}", report
        )

    def _read_json(self, response: IResponse, pending: _Pending | None) -> None:
        def dropped(reason: Failure) -> None:
            if pending is not None:
                self._fail(
                    pending,
                    f"the connection dropped while reading the answer to "
                    f"{pending.method}: {failure_text(reason)}",
                )

        def then(body: bytes) -> None:
            self._deliver_json(body)
            if pending is not None and pending.id in self._pending:
                self._fail(
                    pending,
                    f"the JSON body answering {pending.method} held no response to it",
                )

        reader = self._read_limited(
            response,
            self.max_message_size,
            then=then,
            too_large=lambda _: self._too_large(pending),
            dropped=dropped,
        )
        if reader is not None:
            if pending is not None:
                pending.reader = reader
            response.deliverBody(reader)

    def _too_large(self, pending: _Pending | None) -> None:
        limit = self.max_message_size
        if pending is None:
            self._log.warn(
                "{peer}: a message from {url} exceeded the {limit}-byte limit and was dropped",
                peer=self.name,
                url=self.shown_url,
                limit=limit,
            )
            return
        self._fail(
            pending,
            f"Message too large: the answer to {pending.method} exceeded the {limit}-byte "
            "limit of this connection and was not read",
            code=-32600,
            data={"limit": limit},
        )

    def _deliver_json(self, body: bytes) -> None:
        if not body.strip():
            return  # an empty body (a 200 to a notification) holds no message
        try:
            value = loads(body)
        except NestingTooDeep:
            # JSON nested too deep: the engine answers it (and fails the request of ours
            # its id names, which is answered here too).
            deep = read_envelope(body.decode("utf-8", "replace"))
            if deep.members is not None and deep.is_response() and "id" in deep.members:
                self._answered(deep.members["id"])
            self._feed(body, deep)
            return
        except ValueError:
            self._feed(body, None)
            return
        if isinstance(value, list):  # a batch (MCP 2025-03-26): each message in order
            for item in value:
                self._feed(json.dumps(item).encode(), item)
        else:
            self._feed(body, value)

    # -- SSE streams ---------------------------------------------------------------------

    def _read_stream(
        self, response: IResponse, pending: _Pending | None, parser: SSEParser
    ) -> None:
        progressed: list[bool] = []

        def too_large(_: int) -> None:
            self._too_large(pending)
            if pending is None:
                self.get_stream = "failed"

        def on_data(chunk: bytes) -> None:
            # Any event counts as progress, priming events included.
            if self._sse_chunk(parser, chunk, reader, self._deliver_json, too_large):
                progressed.append(True)

        def on_end(reason: Failure) -> None:
            if self._lost or self.disconnecting:
                return
            if pending is None:
                self._get_stream_ended(parser, reason)
                return
            if pending.id not in self._pending:
                return  # answered (or cancelled)
            if progressed:
                pending.resumes = 0
            how = "ended" if body_ended_cleanly(reason) else f"dropped ({failure_text(reason)})"
            if parser.last_event_id is None:
                self._fail(
                    pending,
                    f"the server's SSE stream for {pending.method} {how} before its response "
                    "(no event id to resume from)",
                )
                return
            if pending.resumes >= self.max_resumes:
                self._fail(
                    pending,
                    f"the server's SSE stream for {pending.method} {how} before its response, "
                    f"{pending.resumes} resumptions in a row brought nothing",
                )
                return
            pending.resumes += 1
            self._later(parser.retry, self._resume, pending, parser)

        reader = self._reader(on_data, on_end)
        if pending is not None:
            pending.reader = reader
        else:
            self._get_reader = reader
        response.deliverBody(reader)

    def _later(self, retry: int | None, f: Callable[..., None], *args: Any) -> None:
        self._call_later((DEFAULT_RETRY_MS if retry is None else retry) / 1000, f, *args)

    def _session_ended(self, response: IResponse, why: str) -> bool:
        """A 404 while we hold a session id: the session is gone, the connection lost."""
        if response.code != 404 or self.session_id is None:
            return False
        self._discard(response)
        self._lose(McpSessionExpired(f"the MCP server at {self.shown_url} {why}"))
        return True

    def _resume(self, pending: _Pending, old: SSEParser) -> None:
        """GET with ``Last-Event-ID``: the server replays the rest of the stream."""
        if pending.id not in self._pending:
            return
        assert old.last_event_id is not None
        headers = self._headers(b"text/event-stream")
        headers[b"Last-Event-ID"] = [old.last_event_id.encode("utf-8")]
        d = self._request(b"GET", headers)

        def got(response: IResponse) -> None:
            if self._lost or self.disconnecting:
                self._discard(response)
                return
            if self._session_ended(response, "ended our session"):
                return
            if response.code != 200 or content_type(response) != "text/event-stream":
                self._error_status(response, pending, f"GET (resuming {pending.method})")
                return
            parser = SSEParser(self.max_message_size)
            parser.last_event_id, parser.retry = old.last_event_id, old.retry
            self._read_stream(response, pending, parser)

        d.addCallback(got)
        d.addErrback(self._post_failed, pending, pending.method)
        d.addErrback(self._bug)

    def _open_get_stream(self, last_event_id: str | None = None, retry: int | None = None) -> None:
        """GET: the stream on which the server sends messages of its own."""
        headers = self._headers(b"text/event-stream")
        if last_event_id is not None:
            headers[b"Last-Event-ID"] = [last_event_id.encode("utf-8")]
        d = self._request(b"GET", headers)

        def got(response: IResponse) -> None:
            if self._lost or self.disconnecting:
                self._discard(response)
                return
            if response.code == 405:
                self.get_stream = "none"
                self._discard(response)
                self._get_answered()
                return
            if self._session_ended(response, "ended our session"):
                return
            if response.code != 200 or content_type(response) != "text/event-stream":
                self.get_stream = "failed"
                self._error_status(response, None, "GET (server stream)")
                self._get_answered()
                return
            self.get_stream = "open"
            parser = SSEParser(self.max_message_size)
            parser.last_event_id, parser.retry = last_event_id, retry
            self._read_stream(response, None, parser)
            self._get_answered()

        def failed(failure: Failure) -> None:
            if self._lost or self.disconnecting:
                return
            self.get_stream = "failed"
            self._get_answered()
            self._log.warn(
                "{peer}: GET stream from {url} failed: {why}",
                peer=self.name,
                url=self.shown_url,
                why=failure_text(failure),
            )

        d.addCallbacks(got, failed)
        d.addErrback(self._bug)

    def _get_stream_ended(self, parser: SSEParser, reason: Failure) -> None:
        self._get_reader = None
        if parser.last_event_id is None:
            self.get_stream = "closed"
            self._log.info(
                "{peer}: the server closed its GET stream ({why})",
                peer=self.name,
                why=failure_text(reason),
            )
            return
        self._later(parser.retry, self._open_get_stream, parser.last_event_id, parser.retry)

    # -- into the engine -----------------------------------------------------------------

    def _feed(self, data: bytes, message: object) -> None:
        """Give one message to the engine, as one line."""
        if self.protocol is None or self._lost:
            return
        if isinstance(message, dict) and ("result" in message or "error" in message):
            answered = self._answered(message.get("id"))
            if answered is not None and answered.id == self._init_id:
                result = message.get("result")
                version = result.get("protocolVersion") if isinstance(result, dict) else None
                if isinstance(version, str) and version.isprintable() and version.isascii():
                    self.protocol_version = version
        if b"\n" in data or b"\r" in data:
            if message is not None:
                # Valid JSON holds line breaks only as whitespace between tokens.
                data = data.replace(b"\r", b" ").replace(b"\n", b" ")
            else:
                # Not JSON: keep it invalid (NUL is never valid JSON) for the engine's error.
                data = b"\x00".join(data.splitlines())
        self.protocol.dataReceived(data + b"\n")

    def _answered(self, response_id: object) -> _Pending | None:
        """Remove and return our pending request a response names, or None."""
        return pop_request(self._pending, response_id)

    def _fail(
        self,
        pending: _Pending,
        reason: str,
        *,
        status: int | None = None,
        code: int = HTTP_TRANSPORT_ERROR,
        data: dict[str, Any] | None = None,
    ) -> None:
        """Fail one request of ours: an error response for its id, fed to the engine."""
        if self._pending.pop(pending.id, None) is None or pending.cancelled:
            return
        if pending.reader is not None:
            pending.reader.abort()
        message = self._error_response(pending.id, reason, status=status, code=code, data=data)
        self._feed(json.dumps(message).encode(), None)

    # -- the end -------------------------------------------------------------------------


#: Seconds a server has to answer ``initialize``.
DEFAULT_HANDSHAKE_TIMEOUT = 30.0

#: Seconds :func:`connect_http` waits, after ``initialize``, for the server to answer the
#: GET for its own stream (it answers at once, with headers, when it has one).
DEFAULT_STREAM_TIMEOUT = 5.0


def mcp_http_protocol(
    reactor: Any, name: str, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
) -> JSONRPCProtocol:
    """The JSON-RPC engine for MCP over HTTP: the stdio one, its limit the transport's."""
    return JSONRPCProtocol(
        MethodRegistry(),
        clock=reactor,
        name=name,
        cancellation=MCP_CANCELLATION,
        max_line_length=max_message_size,
    )


def connect_http(
    reactor: Any,
    url: str,
    headers: Mapping[str, str] | None = None,
    *,
    name: str,
    handshake_timeout: float | None = DEFAULT_HANDSHAKE_TIMEOUT,
    stream_timeout: float = DEFAULT_STREAM_TIMEOUT,
    client_info: Implementation = DEFAULT_CLIENT_INFO,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    connect_timeout: float = 30.0,
    max_resumes: int = 3,
) -> Deferred[McpClient]:
    """
    Connect to the MCP server at ``url`` (Streamable HTTP) and initialize it; fires with
    the started :class:`McpClient` (its :meth:`McpClient.close` DELETEs the session)
    once the server has also answered the GET that opens its own stream, or
    ``stream_timeout`` seconds after ``initialize`` was answered if it has not (a
    warning is logged).  Before that answer, a server may drop what it sends
    unrelated to a request (the TypeScript SDK's server drops it), such as the
    ``elicitation/create`` a tool call makes it send.

    ``headers`` go with every HTTP request (for example ``{"Authorization": "Bearer
    ..."}``) and are never logged.  Fails like :func:`acpkit.mcp.stdio.connect_stdio`'s
    handshake (:class:`acpkit.mcp.client.McpHandshakeError` and its subclasses), the
    reason naming an unreachable server or an HTTP error status; with ``ValueError`` for
    a URL that is not ``http(s)://host...`` (nothing is sent).
    """
    try:
        transport = StreamableHTTPTransport(
            reactor,
            url,
            headers,
            max_message_size=max_message_size,
            connect_timeout=connect_timeout,
            max_resumes=max_resumes,
            name=name,
        )
    except ValueError as e:
        return fail(e)
    protocol = mcp_http_protocol(reactor, name, max_message_size)
    client = McpClient(protocol, name=name, clock=reactor, client_info=client_info)
    transport.connect(protocol)
    done: Deferred[McpClient] = Deferred()

    def started(_: object) -> None:
        # The server's own stream first: what the server sends unrelated to a request
        # (elicitation/create, log messages) is lost while that stream is not open.
        waited = transport.when_server_stream_answered()
        waited.addTimeout(stream_timeout, reactor)
        waited.addCallbacks(ready, slow_stream)

    def ready(state: object) -> None:
        if state != "lost":
            done.callback(client)
            return

        def ended(f: Failure) -> None:
            done.errback(
                McpHandshakeError(
                    f'MCP server "{name}" ended the connection while its stream opened: '
                    f"{f.getErrorMessage()}"
                )
            )

        protocol.when_closed().addErrback(ended)

    def slow_stream(f: Failure) -> None:
        f.trap(DeferredTimeout)
        _log.warn(
            "{peer}: the server has not answered the GET for its own stream in {timeout} s;"
            " what it sends before that may be lost",
            peer=name,
            timeout=stream_timeout,
        )
        done.callback(client)

    def failed(f: Failure) -> None:
        # Wait until the transport is gone (its connections closed), then fail.
        protocol.close()
        protocol.when_closed().addBoth(lambda _: done.errback(f))

    client.start(timeout=handshake_timeout).addCallbacks(started, failed)
    return done


def _error_detail(body: bytes) -> str:
    """The message of a JSON-RPC error in an error body, else the body's first line."""
    if not body:
        return ""
    try:
        value = loads(body)
    except ValueError:
        text = body.decode("utf-8", errors="replace").strip().splitlines()
        return clip(text[0], 200) if text else ""
    error = value.get("error") if isinstance(value, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return clip(f"{error['message']} (code {error.get('code')})", 300)
    return clip(json.dumps(value), 200)
