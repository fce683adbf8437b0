"""
The ``openai`` engine: any OpenAI-compatible chat-completions server over HTTP (llama.cpp
``llama-server``, Ollama, vLLM, LM Studio, ...), streamed with treq.

Each ``complete()`` is one ``POST {base_url}/chat/completions`` with ``stream: true`` and
``stream_options: {include_usage: true}``; the server-sent events are parsed incrementally
(:class:`SSEParser`) and assembled (:class:`~acpkit_agent.engines.base.DeltaAssembler`).

Settings (``[engine]`` table, all optional):

============== ======= ===================================================================
key            type    meaning
============== ======= ===================================================================
base_url       str     server URL ending in ``/v1``; default ``$OPENAI_BASE_URL`` or
                       ``http://127.0.0.1:8080/v1``
api_key        str     sent as ``Authorization: Bearer``; default ``$OPENAI_API_KEY``;
                       empty = no header
model          str     model id; empty = the first id of ``GET {base_url}/models`` (asked
                       once, before the first call), else no ``model`` field
temperature    float   sampling temperature; unset = the server's default
max_tokens     int     output token limit per call; unset = the server's default
context_window int     the model's window in tokens; 0 (default) = probe the server
timeout        float   seconds to connect and to get the first byte of the answer (300)
============== ======= ===================================================================
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from treq.client import HTTPClient
from twisted.internet import error as net_error
from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.protocol import Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import client as web_client
from twisted.web.http import PotentialDataLoss
from twisted.web.http_headers import Headers
from twisted.web.iweb import IResponse
from zope.interface import implementer

from acpkit.compat import quiet_http_pool
from acpkit_agent.engines.base import (
    DeltaAssembler,
    EngineError,
    IEngine,
    ModelReply,
    StreamSink,
    ToolSpec,
    error_text,
    one_line_excerpt,
    validate_settings,
)

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_TIMEOUT", "OpenAIEngine", "SSEParser"]

DEFAULT_BASE_URL = "http://127.0.0.1:8080/v1"
DEFAULT_TIMEOUT = 300.0
PROBE_TIMEOUT = 10.0
ERROR_BODY_LIMIT = 4096
JSON_BODY_LIMIT = 64 * 1024 * 1024

_SETTINGS: dict[str, tuple[type, ...]] = {
    "base_url": (str,),
    "api_key": (str,),
    "model": (str,),
    "temperature": (int, float),
    "max_tokens": (int,),
    "context_window": (int,),
    "timeout": (int, float),
}
_MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content")
_TOOL_CALL_KEYS = ("id", "type", "function")
"""What a history tool call sends (not the live ``toolCallId`` the agent keeps with it)."""
_SSE_FIELDS = (b"data", b"event", b"id", b"retry")

_log = Logger()


def _api_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A history message with the chat-completions keys only."""
    sent = {key: message[key] for key in _MESSAGE_KEYS if key in message}
    calls = sent.get("tool_calls")
    if isinstance(calls, list):
        sent["tool_calls"] = [
            {key: call[key] for key in _TOOL_CALL_KEYS if key in call}
            if isinstance(call, Mapping)
            else call
            for call in calls
        ]
    return sent


