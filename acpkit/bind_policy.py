"""
The bind policy: where a listener may listen, and what authentication that needs.

Every listener acpkit opens goes through :func:`check_bind` before it listens: raw NDJSON
(:func:`acpkit.endpoints.serve`), remote ACP over Streamable HTTP and WebSocket
(:func:`acpkit.remote.serve_remote`), on TCP, TLS or a unix socket, and bob's
``--listen`` in all its forms.  Whoever reaches an agent can make it run commands, so
the policy refuses by default; a refusal is :class:`InsecureBindError` (or
:class:`ClientAuthError`), one line saying why and what would be accepted, raised before
anything listens.

==================================  ==================================================
listener                            policy
==================================  ==================================================
``tcp:``/``ssl:``/``tcp6:`` naming  bound to ``127.0.0.1`` (``::1`` for ``tcp6:``):
no interface                        loopback by default
loopback interface                  needs authentication: a bearer token (remote ACP
                                    only: raw NDJSON has no place for one), a TLS
                                    client certificate (``ssl:`` only), or an explicit
                                    ``no_token`` (bob: ``--no-token``): then any local
                                    user or process can connect
any other interface (``0.0.0.0``,   needs a bearer token or a TLS client certificate;
``::``, an address, a name)         ``no_token`` is refused there
``unix:PATH`` without ``mode=``     ``mode=600`` added: only the owner can connect; no
                                    token needed
``unix:`` with a ``mode=`` that     needs a bearer token (remote ACP)
lets group or others connect
an abstract ``unix:`` address       as a loopback interface: no file, so no
(starting with NUL)                 permissions
``haproxy:ENDPOINT`` (the PROXY      ENDPOINT's policy, as above (``haproxy:tcp:PORT``
protocol, v1 or v2, before every    listens on loopback unless it names an
connection: a load balancer's)      interface); the proxy's header names each peer;
                                    TLS client authentication is refused (behind a
                                    proxy it would authenticate the proxy)
any other endpoint type             needs a bearer token or a TLS client certificate
                                    (whether it is local cannot be told)
TLS client authentication on an     :class:`ClientAuthError`: only TLS carries client
endpoint that is not ``ssl:``       certificates
==================================  ==================================================
"""

from __future__ import annotations

import ipaddress

import attrs

from acpkit.compat import endpoint_arguments

__all__ = [
    "PROXY_PREFIX",
    "BindAuthentication",
    "ClientAuthError",
    "InsecureBindError",
    "check_bind",
    "is_loopback_host",
    "loopback_tcp",
    "speaks_proxy_protocol",
]

#: Endpoint types whose interface the policy reads (``interface=``, or the third
#: positional argument of ``tcp:``).
INET_TYPES = frozenset({"tcp", "tcp6", "ssl"})

#: The prefix of Twisted's PROXY protocol endpoints (``twisted.protocols.haproxy``): the
#: endpoint after it is the one that listens, and the policy is that endpoint's.
PROXY_PREFIX = "haproxy"


def _behind_proxy(description: str) -> str | None:
    """The endpoint a ``haproxy:ENDPOINT`` string wraps, or None for any other string."""
    prefix, colon, inner = description.partition(":")
    if colon and prefix.strip().lower() == PROXY_PREFIX:
        return inner
    return None


def _remedy(raw: bool) -> str:
    """What a refused listener could use instead (said in every refusal)."""
    token = (
        "serve remote ACP (http:ENDPOINT), which takes a bearer token,"
        if raw
        else "give a bearer token (bob: --token-file, or the one it generates; serve_remote:"
        " token=),"
    )
    return (
        f"{token} require TLS client certificates (--tls-client-ca / client_ca=, ssl: only),"
        " or serve on a unix socket (unix:PATH, owner only)"
    )


class InsecureBindError(ValueError):
    """A listener that would let unauthenticated peers drive the agent."""


class ClientAuthError(ValueError):
    """TLS client authentication asked of an endpoint that cannot do it (not ``ssl:``)."""


@attrs.frozen
class BindAuthentication:
    """
    What a listener checks of its peers.

    ``token``: every request must carry a bearer token (remote ACP only).
    ``client_certificate``: every TLS handshake must present a client certificate from a
    configured CA (``ssl:`` only).  ``no_token``: the operator accepts, explicitly, that
    any local user may connect to a loopback TCP listener without credentials.
    """

    token: bool = False
    client_certificate: bool = False
    no_token: bool = False

    @property
    def authenticates(self) -> bool:
        """True when peers must present credentials (a token or a certificate)."""
        return self.token or self.client_certificate


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


def _unix_mode(value: str, description: str) -> int:
    try:
        return int(value, 8)
    except ValueError:
        raise ValueError(f"{description!r}: mode={value} is not an octal mode") from None


def speaks_proxy_protocol(description: str) -> bool:
    """
    True for a ``haproxy:ENDPOINT`` string: each connection starts with a PROXY protocol
    header naming the client (so admission counts connections per client, not per
    balancer: :class:`acpkit.admission.Admission`'s ``proxied``).
    """
    return _behind_proxy(description) is not None


