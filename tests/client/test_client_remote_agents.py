"""
Remote agents in the reference client: ``url`` (and ``headers``) entries in the agents
file, checked like the rest of the file, and ``acpkit-client ask`` talking to one exactly
as to a spawned agent (the official Python SDK's Streamable HTTP server, in a subprocess).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase
from twisted.web.server import Site

from acpkit.connection import Client
from acpkit.remote.http_client import RemoteConnectionLost
from acpkit_client import cli
from acpkit_client.agents import AgentRun, AgentStartError, AgentState
from acpkit_client.config import AgentsFileError, parse_agents_text
from acpkit_client.status import agent_lines
from tests.helpers import refused_port
from tests.remote.test_remote_http_client import FakeAcpServer, scripted_agent, start_sdk_server

ROOT = Path(__file__).parent.parent.parent
FILE = "/home/u/.config/acpkit/acp.toml"


def refused(text: str) -> str:
    """The reason the agents file ``text`` is refused (its message names the file)."""
    with pytest.raises(AgentsFileError) as caught:
        parse_agents_text(FILE, text)
    message = str(caught.value)
    assert message.startswith(f"reading {FILE}: ")
    return message.removeprefix(f"reading {FILE}: ")


def test_url_entry_loads_with_headers() -> None:
    """A url entry has its url, headers and cwd, no command; it shows as its URL."""
    (entry,) = parse_agents_text(
        FILE,
        '[[agent]]\nname = "far"\nurl = "wss://agents.example/acp"\ncwd = "sub"\n'
        '[agent.headers]\nAuthorization = "Bearer t0ken"\n',
    )
    assert entry.url == "wss://agents.example/acp"
    assert dict(entry.headers) == {"Authorization": "Bearer t0ken"}
    assert entry.cwd == "sub"
    assert entry.command == ""
    assert entry.command_line() == "wss://agents.example/acp"
    assert "t0ken" not in repr(entry)


def test_http2_policy_of_an_http_entry() -> None:
    """An http(s) entry's ``http2`` is ``"auto"`` unless the file says otherwise; the
    value reaches ``connect_http`` (``prior-knowledge``: cleartext HTTP/2)."""
    default, chosen = parse_agents_text(
        FILE,
        '[[agent]]\nname = "a"\nurl = "https://h/acp"\n'
        '[[agent]]\nname = "b"\nurl = "http://h/acp"\nhttp2 = "prior-knowledge"\n',
    )
    assert default.http2 == "auto"
    assert chosen.http2 == "prior-knowledge"


def test_status_shows_the_url_never_the_headers() -> None:
    """Agent status names the URL and not the token."""
    (entry,) = parse_agents_text(
        FILE,
        '[[agent]]\nname = "far"\nurl = "http://127.0.0.1:9/acp"\nheaders = { X-Key = "t0ken" }\n',
    )
    lines = "\n".join(agent_lines(AgentRun(entry, "/tmp")))
    assert "url: http://127.0.0.1:9/acp" in lines
    assert "t0ken" not in lines


@pytest.mark.parametrize(
    ("block", "reason"),
    [
        ('command = "x"\nurl = "ws://h/acp"', 'agent "far": give command or url, not both'),
        (
            'url = "ftp://h/acp"',
            'agent "far": url: the scheme must be ws://, wss://, http:// or https:// (got ftp://)',
        ),
        (
            'url = "h:8765"',
            'agent "far": url: the scheme must be ws://, wss://, http:// or https:// (got h://)',
        ),
        ('url = "http:///acp"', 'agent "far": url: the URL names no host'),
        (
            'url = "ws://me:pw@h/acp"',
            'agent "far": url: user info (user:password@) is refused in a URL: '
            "give credentials as headers",
        ),
        ("url = 3", 'agent "far": url must be a string'),
        ('headers = { A = "b" }', 'agent "far": headers needs a url'),
        ('url = "ws://h/acp"\nheaders = "x"', 'agent "far": headers must be a table of strings'),
        ('url = "ws://h/acp"\nheaders = { A = 1 }', 'agent "far": headers.A must be a string'),
        (
            'url = "ws://h/acp"\nheaders = { "A B" = "x" }',
            'agent "far": headers.A B is not an HTTP header name',
        ),
        (
            'url = "ws://h/acp"\nargs = ["x"]',
            'agent "far": args is for a command; an agent with a url has none',
        ),
        (
            'url = "ws://h/acp"\nenv = { A = "b" }',
            'agent "far": env is for a command; an agent with a url has none',
        ),
        ('url = "ws://h/acp"\ncwd = 1', 'agent "far": cwd must be a string'),
        ('http2 = "never"', 'agent "far": http2 needs a url'),
        (
            'url = "https://h/acp"\nhttp2 = "yes"',
            "agent \"far\": http2 must be one of 'auto', 'prior-knowledge', 'never'",
        ),
        (
            'url = "https://h/acp"\nhttp2 = true',
            "agent \"far\": http2 must be one of 'auto', 'prior-knowledge', 'never'",
        ),
        (
            'url = "wss://h/acp"\nhttp2 = "never"',
            'agent "far": http2 is for http:// and https:// urls',
        ),
    ],
)
def test_bad_url_entries_are_refused_naming_file_and_key(block: str, reason: str) -> None:
    """Each mistake in a url entry refuses the file with a message naming the key."""
    assert refused(f'[[agent]]\nname = "far"\n{block}\n') == reason


def test_a_header_value_with_a_line_break_is_refused_without_showing_it() -> None:
    """A header value that would split the request is refused; the value (maybe a token)
    is not in the message."""
    reason = refused('[[agent]]\nname = "far"\nurl = "ws://h/acp"\nheaders = { A = "t0k\\nen" }\n')
    assert reason.startswith('agent "far": headers.A holds a line break')
    assert "t0k" not in reason


def test_the_shown_url_has_no_query() -> None:
    """A URL's query and fragment (which may hold a secret) are not shown."""
    (entry,) = parse_agents_text(FILE, '[[agent]]\nname = "far"\nurl = "https://h/acp?k=v#f"\n')
    assert entry.command_line() == "https://h/acp"


