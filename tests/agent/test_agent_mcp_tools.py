"""
bob's MCP tools in memory (issue 15, "MCP tools in bob"): names, kinds, permissions,
result conversion, progress, cancellation, timeouts, a server that stops, list_changed,
startup, the client's ``mcpServers`` opt-in — against a fake MCP client with the
interface of :class:`acpkit.mcp.client.McpClient`, on a Clock.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock

from acpkit import codec, schema
from acpkit.errors import RPCError
from acpkit.mcp import schema as mcp
from acpkit_agent.agent import BobAgent
from acpkit_agent.banner import banner_lines, mcp_banner_lines
from acpkit_agent.config import AgentConfig, ConfigError, parse_config, session_config
from acpkit_agent.mcp_config import McpHttpServer, McpServerConfig, McpStdioServer
from acpkit_agent.mcp_servers import TURN_WAIT, McpServerSet, McpToolbox, client_server_configs
from acpkit_agent.mcp_tools import (
    MAX_MODEL_CHARS,
    McpTool,
    assign_names,
    convert_result,
    progress_text,
    tool_kind_of,
)
from acpkit_agent.tools import builtin_tools
from acpkit_agent.turn import AgentRuntime
from tests.fixtures.agent.harness import Harness, captured_logs, make_harness, scripted

NAME_RULE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 40).decode()


def tool(name: str, *, read_only: bool | None = None, description: str = "") -> mcp.Tool:
    annotations = None if read_only is None else mcp.ToolAnnotations(read_only_hint=read_only)
    return mcp.Tool(
        name=name,
        description=description or f"the {name} tool",
        input_schema={"type": "object", "properties": {"x": {"type": "string"}}},
        annotations=annotations,
    )


def result(*blocks: Any, structured: dict[str, Any] | None = None, error: bool = False) -> Any:
    return mcp.CallToolResult(
        content=list(blocks), structured_content=structured, is_error=error or None
    )


@attrs.frozen
class Closed:
    """What the real client's ``when_closed`` fires with (its ServerClosed)."""

    description: str
    requested: bool = False

    def __str__(self) -> str:
        return self.description


class FakeClient:
    """A started MCP client: lists ``tools``, holds each call until the test answers it."""

    def __init__(self, tools: list[mcp.Tool]) -> None:
        self.tools = list(tools)
        self.on_tools_changed: Callable[[], None] | None = None
        self.calls: list[tuple[str, Any, Any, Deferred[Any]]] = []
        self.cancelled: list[str] = []
        self.closes = 0
        self._closed: list[Deferred[Any]] = []
        self.process = None

    def list_tools(self) -> Deferred[list[mcp.Tool]]:
        return succeed(list(self.tools))

    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        progress: Any = None,
        timeout: float | None = None,
    ) -> Deferred[Any]:
        d: Deferred[Any] = Deferred(lambda _: self.cancelled.append(name))
        self.calls.append((name, arguments, progress, d))
        return d

    def when_closed(self) -> Deferred[Any]:
        d: Deferred[Any] = Deferred()
        self._closed.append(d)
        return d

    def die(self, why: str) -> None:
        waiters, self._closed = self._closed, []
        for d in waiters:
            d.callback(Closed(why))

    def close(self) -> Deferred[None]:
        self.closes += 1
        waiters, self._closed = self._closed, []
        for d in waiters:
            d.callback(Closed("closed", requested=True))
        return succeed(None)

    def answer(self, value: Any, index: int = -1) -> None:
        self.calls[index][3].callback(value)


@attrs.define
class Servers:
    """The fake servers a connector hands out, by name (a Deferred: still starting)."""

    clients: dict[str, Any] = attrs.field(factory=dict)
    started: list[McpServerConfig] = attrs.field(factory=list)

    def connect(self, config: McpServerConfig) -> Deferred[Any]:
        self.started.append(config)
        found = self.clients[config.name]
        if isinstance(found, Deferred):
            return found
        if isinstance(found, Exception):
            return fail(found)
        return succeed(found)


