"""
The agent side of remote ACP (``acpkit.remote.serve_remote``, the ``/acp`` resource):
the RFD's status codes and header rules, the SSE stream (order, queue, keep-alives), the
permission round trip, cancel, the grace period, the limits and the security checks,
in memory (raw HTTP on a ``StringTransport``, timers on a ``Clock``); then the official
Python SDK's HTTP client against a real loopback listener.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred, succeed
from twisted.internet.error import ConnectionDone
from twisted.internet.protocol import Protocol, connectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase
from twisted.web.iweb import IBodyProducer
from twisted.web.test.requesthelper import DummyChannel
from zope.interface import implementer

from acpkit import schema
from acpkit.connection import Agent, AgentConnection, negotiate_version
from acpkit.remote.security import (
    InsecureBindError,
    check_bind,
    origin_allowed,
    tls_serving_problem,
)
from acpkit.remote.server import (
    MAX_BATCH_BYTES,
    ACPResource,
    LimitedRequest,
    RemoteLimits,
    RemoteSite,
)
from tests.helpers import child_env
from tests.real_peers import NODE22, TS_SDK_MODULES, peer, require_peer

ROOT = Path(__file__).parent.parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "interop"


def text(value: str) -> schema.TextContentBlock:
    return schema.TextContentBlock(text=value)


class RemoteAgent(Agent):
    """``stream N``: N chunks; ``ask``: a permission request; ``wait``: until cancelled."""

    #: Set to make initialize never answer.
    hang_initialize = False

    def __init__(self, conn: AgentConnection) -> None:
        self.conn = conn
        self.ended: list[Failure | None] = []
        conn.closed.addBoth(self.ended.append)

    def initialize(self, params: schema.InitializeRequest) -> Any:
        if self.hang_initialize:
            return Deferred()
        version = negotiate_version(params.protocol_version)
        return schema.InitializeResponse(protocol_version=version)

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id="s1")

    async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        block = params.prompt[0]
        assert isinstance(block, schema.TextContentBlock)
        words = block.text.split()
        sid = params.session_id
        if words[0] == "stream":
            for i in range(int(words[1])):
                await self.conn.session_update(sid, schema.AgentMessageChunk(content=text(str(i))))
        elif words[0] == "ask":
            answer = await self.conn.request_permission(
                schema.RequestPermissionRequest(
                    session_id=sid,
                    tool_call=schema.ToolCallUpdate(tool_call_id="c1", title="write"),
                    options=[
                        schema.PermissionOption(
                            option_id="allow",
                            name="Allow",
                            kind=schema.PermissionOptionKind.ALLOW_ONCE,
                        )
                    ],
                )
            )
            outcome = answer.outcome
            assert isinstance(outcome, schema.SelectedPermissionOutcome)
            await self.conn.session_update(
                sid, schema.AgentMessageChunk(content=text(outcome.option_id))
            )
        elif words[0] == "big":
            # N chunks of 10 kB, each awaited: the agent follows back-pressure
            for i in range(int(words[1])):
                chunk = f"{i:06d}" + "x" * 10_000
                await self.conn.session_update(sid, schema.AgentMessageChunk(content=text(chunk)))
        elif words[0] == "flood":
            # N chunks of 10 kB written at once, not awaited: no back-pressure followed
            for i in range(int(words[1])):
                chunk = f"{i:06d}" + "x" * 10_000
                self.conn.session_update(sid, schema.AgentMessageChunk(content=text(chunk)))
        elif words[0] == "wait":
            await self.conn.session_update(sid, schema.AgentMessageChunk(content=text("waiting")))
            await Deferred()
        return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)


class Response:
    """One HTTP/1.0 response read off a StringTransport."""

    def __init__(self, transport: StringTransport, channel: Any) -> None:
        self.transport = transport
        self.channel = channel

    @property
    def raw(self) -> bytes:
        value: bytes = self.transport.value()
        return value

    @property
    def status(self) -> int:
        return int(self.raw.split(b" ", 2)[1])

    def header(self, name: str) -> str | None:
        head = self.raw.partition(b"\r\n\r\n")[0].decode("latin-1")
        for line in head.split("\r\n")[1:]:
            key, _, value = line.partition(":")
            if key.strip().lower() == name.lower():
                return value.strip()
        return None

    @property
    def body(self) -> bytes:
        body: bytes = self.raw.partition(b"\r\n\r\n")[2]
        return body

    def json(self) -> Any:
        return json.loads(self.body)

    def events(self) -> list[dict[str, Any]]:
        """The JSON messages of the event stream so far, in order."""
        return self.events_of(self.body)

    @staticmethod
    def events_of(body: bytes) -> list[dict[str, Any]]:
        """The JSON messages of an event stream's body, in order."""
        found = []
        for block in body.split(b"\n\n"):
            data = [line[6:] for line in block.split(b"\n") if line.startswith(b"data: ")]
            if data:
                found.append(json.loads(b"\n".join(data)))
        return found

    def comments(self) -> list[bytes]:
        return [line for line in self.body.split(b"\n") if line.startswith(b":")]

    def close(self) -> None:
        """The client goes away."""
        self.channel.connectionLost(Failure(ConnectionDone()))


class Server:
    """An ACPResource in a RemoteSite, spoken to with raw HTTP/1.0, timers on a Clock."""

    def __init__(self, **kwargs: Any) -> None:
        self.clock = Clock()
        self.agents: list[RemoteAgent] = []

        def factory(conn: AgentConnection) -> RemoteAgent:
            agent = RemoteAgent(conn)
            self.agents.append(agent)
            return agent

        self.resource = ACPResource(factory, clock=self.clock, **kwargs)
        self.site = RemoteSite(self.resource, b"/acp", self.clock)
        self.site.timeOut = None

    def request(
        self,
        method: str,
        headers: dict[str, str] | None = None,
        body: bytes = b"",
        path: str = "/acp",
    ) -> Response:
        transport = StringTransport(
            peerAddress=IPv4Address("TCP", "127.0.0.1", 40000),
            hostAddress=IPv4Address("TCP", "127.0.0.1", 8765),
        )
        channel = self.site.buildProtocol(transport.getPeer())
        assert channel is not None
        channel.makeConnection(transport)
        lines = [f"{method} {path} HTTP/1.0", "Host: 127.0.0.1:8765"]
        for key, value in (headers or {}).items():
            lines.append(f"{key}: {value}")
        if method == "POST":
            lines.append(f"Content-Length: {len(body)}")
        raw = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
        channel.dataReceived(raw)
        return Response(transport, channel)

    def post(self, message: Any, cid: str | None = None, **headers: str) -> Response:
        hdrs = {"Content-Type": "application/json"}
        if cid is not None:
            hdrs["Acp-Connection-Id"] = cid
        hdrs.update({k.replace("_", "-"): v for k, v in headers.items()})
        return self.request("POST", hdrs, json.dumps(message).encode())

    def initialize(self, **headers: str) -> str:
        response = self.post(
            {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}},
            **headers,
        )
        assert response.status == 200, response.raw
        cid = response.header("Acp-Connection-Id")
        assert cid
        return cid

    def stream(self, cid: str, **headers: str) -> Response:
        hdrs = {"Accept": "text/event-stream", "Acp-Connection-Id": cid}
        hdrs.update({k.replace("_", "-"): v for k, v in headers.items()})
        return self.request("GET", hdrs)

    def new_session(self, cid: str) -> None:
        message = {"jsonrpc": "2.0", "id": 1, "method": "session/new"}
        message["params"] = {"cwd": "/", "mcpServers": []}
        assert self.post(message, cid).status == 202

    def prompt(self, cid: str, words: str, rid: int = 2, **headers: str) -> Response:
        params = {"sessionId": "s1", "prompt": [{"type": "text", "text": words}]}
        message = {"jsonrpc": "2.0", "id": rid, "method": "session/prompt", "params": params}
        hdrs = {"Acp_Session_Id": "s1", **headers}
        return self.post(message, cid, **hdrs)


