"""
The conformance rule catalogue: every rule the tester checks, with the spec sentence behind it.

Each `Rule` has a stable id (``FAMILY-NNN``), a title, a level, the page and section of the
ACP v1 spec its sentence comes from (``docs/protocol/v1/<page>.mdx`` of
``agentclientprotocol/agent-client-protocol``, or ``schema.json: <Definition>[.<property>]`` for
a description in the v1 schema), the sentence itself quoted verbatim (markdown removed; "…" marks
a cut), what observation of the agent's traffic violates it (`Rule.check`) and the capability
that makes it applicable (``None`` when it always applies).

Levels are the spec's own word: MUST / MUST NOT give ``MUST``, SHOULD / SHOULD NOT / "should"
give ``SHOULD``. A sentence without a keyword gives ``MUST`` when it states a wire-format fact
the schema also requires, ``SHOULD`` when it describes behaviour; the check says so. MAY
sentences are not rules: they are listed in `UNCHECKABLE` with the other agent-binding
sentences that cannot be judged from the agent's traffic. Where the prose and the schema
disagree, the schema is the contract.

`render_markdown` produces ``docs/reference/conformance-rules.md``; a test keeps it current::

    python -c "from acpkit.conformance.rules import render_markdown; print(render_markdown())"
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

__all__ = [
    "RULES",
    "RULES_BY_ID",
    "UNCHECKABLE",
    "Rule",
    "Uncheckable",
    "UnknownRule",
    "render_markdown",
    "select_rules",
    "split_selectors",
]


@attrs.frozen
class Rule:
    """One checkable obligation of an ACP agent."""

    id: str
    title: str
    level: str
    page: str
    """``docs/protocol/v1/<page>.mdx`` or ``schema.json: <Definition>[.<property>]``."""
    section: str
    """The heading the sentence is under (for the schema: the variant or ``description``)."""
    quote: str
    """The spec sentence, verbatim but for markdown; "…" marks a cut."""
    check: str
    """What observation of the agent's traffic violates the rule (and any stimulus it needs)."""
    capability: str | None = None
    transport: str | None = None
    """``http``, ``https`` or ``websocket``: the rule is judged only over that remote
    transport (``http`` covers ``https``); ``None``: over every transport."""

    @property
    def family(self) -> str:
        """The id's prefix (``FRAME`` for ``FRAME-003``)."""
        return self.id.split("-", 1)[0]


@attrs.frozen
class Uncheckable:
    """An agent-binding spec sentence the tester does not judge, and why."""

    page: str
    section: str
    quote: str
    level: str
    reason: str


def _doc(page: str) -> str:
    return f"docs/protocol/v1/{page}.mdx"


def _schema(definition: str) -> str:
    return f"schema.json: {definition}"


def _r(
    rule_id: str,
    title: str,
    level: str,
    page: str,
    section: str,
    quote: str,
    check: str,
    capability: str | None = None,
    *,
    transport: str | None = None,
) -> Rule:
    return Rule(rule_id, title, level, page, section, quote, check, capability, transport)


TRANSPORTS = _doc("transports")
OVERVIEW = _doc("overview")
INITIALIZATION = _doc("initialization")
SESSION_SETUP = _doc("session-setup")
SESSION_LIST = _doc("session-list")
SESSION_DELETE = _doc("session-delete")
SESSION_MODES = _doc("session-modes")
CONFIG_OPTIONS = _doc("session-config-options")
PROMPT_TURN = _doc("prompt-turn")
CONTENT = _doc("content")
TOOL_CALLS = _doc("tool-calls")
FILE_SYSTEM = _doc("file-system")
TERMINALS = _doc("terminals")
AGENT_PLAN = _doc("agent-plan")
SLASH_COMMANDS = _doc("slash-commands")
EXTENSIBILITY = _doc("extensibility")
CANCELLATION = _doc("cancellation")
AUTHENTICATION = _doc("authentication")
ELICITATION = _doc("elicitation")
#: The remote transports are specified by an RFD, not (yet) by a v1 page.
REMOTE_RFD = "docs/rfds/streamable-http-websocket-transport.mdx"

TOP = "(top of page)"
DESCRIPTION = "description"

