"""
ACP over WebSocket, both sides, on Autobahn's Twisted WebSocket.

The RFD "Streamable HTTP & WebSocket Transport" (agent-client-protocol,
``docs/rfds/streamable-http-websocket-transport.mdx``, §4 and "WebSocket Request Flow"):
a ``GET /acp`` with ``Upgrade: websocket`` opens one ACP connection; the ``101`` response
carries ``Acp-Connection-Id``; every JSON-RPC message is one text frame; binary frames
are ignored; the client still sends ``initialize`` first; on disconnect the server ends
the connection and its sessions.  Clients keep the cookies the server sets (§5).

Nothing ACP-specific lives here: each WebSocket carries one
:class:`~acpkit.jsonrpc.JSONRPCProtocol` over :class:`~acpkit.framing_messages.MessageFraming`
(one message per frame), under an :class:`~acpkit.connection.AgentConnection` (server) or a
:class:`~acpkit.connection.ClientConnection` (client), exactly as over stdio.

=====================================  ================================================
situation                              what happens
=====================================  ================================================
upgrade accepted (server)              ``101`` with ``Acp-Connection-Id: <uuid4>``; a new
                                       ``AgentConnection`` for this socket only
``make_agent_connection`` raises       logged; closed with code ``1011``
text frame                             one JSON-RPC message for the engine
binary frame                           ignored (counted in ``binary_frames_ignored``)
a frame or message over                the socket is closed with code ``1009`` (message
``max_message_size``                   too big); pending requests fail with
                                       :class:`~acpkit.errors.ConnectionLost` naming it
invalid UTF-8 in a text frame          closed with code ``1007`` (Autobahn)
no traffic for ``auto_ping_interval``  a ping; no pong within ``auto_ping_timeout``:
                                       the socket is dropped (a half-open peer)
pings from a peer that does not read   answered while the socket drains; once the
                                       transport has paused the agent (the peer stopped
                                       reading), more than
                                       :data:`MAX_PONGS_WHILE_UNREAD` pings drop the
                                       socket: pongs owed cannot grow memory
the peer stops reading                 the engine is the TCP transport's producer:
                                       ``writable()`` waits, a stream pauses instead of
                                       growing the send buffer
socket closed or cut                   the connection ends: running handlers (the
                                       sessions' turns) are cancelled, pending requests
                                       fail with ``ConnectionLost`` and the close code
                                       and reason; a ``1000`` or ``1001`` ("going
                                       away": a browser tab closing) close is a clean
                                       end: ``closed`` succeeds; any other code fails
                                       it with :class:`WebSocketClosed` (the code and
                                       reason of the side that started the close)
``close()`` on the ACP connection      a ``1000`` close frame after what was written
client: the ``client`` callable        the ``connect_websocket`` Deferred fails with its
raises                                 exception; the socket is closed (``1011``)
client: ``Set-Cookie`` on the ``101``  stored in the ``cookies`` mapping the caller
                                       passed (or a new one), sent back as ``Cookie``
                                       by every handshake made with that mapping
client: refused, TLS or handshake      the ``connect_websocket`` Deferred fails once
failure, non-``101`` answer            with :class:`WebSocketConnectError` (the URL is
                                       shown without its query; headers never logged)
=====================================  ================================================
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

try:
    import txaio
except ImportError as missing:  # pragma: no cover - the core leg of CI checks the message
    raise ImportError(
        "acpkit.remote.websocket needs Autobahn: pip install 'txacpkit[remote]'"
    ) from missing

txaio.use_twisted()

from autobahn.twisted.resource import WebSocketResource  # noqa: E402
from autobahn.twisted.websocket import (  # noqa: E402
    WebSocketClientFactory,
    WebSocketClientProtocol,
    WebSocketServerFactory,
    WebSocketServerProtocol,
)
from autobahn.websocket.protocol import WebSocketProtocol  # noqa: E402
from autobahn.websocket.types import ConnectionRequest, ConnectionResponse  # noqa: E402
from autobahn.websocket.util import parse_url  # noqa: E402
from twisted.internet.defer import Deferred  # noqa: E402
from twisted.internet.endpoints import HostnameEndpoint, wrapClientTLS  # noqa: E402
from twisted.internet.error import ConnectionDone  # noqa: E402
from twisted.internet.interfaces import IAddress, IPushProducer, ITransport  # noqa: E402
from twisted.logger import Logger  # noqa: E402
from twisted.python.failure import Failure  # noqa: E402
from txaio.tx import make_logger  # noqa: E402
from zope.interface import implementer  # noqa: E402

from acpkit.connection import AgentConnection, ClientConnection  # noqa: E402
from acpkit.framing import DEFAULT_MAX_LENGTH  # noqa: E402
from acpkit.framing_messages import MessageFraming  # noqa: E402
from acpkit.interfaces import IClient  # noqa: E402
from acpkit.jsonrpc import JSONRPCProtocol  # noqa: E402
from acpkit.remote.tls import ClientTLS  # noqa: E402
from acpkit.tls_errors import tls_error_text  # noqa: E402

__all__ = [
    "CONNECTION_ID_HEADER",
    "DEFAULT_AUTO_PING_INTERVAL",
    "DEFAULT_AUTO_PING_TIMEOUT",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "ACPWebSocketResource",
    "WebSocketClosed",
    "WebSocketConnectError",
    "WebSocketMessageTransport",
    "connect_websocket",
    "websocket_resource",
]

_log = Logger()

#: The header of the ``101`` response naming the connection (RFD, identity model).
CONNECTION_ID_HEADER = "Acp-Connection-Id"
#: The largest frame or message either side accepts (the NDJSON framing's line limit).
DEFAULT_MAX_MESSAGE_SIZE = DEFAULT_MAX_LENGTH
#: Seconds without traffic before a ping, and to wait for its pong.
DEFAULT_AUTO_PING_INTERVAL = 20.0
DEFAULT_AUTO_PING_TIMEOUT = 20.0

#: Makes the agent side of one WebSocket: called with the engine to run it on.
MakeAgentConnection = Callable[[JSONRPCProtocol], AgentConnection]


class WebSocketClosed(Exception):
    """
    The WebSocket closed otherwise than with a clean ``1000`` or ``1001``: ``code`` (RFC 6455 §7.4;
    ``1006`` for a socket cut without a close frame) and ``reason``.  A pending request
    fails with :class:`~acpkit.errors.ConnectionLost` whose text includes this one's.
    """

    def __init__(self, code: int | None, reason: str | None) -> None:
        self.code = code
        self.reason = reason or ""
        super().__init__(f"WebSocket closed with code {code}: {self.reason or 'no reason given'}")


class WebSocketConnectError(Exception):
    """``connect_websocket`` could not open the WebSocket (refused, TLS, handshake)."""


def safe_url(url: str) -> str:
    """``url`` without user info and query: what may appear in errors and logs."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@implementer(ITransport)
