"""The client's reference and how-to pages stay true to the code."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from acpkit import codec, schema
from acpkit_client import cli
from acpkit_client.conversation import Conversation

DOCS = Path(__file__).resolve().parent.parent.parent / "docs"


def table_first_column(text: str, header: str) -> list[str]:
    """The first column of the Markdown table right after ``header``."""
    section = text.split(header, 1)[1]
    rows: list[str] = []
    for line in section.splitlines()[1:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        rows.append(line.split("|")[1].strip())
    return rows[2:]


def test_session_update_table_matches_the_model() -> None:
    """Each kind the table says is shown is shown; 'anything else' is ignored and counted."""
    text = (DOCS / "reference" / "client-protocol.md").read_text(encoding="utf-8")
    kinds = [row.strip("`") for row in table_first_column(text, "## Session updates")]
    assert kinds[-1] == "anything else"
    samples: dict[str, dict[str, Any]] = {
        "agent_message_chunk": {"content": {"type": "text", "text": "a"}},
        "agent_thought_chunk": {"content": {"type": "text", "text": "a"}},
        "user_message_chunk": {"content": {"type": "text", "text": "a"}},
        "tool_call": {"toolCallId": "t", "title": "T"},
        "tool_call_update": {"toolCallId": "u"},
        "plan": {"entries": []},
        "available_commands_update": {"availableCommands": []},
        "usage_update": {"used": 1, "size": 2},
    }
    assert sorted(kinds[:-1]) == sorted(samples)
    conversation = Conversation()
    for kind, fields in samples.items():
        update = codec.decode(
            schema.SessionNotification,
            {"sessionId": "s", "update": {"sessionUpdate": kind, **fields}},
        ).update
        conversation.apply(update)
    assert conversation.ignored.count == 0
    for kind in ("current_mode_update", "brand_new_kind"):
        update = codec.decode(
            schema.SessionNotification,
            {"sessionId": "s", "update": {"sessionUpdate": kind, "currentModeId": "x"}},
        ).update
        conversation.apply(update)
    assert conversation.ignored.count == 2


def test_exit_status_table_matches_the_cli() -> None:
    """The how-to's exit statuses are the CLI's EXIT_* constants, every one of them, and
    the CLI docstring agrees."""
    text = (DOCS / "how-to" / "ask-from-the-command-line.md").read_text(encoding="utf-8")
    documented = {int(row) for row in table_first_column(text, "## Exit status")}
    constants = {value for name, value in vars(cli).items() if name.startswith("EXIT_")}
    assert {cli.EXIT_CANCELLED, cli.EXIT_TERMINATED, cli.EXIT_CANCELLED_BY_AGENT} <= constants
    assert documented == constants
    in_docstring = {int(code) for code in re.findall(r"^(\d+)\s{2,}", cli.__doc__ or "", re.M)}
    assert in_docstring == constants