RULES: tuple[Rule, ...] = (
    # -- framing and bytes --------------------------------------------------------------
    _r(
        "FRAME-001",
        "Everything the agent writes on stdout is UTF-8",
        "MUST",
        TRANSPORTS,
        TOP,
        "JSON-RPC messages MUST be UTF-8 encoded.",
        "A line on the agent's stdout that is not valid UTF-8.",
    ),
    _r(
        "FRAME-002",
        "One JSON-RPC message object per line (no batches, no scalars, no embedded newlines)",
        "MUST",
        TRANSPORTS,
        "stdio",
        "Messages are delimited by newlines (\\n), and MUST NOT contain embedded newlines.",
        "A stdout line that is a JSON array (batch), a JSON scalar, or only part of a message. "
        "The neighbouring bullet 'Messages are individual JSON-RPC requests, notifications, or "
        "responses.' is why a batch is a violation.",
    ),
    _r(
        "FRAME-003",
        "Nothing but ACP frames on stdout (no banner, no log line)",
        "MUST",
        TRANSPORTS,
        "stdio",
        "The agent MUST NOT write anything to its stdout that is not a valid ACP message.",
        "Any stdout line that is not a JSON-RPC 2.0 object (a banner, a log line, ANSI codes), "
        "at any moment, including before the initialize response and after EOF.",
    ),
    _r(
        "FRAME-004",
        "A message split across writes (even inside a UTF-8 character) is read as one message",
        "MUST",
        TRANSPORTS,
        "stdio",
        "Messages are delimited by newlines (\\n), and MUST NOT contain embedded newlines.",
        "Stimulus: the tester writes one request, an unknown _acpkit.dev method whose string id "
        "holds 2-, 3- and 4-byte characters, in pieces 50 ms apart, one cut inside a character "
        "of the id. Any answer with the id intact holds (the method needs no session and no "
        "login). Violated by an id-null error (a piece was parsed), -32700 or -32600, the id "
        "echoed with other characters (each read decoded on its own), or no answer while the "
        "next request is answered; the agent exiting is filed here too. Derived: since only the "
        "newline delimits a message, read boundaries must not.",
    ),
    _r(
        "FRAME-005",
        "Several messages in one write are all read and answered",
        "MUST",
        TRANSPORTS,
        "stdio",
        "Messages are delimited by newlines (\\n), and MUST NOT contain embedded newlines.",
        "Stimulus: several requests in one write. Violated when any of them is not answered "
        "(while a later request is) or is answered -32700 / -32600. In any order: JSON-RPC "
        "does not order responses. Derived from the same delimiter rule as FRAME-004.",
    ),
    _r(
        "FRAME-006",
        "A CRLF line end (the CR is JSON whitespace) is accepted",
        "SHOULD",
        TRANSPORTS,
        "stdio",
        "Messages are delimited by newlines (\\n), and MUST NOT contain embedded newlines.",
        "Stimulus: a request terminated by \\r\\n. Violated when it gets no answer or an error. "
        "No spec sentence asks for this; the closest is the delimiter rule (a trailing CR is "
        "JSON whitespace before the delimiter). Robustness only, hence SHOULD.",
    ),
    _r(
        "FRAME-007",
        "A long line (1 MiB; 16 MiB in the full profile) is read, not fatal",
        "SHOULD",
        TRANSPORTS,
        "stdio",
        "Messages are delimited by newlines (\\n), and MUST NOT contain embedded newlines.",
        "Stimulus: a session/prompt of 1 MiB (16 MiB in the full profile) on one line. Violated "
        "when the agent exits or stops answering. The spec sets no size limit; robustness only, "
        "hence SHOULD.",
    ),
    _r(
        "FRAME-008",
        "A junk line on stdin is not fatal: later requests are still answered",
        "SHOULD",
        _schema("ErrorCode"),
        "Parse error (-32700)",
        "Parse error: Invalid JSON was received by the server.",
        "Stimulus: a line that is not JSON, then a valid request. Violated when the agent exits "
        "or the valid request is not answered. No spec sentence asks for this (the client MUST "
        "NOT send junk); the closest is the existence of the parse-error code. SHOULD.",
    ),
    _r(
        "FRAME-009",
        "After stdin is closed (EOF, at any point) the agent exits within the timeout",
        "SHOULD",
        TRANSPORTS,
        "stdio",
        "The client launches the agent as a subprocess.",
        "Stimulus: the tester closes the agent's stdin before initialize (waiting three step "
        "timeouts: the agent may still be starting), and during a turn (or, when session/new "
        "fails, right after an unknown request: process lifetime needs no session). Violated "
        "when the process is still alive after the timeout; when a request was written just "
        "before the EOF, the timeout counts from its answer (the agent answers what it read, "
        "then exits: FRAME-010), the answer itself waited for one step. No spec sentence "
        "requires it (the "
        "transport diagram only shows 'Close stdin, terminate subprocess'); SHOULD.",
    ),
    _r(
        "FRAME-010",
        "Requests written before stdin closed are answered before the agent exits",
        "SHOULD",
        OVERVIEW,
        "Communication Model",
        "Methods: Request-response pairs that expect a result or error",
        "Stimulus: a session/prompt (or, without a session, an unknown _acpkit.dev request) "
        "written just before the tester closes the agent's stdin. Violated when the agent exits "
        "without having answered it (the client still reads stdout after closing stdin). Not "
        "judged when the agent does not exit (FRAME-009). No keyword; SHOULD, not MUST: "
        "JSON-RPC 2.0's 'The Server MUST reply with a Response' (RPC-013) binds a live exchange, "
        "and JSON-RPC is transport agnostic, silent on a connection's end; the only ACP text on "
        "the end of stdio is transports.mdx's 'Close stdin, terminate subprocess', one client "
        "step: a client of the spec ends the exchange and does not wait for answers. Answering "
        "what was read serves clients that half-close (a pipe), hence robustness.",
    ),
    # -- JSON-RPC envelope --------------------------------------------------------------
    _r(
        "RPC-001",
        "Response ids echo the request id exactly, type included",
        "MUST",
        _schema("RequestId"),
        DESCRIPTION,
        "The Server MUST reply with the same value in the Response object if included.",
        'A response whose id differs from the request\'s id in value or JSON type (1 vs "1"), '
        "or a response to an id the tester never used.",
    ),
    _r(
        "RPC-002",
        "Notifications are never answered",
        "MUST",
        OVERVIEW,
        "Error Handling",
        "Notifications never receive responses (success or error)",
        "Any response (result or error) the agent writes after a notification the tester sent "
        "and that matches no request id (e.g. an error with id null after session/cancel). "
        "The sentence has no keyword; it restates JSON-RPC 2.0's 'MUST NOT reply', hence MUST.",
    ),
    _r(
        "RPC-003",
        "Invalid JSON is answered with -32700 (parse error)",
        "SHOULD",
        _schema("ErrorCode"),
        "Parse error (-32700)",
        "Parse error: Invalid JSON was received by the server.",
        "Stimulus: lines that are not JSON (text, a truncated object, invalid UTF-8; and a "
        "truncated request in the envelope probe). Violated when one of them is answered with "
        "another code or not at all (fewer -32700 answers than such lines). The schema only "
        "defines the code (no keyword), hence SHOULD.",
    ),
    _r(
        "RPC-004",
        "An invalid request (array, missing jsonrpc, bad id) is answered with -32600",
        "SHOULD",
        _schema("ErrorCode"),
        "Invalid request (-32600)",
        "Invalid request: The JSON sent is not a valid Request object.",
        "Stimulus: a JSON value that is not a valid Request. Violated when the answer is a "
        "success or another code. Code definition only, hence SHOULD.",
    ),
    _r(
        "RPC-005",
        "An unknown method is answered with -32601",
        "SHOULD",
        EXTENSIBILITY,
        "Custom Requests",
        "If the receiving end doesn't recognize the custom method name, it should respond with "
        'the standard "Method not found" error',
        "Stimulus: a request with a method the spec does not define. Violated when the answer "
        "is a success or an error with a code other than -32601 (no answer at all is RPC-008's "
        "MUST). The spec's word is lowercase 'should'.",
    ),
    _r(
        "RPC-006",
        "Invalid params are answered with -32602",
        "SHOULD",
        _schema("ErrorCode"),
        "Invalid params (-32602)",
        "Invalid params: Invalid method parameter(s).",
        "Stimulus: a known method with params of the wrong shape. Violated when the answer is a "
        "success or an error with another code. Code definition only, hence SHOULD.",
    ),
    _r(
        "RPC-007",
        "Unknown and _vendor notifications are ignored (no reply, no crash)",
        "SHOULD",
        EXTENSIBILITY,
        "Custom Notifications",
        "Unlike with custom requests, implementations SHOULD ignore unrecognized notifications.",
        "Stimulus: an unknown notification and a _vendor/... notification. Violated when the "
        "agent replies to it, exits, or stops answering later requests.",
    ),
    _r(
        "RPC-008",
        "An unknown _vendor request is answered, with its id",
        "MUST",
        EXTENSIBILITY,
        "Custom Requests",
        "Upon receiving a custom request, implementations MUST respond accordingly with the "
        "provided id",
        "Stimulus: a _vendor/... request the agent does not know. Violated when no response "
        "with that id ever arrives while the agent answers requests the client sent after it "
        "(judged when the agent is stopped; a late answer passes). The -32601 code is only a "
        "'should' (RPC-005); a different error code must not be reported under this MUST.",
    ),
    _r(
        "RPC-009",
        "Every response has exactly one of result / error; errors carry integer code and message",
        "MUST",
        _schema("Error.code"),
        DESCRIPTION,
        "This must be an integer as defined in the JSON-RPC specification.",
        "A response with both or neither of result and error, an error whose code is not an "
        "integer, or one without a string message. The result/error part is overview.mdx, "
        "Error Handling ('Successful responses include a result field', 'Errors include an "
        "error object with code and message').",
    ),
    _r(
        "RPC-010",
        "$/cancel_request: the request is answered exactly once (result or -32800); "
        "a cancel for an answered id is ignored",
        "MUST",
        CANCELLATION,
        "$/cancel_request Notification",
        "When a $/cancel_request notification is received by a supporting implementation, the "
        "implementation: … MUST send one of these responses for the original request",
        "Stimulus: $/cancel_request for a pending session/prompt, then one for the answered id. "
        "Violated when the cancelled request is answered twice, or never while the agent "
        "answers requests the client sent after it (judged when the agent is stopped). Any one "
        "answer holds: an implementation may ignore $/ notifications and answer as it would "
        "have. A reply to the late cancel (a notification) is RPC-002's.",
    ),
    _r(
        "RPC-011",
        "Requests the agent sends use ids that are not null and not fractional",
        "SHOULD",
        _schema("RequestId"),
        DESCRIPTION,
        "The value SHOULD normally not be Null [1] and Numbers SHOULD NOT contain fractional "
        "parts [2]",
        "A request from the agent (session/request_permission, fs/*, terminal/*, "
        "elicitation/create, _vendor) whose id is null or a number with a fractional part.",
    ),
    _r(
        "RPC-012",
        "Error messages are a concise single sentence",
        "SHOULD",
        _schema("Error.message"),
        DESCRIPTION,
        "The message should be limited to a concise single sentence.",
        "An error response from the agent whose message is empty, contains a newline, or is "
        "longer than 300 characters (details belong in error.data).",
    ),
    _r(
        "RPC-013",
        "Every request is answered, once, with a result or an error",
        "MUST",
        OVERVIEW,
        "Communication Model",
        "Methods: Request-response pairs that expect a result or error",
        "A request of the client (one the spec defines, other than a prompt or a custom _ "
        "request, which TURN-001, CANCEL-001 and RPC-008 cover) that is never answered, while "
        "the agent answers requests the client sent after it: dropped, not slow. Judged when "
        "the agent is stopped, after waiting a little more for a late answer; a request with "
        "nothing answered after it could not be judged (slow). authenticate is not judged (it "
        "may wait for a person). Also violated by a second answer to any request (a pair has "
        "one response; after a $/cancel_request that is RPC-010's). No keyword; the page says "
        "'The protocol follows the JSON-RPC 2.0 specification', whose 'The Server MUST reply "
        "with a Response, except for in the case of Notifications' makes it a MUST.",
    ),
    _r(
        "RPC-014",
        "A request for a session that does not exist is refused with -32002 (or -32602)",
        "SHOULD",
        _schema("ErrorCode"),
        "Resource not found",
        "Resource not found: A given resource, such as a session or file, was not found.",
        "Stimulus: session/prompt naming a session id never created. When the agent answers "
        "it with an error (it may also succeed: SESSION-003), violated when the code is neither "
        "-32002, the code the schema gives a session not found, nor -32602 (invalid params, "
        "the sessionId being one). No keyword; the code's meaning is the schema's; SHOULD.",
    ),
    # -- schema -------------------------------------------------------------------------
    _r(
        "SCHEMA-001",
        "Every message the agent sends is valid against the official ACP v1 schema",
        "MUST",
        INITIALIZATION,
        "Protocol version",
        "Clients and Agents MUST agree on a protocol version and act according to its "
        "specification.",
        "A message from the agent that fails validation against acpkit/schemas/v1/schema.json "
        "for its method (request params, notification params, or the result of the request it "
        "answers). The schema is the contract where the prose differs: current_mode_update "
        "carries currentModeId (the page shows modeId); the session/load result is an object "
        "(the page shows null); a permission toolCall.content entry is {type: content, content} "
        "(the page shows a bare block). Also covers overview.mdx Conventions (camelCase keys, "
        "snake_case discriminators): a mis-cased required key fails validation.",
    ),
    # -- initialization -----------------------------------------------------------------
    _r(
        "INIT-001",
        "initialize is answered with a protocol version and capabilities",
        "MUST",
        INITIALIZATION,
        TOP,
        "The Agent MUST respond with the chosen protocol version and the capabilities it supports.",
        "The initialize response is an error, or its result lacks protocolVersion.",
    ),
    _r(
        "INIT-002",
        "Version negotiation: the same version when supported, else the agent's latest",
        "MUST",
        INITIALIZATION,
        "Version Negotiation",
        "If the Agent supports the requested version, it MUST respond with the same version. "
        "Otherwise, the Agent MUST respond with the latest version it supports.",
        "Stimulus: initialize with protocolVersion 1, and with a version above any the agent "
        "knows. Violated when the answer to 1 is not 1, or the answer to the unknown version is "
        "an error or that unknown version.",
    ),
    _r(
        "INIT-003",
        "initialize result carries agentInfo (name and version)",
        "SHOULD",
        INITIALIZATION,
        "Implementation Information",
        "Both Clients and Agents SHOULD provide information about their implementation in the "
        "clientInfo and agentInfo fields respectively.",
        "The initialize result has no agentInfo, or an agentInfo without name or version.",
    ),
    _r(
        "INIT-004",
        "initialize result states the agent's capabilities",
        "SHOULD",
        INITIALIZATION,
        "Agent Capabilities",
        "The Agent SHOULD specify whether it supports the following capabilities:",
        "The initialize result has no agentCapabilities object.",
    ),
    _r(
        "INIT-005",
        "The baseline methods are implemented: session/new, session/prompt, session/cancel, "
        "session/update",
        "MUST",
        INITIALIZATION,
        "Session Capabilities",
        "As a baseline, all Agents MUST support session/new, session/prompt, session/cancel, "
        "and session/update.",
        "session/new or session/prompt is answered with -32601 (method not found); or a "
        "session/cancel during a turn is rejected with an error reply (see RPC-002) or leaves "
        "the turn running past the timeout (CANCEL-001).",
    ),
    _r(
        "INIT-006",
        "The agent works with any combination of client capabilities (none, all)",
        "SHOULD",
        INITIALIZATION,
        "Capabilities",
        "Clients and Agents SHOULD support all possible combinations of their peer's capabilities.",
        "Stimulus: runs with clientCapabilities {} and with every capability advertised. "
        "Violated when, in one of them, initialize, session/new or a simple text session/prompt "
        "fails with an error, or the agent exits.",
    ),
    # -- capabilities -------------------------------------------------------------------
    _r(
        "CAP-001",
        "No fs/* call unless the client advertised the matching fs capability",
        "MUST",
        FILE_SYSTEM,
        "Checking Support",
        "If readTextFile or writeTextFile is false or not present, the Agent MUST NOT attempt "
        "to call the corresponding filesystem method.",
        "An fs/read_text_file (fs/write_text_file) request while the client's initialize did "
        "not set clientCapabilities.fs.readTextFile (writeTextFile) to true. Also the agent "
        "side of initialization.mdx: 'Clients and Agents MUST treat all capabilities omitted in "
        "the initialize request as UNSUPPORTED.'",
    ),
    _r(
        "CAP-002",
        "No terminal/* call unless the client advertised terminal",
        "MUST",
        TERMINALS,
        "Checking Support",
        "If terminal is false or not present, the Agent MUST NOT attempt to call any terminal "
        "methods.",
        "Any terminal/* request while the client's initialize did not set "
        "clientCapabilities.terminal to true.",
    ),
    _r(
        "CAP-003",
        "No elicitation (or elicitation mode) the client did not advertise",
        "MUST",
        ELICITATION,
        "Checking support",
        "Agents MUST NOT request a mode the Client has not advertised.",
        "An elicitation/create whose mode is form (url) while clientCapabilities.elicitation."
        "form (.url) was omitted or null; any elicitation/create when elicitation was omitted.",
    ),
    _r(
        "CAP-004",
        "No notice / compaction_* updates unless the client advertised them",
        "MUST",
        _schema("SessionUpdate"),
        "notice",
        "Agents MUST only send this update when the Client advertised the session.notices "
        "Client capability.",
        "A session/update with sessionUpdate notice while clientCapabilities.session.notices "
        "was not advertised; likewise compaction_update / compaction_summary_chunk without "
        "session.compaction (the same sentence is on those variants and on CompactionUpdate, "
        "CompactionSummaryChunk and Notice).",
    ),
    _r(
        "CAP-005",
        "Advertised session capabilities work: session/load succeeds, resume, close and delete "
        "exist",
        "MUST",
        INITIALIZATION,
        TOP,
        "The Agent MUST respond with the chosen protocol version and the capabilities it supports.",
        "Stimulus: a session with one turn, then session/load of it on a new connection; and "
        "the session-lifecycle probe's session/delete, session/resume and session/close. "
        "Violated when the agent advertised loadSession: true and session/load fails or is "
        "answered -32601, or advertised sessionCapabilities.delete, resume or close and that "
        "method is answered -32601 (method not found): an advertised capability is one it "
        "supports. Another error of those methods is their own rules' (DELETE-001, SESSION-006, "
        "SESSION-007). (sessionCapabilities.list is LIST-003's: any error fails it.)",
        "loadSession or sessionCapabilities.delete / resume / close",
    ),
    _r(
        "CONTENT-001",
        "Text and ResourceLink prompt content are accepted",
        "MUST",
        INITIALIZATION,
        "Prompt capabilities",
        "As a baseline, all Agents MUST support ContentBlock::Text and ContentBlock::ResourceLink "
        "in session/prompt requests.",
        "Stimulus: session/prompt with a text block, and with a resource_link block. Violated "
        "when either is answered with an error. Same obligation in content.mdx ('All Agents "
        "MUST support text content blocks when included in prompts.') and schema.json: "
        "PromptRequest.prompt.",
    ),
    # -- paths and file system ----------------------------------------------------------
    _r(
        "PATH-001",
        "Every file path the agent sends is absolute",
        "MUST",
        OVERVIEW,
        "Argument requirements",
        "All file paths in the protocol MUST be absolute.",
        "A relative path in: fs/read_text_file.path, fs/write_text_file.path, a tool call's "
        "locations[].path, a diff content's path, or a session/list result's sessions[].cwd / "
        "additionalDirectories[] (schema.json: SessionInfo.cwd, 'Must be an absolute path.'). "
        "terminal/create.cwd is TERMINAL-004.",
    ),
    _r(
        "FS-001",
        "Line numbers the agent sends are 1-based",
        "MUST",
        OVERVIEW,
        "Argument requirements",
        "Line numbers are 1-based",
        "An fs/read_text_file with line 0, or a tool call location with line 0. The sentence "
        "has no keyword; it fixes the wire meaning of the field, hence MUST.",
    ),
    # -- terminals ----------------------------------------------------------------------
    _r(
        "TERMINAL-001",
        "terminal/* calls name a live terminal: one the client created and not yet released",
        "MUST",
        TERMINALS,
        "Releasing Terminals",
        "After release the terminal ID becomes invalid for all other terminal/* methods.",
        "A terminal/output, wait_for_exit, kill or release whose terminalId the client never "
        "returned from terminal/create, or already released. No keyword; a released id is "
        "invalid on the wire, hence MUST.",
        "terminal",
    ),
    _r(
        "TERMINAL-002",
        "Every terminal the agent creates is released (terminal/release); checked at the end "
        "of the turn that created it",
        "MUST",
        TERMINALS,
        "Executing Commands",
        "The Agent MUST release the terminal using terminal/release when it's no longer needed.",
        "A terminal created during a turn with no terminal/release for its id by the time the "
        "session/prompt response arrives. The spec does not say when a terminal is 'no longer "
        "needed'; turn end is the tester's reading.",
        "terminal",
    ),
    _r(
        "TERMINAL-003",
        "A terminal is embedded in a tool call only before it is released",
        "MUST",
        _schema("Terminal"),
        DESCRIPTION,
        "The terminal must be added before calling terminal/release.",
        "A tool_call or tool_call_update whose content has {type: terminal, terminalId: X} "
        "sent after the agent's terminal/release for X (or for an X the client never created).",
        "terminal",
    ),
    _r(
        "TERMINAL-004",
        "terminal/create's cwd is absolute",
        "MUST",
        _schema("CreateTerminalRequest.cwd"),
        DESCRIPTION,
        "Working directory for the command. Must be an absolute path.",
        "A terminal/create whose params.cwd is present and not an absolute path.",
        "terminal",
    ),
    _r(
        "TERMINAL-005",
        "A killed terminal is still released",
        "MUST",
        TERMINALS,
        "Killing Commands",
        "The Agent MUST still call terminal/release when it's done using it.",
        "After a terminal/kill for id X, no terminal/release for X by the end of the turn. "
        "Needs a turn in which the agent kills a terminal (e.g. a timeout).",
        "terminal",
    ),
    # -- elicitation --------------------------------------------------------------------
    _r(
        "ELICIT-001",
        "elicitation/create is well-formed: a form's requestedSchema is a flat object of "
        "primitive properties (required names among them); a url one has elicitationId and url",
        "MUST",
        _schema("ElicitationSchema.properties"),
        DESCRIPTION,
        "Property definitions (must be primitive types).",
        "A form-mode elicitation/create whose requestedSchema.properties has a property that is "
        "an object or array of objects, or whose required lists a name not among the "
        "properties; a url-mode one without elicitationId or url.",
        "elicitation",
    ),
    _r(
        "ELICIT-002",
        "elicitation/complete only names a url-mode elicitation the agent started",
        "MUST",
        ELICITATION,
        "URL completion",
        "It MUST send that notification only to the same Client that received the original "
        "request and include the original elicitationId.",
        "An elicitation/complete whose elicitationId is not that of a url-mode elicitation/"
        "create the agent sent on this connection.",
        "elicitation.url",
    ),
    _r(
        "ELICIT-003",
        "url-mode elicitationIds are unique among outstanding elicitations",
        "MUST",
        ELICITATION,
        "URL completion",
        "The Agent MUST keep each elicitationId unique among outstanding URL elicitations on "
        "that Agent-Client connection…",
        "A url-mode elicitation/create whose elicitationId equals that of an earlier url-mode "
        "elicitation not yet completed (no elicitation/complete for it yet).",
        "elicitation.url",
    ),
    _r(
        "ELICIT-004",
        "A form-mode elicitation carries no clickable URLs",
        "SHOULD",
        ELICITATION,
        "URL security",
        "Agents SHOULD NOT include URLs intended to be clickable in any field of a form-mode "
        "request.",
        "A form-mode elicitation/create whose message, or any title / description in "
        "requestedSchema, contains an http:// or https:// URL.",
        "elicitation.form",
    ),
    _r(
        "ELICIT-005",
        "A url-mode URL carries no credentials",
        "MUST",
        ELICITATION,
        "URL security",
        "Agents MUST NOT put credentials, personal data, or pre-authenticated access in the URL…",
        "A url-mode elicitation/create whose url has a userinfo part (user:pass@host) or a "
        "query parameter named like a secret (password, token, access_token, api_key, secret). "
        "Heuristic: personal data in general is not detectable.",
        "elicitation.url",
    ),
    _r(
        "ELICIT-006",
        "A url-mode URL uses HTTPS (outside localhost)",
        "SHOULD",
        ELICITATION,
        "URL security",
        "Agents … SHOULD use HTTPS outside development.",
        "A url-mode elicitation/create whose url scheme is not https, unless the host is "
        "localhost / 127.0.0.1 / ::1.",
        "elicitation.url",
    ),
    _r(
        "ELICIT-007",
        "A declined, cancelled or failed elicitation does not break the turn",
        "MUST",
        ELICITATION,
        "Responses",
        "They MUST handle decline, cancel, and failures by safely falling back, retrying, or "
        "failing the originating operation as appropriate.",
        "Needs a turn in which the agent sends elicitation/create and the client answers "
        "decline, cancel, or a JSON-RPC error. Violated when the agent then exits, or the "
        "session/prompt gets no response within the timeout. ('Agents MUST NOT assume an "
        "elicitation succeeds.' is the sentence before.)",
        "elicitation",
    ),
    # -- notices and compaction ---------------------------------------------------------
    _r(
        "ELICIT-008",
        "A form elicitation does not ask for a secret (password, token, API key...)",
        "MUST",
        ELICITATION,
        "Form mode",
        "Form mode MUST NOT be used to request secrets or credentials that grant access or "
        "authorize transactions, such as passwords, API keys, access or refresh tokens, private "
        "keys, recovery codes, or payment credentials.",
        "A form-mode elicitation/create with a property whose name is exactly one of the "
        "secrets the sentence lists (password, passwd, api_key / apikey / api-key, token, "
        "access_token, refresh_token, secret, client_secret, private_key, recovery_code(s), "
        "card_number, cvv, cvc, pin), ignoring case. A narrower check than the sentence (what "
        "else a field asks for needs a person), with no false finding on a field named "
        "otherwise.",
        "elicitation.form",
    ),
    _r(
        "NOTICE-001",
        "A notice update has a severity and a non-empty title",
        "MUST",
        _schema("Notice.title"),
        DESCRIPTION,
        "Required non-empty plain-text title that can stand alone.",
        "A notice update without severity, or with a title missing or empty. No keyword; the "
        "schema requires the field (minLength 1), hence MUST.",
        "session.notices",
    ),
    _r(
        "NOTICE-002",
        "Compaction updates are well-formed: compaction_update has compactionId and status, "
        "compaction_summary_chunk has compactionId and one content block",
        "MUST",
        _schema("CompactionUpdate.compactionId"),
        DESCRIPTION,
        "The Agent-owned ID of this compaction, unique within the session.",
        "A compaction_update without compactionId or status, or a compaction_summary_chunk "
        "without compactionId or content. No keyword; schema-required fields, hence MUST.",
        "session.compaction",
    ),
    # -- sessions -----------------------------------------------------------------------
    _r(
        "SESSION-001",
        "session/new returns a unique session id",
        "MUST",
        SESSION_SETUP,
        "Creating a Session",
        "The Agent MUST respond with a unique Session ID that identifies this conversation",
        "A session/new result without sessionId, or with a sessionId an earlier session/new "
        "on the connection already returned.",
    ),
    _r(
        "SESSION-002",
        "A relative cwd is rejected",
        "SHOULD",
        _schema("NewSessionRequest.cwd"),
        DESCRIPTION,
        "The working directory for this session. Must be an absolute path.",
        "Stimulus: session/new with a relative cwd. Violated when it succeeds. The sentence "
        "binds the client's request; no sentence says the agent must reject a bad one, hence "
        "SHOULD only.",
    ),
    _r(
        "SESSION-003",
        "A request for an unknown session id is answered (an error or not), without a crash",
        "SHOULD",
        SESSION_SETUP,
        "Closing a Session",
        "Agents MAY return an error if the session does not exist or is not currently active.",
        "Stimulus: session/prompt naming a session id never created. Violated when the agent "
        "exits on it (an answer that never comes while later requests are answered is RPC-013's "
        "or TURN-001's). Either answer holds: the only sentence is this MAY (for session/close), "
        "so an error is allowed, not required; hence SHOULD, for not crashing.",
    ),
    _r(
        "SESSION-004",
        "session/load replays the conversation before responding",
        "MUST",
        SESSION_SETUP,
        "Loading a Session",
        "When all the conversation entries have been streamed to the Client, the Agent MUST "
        "respond to the original session/load request.",
        "A session/update for the loaded session that arrives after the session/load response "
        "and before the next session/prompt. The result is an object ({}), although the page "
        "shows null; SCHEMA-001 judges its shape.",
        "loadSession",
    ),
    _r(
        "SESSION-005",
        "session/load replays the entire conversation",
        "MUST",
        SESSION_SETUP,
        "Loading a Session",
        "The Agent MUST replay the entire conversation to the Client in the form of "
        "session/update notifications (like session/prompt).",
        "Stimulus: a session with one completed turn (text prompt, agent text reply), then "
        "session/load of it on a new connection. Violated when no user_message_chunk or no "
        "agent_message_chunk for that session arrives before the session/load response.",
        "loadSession",
    ),
    _r(
        "SESSION-006",
        "session/resume does not replay the history",
        "MUST",
        SESSION_SETUP,
        "Resuming a Session",
        "Unlike session/load, the Agent MUST NOT replay the conversation history via "
        "session/update notifications before responding.",
        "Stimulus: a session with one completed turn, then session/resume of it on a new "
        "connection. Violated when a user_message_chunk, agent_message_chunk, "
        "agent_thought_chunk, tool_call or tool_call_update for that session arrives before "
        "the session/resume response.",
        "sessionCapabilities.resume",
    ),
    _r(
        "SESSION-007",
        "session/close cancels the session's running turn",
        "MUST",
        SESSION_SETUP,
        "Closing a Session",
        "The Agent MUST cancel any ongoing work for that session as if session/cancel had been "
        "called, then free the resources associated with the session.",
        "Needs a turn in progress when the client sends session/close for its session. "
        "Violated when that session/prompt is answered with a stop reason other than cancelled "
        "(as for session/cancel) more than a second after the close's answer, or when "
        "session/update notifications for the session arrive after the close's answer once "
        "the turn ended (or, while it runs on, more than a second after the close's answer: "
        "what was on its way may arrive). A turn that neither ends nor streams is slow.",
        "sessionCapabilities.close",
    ),
    _r(
        "SESSION-008",
        "Replayed message ids are unique",
        "SHOULD",
        SESSION_SETUP,
        "Loading a Session",
        "If the Agent provides message IDs during replay, each messageId is an opaque, unique "
        "identifier for the replayed message.",
        "During a session/load replay, two replayed messages (chunks separated by a chunk with "
        "another messageId or another kind) carry the same messageId. No keyword; SHOULD.",
        "loadSession",
    ),
    _r(
        "SESSION-009",
        "The session's cwd is used, not the agent's spawn directory",
        "MUST",
        SESSION_SETUP,
        "Working Directory",
        "MUST be used for the session regardless of where the Agent subprocess was spawned",
        "Stimulus: the agent is spawned in a directory other than the session cwd and the turn "
        "makes it touch files. Violated when an fs/* path, terminal/create cwd or tool call "
        "location lies under the spawn directory and not under the session cwd (or "
        "additionalDirectories).",
    ),
    _r(
        "SESSION-010",
        "File-system tool operations stay within the session's roots",
        "SHOULD",
        SESSION_SETUP,
        "Working Directory",
        "This root set SHOULD serve as a boundary for tool operations on the file system.",
        "An fs/read_text_file or fs/write_text_file path, a diff path or a terminal/create cwd "
        "outside cwd and every additionalDirectories entry of its session.",
    ),
    _r(
        "LIST-001",
        "session/list with nothing matching returns an empty sessions array",
        "MUST",
        SESSION_LIST,
        "Listing Sessions",
        "When no sessions match the criteria, the Agent MUST return an empty sessions array.",
        "Stimulus: session/list with cwd set to a fresh empty directory no session used. "
        "Violated when the result has no sessions array, or lists a session whose cwd is not "
        "that directory.",
        "sessionCapabilities.list",
    ),
    _r(
        "LIST-002",
        "session/list with an invalid cursor is an error",
        "SHOULD",
        SESSION_LIST,
        "Pagination",
        "Agents SHOULD return an error if the cursor is invalid",
        'Stimulus: session/list with cursor "acpkit-invalid-cursor". Violated when the answer '
        "is a success.",
        "sessionCapabilities.list",
    ),
    _r(
        "LIST-003",
        "session/list answers with the sessions it knows",
        "MUST",
        SESSION_LIST,
        "Listing Sessions",
        "The Agent MUST respond with a list of sessions and optional pagination metadata:",
        "Stimulus: a session/new with cwd D, then session/list with cwd D (following "
        "nextCursor). Violated when the answer is an error, has no sessions array, or the new "
        "session's id is in none of the pages.",
        "sessionCapabilities.list",
    ),
    _r(
        "LIST-004",
        "session_info_update does not carry sessionId, cwd or additionalDirectories",
        "SHOULD",
        SESSION_LIST,
        "Updating Session Metadata",
        "The sessionId, cwd, and additionalDirectories fields are not included in the update.",
        "A session/update whose update has sessionUpdate session_info_update and a sessionId, "
        "cwd or additionalDirectories key. No keyword; SHOULD.",
    ),
    _r(
        "DELETE-001",
        "Deleting an unknown or already-deleted session succeeds",
        "SHOULD",
        SESSION_DELETE,
        "Semantics",
        "Deleting an already-deleted session, or a session that never existed, SHOULD succeed "
        "silently.",
        "Stimulus: session/delete of an id never created, and a second session/delete of a "
        "deleted one. Violated when either is answered with an error.",
        "sessionCapabilities.delete",
    ),
    _r(
        "DELETE-002",
        "A deleted session no longer appears in session/list",
        "SHOULD",
        SESSION_DELETE,
        "Semantics",
        "Deleted sessions no longer appear in future session/list results.",
        "Stimulus: session/new, session/delete of it, then session/list (all pages). Violated "
        "when the deleted id is listed. Needs sessionCapabilities.list too. No keyword; SHOULD.",
        "sessionCapabilities.delete",
    ),
    # -- modes and config options -------------------------------------------------------
    _r(
        "MODE-001",
        "session/set_mode is accepted during a turn",
        "SHOULD",
        _schema("ClientRequest"),
        "SetSessionModeRequest variant",
        "This method can be called at any time during a session, whether the Agent is idle or "
        "actively generating a response.",
        "Needs a session whose result had modes and a session/set_mode to an advertised mode "
        "sent while a turn runs. Violated when it is answered with an error or not answered "
        "before the turn ends. No keyword (it permits the client); SHOULD.",
    ),
    _r(
        "MODE-002",
        "The current mode is one of the available modes",
        "SHOULD",
        SESSION_MODES,
        "SessionModeState",
        "The set of modes that the Agent can operate in",
        "A modes object (in a session/new, load or resume result) whose currentModeId is not "
        "the id of one of its availableModes, or a current_mode_update whose currentModeId "
        "(schema name; the page shows modeId) is not among the session's availableModes. No "
        "keyword; SHOULD.",
    ),
    _r(
        "CONFIG-001",
        "No boolean config options unless the client advertised them",
        "MUST",
        CONFIG_OPTIONS,
        "Boolean Config Options",
        'Agents MUST NOT include type: "boolean" options in configOptions payloads unless the '
        "Client advertised support.",
        "A configOptions array (session/new, load or resume result, set_config_option result, "
        "config_option_update) with an option of type boolean while the client's initialize "
        "did not advertise clientCapabilities.session.configOptions.boolean.",
    ),
    _r(
        "CONFIG-002",
        "Every config option has a current (default) value",
        "MUST",
        CONFIG_OPTIONS,
        "Default Values and Graceful Degradation",
        "Agents MUST always provide a default value for every configuration option.",
        "A config option without currentValue, or a select option whose currentValue is not "
        "the value of one of its options (flattened across groups).",
    ),
    _r(
        "CONFIG-003",
        "set_config_option answers with the complete option list",
        "MUST",
        CONFIG_OPTIONS,
        "From the Client",
        "The Agent MUST respond with the complete list of all configuration options and their "
        "current values:",
        "Needs a session/set_config_option to a valid value of an advertised option. Violated "
        "when the result has no configOptions, lacks the id of an option the session "
        "advertised that the change could not have removed (at least the option just set), or "
        "shows that option's currentValue other than the value set.",
    ),
    _r(
        "CONFIG-004",
        "config_option_update carries the complete option list",
        "SHOULD",
        CONFIG_OPTIONS,
        "From the Agent",
        "This notification also contains the complete configuration state.",
        "A config_option_update whose configOptions lacks an option id that the last full list "
        "(session result, set_config_option result or earlier update) had, while no other "
        "option's values changed. No keyword; SHOULD.",
    ),
    _r(
        "CONFIG-005",
        "Mode-like configuration is sent both as configOptions and as modes",
        "SHOULD",
        CONFIG_OPTIONS,
        "Relationship to Session Modes",
        "However, during the transition period, Agents that provide mode-like configuration "
        "SHOULD send both:",
        "A session/new, load or resume result with a config option of category mode but no "
        "modes, or with modes but no config option of category mode.",
    ),
    _r(
        "CONFIG-006",
        "modes and the mode config option agree",
        "SHOULD",
        CONFIG_OPTIONS,
        "Relationship to Session Modes",
        "Agents SHOULD keep both in sync to ensure consistent behavior regardless of which "
        "field the Client uses",
        "A session result (or the state after set_mode, set_config_option, current_mode_update "
        "or config_option_update) where modes.currentModeId differs from the currentValue of "
        "the category mode option.",
    ),
    _r(
        "CONFIG-007",
        "Config option categories are the spec's or start with _",
        "SHOULD",
        _schema("SessionConfigOptionCategory"),
        DESCRIPTION,
        "Category names that do not begin with _ are reserved for the ACP spec.",
        "A config option whose category is not mode, model, model_config or thought_level and "
        "does not start with _. No keyword; SHOULD (a newer spec may add categories).",
    ),
    # -- prompt turns -------------------------------------------------------------------
    _r(
        "TURN-001",
        "session/prompt is answered with a stop reason",
        "MUST",
        PROMPT_TURN,
        "4. Check for Completion",
        "If there are no pending tool calls, the turn ends and the Agent MUST respond to the "
        "original session/prompt request with a StopReason:",
        "A session/prompt answered with a result without stopReason, or never answered while "
        "the agent answers requests the client sent after it (judged when the agent is "
        "stopped; a late answer is judged when it comes, a prompt with nothing answered after "
        "it is slow). An error answer is not a stop reason, but the turn rules are then not "
        "applicable (the agent may need a model or a login).",
    ),
    _r(
        "TURN-002",
        "A turn's updates arrive before its response",
        "MUST",
        PROMPT_TURN,
        "Cancellation",
        "The Agent MAY send session/update notifications with content or tool call updates "
        "after receiving the session/cancel notification, but it MUST ensure that it does so "
        "before responding to the session/prompt request.",
        "A session/update for the session after its session/prompt response and before the "
        "next request for that session. Strictly this MUST covers turns the client cancelled; "
        "for other turns the ordering follows from TURN-001 (the response ends the turn).",
    ),
    _r(
        "TURN-003",
        "Tool calls have unique ids and reach completed / failed by the end of the turn",
        "SHOULD",
        TOOL_CALLS,
        "Creating",
        "A unique identifier for this tool call within the session",
        "A tool_call whose toolCallId an earlier tool_call of the same session used, in any "
        "turn (a session/load replay repeats the session's calls: its own stream), or a tool "
        "call announced in the turn whose last status is pending or in_progress when the "
        "session/prompt response arrives (except a cancelled turn). The quote is the toolCallId "
        "field text; no sentence requires a final status (prompt-turn: the turn ends when there "
        "are no pending tool calls), hence SHOULD.",
    ),
    _r(
        "TURN-004",
        "Plans are complete lists of well-formed entries",
        "MUST",
        AGENT_PLAN,
        "Updating Plans",
        "The Agent MUST send a complete list of all plan entries in each update and their "
        "current status.",
        "A plan update whose entries lack content, priority or status, or in which an entry (by "
        "its content) is back after one or more plan updates of the same turn left it out: an "
        "update that left it out was not the complete list. An entry dropped for good is not "
        "judged (the agent may rewrite its plan), nor one back in a later turn (a new prompt "
        "may get a new plan; in a session/load replay, turns are told apart by the user's "
        "message). Same rule in schema.json: Plan.entries.",
    ),
    _r(
        "TURN-005",
        "messageId is consistent: one id per message, never reused for another message",
        "SHOULD",
        PROMPT_TURN,
        "Message IDs",
        "Chunks with the same messageId belong to the same message; a changed messageId "
        "indicates a new message.",
        "A messageId that reappears after a chunk with another id or of another kind "
        "(agent / user / thought). The sentence defines meaning (no keyword) and messageId is "
        "optional ('The Agent MAY include…'), hence SHOULD.",
    ),
    _r(
        "TURN-006",
        "usage_update carries used and size",
        "MUST",
        PROMPT_TURN,
        "Session Usage Updates",
        "used and size are required and non-null token counts for the current session context.",
        "A usage_update whose used or size is missing, null or not a non-negative integer, or "
        "whose cost lacks amount or currency. No keyword; schema-required fields, hence MUST.",
    ),
    _r(
        "TURN-007",
        "stopReason cancelled only answers a cancelled turn",
        "MUST",
        _schema("StopReason"),
        "cancelled",
        "The turn was cancelled by the client via session/cancel.",
        "A session/prompt answered with stopReason cancelled although the client sent neither "
        "session/cancel nor session/close for that session during the turn. No keyword; the "
        "value's meaning is fixed by the schema, hence MUST. (prompt-turn.mdx: 'When an Agent "
        "stops a turn, it must specify the corresponding StopReason'.)",
    ),
    _r(
        "TOOL-001",
        "A permitted tool call is reported running",
        "SHOULD",
        PROMPT_TURN,
        "5. Tool Invocation and Status Reporting",
        "Once permission is granted (if required), the Agent SHOULD invoke the tool and report "
        "a status update marking the tool as in_progress:",
        "Needs a session/request_permission the client answers with an allow_once / "
        "allow_always option. Violated when the turn ends without any tool_call_update for that "
        "toolCallId with status in_progress, completed or failed.",
    ),
    _r(
        "TOOL-002",
        "Tool call updates name a tool call the session announced",
        "SHOULD",
        _schema("ToolCallUpdate"),
        DESCRIPTION,
        "An update to an existing tool call.",
        "A tool_call_update, or the toolCall of a session/request_permission (also a "
        "ToolCallUpdate), whose toolCallId no earlier tool_call of the session announced (in a "
        "session/load replay: announced live or earlier in the replay). Judged once per id. No "
        "keyword and the schema cannot require it; SHOULD. (tool-calls.mdx shows the tool_call "
        "first, then its updates and its permission request.)",
    ),
    _r(
        "TOOL-003",
        "A tool call's status only moves forward",
        "SHOULD",
        TOOL_CALLS,
        "Status",
        "Tool calls progress through different statuses during their lifecycle:",
        "A tool_call or tool_call_update that moves a tool call's status back (in_progress to "
        "pending) or changes it once it is completed or failed. No keyword; SHOULD (the "
        "statuses are listed in the order pending, in_progress, completed / failed).",
    ),
    # -- cancellation -------------------------------------------------------------------
    _r(
        "TOOL-004",
        "A tool call the model asks for is reported to the client",
        "SHOULD",
        TOOL_CALLS,
        "Creating",
        "When the language model requests a tool invocation, the Agent SHOULD report it to the "
        "Client:",
        "Needs --model-server: the conformance model knows the tool calls it asked for in each "
        "turn (its directive's token in their ids) and which of them the agent ran (their "
        "results came back to the model). Violated when the agent ran at least one in a turn "
        "that ended end_turn and sent no tool_call update in that turn. (A call the model "
        "answered to a side task of the agent, which carries the same conversation and ignores "
        "the answer, is never run and not counted; counting one for one would blame those.)",
    ),
    _r(
        "CANCEL-001",
        "session/cancel during a turn ends it with stopReason cancelled",
        "MUST",
        PROMPT_TURN,
        "Cancellation",
        "After all ongoing operations have been successfully aborted and pending updates have "
        "been sent, the Agent MUST respond to the original session/prompt request with the "
        "cancelled stop reason.",
        "Needs a turn where the client sent session/cancel. Violated when that session/prompt "
        "is answered with another stop reason more than a second after the cancel (sooner, "
        "the answer may have crossed the cancel), or never answered while the agent answers "
        "requests the client sent after it (judged when the agent is stopped). Same rule in "
        "schema.json: StopReason (cancelled).",
    ),
    _r(
        "CANCEL-002",
        "session/cancel while a permission request is pending ends the turn cancelled",
        "MUST",
        PROMPT_TURN,
        "Cancellation",
        "After all ongoing operations have been successfully aborted and pending updates have "
        "been sent, the Agent MUST respond to the original session/prompt request with the "
        "cancelled stop reason.",
        "Needs a turn where the client sends session/cancel while a session/request_permission "
        "is pending and then answers it with outcome cancelled. Violated when the session/prompt "
        "is not answered with stopReason cancelled.",
    ),
    _r(
        "CANCEL-003",
        "A cancelled turn is not answered with an error",
        "MUST",
        PROMPT_TURN,
        "Cancellation",
        "Agents MUST catch these errors and return the semantically meaningful cancelled stop "
        "reason, so that Clients can reliably confirm the cancellation.",
        "Needs a turn where the client sent session/cancel. Violated when that session/prompt "
        "is answered with a JSON-RPC error (CANCEL-001 reports any other stop reason).",
    ),
    _r(
        "CANCEL-004",
        "After session/cancel the agent starts no new tool work",
        "SHOULD",
        PROMPT_TURN,
        "Cancellation",
        "When the Agent receives this notification, it SHOULD stop all language model requests "
        "and all tool call invocations as soon as possible.",
        "Needs a turn where the client sent session/cancel. Violated when, after the cancel and "
        "before the session/prompt response, the agent sends a new session/request_permission, "
        "terminal/create, fs/write_text_file or a tool_call (a new toolCallId) for that session.",
    ),
    # -- MCP, authentication, extensibility ---------------------------------------------
    _r(
        "MCP-001",
        "The agent supports MCP over HTTP",
        "SHOULD",
        SESSION_SETUP,
        "MCP Servers",
        "While they are not required to by the spec, new Agents SHOULD support the HTTP "
        "transport to ensure compatibility with modern MCP servers.",
        "The initialize result's agentCapabilities.mcpCapabilities.http is absent or false.",
    ),
    _r(
        "MCP-002",
        "The agent connects to the stdio MCP servers the client gives",
        "SHOULD",
        SESSION_SETUP,
        "Checking Transport Support",
        "Agents SHOULD connect to all MCP servers specified by the Client.",
        "Stimulus: session/new with one stdio MCP server (acpkit.conformance.mcp_probe_server, "
        "which records what it receives), then a text turn. Violated when the server was never "
        "started, or never received initialize, a step timeout after the turn. A session/new "
        "refused with the server is not judged. Also the evidence for the MUST 'All Agents "
        "MUST support connecting to MCP servers via stdio' (Stdio Transport), which cannot "
        "tell an agent that does not support it from one that connects later: SHOULD.",
    ),
    _r(
        "AUTH-001",
        "No terminal auth method unless the client advertised auth.terminal",
        "MUST",
        _schema("AuthMethodTerminal"),
        DESCRIPTION,
        "Agents MUST advertise this method only when the client enabled its terminal "
        "authentication capability.",
        "An initialize result whose authMethods has an entry with type terminal while the "
        "client's initialize did not set clientCapabilities.auth.terminal to true.",
    ),
    _r(
        "AUTH-002",
        "After a successful authenticate, session/new is not refused as auth_required",
        "SHOULD",
        AUTHENTICATION,
        "Protocol-driven authentication",
        "After successful authentication, the Client can create new sessions without receiving "
        "an auth_required error for authentication-gated requests.",
        "Needs an authenticate that succeeds (an agent-type method that needs no user). "
        "Violated when a later session/new is answered with error -32000. No keyword; SHOULD.",
    ),
    _r(
        "AUTH-003",
        "A request refused for want of authentication is answered -32000 (auth_required)",
        "SHOULD",
        _schema("ErrorCode"),
        "Authentication required",
        "Authentication required: Authentication is required before this operation can be "
        "performed.",
        "Stimulus: session/new before authenticate, then authenticate with an auth method the "
        "agent handles itself, then session/new again. Violated when the first session/new is "
        "refused with a code other than -32000 and the second (after a successful "
        "authenticate) succeeds: the refusal was about authentication. No keyword; SHOULD.",
    ),
    _r(
        "EXT-001",
        "No custom fields at the root of spec types (extensions go in _meta)",
        "MUST",
        EXTENSIBILITY,
        "The _meta Field",
        "Implementations MUST NOT add any custom fields at the root of a type that's part of "
        "the specification.",
        "An object the agent sends (params, results, and the error object of an error "
        "answer: schema.json Error), typed by the v1 schema, with a key that is neither among "
        "that type's properties nor _meta. Keys defined by the unstable schema "
        "(schema.unstable.json) should be reported separately, not as violations.",
    ),
    _r(
        "EXT-002",
        "_meta trace-context keys are used only for W3C trace context",
        "SHOULD",
        EXTENSIBILITY,
        "The _meta Field",
        "The following root-level keys in _meta SHOULD be reserved for W3C trace context to "
        "guarantee interop with existing MCP implementations and OpenTelemetry tooling:",
        "A _meta object from the agent whose traceparent is not a string of the W3C form "
        "00-<32 hex>-<16 hex>-<2 hex>, or whose tracestate or baggage is not a string.",
    ),
    _r(
        "EXT-003",
        "Extensions the agent calls are advertised in its capabilities' _meta",
        "SHOULD",
        EXTENSIBILITY,
        "Advertising Custom Capabilities",
        "Implementations SHOULD use the _meta field in capability objects to advertise support "
        "for extensions and their methods:",
        "The agent sends a _-prefixed request or notification while its initialize result's "
        "agentCapabilities has no _meta. (Also extensibility.mdx, Custom Requests: 'extensions "
        "SHOULD advertise their custom capabilities…'.)",
    ),
    _r(
        "EXT-004",
        "Methods outside the spec start with an underscore",
        "SHOULD",
        EXTENSIBILITY,
        "Custom Requests",
        "In addition to the requests specified by the protocol, implementations MAY expose and "
        "call custom JSON-RPC requests as long as their name starts with an underscore (_).",
        "A request or notification from the agent whose method is not defined by the v1 schema "
        "and does not start with _; a notification may also start with $/ (schema.json, "
        "Protocol Level: 'Notifications whose methods start with '$/' are messages which are "
        "protocol implementation dependent'), a request may not. The spec's word is MAY; the "
        "condition it sets is what is checked, at SHOULD.",
    ),
    _r(
        "EXT-005",
        "Unusual values at _meta keys change nothing",
        "MUST",
        _schema("PromptRequest._meta"),
        DESCRIPTION,
        "Implementations MUST NOT make assumptions about values at these keys.",
        "Stimulus: after a session/new and a text session/prompt that succeed, the same two "
        "with _meta holding a null, a huge number, a list, a nested object and non-ASCII text "
        "under keys no one defines (on the prompt's params and on its text block). Violated "
        "when either is answered with an error. The same sentence is on every _meta property "
        "of the schema; an agent that refuses or fails on a value it did not expect assumed "
        "what the value would be. A key the agent does define (its own extension) is not sent.",
    ),
    # -- the remote transports (RFD "Streamable HTTP & WebSocket Transport") -------------
    _r(
        "HTTP-001",
        "POST initialize is answered 200 with a JSON body and an Acp-Connection-Id header",
        "MUST",
        REMOTE_RFD,
        "1. Adds an HTTP Transport",
        "The initialize request is special: it returns 200 OK with a JSON response body "
        "containing capabilities and the Acp-Connection-Id. The Acp-Connection-Id is also "
        "included in the response header.",
        "Streamable HTTP only. The POST of initialize (no Acp-Connection-Id) answered with "
        "another status, a Content-Type other than application/json, or no Acp-Connection-Id "
        "header. No keyword: a wire-format fact of the routing table, hence MUST.",
        transport="http",
    ),
    _r(
        "HTTP-002",
        "Every other POST is answered 202 Accepted at once (the answer comes on the stream)",
        "MUST",
        REMOTE_RFD,
        "6. Defines a unified routing model",
        "Send JSON-RPC message. initialize returns 200 with JSON body. All others return 202 "
        "Accepted immediately.",
        "Streamable HTTP only. A POST of a valid JSON-RPC message after initialize answered "
        "with another 2xx status (a 200 with the response in the body, say), or not answered "
        "at all within the step timeout (held until its work is done: not 'immediately'). "
        "No keyword: a wire-format fact of the routing table, hence MUST.",
        transport="http",
    ),
    _r(
        "HTTP-003",
        "A POST whose Content-Type is not application/json is refused with 415",
        "MUST",
        REMOTE_RFD,
        "Content Negotiation and Validation",
        "POST Content-Type MUST be application/json (415 otherwise).",
        "Stimulus: a valid request posted as text/plain on an initialized connection. "
        "Violated when the answer is not 415.",
        transport="http",
    ),
    _r(
        "HTTP-004",
        "A GET whose Accept lacks text/event-stream is refused with 406",
        "MUST",
        REMOTE_RFD,
        "Content Negotiation and Validation",
        "GET Accept MUST include text/event-stream (406 otherwise).",
        "Stimulus: a GET with the connection's Acp-Connection-Id and Accept: application/json. "
        "Violated when the answer is not 406.",
        transport="http",
    ),
    _r(
        "HTTP-005",
        "A GET, a non-initialize POST or a DELETE without Acp-Connection-Id gets 400",
        "MUST",
        REMOTE_RFD,
        "Unified Endpoint Routing",
        "Missing Acp-Connection-Id? → 400 Bad Request",
        "Stimulus: a GET (Accept: text/event-stream), a POST of a request other than "
        "initialize, and a DELETE, each without Acp-Connection-Id. Violated when one is not "
        "answered 400. No keyword: the routing tree is normative, hence MUST.",
        transport="http",
    ),
    _r(
        "HTTP-006",
        "A GET or POST naming an unknown Acp-Connection-Id gets 404",
        "MUST",
        REMOTE_RFD,
        "Unified Endpoint Routing",
        "Unknown Acp-Connection-Id? → 404 Not Found",
        "Stimulus: a GET and a POST with a connection id the server never issued. Violated "
        "when one is not answered 404. No keyword: the routing tree is normative, hence MUST.",
        transport="http",
    ),
    _r(
        "HTTP-007",
        "A batch (JSON array) POST is answered 501",
        "MUST",
        REMOTE_RFD,
        "Content Negotiation and Validation",
        "Batch JSON-RPC requests return 501.",
        "Stimulus: a one-request batch posted on an initialized connection. Violated when the "
        "answer is not 501. No keyword: a wire-format fact, hence MUST.",
        transport="http",
    ),
    _r(
        "HTTP-008",
        "DELETE ends the connection with 202; the id is unknown (404) afterwards",
        "MUST",
        REMOTE_RFD,
        "Unified Endpoint Routing",
        "Has Acp-Connection-Id? → Terminate connection and all associated sessions, return 202",
        "Stimulus: DELETE on an initialized connection, then a POST and a GET with its id. "
        "Violated when the DELETE is not answered 202, or a later request is not answered "
        "404 (derived: a terminated connection's id is unknown), or its GET stream stays "
        "open. No keyword: the routing tree is normative, hence MUST.",
        transport="http",
    ),
    _r(
        "HTTP-009",
        "Server messages arrive on the GET streams, one per SSE event, in the agent's order",
        "MUST",
        REMOTE_RFD,
        "1. Adds an HTTP Transport",
        "All server→client messages (responses to requests and unsolicited notifications) are "
        "delivered via SSE streams opened with GET.",
        "Throughout the run, and in a prompt turn: the connection's GET stream not answered "
        "200 text/event-stream, an SSE event (on any stream) whose data is not one JSON-RPC "
        "object, or a turn's session/update arriving after the turn's response on the stream "
        "(the RFD's prompt flow: notifications, then the response). A response that never "
        "arrives is TURN-001 or a timeout.",
        transport="http",
    ),
    _r(
        "HTTP-010",
        "A session-scoped POST without Acp-Session-Id gets 400",
        "MUST",
        REMOTE_RFD,
        "Unified Endpoint Routing",
        "Session-scoped request missing Acp-Session-Id? → 400 Bad Request",
        "Stimulus: session/prompt for a session of the connection posted without "
        "Acp-Session-Id. Violated when the answer is not 400. (Content Negotiation: 'POST "
        "requests for session-scoped operations MUST include both Acp-Connection-Id and "
        "Acp-Session-Id headers.')",
        transport="http",
    ),
    _r(
        "HTTP-011",
        "Streamable HTTP is served over HTTP/2 (h2 chosen over TLS by ALPN)",
        "MUST",
        REMOTE_RFD,
        "1. Adds an HTTP Transport",
        "Streamable HTTP transport MUST use HTTP/2.",
        "https URLs only: a TLS handshake offering h2 and http/1.1 by ALPN in which the server "
        "does not choose h2. Over cleartext http HTTP/2 is not negotiated by ALPN, so the rule "
        "is not judged.",
        transport="https",
    ),
    _r(
        "HTTP-012",
        "With its session-scoped GET open, a session's messages arrive there; session/new's "
        "response on the connection's GET",
        "MUST",
        REMOTE_RFD,
        "1. Adds an HTTP Transport",
        "The connection-scoped stream (scoped to Acp-Connection-Id) carries connection-level "
        "messages: responses to session/new and session/load (which the client cannot receive "
        "on a session-scoped stream because it does not yet have a sessionId), and any "
        "server-initiated messages not tied to a specific session. The session-scoped stream "
        "(scoped to Acp-Connection-Id + Acp-Session-Id) carries all messages for a single "
        "session: session update notifications, server-to-client requests like "
        "request_permission, and responses to session-scoped POSTs like session/prompt and "
        "session/cancel.",
        "Streamable HTTP only. Stimulus: on a fresh connection with its GET stream open, "
        "session/new; then the session's GET (Acp-Connection-Id + Acp-Session-Id) and a "
        "prompt turn with both streams read. Violated when session/new's response is not on "
        "the connection stream, when the session's GET is refused, or when a message of the "
        "session (a session/update or a request naming its sessionId, the response to a "
        "request posted with its Acp-Session-Id) arrives on the connection stream. Could not "
        "judge when the turn is not answered within the step timeout. (In the other probes "
        "the tester opens a session's GET only once a wait hears nothing, and reads every "
        "stream, so that a server that sends everything on the connection stream, as the "
        "RFD's 2026-04-23 revision had it, is judged on its ACP behaviour all the same.) No "
        "keyword: the stream model is the transport's definition (its 2026-05-04 revision "
        "split the single GET stream so that 'routing happens on HTTP headers rather than "
        "JSON-RPC body inspection'; a client reading a session's stream only for it never "
        "sees a message sent elsewhere). Hence MUST.",
        transport="http",
    ),
    _r(
        "HTTP-013",
        "A GET naming an Acp-Session-Id unknown on its connection gets 404",
        "MUST",
        REMOTE_RFD,
        "Content Negotiation and Validation",
        "An unknown Acp-Session-Id for the given connection returns 404.",
        "Stimulus: a GET (Accept: text/event-stream) with the id of an initialized connection "
        "and an Acp-Session-Id the server never issued. Violated when the answer is not 404 "
        "(a stream opened for it, say). No keyword: a wire-format fact, also in the routing "
        "tree ('Has Acp-Session-Id unknown for this connection? → 404 Not Found'), hence MUST.",
        transport="http",
    ),
    _r(
        "WS-001",
        "The WebSocket upgrade answer carries Acp-Connection-Id",
        "MUST",
        REMOTE_RFD,
        "Connection Establishment (GET with Upgrade)",
        "A new connection is created on upgrade. The Acp-Connection-Id is returned in the "
        "upgrade response headers.",
        "WebSocket only. The 101 answer to the upgrade has no Acp-Connection-Id header. No "
        "keyword: a wire-format fact, hence MUST.",
        transport="websocket",
    ),
    _r(
        "WS-002",
        "Every WebSocket message from the agent is a text frame with one JSON-RPC message",
        "MUST",
        REMOTE_RFD,
        "Bidirectional Messaging",
        "All messages are WebSocket text frames containing JSON-RPC.",
        "WebSocket only, throughout the run: a binary message from the agent, or a text "
        "message that is not one JSON-RPC object (a batch, two messages, a scalar).",
        transport="websocket",
    ),
    _r(
        "WS-003",
        "A binary frame from the client is ignored: not answered, not fatal",
        "MUST",
        REMOTE_RFD,
        "Bidirectional Messaging",
        "Binary frames are ignored.",
        "Stimulus: a binary frame holding a valid request, then a text request. Violated when "
        "the binary frame's request is answered, the connection closes, or the text request "
        "is not answered while a request sent after it is (neither answered: could not "
        "judge). No keyword: a wire-format fact, hence MUST.",
        transport="websocket",
    ),
)

