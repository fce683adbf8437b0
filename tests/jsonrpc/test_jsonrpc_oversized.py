"""
Lines longer than a peer's limit (issue 13): no request may wait for ever, in either
direction.  The receiver answers the id it reads at the start of an oversized request;
the sender fails the request an id-``null`` error can only be about; a line over our
own limit is refused before it is sent; dropped lines are counted.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, cast

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import ILogObserver, LogEvent, Logger, formatEvent
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase as TrialTestCase

from acpkit import schema
from acpkit.connection import Agent, AgentConnection, Client, ClientConnection
from acpkit.errors import InvalidRequest, MessageTooLarge, ParseError, RPCError
from acpkit.framing import DEFAULT_MAX_LENGTH
from acpkit.io import spawn_agent
from acpkit.jsonrpc import JSONRPCProtocol, MethodRegistry
from acpkit.testing.pair import connected_pair
from acpkit_agent.config import AgentConfig
from tests.fixtures.agent.harness import make_harness, scripted


def make(registry: MethodRegistry | None = None, **kw: Any) -> tuple[JSONRPCProtocol, Any]:
    proto = JSONRPCProtocol(registry, clock=Clock(), **kw)
    transport = StringTransport()
    proto.makeConnection(transport)
    return proto, transport


def take(transport: StringTransport) -> list[dict[str, Any]]:
    data = transport.value()
    transport.clear()
    return [json.loads(raw) for raw in data.split(b"\n") if raw]


class Captured:
    """What a protocol logged, formatted."""

    def __init__(self, proto: JSONRPCProtocol) -> None:
        self.events: list[LogEvent] = []
        observer = cast(ILogObserver, self.events.append)
        proto._log = Logger(namespace="test", observer=observer)

    def lines(self, containing: str = "") -> list[str]:
        return [text for text in map(formatEvent, self.events) if containing in text]


def outcome(d: Deferred[Any]) -> Any:
    found: list[Any] = []
    d.addBoth(found.append)
    assert found, "the Deferred has not fired"
    value = found[0]
    return value.value if isinstance(value, Failure) else value


def echo_registry() -> MethodRegistry:
    registry = MethodRegistry()
    registry.add_request("echo", lambda r: r.params)
    registry.add_notification("note", lambda params, meta: None)
    return registry


BIG = "a" * 500


# -- receiving an oversized line -----------------------------------------------------------


def test_oversized_request_is_answered_with_its_id_read_from_the_head() -> None:
    """An oversized request whose id precedes its params gets -32600 with that id."""
    proto, t = make(echo_registry(), max_line_length=100)
    captured = Captured(proto)
    proto.dataReceived(
        b'{"jsonrpc":"2.0","id":"w-7","method":"fs/write_text_file","params":{"content":"'
        + BIG.encode()
        + b'"}}\n'
    )
    (reply,) = take(t)
    assert reply["id"] == "w-7"
    assert reply["error"] == MessageTooLarge(100).to_json()
    assert proto.oversized_dropped == 1
    (line,) = captured.lines("discarded")
    assert "request fs/write_text_file (id 'w-7') longer than 100 bytes" in line


def test_oversized_line_arriving_in_pieces_is_answered_once_with_its_id() -> None:
    """An oversized request read in small pieces is answered once, with its id, at once."""
    proto, t = make(echo_registry(), max_line_length=100)
    proto.dataReceived(b'{"jsonrpc":"2.0","id":5,"method":"echo","params":{"t":"')
    for _ in range(20):
        proto.dataReceived(b"x" * 50)
    assert [m["id"] for m in take(t)] == [5]
    proto.dataReceived(b'"}}\n{"jsonrpc":"2.0","id":6,"method":"echo","params":{}}\n')
    assert take(t) == [{"jsonrpc": "2.0", "id": 6, "result": {}}]
    assert proto.oversized_dropped == 1


def test_oversized_request_with_its_id_after_the_params_gets_id_null() -> None:
    """When the id comes after the params, beyond the 4 KiB head, it is unknown: id null."""
    proto, t = make(echo_registry(), max_line_length=100)
    proto.dataReceived(
        b'{"jsonrpc":"2.0","method":"echo","params":{"t":"' + b"h" * 5000 + b'"},"id":3}\n'
    )
    (reply,) = take(t)
    assert reply["id"] is None and reply["error"]["data"] == {"limit": 100}


def test_oversized_request_reusing_an_id_in_progress_gets_id_null() -> None:
    """An oversized request with the id of a request still running is not answered by id."""
    registry = MethodRegistry()
    registry.add_request("slow", lambda r: Deferred())
    proto, t = make(registry, max_line_length=100)
    proto.dataReceived(b'{"jsonrpc":"2.0","id":1,"method":"slow","params":{}}\n')
    proto.dataReceived(
        b'{"jsonrpc":"2.0","id":1,"method":"slow","params":{"t":"' + BIG.encode() + b'"}}\n'
    )
    (reply,) = take(t)
    assert reply["id"] is None


def test_oversized_notification_is_dropped_counted_and_logged_with_its_method() -> None:
    """A dropped oversized notification is counted in oversized_dropped and logged."""
    proto, t = make(echo_registry(), max_line_length=100)
    captured = Captured(proto)
    proto.dataReceived(
        b'{"jsonrpc":"2.0","method":"session/update","params":{"t":"' + BIG.encode() + b'"}}\n'
    )
    proto.dataReceived(b'{"jsonrpc":"2.0","id":1,"result":' + b"1" * 300 + b"}\n")
    proto.dataReceived(b"x" * 300 + b"\n")
    assert proto.oversized_dropped == 3
    found = captured.lines("discarded")
    assert "notification session/update longer than 100 bytes (1 so far" in found[0]
    assert "response longer than 100 bytes (2 so far" in found[1]
    assert "line longer than 100 bytes (3 so far" in found[2]
    # Never answered by id; each gets the id-null error (the peer logs it).
    assert [m["id"] for m in take(t)] == [None, None, None]


def test_oversized_response_still_fails_our_pending_request() -> None:
    """An oversized response fails the pending request its head names."""
    proto, t = make(max_line_length=100)
    d = proto.request("fs/read_text_file", {})
    t.clear()
    proto.dataReceived(b'{"jsonrpc":"2.0","id":1,"result":{"content":"' + BIG.encode() + b'"}}\n')
    error = outcome(d)
    assert isinstance(error, MessageTooLarge) and error.limit == 100


# -- the sender: id-null errors --------------------------------------------------------------


def test_null_id_too_large_error_fails_the_requests_longer_than_the_limit() -> None:
    """
    An id-null -32600 with data.limit fails at once every pending request whose line was
    longer than the limit, and only those; the peer's late answer to it is dropped quietly.
    """
    proto, t = make()
    captured = Captured(proto)
    small = proto.request("session/cancelish", {})
    big = proto.request("fs/write_text_file", {"content": BIG})
    t.clear()
    proto.dataReceived(
        json.dumps({"jsonrpc": "2.0", "id": None, "error": MessageTooLarge(200).to_json()}).encode()
        + b"\n"
    )
    error = outcome(big)
    assert isinstance(error, MessageTooLarge) and error.limit == 200
    assert "request 2 (fs/write_text_file) was" in error.message
    assert "over the peer's 200-byte line limit" in error.message
    assert not small.called
    proto.dataReceived(
        json.dumps({"jsonrpc": "2.0", "id": 2, "error": MessageTooLarge(200).to_json()}).encode()
        + b"\n"
    )
    assert not captured.lines("unknown id")
    assert t.value() == b""


def test_null_id_too_large_error_about_a_notification_fails_no_request() -> None:
    """When no pending request is longer than the limit (it was a notification), none fails."""
    proto, _ = make()
    pending = proto.request("session/prompt", {"t": "short"})
    proto.notify("session/update", {"content": BIG})
    proto.dataReceived(
        json.dumps({"jsonrpc": "2.0", "id": None, "error": MessageTooLarge(200).to_json()}).encode()
        + b"\n"
    )
    assert not pending.called


def test_null_id_parse_error_fails_the_single_request_if_it_is_the_longest_line() -> None:
    """
    An id-null -32700 fails the single pending request when its line is the longest we
    wrote since the previous id-null error; not when a longer line was written since, nor
    when several requests are pending.
    """
    parse_error = (
        json.dumps({"jsonrpc": "2.0", "id": None, "error": ParseError("cut").to_json()}).encode()
        + b"\n"
    )
    proto, _ = make()
    only = proto.request("fs/write_text_file", {"content": BIG})
    proto.notify("small", {})
    proto.dataReceived(parse_error)
    assert isinstance(outcome(only), ParseError)

    proto, _ = make()
    request = proto.request("fs/write_text_file", {"content": "short"})
    proto.notify("session/update", {"content": BIG})
    proto.dataReceived(parse_error)
    assert not request.called

    proto, _ = make()
    first = proto.request("a", {"content": BIG})
    second = proto.request("b", {"content": BIG})
    proto.dataReceived(parse_error)
    assert not first.called and not second.called

    # The window restarts at each id-null error: a request written before it is left.
    proto, _ = make()
    request = proto.request("fs/write_text_file", {"content": BIG})
    proto.notify("session/update", {"content": BIG * 2})
    proto.dataReceived(parse_error)
    assert not request.called
    proto.dataReceived(parse_error)
    assert not request.called


def test_null_id_invalid_request_without_a_limit_fails_nothing() -> None:
    """An id-null -32600 without data.limit names no line we can find: logged only."""
    proto, _ = make()
    captured = Captured(proto)
    only = proto.request("fs/write_text_file", {"content": BIG})
    proto.dataReceived(
        json.dumps({"jsonrpc": "2.0", "id": None, "error": InvalidRequest("?").to_json()}).encode()
        + b"\n"
    )
    assert not only.called
    assert captured.lines("could not identify")


def test_from_json_gives_message_too_large_for_an_error_with_a_limit() -> None:
    """-32600 with an integer data.limit decodes as MessageTooLarge (with .limit)."""
    error = RPCError.from_json(MessageTooLarge(64).to_json())
    assert isinstance(error, MessageTooLarge) and error.limit == 64
    assert type(RPCError.from_json(InvalidRequest("x").to_json())) is InvalidRequest


# -- our own limit on what we send ---------------------------------------------------------


def test_a_request_over_our_own_limit_is_refused_unsent() -> None:
    """request() fails at once with MessageTooLarge when its line exceeds our MAX_LENGTH."""
    proto, t = make(max_line_length=100)
    d = proto.request("fs/write_text_file", {"content": BIG})
    error = outcome(d)
    assert isinstance(error, MessageTooLarge) and error.limit == 100
    assert "the fs/write_text_file request is" in error.message and "not sent" in error.message
    assert t.value() == b""
    proto.request("ok", {})
    assert b'"id":1' in t.value()


def test_a_notification_over_our_own_limit_is_dropped_with_a_warning() -> None:
    """notify() writes nothing and raises nothing when the line is over our limit: it logs."""
    proto, t = make(max_line_length=100)
    captured = Captured(proto)
    proto.notify("session/update", {"content": BIG})
    assert t.value() == b""
    (line,) = captured.lines("not sent")
    assert "the session/update notification was not sent" in line
    assert "over the 100-byte line limit" in line
    proto.notify("session/update", {"content": "ok"})
    assert t.value() != b""


def test_a_result_over_our_own_limit_is_answered_with_an_error_instead() -> None:
    """A handler's result whose line is over our limit: the request gets MessageTooLarge."""
    registry = MethodRegistry()
    registry.add_request("read", lambda r: {"content": BIG})
    proto, t = make(registry, max_line_length=200)
    proto.dataReceived(b'{"jsonrpc":"2.0","id":4,"method":"read","params":{}}\n')
    (reply,) = take(t)
    assert reply["id"] == 4 and reply["error"]["code"] == -32600
    assert reply["error"]["data"] == {"limit": 200}
    assert "the result of read (id 4) is" in reply["error"]["message"]