def mcp_harness(
    turns: list[Any],
    configs: list[McpServerConfig],
    servers: Servers,
    *,
    yolo: bool = True,
    use_client_servers: bool = False,
) -> tuple[Harness, McpServerSet]:
    clock = Clock()
    config = AgentConfig(
        yolo=yolo, mcp_servers=tuple(configs), mcp_use_client_servers=use_client_servers
    )
    server_set = McpServerSet(configs, clock, connect=servers.connect)
    engine = scripted({"turn": turns})(clock)
    runtime = AgentRuntime(
        config=config,
        engine=engine,
        tools=McpToolbox(builtin_tools(), server_set, connect=servers.connect),
        reactor=clock,
    )
    server_set.start()
    return make_harness(runtime=runtime, clock=clock), server_set


def stdio(name: str, **kwargs: Any) -> McpStdioServer:
    return McpStdioServer(name=name, command=f"/bin/{name}", **kwargs)


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


# -- names and kinds --------------------------------------------------------------------


def test_names_are_server_double_underscore_tool_when_valid() -> None:
    """``time`` + ``get_current_time`` is ``time__get_current_time``; dashes are kept."""
    assert assign_names([("time", "get_current_time"), ("everything", "get-tiny-image")]) == [
        "time__get_current_time",
        "everything__get-tiny-image",
    ]


def test_changed_names_end_in_a_stable_hash() -> None:
    """Other characters, too long, or taken: a readable prefix, ``_`` and 8 hex digits."""
    (
        dotted,
        long,
    ) = assign_names([("s", "files.read"), ("s", "x" * 80)])
    assert re.fullmatch(r"s__files_read_[0-9a-f]{8}", dotted)
    assert len(long) == 64 and long.startswith("s__xxx") and NAME_RULE.match(long)
    # the same pairs give the same names: a history's tool names stay valid across runs
    assert assign_names([("s", "files.read"), ("s", "x" * 80)]) == [dotted, long]
    # "a_" + "b" and "a" + "_b" would both be a___b: the second is told apart
    first, second = assign_names([("a_", "b"), ("a", "_b")])
    assert first == "a___b" and second != first and second.startswith("a___b_")
    # a built-in name is never taken
    (name,) = assign_names([("x", "y")], taken=["x__y"])
    assert name != "x__y" and name.startswith("x__y_")


@given(st.lists(st.tuples(st.text(max_size=70), st.text(max_size=70)), max_size=12))
def test_any_server_and_tool_names_give_valid_unique_names(
    pairs: list[tuple[str, str]],
) -> None:
    """Whatever the names (unicode, empty, long, duplicated): valid, unique, deterministic."""
    names = assign_names(pairs, taken=["bash"])
    assert len(names) == len(pairs) == len(set(names))
    assert all(NAME_RULE.match(name) for name in names)
    assert "bash" not in names
    assert assign_names(pairs, taken=["bash"]) == names


def test_kind_is_read_for_read_only_tools_else_execute() -> None:
    """readOnlyHint true → read; false or absent → execute (the seed's unknown kind)."""
    assert tool_kind_of(tool("a", read_only=True)) == "read"
    assert tool_kind_of(tool("b", read_only=False)) == "execute"
    assert tool_kind_of(tool("c")) == "execute"


# -- results ----------------------------------------------------------------------------


def test_text_result_is_the_output() -> None:
    """Text blocks joined by newlines; no extra content (the output is shown as text)."""
    converted = convert_result(
        result(mcp.TextContent(text="one"), mcp.TextContent(text="two")), "s__t"
    )
    assert converted.output == "one\ntwo"
    assert not converted.failed and converted.content == ()


def test_image_and_audio_reach_the_client_with_a_placeholder_for_the_model() -> None:
    """An image is ACP image content for the client; the model reads its type and size."""
    converted = convert_result(
        result(
            mcp.TextContent(text="here:"),
            mcp.ImageContent(data=PNG, mime_type="image/png"),
            mcp.AudioContent(data="AAAA", mime_type="audio/wav"),
        ),
        "s__t",
    )
    assert converted.output == "here:\n[image: image/png, 48 bytes]\n[audio: audio/wav, 3 bytes]"
    wire = [codec.encode(item) for item in converted.content]
    assert wire == [
        {"type": "content", "content": {"type": "text", "text": "here:"}},
        {"type": "content", "content": {"type": "image", "data": PNG, "mimeType": "image/png"}},
        {"type": "content", "content": {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}},
    ]


