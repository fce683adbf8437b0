"""
The turn loop with the scripted engine (seed 000: "Notifications session/update envoyées",
"Identifiants d'appel d'outil", "Requêtes session/request_permission envoyées", the
session/prompt table's history, success, cancelled and failure rows).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
from twisted.internet.defer import Deferred, succeed

from acpkit import schema
from acpkit.errors import RPCError
from acpkit_agent.config import AgentConfig
from acpkit_agent.tools.base import ToolContext, ToolResult
from tests.fixtures.agent.harness import (
    CANCELLED_ANSWER,
    Harness,
    captured_logs,
    make_harness,
    scripted,
)

OPTIONS = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "allow_always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
    {"optionId": "never", "name": "Never", "kind": "reject_always"},
]


@attrs.define
class FakeBash:
    """A stand-in ``bash`` tool: answers at once, or holds its run until told."""

    name: str = "bash"
    kind: str = "execute"
    description: str = "run a command"
    parameters: Mapping[str, Any] = attrs.field(factory=lambda: {"type": "object"})
    hold: bool = False
    runs: list[str] = attrs.field(factory=list)
    running: list[Deferred[ToolResult]] = attrs.field(factory=list)
    cancelled: int = 0

    def title(self, args: Mapping[str, Any]) -> str:
        return f"bash: {args.get('command', '')}"

    def locations(self, args: Mapping[str, Any], cwd: str) -> list[str]:
        return []

    def needs_permission(self, args: Mapping[str, Any]) -> bool:
        return True

    def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Deferred[ToolResult]:
        command = str(args.get("command"))
        self.runs.append(command)
        if not self.hold:
            return succeed(ToolResult(output=f"ran {command}\n", exit_status=0))

        def cancel(d: Deferred[ToolResult]) -> None:
            self.cancelled += 1

        d: Deferred[ToolResult] = Deferred(cancel)
        self.running.append(d)
        return d


def harness(
    turns: list[dict[str, Any]], *, yolo: bool = True, bash: FakeBash | None = None
) -> Harness:
    h = make_harness(scripted({"turn": turns}), config=AgentConfig(yolo=yolo))
    tools = dict(h.runtime.tools)
    tools["bash"] = bash if bash is not None else FakeBash()
    h.runtime.tools = tools
    return h


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def test_tool_call_lifecycle_and_history() -> None:
    """tool_call pending → in_progress → completed with text content and rawOutput."""
    with captured_logs() as logs:
        h = harness(
            [
                {"chunks": ["Let me ", "look."], "tool_calls": [call("bash", command="ls -l")]},
                {"chunks": ["Done."], "usage": {"input": 50, "output": 5}},
            ]
        )
        sid = h.start()
        h.client.updates.clear()
        result = h.raw_prompt(sid, "list files")
    assert result["stopReason"] == "end_turn"
    assert h.client.tool_updates() == [
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "call_1",
            "title": "bash: ls -l",
            "kind": "execute",
            "status": "pending",
            "rawInput": {"command": "ls -l"},
        },
        {"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "status": "in_progress"},
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "call_1",
            "status": "completed",
            "content": [{"type": "content", "content": {"type": "text", "text": "ran ls -l\n"}}],
            "rawOutput": {"output": "ran ls -l\n"},
        },
    ]
    assert h.client.text() == "Let me look.Done."
    session = h.agent.sessions.get(sid)
    assert session is not None
    roles = [m["role"] for m in session.history]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert session.history[3]["content"] == "ran ls -l\n"
    engine: Any = h.runtime.engine
    assert engine.received[1].messages[-1]["content"] == "ran ls -l\n"
    assert {spec.name for spec in engine.received[0].tools} >= {"bash", "read_file", "write_file"}
    assert "[acp] turn done: 1 command(s) · 0 file op(s) · 0 skill(s)" in logs.acp()
    assert result["usage"] == {"totalTokens": 55, "inputTokens": 50, "outputTokens": 5}


def test_call_ids_are_numbered_per_process() -> None:
    """call_N continues across turns, sessions and connections sharing the runtime."""
    turns: list[dict[str, Any]] = [
        {"tool_calls": [call("bash", command="a"), call("bash", command="b")]},
        {"chunks": ["ok"]},
        {"tool_calls": [call("bash", command="c")]},
        {"chunks": ["ok"]},
        {"tool_calls": [call("bash", command="d")]},
        {"chunks": ["ok"]},
    ]
    h = harness(turns)
    sid = h.start()
    h.raw_prompt(sid, "one")
    h.raw_prompt(sid, "two")
    other = make_harness(runtime=h.runtime, clock=h.clock)
    sid2 = other.start()
    other.raw_prompt(sid2, "three")
    ids = [u["toolCallId"] for u in h.client.of_kind("tool_call")]
    assert ids == ["call_1", "call_2", "call_3"]
    assert [u["toolCallId"] for u in other.client.of_kind("tool_call")] == ["call_4"]


def test_write_and_edit_file_send_diffs_with_absolute_locations(tmp_path: Path) -> None:
    """write_file/edit_file: kind edit, absolute locations, diff content path/oldText/newText."""
    (tmp_path / "a.txt").write_text("hello world\n")
    with captured_logs() as logs:
        h = harness(
            [
                {
                    "tool_calls": [
                        call("write_file", path="new.txt", content="fresh\n"),
                        call("edit_file", path="a.txt", old_text="world", new_text="there"),
                    ]
                },
                {"chunks": ["edited"]},
            ]
        )
        sid = h.start(cwd=str(tmp_path))
        h.raw_prompt(sid, "change things")
    starts = h.client.of_kind("tool_call")
    assert [s["kind"] for s in starts] == ["edit", "edit"]
    assert starts[0]["locations"] == [{"path": str(tmp_path / "new.txt")}]
    assert starts[1]["locations"] == [{"path": str(tmp_path / "a.txt")}]
    done = [u for u in h.client.tool_updates() if u.get("status") == "completed"]
    new_diff = done[0]["content"][0]
    assert new_diff["type"] == "diff" and new_diff["path"] == str(tmp_path / "new.txt")
    assert new_diff["newText"] == "fresh\n" and new_diff.get("oldText") is None
    edit_diff = done[1]["content"][0]
    assert edit_diff == {
        "type": "diff",
        "path": str(tmp_path / "a.txt"),
        "oldText": "hello world\n",
        "newText": "hello there\n",
    }
    assert "output" in done[1]["rawOutput"]
    assert (tmp_path / "a.txt").read_text() == "hello there\n"
    assert "[acp] turn done: 0 command(s) · 2 file op(s) · 0 skill(s)" in logs.acp()


def test_file_tools_go_through_the_client_when_advertised(tmp_path: Path) -> None:
    """With fs.readTextFile/writeTextFile advertised, file tools go through the client."""
    target = str(tmp_path / "buf.txt")
    h = harness(
        [
            {
                "tool_calls": [
                    call("read_file", path="buf.txt"),
                    call("write_file", path="buf.txt", content="saved"),
                ]
            },
            {"tool_calls": [call("read_file", path="gone.txt")]},
            {"chunks": ["ok"]},
        ]
    )
    h.client.files[target] = "unsaved buffer\n"
    caps = schema.ClientCapabilities(
        fs=schema.FileSystemCapabilities(read_text_file=True, write_text_file=True)
    )
    sid = h.start(cwd=str(tmp_path), capabilities=caps)
    h.raw_prompt(sid, "go")
    done = [u for u in h.client.tool_updates() if u.get("status") in ("completed", "failed")]
    assert "unsaved buffer" in done[0]["rawOutput"]["output"]
    assert h.client.files[target] == "saved"
    assert not (tmp_path / "buf.txt").exists()
    assert ("read", target) in h.client.fs_calls and ("write", target) in h.client.fs_calls
    assert done[2]["status"] == "failed"


def test_reasoning_streams_thought_chunks() -> None:
    """Reasoning deltas become agent_thought_chunk updates, text agent_message_chunk."""
    h = harness([{"reasoning": ["hmm, ", "let me think"], "chunks": ["  answer  "]}])
    sid = h.start()
    h.raw_prompt(sid, "q")
    thoughts = [u["content"]["text"] for u in h.client.of_kind("agent_thought_chunk")]
    assert thoughts == ["hmm, ", "let me think"]
    assert h.client.text() == "  answer  "


def test_unknown_tool_and_bad_arguments_fail_the_call() -> None:
    """A call of an unknown tool, or with non-JSON arguments, ends failed; the turn goes on."""
    h = harness(
        [
            {
                "tool_calls": [
                    {"name": "teleport", "arguments": {}},
                    {"name": "bash", "arguments": "{not json"},
                ]
            },
            {"chunks": ["sorry"]},
        ]
    )
    sid = h.start()
    result = h.raw_prompt(sid, "go")
    assert result["stopReason"] == "end_turn"
    ends = [u for u in h.client.tool_updates() if u.get("status") == "failed"]
    assert len(ends) == 2
    assert "unknown tool 'teleport'" in ends[0]["rawOutput"]["output"]
    assert "invalid arguments for bash" in ends[1]["rawOutput"]["output"]


def test_usage_update_after_each_model_call_and_end() -> None:
    """usage_update after each reporting model call (input+output) and at the end (max)."""
    h = harness(
        [
            {"tool_calls": [call("bash", command="x")], "usage": {"input": 100, "output": 10}},
            {"chunks": ["ok"], "usage": {"input": 130, "output": 7, "cached": 90, "reasoning": 3}},
        ]
    )
    h.runtime.config = AgentConfig(context_window=4096)
    sid = h.start()
    result = h.raw_prompt(sid, "q")
    session = h.agent.sessions.get(sid)
    assert session is not None
    from acpkit_agent.session import estimate_tokens

    assert [(u["used"], u["size"]) for u in h.client.of_kind("usage_update")] == [
        (110, 4096),
        (137, 4096),
        (max(137, estimate_tokens(session.history)), 4096),
    ]
    assert result["usage"] == {
        "totalTokens": 247,
        "inputTokens": 230,
        "outputTokens": 17,
        "thoughtTokens": 3,
        "cachedReadTokens": 90,
    }


def test_no_usage_when_engine_reports_none() -> None:
    """Without counts from the engine the response has no usage; size from the probe (0)."""
    h = harness([{"chunks": ["hi"]}])
    sid = h.start()
    result = h.raw_prompt(sid, "q")
    assert result == {"stopReason": "end_turn"}
    [update] = h.client.of_kind("usage_update")
    assert update["size"] == 0 and update["used"] > 0


# -- permissions -----------------------------------------------------------------------


def test_permission_request_has_the_four_options_and_the_tool_call() -> None:
    """yolo=false: session/request_permission with allow/allow_always/reject/never and toolCall."""
    h = harness(
        [{"tool_calls": [call("bash", command="rm -rf build")]}, {"chunks": ["ok"]}], yolo=False
    )
    h.client.answers = ["allow"]
    sid = h.start()
    result = h.raw_prompt(sid, "clean")
    assert result["stopReason"] == "end_turn"
    [request] = h.client.permission_requests
    from acpkit import codec

    wire = codec.encode(request)
    assert wire["sessionId"] == sid
    assert wire["options"] == OPTIONS
    assert wire["toolCall"] == {
        "toolCallId": "call_1",
        "title": "bash: rm -rf build",
        "kind": "execute",
        "status": "pending",
        "rawInput": {"command": "rm -rf build"},
    }
    statuses = [u.get("status") for u in h.client.tool_updates()]
    assert statuses == ["pending", "in_progress", "completed"]


def test_reject_tells_the_model_and_fails_the_call() -> None:
    """reject: not run; the model receives [command rejected by the user]; the call fails."""
    bash = FakeBash()
    h = harness(
        [{"tool_calls": [call("bash", command="ls")]}, {"chunks": ["ok"]}], yolo=False, bash=bash
    )
    h.client.answers = ["reject"]
    sid = h.start()
    h.raw_prompt(sid, "q")
    assert bash.runs == []
    last = h.client.tool_updates()[-1]
    assert last["status"] == "failed"
    assert last["rawOutput"] == {"output": "[command rejected by the user]"}
    engine: Any = h.runtime.engine
    assert engine.received[1].messages[-1]["content"] == "[command rejected by the user]"


def test_rejection_message_names_other_tools(tmp_path: Path) -> None:
    """For tools other than bash the model receives [<tool> rejected by the user]."""
    h = harness(
        [{"tool_calls": [call("write_file", path="x", content="y")]}, {"chunks": ["ok"]}],
        yolo=False,
    )
    h.client.answers = ["reject"]
    sid = h.start(cwd=str(tmp_path))
    h.raw_prompt(sid, "q")
    assert h.client.tool_updates()[-1]["rawOutput"] == {
        "output": "[write_file rejected by the user]"
    }
    assert not (tmp_path / "x").exists()


def test_read_tools_never_ask(tmp_path: Path) -> None:
    """read_file runs without a permission request even with yolo=false."""
    (tmp_path / "r.txt").write_text("r")
    h = harness([{"tool_calls": [call("read_file", path="r.txt")]}, {"chunks": ["ok"]}], yolo=False)
    sid = h.start(cwd=str(tmp_path))
    h.raw_prompt(sid, "q")
    assert h.client.permission_requests == []
    assert h.client.tool_updates()[-1]["status"] == "completed"


def test_yolo_never_asks() -> None:
    """yolo=true (the default): no permission request for bash."""
    h = harness([{"tool_calls": [call("bash", command="ls")]}, {"chunks": ["ok"]}])
    sid = h.start()
    h.raw_prompt(sid, "q")
    assert h.client.permission_requests == []


@pytest.mark.parametrize(
    "answer, runs",
    [("allow_always", ["a", "b"]), ("never", [])],
)
def test_remembered_answers_per_tool_name(answer: str, runs: list[str]) -> None:
    """allow_always / never are remembered for the tool name: the second call asks nothing."""
    bash = FakeBash()
    h = harness(
        [
            {"tool_calls": [call("bash", command="a")]},
            {"tool_calls": [call("bash", command="b")]},
            {"chunks": ["ok"]},
        ],
        yolo=False,
        bash=bash,
    )
    h.client.answers = [answer]
    sid = h.start()
    h.raw_prompt(sid, "q")
    assert len(h.client.permission_requests) == 1
    assert bash.runs == runs
    session = h.agent.sessions.get(sid)
    assert session is not None and session.remembered == {"bash": answer == "allow_always"}


@pytest.mark.parametrize("answer", [CANCELLED_ANSWER, RPCError(-32603, "dialog crashed")])
def test_cancelled_outcome_or_error_is_a_refusal(answer: Any) -> None:
    """A cancelled outcome or an error answer counts as a refusal (the turn goes on)."""
    bash = FakeBash()
    h = harness(
        [{"tool_calls": [call("bash", command="a")]}, {"chunks": ["ok"]}], yolo=False, bash=bash
    )
    h.client.answers = [answer]
    sid = h.start()
    result = h.raw_prompt(sid, "q")
    assert result["stopReason"] == "end_turn"
    assert bash.runs == []
    assert h.client.tool_updates()[-1]["status"] == "failed"
    assert h.client.tool_updates()[-1]["rawOutput"] == {"output": "[command rejected by the user]"}


# -- cancellation ----------------------------------------------------------------------


def test_cancel_during_model_stream_keeps_partial_answer() -> None:
    """session/cancel mid-stream: stopReason cancelled, the streamed text kept in history."""
    h = harness([{"chunks": ["Part ", "one ", "two ", "three"], "delay": 1.0}])
    sid = h.start()
    d = h.prompt(sid, "talk")
    h.pair.advance(1.0)
    assert h.client.text() == "Part one "
    h.pair.client.cancel(sid)
    response = h.pair.result(d)
    assert response.stop_reason == schema.StopReason.CANCELLED
    session = h.agent.sessions.get(sid)
    assert session is not None
    assert session.history[-1] == {"role": "assistant", "content": "Part one "}
    assert h.client.of_kind("usage_update")  # end-of-turn usage even when cancelled
    h.pair.advance(10.0)
    assert h.client.text() == "Part one "


def test_cancel_before_any_answer_removes_the_question() -> None:
    """A question that got no answer at all (cancelled before any output) leaves the history."""
    h = harness([{"reasoning": ["thinking"], "chunks": ["a", "b"], "delay": 1.0}])
    sid = h.start()
    d = h.prompt(sid, "first")
    h.pair.client.cancel(sid)
    assert h.pair.result(d).stop_reason == schema.StopReason.CANCELLED
    session = h.agent.sessions.get(sid)
    assert session is not None
    assert [m["role"] for m in session.history] == ["system"]


def test_cancel_during_permission_request() -> None:
    """Cancel while the permission dialog is open: call failed, tool not run, cancelled."""
    bash = FakeBash()
    h = harness(
        [{"tool_calls": [call("bash", command="x")]}, {"chunks": ["never"]}], yolo=False, bash=bash
    )
    sid = h.start()
    d = h.prompt(sid, "q")
    assert len(h.client.held) == 1
    h.pair.client.cancel(sid)
    assert h.pair.result(d).stop_reason == schema.StopReason.CANCELLED
    assert bash.runs == []
    statuses = [u.get("status") for u in h.client.tool_updates()]
    assert statuses == ["pending", "failed"]
    session = h.agent.sessions.get(sid)
    assert session is not None
    assert session.history[-1]["role"] == "tool"
    assert session.history[-1]["content"] == "[tool call cancelled by the user]"
    engine: Any = h.runtime.engine
    assert engine.calls == 1


def test_cancel_during_running_tool_cancels_it() -> None:
    """Cancel while a tool runs: its Deferred is cancelled, every started call ends failed."""
    bash = FakeBash(hold=True)
    h = harness(
        [{"tool_calls": [call("bash", command="sleep 100"), call("bash", command="later")]}],
        bash=bash,
    )
    sid = h.start()
    d = h.prompt(sid, "q")
    assert bash.runs == ["sleep 100"]
    h.pair.client.cancel(sid)
    assert h.pair.result(d).stop_reason == schema.StopReason.CANCELLED
    assert bash.cancelled == 1
    updates = h.client.tool_updates()
    assert [u.get("status") for u in updates] == ["pending", "in_progress", "failed"]
    session = h.agent.sessions.get(sid)
    assert session is not None
    tool_messages = [m for m in session.history if m["role"] == "tool"]
    assert len(tool_messages) == 2  # both calls answered so the history stays valid


def test_cancel_is_answered_then_next_turn_works() -> None:
    """After a cancelled turn, the next prompt runs normally."""
    h = harness([{"chunks": ["a", "b"], "delay": 1.0}, {"chunks": ["fine"]}])
    sid = h.start()
    d = h.prompt(sid, "one")
    h.pair.client.cancel(sid)
    h.pair.result(d)
    h.client.updates.clear()
    assert h.raw_prompt(sid, "two")["stopReason"] == "end_turn"
    assert h.client.text() == "fine"


# -- failures --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "turn, message",
    [
        ({"error": "model exploded"}, "model exploded"),
        ({"status": 500, "body": "oops"}, "HTTP 500"),
        ({"garbage": "<html>"}, "garbage"),
        ({"chunks": ["a", "b", "c"], "cut_after": 1}, "closed the stream"),
    ],
)
def test_engine_failure_is_internal_error_and_agent_stays_up(
    turn: dict[str, Any], message: str
) -> None:
    """An engine failure answers -32603 with a one-line reason; the next turn works."""
    with captured_logs() as logs:
        h = harness([turn, {"chunks": ["recovered"]}])
        sid = h.start()
        with pytest.raises(RPCError) as caught:
            h.raw_prompt(sid, "q")
    assert caught.value.code == -32603
    assert message in caught.value.message
    assert "\n" not in caught.value.message
    assert "[acp] turn done: 0 command(s) · 0 file op(s) · 0 skill(s)" in logs.acp()
    h.client.updates.clear()
    assert h.raw_prompt(sid, "again")["stopReason"] == "end_turn"
    assert h.client.text() == "recovered"


@pytest.mark.parametrize(
    "turn, message",
    [
        ({"error": "model exploded"}, "model exploded"),
        ({"status": 500, "body": "oops"}, "HTTP 500"),
    ],
)
def test_engine_failure_explanation_is_in_data_error(turn: dict[str, Any], message: str) -> None:
    """
    A failed turn's -32603 carries the one-line explanation in data.error too (seed 000:
    "Échec: internal error avec error: <explication en une ligne>"), the same text as the
    message after "Internal error: ".
    """
    h = harness([turn])
    sid = h.start()
    with pytest.raises(RPCError) as caught:
        h.raw_prompt(sid, "q")
    assert caught.value.code == -32603
    assert isinstance(caught.value.data, dict) and set(caught.value.data) == {"error"}
    explanation = caught.value.data["error"]
    assert message in explanation and "\n" not in explanation
    assert caught.value.message == f"Internal error: {explanation}"


def test_failure_after_tool_call_keeps_history() -> None:
    """A failure on the second model call keeps the first call and its result in history."""
    h = harness([{"tool_calls": [call("bash", command="ls")]}, {"error": "boom"}])
    sid = h.start()
    with pytest.raises(RPCError):
        h.raw_prompt(sid, "q")
    session = h.agent.sessions.get(sid)
    assert session is not None
    assert [m["role"] for m in session.history] == ["system", "user", "assistant", "tool"]


def test_failed_question_without_answer_is_removed() -> None:
    """A first model call failing leaves no trace of the question in history."""
    h = harness([{"error": "down"}])
    sid = h.start()
    with pytest.raises(RPCError):
        h.raw_prompt(sid, "q")
    session = h.agent.sessions.get(sid)
    assert session is not None
    assert [m["role"] for m in session.history] == ["system"]


def test_turns_are_serialized_process_wide() -> None:
    """Two sessions' prompts: the second model call starts only after the first turn ends."""
    h = harness([{"chunks": ["a", "b"], "delay": 1.0}, {"chunks": ["c"]}])
    sid1 = h.start()
    other = make_harness(runtime=h.runtime, clock=h.clock)
    sid2 = other.start()
    d1 = h.prompt(sid1, "one")
    d2 = other.prompt(sid2, "two")
    engine: Any = h.runtime.engine
    assert engine.calls == 1
    assert not d2.called
    h.pair.advance(1.0)
    assert engine.calls == 1 and not d1.called
    h.pair.advance(1.0)  # the last (finish) event
    other.pair.pump()
    assert h.pair.result(d1).stop_reason == schema.StopReason.END_TURN
    assert other.pair.result(d2).stop_reason == schema.StopReason.END_TURN
    assert engine.calls == 2


