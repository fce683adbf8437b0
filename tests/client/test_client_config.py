"""Tests for the reference client's agents file and its starter (acpkit_client.config/starter)."""

from __future__ import annotations

import os
import pickle
import re
import sys
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acpkit_client.config import (
    BUILTIN_SOURCE,
    AgentEntry,
    AgentsFileError,
    builtin_reference_agent,
    load_agents,
    load_agents_file,
    parse_agents_text,
    project_agents_file,
    user_agents_file,
)
from acpkit_client.starter import (
    WELL_KNOWN_AGENTS,
    create_agents_file,
    starter_text,
    toml_string,
)
from tests.helpers import write

SEED_EXAMPLE = """\
[[agent]]
name    = "Bob (llama.cpp)"
command = "docker"
args    = ["agent", "serve", "acp", ".acpkit/agent.yaml"]
env     = { TELEMETRY_ENABLED = "false" }
cwd     = "."
"""

SEED_SUBTABLE = """\
[[agent]]
name    = "Bob (llama.cpp)"
command = "docker"
args    = ["agent", "serve", "acp", ".acpkit/agent.yaml"]

[agent.env]
TELEMETRY_ENABLED = "false"
"""


def agent_block(name: str, command: str = "run-agent", **extra: str) -> str:
    """Return an ``[[agent]]`` block with raw TOML values for ``extra`` keys."""
    lines = ["[[agent]]", f"name = {toml_string(name)}", f"command = {toml_string(command)}"]
    lines += [f"{key} = {value}" for key, value in extra.items()]
    return "\n".join(lines) + "\n"


def refused(tmp_path: Path, text: str) -> str:
    """Load ``text`` as an agents file, expect a refusal and return its message."""
    path = write(tmp_path / "acp.toml", text)
    with pytest.raises(AgentsFileError) as caught:
        load_agents_file(path)
    assert caught.value.path == path
    assert str(caught.value) == f"reading {path}: {caught.value.reason}"
    return caught.value.reason


# ---------------------------------------------------------------------------- format


def test_seed_example_loads(tmp_path: Path) -> None:
    """The seed's example block loads with every key as written."""
    path = write(tmp_path / "acp.toml", SEED_EXAMPLE)
    (entry,) = load_agents_file(path)
    assert entry == AgentEntry(
        name="Bob (llama.cpp)",
        command="docker",
        args=("agent", "serve", "acp", ".acpkit/agent.yaml"),
        env={"TELEMETRY_ENABLED": "false"},
        cwd=".",
        source=path,
    )


def test_env_subtable_is_the_same_as_inline_table(tmp_path: Path) -> None:
    """``[agent.env]`` gives the same entry as ``env = { ... }`` (cwd aside)."""
    inline = load_agents_file(write(tmp_path / "a" / "acp.toml", SEED_EXAMPLE))[0]
    sub = load_agents_file(write(tmp_path / "b" / "acp.toml", SEED_SUBTABLE))[0]
    assert dict(sub.env) == dict(inline.env) == {"TELEMETRY_ENABLED": "false"}
    assert sub.args == inline.args


def test_optional_keys_default(tmp_path: Path) -> None:
    """Only name and command are required; args, env, cwd default to empty/None."""
    (entry,) = load_agents_file(write(tmp_path / "acp.toml", agent_block("Bob")))
    assert entry.args == ()
    assert dict(entry.env) == {}
    assert entry.cwd is None


def test_order_is_file_order(tmp_path: Path) -> None:
    """Entries come back in the order of their blocks (menu order)."""
    text = agent_block("Zed") + agent_block("Alice") + agent_block("Mike")
    names = [entry.name for entry in load_agents_file(write(tmp_path / "acp.toml", text))]
    assert names == ["Zed", "Alice", "Mike"]


def test_empty_file_has_no_agents(tmp_path: Path) -> None:
    """An empty (or comments-only) file is valid and lists no agent."""
    assert load_agents_file(write(tmp_path / "acp.toml", "# nothing yet\n")) == ()


