"""The tool-aware conformance model (acpkit.conformance.model): directives, tools, scenarios."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acpkit.conformance.model import (
    CONTENT,
    EDITED_CONTENT,
    MAX_STEPS,
    SCENARIOS,
    SLOW_CHUNKS,
    ConformanceModel,
    Directive,
    build_arguments,
    classify_tool,
    classify_tools,
    directive,
    parse_directive,
    serve_conformance_model,
)
from acpkit.testing.modelapi import Answer, Message, ModelRequest, ToolCall, ToolSpec
from tests.helpers import examples


def obj(properties: Mapping[str, Any], required: Sequence[str]) -> dict[str, Any]:
    """An object schema."""
    return {"type": "object", "properties": dict(properties), "required": list(required)}


S = {"type": "string"}
N = {"type": "number"}
I = {"type": "integer"}  # noqa: E741
B = {"type": "boolean"}

CLAUDE_CODE = [
    ToolSpec("Task", "Launch a new agent", obj({"description": S, "prompt": S}, ["prompt"])),
    ToolSpec(
        "Bash",
        "Executes a given bash command in a persistent shell session",
        obj({"command": S, "timeout": N, "description": S, "run_in_background": B}, ["command"]),
    ),
    ToolSpec("Glob", "Fast file pattern matching", obj({"pattern": S, "path": S}, ["pattern"])),
    ToolSpec("Grep", "Search file contents", obj({"pattern": S, "path": S}, ["pattern"])),
    ToolSpec("LS", "Lists files and directories", obj({"path": S}, ["path"])),
    ToolSpec(
        "Read",
        "Reads a file from the local filesystem",
        obj({"file_path": S, "offset": N, "limit": N}, ["file_path"]),
    ),
    ToolSpec(
        "Edit",
        "Performs exact string replacements in files",
        obj(
            {"file_path": S, "old_string": S, "new_string": S, "replace_all": B},
            ["file_path", "old_string", "new_string"],
        ),
    ),
    ToolSpec(
        "MultiEdit",
        "Multiple edits to one file",
        obj(
            {
                "file_path": S,
                "edits": {
                    "type": "array",
                    "items": obj(
                        {"old_string": S, "new_string": S, "replace_all": B},
                        ["old_string", "new_string"],
                    ),
                    "minItems": 1,
                },
            },
            ["file_path", "edits"],
        ),
    ),
    ToolSpec(
        "Write",
        "Writes a file to the local filesystem",
        obj({"file_path": S, "content": S}, ["file_path", "content"]),
    ),
    ToolSpec(
        "NotebookEdit",
        "Edit a Jupyter notebook cell",
        obj({"notebook_path": S, "new_source": S}, ["notebook_path", "new_source"]),
    ),
    ToolSpec("WebFetch", "Fetch a URL", obj({"url": S, "prompt": S}, ["url", "prompt"])),
    ToolSpec(
        "AskUserQuestion",
        "Ask the user questions during execution",
        obj(
            {
                "questions": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 4,
                    "items": obj(
                        {
                            "question": S,
                            "header": {"type": "string", "maxLength": 12},
                            "options": {
                                "type": "array",
                                "minItems": 2,
                                "maxItems": 4,
                                "items": obj(
                                    {"label": S, "description": S}, ["label", "description"]
                                ),
                            },
                            "multiSelect": B,
                        },
                        ["question", "header", "options", "multiSelect"],
                    ),
                }
            },
            ["questions"],
        ),
    ),
    ToolSpec(
        "TodoWrite",
        "Update the todo list",
        obj({"todos": {"type": "array", "items": obj({"content": S}, ["content"])}}, ["todos"]),
    ),
]
GEMINI_CLI = [
    ToolSpec(
        "list_directory",
        "Lists a directory",
        obj({"path": S, "ignore": {"type": "array"}}, ["path"]),
    ),
    ToolSpec(
        "read_file",
        "Reads and returns the content of a specified file",
        obj({"absolute_path": S, "offset": N, "limit": N}, ["absolute_path"]),
    ),
    ToolSpec("search_file_content", "Search", obj({"pattern": S, "path": S}, ["pattern"])),
    ToolSpec("glob", "Find files", obj({"pattern": S, "path": S}, ["pattern"])),
    ToolSpec(
        "replace",
        "Replaces text within a file",
        obj(
            {"file_path": S, "old_string": S, "new_string": S, "expected_replacements": N},
            ["file_path", "old_string", "new_string"],
        ),
    ),
    ToolSpec(
        "write_file",
        "Writes content to a specified file",
        obj({"file_path": S, "content": S}, ["file_path", "content"]),
    ),
    ToolSpec("web_fetch", "Fetch", obj({"prompt": S}, ["prompt"])),
    ToolSpec(
        "read_many_files",
        "Reads many files",
        obj({"paths": {"type": "array", "items": S}}, ["paths"]),
    ),
    ToolSpec(
        "run_shell_command",
        "Executes a given shell command as `bash -c <command>`",
        obj({"command": S, "description": S, "directory": S}, ["command"]),
    ),
    ToolSpec("save_memory", "Saves a fact", obj({"fact": S}, ["fact"])),
]
CODEX = [
    ToolSpec(
        "shell",
        "Runs a shell command and returns its output.",
        {
            "type": "object",
            "properties": {
                "command": {"type": "array", "items": S},
                "workdir": S,
                "timeout_ms": N,
            },
            "required": ["command"],
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        "update_plan",
        "Updates the task plan",
        obj(
            {"explanation": S, "plan": {"type": "array", "items": obj({"step": S}, ["step"])}},
            ["plan"],
        ),
    ),
    ToolSpec(
        "view_image",
        "Attach a local image",
        obj({"path": S}, ["path"]),
    ),
]
PI = [
    ToolSpec(
        "read",
        "Read the contents of a file",
        obj({"path": S, "offset": N, "limit": N}, ["path"]),
    ),
    ToolSpec("bash", "Execute a bash command", obj({"command": S, "timeout": N}, ["command"])),
    ToolSpec(
        "edit",
        "Edit a file by replacing exact text",
        obj({"path": S, "oldText": S, "newText": S}, ["path", "oldText", "newText"]),
    ),
    ToolSpec(
        "write", "Write content to a file", obj({"path": S, "content": S}, ["path", "content"])
    ),
]
GPTME = [
    ToolSpec("shell", "Executes shell commands.", obj({"command": S}, ["command"])),
    ToolSpec("ipython", "Execute Python code", obj({"code": S}, ["code"])),
    ToolSpec(
        "save", "Create or overwrite a file", obj({"path": S, "content": S}, ["path", "content"])
    ),
    ToolSpec("append", "Append to a file", obj({"path": S, "content": S}, ["path", "content"])),
    ToolSpec("patch", "Apply a patch", obj({"path": S, "patch": S}, ["path", "patch"])),
]
BOB = [
    ToolSpec("bash", "Run a shell command", obj({"command": S, "timeout": N}, ["command"])),
    ToolSpec(
        "read_file",
        "Read a text file",
        obj({"path": S, "offset": I, "limit": I}, ["path"]),
    ),
    ToolSpec(
        "write_file", "Write a text file", obj({"path": S, "content": S}, ["path", "content"])
    ),
    ToolSpec(
        "edit_file",
        "Replace text in a file",
        obj({"path": S, "old_text": S, "new_text": S}, ["path", "old_text", "new_text"]),
    ),
    ToolSpec(
        "ask_user",
        "Ask the user questions",
        obj(
            {
                "questions": {
                    "type": "array",
                    "minItems": 1,
                    "items": obj(
                        {"question": S, "type": {"type": "string", "enum": ["choice", "confirm"]}},
                        ["question"],
                    ),
                }
            },
            ["questions"],
        ),
    ),
    ToolSpec(
        "ask_agent", "Ask another agent", obj({"agent": S, "question": S}, ["agent", "question"])
    ),
    ToolSpec(
        "str_replace_based_edit_tool",
        "Anthropic's multi-purpose editor",
        obj(
            {
                "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert"]},
                "path": S,
                "old_str": S,
                "new_str": S,
            },
            ["command", "path"],
        ),
    ),
]

AGENTS = {
    "claude-code": (
        CLAUDE_CODE,
        {
            "shell": "Bash",
            "write": "Write",
            "edit": "Edit",
            "read": "Read",
            "ask": "AskUserQuestion",
        },
    ),
    "gemini-cli": (
        GEMINI_CLI,
        {
            "shell": "run_shell_command",
            "write": "write_file",
            "edit": "replace",
            "read": "read_file",
        },
    ),
    "codex": (CODEX, {"shell": "shell"}),
    "pi": (PI, {"shell": "bash", "write": "write", "edit": "edit", "read": "read"}),
    "gptme": (GPTME, {"shell": "shell", "write": "save"}),
    "bob": (
        BOB,
        {
            "shell": "bash",
            "write": "write_file",
            "edit": "edit_file",
            "read": "read_file",
            "ask": "ask_user",
        },
    ),
}


def request_of(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelRequest:
    """A neutral chat request."""
    return ModelRequest(api="openai-chat", model="m", messages=tuple(messages), tools=tuple(tools))


def validate(tool: ToolSpec, arguments: Any) -> None:
    """Raise unless ``arguments`` are valid against the tool's own schema."""
    jsonschema.validate(arguments, tool.parameters)


