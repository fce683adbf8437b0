"""
The TLS settings of a remote conformance run (``acpkit-conformance --url https://…`` or
``wss://…``): the trust root, the client certificate and its key, named like
`acpkit.http.tls.ClientTLS` and the reference client's agents-file ``tls`` table.

`TLSSettings` is immutable and travels explicitly from the command line through
`acpkit.conformance.harness.SuiteConfig` and the driver to every connection
(`acpkit.conformance.wire`); `TLSSettings.context` builds each connection's
`ssl.SSLContext`. A refused handshake is raised as `TLSFailure` (an `OSError`) with
the reason in words (`acpkit.http.tls_errors.ssl_error_text`).
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Sequence
from typing import Final

import attrs

from acpkit.http.tls_errors import ssl_error_text

__all__ = [
    "INSECURE_TLS_VARIABLE",
    "SYSTEM_TLS",
    "TLSFailure",
    "TLSOptionError",
    "TLSSettings",
]

#: Set to ``1``, the agent's certificate is not verified at all (test certificates only).
INSECURE_TLS_VARIABLE = "ACPKIT_CONFORMANCE_INSECURE_TLS"


class TLSFailure(OSError):
    """A TLS handshake with the agent failed; the message says why in words."""


class TLSOptionError(ValueError):
    """A TLS option names a file that cannot be used: ``option`` and ``path`` say which."""

    def __init__(self, option: str, path: str, reason: str) -> None:
        super().__init__(f"{option} {path}: {reason}")
        self.option = option
        self.path = path


def _detail(error: Exception) -> str:
    """OpenSSL's reason, without its ``[SSL: …]`` code and ``(_ssl.c:N)`` source line."""
    if isinstance(error, ssl.SSLError) and error.reason:
        return str(error.reason).lower().replace("_", " ")
    text = re.sub(r"^\[[^\]]*\]\s*", "", str(error))
    return re.sub(r"\s*\(_ssl\.c:\d+\)$", "", text).strip() or type(error).__name__


def _reason(error: Exception) -> str:
    if isinstance(error, FileNotFoundError):
        return "no such file"
    if isinstance(error, PermissionError):
        return "permission denied"
    if isinstance(error, IsADirectoryError):
        return "is a directory"
    if isinstance(error, ssl.SSLError):
        return f"not a usable PEM file ({_detail(error)})"
    if isinstance(error, OSError):
        return error.strerror or str(error)
    return str(error)


@attrs.frozen
class TLSSettings:
    """
    How the tester's TLS connections verify the agent and present themselves.

    ``trust_root``: a PEM file of the certificate authorities trusted for the agent's
    certificate (instead of the system's). ``certificate`` and ``private_key``: the
    client certificate presented to an agent that requires one (the key may be in the
    certificate's file). ``insecure``: no verification of the agent's certificate at all
    (``ACPKIT_CONFORMANCE_INSECURE_TLS=1``; test certificates only).
    """

    trust_root: str | None = None
    certificate: str | None = None
    private_key: str | None = None
    insecure: bool = False

    @property
    def given(self) -> tuple[str, ...]:
        """The options given, by their command-line names."""
        names = (
            ("--tls-trust-root", self.trust_root),
            ("--tls-certificate", self.certificate),
            ("--tls-private-key", self.private_key),
        )
        return tuple(name for name, value in names if value is not None)

    def check(self, prefix: str = "--tls-") -> None:
        """
        Load every file once; raises `TLSOptionError` naming the option (``prefix`` +
        ``trust-root``, ``certificate``, ``private-key``) and the file that cannot be used.
        """
        if self.private_key is not None and self.certificate is None:
            raise TLSOptionError(
                prefix + "private-key", self.private_key, f"needs {prefix}certificate too"
            )
        context = ssl.create_default_context()
        if self.trust_root is not None:
            try:
                context.load_verify_locations(cafile=self.trust_root)
            except (OSError, ValueError) as e:
                raise TLSOptionError(prefix + "trust-root", self.trust_root, _reason(e)) from None
        if self.certificate is None:
            return
        files = [(prefix + "certificate", self.certificate)]
        if self.private_key is not None:
            files.append((prefix + "private-key", self.private_key))
        for option, path in files:
            try:
                with open(path, "rb"):
                    pass
            except OSError as e:
                raise TLSOptionError(option, path, _reason(e)) from None
        try:
            context.load_cert_chain(self.certificate, self.private_key)
        except (OSError, ValueError) as e:
            key = f" with {prefix}private-key {self.private_key}" if self.private_key else ""
            raise TLSOptionError(
                prefix + "certificate",
                self.certificate,
                f"not a usable PEM certificate and private key{key} ({_detail(e)})",
            ) from None

    def usage_problem(self, secure: bool, prefix: str = "--tls-") -> str | None:
        """
        Why these options cannot be used (one line naming the option, ``prefix`` +
        ``trust-root`` etc., and its file), or ``None``: they need an ``https://`` or
        ``wss://`` URL (``secure``) and readable PEM files.
        """
        if not self.given:
            return None
        if not secure:
            names = ", ".join(name.replace("--tls-", prefix) for name in self.given)
            return f"{names}: only for an https:// or wss:// URL"
        try:
            self.check(prefix)
        except TLSOptionError as e:
            return str(e)
        return None

    def context(self, alpn: Sequence[str] = ()) -> ssl.SSLContext:
        """A client context with these settings, offering ``alpn``."""
        context = ssl.create_default_context(cafile=self.trust_root)
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.certificate is not None:
            context.load_cert_chain(self.certificate, self.private_key)
        if alpn:
            context.set_alpn_protocols(list(alpn))
        return context


#: The system's trust store and no client certificate (the default).
SYSTEM_TLS: Final = TLSSettings()


def failure(error: ssl.SSLError) -> TLSFailure:
    """The `TLSFailure` for a stdlib TLS error, its reason in words."""
    return TLSFailure(ssl_error_text(error))
