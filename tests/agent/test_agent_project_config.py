"""
Each session takes its project configuration (``.acpkit/agent.toml``) from its own ``cwd``,
not from the agent process's cwd: the lookup rule, the layering over the user's file, the
permission policy per session, the log line naming the files, and a malformed project file
refused for that session.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest
from twisted.internet import reactor
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.trial.unittest import TestCase

from acpkit import schema
from acpkit.connection import ClientConnection
from acpkit.errors import RPCError
from acpkit.io import spawn_agent
from acpkit_agent.config import (
    AgentConfig,
    ConfigError,
    find_project_config,
    load_config,
    session_config,
)
from tests.agent.test_agent_process import ENV, TWISTD
from tests.fixtures.agent.harness import (
    Harness,
    RecordingClient,
    captured_logs,
    make_harness,
    scripted,
)
from tests.helpers import wait_until, write


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A directory holding ``.git``: project lookups never walk above it."""
    (tmp_path / ".git").mkdir()
    return tmp_path


# -- the lookup rule ---------------------------------------------------------------------


def test_project_file_is_the_nearest_walking_up(root: Path) -> None:
    """From a subdirectory, the nearest .acpkit/agent.toml above it applies; a nearer wins."""
    outer = write(root / "proj" / ".acpkit" / "agent.toml", "yolo = false\n")
    deep = root / "proj" / "src" / "pkg"
    deep.mkdir(parents=True)
    assert find_project_config(str(deep)) == outer
    inner = write(root / "proj" / "src" / ".acpkit" / "agent.toml", "yolo = true\n")
    assert find_project_config(str(deep)) == inner
    assert find_project_config(str(root / "proj")) == outer


def test_project_lookup_stops_at_the_repository_root(tmp_path: Path) -> None:
    """A repository's sessions never take the file of a directory enclosing the repository."""
    write(tmp_path / ".acpkit" / "agent.toml", "yolo = false\n")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "sub").mkdir()
    assert find_project_config(str(repo / "sub")) is None
    assert find_project_config(str(repo)) is None
    # outside a repository the walk goes on up
    (tmp_path / "plain" / "sub").mkdir(parents=True)
    assert find_project_config(str(tmp_path / "plain" / "sub")) == str(
        tmp_path / ".acpkit" / "agent.toml"
    )


def test_session_config_layers_the_session_project_over_the_user_file(root: Path) -> None:
    """The process cwd's file does not decide a session elsewhere; the session cwd's does."""
    home = root / "home"
    user = write(home / ".config" / "acpkit" / "agent.toml", "[context]\nkeepLastTurns = 7\n")
    a = root / "a"
    a_file = write(a / ".acpkit" / "agent.toml", "yolo = true\n[context]\ncompactAt = 0.5\n")
    b = root / "b"
    b_file = write(b / ".acpkit" / "agent.toml", "yolo = false\n")
    (root / "c").mkdir()
    process = load_config(None, cwd=str(a), home=str(home))
    assert (process.yolo, process.keep_last_turns, process.compact_at) == (True, 7, 0.5)
    assert process.sources == (user, a_file)
    in_b = session_config(process, str(b))
    assert (in_b.yolo, in_b.keep_last_turns, in_b.compact_at) == (False, 7, 0.8)
    assert in_b.sources == (user, b_file)
    assert in_b.describe_sources() == f"{b_file} over {user}"
    in_c = session_config(process, str(root / "c"))
    assert (in_c.yolo, in_c.compact_at, in_c.sources) == (True, 0.8, (user,))
    assert session_config(process, str(a)) is process


def test_explicit_config_is_the_base_sessions_layer_over(root: Path) -> None:
    """With --config, a session's project file still sets its policy over that file."""
    explicit = write(root / "bob.toml", "yolo = true\n[acp]\nname = 'zed-bob'\n")
    b = root / "b"
    b_file = write(b / ".acpkit" / "agent.toml", "yolo = false\n")
    process = load_config(explicit, cwd=str(b), home=str(root / "home"))
    assert (process.name, process.yolo, process.sources) == ("zed-bob", True, (explicit,))
    in_b = session_config(process, str(b))
    assert (in_b.name, in_b.yolo, in_b.sources) == ("zed-bob", False, (explicit, b_file))


def test_per_process_keys_of_a_session_project_are_listed_as_ignored(root: Path) -> None:
    """A session's file cannot change the engine or agentInfo: those keys are reported."""
    b = root / "b"
    write(
        b / ".acpkit" / "agent.toml",
        "yolo = false\n[acp]\nname = 'other'\n[engine]\nname = 'echo'\n",
    )
    config = session_config(AgentConfig(), str(b))
    assert (config.yolo, config.name, config.ignored) == (False, "bob", ("acp.name",))


def test_code_built_config_keeps_its_values_where_no_project_file_applies(root: Path) -> None:
    """A configuration built in code (no files) is the base of its sessions."""
    process = AgentConfig(yolo=False, keep_last_turns=2)
    (root / "x").mkdir()
    assert session_config(process, str(root / "x")) is process
    write(root / "y" / ".acpkit" / "agent.toml", "[context]\ncompactAt = 0.5\n")
    in_y = session_config(process, str(root / "y"))
    assert (in_y.yolo, in_y.keep_last_turns, in_y.compact_at) == (False, 2, 0.5)