# -- directives -----------------------------------------------------------------------------

directories = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=40
).map(lambda text: "/" + text)
tokens = st.text(st.sampled_from("abcXYZ019_-."), max_size=12)


@given(st.sampled_from(SCENARIOS), directories, tokens, st.text(max_size=30), st.text(max_size=30))
def test_directive_round_trips_inside_any_text(
    scenario: str, directory: str, token: str, before: str, after: str
) -> None:
    """A directive with any directory and token is found again inside surrounding text."""
    text = f"{before}\n{directive(scenario, directory, token)} {after}"
    found = parse_directive(text)
    if "[[acpkit-conformance" in after:
        return  # the text itself may hold a later directive
    assert found == Directive(scenario, directory, token)


def test_directive_format() -> None:
    """The directive is ``[[acpkit-conformance scenario=S dir="JSON" token=T]]``."""
    text = directive("tools", "/tmp/my dir/é", "t1")
    assert text == '[[acpkit-conformance scenario=tools dir="/tmp/my dir/\\u00e9" token=t1]]'
    assert Directive("write", "/d", "t").file == "/d/conformance-t.txt"
    assert Directive("write", "/d").file == "/d/conformance.txt"


def test_bad_directives() -> None:
    """Unknown scenarios and bad tokens are refused; malformed directives are not found."""
    with pytest.raises(ValueError):
        directive("dance", "/d")
    with pytest.raises(ValueError):
        directive("text", "/d", "a b")
    assert parse_directive('[[acpkit-conformance scenario=dance dir="/d" token=]]') is None
    assert parse_directive("[[acpkit-conformance scenario=text dir=/d token=x]]") is None
    assert parse_directive("no directive here") is None


