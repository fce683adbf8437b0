"""acpkit.mcp.client in memory: a fake MCP server on the same JSON-RPC engine, a Clock."""

from __future__ import annotations

import json
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.logger import ILogObserver, LogEvent, Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from acpkit.errors import MethodNotFound, RequestTimeout, RPCError
from acpkit.io import AgentExited
from acpkit.jsonrpc import InboundRequest, JSONRPCProtocol, MethodRegistry
from acpkit.jsonrpc.cancel import MCP_CANCELLATION
from acpkit.mcp import client as client_module
from acpkit.mcp.client import (
    SUPPORTED_VERSIONS,
    McpClient,
    McpError,
    McpHandshakeError,
    McpHandshakeTimeout,
    McpProtocolError,
    McpServerGone,
    McpVersionError,
)
from acpkit.mcp.schema import ImageContent, TextContent
from acpkit.testing.pair import MemoryTransport

T = TypeVar("T")

TIME_TOOL = {
    "name": "get_time",
    "description": "The time",
    "inputSchema": {"type": "object", "properties": {"tz": {"type": "string"}}},
}


def tool(name: str) -> dict[str, Any]:
    return {"name": name, "inputSchema": {"type": "object"}}


def init_result(version: str = "2025-11-25", **extra: Any) -> dict[str, Any]:
    return {
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": True}, "logging": {}},
        "serverInfo": {"name": "fake", "version": "1.2.3"},
        "instructions": "Use get_time for the time.",
        **extra,
    }


class FakeServer:
    """An MCP server on a JSON-RPC engine, connected in memory to an McpClient."""

    def __init__(self, initialize: Any = None) -> None:
        self.clock = Clock()
        self.registry = MethodRegistry()
        self.server = JSONRPCProtocol(
            self.registry, clock=self.clock, name="client", cancellation=MCP_CANCELLATION
        )
        self.client_protocol = JSONRPCProtocol(
            MethodRegistry(), clock=self.clock, name="fake", cancellation=MCP_CANCELLATION
        )
        #: Every message the client wrote, decoded, in order.
        self.received: list[dict[str, Any]] = []
        #: Every message the server wrote, decoded, in order.
        self.sent: list[dict[str, Any]] = []
        self.server_transport = MemoryTransport()
        self.client_transport = MemoryTransport()
        self.server.makeConnection(self.server_transport)
        self.client_protocol.makeConnection(self.client_transport)
        self.client = McpClient(self.client_protocol, name="fake", clock=self.clock)
        self._lost = False
        self.registry.add_request(
            "initialize", initialize if initialize is not None else (lambda r: init_result())
        )
        self.registry.add_notification(
            "notifications/initialized", lambda p, m: None, params_optional=True
        )

    def pump(self) -> None:
        for _ in range(10_000):
            moved = False
            data = self.client_transport.value()
            if data:
                self.client_transport.clear()
                self.received += [json.loads(x) for x in data.splitlines()]
                self.server.dataReceived(data)
                moved = True
            data = self.server_transport.value()
            if data:
                self.server_transport.clear()
                self.sent += [json.loads(x) for x in data.splitlines()]
                self.client_protocol.dataReceived(data)
                moved = True
            if not moved:
                break
        if not self._lost and (
            self.client_transport.disconnecting or self.server_transport.disconnecting
        ):
            self.lose(Failure(ConnectionDone("in-memory connection closed")))

    def lose(self, reason: Failure) -> None:
        """The connection ends with ``reason`` (both sides see it)."""
        self._lost = True
        self.client_protocol.connectionLost(reason)
        self.server.connectionLost(Failure(ConnectionDone()))

    def result(self, d: Deferred[T]) -> T:
        self.pump()
        out: list[Any] = []
        d.addBoth(out.append)
        assert out, f"{d!r} did not fire"
        if isinstance(out[0], Failure):
            out[0].raiseException()
        return out[0]  # type: ignore[no-any-return]

    def failure(self, d: Deferred[Any]) -> BaseException:
        self.pump()
        out: list[Any] = []
        d.addBoth(out.append)
        assert out, f"{d!r} did not fire"
        assert isinstance(out[0], Failure), f"{d!r} fired with {out[0]!r}"
        assert out[0].value is not None
        return out[0].value

    def methods(self) -> list[str]:
        return [m["method"] for m in self.received if "method" in m]

    def started(self) -> McpClient:
        self.result(self.client.start())
        return self.client


