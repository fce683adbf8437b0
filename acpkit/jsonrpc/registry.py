"""
The methods one side of a connection handles: a :class:`MethodRegistry` maps each
request and notification method to its handler.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from acpkit.jsonrpc.dispatch import CancelledResult, RequestHandler

__all__ = ["MethodRegistry", "NotificationHandler", "NotificationMethod", "RequestMethod"]

#: A notification handler: called with the params and their ``_meta``.
NotificationHandler = Callable[[Any, Mapping[str, Any] | None], Any]


@attrs.define
class RequestMethod:
    """A registered request method: its handler and how it is answered when cancelled."""

    handler: RequestHandler
    cancelled_result: CancelledResult | None
    params_optional: bool


@attrs.define
class NotificationMethod:
    """A registered notification method."""

    handler: NotificationHandler
    params_optional: bool


class MethodRegistry:
    """
    The methods one side handles.  Extension methods (``_vendor/...``) are registered
    the same way as ACP methods.
    """

    def __init__(self) -> None:
        self._requests: dict[str, RequestMethod] = {}
        self._notifications: dict[str, NotificationMethod] = {}

    def add_request(
        self,
        method: str,
        handler: RequestHandler,
        *,
        cancelled_result: CancelledResult | None = None,
        params_optional: bool = False,
    ) -> None:
        """
        Handle requests for ``method`` with ``handler(request)``.

        The handler returns a value, a Deferred or a coroutine; it raises (or fails
        with) an :class:`RPCError` to answer with that error.  ``cancelled_result``:
        when the request is cancelled (queued, or running and the handler ended with
        ``CancelledError``) answer with ``cancelled_result(request)`` as the RESULT
        instead of -32800.  ``params_optional``: accept a request without params
        (``request.params is None``) instead of answering -32602.
        """
        self._requests[method] = RequestMethod(handler, cancelled_result, params_optional)

    def add_notification(
        self, method: str, handler: NotificationHandler, *, params_optional: bool = False
    ) -> None:
        """
        Handle notifications for ``method`` with ``handler(params, meta)``.

        A returned unfired Deferred (or unfinished coroutine) holds the processing of
        later messages until it fires.  Notifications without an object ``params`` are
        dropped (logged) unless ``params_optional``.
        """
        self._notifications[method] = NotificationMethod(handler, params_optional)

    def request_method(self, method: str) -> RequestMethod | None:
        """The registration for request ``method``, if any."""
        return self._requests.get(method)

    def notification_method(self, method: str) -> NotificationMethod | None:
        """The registration for notification ``method``, if any."""
        return self._notifications.get(method)

    def request_methods(self) -> frozenset[str]:
        """Names of the registered request methods."""
        return frozenset(self._requests)

    def notification_methods(self) -> frozenset[str]:
        """Names of the registered notification methods."""
        return frozenset(self._notifications)
