"""
``session/load``: a saved session read back, and its history replayed to the client.

Sent before the response, one notification per element of the saved history, in order
(the system prompt is not sent):

=====================================  ==================================================
saved element                          notification
=====================================  ==================================================
user message                           ``user_message_chunk`` with its text
compaction summary                     ``agent_message_chunk`` ``🗜️ <summary>``
model text                             ``agent_message_chunk``
tool call with its recorded answer     ``tool_call`` ``completed``: ``toolCallId`` the
                                       id the client saw live, ``title``/``kind`` as live
                                       (saved with the call; a file of an older agent:
                                       computed from the tool, if it is known now),
                                       ``rawInput``, ``rawOutput.output`` and a ``text``
                                       content (``failed`` when the answer says the call
                                       was interrupted or cancelled)
tool call without a recorded answer    ``tool_call`` ``failed``, no content
=====================================  ==================================================

A call's recorded answer is the ``tool`` message with its id among those right after its
assistant message (a model may reuse ids in later turns).  ``toolCallId`` is the live id
saved with the call (:data:`~acpkit_agent.session.LIVE_ID_KEY`), else (a file of an older
agent) the model's id; ids are unique within a replay (a repeated one gets ``-2``, ``-3``…).

Each replayed message has its own ``messageId`` so that chunks do not merge.  No tool
runs.  Then the history is repaired (:func:`~acpkit_agent.session.repair_history`: a call
without an answer gets ``[tool call interrupted: …]``, so the model accepts the history),
``available_commands_update`` is sent, then ``{}``; logged
``[acp] session <id> loaded from <dir>: N message(s) replayed`` (and how many calls were
repaired).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from twisted.logger import Logger

from acpkit import schema
from acpkit.errors import InvalidParams
from acpkit_agent.compaction import is_summary, summary_text
from acpkit_agent.session import (
    LIVE_ID_KEY,
    LIVE_KIND_KEY,
    LIVE_TITLE_KEY,
    Session,
    repair_history,
    tool_results_of,
)
from acpkit_agent.store import DiskSessionStore, SessionFileError
from acpkit_agent.tools.base import Tool
from acpkit_agent.turn import call_kind, send_update, tool_kind

__all__ = ["load_and_replay", "replay_updates"]

_FAILED_OUTPUTS = ("[tool call interrupted", "[tool call cancelled")
"""Recorded answers of calls that ended ``failed`` live (the turn was interrupted)."""

_log = Logger()


def _message_id() -> str:
    return str(uuid.uuid4())


def _arguments(raw: Any) -> Any:
    """The parsed arguments of a recorded call (the text itself when it is not an object)."""
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, str) or not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    return value if isinstance(value, dict) else raw


class _Ids:
    """The replayed ``toolCallId`` of each call: its live id, unique within the replay."""

    def __init__(self) -> None:
        self._used: set[str] = set()

    def __call__(self, call: Mapping[str, Any]) -> str:
        live = call.get(LIVE_ID_KEY)
        wanted = live if isinstance(live, str) and live else str(call.get("id") or "call")
        chosen, n = wanted, 1
        while chosen in self._used:
            n += 1
            chosen = f"{wanted}-{n}"
        self._used.add(chosen)
        return chosen


def _answers(results: list[dict[str, Any]]) -> dict[str, list[str]]:
    answers: dict[str, list[str]] = {}
    for result in results:
        answers.setdefault(str(result.get("tool_call_id")), []).append(
            str(result.get("content") or "")
        )
    return answers


def _tool_call(
    call: Mapping[str, Any],
    call_id: str,
    answers: dict[str, list[str]],
    tools: Mapping[str, Tool],
    cwd: str,
) -> schema.ToolCallStart:
    function = call.get("function") or {}
    name = str(function.get("name") or "")
    model_id = str(call.get("id") or "")
    raw_input = _arguments(function.get("arguments"))
    args = raw_input if isinstance(raw_input, dict) else {}
    tool = tools.get(name)
    if tool is None:
        title, kind, paths = name or "unknown tool", schema.ToolKind.EXECUTE, []
    else:
        title, kind, paths = (
            tool.title(args),
            tool_kind(call_kind(tool, args)),
            tool.locations(args, cwd),
        )
    saved_title, saved_kind = call.get(LIVE_TITLE_KEY), call.get(LIVE_KIND_KEY)
    if isinstance(saved_title, str):
        title = saved_title
    if isinstance(saved_kind, str):
        kind = schema.ToolKind(saved_kind)
    locations = [schema.ToolCallLocation(path=p) for p in paths] or None
    if answers.get(model_id):
        output = answers[model_id].pop(0)
        failed = output.startswith(_FAILED_OUTPUTS)
        return schema.ToolCallStart(
            tool_call_id=call_id,
            title=title,
            kind=kind,
            status=schema.ToolCallStatus.FAILED if failed else schema.ToolCallStatus.COMPLETED,
            raw_input=raw_input,
            raw_output={"output": output},
            locations=locations,
            content=[schema.ContentToolCallContent(content=schema.TextContentBlock(text=output))],
        )
    return schema.ToolCallStart(
        tool_call_id=call_id,
        title=title,
        kind=kind,
        status=schema.ToolCallStatus.FAILED,
        raw_input=raw_input,
        locations=locations,
    )


def replay_updates(
    history: list[dict[str, Any]], tools: Mapping[str, Tool], cwd: str
) -> tuple[list[object], int]:
    """The ``session/update`` values replaying ``history``, and how many messages it holds."""
    ids = _Ids()
    updates: list[object] = []
    replayed = 0
    for index, message in enumerate(history):
        role = message.get("role")
        if role == "system":
            continue
        replayed += 1
        content = str(message.get("content") or "")
        if is_summary(message):
            updates.append(
                schema.AgentMessageChunk(
                    content=schema.TextContentBlock(text="🗜️ " + summary_text(message)),
                    message_id=_message_id(),
                )
            )
        elif role == "user":
            updates.append(
                schema.UserMessageChunk(
                    content=schema.TextContentBlock(text=content), message_id=_message_id()
                )
            )
        elif role == "assistant":
            if content:
                updates.append(
                    schema.AgentMessageChunk(
                        content=schema.TextContentBlock(text=content), message_id=_message_id()
                    )
                )
            answers = _answers(tool_results_of(history, index))
            for call in message.get("tool_calls") or []:
                if isinstance(call, dict):
                    updates.append(_tool_call(call, ids(call), answers, tools, cwd))
    return updates, replayed


def load_and_replay(
    conn: Any,
    store: DiskSessionStore,
    session_id: str,
    cwd: str,
    system_prompt: str,
    tools: Mapping[str, Tool],
) -> Session:
    """
    Read the saved session, put ``system_prompt`` in place of its saved one, send the
    replay and log it.  An unknown id or an unusable file is ``-32602`` naming the id and
    the error.  The caller registers the session and sends the commands.
    """
    try:
        session = store.load(session_id, cwd)
    except SessionFileError as error:
        _log.warn(
            "[acp] session {sid}: cannot load from {dir}: {error}",
            sid=session_id,
            dir=store.sessions_dir(cwd),
            error=error,
        )
        raise InvalidParams(
            "$.params.sessionId", f"cannot load session {session_id!r}: {error}"
        ) from None
    body = [message for message in session.history if message.get("role") != "system"]
    session.history[:] = [{"role": "system", "content": system_prompt}, *body]
    updates, replayed = replay_updates(session.history, tools, cwd)
    for update in updates:
        send_update(conn, session_id, update)
    repaired = repair_history(session.history)
    _log.info(
        "[acp] session {sid} loaded from {dir}: {n} message(s) replayed{repaired}",
        sid=session_id,
        dir=store.sessions_dir(cwd),
        n=replayed,
        repaired=f", {repaired} unanswered tool call(s) marked interrupted" if repaired else "",
    )
    return session
