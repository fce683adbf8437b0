"""
The health endpoint of a remote ACP server: what a load balancer's health checks ask
(``GET /healthz``) to know whether to send this instance new connections.

============================================  ==========================================
request                                       answer
============================================  ==========================================
``GET`` or ``HEAD`` :data:`HEALTH_PATH`,      ``200``, an empty body
while the server takes new connections
the same while it cannot: draining (its       ``503``, an empty body, ``Retry-After``
process is stopping), or at
``max_connections``
any other method                              ``405``
============================================  ==========================================

No bearer token, ``Origin`` or ``Host`` is asked for (a balancer's check carries none),
so the answer says nothing but its status: no body, no version, no count, no header
beyond ``Date``, ``Content-Length``, ``Cache-Control: no-store`` and, on ``503``,
``Retry-After`` (not even twisted.web's ``Server``).  The request goes through the
listener's admission like any other (caps, deadlines).  The query string is ignored.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.web.resource import Resource
from twisted.web.server import Request

__all__ = ["HEALTH_PATH", "HealthResource", "is_health_request"]

HEALTH_PATH = b"/healthz"
"""Where a remote ACP site answers health checks (beside ``/acp``, never under it)."""

#: Seconds a ``503`` asks a checker to wait (``Retry-After``).
RETRY_AFTER = b"1"


def is_health_request(request: Request) -> bool:
    """True for a request to :data:`HEALTH_PATH` (whatever its method or query)."""
    return request.path == HEALTH_PATH


class HealthResource(Resource):
    """``GET``/``HEAD`` :data:`HEALTH_PATH`: ``200`` while ``accepting()``, else ``503``."""

    isLeaf = True

    def __init__(self, accepting: Callable[[], bool]) -> None:
        super().__init__()
        self._accepting = accepting

    def render(self, request: Request) -> bytes:
        # twisted.web names itself and its version, and a content type: not here.
        request.responseHeaders.removeHeader(b"server")
        request.responseHeaders.removeHeader(b"content-type")
        request.defaultContentType = None
        request.setHeader(b"cache-control", b"no-store")
        if request.method not in (b"GET", b"HEAD"):
            request.setResponseCode(405)
            request.setHeader(b"allow", b"GET, HEAD")
            return b""
        if not self._accepting():
            request.setResponseCode(503)
            request.setHeader(b"retry-after", RETRY_AFTER)
        return b""