class UnreachableTests(TestCase):
    """A remote agent nobody answers: AgentStartError saying so (no process involved)."""

    timeout = 30

    async def test_http_agent_unreachable(self) -> None:
        """Over HTTP the failure comes with initialize: the URL and the reason."""
        port = refused_port(self.addCleanup)
        (entry,) = parse_agents_text(
            FILE, f'[[agent]]\nname = "far"\nurl = "http://127.0.0.1:{port}/acp"\n'
        )
        run = AgentRun(entry, "/tmp")
        await run.connect(reactor, Client())
        with self.assertRaises(AgentStartError) as caught:
            await run.handshake()
        self.assertIn(
            f"cannot reach the ACP server at http://127.0.0.1:{port}/acp", str(caught.exception)
        )
        self.assertEqual(run.state, AgentState.FAILED)

    async def test_ws_agent_unreachable(self) -> None:
        """Over WebSocket connecting fails: 'cannot connect to <url>: <why>', said once."""
        port = refused_port(self.addCleanup)
        (entry,) = parse_agents_text(
            FILE, f'[[agent]]\nname = "far"\nurl = "ws://127.0.0.1:{port}/acp"\n'
        )
        run = AgentRun(entry, "/tmp")
        with self.assertRaises(AgentStartError) as caught:
            await run.connect(reactor, Client())
        message = str(caught.exception)
        self.assertIn(f"cannot connect to ws://127.0.0.1:{port}/acp: ", message)
        self.assertNotIn("could not connect", message)
        self.assertEqual(message.count(f"127.0.0.1:{port}"), 1, message)
        self.assertEqual(run.problems, [message])


