"""
``acpkit.remote.tokens`` and the clients that send them: token files readable by their
owner only, several tokens per file, found again by a client of the same user for a
loopback URL; ``connect_remote(token_file=...)``; the agents file's ``token_file``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from acpkit.remote.connect import with_bearer_token
from acpkit.remote.tokens import (
    TokenFileError,
    TokenSet,
    default_token_path,
    generate_token,
    read_client_token,
    read_token_file,
    token_for_url,
    write_token_file,
)
from acpkit_client.config import AgentsFileError, parse_agents_text


@pytest.fixture
def runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "run"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(directory))
    return directory


def test_generated_tokens_are_long_and_new() -> None:
    """32 random bytes each (43 URL-safe characters), never the same twice."""
    tokens = {generate_token() for _ in range(100)}
    assert len(tokens) == 100
    assert all(len(t) == 43 and t.replace("-", "").replace("_", "").isalnum() for t in tokens)


def test_a_written_token_file_is_the_owners_only(tmp_path: Path) -> None:
    """Written 0600 in a directory made 0700; the token round-trips."""
    path = tmp_path / "new" / "dir" / "t.token"
    write_token_file(path, "abc")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert read_token_file(path) == TokenSet((b"abc",))
    assert [p.name for p in path.parent.iterdir()] == ["t.token"]  # no temporary file left


def test_writing_never_follows_a_planted_symlink(tmp_path: Path) -> None:
    """A symlink planted at the token's path is replaced, its target untouched."""
    target = tmp_path / "victim"
    target.write_text("precious")
    path = tmp_path / "t.token"
    path.symlink_to(target)
    write_token_file(path, "abc")
    assert target.read_text() == "precious"
    assert not path.is_symlink() and path.read_text() == "abc\n"


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    """As ssh does with keys: group- or world-readable is refused, saying chmod 600."""
    path = tmp_path / "t.token"
    path.write_text("abc\n")
    path.chmod(0o644)
    with pytest.raises(TokenFileError, match=r"permissions 0644.*chmod 600"):
        read_token_file(path)


@pytest.mark.parametrize(
    ("text", "why"),
    [("", "holds no token"), ("# only a comment\n\n", "holds no token")],
)
def test_an_empty_token_file_is_refused(tmp_path: Path, text: str, why: str) -> None:
    """A file with no token line: refused naming the file (never a token in the error)."""
    path = tmp_path / "t.token"
    path.write_text(text)
    path.chmod(0o600)
    with pytest.raises(TokenFileError, match=why) as caught:
        read_token_file(path)
    assert str(path) in str(caught.value)


def test_a_missing_token_file_names_itself(tmp_path: Path) -> None:
    """A missing file: the error names it and says why."""
    with pytest.raises(TokenFileError, match="No such file"):
        read_token_file(tmp_path / "nope")
    with pytest.raises(TokenFileError, match="No such file"):
        read_client_token(tmp_path / "nope")


def test_several_tokens_several_holders(tmp_path: Path) -> None:
    """One token per line, comments and blank lines skipped; the repr hides them."""
    path = tmp_path / "t.token"
    path.write_text("# alice\nAAA\n\n  BBB  \n")
    path.chmod(0o600)
    tokens = read_token_file(path)
    assert tokens == TokenSet((b"AAA", b"BBB"))
    assert "AAA" not in repr(tokens) and "2 token" in repr(tokens)
    assert read_client_token(path) == "AAA"


def test_a_token_set_refuses_empty_tokens() -> None:
    """No token, or an empty one, is not a token set."""
    with pytest.raises(ValueError):
        TokenSet(())
    with pytest.raises(ValueError):
        TokenSet.of(["a", ""])


def test_the_default_path_follows_xdg(runtime_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """$XDG_RUNTIME_DIR/acpkit first, then $XDG_STATE_HOME/acpkit, then ~/.local/state."""
    assert default_token_path(8765) == runtime_dir / "acpkit" / "remote-8765.token"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", "/state")
    assert default_token_path(1) == Path("/state/acpkit/remote-1.token")
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", "/home/me")
    assert default_token_path(1) == Path("/home/me/.local/state/acpkit/remote-1.token")


def test_a_loopback_url_finds_its_token(runtime_dir: Path) -> None:
    """A loopback URL's port names the file a local server wrote; nothing otherwise."""
    write_token_file(default_token_path(8765), "tok")
    expected = {"Authorization": "Bearer tok"}
    assert token_for_url("http://127.0.0.1:8765/acp") == expected
    assert token_for_url("ws://localhost:8765/acp") == expected
    assert token_for_url("http://[::1]:8765/acp") == expected
    assert token_for_url("http://127.0.0.1:8766/acp") == {}
    assert token_for_url("http://example.com:8765/acp") == {}


def test_an_explicit_token_file_wins(tmp_path: Path, runtime_dir: Path) -> None:
    """token_file is read for any URL; a missing one is an error naming it."""
    path = tmp_path / "mine.token"
    path.write_text("mine\n")
    assert token_for_url("https://agent.example/acp", path) == {"Authorization": "Bearer mine"}
    with pytest.raises(TokenFileError):
        token_for_url("https://agent.example/acp", tmp_path / "nope")


def test_an_authorization_header_is_kept(tmp_path: Path, runtime_dir: Path) -> None:
    """with_bearer_token adds a token only when no Authorization header is given."""
    write_token_file(default_token_path(8765), "tok")
    url = "http://127.0.0.1:8765/acp"
    assert with_bearer_token(url, {"authorization": "Bearer own"}) == {
        "authorization": "Bearer own"
    }
    assert with_bearer_token(url, {"X": "1"}) == {"X": "1", "Authorization": "Bearer tok"}


def test_connect_remote_fails_on_an_unreadable_token_file(tmp_path: Path) -> None:
    """connect_remote(token_file=missing): the Deferred fails naming the file."""
    from twisted.internet.task import Clock
    from twisted.python.failure import Failure

    from acpkit.connection import Client
    from acpkit.remote.connect import connect_remote

    failures: list[Failure] = []
    d = connect_remote(Clock(), "http://127.0.0.1:9/acp", Client(), token_file=tmp_path / "nope")
    d.addErrback(failures.append)
    assert failures[0].check(TokenFileError)
    assert "nope" in str(failures[0].value)


def test_the_agents_file_token_file_key(tmp_path: Path) -> None:
    """token_file is relative to the agents file; refused beside headers.Authorization
    or without a url."""
    agents = tmp_path / "acp.toml"
    (entry,) = parse_agents_text(
        str(agents), '[[agent]]\nname = "r"\nurl = "http://127.0.0.1:1/acp"\ntoken_file = "t"\n'
    )
    assert entry.token_file == str(tmp_path / "t")
    with pytest.raises(AgentsFileError, match="not both"):
        parse_agents_text(
            str(agents),
            '[[agent]]\nname = "r"\nurl = "http://h/acp"\ntoken_file = "t"\n'
            '[agent.headers]\nAuthorization = "Bearer x"\n',
        )
    with pytest.raises(AgentsFileError, match="command or url"):
        parse_agents_text(str(agents), '[[agent]]\nname = "r"\ncommand = "x"\ntoken_file = "t"\n')


def test_no_token_file_is_left_readable_by_others_after_writing(tmp_path: Path) -> None:
    """Whatever the umask, the token file is 0600."""
    old = os.umask(0)
    try:
        path = tmp_path / "t.token"
        write_token_file(path, "abc")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