# -- both ends -------------------------------------------------------------------------------


def pump(a: JSONRPCProtocol, b: JSONRPCProtocol) -> None:
    ta, tb = a.transport, b.transport
    assert isinstance(ta, StringTransport) and isinstance(tb, StringTransport)
    for _ in range(100):
        da, db = ta.value(), tb.value()
        ta.clear()
        tb.clear()
        if da:
            b.dataReceived(da)
        if db:
            a.dataReceived(db)
        if not (da or db):
            return


def test_a_request_too_long_for_the_peer_fails_promptly_both_ways() -> None:
    """
    Between two peers with different limits, a request longer than the receiver's limit
    fails at the sender with MessageTooLarge as soon as the receiver answers: by its id
    (read from the head), or, when the id comes after the params, by the id-null rule.
    """
    small, _ = make(echo_registry(), max_line_length=300, name="small")
    large, _ = make(echo_registry(), max_line_length=100_000, name="large")
    d = large.request("echo", {"content": "x" * 1000})
    pump(small, large)
    error = outcome(d)
    assert isinstance(error, MessageTooLarge) and error.limit == 300
    assert small.oversized_dropped == 1

    # A sender that puts the id after params longer than the receiver's 4 KiB head:
    # the receiver answers id null, and the id-null rule still fails the request.
    d = large.request("echo", {"content": "y" * 10_000})
    tl = large.transport
    assert isinstance(tl, StringTransport)
    sent = json.loads(tl.value())
    tl.clear()
    reordered = {"jsonrpc": "2.0", "method": sent["method"], "params": sent["params"], "id": 2}
    small.dataReceived(json.dumps(reordered).encode() + b"\n")
    pump(small, large)
    error = outcome(d)
    assert isinstance(error, MessageTooLarge) and "over the peer's 300-byte" in error.message
    # The small side could send, the large side reads: no limit hit.
    ok = small.request("echo", {"content": "z" * 200})
    pump(small, large)
    assert outcome(ok) == {"content": "z" * 200}


