"""
A scripted model server on loopback, for tests and the conformance tester.

It is a real ``twisted.web`` server speaking the four APIs coding agents use, streamed
(server-sent events) and not, with usage in the shapes the real servers send: OpenAI chat
completions, the OpenAI Responses API, Anthropic Messages and the Gemini API. Each API is an
adapter of :mod:`acpkit.testing.modelapi` that turns a request into a neutral
`ModelRequest` and encodes a neutral `Answer`; a *brain* decides the answer. The default
brain, `ScriptBrain`, plays a :class:`acpkit.testing.script.Script` (the format shared with
the agent's ``scripted`` engine, fault modes included): each model call, on any API,
consumes the next turn. The JSON bodies received are kept in
:attr:`ScriptedModelServer.requests` for assertions, the API of each in ``request_apis``.

Endpoints:

- ``POST /v1/chat/completions`` (also ``/chat/completions``): OpenAI chat completions;
- ``POST /v1/responses`` (also ``/responses``): the OpenAI Responses API;
- ``POST /v1/messages``: Anthropic Messages; ``POST /v1/messages/count_tokens``;
- ``POST /v1beta/models/{model}:generateContent``, ``:streamGenerateContent`` (``?alt=sse``
  for SSE, else a streamed JSON array) and ``:countTokens`` (also under ``/v1/``): Gemini;
- ``GET /v1/models``: one model, the script's ``model`` (with vLLM's ``max_model_len`` when
  the script has ``context_window`` and ``context_probe`` is ``vllm`` or ``all``; Anthropic's
  list fields when the request has ``anthropic-version``; Gemini's shape when it carries a
  Gemini key); ``GET /v1beta/models`` and ``/v1beta/models/{model}``: Gemini's listing;
- ``GET /props`` (llama.cpp): ``n_ctx`` likewise with ``props`` or ``all``; else 404;
- ``POST /api/show`` (Ollama): ``model_info["scripted.context_length"]`` likewise with
  ``ollama`` or ``all``; else 404.

Command line: ``python -m acpkit.testing.modelserver SCRIPT [--port N]`` prints the base URL
(``http://127.0.0.1:PORT/v1``) on stdout, logs to stderr, and serves until interrupted. The
conformance model (:mod:`acpkit.conformance.model`) has its own command line.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IListeningPort
from twisted.logger import Logger, globalLogBeginner, textFileLogObserver
from twisted.python.failure import Failure
from twisted.web.http import HTTPChannel
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site

from acpkit.testing.modelapi import (
    Adapter,
    Answer,
    AnswerToolCall,
    Brain,
    ModelRequest,
    Usage,
)
from acpkit.testing.modelapi.anthropic import Messages
from acpkit.testing.modelapi.gemini import Gemini
from acpkit.testing.modelapi.openai_chat import ChatCompletions
from acpkit.testing.modelapi.openai_responses import Responses
from acpkit.testing.script import Script, ScriptError, Turn, load_script

__all__ = ["ScriptBrain", "ScriptedModelServer", "answer_of_turn", "main"]

_log = Logger()


def _error_body(message: str, code: int) -> bytes:
    error = {"message": message, "type": "server_error" if code >= 500 else "invalid_request"}
    return json.dumps({"error": {**error, "code": code}}).encode("utf-8")


class _Playback:
    """Writes prepared body pieces to one request, spaced by a delay, then finishes or cuts."""

    def __init__(
        self,
        server: ScriptedModelServer,
        request: Request,
        pieces: list[bytes],
        delay: float,
        cut: bool,
    ) -> None:
        self._server = server
        self._request = request
        self._pieces = pieces
        self._delay = delay
        self._cut = cut
        self._position = 0
        self._pending: IDelayedCall | None = None
        self._closed = False
        request.notifyFinish().addBoth(self._request_over)

    def start(self) -> None:
        self._server._playbacks.add(self)
        self._step()

    def _schedule(self) -> None:
        if self._delay > 0:
            self._pending = self._server._reactor.callLater(self._delay, self._step)
        else:
            self._step()

    def _step(self) -> None:
        self._pending = None
        while self._position < len(self._pieces) and not self._closed:
            self._request.write(self._pieces[self._position])
            self._position += 1
            if self._delay > 0 and self._position < len(self._pieces):
                self._schedule()
                return
        if self._closed:
            return
        if self._cut:
            self._closed = True
            self._request.channel.transport.loseConnection()  # type: ignore[union-attr]
        else:
            self._request.finish()

    def _request_over(self, result: object) -> None:
        if not self._closed and isinstance(result, Failure):
            self._server._client_disconnected()
        self._closed = True
        self.stop()

    def stop(self) -> None:
        """Cancel what is left to write."""
        self._closed = True
        if self._pending is not None and self._pending.active():
            self._pending.cancel()
        self._pending = None
        self._server._playbacks.discard(self)


class _Channel(HTTPChannel):
    def connectionMade(self) -> None:
        super().connectionMade()
        self.factory._channels.add(self)

    def connectionLost(self, reason: Failure) -> None:  # type: ignore[override]
        self.factory._channels.discard(self)
        super().connectionLost(reason)


class _QuietSite(Site):
    protocol = _Channel  # type: ignore[assignment]

    def __init__(self, resource: Resource) -> None:
        super().__init__(resource)
        self._channels: set[HTTPChannel] = set()
        self.noisy = False

    def log(self, request: Any) -> None:
        """No access log."""


_CHAT = ChatCompletions()
_RESPONSES = Responses()
_ANTHROPIC = Messages()
_GEMINI = Gemini()
_GEMINI_PATH = re.compile(
    rb"^/(?:v1beta|v1|v1alpha)/models/(?P<model>[^/:]+(?:/[^/:]+)*):(?P<method>[A-Za-z]+)$"
)


def _is_gemini(request: Request) -> bool:
    return request.getHeader(b"x-goog-api-key") is not None or b"key" in (request.args or {})


class _Root(Resource):
    isLeaf = True

    def __init__(self, server: ScriptedModelServer) -> None:
        super().__init__()
        self._server = server

    def render_GET(self, request: Request) -> bytes:
        path = request.path.rstrip(b"/")
        script = self._server.script
        if path == b"/v1beta/models" or (path == b"/v1/models" and _is_gemini(request)):
            return self._json(request, {"models": [self._gemini_model()]})
        if path.startswith((b"/v1beta/models/", b"/v1/models/")) and _is_gemini(request):
            return self._json(request, self._gemini_model())
        if path in (b"/v1/models", b"/models"):
            model: dict[str, Any] = {"id": script.model, "object": "model", "owned_by": "acpkit"}
            window = script.context_window
            if window is not None and self._server._answers("vllm"):
                model["max_model_len"] = window
            listing: dict[str, Any] = {"object": "list", "data": [model]}
            if request.getHeader(b"anthropic-version") is not None:
                model.update(
                    type="model", display_name=script.model, created_at="2025-01-01T00:00:00Z"
                )
                listing.update(has_more=False, first_id=script.model, last_id=script.model)
            return self._json(request, listing)
        window = script.context_window
        if path == b"/props" and window is not None and self._server._answers("props"):
            return self._json(
                request,
                {"default_generation_settings": {"n_ctx": window}, "n_ctx": window},
            )
        return self._not_found(request)

    def _gemini_model(self) -> dict[str, Any]:
        model = self._server.script.model
        return {
            "name": f"models/{model}",
            "baseModelId": model,
            "version": "1",
            "displayName": model,
            "description": "acpkit scripted model",
            "inputTokenLimit": self._server.script.context_window or 32768,
            "outputTokenLimit": 8192,
            "supportedGenerationMethods": [
                "generateContent",
                "streamGenerateContent",
                "countTokens",
            ],
        }

    def render_POST(self, request: Request) -> bytes | int:
        path = request.path.rstrip(b"/")
        window = self._server.script.context_window
        if path == b"/api/show" and window is not None and self._server._answers("ollama"):
            return self._json(request, {"model_info": {"scripted.context_length": window}})
        model = self._server.script.model
        gemini = _GEMINI_PATH.match(path)
        adapter: ChatCompletions | Responses | Messages | Gemini
        stream: bool | None = None
        array = False
        count = False
        if path in (b"/v1/chat/completions", b"/chat/completions"):
            adapter = _CHAT
        elif path in (b"/v1/responses", b"/responses"):
            adapter = _RESPONSES
        elif path in (b"/v1/messages", b"/messages"):
            adapter = _ANTHROPIC
        elif path in (b"/v1/messages/count_tokens", b"/messages/count_tokens"):
            adapter, count = _ANTHROPIC, True
        elif gemini is not None and gemini["method"] in (
            b"generateContent",
            b"streamGenerateContent",
            b"countTokens",
        ):
            adapter = _GEMINI
            stream = gemini["method"] == b"streamGenerateContent"
            array = stream and (request.args or {}).get(b"alt") != [b"sse"]
            count = gemini["method"] == b"countTokens"
        else:
            return self._not_found(request)
        assert request.content is not None
        raw = request.content.read()
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("not a JSON object")
        except ValueError as error:
            request.setResponseCode(400)
            request.setHeader(b"content-type", b"application/json")
            return adapter.error(f"request body is not a JSON object: {error}", 400)
        try:
            neutral = adapter.parse(body, model=model, stream=bool(stream))
        except Exception as error:  # a body this server cannot read: the client's mistake
            request.setResponseCode(400)
            request.setHeader(b"content-type", b"application/json")
            return adapter.error(f"cannot read the request: {error!r}", 400)
        if count and isinstance(adapter, Messages | Gemini):
            return self._json_bytes(request, adapter.count_tokens(neutral))
        return self._server._turn(request, adapter, body, neutral, array=array)

    def _json(self, request: Request, value: Any) -> bytes:
        request.setHeader(b"content-type", b"application/json")
        return json.dumps(value).encode("utf-8")

    def _json_bytes(self, request: Request, value: bytes) -> bytes:
        request.setHeader(b"content-type", b"application/json")
        return value

    def _not_found(self, request: Request) -> bytes:
        request.setResponseCode(404)
        request.setHeader(b"content-type", b"application/json")
        path = request.path.decode("latin-1")
        return _error_body(f"no such endpoint: {request.method.decode()} {path}", 404)


def answer_of_turn(turn: Turn, turn_number: int) -> Answer:
    """A script turn as a neutral answer (``turn_number`` numbers its default call ids)."""
    usage = None
    if turn.usage is not None:
        usage = Usage(turn.usage.input, turn.usage.output, turn.usage.cached, turn.usage.reasoning)
    calls = tuple(
        AnswerToolCall(
            id=turn.call_id(turn_number, position),
            name=call.name,
            fragments=tuple(call.fragments_of_arguments()),
        )
        for position, call in enumerate(turn.tool_calls)
    )
    return Answer(
        chunks=turn.chunks,
        reasoning=turn.reasoning,
        tool_calls=calls,
        usage=usage,
        finish_reason=turn.finish_reason,
        error=turn.error,
        status=turn.status,
        body=turn.body,
        garbage=turn.garbage,
        cut_after=turn.cut_after,
        delay=turn.delay,
        split_bytes=turn.split_bytes,
    )


class ScriptBrain:
    """The script playback brain: the ``number``-th call gets the script's next turn."""

    def __init__(self, script: Script) -> None:
        self.script = script

    def answer(self, request: ModelRequest, number: int) -> Answer:
        """The turn at ``number`` (a 500 naming the script when exhausted)."""
        turn = self.script.turn_at(number)
        if turn is None:
            return Answer(status=500, error=self.script.exhausted_message())
        return answer_of_turn(turn, number + 1)