# ------------------------------------------------------------------ lifecycle


def test_start_sends_initialize_then_initialized_and_keeps_server_info() -> None:
    """initialize: 2025-11-25, no capabilities, acpkit's info; then notifications/initialized."""
    fake = FakeServer()
    result = fake.result(fake.client.start())
    first = fake.received[0]
    assert first["method"] == "initialize"
    assert first["params"]["protocolVersion"] == "2025-11-25"
    assert first["params"]["capabilities"] == {}
    assert first["params"]["clientInfo"]["name"] == "acpkit"
    assert fake.methods() == ["initialize", "notifications/initialized"]
    assert "params" not in fake.received[1]
    assert result.server_info.name == "fake"
    assert fake.client.server_info is not None and fake.client.server_info.version == "1.2.3"
    assert fake.client.capabilities is not None
    assert fake.client.capabilities.tools == {"listChanged": True}
    assert fake.client.instructions == "Use get_time for the time."
    assert fake.client.protocol_version == "2025-11-25"


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS[1:])
def test_older_supported_versions_are_accepted(version: str) -> None:
    """A server answering an older revision we speak is accepted and initialized."""
    fake = FakeServer(lambda r: init_result(version))
    fake.result(fake.client.start())
    assert fake.client.protocol_version == version
    assert fake.methods()[-1] == "notifications/initialized"


def test_version_mismatch_fails_clearly_and_disconnects() -> None:
    """An unknown protocolVersion: McpVersionError naming both sides; no initialized; closed."""
    fake = FakeServer(lambda r: init_result("1999-01-01"))
    error = fake.failure(fake.client.start())
    assert isinstance(error, McpVersionError)
    assert "1999-01-01" in str(error) and "2025-11-25" in str(error)
    assert "notifications/initialized" not in fake.methods()
    assert fake.client.closed is not None


def test_initialize_error_answer_is_a_handshake_error() -> None:
    """A server answering initialize with an error fails start() with McpHandshakeError."""

    def refuse(request: InboundRequest) -> Any:
        raise RPCError(-32602, "Unsupported protocol version", {"supported": ["2024-11-05"]})

    fake = FakeServer(refuse)
    error = fake.failure(fake.client.start())
    assert isinstance(error, McpHandshakeError)
    assert "Unsupported protocol version" in str(error)


def test_malformed_initialize_result_is_a_handshake_error() -> None:
    """A result missing serverInfo fails with a handshake error naming the path."""
    fake = FakeServer(lambda r: {"protocolVersion": "2025-11-25", "capabilities": {}})
    error = fake.failure(fake.client.start())
    assert isinstance(error, McpHandshakeError)
    assert "serverInfo" in str(error)


def test_handshake_timeout_closes_without_cancelling_initialize() -> None:
    """No initialize answer in time: McpHandshakeTimeout; no notifications/cancelled (MUST NOT)."""
    fake = FakeServer(lambda r: Deferred())
    d = fake.client.start(timeout=5)
    fake.pump()
    fake.clock.advance(4.9)
    fake.pump()
    assert not d.called
    fake.clock.advance(0.2)
    error = fake.failure(d)
    assert isinstance(error, McpHandshakeTimeout)
    assert "5 s" in str(error)
    assert "notifications/cancelled" not in fake.methods()
    assert fake.client.closed is not None


def test_handshake_timeout_quotes_junk_the_server_wrote() -> None:
    """A server that writes junk instead of answering: the timeout error quotes the junk."""
    fake = FakeServer(lambda r: Deferred())
    d = fake.client.start(timeout=1)
    fake.pump()
    fake.client_protocol.dataReceived(b"Starting server on stdio...\n")
    fake.clock.advance(1)
    error = fake.failure(d)
    assert "Starting server on stdio..." in str(error)