def test_resources_and_links_become_acp_resource_content() -> None:
    """Embedded text/blob resources and resource links: ACP content, a line for the model."""
    converted = convert_result(
        result(
            mcp.EmbeddedResource(
                resource=mcp.TextResourceContents(uri="file:///a.txt", text="alpha")
            ),
            mcp.EmbeddedResource(
                resource=mcp.BlobResourceContents(uri="mem://b", blob="AAAA", mime_type="x/y")
            ),
            mcp.ResourceLink(name="c", uri="file:///c", description="the c file"),
        ),
        "s__t",
    )
    assert converted.output.splitlines() == [
        "[resource file:///a.txt]",
        "alpha",
        "[resource mem://b: x/y, 3 bytes]",
        "[resource link: c <file:///c> — the c file]",
    ]
    wire = [codec.encode(item)["content"] for item in converted.content]
    assert wire[0] == {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "alpha"}}
    assert wire[1]["resource"] == {"uri": "mem://b", "blob": "AAAA", "mimeType": "x/y"}
    assert wire[2] == {
        "type": "resource_link",
        "name": "c",
        "uri": "file:///c",
        "description": "the c file",
    }


def test_structured_content_is_json_for_the_model_only_without_text() -> None:
    """structuredContent alone → its JSON; next to text blocks it is not repeated."""
    alone = convert_result(result(structured={"datetime": "2026", "dst": False}), "s__t")
    assert alone.output == '{"datetime": "2026", "dst": false}'
    with_text = convert_result(result(mcp.TextContent(text="t"), structured={"a": 1}), "s__t")
    assert with_text.output == "t"


def test_is_error_is_a_failed_call_the_model_can_read() -> None:
    """isError: failed, the server's text after a line saying the server reported an error."""
    converted = convert_result(result(mcp.TextContent(text="no such zone"), error=True), "s__t")
    assert converted.failed
    assert converted.output == "[s__t failed: the MCP server reported an error]\nno such zone"


def test_empty_result_says_so() -> None:
    """No content at all: ``[no output]``."""
    assert convert_result(result(), "s__t").output == "[no output]"


def test_huge_results_are_cut_for_the_model_with_a_marker() -> None:
    """A 1 MB text: head and tail kept within the bound, the omission said in the middle."""
    text = "h" * 500_000 + "t" * 500_000
    converted = convert_result(result(mcp.TextContent(text=text)), "s__t")
    marker = re.search(
        r"\[… (\d+) characters omitted: the result was longer than", converted.output
    )
    assert marker is not None
    assert int(marker.group(1)) == len(text) - MAX_MODEL_CHARS
    assert len(converted.output) < MAX_MODEL_CHARS + 200
    assert converted.output.startswith("hhh") and converted.output.endswith("ttt")


def test_progress_text() -> None:
    """``message (3/10)``, ``3/10``, ``message (2.5)``."""
    assert progress_text(3, 10, "step") == "step (3/10)"
    assert progress_text(3, 10.0, None) == "3/10"
    assert progress_text(2.5, None, "going") == "going (2.5)"


# -- whole turns --------------------------------------------------------------------------


def two_turns(name: str, **arguments: Any) -> list[dict[str, Any]]:
    return [{"tool_calls": [call(name, **arguments)]}, {"chunks": ["done"]}]


