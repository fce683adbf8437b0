"""
bob's listeners (``twistd acp-agent --listen ENDPOINT``): where it may listen, what a
client must present, and the bearer token bob makes when none is given.

Every form goes through acpkit's bind policy (:mod:`acpkit.io.bind_policy`) before it
listens, and every connection through its admission table (:mod:`acpkit.io.admission`).

=========================================  ============================================
``--listen``                               what a client must present
=========================================  ============================================
``http:tcp:PORT`` (``ssl:``, ``tcp6:``)    a bearer token: ``--token-file FILE``'s
                                           (a missing FILE is created with a new
                                           token), else a new one bob writes to
                                           ``~/.local/state/acpkit/remote-PORT.token``
                                           (``$XDG_RUNTIME_DIR/acpkit`` when set),
                                           readable by its owner only, prints once on
                                           stderr with a line to paste, and removes
                                           when it stops; ``acpkit-client`` and
                                           ``connect_remote`` read that file for a
                                           loopback URL themselves
``http:ssl:...`` ``--tls-client-ca FILE``  a client certificate from FILE's CAs (and a
                                           token too when ``--token-file`` is given)
``http:unix:PATH``, ``unix:PATH``          nothing: the socket is created ``0600``
``--no-token`` (loopback TCP only)         nothing: any local user or process can
                                           connect and run commands as bob's user;
                                           refused on any other interface
``http:haproxy:tcp:PORT`` (behind a load   as ``http:tcp:PORT``; each connection must
balancer speaking the PROXY protocol)      start with a PROXY protocol header (v1 or
                                           v2), whose client is the one the per-peer
                                           caps count
``tcp:PORT`` (raw NDJSON)                  raw NDJSON has no place for a token:
                                           refused unless ``--no-token`` (loopback)
                                           or ``ssl:`` with ``--tls-client-ca``
beyond loopback                            a token or a client certificate; nothing
                                           else is accepted
=========================================  ============================================

Refusals and unusable files end bob before it listens, with one line
(:class:`ListenError`).  Listening also raises the process's soft descriptor limit to
its hard limit, so that the admission caps, not ``EMFILE``, decide who is refused.
"""

from __future__ import annotations

import resource
from pathlib import Path
from typing import Any

import attrs
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from acpkit.io.admission import Admission, AdmissionLimits, AdmittedFactory
from acpkit.io.bind_policy import (
    BindAuthentication,
    check_bind,
    loopback_tcp,
    speaks_proxy_protocol,
)
from acpkit.remote.tokens import (
    TokenFileError,
    TokenSet,
    default_token_path,
    generate_token,
    read_token_file,
    write_token_file,
)

__all__ = [
    "REMOTE_PREFIX",
    "ListenError",
    "Listener",
    "forget_token",
    "hand_over_token",
    "plan_listener",
    "raise_descriptor_limit",
    "start_listening",
]

REMOTE_PREFIX = "http:"
"""``--listen http:ENDPOINT``: remote ACP (:func:`acpkit.remote.serve_remote`) on ENDPOINT."""


class ListenError(Exception):
    """A listener bob cannot open; the message is the one line it exits with."""


@attrs.define
class Listener:
    """What :func:`plan_listener` decided, for :func:`start_listening` and afterwards."""

    #: ``--listen`` as given.
    listen: str
    #: The endpoint string to listen on (the bind policy's).
    description: str
    #: The factory to listen with (admitted).
    factory: Any
    #: ``--tls-client-ca``, checked.
    client_ca: Path | None
    #: What a client must present, in words (for the startup line).
    authentication: str
    #: A token bob made for this listener, to hand over once listening.
    new_token: str | None = None
    #: Where that token goes (None: the default file of the port it listens on).
    token_path: Path | None = None
    #: The file bob wrote and removes when it stops.
    written: Path | None = attrs.field(default=None, init=False)


def _tokens(
    options: Any, remote: bool, endpoint: str
) -> tuple[TokenSet | None, str | None, Path | None]:
    """
    The tokens a remote listener accepts, a token bob made, and where it goes.  bob
    makes one for a loopback TCP listener with no other authentication; beyond
    loopback, authentication must be configured (the bind policy then refuses).
    """
    token_file = options["token-file"]
    if options["no-token"]:
        if token_file:
            raise ListenError("--no-token and --token-file: choose one")
        return None, None, None
    if not token_file:
        if not remote or options["tls-client-ca"] or not loopback_tcp(endpoint):
            return None, None, None
        made = generate_token()
        return TokenSet.of(made), made, None
    if not remote:
        raise ListenError(
            "--token-file applies only to remote ACP (--listen http:ENDPOINT): raw NDJSON"
            " carries no token"
        )
    path = Path(token_file).expanduser()
    if not path.exists():
        made = generate_token()
        return TokenSet.of(made), made, path
    try:
        return read_token_file(path), None, None
    except TokenFileError as error:
        raise ListenError(f"--token-file {token_file}: {error}") from None


