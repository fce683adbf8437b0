"""
TLS settings of a remote ACP client: which certificates to trust, and the client's own
certificate when the server asks for one (TLS client authentication); and the PEM
reading both sides share (:func:`read_certificates`).

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

if TYPE_CHECKING:
    from twisted.internet.interfaces import IOpenSSLClientConnectionCreator
    from twisted.internet.ssl import Certificate, KeyPair, PrivateCertificate

__all__ = ["ClientTLS", "read_certificates"]

_BEGIN_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"
_END_CERTIFICATE = b"-----END CERTIFICATE-----"


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read the {what} {path}: {e.strerror or e}") from None


def _twisted_ssl() -> None:
    """Raise ``ImportError`` naming ``twisted[tls]`` when Twisted's TLS is not installed."""
    try:
        import OpenSSL  # noqa: F401
        from twisted.internet import ssl  # noqa: F401
    except ImportError as e:  # pragma: no cover - pyOpenSSL is in every extra
        raise ImportError(
            f"TLS needs Twisted's TLS support (pip install 'twisted[tls]'): {e}"
        ) from e


def _certificate_blocks(pem: bytes) -> list[bytes]:
    """The ``CERTIFICATE`` blocks of a PEM text, in order (anything else is skipped)."""
    blocks: list[bytes] = []
    rest = pem
    while True:
        start = rest.find(_BEGIN_CERTIFICATE)
        if start < 0:
            return blocks
        end = rest.find(_END_CERTIFICATE, start)
        if end < 0:
            return blocks
        end += len(_END_CERTIFICATE)
        blocks.append(rest[start:end] + b"\n")
        rest = rest[end:]


def read_certificates(path: Path, what: str) -> list[Certificate]:
    """
    Every certificate of the PEM file ``path`` (a bundle of one or more; other blocks
    such as a private key are skipped).  ``ValueError`` naming ``what`` and the file
    when it cannot be read, holds no certificate, or holds a damaged one.
    """
    _twisted_ssl()
    from OpenSSL.crypto import Error as OpenSSLError
    from twisted.internet.ssl import Certificate

    blocks = _certificate_blocks(_read(path, what))
    if not blocks:
        raise ValueError(f"the {what} {path} holds no PEM certificate")
    certificates = []
    for number, block in enumerate(blocks, start=1):
        try:
            certificates.append(Certificate.loadPEM(block))
        except OpenSSLError:
            raise ValueError(
                f"the {what} {path}: certificate {number} is not a valid PEM certificate"
            ) from None
    return certificates


def _read_private_key(path: Path, what: str) -> KeyPair:
    """The first private key of the PEM file ``path`` (a Twisted ``KeyPair``)."""
    from OpenSSL.crypto import FILETYPE_PEM
    from OpenSSL.crypto import Error as OpenSSLError
    from twisted.internet.ssl import KeyPair

    pem = _read(path, what)
    if b"PRIVATE KEY-----" not in pem:
        raise ValueError(f"the {what} {path} holds no PEM private key")
    try:
        return KeyPair.load(pem, FILETYPE_PEM)
    except OpenSSLError:
        raise ValueError(
            f"the {what} {path} is not a valid PEM private key (an encrypted key is not supported)"
        ) from None


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
            key = _read_private_key(key_file, key_what)
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
        _twisted_ssl()
        from twisted.internet.ssl import optionsForClientTLS

        return optionsForClientTLS(
            hostname,
            trustRoot=self._trust(),
            clientCertificate=self._client_certificate(),
            acceptableProtocols=list(alpn) or None,
        )
