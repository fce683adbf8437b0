"""The **Agent status** report, as plain text lines any front end can show.

It says which agents files were loaded (or that the built-in default is used), which
were refused and why, each agent's command line, and for each started agent: its state,
what failed (spawn, version, login, exit status and stderr tail), the commands it
announced with their descriptions, how many updates were ignored (with the last one
and its error), and how many lines the connection dropped before they could be read as a
message at all: undecodable ones (not UTF-8, not JSON, not a valid JSON-RPC message; an
update among them cannot be told from the rest) and oversized ones (over the line limit).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from acpkit_client.agents import AgentRun, describe_auth_methods
from acpkit_client.completion import shown_hint
from acpkit_client.config import AgentsConfig
from acpkit_client.conversation import Conversation

__all__ = ["LAST_UPDATE_LIMIT", "agent_lines", "dropped_lines", "status_report", "status_text"]

#: The shown form of the last ignored update is cut at this many characters.
LAST_UPDATE_LIMIT = 300


def _short(value: object) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > LAST_UPDATE_LIMIT:
        text = text[:LAST_UPDATE_LIMIT] + "…"
    return text


def dropped_lines(run: AgentRun) -> tuple[int, int]:
    """``(undecodable, oversized)``: the incoming lines the run's connection dropped."""
    connection = run.connection
    if connection is None:
        return 0, 0
    protocol = connection.protocol
    # Read with getattr: a core without these counters counts nothing.
    undecodable = int(getattr(protocol, "undecodable_dropped", 0))
    oversized = int(getattr(protocol, "oversized_dropped", 0))
    return undecodable, oversized


def agent_lines(run: AgentRun, conversation: Conversation | None = None) -> list[str]:
    """The report lines of one started agent."""
    lines = [f"Agent {run.name!r}: {run.state.value}"]
    key = "url" if run.entry.url is not None else "command"  # headers never shown
    lines.append(f"  {key}: {run.entry.command_line()}")
    lines.append(f"  cwd: {run.cwd}")
    response = run.initialize_response
    if response is not None:
        info = response.agent_info
        who = f"{info.name} {info.version}" if info is not None else "(no agentInfo)"
        lines.append(f"  agent: {who}, protocol version {response.protocol_version}")
        if run.auth_methods:
            methods = describe_auth_methods(run.auth_methods)
            lines.append(f"  login methods listed (acpkit-client cannot log in): {methods}")
    for note in run.notes:
        lines.append(f"  note: {note}")
    for problem in run.problems:
        first, *rest = problem.splitlines() or [""]
        lines.append(f"  failed: {first}")
        lines.extend(f"    {line}" for line in rest)
    if conversation is not None:
        if conversation.commands:
            lines.append("  commands:")
            for command in conversation.commands:
                hint = shown_hint(command.input_hint)
                hint = f" {hint}" if hint else ""
                lines.append(f"    /{command.name}{hint} — {command.description}")
        else:
            lines.append("  commands: none announced")
        ignored = conversation.ignored
        lines.append(f"  ignored updates: {ignored.count}")
        if ignored.count:
            lines.append(f"    last: {_short(ignored.last)}")
            lines.append(f"    why: {ignored.last_error}")
    if run.connection is not None:
        undecodable, oversized = dropped_lines(run)
        lines.append(f"  dropped lines: {undecodable} undecodable, {oversized} oversized")
        replaced = int(getattr(run.connection.protocol, "invalid_utf8_replaced", 0))
        if replaced:
            lines.append(f"  invalid UTF-8: {replaced} line(s) kept, bad bytes shown as \ufffd")
    return lines


def status_report(
    config: AgentsConfig | None,
    agents: Iterable[tuple[AgentRun, Conversation | None]] = (),
) -> list[str]:
    """
    The whole report: the files (``config``, None when loading was not tried), the
    configured agents with their command lines, then each started agent's details.
    """
    lines: list[str] = []
    if config is not None:
        if config.builtin_default:
            lines.append("No agents file found: using the built-in reference agent.")
        for path in config.files_read:
            lines.append(f"Loaded {path}")
        for error in config.errors:
            lines.append(f"Refused {error.path}: {error.reason}")
            if error.path in config.kept:
                lines.append("  its agents as last loaded are kept until it is fixed")
        if config.agents:
            lines.append("Agents:")
            for entry in config.agents:
                lines.append(f"  {entry.name}: {entry.command_line()}  ({entry.source})")
        else:
            lines.append("No agents are configured.")
    for run, conversation in agents:
        lines.extend(agent_lines(run, conversation))
    return lines


def status_text(lines: Sequence[str]) -> str:
    """The report as one string, a line each."""
    return "\n".join(lines) + "\n"