def test_latest_user_directive_wins() -> None:
    """The model follows the directive of the latest user message holding one."""
    messages = [
        Message("user", directive("shell", "/a", "1")),
        Message("assistant", "ok"),
        Message("user", "<wrapped>" + directive("write", "/b", "2") + "</wrapped>"),
        Message("user", "no directive in this one"),
    ]
    answer = ConformanceModel().answer(request_of(messages, PI), 0)
    assert answer.info["scenario"] == "write"
    (call,) = answer.tool_calls
    assert call.name == "write"
    assert call.arguments() == {"path": "/b/conformance-2.txt", "content": CONTENT}


# -- classification ---------------------------------------------------------------------------


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_classifier_on_real_tool_lists(agent: str) -> None:
    """The roles of popular agents' tools are recognised; other tools get none."""
    tools, expected = AGENTS[agent]
    roles = classify_tools(tools)
    assert {role: tool.name for role, tool in roles.items()} == expected


def test_arguments_follow_each_agents_spelling() -> None:
    """Arguments use the tool's own parameter names, with absolute paths and known values."""
    values = {"path": "/w/f.txt", "content": "c", "old": "o", "new": "n", "command": "echo hi"}
    cases = [
        (CLAUDE_CODE[6], "edit", {"file_path": "/w/f.txt", "old_string": "o", "new_string": "n"}),
        (GEMINI_CLI[1], "read", {"absolute_path": "/w/f.txt"}),
        (CODEX[0], "shell", {"command": ["bash", "-lc", "echo hi"]}),
        (PI[2], "edit", {"path": "/w/f.txt", "oldText": "o", "newText": "n"}),
        (BOB[3], "edit", {"path": "/w/f.txt", "old_text": "o", "new_text": "n"}),
        (
            CLAUDE_CODE[7],
            "edit",
            {"file_path": "/w/f.txt", "edits": [{"old_string": "o", "new_string": "n"}]},
        ),
    ]
    for tool, role, expected in cases:
        assert classify_tool(tool) == role
        assert build_arguments(tool, role, values) == expected


