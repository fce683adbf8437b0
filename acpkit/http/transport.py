"""
The base of acpkit's two client transports that carry JSON-RPC messages over HTTP
requests: MCP's Streamable HTTP (:mod:`acpkit.mcp.http`) and ACP's
(:mod:`acpkit.remote.http_client`).

:class:`HTTPTransportBase` is the engine's ``ITransport`` for both: what to send and how
to read each answer is each protocol's (its subclass's ``write``); the base holds the
HTTP side they share, the same way for both.

==========================================  =============================================
situation                                   what the base does
==========================================  =============================================
made                                        the URL checked (``http(s)://host``, no user
                                            info: ``ValueError``); with ``tls`` on
                                            ``https://`` its files read now
requests                                    through treq on an
                                            :class:`~acpkit.http.http2.HTTP2Agent` over a
                                            persistent pool whose idle connections are
                                            closed after 4 s, below servers' keep-alive
                                            (a POST is never retried on a connection the
                                            server closed meanwhile); redirects are not
                                            followed; a given ``http_client`` instead
every request                               the configured ``headers`` (never logged),
                                            ``Accept``, ``Content-Type:
                                            application/json`` with a body; the subclass
                                            adds its own (``_headers``)
an error status                             the first 4 KiB of the body read for the
                                            server's explanation; the text notes that
                                            redirects are not followed, and on 401/403
                                            to check the configured headers
a JSON body                                 read up to the subclass's limit; a longer one
                                            is not read further (``Content-Length`` above
                                            it: not read at all)
an SSE chunk                                its ``message`` events with data handed on in
                                            order, the others (priming, keep-alives)
                                            skipped; an event over the parser's limit
                                            stops the body
``loseConnection()``                        timers stopped, requests cancelled, bodies
                                            dropped; ``DELETE`` (5 s) when the subclass
                                            holds a session; then the agent's
                                            connections closed, then the engine's
                                            ``connectionLost``
``abortConnection()``                       the same without the ``DELETE``
the connection cannot go on (``_lose``)     the same as ``abortConnection()``; the engine
                                            sees the error as the reason
==========================================  =============================================

Only Twisted is imported here: ``treq`` is imported when a transport is made.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast
from urllib.parse import SplitResult, urlsplit

from twisted.internet.address import HostnameAddress
from twisted.internet.defer import Deferred, DeferredList, succeed
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IDelayedCall, IProtocol, IReactorTime, ITransport
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from acpkit.errors import HTTP_TRANSPORT_ERROR as _HTTP_TRANSPORT_ERROR
from acpkit.errors import clip
from acpkit.http.responses import BodyReader, body_ended_cleanly, failure_text, shown_url
from acpkit.http.sse import SSEEventTooLarge, SSEParser

if TYPE_CHECKING:
    from http.cookiejar import CookieJar

    from twisted.web.iweb import IResponse

    from acpkit.http.http2 import HTTP2Agent, HTTP2Mode
    from acpkit.http.tls import ClientTLS

__all__ = [
    "ERROR_BODY_KEPT",
    "HTTP_TRANSPORT_ERROR",
    "POOL_IDLE_SECONDS",
    "HTTPTransportBase",
    "check_http_url",
    "hashable_id",
    "pop_request",
    "status_line",
]

#: Error code of a request that failed in an HTTP transport (defined in
#: :mod:`acpkit.errors`, named here too).
HTTP_TRANSPORT_ERROR = _HTTP_TRANSPORT_ERROR

#: How much of an error body is read to explain an HTTP error status.
ERROR_BODY_KEPT = 4096

#: Seconds an idle pooled connection is kept: below common servers' keep-alive (Node's
#: 5 s), so that a POST is never retried on a connection the server closed meanwhile
#: (POST is not idempotent).
POOL_IDLE_SECONDS = 4

_JSON = b"application/json"

T = TypeVar("T")


def check_http_url(url: str, protocol: str) -> SplitResult:
    """The parts of an ``http(s)://host...`` URL; ``ValueError`` (naming ``protocol``,
    ``"MCP"`` or ``"ACP"``) for anything else, or a URL with user info."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"an {protocol} Streamable HTTP URL must be http(s)://host/...: {url!r}")
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            f"an {protocol} Streamable HTTP URL with user info (user:password@) is not "
            "supported: give credentials as headers (Authorization)"
        )
    return parts


def status_line(response: IResponse) -> str:
    """``"HTTP 404 Not Found"``: a response's status as errors show it."""
    phrase = response.phrase.decode("latin-1", errors="replace")
    return f"HTTP {response.code} {phrase}"


