"""
What acpkit's two HTTP client transports share when they read responses: MCP's
Streamable HTTP (:mod:`acpkit.mcp.http`) and ACP's (:mod:`acpkit.remote.http_client`).

- :class:`BodyReader`: receives one response body, chunk by chunk; ``abort()`` stops
  reading it (the connection is dropped) and no end is reported after.
- :func:`body_ended_cleanly`: whether a body's end is a normal one.
- :func:`content_type`: a response's media type, lower case, without parameters.
- :func:`failure_text`: a one-line reason for a failure (``ResponseFailed``'s nested
  reasons unwrapped).
- :func:`shown_url`: a URL without what may hold a secret (user info, query, fragment).
- :func:`visible_ascii`: whether a header value is non-empty visible ASCII (session and
  connection ids).

Only Twisted is imported: the transports import ``treq`` themselves, when they are made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import SplitResult

from twisted.internet.defer import Deferred
from twisted.internet.protocol import Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure

from acpkit.http.tls_errors import tls_error_text

if TYPE_CHECKING:
    from twisted.web.iweb import IResponse

__all__ = [
    "BodyReader",
    "body_ended_cleanly",
    "content_type",
    "failure_text",
    "shown_url",
    "visible_ascii",
]


class BodyReader(Protocol):
    """Receives one response body; ``abort()`` stops reading it.

    ``on_data`` gets each chunk (an exception it raises is logged, naming ``what``, and
    aborts the body); ``on_end`` gets the reason the body ended, unless it was aborted;
    ``done`` fires once the body is over either way.
    """

    _log = Logger()

    def __init__(
        self,
        on_data: Callable[[bytes], None],
        on_end: Callable[[Failure], None],
        *,
        what: str,
    ) -> None:
        self._on_data = on_data
        self._on_end = on_end
        self._what = what
        self.done: Deferred[None] = Deferred()
        self.aborted = False
        self.ended = False

    def dataReceived(self, data: bytes) -> None:
        if self.aborted:
            return
        try:
            self._on_data(data)
        except Exception:
            self._log.failure("reading an {what} HTTP response body failed", what=self._what)
            self.abort()

    def abort(self) -> None:
        """Stop reading (the connection is dropped); ``on_end`` is not called after."""
        if self.aborted or self.ended:
            return
        self.aborted = True
        if self.transport is not None:
            self.transport.stopProducing()  # type: ignore[attr-defined]

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.ended = True
        try:
            if not self.aborted:
                self._on_end(reason)
        finally:
            self.done.callback(None)


def body_ended_cleanly(reason: Failure) -> bool:
    """Whether a body ended normally (all of it, or a body without a length that closed)."""
    from twisted.web.client import ResponseDone
    from twisted.web.http import PotentialDataLoss

    return reason.check(ResponseDone, PotentialDataLoss) is not None


def content_type(response: IResponse) -> str:
    """The media type of ``response`` (``"application/json"``), or ``""`` when absent."""
    values: list[bytes] = response.headers.getRawHeaders(b"content-type") or [b""]
    main: bytes = values[0].split(b";", 1)[0].strip().lower()
    return main.decode("latin-1")


def failure_text(failure: Failure) -> str:
    """A one-line reason for a failure (ResponseFailed's nested reasons unwrapped)."""
    value = failure.value
    reasons = getattr(value, "reasons", None)
    if reasons:
        return "; ".join(failure_text(r) for r in reasons)
    tls = tls_error_text(value) if type(value).__module__.startswith("OpenSSL") else None
    if tls is not None:
        return tls
    text = failure.getErrorMessage()
    return f"{type(value).__name__}: {text}" if text else type(value).__name__


def shown_url(parts: SplitResult) -> str:
    """``scheme://host[:port]/path``: the URL without what may hold a secret."""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def visible_ascii(value: bytes) -> bool:
    """Whether ``value`` is non-empty and only visible ASCII (0x21-0x7E)."""
    return bool(value) and all(0x21 <= b <= 0x7E for b in value)
