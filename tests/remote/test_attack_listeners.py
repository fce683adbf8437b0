"""
Attacks on a real bob (``twistd -n acp-agent --listen ...``) over loopback, as issue 22
tried them, and the checks that were already there (Origin, Host, token, client
certificates).  Each test is one attack: its docstring says what the attacker does and
what bob must answer.  Every bob runs the ``echo`` engine, whose ``run: CMD`` directive
runs CMD with bash: a turn that gets through runs a command on this machine.

A few bobs serve many tests (module fixtures: starting one costs seconds of imports);
the attacks that need a bob of their own (a descriptor limit, its token file removed
when it stops) start one.  Where a test needs another local user it runs a child as uid
``nobody`` (only when the tests run as root), in a temporary directory every user may
enter (``tmp_path`` lives under a directory only its owner may enter, which would stop
``nobody`` before the permissions under test do).
"""

from __future__ import annotations

import base64
import getpass
import http.client
import ipaddress
import json
import os
import resource
import select
import selectors
import socket
import ssl
import stat
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from acpkit.remote.security import tls_serving_problem
from tests.listening_bob import ListeningBob, start_bob
from tests.raw_acp_http import Answer, initialize_body, post, raw_exchange, run_turn
from tests.tls_certificates import Authority, Issued, make_authority

pytestmark = pytest.mark.process

#: --request-timeout of the bobs attacked with slow requests (seconds): short, so that a
#: slow-header attack is seen closed in seconds rather than the default 15.
REQUEST_TIMEOUT = 2.0
#: How long a test waits for what bob must do within REQUEST_TIMEOUT: a generous bound
#: (the machine may be loaded), still far below twisted.web's own 60 s idle timeout.
WITHIN_DEADLINE = REQUEST_TIMEOUT + 10.0
NOBODY = 65534
NO_TLS_SERVING = tls_serving_problem()
ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root to run a child as another user (nobody)"
)


