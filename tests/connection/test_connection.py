"""
The typed role layer (``acpkit.connection``) through a real in-memory pair.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock, deferLater
from twisted.internet.testing import StringTransport

from acpkit import codec, schema
from acpkit.connection import (
    Agent,
    AgentConnection,
    Client,
    ProtocolVersionError,
    negotiate_version,
)
from acpkit.errors import CapabilityError, InvalidParams, InvalidRequest, MethodNotFound
from acpkit.testing.pair import ConnectedPair, connected_pair


def text(t: str) -> schema.TextContentBlock:
    return schema.TextContentBlock(text=t)


class ScriptedAgent(Agent):
    """An agent whose turns wait on the clock for ``delay`` seconds, then echo."""

    def __init__(self, conn: AgentConnection, clock: Clock, delay: float = 0.0) -> None:
        self.conn = conn
        self.clock = clock
        self.delay = delay
        self.sessions = 0
        self.turns_started = 0
        self.saw_cancelled_error = 0
        self.initialize_response = schema.InitializeResponse(
            protocol_version=1,
            agent_capabilities=schema.AgentCapabilities(load_session=False),
        )

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return self.initialize_response

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        self.sessions += 1
        sid = f"s{self.sessions}"
        # Sent before the response on purpose: the connection must hold it.
        self.conn.session_update(sid, schema.AgentMessageChunk(content=text("welcome")))
        return schema.NewSessionResponse(session_id=sid)

    async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        self.turns_started += 1
        try:
            if self.delay:
                await deferLater(self.clock, self.delay, lambda: None)
        except CancelledError:
            self.saw_cancelled_error += 1
            # A careless agent reports end_turn after a cancel: the connection fixes it.
            return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)
        for block in params.prompt:
            await self.conn.session_update(
                params.session_id, schema.AgentMessageChunk(content=block)
            )
        return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)


class RecordingClient(Client):
    """A client that records updates and holds permission requests until told."""

    def __init__(self) -> None:
        self.updates: list[schema.SessionNotification] = []
        self.permission_requests: list[Deferred[Any]] = []

    def session_update(self, params: schema.SessionNotification) -> None:
        self.updates.append(params)

    def request_permission(self, params: schema.RequestPermissionRequest) -> Deferred[Any]:
        d: Deferred[Any] = Deferred()
        self.permission_requests.append(d)
        return d


def make_pair(
    delay: float = 0.0, **kwargs: Any
) -> tuple[ConnectedPair, ScriptedAgent, RecordingClient]:
    clock = Clock()
    agents: list[ScriptedAgent] = []

    def factory(conn: AgentConnection) -> ScriptedAgent:
        agents.append(ScriptedAgent(conn, clock, delay))
        return agents[0]

    client = RecordingClient()
    pair = connected_pair(factory, client, clock=clock, **kwargs)
    return pair, agents[0], client


def start_session(pair: ConnectedPair) -> str:
    pair.result(pair.client.initialize())
    response = pair.result(
        pair.client.new_session(schema.NewSessionRequest(cwd="/tmp", mcp_servers=[]))
    )
    return response.session_id


def wire(transport: StringTransport) -> list[dict[str, Any]]:
    return [json.loads(line) for line in transport.value().splitlines()]


# -- initialize and capabilities ------------------------------------------------------


def test_initialize_records_both_sides_capabilities() -> None:
    """After initialize, the agent side knows the client's capabilities and vice versa."""
    pair, agent, _ = make_pair()
    caps = schema.ClientCapabilities(fs=schema.FileSystemCapabilities(read_text_file=True))
    response = pair.result(pair.client.initialize(client_capabilities=caps))
    assert response.protocol_version == 1
    assert pair.agent.client_capabilities == caps
    assert pair.client.agent_capabilities == agent.initialize_response.agent_capabilities


def test_negotiate_version_answers_ours_when_unsupported() -> None:
    """The agent answers the client's version when supported, else its latest."""
    assert negotiate_version(1) == 1
    assert negotiate_version(7) == 1
    assert negotiate_version(0) == 1


