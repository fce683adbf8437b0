"""
The methods one side of a connection handles: a :class:`MethodRegistry` maps each
request and notification method to its handler.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from acpkit.jsonrpc.dispatch import CancelledResult, RequestHandler

__all__ = [
    "MethodRegistry",
    "NotificationHandler",
    "NotificationMethod",
    "NotificationResolver",
    "RequestMethod",
    "RequestResolver",
]

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


#: Makes the registration of a request method on its first use (None: not handled).
RequestResolver = Callable[[str], "RequestMethod | None"]
#: The same for notification methods.
NotificationResolver = Callable[[str], "NotificationMethod | None"]


class MethodRegistry:
    """
    The methods one side handles.  Extension methods (``_vendor/...``) are registered
    the same way as ACP methods.

    A fixed set of methods can instead be resolved on first use
    (:meth:`resolve_on_first_use`): a server holding many connections then keeps, per
    connection, only the registrations of the methods its peer called.
    """

    def __init__(self) -> None:
        self._requests: dict[str, RequestMethod] = {}
        self._notifications: dict[str, NotificationMethod] = {}
        self._resolvers: tuple[RequestResolver, NotificationResolver] | None = None
        self._resolvable: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())

    def resolve_on_first_use(
        self,
        requests: frozenset[str],
        resolve_request: RequestResolver,
        notifications: frozenset[str],
        resolve_notification: NotificationResolver,
    ) -> None:
        """
        Handle the methods named in ``requests`` and ``notifications`` with the
        registrations ``resolve_request(method)`` / ``resolve_notification(method)``
        make, each called once, when a message of that method first arrives; the
        registration is then kept as if added.  A method added with
        :meth:`add_request` / :meth:`add_notification` (before or after) takes
        precedence.
        """
        self._resolvers = (resolve_request, resolve_notification)
        self._resolvable = (requests, notifications)

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
        found = self._requests.get(method)
        if found is None and self._resolvers is not None and method in self._resolvable[0]:
            found = self._resolvers[0](method)
            if found is not None:
                self._requests[method] = found
        return found

    def notification_method(self, method: str) -> NotificationMethod | None:
        """The registration for notification ``method``, if any."""
        found = self._notifications.get(method)
        if found is None and self._resolvers is not None and method in self._resolvable[1]:
            found = self._resolvers[1](method)
            if found is not None:
                self._notifications[method] = found
        return found

    def request_methods(self) -> frozenset[str]:
        """Names of the registered request methods (those resolved on first use too)."""
        return frozenset(self._requests) | self._resolvable[0]

    def notification_methods(self) -> frozenset[str]:
        """Names of the registered notification methods (those resolved on first use
        too)."""
        return frozenset(self._notifications) | self._resolvable[1]

    def registered(self) -> frozenset[str]:
        """Names of the request and notification methods whose registration exists now:
        those added, and those resolved on first use so far."""
        return frozenset(self._requests) | frozenset(self._notifications)
