"""The ``fetch_content`` tool: HTTP GET a URL and return (or save) its text.

The body is read with a size cap: past ``max_bytes`` the download is stopped and the text is
returned truncated, with a marker.  With ``output``, the text is saved through ``ctx.files``
instead (a larger cap applies and nothing is saved when it is exceeded: a truncated file would
silently lose data).  Text is decoded with the ``Content-Type`` charset (UTF-8 by default).
HTTP errors, connection errors and the timeout become failed results with a one-line
explanation.  Cancelling the Deferred aborts the request or the download.
"""

from __future__ import annotations

import codecs
from collections.abc import Mapping
from email.message import Message
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import urlsplit

import attrs
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IDelayedCall, IPushProducer
from twisted.internet.protocol import Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure

from acpkit.compat import quiet_http_pool
from acpkit_agent.tools.base import (
    ArgumentError,
    ToolContext,
    ToolResult,
    cancellable,
    describe_error,
    resolve_path,
    text_arg,
    title_text,
)

if TYPE_CHECKING:
    # treq and twisted.web load on the first fetch, not at bob's start.
    from treq.client import HTTPClient

__all__ = ["FetchContentTool", "decode_body", "is_binary_type"]

_log = Logger()
_T = TypeVar("_T")

_BINARY_PREFIXES = ("image/", "audio/", "video/", "font/")
_BINARY_TYPES = frozenset(
    {
        "application/octet-stream",
        "application/pdf",
        "application/zip",
        "application/gzip",
        "application/x-tar",
        "application/wasm",
    }
)


def _content_type(header: str | None) -> tuple[str, str | None]:
    """The media type (lower case) and the charset parameter of a Content-Type header."""
    if not header:
        return "", None
    message = Message()
    message["content-type"] = header
    charset = message.get_param("charset")
    return message.get_content_type().lower(), charset if isinstance(charset, str) else None


def is_binary_type(media_type: str) -> bool:
    """Whether a media type is known to hold something other than text."""
    return media_type.startswith(_BINARY_PREFIXES) or media_type in _BINARY_TYPES


def decode_body(body: bytes, charset: str | None) -> str:
    """Decode ``body`` with ``charset`` (UTF-8 when absent or unknown), replacing bad bytes."""
    encoding = "utf-8"
    if charset:
        try:
            encoding = codecs.lookup(charset.strip().strip('"')).name
        except LookupError:
            encoding = "utf-8"
    return body.decode(encoding, "replace")