def test_server_exit_during_initialize_says_status_and_stderr() -> None:
    """The server process ends before answering: the error has its exit status and stderr tail."""
    fake = FakeServer(lambda r: Deferred())
    d = fake.client.start()
    fake.pump()
    fake.lose(Failure(AgentExited("fake", 3, None, "ImportError: no module named x")))
    error = fake.failure(d)
    assert isinstance(error, McpHandshakeError)
    assert "exited with status 3" in str(error)
    assert "ImportError" in str(error)
    assert "initialize" in str(error)


def test_requests_before_start_fail() -> None:
    """list_tools/call_tool/ping before initialize fail with McpError, nothing is sent."""
    fake = FakeServer()
    for d in (fake.client.list_tools(), fake.client.call_tool("x"), fake.client.ping()):
        assert isinstance(fake.failure(d), McpError)
    assert fake.received == []


# ------------------------------------------------------------------ tools/list


def test_list_tools_follows_cursors() -> None:
    """tools/list pages are followed by nextCursor; every tool is returned and kept."""
    pages = {
        None: {"tools": [tool("a"), tool("b")], "nextCursor": "p2"},
        "p2": {"tools": [tool("c")], "nextCursor": "p3"},
        "p3": {"tools": [tool("d")]},
    }
    fake = FakeServer()
    fake.registry.add_request(
        "tools/list",
        lambda r: pages[(r.params or {}).get("cursor")],
        params_optional=True,
    )
    client = fake.started()
    tools = fake.result(client.list_tools())
    assert [t.name for t in tools] == ["a", "b", "c", "d"]
    assert [t.name for t in client.tools] == ["a", "b", "c", "d"]
    cursors = [
        m.get("params", {}).get("cursor") for m in fake.received if m.get("method") == "tools/list"
    ]
    assert cursors == [None, "p2", "p3"]


def test_looping_cursor_fails_instead_of_hanging() -> None:
    """A server that gives a cursor again (a loop) fails list_tools; tools stay as they were."""
    fake = FakeServer()
    fake.registry.add_request(
        "tools/list",
        lambda r: {"tools": [tool("a")], "nextCursor": "again"},
        params_optional=True,
    )
    client = fake.started()
    error = fake.failure(client.list_tools())
    assert isinstance(error, McpProtocolError)
    assert "'again'" in str(error) and "loops" in str(error)
    assert fake.methods().count("tools/list") == 2
    assert client.tools == []


def test_endless_cursors_are_bounded() -> None:
    """New cursors forever: list_tools gives up after max_tool_pages pages."""
    fake = FakeServer()
    count = iter(range(10**6))
    fake.registry.add_request(
        "tools/list",
        lambda r: {"tools": [], "nextCursor": f"c{next(count)}"},
        params_optional=True,
    )
    client = fake.started()
    client.max_tool_pages = 7
    error = fake.failure(client.list_tools())
    assert isinstance(error, McpProtocolError)
    assert "7 pages" in str(error)
    assert fake.methods().count("tools/list") == 7


def test_invalid_tools_list_result_is_a_protocol_error() -> None:
    """A tool without inputSchema: McpProtocolError naming the path."""
    fake = FakeServer()
    fake.registry.add_request(
        "tools/list", lambda r: {"tools": [{"name": "x"}]}, params_optional=True
    )
    client = fake.started()
    error = fake.failure(client.list_tools())
    assert isinstance(error, McpProtocolError)
    assert "inputSchema" in str(error)


def test_list_changed_relists_then_calls_back() -> None:
    """notifications/tools/list_changed: tools listed again, then on_tools_changed sees them."""
    current = [tool("a")]
    fake = FakeServer()
    fake.registry.add_request(
        "tools/list", lambda r: {"tools": list(current)}, params_optional=True
    )
    client = fake.started()
    fake.result(client.list_tools())
    seen: list[list[str]] = []
    client.on_tools_changed = lambda: seen.append([t.name for t in client.tools])
    current.append(tool("b"))
    fake.server.notify("notifications/tools/list_changed")
    fake.pump()
    assert seen == [["a", "b"]]


