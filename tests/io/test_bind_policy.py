"""
``acpkit.io.bind_policy``: the one policy every listener goes through.  Loopback by default;
TCP (loopback included) needs a token, a client certificate or an explicit ``no_token``
(loopback only); raw NDJSON carries no token; unix sockets are owner-only; anything
else needs authentication.
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acpkit.io.bind_policy import (
    BindAuthentication,
    ClientAuthError,
    InsecureBindError,
    check_bind,
    is_loopback_host,
    loopback_tcp,
)

NONE = BindAuthentication()
TOKEN = BindAuthentication(token=True)
CERT = BindAuthentication(client_certificate=True)
NO_TOKEN = BindAuthentication(no_token=True)


@pytest.mark.parametrize(
    ("description", "auth", "raw", "expected"),
    [
        ("tcp:8765", TOKEN, False, "tcp:8765:interface=127.0.0.1"),
        ("tcp:8765", NO_TOKEN, False, "tcp:8765:interface=127.0.0.1"),
        ("tcp:8765", NO_TOKEN, True, "tcp:8765:interface=127.0.0.1"),
        ("tcp6:8765", TOKEN, False, "tcp6:8765:interface=\\:\\:1"),
        ("tcp:8765:interface=127.0.0.1", NO_TOKEN, True, "tcp:8765:interface=127.0.0.1"),
        ("tcp:8765:interface=0.0.0.0", TOKEN, False, "tcp:8765:interface=0.0.0.0"),
        ("ssl:8443:interface=0.0.0.0", CERT, True, "ssl:8443:interface=0.0.0.0"),
        ("ssl:8443", CERT, False, "ssl:8443:interface=127.0.0.1"),
        ("unix:/tmp/acp.sock", NONE, True, "unix:/tmp/acp.sock:mode=600"),
        ("unix:/tmp/acp.sock:mode=600", NONE, False, "unix:/tmp/acp.sock:mode=600"),
        ("unix:/tmp/acp.sock:mode=666", TOKEN, False, "unix:/tmp/acp.sock:mode=666"),
        ("systemd:domain=INET:index=0", TOKEN, False, "systemd:domain=INET:index=0"),
    ],
)
def test_accepted_listeners_and_what_they_listen_on(
    description: str, auth: BindAuthentication, raw: bool, expected: str
) -> None:
    """Each accepted form, and the endpoint string the policy makes of it."""
    assert check_bind(description, auth, raw=raw) == expected


@pytest.mark.parametrize(
    ("description", "auth", "raw", "words"),
    [
        ("tcp:8765", NONE, False, "loopback is not a trust boundary"),
        ("tcp:8765", NONE, True, "loopback is not a trust boundary"),
        ("tcp:8765:interface=0.0.0.0", NONE, False, "0.0.0.0 (not loopback)"),
        ("tcp:8765:interface=0.0.0.0", NO_TOKEN, False, "for loopback only"),
        ("tcp:8765:interface=0.0.0.0", NO_TOKEN, True, "for loopback only"),
        ("tcp:8765:", NONE, False, "0.0.0.0 (not loopback)"),
        ("tcp:8765:192.0.2.7", NONE, False, "192.0.2.7 (not loopback)"),
        ("tcp6:8765:interface=\\:\\:", NO_TOKEN, False, ":: (not loopback)"),
        ("tcp:8765", TOKEN, True, "raw NDJSON carries no bearer token"),
        ("unix:/tmp/acp.sock:mode=666", NONE, True, "lets other users connect"),
        ("unix:/tmp/acp.sock:mode=660", NO_TOKEN, False, "lets other users connect"),
        ("unix:\0abstract", NONE, True, "abstract unix socket has no file permissions"),
        ("systemd:domain=INET:index=0", NONE, False, "cannot be told"),
        ("systemd:domain=INET:index=0", NO_TOKEN, False, "cannot be told"),
    ],
)
def test_refused_listeners_say_why(
    description: str, auth: BindAuthentication, raw: bool, words: str
) -> None:
    """Each refused form: InsecureBindError, one line naming the reason."""
    with pytest.raises(InsecureBindError) as caught:
        check_bind(description, auth, raw=raw)
    message = str(caught.value)
    assert words in message
    assert "\n" not in message


def test_a_refusal_says_what_would_be_accepted() -> None:
    """The refusal of a loopback TCP listener names every way to be accepted."""
    with pytest.raises(InsecureBindError) as caught:
        check_bind("tcp:8765", NONE)
    message = str(caught.value)
    for remedy in ("--token-file", "--tls-client-ca", "unix:PATH", "--no-token"):
        assert remedy in message


def test_a_raw_refusal_does_not_offer_a_token() -> None:
    """Raw NDJSON cannot carry a token: its refusal points at remote ACP instead."""
    with pytest.raises(InsecureBindError) as caught:
        check_bind("tcp:8765", NONE, raw=True)
    assert "http:ENDPOINT" in str(caught.value) and "--token-file" not in str(caught.value)


def test_client_certificates_need_tls() -> None:
    """TLS client authentication on an endpoint without TLS: ClientAuthError."""
    with pytest.raises(ClientAuthError, match="needs an ssl: endpoint, not tcp:"):
        check_bind("tcp:8765", CERT)
    with pytest.raises(ClientAuthError, match="not unix:"):
        check_bind("unix:/tmp/s", CERT, raw=True)


def test_no_endpoint_string_is_a_value_error() -> None:
    """An empty string is no endpoint string."""
    with pytest.raises(ValueError, match="not a server endpoint string"):
        check_bind("", TOKEN)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LOCALHOST.", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.0.2.2", False),
        ("example.com", False),
        ("", False),
    ],
)
def test_is_loopback_host(host: str, loopback: bool) -> None:
    """Names and addresses of this machine's loopback, and nothing else."""
    assert is_loopback_host(host) is loopback


