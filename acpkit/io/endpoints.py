"""
Twisted endpoint strings: :func:`serve` listens on one (``unix:/path``, ``tcp:0``...)
under the bind policy every acpkit listener shares, :func:`connect` connects to one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred, fail
from twisted.internet.interfaces import (
    IListeningPort,
    IProtocol,
    IProtocolFactory,
    IStreamClientEndpoint,
    IStreamServerEndpoint,
)
from twisted.internet.protocol import Protocol

from acpkit.io.admission import Admission, AdmissionLimits, AdmittedFactory
from acpkit.io.bind_policy import BindAuthentication, check_bind, speaks_proxy_protocol

__all__ = ["connect", "serve"]


def serve(
    reactor: Any,
    description: str,
    factory: IProtocolFactory,
    *,
    no_token: bool = False,
    client_ca: str | os.PathLike[str] | None = None,
    limits: AdmissionLimits | None = None,
) -> Deferred[IListeningPort]:
    """
    Listen on a server endpoint string (``"unix:/path/sock"``, ``"tcp:0"``...) for raw
    NDJSON, under the bind policy every acpkit listener shares
    (:mod:`acpkit.io.bind_policy`): loopback by default; a unix socket is owner-only; TCP
    needs TLS client certificates (``client_ca``: a PEM file of CA certificates,
    ``ssl:`` only) or, on loopback only, ``no_token=True`` (any local user can then
    connect: raw NDJSON carries no token).  A refused listener is a failed Deferred
    (:class:`~acpkit.io.bind_policy.InsecureBindError`), before anything listens.
    Connections are admitted (:mod:`acpkit.io.admission`, ``limits``): a connection that
    has not sent a first line within ``pending_timeout`` is closed, and so are the
    oldest silent ones when caps are reached.
    """
    # acpkit.io.tls_server loads twisted.internet.endpoints, which loads OpenSSL: imported
    # when a listener is made, not at the import of acpkit.io (an agent on stdio never
    # needs it).
    from acpkit.io.tls_server import server_endpoint

    auth = BindAuthentication(client_certificate=client_ca is not None, no_token=no_token)
    try:
        description = check_bind(description, auth, raw=True)
        endpoint: IStreamServerEndpoint = server_endpoint(
            reactor,
            description,
            client_ca=None if client_ca is None else Path(client_ca).expanduser(),
        )
    except Exception as e:  # the policy's refusal, whatever the endpoint parser raises
        return fail(e)
    admission = Admission(limits, clock=reactor, proxied=speaks_proxy_protocol(description))
    return endpoint.listen(AdmittedFactory(factory, admission, accept_on=b"\n"))


def connect(reactor: Any, description: str, protocol: IProtocol | Protocol) -> Deferred[IProtocol]:
    """Connect ``protocol`` to a client endpoint string; fires with the protocol."""
    from twisted.internet.endpoints import clientFromString, connectProtocol

    endpoint: IStreamClientEndpoint = clientFromString(reactor, description)
    connected: Deferred[IProtocol] = connectProtocol(endpoint, protocol)
    return connected