def test_list_changed_during_a_relist_is_coalesced() -> None:
    """Changes announced while re-listing give one more listing, then one callback."""
    answers: list[Deferred[Any]] = []
    fake = FakeServer()

    def list_tools(request: InboundRequest) -> Deferred[Any]:
        answers.append(Deferred())
        return answers[-1]

    fake.registry.add_request("tools/list", list_tools, params_optional=True)
    client = fake.started()
    calls: list[int] = []
    client.on_tools_changed = lambda: calls.append(len(client.tools))
    fake.server.notify("notifications/tools/list_changed")
    fake.pump()
    fake.server.notify("notifications/tools/list_changed")
    fake.server.notify("notifications/tools/list_changed")
    fake.pump()
    assert len(answers) == 1
    answers[0].callback({"tools": [tool("a")]})
    fake.pump()
    assert calls == [] and len(answers) == 2
    answers[1].callback({"tools": [tool("a"), tool("b")]})
    fake.pump()
    assert calls == [2]


# ------------------------------------------------------------------ tools/call


def test_call_tool_returns_content_and_structured_content() -> None:
    """tools/call sends name and arguments; text, image and structuredContent are decoded."""
    fake = FakeServer()
    fake.registry.add_request(
        "tools/call",
        lambda r: {
            "content": [
                {"type": "text", "text": "12:00"},
                {"type": "image", "data": "aGk=", "mimeType": "image/png"},
            ],
            "structuredContent": {"time": "12:00"},
        },
    )
    client = fake.started()
    result = fake.result(client.call_tool("get_time", {"tz": "UTC"}))
    call = fake.received[-1]
    assert call["params"] == {"name": "get_time", "arguments": {"tz": "UTC"}}
    assert isinstance(result.content[0], TextContent) and result.content[0].text == "12:00"
    assert isinstance(result.content[1], ImageContent)
    assert result.structured_content == {"time": "12:00"}
    assert not result.is_error


def test_is_error_result_is_a_result() -> None:
    """isError: true comes back as a result (the caller decides), not a failure."""
    fake = FakeServer()
    fake.registry.add_request(
        "tools/call",
        lambda r: {"content": [{"type": "text", "text": "no such tz"}], "isError": True},
    )
    client = fake.started()
    result = fake.result(client.call_tool("get_time", {"tz": "Mars"}))
    assert result.is_error is True


def test_protocol_error_answer_fails_the_call() -> None:
    """An error response (unknown tool) fails the call with that RPCError."""
    fake = FakeServer()

    def unknown(request: InboundRequest) -> Any:
        raise RPCError(-32602, "Unknown tool: nope")

    fake.registry.add_request("tools/call", unknown)
    client = fake.started()
    error = fake.failure(client.call_tool("nope"))
    assert isinstance(error, RPCError) and error.code == -32602


def test_malformed_call_result_is_a_protocol_error() -> None:
    """A tools/call result without content fails with McpProtocolError."""
    fake = FakeServer()
    fake.registry.add_request("tools/call", lambda r: {"contents": []})
    client = fake.started()
    error = fake.failure(client.call_tool("x"))
    assert isinstance(error, McpProtocolError) and "content" in str(error)


def test_progress_reaches_the_callback_for_its_token_only() -> None:
    """progress= sends a progressToken; its notifications reach the callback, others do not."""
    pending: list[tuple[InboundRequest, Deferred[Any]]] = []
    fake = FakeServer()

    def call(request: InboundRequest) -> Deferred[Any]:
        pending.append((request, Deferred()))
        return pending[-1][1]

    fake.registry.add_request("tools/call", call)
    client = fake.started()
    seen: list[tuple[float, float | None, str | None]] = []
    d = client.call_tool("slow", {}, progress=lambda p, t, m: seen.append((p, t, m)))
    fake.pump()
    request, answer = pending[0]
    token = request.params["_meta"]["progressToken"]
    fake.server.notify(
        "notifications/progress", {"progressToken": token, "progress": 1, "total": 3}
    )
    fake.server.notify(
        "notifications/progress",
        {"progressToken": token, "progress": 2, "total": 3, "message": "half"},
    )
    fake.server.notify("notifications/progress", {"progressToken": "other", "progress": 9})
    fake.server.notify("notifications/progress", {"progressToken": token})  # invalid
    answer.callback({"content": []})
    fake.server.notify("notifications/progress", {"progressToken": token, "progress": 3})
    fake.result(d)
    assert seen == [(1, 3, None), (2, 3, "half")]


