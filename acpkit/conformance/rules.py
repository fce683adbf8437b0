"""
The conformance rule catalogue: every rule the tester checks, with the spec sentence behind it.

Each `Rule` has a stable id (``FAMILY-NNN``), a title, the quoted spec sentence and the page it
comes from (``docs/protocol/v1/<page>.mdx`` of ``agentclientprotocol/agent-client-protocol``, or
``schema`` for a description in ``schema.json``), a level (``MUST`` / ``SHOULD``) and the
capability that makes it applicable (``None`` when it always applies).

`render_markdown` produces ``docs/reference/conformance-rules.md``; a test keeps it current::

    python -c "from acpkit.conformance.rules import render_markdown; print(render_markdown())"
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

__all__ = [
    "RULES",
    "RULES_BY_ID",
    "Rule",
    "UnknownRule",
    "render_markdown",
    "select_rules",
]


@attrs.frozen
class Rule:
    """One checkable obligation of an ACP agent."""

    id: str
    title: str
    level: str
    page: str
    quote: str
    capability: str | None = None

    @property
    def family(self) -> str:
        """The id's prefix (``FRAME`` for ``FRAME-003``)."""
        return self.id.split("-", 1)[0]


def _r(
    rule_id: str, title: str, level: str, page: str, quote: str, capability: str | None = None
) -> Rule:
    return Rule(rule_id, title, level, page, quote, capability)


