"""
bob's built-in tools are made on a session's first use of a tool, not to answer
``initialize``: :class:`BuiltinTools` makes them on the first lookup, the toolbox and
the agent look them up only when a session needs one.
"""

from __future__ import annotations

from twisted.internet.task import Clock

from acpkit import schema
from acpkit_agent.config import AgentConfig
from acpkit_agent.engines.echo import EchoEngine
from acpkit_agent.mcp_servers import McpToolbox
from acpkit_agent.tools import BuiltinTools, builtin_tools
from acpkit_agent.turn import AgentRuntime
from tests.fixtures.agent.harness import make_harness


def test_builtin_tools_made_on_first_lookup() -> None:
    """``BuiltinTools`` makes nothing until looked up; then it holds ``builtin_tools()``."""
    tools = BuiltinTools()
    assert not tools.made
    assert sorted(tools) == sorted(builtin_tools())
    assert tools.made
    assert tools["bash"] is tools["bash"]  # made once


def test_toolbox_does_not_make_its_builtin_tools_when_built() -> None:
    """An ``McpToolbox`` over lazy built-in tools makes them at its first lookup only."""
    tools = BuiltinTools()
    toolbox = McpToolbox(tools)
    assert not tools.made
    assert "read_file" in toolbox
    assert tools.made


def test_initialize_does_not_make_the_tools() -> None:
    """An agent answers ``initialize`` without making its tools; ``session/new`` makes them."""
    tools = BuiltinTools()
    clock = Clock()
    runtime = AgentRuntime(
        config=AgentConfig(), engine=EchoEngine(), tools=McpToolbox(tools), reactor=clock
    )
    harness = make_harness(runtime=runtime, clock=clock)
    answer = harness.pair.result(harness.pair.client.initialize())
    assert isinstance(answer, schema.InitializeResponse)
    assert not tools.made
    harness.pair.result(
        harness.pair.client.new_session(schema.NewSessionRequest(cwd="/tmp", mcp_servers=[]))
    )
    assert tools.made
