"""
What a failed TLS handshake means, in words a user can act on.

OpenSSL reports a refused handshake as a list of reason codes (``tlsv13 alert
certificate required``, ``tlsv1 alert unknown ca``...).  :func:`tls_error_text` turns
the ones about certificates into a sentence saying which side refused what, keeping
OpenSSL's own reason in parentheses; the HTTP clients (:func:`acpkit.http.responses.
failure_text`) and the WebSocket client use it.

==========================================  ==========================================
OpenSSL's reason                            the sentence
==========================================  ==========================================
``alert certificate required``,             the server requires a TLS client
``alert handshake failure``,                certificate and none was presented
``peer did not return a certificate``
``alert unknown ca``                        the server does not accept the client
                                            certificate: not signed by a CA it trusts
``alert certificate expired``               the server refused the client
                                            certificate: it has expired
``alert bad certificate``, ``alert          the server refused the client
certificate unknown``, ``…revoked``,        certificate
``alert unsupported certificate``
``certificate verify failed``               the server's certificate is not trusted
                                            (a private CA: give its file as the
                                            trust root)
anything else                               ``None`` (the caller keeps its own text)
==========================================  ==========================================

:func:`ssl_error_text` does the same for the standard library's ``ssl.SSLError`` (the
conformance tester's raw connections), and always has a sentence.
"""

from __future__ import annotations

import re
import ssl

__all__ = ["ssl_error_text", "tls_error_text"]

#: (what OpenSSL says, what it means), the first match wins.
_MEANINGS = (
    (
        ("alert certificate required", "peer did not return a certificate"),
        "the server requires a TLS client certificate and none was presented",
    ),
    (
        ("alert unknown ca",),
        "the server does not accept the TLS client certificate: it is not signed by a"
        " certificate authority the server trusts",
    ),
    (
        ("alert certificate expired",),
        "the server refused the TLS client certificate: it has expired",
    ),
    (
        (
            "alert bad certificate",
            "alert certificate unknown",
            "alert certificate revoked",
            "alert unsupported certificate",
        ),
        "the server refused the TLS client certificate",
    ),
    (
        ("certificate verify failed",),
        "the server's TLS certificate is not trusted (for a private certificate"
        " authority, give its certificate as the trust root)",
    ),
    (
        ("alert handshake failure",),
        "the TLS handshake failed: the server may require a client certificate",
    ),
)


def _openssl_reasons(error: object) -> str:
    """The reason texts of an ``OpenSSL.SSL.Error`` (or of anything else, its ``str``)."""
    args = getattr(error, "args", None)
    if args and isinstance(args[0], list):
        parts = []
        for entry in args[0]:
            if isinstance(entry, tuple) and entry:
                parts.append(str(entry[-1]))
            else:
                parts.append(str(entry))
        if parts:
            return "; ".join(parts)
    text = str(error).strip()
    # Autobahn's wording: "SSL error: <reason> (in <function>)"
    text = re.sub(r"^SSL error:\s*", "", text)
    return re.sub(r"\s*\(in [^()]*\)$", "", text)


def tls_error_text(error: object) -> str | None:
    """
    ``TLS handshake failed: <meaning> (<OpenSSL's reason>)`` for a certificate error
    (an ``OpenSSL.SSL.Error``, or a text holding OpenSSL's reason); ``None`` otherwise.
    """
    reasons = _openssl_reasons(error)
    lowered = reasons.lower()
    for needles, meaning in _MEANINGS:
        if any(needle in lowered for needle in needles):
            return f"TLS handshake failed: {meaning} ({reasons.strip()})"
    return None


def ssl_error_text(error: ssl.SSLError) -> str:
    """
    ``TLS handshake failed: <meaning> (<OpenSSL's reason>)`` for a standard-library
    ``ssl.SSLError``, as :func:`tls_error_text` words it; another TLS error keeps
    OpenSSL's reason (``TLS handshake failed: <reason>``).
    """
    if isinstance(error, ssl.SSLCertVerificationError) and error.verify_message:
        reason = f"certificate verify failed: {error.verify_message}"
    else:
        text = str(error.args[1]) if len(error.args) > 1 else str(error)
        # "[SSL: CODE] reason (_ssl.c:1000)": the reason alone
        reason = re.sub(r"^\[[^\]]*\]\s*", "", text)
        reason = re.sub(r"\s*\(_ssl\.c:\d+\)$", "", reason).strip()
    if isinstance(error, ssl.SSLEOFError):
        reason += ": the server closed the connection, it may require a TLS client certificate"
    return tls_error_text(reason) or f"TLS handshake failed: {reason or repr(error)}"
