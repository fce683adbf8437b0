"""
PEM files: the certificates and private keys of TLS, read and checked, with errors that
name the setting and the file.  The TLS client settings (:class:`acpkit.http.ClientTLS`)
and the listeners that require client certificates (:mod:`acpkit.io.tls_server`) read
them here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from twisted.internet.ssl import Certificate, KeyPair, PrivateCertificate

__all__ = [
    "certificate_options",
    "read_certificates",
    "read_private_key",
    "require_twisted_tls",
]

_BEGIN_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"
_END_CERTIFICATE = b"-----END CERTIFICATE-----"


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read the {what} {path}: {e.strerror or e}") from None


def require_twisted_tls() -> None:
    """Raise ``ImportError`` naming ``twisted[tls]`` when Twisted's TLS is not installed."""
    try:
        import OpenSSL  # noqa: F401
        from twisted.internet import ssl  # noqa: F401
    except ImportError as e:  # pragma: no cover - pyOpenSSL is in every extra
        raise ImportError(
            f"TLS needs Twisted's TLS support (pip install 'twisted[tls]'): {e}"
        ) from e


def certificate_options(certificate: PrivateCertificate) -> dict[str, Any]:
    """
    ``privateKey`` and ``certificate`` for Twisted's ``CertificateOptions`` (or
    ``optionsForClientTLS``'s ``extraCertificateOptions``): cryptography's key and
    certificate objects where pyOpenSSL takes them (24.3 and later, where passing its own
    ``PKey``/``X509`` is deprecated and warns), else pyOpenSSL's.
    """
    from OpenSSL import __version__ as openssl_version

    key, cert = certificate.privateKey.original, certificate.original
    if tuple(int(p) for p in openssl_version.split(".")[:2] if p.isdigit()) >= (24, 3):
        return {"privateKey": key.to_cryptography_key(), "certificate": cert.to_cryptography()}
    return {"privateKey": key, "certificate": cert}  # pragma: no cover - old pyOpenSSL


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
    require_twisted_tls()
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


def read_private_key(path: Path, what: str) -> KeyPair:
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