def plan_listener(
    reactor: Any,
    options: Any,
    *,
    raw_factory: Any,
    remote_site: Any,
    client_ca: Path | None,
    admission_limits: AdmissionLimits | None = None,
) -> Listener:
    """
    Decide how to listen for ``options["listen"]`` (see the module docstring):
    ``raw_factory`` serves raw NDJSON; ``remote_site(tokens)`` makes the remote ACP site
    for the tokens decided (its admission limits are its own).  ``admission_limits``:
    the raw listener's caps and deadlines (None: the defaults).  :class:`ListenError`
    for a refused listener.
    """
    # twisted.internet.endpoints loads OpenSSL: only an agent that listens pays for it.
    from twisted.internet.endpoints import serverFromString

    listen = options["listen"]
    remote = listen.startswith(REMOTE_PREFIX)
    endpoint = listen[len(REMOTE_PREFIX) :] if remote else listen
    try:  # a typo is told as such, before any policy
        serverFromString(reactor, endpoint)
    except Exception as error:  # ValueError, KeyError, TypeError: whatever the parser raises
        raise ListenError(
            f"--listen {listen}: not a server endpoint string ({_one_line(error)})"
        ) from None
    tokens, made, token_path = _tokens(options, remote, endpoint)
    auth = BindAuthentication(
        token=tokens is not None,
        client_certificate=client_ca is not None,
        no_token=bool(options["no-token"]),
    )
    try:
        description = check_bind(endpoint, auth, raw=not remote)
    except ValueError as error:
        raise ListenError(f"--listen {listen}: {_one_line(error)}") from None
    from acpkit.remote.security import authentication_in_force

    proxied = speaks_proxy_protocol(description)
    if remote:
        factory = remote_site(tokens)
        factory.admission.proxied = proxied
    else:
        admission = Admission(admission_limits, clock=reactor, proxied=proxied)
        factory = AdmittedFactory(raw_factory, admission, accept_on=b"\n")
    in_force = authentication_in_force(tokens, client_ca, no_token=auth.no_token)
    return Listener(listen, description, factory, client_ca, in_force, made, token_path)


def start_listening(reactor: Any, listener: Listener) -> Deferred[Any]:
    """
    Listen now (before twistd runs the reactor); :class:`ListenError` for a bad
    endpoint string or a port that cannot be had.  The Deferred fires with the port
    (at once for TCP and unix endpoints).
    """
    from twisted.internet.endpoints import serverFromString

    listen = listener.listen
    raise_descriptor_limit()
    try:
        if listener.client_ca is None:
            endpoint = serverFromString(reactor, listener.description)
        else:
            from acpkit.io.tls_server import server_endpoint

            endpoint = server_endpoint(reactor, listener.description, client_ca=listener.client_ca)
    except Exception as error:  # ValueError, KeyError, TypeError: whatever the parser raises
        raise ListenError(
            f"--listen {listen}: not a server endpoint string ({_one_line(error)})"
        ) from None
    try:
        d: Deferred[Any] = endpoint.listen(listener.factory)
    except Exception as error:
        raise ListenError(f"--listen {listen}: cannot listen: {_one_line(error)}") from None
    outcome: list[Any] = []
    if d.called:
        d.addBoth(outcome.append)
        result = outcome[0]
        if isinstance(result, Failure):
            why = result.value if result.value is not None else result
            raise ListenError(f"--listen {listen}: cannot listen: {_one_line(why)}")
        done: Deferred[Any] = Deferred()
        done.callback(result)
        return done
    return d


def hand_over_token(listener: Listener, port: Any, say: Any) -> None:
    """
    Write the token bob made to its file (``0600``) and ``say`` once where it is, the
    token and a client line to paste.  :class:`ListenError` when it cannot be written
    (bob must not serve a token nobody can read).
    """
    token = listener.new_token
    if token is None:
        return
    address = port.getHost()
    port_number = int(getattr(address, "port", 0))
    path = listener.token_path or default_token_path(port_number)
    try:
        write_token_file(path, token)
    except OSError as error:
        raise ListenError(
            f"--listen {listener.listen}: cannot write the bearer token to {path}:"
            f" {error.strerror or error}"
        ) from None
    if listener.token_path is None:
        listener.written = path
    host = str(getattr(address, "host", "127.0.0.1"))
    scheme = "https" if listener.description.lower().startswith("ssl:") else "http"
    shown = f"[{host}]" if ":" in host else host
    url = f"{scheme}://{shown}:{port_number}/acp"
    file_option = "" if listener.token_path is None else f" --token-file {path}"
    say(
        f"remote ACP needs a bearer token; bob made one and wrote it to {path} (readable"
        f" by you only): {token}"
    )
    say(f'connect: acpkit-client ask --url {url}{file_option} "hello"')


def forget_token(listener: Listener) -> None:
    """Remove the token file bob wrote for this run (when it still holds that token)."""
    path = listener.written
    if path is None or listener.new_token is None:
        return
    try:
        if path.read_text(encoding="ascii").strip() == listener.new_token:
            path.unlink()
    except OSError:
        pass


def raise_descriptor_limit() -> None:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (as servers commonly do)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (OSError, ValueError):
        pass


def _one_line(error: object) -> str:
    return " ".join(str(error).split()) or type(error).__name__
