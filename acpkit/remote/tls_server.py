"""
The listening endpoint of the remote ACP server, with TLS client authentication.

Twisted's ``ssl:`` endpoint string has no parameter for the certificate authorities a
client certificate must be signed by, so :func:`server_endpoint` builds the endpoint
from the string's own parameters (the ones of ``serverFromString``'s ``ssl:``:
``port``, ``interface``, ``backlog``, ``privateKey``, ``certKey``, ``extraCertChain``,
``dhParameters``, ``sslmethod``) and a ``CertificateOptions`` whose ``trustRoot`` is the
client CA file: the handshake then requires a client certificate signed by one of its
certificates, checked by OpenSSL.  ALPN is untouched: ``twisted.web``'s site still
offers ``h2`` on each connection.

=========================================  ==============================================
``client_ca``                              endpoint
=========================================  ==============================================
``None``                                   ``serverFromString(reactor, description)``
a PEM file, ``ssl:`` endpoint              ``SSL4ServerEndpoint``: a client certificate
                                           from a CA in the file, or no handshake
a PEM file, any other endpoint             ``ClientAuthError`` (only TLS carries client
                                           certificates)
a file missing, unreadable, not PEM        ``ValueError`` naming the file
=========================================  ==============================================
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twisted.internet.endpoints import serverFromString
from twisted.internet.interfaces import IStreamServerEndpoint

from acpkit.bind_policy import ClientAuthError
from acpkit.compat import endpoint_arguments
from acpkit.remote.tls import read_certificates

__all__ = ["CLIENT_CA", "server_endpoint"]

#: What the client CA file is called in errors.
CLIENT_CA = "TLS client CA file"

#: The parameters of Twisted's ``ssl:`` server endpoint string, positional order first.
_SSL_POSITIONAL = ("port",)
_SSL_PARAMETERS = frozenset(
    {
        "port",
        "privateKey",
        "certKey",
        "sslmethod",
        "interface",
        "backlog",
        "extraCertChain",
        "dhParameters",
    }
)


def server_endpoint(
    reactor: Any, description: str, *, client_ca: Path | None = None
) -> IStreamServerEndpoint:
    """
    The endpoint to listen on for ``description``; with ``client_ca`` (a PEM file of one
    or more CA certificates) an ``ssl:`` endpoint requiring a client certificate signed
    by one of them (see the module docstring).
    """
    if client_ca is None:
        endpoint: IStreamServerEndpoint = serverFromString(reactor, description)
        return endpoint
    args, kwargs = endpoint_arguments(description)
    kind = args[0].lower() if args else ""
    if kind != "ssl":
        raise ClientAuthError(
            f"TLS client authentication needs an ssl: endpoint, not {kind or description}:"
            " (only TLS carries client certificates)"
        )
    authorities = read_certificates(client_ca, CLIENT_CA)
    return _ssl_endpoint(reactor, description, args[1:], kwargs, authorities)


def _ssl_endpoint(
    reactor: Any,
    description: str,
    positional: list[Any],
    named: dict[str, Any],
    authorities: list[Any],
) -> IStreamServerEndpoint:
    """``SSL4ServerEndpoint`` for the ``ssl:`` parameters, verifying client certificates."""
    from twisted.internet import ssl
    from twisted.internet.endpoints import SSL4ServerEndpoint
    from twisted.python.filepath import FilePath

    if len(positional) > len(_SSL_POSITIONAL):
        raise ValueError(f"{description!r}: too many positional parameters")
    parameters = dict(zip(_SSL_POSITIONAL, positional, strict=False))
    for name, value in named.items():
        if name not in _SSL_PARAMETERS:
            raise ValueError(f"{description!r}: ssl: has no parameter {name}")
        if name in parameters:
            raise ValueError(f"{description!r}: {name} is given twice")
        parameters[name] = value
    if "port" not in parameters:
        raise ValueError(f"{description!r}: ssl: needs a port")
    private_key = str(parameters.get("privateKey", "server.pem"))
    cert_key = str(parameters.get("certKey", private_key))
    server = ssl.PrivateCertificate.loadPEM(
        FilePath(cert_key).getContent() + b"\n" + FilePath(private_key).getContent()
    )
    chain = None
    if "extraCertChain" in parameters:
        chain_file = Path(str(parameters["extraCertChain"]))
        chain = [c.original for c in read_certificates(chain_file, "extraCertChain file")]
    options: dict[str, Any] = {}
    if "sslmethod" in parameters:
        from OpenSSL import SSL

        options["method"] = getattr(SSL, str(parameters["sslmethod"]))
    if "dhParameters" in parameters:
        options["dhParameters"] = ssl.DiffieHellmanParameters.fromFile(
            FilePath(str(parameters["dhParameters"]))
        )
    context = ssl.CertificateOptions(
        privateKey=server.privateKey.original,
        certificate=server.original,
        extraCertChain=chain,
        # trustRoot: verify the peer, require its certificate, signed by one of these.
        trustRoot=ssl.trustRootFromCertificates(authorities),
        **options,
    )
    # Name the acceptable CAs in the certificate request, so that a client holding
    # several certificates (a browser, curl) offers one these CAs signed.
    openssl_context = context.getContext()
    for authority in authorities:
        try:
            openssl_context.add_client_ca(authority.original.to_cryptography())
        except TypeError:  # pragma: no cover - pyOpenSSL before 24.3 takes X509 only
            openssl_context.add_client_ca(authority.original)
    return SSL4ServerEndpoint(
        reactor,
        int(parameters["port"]),
        context,
        backlog=int(parameters.get("backlog", 50)),
        interface=str(parameters.get("interface", "")),
    )
