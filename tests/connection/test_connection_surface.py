"""
The whole typed surface of ``acpkit.connection``: every method of both roles, with and
without the capability that allows it, and the base classes' answers.
"""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.defer import Deferred, succeed

from acpkit import codec, schema
from acpkit.connection import MAX_EARLY_UPDATES, Agent, AgentConnection, Client
from acpkit.errors import CapabilityError, InternalError, MethodNotFound
from acpkit.testing.pair import ConnectedPair, connected_pair

SESSION_CAPS = schema.SessionCapabilities(
    list=schema.SessionListCapabilities(),
    delete=schema.SessionDeleteCapabilities(),
    resume=schema.SessionResumeCapabilities(),
    close=schema.SessionCloseCapabilities(),
    additional_directories=schema.SessionAdditionalDirectoriesCapabilities(),
)


class FullAgent(Agent):
    """Implements every optional method; ``advertise`` decides what initialize says."""

    def __init__(self, conn: AgentConnection, advertise: bool = True) -> None:
        self.conn = conn
        self.advertise = advertise
        self.calls: list[str] = []

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        caps = (
            schema.AgentCapabilities(
                load_session=True,
                session_capabilities=SESSION_CAPS,
                auth=schema.AgentAuthCapabilities(logout=schema.LogoutCapabilities()),
            )
            if self.advertise
            else schema.AgentCapabilities()
        )
        return schema.InitializeResponse(protocol_version=1, agent_capabilities=caps)

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id="s1")

    def load_session(self, params: schema.LoadSessionRequest) -> None:
        self.calls.append("load")
        self.conn.session_update(
            params.session_id,
            schema.UserMessageChunk(content=schema.TextContentBlock(text="replayed")),
        )
        return None  # LoadSessionResponse has no required field: None answers {}

    async def list_sessions(self, params: schema.ListSessionsRequest) -> Any:
        self.calls.append("list")
        return schema.ListSessionsResponse(sessions=[])

    def delete_session(self, params: schema.DeleteSessionRequest) -> Deferred[Any]:
        self.calls.append("delete")
        return succeed(schema.DeleteSessionResponse())

    def resume_session(self, params: schema.ResumeSessionRequest) -> Any:
        self.calls.append("resume")
        return schema.ResumeSessionResponse()

    def close_session(self, params: schema.CloseSessionRequest) -> Any:
        self.calls.append("close")
        return {}

    def logout(self, params: schema.LogoutRequest) -> Any:
        self.calls.append("logout")
        return schema.LogoutResponse()

    def set_mode(self, params: schema.SetSessionModeRequest) -> Any:
        self.calls.append("set_mode")
        return schema.SetSessionModeResponse()

    # A handler bug on purpose (the type checker refuses it): PromptResponse requires
    # stopReason, so the connection answers -32603.
    def prompt(self, params: schema.PromptRequest) -> None:  # type: ignore[override]
        return None


class Recorder(Client):
    def __init__(self) -> None:
        self.updates: list[schema.SessionNotification] = []

    def session_update(self, params: schema.SessionNotification) -> None:
        self.updates.append(params)


def started(advertise: bool = True, **client_caps: Any) -> tuple[ConnectedPair, FullAgent]:
    agents: list[FullAgent] = []

    def factory(conn: AgentConnection) -> FullAgent:
        agents.append(FullAgent(conn, advertise))
        return agents[0]

    pair = connected_pair(factory, Recorder())
    caps = schema.ClientCapabilities(**client_caps)
    pair.result(pair.client.initialize(client_capabilities=caps))
    pair.result(pair.client.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[])))
    return pair, agents[0]


def test_advertised_session_methods_work() -> None:
    """With the capabilities advertised, every session method reaches the agent and decodes."""
    pair, agent = started()
    c = pair.client
    assert pair.result(c.list_sessions()).sessions == []
    pair.result(c.delete_session(schema.DeleteSessionRequest(session_id="s1")))
    pair.result(
        c.resume_session(schema.ResumeSessionRequest(session_id="s1", cwd="/", mcp_servers=[]))
    )
    pair.result(c.close_session(schema.CloseSessionRequest(session_id="s1")))
    pair.result(c.logout())
    pair.result(c.set_mode(schema.SetSessionModeRequest(session_id="s1", mode_id="m")))
    pair.result(
        c.new_session(
            schema.NewSessionRequest(cwd="/", mcp_servers=[], additional_directories=["/tmp"])
        )
    )
    assert agent.calls == ["list", "delete", "resume", "close", "logout", "set_mode"]


