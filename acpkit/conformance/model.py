"""
The conformance model: a tool-aware scripted model (a brain of
:mod:`acpkit.testing.modelserver`) that drives third-party agents through real turns.

It reads the tools the agent offers in each model request, decides which one is the
agent's shell, write, edit, read and ask-the-user tool (`classify_tools`) from its name,
description and JSON-schema parameters, and answers with calls to them, built from each
tool's own schema (`build_arguments`). It never needs to know the agent's tool names in
advance.

What to do comes from a *directive* the tester puts in the prompt it sends the agent::

    [[acpkit-conformance scenario=tools dir="/abs/path" token=t1]]

``scenario`` is one of `SCENARIOS`; ``dir`` is a JSON string (so spaces, quotes and
non-ASCII survive; `directive` writes it ASCII-only); ``token`` (letters, digits, ``_``,
``-``, ``.``; may be empty) names the file the scenario writes:
``<dir>/conformance-<token>.txt`` (``<dir>/conformance.txt`` without a token). The
directive is looked for anywhere in the text of the user messages (agents wrap prompts in
their own text), latest first.

The model is stateless: the step of the scenario is the number of tool results (or of its
own tool calls, if more) that follow the directive's message in the conversation, so
retries and re-sent history work, and a failed tool result simply moves on. After the
steps it answers a short final text. Without a directive it answers the ``text`` scenario.

`serve_conformance_model` runs it in a subprocess (``python -m acpkit.conformance.model``)
for the tester: the first stdout line is a JSON object with the URLs, each later line one
JSON object per model request.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import attrs

from acpkit.jsonrpc import jsonbytes
from acpkit.testing.modelapi import (
    Answer,
    AnswerToolCall,
    Message,
    ModelRequest,
    ToolSpec,
    estimated_usage,
    split_text,
)

__all__ = [
    "CALL_ID_PREFIX",
    "CONTENT",
    "EDITED_CONTENT",
    "MODEL",
    "ROLES",
    "SCENARIOS",
    "ConformanceModel",
    "ConformanceModelServer",
    "Directive",
    "Step",
    "build_arguments",
    "classify_tool",
    "classify_tools",
    "directive",
    "find_directive",
    "main",
    "parse_directive",
    "plan",
    "record_of",
    "serve_conformance_model",
]

#: The ids of the tool calls the model asks for: this, the directive's token, ``_`` and
#: the step (``call_acpkit_<token>_<n>``).
CALL_ID_PREFIX = "call_acpkit_"
#: The model id the server reports (any model name is accepted in requests).
MODEL = "acpkit-conformance"
SCENARIOS = ("text", "write", "edit", "read", "shell", "tools", "slow", "ask")
ROLES = ("shell", "write", "edit", "read", "ask")

#: What the ``write`` step writes; the ``edit`` step changes its second line.
CONTENT = "acpkit conformance line 1\nacpkit conformance line 2\nacpkit conformance line 3\n"
EDIT_OLD = "acpkit conformance line 2"
EDIT_NEW = "acpkit conformance line 2 (edited)"
EDITED_CONTENT = CONTENT.replace(EDIT_OLD, EDIT_NEW)
SHELL_COMMAND = "echo acpkit-conformance"
#: What the ``ask`` step asks the user (a yes/no question where the tool has the kind).
QUESTION = "Proceed with the acpkit conformance test?"
SLOW_COMMAND = "sleep 30"
TEXT_ANSWER = "Hello from the conformance model."
#: At most this many tool-calling steps follow one directive, whatever the conversation.
MAX_STEPS = 8
#: The slow text (no shell tool): one chunk per `SLOW_INTERVAL` seconds for 30 s.
SLOW_INTERVAL = 0.5
SLOW_CHUNKS = 60

_DIRECTIVE = re.compile(
    r"\[\[acpkit-conformance\s+scenario=(?P<scenario>[a-z]+)\s+"
    r'dir=(?P<dir>"(?:[^"\\]|\\.)*")\s+token=(?P<token>[A-Za-z0-9_.-]*)\s*\]\]'
)
_TOKEN = re.compile(r"^[A-Za-z0-9_.-]*$")


@attrs.frozen
class Directive:
    """A parsed directive: the scenario, the directory to work in, the file token."""

    scenario: str
    directory: str
    token: str = ""

    @property
    def file(self) -> str:
        """The file the scenario writes: ``<dir>/conformance-<token>.txt``."""
        name = f"conformance-{self.token}.txt" if self.token else "conformance.txt"
        return os.path.join(self.directory, name)


def directive(scenario: str, directory: str, token: str = "") -> str:
    """The directive text for a scenario; put it anywhere in a prompt."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r} (known: {', '.join(SCENARIOS)})")
    if not _TOKEN.match(token):
        raise ValueError(f"token {token!r} may only hold letters, digits, '_', '-' and '.'")
    encoded = json.dumps(directory, ensure_ascii=True)
    return f"[[acpkit-conformance scenario={scenario} dir={encoded} token={token}]]"