RULES: tuple[Rule, ...] = (
    # -- framing and bytes --------------------------------------------------------------
    _r(
        "FRAME-001",
        "Everything the agent writes on stdout is UTF-8",
        "MUST",
        "transports",
        "JSON-RPC messages MUST be UTF-8 encoded.",
    ),
    _r(
        "FRAME-002",
        "One JSON-RPC message object per line (no batches, no scalars, no embedded newlines)",
        "MUST",
        "transports",
        "Messages are delimited by newlines (\\n), and MUST NOT contain embedded newlines. "
        "Messages are individual JSON-RPC requests, notifications, or responses.",
    ),
    _r(
        "FRAME-003",
        "Nothing but ACP frames on stdout (no banner, no log line)",
        "MUST",
        "transports",
        "The agent MUST NOT write anything to its stdout that is not a valid ACP message.",
    ),
    _r(
        "FRAME-004",
        "A message split across writes (even inside a UTF-8 character) is read as one message",
        "MUST",
        "transports",
        "Messages are delimited by newlines (\\n), and MUST NOT contain embedded newlines.",
    ),
    _r(
        "FRAME-005",
        "Several messages in one write are all read and answered in order",
        "MUST",
        "transports",
        "Messages are delimited by newlines (\\n), and MUST NOT contain embedded newlines.",
    ),
    _r(
        "FRAME-006",
        "A CRLF line end (the CR is JSON whitespace) is accepted",
        "SHOULD",
        "transports",
        "Messages are delimited by newlines (\\n).",
    ),
    _r(
        "FRAME-007",
        "A long line (1 MiB; 16 MiB in the full profile) is read, not fatal",
        "SHOULD",
        "transports",
        "Messages are delimited by newlines (\\n), and MUST NOT contain embedded newlines.",
    ),
    _r(
        "FRAME-008",
        "A junk line on stdin is not fatal: later requests are still answered",
        "SHOULD",
        "overview",
        "Parse error: Invalid JSON was received by the server (-32700).",
    ),
    _r(
        "FRAME-009",
        "After stdin is closed (EOF, even mid-turn) the agent exits within the timeout",
        "SHOULD",
        "transports",
        "The client launches the agent as a subprocess ... the agent reads JSON-RPC messages "
        "from its standard input (stdin).",
    ),
    # -- JSON-RPC envelope --------------------------------------------------------------
    _r(
        "RPC-001",
        "Response ids echo the request id exactly, type included",
        "MUST",
        "schema",
        "The Server MUST reply with the same value in the Response object if included.",
    ),
    _r(
        "RPC-002",
        "Notifications are never answered",
        "MUST",
        "overview",
        "Notifications never receive responses (success or error).",
    ),
    _r(
        "RPC-003",
        "Invalid JSON is answered with -32700 (parse error)",
        "SHOULD",
        "schema",
        "Parse error: Invalid JSON was received by the server. An error occurred on the server "
        "while parsing the JSON text.",
    ),
    _r(
        "RPC-004",
        "An invalid request (array, missing jsonrpc, bad id) is answered with -32600",
        "SHOULD",
        "schema",
        "Invalid request: The JSON sent is not a valid Request object.",
    ),
    _r(
        "RPC-005",
        "An unknown method is answered with -32601",
        "MUST",
        "extensibility",
        "Upon receiving a custom request, implementations MUST respond accordingly with the "
        "provided id ... an unknown method gets -32601 (Method not found).",
    ),
    _r(
        "RPC-006",
        "Invalid params are answered with -32602",
        "SHOULD",
        "schema",
        "Invalid params: Invalid method parameter(s).",
    ),
    _r(
        "RPC-007",
        "Unknown and _vendor notifications are ignored (no reply, no crash)",
        "SHOULD",
        "extensibility",
        "Unknown notifications SHOULD be ignored.",
    ),
    _r(
        "RPC-008",
        "An unknown _vendor request is answered with -32601",
        "MUST",
        "extensibility",
        "Upon receiving a custom request, implementations MUST respond accordingly with the "
        "provided id.",
    ),
    _r(
        "RPC-009",
        "Every response has exactly one of result / error; errors carry integer code and message",
        "MUST",
        "overview",
        "Successes carry result, errors carry error{code,message}.",
    ),
    _r(
        "RPC-010",
        "$/cancel_request: the request is answered exactly once (result or -32800); "
        "a cancel for an answered id is ignored",
        "MUST",
        "cancellation",
        "MUST send one of these responses for the original request: a valid response ... "
        "[or] an error response with code -32800.",
    ),
    # -- schema -------------------------------------------------------------------------
    _r(
        "SCHEMA-001",
        "Every message the agent sends is valid against the official ACP v1 schema",
        "MUST",
        "schema",
        "The schema is the contract (acpkit/schemas/v1/schema.json).",
    ),
    # -- initialization -----------------------------------------------------------------
    _r(
        "INIT-001",
        "initialize is answered with a protocol version and capabilities",
        "MUST",
        "initialization",
        "The agent MUST respond with the chosen protocol version and the capabilities it supports.",
    ),
    _r(
        "INIT-002",
        "Version negotiation: the same version when supported, else the agent's latest",
        "MUST",
        "initialization",
        "If the Agent supports the requested version, it MUST respond with the same version. "
        "Otherwise, the Agent MUST respond with the latest version it supports.",
    ),
    # -- capabilities -------------------------------------------------------------------
    _r(
        "CAP-001",
        "No fs/* call unless the client advertised the matching fs capability",
        "MUST",
        "file-system",
        "If readTextFile or writeTextFile is false or not present, the Agent MUST NOT attempt "
        "to call the corresponding filesystem method.",
    ),
    _r(
        "CAP-002",
        "No terminal/* call unless the client advertised terminal",
        "MUST",
        "terminals",
        "If terminal is false or not present, the Agent MUST NOT attempt to call any terminal "
        "methods.",
    ),
    _r(
        "CAP-003",
        "No elicitation (or elicitation mode) the client did not advertise",
        "MUST",
        "elicitation",
        "Agents MUST NOT request a mode the Client has not advertised.",
    ),
    _r(
        "CAP-004",
        "No notice / compaction_* updates unless the client advertised them",
        "MUST",
        "schema",
        "Agents MUST only send this update when the Client advertised the session.notices "
        "[resp. session.compaction] Client capability.",
    ),
    _r(
        "CAP-005",
        "An advertised loadSession works: session/load of a known session succeeds",
        "MUST",
        "session-setup",
        "Clients and Agents MUST treat all capabilities omitted in the initialize request as "
        "UNSUPPORTED (so an advertised one is supported).",
        "loadSession",
    ),
    _r(
        "CONTENT-001",
        "Text and ResourceLink prompt content are accepted",
        "MUST",
        "initialization",
        "All Agents MUST support ContentBlock::Text and ContentBlock::ResourceLink in "
        "session/prompt requests.",
    ),
    # -- terminals ----------------------------------------------------------------------
    _r(
        "TERMINAL-001",
        "terminal/* calls name a live terminal: one the client created and not yet released",
        "MUST",
        "terminals",
        "After release the terminal ID becomes invalid for all other terminal/* methods.",
        "terminal",
    ),
    _r(
        "TERMINAL-002",
        "Every terminal created during a turn is released (terminal/release) before the turn ends",
        "MUST",
        "terminals",
        "The Agent MUST release the terminal using terminal/release when it's no longer "
        "needed. ... The Agent MUST still call terminal/release when it's done using it.",
        "terminal",
    ),
    # -- elicitation --------------------------------------------------------------------
    _r(
        "ELICIT-001",
        "elicitation/create is well-formed: a form's requestedSchema is a flat object of "
        "primitive properties (required names among them); a url one has elicitationId and url",
        "MUST",
        "schema",
        "Type-safe elicitation schema for requesting structured user input. This represents a "
        "JSON Schema object with primitive-typed properties, as required by the elicitation "
        "specification. ... Property definitions (must be primitive types).",
        "elicitation",
    ),
    _r(
        "ELICIT-002",
        "elicitation/complete only names a url-mode elicitation the agent started",
        "MUST",
        "schema",
        "Notification sent by the agent when a URL-based elicitation is complete. "
        "elicitationId: The ID of the elicitation that completed.",
        "elicitation.url",
    ),
    # -- notices and compaction ---------------------------------------------------------
    _r(
        "NOTICE-001",
        "A notice update has a severity and a non-empty title",
        "MUST",
        "schema",
        "Agents MUST only send notices when the Client advertised the session.notices Client "
        "capability. ... title: Required non-empty plain-text title that can stand alone.",
        "session.notices",
    ),
    _r(
        "NOTICE-002",
        "Compaction updates are well-formed: compaction_update has compactionId and status, "
        "compaction_summary_chunk has compactionId and one content block",
        "MUST",
        "schema",
        "Agents MUST only send this update when the Client advertised the session.compaction "
        "Client capability. ... compactionId: The Agent-owned ID of this compaction, unique "
        "within the session.",
        "session.compaction",
    ),
    # -- sessions -----------------------------------------------------------------------
    _r(
        "SESSION-001",
        "session/new returns a unique session id",
        "MUST",
        "session-setup",
        "The Agent MUST respond with a unique Session ID.",
    ),
    _r(
        "SESSION-002",
        "A relative cwd is rejected",
        "SHOULD",
        "session-setup",
        "cwd MUST be an absolute path (the agent should reject a relative one).",
    ),
    _r(
        "SESSION-003",
        "A request for an unknown session id gets an error (not a success, not a crash)",
        "SHOULD",
        "session-setup",
        "The Agent MAY error for an unknown session.",
    ),
    _r(
        "SESSION-004",
        "session/load replays the conversation before responding",
        "MUST",
        "session-setup",
        "When all the conversation entries have been streamed to the Client, the Agent MUST "
        "respond to the original session/load request.",
        "loadSession",
    ),
    # -- prompt turns -------------------------------------------------------------------
    _r(
        "TURN-001",
        "session/prompt is answered with a stop reason",
        "MUST",
        "prompt-turn",
        "If there are no pending tool calls, the turn ends and the Agent MUST respond to the "
        "original session/prompt request with a StopReason.",
    ),
    _r(
        "TURN-002",
        "A turn's updates arrive before its response",
        "MUST",
        "prompt-turn",
        "The Agent MAY send updates after session/cancel but it MUST ensure that it does so "
        "before responding to the session/prompt request.",
    ),
    _r(
        "TURN-003",
        "Tool calls have unique ids and reach completed / failed by the end of the turn",
        "SHOULD",
        "tool-calls",
        "All fields except toolCallId are optional ... a tool call reports pending, "
        "in_progress, then completed or failed.",
    ),
    _r(
        "TURN-004",
        "Plans are complete lists of well-formed entries",
        "MUST",
        "agent-plan",
        "The Agent MUST send a complete list of all plan entries in each update.",
    ),
    _r(
        "TURN-005",
        "messageId is consistent: one id per message, never reused for another message",
        "SHOULD",
        "prompt-turn",
        "Chunks with the same messageId belong to one message and a changed id starts a new one.",
    ),
    _r(
        "TURN-006",
        "usage_update carries used and size",
        "MUST",
        "prompt-turn",
        "used and size are required and non-null.",
    ),
    # -- cancellation -------------------------------------------------------------------
    _r(
        "CANCEL-001",
        "session/cancel during a turn ends it with stopReason cancelled",
        "MUST",
        "prompt-turn",
        "This stop reason MUST be returned when the client sends a session/cancel notification, "
        "even if the cancellation causes exceptions.",
    ),
    _r(
        "CANCEL-002",
        "session/cancel while a permission request is pending ends the turn cancelled",
        "MUST",
        "prompt-turn",
        "The Client MUST respond to all pending session/request_permission requests with the "
        "cancelled outcome ... the Agent MUST respond to the original session/prompt request "
        "with the cancelled stop reason.",
    ),
)

