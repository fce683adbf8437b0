"""
The reference agent's ACP surface outside tool calls (seed 000, "Réponse à initialize",
"Méthodes", "session/prompt"): initialize, authenticate, session/new, refused methods,
prompt content flattening and ``@`` mentions, streaming with the echo engine, usage.
"""

from __future__ import annotations

import datetime
import os
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acpkit import codec, schema
from acpkit.errors import RPCError
from acpkit_agent.agent import AGENT_VERSION, CommandRegistry, SlashCommand
from acpkit_agent.config import AgentConfig
from acpkit_agent.prompt_content import find_mentions, flatten_prompt, link_path
from acpkit_agent.session import Session, new_session_id
from tests.fixtures.agent.harness import captured_logs, make_harness


def test_initialize_answer() -> None:
    """initialize answers version 1, no loadSession, agentInfo bob/title/version, no auth."""
    h = make_harness()
    raw = h.pair.result(
        h.pair.client.protocol.request(
            "initialize",
            {
                "protocolVersion": 1,
                "clientCapabilities": {},
                "clientInfo": {"name": "zed", "version": "0.2"},
            },
        )
    )
    assert raw["protocolVersion"] == 1
    assert raw["agentCapabilities"]["loadSession"] is False
    assert raw["agentInfo"] == {
        "name": "bob",
        "title": "Bob (bash-first agent)",
        "version": AGENT_VERSION,
    }
    assert raw["authMethods"] == []


def test_initialize_unsupported_version_answers_ours() -> None:
    """A client asking for protocol version 7 gets our version (1)."""
    h = make_harness()
    raw = h.pair.result(
        h.pair.client.protocol.request(
            "initialize", {"protocolVersion": 7, "clientCapabilities": {}}
        )
    )
    assert raw["protocolVersion"] == 1


def test_initialize_logs_client_and_elicitation() -> None:
    """initialize logs the client name, the protocol version and elicitation(form)=true|false."""
    with captured_logs() as logs:
        h = make_harness()
        h.pair.result(
            h.pair.client.protocol.request(
                "initialize",
                {
                    "protocolVersion": 1,
                    "clientCapabilities": {"elicitation": {"form": {}}},
                    "clientInfo": {"name": "zed", "version": "0.2"},
                },
            )
        )
        other = make_harness()
        other.start()
    assert (
        "[acp] initialize: client zed 0.2, protocol version 1, elicitation(form)=true" in logs.acp()
    )
    assert any(line.endswith("protocol version 1, elicitation(form)=false") for line in logs.acp())
    assert h.agent.elicitation_form is True


def test_initialize_logs_the_negotiated_version() -> None:
    """A client asking for a version bob does not speak: the log names the one answered."""
    with captured_logs() as logs:
        h = make_harness()
        h.pair.result(
            h.pair.client.protocol.request(
                "initialize", {"protocolVersion": 7, "clientCapabilities": {}}
            )
        )
    assert (
        "[acp] initialize: client (unnamed client), protocol version 1 (the client asked for 7),"
        " elicitation(form)=false"
    ) in logs.acp()


def test_title_absent_when_empty_and_name_from_config() -> None:
    """acp.title empty: agentInfo has no title; acp.name is agentInfo.name."""
    h = make_harness(config=AgentConfig(name="alice", title=""))
    raw = h.pair.result(
        h.pair.client.protocol.request(
            "initialize", {"protocolVersion": 1, "clientCapabilities": {}}
        )
    )
    assert raw["agentInfo"] == {"name": "alice", "version": AGENT_VERSION}


def test_authenticate_answers_empty() -> None:
    """authenticate answers {}."""
    h = make_harness()
    h.start()
    raw = h.pair.result(h.pair.client.protocol.request("authenticate", {"methodId": "x"}))
    assert raw == {}