def parse_directive(text: str) -> Directive | None:
    """The last well-formed directive with a known scenario in ``text``, or None."""
    found = None
    for match in _DIRECTIVE.finditer(text):
        if match["scenario"] not in SCENARIOS:
            continue
        try:
            directory = jsonbytes.loads(match["dir"])
        except ValueError:
            continue
        if isinstance(directory, str):
            found = Directive(match["scenario"], directory, match["token"])
    return found


def find_directive(messages: Sequence[Message]) -> tuple[Directive, int] | None:
    """The directive of the latest user message that holds one, and that message's index."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "user":
            found = parse_directive(message.text)
            if found is not None:
                return found, index
    return None


# -- tool classification ------------------------------------------------------------------

PATH_NAMES = (
    "path",
    "file_path",
    "filePath",
    "filename",
    "absolute_path",
    "target_file",
    "filepath",
    "absolutePath",
    "file",
)
CONTENT_NAMES = ("content", "contents", "text", "file_text", "fileText", "data", "body")
OLD_NAMES = ("old_string", "oldText", "old_str", "search", "old_text", "oldString", "old")
NEW_NAMES = ("new_string", "newText", "new_str", "replace", "new_text", "newString", "new")
COMMAND_NAMES = ("command", "cmd", "script")
_SHELL_WORDS = {"bash", "shell", "sh", "exec", "execute", "terminal", "run", "command", "zsh"}
_WRITE_WORDS = {"write", "create", "save", "put"}
_EDIT_WORDS = {"edit", "replace", "str", "patch", "modify", "update"}
_READ_WORDS = {"read", "view", "cat", "open", "show"}
_NOT_WRITE = {"append", "delete", "remove", "search", "grep", "find", "glob", "list", "insert"}
_NOT_READ = _NOT_WRITE | {"write", "edit", "create", "save", "ls", "dir", "directory", "tree"}
_NOT_READ |= {"many", "multiple", "url", "web", "fetch", "notebook", "image"}
_ASK_WORDS = {"ask", "question", "questions", "followup", "elicit", "elicitation"}
_NOT_ASK = {"agent", "agents", "model", "llm", "ai", "subagent", "expert", "web", "search"}
_MULTI_PURPOSE = ("command", "action", "operation", "mode", "subcommand", "op")


def _words(name: str) -> set[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return {word.lower() for word in re.split(r"[^A-Za-z0-9]+", spaced) if word}


def _properties(tool: ToolSpec) -> dict[str, Any]:
    properties = tool.parameters.get("properties")
    if not isinstance(properties, dict):
        return {}
    return {name: value for name, value in properties.items() if isinstance(value, dict)}


def _required(tool: ToolSpec) -> list[str]:
    required = tool.parameters.get("required")
    return (
        [name for name in required if isinstance(name, str)] if isinstance(required, list) else []
    )


def _types(schema: Mapping[str, Any]) -> set[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return {item for item in kind if isinstance(item, str)}
    return set()


def _is_string(schema: Mapping[str, Any]) -> bool:
    return "string" in _types(schema) and "enum" not in schema and "const" not in schema


def _is_string_array(schema: Mapping[str, Any]) -> bool:
    items = schema.get("items")
    return _types(schema) == {"array"} and isinstance(items, dict) and _is_string(items)


def _find(
    properties: Mapping[str, Any], names: Sequence[str], kind: Any = _is_string
) -> str | None:
    for name in names:
        if name in properties and kind(properties[name]):
            return name
    lowered = {name.lower(): name for name in properties}
    for name in names:
        actual = lowered.get(name.lower())
        if actual is not None and kind(properties[actual]):
            return actual
    return None


def _edits_param(properties: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """An ``edits`` array of {old, new} objects: (param, old key, new key)."""
    schema = properties.get("edits")
    if not isinstance(schema, dict) or _types(schema) != {"array"}:
        return None
    items = schema.get("items")
    if not isinstance(items, dict):
        return None
    inner = items.get("properties")
    if not isinstance(inner, dict):
        return None
    old, new = _find(inner, OLD_NAMES), _find(inner, NEW_NAMES)
    if old is None or new is None:
        return None
    return "edits", old, new


def _question_param(properties: Mapping[str, Any]) -> tuple[str, str | None] | None:
    """A ``question`` string, or a ``questions`` array of objects with a ``question`` string
    (or of strings): (param, key in each item or None)."""
    single = _find(properties, ("question", "prompt", "message"))
    if single is not None:
        return single, None
    schema = properties.get("questions")
    if not isinstance(schema, dict) or _types(schema) != {"array"}:
        return None
    items = schema.get("items")
    if not isinstance(items, dict):
        return None
    if _is_string(items):
        return "questions", None
    inner = items.get("properties")
    if isinstance(inner, dict):
        key = _find(inner, ("question", "text", "prompt"))
        if key is not None:
            return "questions", key
    return None


def _candidate_role(tool: ToolSpec) -> str | None:
    properties = _properties(tool)
    words = _words(tool.name)
    for name in _required(tool):
        if name in _MULTI_PURPOSE and isinstance(properties.get(name), dict):
            if "enum" in properties[name] or "const" in properties[name]:
                return None  # a multi-purpose tool (str_replace_based_edit_tool & co.)
    path = _find(properties, PATH_NAMES)
    content = _find(properties, CONTENT_NAMES)
    old, new = _find(properties, OLD_NAMES), _find(properties, NEW_NAMES)
    if path is not None and ((old is not None and new is not None) or _edits_param(properties)):
        return "edit"
    asks = words & _ASK_WORDS and not words & _NOT_ASK
    if asks and path is None and _question_param(properties) is not None:
        return "ask"
    if path is not None and content is not None and not words & _NOT_WRITE:
        return "write"
    command = _find(properties, ("command", "cmd"), lambda s: _is_string(s) or _is_string_array(s))
    if command is None and words & _SHELL_WORDS:
        command = _find(properties, ("script",))
    if command is not None and path is None:
        return "shell"
    if path is not None and content is None and words & _READ_WORDS and not words & _NOT_READ:
        return "read"
    return None


def classify_tool(tool: ToolSpec) -> str | None:
    """
    The role of a tool (``shell``, ``write``, ``edit``, ``read``, ``ask``), or None.

    A role is given only when arguments valid against the tool's own schema can be built
    (see `build_arguments`).
    """
    role = _candidate_role(tool)
    if role is None:
        return None
    probe = {
        "path": "/tmp/acpkit-conformance.txt",
        "content": CONTENT,
        "old": EDIT_OLD,
        "new": EDIT_NEW,
        "command": SHELL_COMMAND,
        "question": QUESTION,
    }
    return role if build_arguments(tool, role, probe) is not None else None


def _score(tool: ToolSpec, role: str) -> tuple[int, int, int]:
    """Name hints first, then plain old/new strings over an ``edits`` array, then fewer
    required parameters."""
    words = _words(tool.name)
    hints = {"shell": _SHELL_WORDS, "write": _WRITE_WORDS, "edit": _EDIT_WORDS}
    hints["read"], hints["ask"] = _READ_WORDS, _ASK_WORDS
    properties = _properties(tool)
    direct = _find(properties, OLD_NAMES) is not None and _find(properties, NEW_NAMES) is not None
    return (1 if words & hints[role] else 0, int(direct), -len(_required(tool)))


def classify_tools(tools: Sequence[ToolSpec]) -> dict[str, ToolSpec]:
    """The best tool for each role found among ``tools`` (roles without one are left out)."""
    best: dict[str, ToolSpec] = {}
    for tool in tools:
        role = classify_tool(tool)
        if role is None:
            continue
        if role not in best or _score(tool, role) > _score(best[role], role):
            best[role] = tool
    return best


# -- arguments ------------------------------------------------------------------------------


def _example(schema: Any, depth: int = 0) -> Any:
    """A value meant to be valid against ``schema`` (checked afterwards by the caller)."""
    if not isinstance(schema, dict) or depth > 8:
        return "conformance"
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches:
            return _example(branches[0], depth + 1)
    kinds = [kind for kind in _types(schema) if kind != "null"] or (
        ["null"] if _types(schema) == {"null"} else []
    )
    kind = kinds[0] if kinds else ("object" if "properties" in schema else "string")
    if kind == "boolean":
        return False
    if kind in ("integer", "number"):
        value: Any = 0
        if isinstance(schema.get("minimum"), int | float):
            value = schema["minimum"]
        elif isinstance(schema.get("exclusiveMinimum"), int | float):
            value = schema["exclusiveMinimum"] + 1
        elif isinstance(schema.get("maximum"), int | float) and schema["maximum"] < 0:
            value = schema["maximum"]
        if kind == "integer" and isinstance(value, float):
            value = int(value) + (0 if value == int(value) else 1)
        return value
    if kind == "null":
        return None
    if kind == "array":
        count = schema.get("minItems", 0)
        count = count if isinstance(count, int) and 0 <= count <= 8 else 0
        return [_example(schema.get("items"), depth + 1) for _ in range(count)]
    if kind == "object":
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = schema.get("required") if isinstance(schema.get("required"), list) else []
        assert isinstance(properties, dict) and isinstance(required, list)
        return {
            name: _example(properties.get(name), depth + 1)
            for name in required
            if isinstance(name, str)
        }
    text = "conformance"
    minimum = schema.get("minLength")
    if isinstance(minimum, int) and 0 <= minimum <= 1000 and len(text) < minimum:
        text = text + "x" * (minimum - len(text))
    maximum = schema.get("maxLength")
    if isinstance(maximum, int) and 0 <= maximum < len(text):
        text = text[:maximum]
    return text


def _as_schema(value: Any) -> dict[str, Any]:
    """``value`` if it is a dict, else ``{}``."""
    return value if isinstance(value, dict) else {}


def _valid(schema: Mapping[str, Any], value: Any) -> bool:
    import jsonschema

    try:
        validator_class = jsonschema.validators.validator_for(
            schema, jsonschema.Draft202012Validator
        )
        validator_class.check_schema(schema)
        return bool(validator_class(schema).is_valid(value))
    except Exception:
        return False


def build_arguments(tool: ToolSpec, role: str, values: Mapping[str, str]) -> dict[str, Any] | None:
    """
    Arguments for calling ``tool`` in ``role``, valid against its parameters schema.

    ``values`` gives the meaning: ``path``, ``content``, ``old``, ``new``, ``command``,
    ``question``. The
    known parameter spellings (`PATH_NAMES`, `CONTENT_NAMES`, `OLD_NAMES`, `NEW_NAMES`,
    `COMMAND_NAMES`) get them; every other required parameter gets a schema-valid value
    (strings ``"conformance"``, booleans false, numbers their minimum or 0, enums their
    first value). None when no valid arguments can be made.
    """
    properties = _properties(tool)
    arguments: dict[str, Any] = {}
    path = _find(properties, PATH_NAMES)
    if role in ("write", "edit", "read"):
        if path is None:
            return None
        arguments[path] = values["path"]
    if role == "write":
        content = _find(properties, CONTENT_NAMES)
        if content is None:
            return None
        arguments[content] = values["content"]
    elif role == "edit":
        old, new = _find(properties, OLD_NAMES), _find(properties, NEW_NAMES)
        edits = _edits_param(properties)
        if old is not None and new is not None:
            arguments[old], arguments[new] = values["old"], values["new"]
        elif edits is not None:
            name, old_key, new_key = edits
            items = properties[name].get("items")
            entry = _example(items)
            entry = entry if isinstance(entry, dict) else {}
            entry.update({old_key: values["old"], new_key: values["new"]})
            arguments[name] = [entry]
        else:
            return None
    elif role == "ask":
        found = _question_param(properties)
        if found is None:
            return None
        name, key = found
        if name != "questions":
            arguments[name] = values["question"]
        elif key is None:
            arguments[name] = [values["question"]]
        else:
            items = properties[name]["items"]
            entry = _example(items)
            entry = entry if isinstance(entry, dict) else {}
            entry[key] = values["question"]
            kinds = _as_schema(_as_schema(items.get("properties")).get("type"))
            if isinstance(kinds.get("enum"), list) and "confirm" in kinds["enum"]:
                entry["type"] = "confirm"
            arguments[name] = [entry]
    elif role == "shell":
        command = _find(properties, COMMAND_NAMES, lambda s: _is_string(s) or _is_string_array(s))
        if command is None:
            return None
        if _is_string_array(properties[command]):
            arguments[command] = ["bash", "-lc", values["command"]]
        else:
            arguments[command] = values["command"]
    for name in _required(tool):
        if name not in arguments:
            arguments[name] = _example(properties.get(name, {}))
    return arguments if _valid(tool.parameters, arguments) else None


# -- the brain ------------------------------------------------------------------------------


@attrs.frozen
class Step:
    """One tool-calling step of a scenario: the role, the tool and its arguments."""

    label: str
    role: str
    tool: ToolSpec
    arguments: Mapping[str, Any]


def plan(found: Directive, roles: Mapping[str, ToolSpec]) -> list[Step]:
    """The tool-calling steps of a directive's scenario with the tools at hand."""
    values = {
        "path": found.file,
        "content": CONTENT,
        "old": EDIT_OLD,
        "new": EDIT_NEW,
        "command": SHELL_COMMAND,
        "question": QUESTION,
    }
    wanted = {
        "text": [],
        "write": ["write"],
        "edit": ["write", "edit"],
        "read": ["write", "read"],
        "shell": ["shell"],
        "tools": ["write", "edit", "read", "shell", "ask"],
        "slow": ["slow"],
        "ask": ["ask"],
    }[found.scenario]
    steps: list[Step] = []
    for label in wanted:
        role, step_values = label, dict(values)
        if label == "slow":
            role, step_values["command"] = "shell", SLOW_COMMAND
        if label == "edit" and "edit" not in roles:
            role, step_values["content"] = "write", EDITED_CONTENT
        tool = roles.get(role)
        if tool is None:
            continue
        arguments = build_arguments(tool, role, step_values)
        if arguments is not None:
            steps.append(Step(label, role, tool, arguments))
    return steps


