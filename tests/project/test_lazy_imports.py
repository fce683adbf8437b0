"""
What importing bob and the client loads: a tool whose server is not configured costs nothing
at startup.

Each test imports modules in a fresh interpreter (the modules this one already imported
would hide an eager import) and lists which of the modules that must stay lazy are in
``sys.modules`` afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent

#: Loaded only when the feature that needs them is used: the language-server client
#: (lsprotocol) when ``[lsp.servers]`` names a server, the MCP models when an MCP server
#: is configured, treq and ``twisted.web`` on the first fetch, OpenSSL when a listener or
#: a TLS connection is made, autobahn for WebSocket, the unstable models for the first
#: prompt's answer, importlib.metadata for the console scripts' clash check, PyYAML for the
#: first skill's front matter, the built-in tools' modules (but the contract, ask_user and
#: plan, which the turn and the session use) for a session's first use of a tool.
MUST_BE_LAZY = (
    "lsprotocol",
    "acpkit_agent.lsp",
    "acpkit_agent.tools.lsp",
    "acpkit.mcp.schema",
    "treq",
    "twisted.web.client",
    "h2",
    "OpenSSL",
    "twisted.internet.endpoints",
    "twisted.internet.ssl",
    "autobahn",
    "acpkit.unstable",
    "acpkit.http.http2",
    "acpkit.http.transport",
    "importlib.metadata",
    "yaml",
    "acpkit_agent.tools.bash",
    "acpkit_agent.tools.files",
    "acpkit_agent.tools.fetch",
    "acpkit_agent.tools.ask_agent",
)

#: For the client: what it needs only for a remote agent, a language server or MCP, and
#: pathspec for the first ``.gitignore`` read (listing the project's files for @ mentions).
CLIENT_MUST_BE_LAZY = (
    "lsprotocol",
    "acpkit.mcp.schema",
    "treq",
    "twisted.web.client",
    "h2",
    "OpenSSL",
    "autobahn",
    "acpkit.http.http2",
    "acpkit.http.transport",
    "pathspec",
)


def fresh_interpreter_output(code: str) -> str:
    """What a fresh interpreter, with this checkout first on its path, prints running
    ``code``."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, env=env,
        timeout=120,
    ).stdout  # fmt: skip


def loaded_after_import(*modules: str) -> set[str]:
    """The modules in ``sys.modules`` after a fresh interpreter imported ``modules``."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {list(modules)!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    output = fresh_interpreter_output(code)
    return set(json.loads(output))


def eager(loaded: set[str], lazy: tuple[str, ...]) -> list[str]:
    """The names of ``lazy`` loaded (a package or any of its submodules)."""
    return [name for name in lazy if any(m == name or m.startswith(name + ".") for m in loaded)]


@pytest.mark.process
def test_bob_startup_loads_no_unconfigured_tool() -> None:
    """
    Importing bob's twistd plugin and the module it names (what ``twistd -n acp-agent``
    imports before answering initialize) loads none of the lazy modules.
    """
    loaded = loaded_after_import("twisted.plugins.acpkit_agent", "acpkit_agent.twistd_entry")
    assert "acpkit_agent.tap" in loaded
    assert eager(loaded, MUST_BE_LAZY) == []


@pytest.mark.process
def test_client_startup_loads_no_remote_machinery() -> None:
    """Importing the client's command line (``acpkit-client``) loads none of its lazy modules."""
    loaded = loaded_after_import("acpkit_client.launch", "acpkit_client.cli")
    assert "acpkit_client.agents" in loaded
    assert eager(loaded, CLIENT_MUST_BE_LAZY) == []


@pytest.mark.process
def test_clash_check_imports_no_importlib_metadata() -> None:
    """
    The console scripts' clash check finds our ``acpkit`` ours without importing
    ``importlib.metadata`` (and email, zipfile, csv with it): it reads the metadata
    directories beside the package itself.
    """
    code = (
        "import sys\n"
        "from acpkit_client.launch import acpkit_owner_problem\n"
        "print(acpkit_owner_problem(), 'importlib.metadata' in sys.modules)\n"
    )
    output = fresh_interpreter_output(code)
    assert output.split() == ["None", "False"]


@pytest.mark.process
def test_client_startup_reads_no_mime_tables() -> None:
    """
    Importing the client's command line does not make the ``mimetypes`` tables (which
    reads the machine's ``mime.types`` files): the first attachment's type does.
    """
    code = (
        "import acpkit_client.launch, acpkit_client.cli, mimetypes\n"
        "print(mimetypes.inited)\n"
        "from acpkit_client.prompt import guess_mime_type\n"
        "print(guess_mime_type('a.png'), mimetypes.inited)\n"
    )
    output = fresh_interpreter_output(code)
    assert output.split() == ["False", "image/png", "True"]


@pytest.mark.process
def test_lazy_names_still_import() -> None:
    """The names made lazy are still importable where they were: they load on first use."""
    loaded = loaded_after_import("acpkit_agent.tools", "acpkit.http")
    assert "lsprotocol" not in loaded
    from acpkit.http import ClientTLS, HTTP2Agent
    from acpkit_agent.tools import LspTool

    assert LspTool.__module__ == "acpkit_agent.tools.lsp"
    assert ClientTLS.__module__ == "acpkit.http.tls"
    assert HTTP2Agent.__module__ == "acpkit.http.http2"
