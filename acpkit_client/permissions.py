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
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Sequence
from typing import Any, cast

from twisted.internet.defer import Deferred, ensureDeferred
from zope.interface import implementer

from acpkit import schema
from acpkit_client.interfaces import IPermissionPrompt

__all__ = [
    "PermissionPolicy",
    "PolicyPermissionPrompt",
    "answer_permission",
    "cancelled_response",
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