def test_client_closes_on_unsupported_agent_version() -> None:
    """A client whose agent answers an unknown protocol version fails and closes."""
    pair, agent, _ = make_pair()
    agent.initialize_response = schema.InitializeResponse(protocol_version=99)
    with pytest.raises(ProtocolVersionError, match="99"):
        pair.result(pair.client.initialize())
    assert pair.client_transport.disconnecting


def test_request_before_initialize_is_refused() -> None:
    """A session/new before initialize is answered -32600 saying initialize comes first."""
    pair, agent, _ = make_pair()
    d = pair.client.protocol.request("session/new", {"cwd": "/tmp", "mcpServers": []})
    with pytest.raises(InvalidRequest, match="initialize"):
        pair.result(d)
    assert agent.sessions == 0


def test_client_refuses_calls_before_initialize() -> None:
    """The client side refuses session/new locally before initialize."""
    pair, _, _ = make_pair()
    with pytest.raises(CapabilityError, match="initialize"):
        pair.result(pair.client.new_session(schema.NewSessionRequest(cwd="/tmp", mcp_servers=[])))


def test_unimplemented_method_is_method_not_found() -> None:
    """A method the agent does not implement answers -32601, never a fake success."""
    pair, _, _ = make_pair()
    start_session(pair)
    d = pair.client.protocol.request("session/set_mode", {"sessionId": "s1", "modeId": "x"})
    with pytest.raises(MethodNotFound):
        pair.result(d)


def test_invalid_params_name_the_path() -> None:
    """Params that do not decode answer -32602 naming the JSON path."""
    pair, _, _ = make_pair()
    start_session(pair)
    d = pair.client.protocol.request("session/prompt", {"sessionId": "s1", "prompt": "nope"})
    with pytest.raises(InvalidParams) as info:
        pair.result(d)
    assert "prompt" in json.dumps(info.value.to_json())


def test_capability_gating_on_the_client_side() -> None:
    """load_session, list_sessions and image prompts are refused when not advertised."""
    pair, _, _ = make_pair()
    sid = start_session(pair)
    with pytest.raises(CapabilityError, match="loadSession"):
        pair.result(
            pair.client.load_session(
                schema.LoadSessionRequest(session_id=sid, cwd="/tmp", mcp_servers=[])
            )
        )
    with pytest.raises(CapabilityError, match=r"sessionCapabilities\.list"):
        pair.result(pair.client.list_sessions())
    image = schema.ImageContentBlock(data="AAAA", mime_type="image/png")
    with pytest.raises(CapabilityError, match=r"promptCapabilities\.image"):
        pair.result(pair.client.prompt(schema.PromptRequest(session_id=sid, prompt=[image])))


def test_capability_gating_on_the_agent_side() -> None:
    """The agent may not call fs or terminal methods the client did not advertise."""
    pair, _, _ = make_pair()
    start_session(pair)
    read = schema.ReadTextFileRequest(session_id="s1", path="/etc/hostname")
    with pytest.raises(CapabilityError, match=r"fs\.readTextFile"):
        pair.result(pair.agent.read_text_file(read))
    create = schema.CreateTerminalRequest(session_id="s1", command="ls")
    with pytest.raises(CapabilityError, match="terminal"):
        pair.result(pair.agent.create_terminal(create))


# -- sessions and updates ----------------------------------------------------------------


def test_updates_sent_before_new_session_response_are_held() -> None:
    """An update the agent sends inside session/new reaches the wire after the response."""
    pair, _, client = make_pair()
    pair.result(pair.client.initialize())
    pair.client.new_session(schema.NewSessionRequest(cwd="/tmp", mcp_servers=[]))
    # Deliver the request by hand and look at the agent's raw output.
    pair.agent.protocol.dataReceived(pair.client_transport.value())
    pair.client_transport.clear()
    lines = wire(pair.agent_transport)
    assert [("result" in m, m.get("method")) for m in lines] == [
        (True, None),
        (False, "session/update"),
    ]
    pair.pump()
    assert [u.session_id for u in client.updates] == ["s1"]


