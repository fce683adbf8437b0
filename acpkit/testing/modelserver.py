"""
A scripted OpenAI-compatible model server on loopback, for tests and the conformance tester.

It is a real ``twisted.web`` server speaking the chat-completions protocol: streamed
(server-sent events, with a usage chunk when ``stream_options.include_usage``) and
non-streamed answers, plus the endpoints model clients probe. Each chat-completions POST
consumes the next turn of a :class:`acpkit.testing.script.Script` (the format shared with
the agent's ``scripted`` engine, fault modes included); the JSON bodies received are kept
in :attr:`ScriptedModelServer.requests` for assertions.

Endpoints:

- ``POST /v1/chat/completions`` (also ``/chat/completions``): the next scripted turn;
- ``GET /v1/models``: one model, the script's ``model`` (with vLLM's ``max_model_len`` when
  the script has ``context_window`` and ``context_probe`` is ``vllm`` or ``all``);
- ``GET /props`` (llama.cpp): ``n_ctx`` likewise with ``props`` or ``all``; else 404;
- ``POST /api/show`` (Ollama): ``model_info["scripted.context_length"]`` likewise with
  ``ollama`` or ``all``; else 404.

Command line: ``python -m acpkit.testing.modelserver SCRIPT [--port N]`` prints the base URL
(``http://127.0.0.1:PORT/v1``) on stdout, logs to stderr, and serves until interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IListeningPort
from twisted.logger import Logger, globalLogBeginner, textFileLogObserver
from twisted.python.failure import Failure
from twisted.web.http import HTTPChannel
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site

from acpkit.testing.script import Script, ScriptError, Turn, load_script

__all__ = ["ScriptedModelServer", "main"]

_log = Logger()


def _sse(payload: Any) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode("utf-8") + b"\n\n"


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


class _Root(Resource):
    isLeaf = True

    def __init__(self, server: ScriptedModelServer) -> None:
        super().__init__()
        self._server = server

    def render_GET(self, request: Request) -> bytes:
        path = request.path.rstrip(b"/")
        if path in (b"/v1/models", b"/models"):
            model: dict[str, Any] = {
                "id": self._server.script.model,
                "object": "model",
                "owned_by": "acpkit",
            }
            window = self._server.script.context_window
            if window is not None and self._server._answers("vllm"):
                model["max_model_len"] = window
            return self._json(request, {"object": "list", "data": [model]})
        window = self._server.script.context_window
        if path == b"/props" and window is not None and self._server._answers("props"):
            return self._json(
                request,
                {"default_generation_settings": {"n_ctx": window}, "n_ctx": window},
            )
        return self._not_found(request)

    def render_POST(self, request: Request) -> bytes | int:
        path = request.path.rstrip(b"/")
        window = self._server.script.context_window
        if path == b"/api/show" and window is not None and self._server._answers("ollama"):
            return self._json(request, {"model_info": {"scripted.context_length": window}})
        if path not in (b"/v1/chat/completions", b"/chat/completions"):
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
            return _error_body(f"request body is not a JSON object: {error}", 400)
        return self._server._chat(request, body)

    def _json(self, request: Request, value: Any) -> bytes:
        request.setHeader(b"content-type", b"application/json")
        return json.dumps(value).encode("utf-8")

    def _not_found(self, request: Request) -> bytes:
        request.setResponseCode(404)
        request.setHeader(b"content-type", b"application/json")
        path = request.path.decode("latin-1")
        return _error_body(f"no such endpoint: {request.method.decode()} {path}", 404)


class ScriptedModelServer:
    """
    An OpenAI-compatible chat-completions server on 127.0.0.1 playing a script.

    Each chat-completions POST consumes the next turn; :attr:`requests` holds the JSON
    bodies received, :attr:`request_headers` their headers (lower-case names), and
    :attr:`disconnects` counts clients that hung up before their answer was complete.
    Delays (the ``delay`` key of a turn) use the given reactor's clock.
    """

    def __init__(self, script: Script, *, reactor: Any = None) -> None:
        if reactor is None:
            from twisted.internet import reactor as default_reactor

            reactor = default_reactor
        self.script = script
        self._reactor = reactor
        self.requests: list[dict[str, Any]] = []
        self.request_headers: list[dict[str, str]] = []
        self.calls = 0
        self.disconnects = 0
        self._disconnect_waiters: list[tuple[int, Deferred[None]]] = []
        self._playbacks: set[_Playback] = set()
        self._site = _QuietSite(_Root(self))
        self._port: IListeningPort | None = None
        self.base_url = ""

    def start(self, port: int = 0) -> Deferred[str]:
        """Listen on 127.0.0.1 (``port`` 0 = any free port); resolves with the base URL."""
        self._port = self._reactor.listenTCP(port, self._site, interface="127.0.0.1")
        assert self._port is not None
        address: Any = self._port.getHost()
        self.base_url = f"http://127.0.0.1:{address.port}/v1"
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

    def _chat(self, request: Request, body: dict[str, Any]) -> bytes | int:
        self.requests.append(body)
        self.request_headers.append(
            {
                name.decode("latin-1").lower(): b", ".join(values).decode("latin-1")
                for name, values in request.requestHeaders.getAllRawHeaders()
            }
        )
        number = self.calls
        self.calls += 1
        turn = self.script.turn_at(number)
        if turn is None:
            request.setResponseCode(500)
            request.setHeader(b"content-type", b"application/json")
            return _error_body(self.script.exhausted_message(), 500)
        if turn.status is not None or (turn.error is not None and not _has_content(turn)):
            status = turn.status or 500
            request.setResponseCode(status)
            if turn.body is not None:
                request.setHeader(b"content-type", b"text/plain; charset=utf-8")
                return turn.body.encode("utf-8")
            request.setHeader(b"content-type", b"application/json")
            return _error_body(turn.error or "scripted HTTP error", status)
        streaming = body.get("stream") is True
        if turn.garbage is not None:
            content_type = b"text/event-stream" if streaming else b"application/json"
            request.setHeader(b"content-type", content_type)
            return turn.garbage.encode("utf-8")
        if streaming:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            pieces, cut = self._stream(turn, number + 1, include_usage)
            request.setHeader(b"content-type", b"text/event-stream")
            request.setHeader(b"cache-control", b"no-cache")
        else:
            data, cut = self._whole(turn, number + 1)
            request.setHeader(b"content-type", b"application/json")
            if not cut:
                request.setHeader(b"content-length", str(len(data)).encode())
            pieces = [data]
        if turn.split_bytes:
            data, size = b"".join(pieces), turn.split_bytes
            pieces = [data[start : start + size] for start in range(0, len(data), size)]
        _Playback(self, request, pieces, turn.delay, cut).start()
        return NOT_DONE_YET

    def _stream(self, turn: Turn, number: int, include_usage: bool) -> tuple[list[bytes], bool]:
        created = int(time.time())
        common = {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion.chunk",
            "created": created,
            "model": self.script.model,
        }
        deltas = turn.deltas(number)
        events: list[bytes] = []
        if turn.error is not None:
            deltas = deltas[:-1]
        for delta, finish in deltas:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            events.append(_sse({**common, "choices": [choice]}))
        if turn.error is not None:
            events.append(_sse({"error": {"message": turn.error, "type": "server_error"}}))
        else:
            if include_usage and turn.usage is not None:
                events.append(_sse({**common, "choices": [], "usage": turn.usage.as_openai()}))
            events.append(b"data: [DONE]\n\n")
        cut = turn.cut_after is not None
        if cut:
            events = events[: turn.cut_after]
        return events, cut

    def _whole(self, turn: Turn, number: int) -> tuple[bytes, bool]:
        answer: dict[str, Any] = {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.script.model,
            "choices": [
                {
                    "index": 0,
                    "message": turn.message(number),
                    "finish_reason": turn.effective_finish_reason,
                }
            ],
        }
        if turn.usage is not None:
            answer["usage"] = turn.usage.as_openai()
        data = json.dumps(answer, ensure_ascii=False).encode("utf-8")
        if turn.cut_after is not None:
            return data[: len(data) // 2], True
        return data, False


def _has_content(turn: Turn) -> bool:
    return bool(turn.chunks or turn.reasoning or turn.tool_calls)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m acpkit.testing.modelserver SCRIPT [--port N]``: serve until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m acpkit.testing.modelserver",
        description="Serve a scripted OpenAI-compatible model on 127.0.0.1.",
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