class WebSocketMessageTransport:
    """
    What the engine writes to: one ``write`` is one text frame on ``websocket``.

    Flow control goes to the socket underneath: ``registerProducer`` registers the
    engine with the TCP (or TLS) transport, which pauses it while its send buffer is
    full; ``pauseProducing``/``resumeProducing`` stop and resume reading the socket.

    ``connection_id`` is the ``Acp-Connection-Id`` of this WebSocket (the server's, as
    the client read it from the ``101``); ``response_headers`` (client side) the ``101``'s
    headers, lower-cased.
    """

    def __init__(
        self,
        websocket: Any,
        connection_id: str | None,
        response_headers: Mapping[str, str] | None = None,
    ) -> None:
        #: The Autobahn protocol of this WebSocket.
        self.websocket: Any = websocket
        self.connection_id = connection_id
        self.response_headers: Mapping[str, str] = response_headers or {}

    @property
    def disconnecting(self) -> bool:
        """True once the close handshake started or the socket is gone."""
        return bool(self.websocket.state != WebSocketProtocol.STATE_OPEN)

    def write(self, data: bytes) -> None:
        """Send ``data`` (one UTF-8 JSON message) as one text frame."""
        if self.websocket.state == WebSocketProtocol.STATE_OPEN:
            self.websocket.sendMessage(data, isBinary=False)

    def writeSequence(self, data: Any) -> None:
        """Send the concatenation of ``data`` as one text frame."""
        self.write(b"".join(data))

    def loseConnection(self) -> None:
        """Start the close handshake (code ``1000``) after what was written."""
        if self.websocket.state == WebSocketProtocol.STATE_OPEN:
            self.websocket.sendClose(code=WebSocketProtocol.CLOSE_STATUS_CODE_NORMAL)

    def abortConnection(self) -> None:
        """Drop the socket now."""
        self.websocket.dropConnection(abort=True)

    def getPeer(self) -> IAddress:
        return cast(IAddress, self.websocket.transport.getPeer())

    def getHost(self) -> IAddress:
        return cast(IAddress, self.websocket.transport.getHost())

    # -- flow control: the socket's ----------------------------------------------------

    def registerProducer(self, producer: IPushProducer, streaming: bool) -> None:
        """
        Register ``producer`` with the socket's transport.  After a ``twisted.web``
        upgrade the HTTP channel is still registered there; it serves no more requests,
        so it makes way.
        """
        transport = self.websocket.transport
        try:
            transport.registerProducer(producer, streaming)
        except RuntimeError:
            transport.unregisterProducer()
            transport.registerProducer(producer, streaming)

    def unregisterProducer(self) -> None:
        self.websocket.transport.unregisterProducer()

    def pauseProducing(self) -> None:
        """Stop reading the socket."""
        pause = getattr(self.websocket.transport, "pauseProducing", None)
        if pause is not None:
            pause()

    def resumeProducing(self) -> None:
        """Read the socket again."""
        resume = getattr(self.websocket.transport, "resumeProducing", None)
        if resume is not None:
            resume()