class WritingAgent(Agent):
    """An agent whose only job here is to be connected."""

    def __init__(self, conn: AgentConnection) -> None:
        self.conn = conn

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(protocol_version=1)

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id="s1")

    def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)


class FileClient(Client):
    def __init__(self) -> None:
        self.written: list[str] = []

    def write_text_file(self, params: schema.WriteTextFileRequest) -> Any:
        self.written.append(params.path)
        return schema.WriteTextFileResponse()


def test_connections_fail_too_long_requests_promptly_each_way() -> None:
    """
    Through ClientConnection/AgentConnection in memory, with small limits: a
    fs/write_text_file too long for the client, and a session/prompt too long for the
    agent, each fail with MessageTooLarge as soon as the bytes are delivered.
    """
    agents: list[WritingAgent] = []

    def factory(conn: AgentConnection) -> WritingAgent:
        agents.append(WritingAgent(conn))
        return agents[0]

    client = FileClient()
    pair = connected_pair(factory, client)
    pair.result(
        pair.client.initialize(
            client_capabilities=schema.ClientCapabilities(
                fs=schema.FileSystemCapabilities(write_text_file=True)
            )
        )
    )
    sid = pair.result(
        pair.client.new_session(schema.NewSessionRequest(cwd="/tmp", mcp_servers=[]))
    ).session_id
    pair.client.protocol.MAX_LENGTH = 4096
    pair.agent.protocol.MAX_LENGTH = 4096
    # The agent sends 10 KB: its own limit must allow it for the client's to matter.
    pair.agent.protocol.MAX_LENGTH = 65536
    write = pair.agent.write_text_file(
        schema.WriteTextFileRequest(session_id=sid, path="/tmp/big", content="w" * 10_000)
    )
    pair.pump()
    error = outcome(write)
    assert isinstance(error, MessageTooLarge) and error.limit == 4096
    assert client.written == []
    assert pair.client.protocol.oversized_dropped == 1

    pair.client.protocol.MAX_LENGTH = 65536
    pair.agent.protocol.MAX_LENGTH = 4096
    prompt = pair.client.prompt(
        schema.PromptRequest(session_id=sid, prompt=[schema.TextContentBlock(text="p" * 10_000)])
    )
    pair.pump()
    error = outcome(prompt)
    assert isinstance(error, MessageTooLarge) and error.limit == 4096
    assert pair.agent.protocol.oversized_dropped == 1
    # The connection goes on.
    response = pair.result(
        pair.client.prompt(
            schema.PromptRequest(session_id=sid, prompt=[schema.TextContentBlock(text="hi")])
        )
    )
    assert response.stop_reason == schema.StopReason.END_TURN


