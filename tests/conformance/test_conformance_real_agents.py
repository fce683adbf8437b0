"""
The conformance tester against published third-party ACP agents, through real turns.

One test per recipe of `tests.real_agents` (installed by ``.ci/install-real-agents``): a
``quick`` run of `acpkit.conformance.cli.run_suite` on the real agent, against the
conformance model server when the agent needs a model. Each test asserts

- that the tester could test the agent (``result.error is None``);
- that every failed rule is one of the agent's *documented genuine findings* (`FINDINGS`:
  rule id -> the verdict, quoting the spec sentence the agent breaks): a failed rule that is
  not in the table is a new finding, possibly a false one, and fails the test;
- that the findings judged stable (`STABLE`: found by every run so far, by a fixed probe
  or a scripted model turn whose outcome does not depend on timing) are still found.

The install root is ``$ACPKIT_REAL_AGENTS`` (default ``${TMPDIR:-/tmp}/acpkit-real-agents``).
An agent that is not installed is skipped with the reason, unless
``ACPKIT_REAL_AGENTS_REQUIRED=1`` (then it is a failure). With
``ACPKIT_REAL_AGENTS_REPORTS=DIR`` each run's text report is written to ``DIR/NAME.txt``.
Every run has its own temporary directories (the agent's HOME and TMPDIR, the sessions')
and the model server picks a free port, so the tests can run in parallel.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

import pytest

from acpkit.conformance.cli import run_suite
from acpkit.conformance.report import SuiteResult, format_report
from acpkit.conformance.rules import RULES
from tests.real_agents import AGENTS, DEFAULT_ROOT, RealAgent

pytestmark = pytest.mark.real_agent

ROOT = os.environ.get("ACPKIT_REAL_AGENTS") or DEFAULT_ROOT
REQUIRED = os.environ.get("ACPKIT_REAL_AGENTS_REQUIRED") == "1"
REPORTS = os.environ.get("ACPKIT_REAL_AGENTS_REPORTS")
#: Seconds per step: the slowest agents (gemini-cli, opencode) answer initialize in 2-5 s
#: and a model turn in well under 5 s; 15 s leaves room on a loaded CI machine.
TIMEOUT = 15.0

# Verdicts shared by several agents ------------------------------------------------------

_RELATIVE_CWD = (
    "SHOULD. schema.json NewSessionRequest.cwd: 'The working directory for this session. "
    "Must be an absolute path.' The agent accepts session/new with cwd 'relative/dir'."
)
_NO_MCP_HTTP = (
    "SHOULD. session-setup.mdx: 'new Agents SHOULD support the HTTP transport to ensure "
    "compatibility with modern MCP servers.' agentCapabilities.mcpCapabilities.http is "
    "absent or false."
)
_NO_PARSE_ERROR = (
    "SHOULD. schema.json ErrorCode: 'Parse error: Invalid JSON was received by the "
    "server.' A truncated JSON line gets no -32700 answer at all (the JSON-RPC layer drops "
    "it silently); later requests are answered."
)
_SDK_DROPS_BAD_JSON = (
    "SHOULD. schema.json ErrorCode: 'Parse error: Invalid JSON was received by the "
    "server.' The Python SDK's reader logs 'Error parsing JSON-RPC message' for a truncated "
    "JSON line and drops it: no -32700 answer; later requests are answered."
)
_INVALID_REQUEST_CODE = (
    "SHOULD. schema.json ErrorCode: 'Invalid request: The JSON sent is not a valid Request "
    "object.' A request without 'jsonrpc', or with an object id, is answered -32601/-32603 "
    "(or -32700) instead of -32600."
)
_INVALID_PARAMS_CODE = (
    "SHOULD. schema.json ErrorCode: 'Invalid params: Invalid method parameter(s).' "
    "session/new with cwd 42 is answered -32603 (internal error) instead of -32602."
)
_MODELS_FIELD = (
    "MUST. extensibility.mdx: 'Implementations MUST NOT add any custom fields at the root "
    "of a type that's part of the specification.' The session/new (and load/resume) result "
    "carries 'models', an unstable field of older SDKs that neither schema.json nor "
    "schema.unstable.json (SDK 2.4.0) defines any more (model choice is a config option)."
)
_CRASH_ON_JUNK = (
    "SHOULD. A junk line is not fatal (schema.json ErrorCode: 'Parse error: Invalid JSON "
    "was received by the server.'): the Python SDK's reader crashes on the line '42' "
    "(AttributeError: 'int' object has no attribute 'get') and the process exits."
)
_CRASH_ON_BATCH = (
    "SHOULD. schema.json ErrorCode: 'Invalid request: The JSON sent is not a valid Request "
    "object.' A JSON array kills the process (AttributeError: 'list' object has no "
    "attribute 'get') instead of being answered -32600."
)
_CATCH_ALL_EXT = (
    "SHOULD. extensibility.mdx: 'If the receiving end doesn't recognize the custom method "
    "name, it should respond with the standard \"Method not found\" error'. The example's "
    "ext_method answers every _-prefixed method, '_acpkit.dev/unknown' included, with a "
    "canned success."
)
_LIST_CURSOR = (
    "SHOULD. session-list.mdx: 'Agents SHOULD return an error if the cursor is invalid'. "
    "session/list with cursor 'acpkit-invalid-cursor' succeeds with the first page."
)

_EXIT_WITHOUT_ANSWER = (
    "SHOULD (overview.mdx: 'Methods: Request-response pairs that expect a result or error'; "
    "no ACP sentence speaks of the end of input: transports.mdx ends the exchange with "
    "'Close stdin, terminate subprocess', so JSON-RPC's 'MUST reply' is not carried past "
    "it). A session/prompt written just before stdin closes is read (the turn starts) but "
    "never answered: the process exits with status 0 at the end of its input. A client that "
    "closes stdin and still reads stdout gets nothing; an error or stopReason 'cancelled' "
    "would do."
)
_NO_STDIO_MCP = (
    "SHOULD. session-setup.mdx: 'Agents SHOULD connect to all MCP servers specified by the "
    "Client.' The stdio MCP server given in session/new is never started, after "
    "session/new and a turn."
)

#: agent -> {rule id: the verdict (level, the spec sentence, how the agent breaks it)}.
FINDINGS: dict[str, dict[str, str]] = {
    "python-sdk-example": {
        "FRAME-008": _CRASH_ON_JUNK,
        "RPC-003": _SDK_DROPS_BAD_JSON,
        "RPC-004": _CRASH_ON_BATCH,
        "RPC-005": _CATCH_ALL_EXT,
        "SESSION-002": _RELATIVE_CWD,
        "MCP-001": _NO_MCP_HTTP,
        "MCP-002": _NO_STDIO_MCP,
    },
    "python-sdk-echo": {
        "FRAME-008": _CRASH_ON_JUNK,
        "RPC-003": _SDK_DROPS_BAD_JSON,
        "RPC-004": _CRASH_ON_BATCH,
        "RPC-005": _CATCH_ALL_EXT.replace("with a canned success", "with result null"),
        "INIT-002": (
            "MUST. initialization.mdx: 'If the Agent supports the requested version, it MUST "
            "respond with the same version. Otherwise, the Agent MUST respond with the latest "
            "version it supports.' initialize with protocolVersion 999 is answered 999."
        ),
        "MCP-002": _NO_STDIO_MCP,
        "INIT-003": (
            "SHOULD. initialization.mdx: 'Both Clients and Agents SHOULD provide information "
            "about their implementation in the clientInfo and agentInfo fields "
            "respectively.' The result has no agentInfo."
        ),
        "INIT-004": (
            "SHOULD. initialization.mdx: 'The Agent SHOULD specify whether it supports the "
            "following capabilities:' agentCapabilities is null."
        ),
        "SESSION-002": _RELATIVE_CWD,
    },
    "chuk-echo": {
        "RPC-002": (
            "MUST. overview.mdx: 'Notifications never receive responses (success or error)'. "
            'Every unknown notification is answered with an error carrying id "".'
        ),
        "RPC-003": _NO_PARSE_ERROR,
        "RPC-004": (
            "SHOULD. schema.json ErrorCode: 'Invalid request: The JSON sent is not a valid "
            "Request object.' A request without 'jsonrpc' or with an object id is answered "
            "-32603 instead of -32600."
        ),
        "RPC-005": (
            "SHOULD. extensibility.mdx: 'If the receiving end doesn't recognize the custom "
            'method name, it should respond with the standard "Method not found" error\'. '
            "Unknown methods are answered -32603 ('Unknown method: ...') instead of -32601."
        ),
        "RPC-006": (
            "SHOULD. schema.json ErrorCode: 'Invalid params: Invalid method parameter(s).' "
            "session/new with cwd 42 and mcpServers 'none' succeeds."
        ),
        "RPC-007": (
            "SHOULD. extensibility.mdx: 'implementations SHOULD ignore unrecognized "
            'notifications.\' Unknown notifications are answered with an error (id "") '
            "instead of being ignored."
        ),
        "SESSION-002": _RELATIVE_CWD,
        "MCP-001": _NO_MCP_HTTP,
        "MCP-002": _NO_STDIO_MCP,
        "RPC-014": (
            "SHOULD. schema.json ErrorCode: 'Resource not found: A given resource, such as a "
            "session or file, was not found.' session/prompt for a session id never created "
            "is answered -32603 (internal error), not -32002 (or -32602)."
        ),
    },
    "codex-acp": {
        "TOOL-004": (
            "SHOULD. tool-calls.mdx (Creating): 'When the language model requests a tool "
            "invocation, the Agent SHOULD report it to the Client'. In some runs (2 of 3 "
            "here) the model's shell call ('echo acpkit-conformance') runs, its result goes "
            "back to the model, and the turn ends end_turn with no tool_call update: the "
            "client never learns a command ran."
        ),
        "FRAME-008": (
            "SHOULD. schema.json ErrorCode: 'Parse error: Invalid JSON was received by the "
            "server.' The line b'\\xff\\xfe\\xfd not utf-8' ends the process ('Error: ACP "
            "error: Internal error' and a backtrace on stderr, exit 1) instead of being "
            "answered -32700; later requests go unanswered."
        ),
        "FRAME-009": (
            "SHOULD (no spec sentence requires it; transports.mdx: 'The client launches the "
            "agent as a subprocess.' and shows 'Close stdin, terminate subprocess'). After "
            "stdin is closed mid-turn the agent finishes the turn and keeps running."
        ),
        "RPC-002": (
            "MUST. overview.mdx: 'Notifications never receive responses (success or error)'. "
            "The notification 'no/such_notification' is answered with a -32601 error "
            "without an id."
        ),
        "RPC-004": (
            "SHOULD. schema.json ErrorCode: 'Invalid request: The JSON sent is not a valid "
            "Request object.' A batch and an object id are answered -32700 (they are valid "
            "JSON), a request without 'jsonrpc' -32601; -32600 is the code."
        ),
        "RPC-007": (
            "SHOULD. extensibility.mdx: 'implementations SHOULD ignore unrecognized "
            "notifications.' The notification 'no/such_notification' is answered with a "
            "-32601 error (see RPC-002) instead of being ignored."
        ),
        "RPC-009": (
            "MUST (JSON-RPC 2.0: the id member is REQUIRED in a response). The error answers "
            "to notifications (RPC-002) have no id member at all."
        ),
        "SESSION-002": _RELATIVE_CWD,
        "TURN-003": (
            "SHOULD. prompt-turn.mdx: a tool call is reported until it is completed or "
            "failed. An exec_command tool call (echo, sleep 30) is announced in_progress, its "
            "output goes back to the model, and the turn ends end_turn with no "
            "tool_call_update for it (in most runs; once it was reported failed)."
        ),
    },
    "pi-acp-openai-chat": {},  # filled below: the same for the four model APIs
    "claude-agent-acp": {
        "EXT-001": (
            "MUST. extensibility.mdx: 'Implementations MUST NOT add any custom fields at the "
            "root of a type that's part of the specification.' The session/load and "
            "session/resume results carry 'sessionId', which LoadSessionResponse and "
            "ResumeSessionResponse do not define."
        ),
        "FRAME-010": _EXIT_WITHOUT_ANSWER,
    },
    "gemini-cli": {
        "FRAME-003": (
            "MUST. transports.mdx: 'The agent MUST NOT write anything to its stdout that is "
            "not a valid ACP message.' authenticate 'oauth-personal' writes the interactive "
            "login (terminal escapes, 'Please visit the following URL...', empty lines, "
            "'Enter the authorization code:') on stdout."
        ),
        "CAP-005": (
            "MUST. initialization.mdx: 'The Agent MUST respond with the chosen protocol "
            "version and the capabilities it supports.' loadSession is advertised, but "
            "session/load of a session that just had a turn, in its own cwd, fails -32603 "
            "'No previous sessions found for this project.': loadSession first starts a new "
            "chat recording under the same session id, which resets the file's messages to "
            "the session context, then finds nothing resumable in it (a race: in some runs "
            "the load reads the file first and succeeds, see SESSION-004)."
        ),
        "SESSION-004": (
            "MUST. session-setup.mdx: 'When all the conversation entries have been streamed to "
            "the Client, the Agent MUST respond to the original session/load request.' When "
            "the load works (see CAP-005: it is a race), loadSession starts streamHistory "
            "without awaiting it and answers: the replayed user and agent messages arrive "
            "after the session/load response."
        ),
        "CONFIG-005": (
            "SHOULD. session-config-options.mdx: 'during the transition period, Agents that "
            "provide mode-like configuration SHOULD send both:' the session/new result has "
            "modes (default/autoEdit/yolo/plan) and no configOptions at all."
        ),
        "EXT-001": _MODELS_FIELD,
        "FRAME-010": (
            _EXIT_WITHOUT_ANSWER
            + " Intermittent (once, in a CI run with 13 agents on 4 workers; not in three "
            "runs at once here): the turn had not ended when stdin closed."
        ),
        "RPC-003": _NO_PARSE_ERROR,
        "RPC-004": _INVALID_REQUEST_CODE,
        "RPC-006": _INVALID_PARAMS_CODE,
        "TOOL-001": (
            "SHOULD. prompt-turn.mdx: 'Once permission is granted (if required), the Agent "
            "SHOULD invoke the tool and report a status update marking the tool as "
            "in_progress:' the permission asked for a resource_link outside the workspace "
            "(tool call 'resolve-prompt-/etc/hostname-...') is granted, and that tool call "
            "never gets a status update."
        ),
        "TOOL-002": (
            "SHOULD (no keyword: the schema types session/request_permission's toolCall as "
            "ToolCallUpdate, 'An update to an existing tool call.'). Every permission "
            "request names a tool call (run_shell_command__call_..., write_file__call_..., "
            "resolve-prompt-...) that no tool_call of the session announced before it."
        ),
        "TOOL-004": (
            "SHOULD. tool-calls.mdx (Creating): 'When the language model requests a tool "
            "invocation, the Agent SHOULD report it to the Client'. Found by the full "
            "profile's exploration only: the model's write call, rejected in the "
            "permission request, went back to the model as a result, and the turn ended "
            "end_turn with no tool_call update: the client saw the call only inside the "
            "permission request (the same root as TOOL-002)."
        ),
    },
    "qwen-code": {
        "FRAME-010": (
            _EXIT_WITHOUT_ANSWER
            + " Intermittent (once in the two CI runs since the EOF probes run side by "
            "side): the turn had not ended when stdin closed."
        ),
        "CONFIG-006": (
            "SHOULD. session-config-options.mdx: 'Agents SHOULD keep both in sync to ensure "
            "consistent behavior regardless of which field the Client uses'. After "
            "session/set_mode 'plan' no config_option_update follows (the mode option stays "
            "'auto'), after set_config_option mode=plan no current_mode_update (the mode "
            "stays 'auto'); only a private qwen/notify/session/mode-update is sent."
        ),
        "EXT-001": (
            _MODELS_FIELD + " Also session/update params.update.timestamp (not a property of "
            "the SessionUpdate variants)."
        ),
        "CANCEL-001": (
            "MUST. prompt-turn.mdx: 'After all ongoing operations have been successfully "
            "aborted and pending updates have been sent, the Agent MUST respond to the "
            "original session/prompt request with the cancelled stop reason.' A cancel that "
            "arrives after the answer's last chunk, while the turn is still pending (qwen's "
            "post-answer memory-extraction request), is ignored: end_turn 2.2 s later. "
            "Timing-dependent."
        ),
        "EXT-004": (
            "SHOULD. extensibility.mdx: 'implementations MAY expose and call custom JSON-RPC "
            "requests as long as their name starts with an underscore (_).' The agent sends "
            "'craft/drainMidTurnQueue', 'qwen/notify/session/mode-update' and "
            "'qwen/notify/session/prompt-suggestion'."
        ),
        "RPC-003": _NO_PARSE_ERROR,
        "RPC-004": _INVALID_REQUEST_CODE,
        "RPC-006": _INVALID_PARAMS_CODE,
        "RPC-014": (
            "SHOULD. schema.json ErrorCode: 'Resource not found: A given resource, such as a "
            "session or file, was not found.' session/prompt for a session id never created "
            "is answered -32603 (internal error), not -32002 (or -32602)."
        ),
        "SESSION-002": _RELATIVE_CWD,
    },
    "opencode": {
        "CONFIG-005": (
            "SHOULD. session-config-options.mdx: 'during the transition period, Agents that "
            "provide mode-like configuration SHOULD send both:' the session/new, load and "
            "resume results have a config option of category mode and no modes."
        ),
        "FRAME-010": _EXIT_WITHOUT_ANSWER,
        "LIST-002": _LIST_CURSOR,
        "RPC-003": _NO_PARSE_ERROR,
        "RPC-004": _INVALID_REQUEST_CODE,
        "SESSION-002": _RELATIVE_CWD,
        "TURN-002": (
            "MUST. prompt-turn.mdx (Cancellation): the Agent 'MUST ensure that it does so "
            "before responding to the session/prompt request', and a turn's response ends it. "
            "Intermittent (1 of 3 runs, under load; not reproduced alone): an "
            "agent_message_chunk of the session arrived after the response to its last "
            "session/prompt, before any new prompt: the client shows text of a turn that "
            "has ended."
        ),
        "CANCEL-001": (
            "MUST. prompt-turn.mdx (Cancellation): 'the Agent MUST respond to the original "
            "session/prompt request with the cancelled stop reason.' Found by the full "
            "profile's exploration only (1 of its 3 shrink replays): a session/prompt "
            "cancelled at once was never answered in 120 s, while requests sent 13 requests "
            "after it were answered: the client's turn never ends."
        ),
    },
    "gptme": {
        "CANCEL-001": (
            "MUST. prompt-turn.mdx: 'After all ongoing operations have been successfully "
            "aborted and pending updates have been sent, the Agent MUST respond to the "
            "original session/prompt request with the cancelled stop reason.' A long turn "
            "(the model's 'sleep 30' scenario) is cancelled with session/cancel; gptme goes "
            "on, streams the rest and answers stopReason 'end_turn' 26 to 74 s later (its "
            "cancel() drops the session without stopping the turn, see TURN-007)."
        ),
        "FRAME-010": _EXIT_WITHOUT_ANSWER,
        "FRAME-008": _CRASH_ON_JUNK,
        "RPC-003": _SDK_DROPS_BAD_JSON,
        "RPC-004": _CRASH_ON_BATCH,
        "RPC-005": (
            "SHOULD. extensibility.mdx: 'If the receiving end doesn't recognize the custom "
            'method name, it should respond with the standard "Method not found" error\'. '
            "'_acpkit.dev/unknown' is answered with an empty success ({})."
        ),
        "INIT-002": (
            "MUST. initialization.mdx: 'If the Agent supports the requested version, it MUST "
            "respond with the same version. Otherwise, the Agent MUST respond with the latest "
            "version it supports.' initialize with protocolVersion 999 is answered 999."
        ),
        "INIT-004": (
            "SHOULD. initialization.mdx: 'The Agent SHOULD specify whether it supports the "
            "following capabilities:' agentCapabilities is null."
        ),
        "CONFIG-005": (
            "SHOULD. session-config-options.mdx: 'during the transition period, Agents that "
            "provide mode-like configuration SHOULD send both:' the session/new result has "
            "modes (default/auto) and no configOptions at all."
        ),
        "SESSION-002": _RELATIVE_CWD,
        "TURN-007": (
            "MUST. schema.json StopReason cancelled: 'The turn was cancelled by the client via "
            "session/cancel.' gptme answers a prompt for an unknown session with stopReason "
            "cancelled, and its cancel() deletes the session (_cleanup_session) without "
            "stopping the running turn, so the session's next prompt, never cancelled, is "
            "answered cancelled too."
        ),
    },
}

_PI: dict[str, str] = {
    "FRAME-010": _EXIT_WITHOUT_ANSWER,
    "MCP-002": _NO_STDIO_MCP,
    "FRAME-008": (
        "SHOULD. A junk line is not fatal (schema.json ErrorCode: 'Parse error: Invalid JSON "
        "was received by the server.'). Intermittent (1 of 5 runs; not reproduced alone): "
        "the Node process exited with status 1 right after the four junk lines, before the "
        "request that follows them could be written."
    ),
    "AUTH-001": (
        "MUST. schema.json AuthMethodTerminal: 'Agents MUST advertise this method only when "
        "the client enabled its terminal authentication capability.' initialize advertises "
        "'pi_terminal_login' (type terminal) to a client without auth.terminal."
    ),
    "EXT-001": _MODELS_FIELD,
    "LIST-002": _LIST_CURSOR,
    "MCP-001": _NO_MCP_HTTP,
    "MODE-002": (
        "SHOULD. session-modes.mdx SessionModeState.availableModes: 'The set of modes that "
        "the Agent can operate in'. After set_config_option model=<a reasoning model> the "
        "agent sends current_mode_update 'minimal' while the session's availableModes are "
        "['off'] (no update of the set is ever sent)."
    ),
    "RPC-003": _NO_PARSE_ERROR,
    "RPC-004": _INVALID_REQUEST_CODE,
    "TERMINAL-003": (
        "MUST. schema.json Terminal: 'Embed a terminal created with `terminal/create` by its "
        "id.' Shell tool calls embed {type: terminal, terminalId: <the tool call id>} (with "
        "Zed's _meta.terminal_info) though the client never created that terminal and "
        "advertised no terminal-output extension."
    ),
}
for _api in ("openai-chat", "openai-responses", "anthropic", "gemini"):
    FINDINGS[f"pi-acp-{_api}"] = dict(_PI)

#: agent -> the findings every run has produced (deterministic probes and scripted turns).
STABLE: dict[str, frozenset[str]] = {
    "python-sdk-example": frozenset(
        {"FRAME-008", "RPC-003", "RPC-004", "RPC-005", "SESSION-002", "MCP-001"}
    ),
    "python-sdk-echo": frozenset(
        {"FRAME-008", "RPC-004", "RPC-005", "INIT-002", "INIT-003", "INIT-004", "SESSION-002"}
        | {"RPC-003"}
    ),
    "chuk-echo": frozenset(
        {"RPC-002", "RPC-003", "RPC-004", "RPC-005", "RPC-006", "SESSION-002", "MCP-001"}
    ),
    "codex-acp": frozenset(
        {"FRAME-008", "FRAME-009", "RPC-002", "RPC-004", "RPC-009", "SESSION-002"}
    ),
    "claude-agent-acp": frozenset({"EXT-001"}),
    "gemini-cli": frozenset(
        {"FRAME-003", "CONFIG-005", "EXT-001", "RPC-003", "RPC-004", "RPC-006", "TOOL-001"}
    ),
    "qwen-code": frozenset(
        {"CONFIG-006", "EXT-001", "EXT-004", "RPC-003", "RPC-004", "RPC-006", "SESSION-002"}
    ),
    "opencode": frozenset({"CONFIG-005", "LIST-002", "RPC-003", "RPC-004", "SESSION-002"}),
    "gptme": frozenset(
        {"FRAME-008", "RPC-004", "RPC-005", "INIT-002", "INIT-004", "CONFIG-005", "SESSION-002"}
        | {"TURN-007", "RPC-003"}
    ),
    **{
        f"pi-acp-{api}": frozenset(
            {"AUTH-001", "EXT-001", "LIST-002", "MCP-001", "MODE-002", "RPC-003", "RPC-004"}
            | {"TERMINAL-003"}
        )
        for api in ("openai-chat", "openai-responses", "anthropic", "gemini")
    },
}


# -- running one agent ----------------------------------------------------------------------


def _run(agent: RealAgent, workdir: Path) -> SuiteResult:
    """A quick run of ``agent`` started in ``workdir``, with a fresh TMPDIR of its own."""
    # The launchers make the agent's HOME under $TMPDIR: keep it short (unix socket paths)
    # and private to this run, and remove it afterwards.
    private_tmp = tempfile.mkdtemp(prefix="acpkit-ra-")
    try:
        env = {**os.environ, **agent.environment(ROOT), "TMPDIR": private_tmp}
        # The placeholders stay in argv: run_suite fills in the model server's URLs.
        argv = agent.command(
            ROOT,
            model_url="{model_url}",
            openai_url="{openai_url}",
            anthropic_url="{anthropic_url}",
            gemini_url="{gemini_url}",
            model="{model}",
        )
        result = run_suite(
            argv,
            profile="quick",
            timeout=TIMEOUT,
            cwd=str(workdir),
            env=env,
            use_model_server=agent.api != "none",
        )
    finally:
        shutil.rmtree(private_tmp, ignore_errors=True)
    if REPORTS:
        os.makedirs(REPORTS, exist_ok=True)
        Path(REPORTS, f"{agent.name}.txt").write_text(format_report(result, "text"), "utf-8")
    return result


def _findings(result: SuiteResult, rule_ids: set[str]) -> str:
    """The findings of ``rule_ids``, one ``RULE: message`` line each."""
    return "\n".join(
        f"  {r.rule.id}: {f.message}"
        for r in result.found
        if r.rule.id in rule_ids
        for f in r.findings
    )


def check_real_agent(name: str, workdir: Path) -> None:
    """Run agent ``name`` and judge the result against its documented findings."""
    agent = AGENTS[name]
    missing = agent.available(ROOT)
    if missing is not None:
        if REQUIRED:
            pytest.fail(f"ACPKIT_REAL_AGENTS_REQUIRED=1 but {missing}")
        pytest.skip(missing)
    result = _run(agent, workdir)
    assert result.error is None, f"the tester could not test {name}: {result.error}"
    failed = {r.rule.id for r in result.found}
    genuine: Mapping[str, str] = FINDINGS[name]
    new = failed - set(genuine)
    assert not new, (
        f"{name}: finding(s) not among its documented genuine findings (a change in the "
        f"agent, or a false finding of the tester):\n{_findings(result, new)}\n"
        f"replay: {result.replay}"
    )
    lost = STABLE[name] - failed
    statuses = {r.rule.id: r.status for r in result.results if r.rule.id in lost}
    assert not lost, f"{name}: stable finding(s) no longer found: {statuses}"


# -- the table stays consistent -------------------------------------------------------------


def test_every_recipe_has_documented_findings() -> None:
    """Every recipe has a findings table and a stable set, and nothing else has one."""
    assert set(FINDINGS) == set(AGENTS)
    assert set(STABLE) == set(AGENTS)


def test_documented_findings_name_real_rules() -> None:
    """Every documented rule id exists, and the stable findings are documented findings."""
    known = {rule.id for rule in RULES}
    for name, table in FINDINGS.items():
        assert set(table) <= known, name
        assert STABLE[name] <= set(table), name
        assert all(verdict.strip() for verdict in table.values()), name


# -- one test per agent ---------------------------------------------------------------------


def test_pi_acp_openai_chat(tmp_path: Path) -> None:
    """
    pi through pi-acp on the OpenAI chat-completions API: the tool turns (write, edit, read,
    bash) and cancellation conform; it advertises a terminal auth method to a client that
    did not enable it, puts the removed ``models`` field in session results, accepts an
    invalid session/list cursor, lacks MCP over HTTP, drops malformed lines silently or
    answers them -32601, embeds terminals the client never created, announces a mode
    outside its availableModes after a model switch, never starts the stdio MCP server it
    is given and exits at the end of its input without answering a prompt it read.
    """
    check_real_agent("pi-acp-openai-chat", tmp_path)


def test_pi_acp_openai_responses(tmp_path: Path) -> None:
    """pi through pi-acp on the OpenAI Responses API: the same findings as on chat."""
    check_real_agent("pi-acp-openai-responses", tmp_path)


def test_pi_acp_anthropic(tmp_path: Path) -> None:
    """pi through pi-acp on the Anthropic Messages API: the same findings as on chat."""
    check_real_agent("pi-acp-anthropic", tmp_path)


def test_pi_acp_gemini(tmp_path: Path) -> None:
    """pi through pi-acp on the Gemini API: the same findings as on chat."""
    check_real_agent("pi-acp-gemini", tmp_path)


def test_gemini_cli(tmp_path: Path) -> None:
    """
    Gemini CLI (``gemini --acp``): turns conform; its OAuth ``authenticate`` writes the
    interactive login on stdout, session/load either loses the session it loads or replays
    it after its response (a race), modes come without configOptions, session results
    carry ``models``, the JSON-RPC error codes are off (-32601/-32603 for invalid requests
    and params, nothing for a parse error), a granted permission's pseudo tool call
    never gets a status and permission requests name tool calls never announced.
    """
    check_real_agent("gemini-cli", tmp_path)


def test_qwen_code(tmp_path: Path) -> None:
    """
    Qwen Code (``qwen --acp``): turns conform; modes and the mode config option drift apart,
    session results carry ``models`` and updates a root ``timestamp``, it calls methods
    without the ``_`` prefix, the JSON-RPC error codes are off (-32603 for an unknown
    session too) and a relative cwd is accepted.
    """
    check_real_agent("qwen-code", tmp_path)


def test_claude_agent_acp(tmp_path: Path) -> None:
    """
    Claude Code through claude-agent-acp: everything conforms except a ``sessionId`` at the
    root of the session/load and session/resume results, and a prompt read just before
    stdin closed that is never answered (the process exits).
    """
    check_real_agent("claude-agent-acp", tmp_path)


def test_opencode(tmp_path: Path) -> None:
    """
    opencode (``opencode acp``): turns conform; a mode config option comes without modes, an
    invalid session/list cursor succeeds, the JSON-RPC error codes are off, a relative
    cwd is accepted and a prompt read just before stdin closed is never answered.
    """
    check_real_agent("opencode", tmp_path)


def test_codex_acp(tmp_path: Path) -> None:
    """
    Codex through codex-acp: turns conform; junk lines kill it, it answers notifications
    with id-less errors, keeps running after stdin closes, uses -32700/-32601 for invalid
    requests, accepts a relative cwd and ends turns with its shell tool calls still in
    progress. (Its draft ``env_var`` auth methods are a variant the schema does not define:
    noted, not a custom field, since issue 23.)
    """
    check_real_agent("codex-acp", tmp_path)


def test_gptme(tmp_path: Path) -> None:
    """
    gptme (``gptme-acp``, on the official Python SDK 0.12.1): its tools are markdown code
    blocks, not model-API tools, so the conformance model calls none and only text turns
    run. The SDK reader crashes on junk and batches, unknown ``_`` methods succeed,
    initialize echoes an unsupported version without agentCapabilities, modes come without
    configOptions, a relative cwd is accepted, and turns are answered ``cancelled`` without
    a cancel (a prompt for an unknown session; the turn after a cancelled one).
    """
    check_real_agent("gptme", tmp_path)


def test_python_sdk_example(tmp_path: Path) -> None:
    """
    The official Python SDK's examples/agent.py (no model): junk lines and a batch crash
    the SDK's reader, its catch-all extension handler answers unknown ``_`` methods, a
    relative cwd is accepted, no MCP over HTTP.
    """
    check_real_agent("python-sdk-example", tmp_path)


def test_python_sdk_echo(tmp_path: Path) -> None:
    """
    The official Python SDK's examples/echo_agent.py (no model): the SDK reader crashes as
    above, and its initialize echoes an unsupported version and has no agentInfo nor
    agentCapabilities.
    """
    check_real_agent("python-sdk-echo", tmp_path)


def test_chuk_echo(tmp_path: Path) -> None:
    """
    chuk-acp's examples/echo_agent.py (its own JSON-RPC stack, no model): it answers
    notifications, every JSON-RPC error is -32603, invalid params and a relative cwd are
    accepted, no MCP over HTTP.
    """
    check_real_agent("chuk-echo", tmp_path)