def _chunks(text: str) -> tuple[str, ...]:
    words = text.split(" ")
    return tuple(word if index == 0 else " " + word for index, word in enumerate(words))


class ConformanceModel:
    """The tool-aware conformance brain (see the module documentation)."""

    def answer(self, request: ModelRequest, number: int) -> Answer:
        """The next step of the latest directive's scenario, or its final text."""
        found = find_directive(request.messages)
        after: tuple[Message, ...]
        if found is None:
            current, after = Directive("text", ""), ()
        else:
            current, index = found
            after = request.messages[index + 1 :]
        if request.response_schema is not None:
            return self._structured(request, current)
        roles = classify_tools(request.tools)
        steps = plan(current, roles)
        results = sum(1 for message in after if message.role == "tool")
        calls = sum(len(message.tool_calls) for message in after if message.role == "assistant")
        step = max(results, calls)
        info: dict[str, Any] = {
            "scenario": current.scenario,
            "step": step,
            "tools": [tool.name for tool in request.tools],
            "roles": {role: tool.name for role, tool in sorted(roles.items())},
        }
        if step < len(steps) and step < MAX_STEPS:
            chosen = steps[step]
            text = json.dumps(chosen.arguments, ensure_ascii=False)
            pieces = tuple(split_text(text, 3))
            call_id = f"{CALL_ID_PREFIX}{current.token or 'x'}_{step + 1}"
            answer = Answer(
                chunks=(f"Step {step + 1}: {chosen.label}.",),
                tool_calls=(AnswerToolCall(call_id, chosen.tool.name, pieces),),
                info={
                    **info,
                    "action": chosen.label,
                    "tool": chosen.tool.name,
                    "token": current.token,
                },
            )
        elif current.scenario == "slow" and "shell" not in roles and step == 0:
            chunks = tuple(f"slow {n} " for n in range(SLOW_CHUNKS))
            answer = Answer(chunks=chunks, delay=SLOW_INTERVAL, info={**info, "action": "slow"})
        elif current.scenario == "text":
            answer = Answer(chunks=_chunks(TEXT_ANSWER), info={**info, "action": "text"})
        else:
            final = f"Conformance scenario {current.scenario} done after {step} steps."
            answer = Answer(chunks=_chunks(final), info={**info, "action": "final"})
        return attrs.evolve(answer, usage=estimated_usage(request, answer))

    def _structured(self, request: ModelRequest, current: Directive) -> Answer:
        """A side request asking JSON output (a next-speaker check...): a valid example."""
        schema = request.response_schema or {}
        value = _example(schema)
        if not _valid(schema, value):
            value = {}
        info: dict[str, Any] = {"scenario": current.scenario, "step": None, "action": "json"}
        info |= {"tools": [tool.name for tool in request.tools], "roles": {}}
        answer = Answer(chunks=(json.dumps(value, ensure_ascii=False),), info=info)
        return attrs.evolve(answer, usage=estimated_usage(request, answer))