def test_load_session_replay_arrives_before_the_answer() -> None:
    """session/load: the replayed updates are delivered before the load Deferred fires."""
    pair, _ = started()
    client = pair.client.handler
    assert isinstance(client, Recorder)
    seen: list[int] = []
    d = pair.client.load_session(
        schema.LoadSessionRequest(session_id="old", cwd="/", mcp_servers=[])
    )
    d.addCallback(lambda _: seen.append(len(client.updates)))
    pair.pump()
    assert seen == [1]
    assert client.updates[0].session_id == "old"


@pytest.mark.parametrize(
    ("call", "capability"),
    [
        (lambda c: c.list_sessions(), "sessionCapabilities.list"),
        (lambda c: c.delete_session(schema.DeleteSessionRequest(session_id="s1")), "delete"),
        (
            lambda c: c.resume_session(
                schema.ResumeSessionRequest(session_id="s1", cwd="/", mcp_servers=[])
            ),
            "resume",
        ),
        (lambda c: c.close_session(schema.CloseSessionRequest(session_id="s1")), "close"),
        (lambda c: c.logout(), "auth.logout"),
        (
            lambda c: c.new_session(
                schema.NewSessionRequest(cwd="/", mcp_servers=[], additional_directories=["/a"])
            ),
            "additional_directories",
        ),
    ],
)
def test_unadvertised_session_methods_are_refused_locally(call: Any, capability: str) -> None:
    """Without the capability, the client refuses locally and sends nothing."""
    pair, agent = started(advertise=False)
    before = len(pair.client_transport.value())
    with pytest.raises(CapabilityError, match=capability):
        pair.result(call(pair.client))
    assert len(pair.client_transport.value()) == before
    assert agent.calls == []


def test_handler_returning_none_for_a_required_result_is_an_internal_error() -> None:
    """A prompt handler returning None (stopReason is required) answers -32603."""
    pair, _ = started()
    prompt = schema.PromptRequest(session_id="s1", prompt=[schema.TextContentBlock(text="x")])
    with pytest.raises(InternalError):
        pair.result(pair.client.prompt(prompt))


class MinimalAgent(Agent):
    """Only what every agent must have: initialize and session/new."""

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(protocol_version=1)

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id="s1")


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("logout", {}),
        ("session/load", {"sessionId": "s1", "cwd": "/", "mcpServers": []}),
        ("session/list", {}),
        ("session/delete", {"sessionId": "s1"}),
        ("session/resume", {"sessionId": "s1", "cwd": "/"}),
        ("session/close", {"sessionId": "s1"}),
        ("session/set_mode", {"sessionId": "s1", "modeId": "m"}),
        ("session/set_config_option", {"sessionId": "s1", "configId": "c", "value": "v"}),
        ("session/prompt", {"sessionId": "s1", "prompt": []}),
    ],
)
def test_base_agent_answers_method_not_found(method: str, params: dict[str, Any]) -> None:
    """The Agent base answers -32601 (with the method name) for what it does not implement."""
    pair = connected_pair(MinimalAgent(), Client())
    pair.result(pair.client.initialize())
    with pytest.raises(MethodNotFound) as caught:
        pair.result(pair.client.protocol.request(method, params))
    assert caught.value.data == {"method": method}


def test_base_agent_authenticates_and_ignores_cancel() -> None:
    """authenticate answers {} and session/cancel with no turn is quietly ignored."""
    pair = connected_pair(MinimalAgent(), Client())
    pair.result(pair.client.initialize())
    pair.result(pair.client.authenticate(schema.AuthenticateRequest(method_id="none")))
    pair.client.cancel("s1")
    pair.pump()


class FsClient(Client):
    """Advertised everything but implements nothing beyond the base."""


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("read_text_file", schema.ReadTextFileRequest(session_id="s1", path="/x")),
        ("write_text_file", schema.WriteTextFileRequest(session_id="s1", path="/x", content="")),
        ("create_terminal", schema.CreateTerminalRequest(session_id="s1", command="ls")),
        ("terminal_output", schema.TerminalOutputRequest(session_id="s1", terminal_id="t")),
        ("release_terminal", schema.ReleaseTerminalRequest(session_id="s1", terminal_id="t")),
        (
            "wait_for_terminal_exit",
            schema.WaitForTerminalExitRequest(session_id="s1", terminal_id="t"),
        ),
        ("kill_terminal", schema.KillTerminalRequest(session_id="s1", terminal_id="t")),
    ],
)
def test_base_client_answers_method_not_found(method: str, params: Any) -> None:
    """With the capability advertised, the Client base still answers -32601, never a fake."""
    pair, _ = started(
        fs=schema.FileSystemCapabilities(read_text_file=True, write_text_file=True),
        terminal=True,
    )
    with pytest.raises(MethodNotFound):
        pair.result(getattr(pair.agent, method)(params))


