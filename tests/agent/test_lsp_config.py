"""bob's ``[lsp.servers.<name>]`` tables in agent.toml: typed servers, strict errors, layering."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from acpkit_agent.config import ConfigError, load_config, parse_config, session_config
from acpkit_agent.lsp_config import LspServerConfig
from tests.helpers import write

VALID = """
[lsp.servers.pyright]
command = "pyright-langserver"
args = ["--stdio"]
files = ["*.py", "*.pyi"]
initializationOptions = { python = { analysis = { typeCheckingMode = "basic" } } }
env = { NODE_OPTIONS = "--max-old-space-size=2048" }

[lsp.servers.templates]
command = "/opt/ls/bin/jinja-ls"
files = ["templates/*.html"]
languageId = "jinja"
"""


def test_servers_parse_to_typed_objects_in_file_order(tmp_path: Path) -> None:
    """Each table becomes an LspServerConfig with its keys; absent keys take defaults."""
    config = load_config(str(write(tmp_path / "agent.toml", VALID)))
    assert config.lsp_servers == (
        LspServerConfig(
            name="pyright",
            command="pyright-langserver",
            args=("--stdio",),
            files=("*.py", "*.pyi"),
            initialization_options={"python": {"analysis": {"typeCheckingMode": "basic"}}},
            env={"NODE_OPTIONS": "--max-old-space-size=2048"},
        ),
        LspServerConfig(
            name="templates",
            command="/opt/ls/bin/jinja-ls",
            files=("templates/*.html",),
            language_id="jinja",
        ),
    )


def test_no_lsp_table_means_no_servers() -> None:
    """Without ``[lsp]`` bob has no language server: there is no default one."""
    assert parse_config({}, "agent.toml").lsp_servers == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lsp = 1", "lsp must be a table, not 1"),
        ("[lsp]\nserver = 1", "lsp.server is not a key this file has"),
        ("[lsp]\nservers = 1", "lsp.servers must be a table, not 1"),
        ("[lsp.servers]\npy = 1", "lsp.servers.py must be a table, not 1"),
        (
            '[lsp.servers."a b"]\ncommand = "x"\nfiles = ["*"]',
            "lsp.servers.a b: a server name is letters, digits, _ and - only",
        ),
        ('[lsp.servers.py]\nfiles = ["*.py"]', "lsp.servers.py needs command"),
        ('[lsp.servers.py]\ncommand = "pylsp"', "lsp.servers.py needs files"),
        (
            '[lsp.servers.py]\ncommand = "pylsp"\nfiles = ["*.py"]\nlanguage = "python"',
            "lsp.servers.py.language is not a key this file has",
        ),
        (
            '[lsp.servers.py]\ncommand = "pylsp"\nfiles = ["*.py"]\ninitialization_options = {}',
            "lsp.servers.py.initialization_options is not a key this file has",
        ),
        (
            '[lsp.servers.py]\ncommand = ""\nfiles = ["*.py"]',
            "lsp.servers.py.command must not be empty",
        ),
        (
            '[lsp.servers.py]\ncommand = ["pylsp"]\nfiles = ["*.py"]',
            "lsp.servers.py.command must be a string, not ['pylsp']",
        ),
        (
            '[lsp.servers.py]\ncommand = "pylsp"\nfiles = "*.py"',
            "lsp.servers.py.files must be a list of strings, not '*.py'",
        ),
        (
            '[lsp.servers.py]\ncommand = "pylsp"\nfiles = []',
            'lsp.servers.py.files must name at least one pattern (like "*.py")',
        ),
        (
            '[lsp.servers.py]\ncommand = "pylsp"\nfiles = [""]',
            "lsp.servers.py.files must hold non-empty strings, not ''",
        ),
        (
            '[lsp.servers.py]\ncommand = "pylsp"\nfiles = ["*.py"]\nargs = "-v"',
            "lsp.servers.py.args must be a list of strings, not '-v'",
        ),
        (
            '[lsp.servers.py]\ncommand = "pylsp"\nfiles = ["*.py"]\nargs = [1]',
            "lsp.servers.py.args must hold strings, not 1",
        ),
        (
            '[lsp.servers.py]\ncommand = "pylsp"\nfiles = ["*.py"]\ninitializationOptions = 1',
            "lsp.servers.py.initializationOptions must be a table, not 1",
        ),
        (
            '[lsp.servers.py]\ncommand = "pylsp"\nfiles = ["*.py"]\nenv = { A = 1 }',
            "lsp.servers.py.env.A must be a string, not 1",
        ),
        (
            '[lsp.servers.py]\ncommand = "pylsp"\nfiles = ["*.py"]\nlanguageId = 3',
            "lsp.servers.py.languageId must be a string, not 3",
        ),
    ],
)
def test_bad_tables_name_the_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    """An unknown key or a wrong type is a startup error naming the file and the key."""
    path = write(tmp_path / "agent.toml", text)
    with pytest.raises(ConfigError) as caught:
        load_config(str(path))
    assert str(caught.value) == f"{path}: {message}"


def test_layers_merge_servers_by_name(tmp_path: Path) -> None:
    """A project file adds servers to the user's and replaces a same-named one whole."""
    home, project = tmp_path / "home", tmp_path / "project"
    write(
        home / ".config" / "acpkit" / "agent.toml",
        '[lsp.servers.a]\ncommand = "a"\nargs = ["x"]\nfiles = ["*.a"]\n'
        '[lsp.servers.b]\ncommand = "b"\nfiles = ["*.b"]\n',
    )
    write(
        project / ".acpkit" / "agent.toml",
        '[lsp.servers.a]\ncommand = "a2"\nfiles = ["*.a"]\n',
    )
    config = load_config(None, cwd=str(project), home=str(home))
    assert config.lsp_servers == (
        LspServerConfig(name="a", command="a2", files=("*.a",)),
        LspServerConfig(name="b", command="b", files=("*.b",)),
    )