# -- helpers ---------------------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    """A process's resident memory (VmRSS), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``predicate`` (every 50 ms) until true; fail after ``timeout`` s saying ``what``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def nonloopback_address() -> str | None:
    """This host's first non-loopback IPv4 address (``hostname -I``), or None."""
    try:
        words = subprocess.run(
            ["hostname", "-I"], capture_output=True, text=True, timeout=10
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    for word in words:
        try:
            address = ipaddress.ip_address(word)
        except ValueError:
            continue
        if address.version == 4 and not address.is_loopback:
            return word
    return None


#: What a child running as ``nobody`` tries: read a file, connect to a unix socket,
#: POST initialize to a loopback port without a token.  It prints what happened.
NOBODY_SCRIPT = r"""
import http.client, json, socket, sys
what, target = sys.argv[1], sys.argv[2]
try:
    if what == "read":
        with open(target) as f:
            f.read()
        print("read")
    elif what == "unix":
        s = socket.socket(socket.AF_UNIX)
        s.connect(target)
        print("connected")
    elif what == "post":
        c = http.client.HTTPConnection("127.0.0.1", int(target), timeout=30)
        body = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": 1}}
        c.request("POST", "/acp", json.dumps(body), {"Content-Type": "application/json"})
        print(c.getresponse().status)
except OSError as e:
    print(type(e).__name__)
"""


def _become_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def _interpreter_for_nobody() -> str | None:
    """A Python that uid ``nobody`` may run (the script needs only the standard library)."""
    base = getattr(sys, "_base_executable", sys.executable)
    for candidate in (sys.executable, base, "/usr/bin/python3"):
        try:
            done = subprocess.run(
                [candidate, "-c", "pass"], timeout=60, cwd="/", preexec_fn=_become_nobody
            )
        except OSError:
            continue
        if done.returncode == 0:
            return candidate
    return None


def as_nobody(what: str, target: str) -> str:
    """What ``NOBODY_SCRIPT`` says when run as uid ``nobody`` (see above)."""
    interpreter = _interpreter_for_nobody()
    if interpreter is None:
        pytest.skip("no Python interpreter that uid nobody may run")
    done = subprocess.run(
        [interpreter, "-c", NOBODY_SCRIPT, what, target],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        preexec_fn=_become_nobody,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def websocket_upgrade(port: int, headers: dict[str, str], *, rcvbuf: int = 0) -> socket.socket:
    """A socket that sent a WebSocket upgrade to /acp (its answer not read yet)."""
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        "GET /acp HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    return sock


def read_head(sock: socket.socket) -> bytes:
    """An HTTP answer's head (up to the blank line), or what came before the close."""
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    return head.partition(b"\r\n\r\n")[0]


def ping_frame(payload: bytes) -> bytes:
    """A masked WebSocket ping frame (a client's), payload at most 125 bytes."""
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return struct.pack("!BB", 0x89, 0x80 | len(payload)) + mask + masked


@attrs.frozen
class Flood:
    """How a flood ended: whether bob dropped the socket, after how many frames."""

    dropped: bool
    frames: int
    seconds: float


def flood(send: Callable[[bytes], None], batch: bytes, per_batch: int, limit: int) -> Flood:
    """
    Send ``batch`` (``per_batch`` frames) again and again without reading, until sending
    fails (bob dropped the connection), ``limit`` frames were sent, or 60 s passed.
    """
    start = time.monotonic()
    frames = 0
    while frames < limit and time.monotonic() - start < 60:
        try:
            send(batch)
        except TimeoutError:
            continue  # bob is not reading right now: try again
        except OSError:  # reset, broken pipe, TLS alert
            return Flood(True, frames, time.monotonic() - start)
        frames += per_batch
    return Flood(False, frames, time.monotonic() - start)


# -- the bobs --------------------------------------------------------------------------------


@attrs.frozen
class Certificates:
    """A CA, bob's server certificate, a client it signed, one another CA signed."""

    ca: Authority
    server: Issued
    alice: Issued
    mallory: Issued

    def context(self, client: Issued | None, *, alpn: list[str] | None = None) -> ssl.SSLContext:
        """A client context trusting the CA, presenting ``client`` (None: no certificate)."""
        context = ssl.create_default_context(cafile=str(self.ca.certificate_file))
        if client is not None:
            context.load_cert_chain(str(client.certificate), str(client.key))
        if alpn:
            context.set_alpn_protocols(alpn)
        return context

    def ssl_options(self) -> str:
        """The ``privateKey=...:certKey=...`` of bob's ``ssl:`` endpoints."""
        return f"privateKey={self.server.key}:certKey={self.server.certificate}"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    directory = tmp_path_factory.mktemp("certs")
    ca = make_authority(directory, "good")
    other = make_authority(directory, "other")
    return Certificates(
        ca, ca.issue("localhost", server=True), ca.issue("alice"), other.issue("mallory")
    )


@pytest.fixture(scope="module")
def open_dir() -> Iterator[Path]:
    """A temporary directory every local user may enter and list (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="acpkit-attack-") as name:
        path = Path(name)
        path.chmod(0o755)
        yield path


def _permissive_umask() -> None:
    os.umask(0)


def _limit_descriptors(limit: int) -> Callable[[], None]:
    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return preexec


def _token_file(path: Path, *tokens: str) -> Path:
    path.write_text("\n".join(tokens) + "\n", encoding="ascii")
    path.chmod(0o600)
    return path


#: --listen forms bob must refuse before listening, by what is wrong with them.
REFUSED = {
    "raw tcp, no --no-token": ("tcp:0",),
    "raw tcp on all interfaces": ("tcp:0:interface=0.0.0.0", "--no-token"),
    "remote ACP on all interfaces": ("http:tcp:0:interface=0.0.0.0", "--no-token"),
    "remote ACP over TLS on all interfaces": ("http:ssl:0:interface=0.0.0.0:{ssl}", "--no-token"),
}


@pytest.fixture(scope="module")
def holders() -> tuple[str, str]:
    """Two tokens, for a bob with two token holders."""
    return ("holder-one-" + os.urandom(16).hex(), "holder-two-" + os.urandom(16).hex())


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory,
    certs: Certificates,
    open_dir: Path,
    holders: tuple[str, str],
) -> Iterator[dict[str, ListeningBob]]:
    """
    Every bob this module attacks, by name, started at once (each spends seconds
    importing; started together they overlap), the REFUSED forms among them; the
    fixtures below each take theirs, failing with its stderr when it does not listen.
    All are stopped at the end of the module.
    """
    tls_token = "tls-" + os.urandom(16).hex()
    timeout = ("--request-timeout", str(REQUEST_TIMEOUT))
    plans: dict[str, tuple[tuple[str, ...], Callable[[], None] | None]] = {
        "token": (("--listen", "http:tcp:0", *timeout), None),
        "lifecycle": (("--listen", "http:tcp:0"), None),
        "raw": (("--listen", "tcp:0", "--no-token"), None),
        "two tokens": (
            ("--listen", "http:tcp:0", "--token-file", str(open_dir / "two.tokens")),
            None,
        ),
        "unix": (("--listen", f"http:unix:{open_dir / 'bob.sock'}"), _permissive_umask),
        # 512 descriptors; deadlines of 60 s: only the caps close connections there
        "capped": (
            ("--listen", "http:tcp:0", "--request-timeout", "60"),
            _limit_descriptors(512),
        ),
    }
    _token_file(open_dir / "two.tokens", *holders)
    if NO_TLS_SERVING is None:
        tls_token_file = _token_file(tmp_path_factory.mktemp("tls") / "tls.token", tls_token)
        plans["tls"] = (
            (
                *("--listen", f"http:ssl:0:{certs.ssl_options()}"),
                *("--tls-client-ca", str(certs.ca.certificate_file)),
                *("--token-file", str(tls_token_file), *timeout),
            ),
            None,
        )
    for form, (listen, *rest) in REFUSED.items():
        plans[form] = (("--listen", listen.format(ssl=certs.ssl_options()), *rest), None)
    bobs = {
        name: start_bob(
            tmp_path_factory.mktemp("bob"), *args, preexec=preexec, ready=False, timeout=120
        )
        for name, (args, preexec) in plans.items()
    }
    try:
        for bob in bobs.values():
            bob.wait_said(120)
        if "tls" in bobs:
            bobs["tls"].token = tls_token
        yield bobs
    finally:
        for bob in bobs.values():
            bob.stop()


def _listening(fleet: dict[str, ListeningBob], name: str) -> ListeningBob:
    """The fleet's bob ``name``, once it said where it listens (else fail with its stderr)."""
    if name not in fleet:
        pytest.skip(NO_TLS_SERVING or f"no {name} bob")
    bob = fleet[name]
    until(
        lambda: (
            "remote ACP authentication" in bob.stderr()
            or "raw NDJSON authentication" in bob.stderr()
            or bob.process.poll() is not None
        ),
        60,
        f"the {name} bob to say its authentication",
    )
    assert bob.process.poll() is None and "listening on" in bob.stderr(), bob.stderr()
    return bob


@pytest.fixture
def token_bob(fleet: dict[str, ListeningBob]) -> ListeningBob:
    """bob --listen http:tcp:0 (loopback, the token it makes), --request-timeout 2."""
    return _listening(fleet, "token")


@pytest.fixture
def token(token_bob: ListeningBob) -> str:
    """The token ``token_bob`` made (it printed one: the attacks below need it)."""
    assert token_bob.token is not None, token_bob.stderr()
    return token_bob.token


@pytest.fixture
def two_token_bob(
    fleet: dict[str, ListeningBob], holders: tuple[str, str]
) -> tuple[ListeningBob, tuple[str, str]]:
    """bob --listen http:tcp:0 --token-file FILE: FILE (0600, in ``open_dir``) holds two
    tokens, two holders."""
    return _listening(fleet, "two tokens"), holders


@pytest.fixture
def unix_bob(fleet: dict[str, ListeningBob], open_dir: Path) -> Path:
    """bob --listen http:unix:PATH (PATH in ``open_dir``), started with umask 000: the
    socket's mode is whatever bob sets, not what a umask would have given."""
    _listening(fleet, "unix")
    return open_dir / "bob.sock"


@pytest.fixture
def tls_bob(fleet: dict[str, ListeningBob]) -> ListeningBob:
    """bob --listen http:ssl:0:... --tls-client-ca CA --token-file FILE: both a client
    certificate from CA and the token are required."""
    return _listening(fleet, "tls")


@pytest.fixture
def capped_bob(fleet: dict[str, ListeningBob]) -> ListeningBob:
    """bob with 512 descriptors (soft and hard) and deadlines of 60 s."""
    return _listening(fleet, "capped")


# -- 1. where bob listens ------------------------------------------------------------------


@pytest.mark.parametrize("form", list(REFUSED))
def test_a_listener_without_authentication_beyond_loopback_is_refused_at_startup(
    fleet: dict[str, ListeningBob], form: str
) -> None:
    """
    Attack: start bob where anyone could reach it unauthenticated (raw NDJSON on TCP
    without --no-token, or any form on 0.0.0.0 with --no-token).  Expected: bob exits 1
    before listening, with one ``acp-agent: --listen ...: refusing ...`` line.
    """
    bob = fleet[form]
    assert bob.port is None, f"bob listened on port {bob.port}:\n{bob.stderr()}"
    assert bob.process.wait(60) == 1, bob.stderr()
    said = bob.stderr()
    lines = said.splitlines()
    assert len(lines) == 1 and lines[0].startswith("acp-agent: --listen "), said
    assert "refusing to listen" in lines[0], said


def test_raw_tcp_with_no_token_listens_on_loopback_only(fleet: dict[str, ListeningBob]) -> None:
    """
    Attack: bob --listen tcp:PORT --no-token (raw NDJSON, no interface named); connect
    from this host's non-loopback address and run ``run: id -un``.  Expected: bob
    listens on 127.0.0.1 only, so that connection is refused; over loopback a first
    NDJSON line is answered (the listener works); its log says what --no-token gives up.
    """
    bob = _listening(fleet, "raw")
    assert bob.port is not None
    assert "host='127.0.0.1'" in bob.stderr()
    assert "any local user or process can connect" in bob.stderr()
    with socket.create_connection(("127.0.0.1", bob.port), timeout=30) as sock:
        sock.sendall(json.dumps(initialize_body()).encode() + b"\n")
        answer = sock.makefile("rb").readline()
    assert json.loads(answer)["result"]["agentInfo"]["name"] == "bob"
    address = nonloopback_address()
    if address is None:
        pytest.skip("this host has no non-loopback IPv4 address")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((address, bob.port), timeout=30).close()


def test_unix_socket_is_created_owner_only(unix_bob: Path) -> None:
    """
    Attack: bob --listen http:unix:PATH started with umask 000 (the socket would be
    0777).  Expected: the socket is 0600, and its owner is served without a token.
    """
    assert stat.S_IMODE(unix_bob.stat().st_mode) == 0o600
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(30)
        sock.connect(str(unix_bob))
        body = json.dumps(initialize_body()).encode()
        sock.sendall(
            b"POST /acp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
        )
        assert read_head(sock).startswith(b"HTTP/1.1 200 ")


@ROOT_ONLY
def test_another_user_cannot_connect_to_the_unix_socket(unix_bob: Path) -> None:
    """
    Attack: as uid ``nobody``, connect to bob's unix socket (its directory open to all).
    Expected: ``PermissionError`` (the socket is 0600).
    """
    assert as_nobody("unix", str(unix_bob)) == "PermissionError"


# -- 2. the bearer token ---------------------------------------------------------------------


def _refused_401(answer: Answer) -> None:
    assert answer.status == 401, answer
    assert answer.headers["www-authenticate"] == 'Bearer realm="acp"'
    assert answer.headers.get("connection") == "close"
    assert answer.json()["error"]["code"] == -32600


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer wrong-token",
        "Bearer ",
        "Bearer",
        "Basic {basic}",
        "Basic {token}",
        "Token {token}",
        "{token}",
        "Bearer {token}x",
        "Bearer {token} x",
        "Bearer {prefix}",
        "Bearer {upper}",
        "Bearer\t{token}",
    ],
)
def test_a_request_without_the_right_bearer_token_is_401(
    token_bob: ListeningBob, token: str, authorization: str | None
) -> None:
    """
    Attack: initialize with no token, a wrong one, the token in a Basic header (as the
    password, or alone), under another scheme, with trailing garbage, truncated, in
    another case, or after a tab.  Expected: 401 with ``WWW-Authenticate: Bearer``, the
    connection closed; no connection made.
    """
    assert token_bob.port is not None
    headers = {}
    if authorization is not None:
        basic = base64.b64encode(f"bob:{token}".encode()).decode()
        headers["Authorization"] = authorization.format(
            token=token, basic=basic, prefix=token[:-1], upper=token.swapcase()
        )
    _refused_401(post(token_bob.port, initialize_body(), headers))


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "bEaReR"])
def test_the_scheme_is_case_insensitive_the_token_is_not(
    token_bob: ListeningBob, token: str, scheme: str
) -> None:
    """
    RFC 7235 §2.1 makes the authentication scheme case-insensitive: ``bearer TOKEN`` is
    accepted (200), as clients send it so; the token itself is compared exactly (its
    case swapped is 401, above).
    """
    assert token_bob.port is not None
    answer = post(token_bob.port, initialize_body(), {"Authorization": f"{scheme} {token}"})
    assert answer.status == 200, answer