def hashable_id(value: object) -> bool:
    """Whether ``value`` can be a JSON-RPC id we track: an int (not a bool) or a string."""
    return isinstance(value, (int, str)) and not isinstance(value, bool)


def pop_request(table: dict[Any, T], response_id: object) -> T | None:
    """Remove and return what ``table`` holds for the request a response names (the
    engine accepts the decimal string of an integer id too), or None."""
    if not hashable_id(response_id):
        return None
    found = table.pop(response_id, None)
    if found is None and isinstance(response_id, str) and response_id.isascii():
        if response_id.isdecimal():
            found = table.pop(int(response_id), None)
    return found


@implementer(ITransport)
class HTTPTransportBase:
    """
    The HTTP side of a JSON-RPC client transport over HTTP requests (see the module
    docstring); a subclass writes (``write``) and reads the protocol's messages.

    What a subclass gives: :attr:`protocol_name` (``"MCP"``, ``"ACP"``),
    :attr:`session_name` and :attr:`delete_statuses` (the ``DELETE`` at close), and
    overrides :meth:`_session_held` (whether to ``DELETE``), :meth:`_forget` (what it
    drops when the connection is over), :meth:`_error_detail` (the server's own
    explanation in an error body) and ``_headers`` (its own headers after the base's).
    """

    _log = Logger()

    #: Names the protocol in errors and logs.
    protocol_name: ClassVar[str] = "HTTP"
    #: What the ``DELETE`` at close ends, for logs ("MCP session").
    session_name: ClassVar[str] = "session"
    #: The statuses a ``DELETE`` may answer without a note in the log.
    delete_statuses: ClassVar[frozenset[int]] = frozenset({200, 202, 204})

    def __init__(
        self,
        reactor: Any,
        url: str,
        headers: Mapping[str, str] | None,
        *,
        name: str,
        connect_timeout: float,
        http_client: Any,
        http2: HTTP2Mode,
        clock: IReactorTime | None = None,
        tls: ClientTLS | None = None,
        cookies: CookieJar | None = None,
    ) -> None:
        parts = check_http_url(url, self.protocol_name)
        self.url = url
        #: The URL as errors and logs show it: no user info, query or fragment (they
        #: may hold credentials).
        self.shown_url = shown_url(parts)
        self.name = name
        self._reactor = reactor
        self._clock: IReactorTime = clock if clock is not None else reactor
        self._extra_headers = dict(headers or {})
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        if tls is not None and parts.scheme == "https":
            # Read the files now: a bad one is a ValueError before any connection.
            tls.creator(self._host)
        self._agent: HTTP2Agent | None = None
        if http_client is None:
            from treq.client import HTTPClient

            from acpkit.compat import quiet_http_pool
            from acpkit.http.http2 import HTTP2Agent

            pool = quiet_http_pool(reactor, persistent=True)
            pool.cachedConnectionTimeout = POOL_IDLE_SECONDS
            agent = self._agent = HTTP2Agent(
                reactor, http2=http2, tls=tls, connect_timeout=connect_timeout, pool=pool
            )
            # treq types the jar as its own subclass; any CookieJar works (None: treq's).
            http_client = HTTPClient(agent, cookiejar=cast(Any, cookies))
        self._http = http_client
        self.protocol: IProtocol | None = None
        self.disconnecting = False
        self._lost = False
        self._calls: set[Deferred[Any]] = set()
        self._readers: set[BodyReader] = set()
        self._timers: set[IDelayedCall] = set()

    # -- what a subclass gives -------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """The engine's output (the subclass sends it)."""
        raise NotImplementedError

    def _session_held(self) -> bool:
        """Whether the server gave a session that close() ends with a ``DELETE``."""
        return False

    def _forget(self) -> None:
        """The connection is over: drop what is held for it (queued messages...)."""

    @staticmethod
    def _error_detail(body: bytes) -> str:
        """The server's explanation in the start of an error body ("" for none)."""
        return ""

    # -- ITransport, as the engine sees it ---------------------------------------------

    def connect(self, protocol: IProtocol) -> None:
        """Attach the engine: ``protocol.makeConnection(self)``."""
        self.protocol = protocol
        protocol.makeConnection(self)

    def writeSequence(self, data: Any) -> None:
        """``write`` of the joined pieces."""
        self.write(b"".join(data))

    def loseConnection(self) -> None:
        """Close: stop every stream, DELETE the session, then end the engine's connection."""
        if self.disconnecting or self._lost:
            return
        self.disconnecting = True
        waits = self._abort_all()
        if self._session_held():
            deleted = self._request(b"DELETE", self._headers(_JSON), timeout=5)
            deleted.addCallback(self._after_delete)
            deleted.addErrback(
                lambda f: self._log.info(
                    "{peer}: DELETE of the {what} failed: {why}",
                    peer=self.name,
                    what=self.session_name,
                    why=failure_text(f),
                )
            )
            waits.append(deleted)
        DeferredList(waits).addBoth(lambda _: self._finish(Failure(ConnectionDone())))

    def abortConnection(self) -> None:
        """Close without the DELETE."""
        if self._lost:
            return
        self.disconnecting = True
        DeferredList(self._abort_all()).addBoth(lambda _: self._finish(Failure(ConnectionDone())))

    def getPeer(self) -> HostnameAddress:
        """The server's host and port."""
        return HostnameAddress(self._host.encode("idna"), self._port)

    def getHost(self) -> HostnameAddress:
        """Not known for HTTP: the server's address too."""
        return self.getPeer()

    # -- requests ------------------------------------------------------------------------

    def _headers(self, accept: bytes, *, content: bool = False) -> dict[bytes, list[bytes]]:
        """The configured headers, ``Accept`` and, for a body, its ``Content-Type``."""
        headers: dict[bytes, list[bytes]] = {
            k.encode("latin-1"): [v.encode("latin-1")] for k, v in self._extra_headers.items()
        }
        headers[b"Accept"] = [accept]
        if content:
            headers[b"Content-Type"] = [_JSON]
        return headers

    def _request(
        self,
        method: bytes,
        headers: dict[bytes, list[bytes]],
        data: bytes | None = None,
        timeout: float | None = None,
    ) -> Deferred[Any]:
        """One request to the URL (redirects not followed), tracked until answered."""
        d: Deferred[Any] = self._http.request(
            method.decode("ascii"),
            self.url,
            headers=headers,
            data=data,
            unbuffered=True,
            allow_redirects=False,
            timeout=timeout,
        )
        self._calls.add(d)

        def done(result: object) -> object:
            self._calls.discard(d)
            return result

        d.addBoth(done)
        return d

    def _bug(self, failure: Failure) -> None:
        self._log.failure(
            "{peer}: {protocol} HTTP transport error",
            failure,
            peer=self.name,
            protocol=self.protocol_name,
        )

    def _call_later(self, delay: float, f: Callable[..., None], *args: Any) -> IDelayedCall:
        """``f(*args)`` in ``delay`` seconds unless the connection is closing by then."""

        def run() -> None:
            self._timers.discard(call)
            if not (self._lost or self.disconnecting):
                f(*args)

        call = self._clock.callLater(delay, run)
        self._timers.add(call)
        return call

    def _cancel_later(self, call: IDelayedCall | None) -> None:
        """Cancel a call of :meth:`_call_later` (if still to come)."""
        if call is not None:
            self._timers.discard(call)
            if call.active():
                call.cancel()

    # -- bodies --------------------------------------------------------------------------

    def _reader(
        self, on_data: Callable[[bytes], None], on_end: Callable[[Failure], None]
    ) -> BodyReader:
        """A body reader, tracked until its body ends (give it to ``deliverBody``)."""
        reader = BodyReader(on_data, on_end, what=self.protocol_name)
        self._readers.add(reader)
        reader.done.addBoth(lambda _: self._readers.discard(reader))
        return reader

    def _discard(self, response: IResponse, *, abort: bool = False) -> None:
        """Drop the body: read it to its end, or stop reading it (``abort``, or closed)."""
        reader = self._reader(lambda _: None, lambda _: None)
        response.deliverBody(reader)
        if abort or self._lost:
            reader.abort()

    def _read_limited(
        self,
        response: IResponse,
        limit: int,
        *,
        then: Callable[[bytes], None],
        too_large: Callable[[int | None], None],
        dropped: Callable[[Failure], None],
    ) -> BodyReader | None:
        """
        A reader of a body of at most ``limit`` bytes, not yet given the body (the caller
        keeps it, then ``response.deliverBody(reader)``): ``then(body)`` once it all
        came; ``dropped(reason)`` if the connection dropped mid-body; ``too_large(None)``
        as soon as it is longer (not read further).  A ``Content-Length`` above ``limit``:
        the body is dropped unread, ``too_large(length)``, and None is returned.
        """
        length = response.length
        if isinstance(length, int) and length > limit:
            self._discard(response, abort=True)
            too_large(length)
            return None
        body = bytearray()

        def on_data(chunk: bytes) -> None:
            body.extend(chunk)
            if len(body) > limit:
                reader.abort()
                too_large(None)

        def on_end(reason: Failure) -> None:
            if self._lost or self.disconnecting:
                return
            if not body_ended_cleanly(reason):
                dropped(reason)
                return
            then(bytes(body))

        reader = self._reader(on_data, on_end)
        return reader

    def _sse_chunk(
        self,
        parser: SSEParser,
        chunk: bytes,
        reader: BodyReader | None,
        deliver: Callable[[bytes], None],
        too_large: Callable[[int], None],
    ) -> int:
        """
        Parse one chunk of an SSE body: ``deliver(data)`` for each ``message`` event with
        data, in order (priming events and other types are skipped).  An event over the
        parser's limit stops the body (``reader`` aborted) and calls ``too_large(limit)``.
        Returns how many events the chunk completed.
        """
        try:
            events = parser.feed(chunk)
        except SSEEventTooLarge as e:
            if reader is not None:
                reader.abort()
            too_large(e.limit)
            return 0
        for event in events:
            if self._lost:
                break
            if event.type == "message" and event.data.strip():
                deliver(event.data)
        return len(events)

    def _read_error(
        self, response: IResponse, headline: str, report: Callable[[str], None]
    ) -> None:
        """
        Read the start of an error answer's body, then ``report(text)`` once: the
        ``headline``, a note for a redirect and for 401/403, and the server's own
        explanation (:meth:`_error_detail`).
        """
        status = response.code
        head = bytearray()
        reported: list[bool] = []

        def done() -> None:
            if reported:
                return
            reported.append(True)
            text = headline
            if 300 <= status < 400:
                text += " (redirects are not followed)"
            if status in (401, 403):
                text += " (check the configured headers)"
            detail = self._error_detail(bytes(head))
            if detail:
                text += f": {detail}"
            report(text)

        def on_data(chunk: bytes) -> None:
            head.extend(chunk[: ERROR_BODY_KEPT - len(head)])
            if len(head) >= ERROR_BODY_KEPT:
                reader.abort()
                done()

        reader = self._reader(on_data, lambda _: done())
        response.deliverBody(reader)

    # -- errors of one request -----------------------------------------------------------

    def _error_response(
        self,
        request_id: Any,
        reason: str,
        *,
        status: int | None = None,
        code: int = HTTP_TRANSPORT_ERROR,
        data: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The JSON-RPC error response failing our request ``request_id`` (logged):
        ``data`` defaults to ``reason`` and ``status``."""
        if data is None:
            data = {"reason": clip(reason, 1000)}
            if status is not None:
                data["status"] = status
        self._log.warn("{peer}: {reason}", peer=self.name, reason=reason)
        error = {"code": code, "message": reason, "data": data}
        return {"jsonrpc": "2.0", "id": request_id, "error": error}

    # -- the end -------------------------------------------------------------------------

    def _abort_all(self) -> list[Deferred[Any]]:
        """Stop every timer, request and body; Deferreds firing when each body is gone."""
        for call in list(self._timers):
            if call.active():
                call.cancel()
        self._timers.clear()
        for d in list(self._calls):
            d.cancel()
        waits: list[Deferred[Any]] = []
        for reader in list(self._readers):
            reader.abort()
            waits.append(reader.done)
        return waits

    def _lose(self, error: Exception) -> None:
        """The connection cannot go on: stop everything and end the engine's connection
        with ``error``."""
        if self._lost or self.disconnecting:
            return
        self.disconnecting = True
        self._log.warn("{peer}: {error}", peer=self.name, error=error)
        DeferredList(self._abort_all()).addBoth(lambda _: self._finish(Failure(error)))

    def _after_delete(self, response: IResponse) -> Deferred[None]:
        """Note an unexpected status; fires once the answer's body is read."""
        if response.code not in self.delete_statuses:
            self._log.info(
                "{peer}: DELETE of the {what} answered HTTP {status}",
                peer=self.name,
                what=self.session_name,
                status=response.code,
            )
        reader = self._reader(lambda _: None, lambda _: None)
        response.deliverBody(reader)
        return reader.done

    def _finish(self, reason: Failure) -> None:
        if self._lost:
            return
        self._lost = True
        self._forget()
        agent = self._agent
        closing = agent.close() if agent is not None else succeed(None)

        def lost(_: object) -> None:
            if self.protocol is not None:
                self.protocol.connectionLost(reason)

        closing.addBoth(lost)