class _CappedBody(Protocol):
    """Collects a response body up to ``limit`` bytes, then stops the download."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chunks: list[bytes] = []
        self.size = 0
        self.truncated = False
        self.finished: Deferred[bytes] = Deferred(self._cancel)

    def dataReceived(self, data: bytes) -> None:
        if self.truncated:
            return
        room = self.limit - self.size
        if len(data) > room:
            self.chunks.append(data[:room])
            self.size = self.limit
            self.truncated = True
            self._stop()
            self._finish()
            return
        self.chunks.append(data)
        self.size += len(data)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self.finished.called:
            return
        from twisted.web.client import ResponseDone
        from twisted.web.http import PotentialDataLoss

        if isinstance(reason.value, ResponseDone | PotentialDataLoss):
            self._finish()
        else:
            self.finished.errback(reason)

    def _finish(self) -> None:
        if not self.finished.called:
            self.finished.callback(b"".join(self.chunks))

    def _stop(self) -> None:
        if self.transport is not None:
            cast(IPushProducer, self.transport).stopProducing()

    def _cancel(self, finished: Deferred[bytes]) -> None:
        self._stop()


class _Deadline:
    """Cancels whatever is awaited through :meth:`wait` once ``timeout`` seconds have passed."""

    def __init__(self, reactor: Any, timeout: float) -> None:
        self.expired = False
        self.waiting: Deferred[Any] | None = None
        self.timer: IDelayedCall = reactor.callLater(timeout, self._expire)

    def wait(self, work: Deferred[_T]) -> Deferred[_T]:
        """Remember ``work`` as the thing to cancel on expiry and return it."""
        self.waiting = work
        if self.expired:
            work.cancel()
        return work

    def stop(self) -> None:
        """Cancel the timer (idempotent)."""
        if self.timer.active():
            self.timer.cancel()

    def _expire(self) -> None:
        self.expired = True
        if self.waiting is not None:
            # Not guarded by `called`: a Deferred chained to another one counts as called,
            # and cancel() forwards to the one it waits on (a no-op once it has a result).
            self.waiting.cancel()


def _connection_error(error: BaseException) -> str:
    """A one-line reason for a failed request (unwrapping Twisted's wrapper exceptions)."""
    reasons = getattr(error, "reasons", None)
    if reasons:
        first = reasons[0]
        inner = first.value if isinstance(first, Failure) else first
        if isinstance(inner, BaseException):
            return _connection_error(inner)
    return describe_error(error)


@attrs.define
class FetchContentTool:
    """Fetches a URL with treq (see the module docstring)."""

    max_bytes: int = 1024 * 1024
    """Bytes of body shown to the model; more are dropped with a marker."""
    max_save_bytes: int = 16 * 1024 * 1024
    """Bytes of body that may be saved to ``output``; more and nothing is saved."""
    timeout: float = 30.0
    """Seconds for the whole request, body included."""

    name: str = attrs.field(default="fetch_content", init=False)
    kind: str = attrs.field(default="fetch", init=False)
    description: str = attrs.field(
        default=(
            "Fetch a web page or file with HTTP GET and return its text (long bodies are "
            "truncated). With 'output', save the text to that file instead of returning it."
        ),
        init=False,
    )
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "An http:// or https:// URL."},
                "output": {
                    "type": "string",
                    "description": "A file to save the text to (relative to the cwd).",
                },
            },
            "required": ["url"],
            "additionalProperties": False,
        },
        init=False,
    )

    def title(self, args: Mapping[str, Any]) -> str:
        """``fetch_content: <url>``."""
        return f"fetch_content: {title_text(args, 'url')}"

    def locations(self, args: Mapping[str, Any], cwd: str) -> list[str]:
        """The ``output`` file, when there is one."""
        output = args.get("output")
        return [resolve_path(output, cwd)] if isinstance(output, str) and output else []

    def needs_permission(self, args: Mapping[str, Any]) -> bool:
        """Only when the text is saved to a file (``output``)."""
        return bool(args.get("output"))

    def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Deferred[ToolResult]:
        """GET the URL; cancelling aborts the request or the download."""
        return cancellable(Deferred.fromCoroutine(self._run(ctx, args)))

    async def _run(self, ctx: ToolContext, args: Mapping[str, Any]) -> ToolResult:
        try:
            url = text_arg(args, "url")
            output = text_arg(args, "output", required=False)
        except ArgumentError as error:
            return ToolResult(output=f"fetch_content: {error}", failed=True)
        assert url is not None
        url = url.strip()
        problem = _url_problem(url)
        if problem:
            return ToolResult(output=f"fetch_content: {problem}", failed=True)
        path = resolve_path(output, ctx.cwd) if output else None
        client = ctx.http_agent or self._client(ctx.reactor)
        limit = self.max_save_bytes if path else self.max_bytes
        deadline = _Deadline(ctx.reactor, self.timeout)
        try:
            request: Deferred[Any] = client.get(url, unbuffered=True, reactor=ctx.reactor)
            response = await deadline.wait(request)
            status = response.code
            phrase = response.phrase.decode("latin-1", "replace")
            header = response.headers.getRawHeaders(b"content-type", [b""])[0]
            media_type, charset = _content_type(header.decode("latin-1"))
            body = _CappedBody(limit if status < 400 else min(limit, 64 * 1024))
            response.deliverBody(body)
            data = await deadline.wait(body.finished)
        except CancelledError:
            if deadline.expired:
                return _failed(f"no complete answer from {url} within {self.timeout:g} s")
            raise
        except Exception as error:
            if deadline.expired:
                return _failed(f"no complete answer from {url} within {self.timeout:g} s")
            _log.debug("fetch_content {url} failed: {error!r}", url=url, error=error)
            return _failed(f"cannot fetch {url}: {_connection_error(error)}")
        finally:
            deadline.stop()
        if status >= 400:
            return _failed(f"HTTP {status} {phrase} for {url}")
        if path is not None:
            return await self._save(ctx, url, path, data, body.truncated, media_type, charset)
        if is_binary_type(media_type):
            size = f"{len(data)}{'+' if body.truncated else ''} bytes"
            return ToolResult(output=f"[{url} is binary content ({media_type}, {size}); not shown]")
        text = decode_body(data, charset)
        if body.truncated:
            text += f"\n[… truncated: only the first {self.max_bytes} bytes were downloaded …]"
        return ToolResult(output=text or f"[{url} returned an empty body (HTTP {status})]")

    def _client(self, reactor: Any) -> HTTPClient:
        """A treq client on ``reactor`` without persistent connections."""
        from treq.client import HTTPClient
        from twisted.web.client import Agent

        pool = quiet_http_pool(reactor, persistent=False)  # no factory lines per fetch
        agent = Agent(reactor, connectTimeout=self.timeout, pool=pool)
        return HTTPClient(agent)

    async def _save(
        self,
        ctx: ToolContext,
        url: str,
        path: str,
        data: bytes,
        truncated: bool,
        media_type: str,
        charset: str | None,
    ) -> ToolResult:
        if truncated:
            return _failed(
                f"{url} is larger than {self.max_save_bytes} bytes; nothing was saved to {path}"
            )
        if is_binary_type(media_type):
            return _failed(
                f"{url} is binary content ({media_type}); only text can be saved, "
                f"nothing was saved to {path} (use bash with curl for binary files)"
            )
        text = decode_body(data, charset)
        try:
            await ctx.files.write_text(path, text)
        except CancelledError:
            raise
        except Exception as error:
            return _failed(f"cannot save to {path}: {describe_error(error)}")
        kind = f", {media_type}" if media_type else ""
        return ToolResult(output=f"saved {url} to {path} ({len(data)} bytes{kind})")


def _url_problem(url: str) -> str | None:
    if not url:
        return "argument 'url' is empty"
    try:
        parts = urlsplit(url)
    except ValueError as error:
        return f"invalid URL {url!r}: {error}"
    if parts.scheme.lower() not in ("http", "https"):
        return f"unsupported URL {url!r}: use an http:// or https:// URL"
    if not parts.hostname:
        return f"invalid URL {url!r}: no host name"
    return None


def _failed(message: str) -> ToolResult:
    return ToolResult(output=f"fetch_content: {message}", failed=True)