def test_bob_writing_a_file_too_long_for_the_client_fails_the_tool_promptly(
    tmp_path: Path,
) -> None:
    """
    bob (in memory) writes a file through a client whose line limit it exceeds: the
    client answers the request's id, so the write_file tool call fails at once, the
    turn ends, nothing is written, and the client counts the dropped line.
    """
    h = make_harness(
        scripted(
            {
                "turn": [
                    {
                        "tool_calls": [
                            {
                                "name": "write_file",
                                "arguments": {"path": "big.txt", "content": "b" * 20_000},
                            }
                        ]
                    },
                    {"chunks": ["done"]},
                ]
            }
        ),
        config=AgentConfig(yolo=True),
    )
    caps = schema.ClientCapabilities(
        fs=schema.FileSystemCapabilities(read_text_file=True, write_text_file=True)
    )
    sid = h.start(cwd=str(tmp_path), capabilities=caps)
    h.pair.client.protocol.MAX_LENGTH = 4096
    result = h.raw_prompt(sid, "write it")
    assert result["stopReason"] == "end_turn"
    (failed,) = [u for u in h.client.tool_updates() if u.get("status") == "failed"]
    assert "4096" in json.dumps(failed)
    assert h.client.files == {} and not (tmp_path / "big.txt").exists()
    # The request, and any update that carries the same content (the tool call's input).
    assert h.pair.client.protocol.oversized_dropped >= 1


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TWISTD = ["-c", "from twisted.scripts.twistd import run; run()", "-n", "acp-agent"]