def test_client_buffers_updates_for_unknown_sessions() -> None:
    """Updates that arrive before the session is known are delivered after new_session fires."""
    pair, _, client = make_pair()
    pair.result(pair.client.initialize())
    update = codec.encode(
        schema.SessionNotification(
            session_id="s1", update=schema.AgentMessageChunk(content=text("early"))
        )
    )
    # A misbehaving agent: the update goes out before the session exists.
    pair.agent.protocol.notify("session/update", update)
    pair.pump()
    assert client.updates == []
    seen_at_callback: list[int] = []
    d = pair.client.new_session(schema.NewSessionRequest(cwd="/tmp", mcp_servers=[]))
    d.addCallback(lambda r: seen_at_callback.append(len(client.updates)))
    pair.pump()
    assert seen_at_callback == [0]
    assert [u.update.content.text for u in client.updates] == ["early", "welcome"]  # type: ignore[union-attr]


def test_prompt_streams_updates_before_response() -> None:
    """Every update of a turn is delivered before the prompt's response."""
    pair, _, client = make_pair()
    sid = start_session(pair)
    order: list[str] = []
    d = pair.client.prompt(schema.PromptRequest(session_id=sid, prompt=[text("a"), text("b")]))
    d.addCallback(lambda r: order.append(f"response {len(client.updates)}"))
    pair.pump()
    assert order == ["response 3"]


# -- cancellation ----------------------------------------------------------------------------


def test_cancel_mid_turn_answers_cancelled() -> None:
    """session/cancel during a turn makes it answer cancelled, even if the agent says end_turn."""
    pair, agent, _ = make_pair(delay=10)
    sid = start_session(pair)
    d = pair.client.prompt(schema.PromptRequest(session_id=sid, prompt=[text("x")]))
    pair.pump()
    pair.client.cancel(sid)
    response = pair.result(d)
    assert response.stop_reason == schema.StopReason.CANCELLED
    assert agent.saw_cancelled_error == 1


def test_cancel_before_turn_starts_is_not_lost() -> None:
    """A prompt queued behind the concurrency limit and cancelled answers cancelled unrun."""
    pair, agent, _ = make_pair(delay=10, max_concurrent_requests=1)
    pair.result(pair.client.initialize())
    sid1 = pair.result(
        pair.client.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))
    ).session_id
    sid2 = pair.result(
        pair.client.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))
    ).session_id
    first = pair.client.prompt(schema.PromptRequest(session_id=sid1, prompt=[text("1")]))
    second = pair.client.prompt(schema.PromptRequest(session_id=sid2, prompt=[text("2")]))
    pair.pump()
    assert agent.turns_started == 1
    pair.client.cancel(sid2)
    assert pair.result(second).stop_reason == schema.StopReason.CANCELLED
    pair.advance(10)
    assert pair.result(first).stop_reason == schema.StopReason.END_TURN
    assert agent.turns_started == 1


def test_stale_cancel_does_not_leak_into_next_turn() -> None:
    """A cancel sent while no turn runs is ignored; the next turn ends normally."""
    pair, _, _ = make_pair()
    sid = start_session(pair)
    pair.client.cancel(sid)
    pair.pump()
    response = pair.result(
        pair.client.prompt(schema.PromptRequest(session_id=sid, prompt=[text("x")]))
    )
    assert response.stop_reason == schema.StopReason.END_TURN


def test_client_cancel_answers_pending_permission_requests() -> None:
    """cancel() answers the session's pending permission requests with the cancelled outcome."""
    pair, _, client = make_pair()
    sid = start_session(pair)
    request = schema.RequestPermissionRequest(
        session_id=sid,
        tool_call=schema.ToolCallUpdate(tool_call_id="call_1", title="bash: ls"),
        options=[
            schema.PermissionOption(
                option_id="allow", name="Allow", kind=schema.PermissionOptionKind.ALLOW_ONCE
            )
        ],
    )
    d = pair.agent.request_permission(request)
    pair.pump()
    assert len(client.permission_requests) == 1
    pair.client.cancel(sid)
    response = pair.result(d)
    assert isinstance(response.outcome, schema.CancelledPermissionOutcome)
    assert client.permission_requests[0].called


