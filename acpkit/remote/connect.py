"""
One entry point for a remote agent, whatever its transport: :func:`connect_remote`
chooses by the URL's scheme.

=====================  ===========================================================
URL                    transport
=====================  ===========================================================
``ws://`` ``wss://``   WebSocket (:func:`acpkit.remote.websocket.connect_websocket`):
                       the Deferred fires once the socket is open
``http://``            Streamable HTTP (:func:`acpkit.remote.http_client.connect_http`):
``https://``           fires at once; the first request, ``initialize``, opens it
anything else          ``ValueError`` (the Deferred fails; nothing is sent)
=====================  ===========================================================

Either way the result is a :class:`~acpkit.connection.ClientConnection` to
``initialize``, and ``headers`` (a bearer token) go with every HTTP request or the
WebSocket handshake, never logged.  Without an ``Authorization`` header the bearer token
is read from ``token_file`` (its first token; an unreadable or empty file fails the
Deferred with :class:`~acpkit.remote.tokens.TokenFileError` naming it), else, for a
loopback URL, from the file a local server writes the token it made for that port
(:func:`acpkit.remote.tokens.default_token_path`; bob does), when it exists.
``tls`` (:class:`~acpkit.remote.tls.ClientTLS`) is what a ``wss://`` or ``https://``
connection trusts and the client certificate it presents; its files are read first (a
bad one fails the Deferred with ``ValueError`` naming it; unused for ``ws://`` and
``http://``).  ``http2`` is the HTTP version
policy of ``http://`` and ``https://`` URLs (``"auto"``, ``"prior-knowledge"`` or
``"never"``: :func:`~acpkit.remote.http_client.connect_http`; unused for WebSocket).
Each transport's module (and so its dependency: Autobahn, treq) is imported only when a
URL of its scheme is connected.  :func:`connect_resumable` makes a connection that comes
back when lost, its sessions loaded again (:mod:`acpkit.remote.reconnect`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from twisted.internet.defer import Deferred, fail

from acpkit.connection import ClientConnection
from acpkit.interfaces import IClient
from acpkit.remote.tls import ClientTLS
from acpkit.remote.tokens import token_for_url

if TYPE_CHECKING:
    from acpkit.http2_agent import HTTP2Mode
    from acpkit.remote.reconnect import IReconnectObserver, ResumableConnection, RetryPolicy

__all__ = [
    "REMOTE_SCHEMES",
    "check_remote_url",
    "connect_remote",
    "connect_resumable",
    "with_bearer_token",
]

#: The URL schemes :func:`connect_remote` accepts.
REMOTE_SCHEMES = ("ws", "wss", "http", "https")


def check_remote_url(url: str) -> str:
    """
    The scheme of a remote agent's URL, lower-cased; ``ValueError`` saying what is
    wrong for a URL that is not ``ws(s)://host...`` or ``http(s)://host...``, or that
    holds user info (credentials go in headers).
    """
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
        has_user = parts.username is not None or parts.password is not None
        parts.port  # noqa: B018 (raises ValueError for a port out of range or not a number)
    except ValueError as e:
        raise ValueError(f"not a valid URL ({e})") from None
    scheme = parts.scheme.lower()
    if scheme not in REMOTE_SCHEMES:
        shown = f"{scheme}://" if scheme else "no scheme"
        raise ValueError(f"the scheme must be ws://, wss://, http:// or https:// (got {shown})")
    if not hostname:
        raise ValueError("the URL names no host")
    if has_user:
        raise ValueError(
            "user info (user:password@) is refused in a URL: give credentials as headers"
        )
    return scheme


def with_bearer_token(
    url: str,
    headers: Mapping[str, str] | None,
    token_file: str | os.PathLike[str] | None = None,
) -> dict[str, str]:
    """
    ``headers``, with ``Authorization: Bearer`` added from ``token_file`` or the
    loopback URL's token file when they hold none (see the module docstring).
    """
    given = dict(headers or {})
    if any(name.lower() == "authorization" for name in given):
        return given
    return {**given, **token_for_url(url, token_file)}


def connect_remote(
    reactor: Any,
    url: str,
    client: IClient | Callable[[ClientConnection], IClient],
    *,
    headers: Mapping[str, str] | None = None,
    tls: ClientTLS | None = None,
    http2: HTTP2Mode = "auto",
    name: str = "agent",
    token_file: str | os.PathLike[str] | None = None,
) -> Deferred[ClientConnection]:
    """A :class:`ClientConnection` to the agent at ``url`` (see the module docstring)."""
    try:
        scheme = check_remote_url(url)
        headers = with_bearer_token(url, headers, token_file)
        if tls is not None and scheme in ("wss", "https"):
            tls.check()
        if scheme in ("ws", "wss"):
            from acpkit.remote.websocket import connect_websocket

            return connect_websocket(reactor, url, client, headers=headers, tls=tls, name=name)
        from acpkit.remote.http_client import connect_http

        return connect_http(reactor, url, client, headers=headers, tls=tls, http2=http2, name=name)
    except ValueError as e:
        return fail(e)


def connect_resumable(
    reactor: Any,
    url: str,
    client: IClient | Callable[[ClientConnection], IClient],
    *,
    headers: Mapping[str, str] | None = None,
    tls: ClientTLS | None = None,
    http2: HTTP2Mode = "auto",
    name: str = "agent",
    token_file: str | os.PathLike[str] | None = None,
    policy: RetryPolicy | None = None,
    observer: IReconnectObserver | None = None,
) -> ResumableConnection:
    """
    A :class:`~acpkit.remote.reconnect.ResumableConnection` to the agent at ``url``:
    each connection is :func:`connect_remote`'s (same arguments); once lost, it is made
    again and its sessions loaded again (``policy``'s bounded retries, ``observer``
    told).  Nothing is sent before its ``open()``.
    """
    from acpkit.remote.reconnect import ResumableConnection

    def connect() -> Deferred[ClientConnection]:
        return connect_remote(
            reactor,
            url,
            client,
            headers=headers,
            tls=tls,
            http2=http2,
            name=name,
            token_file=token_file,
        )

    return ResumableConnection(connect, clock=reactor, policy=policy, observer=observer)