def test_the_model_calls_an_mcp_tool_and_reads_its_result() -> None:
    """The model sees the tool; tool_call has the kind; the result is in the next request."""
    client = FakeClient([tool("get_current_time", read_only=True, description="Get the time")])
    h, _ = mcp_harness(
        two_turns("time__get_current_time", x="UTC"),
        [stdio("time")],
        Servers({"time": client}),
    )
    sid = h.start()
    d = h.prompt(sid, "what time is it?")
    assert [c[:2] for c in client.calls] == [("get_current_time", {"x": "UTC"})]
    client.answer(result(mcp.TextContent(text="12:00 UTC")))
    h.pair.pump()
    assert h.pair.result(d).stop_reason == schema.StopReason.END_TURN
    engine: Any = h.runtime.engine
    specs = {spec.name: spec for spec in engine.received[0].tools}
    assert specs["time__get_current_time"].description == "Get the time"
    assert specs["time__get_current_time"].parameters["properties"] == {"x": {"type": "string"}}
    assert engine.received[1].messages[-1]["content"] == "12:00 UTC"
    start, _running, done = h.client.tool_updates()
    assert start["kind"] == "read"
    assert start["title"] == 'time: get_current_time {"x": "UTC"}'
    assert done["status"] == "completed"
    assert done["content"] == [
        {"type": "content", "content": {"type": "text", "text": "12:00 UTC"}}
    ]


def test_an_image_result_is_image_content_in_the_tool_call() -> None:
    """The client's tool_call_update carries the image; the model reads the placeholder."""
    client = FakeClient([tool("tiny")])
    h, _ = mcp_harness(two_turns("e__tiny"), [stdio("e")], Servers({"e": client}))
    sid = h.start()
    d = h.prompt(sid, "q")
    client.answer(result(mcp.ImageContent(data=PNG, mime_type="image/png")))
    h.pair.pump()
    h.pair.result(d)
    done = h.client.tool_updates()[-1]
    assert done["content"] == [
        {"type": "content", "content": {"type": "image", "data": PNG, "mimeType": "image/png"}}
    ]
    engine: Any = h.runtime.engine
    assert engine.received[1].messages[-1]["content"] == "[image: image/png, 48 bytes]"


@pytest.mark.parametrize(
    ("yolo", "permissions", "read_only", "asks"),
    [
        (True, None, False, False),
        (True, "ask", True, True),
        (False, None, True, True),
        (False, None, False, True),
        (False, "ask", False, True),
    ],
)
def test_permission_follows_yolo_or_the_servers_ask(
    yolo: bool, permissions: str | None, read_only: bool, asks: bool
) -> None:
    """The seed: MCP tools ask when yolo is false (read-only too) or when permissions = ask."""
    client = FakeClient([tool("t", read_only=read_only)])
    h, _ = mcp_harness(
        two_turns("s__t"),
        [stdio("s", permissions=permissions)],
        Servers({"s": client}),
        yolo=yolo,
    )
    h.client.answers = ["allow"]
    sid = h.start()
    d = h.prompt(sid, "q")
    client.answer(result(mcp.TextContent(text="ok")))
    h.pair.pump()
    h.pair.result(d)
    assert len(h.client.permission_requests) == (1 if asks else 0)
    if asks:
        wire = codec.encode(h.client.permission_requests[0])
        assert wire["toolCall"]["title"] == "s: t"
        assert wire["toolCall"]["kind"] == ("read" if read_only else "execute")


def test_rejected_call_is_not_sent_to_the_server() -> None:
    """reject under permissions = ask: no tools/call, the model reads the refusal."""
    client = FakeClient([tool("t")])
    h, _ = mcp_harness(two_turns("s__t"), [stdio("s", permissions="ask")], Servers({"s": client}))
    h.client.answers = ["reject"]
    sid = h.start()
    h.pair.result(h.prompt(sid, "q"))
    assert client.calls == []
    engine: Any = h.runtime.engine
    assert engine.received[1].messages[-1]["content"] == "[s__t rejected by the user]"


def test_progress_notifications_are_progress_lines() -> None:
    """Each progress notification: a tool_call_update whose content is the progress line."""
    client = FakeClient([tool("slow")])
    h, _ = mcp_harness(two_turns("s__slow"), [stdio("s")], Servers({"s": client}))
    sid = h.start()
    d = h.prompt(sid, "q")
    progress = client.calls[0][2]
    progress(1, 3, "step one")
    progress(2, 3, None)
    h.pair.pump()
    client.answer(result(mcp.TextContent(text="ok")))
    h.pair.pump()
    h.pair.result(d)
    texts = [
        u["content"][0]["content"]["text"]
        for u in h.client.tool_updates()
        if u.get("content") and "status" not in u
    ]
    assert texts == ["step one (1/3)", "2/3"]