def updates(events: list[dict[str, Any]]) -> list[str]:
    return [
        e["params"]["update"]["content"]["text"]
        for e in events
        if e.get("method") == "session/update"
    ]


def turn_ended(rid: int, stop_reason: str = "end_turn") -> dict[str, Any]:
    """The answer to prompt ``rid``, ended with ``stop_reason``."""
    return {"jsonrpc": "2.0", "id": rid, "result": {"stopReason": stop_reason}}


def allow(request: dict[str, Any]) -> dict[str, Any]:
    """The client's answer to ``request`` (a request_permission): the "allow" option."""
    outcome = {"outcome": "selected", "optionId": "allow"}
    return {"jsonrpc": "2.0", "id": request["id"], "result": {"outcome": outcome}}


# -- the RFD's routing and validation ------------------------------------------------------


def test_initialize_answers_200_with_the_result_and_the_connection_id() -> None:
    """POST initialize (no Acp-Connection-Id): 200, a JSON body with the result, the id header."""
    server = Server()
    response = server.post(
        {"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {"protocolVersion": 1}}
    )
    assert response.status == 200
    assert response.header("Content-Type") == "application/json"
    assert response.json()["id"] == 7
    assert response.json()["result"]["protocolVersion"] == 1
    cid = response.header("Acp-Connection-Id")
    assert cid in server.resource.connections


def test_other_posts_answer_202_and_the_answer_comes_on_the_stream() -> None:
    """session/new: 202 with an empty body; its response is an event on the GET stream."""
    server = Server()
    cid = server.initialize()
    stream = server.stream(cid)
    response = server.post(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "session/new",
            "params": {"cwd": "/", "mcpServers": []},
        },
        cid,
    )
    assert response.status == 202
    assert response.body == b""
    assert stream.status == 200
    assert stream.header("Content-Type") == "text/event-stream"
    assert stream.events() == [{"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s1"}}]


def test_wrong_content_type_is_415() -> None:
    """A POST whose Content-Type is not application/json is refused 415."""
    server = Server()
    response = server.request("POST", {"Content-Type": "text/plain"}, b"{}")
    assert response.status == 415
    assert "application/json" in response.json()["error"]["message"]


def test_content_type_parameters_are_accepted() -> None:
    """application/json; charset=utf-8 is application/json."""
    server = Server()
    message = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
    response = server.request(
        "POST", {"Content-Type": "application/json; charset=utf-8"}, json.dumps(message).encode()
    )
    assert response.status == 200


def test_missing_connection_id_is_400() -> None:
    """A POST other than initialize, a GET or a DELETE without Acp-Connection-Id: 400."""
    server = Server()
    message = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {}}
    assert server.post(message).status == 400
    assert server.request("GET", {"Accept": "text/event-stream"}).status == 400
    assert server.request("DELETE").status == 400


def test_unknown_connection_id_is_404() -> None:
    """An Acp-Connection-Id that names no open connection: 404 on POST, GET and DELETE."""
    server = Server()
    message = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {}}
    assert server.post(message, "nope").status == 404
    assert server.stream("nope").status == 404
    assert server.request("DELETE", {"Acp-Connection-Id": "nope"}).status == 404


def test_batches_are_501() -> None:
    """A JSON array (a JSON-RPC batch) is answered 501."""
    server = Server()
    cid = server.initialize()
    assert server.post([{"jsonrpc": "2.0", "method": "x"}], cid).status == 501


def test_body_that_is_not_json_is_400_parse_error() -> None:
    """A body that is not JSON: 400 with a -32700 error."""
    server = Server()
    response = server.request("POST", {"Content-Type": "application/json"}, b"{nope")
    assert response.status == 400
    assert response.json()["error"]["code"] == -32700


def test_get_without_accept_event_stream_is_406() -> None:
    """GET whose Accept lacks text/event-stream: 406, before the connection is looked up."""
    server = Server()
    cid = server.initialize()
    assert server.request("GET", {"Acp-Connection-Id": cid}).status == 406
    assert (
        server.request("GET", {"Acp-Connection-Id": cid, "Accept": "application/json"}).status
        == 406
    )


def test_delete_ends_the_connection_and_the_agent_sees_it() -> None:
    """DELETE: 202, the stream ends, the agent's connection closes; a replayed DELETE is 404."""
    server = Server()
    cid = server.initialize()
    stream = server.stream(cid)
    response = server.request("DELETE", {"Acp-Connection-Id": cid})
    assert response.status == 202
    assert server.agents[0].ended == [None]
    assert cid not in server.resource.connections
    assert stream.transport.disconnecting
    assert server.request("DELETE", {"Acp-Connection-Id": cid}).status == 404


def test_delete_cancels_running_turns() -> None:
    """DELETE mid-turn: the turn is cancelled (its answer goes out), then the connection ends."""
    server = Server()
    cid = server.initialize()
    stream = server.stream(cid)
    server.new_session(cid)
    server.prompt(cid, "wait")
    server.request("DELETE", {"Acp-Connection-Id": cid})
    answers = [e for e in stream.events() if e.get("id") == 2]
    assert answers == [turn_ended(2, "cancelled")]


def test_session_scoped_post_needs_acp_session_id() -> None:
    """session/prompt without Acp-Session-Id, or naming another session: 400 (RFD routing)."""
    server = Server()
    cid = server.initialize()
    server.new_session(cid)
    params = {"sessionId": "s1", "prompt": [{"type": "text", "text": "stream 1"}]}
    message = {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": params}
    missing = server.post(message, cid)
    assert missing.status == 400
    assert "Acp-Session-Id" in missing.json()["error"]["message"]
    assert server.post(message, cid, Acp_Session_Id="other").status == 400
    assert server.post(message, cid, Acp_Session_Id="s1").status == 202


def test_requests_before_initialize_are_refused_as_over_stdio() -> None:
    """A connection whose initialize failed still refuses session/new (the ACP lifecycle)."""
    server = Server()
    bad = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}
    response = server.post(bad)
    assert response.status == 200
    assert response.json()["error"]["code"] == -32602
    cid = response.header("Acp-Connection-Id")
    assert cid is not None
    stream = server.stream(cid)
    server.new_session(cid)
    (answer,) = stream.events()
    assert answer["error"]["code"] == -32600
    assert "before initialize" in answer["error"]["message"]


def test_initialize_not_answered_in_time_is_504_and_the_connection_ends() -> None:
    """An agent that never answers initialize: 504 after initialize_timeout, nothing kept."""
    RemoteAgent.hang_initialize = True
    try:
        server = Server(limits=RemoteLimits(initialize_timeout=5))
        message = {"jsonrpc": "2.0", "id": 0, "method": "initialize"}
        message["params"] = {"protocolVersion": 1}
        response = server.post(message)
        assert response.raw == b""
        server.clock.advance(5)
        assert response.status == 504
        assert "initialize" in response.json()["error"]["message"]
        assert server.resource.connections == {}
        assert len(server.agents[0].ended) == 1
    finally:
        RemoteAgent.hang_initialize = False