RULES_BY_ID: dict[str, Rule] = {rule.id: rule for rule in RULES}


def _u(page: str, section: str, quote: str, level: str, reason: str) -> Uncheckable:
    return Uncheckable(page, section, quote, level, reason)


_MAY_NOTE = "MAY: a permission; either choice conforms, nothing to check."
_MCP_NOTE = (
    "Judged through MCP-002 (SHOULD): the tester hands the agent a stdio MCP server of its own "
    "and sees whether it connects; not connecting cannot tell an agent without stdio support "
    "from one that connects later, so no MUST finding is made of it."
)

UNCHECKABLE: tuple[Uncheckable, ...] = (
    _u(
        TRANSPORTS,
        TOP,
        "Agents and clients SHOULD support stdio whenever possible.",
        "SHOULD",
        "To fail it the tester would have to see an agent without stdio. One started as a "
        "command speaks stdio (that is how it is tested); one reached by URL may also have a "
        "stdio entry point, which no message on the connection reveals. 'Whenever possible' is "
        "the implementer's judgement too.",
    ),
    _u(
        TRANSPORTS,
        "stdio",
        "The agent MAY write UTF-8 strings to its standard error (stderr) for logging purposes.",
        "MAY",
        _MAY_NOTE + " (stderr is collected, never judged.)",
    ),
    _u(
        TRANSPORTS,
        "Custom Transports",
        "Implementers who choose to support custom transports MUST ensure they preserve the "
        "JSON-RPC message format and lifecycle requirements defined by ACP.",
        "MUST",
        "It binds a transport other than stdio and the RFD's HTTP and WebSocket: such a "
        "transport has no spec of its own for the tester to speak, so it cannot reach the agent"
        " over it. Over the transports it speaks, the JSON-RPC format and lifecycle are the "
        "FRAME-, RPC- and INIT- rules.",
    ),
    _u(
        TRANSPORTS,
        "Custom Transports",
        "Custom transports SHOULD document their specific connection establishment and "
        "message exchange patterns to aid interoperability.",
        "SHOULD",
        "About documentation written for people, not a message on any connection.",
    ),
    _u(
        OVERVIEW,
        "Conventions",
        "Unless explicitly defined otherwise in the schema, ACP-defined JSON object property "
        "keys use camelCase.",
        "(none)",
        "No check of its own: ACP-defined keys are the schema's, so SCHEMA-001 fails a mis-"
        "cased required key, and a mis-cased optional key is a custom root field (EXT-001). A "
        "sentence about how the schema names keys adds no observation beyond those two.",
    ),
    _u(
        INITIALIZATION,
        "Capabilities",
        "Therefore, Clients and Agents MUST treat all capabilities omitted in the initialize "
        "request as UNSUPPORTED.",
        "MUST",
        "No check of its own: its visible consequence is one per capability, each a rule: an fs"
        " or terminal call (CAP-001, CAP-002), an elicitation mode (CAP-003), a notice or "
        "compaction update (CAP-004), a boolean config option (CONFIG-001) and a terminal auth "
        "method (AUTH-001) sent to a client whose initialize omitted it.",
    ),
    _u(
        SESSION_SETUP,
        "Working Directory",
        "MUST remain the base for relative-path resolution",
        "MUST",
        "Visible only through a relative name the agent resolves, and every path on the wire is"
        " absolute (PATH-001): the resolution happens inside the agent. Its one visible "
        "symptom, a name resolved against the directory the agent was spawned in instead of the"
        " session cwd, is SESSION-009 (the spawn-directory probe).",
    ),
    _u(
        SESSION_SETUP,
        "Working Directory",
        "MUST be part of the session's effective root set",
        "MUST",
        "A definition of the root set (cwd plus additionalDirectories), not an act: the rules "
        "that use it are SESSION-010 (tool operations inside the root set) and SESSION-009.",
    ),
    _u(
        SESSION_SETUP,
        "MCP Servers",
        "All Agents MUST support the stdio transport, while HTTP and SSE transports are "
        "optional capabilities that can be checked during initialization.",
        "MUST",
        _MCP_NOTE,
    ),
    _u(
        SESSION_SETUP,
        "Stdio Transport",
        "All Agents MUST support connecting to MCP servers via stdio (standard input/output).",
        "MUST",
        _MCP_NOTE + " (Same in schema.json: McpServer, stdio variant.)",
    ),
    _u(
        SESSION_SETUP,
        "Resuming a Session",
        "The response MAY also include initial mode, model, or session configuration state "
        "when those features are supported by the Agent.",
        "MAY",
        _MAY_NOTE,
    ),
    _u(
        _schema("ClientRequest"),
        "LoadSessionRequest variant",
        "The agent should: … Restore the session context and conversation history",
        "SHOULD",
        "The restored history is visible as the replay (SESSION-005: the user's words and the "
        "agent's answer come back). Whether the restored context reaches the model is visible "
        "only to a model: with --model-server, the first turn after session/load would have to "
        "carry the earlier turn's words to the conformance model; no rule does this yet (an "
        "agent may also summarise or truncate its context, so the words need not be verbatim).",
    ),
    _u(
        SESSION_LIST,
        "Pagination",
        "Agents SHOULD enforce reasonable page sizes internally",
        "SHOULD",
        "'Reasonable' has no number in the spec, and a page size is only visible with more "
        "sessions stored than a page holds, which the tester would have to create by the "
        "hundreds in the agent's store.",
    ),
    _u(
        SESSION_MODES,
        "Initial state",
        "During Session Setup the Agent MAY return a list of modes it can operate in and the "
        "currently active mode:",
        "MAY",
        _MAY_NOTE,
    ),
    _u(
        _schema("ClientRequest"),
        "SetSessionModeRequest variant",
        "Agents may also change modes autonomously and notify the client via "
        "current_mode_update notifications.",
        "MAY",
        _MAY_NOTE,
    ),
    _u(
        CONFIG_OPTIONS,
        "Initial State",
        "During Session Setup the Agent MAY return a list of configuration options and their "
        "current values:",
        "MAY",
        _MAY_NOTE,
    ),
    _u(
        CONFIG_OPTIONS,
        "Option Categories",
        "Categories are for UX purposes only and MUST NOT be required for correctness.",
        "MUST",
        "It binds what an option means: nothing may depend on a client reading categories. The "
        "client never sends a category back (session/set_config_option names the option by id),"
        " so no agent behaviour can depend on the client's use of one; the id-only path is "
        "CONFIG-003's stimulus. 'Clients MUST handle missing or unknown categories' binds the "
        "client.",
    ),
    _u(
        CONFIG_OPTIONS,
        "Option Ordering",
        "Agents SHOULD place higher-priority options first in the list.",
        "SHOULD",
        "Priority is the agent's own judgement: any order conforms from outside.",
    ),
    _u(
        PROMPT_TURN,
        "2. Agent Processing",
        "Upon receiving the prompt request, the Agent processes the user's message and sends "
        "it to the language model, which MAY respond with text content, tool calls, or both.",
        "MAY",
        _MAY_NOTE + " (About the model, inside the agent.)",
    ),
    _u(
        PROMPT_TURN,
        "4. Check for Completion",
        "Agents MAY stop the turn at any point by returning the corresponding StopReason.",
        "MAY",
        _MAY_NOTE + " (So no rule may fail an early end_turn, max_tokens or refusal.)",
    ),
    _u(
        PROMPT_TURN,
        "5. Tool Invocation and Status Reporting",
        "Before proceeding with execution, the Agent MAY request permission from the Client "
        "via the session/request_permission method.",
        "MAY",
        _MAY_NOTE + " (Same in tool-calls.mdx, Requesting Permission.)",
    ),
    _u(
        PROMPT_TURN,
        "5. Tool Invocation and Status Reporting",
        "As the tool runs, the Agent MAY send additional updates, providing real-time feedback "
        "about tool execution progress.",
        "MAY",
        _MAY_NOTE,
    ),
    _u(
        PROMPT_TURN,
        "5. Tool Invocation and Status Reporting",
        "While tools execute on the Agent, they MAY leverage Client capabilities such as the "
        "file system (fs) methods to access resources within the Client's environment.",
        "MAY",
        _MAY_NOTE + " (The capability gate is CAP-001 / CAP-002.)",
    ),
    _u(
        PROMPT_TURN,
        "Message IDs",
        "The Agent MAY include an opaque, unique messageId on message chunks.",
        "MAY",
        _MAY_NOTE + " (TURN-005 judges only ids that are present.)",
    ),
    _u(
        PROMPT_TURN,
        "Session Usage Updates",
        "The Agent MAY also report current session context and cumulative cost state with a "
        "usage_update:",
        "MAY",
        _MAY_NOTE + " (TURN-006 judges the updates that are sent.)",
    ),
    _u(
        AGENT_PLAN,
        "Creating Plans",
        "When the language model creates an execution plan, the Agent SHOULD report it to the "
        "Client:",
        "SHOULD",
        "What counts as the model's plan is the agent's own (a todo tool, a planning step, a "
        "structured answer): the conformance model can send text and tool calls, but no model "
        "output is one every agent must recognise as 'an execution plan', so a turn without a "
        "plan update is never evidence. The plans that are sent are judged (TURN-004).",
    ),
    _u(
        AGENT_PLAN,
        "Updating Plans",
        "As the Agent progresses through the plan, it SHOULD report updates by sending more "
        "session/update notifications with the same structure.",
        "SHOULD",
        "Progress through a plan is internal: an update is due when the agent moves on, which "
        "the tester cannot see. Each update's structure is TURN-004 and SCHEMA-001.",
    ),
    _u(
        AGENT_PLAN,
        "Dynamic Planning",
        "The Agent MAY add, remove, or modify plan entries as it discovers new requirements or "
        "completes tasks, allowing it to adapt based on what it learns.",
        "MAY",
        _MAY_NOTE + " (So TURN-004 may not fail a plan for dropping entries by itself.)",
    ),
    _u(
        SLASH_COMMANDS,
        "Advertising commands",
        "After creating a session, the Agent MAY send a list of available commands via the "
        "available_commands_update session notification:",
        "MAY",
        _MAY_NOTE,
    ),
    _u(
        CANCELLATION,
        "$/cancel_request Notification",
        "MAY cancel the corresponding request activity and all nested activities related to "
        "that request",
        "MAY",
        _MAY_NOTE + " (RPC-010 only judges the response.)",
    ),
    _u(
        CANCELLATION,
        "$/cancel_request Notification",
        "MAY finish sending any pending notifications before responding",
        "MAY",
        _MAY_NOTE + " (So notifications between the cancel and the response are fine.)",
    ),
    _u(
        CANCELLATION,
        "Internal Cancellation",
        "When internal cancellation occurs, the executing party SHOULD: … Send the same -32800 "
        "(Cancelled) error response as if $/cancel_request was received",
        "SHOULD",
        "To judge it the tester must cause an internal cancellation it can recognise (a limit "
        "or timeout of the agent's own); none is defined by the spec, and from outside an "
        "internally cancelled request looks like any failed one, so no error code can be "
        "required of it.",
    ),
    _u(
        CANCELLATION,
        "Internal Cancellation",
        "When internal cancellation occurs, the executing party SHOULD: … Ensure consistent "
        "behavior regardless of cancellation source",
        "SHOULD",
        "Same: the tester cannot provoke an internal cancellation, so it cannot compare it with"
        " a $/cancel_request one (RPC-010 judges the latter).",
    ),
    _u(
        AUTHENTICATION,
        "Terminal authentication",
        "Agents SHOULD provide arguments that enter a login-only flow and exit when it completes.",
        "SHOULD",
        "Running the advertised command with its arguments starts a real login (a browser, a "
        "device code, credentials) on the tester's machine: only a user can complete it, and a "
        "tester must not start one unattended. Whether the flow exits when done needs it "
        "completed.",
    ),
    _u(
        AUTHENTICATION,
        "Logging Out",
        "After a successful logout, new sessions that require authentication will require the "
        "user to complete one of the advertised authentication flows again.",
        "(none)",
        "Needs a real login (credentials and a user) before the logout and again after it; an "
        "agent-type method that needs no user has nothing to 'require again'.",
    ),
    _u(
        AUTHENTICATION,
        "Active Sessions",
        "Agents may terminate them, keep them running, or return auth_required errors for "
        "future session activity.",
        "MAY",
        _MAY_NOTE,
    ),
    _u(
        ELICITATION,
        "Checking support",
        "Agents SHOULD provide a graceful fallback when the required mode is unavailable.",
        "SHOULD",
        "Which mode an agent needed is internal. Its visible parts are rules: not using the "
        "mode anyway (CAP-003), and the agent still working with no elicitation capability at "
        "all (INIT-006 runs session/new and a prompt with clientCapabilities {}); whether what "
        "it did instead was 'graceful' needs a person.",
    ),
    _u(
        ELICITATION,
        "Creating an elicitation",
        "Agents MUST bind each elicitation and related state to the receiving Client "
        "connection and, when authentication exists, the verified user identity.",
        "MUST",
        "The binding is agent state. Its one wire consequence, elicitation/complete only on the"
        " connection that got the elicitation/create, is ELICIT-002. A second connection cannot"
        " answer the first's elicitation (a JSON-RPC response answers a request that connection"
        " received), and the identity part needs two authenticated users.",
    ),
    _u(
        ELICITATION,
        "Form mode",
        "Clients SHOULD validate submitted values before responding, and Agents SHOULD "
        "validate them again.",
        "SHOULD",
        "A value the client sends that breaks the schema (the tester could send one) may be "
        "refused, re-asked, ignored or repaired: all conform, and an agent that validated and "
        "one that did not can answer the same way, so no observation tells them apart.",
    ),
    _u(
        ELICITATION,
        "Form mode",
        "Agents MUST use URL mode for sensitive interactions.",
        "MUST",
        "Which interactions are sensitive needs a person. The secrets the form-mode sentence "
        "names (passwords, API keys, tokens, keys, recovery codes, payment data) are "
        "ELICIT-008, by field name.",
    ),
    _u(
        ELICITATION,
        "Form mode",
        "If the Client does not support URL mode, the Agent MUST NOT fall back to form mode; "
        "it must use another safe flow or fail the operation.",
        "MUST",
        "A form that replaces a URL flow looks like any form: which flow the agent would have "
        "used is internal. A form asking for a named secret (what a URL flow is for) is "
        "ELICIT-008 whatever the client supports.",
    ),
    _u(
        ELICITATION,
        "URL mode",
        "Agents MUST NOT send credentials or tokens obtained through URL mode back over ACP or "
        "place them in Client or model context.",
        "MUST",
        "Needs a real external interaction that yields credentials the tester could recognise "
        "later on the wire; the tester has no such service.",
    ),
    _u(
        ELICITATION,
        "Responses",
        "Agents MUST NOT assume an elicitation succeeds.",
        "MUST",
        "An assumption is internal; its visible consequence (decline, cancel and errors handled"
        " without exiting or hanging the turn) is ELICIT-007.",
    ),
    _u(
        ELICITATION,
        "URL completion",
        "The Agent MAY send elicitation/complete after the external interaction finishes.",
        "MAY",
        _MAY_NOTE + " (ELICIT-002 judges the notifications that are sent.)",
    ),
    _u(
        ELICITATION,
        "URL security",
        "The Agent MUST verify that the authenticated user who started the elicitation is the "
        "same user who completes the external interaction.",
        "MUST",
        "Needs two authenticated users and a real external interaction completed by one of them.",
    ),
    _u(
        _schema("CreateElicitationResponse"),
        "other",
        "They MUST NOT treat it as a known elicitation action.",
        "MUST",
        "The tester could answer an action no schema defines; ending the turn, falling back or "
        "failing all conform afterwards, and treating it as accept (with no content) would show"
        " only in what the agent later does with data it never got, which depends on the agent.",
    ),
    _u(
        _schema("Notice"),
        DESCRIPTION,
        "Agents must not rely on a notice being received, displayed, or seen by the user.",
        "MUST",
        "A reliance is internal: a notice the client drops or never shows produces no message "
        "the agent could react to, so no traffic differs.",
    ),
    _u(
        _schema("ProtocolVersion"),
        DESCRIPTION,
        "Non-breaking changes should be introduced via capabilities.",
        "SHOULD",
        "Binds the protocol's evolution (its authors), not a running agent.",
    ),
    _u(
        REMOTE_RFD,
        "5. Requires cookie support on HTTP transports",
        "Clients MUST accept, store, and return cookies set by the server on all HTTP-based "
        "transports (Streamable HTTP and WebSocket).",
        "MUST",
        "Binds the client. The tester keeps the cookies a server sets for the connection's "
        "life and returns them, so that a server relying on them (session affinity) can be "
        "tested.",
    ),
    _u(
        REMOTE_RFD,
        "Bidirectional Messaging",
        "On disconnect, the server cleans up the connection and any associated sessions.",
        "MUST",
        "Not observable, and contradicted: after a disconnect the client is gone, and the RFD's"
        " 'Durability and reliability expectations' says sessions survive disconnects and can "
        "be resumed with session/load, so a session still loadable afterwards is no evidence "
        "either way. The connection id of a closed HTTP connection being unknown is HTTP-008.",
    ),
    _u(
        REMOTE_RFD,
        "Connection Establishment (GET with Upgrade)",
        "The client must still send initialize as the first JSON-RPC message over the "
        "WebSocket to negotiate capabilities before creating sessions.",
        "MUST",
        "Binds the client (the tester does so); a request before initialize is INIT's concern.",
    ),
)