def test_parent_project_hook_paths_resolve_against_that_project(root: Path) -> None:
    """A hook path of a project file found in a parent is made absolute against that project."""
    write(
        root / "p" / ".acpkit" / "agent.toml",
        "[[hooks.preToolCall]]\ncommand = '.acpkit/hooks/guard.sh'\n"
        "[[hooks.postAsk]]\ncommand = 'censor'\n",
    )
    (root / "p" / "sub").mkdir()
    in_sub = session_config(AgentConfig(), str(root / "p" / "sub"))
    assert in_sub.hooks["preToolCall"][0].command == str(root / "p" / ".acpkit/hooks/guard.sh")
    assert in_sub.hooks["postAsk"][0].command == "censor"
    in_p = session_config(AgentConfig(), str(root / "p"))
    assert in_p.hooks["preToolCall"][0].command == ".acpkit/hooks/guard.sh"


def test_malformed_session_project_file_raises_naming_it(root: Path) -> None:
    """An unusable project file is an error naming the file and the key, never defaults."""
    bad = write(root / "b" / ".acpkit" / "agent.toml", 'yolo = "no"\n')
    with pytest.raises(ConfigError, match=f"{bad}: yolo must be a boolean"):
        session_config(AgentConfig(), str(root / "b"))


# -- in an agent -------------------------------------------------------------------------

RUN_TWICE = {
    "turn": [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "one", "content": "1"}}]},
        {"chunks": ["done"]},
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "two", "content": "2"}}]},
        {"chunks": ["done"]},
    ]
}


def _harness() -> Harness:
    return make_harness(scripted(RUN_TWICE), config=AgentConfig())


def test_two_sessions_with_different_cwds_get_different_policies(root: Path) -> None:
    """One agent: the session in a yolo = false project asks; the other one does not."""
    asking = root / "asking"
    asking_file = write(asking / ".acpkit" / "agent.toml", "yolo = false\n")
    free = root / "free"
    free.mkdir()
    h = _harness()
    with captured_logs() as logs:
        strict = h.start(str(asking))
        loose = h.pair.result(
            h.pair.client.new_session(schema.NewSessionRequest(cwd=str(free), mcp_servers=[]))
        ).session_id
    assert (
        f"[acp] session {strict}: config {asking_file}; permissions: asks before changes"
        in logs.acp()
    )
    assert (
        f"[acp] session {loose}: config none; permissions: yolo (commands run without asking)"
        in logs.acp()
    )
    h.client.answers = ["allow"]
    h.raw_prompt(strict, "go")
    assert len(h.client.permission_requests) == 1
    assert h.client.permission_requests[0].session_id == strict
    h.raw_prompt(loose, "go")
    assert len(h.client.permission_requests) == 1
    assert (asking / "one").read_text() == "1"
    assert (free / "two").read_text() == "2"


def test_malformed_project_file_refuses_the_session(root: Path) -> None:
    """session/new in a cwd whose project file is broken: -32602 naming the file and key."""
    bad = write(root / "b" / ".acpkit" / "agent.toml", "[context]\nkeepLastTurn = 3\n")
    h = _harness()
    h.pair.result(h.pair.client.initialize())
    with pytest.raises(RPCError) as caught:
        h.pair.result(
            h.pair.client.new_session(schema.NewSessionRequest(cwd=str(root / "b"), mcp_servers=[]))
        )
    assert caught.value.code == -32602
    assert caught.value.data["path"] == "$.params.cwd"
    assert f"{bad}: context.keepLastTurn is not a key this file has" in caught.value.data["reason"]
    assert list(h.agent.sessions) == []


# -- a real process ----------------------------------------------------------------------


@pytest.mark.process
class ProcessCwdIsNotTheProjectTests(TestCase):
    """bob started in directory A serves a session in project B (an editor's launch)."""

    def test_session_project_yolo_false_asks_permission(self) -> Deferred[None]:
        """Process cwd A (no config), session cwd B with yolo = false: run: asks first."""
        base = tempfile.mkdtemp(prefix="bob-project-")
        os.mkdir(os.path.join(base, ".git"))
        process_cwd = os.path.join(base, "a")
        project = os.path.join(base, "b")
        home = os.path.join(base, "home")
        for directory in (process_cwd, project, home):
            os.makedirs(directory)
        config_file = write(Path(project) / ".acpkit" / "agent.toml", "yolo = false\n")
        client = RecordingClient()
        client.answers = ["reject"]
        conn = ClientConnection(client)
        agent = spawn_agent(
            reactor,
            conn.protocol,
            sys.executable,
            TWISTD,
            env={**ENV, "HOME": home},
            cwd=process_cwd,
        )
        self.addCleanup(agent.stop)

        async def run() -> None:
            await conn.initialize(client_info=schema.Implementation(name="t", version="1"))
            session = await conn.new_session(schema.NewSessionRequest(cwd=project, mcp_servers=[]))
            response = await conn.prompt(
                schema.PromptRequest(
                    session_id=session.session_id,
                    prompt=[schema.TextContentBlock(text="run: touch made")],
                )
            )
            assert response.stop_reason == schema.StopReason.END_TURN
            assert len(client.permission_requests) == 1
            assert not os.path.exists(os.path.join(project, "made"))
            line = (
                f"[acp] session {session.session_id}: config {config_file}; "
                "permissions: asks before changes"
            )
            await wait_until(lambda: line in agent.stderr_tail())
            # the process's own default (no file anywhere) is said plainly on the first line
            assert "bob " in agent.stderr_tail() and "WITHOUT ASKING" in agent.stderr_tail()

        return ensureDeferred(run())