def test_plan_tool_sends_plan_updates() -> None:
    """The plan tool's changes are sent as plan updates with every entry."""
    h = harness(
        [
            {
                "tool_calls": [
                    call(
                        "plan",
                        action="set",
                        entries=[
                            {"content": "write tests", "priority": "high"},
                            {"content": "ship"},
                        ],
                    )
                ]
            },
            {"chunks": ["planned"]},
        ]
    )
    sid = h.start()
    h.raw_prompt(sid, "plan it")
    [plan] = h.client.of_kind("plan")
    assert plan["entries"] == [
        {"content": "write tests", "priority": "high", "status": "pending"},
        {"content": "ship", "priority": "medium", "status": "pending"},
    ]
    assert h.client.of_kind("tool_call")[0]["kind"] == "think"


def test_client_disconnect_mid_turn_releases_the_turn_lock() -> None:
    """A client that goes away mid-turn: the turn ends, the process-wide lock is free again."""
    with captured_logs() as logs:
        h = harness([{"chunks": ["a", "b", "c"], "delay": 1.0}, {"chunks": ["next"]}])
        sid = h.start()
        d = h.prompt(sid, "q")
        failures: list[Any] = []
        d.addErrback(failures.append)
        h.pair.close()
        h.clock.advance(5.0)
    assert len(failures) == 1  # the client's own request failed with the connection
    assert not h.runtime.lock.locked
    assert "[acp] turn done: 0 command(s) · 0 file op(s) · 0 skill(s)" in logs.acp()
    assert not [e for e in logs.events if e.get("log_failure") is not None]
    other = make_harness(runtime=h.runtime, clock=h.clock)
    sid2 = other.start()
    assert other.raw_prompt(sid2, "again")["stopReason"] == "end_turn"


def test_cancelled_response_carries_session_usage() -> None:
    """A cancelled turn answers stopReason cancelled with the session's usage totals."""
    h = harness(
        [
            {"tool_calls": [call("bash", command="x")], "usage": {"input": 40, "output": 2}},
            {"chunks": ["slow", "er"], "delay": 1.0},
        ]
    )
    sid = h.start()
    d = h.pair.client.protocol.request(
        "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "q"}]}
    )
    h.pair.pump()
    h.pair.client.cancel(sid)
    result = h.pair.result(d)
    assert result == {
        "stopReason": "cancelled",
        "usage": {"totalTokens": 42, "inputTokens": 40, "outputTokens": 2},
    }