class SSEParser:
    """
    Incremental parser of a ``text/event-stream`` body.

    :meth:`feed` takes bytes cut anywhere (inside lines, inside UTF-8 sequences) and calls
    ``on_data`` with the data of each complete event (``data:`` lines joined by newlines).
    Lines end with LF or CRLF; comments (``:``) and the ``event``/``id``/``retry`` fields are
    ignored. Any other line raises :class:`EngineError` (the body is not an event stream).
    Text is decoded as UTF-8 only on complete lines. Linear time in the body size.
    """

    def __init__(self, on_data: Callable[[str], None]) -> None:
        self._on_data = on_data
        self._buffer = bytearray()
        self._data: list[str] = []

    def feed(self, data: bytes) -> None:
        """Take the next bytes of the body."""
        start = len(self._buffer)
        self._buffer += data
        search_from = start
        line_start = 0
        while True:
            newline = self._buffer.find(b"\n", search_from)
            if newline < 0:
                break
            line = bytes(self._buffer[line_start:newline])
            line_start = search_from = newline + 1
            self._line(line[:-1] if line.endswith(b"\r") else line)
        if line_start:
            del self._buffer[:line_start]

    def finish(self) -> None:
        """The body ended: dispatch a last event that lacked its blank line."""
        if self._buffer.strip():
            self._line(bytes(self._buffer).rstrip(b"\r"))
            self._buffer.clear()
        self._dispatch()

    def _line(self, line: bytes) -> None:
        if not line:
            self._dispatch()
            return
        if line.startswith(b":"):
            return
        name, _colon, value = line.partition(b":")
        if name not in _SSE_FIELDS:
            raise EngineError(
                "model server sent something that is not an event stream: "
                + repr(one_line_excerpt(line.decode("utf-8", "replace"), 80))
            )
        if name != b"data":
            return
        if value.startswith(b" "):
            value = value[1:]
        try:
            self._data.append(value.decode("utf-8"))
        except UnicodeDecodeError:
            raise EngineError("model server sent invalid UTF-8 in the stream") from None

    def _dispatch(self) -> None:
        if self._data:
            data = "\n".join(self._data)
            self._data = []
            self._on_data(data)


def _default_base_url() -> str:
    return os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL


def _root_of(base_url: str) -> str:
    """The server root for probes: ``base_url`` without a trailing ``/v1``."""
    base = base_url.rstrip("/")
    if base.endswith("/v1"):
        return base[: -len("/v1")]
    parts = urlsplit(base)
    return f"{parts.scheme}://{parts.netloc}"


def _explain_request_failure(failure: Failure, base_url: str) -> str:
    where = f"the model server at {base_url}"
    if isinstance(failure.value, net_error.ConnectionRefusedError):
        return f"cannot connect to {where}: connection refused (is the server running?)"
    if isinstance(failure.value, net_error.DNSLookupError):
        return f"cannot connect to {where}: unknown host"
    if isinstance(failure.value, net_error.TimeoutError):
        return f"cannot connect to {where}: connection timed out"
    if isinstance(failure.value, net_error.ConnectError):
        return f"cannot connect to {where}: {failure.getErrorMessage()}"
    if isinstance(failure.value, web_client.ResponseNeverReceived):
        return f"{where} closed the connection without answering"
    return f"request to {where} failed: {failure.getErrorMessage()}"