class UnknownRule(ValueError):
    """A ``--rules`` / ``--skip`` selector that matches no rule."""


def split_selectors(values: Iterable[str]) -> list[str]:
    """Rule selectors from repeatable, comma-separated options (``--rules A,B --rules C``)."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _matches(rule: Rule, selector: str) -> bool:
    return rule.id == selector or rule.id.startswith(selector)


def select_rules(
    only: Iterable[str] = (), skip: Iterable[str] = (), rules: Sequence[Rule] = RULES
) -> tuple[Rule, ...]:
    """
    The rules kept by ``only`` (empty: all) minus ``skip``; selectors match an id exactly or
    as a prefix (``FRAME`` keeps the whole family). Raises `UnknownRule` for a selector that
    matches nothing.
    """
    only_list = [s.strip().upper() for s in only if s.strip()]
    skip_list = [s.strip().upper() for s in skip if s.strip()]
    for selector in only_list + skip_list:
        if not any(_matches(rule, selector) for rule in rules):
            raise UnknownRule(f"no rule matches {selector!r}")
    kept = [r for r in rules if not only_list or any(_matches(r, s) for s in only_list)]
    return tuple(r for r in kept if not any(_matches(r, s) for s in skip_list))


def _cell(text: str) -> str:
    """Text made safe for one Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _applies(rule: Rule, *, short: bool) -> str:
    if rule.transport is not None:
        over = {"http": "Streamable HTTP", "https": "Streamable HTTP over TLS"}.get(
            rule.transport, "WebSocket"
        )
        return f"{over} (`--url`)" if short else f"when the agent is tested over {over} (--url)"
    if rule.capability:
        return (
            f"`{rule.capability}` advertised"
            if short
            else f"when `{rule.capability}` is advertised"
        )
    return "always"


