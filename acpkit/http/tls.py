"""
TLS settings of a client (remote ACP, MCP over HTTP): which certificates to trust, and the
client's own certificate when the server asks for one (TLS client authentication).  The
PEM files are read by :mod:`acpkit.io.pem`.

One :class:`ClientTLS` serves every remote transport (Streamable HTTP over HTTP/1.1 or
HTTP/2, WebSocket): each asks it for a connection creator for a host name, with the
application protocols it offers by ALPN.

=================================  =====================================================
setting                            effect
=================================  =====================================================
``trust_root`` absent              the platform's trusted certificate authorities
``trust_root=PATH``                only the certificates in that PEM file (one or more)
``certificate=PATH``               that PEM file holds the client's certificate (and
                                   its private key, unless ``private_key`` is given);
                                   offered when the server asks for one
``private_key=PATH``               the client certificate's private key, PEM
``private_key`` without            ``ValueError`` when the settings are made
``certificate``
a file missing, unreadable, not    ``ValueError`` naming the setting and the file, when
PEM; a key that is not the         the creator is made (before any connection; call
certificate's                      :meth:`ClientTLS.check` to know at once)
=================================  =====================================================

The server's name is always checked against its certificate (``optionsForClientTLS``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from acpkit.io.pem import (
    certificate_options,
    read_certificates,
    read_private_key,
    require_twisted_tls,
)

if TYPE_CHECKING:
    from twisted.internet.interfaces import IOpenSSLClientConnectionCreator
    from twisted.internet.ssl import PrivateCertificate

__all__ = ["ClientTLS"]


@attrs.frozen
class ClientTLS:
    """What a remote client trusts, and the certificate it authenticates with."""

    #: PEM file of the certificate authorities to trust instead of the platform's.
    trust_root: Path | None = attrs.field(default=None, converter=attrs.converters.optional(Path))
    #: PEM file of the client certificate (with its key unless ``private_key`` is set).
    certificate: Path | None = attrs.field(default=None, converter=attrs.converters.optional(Path))
    #: PEM file of the client certificate's private key.
    private_key: Path | None = attrs.field(default=None, converter=attrs.converters.optional(Path))

    def __attrs_post_init__(self) -> None:
        if self.private_key is not None and self.certificate is None:
            raise ValueError(f"a TLS private key ({self.private_key}) without a client certificate")

    def check(self) -> None:
        """Read every file now: ``ValueError`` naming the setting and file if one is bad."""
        self._trust()
        self._client_certificate()

    def _trust(self) -> Any:
        from twisted.internet.ssl import trustRootFromCertificates

        if self.trust_root is None:
            return None
        return trustRootFromCertificates(read_certificates(self.trust_root, "TLS trust root"))

    def _client_certificate(self) -> PrivateCertificate | None:
        from twisted.internet.ssl import PrivateCertificate

        if self.certificate is None:
            return None
        what = "TLS client certificate"
        certificate = read_certificates(self.certificate, what)[0]
        key_file = self.private_key if self.private_key is not None else self.certificate
        key_what = "TLS private key" if self.private_key is not None else what
        try:
            key = read_private_key(key_file, key_what)
        except ValueError as e:
            if self.private_key is None:
                raise ValueError(
                    f"{e}: give the key in the same file or as the private key setting"
                ) from None
            raise
        if not key.matches(certificate.getPublicKey()):
            raise ValueError(
                f"the {key_what} {key_file} is not the key of the TLS client certificate"
                f" {self.certificate}"
            )
        client: PrivateCertificate = PrivateCertificate.fromCertificateAndKeyPair(certificate, key)
        return client

    def creator(
        self, hostname: str, *, alpn: Sequence[bytes] = ()
    ) -> IOpenSSLClientConnectionCreator:
        """
        The connection creator for a TLS connection to ``hostname`` offering the
        application protocols ``alpn`` (in order of preference; none: no ALPN).
        ``ValueError`` when a file cannot be read or parsed; ``ImportError`` naming
        ``twisted[tls]`` when Twisted's TLS support is not installed.
        """
        require_twisted_tls()
        from twisted.internet.ssl import optionsForClientTLS

        client = self._client_certificate()
        return optionsForClientTLS(
            hostname,
            trustRoot=self._trust(),
            # The client certificate as cryptography's objects where pyOpenSSL takes
            # them (``clientCertificate=`` would pass pyOpenSSL's, deprecated there).
            extraCertificateOptions=certificate_options(client) if client is not None else None,
            acceptableProtocols=list(alpn) or None,
        )