def test_entry_is_immutable_and_hashable() -> None:
    """Entries are frozen: env is a read-only copy and the entry can be hashed."""
    env = {"A": "1"}
    entry = AgentEntry(name="x", command="y", env=env, source="s")
    env["A"] = "2"
    assert entry.env["A"] == "1"
    with pytest.raises(TypeError):
        entry.env["A"] = "3"  # type: ignore[index]
    assert hash(entry) == hash(AgentEntry(name="x", command="y", env={"A": "1"}, source="s"))


# ---------------------------------------------------------------------------- refusals


def test_seed_message_no_name(tmp_path: Path) -> None:
    """An agent without ``name`` is refused as ``agent N has no name`` (1-based)."""
    text = agent_block("Alice") + '[[agent]]\ncommand = "x"\n'
    assert refused(tmp_path, text) == "agent 2 has no name"
    assert refused(tmp_path, '[[agent]]\ncommand = "x"\n') == "agent 1 has no name"


def test_seed_message_full_text(tmp_path: Path) -> None:
    """str() of the error is exactly the seed's line: ``reading <path>: <reason>``."""
    path = write(tmp_path / "acp.toml", '[[agent]]\ncommand = "x"\n')
    with pytest.raises(AgentsFileError) as caught:
        load_agents_file(path)
    assert str(caught.value) == f"reading {path}: agent 1 has no name"


def test_seed_message_no_command(tmp_path: Path) -> None:
    """An agent without ``command`` is refused as ``agent "Bob" has no command``."""
    assert refused(tmp_path, '[[agent]]\nname = "Bob"\n') == 'agent "Bob" has no command'


def test_empty_name_and_command_count_as_missing(tmp_path: Path) -> None:
    """An empty string is no name, and no command."""
    assert refused(tmp_path, '[[agent]]\nname = ""\ncommand = "x"\n') == "agent 1 has no name"
    assert refused(tmp_path, agent_block("Bob", "")) == 'agent "Bob" has no command'


def test_seed_message_duplicate_name(tmp_path: Path) -> None:
    """Two agents with one name in one file: ``two agents are called "Bob"``."""
    text = agent_block("Bob") + agent_block("Alice") + agent_block("Bob", "other")
    assert refused(tmp_path, text) == 'two agents are called "Bob"'


def test_seed_message_unknown_agent_key(tmp_path: Path) -> None:
    """A misspelt key is refused: ``agent.comand is not a key this file has``."""
    text = '[[agent]]\nname = "Bob"\ncomand = "docker"\n'
    assert refused(tmp_path, text) == "agent.comand is not a key this file has"


def test_unknown_top_level_key(tmp_path: Path) -> None:
    """A top-level key other than ``agent`` is refused in the same style."""
    text = '[[agents]]\nname = "Bob"\ncommand = "x"\n'
    assert refused(tmp_path, text) == "agents is not a key this file has"
    assert refused(tmp_path, "version = 1\n") == "version is not a key this file has"


def test_agent_must_be_blocks(tmp_path: Path) -> None:
    """``agent`` written as a plain value or a single table is refused."""
    assert refused(tmp_path, 'agent = "Bob"\n') == "agent must be written as [[agent]] blocks"
    assert (
        refused(tmp_path, '[agent]\nname = "Bob"\ncommand = "x"\n')
        == "agent must be written as [[agent]] blocks"
    )
    assert refused(tmp_path, "agent = [1]\n") == "agent 1 must be an [[agent]] table"


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"args": '"--acp"'}, 'agent "Bob": args must be a list of strings'),
        ({"args": '["a", 1]'}, 'agent "Bob": args must be a list of strings'),
        ({"env": '"A=1"'}, 'agent "Bob": env must be a table of strings'),
        ({"env": "{ FOO = 1 }"}, 'agent "Bob": env.FOO must be a string'),
        ({"env": "{ FOO = { BAR = 'x' } }"}, 'agent "Bob": env.FOO must be a string'),
        ({"cwd": "1"}, 'agent "Bob": cwd must be a string'),
        ({"cwd": '["."]'}, 'agent "Bob": cwd must be a string'),
    ],
)
def test_wrong_value_types(tmp_path: Path, extra: dict[str, str], reason: str) -> None:
    """A value of the wrong type is refused, naming the agent and the key."""
    assert refused(tmp_path, agent_block("Bob", **extra)) == reason