@pytest.mark.parametrize("query", ["access_token={token}", "token={token}", "x=1&auth={token}"])
@pytest.mark.parametrize("with_header", [False, True])
def test_a_token_in_the_url_is_401(
    token_bob: ListeningBob, token: str, query: str, with_header: bool
) -> None:
    """
    Attack: the right token in the URL's query (``?access_token=``, ``?token=``,
    ``auth=``), alone or beside the right header.  Expected: 401 (credentials are never
    accepted in a URL, where logs and histories keep them).
    """
    assert token_bob.port is not None
    headers = {"Authorization": f"Bearer {token}"} if with_header else {}
    path = "/acp?" + query.format(token=token)
    answer = post(token_bob.port, initialize_body(), headers, path=path)
    assert answer.status == 401, answer


def test_the_right_token_runs_a_turn_and_only_it(
    token_bob: ListeningBob, token: str, tmp_path: Path
) -> None:
    """
    Attack: ``run: id -un`` over remote ACP without the token.  Expected: 401 at
    ``initialize``, nothing runs; with the token the whole turn (initialize,
    session/new, session/prompt) runs the command and ends ``end_turn``.
    """
    assert token_bob.port is not None
    with pytest.raises(AssertionError, match="initialize: 401"):
        run_turn(token_bob.port, {}, "run: id -un", cwd=str(tmp_path))
    result = run_turn(
        token_bob.port, {"Authorization": f"Bearer {token}"}, "run: id -un", cwd=str(tmp_path)
    )
    assert result.stop_reason == "end_turn"
    assert getpass.getuser() in result.tool_output


