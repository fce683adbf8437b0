"""Answering ``session/request_permission`` with the agent's own options.

An :class:`~acpkit_client.interfaces.IPermissionPrompt` chooses an option id (or gives
no answer); :func:`answer_permission` turns that into the response.  Rules:

- the chosen id must be one of the agent's options, else it counts as no answer;
- no answer means *reject*: a ``reject_once`` option, else ``reject_always`` — never an
  allow option (a deny is not ``cancelled``: that outcome would abort the turn);
  only when the agent offered no reject option at all is the answer ``cancelled``;
- a cancelled turn answers ``cancelled`` (the core's ``ClientConnection.cancel`` does it
  for pending requests).

:class:`PolicyPermissionPrompt` is the non-interactive prompt: ``REJECT`` (the default)
picks a reject option, ``ALLOW`` (an explicit choice) picks ``allow_once``.

What a prompt shows: the request's ``toolCall`` often carries only the id (``call_1``),
the agent having announced the title, kind, command and diff earlier in ``tool_call`` /
``tool_call_update`` notifications.  :func:`merge_tool_call` completes the request's
tool call with what was announced for the same ``toolCallId`` (the session does this
before any prompt sees the request), and :func:`describe_tool_call` turns it into the
``(label, text)`` pairs every front end shows (``ask``'s terminal prompt, the terminal
UI's modal).
"""

from __future__ import annotations

import enum
import inspect
import json
import shlex
from collections.abc import Sequence
from typing import Any, cast

import attrs
from twisted.internet.defer import Deferred, ensureDeferred
from zope.interface import implementer

from acpkit import schema
from acpkit_client.conversation import ToolCallEntry, render_tool_content
from acpkit_client.interfaces import IPermissionPrompt

__all__ = [
    "PermissionPolicy",
    "PolicyPermissionPrompt",
    "answer_permission",
    "cancelled_response",
    "describe_tool_call",
    "merge_tool_call",
    "option_of_kind",
    "selected_response",
]


class PermissionPolicy(enum.Enum):
    """What a non-interactive client answers."""

    #: Choose a reject option (the default: never approve silently).
    REJECT = "reject"
    #: Choose the ``allow_once`` option (only when the user asked for it).
    ALLOW = "allow"


def option_of_kind(options: Sequence[schema.PermissionOption], *kinds: str) -> str | None:
    """The id of the first option of the first kind in ``kinds`` that the agent offered."""
    for kind in kinds:
        for option in options:
            if str(option.kind) == kind:
                return option.option_id
    return None


def selected_response(option_id: str) -> schema.RequestPermissionResponse:
    """The response choosing ``option_id``."""
    return schema.RequestPermissionResponse(
        outcome=schema.SelectedPermissionOutcome(option_id=option_id)
    )


def cancelled_response() -> schema.RequestPermissionResponse:
    """The ``cancelled`` response."""
    return schema.RequestPermissionResponse(outcome=schema.CancelledPermissionOutcome())


@implementer(IPermissionPrompt)
class PolicyPermissionPrompt:
    """Answer every request by ``policy`` without asking anyone."""

    def __init__(self, policy: PermissionPolicy = PermissionPolicy.REJECT) -> None:
        self.policy = policy

    def choose(self, request: schema.RequestPermissionRequest) -> str | None:
        """A reject option (``REJECT``) or ``allow_once`` (``ALLOW``); ``None`` if absent."""
        if self.policy is PermissionPolicy.ALLOW:
            return option_of_kind(request.options, "allow_once")
        return option_of_kind(request.options, "reject_once", "reject_always")


