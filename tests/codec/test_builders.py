"""``acpkit.builders``: session-update builders make what ``session_update`` takes."""

from __future__ import annotations

from typing import Any, get_args

from acpkit import builders as b
from acpkit import schema
from acpkit.codec import encode
from acpkit.connection import Agent, AgentConnection, Client
from acpkit.testing.pair import connected_pair


def _built_updates() -> list[Any]:
    """One value from every session-update builder."""
    return [
        b.agent_message("Hello"),
        b.agent_message(b.image_block("AAAA", "image/png"), message_id="m1"),
        b.user_message("hi"),
        b.thought("hmm"),
        b.tool_call_start("call_1", "bash: ls", kind="execute", locations=["/tmp"]),
        b.tool_call_update(
            "call_1",
            status="completed",
            content=[b.tool_text("file.txt"), b.tool_diff("/tmp/n", "x\n", old_text=None)],
            raw_output={"output": "file.txt"},
        ),
        b.update_plan([b.plan_entry("Read"), b.plan_entry("Fix", status="in_progress")]),
        b.available_commands([b.command("compact", "Compress the history", hint="how much")]),
        b.usage_update(5120, 32768, cost=0.25),
    ]


def test_update_builders_return_session_update_variants() -> None:
    """Every session-update builder returns a variant of ``SessionUpdate``, never the whole
    ``SessionNotification``."""
    variants = tuple(get_args(schema.SessionUpdate))
    for update in _built_updates():
        assert isinstance(update, variants), update
        assert not isinstance(update, schema.SessionNotification)


class _Agent(Agent):
    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(protocol_version=1)

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id="s1")


class _Client(Client):
    def __init__(self) -> None:
        self.received: list[schema.SessionNotification] = []

    def session_update(self, params: schema.SessionNotification) -> None:
        self.received.append(params)


def test_built_updates_reach_the_client_through_session_update() -> None:
    """``conn.session_update(sid, <builder result>)`` delivers each update unchanged: the
    client receives what ``b.session_notification(sid, update)`` builds."""
    client = _Client()
    agents: list[AgentConnection] = []

    def factory(conn: AgentConnection) -> _Agent:
        agents.append(conn)
        return _Agent()

    pair = connected_pair(factory, client)
    pair.result(pair.client.initialize())
    pair.result(pair.client.new_session(schema.NewSessionRequest(cwd="/tmp", mcp_servers=[])))
    updates = _built_updates()
    for update in updates:
        pair.result(pair.agent.session_update("s1", update))
    pair.pump()
    assert client.received == [b.session_notification("s1", u) for u in updates]


def test_session_notification_wraps_one_update_with_meta() -> None:
    """``session_notification`` builds the whole ``session/update`` params, ``_meta`` included."""
    note = b.session_notification("s1", b.agent_message("hi"), meta={"trace": 1})
    assert encode(note) == {
        "sessionId": "s1",
        "update": {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "hi"},
        },
        "_meta": {"trace": 1},
    }