# -- running it -------------------------------------------------------------------------------


@attrs.define
class ConformanceModelServer:
    """A running conformance model (from `serve_conformance_model`)."""

    openai_url: str
    anthropic_url: str
    gemini_url: str
    model: str = MODEL
    api_key: str = "acpkit-conformance-key"
    #: the subprocess (set by `serve_conformance_model`)
    process: subprocess.Popen[str] | None = None
    _seen: list[dict[str, Any]] = attrs.field(factory=list)
    _lock: threading.Condition = attrs.field(factory=threading.Condition)

    def env(self) -> dict[str, str]:
        """The base-URL, key and model variables common coding agents read, for every API."""
        key = self.api_key
        no_proxy = ",".join(
            part for part in [os.environ.get("NO_PROXY", ""), "127.0.0.1", "localhost"] if part
        )
        return {
            # OpenAI (Codex, aider/litellm, most OpenAI-compatible clients)
            "OPENAI_BASE_URL": self.openai_url,
            "OPENAI_API_BASE": self.openai_url,
            "OPENAI_API_KEY": key,
            "OPENAI_MODEL": self.model,
            # goose
            "OPENAI_HOST": self.anthropic_url,
            "ANTHROPIC_HOST": self.anthropic_url,
            # Anthropic (Claude Code and the Anthropic SDKs)
            "ANTHROPIC_BASE_URL": self.anthropic_url,
            "ANTHROPIC_API_KEY": key,
            "ANTHROPIC_AUTH_TOKEN": key,
            "ANTHROPIC_MODEL": self.model,
            "ANTHROPIC_SMALL_FAST_MODEL": self.model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": self.model,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": self.model,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": self.model,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            # Gemini (Gemini CLI, google-genai)
            "GEMINI_API_KEY": key,
            "GOOGLE_API_KEY": key,
            "GOOGLE_GEMINI_BASE_URL": self.gemini_url,
            "GEMINI_BASE_URL": self.gemini_url,
            "GEMINI_MODEL": self.model,
            "GOOGLE_GENAI_USE_VERTEXAI": "false",
            # keep loopback traffic away from any configured proxy
            "NO_PROXY": no_proxy,
            "no_proxy": no_proxy,
        }

    def placeholders(self) -> dict[str, str]:
        """Values for ``{model_url}``-style substitution in agent command lines."""
        return {
            "model_url": self.openai_url,
            "openai_url": self.openai_url,
            "anthropic_url": self.anthropic_url,
            "gemini_url": self.gemini_url,
            "model": self.model,
        }

    def requests(self) -> list[dict[str, Any]]:
        """The model requests seen so far: {api, stream, scenario, step, action, tools,
        roles, tool (the tool it asked to call, if any), token (its directive's)}."""
        with self._lock:
            return list(self._seen)

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """`requests` once at least ``count`` were seen (or ``timeout`` seconds passed)."""
        with self._lock:
            self._lock.wait_for(lambda: len(self._seen) >= count, timeout)
            return list(self._seen)

    def _record(self, line: str) -> None:
        try:
            value = jsonbytes.loads(line)
        except ValueError:
            return
        if isinstance(value, dict):
            with self._lock:
                self._seen.append(value)
                self._lock.notify_all()


