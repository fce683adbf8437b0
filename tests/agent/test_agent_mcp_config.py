"""bob's ``[mcp.servers.<name>]`` tables in agent.toml: typed servers, strict errors, layering."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acpkit_agent.config import (
    AgentConfig,
    ConfigError,
    load_config,
    parse_config,
    session_config,
)
from acpkit_agent.mcp_config import McpHttpServer, McpStdioServer
from tests.helpers import write

VALID = """
yolo = true

[mcp.servers.time]
command = "uvx"
args = ["mcp-server-time", "--local-timezone=UTC"]
env = { TZ = "UTC", EMPTY = "" }
cwd = "tools"
permissions = "ask"
tools = ["get_current_time"]

[mcp.servers.everything]
url = "https://mcp.example/mcp"
headers = { Authorization = "Bearer token" }

[mcp.servers.git-2]
command = "mcp-server-git"
"""


def test_servers_parse_to_typed_objects_in_file_order(tmp_path: Path) -> None:
    """Each table becomes a stdio or HTTP server with its keys; absent keys take defaults."""
    path = write(tmp_path / "agent.toml", VALID)
    config = load_config(str(path))
    assert config.mcp_servers == (
        McpStdioServer(
            name="time",
            command="uvx",
            args=("mcp-server-time", "--local-timezone=UTC"),
            env={"TZ": "UTC", "EMPTY": ""},
            cwd="tools",
            permissions="ask",
            tools=("get_current_time",),
        ),
        McpHttpServer(
            name="everything",
            url="https://mcp.example/mcp",
            headers={"Authorization": "Bearer token"},
        ),
        McpStdioServer(name="git-2", command="mcp-server-git"),
    )
    time, everything, git = config.mcp_servers
    assert (time.transport, everything.transport) == ("stdio", "http")
    assert everything.permissions is None and everything.tools is None
    assert git.args == () and dict(git.env) == {} and git.cwd is None


def test_no_mcp_table_means_no_servers() -> None:
    """Without ``[mcp]`` (or with an empty one) bob has no MCP servers."""
    assert AgentConfig().mcp_servers == ()
    assert parse_config({}, "f.toml").mcp_servers == ()
    assert parse_config({"mcp": {}}, "f.toml").mcp_servers == ()
    assert parse_config({"mcp": {"servers": {}}}, "f.toml").mcp_servers == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("mcp = 3\n", "mcp must be a table, not 3"),
        ("[mcp]\nserver = {}\n", "mcp.server is not a key this file has"),
        ("[mcp]\nservers = []\n", "mcp.servers must be a table"),
        ("[mcp.servers]\nx = 1\n", "mcp.servers.x must be a table, not 1"),
        ('[mcp.servers."a b"]\ncommand = "x"\n', "mcp.servers.a b: a server name is letters"),
        ("[mcp.servers.x]\n", "mcp.servers.x needs command (stdio) or url"),
        ('[mcp.servers.x]\ncommand = "a"\nurl = "http://h"\n', "mcp.servers.x has both"),
        ('[mcp.servers.x]\ncomand = "a"\n', "mcp.servers.x.comand is not a key this file has"),
        ("[mcp.servers.x]\ncommand = 3\n", "mcp.servers.x.command must be a string, not 3"),
        ('[mcp.servers.x]\ncommand = " "\n', "mcp.servers.x.command must not be empty"),
        ('[mcp.servers.x]\ncommand = "a"\nargs = "b"\n', "mcp.servers.x.args must be a list"),
        ('[mcp.servers.x]\ncommand = "a"\nargs = [1]\n', "mcp.servers.x.args must hold strings"),
        ('[mcp.servers.x]\ncommand = "a"\nenv = ["A"]\n', "mcp.servers.x.env must be a table"),
        ('[mcp.servers.x]\ncommand = "a"\nenv = {A = 1}\n', "mcp.servers.x.env.A must be a string"),
        ('[mcp.servers.x]\ncommand = "a"\ncwd = 1\n', "mcp.servers.x.cwd must be a string"),
        (
            '[mcp.servers.x]\ncommand = "a"\nheaders = {}\n',
            "mcp.servers.x.headers is for url servers",
        ),
        ('[mcp.servers.x]\nurl = "http://h"\nargs = []\n', "mcp.servers.x.args is for command"),
        ('[mcp.servers.x]\nurl = "ftp://h"\n', "mcp.servers.x.url must be an http:// or https://"),
        ("[mcp.servers.x]\nurl = 5\n", "mcp.servers.x.url must be a string"),
        (
            '[mcp.servers.x]\nurl = "http://h"\nheaders = {A = true}\n',
            "mcp.servers.x.headers.A must be a string",
        ),
        (
            '[mcp.servers.x]\ncommand = "a"\npermissions = "never"\n',
            'mcp.servers.x.permissions must be "ask" (absent: follow yolo)',
        ),
        ('[mcp.servers.x]\ncommand = "a"\ntools = "t"\n', "mcp.servers.x.tools must be a list"),
        (
            '[mcp.servers.x]\ncommand = "a"\ntools = [""]\n',
            "mcp.servers.x.tools must hold non-empty strings",
        ),
    ],
)
def test_bad_tables_name_the_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    """Unknown keys, wrong types and contradictions: a ConfigError naming file and key."""
    path = write(tmp_path / ".acpkit" / "agent.toml", text)
    with pytest.raises(ConfigError) as caught:
        load_config(None, cwd=str(tmp_path), home=str(tmp_path))
    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)


STDIO_KEYS: dict[str, Any] = {
    "command": st.text(min_size=1).filter(str.strip),
    "args": st.lists(st.text()),
    "env": st.dictionaries(st.text(min_size=1), st.text()),
    "cwd": st.text(min_size=1).filter(str.strip),
    "permissions": st.just("ask"),
    "tools": st.lists(st.text(min_size=1).filter(str.strip)),
}
TOML_VALUES = st.one_of(
    st.integers(),
    st.booleans(),
    st.floats(allow_nan=False),
    st.text(),
    st.lists(st.integers(), min_size=1),
    st.dictionaries(st.text(min_size=1), st.integers(), min_size=1),
)


def _wrong_for(key: str) -> st.SearchStrategy[Any]:
    """TOML values of a type the key does not take."""
    if key in ("command", "cwd", "permissions"):
        return TOML_VALUES.filter(lambda v: not isinstance(v, str))
    if key in ("args", "tools"):
        return TOML_VALUES.filter(lambda v: not isinstance(v, list))
    return TOML_VALUES.filter(lambda v: not isinstance(v, dict))


@given(
    st.sampled_from(sorted(STDIO_KEYS)).flatmap(
        lambda key: st.tuples(st.just(key), _wrong_for(key))
    ),
    st.fixed_dictionaries({}, optional=STDIO_KEYS),
)
def test_any_wrong_type_is_an_error_naming_the_key(
    case: tuple[str, Any], good: dict[str, Any]
) -> None:
    """Whatever else the table holds, a value of the wrong type names ``mcp.servers.s.<key>``."""
    key, wrong = case
    table = {"command": "srv", **good, key: wrong}
    with pytest.raises(ConfigError) as caught:
        parse_config({"mcp": {"servers": {"s": table}}}, "/etc/agent.toml")
    assert str(caught.value).startswith(f"/etc/agent.toml: mcp.servers.s.{key}")


@given(
    st.fixed_dictionaries(
        {"command": STDIO_KEYS["command"]},
        optional={k: v for k, v in STDIO_KEYS.items() if k != "command"},
    )
)
def test_any_well_typed_stdio_table_parses(table: dict[str, Any]) -> None:
    """Every well-typed stdio table parses, keeping each value it was given."""
    (server,) = parse_config({"mcp": {"servers": {"s": table}}}, "f.toml").mcp_servers
    assert isinstance(server, McpStdioServer)
    assert server.command == table["command"]
    assert server.args == tuple(table.get("args", ()))
    assert dict(server.env) == table.get("env", {})
    assert server.tools == (tuple(table["tools"]) if "tools" in table else None)


def test_layers_merge_servers_by_name(tmp_path: Path) -> None:
    """A project file adds servers to the user's and replaces a same-named one whole."""
    home, project = tmp_path / "home", tmp_path / "project"
    write(
        home / ".config" / "acpkit" / "agent.toml",
        '[mcp.servers.a]\ncommand = "a"\nargs = ["x"]\n[mcp.servers.b]\nurl = "http://b"\n',
    )
    write(project / ".acpkit" / "agent.toml", '[mcp.servers.a]\ncommand = "a2"\n')
    config = load_config(None, cwd=str(project), home=str(home))
    assert config.mcp_servers == (
        McpStdioServer(name="a", command="a2"),
        McpHttpServer(name="b", url="http://b"),
    )


def test_servers_are_per_process(tmp_path: Path) -> None:
    """A session's project file with other MCP servers is listed as ignored, not obeyed."""
    process_dir, other = tmp_path / "p", tmp_path / "other"
    write(process_dir / ".acpkit" / "agent.toml", '[mcp.servers.a]\ncommand = "a"\n')
    (process_dir / ".git").mkdir()
    write(other / ".acpkit" / "agent.toml", '[mcp.servers.z]\ncommand = "z"\n')
    process = load_config(None, cwd=str(process_dir), home=str(tmp_path / "home"))
    session = session_config(process, str(other))
    assert session.mcp_servers == process.mcp_servers
    assert "mcp" in session.ignored


def test_documented_example_parses() -> None:
    """The agent.toml example of docs/reference/agent.md's MCP section is a valid file."""
    doc = Path(__file__).resolve().parent.parent.parent / "docs" / "reference" / "agent.md"
    text = doc.read_text(encoding="utf-8")
    start = text.index("```toml\n[mcp.servers.time]")
    block = text[start + len("```toml\n") : text.index("```", start + 7)]
    config = parse_config(tomllib.loads(block), "agent.toml")
    assert [server.name for server in config.mcp_servers] == ["time", "everything"]