def test_other_required_parameters_are_filled() -> None:
    """Required parameters the model does not know get schema-valid values."""
    tool = ToolSpec(
        "write_file",
        "",
        obj(
            {
                "path": S,
                "content": S,
                "mode": {"type": "string", "enum": ["w", "a"]},
                "overwrite": B,
                "retries": {"type": "integer", "minimum": 2},
                "label": {"type": "string", "minLength": 20},
                "tags": {"type": "array", "items": S, "minItems": 1},
            },
            ["path", "content", "mode", "overwrite", "retries", "label", "tags"],
        ),
    )
    arguments = build_arguments(tool, "write", {"path": "/p", "content": "c"})
    assert arguments is not None
    validate(tool, arguments)
    assert (arguments["mode"], arguments["overwrite"], arguments["retries"]) == ("w", False, 2)


def test_unbuildable_tools_are_unclassified() -> None:
    """A tool whose schema no built arguments satisfy gets no role."""
    tool = ToolSpec("bash", "", obj({"command": {"type": "string", "pattern": "^ls"}}, ["command"]))
    assert classify_tool(tool) is None


names = st.one_of(
    st.sampled_from(["bash", "Write", "edit_file", "read", "view", "shell", "replace", "x", "ls"]),
    st.text(min_size=1, max_size=12),
)
param_names = st.one_of(
    st.sampled_from(
        ["path", "file_path", "content", "old_string", "new_string", "command", "cmd", "edits"]
    ),
    st.text(min_size=1, max_size=8),
)
leaf_schemas = st.one_of(
    st.just(S),
    st.just(N),
    st.just(B),
    st.just(I),
    st.just({"type": "array", "items": S}),
    st.just({"type": "string", "enum": ["a", "b"]}),
    st.just({"type": "string", "minLength": 3, "maxLength": 5}),
    st.just({"type": "integer", "minimum": 3, "maximum": 9}),
    st.just({"type": "string", "pattern": "^z"}),
    st.just({"type": ["string", "null"]}),
    st.just({"anyOf": [S, N]}),
    st.just({}),
    st.just({"type": "object", "properties": {"a": S}, "required": ["a"]}),
    st.just({"type": "array", "items": obj({"old_string": S, "new_string": S}, ["old_string"])}),
)


@st.composite
def tool_specs(draw: Callable[..., Any]) -> ToolSpec:
    """An arbitrary tool: a name, and an object schema over arbitrary parameters."""
    properties = draw(st.dictionaries(param_names, leaf_schemas, max_size=5))
    required = draw(st.lists(st.sampled_from(sorted(properties) or ["x"]), unique=True))
    schema: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    if draw(st.booleans()):
        schema["additionalProperties"] = False
    if draw(st.integers(0, 9)) == 0:
        schema = draw(st.sampled_from([{}, {"type": "object"}, {"properties": 3}]))
    return ToolSpec(draw(names), draw(st.text(max_size=10)), schema)