def test_default_client_never_approves() -> None:
    """The base Client answers a permission request with a reject option, never allow."""
    pair = connected_pair(lambda conn: ScriptedAgent(conn, Clock()), Client())
    sid = start_session(pair)
    request = schema.RequestPermissionRequest(
        session_id=sid,
        tool_call=schema.ToolCallUpdate(tool_call_id="call_1"),
        options=[
            schema.PermissionOption(
                option_id="allow", name="Allow", kind=schema.PermissionOptionKind.ALLOW_ONCE
            ),
            schema.PermissionOption(
                option_id="reject", name="Reject", kind=schema.PermissionOptionKind.REJECT_ONCE
            ),
        ],
    )
    response = pair.result(pair.agent.request_permission(request))
    assert isinstance(response.outcome, schema.SelectedPermissionOutcome)
    assert response.outcome.option_id == "reject"


@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.one_of(st.none(), st.integers(0, 6))),
        min_size=1,
        max_size=6,
    )
)
def test_cancellation_races(turns: list[tuple[int, int | None]]) -> None:
    """
    Whatever the turn durations and cancel times, each prompt is answered exactly once,
    ``cancelled`` exactly when a cancel arrived while it ran, and nothing stays pending.
    """
    pair, _, _ = make_pair()
    pair.result(pair.client.initialize())
    clock = pair.clock
    for duration, cancel_at in turns:
        agent = pair.agent.handler
        assert isinstance(agent, ScriptedAgent)
        agent.delay = duration
        sid = pair.result(
            pair.client.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))
        ).session_id
        answers: list[Any] = []
        d = pair.client.prompt(schema.PromptRequest(session_id=sid, prompt=[text("x")]))
        d.addBoth(answers.append)
        pair.pump()
        if cancel_at is not None and cancel_at < duration:
            pair.advance(cancel_at)
            pair.client.cancel(sid)
            pair.pump()
            expected = schema.StopReason.CANCELLED
        else:
            expected = schema.StopReason.END_TURN
        pair.advance(max(duration, 1))
        assert len(answers) == 1
        assert answers[0].stop_reason == expected
        if cancel_at is not None and cancel_at >= duration:
            pair.client.cancel(sid)  # stale: must not affect anything
            pair.pump()
    assert not clock.getDelayedCalls()


# -- extensions --------------------------------------------------------------------------------


def test_extension_methods_round_trip() -> None:
    """Custom _vendor requests and notifications reach registered handlers with raw params."""
    pair, _, _ = make_pair()
    seen: list[Any] = []
    pair.agent.register_extension_request("_acme/echo", lambda params: {"echo": params})
    pair.agent.register_extension_notification("_acme/ping", seen.append)
    assert pair.result(pair.client.extension_request("_acme/echo", {"x": 1})) == {"echo": {"x": 1}}
    pair.client.extension_notify("_acme/ping", {"n": 2})
    pair.pump()
    assert seen == [{"n": 2}]
    with pytest.raises(MethodNotFound):
        pair.result(pair.client.extension_request("_acme/unknown", {}))
    with pytest.raises(ValueError, match="start with '_'"):
        pair.client.extension_request("acme/echo")


def test_undecodable_notification_reaches_the_hook() -> None:
    """A session/update that does not decode is dropped, and the hook hears of it."""
    pair, _, client = make_pair()
    start_session(pair)
    seen: list[tuple[str, Any, str]] = []
    pair.client.on_undecodable_notification = lambda method, params, error: seen.append(
        (method, params, str(error))
    )
    pair.agent.protocol.notify("session/update", {"sessionId": "s1", "update": "garbage"})
    pair.pump()
    assert [(m, p) for m, p, _ in seen] == [
        ("session/update", {"sessionId": "s1", "update": "garbage"})
    ]
    assert "update" in seen[0][2]
    assert all(u.session_id == "s1" for u in client.updates)