class LifetimeTests(TestCase):
    """A url agent's run against a scripted loopback server: loss and stop."""

    timeout = 30

    async def setUp(self) -> None:  # type: ignore[override]
        self.server = FakeAcpServer()
        self.server.answer = scripted_agent
        port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(Site(self.server))
        self.addCleanup(port.stopListening)
        url = f"http://127.0.0.1:{port.getHost().port}/acp?key=hidden"
        (entry,) = parse_agents_text(
            FILE, f'[[agent]]\nname = "far"\nurl = "{url}"\nheaders = {{ X-Key = "t0ken" }}\n'
        )
        self.agent = AgentRun(entry, "/tmp")
        await self.agent.connect(reactor, Client())
        self.assertEqual(await self.agent.handshake(), "s1")
        self.assertEqual(self.agent.state, AgentState.READY)

    async def test_a_lost_connection_is_reported_like_an_exit(self) -> None:
        """The stream dropping makes the run EXITED with the reason; the URL shown has no
        query and no header appears."""
        assert self.server.stream is not None and self.agent.connection is not None
        closed = self.agent.connection.closed
        self.server.stream.channel.transport.abortConnection()  # type: ignore[union-attr]
        with self.assertRaises(RemoteConnectionLost):
            await closed
        self.assertEqual(self.agent.state, AgentState.EXITED)
        (problem,) = self.agent.problems
        self.assertTrue(
            problem.startswith(f"the connection to {self.agent.entry.command_line()} was lost: ")
        )
        self.assertIn("SSE stream", problem)
        self.assertNotIn("hidden", problem)
        self.assertNotIn("t0ken", problem)

    async def test_stop_deletes_the_connection(self) -> None:
        """Closing the window DELETEs the connection and waits for its end; STOPPED, no
        problem recorded."""
        await self.agent.stop()
        self.assertTrue(self.server.deleted.called)
        self.assertEqual(self.agent.state, AgentState.STOPPED)
        self.assertEqual(self.agent.problems, [])


def test_an_entry_without_command_or_url_keeps_the_seed_message() -> None:
    """Neither command nor url: the seed's message."""
    assert refused('[[agent]]\nname = "far"\n') == 'agent "far" has no command'


# -- ask against a remote agent ---------------------------------------------------------------


class _Ask(ProcessProtocol):
    """Collects ask's output; sends SIGTERM once ``signal_after`` appears on stdout."""

    def __init__(self, signal_after: bytes | None = None) -> None:
        self.out = b""
        self.err = b""
        self.signal_after = signal_after
        self.ended: Deferred[int | None] = Deferred()

    def outReceived(self, data: bytes) -> None:
        self.out += data
        if self.signal_after is not None and self.signal_after in self.out:
            self.signal_after = None
            assert self.transport is not None
            self.transport.signalProcess(signal.SIGTERM)

    def errReceived(self, data: bytes) -> None:
        self.err += data

    def processEnded(self, reason: Failure) -> None:
        self.ended.callback(getattr(reason.value, "exitCode", None))


@pytest.mark.process
class AskRemoteTests(TestCase):
    """``acpkit-client ask`` with a ``url`` agent: the SDK's HTTP server."""

    timeout = 90

    def setUp(self) -> None:
        self.project = Path(self.mktemp()).resolve()
        (self.project / ".acpkit").mkdir(parents=True)

    async def ask(self, url: str, *argv: str, signal_after: bytes | None = None) -> _Ask:
        (self.project / ".acpkit" / "acp.toml").write_text(
            f'[[agent]]\nname = "remote"\nurl = "{url}"\n'
            '[agent.headers]\nAuthorization = "Bearer never-printed-t0ken"\n',
            encoding="utf-8",
        )
        (self.project / "note.txt").write_text("hello", encoding="utf-8")
        env = dict(os.environ, PYTHONPATH=str(ROOT), ACPKIT_DIR=str(self.project / "user"))
        proto = _Ask(signal_after)
        reactor.spawnProcess(
            proto,
            sys.executable,
            [sys.executable, "-m", "acpkit_client", "-v", "ask", "--agent", "remote", *argv],
            env=env,
            path=str(self.project),
        )
        await proto.ended
        self.assertNotIn(b"Traceback", proto.err)
        self.assertNotIn(b"t0ken", proto.err + proto.out)
        return proto

    async def test_ask_streams_allows_and_serves_fs_over_http(self) -> None:
        """ask against the SDK's HTTP server: the streamed answer on stdout, the permission
        allowed (--allow), the file read and written through the client's fs; exit 0."""
        url = await start_sdk_server(self)
        ended = await self.ask(url, "--allow", str(self.project / "note.txt"))
        self.assertEqual(ended.ended.result, 0, ended.err.decode())
        self.assertIn(b"one two three", ended.out)
        self.assertEqual((self.project / "note.txt.out").read_text(), "HELLOallow")

    async def test_sigterm_cancels_the_remote_turn(self) -> None:
        """SIGTERM during a remote turn sends session/cancel; the agent's cancelled answer
        arrives over HTTP and ask exits 143."""
        url = await start_sdk_server(self)
        ended = await self.ask(url, "wait", signal_after=b"waiting")
        self.assertEqual(ended.ended.result, cli.EXIT_TERMINATED, ended.err.decode())
        self.assertIn(b"the turn ended: cancelled", ended.err)