def _read_records(stream: Any, server: ConformanceModelServer) -> None:
    for line in stream:
        server._record(line)


@contextmanager
def serve_conformance_model(
    *, timeout: float = 10.0, port: int = 0, python: str = sys.executable
) -> Iterator[ConformanceModelServer]:
    """
    Run ``python -m acpkit.conformance.model`` on 127.0.0.1; yield its URLs and records.

    On exit the subprocess is terminated (killed if it has not ended within ``timeout``).
    Raises RuntimeError if it does not announce its URLs.
    """
    process = subprocess.Popen(
        [python, "-m", "acpkit.conformance.model", "--port", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        encoding="utf-8",
    )
    reader: threading.Thread | None = None
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        try:
            urls = json.loads(first)
            server = ConformanceModelServer(
                openai_url=urls["openai_url"],
                anthropic_url=urls["anthropic_url"],
                gemini_url=urls["gemini_url"],
                model=urls.get("model", MODEL),
                process=process,
            )
        except (ValueError, KeyError, TypeError):
            raise RuntimeError(
                f"the conformance model server did not start (printed {first!r})"
            ) from None
        reader = threading.Thread(target=_read_records, args=(process.stdout, server), daemon=True)
        reader.start()
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if reader is not None:
            reader.join(timeout)
        if process.stdout is not None:
            process.stdout.close()


def record_of(request: ModelRequest, answer: Answer) -> dict[str, Any]:
    """The JSON line printed for one model request."""
    info = dict(answer.info)
    return {
        "api": request.api,
        "stream": request.stream,
        "scenario": info.get("scenario"),
        "step": info.get("step"),
        "action": info.get("action"),
        "tools": info.get("tools", [tool.name for tool in request.tools]),
        "roles": info.get("roles", {}),
        "tool": info.get("tool"),
        "token": info.get("token"),
        # the tool calls whose results the agent sent back: the ones it ran (TOOL-004)
        "results": sorted(
            {m.tool_call_id for m in request.messages if m.role == "tool" and m.tool_call_id}
        ),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m acpkit.conformance.model [--port N]``: serve until terminated."""
    parser = argparse.ArgumentParser(
        prog="python -m acpkit.conformance.model",
        description="Serve the acpkit conformance model (four model APIs) on 127.0.0.1.",
    )
    parser.add_argument("--port", type=int, default=0, help="TCP port (default: any free port)")
    parser.add_argument("--model", default=MODEL, help=f"model id reported (default: {MODEL})")
    options = parser.parse_args(argv)
    from twisted.internet import reactor

    from acpkit.testing.modelserver import ScriptedModelServer
    from acpkit.testing.script import script_of

    server = ScriptedModelServer(
        script_of([], model=options.model), reactor=reactor, brain=ConformanceModel()
    )
    try:
        server.start(options.port)
    except Exception as error:
        sys.stderr.write(f"conformance model: cannot listen on port {options.port}: {error}\n")
        return 1

    def report(request: ModelRequest, answer: Answer) -> None:
        sys.stdout.write(json.dumps(record_of(request, answer)) + "\n")
        sys.stdout.flush()

    server.observers.append(report)
    announce = {
        "openai_url": server.base_url,
        "anthropic_url": server.root_url,
        "gemini_url": server.root_url,
        "model": options.model,
    }
    sys.stdout.write(json.dumps(announce) + "\n")
    sys.stdout.flush()
    reactor.run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