@implementer(IEngine)
class OpenAIEngine:
    """Streams chat completions from an OpenAI-compatible server; see the module docstring."""

    name = "openai"

    def __init__(
        self,
        *,
        reactor: Any,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str = "",
        temperature: float | None = None,
        max_tokens: int | None = None,
        context_window: int = 0,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self._reactor = reactor
        self.base_url = (base_url if base_url is not None else _default_base_url()).rstrip("/")
        self._api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        self.model = model
        self._model_checked = False
        self._temperature = temperature
        self._max_tokens = max_tokens
        self._configured_window = context_window
        self._probed_window: int | None = None
        self.timeout = timeout
        pool = quiet_http_pool(reactor, persistent=False)  # no factory lines per model call
        agent = web_client.Agent(reactor, connectTimeout=timeout, pool=pool)  # type: ignore[no-untyped-call,unused-ignore]
        self._http = HTTPClient(agent)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], *, reactor: Any) -> OpenAIEngine:
        """Build from the ``[engine]`` table; ``ValueError`` for a bad or unknown key."""
        checked = validate_settings("openai", settings, _SETTINGS)
        base_url = checked.get("base_url")
        if base_url is not None:
            parts = urlsplit(base_url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(
                    f"setting 'base_url' of engine 'openai' must be an http(s) URL, "
                    f"not {base_url!r}"
                )
        for key, low in (("max_tokens", 1), ("context_window", 0)):
            if key in checked and checked[key] < low:
                raise ValueError(f"setting {key!r} of engine 'openai' must be >= {low}")
        if "timeout" in checked and checked["timeout"] <= 0:
            raise ValueError("setting 'timeout' of engine 'openai' must be > 0")
        return cls(
            reactor=reactor,
            base_url=base_url,
            api_key=checked.get("api_key"),
            model=checked.get("model", ""),
            temperature=checked.get("temperature"),
            max_tokens=checked.get("max_tokens"),
            context_window=checked.get("context_window", 0),
            timeout=float(checked.get("timeout", DEFAULT_TIMEOUT)),
        )

    @property
    def description(self) -> str:
        """One line for the startup banner."""
        model = self.model or "the server's model"
        return f"openai ({self.base_url}, {model})"

    def _headers(self, accept: str = "application/json") -> Headers:
        headers = Headers({b"Content-Type": [b"application/json"], b"Accept": [accept.encode()]})
        if self._api_key:
            headers.setRawHeaders(b"Authorization", [f"Bearer {self._api_key}".encode()])
        return headers

    def request_body(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        """
        The JSON body of a streamed chat-completions request: messages (and the tool calls
        of assistant messages) keep only the keys the API knows.
        """
        body: dict[str, Any] = {
            "messages": [_api_message(message) for message in messages],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.model:
            body["model"] = self.model
        if tools:
            body["tools"] = [tool.as_openai() for tool in tools]
        if self._temperature is not None:
            body["temperature"] = self._temperature
        if self._max_tokens is not None:
            body["max_tokens"] = self._max_tokens
        return body

    def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[ToolSpec],
        sink: StreamSink,
    ) -> Deferred[ModelReply]:
        """Stream one chat completion; see :class:`~acpkit_agent.engines.base.IEngine`."""
        if self.model or self._model_checked:
            return self._stream(messages, tools, sink)
        current: list[Deferred[Any]] = []
        cancelled: list[bool] = []

        def cancel(_: Deferred[ModelReply]) -> None:
            cancelled.append(True)
            current[-1].cancel()

        outer: Deferred[ModelReply] = Deferred(cancel)

        def stream(_: object) -> None:
            if cancelled or outer.called:  # cancelled while learning the model
                return
            call = self._stream(messages, tools, sink)
            current.append(call)
            call.chainDeferred(outer)

        learning: Deferred[None] = Deferred.fromCoroutine(self._learn_model())
        current.append(learning)
        learning.addBoth(stream)
        return outer

    async def _learn_model(self) -> None:
        """Take the first id of ``GET {base_url}/models`` as the model (asked once)."""
        listing = await self._get_json("GET", f"{self.base_url}/models")
        if listing is None:
            return
        self._model_checked = True
        data = listing.get("data")
        first = data[0] if isinstance(data, list) and data else None
        if isinstance(first, dict) and isinstance(first.get("id"), str) and not self.model:
            self.model = first["id"]
            _log.info("the model server serves {model}; using it", model=self.model)

    def _stream(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[ToolSpec],
        sink: StreamSink,
    ) -> Deferred[ModelReply]:
        body = json.dumps(self.request_body(messages, tools), ensure_ascii=False)
        call = _StreamingCall(
            http=self._http,
            clock=self._reactor,
            url=f"{self.base_url}/chat/completions",
            base_url=self.base_url,
            body=body.encode("utf-8"),
            headers=self._headers("text/event-stream"),
            sink=sink,
            timeout=self.timeout,
        )
        return call.start()

    def context_window(self) -> Deferred[int]:
        """
        Configured, else probed, else 0 (never fails).

        Probes, in order: llama.cpp ``GET {root}/props`` (``default_generation_settings.n_ctx``
        or ``n_ctx``), Ollama ``POST {root}/api/show`` (``model_info["*.context_length"]``),
        vLLM ``GET {base_url}/models`` (``data[].max_model_len``). A probed number is kept;
        so is 0 when the server answered but told nothing (not when it was unreachable).
        """
        if self._configured_window > 0:
            return succeed(self._configured_window)
        if self._probed_window is not None:
            return succeed(self._probed_window)
        return Deferred.fromCoroutine(self._probe_window())

    async def _probe_window(self) -> int:
        root = _root_of(self.base_url)
        reachable = False
        props = await self._get_json("GET", f"{root}/props")
        if props is not None:
            reachable = True
            settings = props.get("default_generation_settings")
            for source in (settings if isinstance(settings, dict) else {}, props):
                value = source.get("n_ctx")
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return self._remember(value)
        show = await self._get_json("POST", f"{root}/api/show", {"model": self.model})
        if show is not None:
            reachable = True
            info = show.get("model_info")
            if isinstance(info, dict):
                for key, value in info.items():
                    if key.endswith("context_length") and isinstance(value, int) and value > 0:
                        return self._remember(value)
        models = await self._get_json("GET", f"{self.base_url}/models")
        if models is not None:
            reachable = True
            entries = models.get("data")
            for entry in entries if isinstance(entries, list) else []:
                value = entry.get("max_model_len") if isinstance(entry, dict) else None
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return self._remember(value)  # vLLM
        if reachable:
            self._probed_window = 0
        return 0

    def _remember(self, window: int) -> int:
        self._probed_window = window
        return window

    async def _get_json(self, method: str, url: str, payload: Any = None) -> dict[str, Any] | None:
        """A small JSON request for probes: the decoded object, or None on any failure."""
        try:
            data = None if payload is None else json.dumps(payload).encode("utf-8")
            response = await self._http.request(
                method,
                url,
                data=data,
                headers=self._headers(),
                timeout=min(self.timeout, PROBE_TIMEOUT),
            )
            content = await response.content()
            if response.code != 200:
                return None
            value = json.loads(content)
        except Exception as error:  # probes never fail; they answer "unknown"
            _log.debug("context window probe {url} failed: {error}", url=url, error=error)
            return None
        return value if isinstance(value, dict) else None


class _BodyReader(Protocol):
    """Delivers a response body to callbacks as it arrives."""

    def __init__(self, on_data: Callable[[bytes], None], on_end: Callable[[Failure], None]) -> None:
        self._on_data = on_data
        self._on_end = on_end

    def dataReceived(self, data: bytes) -> None:
        self._on_data(data)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._on_end(reason)

    def abort(self) -> None:
        """Close the HTTP connection now."""
        if self.transport is not None:
            self.transport.loseConnection()


class _StreamingCall:
    """One streamed chat-completions request, from POST to the assembled reply."""

    def __init__(
        self,
        *,
        http: HTTPClient,
        clock: IReactorTime,
        url: str,
        base_url: str,
        body: bytes,
        headers: Headers,
        sink: StreamSink,
        timeout: float,
    ) -> None:
        self._http = http
        self._clock = clock
        self._url = url
        self._base_url = base_url
        self._body = body
        self._headers = headers
        self._timeout = timeout
        self._assembler = DeltaAssembler(sink)
        self._parser = SSEParser(self._on_event)
        self._done: Deferred[ModelReply] = Deferred(self._cancel)
        self._request: Deferred[Any] | None = None
        self._reader: _BodyReader | None = None
        self._timer: IDelayedCall | None = None
        self._seen_done = False
        self._json_body: bytearray | None = None
        self._error_status: tuple[int, str] | None = None

    def start(self) -> Deferred[ModelReply]:
        self._timer = self._clock.callLater(self._timeout, self._timed_out)
        request = self._http.request(
            "POST", self._url, data=self._body, headers=self._headers, unbuffered=True
        )
        self._request = request
        request.addCallbacks(self._got_response, self._request_failed)
        return self._done

    # -- ending -------------------------------------------------------------------------------

    def _stop_timer(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _abort(self) -> None:
        self._stop_timer()
        if self._request is not None and not self._request.called:
            self._request.cancel()
        if self._reader is not None:
            self._reader.abort()

    def _fail(self, error: BaseException) -> None:
        if not self._done.called:
            self._done.errback(error)
        self._abort()

    def _succeed(self) -> None:
        self._stop_timer()
        if not self._done.called:
            self._done.callback(self._assembler.reply())

    def _cancel(self, _: Deferred[ModelReply]) -> None:
        _log.debug("model call to {url} cancelled", url=self._url)
        self._abort()

    def _timed_out(self) -> None:
        self._timer = None
        self._fail(
            EngineError(
                f"no answer from the model server at {self._base_url} within {self._timeout:g} s"
            )
        )

    # -- request and response -----------------------------------------------------------------

    def _request_failed(self, failure: Failure) -> None:
        if self._done.called or isinstance(failure.value, CancelledError):
            return
        self._fail(EngineError(_explain_request_failure(failure, self._base_url)))

    def _got_response(self, response: IResponse) -> None:
        self._reader = _BodyReader(self._on_body, self._on_body_end)
        if self._done.called:
            response.deliverBody(self._reader)  # type: ignore[no-untyped-call,unused-ignore]
            self._reader.abort()
            return
        content_type = ",".join(
            value.decode("latin-1").lower()
            for value in response.headers.getRawHeaders(b"content-type", [])
        )
        if response.code >= 400:
            self._error_status = (response.code, response.phrase.decode("latin-1", "replace"))
            self._json_body = bytearray()
        elif "application/json" in content_type:
            self._json_body = bytearray()
        response.deliverBody(self._reader)  # type: ignore[no-untyped-call,unused-ignore]

    def _on_body(self, data: bytes) -> None:
        if self._done.called:
            return
        self._stop_timer()
        if self._json_body is not None:
            limit = ERROR_BODY_LIMIT if self._error_status else JSON_BODY_LIMIT
            self._json_body += data[: max(0, limit - len(self._json_body))]
            return
        try:
            self._parser.feed(data)
        except Exception as error:
            self._fail(error)

    def _on_body_end(self, reason: Failure) -> None:
        self._reader = None
        if self._done.called:
            return
        if self._error_status is not None:
            self._fail(self._http_error())
            return
        complete = isinstance(reason.value, (web_client.ResponseDone, PotentialDataLoss))
        if self._json_body is not None:
            if not complete:
                self._fail(self._lost(reason))
            else:
                self._finish_json()
            return
        try:
            if complete:
                self._parser.finish()
        except Exception as error:
            self._fail(error)
            return
        if self._done.called:
            return
        if self._seen_done or (complete and self._assembler.finish_reason is not None):
            self._succeed()
        elif complete:
            self._fail(
                EngineError(
                    "model server closed the stream before the model finished "
                    "(no finish_reason, no [DONE])"
                )
            )
        else:
            self._fail(self._lost(reason))

    def _lost(self, reason: Failure) -> EngineError:
        detail = reason.getErrorMessage()
        if isinstance(reason.value, web_client.ResponseFailed):
            detail = "; ".join(str(inner.getErrorMessage()) for inner in reason.value.reasons)
        return EngineError(
            f"connection to the model server at {self._base_url} was lost mid-answer ({detail})"
        )

    def _http_error(self) -> EngineError:
        assert self._error_status is not None and self._json_body is not None
        code, phrase = self._error_status
        text = bytes(self._json_body).decode("utf-8", "replace")
        try:
            decoded = json.loads(text)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict) and "error" in decoded:
            detail = error_text(decoded["error"])
        elif isinstance(decoded, dict) and isinstance(decoded.get("detail"), str):
            detail = one_line_excerpt(decoded["detail"])  # vLLM / FastAPI style
        else:
            detail = one_line_excerpt(text) or "(empty body)"
        return EngineError(f"model server answered HTTP {code} {phrase}: {detail}")

    def _finish_json(self) -> None:
        assert self._json_body is not None
        text = bytes(self._json_body).decode("utf-8", "replace")
        try:
            decoded = json.loads(text)
        except ValueError:
            self._fail(
                EngineError(
                    f"model server sent garbage instead of JSON: {one_line_excerpt(text, 80)!r}"
                )
            )
            return
        try:
            self._assembler.feed(decoded)
        except Exception as error:
            self._fail(error)
            return
        self._seen_done = True
        self._succeed()

    def _on_event(self, data: str) -> None:
        if self._seen_done:
            return
        if data.strip() == "[DONE]":
            self._seen_done = True
            self._succeed()
            return
        try:
            chunk = json.loads(data)
        except ValueError:
            raise EngineError(
                f"model server sent non-JSON data in the stream: {one_line_excerpt(data, 80)!r}"
            ) from None
        self._assembler.feed(chunk)
