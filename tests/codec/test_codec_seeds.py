"""Hand-written messages from the seed documents (bob's ACP surface, the editor's client):
each decodes (lenient and strict) and re-encodes equal, and the builders produce them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from acpkit import builders as b
from acpkit import schema, unstable
from acpkit.codec import decode, decode_json, encode, encode_json

SID = "20260916-101530-4f2a9c1e"

FULL_AGENT_CAPABILITIES = {
    "loadSession": True,
    "promptCapabilities": {"image": False, "audio": False, "embeddedContext": False},
    "mcpCapabilities": {"http": False, "sse": False},
    "sessionCapabilities": {},
    "auth": {},
}

FOUR_OPTIONS = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "allow_always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
    {"optionId": "never", "name": "Never", "kind": "reject_always"},
]

ELICITATION_SCHEMA = {
    "type": "object",
    "properties": {
        "q1": {"type": "string", "title": "Which database?", "enum": ["sqlite", "postgres"]},
        "q2": {
            "type": "array",
            "title": "Which targets?",
            "items": {"type": "string", "enum": ["linux", "macos", "windows"]},
        },
        "q3": {"type": "string", "title": "Project name?"},
        "q4": {"type": "boolean", "title": "Run the tests?", "default": True},
    },
    "required": ["q1", "q2", "q3", "q4"],
}


def _update(update: dict[str, Any]) -> dict[str, Any]:
    return {"sessionId": SID, "update": update}


# (case id, method, which part, wire payload, module)
CASES: list[tuple[str, str, str, dict[str, Any], Any]] = [
    (
        "initialize request with elicitation form",
        "initialize",
        "params",
        {
            "protocolVersion": 1,
            "clientCapabilities": {
                "fs": {"readTextFile": True, "writeTextFile": True},
                "terminal": True,
                "auth": {"terminal": False},
                "elicitation": {"form": {}},
            },
            "clientInfo": {"name": "acpkit-client", "version": "0.1.0"},
        },
        schema,
    ),
    (
        "initialize response of bob",
        "initialize",
        "result",
        {
            "protocolVersion": 1,
            "agentCapabilities": FULL_AGENT_CAPABILITIES,
            "authMethods": [],
            "agentInfo": {"name": "bob", "title": "Bob (bash-first agent)", "version": "v0.1.7"},
        },
        schema,
    ),
    (
        "session/new with a stdio MCP server",
        "session/new",
        "params",
        {
            "cwd": "/home/me/project",
            "mcpServers": [
                {
                    "name": "fs",
                    "command": "/usr/bin/mcp-fs",
                    "args": ["--root", "/home/me"],
                    "env": [{"name": "LOG", "value": "1"}],
                }
            ],
        },
        schema,
    ),
    ("session/new response", "session/new", "result", {"sessionId": SID}, schema),
    ("session/load response", "session/load", "result", {}, schema),
    (
        "session/prompt with text, resource_link and resource",
        "session/prompt",
        "params",
        {
            "sessionId": SID,
            "prompt": [
                {"type": "text", "text": "Why does @src/app.py fail?"},
                {
                    "type": "resource_link",
                    "uri": "file:///home/me/project/src/app.py",
                    "name": "app.py",
                },
                {
                    "type": "resource",
                    "resource": {"uri": "file:///home/me/project/README.md", "text": "# Project\n"},
                },
            ],
        },
        schema,
    ),
    ("session/cancel", "session/cancel", "params", {"sessionId": SID}, schema),
    (
        "PromptResponse end_turn with usage",
        "session/prompt",
        "result",
        {
            "stopReason": "end_turn",
            "usage": {
                "inputTokens": 1200,
                "outputTokens": 340,
                "totalTokens": 1540,
                "thoughtTokens": 80,
                "cachedReadTokens": 1024,
            },
        },
        unstable,
    ),
    (
        "PromptResponse cancelled with usage",
        "session/prompt",
        "result",
        {
            "stopReason": "cancelled",
            "usage": {"inputTokens": 10, "outputTokens": 0, "totalTokens": 10},
        },
        unstable,
    ),
    (
        "PromptResponse end_turn without usage",
        "session/prompt",
        "result",
        {"stopReason": "end_turn"},
        schema,
    ),
    (
        "available_commands_update with skills",
        "session/update",
        "params",
        _update(
            {
                "sessionUpdate": "available_commands_update",
                "availableCommands": [
                    {
                        "name": "compact",
                        "description": "Compress the history now, keeping the last turns",
                    },
                    {"name": "new", "description": "Clear the history and start a new session"},
                    {
                        "name": "greetings",
                        "description": "Greet somebody with a festive message.",
                        "input": {"hint": "parameters, if this skill needs any"},
                    },
                ],
            }
        ),
        schema,
    ),
    (
        "agent_message_chunk with preserved spaces",
        "session/update",
        "params",
        _update(
            {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": "  Hello,\n"},
            }
        ),
        schema,
    ),
    (
        "user_message_chunk (session/load replay)",
        "session/update",
        "params",
        _update({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "hi"}}),
        schema,
    ),
    (
        "tool_call pending with locations",
        "session/update",
        "params",
        _update(
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "call_01",
                "title": "read_file: /home/me/project/src/app.py",
                "kind": "read",
                "status": "pending",
                "locations": [{"path": "/home/me/project/src/app.py"}],
                "rawInput": {"path": "src/app.py"},
            }
        ),
        schema,
    ),
    (
        "tool_call_update in_progress",
        "session/update",
        "params",
        _update(
            {"sessionUpdate": "tool_call_update", "toolCallId": "call_01", "status": "in_progress"}
        ),
        schema,
    ),
    (
        "tool_call_update completed with a diff",
        "session/update",
        "params",
        _update(
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "call_02",
                "status": "completed",
                "content": [
                    {
                        "type": "diff",
                        "path": "/home/me/project/src/app.py",
                        "oldText": "import sys\n",
                        "newText": "import os\nimport sys\n",
                    }
                ],
                "rawOutput": {"output": "edited src/app.py"},
            }
        ),
        schema,
    ),
    (
        "tool_call_update completed, diff of a new file (oldText null)",
        "session/update",
        "params",
        _update(
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "call_03",
                "status": "completed",
                "content": [
                    {"type": "diff", "path": "/tmp/new.txt", "oldText": None, "newText": "x\n"}
                ],
                "rawOutput": {"output": "wrote /tmp/new.txt"},
            }
        ),
        schema,
    ),
    (
        "tool_call completed (replay) with text output",
        "session/update",
        "params",
        _update(
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "call_04",
                "title": "bash: ls",
                "kind": "execute",
                "status": "completed",
                "content": [{"type": "content", "content": {"type": "text", "text": "app.py\n"}}],
                "rawInput": {"command": "ls"},
                "rawOutput": {"output": "app.py\n"},
            }
        ),
        schema,
    ),
    (
        "tool_call_update failed, denied by a hook",
        "session/update",
        "params",
        _update(
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "call_05",
                "status": "failed",
                "title": "bash: rm -rf / — denied by a hook",
                "content": [
                    {
                        "type": "content",
                        "content": {"type": "text", "text": "[denied by a hook: no]"},
                    }
                ],
            }
        ),
        schema,
    ),
    (
        "usage_update without cost",
        "session/update",
        "params",
        _update({"sessionUpdate": "usage_update", "used": 5120, "size": 32768}),
        schema,
    ),
    (
        "plan update",
        "session/update",
        "params",
        _update(
            {
                "sessionUpdate": "plan",
                "entries": [
                    {"content": "Read the failing test", "priority": "high", "status": "completed"},
                    {"content": "Fix the import", "priority": "medium", "status": "in_progress"},
                ],
            }
        ),
        schema,
    ),
    (
        "permission request with the four options",
        "session/request_permission",
        "params",
        {
            "sessionId": SID,
            "toolCall": {
                "toolCallId": "call_06",
                "title": "bash: make test",
                "kind": "execute",
                "status": "pending",
                "rawInput": {"command": "make test"},
            },
            "options": FOUR_OPTIONS,
        },
        schema,
    ),
    (
        "permission answered: selected",
        "session/request_permission",
        "result",
        {"outcome": {"outcome": "selected", "optionId": "allow_always"}},
        schema,
    ),
    (
        "permission answered: cancelled",
        "session/request_permission",
        "result",
        {"outcome": {"outcome": "cancelled"}},
        schema,
    ),
    (
        "elicitation/create form from ask_user",
        "elicitation/create",
        "params",
        {
            "sessionId": SID,
            "toolCallId": "call_07",
            "mode": "form",
            "message": "The agent has 4 questions for you.",
            "requestedSchema": ELICITATION_SCHEMA,
            "_meta": {"mm.elicitationScope": {"sessionId": SID, "toolCallId": "call_07"}},
        },
        schema,
    ),
    (
        "elicitation accepted",
        "elicitation/create",
        "result",
        {
            "action": "accept",
            "content": {"q1": "sqlite", "q2": ["linux", "macos"], "q3": "demo", "q4": True},
        },
        schema,
    ),
    ("elicitation declined", "elicitation/create", "result", {"action": "decline"}, schema),
    ("elicitation cancelled", "elicitation/create", "result", {"action": "cancel"}, schema),
    (
        "fs/read_text_file request",
        "fs/read_text_file",
        "params",
        {"sessionId": SID, "path": "/home/me/project/src/app.py", "line": 10, "limit": 50},
        schema,
    ),
    ("$/cancel_request", "$/cancel_request", "params", {"requestId": 7}, schema),
]


def _method(module: Any, name: str) -> Any:
    for table in (module.AGENT_METHODS, module.CLIENT_METHODS, module.PROTOCOL_METHODS):
        if name in table:
            return table[name]
    raise KeyError(name)


@pytest.mark.parametrize(
    ("method", "part", "wire", "module"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_seed_message_round_trips(
    method: str, part: str, wire: dict[str, Any], module: Any
) -> None:
    """The message decodes with its method's params/result type (lenient and strict) and
    re-encodes to the same JSON."""
    cls = getattr(_method(module, method), part)
    value = decode(cls, wire)
    assert encode(value) == wire
    assert decode(cls, wire, strict=True) == value
    assert json.loads(encode_json(value)) == wire
    assert decode_json(cls, json.dumps(wire)) == value


def test_diff_new_file_keeps_null() -> None:
    """A new-file diff keeps ``oldText: null``; a diff without the key stays without it."""
    wire = {"type": "diff", "path": "/tmp/n", "oldText": None, "newText": "x"}
    value = decode(schema.ToolCallContent, wire)
    assert value.old_text is None
    assert encode(value) == wire
    no_key = {"type": "diff", "path": "/tmp/n", "newText": "x"}
    assert encode(decode(schema.ToolCallContent, no_key)) == no_key


def test_builders_produce_seed_messages() -> None:
    """The builders produce exactly the seed messages above (session updates wrapped in
    their ``session/update`` params by ``session_notification``)."""
    by_id = {c[0]: c[3] for c in CASES}

    def note(update: Any) -> Any:
        return encode(b.session_notification(SID, update))

    assert note(b.agent_message("  Hello,\n")) == by_id["agent_message_chunk with preserved spaces"]
    assert note(b.user_message("hi")) == by_id["user_message_chunk (session/load replay)"]
    assert (
        note(
            b.available_commands(
                [
                    b.command("compact", "Compress the history now, keeping the last turns"),
                    b.command("new", "Clear the history and start a new session"),
                    b.command(
                        "greetings",
                        "Greet somebody with a festive message.",
                        hint="parameters, if this skill needs any",
                    ),
                ],
            )
        )
        == by_id["available_commands_update with skills"]
    )
    assert (
        note(
            b.tool_call_start(
                "call_01",
                "read_file: /home/me/project/src/app.py",
                kind="read",
                locations=["/home/me/project/src/app.py"],
                raw_input={"path": "src/app.py"},
            )
        )
        == by_id["tool_call pending with locations"]
    )
    assert (
        note(b.tool_call_update("call_01", status="in_progress"))
        == by_id["tool_call_update in_progress"]
    )
    assert (
        note(
            b.tool_call_update(
                "call_03",
                status="completed",
                content=[b.tool_diff("/tmp/new.txt", "x\n", old_text=None)],
                raw_output={"output": "wrote /tmp/new.txt"},
            )
        )
        == by_id["tool_call_update completed, diff of a new file (oldText null)"]
    )
    assert note(b.usage_update(5120, 32768)) == by_id["usage_update without cost"]
    assert (
        note(
            b.update_plan(
                [
                    b.plan_entry("Read the failing test", priority="high", status="completed"),
                    b.plan_entry("Fix the import", status="in_progress"),
                ],
            )
        )
        == by_id["plan update"]
    )
    options = [b.permission_option(o["optionId"], o["name"], o["kind"]) for o in FOUR_OPTIONS]
    assert [encode(o) for o in options] == FOUR_OPTIONS


def test_builders_content_blocks() -> None:
    """Content-block builders encode to the prompt blocks editors send."""
    prompt = next(c[3] for c in CASES if c[0].startswith("session/prompt"))["prompt"]
    built = [
        b.text_block("Why does @src/app.py fail?"),
        b.resource_link_block("file:///home/me/project/src/app.py", "app.py"),
        b.embedded_text_block("file:///home/me/project/README.md", "# Project\n"),
    ]
    assert [encode(x) for x in built] == prompt
    assert encode(b.image_block("AAAA", "image/png")) == {
        "type": "image",
        "data": "AAAA",
        "mimeType": "image/png",
    }
    assert encode(b.thought("hmm"))["sessionUpdate"] == "agent_thought_chunk"
    assert encode(b.tool_terminal("term_1")) == {"type": "terminal", "terminalId": "term_1"}
    assert encode(b.usage_update(1, 2, cost=0.5))["cost"] == {
        "amount": 0.5,
        "currency": "USD",
    }