def test_the_generated_token_lives_in_an_owner_only_file_printed_once(
    fleet: dict[str, ListeningBob],
) -> None:
    """
    Attack: read bob's token where it is kept, or find it in its log.  Expected: bob
    (http:tcp:0, no --token-file) writes a new token to
    $XDG_RUNTIME_DIR/acpkit/remote-PORT.token, mode 0600 in a 0700 directory, prints it
    once with a client line that does not carry it; tokens sent in URLs (right or not)
    and wrong tokens never reach its stderr; the file is removed when bob stops.
    """
    bob = _listening(fleet, "lifecycle")
    try:
        assert bob.port is not None and bob.token is not None, bob.stderr()
        expected = bob.runtime_dir / "acpkit" / f"remote-{bob.port}.token"
        assert bob.token_path == expected
        assert stat.S_IMODE(expected.stat().st_mode) == 0o600
        assert stat.S_IMODE(expected.parent.stat().st_mode) == 0o700
        assert expected.read_text(encoding="ascii").strip() == bob.token
        connect = [line for line in bob.lines if "connect: acpkit-client ask" in line]
        assert connect == [f'acp-agent: connect: acpkit-client ask --url {bob.url} "hello"\n'], (
            bob.stderr()
        )
        in_url = "url-secret-" + os.urandom(8).hex()
        wrong = "wrong-secret-" + os.urandom(8).hex()
        for query in (f"access_token={bob.token}", f"token={in_url}"):
            assert post(bob.port, initialize_body(), path=f"/acp?{query}").status == 401
        assert post(bob.port, initialize_body(), {"Authorization": f"Bearer {wrong}"}).status
        assert post(bob.port, initialize_body(), bob.headers()).status == 200
    finally:
        bob.stop()
    said = bob.stderr()
    assert said.count(bob.token) == 1, said
    assert in_url not in said and wrong not in said
    assert not expected.exists()


