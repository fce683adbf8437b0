"""`acpkit-client ask` and agent windows, in memory: handshake time limit, errors, login, no cap."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import attrs
import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from acpkit import schema
from acpkit.errors import AuthRequired, RPCError
from acpkit.testing.pair import ConnectedPair, connected_pair
from acpkit_client import cli
from acpkit_client.agents import (
    ERROR_DATA_LIMIT,
    AgentStartError,
    AgentState,
    HandshakeTimeout,
    describe_rpc_error,
)
from acpkit_client.config import AgentEntry
from acpkit_client.conversation import ENTRY_TEXT_CAP, CappedText, Conversation
from acpkit_client.session import AgentWindow, TurnError
from acpkit_client.status import agent_lines
from tests.fixtures.client.tiny_agent import TinyAgent

ENTRY = AgentEntry(name="tiny", command="python", source="test")


class MuteInitialize(TinyAgent):
    """Never answers ``initialize``."""

    def initialize(self, params: schema.InitializeRequest) -> Any:
        return Deferred()


class MuteSession(TinyAgent):
    """Answers ``initialize``, never ``session/new``."""

    def new_session(self, params: schema.NewSessionRequest) -> Any:
        return Deferred()


class Slow(TinyAgent):
    """Answers ``initialize`` at once and ``session/new`` when ``answer`` fires."""

    answer: Deferred[Any] | None = None

    def new_session(self, params: schema.NewSessionRequest) -> Any:
        self.answer = Deferred()
        self.answer.addCallback(lambda _: schema.NewSessionResponse(session_id="s1"))
        return self.answer


class Failing(TinyAgent):
    """Answers each prompt with ``error``."""

    error: RPCError = RPCError(-32603, "Internal error", {"details": "API key is not set"})

    def prompt(self, params: schema.PromptRequest) -> Any:
        raise self.error


class LoginOnPrompt(TinyAgent):
    """Lists authMethods, opens sessions, and answers the prompt -32000."""

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        response = super().initialize(params)
        methods: list[schema.AuthMethod] = [
            schema.AuthMethodAgent(id="login", name="Log in with tiny")
        ]
        return attrs.evolve(response, auth_methods=methods)

    def prompt(self, params: schema.PromptRequest) -> Any:
        if params.prompt[0].text == "locked":  # type: ignore[union-attr]
            raise AuthRequired("no token")
        return super().prompt(params)


def window_on(
    tmp_path: Path, agent: type[TinyAgent], clock: Clock, timeout: float | None = 30.0
) -> tuple[AgentWindow, ConnectedPair, list[TinyAgent]]:
    agents: list[TinyAgent] = []

    def make(conn: Any) -> TinyAgent:
        agents.append(agent(conn, "normal"))
        return agents[-1]

    window = AgentWindow(ENTRY, str(tmp_path), environ={}, handshake_timeout=timeout)
    pair = connected_pair(make, window, clock=clock)
    return window, pair, agents


# -- 1. handshake time limit ----------------------------------------------------------


def test_handshake_timeout_names_initialize(tmp_path: Path) -> None:
    """An agent that never answers initialize fails the start after the handshake
    timeout with HandshakeTimeout naming initialize; nothing fails before it."""
    clock = Clock()
    window, pair, _ = window_on(tmp_path, MuteInitialize, clock, timeout=30)
    d = window.open_on(pair.client, clock)
    failures: list[Any] = []
    d.addErrback(failures.append)
    pair.advance(29.9)
    assert failures == []
    pair.advance(0.2)
    assert len(failures) == 1
    error = failures[0].value
    assert isinstance(error, HandshakeTimeout)
    assert error.method == "initialize"
    assert str(error) == "no answer to initialize within 30 s"
    assert window.run.state is AgentState.FAILED
    assert window.run.problems == ["no answer to initialize within 30 s"]


def test_handshake_timeout_names_session_new(tmp_path: Path) -> None:
    """initialize answered, session/new not: the timeout names session/new, and the one
    limit covers both requests (it is not restarted after initialize)."""
    clock = Clock()
    window, pair, _ = window_on(tmp_path, MuteSession, clock, timeout=5)
    d = window.open_on(pair.client, clock)
    pair.pump()
    assert window.run.initialize_response is not None
    pair.advance(5)
    with pytest.raises(HandshakeTimeout, match="no answer to session/new within 5 s"):
        pair.result(d)


def test_handshake_in_time_leaves_no_timer(tmp_path: Path) -> None:
    """A handshake answered before the limit succeeds and leaves no timer behind."""
    clock = Clock()
    window, pair, agents = window_on(tmp_path, Slow, clock, timeout=5)
    d = window.open_on(pair.client, clock)
    pair.advance(4)
    slow = agents[0]
    assert isinstance(slow, Slow) and slow.answer is not None
    slow.answer.callback(None)
    assert pair.result(d) == "s1"
    assert clock.getDelayedCalls() == []


def test_no_handshake_timeout_waits(tmp_path: Path) -> None:
    """Without a handshake_timeout (the terminal UI's default) the start just waits."""
    clock = Clock()
    window, pair, _ = window_on(tmp_path, MuteInitialize, clock, timeout=None)
    d = window.open_on(pair.client, clock)
    pair.advance(3600)
    assert not d.called
    assert window.run.state is AgentState.STARTING


def test_abandon_turn_fails_the_turn_and_cancels(tmp_path: Path) -> None:
    """abandon_turn (ask's --timeout) sends session/cancel and fails the turn at once."""
    clock = Clock()
    agents: list[TinyAgent] = []
    window = AgentWindow(ENTRY, str(tmp_path), environ={})

    def make(conn: Any) -> TinyAgent:
        agents.append(TinyAgent(conn, "stubborn"))
        return agents[-1]

    pair = connected_pair(make, window, clock=clock)
    pair.result(window.open_on(pair.client, clock))
    turn = window.send_prompt("wait", files=[])
    pair.pump()
    assert window.abandon_turn()
    with pytest.raises(TurnError, match="abandoned"):
        pair.result(turn)
    assert not window.abandon_turn()


def test_ask_timeout_options() -> None:
    """--handshake-timeout defaults to 30 s, --timeout to none; both take positive seconds."""
    parser = cli._parser()
    options = parser.parse_args(["ask", "x"])
    assert (options.handshake_timeout, options.timeout) == (30.0, None)
    options = parser.parse_args(["ask", "--handshake-timeout", "2.5", "--timeout", "60", "x"])
    assert (options.handshake_timeout, options.timeout) == (2.5, 60.0)
    for bad in ("0", "-1", "soon", "inf"):
        assert cli.main(["ask", "--timeout", bad, "x"]) == cli.EXIT_USAGE


# -- 3. errors: message once, code once, data -------------------------------------------


def test_agent_error_shows_message_code_and_data_once(tmp_path: Path) -> None:
    """A turn failed with -32603 and data reads: the message once, the code once, the
    data as compact JSON."""
    clock = Clock()
    window, pair, _ = window_on(tmp_path, Failing, clock)
    pair.result(window.open_on(pair.client, clock))
    with pytest.raises(TurnError) as raised:
        pair.result(window.send_prompt("hi", files=[]))
    assert str(raised.value) == (
        'the agent answered Internal error (code -32603; data: {"details":"API key is not set"})'
    )


def test_describe_rpc_error_bounds_and_dedupes() -> None:
    """No data: message and code; a code repeated in the message is said once; long data
    is cut to ERROR_DATA_LIMIT characters with a marker; newlines are flattened."""
    assert describe_rpc_error(RPCError(-32603, "Internal error")) == (
        "Internal error (code -32603)"
    )
    assert describe_rpc_error(RPCError(-32603, "Internal error (code -32603)")) == (
        "Internal error (code -32603)"
    )
    assert describe_rpc_error(RPCError(1, "two\nlines")) == "two lines (code 1)"
    long = describe_rpc_error(RPCError(-32603, "Boom", {"trace": "x" * 5000}))
    data = long.split("data: ", 1)[1]
    assert len(data) < ERROR_DATA_LIMIT + 50
    assert data.startswith('{"trace":"xxxx')
    assert "more characters" in data


def test_handshake_error_shows_data(tmp_path: Path) -> None:
    """An error answered to session/new shows its data too, the code once."""

    class Broken(TinyAgent):
        def new_session(self, params: schema.NewSessionRequest) -> Any:
            raise RPCError(-32603, "Internal error", {"missing": "GEMINI_API_KEY"})

    clock = Clock()
    window, pair, _ = window_on(tmp_path, Broken, clock)
    with pytest.raises(AgentStartError) as raised:
        pair.result(window.open_on(pair.client, clock))
    assert str(raised.value) == (
        'session/new failed: Internal error (code -32603; data: {"missing":"GEMINI_API_KEY"})'
    )


# -- 4. login only on -32000 ----------------------------------------------------------


def test_auth_methods_alone_are_not_a_login_note(tmp_path: Path) -> None:
    """An agent that lists authMethods and works gets no "requires a login" note; Agent
    status lists the methods; -32000 to a prompt then says a login is needed."""
    clock = Clock()
    window, pair, _ = window_on(tmp_path, LoginOnPrompt, clock)
    assert pair.result(window.open_on(pair.client, clock)) == "s1"
    assert window.run.notes == []
    assert not window.run.needs_login
    status = "\n".join(agent_lines(window.run))
    assert "requires a login" not in status
    assert "Log in with tiny" in status
    with pytest.raises(TurnError, match="requires a login") as raised:
        pair.result(window.send_prompt("locked", files=[]))
    assert "Log in with tiny" in str(raised.value)
    assert str(raised.value).count("-32000") == 1
    assert window.run.needs_login


# -- 2. ask streams the whole answer ------------------------------------------------------


def chunk(text: str) -> Any:
    return schema.AgentMessageChunk(content=schema.TextContentBlock(text=text))


def test_ask_printer_streams_past_the_window_cap() -> None:
    """With Conversation(text_cap=None), as ask uses it, the printer writes every byte
    of an answer much longer than a window's 1 MiB cap, with nothing dropped."""
    out, err = io.StringIO(), io.StringIO()
    conversation = Conversation(text_cap=None)
    printer = cli.AskPrinter(out, err)
    conversation.subscribe(printer)
    piece = "0123456789abcdé\n" * 64
    count = (3 * ENTRY_TEXT_CAP) // len(piece.encode("utf-8"))
    for _ in range(count):
        conversation.apply(chunk(piece))
    printer.finish()
    assert out.getvalue() == piece * count
    assert len(out.getvalue().encode("utf-8")) > 2 * ENTRY_TEXT_CAP
    assert err.getvalue() == ""


def test_window_conversation_is_still_capped() -> None:
    """The terminal UI's conversation (the default) keeps its cap and says what it dropped."""
    conversation = Conversation()
    conversation.apply(chunk("x" * (ENTRY_TEXT_CAP + 10)))
    assert conversation.entries[-1].text.endswith("[… 10 bytes dropped …]")


def test_capped_text_since() -> None:
    """CappedText.since(n) is the kept text from character n on, across parts."""
    text = CappedText(cap=None)
    for part in ("ab", "cde", "", "f"):
        text.append(part)
    assert text.length == 6
    assert [text.since(n) for n in range(8)] == [
        "abcdef",
        "bcdef",
        "cdef",
        "def",
        "ef",
        "f",
        "",
        "",
    ]
    assert text.kept == "abcdef"
    assert text.since(4) == "ef"
    capped = CappedText(cap=3)
    capped.append("abcdef")
    assert (capped.since(1), capped.length, capped.dropped) == ("bc", 3, 3)


# -- 5. command line ----------------------------------------------------------------------


def test_help_mentions_the_terminal_ui(capsys: Any) -> None:
    """acpkit-client --help says that without a sub-command it opens the terminal UI."""
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "terminal UI" in out
    assert "--cwd DIR" in out and "--log FILE" in out
    assert "ask" in out


def test_version(capsys: Any) -> None:
    """acpkit-client --version prints the version and exits 0 (not the terminal UI)."""
    from acpkit import __version__

    assert not cli._wants_terminal_ui(["--version"])
    assert cli.main(["--version"]) == 0
    assert __version__ in capsys.readouterr().out


def test_verbose_before_or_after_ask() -> None:
    """-v works after the sub-command as well as before it."""
    parser = cli._parser()
    assert parser.parse_args(["ask", "-v", "x"]).verbose
    assert parser.parse_args(["ask", "--verbose", "x"]).verbose
    assert parser.parse_args(["-v", "ask", "x"]).verbose
    assert not parser.parse_args(["ask", "x"]).verbose


# -- @ mentions that name no file ----------------------------------------------------------


def _ask_here(root: Path, *argv: str) -> tuple[int, str]:
    """Run ``ask`` as far as it goes before starting an agent; return (status, stderr)."""
    options = cli._parser().parse_args(["ask", "--cwd", str(root), *argv])
    err = io.StringIO()
    d = Deferred.fromCoroutine(cli.ask(Clock(), options, io.StringIO(), err, False))
    status: list[int] = []
    d.addCallback(status.append)
    assert status, "ask went on to start an agent"
    return status[0], err.getvalue()


def test_an_unresolved_mention_is_not_sent(tmp_path: Path) -> None:
    """
    ``ask`` refuses a prompt whose @path names no file of the project (exit 2, the
    mention named, no agent started) instead of sending the path as plain text.
    """
    status, err = _ask_here(tmp_path, "fix @src/ui/Button.tsx please")
    assert status == cli.EXIT_USAGE
    assert "no such file in the project" in err and "@src/ui/Button.tsx" in err
    assert "--mentions-as-text" in err


@pytest.mark.process
def test_mentions_as_text_and_plain_words_go_on(tmp_path: Path) -> None:
    """
    ``--mentions-as-text`` lets such a prompt through; an @word that is no path
    (``@property``) and a mention of an existing file never stop it.
    """
    (tmp_path / "notes.md").write_text("n\n", encoding="utf-8")
    for argv in (
        ("--mentions-as-text", "fix @src/ui/Button.tsx"),
        ("use @property and @notes.md",),
    ):
        status, err = _ask_here(tmp_path, "--agent", "nobody", *argv)
        # It went past the mention check: on to choosing the (unknown) agent.
        assert status == cli.EXIT_CONFIG, err
