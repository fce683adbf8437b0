"""
Typed ACP connections: :class:`AgentConnection` (what an agent holds) and
:class:`ClientConnection` (what a client holds).

Each wraps one :class:`acpkit.jsonrpc.JSONRPCProtocol` (``.protocol``, the object to
hand to a transport) and does three things the untyped layer does not:

1. **Types.**  Inbound params are decoded into ``acpkit.schema`` models (a decoding
   error answers ``-32602`` naming the JSON path); results are encoded back.  Outbound
   calls take and return models.
2. **Capabilities.**  Each side remembers what the other advertised at ``initialize``
   and refuses, with a local :class:`~acpkit.errors.CapabilityError`, to call a method
   the peer did not advertise.  Requests before ``initialize`` are refused.
3. **Protocol semantics** that every implementation otherwise gets wrong:

   .. list-table::
      :header-rows: 1
      :widths: 2 3

      * - situation
        - what the connection does
      * - ``session/cancel`` while a turn runs
        - the ``prompt`` handler's Deferred is cancelled (``CancelledError`` inside an
          ``async def``, ``asyncio.CancelledError`` on the asyncio reactor); the turn
          answers ``stopReason: "cancelled"`` whatever the handler then returns or raises
      * - ``session/cancel`` before the turn started
        - a prompt that arrived but waits for a handler slot is answered ``cancelled``
          without running; a cancel for a session with no prompt in flight is ignored
          (it never leaks into the next turn)
      * - the client calls ``cancel()``
        - ``session/cancel`` is sent and every pending ``session/request_permission`` of
          that session is answered with the ``cancelled`` outcome
      * - an agent sends updates for a session before its ``session/new`` response
        - held until the ``session/new`` response carrying that id has been written,
          then sent in order
      * - a client receives updates for a session it does not know yet
        - buffered (bounded) until the session is known, then delivered in order, right
          after the ``new_session()`` Deferred has fired
      * - a method the implementation lacks
        - ``-32601``, never a fake success, and before its params are decoded (malformed
          params of a method the handler lacks are ``-32601``, not ``-32602``); see
          :func:`unimplemented`
      * - the peer stops reading our output
        - ``session_update()`` (and every notification sender) returns ``writable()``: a
          Deferred that fires once the transport takes more output; ``await`` it in a
          stream and at most one transport buffer piles up
      * - an ``async def`` handler on the asyncio reactor
        - runs as an asyncio task: it may await asyncio libraries (``httpx``, the
          ``openai`` SDK) and the connection's Deferreds in one body; see
          ``acpkit.jsonrpc.asyncio_bridge``
      * - the connection ends
        - ``closed`` fires: ``None`` for a clean end (the peer's EOF, ``close()``, an
          agent process exiting 0), the reason's failure otherwise

=================================  =====================================================
module                             its job
=================================  =====================================================
:mod:`acpkit.connection.role`      what both sides share: decoding, dispatch, encoding,
                                   typed calls, lifetime, back-pressure, extensions
:mod:`acpkit.connection.agent`     the agent side: :class:`AgentConnection`, :class:`Agent`
:mod:`acpkit.connection.client`    the client side: :class:`ClientConnection`,
                                   :class:`Client`
:mod:`acpkit.connection.versions`  the protocol versions acpkit speaks
=================================  =====================================================
"""

from __future__ import annotations

from acpkit.connection.agent import Agent, AgentConnection, AgentSource
from acpkit.connection.client import MAX_EARLY_UPDATES as MAX_EARLY_UPDATES
from acpkit.connection.client import Client, ClientConnection, ClientSource
from acpkit.connection.role import is_implemented, unimplemented
from acpkit.connection.versions import (
    LATEST_PROTOCOL_VERSION,
    SUPPORTED_PROTOCOL_VERSIONS,
    ProtocolVersionError,
    negotiate_version,
)

__all__ = [
    "LATEST_PROTOCOL_VERSION",
    "SUPPORTED_PROTOCOL_VERSIONS",
    "Agent",
    "AgentConnection",
    "AgentSource",
    "Client",
    "ClientConnection",
    "ClientSource",
    "ProtocolVersionError",
    "is_implemented",
    "negotiate_version",
    "unimplemented",
]