@settings(max_examples=examples(5), suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(tool_specs(), max_size=6), st.sampled_from(SCENARIOS), st.integers(0, 5))
def test_any_tool_list_is_safe(tools: list[ToolSpec], scenario: str, results: int) -> None:
    """With any tools, the model never crashes, calls only classified tools, with valid args."""
    history: list[Message] = [Message("user", directive(scenario, "/w d", "t"))]
    for n in range(results):
        history.append(Message("assistant", tool_calls=(ToolCall(f"c{n}", "x", {}),)))
        history.append(Message("tool", "ok", tool_call_id=f"c{n}"))
    roles = classify_tools(tools)
    for role, tool in roles.items():
        assert classify_tool(tool) == role
    answer = ConformanceModel().answer(request_of(history, tools), 0)
    assert answer.usage is not None
    by_name = {tool.name: tool for tool in roles.values()}
    for call in answer.tool_calls:
        assert call.name in by_name, "an unclassified tool was called"
        validate(by_name[call.name], json.loads(call.arguments_text))


# -- scenarios ------------------------------------------------------------------------------


def play(
    scenario: str,
    tools: Sequence[ToolSpec],
    result: Callable[[str, dict[str, Any]], tuple[str, bool]] = lambda name, args: ("ok", False),
) -> list[Answer]:
    """Run a scenario like an agent would: call tools, send results back, until it stops."""
    history = [Message("user", "Please: " + directive(scenario, "/work dir", "t1"))]
    answers = []
    model = ConformanceModel()
    for number in range(20):
        answer = model.answer(request_of(history, tools), number)
        answers.append(answer)
        # a re-sent request (retry) gets the same answer
        assert model.answer(request_of(history, tools), number).tool_calls == answer.tool_calls
        if not answer.tool_calls:
            return answers
        calls = tuple(ToolCall(c.id, c.name, c.arguments()) for c in answer.tool_calls)
        history.append(Message("assistant", answer.text, tool_calls=calls))
        for call in calls:
            text, error = result(call.name, call.arguments)
            history.append(Message("tool", text, tool_call_id=call.id, is_error=error))
    raise AssertionError("the scenario never ended")


def actions(answers: Sequence[Answer]) -> list[str]:
    """The action of each answer."""
    return [answer.info["action"] for answer in answers]


@pytest.mark.parametrize("agent", ["claude-code", "gemini-cli", "pi", "bob"])
def test_tools_scenario_uses_each_role_in_turn(agent: str) -> None:
    """``tools`` writes, edits, reads, runs the shell (and asks, with an ask tool), then ends."""
    tools, expected = AGENTS[agent]
    answers = play("tools", tools)
    roles = [r for r in ("write", "edit", "read", "shell", "ask") if r in expected]
    assert actions(answers) == [*roles, "final"]
    called = [answer.tool_calls[0].name for answer in answers[:-1]]
    assert called == [expected[r] for r in roles]
    assert answers[-1].effective_finish_reason == "stop"
    assert [answer.info["step"] for answer in answers] == list(range(len(roles) + 1))


def test_ask_scenario() -> None:
    """``ask`` asks the user a yes/no question with the agent's ask tool, valid to its schema."""
    first = play("ask", BOB)[0]
    assert first.tool_calls[0].arguments() == {
        "questions": [{"question": "Proceed with the acpkit conformance test?", "type": "confirm"}]
    }
    first = play("ask", CLAUDE_CODE)[0]
    ask_tool = next(tool for tool in CLAUDE_CODE if tool.name == "AskUserQuestion")
    validate(ask_tool, first.tool_calls[0].arguments())
    assert actions(play("ask", PI)) == ["final"]


