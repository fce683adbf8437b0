"""
TLS settings and rules of remote ACP, without a network: the client's
:class:`~acpkit.http.tls.ClientTLS` (PEM files read, checked, named in errors), the
server's client-CA endpoint (:mod:`acpkit.io.tls_server`), the loopback rule with a
token and/or client authentication (:func:`acpkit.remote.security.check_bind`), and the
words a refused handshake is explained with (:mod:`acpkit.http.tls_errors`).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from cryptography.x509.oid import NameOID
from twisted.internet.endpoints import SSL4ServerEndpoint, TCP4ServerEndpoint
from twisted.internet.testing import MemoryReactor

from acpkit.http.tls import ClientTLS
from acpkit.http.tls_errors import tls_error_text
from acpkit.io.pem import read_certificates
from acpkit.io.tls_server import server_endpoint
from acpkit.remote.security import (
    ClientAuthError,
    InsecureBindError,
    authentication_in_force,
    check_bind,
)
from tests.tls_certificates import Authority, make_authority


@pytest.fixture
def ca(tmp_path: Path) -> Authority:
    return make_authority(tmp_path, "good")


# -- ClientTLS ---------------------------------------------------------------------------------


def test_a_bundle_of_several_ca_certificates_is_read_whole(tmp_path: Path, ca: Authority) -> None:
    """A trust root file with several CA certificates (and other text) gives them all."""
    other = make_authority(tmp_path, "other")
    bundle = tmp_path / "bundle.pem"
    bundle.write_bytes(
        b"# my CAs\n" + ca.certificate_pem + b"\nsome comment\n" + other.certificate_pem
    )
    found = read_certificates(bundle, "TLS trust root")
    names = [
        c.original.to_cryptography().subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
        for c in found
    ]
    assert names == ["acpkit test CA good", "acpkit test CA other"]
    ClientTLS(trust_root=bundle).check()


def test_a_missing_file_is_a_value_error_naming_setting_and_file(tmp_path: Path) -> None:
    """A trust root that does not exist: ValueError naming the setting, the file, the cause."""
    missing = tmp_path / "nope.pem"
    with pytest.raises(ValueError, match=r"cannot read the TLS trust root .*nope\.pem: No such"):
        ClientTLS(trust_root=missing).check()
    with pytest.raises(ValueError, match=r"TLS client certificate .*nope\.pem"):
        ClientTLS(certificate=missing).creator("localhost")


def test_a_file_that_is_not_pem_is_refused(tmp_path: Path) -> None:
    """Text with no PEM certificate in it: ValueError saying so (not OpenSSL's tuple list)."""
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(
        ValueError, match=r"the TLS trust root .*junk\.pem holds no PEM certificate"
    ):
        ClientTLS(trust_root=junk).check()


def test_a_damaged_certificate_is_refused_with_its_number(tmp_path: Path, ca: Authority) -> None:
    """A bundle whose second certificate is damaged: ValueError naming certificate 2."""
    bad = tmp_path / "bad.pem"
    bad.write_bytes(
        ca.certificate_pem + b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
    )
    with pytest.raises(ValueError, match="certificate 2 is not a valid PEM certificate"):
        ClientTLS(trust_root=bad).check()


def test_a_key_without_a_certificate_is_refused_at_once(tmp_path: Path) -> None:
    """private_key without certificate: ValueError when the settings are made."""
    with pytest.raises(ValueError, match=r"a TLS private key .* without a client certificate"):
        ClientTLS(private_key=tmp_path / "key.pem")


def test_a_certificate_pem_that_includes_its_key(ca: Authority) -> None:
    """One PEM file holding the certificate and its key is enough (no private_key)."""
    issued = ca.issue("alice")
    both = issued.certificate.with_name("alice-both.pem")
    both.write_bytes(issued.key_pem + issued.certificate_pem)
    tls = ClientTLS(trust_root=ca.certificate_file, certificate=both)
    tls.check()
    assert tls._client_certificate() is not None


def test_a_certificate_without_its_key_says_where_the_key_goes(ca: Authority) -> None:
    """A certificate file with no key and no private_key: ValueError saying how to give it."""
    issued = ca.issue("alice")
    with pytest.raises(ValueError, match="holds no PEM private key: give the key"):
        ClientTLS(certificate=issued.certificate).check()


def test_a_key_of_another_certificate_is_refused(ca: Authority) -> None:
    """A private key that does not match the certificate: ValueError naming both files."""
    alice, bob = ca.issue("alice"), ca.issue("bob")
    with pytest.raises(ValueError, match=r"bob-key\.pem is not the key of .*alice-cert\.pem"):
        ClientTLS(certificate=alice.certificate, private_key=bob.key).check()


def test_a_key_file_that_is_not_a_key_is_refused(ca: Authority) -> None:
    """private_key naming a certificate file: ValueError naming the key file."""
    alice = ca.issue("alice")
    with pytest.raises(ValueError, match=r"the TLS private key .*alice-cert\.pem holds no PEM"):
        ClientTLS(certificate=alice.certificate, private_key=alice.certificate).check()


def test_the_creator_is_a_twisted_client_connection_creator(ca: Authority) -> None:
    """creator() gives what wrapClientTLS and Agent's policy take (the handshake itself is
    exercised end to end in tests/remote/test_remote_client_auth.py)."""
    from twisted.internet.interfaces import IOpenSSLClientConnectionCreator

    alice = ca.issue("alice")
    tls = ClientTLS(
        trust_root=ca.certificate_file, certificate=alice.certificate, private_key=alice.key
    )
    creator = tls.creator("localhost", alpn=[b"h2", b"http/1.1"])
    assert IOpenSSLClientConnectionCreator.providedBy(creator)


def test_paths_may_be_strings(ca: Authority) -> None:
    """ClientTLS accepts str paths and keeps them as Path."""
    tls = ClientTLS(trust_root=str(ca.certificate_file))
    assert tls.trust_root == ca.certificate_file


# -- the server's client-CA endpoint -----------------------------------------------------------


def _ssl_description(ca: Authority) -> str:
    server = ca.issue("localhost", server=True)
    return f"ssl:0:interface=127.0.0.1:privateKey={server.key}:certKey={server.certificate}"


def test_client_ca_builds_an_ssl_endpoint_requiring_a_certificate(ca: Authority) -> None:
    """ssl: with a client CA: an SSL4ServerEndpoint whose context verifies and requires."""
    from OpenSSL import SSL

    endpoint: Any = server_endpoint(
        MemoryReactor(), _ssl_description(ca), client_ca=ca.certificate_file
    )
    assert isinstance(endpoint, SSL4ServerEndpoint)
    context = endpoint._sslContextFactory.getContext()
    mode = context.get_verify_mode()
    assert mode & SSL.VERIFY_PEER and mode & SSL.VERIFY_FAIL_IF_NO_PEER_CERT
    assert endpoint._interface == "127.0.0.1"


def test_without_client_ca_the_string_is_twisteds(ca: Authority) -> None:
    """No client CA: serverFromString's own endpoint, unchanged."""
    endpoint = server_endpoint(MemoryReactor(), "tcp:0:interface=127.0.0.1")
    assert isinstance(endpoint, TCP4ServerEndpoint)


def test_client_ca_with_a_tcp_endpoint_is_refused(ca: Authority) -> None:
    """Only TLS carries client certificates: tcp: with a client CA is ClientAuthError."""
    with pytest.raises(ClientAuthError, match="needs an ssl: endpoint, not tcp:"):
        server_endpoint(MemoryReactor(), "tcp:0", client_ca=ca.certificate_file)


def test_a_bad_client_ca_file_is_named(tmp_path: Path, ca: Authority) -> None:
    """A client CA file that is not PEM: ValueError naming it."""
    junk = tmp_path / "junk.pem"
    junk.write_text("junk")
    with pytest.raises(ValueError, match=r"TLS client CA file .*junk\.pem holds no PEM"):
        server_endpoint(MemoryReactor(), _ssl_description(ca), client_ca=junk)


def test_unknown_ssl_parameters_are_refused(ca: Authority) -> None:
    """A parameter ssl: does not have is refused, as serverFromString would."""
    with pytest.raises(ValueError, match="ssl: has no parameter colour"):
        server_endpoint(
            MemoryReactor(), _ssl_description(ca) + ":colour=red", client_ca=ca.certificate_file
        )


# -- the loopback rule -------------------------------------------------------------------------

OPEN = "ssl:8443:interface=0.0.0.0"


@pytest.mark.parametrize(
    ("token", "client_auth"),
    [(b"t", False), (None, True), (b"t", True)],
    ids=["token only", "client auth only", "both"],
)
def test_non_loopback_is_allowed_with_a_token_or_client_auth(
    token: bytes | None, client_auth: bool
) -> None:
    """A non-loopback interface is served with a token, client auth, or both."""
    assert check_bind(OPEN, token=token, client_auth=client_auth) == OPEN


def test_non_loopback_with_neither_is_refused_naming_both_ways() -> None:
    """Neither a token nor client auth: InsecureBindError naming both options."""
    with pytest.raises(InsecureBindError) as caught:
        check_bind(OPEN, token=None, client_auth=False)
    message = str(caught.value)
    assert "0.0.0.0 (not loopback)" in message
    assert "--token-file" in message and "--tls-client-ca" in message


def test_client_auth_on_a_plain_tcp_endpoint_is_refused() -> None:
    """client auth asked of tcp: (even on loopback) is ClientAuthError: only TLS can."""
    with pytest.raises(ClientAuthError):
        check_bind("tcp:8765", token=None, client_auth=True)
    with pytest.raises(ClientAuthError):
        check_bind("unix:/tmp/acp.sock", token=b"t", client_auth=True)


def test_loopback_default_still_applies_with_client_auth() -> None:
    """ssl: without interface, with client auth: bound to 127.0.0.1 as ever."""
    assert check_bind("ssl:8443", token=None, client_auth=True).endswith(":interface=127.0.0.1")


@pytest.mark.parametrize(
    ("token", "client_ca", "said"),
    [
        (None, None, "authentication: none (local connections only)"),
        (b"secret", None, "authentication: a bearer token"),
        (None, "/ca.pem", "authentication: a TLS client certificate signed by a CA in /ca.pem"),
        (
            b"secret",
            "/ca.pem",
            "authentication: a bearer token and a TLS client certificate signed by a CA in /ca.pem",
        ),
    ],
)
def test_the_startup_line_says_which_authentication(
    token: bytes | None, client_ca: str | None, said: str
) -> None:
    """The authentication in force, in words, never the token itself."""
    assert authentication_in_force(token, client_ca) == said


# -- refused handshakes, in words --------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "meaning"),
    [
        ("tlsv13 alert certificate required", "requires a TLS client certificate and none"),
        ("tlsv1 alert unknown ca", "not signed by a certificate authority the server trusts"),
        ("tls alert certificate expired", "client certificate: it has expired"),
        ("sslv3 alert bad certificate", "the server refused the TLS client certificate"),
        ("certificate verify failed", "the server's TLS certificate is not trusted"),
    ],
)
def test_openssl_reasons_are_explained(reason: str, meaning: str) -> None:
    """OpenSSL's error (as pyOpenSSL raises it, or Autobahn's text) gets a sentence."""
    from OpenSSL.SSL import Error

    for error in (Error([("SSL routines", "", reason)]), f"SSL error: {reason} (in )"):
        text = tls_error_text(error)
        assert text is not None
        assert text.startswith("TLS handshake failed: ")
        assert meaning in text
        assert text.endswith(f"({reason})")


def test_other_errors_are_left_to_the_caller() -> None:
    """An error that is not about certificates: None."""
    assert tls_error_text(ConnectionRefusedError("refused")) is None


# -- pyOpenSSL's non-deprecated APIs ------------------------------------------------------------


def test_our_tls_contexts_use_no_deprecated_pyopenssl_api(ca: Authority) -> None:
    """The contexts acpkit builds (an ``ssl:`` listener with and without a client CA, a
    client with a client certificate) hand pyOpenSSL cryptography's certificate and key
    objects: no DeprecationWarning (pyOpenSSL 24.3 deprecated passing its own)."""
    client = ca.issue("me")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for client_ca in (None, ca.certificate_file):
            endpoint = server_endpoint(MemoryReactor(), _ssl_description(ca), client_ca=client_ca)
            assert isinstance(endpoint, SSL4ServerEndpoint)
            endpoint._sslContextFactory.getContext()
        tls = ClientTLS(
            trust_root=ca.certificate_file, certificate=client.certificate, private_key=client.key
        )
        tls.creator("localhost", alpn=[b"h2"])