def merge_tool_call(
    announced: ToolCallEntry | None, requested: schema.ToolCallUpdate
) -> schema.ToolCallUpdate:
    """
    The tool call of a permission request as the agent described it: the fields the
    request's ``toolCall`` carries, completed by ``announced`` (the conversation's entry
    for the same ``toolCallId``, folded from ``tool_call`` and ``tool_call_update``).

    The request's own fields win (they are the newest); an empty title, content or
    list of locations counts as absent.  ``announced`` for another id, or None, changes
    nothing.
    """
    if announced is None or announced.tool_call_id != requested.tool_call_id:
        return requested
    kind = requested.kind
    if kind is None and announced.tool_kind:
        kind = schema.ToolKind(announced.tool_kind)
    status = requested.status
    if status is None and (announced.known or "status" in announced.updated_fields):
        status = schema.ToolCallStatus(announced.status)
    locations = requested.locations
    if not locations and announced.locations:
        locations = [schema.ToolCallLocation(path=path) for path in announced.locations]
    return attrs.evolve(
        requested,
        title=requested.title or announced.title or None,
        kind=kind,
        status=status,
        content=requested.content or list(announced.content) or None,
        locations=locations or None,
        raw_input=requested.raw_input if requested.raw_input is not None else announced.raw_input,
        raw_output=(
            requested.raw_output if requested.raw_output is not None else announced.raw_output
        ),
    )


def _command_of(raw_input: object) -> str | None:
    """The shell command a tool's ``rawInput`` carries (``command``: a string or argv)."""
    if not isinstance(raw_input, dict):
        return None
    command = raw_input.get("command")
    if isinstance(command, str):
        return command
    if isinstance(command, list) and command and all(isinstance(a, str) for a in command):
        return shlex.join(command)
    return None


def _location_text(location: object) -> str:
    path = str(getattr(location, "path", location))
    line = getattr(location, "line", None)
    return f"{path}:{line}" if isinstance(line, int) else path


def describe_tool_call(tool_call: Any) -> list[tuple[str, str]]:
    """
    ``(label, text)`` pairs naming a tool call, in the order shown: ``tool`` (the title,
    else the id), ``kind``, ``command`` (``rawInput.command``) or else ``input`` (the
    ``rawInput`` as JSON), ``files`` (the locations), then ``diff`` (when the content
    holds a diff) or ``content``.  Pass it the merged call (:func:`merge_tool_call`).
    """
    described: list[tuple[str, str]] = []
    title = getattr(tool_call, "title", None)
    described.append(
        ("tool", str(title) if title else str(getattr(tool_call, "tool_call_id", "?")))
    )
    kind = getattr(tool_call, "kind", None)
    if kind is not None:
        described.append(("kind", str(kind)))
    raw_input = getattr(tool_call, "raw_input", None)
    command = _command_of(raw_input)
    if command is not None:
        described.append(("command", command))
    elif raw_input is not None:
        try:
            text = json.dumps(raw_input, ensure_ascii=False, sort_keys=True)
        except (TypeError, ValueError):
            text = repr(raw_input)
        described.append(("input", text))
    locations = getattr(tool_call, "locations", None)
    if locations:
        described.append(("files", ", ".join(_location_text(loc) for loc in locations)))
    content = getattr(tool_call, "content", None)
    if content:
        text = render_tool_content(content)
        has_diff = any(isinstance(item, schema.FileEditToolCallContent) for item in content)
        if text:
            described.append(("diff" if has_diff else "content", text))
    return described


def _response_for(
    request: schema.RequestPermissionRequest, chosen: object
) -> schema.RequestPermissionResponse:
    ids = {option.option_id for option in request.options}
    if isinstance(chosen, str) and chosen in ids:
        return selected_response(chosen)
    reject = option_of_kind(request.options, "reject_once", "reject_always")
    if reject is not None:
        return selected_response(reject)
    return cancelled_response()


async def _answer(
    request: schema.RequestPermissionRequest, prompt: IPermissionPrompt
) -> schema.RequestPermissionResponse:
    chosen: Any = prompt.choose(request)
    if isinstance(chosen, Deferred) or inspect.isawaitable(chosen):
        chosen = await cast(Any, chosen)
    return _response_for(request, chosen)


def answer_permission(
    request: schema.RequestPermissionRequest, prompt: IPermissionPrompt
) -> Deferred[schema.RequestPermissionResponse]:
    """Ask ``prompt`` and build the response (see the module docstring for the rules)."""
    return ensureDeferred(_answer(request, prompt))