def test_cancelling_the_turn_cancels_the_call() -> None:
    """session/cancel: the call's Deferred is cancelled (notifications/cancelled goes out)."""
    client = FakeClient([tool("slow")])
    h, _ = mcp_harness(two_turns("s__slow"), [stdio("s")], Servers({"s": client}))
    sid = h.start()
    d = h.prompt(sid, "q")
    assert len(client.calls) == 1
    h.pair.client.cancel(sid)
    h.pair.pump()
    assert h.pair.result(d).stop_reason == schema.StopReason.CANCELLED
    assert client.cancelled == ["slow"]
    assert h.client.tool_updates()[-1]["status"] == "failed"


def test_a_call_without_answer_or_progress_times_out() -> None:
    """timeout seconds of silence: the call is cancelled and fails with a clear line."""
    client = FakeClient([tool("hang")])
    h, _ = mcp_harness(two_turns("s__hang"), [stdio("s", timeout=10.0)], Servers({"s": client}))
    sid = h.start()
    d = h.prompt(sid, "q")
    progress = client.calls[0][2]
    h.clock.advance(8)
    progress(1, None, "alive")  # progress restarts the clock
    h.clock.advance(8)
    assert client.cancelled == []
    h.clock.advance(3)
    h.pair.pump()
    assert client.cancelled == ["hang"]
    assert h.pair.result(d).stop_reason == schema.StopReason.END_TURN
    engine: Any = h.runtime.engine
    assert engine.received[1].messages[-1]["content"] == (
        "[s__hang: no answer from the MCP server s in 10 s: the call was cancelled]"
    )
    assert h.client.tool_updates()[-1]["status"] == "failed"


def test_a_server_error_answer_is_a_failed_call() -> None:
    """A JSON-RPC error answer to tools/call: failed, the model reads the code and message."""
    client = FakeClient([tool("t")])
    h, _ = mcp_harness(two_turns("s__t"), [stdio("s")], Servers({"s": client}))
    sid = h.start()
    d = h.prompt(sid, "q")
    client.calls[0][3].errback(RPCError(-32602, "Unknown tool: t"))
    h.pair.pump()
    h.pair.result(d)
    engine: Any = h.runtime.engine
    assert engine.received[1].messages[-1]["content"] == (
        "[s__t failed: MCP error -32602: Unknown tool: t]"
    )


def test_a_server_that_stops_is_reported_once_and_its_tools_fail_clearly() -> None:
    """Death: one log line; the tool stays offered; each later call fails without a send."""
    client = FakeClient([tool("t")])
    turns = [
        {"tool_calls": [call("s__t")]},
        {"tool_calls": [call("s__t")]},
        {"chunks": ["gave up"]},
    ]
    with captured_logs() as logs:
        h, servers = mcp_harness(turns, [stdio("s")], Servers({"s": client}))
        sid = h.start()
        d = h.prompt(sid, "q")
        client.die('MCP server "s" exited with status 3; last stderr lines:\nboom')
        client.calls[0][3].errback(RuntimeError("connection lost"))
        h.pair.pump()
        h.pair.result(d)
        client.die("again")  # nothing more is reported
    stopped = [line for line in logs.lines if "stopped" in line]
    assert stopped == [
        '[mcp] s (stdio) stopped: MCP server "s" exited with status 3; its 1 tool now fail'
    ]
    assert len(client.calls) == 1
    engine: Any = h.runtime.engine
    why = 'MCP server "s" exited with status 3'
    assert engine.received[1].messages[-1]["content"] == (
        f"[s__t: the MCP server s is not running ({why})]"
    )
    assert engine.received[2].messages[-1]["content"] == (
        f"[s__t: the MCP server s is not running ({why})]"
    )
    assert "s__t" in {spec.name for spec in engine.received[2].tools}
    assert servers.servers[0].summary() == f"1 tool; stopped: {why}"