def test_a_second_token_holder_cannot_use_the_first_ones_connection(
    two_token_bob: tuple[ListeningBob, tuple[str, str]], tmp_path: Path
) -> None:
    """
    Attack: bob accepts two tokens (two holders); holder 1 initializes; holder 2 sends
    requests naming holder 1's ``Acp-Connection-Id`` (session/new, its event stream,
    DELETE).  Expected: 404 each, as for an unknown connection; holder 1 is still served
    (202).
    """
    bob, (one, two) = two_token_bob
    assert bob.port is not None
    opened = post(bob.port, initialize_body(), {"Authorization": f"Bearer {one}"})
    assert opened.status == 200, opened
    cid = opened.headers["acp-connection-id"]
    new = {"jsonrpc": "2.0", "id": 1, "method": "session/new"}
    new["params"] = {"cwd": str(tmp_path), "mcpServers": []}
    as_two = {"Authorization": f"Bearer {two}", "Acp-Connection-Id": cid}
    assert post(bob.port, new, as_two).status == 404
    stream = {**as_two, "Accept": "text/event-stream"}
    assert post(bob.port, b"", stream, method="GET").status == 404
    assert post(bob.port, b"", as_two, method="DELETE").status == 404
    as_one = {"Authorization": f"Bearer {one}", "Acp-Connection-Id": cid}
    assert post(bob.port, new, as_one).status == 202
    assert post(bob.port, b"", as_one, method="DELETE").status == 202


@ROOT_ONLY
def test_another_user_can_neither_read_the_token_file_nor_pass_without_it(
    two_token_bob: tuple[ListeningBob, tuple[str, str]], open_dir: Path
) -> None:
    """
    Attack: as uid ``nobody``, read bob's token file (its directory open to all; a
    0644 file beside it is readable), then initialize without a token.  Expected:
    ``PermissionError`` on the token file, 401 over TCP.
    """
    bob, _tokens = two_token_bob
    control = open_dir / "readable.txt"
    control.write_text("anyone may read this\n", encoding="ascii")
    control.chmod(0o644)
    assert as_nobody("read", str(control)) == "read"
    assert as_nobody("read", str(open_dir / "two.tokens")) == "PermissionError"
    assert as_nobody("post", str(bob.port)) == "401"


# -- 3, 4. filling the server ----------------------------------------------------------------


def test_unauthenticated_initializes_do_not_fill_max_connections(
    token_bob: ListeningBob, token: str
) -> None:
    """
    Attack: 120 ``initialize`` POSTs without a token (max_connections is 100).
    Expected: each is 401 and opens no connection; an authenticated ``initialize`` is
    still 200 afterwards.
    """
    assert token_bob.port is not None
    statuses = {post(token_bob.port, initialize_body()).status for _ in range(120)}
    assert statuses == {401}
    answer = post(token_bob.port, initialize_body(), {"Authorization": f"Bearer {token}"})
    assert answer.status == 200, answer


def test_a_slow_request_head_is_closed_at_the_deadline(token_bob: ListeningBob) -> None:
    """
    Attack: connect and send a request head one byte every 0.25 s (each byte used to
    reset twisted.web's 60 s idle timeout).  Expected: bob closes the connection once
    --request-timeout (2 s) passed, long before the head is complete.
    """
    assert token_bob.port is not None
    head = b"POST /acp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 200 + b"\r\n"
    with socket.create_connection(("127.0.0.1", token_bob.port), timeout=30) as sock:
        start = time.monotonic()
        sent = 0
        closed = False
        while sent < len(head) and time.monotonic() - start < WITHIN_DEADLINE:
            try:
                sock.sendall(head[sent : sent + 1])
            except OSError:
                closed = True
                break
            sent += 1
            if closed_within(sock, 0.25):
                closed = True
                break
        elapsed = time.monotonic() - start
    assert closed, f"still open after {elapsed:.1f} s and {sent} bytes"
    assert sent < len(head)
    assert elapsed >= REQUEST_TIMEOUT * 0.9