# -- the tls table of a url agent ----------------------------------------------------------------


def _tls_files(directory: Path) -> dict[str, Path]:
    from tests.tls_certificates import make_authority

    ca = make_authority(directory)
    alice = ca.issue("alice")
    return {"trust_root": ca.certificate_file, "certificate": alice.certificate, "key": alice.key}


def test_tls_paths_are_relative_to_the_agents_file(tmp_path: Path) -> None:
    """tls.trust_root / certificate / private_key relative to the file's directory become
    absolute paths of the entry's ClientTLS; absent tls: None."""
    files = _tls_files(tmp_path / "certs")
    agents_file = str(tmp_path / "acp.toml")
    far, near = parse_agents_text(
        agents_file,
        '[[agent]]\nname = "far"\nurl = "wss://h/acp"\n[agent.tls]\n'
        'trust_root = "certs/test-ca.pem"\ncertificate = "certs/test-alice-cert.pem"\n'
        'private_key = "certs/test-alice-key.pem"\n'
        '[[agent]]\nname = "near"\nurl = "ws://h/acp"\n',
    )
    assert far.tls is not None
    assert far.tls.trust_root == files["trust_root"]
    assert far.tls.certificate == files["certificate"]
    assert far.tls.private_key == files["key"]
    assert near.tls is None


def test_tls_paths_expand_the_home_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tls path starting with ~ is under $HOME."""
    files = _tls_files(tmp_path / "certs")
    monkeypatch.setenv("HOME", str(tmp_path))
    (entry,) = parse_agents_text(
        FILE,
        '[[agent]]\nname = "far"\nurl = "wss://h/acp"\n'
        'tls = { trust_root = "~/certs/test-ca.pem" }\n',
    )
    assert entry.tls is not None and entry.tls.trust_root == files["trust_root"]


@pytest.mark.parametrize(
    ("tls", "reason"),
    [
        ('"x"', 'agent "far": tls must be a table of file paths'),
        (
            '{ cafile = "a.pem" }',
            'agent "far": tls.cafile is not a key (trust_root, certificate, private_key)',
        ),
        ("{ trust_root = 3 }", 'agent "far": tls.trust_root must be a file path (a string)'),
        ('{ private_key = "k.pem" }', 'agent "far": tls.private_key needs tls.certificate'),
        (
            '{ trust_root = "nope.pem" }',
            'agent "far": tls.trust_root: cannot read the TLS trust root {dir}/nope.pem:'
            " No such file or directory",
        ),
        (
            '{ trust_root = "junk.txt" }',
            'agent "far": tls.trust_root: the TLS trust root {dir}/junk.txt holds no PEM'
            " certificate",
        ),
        (
            '{ certificate = "certs/test-alice-cert.pem" }',
            'agent "far": tls.certificate: the TLS client certificate'
            " {dir}/certs/test-alice-cert.pem holds no PEM private key: give the key in the"
            " same file or as the private key setting",
        ),
        (
            '{ certificate = "certs/test-alice-cert.pem", private_key = "junk.txt" }',
            'agent "far": tls.private_key: the TLS private key {dir}/junk.txt holds no PEM'
            " private key",
        ),
    ],
)
def test_bad_tls_tables_are_refused_naming_file_and_key(
    tmp_path: Path, tls: str, reason: str
) -> None:
    """Each mistake in a tls table refuses the agents file, naming the key (and the PEM
    file at fault)."""
    _tls_files(tmp_path / "certs")
    (tmp_path / "junk.txt").write_text("junk")
    agents_file = str(tmp_path / "acp.toml")
    with pytest.raises(AgentsFileError) as caught:
        parse_agents_text(
            agents_file, f'[[agent]]\nname = "far"\nurl = "wss://h/acp"\ntls = {tls}\n'
        )
    assert str(caught.value) == f"reading {agents_file}: " + reason.format(dir=tmp_path)


def test_tls_without_url_is_refused() -> None:
    """A tls table on an agent without url: refused like headers."""
    assert refused('[[agent]]\nname = "far"\ntls = { trust_root = "a.pem" }\n') == (
        'agent "far": tls needs a url'
    )
