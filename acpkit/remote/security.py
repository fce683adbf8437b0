"""
The security rules of the remote ACP server (:func:`acpkit.remote.serve_remote`).

=====================================  ==================================================
rule                                   what happens
=====================================  ==================================================
``tcp:PORT`` / ``ssl:PORT`` without    bound to ``127.0.0.1`` (loopback by default)
``interface=``
a non-loopback ``interface=``          refused at startup (:class:`InsecureBindError`,
without authentication                 one line) unless a bearer token or TLS client
                                       authentication (``client_ca``) is configured
``client_ca`` with an endpoint that    refused at startup (:class:`ClientAuthError`):
is not ``ssl:``                        only TLS carries client certificates
``unix:PATH``                          local: no token needed (file permissions apply)
``Authorization: Bearer T`` with a     compared in constant time; anything else is
token configured                       ``401`` with ``WWW-Authenticate: Bearer``
a token in the URL                     never accepted: ``?access_token=``/``?token=``
                                       is ``401`` even when the token is right
``Origin`` absent                      accepted (a non-browser client)
``Origin`` present                     accepted when listed in ``allowed_origins``, or
                                       when both it and ``Host`` name this machine's
                                       loopback; ``403`` otherwise
=====================================  ==================================================

The token is never logged nor put in an error message.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

from twisted.internet.endpoints import _parse

__all__ = [
    "ClientAuthError",
    "InsecureBindError",
    "RequestCheck",
    "authentication_in_force",
    "bearer_token_ok",
    "check_bind",
    "is_loopback_host",
    "origin_allowed",
    "tls_serving_problem",
]

#: Query parameters that would carry a token in a URL: always refused.
URL_TOKEN_PARAMETERS = frozenset({"access_token", "token", "auth", "authorization"})


class InsecureBindError(ValueError):
    """A listening address that would expose the agent without authentication."""


class ClientAuthError(ValueError):
    """TLS client authentication asked of an endpoint that cannot do it (not ``ssl:``)."""


def is_loopback_host(host: str) -> bool:
    """True when ``host`` (a name or an address, brackets allowed) is this machine's loopback."""
    host = host.strip().strip("[]").lower()
    if host in ("localhost", "localhost.", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace(":", "\\:").replace("=", "\\=")


def check_bind(description: str, *, token: bytes | None, client_auth: bool = False) -> str:
    """
    The endpoint string to listen on: ``description`` with ``interface=127.0.0.1`` added
    to a TCP or TLS endpoint that names no interface.  Raises :class:`InsecureBindError`
    (one line saying why) for a non-loopback interface with neither a bearer token nor
    TLS client authentication (``client_auth``: a client CA is configured), and
    :class:`ClientAuthError` for ``client_auth`` on an endpoint that is not ``ssl:``.
    """
    try:
        args, kwargs = _parse(description)
    except (ValueError, IndexError) as e:
        raise ValueError(f"{description!r} is not a server endpoint string: {e}") from None
    if not args:
        raise ValueError(f"{description!r} is not a server endpoint string")
    kind = str(args[0]).lower()
    if client_auth and kind != "ssl":
        raise ClientAuthError(
            f"TLS client authentication needs an ssl: endpoint, not {kind}: (only TLS"
            " carries client certificates)"
        )
    authenticated = token is not None or client_auth
    if kind == "unix":
        return description
    if kind not in ("tcp", "ssl", "tcp6"):
        if not authenticated:
            raise InsecureBindError(
                f"cannot tell whether {kind}: endpoints are local; configure a bearer token"
            )
        return description
    # tcp:PORT:INTERFACE is also accepted by Twisted (the third positional argument)
    interface = kwargs.get("interface", args[2] if kind == "tcp" and len(args) > 2 else None)
    if not interface:
        if "interface" in kwargs or len(args) > 2:
            interface = "0.0.0.0"  # an empty interface: every interface
        elif kind == "tcp6":
            return f"{description}:interface={_escape('::1')}"
        else:
            return f"{description}:interface=127.0.0.1"
    if is_loopback_host(str(interface)):
        return description
    if not authenticated:
        raise InsecureBindError(
            f"refusing to listen on {interface} (not loopback) without authentication:"
            " configure a bearer token (--token-file) or TLS client certificates"
            " (--tls-client-ca, ssl: only), or bind 127.0.0.1 behind a proxy that"
            " authenticates"
        )
    return description


def authentication_in_force(token: bytes | None, client_ca: object | None) -> str:
    """
    What a client must present, for the startup line: the bearer token, a TLS client
    certificate from ``client_ca`` (the CA file), both, or nothing (then the endpoint
    is loopback or a unix socket, :func:`check_bind` saw to it).  Never the token.
    """
    parts = []
    if token is not None:
        parts.append("a bearer token")
    if client_ca is not None:
        parts.append(f"a TLS client certificate signed by a CA in {client_ca}")
    if not parts:
        return "authentication: none (local connections only)"
    return "authentication: " + " and ".join(parts)


def bearer_token_ok(authorization: bytes | None, token: bytes) -> bool:
    """True when the ``Authorization`` header value is ``Bearer <token>`` (constant time)."""
    if authorization is None:
        return False
    scheme, _, credentials = authorization.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        # Still compare, so the time taken does not tell the scheme was wrong.
        hmac.compare_digest(b"", token)
        return False
    return hmac.compare_digest(credentials.strip(), token)


def origin_allowed(origin: bytes | None, host: bytes | None, allowed: Iterable[str]) -> bool:
    """The ``Origin`` rule of the module docstring."""
    if origin is None:
        return True
    text = origin.decode("latin-1").strip()
    if text.rstrip("/") in {a.rstrip("/") for a in allowed}:
        return True
    origin_host = urlsplit(text).hostname
    if origin_host is None or not is_loopback_host(origin_host):
        return False
    if host is None:
        return False
    request_host = host.decode("latin-1").strip()
    if request_host.startswith("["):
        request_host = request_host[1:].partition("]")[0]
    else:
        request_host = request_host.rpartition(":")[0] or request_host
    return is_loopback_host(request_host)


class RequestCheck:
    """
    The checks every request to the endpoint goes through before anything else, in
    order: a token in the URL, the bearer token, the ``Origin``.  :meth:`refusal`
    returns ``(status, message)`` for a refused request, ``None`` for an accepted one.
    """

    def __init__(self, token: bytes | None, allowed_origins: Iterable[str]) -> None:
        self._token = token
        self._allowed_origins = tuple(allowed_origins)

    def refusal(
        self,
        *,
        query_names: Iterable[bytes],
        authorization: bytes | None,
        origin: bytes | None,
        host: bytes | None,
    ) -> tuple[int, str] | None:
        """Why this request is refused, or None."""
        if any(name.decode("latin-1").lower() in URL_TOKEN_PARAMETERS for name in query_names):
            return 401, "credentials are never accepted in the URL: send Authorization: Bearer"
        if self._token is not None and not bearer_token_ok(authorization, self._token):
            return 401, "a valid bearer token is required (Authorization: Bearer ...)"
        if not origin_allowed(origin, host, self._allowed_origins):
            return 403, "this Origin is not allowed"
        return None


def tls_serving_problem() -> str | None:
    """
    Why this Twisted and pyOpenSSL cannot serve TLS with ``twisted.web`` (None: they can).

    Twisted before 26.4 sets the ALPN callback on a server's TLS context for each new
    connection; pyOpenSSL 25 and later refuse to change a context that already made a
    connection, so the second TLS connection fails.  Probed by behaviour (a context that
    made a connection refuses ``set_alpn_select_callback``), not by version numbers.
    """
    from twisted import __version__ as twisted_version

    if tuple(int(part) for part in twisted_version.split(".")[:2]) >= (26, 4):
        return None
    try:
        from OpenSSL import SSL
    except ImportError:
        return "TLS needs pyOpenSSL (pip install 'twisted[tls]')"
    context = SSL.Context(SSL.TLS_METHOD)
    SSL.Connection(context, None)
    try:
        context.set_alpn_select_callback(lambda connection, offered: b"")
    except ValueError:
        from OpenSSL import __version__ as openssl_version

        return (
            f"Twisted {twisted_version} cannot serve TLS with pyOpenSSL"
            f" {openssl_version} (it changes a TLS context after its first connection,"
            " which this pyOpenSSL refuses): install twisted>=26.4, or serve tcp: on"
            " loopback behind a TLS proxy"
        )
    return None