def _engine(name: str, max_message_size: int) -> JSONRPCProtocol:
    framing = MessageFraming()
    framing.MAX_LENGTH = max_message_size
    return JSONRPCProtocol(name=name, framing=framing)


def _attach_tracer(protocol: JSONRPCProtocol, name: str) -> None:
    if protocol.tracer is None:
        from acpkit.trace import tracer_from_environment

        protocol.tracer = tracer_from_environment(name)


#: Close codes that end a connection cleanly: ``1000`` (normal) and ``1001`` (going
#: away: a browser tab closing, a server shutting down).
CLEAN_CLOSE_CODES = frozenset(
    {WebSocketProtocol.CLOSE_STATUS_CODE_NORMAL, WebSocketProtocol.CLOSE_STATUS_CODE_GOING_AWAY}
)


def _close_reason(websocket: WebSocketProtocol, code: int | None, reason: str | None) -> Failure:
    """
    The ``connectionLost`` reason for the engine: clean for the codes of
    :data:`CLEAN_CLOSE_CODES`.  The code is the one of the side that started the close
    (Autobahn answers any close with ``1000``), so both sides see the same one.
    """
    started_here = getattr(websocket, "failedByMe", False) or (
        getattr(websocket, "closedByMe", False) and getattr(websocket, "wasClean", False)
    )
    if started_here and websocket.localCloseCode is not None:
        code, local_reason = websocket.localCloseCode, websocket.localCloseReason
        if isinstance(local_reason, bytes):
            local_reason = local_reason.decode("utf-8", "replace")
        reason = local_reason
    if code == WebSocketProtocol.CLOSE_STATUS_CODE_NORMAL:
        return Failure(ConnectionDone("WebSocket closed normally"))
    if code in CLEAN_CLOSE_CODES:
        why = f": {reason}" if reason else ""
        return Failure(ConnectionDone(f"WebSocket closed: going away (1001){why}"))
    return Failure(WebSocketClosed(code, reason))


#: Seconds a closing side waits for the peer's close frame before dropping the socket.
CLOSE_HANDSHAKE_TIMEOUT = 5.0


def _set_options(
    factory: WebSocketServerFactory | WebSocketClientFactory,
    max_message_size: int,
    auto_ping_interval: float | None,
    auto_ping_timeout: float | None,
    open_timeout: float | None,
) -> None:
    options: dict[str, Any] = {
        "maxFramePayloadSize": max_message_size,
        "maxMessagePayloadSize": max_message_size,
        # No extra reactor turn per frame, no chopping: writes go straight to the socket.
        "autoFragmentSize": 0,
        # A protocol error (a message too big...) is a close frame with its code, which
        # the peer can report, instead of a bare TCP drop (1006).
        "failByDrop": False,
        # Seconds to wait for the peer's close frame after ours (Autobahn's default, 1 s,
        # is short enough for a busy peer to miss, which turns a clean close into 1006).
        "closeHandshakeTimeout": CLOSE_HANDSHAKE_TIMEOUT,
    }
    if auto_ping_interval:
        options["autoPingInterval"] = auto_ping_interval
        options["autoPingTimeout"] = auto_ping_timeout or auto_ping_interval
    if open_timeout:
        options["openHandshakeTimeout"] = open_timeout
    factory.setProtocolOptions(**options)