def test_list_changed_updates_the_tools_the_model_sees() -> None:
    """After on_tools_changed the next model call sees the new list."""
    client = FakeClient([tool("old")])
    turns = [{"tool_calls": [call("s__old")]}, {"chunks": ["ok"]}]
    h, _ = mcp_harness(turns, [stdio("s")], Servers({"s": client}))
    sid = h.start()
    d = h.prompt(sid, "q")
    client.tools = [tool("old"), tool("new")]
    assert client.on_tools_changed is not None
    client.on_tools_changed()
    client.answer(result(mcp.TextContent(text="x")))
    h.pair.pump()
    h.pair.result(d)
    engine: Any = h.runtime.engine
    first = {spec.name for spec in engine.received[0].tools}
    second = {spec.name for spec in engine.received[1].tools}
    assert "s__new" not in first and {"s__old", "s__new"} <= second


def test_the_allow_list_exposes_only_the_named_tools() -> None:
    """tools = ["a"]: only s__a; the banner summary says 1 of 2 tools."""
    client = FakeClient([tool("a"), tool("b")])
    with captured_logs() as logs:
        h, servers = mcp_harness(
            [{"chunks": ["x"]}], [stdio("s", tools=("a", "gone"))], Servers({"s": client})
        )
    assert [name for name in h.runtime.tools if name.startswith("s__")] == ["s__a"]
    assert servers.servers[0].summary() == "1 of 2 tools (tools allow-list)"
    assert any(
        "allow-list names gone, which the server does not offer" in line for line in logs.lines
    )


def test_startup_failure_and_timeout_are_banner_lines() -> None:
    """A server that cannot start says why; one that never answers fails after 30 s."""
    seen: list[str] = []
    clock = Clock()
    servers = Servers(
        {"bad": RuntimeError('MCP server "bad" cannot start: no such file'), "slow": Deferred()}
    )
    server_set = McpServerSet(
        [stdio("bad"), stdio("slow")],
        clock,
        connect=servers.connect,
        on_settled=lambda s: seen.append(f"{s.label}: {s.summary()}"),
    )
    ready = server_set.start()
    assert seen == ['bad (stdio): failed: MCP server "bad" cannot start: no such file']
    assert not ready.called
    clock.advance(30)
    assert seen[1] == "slow (stdio): failed: no answer in 30 s"
    assert ready.called
    late = FakeClient([tool("t")])
    servers.clients["slow"].callback(late)  # it answers after all: closed, not used
    assert late.closes == 1 and server_set.servers[1].state == "failed"


def test_a_prompt_waits_for_servers_still_starting() -> None:
    """The model is not called before the servers have answered (their tools are there)."""
    starting: Deferred[Any] = Deferred()
    client = FakeClient([tool("t")])
    h, _ = mcp_harness([{"chunks": ["ok"]}], [stdio("s")], Servers({"s": starting}))
    sid = h.start()
    d = h.prompt(sid, "q")
    engine: Any = h.runtime.engine
    assert engine.calls == 0
    starting.callback(client)
    h.pair.pump()
    h.pair.result(d)
    assert "s__t" in {spec.name for spec in engine.received[0].tools}


def test_a_hung_server_is_said_and_the_turn_goes_on_without_it_after_the_wait() -> None:
    """
    A server that does not answer: the client is told at once that the turn waits for it;
    after TURN_WAIT seconds the turn goes on without its tools (said too); once it has
    started, the next turn has them.
    """
    starting: Deferred[Any] = Deferred()
    h, _ = mcp_harness(
        [{"chunks": ["first"]}, {"chunks": ["second"]}], [stdio("s")], Servers({"s": starting})
    )
    sid = h.start()
    h.client.updates.clear()
    d = h.prompt(sid, "q")
    engine: Any = h.runtime.engine
    assert engine.calls == 0
    assert h.client.text() == "waiting for MCP server(s) s (stdio) to start...\n\n"
    h.clock.advance(TURN_WAIT - 0.1)
    assert engine.calls == 0
    h.clock.advance(0.1)
    h.pair.pump()
    h.pair.result(d)
    assert engine.calls == 1
    assert not {spec.name for spec in engine.received[0].tools} & {"s__t"}
    assert (
        "MCP server(s) s (stdio) not ready after 5 s: this turn goes on without their tools"
        in h.client.text()
    )
    assert h.client.text().endswith("first")
    starting.callback(FakeClient([tool("t")]))
    h.pair.pump()
    h.client.updates.clear()
    h.pair.result(h.prompt(sid, "again"))
    assert "s__t" in {spec.name for spec in engine.received[1].tools}
    assert h.client.text() == "second"