def test_wrong_name_and_command_types(tmp_path: Path) -> None:
    """A name or command that is not a string is refused."""
    assert refused(tmp_path, '[[agent]]\nname = 3\ncommand = "x"\n') == (
        "agent 1: name must be a string"
    )
    assert refused(tmp_path, '[[agent]]\nname = "Bob"\ncommand = ["x"]\n') == (
        'agent "Bob": command must be a string'
    )


def test_quote_in_name_is_escaped(tmp_path: Path) -> None:
    """A name holding a quote is shown escaped, so the message stays unambiguous."""
    assert refused(tmp_path, "[[agent]]\nname = 'B\"ob'\n") == 'agent "B\\"ob" has no command'


def test_invalid_toml_position(tmp_path: Path) -> None:
    """Invalid TOML names the line and column of the problem."""
    text = agent_block("Bob") + "[[agent]\n"
    reason = refused(tmp_path, text)
    assert reason.startswith("invalid TOML at line 4, column 8: ")
    assert "]]" in reason


def test_invalid_toml_at_end_of_document(tmp_path: Path) -> None:
    """An error at the end of the text gets the position just after the last character."""
    reason = refused(tmp_path, "[[agent]]\nname = ")
    assert reason == "invalid TOML at line 2, column 8: Invalid value"


def test_duplicate_key_is_invalid_toml(tmp_path: Path) -> None:
    """Both ``env = {...}`` and ``[agent.env]`` in one block is a TOML error."""
    text = SEED_EXAMPLE + "[agent.env]\nX = 'y'\n"
    assert refused(tmp_path, text).startswith("invalid TOML at line 7, column ")


def test_refused_whole_not_half_loaded(tmp_path: Path) -> None:
    """One bad block among good ones refuses the whole file."""
    text = agent_block("A") + agent_block("B") + '[[agent]]\nname = "C"\n' + agent_block("D")
    assert refused(tmp_path, text) == 'agent "C" has no command'


def test_unknown_key_reported_before_missing_command(tmp_path: Path) -> None:
    """A misspelt ``command`` is reported as the unknown key, the more useful message."""
    text = '[[agent]]\nname = "Bob"\ncommnd = "x"\n'
    assert refused(tmp_path, text) == "agent.commnd is not a key this file has"


def test_not_utf8(tmp_path: Path) -> None:
    """A file that is not UTF-8 is refused with the position of the bad byte."""
    path = tmp_path / "acp.toml"
    path.write_bytes(b'[[agent]]\nname = "B\xe9b"\n')
    with pytest.raises(AgentsFileError) as caught:
        load_agents_file(str(path))
    assert caught.value.reason == "not UTF-8 text: invalid byte at line 2, column 10"


def test_directory_is_an_error(tmp_path: Path) -> None:
    """A directory where the file should be is an error, not a missing file."""
    (tmp_path / "acp.toml").mkdir()
    with pytest.raises(AgentsFileError) as caught:
        load_agents_file(str(tmp_path / "acp.toml"))
    assert caught.value.reason == "Is a directory"


@pytest.mark.skipif(
    sys.platform == "win32" or (hasattr(os, "geteuid") and os.geteuid() == 0),
    reason="permissions are not enforced for root",
)
def test_unreadable_is_an_error(tmp_path: Path) -> None:
    """A file that cannot be read is an error carrying the OS reason."""
    path = write(tmp_path / "acp.toml", agent_block("Bob"))
    os.chmod(path, 0)
    try:
        with pytest.raises(AgentsFileError) as caught:
            load_agents_file(path)
    finally:
        os.chmod(path, 0o600)
    assert str(caught.value) == f"reading {path}: Permission denied"


def test_missing_file_passes_through(tmp_path: Path) -> None:
    """A missing file raises FileNotFoundError, which callers treat as absent."""
    with pytest.raises(FileNotFoundError):
        load_agents_file(str(tmp_path / "nope" / "acp.toml"))


