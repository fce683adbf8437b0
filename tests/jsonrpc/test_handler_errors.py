"""
A handler's unexpected exception, as the client developer meets it: ``-32603`` without the
exception's text by default; with it in ``data`` under the development switch
(``ACPKIT_DEBUG_ERRORS=1`` or ``error_details``); the asyncio-on-the-default-reactor
mistake explained in ``data`` always; the agent's log line naming its own side, the
method, the peer and the exception; the client's description quoting the agent's stderr.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, cast

import pytest
from twisted.logger import ILogObserver, LogEvent, formatEvent, globalLogPublisher
from zope.interface import implementer

from acpkit import schema
from acpkit.connection import Agent, AgentConnection, Client
from acpkit.errors import RPCError
from acpkit.io import AgentProcess
from acpkit.jsonrpc.handler_errors import (
    ASYNCIO_HINT,
    DEBUG_ERRORS_VARIABLE,
    debug_errors_from_env,
)
from acpkit.testing.pair import ConnectedPair, connected_pair
from acpkit_client.agents import AgentRun, stderr_excerpt
from acpkit_client.config import AgentEntry


class _FailingAgent(Agent):
    def __init__(self, conn: AgentConnection) -> None:
        self.conn = conn

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(protocol_version=params.protocol_version)

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id="s")

    async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        first = params.prompt[0]
        assert isinstance(first, schema.TextContentBlock)
        if first.text == "asyncio":
            await asyncio.sleep(1)  # no asyncio event loop runs here
        raise ValueError("no API key in ~/.secrets")


@pytest.fixture
def logged() -> Iterator[list[str]]:
    lines: list[str] = []

    @implementer(ILogObserver)
    def observe(event: LogEvent) -> None:
        lines.append(formatEvent(event) or "")

    globalLogPublisher.addObserver(observe)
    yield lines
    globalLogPublisher.removeObserver(observe)


def _prompt_error(p: ConnectedPair, text: str) -> RPCError:
    p.result(p.client.initialize())
    p.result(p.client.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[])))
    d = p.client.prompt(
        schema.PromptRequest(session_id="s", prompt=[schema.TextContentBlock(text=text)])
    )
    with pytest.raises(RPCError) as caught:
        p.result(d)
    return caught.value


def test_by_default_the_answer_holds_no_exception_text(
    monkeypatch: pytest.MonkeyPatch, logged: list[str]
) -> None:
    """Off by default: -32603 with no ``data`` (the exception's text may hold secrets);
    the agent's log line says the agent's handler failed, for which method and request,
    from whom, with the exception's type and message."""
    monkeypatch.delenv(DEBUG_ERRORS_VARIABLE, raising=False)
    error = _prompt_error(connected_pair(_FailingAgent, Client()), "hi")
    assert (error.code, error.data) == (-32603, None)
    assert (
        "agent: handler for session/prompt (id 3, from the client) raised "
        "ValueError: no API key in ~/.secrets"
    ) in logged


def test_the_environment_switch_puts_type_and_message_in_data(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``ACPKIT_DEBUG_ERRORS=1``: the error's data is the exception's type and message."""
    monkeypatch.setenv(DEBUG_ERRORS_VARIABLE, "1")
    error = _prompt_error(connected_pair(_FailingAgent, Client()), "hi")
    assert error.data == {"exception": "ValueError", "message": "no API key in ~/.secrets"}


def test_error_details_on_the_connection_wins_over_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``error_details`` (what ``run_agent(debug_errors=...)`` sets) decides over the
    variable, both ways."""
    monkeypatch.setenv(DEBUG_ERRORS_VARIABLE, "1")
    p = connected_pair(_FailingAgent, Client())
    p.agent.protocol.error_details = False
    assert _prompt_error(p, "hi").data is None
    monkeypatch.delenv(DEBUG_ERRORS_VARIABLE)
    p = connected_pair(_FailingAgent, Client())
    p.agent.protocol.error_details = True
    assert _prompt_error(p, "hi").data == {
        "exception": "ValueError",
        "message": "no API key in ~/.secrets",
    }


def test_asyncio_on_the_default_reactor_is_explained(
    monkeypatch: pytest.MonkeyPatch, logged: list[str]
) -> None:
    """Awaiting asyncio in a handler with no asyncio loop: the answer's data explains it
    (switch off: no exception text), and so does the agent's log line."""
    monkeypatch.delenv(DEBUG_ERRORS_VARIABLE, raising=False)
    error = _prompt_error(connected_pair(_FailingAgent, Client()), "asyncio")
    assert error.data == {"hint": ASYNCIO_HINT}
    assert 'reactor="asyncio"' in ASYNCIO_HINT
    assert any("raised RuntimeError" in line and ASYNCIO_HINT in line for line in logged)


@pytest.mark.parametrize(
    ("value", "on"), [("1", True), ("true", True), ("YES", True), ("0", False), ("", False)]
)
def test_switch_values(value: str, on: bool) -> None:
    """``1``/``true``/``yes``/``on`` (any case) turn the switch on; anything else not."""
    assert debug_errors_from_env({DEBUG_ERRORS_VARIABLE: value}) is on


class _Process:
    def __init__(self, tail: str) -> None:
        self.tail = tail

    def stderr_tail(self) -> str:
        return self.tail


def test_the_client_quotes_the_agents_stderr_for_an_internal_error() -> None:
    """acpkit-client's description of a -32603 answer ends with the agent's last stderr
    lines on one line; other errors are described as before."""
    run = AgentRun(AgentEntry(name="x", command="x", source="<test>"), "/")
    run.process = cast(AgentProcess, _Process("Traceback:\n  File x\nValueError: no key\n\n"))
    text = run.describe_agent_error(RPCError(-32603, "Internal error"))
    assert text == (
        "Internal error (code -32603); the agent's stderr ends with: "
        "Traceback: | File x | ValueError: no key"
    )
    assert run.describe_agent_error(RPCError(-32602, "Invalid params")) == (
        "Invalid params (code -32602)"
    )
    long: Any = "y" * 2000
    assert len(stderr_excerpt(long)) == 500