def closed_within(sock: socket.socket, timeout: float) -> bool:
    """Whether the other side closes ``sock`` (end of stream or reset) within ``timeout`` s."""
    readable, _, _ = select.select([sock], [], [], timeout)
    if not readable:
        return False
    try:
        return sock.recv(4096) == b""
    except OSError:  # reset
        return True


def test_an_idle_connection_is_closed_at_the_deadline(token_bob: ListeningBob) -> None:
    """
    Attack: connect and send nothing.  Expected: closed after --request-timeout (2 s).
    """
    assert token_bob.port is not None
    start = time.monotonic()
    data, closed = raw_exchange(token_bob.port, b"", timeout=WITHIN_DEADLINE)
    assert closed and data == b""
    assert REQUEST_TIMEOUT * 0.9 <= time.monotonic() - start


def test_an_authenticated_client_trickling_its_next_request_is_closed(
    token_bob: ListeningBob, token: str
) -> None:
    """
    Attack: a token holder completes one request on a keep-alive connection, then sends
    the next request's head one byte every 0.25 s.  Expected: closed at the head
    deadline (--request-timeout), the first answer having been served.
    """
    assert token_bob.port is not None
    conn = http.client.HTTPConnection("127.0.0.1", token_bob.port, timeout=30)
    body = json.dumps(initialize_body()).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    conn.request("POST", "/acp", body, headers)
    first = conn.getresponse()
    first.read()
    assert first.status == 200
    sock = conn.sock
    assert sock is not None
    start = time.monotonic()
    closed = False
    for byte in b"POST /acp HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X: " + b"b" * 200:
        if time.monotonic() - start > WITHIN_DEADLINE:
            break
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            closed = True
            break
        if closed_within(sock, 0.25):
            closed = True
            break
    conn.close()
    assert closed, f"still open after {time.monotonic() - start:.1f} s"


def test_an_unauthenticated_huge_post_is_refused_at_its_head(token_bob: ListeningBob) -> None:
    """
    Attack: a POST announcing ``Content-Length: 100000000`` (and ``Expect:
    100-continue``) without a token, its body never sent.  Expected: 401 at once
    (no ``100 Continue``), and the connection closed: the body is never waited for nor
    read.
    """
    assert token_bob.port is not None
    head = (
        b"POST /acp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100000000\r\nExpect: 100-continue\r\n\r\n"
    )
    data, closed = raw_exchange(token_bob.port, head, timeout=WITHIN_DEADLINE)
    assert data.startswith(b"HTTP/1.1 401 "), data  # answered, not timed out
    assert b"100 Continue" not in data
    assert closed


def _hold(port: int, count: int, source: str) -> list[socket.socket]:
    """
    ``count`` connections from ``source``, each having sent the first byte of a request
    head and nothing more.  Connected one after the other: a burst would overflow the
    listen backlog, and the kernel would keep the rest half-open without bob ever
    seeing them.
    """
    held = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))
        sock.sendall(b"P")
        sock.setblocking(False)
        held.append(sock)
    return held


def _closed_by_peer(held: list[socket.socket]) -> int:
    """
    How many of ``held`` the other side closed (reset or end of stream) since the last
    call: those are closed here too (and skipped next time).
    """
    closed = 0
    with selectors.DefaultSelector() as selector:
        for sock in held:
            if sock.fileno() != -1:
                selector.register(sock, selectors.EVENT_READ)
        for key, _ in selector.select(0):
            ready = key.fileobj
            assert isinstance(ready, socket.socket)
            try:
                gone = ready.recv(1) == b""
            except BlockingIOError:
                gone = False
            except OSError:  # reset
                gone = True
            if gone:
                selector.unregister(ready)
                ready.close()
                closed += 1
    return closed


def _evictions(held: list[socket.socket], expected: int) -> Callable[[], bool]:
    """A predicate: at least ``expected`` of ``held`` were closed by bob so far."""
    closed = [0]

    def enough() -> bool:
        closed[0] += _closed_by_peer(held)
        return closed[0] >= expected

    return enough


def test_the_per_peer_cap_evicts_a_peers_oldest_idle_connections(
    capped_bob: ListeningBob,
) -> None:
    """
    Attack: 300 idle connections from one address (127.0.0.2) to a bob with 512
    descriptors (per-peer cap 256).  Expected: bob closes at least 44 of them (the
    oldest) at once, never holding more than 256; a legitimate client from the same
    address, with the token, is then served (200).
    """
    assert capped_bob.port is not None and capped_bob.token is not None
    held = _hold(capped_bob.port, 300, "127.0.0.2")
    try:
        until(_evictions(held, 300 - 256), 15, "bob to evict the peer's oldest connections")
        answer = post(capped_bob.port, initialize_body(), capped_bob.headers(), source="127.0.0.2")
        assert answer.status == 200, answer
    finally:
        for sock in held:
            sock.close()