def test_call_without_progress_sends_no_meta() -> None:
    """Without progress= no _meta is sent."""
    fake = FakeServer()
    fake.registry.add_request("tools/call", lambda r: {"content": []})
    client = fake.started()
    fake.result(client.call_tool("x"))
    assert "_meta" not in fake.received[-1]["params"]


def test_cancel_sends_notifications_cancelled_and_expects_no_answer() -> None:
    """d.cancel(): CancelledError at once; notifications/cancelled sent; the handler cancelled."""
    cancelled: list[bool] = []
    fake = FakeServer()
    fake.registry.add_request("tools/call", lambda r: Deferred(lambda _: cancelled.append(True)))
    client = fake.started()
    progress: list[float] = []
    d = client.call_tool("long", progress=lambda p, t, m: progress.append(p))
    fake.pump()
    call_id = fake.received[-1]["id"]
    d.cancel()
    assert isinstance(fake.failure(d), CancelledError)
    notice = fake.received[-1]
    assert notice["method"] == "notifications/cancelled"
    assert notice["params"] == {"requestId": call_id}
    assert "id" not in notice
    assert cancelled == [True]
    # the server answers nothing (MCP), and a late answer or progress would be dropped
    assert [m for m in fake.sent if m.get("id") == call_id] == []
    fake.client_protocol.dataReceived(
        json.dumps({"jsonrpc": "2.0", "id": call_id, "result": {"content": []}}).encode() + b"\n"
    )
    assert progress == []
    assert client.closed is None


def test_timeout_cancels_the_call() -> None:
    """timeout=: RequestTimeout and notifications/cancelled for that call."""
    fake = FakeServer()
    fake.registry.add_request("tools/call", lambda r: Deferred())
    client = fake.started()
    d = client.call_tool("long", timeout=10)
    fake.pump()
    fake.clock.advance(10)
    assert isinstance(fake.failure(d), RequestTimeout)
    assert fake.received[-1]["method"] == "notifications/cancelled"


# ------------------------------------------------------------------ ping, server requests


def test_ping_both_ways() -> None:
    """Our ping is answered; the server's ping (with or without params) gets {}."""
    fake = FakeServer()
    fake.registry.add_request("ping", lambda r: {}, params_optional=True)
    client = fake.started()
    assert fake.result(client.ping()) is None
    assert fake.result(fake.server.request("ping")) == {}
    assert fake.result(fake.server.request("ping", {})) == {}


def test_server_ping_is_answered_before_initialize_completes() -> None:
    """The spec lets a server ping during initialization: answered at once."""
    fake = FakeServer(lambda r: Deferred())
    fake.client.start()
    fake.pump()
    assert fake.result(fake.server.request("ping")) == {}


@pytest.mark.parametrize(
    "method", ["sampling/createMessage", "elicitation/create", "roots/list", "tasks/list"]
)
def test_unsupported_server_requests_are_method_not_found(method: str) -> None:
    """Requests for capabilities we did not declare are answered -32601."""
    fake = FakeServer()
    fake.started()
    error = fake.failure(fake.server.request(method, {}))
    assert isinstance(error, MethodNotFound)
    assert error.code == -32601


def test_server_log_messages_are_logged_at_their_level(monkeypatch: pytest.MonkeyPatch) -> None:
    """notifications/message: logged with the MCP level mapped onto Twisted's."""
    events: list[dict[str, Any]] = []

    @implementer(ILogObserver)
    def observe(event: LogEvent) -> None:
        events.append(event)

    monkeypatch.setattr(client_module, "_log", Logger(observer=observe))
    fake = FakeServer()
    fake.started()
    for level in ("debug", "notice", "warning", "error", "emergency"):
        fake.server.notify(
            "notifications/message", {"level": level, "logger": "db", "data": f"at {level}"}
        )
    fake.server.notify("notifications/message", {"level": "info", "data": {"k": 1}})
    fake.pump()
    got = [(e["log_level"].name, e["text"]) for e in events if "mcp_level" in e]
    assert got == [
        ("debug", "at debug"),
        ("info", "at notice"),
        ("warn", "at warning"),
        ("error", "at error"),
        ("critical", "at emergency"),
        ("info", "{'k': 1}"),
    ]