def render_markdown(
    rules: Sequence[Rule] = RULES, uncheckable: Sequence[Uncheckable] = UNCHECKABLE
) -> str:
    """The rule reference page (``docs/reference/conformance-rules.md``) as Markdown."""
    lines = [
        "# Conformance rules",
        "",
        "<!-- GENERATED by acpkit.conformance.rules.render_markdown(); do not edit. -->",
        "",
        "The rules `acpkit-conformance` checks against an agent, each with the ACP v1 sentence",
        "behind it. Pages are `docs/protocol/v1/<page>.mdx` in",
        "`agentclientprotocol/agent-client-protocol`; `schema.json: <Definition>` is a",
        "description in the v1 schema. Quotes are verbatim with the markdown removed; `…` marks",
        "a cut. The level is the spec's own word (MUST / MUST NOT: MUST; SHOULD, SHOULD NOT,",
        "'should': SHOULD); for a sentence without a keyword the check says which level was",
        "chosen and why. Where the prose and the schema disagree, the schema is the contract.",
        "The `HTTP` and `WS` rules come from the RFD",
        "`docs/rfds/streamable-http-websocket-transport.mdx` (the remote transports) and are",
        "judged only when the agent is tested by URL (`acpkit-conformance --url`).",
        "",
        "| id | level | rule | applies when |",
        "|---|---|---|---|",
    ]
    for rule in rules:
        applies = _applies(rule, short=True)
        lines.append(f"| `{rule.id}` | {rule.level} | {_cell(rule.title)} | {applies} |")
    lines.append("")
    for rule in rules:
        applies = _applies(rule, short=False)
        lines += [
            f"## {rule.id}: {rule.title}",
            "",
            f"- level: {rule.level}",
            f"- spec page: `{rule.page}`",
            f"- section: {rule.section}",
            f"- applies: {applies}",
            "",
            f"> {rule.quote}",
            "",
            f"Check: {rule.check}",
            "",
        ]
    lines += [
        "## Spec sentences not checked from outside",
        "",
        "Agent-binding sentences of the spec that no rule judges, and why: MAY sentences",
        "(permissions), and obligations about the agent's internals, the user, or a real MCP",
        "server or external service.",
        "",
        "Re-argued entry by entry (issue 23, item 6d): each sentence was read in its page and",
        "asked what would have to be visible to judge it. One was turned into a rule (the _meta",
        "sentence, now EXT-005: unusual values at unknown _meta keys are sent and the answers",
        "compared); 51 are kept: 18 MAY sentences (a permission: either choice conforms), 12",
        "whose visible part is already a rule named in the row, 20 that need what no",
        "client-side tester has (a user, real credentials or an external service, the agent's",
        "internal state or intent, another transport) or bind someone else (the client, the",
        "spec's authors), and 1 that a rule could judge with --model-server but none does yet",
        "(the context restored by session/load). The why column says, for each, what would",
        "have to be visible and why it is not.",
        "",
        "| page | sentence | level | why |",
        "|---|---|---|---|",
    ]
    for item in uncheckable:
        lines.append(
            f"| `{item.page}` ({_cell(item.section)}) | {_cell(item.quote)} | {item.level} | "
            f"{_cell(item.reason)} |"
        )
    lines.append("")
    return "\n".join(lines)