def test_close_closes_every_server_and_gives_up_starting_ones() -> None:
    """close(): each started client closed; one still starting is closed when it arrives."""
    client = FakeClient([tool("t")])
    late = FakeClient([tool("t")])
    starting: Deferred[Any] = Deferred()
    with captured_logs() as logs:
        server_set = McpServerSet(
            [stdio("a"), stdio("b")], Clock(), connect=Servers({"a": client, "b": starting}).connect
        )
        ready = server_set.start()
        server_set.close()
        assert ready.called
        starting.callback(late)
    assert client.closes == 1 and late.closes == 1
    assert not any("stopped" in line for line in logs.lines)
    assert server_set.servers[0].unavailable() == "closed by bob"
    assert server_set.servers[1].summary() == "failed: closed before it started"


# -- the client's mcpServers ----------------------------------------------------------------


def new_session_with(h: Harness, servers: list[Any]) -> str:
    h.pair.result(h.pair.client.initialize())
    response = h.pair.result(
        h.pair.client.new_session(schema.NewSessionRequest(cwd="/tmp", mcp_servers=servers))
    )
    return response.session_id


CLIENT_STDIO = schema.McpServerStdio(
    name="editor",
    command="/usr/bin/editor-mcp",
    args=["--x"],
    env=[schema.EnvVariable(name="A", value="1")],
)


def test_client_servers_are_ignored_by_default() -> None:
    """Without mcp.useClientServers: counted and ignored; mcpCapabilities.http false."""
    servers = Servers({"editor": FakeClient([tool("t")])})
    with captured_logs() as logs:
        h, _ = mcp_harness([{"chunks": ["x"]}], [], servers)
        init = h.pair.result(h.pair.client.initialize())
        h.pair.result(
            h.pair.client.new_session(
                schema.NewSessionRequest(cwd="/tmp", mcp_servers=[CLIENT_STDIO])
            )
        )
    assert servers.started == []
    assert init.agent_capabilities.mcp_capabilities.http is False
    assert any("(1 MCP server(s) ignored)" in line for line in logs.acp())


def test_client_servers_opt_in_connects_them_for_that_session_only() -> None:
    """useClientServers: the session's servers start (cwd = the session's); its tools only."""
    editor = FakeClient([tool("fmt")])
    servers = Servers({"editor": editor, "web": FakeClient([tool("get")])})
    turns = [{"tool_calls": [call("editor__fmt")]}, {"chunks": ["a"]}, {"chunks": ["b"]}]
    h, _ = mcp_harness(turns, [], servers, use_client_servers=True)
    init = h.pair.result(h.pair.client.initialize())
    assert init.agent_capabilities.mcp_capabilities.http is True
    web = schema.HttpMcpServer(
        name="web", url="http://127.0.0.1:1/mcp", headers=[schema.HttpHeader(name="K", value="v")]
    )
    sse = schema.SseMcpServer(name="old", url="http://127.0.0.1:1/sse", headers=[])
    sid = h.pair.result(
        h.pair.client.new_session(
            schema.NewSessionRequest(cwd="/tmp", mcp_servers=[CLIENT_STDIO, web, sse])
        )
    ).session_id
    assert servers.started == [
        McpStdioServer(
            name="editor", command="/usr/bin/editor-mcp", args=("--x",), env={"A": "1"}, cwd="/tmp"
        ),
        McpHttpServer(name="web", url="http://127.0.0.1:1/mcp", headers={"K": "v"}),
    ]
    other = h.pair.result(
        h.pair.client.new_session(schema.NewSessionRequest(cwd="/tmp", mcp_servers=[]))
    ).session_id
    d = h.prompt(sid, "q")
    editor.answer(result(mcp.TextContent(text="formatted")))
    h.pair.pump()
    h.pair.result(d)
    h.pair.result(h.prompt(other, "q"))
    engine: Any = h.runtime.engine
    assert {"editor__fmt", "web__get"} <= {spec.name for spec in engine.received[0].tools}
    assert engine.received[1].messages[-1]["content"] == "formatted"
    assert not any(spec.name.startswith("editor__") for spec in engine.received[2].tools)
    # the connection ends: the session's servers are closed
    transport: Any = h.pair.client.protocol.transport
    transport.loseConnection()
    h.pair.pump()
    assert editor.closes == 1