def check_bind(description: str, auth: BindAuthentication, *, raw: bool = False) -> str:
    """
    The endpoint string to listen on for ``description`` under ``auth`` (see the module
    docstring): ``interface=`` or ``mode=`` added where the policy chooses them, or
    :class:`InsecureBindError` / :class:`ClientAuthError` saying why the listener is
    refused.  ``raw``: the listener speaks raw NDJSON, which carries no bearer token
    (``auth.token`` is then an error).  ``ValueError`` for a string that is no endpoint
    string.
    """
    inner = _behind_proxy(description)
    if inner is not None:
        if auth.client_certificate:
            raise ClientAuthError(
                f"TLS client authentication behind the PROXY protocol ({description}) would"
                " authenticate the proxy, not the client: authenticate clients with a bearer"
                " token (or have the proxy check their certificates)"
            )
        if not inner:
            raise ValueError(f"{description!r} names no endpoint after {PROXY_PREFIX}:")
        return f"{PROXY_PREFIX}:{check_bind(inner, auth, raw=raw)}"
    given = description
    remedy = _remedy(raw)
    args, kwargs = endpoint_arguments(description)
    if not args or not args[0]:
        raise ValueError(f"{description!r} is not a server endpoint string")
    kind = args[0].lower()
    if raw and auth.token:
        raise InsecureBindError(
            f"{description}: raw NDJSON carries no bearer token; serve remote ACP"
            " (http:ENDPOINT) to authenticate with one"
        )
    if auth.client_certificate and kind != "ssl":
        raise ClientAuthError(
            f"TLS client authentication needs an ssl: endpoint, not {kind}: (only TLS"
            " carries client certificates)"
        )
    if kind == "unix":
        return _unix(description, args, kwargs, auth, remedy)
    if kind not in INET_TYPES:
        if not auth.authenticates:
            raise InsecureBindError(
                f"refusing to listen on {description}: whether {kind}: endpoints are"
                f" local cannot be told, so they need authentication: {remedy}"
            )
        return description
    # tcp:PORT:INTERFACE is also accepted by Twisted (the third positional argument).
    interface = kwargs.get("interface", args[2] if kind == "tcp" and len(args) > 2 else None)
    if interface is None:
        loopback = "::1" if kind == "tcp6" else "127.0.0.1"
        description = f"{description}:interface={_escape(loopback)}"
        interface = loopback
    elif not interface:
        interface = "0.0.0.0"  # an empty interface: every interface
    if is_loopback_host(interface):
        if auth.authenticates or auth.no_token:
            return description
        raise InsecureBindError(
            f"refusing to listen on {given} without authentication: loopback is not a"
            " trust boundary (any local user or process could connect and drive the"
            f" agent); {remedy}; or accept that with --no-token (no_token=True)"
        )
    if auth.authenticates:
        return description
    if auth.no_token:
        raise InsecureBindError(
            f"refusing to listen on {interface} (not loopback) without authentication:"
            " --no-token (no_token=True) is for loopback only; " + remedy
        )
    raise InsecureBindError(
        f"refusing to listen on {interface} (not loopback) without authentication: {remedy}"
    )


def loopback_tcp(description: str) -> bool:
    """
    True when ``description`` is a TCP or TLS endpoint the policy binds to loopback (no
    interface named, or a loopback one), behind the PROXY protocol or not; False for
    anything else, or no endpoint string.
    """
    inner = _behind_proxy(description)
    if inner is not None:
        return loopback_tcp(inner)
    try:
        args, kwargs = endpoint_arguments(description)
    except ValueError:
        return False
    if not args or args[0].lower() not in INET_TYPES:
        return False
    kind = args[0].lower()
    interface = kwargs.get("interface", args[2] if kind == "tcp" and len(args) > 2 else None)
    return interface is None or (bool(interface) and is_loopback_host(interface))


def _unix(
    description: str,
    args: list[str],
    kwargs: dict[str, str],
    auth: BindAuthentication,
    remedy: str,
) -> str:
    """A unix socket: owner-only by default; a wider ``mode=`` needs a token."""
    address = kwargs.get("address", args[1] if len(args) > 1 else "")
    if address.startswith("\0"):
        # The abstract namespace has no file, so no permissions: any local user connects.
        if auth.authenticates or auth.no_token:
            return description
        raise InsecureBindError(
            f"refusing to listen on {description!r} without authentication: an abstract"
            " unix socket has no file permissions (any local user could connect); "
            + remedy
            + "; or accept that with --no-token (no_token=True)"
        )
    if "mode" not in kwargs:
        return f"{description}:mode=600"
    mode = _unix_mode(kwargs["mode"], description)
    if mode & 0o077 and not auth.token:
        raise InsecureBindError(
            f"refusing to listen on {description}: mode={kwargs['mode']} lets other users"
            " connect, so it needs a bearer token (remote ACP: http:unix:...); leave mode="
            " out for an owner-only socket"
        )
    return description