def test_other_methods_are_405() -> None:
    """PUT (or any method but POST, GET, DELETE): 405 with Allow."""
    server = Server()
    response = server.request("PUT")
    assert response.status == 405
    assert response.header("Allow") == "GET, POST, DELETE"


# -- the event stream -----------------------------------------------------------------------


def test_stream_carries_every_message_in_order() -> None:
    """A streamed prompt: each chunk, then the response, in the order the agent wrote them."""
    server = Server()
    cid = server.initialize()
    stream = server.stream(cid)
    server.new_session(cid)
    server.prompt(cid, "stream 20")
    events = stream.events()
    assert updates(events) == [str(i) for i in range(20)]
    assert events[-1] == turn_ended(2)


def _count_writes(stream: Response) -> list[bytes]:
    """The writes made on ``stream``'s transport from now on."""
    writes: list[bytes] = []
    transport = stream.transport
    write, write_sequence = transport.write, transport.writeSequence

    def counted_write(data: bytes) -> None:
        writes.append(data)
        write(data)

    def counted_sequence(data: Any) -> None:
        data = list(data)
        writes.append(b"".join(data))
        write_sequence(data)

    transport.write = counted_write  # type: ignore[method-assign]
    transport.writeSequence = counted_sequence  # type: ignore[method-assign]
    return writes


def test_a_turn_is_one_write_on_the_stream() -> None:
    """A streamed turn's chunks and its answer, written while one POST is processed,
    reach the stream as one write (one HTTP chunk, one HTTP/2 DATA frame), in order."""
    server = Server()
    cid = server.initialize()
    stream = server.stream(cid)
    server.new_session(cid)
    writes = _count_writes(stream)
    server.prompt(cid, "stream 20")
    assert len(writes) == 1
    events = Response.events_of(writes[0])
    assert updates(events) == [str(i) for i in range(20)]
    assert events[-1]["id"] == 2


def test_a_turn_is_one_write_on_its_session_stream() -> None:
    """With the session's own GET open, a streamed turn's chunks and its answer, written
    while one POST is processed, reach that stream as one write (one HTTP chunk, one
    HTTP/2 DATA frame and TLS record), in order; nothing of it on the connection stream."""
    server = Server()
    cid = server.initialize()
    main = server.stream(cid)
    server.new_session(cid)
    listener = server.stream(cid, Acp_Session_Id="s1")
    writes = _count_writes(listener)
    main_writes = _count_writes(main)
    server.prompt(cid, "stream 20")
    assert len(writes) == 1
    events = Response.events_of(writes[0])
    assert updates(events) == [str(i) for i in range(20)]
    assert events[-1]["id"] == 2
    assert main_writes == []


def test_messages_held_for_a_session_stream_that_closes_go_to_the_connection_stream() -> None:
    """A session's messages held for its stream, which closes before they are written,
    go on the connection stream, in order, ahead of the session's later ones."""
    server = Server()
    cid = server.initialize()
    main = server.stream(cid)
    server.new_session(cid)
    listener = server.stream(cid, Acp_Session_Id="s1")
    connection = server.resource.connections[cid]
    update = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1"}}
    for name in ("one", "two"):
        connection.protocol.sendMessage(json.dumps({**update, "n": name}).encode())
    listener.close()
    connection.protocol.sendMessage(json.dumps({**update, "n": "three"}).encode())
    server.clock.advance(0)
    assert listener.events() == []
    assert [event.get("n") for event in main.events()[1:]] == ["one", "two", "three"]


def test_a_turn_written_outside_a_read_reaches_its_session_stream_by_the_next_turn() -> None:
    """A session's message the engine writes without flushing is held for the session's
    stream at most until the reactor's next turn."""
    server = Server()
    cid = server.initialize()
    server.stream(cid)
    server.new_session(cid)
    listener = server.stream(cid, Acp_Session_Id="s1")
    connection = server.resource.connections[cid]
    message = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1"}}
    connection.protocol.sendMessage(json.dumps(message).encode())
    assert listener.events() == []
    server.clock.advance(0)
    assert listener.events() == [message]


def test_a_long_turn_is_written_as_it_goes_past_the_batch_bound() -> None:
    """A turn writing more than ``MAX_BATCH_BYTES`` is written in pieces as it goes (so
    the socket's back-pressure still reaches the agent), none much beyond the bound."""
    server = Server()
    cid = server.initialize()
    stream = server.stream(cid)
    server.new_session(cid)
    writes = _count_writes(stream)
    server.prompt(cid, "big 20")  # 20 chunks of 10 kB
    assert len(writes) >= 3
    assert all(len(data) < MAX_BATCH_BYTES + 11_000 for data in writes)
    events = Response.events_of(b"".join(writes))
    assert [text[:6] for text in updates(events)] == [f"{i:06d}" for i in range(20)]


def test_post_bodies_are_never_parsed_as_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    """twisted.web's form handling stays off where this Twisted lets it be turned off: a
    POST's Content-Type is not run through its parser (``email``'s, a cost on every
    message) and no body is parsed as a form before the resource sees it."""
    import inspect

    import twisted.web.http
    from twisted.web.server import Site

    if "parsePOSTFormSubmission" not in inspect.signature(Site.__init__).parameters:
        pytest.skip("this Twisted always parses form bodies")

    def parsed(line: bytes) -> bytes:
        raise AssertionError(f"Content-Type parsed for a form: {line!r}")

    monkeypatch.setattr(twisted.web.http, "_parseContentType", parsed)
    server = Server()
    cid = server.initialize()
    server.new_session(cid)
    form = server.request(
        "POST",
        {"Content-Type": "application/x-www-form-urlencoded", "Acp-Connection-Id": cid},
        b"a=1",
    )
    assert form.status == 415


def test_a_message_written_outside_a_read_is_sent_by_the_next_reactor_turn() -> None:
    """A message the engine writes without flushing (``sendMessage``) is held at most until
    the reactor's next turn."""
    server = Server()
    cid = server.initialize()
    stream = server.stream(cid)
    connection = server.resource.connections[cid]
    connection.protocol.sendMessage(b'{"jsonrpc":"2.0","method":"note"}')
    assert stream.events() == []
    server.clock.advance(0)
    assert stream.events() == [{"jsonrpc": "2.0", "method": "note"}]


def test_messages_held_when_the_stream_goes_are_queued_for_the_next_stream() -> None:
    """Messages held for a stream that closes before they are written are kept, in order,
    ahead of later ones, for the client's next stream."""
    server = Server()
    cid = server.initialize()
    first = server.stream(cid)
    connection = server.resource.connections[cid]
    connection.deliver(b'{"jsonrpc":"2.0","method":"one"}')
    first.close()
    connection.deliver(b'{"jsonrpc":"2.0","method":"two"}')
    second = server.stream(cid)
    assert [event["method"] for event in second.events()] == ["one", "two"]
    assert first.events() == []


def test_messages_before_the_stream_opens_are_queued() -> None:
    """What the agent writes before the GET arrives is delivered first, in order, on open."""
    server = Server()
    cid = server.initialize()
    server.new_session(cid)
    server.prompt(cid, "stream 3")
    stream = server.stream(cid)
    events = stream.events()
    assert events[0]["result"] == {"sessionId": "s1"}
    assert updates(events) == ["0", "1", "2"]
    assert events[-1]["id"] == 2