# -- server ---------------------------------------------------------------------------


#: Pings answered while the peer does not read what we write; one more drops the socket.
MAX_PONGS_WHILE_UNREAD = 64


class _ServerProtocol(WebSocketServerProtocol):
    """One WebSocket: one ``AgentConnection``."""

    factory: _ServerFactory
    #: Autobahn logs the raw handshake, ``Authorization`` included, at debug level:
    #: this logger stays at info whatever txaio's global level (tokens are never logged).
    log = make_logger(level="info")
    connection_id: str = ""
    acp: AgentConnection | None = None
    binary_frames_ignored = 0
    #: Pongs sent since the peer last read (the transport paused the agent).
    pongs_while_unread = 0
    _ended = False

    def onPing(self, payload: bytes) -> None:
        """Answer, unless the peer keeps pinging without reading (see the table)."""
        if self.acp is not None and self.acp.protocol.output_paused:
            self.pongs_while_unread += 1
            if self.pongs_while_unread > MAX_PONGS_WHILE_UNREAD:
                _log.warn(
                    "ws {id}: {n} pings while not reading what it is sent: dropped",
                    id=self.connection_id,
                    n=self.pongs_while_unread,
                )
                self.dropConnection(abort=True)
                return
        else:
            self.pongs_while_unread = 0
        super().onPing(payload)

    def onConnect(self, request: ConnectionRequest) -> tuple[None, dict[str, Any]]:
        self.connection_id = str(uuid.uuid4())
        headers: dict[str, Any] = {}
        if self.factory.response_headers is not None:
            headers.update(self.factory.response_headers(request))
        headers[CONNECTION_ID_HEADER] = self.connection_id
        return None, headers

    def onOpen(self) -> None:
        protocol = _engine(f"ws {self.connection_id[:8]}", self.factory.max_message_size)
        try:
            acp = self.factory.make_agent_connection(protocol)
        except Exception:
            _log.failure("ws {id}: the agent connection could not be made", id=self.connection_id)
            # sendClose() takes only 1000 and 3000-4999: this is Autobahn's own way to
            # close with a protocol-level code (as for 1009).
            self._fail_connection(
                WebSocketProtocol.CLOSE_STATUS_CODE_INTERNAL_ERROR, "the agent could not start"
            )
            return
        _attach_tracer(acp.protocol, "ws-server")
        self.acp = acp
        self.factory.connections[self.connection_id] = acp
        acp.protocol.makeConnection(WebSocketMessageTransport(self, self.connection_id))

    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        if isBinary:
            self.binary_frames_ignored += 1
            return
        if self.acp is not None:
            self.acp.protocol.dataReceived(payload)

    def onClose(self, wasClean: bool, code: int | None, reason: str | None) -> None:
        if self._ended:
            return
        self._ended = True
        acp = self.acp
        if acp is None:
            return
        self.factory.connections.pop(self.connection_id, None)
        acp.protocol.connectionLost(_close_reason(self, code, reason))


class _ServerFactory(WebSocketServerFactory):
    protocol = _ServerProtocol  # type: ignore[assignment]

    def __init__(
        self,
        make_agent_connection: MakeAgentConnection,
        max_message_size: int,
        response_headers: Callable[[ConnectionRequest], Mapping[str, Any]] | None,
    ) -> None:
        super().__init__()
        self.make_agent_connection = make_agent_connection
        self.max_message_size = max_message_size
        self.response_headers = response_headers
        self.connections: dict[str, AgentConnection] = {}


class ACPWebSocketResource(WebSocketResource):
    """
    The ``twisted.web`` resource that upgrades a request to an ACP WebSocket.

    ``connections`` maps each open WebSocket's ``Acp-Connection-Id`` to its
    ``AgentConnection`` (removed when the socket closes).
    """

    def __init__(self, factory: _ServerFactory) -> None:
        super().__init__(factory)
        self.factory = factory

    @property
    def connections(self) -> Mapping[str, AgentConnection]:
        return self.factory.connections


