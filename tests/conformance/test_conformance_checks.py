"""
The content checks, family by family (issue 23, items 5, 6 and 9): each family judges only
its own rules; the checks widened to what their quoted sentence says (tool call ids unique
per session, a plan entry that vanishes and comes back, a compaction id reused, usage
costs); the tool-call lifecycle rules (TOOL-002, TOOL-003); EXT-001 on a variant the schema
does not define. Raw lines fed to an `Observer`, no process.
"""

from __future__ import annotations

from typing import Any

from acpkit.conformance import checks
from acpkit.conformance.observer import Observer
from acpkit.conformance.rules import RULES_BY_ID
from tests.conformance.traffic import json_line, observer_with_session, update


def _prompt(observer: Observer, rid: int) -> None:
    observer.sent(
        {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "session/prompt",
            "params": {"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}]},
        }
    )


def _end(observer: Observer, rid: int, stop: str = "end_turn") -> None:
    observer.received(json_line({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": stop}}))


def _findings(observer: Observer) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for finding in observer.verdicts.findings:
        found.setdefault(finding.rule_id, []).append(finding.message)
    return found


def _call(call_id: str, status: str | None = None, kind: str = "tool_call") -> bytes:
    body: dict[str, Any] = {"sessionUpdate": kind, "toolCallId": call_id}
    if kind == "tool_call":
        body["title"] = "work"
    if status is not None:
        body["status"] = status
    return update(body)


# -- one home per rule ------------------------------------------------------------------------


def test_every_family_judges_catalogue_rules_and_no_rule_has_two_homes() -> None:
    """Each family lists the catalogue rules it judges; no rule is judged by two families."""
    families = checks.Checks(Observer()).families
    seen: dict[str, str] = {}
    for family in families:
        name = type(family).__name__
        assert family.rules, name
        for rule_id in family.rules:
            assert rule_id in RULES_BY_ID, (name, rule_id)
            assert rule_id not in seen, (rule_id, seen.get(rule_id), name)
            seen[rule_id] = name


def test_the_checks_package_does_not_import_the_observer() -> None:
    """The checks see the observer only through their Judge protocol: no import cycle."""
    import ast
    import pathlib

    package = pathlib.Path(checks.__file__).parent
    for module in package.glob("*.py"):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert node.module != "acpkit.conformance.observer", module.name


# -- turns and tool calls ----------------------------------------------------------------------


def test_a_tool_call_id_is_unique_within_the_session_not_only_the_turn() -> None:
    """A tool_call reusing the id of a tool call of an earlier turn is TURN-003."""
    observer = observer_with_session()
    _prompt(observer, 2)
    observer.received(_call("t1", "completed"))
    _end(observer, 2)
    _prompt(observer, 3)
    observer.received(_call("t1", "completed"))
    _end(observer, 3)
    (message,) = _findings(observer)["TURN-003"]
    assert "reuses toolCallId 't1'" in message and "within the session" in message


def test_an_update_of_a_tool_call_never_announced_is_tool_002() -> None:
    """A tool_call_update (or a permission's toolCall) for an unknown id is TOOL-002, once."""
    observer = observer_with_session()
    _prompt(observer, 2)
    observer.received(_call("ghost", "in_progress", kind="tool_call_update"))
    observer.received(_call("ghost", "completed", kind="tool_call_update"))
    observer.received(
        json_line(
            {
                "jsonrpc": "2.0",
                "id": "p1",
                "method": "session/request_permission",
                "params": {
                    "sessionId": "s",
                    "toolCall": {"toolCallId": "phantom"},
                    "options": [{"optionId": "a", "name": "Allow", "kind": "allow_once"}],
                },
            }
        )
    )
    found = _findings(observer)["TOOL-002"]
    assert len(found) == 2
    assert "'ghost'" in found[0] and "'phantom'" in found[1]


def test_statuses_only_move_forward() -> None:
    """completed -> in_progress and in_progress -> pending are TOOL-003; forward is fine."""
    observer = observer_with_session()
    _prompt(observer, 2)
    for call_id, steps in (
        ("ok", ["pending", "in_progress", "completed"]),
        ("back", ["in_progress", "completed", "in_progress"]),
        ("down", ["in_progress", "pending"]),
    ):
        observer.received(_call(call_id, steps[0]))
        for status in steps[1:]:
            observer.received(_call(call_id, status, kind="tool_call_update"))
    found = _findings(observer)["TOOL-003"]
    assert len(found) == 2
    assert "'back' from completed back to in_progress" in found[0]
    assert "'down' from in_progress back to pending" in found[1]


def test_a_plan_entry_that_vanishes_and_comes_back_is_turn_004() -> None:
    """Plans [a, b], [a], [a, b]: the middle update was not the complete list."""
    observer = observer_with_session()
    _prompt(observer, 2)

    def plan(*names: str) -> bytes:
        entries = [{"content": n, "priority": "high", "status": "pending"} for n in names]
        return update({"sessionUpdate": "plan", "entries": entries})

    observer.received(plan("a", "b"))
    observer.received(plan("a"))
    observer.received(plan("a", "c"))  # b dropped for good: a rewrite, not judged
    assert "TURN-004" not in _findings(observer)
    observer.received(plan("a"))
    observer.received(plan("a", "c"))
    (message,) = _findings(observer)["TURN-004"]
    assert "'c' was left out of an earlier plan update" in message


def _plan(*names: str) -> bytes:
    entries = [{"content": n, "priority": "high", "status": "pending"} for n in names]
    return update({"sessionUpdate": "plan", "entries": entries})


def test_a_plan_entry_back_after_several_updates_without_it_is_turn_004() -> None:
    """Plans [a, b], [a], [a], [a, b] in one turn: b's absence was not the complete list,
    however many updates left it out."""
    observer = observer_with_session()
    _prompt(observer, 2)
    for names in (("a", "b"), ("a",), ("a",), ("a", "b")):
        observer.received(_plan(*names))
    (message,) = _findings(observer)["TURN-004"]
    assert "'b' was left out of an earlier plan update" in message


def test_a_new_turn_may_make_a_new_plan_with_an_old_entry() -> None:
    """[test] in turn 1, [docs] in turn 2, [test] in turn 3: each turn's plan is a new plan,
    so an entry of an older turn's plan coming back is no TURN-004 finding (live or in a
    session/load replay of those turns)."""
    observer = observer_with_session({}, agentCapabilities={"loadSession": True})
    for rid, names in ((2, ("test",)), (3, ("docs",)), (4, ("test", "lint"))):
        _prompt(observer, rid)
        observer.received(_plan(*names))
        _end(observer, rid)
    observer.sent(
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "session/load",
            "params": {"sessionId": "s", "cwd": "/w", "mcpServers": []},
        }
    )
    for names in (("test",), ("docs",), ("test", "lint")):
        user = {"type": "text", "text": "hi"}
        observer.received(update({"sessionUpdate": "user_message_chunk", "content": user}))
        observer.received(_plan(*names))
    observer.received(json_line({"jsonrpc": "2.0", "id": 5, "result": {}}))
    assert "TURN-004" not in _findings(observer)
    assert observer.verdicts.exercised["TURN-004"] == 6


def test_usage_counts_and_cost_are_judged() -> None:
    """used and size must be non-negative integers; a cost needs amount and currency."""
    observer = observer_with_session()
    observer.received(update({"sessionUpdate": "usage_update", "used": 1, "size": 10}))
    observer.received(update({"sessionUpdate": "usage_update", "used": -1, "size": 10}))
    observer.received(
        update({"sessionUpdate": "usage_update", "used": 1, "size": 10, "cost": {"amount": 1}})
    )
    found = _findings(observer)["TURN-006"]
    assert len(found) == 2
    assert "used" in found[0] and "cost" in found[1]


def test_a_result_without_stop_reason_is_turn_001() -> None:
    """A session/prompt answered {} breaks TURN-001 (not only the schema)."""
    observer = observer_with_session()
    _prompt(observer, 2)
    observer.received(json_line({"jsonrpc": "2.0", "id": 2, "result": {}}))
    assert "without a stopReason" in _findings(observer)["TURN-001"][0]


# -- capabilities and services -----------------------------------------------------------------


def test_a_compaction_id_reused_for_a_new_compaction_is_notice_002() -> None:
    """A compaction that ended, started again under its id (in_progress), breaks NOTICE-002."""
    observer = observer_with_session({"session": {"compaction": {}}})
    for status in ("in_progress", "completed", "in_progress"):
        observer.received(
            update({"sessionUpdate": "compaction_update", "compactionId": "c1", "status": status})
        )
    (message,) = _findings(observer)["NOTICE-002"]
    assert "again (in_progress) after it ended completed" in message


# -- extensibility -------------------------------------------------------------------------------


def test_an_auth_method_of_a_variant_the_schema_lacks_is_not_a_custom_field() -> None:
    """
    An authMethods entry with type 'env_var' (a draft variant) is not judged by EXT-001 (its
    type and vars are that variant's, not custom fields of the agent method): a note says so.
    A real custom key on a known variant still is.
    """
    observer = Observer()
    observer.sent({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}})
    methods: list[dict[str, Any]] = [
        {"id": "login", "name": "Log in"},
        {"id": "key", "name": "API key", "type": "env_var", "vars": [{"name": "KEY"}]},
    ]
    result = {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": methods}
    observer.received(json_line({"jsonrpc": "2.0", "id": 0, "result": result}))
    assert "EXT-001" not in _findings(observer)
    notes = b"".join(
        line for _, direction, line in observer.transcript.records if direction == "!!"
    )
    assert b"type='env_var'" in notes and b"neither bundled schema" in notes
    observer.sent({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
    methods[0]["region"] = "eu"
    observer.received(json_line({"jsonrpc": "2.0", "id": 1, "result": result}))
    assert "authMethods[0].region" in _findings(observer)["EXT-001"][0]


# -- the model's tool calls ------------------------------------------------------------------


def test_a_tool_call_the_model_asked_for_and_the_agent_did_not_report_is_tool_004() -> None:
    """
    With the conformance model, a turn in which the agent ran tool calls the model asked for
    (their results came back under the directive's token) must report at least one
    tool_call; without a directive, or when it ran none, TOOL-004 is not judged.
    """
    from typing import cast

    from acpkit.conformance.driver import AgentDriver
    from acpkit.conformance.harness import Agent, TurnOutcome, judge_reported_tools
    from acpkit.conformance.model import directive

    asked = {"p1": 2, "p2": 0}
    observer = Observer()
    agent = Agent(
        cast(AgentDriver, None), observer, {}, "/tmp", model_tool_calls=lambda t: asked.get(t, 0)
    )

    def prompt(token: str) -> list[dict[str, Any]]:
        return [{"type": "text", "text": "Run it.\n\n" + directive("shell", "/w", token)}]

    judge_reported_tools(agent, prompt("p1"), TurnOutcome(None, kinds=["agent_message_chunk"]))
    (message,) = _findings(observer)["TOOL-004"]
    assert "ran 2 tool call(s)" in message
    judge_reported_tools(agent, prompt("p1"), TurnOutcome(None, kinds=["tool_call"]))
    judge_reported_tools(agent, prompt("p2"), TurnOutcome(None, kinds=[]))
    judge_reported_tools(agent, [{"type": "text", "text": "hi"}], TurnOutcome(None))
    assert observer.verdicts.exercised["TOOL-004"] == 2
    assert len(_findings(observer)["TOOL-004"]) == 1


def test_tool_004_counts_the_calls_the_agent_ran_not_those_a_side_task_ignored() -> None:
    """
    TOOL-004 counts a tool call the model asked for only once its result came back to the
    model (the agent ran it): a side task of the agent (a title, a summary) that carries
    the same conversation gets a tool call in answer and ignores it, which is not a call to
    report. The model's records name the results each request carried.
    """
    from acpkit.conformance.cli import _tool_calls_of
    from acpkit.conformance.model import CALL_ID_PREFIX, record_of
    from acpkit.testing.modelapi import Answer, Message, ModelRequest

    def request(*messages: Message) -> ModelRequest:
        return ModelRequest(api="openai-chat", model="m", messages=messages, tools=())

    ran = f"{CALL_ID_PREFIX}tok_1"
    records = [
        # the side task and the turn's first request are both answered a tool call
        record_of(request(Message("user", "go")), Answer(info={"tool": "sh", "token": "tok"})),
        record_of(request(Message("user", "go")), Answer(info={"tool": "sh", "token": "tok"})),
        # the turn's next request carries the result of the one the agent ran
        record_of(
            request(Message("user", "go"), Message("tool", "ok", tool_call_id=ran)),
            Answer(info={"token": "tok"}),
        ),
    ]
    assert records[2]["results"] == [ran]

    class Server:
        def requests(self) -> list[dict[str, Any]]:
            return records

        def env(self) -> dict[str, str]:
            return {}

        def placeholders(self) -> dict[str, str]:
            return {}

    count = _tool_calls_of(Server())
    assert count("tok") == 1
    assert count("other") == 0
    records.pop()
    assert count("tok") == 0


def _chunk(kind: str, message_id: str | None) -> bytes:
    body: dict[str, Any] = {"sessionUpdate": kind, "content": {"type": "text", "text": "x"}}
    if message_id is not None:
        body["messageId"] = message_id
    return update(body)


def test_a_chunk_without_message_id_does_not_split_a_message() -> None:
    """Agent chunks with messageId a, then none, then a again: the chunk without an id is
    neither another id nor another kind, so a's return is no TURN-005 finding; a thought
    chunk in between (another kind) still makes it one."""
    observer = observer_with_session()
    _prompt(observer, 2)
    for kind, message_id in (
        ("agent_message_chunk", "a"),
        ("agent_message_chunk", None),
        ("agent_message_chunk", "a"),
    ):
        observer.received(_chunk(kind, message_id))
    assert "TURN-005" not in _findings(observer)
    observer.received(_chunk("agent_thought_chunk", None))
    observer.received(_chunk("agent_message_chunk", "a"))
    (message,) = _findings(observer)["TURN-005"]
    assert "'a' reappears after another message started" in message