RULES_BY_ID: dict[str, Rule] = {rule.id: rule for rule in RULES}


class UnknownRule(ValueError):
    """A ``--rules`` / ``--skip`` selector that matches no rule."""


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


def render_markdown(rules: Sequence[Rule] = RULES) -> str:
    """The rule reference page (``docs/reference/conformance-rules.md``) as Markdown."""
    lines = [
        "# Conformance rules",
        "",
        "<!-- GENERATED by acpkit.conformance.rules.render_markdown(); do not edit. -->",
        "",
        "The rules `acpkit-conformance` checks against an agent. Pages are",
        "`docs/protocol/v1/<page>.mdx` in `agentclientprotocol/agent-client-protocol`;",
        "`schema` means a description in `schema.json`. Quotes are abridged.",
        "",
        "| id | level | rule | applies when |",
        "|---|---|---|---|",
    ]
    for rule in rules:
        applies = f"`{rule.capability}` advertised" if rule.capability else "always"
        lines.append(f"| `{rule.id}` | {rule.level} | {rule.title} | {applies} |")
    lines.append("")
    for rule in rules:
        applies = f"when `{rule.capability}` is advertised" if rule.capability else "always"
        lines += [
            f"## {rule.id}: {rule.title}",
            "",
            f"- level: {rule.level}",
            f"- spec page: `{rule.page}`",
            f"- applies: {applies}",
            "",
            f"> {rule.quote}",
            "",
        ]
    return "\n".join(lines)