def test_missing_roles_are_skipped_or_replaced() -> None:
    """Without an edit tool the edit step writes new content; without read it is skipped."""
    answers = play("tools", GPTME)
    assert actions(answers) == ["write", "edit", "shell", "final"]
    assert answers[1].tool_calls[0].name == "save"
    assert answers[1].tool_calls[0].arguments()["content"] == EDITED_CONTENT
    assert actions(play("read", CODEX)) == ["final"]


def test_failed_tool_results_move_on() -> None:
    """A tool result that reports an error (permission denied) leads to the next step."""
    answers = play("edit", PI, lambda name, args: ("permission denied", True))
    assert actions(answers) == ["write", "edit", "final"]


def test_text_and_no_directive() -> None:
    """``text`` (and a prompt without directive) streams the fixed answer in chunks."""
    for prompt in ("just chat", directive("text", "/d")):
        answer = ConformanceModel().answer(request_of([Message("user", prompt)], PI), 0)
        assert answer.text == "Hello from the conformance model."
        assert len(answer.chunks) > 2
        assert answer.usage is not None and answer.usage.input > 0


def test_slow_scenario() -> None:
    """``slow`` runs ``sleep 30``; without a shell tool it streams text one chunk per 0.5 s."""
    (first, _) = play("slow", PI)
    assert first.tool_calls[0].arguments() == {"command": "sleep 30"}
    request = request_of([Message("user", directive("slow", "/d"))], GPTME[1:])
    answer = ConformanceModel().answer(request, 0)
    assert (answer.delay, len(answer.chunks), answer.tool_calls) == (0.5, SLOW_CHUNKS, ())


def test_steps_are_capped() -> None:
    """An agent that keeps the calls but never sends results still reaches the end."""
    history = [Message("user", directive("tools", "/d"))]
    model = ConformanceModel()
    for n in range(MAX_STEPS + 2):
        answer = model.answer(request_of(history, PI), n)
        if not answer.tool_calls:
            break
        history.append(Message("assistant", tool_calls=(ToolCall(f"c{n}", "bash", {}),)))
        history.append(Message("user", "the tool was not run"))
    assert answer.info["action"] == "final"


# -- running it ------------------------------------------------------------------------------


@pytest.mark.process
def test_serve_and_drive_a_real_turn_with_the_anthropic_sdk(tmp_path: Path) -> None:
    """The subprocess serves every API; an SDK loop executing the calls edits the real file."""
    anthropic = pytest.importorskip("anthropic")
    directory = tmp_path / "a dir é"
    directory.mkdir()
    tools = [
        {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
        for t in CLAUDE_CODE
    ]
    with serve_conformance_model() as server:
        assert server.anthropic_url + "/v1" == server.openai_url
        env = server.env()
        for name in ("OPENAI_BASE_URL", "OPENAI_API_BASE", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL"):
            assert env[name]
        for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "GEMINI_API_KEY"):
            assert env[name]
        for name in ("GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GEMINI_BASE_URL"):
            assert env[name]
        assert set(server.placeholders()) == {
            "model_url",
            "openai_url",
            "anthropic_url",
            "gemini_url",
            "model",
        }
        client = anthropic.Anthropic(base_url=server.anthropic_url, api_key="k", max_retries=0)
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": "Task: " + directive("tools", str(directory), "t1")}
        ]
        shell_output = ""
        for _ in range(10):
            with client.messages.stream(
                model="claude-x", max_tokens=100, messages=messages, tools=tools
            ) as stream:
                message = stream.get_final_message()
            messages.append(
                {"role": "assistant", "content": [b.model_dump() for b in message.content]}
            )
            uses = [block for block in message.content if block.type == "tool_use"]
            if not uses:
                break
            results = []
            for use in uses:
                args = dict(use.input)
                path = Path(args.get("file_path", "/nonexistent"))
                if use.name == "Write":
                    path.write_text(args["content"], encoding="utf-8")
                    output = "written"
                elif use.name == "Edit":
                    text = path.read_text(encoding="utf-8")
                    path.write_text(text.replace(args["old_string"], args["new_string"]), "utf-8")
                    output = "edited"
                elif use.name == "Read":
                    output = path.read_text(encoding="utf-8")
                elif use.name == "AskUserQuestion":
                    output = "The user answered: yes"
                else:
                    output = subprocess.run(
                        args["command"], shell=True, capture_output=True, text=True, check=False
                    ).stdout
                    shell_output = output
                results.append({"type": "tool_result", "tool_use_id": use.id, "content": output})
            messages.append({"role": "user", "content": results})
        assert message.stop_reason == "end_turn"
        assert (directory / "conformance-t1.txt").read_text(encoding="utf-8") == EDITED_CONTENT
        assert shell_output == "acpkit-conformance\n"
        process = server.process
        assert process is not None
        records = server.wait_for_requests(6)  # the reader thread may lag behind
    assert process.poll() is not None, "the subprocess is still running"
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4, 5]
    assert [r["action"] for r in records] == ["write", "edit", "read", "shell", "ask", "final"]
    assert {r["api"] for r in records} == {"anthropic"}
    assert records[0]["roles"] == {
        "ask": "AskUserQuestion",
        "edit": "Edit",
        "read": "Read",
        "shell": "Bash",
        "write": "Write",
    }
    assert records[0]["stream"] is True and records[0]["scenario"] == "tools"
    assert "NotebookEdit" in records[0]["tools"]