# ------------------------------------------------------------------ the end


def test_server_death_fails_pending_call_with_status_and_stderr() -> None:
    """The server exits during a call: McpServerGone with exit status and stderr; closed says so."""
    fake = FakeServer()
    fake.registry.add_request("tools/call", lambda r: Deferred())
    client = fake.started()
    d = client.call_tool("crash")
    closed = client.when_closed()
    fake.pump()
    fake.lose(Failure(AgentExited("fake", None, 9, "Traceback: boom")))
    error = fake.failure(d)
    assert isinstance(error, McpServerGone)
    assert "killed by signal 9" in str(error) and "boom" in str(error)
    assert "tools/call" in str(error)
    info = fake.result(closed)
    assert info.signal == 9 and info.stderr_tail == "Traceback: boom" and not info.requested
    assert isinstance(fake.failure(client.call_tool("again")), McpServerGone)


def test_close_fails_pending_requests_and_reports_requested() -> None:
    """close(): pending calls fail with McpServerGone at once; when_closed says we closed it."""
    fake = FakeServer()
    fake.registry.add_request("tools/call", lambda r: Deferred())
    client = fake.started()
    d = client.call_tool("long")
    fake.pump()
    closing = client.close()
    assert isinstance(fake.failure(d), McpServerGone)
    fake.result(closing)
    assert client.closed is not None and client.closed.requested


def test_shutdown_hook_is_used_by_close() -> None:
    """A transport's shutdown (stdio's stop) is what close() runs and waits for."""
    fake = FakeServer()
    stops: list[Deferred[Any]] = []

    def shutdown() -> Deferred[Any]:
        stops.append(Deferred())
        return stops[-1]

    client = McpClient(
        JSONRPCProtocol(MethodRegistry(), clock=fake.clock, cancellation=MCP_CANCELLATION),
        clock=fake.clock,
        shutdown=shutdown,
    )
    d = client.close()
    assert len(stops) == 1 and not d.called
    stops[0].callback(None)
    assert d.called


@settings(deadline=None)
@given(
    cursors=st.lists(st.one_of(st.none(), st.sampled_from("abcdefgh")), min_size=1, max_size=12),
    max_pages=st.integers(min_value=1, max_value=10),
)
def test_list_tools_always_ends(cursors: list[str | None], max_pages: int) -> None:
    """
    Whatever cursors a server gives, list_tools ends within max_tool_pages requests: with
    every tool when the cursors end before repeating or running out, else McpProtocolError.
    """
    fake = FakeServer()
    served: list[int] = []

    def list_tools(request: InboundRequest) -> dict[str, Any]:
        n = len(served)
        served.append(n)
        cursor = cursors[n] if n < len(cursors) else "z"
        page: dict[str, Any] = {"tools": [tool(f"t{n}")]}
        if cursor is not None:
            page["nextCursor"] = cursor
        return page

    fake.registry.add_request("tools/list", list_tools, params_optional=True)
    client = fake.started()
    client.max_tool_pages = max_pages
    d = client.list_tools()
    fake.pump()
    assert d.called
    expected_pages = None
    seen: set[str] = set()
    for i, cursor in enumerate(cursors):
        if cursor is None:
            expected_pages = i + 1
            break
        if cursor in seen or i + 1 >= max_pages:
            break
        seen.add(cursor)
    if expected_pages is not None and expected_pages <= max_pages:
        tools = fake.result(d)
        assert [t.name for t in tools] == [f"t{i}" for i in range(expected_pages)]
    else:
        assert isinstance(fake.failure(d), McpProtocolError)
    assert len(served) <= max_pages