def websocket_resource(
    make_agent_connection: MakeAgentConnection,
    *,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    auto_ping_interval: float | None = DEFAULT_AUTO_PING_INTERVAL,
    auto_ping_timeout: float | None = DEFAULT_AUTO_PING_TIMEOUT,
    open_timeout: float | None = 30.0,
    response_headers: Callable[[ConnectionRequest], Mapping[str, Any]] | None = None,
) -> ACPWebSocketResource:
    """
    A ``twisted.web`` resource serving ACP over WebSocket: render it for a ``GET`` with
    ``Upgrade: websocket`` (after your own checks: token, ``Origin``, limits).

    ``make_agent_connection(protocol)`` makes the agent side of each WebSocket on the
    engine it is given, e.g. ``lambda p: AgentConnection(MyAgent, protocol=p)``.
    ``max_message_size`` bounds a frame and a message (bytes; over it: close ``1009``);
    ``auto_ping_interval``/``auto_ping_timeout`` (seconds, ``None`` for none) detect a
    dead peer (Autobahn runs them on a timer of 0.2 s buckets: use a second or more);
    ``response_headers(request)`` adds headers to the ``101`` (a ``Set-Cookie`` for
    load-balancer affinity; a list value repeats the header).
    """
    factory = _ServerFactory(make_agent_connection, max_message_size, response_headers)
    _set_options(factory, max_message_size, auto_ping_interval, auto_ping_timeout, open_timeout)
    return ACPWebSocketResource(factory)


# -- client ---------------------------------------------------------------------------

_SET_COOKIE_LINE = re.compile(rb"^set-cookie:[ \t]*(.*?)[ \t]*$", re.IGNORECASE | re.MULTILINE)


def set_cookies(raw_response: bytes) -> dict[str, str]:
    """The ``name=value`` pairs of the ``Set-Cookie`` lines of a raw HTTP response head."""
    found: dict[str, str] = {}
    for match in _SET_COOKIE_LINE.finditer(raw_response.replace(b"\r\n", b"\n")):
        pair = match.group(1).decode("latin-1").split(";", 1)[0]
        name, sep, value = pair.partition("=")
        if sep and name.strip():
            found[name.strip()] = value.strip()
    return found


class _ClientProtocol(WebSocketClientProtocol):
    factory: _ClientFactory
    #: Info level whatever txaio's global level: see ``_ServerProtocol.log``.
    log = make_logger(level="info")
    acp: ClientConnection | None = None
    binary_frames_ignored = 0
    _ended = False
    _connection_id: str | None = None
    _response_headers: Mapping[str, str] | None = None

    def onConnect(self, response: ConnectionResponse) -> None:
        self._response_headers = dict(response.headers)
        self._connection_id = response.headers.get(CONNECTION_ID_HEADER.lower())
        raw = getattr(self, "http_response_data", b"") or b""
        self.factory.cookies.update(set_cookies(raw))

    def onOpen(self) -> None:
        factory = self.factory
        if factory.abandoned:
            self.dropConnection(abort=True)
            return
        protocol = _engine(factory.name, factory.max_message_size)
        try:
            acp = ClientConnection(factory.client, protocol=protocol, name=factory.name)
        except Exception:
            failed, factory.opened = factory.opened, None
            self._fail_connection(
                WebSocketProtocol.CLOSE_STATUS_CODE_INTERNAL_ERROR, "the client could not start"
            )
            if failed is not None:
                failed.errback()
            return
        _attach_tracer(acp.protocol, factory.name)
        self.acp = acp
        transport = WebSocketMessageTransport(self, self._connection_id, self._response_headers)
        acp.protocol.makeConnection(transport)
        opened, factory.opened = factory.opened, None
        if opened is not None:
            opened.callback(acp)

    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        if isBinary:
            self.binary_frames_ignored += 1
            return
        if self.acp is not None:
            self.acp.protocol.dataReceived(payload)

    def onClose(self, wasClean: bool, code: int | None, reason: str | None) -> None:
        if self._ended:
            return
        self._ended = True
        opened, self.factory.opened = self.factory.opened, None
        if opened is not None:
            why = getattr(self, "wasNotCleanReason", None) or reason or f"code {code}"
            why = tls_error_text(why) or why
            opened.errback(
                WebSocketConnectError(
                    f"WebSocket handshake with {safe_url(self.factory.url)} failed: {why}"
                )
            )
        if self.acp is not None:
            self.acp.protocol.connectionLost(_close_reason(self, code, reason))