def test_session_new_id_cwd_and_commands_after_response(tmp_path: Path) -> None:
    """session/new: a date-sortable id, the cwd kept, the system prompt, then the commands."""
    cwd = str(tmp_path)
    with captured_logs() as logs:
        h = make_harness()
        h.pair.result(h.pair.client.initialize())
        response = h.pair.result(
            h.pair.client.new_session(
                codec.decode(
                    schema.NewSessionRequest,
                    {
                        "cwd": cwd,
                        "mcpServers": [
                            {"name": "a", "command": "a", "args": [], "env": []},
                            {"name": "b", "command": "b", "args": [], "env": []},
                        ],
                    },
                )
            )
        )
    sid = response.session_id
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{8}", sid)
    session = h.agent.sessions.get(sid)
    assert session is not None and session.cwd == cwd
    assert [m["role"] for m in session.history] == ["system"]
    assert session.remembered == {}
    assert h.client.wire_updates() == [
        {
            "sessionUpdate": "available_commands_update",
            "availableCommands": [
                {"name": "new", "description": "Clear the history and start a new session"},
                {
                    "name": "compact",
                    "description": "Compress the history now, keeping the last turns",
                },
            ],
        }
    ]
    assert f"[acp] session {sid}: new in {cwd} (2 MCP server(s) ignored)" in logs.acp()


def test_session_id_format() -> None:
    """Session ids are local time plus 8 hex digits: 20260916-101530-4f2a9c1e."""
    when = datetime.datetime(2026, 9, 16, 10, 15, 30)
    assert new_session_id(when, lambda n: "4f2a9c1e") == "20260916-101530-4f2a9c1e"


@pytest.mark.parametrize(
    "method",
    [
        "session/set_mode",
        "session/set_config_option",
        "session/list",
        "session/resume",
        "session/close",
        "logout",
        "session/load",
    ],
)
def test_unsupported_methods_are_method_not_found(method: str) -> None:
    """The methods bob does not implement answer -32601."""
    h = make_harness()
    sid = h.start()
    params = {
        "session/set_mode": {"sessionId": sid, "modeId": "x"},
        "session/set_config_option": {"sessionId": sid, "configId": "x", "value": "y"},
        "session/list": {},
        "session/resume": {"sessionId": sid, "cwd": "/tmp"},
        "session/close": {"sessionId": sid},
        "logout": {},
        "session/load": {"sessionId": sid, "cwd": "/tmp", "mcpServers": []},
    }[method]
    with pytest.raises(RPCError) as caught:
        h.pair.result(h.pair.client.protocol.request(method, params))
    assert caught.value.code == -32601


def test_prompt_unknown_session_is_invalid_params_with_the_id() -> None:
    """session/prompt for an unknown sessionId answers -32602 carrying the id."""
    h = make_harness()
    h.start()
    with pytest.raises(RPCError) as caught:
        h.pair.result(h.prompt("nope-123", "hi"))
    assert caught.value.code == -32602
    assert "nope-123" in caught.value.message


def test_echo_prompt_streams_and_reports_usage() -> None:
    """A prompt is streamed as agent_message_chunks (whitespace kept), usage totals answered."""
    with captured_logs() as logs:
        h = make_harness()
        sid = h.start()
        h.client.updates.clear()
        result = h.raw_prompt(sid, "hello   there  friend, how are you today?")
    assert result["stopReason"] == "end_turn"
    assert h.client.text() == "Echo: hello   there  friend, how are you today?"
    assert len(h.client.of_kind("agent_message_chunk")) > 1
    usage = result["usage"]
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"] > 0
    updates = h.client.of_kind("usage_update")
    assert updates[0] == {
        "sessionUpdate": "usage_update",
        "used": usage["totalTokens"],
        "size": 32768,
    }
    assert len(updates) == 2  # after the model call, and at the end of the turn
    assert "[acp] turn done: 0 command(s) · 0 file op(s) · 0 skill(s)" in logs.acp()


def test_usage_is_session_totals() -> None:
    """The usage of the second turn's response adds both turns' counts."""
    h = make_harness()
    sid = h.start()
    first = h.raw_prompt(sid, "one")["usage"]
    second = h.raw_prompt(sid, "two")["usage"]
    assert second["inputTokens"] > first["inputTokens"]
    session = h.agent.sessions.get(sid)
    assert session is not None
    assert second["totalTokens"] == session.totals.total_tokens


def test_history_keeps_the_turn() -> None:
    """After a turn the history holds system, user, assistant."""
    h = make_harness()
    sid = h.start()
    h.raw_prompt(sid, "hello")
    session = h.agent.sessions.get(sid)
    assert session is not None
    assert [m["role"] for m in session.history] == ["system", "user", "assistant"]
    assert session.history[1]["content"] == "hello"