def test_the_pending_cap_evicts_for_a_legitimate_client(capped_bob: ListeningBob) -> None:
    """
    Attack: 150 idle connections from each of 127.0.0.3 and 127.0.0.4 (300 pending,
    the pending pool holds 256).  Expected: bob closes at least 44 of them at once; a
    legitimate client from 127.0.0.1 with the token is served (200).
    """
    assert capped_bob.port is not None and capped_bob.token is not None
    held = _hold(capped_bob.port, 150, "127.0.0.3") + _hold(capped_bob.port, 150, "127.0.0.4")
    try:
        until(_evictions(held, 300 - 256), 15, "bob to evict pending connections")
        answer = post(capped_bob.port, initialize_body(), capped_bob.headers())
        assert answer.status == 200, answer
    finally:
        for sock in held:
            sock.close()


# -- 6. WebSocket and HTTP/2 floods ----------------------------------------------------------


def test_a_websocket_upgrade_without_the_token_is_401(token_bob: ListeningBob) -> None:
    """
    Attack: a WebSocket upgrade on /acp without a token (and one with a wrong token).
    Expected: 401 before any WebSocket handling; no upgrade.
    """
    pytest.importorskip("autobahn")
    assert token_bob.port is not None
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        with websocket_upgrade(token_bob.port, headers) as sock:
            assert read_head(sock).startswith(b"HTTP/1.1 401 ")


def test_a_websocket_ping_flood_without_reading_is_dropped(
    token_bob: ListeningBob, token: str
) -> None:
    """
    Attack: a token holder opens a WebSocket (reading buffer 4 KiB), then sends pings
    (125-byte payloads) without ever reading the pongs.  Expected: once bob's writes
    back up, more than 64 further pings drop the socket; bob's memory grows by less
    than 64 MiB meanwhile (the pongs owed are bounded).
    """
    pytest.importorskip("autobahn")
    assert token_bob.port is not None
    pid = token_bob.process.pid
    sock = websocket_upgrade(token_bob.port, {"Authorization": f"Bearer {token}"}, rcvbuf=4096)
    try:
        assert read_head(sock).startswith(b"HTTP/1.1 101 ")
        before = rss_kib(pid)
        sock.settimeout(1)
        batch = b"".join(ping_frame(os.urandom(125)) for _ in range(500))
        result = flood(sock.sendall, batch, 500, 1_000_000)
        grown = rss_kib(pid) - before
    finally:
        sock.close()
    print(f"\nWebSocket ping flood: {result}, bob grew by {grown} KiB")
    assert result.dropped, f"not dropped after {result.frames} pings in {result.seconds:.0f} s"
    assert grown < 64 * 1024, f"bob grew by {grown} KiB"
    until(
        lambda: "pings while not reading what it is sent: dropped" in token_bob.stderr(),
        30,
        "bob to say why it dropped the socket",
    )
    assert token_bob.process.poll() is None


def test_an_http2_ping_flood_without_reading_is_closed(
    tls_bob: ListeningBob, certs: Certificates
) -> None:
    """
    Attack: over TLS with a valid client certificate and token, an HTTP/2 connection
    makes one request, then sends PING frames without ever reading the ACKs.
    Expected: the connection is closed by twisted.web's bound on buffered control
    frames; bob's memory grows by less than 64 MiB.
    """
    h2_connection = pytest.importorskip("h2.connection")
    h2_config = pytest.importorskip("h2.config")
    assert tls_bob.port is not None
    pid = tls_bob.process.pid
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.settimeout(30)
    raw.connect(("127.0.0.1", tls_bob.port))
    sock = certs.context(certs.alice, alpn=["h2"]).wrap_socket(raw, server_hostname="localhost")
    try:
        assert sock.selected_alpn_protocol() == "h2"
        conn = h2_connection.H2Connection(h2_config.H2Configuration(client_side=True))
        conn.initiate_connection()
        fields = [
            (":method", "GET"),
            (":path", "/acp"),
            (":scheme", "https"),
            (":authority", "localhost"),
            ("authorization", f"Bearer {tls_bob.token}"),
            ("accept", "text/event-stream"),
        ]
        conn.send_headers(1, fields, end_stream=True)
        sock.sendall(conn.data_to_send())
        before = rss_kib(pid)
        for _ in range(1000):
            conn.ping(os.urandom(8))
        batch = conn.data_to_send()
        sock.settimeout(1)
        result = flood(sock.sendall, batch, 1000, 5_000_000)
        grown = rss_kib(pid) - before
    finally:
        sock.close()
    print(f"\nHTTP/2 PING flood: {result}, bob grew by {grown} KiB")
    assert result.dropped, f"not closed after {result.frames} pings in {result.seconds:.0f} s"
    assert grown < 64 * 1024, f"bob grew by {grown} KiB"
    until(
        lambda: "Maximum number of control frame bytes buffered" in tls_bob.stderr(),
        30,
        "twisted.web to say why it closed the connection",
    )
    assert tls_bob.process.poll() is None