def test_keepalive_comments_on_the_reactor_clock() -> None:
    """An idle stream gets a ': keepalive' comment every keepalive_interval seconds."""
    server = Server(limits=RemoteLimits(keepalive_interval=5))
    cid = server.initialize()
    stream = server.stream(cid)
    assert b": keepalive" not in stream.comments()
    server.clock.advance(5)
    server.clock.advance(5)
    assert stream.comments().count(b": keepalive") == 2


def test_newer_stream_replaces_the_older() -> None:
    """A second GET for the connection takes over; the first one ends."""
    server = Server()
    cid = server.initialize()
    first = server.stream(cid)
    second = server.stream(cid)
    server.new_session(cid)
    assert first.transport.disconnecting
    assert second.events()[0]["result"] == {"sessionId": "s1"}
    assert first.events() == []


def test_a_sessions_messages_go_on_its_session_stream() -> None:
    """With the session's GET (Acp-Session-Id) open, the session's updates and the prompt's
    response come there, in order, and nothing of the session on the connection stream;
    session/new's response is on the connection stream (the RFD's 2026-05-04 revision)."""
    server = Server()
    cid = server.initialize()
    main = server.stream(cid)
    server.new_session(cid)
    listener = server.stream(cid, Acp_Session_Id="s1")
    server.prompt(cid, "stream 2")
    assert listener.status == 200
    assert not listener.transport.disconnecting
    events = listener.events()
    assert updates(events) == ["0", "1"]
    assert events[-1] == turn_ended(2)
    assert main.events() == [{"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s1"}}]


def test_without_a_session_stream_a_sessions_messages_use_the_connection_stream() -> None:
    """A client of the RFD's 2026-04-23 revision (one stream per connection, no session
    GET) receives the session's messages on the connection stream."""
    server = Server()
    cid = server.initialize()
    main = server.stream(cid)
    server.new_session(cid)
    server.prompt(cid, "stream 2")
    events = main.events()
    assert updates(events) == ["0", "1"]
    assert events[-1] == turn_ended(2)


def test_permission_round_trip_on_the_session_stream() -> None:
    """The agent's request_permission comes on the session's stream; the answer POSTed
    (without Acp-Session-Id) resumes the turn, whose end comes there too; session/cancel's
    effect (the cancelled answer) as well."""
    server = Server()
    cid = server.initialize()
    main = server.stream(cid)
    server.new_session(cid)
    listener = server.stream(cid, Acp_Session_Id="s1")
    server.prompt(cid, "ask")
    request = listener.events()[-1]
    assert request["method"] == "session/request_permission"
    assert server.post(allow(request), cid).status == 202
    events = listener.events()
    assert updates(events) == ["allow"]
    assert events[-1] == turn_ended(2)
    server.prompt(cid, "wait", rid=3)
    cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s1"}}
    assert server.post(cancel, cid, Acp_Session_Id="s1").status == 202
    assert listener.events()[-1] == turn_ended(3, "cancelled")
    assert len(main.events()) == 1  # session/new's response only


def test_a_closed_session_stream_sends_the_rest_to_the_connection_stream() -> None:
    """When the session's GET ends mid-turn, the session's next messages come on the
    connection stream: nothing is lost."""
    server = Server()
    cid = server.initialize()
    main = server.stream(cid)
    server.new_session(cid)
    listener = server.stream(cid, Acp_Session_Id="s1")
    server.prompt(cid, "ask")
    request = listener.events()[-1]
    listener.close()
    assert server.post(allow(request), cid).status == 202
    events = main.events()
    assert updates(events) == ["allow"]
    assert events[-1] == turn_ended(2)


def test_a_get_for_an_unknown_session_is_404() -> None:
    """A GET with an Acp-Session-Id the connection never created (nor loaded) is refused
    with 404, not opened: 'An unknown Acp-Session-Id for the given connection returns
    404.'"""
    server = Server()
    cid = server.initialize()
    server.stream(cid)
    assert server.stream(cid, Acp_Session_Id="s1").status == 404
    server.new_session(cid)
    assert server.stream(cid, Acp_Session_Id="other").status == 404
    assert server.stream(cid, Acp_Session_Id="s1").status == 200
    other = server.initialize()
    assert server.stream(other, Acp_Session_Id="s1").status == 404


def test_a_session_whose_load_failed_stays_unknown() -> None:
    """session/load answered with an error (on the connection stream) does not make the
    session known: its GET is 404 (a successful load: tests/remote/test_session_routes.py)."""
    server = Server()
    cid = server.initialize()
    main = server.stream(cid)
    load = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "session/load",
        "params": {"sessionId": "old", "cwd": "/", "mcpServers": []},
    }
    assert server.post(load, cid).status == 202
    answered = main.events()[-1]
    assert answered["id"] == 5 and "error" in answered  # the test agent cannot load
    assert server.stream(cid, Acp_Session_Id="old").status == 404


def test_a_paused_session_stream_holds_the_engine() -> None:
    """A client that stops reading a session's stream holds the agent's writers (as on
    the connection stream), released when it reads again or the stream ends."""
    server = Server()
    cid = server.initialize()
    server.stream(cid)
    server.new_session(cid)
    listener = server.stream(cid, Acp_Session_Id="s1")
    connection = server.resource.connections[cid]
    producer = listener.transport.producer
    assert producer is not None
    held: list[str] = []

    class Engine:
        def pauseProducing(self) -> None:
            held.append("pause")

        def resumeProducing(self) -> None:
            held.append("resume")

        def stopProducing(self) -> None:
            held.append("stop")

    connection.engine_producer = cast(Any, Engine())
    producer.pauseProducing()
    assert held == ["pause"]
    producer.resumeProducing()
    assert held == ["pause", "resume"]
    producer.pauseProducing()
    listener.close()
    assert held == ["pause", "resume", "pause", "resume"]


def test_permission_round_trip() -> None:
    """The agent's request_permission is an event; the answer POSTed (202) resumes the turn."""
    server = Server()
    cid = server.initialize()
    stream = server.stream(cid)
    server.new_session(cid)
    server.prompt(cid, "ask")
    request = stream.events()[-1]
    assert request["method"] == "session/request_permission"
    # A response carries no sessionId: no Acp-Session-Id needed (the SDK sends none).
    assert server.post(allow(request), cid).status == 202
    events = stream.events()
    assert updates(events) == ["allow"]
    assert events[-1] == turn_ended(2)


def test_cancel() -> None:
    """session/cancel POSTed (202): the running prompt is answered cancelled on the stream."""
    server = Server()
    cid = server.initialize()
    stream = server.stream(cid)
    server.new_session(cid)
    server.prompt(cid, "wait")
    cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s1"}}
    assert server.post(cancel, cid, Acp_Session_Id="s1").status == 202
    assert stream.events()[-1] == turn_ended(2, "cancelled")


# -- the grace period ----------------------------------------------------------------------


def test_connection_without_stream_or_post_is_closed_after_the_grace_period() -> None:
    """The stream gone and no POST for grace_period: turns cancelled, the agent sees the end."""
    server = Server(limits=RemoteLimits(grace_period=30))
    cid = server.initialize()
    stream = server.stream(cid)
    server.new_session(cid)
    server.prompt(cid, "wait")
    stream.close()
    server.clock.advance(29)
    assert cid in server.resource.connections
    server.clock.advance(1)
    assert cid not in server.resource.connections
    (ended,) = server.agents[0].ended
    assert isinstance(ended, Failure)
    assert "no event stream and no request for 30 s" in str(ended.value)
    assert server.stream(cid).status == 404