def test_resource_link_and_other_blocks(tmp_path: Path) -> None:
    """text blocks concatenated; resource_link → [attached file: path]; images ignored."""
    blocks = [
        schema.TextContentBlock(text="look at "),
        schema.TextContentBlock(text="this"),
        schema.ResourceLinkContentBlock(name="a.py", uri="file:///src/a%20b.py"),
        schema.ImageContentBlock(data="AAAA", mime_type="image/png"),
    ]
    flat = flatten_prompt(blocks, str(tmp_path))
    assert flat.text == "look at this\n[attached file: /src/a b.py]"
    assert link_path("/plain/path") == "/plain/path"


def test_mentions_attach_files_and_directories(tmp_path: Path) -> None:
    """@path of an existing file/dir under cwd (or absolute, ~) is attached once each."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("x")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    outside.write_text("y")
    try:
        text = (
            f"see @src/main.py and @src, again @src/main.py, @missing.py, "
            f"@{outside} and @../{outside.name} and mail@src"
        )
        flat = flatten_prompt([schema.TextContentBlock(text=text)], str(tmp_path))
        assert flat.attached == (
            str(tmp_path / "src" / "main.py"),
            str(tmp_path / "src"),
            str(outside),
        )
        assert flat.text == (
            text
            + f"\n[attached file: {tmp_path / 'src' / 'main.py'}]"
            + f"\n[attached directory: {tmp_path / 'src'}]"
            + f"\n[attached file: {outside}]"
        )
    finally:
        outside.unlink()


def test_mention_of_home_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """@~/file resolves against the home directory."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "notes.md").write_text("n")
    assert find_mentions("read @~/notes.md.", "/nonexistent") == [str(tmp_path / "notes.md")]


def test_prompt_logs_attached_paths(tmp_path: Path) -> None:
    """Each attached mention is logged as [acp] session <id>: attached <path>."""
    (tmp_path / "a.txt").write_text("a")
    with captured_logs() as logs:
        h = make_harness()
        sid = h.start(cwd=str(tmp_path))
        h.raw_prompt(sid, "check @a.txt please")
    assert f"[acp] session {sid}: attached {tmp_path / 'a.txt'}" in logs.acp()
    session = h.agent.sessions.get(sid)
    assert session is not None
    assert session.history[1]["content"].endswith(f"\n[attached file: {tmp_path / 'a.txt'}]")


def test_slash_command_registry_intercepts_and_advertises() -> None:
    """A registered command is advertised after session/new and answered without the model."""
    from twisted.internet.defer import Deferred, succeed

    h = make_harness()
    ran: list[str] = []

    def run(session: Session) -> Deferred[str]:
        ran.append(session.id)
        return succeed("🆕 done")

    h.agent.commands.register(SlashCommand(name="hello", description="Say hi", run=run))
    sid = h.start()
    assert h.client.wire_updates()[0]["availableCommands"][-1] == {
        "name": "hello",
        "description": "Say hi",
    }
    h.client.updates.clear()
    result = h.raw_prompt(sid, "  /hello \n")
    assert result == {"stopReason": "end_turn"}
    assert ran == [sid]
    assert h.client.of_kind("agent_message_chunk")[0]["content"]["text"] == "🆕 done"
    # an unknown /name goes to the model unchanged
    h.raw_prompt(sid, "/unknown thing")
    assert "Echo: /unknown thing" in h.client.text()


def test_command_registry_refuses_duplicates_and_hint() -> None:
    """Registering a name twice fails; a hint becomes input.hint."""
    from twisted.internet.defer import succeed

    registry = CommandRegistry()
    command = SlashCommand(
        name="greet", description="Greet", run=lambda s: succeed("x"), hint="who"
    )
    registry.register(command)
    with pytest.raises(ValueError):
        registry.register(command)
    assert codec.encode(registry.advertised()[0]) == {
        "name": "greet",
        "description": "Greet",
        "input": {"hint": "who"},
    }
    assert registry.match("/greet") is command
    assert registry.match("/greet now") is None
    assert "greet" in registry


def test_updates_only_after_response_for_new_session() -> None:
    """The available_commands_update arrives after the session/new response (known id)."""
    h = make_harness()
    h.pair.result(h.pair.client.initialize())
    order: list[str] = []
    h.client.on_update = lambda n: order.append("update")
    d = h.pair.client.new_session(schema.NewSessionRequest(cwd=os.getcwd(), mcp_servers=[]))
    d.addCallback(lambda r: order.append("response"))
    h.pair.result(d)
    assert order == ["response", "update"]


