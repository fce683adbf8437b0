"""
The security rules of the remote ACP server (:func:`acpkit.remote.serve_remote`).

Where it may listen is the bind policy every acpkit listener shares
(:mod:`acpkit.bind_policy`); what each request must carry is checked here.

=====================================  ==================================================
rule                                   what happens
=====================================  ==================================================
where it listens                       :mod:`acpkit.bind_policy`: loopback by default;
                                       TCP (loopback too) needs a bearer token, TLS
                                       client certificates or an explicit ``no_token``
                                       (loopback only); a unix socket is owner-only
``Authorization: Bearer T`` with       compared in constant time with every accepted
tokens configured                      token; anything else is ``401`` with
                                       ``WWW-Authenticate: Bearer``, answered as soon
                                       as the request's headers are read (HTTP/1.x:
                                       its body is not read; HTTP/2: answered when
                                       its stream ends, its body discarded unstored)
a token in the URL                     never accepted: ``?access_token=``/``?token=``
                                       is ``401`` even when the token is right; URLs
                                       are never logged with their query
``Origin`` absent                      accepted (a non-browser client)
``Origin`` present                     accepted when listed in ``allowed_origins``, or
                                       when both it and ``Host`` name this machine's
                                       loopback; ``403`` otherwise
a connection's later requests          must present the identity its ``initialize``
                                       did (the same token, the same client
                                       certificate): another is ``404``, as an
                                       unknown ``Acp-Connection-Id``
=====================================  ==================================================

The token is never logged nor put in an error message.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from urllib.parse import urlsplit

from acpkit.bind_policy import (
    BindAuthentication,
    ClientAuthError,
    InsecureBindError,
    is_loopback_host,
)
from acpkit.bind_policy import check_bind as _check_bind
from acpkit.remote.tokens import TokenSet

__all__ = [
    "ClientAuthError",
    "InsecureBindError",
    "RequestCheck",
    "authentication_in_force",
    "bearer_token_ok",
    "check_bind",
    "is_loopback_host",
    "matching_token",
    "origin_allowed",
    "tls_serving_problem",
]

#: Query parameters that would carry a token in a URL: always refused.
URL_TOKEN_PARAMETERS = frozenset({"access_token", "token", "auth", "authorization"})


def check_bind(
    description: str,
    *,
    token: bytes | TokenSet | None,
    client_auth: bool = False,
    no_token: bool = False,
) -> str:
    """
    The endpoint string a remote ACP server listens on (:func:`acpkit.bind_policy.check_bind`
    with a bearer token when ``token`` is given, TLS client authentication when
    ``client_auth``, and the explicit loopback opt-out ``no_token``).
    """
    auth = BindAuthentication(
        token=token is not None, client_certificate=client_auth, no_token=no_token
    )
    return _check_bind(description, auth)


def authentication_in_force(
    token: bytes | TokenSet | None, client_ca: object | None, *, no_token: bool = False
) -> str:
    """
    What a client must present, for the startup line: a bearer token, a TLS client
    certificate from ``client_ca`` (the CA file), both, or nothing (then the endpoint
    is a unix socket, or loopback with ``no_token``: :func:`check_bind` saw to it).
    Never the token.
    """
    parts = []
    if token is not None:
        count = len(token) if isinstance(token, TokenSet) else 1
        parts.append("a bearer token" if count == 1 else f"one of {count} bearer tokens")
    if client_ca is not None:
        parts.append(f"a TLS client certificate signed by a CA in {client_ca}")
    if not parts:
        if no_token:
            return (
                "authentication: none (--no-token: any local user or process can connect"
                " and drive the agent)"
            )
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


def matching_token(authorization: bytes | None, tokens: TokenSet) -> int | None:
    """
    The position (0-based) of the token ``authorization`` carries as ``Bearer <token>``
    among ``tokens``, or None.  Every token is compared, in constant time each, so the
    time taken tells neither which one matched nor whether one did.
    """
    found = None
    for position, token in enumerate(tokens):
        if bearer_token_ok(authorization, token) and found is None:
            found = position
    return found


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
    returns ``(status, message)`` for a refused request, ``None`` for an accepted one;
    :meth:`token_holder` says which accepted token a request carries.
    """

    def __init__(self, token: bytes | TokenSet | None, allowed_origins: Iterable[str]) -> None:
        self._accepted = None if token is None else TokenSet.of(token)
        self._allowed_origins = tuple(allowed_origins)

    @property
    def requires_token(self) -> bool:
        """True when every request must carry a bearer token."""
        return self._accepted is not None

    def token_holder(self, authorization: bytes | None) -> int | None:
        """The position of the token the request carries (None: no token configured)."""
        if self._accepted is None:
            return None
        return matching_token(authorization, self._accepted)

    def refusal(
        self,
        *,
        query_names: Iterable[bytes] = (),
        authorization: bytes | None,
        origin: bytes | None,
        host: bytes | None,
    ) -> tuple[int, str] | None:
        """Why this request is refused, or None."""
        if any(name.decode("latin-1").lower() in URL_TOKEN_PARAMETERS for name in query_names):
            return 401, "credentials are never accepted in the URL: send Authorization: Bearer"
        if self._accepted is not None and matching_token(authorization, self._accepted) is None:
            return 401, (
                "a valid bearer token is required: Authorization: Bearer ... (never in the URL)"
            )
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