@pytest.mark.process
def test_other_apis_drive_the_shell_scenario(tmp_path: Path) -> None:
    """Over chat completions, the Responses API and Gemini the model calls each agent's shell."""
    openai = pytest.importorskip("openai")
    genai = pytest.importorskip("google.genai")
    from google.genai import types

    prompt = "do it " + directive("shell", str(tmp_path), "s")
    schema = dict(GEMINI_CLI[-2].parameters)
    with serve_conformance_model() as server:
        client = openai.OpenAI(base_url=server.openai_url, api_key="k", max_retries=0)
        chat_tools = [{"type": "function", "function": {"name": "exec", "parameters": schema}}]
        messages: list[Any] = [{"role": "user", "content": prompt}]
        first = client.chat.completions.create(model="gpt-x", messages=messages, tools=chat_tools)
        (call,) = first.choices[0].message.tool_calls
        assert (call.function.name, json.loads(call.function.arguments)["command"]) == (
            "exec",
            "echo acpkit-conformance",
        )
        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "acpkit-conformance"},
        ]
        final = client.chat.completions.create(model="gpt-x", messages=messages, tools=chat_tools)
        assert final.choices[0].finish_reason == "stop"

        tools = [{"type": "function", "name": "shell_command", "parameters": schema}]
        response = client.responses.create(model="gpt-x", input=prompt, tools=tools)
        (item,) = [i for i in response.output if i.type == "function_call"]
        assert item.name == "shell_command"
        follow = [
            {"role": "user", "content": prompt},
            {
                "type": "function_call",
                "call_id": item.call_id,
                "name": item.name,
                "arguments": "{}",
            },
            {"type": "function_call_output", "call_id": item.call_id, "output": "ok"},
        ]
        done = client.responses.create(model="gpt-x", input=follow, tools=tools)
        assert "done" in done.output_text

        gemini = genai.Client(
            api_key="k", http_options=types.HttpOptions(base_url=server.gemini_url)
        )
        declaration = types.FunctionDeclaration(
            name="run_shell_command", description="", parameters_json_schema=schema
        )
        config = types.GenerateContentConfig(
            tools=[types.Tool(function_declarations=[declaration])]
        )
        chunks = list(
            gemini.models.generate_content_stream(model="gemini-x", contents=prompt, config=config)
        )
        calls = [c for chunk in chunks for c in chunk.function_calls or []]
        assert [c.name for c in calls] == ["run_shell_command"]
        records = server.wait_for_requests(5)
    assert [(r["api"], r["action"]) for r in records] == [
        ("openai-chat", "shell"),
        ("openai-chat", "final"),
        ("openai-responses", "shell"),
        ("openai-responses", "final"),
        ("gemini", "shell"),
    ]