def test_elicitation_modes_are_gated() -> None:
    """elicitation/create only in an advertised mode; elicitation/complete only with url."""
    form = codec.decode(
        schema.CreateElicitationRequest,
        {
            "mode": "form",
            "sessionId": "s1",
            "message": "?",
            "requestedSchema": {"type": "object", "properties": {}},
        },
    )
    complete = schema.CompleteElicitationNotification(elicitation_id="e1")
    pair, _ = started()
    with pytest.raises(CapabilityError, match=r"elicitation\.form"):
        pair.result(pair.agent.create_elicitation(form))
    with pytest.raises(CapabilityError, match=r"elicitation\.url"):
        pair.result(pair.agent.complete_elicitation(complete))
    pair, _ = started(
        elicitation=schema.ElicitationCapabilities(form=schema.ElicitationFormCapabilities())
    )
    with pytest.raises(MethodNotFound):  # advertised, but the base Client does not implement it
        pair.result(pair.agent.create_elicitation(form))


def test_early_updates_are_bounded() -> None:
    """Updates for a session that never becomes known are kept up to a bound, oldest dropped."""
    pair, _ = started()
    client = pair.client.handler
    assert isinstance(client, Recorder)
    update = codec.encode(
        schema.SessionNotification(
            session_id="ghost",
            update=schema.AgentMessageChunk(content=schema.TextContentBlock(text="boo")),
        )
    )
    for _ in range(MAX_EARLY_UPDATES + 5):
        pair.agent.protocol.notify("session/update", update)
    pair.pump()
    assert client.updates == []
    pair.result(
        pair.client.load_session(
            schema.LoadSessionRequest(session_id="ghost", cwd="/", mcp_servers=[])
        )
    )
    ghost = [u for u in client.updates if u.session_id == "ghost"]
    assert len(ghost) == MAX_EARLY_UPDATES + 1  # the kept ones, then the replayed one


def test_failing_notification_handler_is_logged_not_fatal() -> None:
    """A session_update handler that raises does not stop later messages."""

    class Broken(Client):
        def __init__(self) -> None:
            self.seen = 0

        def session_update(self, params: schema.SessionNotification) -> None:
            self.seen += 1
            raise RuntimeError("the UI fell over")

    broken = Broken()
    pair = connected_pair(FullAgent, broken)
    pair.result(pair.client.initialize())
    pair.result(pair.client.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[])))
    pair.result(
        pair.client.load_session(
            schema.LoadSessionRequest(session_id="s1", cwd="/", mcp_servers=[])
        )
    )
    assert broken.seen == 1
    assert pair.result(pair.client.list_sessions()).sessions == []


class PromptAgent(Agent):
    """Accepts embedded context and answers every prompt end_turn."""

    def __init__(self, conn: AgentConnection) -> None:
        self.conn = conn

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        caps = schema.AgentCapabilities(
            prompt_capabilities=schema.PromptCapabilities(embedded_context=True)
        )
        return schema.InitializeResponse(protocol_version=1, agent_capabilities=caps)

    def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)


EMBEDDED = schema.EmbeddedResourceContentBlock(
    resource=schema.TextResourceContents(uri="file:///a.txt", text="hello")
)
AUDIO = schema.AudioContentBlock(data="AAAA", mime_type="audio/wav")


def test_prompt_content_is_gated_by_prompt_capabilities() -> None:
    """Embedded resources need embeddedContext, audio needs audio; refused locally, else sent."""
    pair, _ = started()  # FullAgent advertises no prompt capabilities
    for block, capability in ((EMBEDDED, "embeddedContext"), (AUDIO, "audio")):
        request = schema.PromptRequest(session_id="s1", prompt=[block])
        with pytest.raises(CapabilityError, match=capability):
            pair.result(pair.client.prompt(request))
    pair = connected_pair(PromptAgent, Recorder())
    pair.result(pair.client.initialize())
    request = schema.PromptRequest(session_id="s1", prompt=[EMBEDDED])
    assert pair.result(pair.client.prompt(request)).stop_reason == schema.StopReason.END_TURN