_NO_PATHS = st.text(
    alphabet=st.characters(exclude_characters="/~", exclude_categories=["Cs"]), max_size=40
)


@given(st.lists(_NO_PATHS, max_size=6))
def test_flatten_keeps_text_when_nothing_resolves(texts: list[str]) -> None:
    """Text blocks are concatenated unchanged when no mention names an existing path."""
    blocks = [schema.TextContentBlock(text=t) for t in texts]
    flat = flatten_prompt(blocks, "/nonexistent-bob-cwd")
    assert flat.text == "".join(texts)
    assert flat.attached == ()


@given(
    st.lists(st.sampled_from(["a.txt", "b.md", "dir", "dir/c.py", "none.txt"]), max_size=8),
    st.sampled_from([" ", "\n", "  ", "\t"]),
)
def test_mentions_attached_once_in_first_mention_order(names: list[str], gap: str) -> None:
    """Each existing mentioned path is attached exactly once, in order of first mention."""
    import tempfile

    with tempfile.TemporaryDirectory() as cwd:
        os.mkdir(os.path.join(cwd, "dir"))
        for name in ("a.txt", "b.md", "dir/c.py"):
            Path(cwd, name).write_text("x")
        text = gap.join(f"@{name}" for name in names)
        flat = flatten_prompt([schema.TextContentBlock(text=text)], cwd)
        expected: list[str] = []
        for name in names:
            path = os.path.join(cwd, name)
            if name != "none.txt" and path not in expected:
                expected.append(path)
        assert list(flat.attached) == expected
        suffix = "".join(
            f"\n[attached {'directory' if os.path.isdir(p) else 'file'}: {p}]" for p in expected
        )
        assert flat.text == text + suffix


def test_session_new_refuses_a_relative_cwd() -> None:
    """session/new with a relative cwd answers -32602 naming $.params.cwd (it MUST be absolute)."""
    h = make_harness()
    h.pair.result(
        h.pair.client.protocol.request(
            "initialize", {"protocolVersion": 1, "clientCapabilities": {}}
        )
    )
    with pytest.raises(RPCError) as caught:
        h.pair.result(
            h.pair.client.protocol.request("session/new", {"cwd": "relative/dir", "mcpServers": []})
        )
    assert caught.value.code == -32602
    assert "$.params.cwd" in str(caught.value.to_json())


@pytest.mark.parametrize("sessions_enabled", [False, True])
def test_session_new_refuses_a_cwd_that_does_not_exist(
    tmp_path: Path, sessions_enabled: bool
) -> None:
    """
    session/new with an absolute cwd that does not exist answers -32602, data.path
    $.params.cwd, the message naming the path; nothing is created there, sessions enabled
    or not.
    """
    h = make_harness(config=AgentConfig(sessions_enabled=sessions_enabled))
    h.pair.result(h.pair.client.initialize())
    missing = tmp_path / "no" / "such" / "dir"
    with pytest.raises(RPCError) as caught:
        h.pair.result(
            h.pair.client.protocol.request("session/new", {"cwd": str(missing), "mcpServers": []})
        )
    assert caught.value.code == -32602
    assert caught.value.data["path"] == "$.params.cwd"
    assert caught.value.data["reason"] == f"cwd {str(missing)!r} does not exist"
    assert str(missing) in caught.value.message
    assert not (tmp_path / "no").exists()
    assert list(h.agent.sessions) == []


def test_session_new_refuses_a_cwd_that_is_a_file(tmp_path: Path) -> None:
    """session/new with a cwd naming a file answers -32602 saying it is not a directory."""
    h = make_harness()
    h.pair.result(h.pair.client.initialize())
    file = tmp_path / "file.txt"
    file.write_text("not a directory")
    with pytest.raises(RPCError) as caught:
        h.pair.result(
            h.pair.client.protocol.request("session/new", {"cwd": str(file), "mcpServers": []})
        )
    assert caught.value.code == -32602
    assert caught.value.data == {
        "path": "$.params.cwd",
        "reason": f"cwd {str(file)!r} is not a directory",
    }