def test_a_post_restarts_the_grace_period() -> None:
    """A POST while no stream is open restarts the grace period; a GET stops it."""
    server = Server(limits=RemoteLimits(grace_period=30))
    cid = server.initialize()
    server.clock.advance(20)
    server.new_session(cid)
    server.clock.advance(20)
    assert cid in server.resource.connections
    server.stream(cid)
    server.clock.advance(300)
    assert cid in server.resource.connections


def test_initialize_never_followed_by_a_get_ends_after_the_grace_period() -> None:
    """A client that initializes and never comes back does not hold a connection forever."""
    server = Server(limits=RemoteLimits(grace_period=10))
    cid = server.initialize()
    server.clock.advance(10)
    assert cid not in server.resource.connections


# -- limits ----------------------------------------------------------------------------------


def test_message_larger_than_the_limit_is_413() -> None:
    """A POST body over max_message_size: 413 with a -32600 error; nothing reaches the agent."""
    server = Server(limits=RemoteLimits(max_message_size=1000))
    cid = server.initialize()
    params = {"sessionId": "s1", "prompt": [{"type": "text", "text": "x" * 2000}]}
    message = {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": params}
    response = server.post(message, cid, Acp_Session_Id="s1")
    assert response.status == 413
    assert response.json()["error"]["code"] == -32600
    assert "1000 bytes" in response.json()["error"]["message"]


def test_too_many_connections_is_503() -> None:
    """initialize beyond max_connections: 503 with Retry-After; a DELETE frees a place."""
    server = Server(limits=RemoteLimits(max_connections=1))
    cid = server.initialize()
    message = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
    refused = server.post(message)
    assert refused.status == 503
    assert refused.header("Retry-After") == "5"
    server.request("DELETE", {"Acp-Connection-Id": cid})
    assert server.post(message).status == 200


def test_queue_overflow_closes_the_connection_with_a_reason() -> None:
    """More than max_queued_messages for a client that does not read: the connection ends."""
    server = Server(limits=RemoteLimits(max_queued_messages=5))
    cid = server.initialize()
    server.new_session(cid)
    server.prompt(cid, "stream 10")
    server.clock.advance(0)
    assert cid not in server.resource.connections
    (ended,) = server.agents[0].ended
    assert isinstance(ended, Failure)
    assert "more than 5 messages queued" in str(ended.value)


def test_a_burst_with_no_stream_open_waits_and_stays_under_the_byte_bound() -> None:
    """
    No stream open: once a quarter of max_queued_bytes is queued the agent's writable()
    waits, so a burst of large notifications stays under the bound; the stream, once
    opened, gets every one of them in order and the agent goes on.
    """
    server = Server(limits=RemoteLimits(max_queued_bytes=100_000))
    cid = server.initialize()
    server.new_session(cid)
    server.prompt(cid, "big 50")  # 50 x 10 kB, each awaited
    server.clock.advance(0)
    connection = server.resource.connections[cid]
    assert 25_000 < sum(map(len, connection.queue)) < 100_000
    assert len(connection.queue) < 50
    assert server.agents[0].ended == []
    stream = server.stream(cid)
    server.clock.advance(0)
    chunks = updates(stream.events())
    assert [int(c[:6]) for c in chunks] == list(range(50))
    assert not connection.queue
    assert stream.events()[-1]["result"]["stopReason"] == "end_turn"


def test_a_burst_not_awaited_over_the_byte_bound_closes_with_a_reason() -> None:
    """
    An agent that writes without awaiting writable(): the queue never holds more than
    max_queued_bytes; the connection ends with a reason naming the bound.
    """
    server = Server(limits=RemoteLimits(max_queued_bytes=100_000))
    cid = server.initialize()
    server.new_session(cid)
    connection = server.resource.connections[cid]
    server.prompt(cid, "flood 50")  # 50 x 10 kB at once
    assert sum(map(len, connection.queue)) <= 100_000
    server.clock.advance(0)
    assert cid not in server.resource.connections
    (ended,) = server.agents[0].ended
    assert isinstance(ended, Failure)
    assert "more than 100000 bytes queued" in str(ended.value)


def test_a_client_that_stops_reading_pauses_the_agent() -> None:
    """The stream's transport pauses: writes queue and the agent's writable() waits."""
    server = Server()
    cid = server.initialize()
    stream = server.stream(cid)
    server.new_session(cid)
    connection = server.resource.connections[cid]
    connection.stream_paused(True)
    waiter = server.agents[0].conn.writable()
    server.prompt(cid, "stream 2")
    assert not waiter.called
    assert updates(stream.events()) == []
    connection.stream_paused(False)
    assert waiter.called
    assert updates(stream.events()) == ["0", "1"]


# -- security --------------------------------------------------------------------------------


def test_bearer_token_required_when_configured() -> None:
    """With a token: none or a wrong one is 401 (WWW-Authenticate: Bearer); the right one passes."""
    server = Server(token=b"s3cret")
    message = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
    missing = server.post(message)
    assert missing.status == 401
    assert (
        missing.header(
            "WWW-Authenticate",
        )
        == 'Bearer realm="acp"'
    )
    assert b"s3cret" not in missing.raw
    assert server.post(message, Authorization="Bearer wrong").status == 401
    assert server.post(message, Authorization="Basic s3cret").status == 401
    assert server.post(message, Authorization="Bearer s3cret").status == 200


def test_token_in_the_url_is_refused() -> None:
    """?access_token= is never accepted, even with the right token (tokens leak from URLs)."""
    server = Server(token=b"s3cret")
    response = server.request(
        "GET", {"Accept": "text/event-stream"}, path="/acp?access_token=s3cret"
    )
    assert response.status == 401
    assert "URL" in response.json()["error"]["message"]


def test_origin_checks() -> None:
    """Origin absent: OK; listed or loopback-to-loopback: OK; any other: 403."""
    server = Server(allowed_origins=["https://app.example"])
    message = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
    assert server.post(message, Origin="https://evil.example").status == 403
    assert server.post(message, Origin="https://app.example").status == 200
    assert server.post(message, Origin="http://localhost:3000").status == 200
    assert server.post(message).status == 200
    assert not origin_allowed(b"http://localhost:3000", b"agent.example:8765", ())
    assert origin_allowed(b"http://[::1]:3000", b"[::1]:8765", ())


def test_bind_defaults_to_loopback_and_refuses_unauthenticated_binds() -> None:
    """
    tcp:PORT binds 127.0.0.1 and, loopback included, needs a token or an explicit
    no_token (loopback only); unix is owner-only (mode=600 added) and needs none.
    """
    with pytest.raises(InsecureBindError, match="loopback is not a trust boundary"):
        check_bind("tcp:8765", token=None)
    assert check_bind("tcp:8765", token=b"t") == "tcp:8765:interface=127.0.0.1"
    assert check_bind("tcp:8765", token=None, no_token=True) == "tcp:8765:interface=127.0.0.1"
    assert check_bind("tcp:port=0:interface=127.0.0.1", token=b"t").endswith("127.0.0.1")
    assert check_bind("unix:/tmp/acp.sock", token=None) == "unix:/tmp/acp.sock:mode=600"
    with pytest.raises(InsecureBindError, match=r"0\.0\.0\.0 \(not loopback\)"):
        check_bind("tcp:port=0:interface=0.0.0.0", token=None)
    with pytest.raises(InsecureBindError, match="for loopback only"):
        check_bind("tcp:port=0:interface=0.0.0.0", token=None, no_token=True)
    with pytest.raises(InsecureBindError):
        check_bind("tcp:0:", token=None)
    assert check_bind("tcp:port=0:interface=0.0.0.0", token=b"t").endswith("0.0.0.0")


def test_serve_remote_refuses_an_open_bind_without_token() -> None:
    """serve_remote's Deferred fails at once with InsecureBindError: nothing listens."""
    from acpkit.remote import serve_remote

    failures: list[Failure] = []
    serve_remote(Clock(), "tcp:port=0:interface=0.0.0.0", RemoteAgent).addErrback(failures.append)
    (failure,) = failures
    assert failure.check(InsecureBindError)


def test_websocket_upgrade_goes_through_the_security_checks_first() -> None:
    """GET with Upgrade: websocket and no token: 401 before any WebSocket handling."""
    server = Server(token=b"s3cret")
    response = server.request("GET", {"Upgrade": "websocket", "Connection": "Upgrade"})
    assert response.status == 401


def test_websocket_upgrade_without_the_websocket_module_is_501(monkeypatch: Any) -> None:
    """While acpkit.remote.websocket cannot be imported: 501 'WebSocket not available',
    naming the extra that brings it."""
    monkeypatch.setitem(sys.modules, "acpkit.remote.websocket", None)
    server = Server()
    response = server.request("GET", {"Upgrade": "websocket", "Connection": "Upgrade"})
    assert response.status == 501
    assert response.json()["error"]["message"] == (
        "WebSocket not available: the server lacks the 'websocket' extra"
    )


# -- interop: the official Python SDK's Streamable HTTP client --------------------------------


def _serve_in_child(tmp_path: Path, extra: list[str]) -> tuple[subprocess.Popen[str], str]:
    """The interop agent served by serve_remote in a child process; its URL."""
    env = child_env()
    child = subprocess.Popen(
        [sys.executable, str(FIXTURES / "remote_agent.py"), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert child.stdout is not None
    url = child.stdout.readline().strip()
    assert url.startswith(("http://", "https://")), url
    return child, url


def _run_sdk_client(url: str, target: Path, extra: list[str]) -> dict[str, Any]:
    env = dict(os.environ)
    done = subprocess.run(
        [sys.executable, str(FIXTURES / "sdk_http_client.py"), url, str(target), *extra],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.process
def test_official_sdk_http_client_drives_an_acpkit_agent(tmp_path: Path) -> None:
    """
    acp.http.client (SDK 0.12.1) against serve_remote over HTTP/1.1 on loopback with a
    token: initialize, session/new, a streamed prompt, a permission round trip, fs, cancel.
    """
    pytest.importorskip("httpx")
    pytest.importorskip("acp.http.client")
    target = tmp_path / "note.txt"
    target.write_text("hello")
    child, url = _serve_in_child(tmp_path, ["--token", "tok"])
    try:
        result = _run_sdk_client(url, target, ["--token", "tok"])
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(30)
    assert result["chunks"] == ["one", " two", " three", "waiting"]
    assert result["permissions"] == [f"write_file: {target}"]
    assert result["first"] == "end_turn"
    assert result["second"] == "cancelled"
    assert result["httpVersions"] == ["HTTP/1.1"]
    assert (tmp_path / "note.txt.out").read_text() == "HELLOallow"


@pytest.mark.skipif(tls_serving_problem() is not None, reason=tls_serving_problem() or "")
@pytest.mark.process
def test_official_sdk_http_client_over_tls_speaks_http2(tmp_path: Path) -> None:
    """Over TLS with the h2 package installed, ALPN picks HTTP/2 and the scenario passes."""
    pytest.importorskip("httpx")
    pytest.importorskip("h2")
    pytest.importorskip("priority")
    target = tmp_path / "note.txt"
    target.write_text("hello")
    child, url = _serve_in_child(tmp_path, ["--tls"])
    try:
        result = _run_sdk_client(url, target, ["--cafile", str(tmp_path / "cert.pem")])
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(30)
    assert result["second"] == "cancelled"
    assert result["httpVersions"] == ["HTTP/2"]


# -- bob: twistd -n acp-agent --listen http:... ----------------------------------------------

TWISTD = ["-c", "from twisted.scripts.twistd import run; run()", "-n", "acp-agent"]


def _bob(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    config = tmp_path / "agent.toml"
    config.write_text("", encoding="utf-8")
    return subprocess.Popen(
        [sys.executable, *TWISTD, "--config", str(config), "--engine", "echo", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


@pytest.mark.process
def test_bob_serves_remote_acp_with_listen_http(tmp_path: Path) -> None:
    """--listen http:tcp:0 --token-file: bob on loopback; the SDK's HTTP client runs a turn."""
    pytest.importorskip("httpx")
    token = tmp_path / "token"
    token.write_text("tok\n")
    token.chmod(0o600)
    bob = _bob(tmp_path, "--listen", "http:tcp:0", "--token-file", str(token))
    try:
        assert bob.stderr is not None
        port = None
        for line in bob.stderr:
            if "listening on" in line:
                assert "host='127.0.0.1'" in line
                port = int(line.rsplit("port=", 1)[1].rstrip(")\n"))
                break
        assert port is not None, "bob did not say where it listens"
        done = subprocess.run(
            [
                sys.executable,
                str(FIXTURES / "sdk_http_prompt.py"),
                f"http://127.0.0.1:{port}/acp",
                "hello there",
                "--token",
                "tok",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout) == {
            "chunks": ["Echo: hello there"],
            "stopReason": "end_turn",
        }
    finally:
        bob.terminate()
        bob.wait(30)


@pytest.mark.process
def test_bob_refuses_an_open_bind_without_a_token(tmp_path: Path) -> None:
    """--listen http:tcp:0:interface=0.0.0.0 without --token-file: exit 1, one line saying why."""
    bob = _bob(tmp_path, "--listen", "http:tcp:port=0:interface=0.0.0.0")
    _, err = bob.communicate(timeout=60)
    assert bob.returncode == 1
    assert err.count("\n") == 1, err
    assert "not loopback" in err and "bearer token" in err and "Traceback" not in err


def test_agent_closing_its_connection_ends_the_stream() -> None:
    """The agent's conn.close(): the stream ends and the connection id is forgotten (404)."""
    server = Server()
    cid = server.initialize()
    stream = server.stream(cid)
    server.agents[0].conn.close()
    assert stream.transport.disconnecting
    assert cid not in server.resource.connections
    assert server.request("DELETE", {"Acp-Connection-Id": cid}).status == 404


def test_stopping_the_site_ends_every_connection() -> None:
    """When the listening port stops (the factory stops), every connection ends."""
    server = Server()
    server.site.doStart()
    server.initialize()
    server.initialize()
    server.site.doStop()
    assert server.resource.connections == {}
    assert [agent.ended for agent in server.agents] == [[None], [None]]


def test_chunked_body_over_the_limit_is_413_and_not_stored() -> None:
    """A chunked POST (no Content-Length) over max_message_size: 413, the body not kept."""
    server = Server(limits=RemoteLimits(max_message_size=100))
    transport = StringTransport()
    channel = server.site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
    assert channel is not None
    channel.makeConnection(transport)
    head = (
        b"POST /acp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    channel.dataReceived(head)
    for _ in range(10):
        channel.dataReceived(b"32\r\n" + b"x" * 50 + b"\r\n")
    channel.dataReceived(b"0\r\n\r\n")
    response = Response(transport, channel)
    assert response.status == 413
    dummy = DummyChannel()
    dummy.site = server.site
    request = LimitedRequest(dummy)
    request.gotLength(None)
    request.handleContentChunk(b"x" * 60)
    request.handleContentChunk(b"x" * 60)
    assert request.body_too_large
    assert request.content is not None
    assert request.content.seek(0, 2) == 0  # nothing kept


def test_acpkit_trace_records_remote_traffic(tmp_path: Path, monkeypatch: Any) -> None:
    """With ACPKIT_TRACE set, each remote connection's messages are traced both ways."""
    from acpkit.trace import read_trace

    path = tmp_path / "trace.ndjson"
    monkeypatch.setenv("ACPKIT_TRACE", str(path))
    server = Server()
    cid = server.initialize()
    server.stream(cid)
    server.new_session(cid)
    records = list(read_trace(str(path)))
    seen = [(r.sent, r.json().get("method"), r.json().get("id")) for r in records]
    assert seen == [
        (False, "initialize", 0),
        (True, None, 0),
        (False, "session/new", 1),
        (True, None, 1),
    ]


# -- faults on a real loopback listener ---------------------------------------------------


class _Collect(Protocol):
    """Collects a streamed response body; ``got(marker)`` fires once the marker arrived."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self._tail = b""
        self.waiters: list[tuple[bytes, Deferred[None]]] = []
        self.done: Deferred[None] = Deferred()

    @property
    def data(self) -> bytes:
        return b"".join(self.chunks)

    def dataReceived(self, data: bytes) -> None:
        self.chunks.append(data)
        window = self._tail + data
        self._tail = window[-256:]
        for waiter in list(self.waiters):
            if waiter[0] in window:
                self.waiters.remove(waiter)
                waiter[1].callback(None)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if not self.done.called:
            self.done.callback(None)

    def got(self, marker: bytes) -> Deferred[None]:
        d: Deferred[None] = Deferred()
        if marker in self.data:
            d.callback(None)
        else:
            self.waiters.append((marker, d))
        return d


@implementer(IBodyProducer)
class _Zeros:
    """A request body of ``length`` bytes written 1 MiB at a time (never held whole)."""

    def __init__(self, length: int) -> None:
        self.length = length

    def startProducing(self, consumer: Any) -> Deferred[None]:
        chunk = b"0" * (1024 * 1024)
        for _ in range(self.length // len(chunk)):
            consumer.write(chunk)
        return succeed(None)

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass

    def stopProducing(self) -> None:
        pass


class LoopbackFaultTests(TestCase):
    """serve_remote on a real loopback port, driven by treq; timers on the real reactor."""

    timeout = 30

    async def _serve(self, limits: RemoteLimits) -> tuple[str, ACPResource, list[RemoteAgent]]:
        from twisted.internet import reactor

        agents: list[RemoteAgent] = []

        def factory(conn: AgentConnection) -> RemoteAgent:
            agents.append(RemoteAgent(conn))
            return agents[-1]

        from acpkit.remote import serve_remote

        port = await serve_remote(reactor, "tcp:0", factory, limits=limits, no_token=True)
        self.addCleanup(port.stopListening)
        return f"http://127.0.0.1:{port.getHost().port}/acp", port.factory.acp, agents

    def test_socket_cut_mid_turn_cancels_the_turn_after_the_grace_period(self) -> Deferred[None]:
        """The stream's TCP connection cut mid-turn: after the grace the turn is cancelled,
        the agent sees the connection end and nothing stays registered."""

        async def run() -> None:
            from treq.client import HTTPClient
            from twisted.internet import reactor
            from twisted.web.client import Agent as WebAgent
            from twisted.web.client import HTTPConnectionPool
            from twisted.web.http_headers import Headers

            url, resource, agents = await self._serve(RemoteLimits(grace_period=0.5))
            pool = HTTPConnectionPool(reactor, persistent=False)
            http = HTTPClient(WebAgent(reactor, pool=pool))

            async def post(message: dict[str, Any], **extra: str) -> Any:
                headers = Headers({"Content-Type": ["application/json"]})
                for name, value in extra.items():
                    headers.addRawHeader(name.replace("_", "-"), value)
                response = await http.post(url, data=json.dumps(message).encode(), headers=headers)
                await response.content()
                return response

            init = {"jsonrpc": "2.0", "id": 0, "method": "initialize"}
            init["params"] = {"protocolVersion": 1}
            response = await post(init)
            assert response.code == 200
            cid = response.headers.getRawHeaders("Acp-Connection-Id")[0]
            stream = await http.get(
                url,
                headers=Headers({"Accept": ["text/event-stream"], "Acp-Connection-Id": [cid]}),
            )
            body = _Collect()
            stream.deliverBody(body)
            new = {"jsonrpc": "2.0", "id": 1, "method": "session/new"}
            new["params"] = {"cwd": "/", "mcpServers": []}
            await post(new, Acp_Connection_Id=cid)
            params = {"sessionId": "s1", "prompt": [{"type": "text", "text": "wait"}]}
            prompt = {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": params}
            posted = await post(prompt, Acp_Connection_Id=cid, Acp_Session_Id="s1")
            assert posted.code == 202
            await body.got(b"waiting")
            closed = agents[0].conn.closed
            assert body.transport is not None
            body.transport.stopProducing()  # type: ignore[attr-defined]  # the socket is cut
            await body.done
            reason = None
            try:
                await closed
            except Exception as e:  # the grace period's reason
                reason = e
            assert reason is not None and "no event stream" in str(reason)
            assert resource.connections == {}

        return Deferred.fromCoroutine(run())

    def test_a_slow_reader_holds_the_agent_instead_of_filling_memory(self) -> Deferred[None]:
        """
        A client that stops reading its event stream: the stream's transport pauses, the
        agent's session_update() waits, little is queued; once it reads again, every chunk
        arrives, in order, then the answer.
        """

        async def run() -> None:
            from treq.client import HTTPClient
            from twisted.internet import reactor
            from twisted.web.client import Agent as WebAgent
            from twisted.web.http_headers import Headers

            import acpkit.remote.server as server_module

            paused: Deferred[None] = Deferred()
            original = server_module.RemoteConnection.stream_paused

            def spy(connection: Any, value: bool) -> None:
                original(connection, value)
                if value and not paused.called:
                    paused.callback(None)

            self.patch(server_module.RemoteConnection, "stream_paused", spy)
            url, resource, _ = await self._serve(RemoteLimits(max_queued_messages=50))
            http = HTTPClient(WebAgent(reactor))

            async def post(message: dict[str, Any], **extra: str) -> Any:
                headers = Headers({"Content-Type": ["application/json"]})
                for name, value in extra.items():
                    headers.addRawHeader(name.replace("_", "-"), value)
                response = await http.post(url, data=json.dumps(message).encode(), headers=headers)
                await response.content()
                return response

            init = {"jsonrpc": "2.0", "id": 0, "method": "initialize"}
            init["params"] = {"protocolVersion": 1}
            cid = (await post(init)).headers.getRawHeaders("Acp-Connection-Id")[0]
            stream = await http.get(
                url,
                headers=Headers({"Accept": ["text/event-stream"], "Acp-Connection-Id": [cid]}),
            )
            body = _Collect()
            stream.deliverBody(body)
            assert body.transport is not None
            body.transport.pauseProducing()  # type: ignore[attr-defined]  # stop reading
            new = {"jsonrpc": "2.0", "id": 1, "method": "session/new"}
            new["params"] = {"cwd": "/", "mcpServers": []}
            await post(new, Acp_Connection_Id=cid)
            count = 2000  # 20 MB of chunks, more than the socket buffers hold
            params = {"sessionId": "s1", "prompt": [{"type": "text", "text": f"big {count}"}]}
            prompt = {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": params}
            await post(prompt, Acp_Connection_Id=cid, Acp_Session_Id="s1")
            await paused
            connection = resource.connections[cid]
            assert len(connection.queue) <= 50
            assert b'"id":2,' not in body.data
            body.transport.resumeProducing()  # type: ignore[attr-defined]
            await body.got(b'"id":2,"result"')
            events = Response.events_of(body.data)
            chunks = [
                e["params"]["update"]["content"]["text"][:6]
                for e in events
                if e.get("method") == "session/update"
            ]
            assert chunks == [f"{i:06d}" for i in range(count)]
            assert events[-1]["result"] == {"stopReason": "end_turn"}
            assert cid in resource.connections
            await post({"jsonrpc": "2.0", "id": 3, "method": "x"}, Acp_Connection_Id=cid)

        return Deferred.fromCoroutine(run())

    def test_a_100_mb_message_is_413_without_storing_it(self) -> Deferred[None]:
        """A 100 MB POST is answered 413; the server keeps nothing and stays usable."""

        async def run() -> None:
            from treq.client import HTTPClient
            from twisted.internet import reactor
            from twisted.web.client import Agent as WebAgent
            from twisted.web.http_headers import Headers

            url, resource, _ = await self._serve(RemoteLimits(max_message_size=1024 * 1024))
            http = HTTPClient(WebAgent(reactor))
            headers = Headers({"Content-Type": ["application/json"]})
            response = await http.post(url, data=_Zeros(100 * 1024 * 1024), headers=headers)
            body = json.loads(await response.content())
            assert response.code == 413
            assert body["error"]["code"] == -32600
            init = {"jsonrpc": "2.0", "id": 0, "method": "initialize"}
            init["params"] = {"protocolVersion": 1}
            again = await http.post(url, data=json.dumps(init).encode(), headers=headers)
            await again.content()
            assert again.code == 200
            assert len(resource.connections) == 1

        return Deferred.fromCoroutine(run())


def _typescript_sdk() -> tuple[str, str]:
    """
    ``(node, sdk_dir)``: Node (22 from the real peers, else the system's) and the
    @agentclientprotocol/sdk that .ci/install-real-agents installs for the remote interop
    (``TS_SDK_MODULES``, the version tests/remote/test_remote_interop_ts.py uses, not whichever
    copy another npm package carries); missing: skipped, or failed under
    ``ACPKIT_REAL_AGENTS_REQUIRED=1``.
    """
    import shutil

    sdk = os.path.join(TS_SDK_MODULES, "@agentclientprotocol", "sdk")
    require_peer(os.path.join(sdk, "dist", "transports", "http-stream.js"))
    node = peer(NODE22) or shutil.which("node") or require_peer(NODE22)
    return node, require_peer(sdk)


@pytest.mark.real_agent
@pytest.mark.process
def test_official_typescript_sdk_http_client_drives_an_acpkit_agent(tmp_path: Path) -> None:
    """
    The TypeScript SDK's Streamable HTTP client (experimental/http-client, installed with
    the real agents) against serve_remote: initialize, session/new, a streamed prompt, a
    permission round trip, fs, cancel, read on the session-scoped GETs it opens.
    """
    node, sdk = _typescript_sdk()
    target = tmp_path / "note.txt"
    target.write_text("hello")
    child, url = _serve_in_child(tmp_path, ["--token", "tok"])
    try:
        done = subprocess.run(
            [node, str(FIXTURES / "ts_http_client.mjs"), sdk, url, str(target), "tok"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(30)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["chunks"] == ["one", " two", " three", "waiting"]
    assert result["permissions"] == [f"write_file: {target}"]
    assert (result["first"], result["second"]) == ("end_turn", "cancelled")
    assert (tmp_path / "note.txt.out").read_text() == "HELLOallow"


def test_session_streams_are_one_per_session_and_bounded(monkeypatch: Any) -> None:
    """A newer session GET replaces the older for that session; beyond the cap: 429."""
    import acpkit.remote.server as server_module

    monkeypatch.setattr(server_module, "MAX_SESSION_STREAMS", 2)
    server = Server()
    cid = server.initialize()
    server.resource.connections[cid].routes.known.update({"a", "b", "c"})
    first = server.stream(cid, Acp_Session_Id="a")
    again = server.stream(cid, Acp_Session_Id="a")
    assert first.transport.disconnecting and not again.transport.disconnecting
    assert server.stream(cid, Acp_Session_Id="b").status == 200
    refused = server.stream(cid, Acp_Session_Id="c")
    assert refused.status == 429
    again.close()
    assert server.stream(cid, Acp_Session_Id="c").status == 200


def test_tls_is_refused_at_startup_where_twisted_cannot_serve_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """
    On a Twisted and pyOpenSSL pair that breaks TLS after the first connection (Twisted
    before 26.4 with pyOpenSSL 25 or later), serve_remote on an ``ssl:`` endpoint fails at
    once with the one-line reason instead of listening and failing the second client.
    """
    from twisted.internet.task import Clock

    from acpkit.remote import server

    monkeypatch.setattr(server, "tls_serving_problem", lambda: "Twisted X cannot serve TLS")
    failures: list[str] = []

    def refused(failure: Failure) -> None:
        failures.append(str(failure.value))

    d = server.serve_remote(
        Clock(), "ssl:0:privateKey=k.pem:certKey=c.pem", RemoteAgent, no_token=True
    )
    d.addErrback(refused)
    assert failures == ["Twisted X cannot serve TLS"]


def _first_write_fails(monkeypatch: Any, marker: bytes) -> None:
    """LimitedRequest.write raises once, on the write holding ``marker`` (as twisted.web's
    HTTP/2 server did when a stream was reset in the read that opened it)."""
    original = LimitedRequest.write
    failed: list[bool] = []

    def write(self: LimitedRequest, data: bytes) -> None:
        if marker in data and not failed:
            failed.append(True)
            raise RuntimeError("the stream is gone")
        original(self, data)

    monkeypatch.setattr(LimitedRequest, "write", write)


def test_an_event_stream_whose_first_write_fails_still_ends_into_the_grace_period(
    monkeypatch: Any,
) -> None:
    """The event stream's first write raising (render fails, twisted.web answers 500 and
    finishes the request): the connection knows the stream is gone, so the grace period
    runs and ends it (no connection held forever for a stream that never was)."""
    server = Server()
    cid = server.initialize()
    _first_write_fails(monkeypatch, b": stream open")
    failed = server.stream(cid)
    assert failed.status == 500
    connection = server.resource.connections[cid]
    assert connection.stream is None
    server.clock.advance(server.resource.limits.grace_period)
    assert server.resource.connections == {}
    assert len(server.agents[0].ended) == 1


def test_a_session_stream_whose_first_write_fails_is_not_left_registered(
    monkeypatch: Any,
) -> None:
    """A session-scoped GET whose first write raises (twisted.web answers 500 and
    finishes it): it is not kept among the connection's session streams (no keep-alives
    written to it, no slot of the 64 taken)."""
    server = Server()
    cid = server.initialize()
    server.stream(cid)
    server.new_session(cid)
    _first_write_fails(monkeypatch, b": session stream")
    failed = server.stream(cid, Acp_Session_Id="s1")
    assert failed.status == 500
    assert server.resource.connections[cid].listeners == {}