class _ClientFactory(WebSocketClientFactory):
    protocol = _ClientProtocol  # type: ignore[assignment]

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        client: IClient | Callable[[ClientConnection], IClient],
        cookies: MutableMapping[str, str],
        max_message_size: int,
        name: str,
    ) -> None:
        super().__init__(url, headers=headers)
        self.client = client
        self.cookies = cookies
        self.max_message_size = max_message_size
        self.name = name
        self.opened: Deferred[ClientConnection] | None = Deferred()
        #: The caller cancelled ``connect_websocket``'s Deferred.
        self.abandoned = False


def connect_websocket(
    reactor: Any,
    url: str,
    client: IClient | Callable[[ClientConnection], IClient],
    *,
    headers: Mapping[str, str] | None = None,
    cookies: MutableMapping[str, str] | None = None,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    auto_ping_interval: float | None = DEFAULT_AUTO_PING_INTERVAL,
    auto_ping_timeout: float | None = DEFAULT_AUTO_PING_TIMEOUT,
    open_timeout: float | None = 30.0,
    tls: ClientTLS | None = None,
    tls_options: Any = None,
    name: str = "agent",
) -> Deferred[ClientConnection]:
    """
    Open an ACP connection to the agent at ``url`` (``ws://`` or ``wss://``).

    Fires with the :class:`~acpkit.connection.ClientConnection` once the WebSocket is
    open (call ``initialize()`` next), or fails with :class:`WebSocketConnectError`.
    ``headers`` go on the handshake (``Authorization: Bearer …``; never logged).
    ``cookies`` (a mapping you own, or a new one) is sent as ``Cookie`` and receives the
    ``Set-Cookie`` pairs of the ``101``: pass the same mapping to the next
    ``connect_websocket`` to the same server for session affinity.  ``tls``
    (:class:`~acpkit.remote.tls.ClientTLS`: a private CA, a client certificate) is what
    a ``wss://`` connection trusts and authenticates with (default: the platform's
    CAs, no client certificate); its files are read before connecting (``ValueError``
    naming a bad one).  ``tls_options`` (a Twisted ``IOpenSSLClientConnectionCreator``)
    may be given instead, for full control; not both.
    ``conn.protocol.transport`` is a :class:`WebSocketMessageTransport`: its
    ``connection_id`` is the server's ``Acp-Connection-Id``.
    """
    scheme = urlsplit(url).scheme.lower()
    if scheme not in ("ws", "wss"):
        raise ValueError(f"connect_websocket needs a ws:// or wss:// URL, not {safe_url(url)!r}")
    if urlsplit(url).username or urlsplit(url).password:
        raise ValueError(
            "connect_websocket: credentials in the URL are refused; pass them in headers"
        )
    if tls is not None and tls_options is not None:
        raise ValueError("connect_websocket: give tls or tls_options, not both")
    is_secure, host, port, _resource, _path, _params = parse_url(url)
    if is_secure and tls is not None:
        tls_options = tls.creator(host)
    jar: MutableMapping[str, str] = cookies if cookies is not None else {}
    request_headers = dict(headers or {})
    if jar and not any(key.lower() == "cookie" for key in request_headers):
        request_headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in jar.items())
    factory = _ClientFactory(url, request_headers, client, jar, max_message_size, name)
    _set_options(factory, max_message_size, auto_ping_interval, auto_ping_timeout, open_timeout)
    endpoint: Any = HostnameEndpoint(reactor, host, port)
    if is_secure:
        if tls_options is None:
            try:
                from twisted.internet.ssl import optionsForClientTLS
            except ImportError as e:  # pragma: no cover - the remote extra installs it
                raise WebSocketConnectError(
                    f"wss:// needs Twisted's TLS support (pip install 'twisted[tls]'): {e}"
                ) from None
            tls_options = optionsForClientTLS(host)
        endpoint = wrapClientTLS(tls_options, endpoint)

    opened = factory.opened
    assert opened is not None

    def connect_failed(failure: Failure) -> None:
        pending, factory.opened = factory.opened, None
        if pending is not None:
            pending.errback(
                WebSocketConnectError(f"could not connect to {safe_url(url)}: {failure.value}")
            )

    connecting = endpoint.connect(factory)
    connecting.addErrback(connect_failed)

    def cancel(_: Deferred[ClientConnection]) -> None:
        factory.opened = None
        factory.abandoned = True
        connecting.cancel()
        proto = getattr(connecting, "result", None)
        if isinstance(proto, WebSocketProtocol):
            proto.dropConnection(abort=True)

    result: Deferred[ClientConnection] = Deferred(cancel)
    opened.chainDeferred(result)
    return result