# -- 7. Origin and Host ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("origin", "host"),
    [
        ("https://evil.example", None),
        ("null", None),
        ("http://127.0.0.1:{port}", "evil.example:{port}"),
        ("http://localhost:{port}", "evil.example"),
    ],
)
def test_a_foreign_origin_or_a_rebound_host_is_403_even_with_the_token(
    token_bob: ListeningBob, token: str, origin: str, host: str | None
) -> None:
    """
    Attack: a browser page drives bob with the token: from a foreign Origin, or by DNS
    rebinding (a loopback Origin, but the Host the browser resolved, evil.example).
    Expected: 403, whatever the token.
    """
    assert token_bob.port is not None
    headers = {"Authorization": f"Bearer {token}", "Origin": origin.format(port=token_bob.port)}
    if host is not None:
        headers["Host"] = host.format(port=token_bob.port)
    answer = post(token_bob.port, initialize_body(), headers)
    assert answer.status == 403, answer


def test_a_loopback_page_with_the_token_is_served(token_bob: ListeningBob, token: str) -> None:
    """A page served from this machine (loopback Origin and Host) with the token: 200."""
    assert token_bob.port is not None
    headers = {
        "Authorization": f"Bearer {token}",
        "Origin": f"http://localhost:{token_bob.port}",
    }
    assert post(token_bob.port, initialize_body(), headers).status == 200


# -- 8. TLS client certificates ----------------------------------------------------------------


@pytest.mark.parametrize("client", ["none", "another CA's"])
def test_a_tls_client_without_a_certificate_from_the_ca_is_refused_at_the_handshake(
    tls_bob: ListeningBob, certs: Certificates, client: str
) -> None:
    """
    Attack: connect to bob --tls-client-ca CA without a client certificate, or with one
    another CA signed, sending the right token.  Expected: the TLS handshake fails
    (TLS 1.3: the alert arrives on the first read); no HTTP answer.
    """
    assert tls_bob.port is not None
    presented = None if client == "none" else certs.mallory
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        post(
            tls_bob.port,
            initialize_body(),
            {"Authorization": f"Bearer {tls_bob.token}"},
            host="localhost",
            tls=certs.context(presented),
        )


def test_a_tls_client_certificate_without_the_token_is_401(
    tls_bob: ListeningBob, certs: Certificates
) -> None:
    """
    Attack: a valid client certificate but no token (both are configured).  Expected:
    401; with both, 200.
    """
    assert tls_bob.port is not None
    context = certs.context(certs.alice)
    answer = post(tls_bob.port, initialize_body(), host="localhost", tls=context)
    assert answer.status == 401, answer
    headers = {"Authorization": f"Bearer {tls_bob.token}"}
    answer = post(tls_bob.port, initialize_body(), headers, host="localhost", tls=context)
    assert answer.status == 200, answer


# -- conformance with the token ----------------------------------------------------------------


def _conformance(url: str, token: str, *extra: str) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "acpkit.conformance",
            *("--url", url, "--header", f"Authorization: Bearer {token}"),
            *("--profile", "smoke", "--timeout", "10", "--report", "json", *extra),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]
    assert token not in done.stdout and token not in done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _must_failures(report: dict[str, Any]) -> list[str]:
    return [
        f"{r['id']}: {r.get('findings')}"
        for r in report["rules"]
        if r["status"] == "fail" and r["level"] == "MUST"
    ]


@pytest.mark.parametrize("scheme", ["http", "ws"])
def test_conformance_passes_with_the_token(
    token_bob: ListeningBob, token: str, scheme: str
) -> None:
    """``acpkit-conformance --url`` with ``--header "Authorization: Bearer ..."`` against
    bob over Streamable HTTP and WebSocket: no MUST rule fails."""
    report = _conformance(token_bob.url.replace("http", scheme, 1), token)
    assert _must_failures(report) == []
    assert sum(r["status"] == "pass" for r in report["rules"]) > 20


def test_conformance_passes_over_https_http2_with_certificate_and_token(
    tls_bob: ListeningBob, certs: Certificates
) -> None:
    """``acpkit-conformance --url https://...`` (HTTP/2 by ALPN) with --tls-trust-root,
    a client certificate and the token against bob requiring both: no MUST rule fails,
    and HTTP-011 (HTTP/2) passes."""
    assert tls_bob.port is not None and tls_bob.token is not None
    report = _conformance(
        f"https://localhost:{tls_bob.port}/acp",
        tls_bob.token,
        *("--tls-trust-root", str(certs.ca.certificate_file)),
        *("--tls-certificate", str(certs.alice.certificate)),
        *("--tls-private-key", str(certs.alice.key)),
    )
    assert _must_failures(report) == []
    statuses = {r["id"]: r["status"] for r in report["rules"]}
    assert statuses.get("HTTP-011") == "pass", statuses
