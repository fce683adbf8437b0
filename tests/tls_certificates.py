"""
Throwaway certificate authorities and certificates for the TLS client authentication
tests: a CA, a server certificate for ``localhost`` / ``127.0.0.1`` and client
certificates it signs (valid, or expired), written as PEM files.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Authority", "Issued", "make_authority"]

_DAY = datetime.timedelta(days=1)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@attrs.frozen
class Issued:
    """A certificate and its key, as PEM bytes and as files."""

    certificate_pem: bytes
    key_pem: bytes
    certificate: Path
    key: Path


@attrs.frozen
class Authority:
    """A certificate authority: its key, its certificate, and where its PEM file is."""

    name: str
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate
    directory: Path

    @property
    def certificate_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    @property
    def certificate_file(self) -> Path:
        """The CA certificate's PEM file (written by :func:`make_authority`)."""
        return self.directory / f"{self.name}-ca.pem"

    def issue(
        self,
        common_name: str,
        *,
        server: bool = False,
        expired: bool = False,
    ) -> Issued:
        """A certificate for ``common_name`` signed by this CA (files in its directory)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        if expired:
            not_before, not_after = now - 10 * _DAY, now - _DAY
        else:
            not_before, not_after = now - _DAY, now + _DAY
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    ]
                ),
                critical=False,
            )
        certificate = builder.sign(self.key, hashes.SHA256())
        certificate_pem = certificate.public_bytes(serialization.Encoding.PEM)
        key_pem = _key_pem(key)
        stem = self.directory / f"{self.name}-{common_name}{'-expired' if expired else ''}"
        certificate_file = stem.with_name(stem.name + "-cert.pem")
        key_file = stem.with_name(stem.name + "-key.pem")
        certificate_file.write_bytes(certificate_pem)
        key_file.write_bytes(key_pem)
        return Issued(certificate_pem, key_pem, certificate_file, key_file)


def make_authority(directory: Path, name: str = "test") -> Authority:
    """A new self-signed CA called ``name`` keeping its files in ``directory``."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"acpkit test CA {name}")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _DAY)
        .not_valid_after(now + 10 * _DAY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    authority = Authority(name, key, certificate, directory)
    authority.certificate_file.write_bytes(authority.certificate_pem)
    return authority
