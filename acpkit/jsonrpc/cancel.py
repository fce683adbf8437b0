"""
How a JSON-RPC dialect cancels requests: a notification naming the request's id.

The engine (:mod:`acpkit.jsonrpc`) knows no dialect: it is given an
:class:`ICancellationPolicy` and uses it both ways.

==========================  ====================  ===========  ======================
policy                      notification          id member    a cancelled request
                                                               is answered with
==========================  ====================  ===========  ======================
:data:`ACP_CANCELLATION`    ``$/cancel_request``  requestId    -32800 (or the
                                                               method's
                                                               ``cancelled_result``)
:data:`LSP_CANCELLATION`    ``$/cancelRequest``   id           -32800 (or the
                                                               method's
                                                               ``cancelled_result``)
:data:`MCP_CANCELLATION`    ``notifications/      requestId    nothing: MCP says the
                            cancelled``                        receiver does not
                                                               answer
==========================  ====================  ===========  ======================

Inbound, a cancel notification whose id member is missing or not a valid id is
ignored (logged); a cancel for an unknown or answered id is ignored.  Outgoing,
cancelling (or timing out) one of our requests sends the notification.
"""

from __future__ import annotations

from typing import Any

import attrs
from zope.interface import Attribute, Interface, implementer

from acpkit.errors import RequestCancelled, RPCError
from acpkit.jsonrpc.classify import RequestId, is_valid_id

__all__ = [
    "ACP_CANCELLATION",
    "LSP_CANCELLATION",
    "MCP_CANCELLATION",
    "ICancellationPolicy",
    "NotificationCancellation",
]


class ICancellationPolicy(Interface):
    """A dialect's way to cancel a request (see the module docstring)."""

    method = Attribute("The name of the notification that cancels a request (str).")

    def request_id(params: Any) -> RequestId | None:
        """The id an inbound cancel notification's ``params`` name, or None if invalid."""

    def cancel_params(request_id: RequestId) -> dict[str, Any]:
        """The ``params`` of the notification that cancels our request ``request_id``."""

    def cancelled_error() -> RPCError | None:
        """The error answering a cancelled request; None: a cancelled request is not answered."""


@implementer(ICancellationPolicy)
@attrs.frozen
class NotificationCancellation:
    """Cancel with notification ``method`` whose params hold the id under ``id_member``."""

    method: str
    id_member: str
    #: Answer a cancelled request (-32800 or its ``cancelled_result``); False: no answer.
    answer: bool = True

    def request_id(self, params: Any) -> RequestId | None:
        """The id named by ``params[id_member]`` when it is a valid id."""
        value = params.get(self.id_member) if isinstance(params, dict) else None
        return value if is_valid_id(value) else None

    def cancel_params(self, request_id: RequestId) -> dict[str, Any]:
        """``{id_member: request_id}``."""
        return {self.id_member: request_id}

    def cancelled_error(self) -> RPCError | None:
        """-32800 ``Request cancelled`` when the dialect answers cancelled requests."""
        return RequestCancelled() if self.answer else None


#: ACP: ``$/cancel_request {"requestId": id}``, answered -32800.
ACP_CANCELLATION = NotificationCancellation("$/cancel_request", "requestId")

#: LSP: ``$/cancelRequest {"id": id}``, answered -32800 (``RequestCancelled``).
LSP_CANCELLATION = NotificationCancellation("$/cancelRequest", "id")

#: MCP: ``notifications/cancelled {"requestId": id}``, never answered.
MCP_CANCELLATION = NotificationCancellation("notifications/cancelled", "requestId", answer=False)
