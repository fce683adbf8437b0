"""Agent status counts what the connection dropped, and names each refused file once."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from acpkit_client.config import load_agents
from acpkit_client.status import agent_lines, dropped_lines, status_report, status_text
from tests.client.test_client_session import open_window, start


def write_project_file(root: Path, text: str) -> Path:
    (root / ".acpkit").mkdir(exist_ok=True)
    path = root / ".acpkit" / "acp.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_refused_file_is_named_once(tmp_path: Path) -> None:
    """A refused agents file's path appears once in the report, with its reason."""
    path = write_project_file(tmp_path, '[[agent]]\nname = "Bob"\ncomand = "x"\n')
    config = load_agents(str(tmp_path), {"ACPKIT_DIR": str(tmp_path / "user")})
    text = status_text(status_report(config))
    assert text.count(str(path)) == 1
    assert f"Refused {path}: agent.comand is not a key this file has" in text


def test_the_project_file_as_user_file_is_read_once(tmp_path: Path) -> None:
    """ACPKIT_DIR pointing at the project's .acpkit: the one file is loaded (or refused) once."""
    path = write_project_file(tmp_path, '[[agent]]\nname = "Bob"\ncommand = "bob"\n')
    environ = {"ACPKIT_DIR": str(tmp_path / ".acpkit")}
    config = load_agents(str(tmp_path), environ)
    assert config.files_read == (str(path),)
    assert status_report(config).count(f"Loaded {path}") == 1
    path.write_text("[[agent]\n", encoding="utf-8")
    config = load_agents(str(tmp_path), environ)
    assert len(config.errors) == 1
    assert status_text(status_report(config)).count(str(path)) == 1


#: Lines an agent might send for updates that the connection cannot read as a message.
UNDECODABLE_UPDATE_LINES = [
    # not UTF-8, and not JSON once repaired
    b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{\xe9',
    # cut short: not JSON
    b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{',
    # no "jsonrpc": "2.0"
    b'{"method":"session/update","params":{"sessionId":"s1","update":'
    b'{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}}}}',
    # params not an object
    b'{"jsonrpc":"2.0","method":"session/update","params":[1]}',
    # not an object at all
    b'"session/update"',
]


def test_undecodable_update_lines_are_counted(tmp_path: Path) -> None:
    """Each line the connection drops before decoding is counted in the agent's status;
    an update it could read but not decode stays counted among the ignored updates."""
    window, pair, _agents = open_window(tmp_path)
    start(window, pair)
    assert "  dropped lines: 0 undecodable, 0 oversized" in agent_lines(window.run)
    for line in UNDECODABLE_UPDATE_LINES:
        pair.client.protocol.dataReceived(line + b"\n")
        pair.pump()
    pair.agent.protocol.notify(
        "session/update", {"sessionId": "s1", "update": {"sessionUpdate": "tool_call"}}
    )
    pair.pump()
    assert dropped_lines(window.run) == (len(UNDECODABLE_UPDATE_LINES), 0)
    lines = agent_lines(window.run, window.conversation)
    assert f"  dropped lines: {len(UNDECODABLE_UPDATE_LINES)} undecodable, 0 oversized" in lines
    assert "  ignored updates: 1" in lines


def test_oversized_lines_are_read_from_the_core_when_it_counts_them(tmp_path: Path) -> None:
    """The core's count of oversized lines is shown; a core without the counters shows 0."""
    window, pair, _agents = open_window(tmp_path)
    start(window, pair)
    run = window.run
    counting = SimpleNamespace(protocol=SimpleNamespace(oversized_dropped=3, undecodable_dropped=2))
    run.connection = counting  # type: ignore[assignment]
    assert "  dropped lines: 2 undecodable, 3 oversized" in agent_lines(run)
    run.connection = SimpleNamespace(protocol=object())  # type: ignore[assignment]
    assert "  dropped lines: 0 undecodable, 0 oversized" in agent_lines(run)


def test_a_message_with_invalid_utf8_is_kept_and_counted(tmp_path: Path) -> None:
    """
    An agent message chunk with a byte that is not UTF-8 is shown with U+FFFD in its
    place (not dropped whole), and Agent status counts it.
    """
    window, pair, _agents = open_window(tmp_path)
    start(window, pair)
    assert not [line for line in agent_lines(window.run) if "invalid UTF-8" in line]
    pair.client.protocol.dataReceived(
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":'
        b'{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"caf\xe9 ok"}}}}\n'
    )
    pair.pump()
    texts = [entry.text for entry in window.conversation.entries if hasattr(entry, "text")]
    assert "caf\ufffd ok" in texts, texts
    lines = agent_lines(window.run, window.conversation)
    assert "  invalid UTF-8: 1 line(s) kept, bad bytes shown as \ufffd" in lines
    assert "  dropped lines: 0 undecodable, 0 oversized" in lines


def test_the_window_says_what_was_dropped(tmp_path: Path) -> None:
    """``dropped_note`` sums up the dropped and repaired messages in one sentence."""
    window, pair, _agents = open_window(tmp_path)
    start(window, pair)
    assert window.dropped_note() is None
    pair.client.protocol.framing.MAX_LENGTH = 100
    pair.client.protocol.dataReceived(
        b'{"jsonrpc":"2.0","method":"x","params":"' + b"y" * 200 + b'"}\n'
    )
    pair.client.protocol.dataReceived(b"not json\n")
    pair.pump()
    assert window.dropped_note() == (
        "the agent sent 1 message over the size limit (100 bytes) and 1 line that are not "
        "ACP messages: dropped unread, so what it said may be incomplete"
    )