def test_error_pickles() -> None:
    """AgentsFileError survives pickling (e.g. across a process boundary) unchanged."""
    error = AgentsFileError("/p/acp.toml", "agent 1 has no name")
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.path, copy.reason) == (str(error), error.path, error.reason)


@given(
    st.lists(
        st.tuples(
            st.text(min_size=1, max_size=20),
            st.text(min_size=1, max_size=20),
            st.lists(st.text(max_size=10), max_size=4),
            st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=10), max_size=3),
        ),
        max_size=4,
        unique_by=lambda agent: agent[0],
    )
)
def test_any_written_entry_reads_back(
    agents: list[tuple[str, str, list[str], dict[str, str]]],
) -> None:
    """Any names, commands, args and env written as TOML strings read back unchanged."""
    blocks = []
    for name, command, args, env in agents:
        env_text = ", ".join(f"{toml_string(k)} = {toml_string(v)}" for k, v in env.items())
        blocks.append(
            agent_block(
                name,
                command,
                args="[" + ", ".join(toml_string(arg) for arg in args) + "]",
                env="{ " + env_text + " }",
            )
        )
    entries = parse_agents_text("/x/acp.toml", "".join(blocks))
    assert [(e.name, e.command, list(e.args), dict(e.env)) for e in entries] == agents


@given(st.text())
def test_toml_string_round_trips(value: str) -> None:
    """toml_string writes any text so that tomllib reads the same text back."""
    assert tomllib.loads(f"x = {toml_string(value)}")["x"] == value


# ---------------------------------------------------------------------------- entries


def test_resolved_cwd(tmp_path: Path) -> None:
    """cwd is relative to the project root, defaults to it, and may be absolute."""
    root = str(tmp_path)
    assert AgentEntry(name="a", command="c", source="s").resolved_cwd(root) == root
    assert AgentEntry(name="a", command="c", cwd=".", source="s").resolved_cwd(root) == root
    sub = AgentEntry(name="a", command="c", cwd="sub/../tools", source="s")
    assert sub.resolved_cwd(root) == os.path.join(root, "tools")
    absolute = AgentEntry(name="a", command="c", cwd="/srv", source="s")
    assert absolute.resolved_cwd(root) == "/srv"


def test_command_line_is_shell_quoted() -> None:
    """command_line() shows the command and its arguments, quoted like a shell would."""
    entry = AgentEntry(name="a", command="docker", args=("run", "my image", "&&"), source="s")
    assert entry.command_line() == "docker run 'my image' '&&'"


def test_find_executable_in_path(tmp_path: Path) -> None:
    """A bare command is looked up in the given PATH, and None comes back if absent."""
    bindir = tmp_path / "bin"
    tool = write(bindir / "my-agent", "#!/bin/sh\n")
    os.chmod(tool, 0o755)
    entry = AgentEntry(name="a", command="my-agent", source="s")
    assert entry.find_executable(str(tmp_path), {"PATH": str(bindir)}) == tool
    assert entry.find_executable(str(tmp_path), {"PATH": str(tmp_path)}) is None


def test_find_executable_with_separator(tmp_path: Path) -> None:
    """A command with a separator is not looked up in PATH but taken from the agent's cwd."""
    tool = write(tmp_path / "tools" / "agent.sh", "#!/bin/sh\n")
    os.chmod(tool, 0o755)
    entry = AgentEntry(name="a", command="./agent.sh", cwd="tools", source="s")
    assert entry.find_executable(str(tmp_path), {"PATH": str(tmp_path / "tools")}) == tool
    relative = AgentEntry(name="a", command="tools/agent.sh", source="s")
    assert relative.find_executable(str(tmp_path), {"PATH": ""}) == tool
    missing = AgentEntry(name="a", command="./nothing", source="s")
    assert missing.find_executable(str(tmp_path), {"PATH": str(tmp_path)}) is None


def test_child_environment_env_wins() -> None:
    """env is added over the base environment and a name given in the entry wins."""
    entry = AgentEntry(name="a", command="c", env={"A": "mine", "B": "new"}, source="s")
    assert entry.child_environment({"A": "theirs", "C": "kept"}) == {
        "A": "mine",
        "B": "new",
        "C": "kept",
    }