def test_servers_are_per_process(tmp_path: Path) -> None:
    """A session's project file with other language servers is listed as ignored."""
    process_dir, other = tmp_path / "p", tmp_path / "other"
    write(process_dir / ".acpkit" / "agent.toml", '[lsp.servers.a]\ncommand = "a"\nfiles = ["*"]\n')
    (process_dir / ".git").mkdir()
    write(other / ".acpkit" / "agent.toml", '[lsp.servers.z]\ncommand = "z"\nfiles = ["*"]\n')
    process = load_config(None, cwd=str(process_dir), home=str(tmp_path / "home"))
    session = session_config(process, str(other))
    assert session.lsp_servers == process.lsp_servers
    assert "lsp" in session.ignored


@pytest.mark.parametrize(
    ("patterns", "path", "served"),
    [
        (("*.py",), "main.py", True),
        (("*.py",), "src/deep/main.py", True),
        (("*.py",), "/home/user/src/main.py", True),
        (("*.py",), "main.pyc", False),
        (("*.PY",), "main.py", False),
        (("src/*.py",), "src/main.py", True),
        (("src/*.py",), "lib/main.py", False),
        (("./src/*.py",), "src/main.py", True),
        (("src/**/*.py",), "src/a/b/main.py", True),
        (("*.js", "*.ts"), "app.ts", True),
    ],
)
def test_files_patterns(patterns: tuple[str, ...], path: str, served: bool) -> None:
    """Without ``/`` a pattern matches the file name; with ``/`` the path under the root."""
    server = LspServerConfig(name="x", command="x", files=patterns)
    assert server.serves(path, "/root") is served


def test_documented_example_parses() -> None:
    """The agent.toml example of docs/reference/agent.md's language-server section is valid."""
    doc = Path(__file__).resolve().parent.parent.parent / "docs" / "reference" / "agent.md"
    text = doc.read_text(encoding="utf-8")
    start = text.index("```toml\n[lsp.servers.")
    block = text[start + len("```toml\n") : text.index("```", start + 7)]
    config = parse_config(tomllib.loads(block), "agent.toml")
    assert [server.name for server in config.lsp_servers] == ["jedi", "pyright"]
    data: dict[str, Any] = tomllib.loads(block)
    assert set(data) == {"lsp"}