class ScriptedModelServer:
    """
    A model server on 127.0.0.1 speaking four APIs, answering with a brain.

    The APIs: OpenAI chat completions, the OpenAI Responses API, Anthropic Messages and the
    Gemini API (see :mod:`acpkit.testing.modelapi`). By default the brain plays ``script``:
    each model call consumes the next turn. :attr:`requests` holds the JSON bodies received,
    :attr:`request_apis` the API of each (``openai-chat``, ``openai-responses``,
    ``anthropic``, ``gemini``), :attr:`model_requests` their neutral form,
    :attr:`request_headers` their headers (lower-case names), and :attr:`disconnects`
    counts clients that hung up before their answer was complete. Each callable in
    :attr:`observers` is called with the neutral request and the answer of every call.
    Delays (the ``delay`` key of a turn) use the given reactor's clock.
    """

    def __init__(self, script: Script, *, reactor: Any = None, brain: Brain | None = None) -> None:
        if reactor is None:
            from twisted.internet import reactor as default_reactor

            reactor = default_reactor
        self.script = script
        self.brain: Brain = brain if brain is not None else ScriptBrain(script)
        self._reactor = reactor
        self.requests: list[dict[str, Any]] = []
        self.request_apis: list[str] = []
        self.model_requests: list[ModelRequest] = []
        self.request_headers: list[dict[str, str]] = []
        self.observers: list[Callable[[ModelRequest, Answer], None]] = []
        self.calls = 0
        self.disconnects = 0
        self._disconnect_waiters: list[tuple[int, Deferred[None]]] = []
        self._playbacks: set[_Playback] = set()
        self._site = _QuietSite(_Root(self))
        self._port: IListeningPort | None = None
        self.base_url = ""
        self.root_url = ""

    def start(self, port: int = 0) -> Deferred[str]:
        """Listen on 127.0.0.1 (``port`` 0 = any free port); resolves with the base URL."""
        self._port = self._reactor.listenTCP(port, self._site, interface="127.0.0.1")
        assert self._port is not None
        address: Any = self._port.getHost()
        self.root_url = f"http://127.0.0.1:{address.port}"
        self.base_url = f"{self.root_url}/v1"
        return succeed(self.base_url)

    def stop(self) -> Deferred[None]:
        """Stop listening, cancel pending writes and close open connections."""
        for playback in list(self._playbacks):
            playback.stop()
        for channel in list(self._site._channels):
            if channel.transport is not None:
                channel.transport.abortConnection()  # type: ignore[attr-defined]
        port, self._port = self._port, None
        if port is None:
            return succeed(None)
        result = port.stopListening()
        return result if isinstance(result, Deferred) else succeed(None)

    def wait_for_disconnects(self, count: int = 1) -> Deferred[None]:
        """Fires once ``count`` clients in all have hung up before their answer was complete."""
        if self.disconnects >= count:
            return succeed(None)
        waiter: Deferred[None] = Deferred()
        self._disconnect_waiters.append((count, waiter))
        return waiter

    def _client_disconnected(self) -> None:
        self.disconnects += 1
        ready = [w for w in self._disconnect_waiters if w[0] <= self.disconnects]
        self._disconnect_waiters = [w for w in self._disconnect_waiters if w[0] > self.disconnects]
        for _, waiter in ready:
            waiter.callback(None)

    def _answers(self, probe: str) -> bool:
        return self.script.context_probe in (probe, "all")

    def _turn(
        self,
        request: Request,
        adapter: Adapter,
        body: dict[str, Any],
        neutral: ModelRequest,
        *,
        array: bool = False,
    ) -> bytes | int:
        self.requests.append(body)
        self.request_apis.append(adapter.name)
        self.model_requests.append(neutral)
        self.request_headers.append(
            {
                name.decode("latin-1").lower(): b", ".join(values).decode("latin-1")
                for name, values in request.requestHeaders.getAllRawHeaders()
            }
        )
        number = self.calls
        self.calls += 1
        answer = self.brain.answer(neutral, number)
        for observer in list(self.observers):
            observer(neutral, answer)
        if answer.status is not None or (answer.error is not None and not answer.has_content):
            status = answer.status or 500
            request.setResponseCode(status)
            if answer.body is not None:
                request.setHeader(b"content-type", b"text/plain; charset=utf-8")
                return answer.body.encode("utf-8")
            request.setHeader(b"content-type", b"application/json")
            return adapter.error(answer.error or "scripted HTTP error", status)
        streaming = neutral.stream
        if answer.garbage is not None:
            sse_stream = streaming and not array
            content_type = b"text/event-stream" if sse_stream else b"application/json"
            request.setHeader(b"content-type", content_type)
            return answer.garbage.encode("utf-8")
        cut = answer.cut_after is not None
        if streaming and array:
            assert isinstance(adapter, Gemini)
            pieces = adapter.array(answer, neutral)
            if answer.cut_after is not None:
                pieces = pieces[: answer.cut_after]
            request.setHeader(b"content-type", b"application/json")
        elif streaming:
            pieces = adapter.stream(answer, neutral, number + 1)
            if answer.cut_after is not None:
                pieces = pieces[: answer.cut_after]
            request.setHeader(b"content-type", b"text/event-stream")
            request.setHeader(b"cache-control", b"no-cache")
        else:
            data = adapter.whole(answer, neutral, number + 1)
            if cut:
                data = data[: len(data) // 2]
            request.setHeader(b"content-type", b"application/json")
            if not cut:
                request.setHeader(b"content-length", str(len(data)).encode())
            pieces = [data]
        if answer.split_bytes:
            data, size = b"".join(pieces), answer.split_bytes
            pieces = [data[start : start + size] for start in range(0, len(data), size)]
        _Playback(self, request, pieces, answer.delay, cut).start()
        return NOT_DONE_YET


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m acpkit.testing.modelserver SCRIPT [--port N]``: serve until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m acpkit.testing.modelserver",
        description="Serve a scripted model (OpenAI, Anthropic and Gemini APIs) on 127.0.0.1.",
    )
    parser.add_argument("script", help="model script (TOML or JSON, see acpkit.testing.script)")
    parser.add_argument("--port", type=int, default=0, help="TCP port (default: any free port)")
    options = parser.parse_args(argv)
    try:
        script = load_script(options.script)
    except ScriptError as error:
        sys.stderr.write(f"modelserver: {error}\n")
        return 2
    globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stderr)], redirectStandardIO=False)
    from twisted.internet import reactor

    server = ScriptedModelServer(script, reactor=reactor)
    try:
        url = server.start(options.port)
    except Exception as error:
        sys.stderr.write(f"modelserver: cannot listen on port {options.port}: {error}\n")
        return 1

    def announce(base_url: str) -> None:
        sys.stdout.write(base_url + "\n")
        sys.stdout.flush()
        _log.info("serving {source} at {url}", source=script.source, url=base_url)

    url.addCallback(announce)
    reactor.run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