class RealBobTests(TrialTestCase):
    """A prompt longer than a real bob's 64 MiB line limit, over pipes."""

    @pytest.mark.process
    def test_a_prompt_over_bobs_limit_fails_promptly_and_bob_goes_on(self) -> Deferred[None]:
        """
        The client (its own limit raised) sends a 65 MiB session/prompt to bob: bob
        reads its id from the head and answers it, so the prompt fails with
        MessageTooLarge at once (no timeout), and the session still works.
        """
        from twisted.internet import reactor

        home = tempfile.mkdtemp(prefix="bob-home-")
        cwd = tempfile.mkdtemp(prefix="bob-")
        conn = ClientConnection(Client())
        conn.protocol.MAX_LENGTH = 128 * 1024 * 1024
        agent = spawn_agent(
            reactor,
            conn.protocol,
            sys.executable,
            TWISTD,
            env={"PYTHONPATH": ROOT, "HOME": home},
            cwd=cwd,
        )
        self.addCleanup(agent.stop)

        async def run() -> None:
            await conn.initialize()
            session = await conn.new_session(schema.NewSessionRequest(cwd=cwd, mcp_servers=[]))
            huge = schema.TextContentBlock(text="p" * (DEFAULT_MAX_LENGTH + 1024 * 1024))
            try:
                await conn.prompt(
                    schema.PromptRequest(session_id=session.session_id, prompt=[huge])
                )
            except MessageTooLarge as e:
                assert e.limit == DEFAULT_MAX_LENGTH
            else:
                raise AssertionError("the prompt did not fail")
            response = await conn.prompt(
                schema.PromptRequest(
                    session_id=session.session_id, prompt=[schema.TextContentBlock(text="hi")]
                )
            )
            assert response.stop_reason == schema.StopReason.END_TURN
            assert "discarded an incoming request session/prompt" in agent.stderr_tail()

        d = Deferred.fromCoroutine(run())
        # A generous bound instead of trial's default 120 s: a hang must fail, not wait.
        return d.addTimeout(90, reactor)
