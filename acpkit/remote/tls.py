"""
TLS settings of a remote ACP client: which certificates to trust, and the client's own
certificate when the server asks for one (TLS client authentication).

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
a file missing or not PEM          ``ValueError`` naming the file, when the settings
                                   are loaded (before any connection)
=================================  =====================================================

The server's name is always checked against its certificate (``optionsForClientTLS``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from twisted.internet.interfaces import IOpenSSLClientConnectionCreator
    from twisted.internet.ssl import Certificate

__all__ = ["ClientTLS"]


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read the {what} {path}: {e.strerror or e}") from None


@attrs.frozen
class ClientTLS:
    """What a remote client trusts, and the certificate it authenticates with."""

    #: PEM file of the certificate authorities to trust instead of the platform's.
    trust_root: Path | None = None
    #: PEM file of the client certificate (with its key unless ``private_key`` is set).
    certificate: Path | None = None
    #: PEM file of the client certificate's private key.
    private_key: Path | None = None

    def __attrs_post_init__(self) -> None:
        if self.private_key is not None and self.certificate is None:
            raise ValueError("a TLS private key without a client certificate")

    def creator(
        self, hostname: str, *, alpn: Sequence[bytes] = ()
    ) -> IOpenSSLClientConnectionCreator:
        """
        The connection creator for a TLS connection to ``hostname`` offering the
        application protocols ``alpn`` (in order of preference; none: no ALPN).
        ``ValueError`` when a file cannot be read or parsed; ``ImportError`` naming
        ``twisted[tls]`` when Twisted's TLS support is not installed.
        """
        try:
            from twisted.internet.ssl import (
                PrivateCertificate,
                optionsForClientTLS,
                trustRootFromCertificates,
            )
        except ImportError as e:  # pragma: no cover - pyOpenSSL is in every extra
            raise ImportError(
                f"TLS needs Twisted's TLS support (pip install 'twisted[tls]'): {e}"
            ) from e
        from OpenSSL.crypto import Error as OpenSSLError

        trust = None
        client = None
        try:
            if self.trust_root is not None:
                pem = _read(self.trust_root, "TLS trust root")
                trust = trustRootFromCertificates(_certificates(pem))
            if self.certificate is not None:
                pem = _read(self.certificate, "TLS client certificate")
                if self.private_key is not None:
                    pem += b"\n" + _read(self.private_key, "TLS private key")
                client = PrivateCertificate.loadPEM(pem)
        except OpenSSLError as e:
            raise ValueError(f"not a valid PEM certificate or key: {e}") from None
        return optionsForClientTLS(
            hostname,
            trustRoot=trust,
            clientCertificate=client,
            acceptableProtocols=list(alpn) or None,
        )


def _certificates(pem: bytes) -> list[Certificate]:
    """Every certificate of a PEM bundle (``Certificate.loadPEM`` reads only the first)."""
    from twisted.internet.ssl import Certificate

    marker = b"-----END CERTIFICATE-----"
    blocks = [block + marker for block in pem.split(marker) if b"-----BEGIN" in block]
    if not blocks:
        raise ValueError("no PEM certificate in the TLS trust root")
    return [Certificate.loadPEM(block) for block in blocks]