def test_loopback_tcp() -> None:
    """Which endpoints the policy binds to loopback TCP (bob makes a token for those)."""
    assert loopback_tcp("tcp:0")
    assert loopback_tcp("ssl:0:interface=127.0.0.1")
    assert not loopback_tcp("tcp:0:interface=0.0.0.0")
    assert not loopback_tcp("unix:/tmp/s")
    assert not loopback_tcp("bogus")


_addresses = st.one_of(
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda a: str(a).replace(":", "\\:")),
    st.sampled_from(["", "0.0.0.0", "localhost", "example.org", "10.0.0.1"]),
)


@given(
    kind=st.sampled_from(["tcp", "ssl", "tcp6"]),
    port=st.integers(0, 65535),
    interface=st.one_of(st.none(), _addresses),
    auth=st.builds(BindAuthentication, st.booleans(), st.booleans(), st.booleans()),
    raw=st.booleans(),
)
def test_no_unauthenticated_listener_is_ever_reachable_beyond_loopback(
    kind: str, port: int, interface: str | None, auth: BindAuthentication, raw: bool
) -> None:
    """
    For any TCP or TLS endpoint, interface and authentication: whatever the policy
    accepts binds loopback, or requires a token or a client certificate; and it never
    accepts a listener without any authentication unless ``no_token`` was asked for on
    loopback.
    """
    description = f"{kind}:{port}" + ("" if interface is None else f":interface={interface}")
    try:
        result = check_bind(description, auth, raw=raw)
    except (InsecureBindError, ClientAuthError):
        return
    bound = result.rsplit("interface=", 1)[1].replace("\\", "")
    if not auth.authenticates:
        assert auth.no_token
        assert is_loopback_host(bound)
    if bound in ("", "0.0.0.0", "::") or not _is_loopback(bound):
        assert auth.authenticates


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return is_loopback_host(host)


# -- behind a load balancer: the PROXY protocol (haproxy:ENDPOINT) -------------------------


@pytest.mark.parametrize(
    ("description", "auth", "expected"),
    [
        ("haproxy:tcp:8765", TOKEN, "haproxy:tcp:8765:interface=127.0.0.1"),
        ("haproxy:tcp:8765", NO_TOKEN, "haproxy:tcp:8765:interface=127.0.0.1"),
        ("HAProxy:tcp:8765:interface=10.0.0.5", TOKEN, "haproxy:tcp:8765:interface=10.0.0.5"),
        ("haproxy:unix:/tmp/acp.sock", NONE, "haproxy:unix:/tmp/acp.sock:mode=600"),
    ],
)
def test_the_proxy_protocol_takes_the_policy_of_the_endpoint_it_wraps(
    description: str, auth: BindAuthentication, expected: str
) -> None:
    """
    ``haproxy:ENDPOINT`` is ENDPOINT's policy, prefixed: loopback by default (not every
    interface, as an endpoint type the policy could not read would be), authentication
    as for ENDPOINT.
    """
    assert check_bind(description, auth) == expected


@pytest.mark.parametrize(
    ("description", "auth", "words"),
    [
        ("haproxy:tcp:8765", NONE, "loopback is not a trust boundary"),
        ("haproxy:tcp:8765:interface=0.0.0.0", NONE, r"0\.0\.0\.0 \(not loopback\)"),
        ("haproxy:tcp:8765:interface=0.0.0.0", NO_TOKEN, "for loopback only"),
    ],
)
def test_the_proxy_protocol_is_refused_where_its_endpoint_is(
    description: str, auth: BindAuthentication, words: str
) -> None:
    """What ENDPOINT alone would be refused for, ``haproxy:ENDPOINT`` is refused for too."""
    with pytest.raises(InsecureBindError, match=words):
        check_bind(description, auth)


def test_client_certificates_are_refused_behind_the_proxy_protocol() -> None:
    """Behind a proxy a TLS client certificate would authenticate the proxy: refused."""
    with pytest.raises(ClientAuthError, match="authenticate the proxy"):
        check_bind("haproxy:ssl:8443", CERT)


def test_the_proxy_protocol_with_no_endpoint_is_a_value_error() -> None:
    """``haproxy:`` alone names nothing to listen on."""
    with pytest.raises(ValueError, match="names no endpoint"):
        check_bind("haproxy:", TOKEN)


def test_loopback_tcp_sees_through_the_proxy_protocol() -> None:
    """``haproxy:tcp:PORT`` is loopback TCP (bob makes a token for it), as ``tcp:PORT`` is."""
    assert loopback_tcp("haproxy:tcp:8765")
    assert not loopback_tcp("haproxy:tcp:8765:interface=0.0.0.0")
    assert not loopback_tcp("haproxy:unix:/tmp/acp.sock")