def test_client_server_configs_skip_sse_and_unknown_types() -> None:
    """SSE and unknown server types are listed as not usable."""
    configs, skipped = client_server_configs(
        [schema.SseMcpServer(name="old", url="http://x/sse", headers=[])], "/w"
    )
    assert configs == [] and skipped == ["old (sse): the SSE transport is not supported"]


# -- configuration and banner ---------------------------------------------------------------


def test_use_client_servers_and_timeout_are_validated() -> None:
    """useClientServers is a boolean; timeout is seconds > 0; errors name the key."""
    assert parse_config({"mcp": {"useClientServers": True}}, "f.toml").mcp_use_client_servers
    assert not AgentConfig().mcp_use_client_servers
    with pytest.raises(ConfigError, match=r"f\.toml: mcp\.useClientServers must be a boolean"):
        parse_config({"mcp": {"useClientServers": "yes"}}, "f.toml")
    table = {"command": "x", "timeout": 0}
    with pytest.raises(ConfigError, match=r"mcp.servers.s.timeout must be a number of seconds > 0"):
        parse_config({"mcp": {"servers": {"s": table}}}, "f.toml")
    with pytest.raises(ConfigError, match=r"mcp.servers.s.timeout must be a number of seconds"):
        parse_config({"mcp": {"servers": {"s": {"command": "x", "timeout": "1"}}}}, "f.toml")
    (server,) = parse_config(
        {"mcp": {"servers": {"s": {"command": "x", "timeout": 5}}}}, "f.toml"
    ).mcp_servers
    assert server.timeout == 5.0


def test_use_client_servers_is_per_process(tmp_path: Any) -> None:
    """A session's project file that sets it differently is listed as ignored."""
    project = tmp_path / "p"
    (project / ".acpkit").mkdir(parents=True)
    (project / ".acpkit" / "agent.toml").write_text("[mcp]\nuseClientServers = true\n")
    session = session_config(AgentConfig(), str(project))
    assert session.mcp_use_client_servers is False
    assert "mcp.useClientServers" in session.ignored


def test_banner_lines_name_the_servers_and_the_opt_in() -> None:
    """The banner says which servers start and whether the client's are used."""
    config = AgentConfig(
        mcp_servers=(stdio("time"), McpHttpServer(name="web", url="http://h/mcp")),
        mcp_use_client_servers=True,
    )
    assert mcp_banner_lines(config) == [
        "  mcp:         starting time (stdio), web (http)",
        "  mcp:         also connects to the client's mcpServers (mcp.useClientServers)",
    ]
    assert mcp_banner_lines(AgentConfig()) == []
    assert "  mcp:         starting time (stdio), web (http)" in banner_lines(
        config, "echo", "1", cwd="/nonexistent", home="/nonexistent"
    )


def test_mcp_tool_satisfies_the_tool_contract() -> None:
    """McpTool has the Tool attributes the turn loop reads."""

    class Caller:
        name = "s"

        def unavailable(self) -> str | None:
            return None

        def call_tool(self, name: str, arguments: Any, progress: Any) -> Deferred[Any]:
            return Deferred()

    mcp_tool = McpTool(name="s__t", server=Caller(), tool=tool("t"), always_asks=True)
    assert (mcp_tool.kind, mcp_tool.always_asks) == ("execute", True)
    assert mcp_tool.needs_permission({}) and mcp_tool.locations({}, "/") == []
    assert BobAgent.__name__ == "BobAgent"  # the agent module imports the MCP modules