def test_builtin_reference_agent() -> None:
    """The built-in entry runs ``twistd -n acp-agent --engine echo`` through this Python."""
    entry = builtin_reference_agent("/opt/py/bin/python3")
    assert entry.command == "/opt/py/bin/python3"
    assert entry.args[-4:] == ("-n", "acp-agent", "--engine", "echo")
    assert entry.source == BUILTIN_SOURCE
    assert entry.cwd is None
    assert builtin_reference_agent().command == sys.executable


@pytest.mark.process
def test_builtin_reference_agent_reaches_twistd() -> None:
    """The built-in command line really runs twistd's option parser (checked with --help)."""
    import subprocess

    entry = builtin_reference_agent()
    args = [entry.command, *entry.args[:2], "--help"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0
    assert "--nodaemon" in result.stdout


# ---------------------------------------------------------------------------- locations


def test_user_file_default_location() -> None:
    """Without ACPKIT_DIR the user file is ~/.config/acpkit/acp.toml."""
    assert user_agents_file({"HOME": "/home/u"}) == "/home/u/.config/acpkit/acp.toml"


def test_user_file_acpkit_dir() -> None:
    """ACPKIT_DIR replaces the directory where the user file is looked up."""
    assert user_agents_file({"HOME": "/home/u", "ACPKIT_DIR": "/etc/ak"}) == "/etc/ak/acp.toml"
    assert user_agents_file({"HOME": "/home/u", "ACPKIT_DIR": ""}) == (
        "/home/u/.config/acpkit/acp.toml"
    )


def test_project_file_location(tmp_path: Path) -> None:
    """The project file is <root>/.acpkit/acp.toml, with no upward search."""
    assert project_agents_file(str(tmp_path)) == str(tmp_path / ".acpkit" / "acp.toml")


def test_no_upward_search(tmp_path: Path) -> None:
    """A project file in a parent directory is not read for a sub-directory project."""
    write(tmp_path / ".acpkit" / "acp.toml", agent_block("Parent"))
    sub = tmp_path / "sub"
    sub.mkdir()
    config = load_agents(str(sub), {"ACPKIT_DIR": str(tmp_path / "nouser")})
    assert config.builtin_default
    assert config.files_read == ()


# ---------------------------------------------------------------------------- merging


def env_for(tmp_path: Path) -> dict[str, str]:
    """An environment whose user directory is ``tmp_path/user``."""
    return {"ACPKIT_DIR": str(tmp_path / "user"), "HOME": str(tmp_path / "home")}


def test_builtin_default_when_no_file(tmp_path: Path) -> None:
    """With no agents file anywhere, the built-in reference agent is the menu."""
    config = load_agents(str(tmp_path / "project"), env_for(tmp_path))
    assert config.builtin_default
    assert config.agents == (builtin_reference_agent(),)
    assert config.files_read == ()
    assert config.errors == ()


def test_user_only(tmp_path: Path) -> None:
    """The user file alone is loaded and reported as read."""
    user = write(tmp_path / "user" / "acp.toml", agent_block("A") + agent_block("B"))
    config = load_agents(str(tmp_path / "project"), env_for(tmp_path))
    assert [a.name for a in config.agents] == ["A", "B"]
    assert config.files_read == (user,)
    assert not config.builtin_default
    assert config.find("B").source == user


def test_project_replaces_user_in_place(tmp_path: Path) -> None:
    """A project entry replaces the user entry of the same name at that entry's position."""
    user = write(
        tmp_path / "user" / "acp.toml",
        agent_block("A") + agent_block("Bob", "user-bob") + agent_block("C"),
    )
    project = write(
        tmp_path / "project" / ".acpkit" / "acp.toml",
        agent_block("P1") + agent_block("Bob", "project-bob") + agent_block("P2"),
    )
    config = load_agents(str(tmp_path / "project"), env_for(tmp_path))
    assert [a.name for a in config.agents] == ["A", "Bob", "C", "P1", "P2"]
    assert config.find("Bob").command == "project-bob"
    assert config.find("Bob").source == project
    assert config.find("A").source == user
    assert config.files_read == (user, project)


def test_find_unknown_name(tmp_path: Path) -> None:
    """find() raises KeyError for a name that is not in the merged set."""
    config = load_agents(str(tmp_path), env_for(tmp_path))
    with pytest.raises(KeyError):
        config.find("nobody")


def test_refused_file_is_reported_and_others_still_load(tmp_path: Path) -> None:
    """A refused user file is an error; the project file still loads; no built-in then."""
    user = write(tmp_path / "user" / "acp.toml", '[[agent]]\nname = "Bob"\n')
    project = write(tmp_path / "project" / ".acpkit" / "acp.toml", agent_block("P"))
    config = load_agents(str(tmp_path / "project"), env_for(tmp_path))
    assert [a.name for a in config.agents] == ["P"]
    assert config.files_read == (project,)
    assert [str(e) for e in config.errors] == [f'reading {user}: agent "Bob" has no command']
    assert not config.builtin_default


def test_only_file_refused_means_no_builtin(tmp_path: Path) -> None:
    """An existing but refused file is not 'no file': the menu is empty and the error shown."""
    write(tmp_path / "project" / ".acpkit" / "acp.toml", "agents = 1\n")
    config = load_agents(str(tmp_path / "project"), env_for(tmp_path))
    assert config.agents == ()
    assert len(config.errors) == 1
    assert not config.builtin_default


def test_unreadable_user_dir_entry_is_error(tmp_path: Path) -> None:
    """A directory named acp.toml in ACPKIT_DIR is reported, not skipped as missing."""
    (tmp_path / "user" / "acp.toml").mkdir(parents=True)
    config = load_agents(str(tmp_path / "project"), env_for(tmp_path))
    assert [e.reason for e in config.errors] == ["Is a directory"]
    assert not config.builtin_default


# ---------------------------------------------------------------------------- starter


def test_create_agents_file_loads(tmp_path: Path) -> None:
    """The starter file is written under .acpkit/ and loads with the reference agent only."""
    path = create_agents_file(str(tmp_path))
    assert path == project_agents_file(str(tmp_path))
    (entry,) = load_agents_file(path)
    assert (entry.name, entry.command, entry.args) == (
        builtin_reference_agent().name,
        sys.executable,
        builtin_reference_agent().args,
    )
    config = load_agents(str(tmp_path), {"ACPKIT_DIR": str(tmp_path / "nouser")})
    assert config.files_read == (path,)
    assert not config.builtin_default


def test_create_agents_file_refuses_to_overwrite(tmp_path: Path) -> None:
    """An existing agents file is never overwritten: FileExistsError names it."""
    path = write(tmp_path / ".acpkit" / "acp.toml", "# mine\n")
    with pytest.raises(FileExistsError) as caught:
        create_agents_file(str(tmp_path))
    assert caught.value.filename == path
    assert "already exists" in str(caught.value)
    assert Path(path).read_text(encoding="utf-8") == "# mine\n"


def _uncomment_block(text: str, name: str) -> str:
    """Remove the ``# `` of the commented block whose name line is ``name``."""
    lines = text.split("\n")
    start = lines.index(f"# name    = {toml_string(name)}") - 1
    assert lines[start] == "# [[agent]]"
    end = start
    while end < len(lines) and lines[end].startswith("# "):
        end += 1
    lines[start:end] = [line[2:] for line in lines[start:end]]
    return "\n".join(lines)


@pytest.mark.parametrize("known", WELL_KNOWN_AGENTS, ids=[agent[1] for agent in WELL_KNOWN_AGENTS])
def test_uncommenting_each_entry_loads(
    tmp_path: Path, known: tuple[str, str, str, tuple[str, ...]]
) -> None:
    """Uncommenting any well-known agent's block still gives a file that loads."""
    _comment, name, command, args = known
    text = _uncomment_block(starter_text(), name)
    entries = parse_agents_text("/p/acp.toml", text)
    assert [e.name for e in entries] == [builtin_reference_agent().name, name]
    assert (entries[1].command, entries[1].args) == (command, args)


def test_uncommenting_all_entries_loads() -> None:
    """Uncommenting every block at once loads all six agents, in the starter's order."""
    text = starter_text("/usr/bin/python3")
    for _comment, name, _command, _args in WELL_KNOWN_AGENTS:
        text = _uncomment_block(text, name)
    entries = parse_agents_text("/p/acp.toml", text)
    assert [e.name for e in entries] == [builtin_reference_agent().name] + [
        agent[1] for agent in WELL_KNOWN_AGENTS
    ]


def test_starter_well_known_commands() -> None:
    """The starter offers the well-known agents with their ACP command lines."""
    lines = {name: (command, args) for _c, name, command, args in WELL_KNOWN_AGENTS}
    assert lines == {
        "Gemini CLI": ("gemini", ("--acp",)),
        "Claude": ("claude-agent-acp", ()),
        "Codex": ("codex-acp", ()),
        "Goose": ("goose", ("acp",)),
        "OpenCode": ("opencode", ("acp",)),
    }
    for comment, *_rest in WELL_KNOWN_AGENTS:
        assert "\n" not in comment


def test_starter_python_path_with_odd_characters(tmp_path: Path) -> None:
    """A Python path with quotes or backslashes is escaped so the file still loads."""
    python = '/opt/we"ird\\path/python'
    (entry,) = parse_agents_text("/p/acp.toml", starter_text(python))
    assert entry.command == python
    assert re.search(r"^command = ", starter_text(python), re.M)


def test_permission_error_reported_even_as_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OS refusal to open the file (here simulated) is an error with the OS reason."""
    path = write(tmp_path / "acp.toml", agent_block("Bob"))

    def denied(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr("acpkit_client.config.open", denied, raising=False)
    with pytest.raises(AgentsFileError) as caught:
        load_agents_file(path)
    assert str(caught.value) == f"reading {path}: Permission denied"
    config = load_agents(str(tmp_path), {"ACPKIT_DIR": str(tmp_path)})
    assert [e.reason for e in config.errors] == ["Permission denied", "Permission denied"]


def test_dot_acpkit_being_a_file_is_an_error(tmp_path: Path) -> None:
    """A file named .acpkit in the project makes the project file unusable: reported."""
    (tmp_path / ".acpkit").write_text("oops", encoding="utf-8")
    config = load_agents(str(tmp_path), {"ACPKIT_DIR": str(tmp_path / "nouser")})
    assert [e.reason for e in config.errors] == ["Not a directory"]


DOC = Path(__file__).resolve().parent.parent.parent / "docs" / "reference" / "agents-file.md"

DOC_CASES = [
    '[[agent]]\ncommand = "x"\n',
    '[[agent]]\nname = "Bob"\n',
    agent_block("Bob") + agent_block("Bob"),
    '[[agent]]\nname = "Bob"\ncomand = "x"\n',
    "[[agents]]\n",
    'agent = "x"\n',
    "agent = [1]\n",
    '[[agent]]\nname = 1\ncommand = "x"\n',
    '[[agent]]\nname = "Bob"\ncommand = 1\n',
    agent_block("Bob", args="[1]"),
    agent_block("Bob", env="1"),
    agent_block("Bob", env="{ FOO = 1 }"),
    agent_block("Bob", cwd="1"),
    agent_block("Bob") + "[[agent]\n",
]


@pytest.mark.parametrize("text", DOC_CASES)
def test_documented_messages_are_the_real_ones(tmp_path: Path, text: str) -> None:
    """Each message in docs/reference/agents-file.md is exactly what the code says."""
    path = write(tmp_path / "acp.toml", text)
    with pytest.raises(AgentsFileError) as caught:
        load_agents_file(path)
    shown = str(caught.value).replace(str(tmp_path), "…")
    assert f"`{shown}`" in DOC.read_text(encoding="utf-8")


def test_documented_not_utf8_message(tmp_path: Path) -> None:
    """The documented not-UTF-8 message is the real one."""
    path = tmp_path / "acp.toml"
    path.write_bytes(b'[[agent]]\nname = "B\xe9b"\n')
    with pytest.raises(AgentsFileError) as caught:
        load_agents_file(str(path))
    shown = str(caught.value).replace(str(tmp_path), "…")
    assert f"`{shown}`" in DOC.read_text(encoding="utf-8")
