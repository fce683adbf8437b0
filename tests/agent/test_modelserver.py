"""The scripted OpenAI-compatible model server (acpkit.testing.modelserver), over real HTTP."""

from __future__ import annotations

import io
import json
import os
import sys
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import pytest
from treq.client import HTTPClient
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase, TestCase
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.http_headers import Headers

from acpkit.testing.modelserver import ScriptedModelServer, main
from acpkit.testing.script import Script, script_of

ROOT = Path(__file__).resolve().parent.parent.parent
TURN = {
    "chunks": ["Hi", " there"],
    "reasoning": ["hmm"],
    "usage": {"input": 3, "output": 2},
    "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}],
}


def http_client() -> HTTPClient:
    """A treq client without persistent connections (trial wants a clean reactor)."""
    return HTTPClient(Agent(reactor, pool=HTTPConnectionPool(reactor, persistent=False)))


treq = http_client()


def sse_data(body: bytes) -> list[str]:
    """The data of each event of an SSE body."""
    return [
        line[len("data: ") :]
        for line in body.decode("utf-8").split("\n")
        if line.startswith("data: ")
    ]


class ModelServerTests(TestCase):
    """Endpoints, streaming and non-streaming answers, faults and request recording."""

    async def serve(self, script: Script) -> str:
        self.server = ScriptedModelServer(script, reactor=reactor)
        url = await self.server.start()
        self.addCleanup(self.server.stop)
        return url

    async def post(self, url: str, body: Any) -> tuple[int, bytes, str]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        response = await treq.post(
            url, data=data, headers=Headers({b"Authorization": [b"Bearer k"]})
        )
        content = await response.content()
        content_type = response.headers.getRawHeaders("content-type", [""])[0]
        return response.code, content, content_type

    async def test_streamed_turn_with_usage(self) -> None:
        """A streamed POST gets chunks, a usage chunk when asked, then [DONE]."""
        url = await self.serve(script_of([TURN]))
        request = {"stream": True, "stream_options": {"include_usage": True}, "messages": []}
        code, body, content_type = await self.post(f"{url}/chat/completions", request)
        self.assertEqual((code, content_type), (200, "text/event-stream"))
        data = sse_data(body)
        self.assertEqual(data[-1], "[DONE]")
        chunks = [json.loads(item) for item in data[:-1]]
        self.assertEqual(chunks[0]["choices"][0]["delta"]["role"], "assistant")
        self.assertEqual(chunks[-1]["usage"]["prompt_tokens"], 3)
        self.assertEqual(chunks[-1]["choices"], [])
        self.assertEqual(chunks[-2]["choices"][0]["finish_reason"], "tool_calls")
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
        self.assertEqual(text, "Hi there")
        self.assertEqual(self.server.requests, [request])
        self.assertEqual(self.server.request_headers[0]["authorization"], "Bearer k")

    async def test_no_usage_chunk_unless_asked(self) -> None:
        """Without stream_options.include_usage no usage chunk is sent."""
        url = await self.serve(script_of([TURN]))
        _, body, _ = await self.post(f"{url}/chat/completions", {"stream": True})
        self.assertFalse(any("usage" in item for item in sse_data(body)))

    async def test_non_streamed_turn(self) -> None:
        """A POST without stream gets one chat.completion object."""
        url = await self.serve(script_of([TURN]))
        code, body, content_type = await self.post(f"{url}/chat/completions", {"messages": []})
        self.assertEqual((code, content_type), (200, "application/json"))
        answer = json.loads(body)
        message = answer["choices"][0]["message"]
        self.assertEqual(message["content"], "Hi there")
        self.assertEqual(message["reasoning_content"], "hmm")
        self.assertEqual(
            json.loads(message["tool_calls"][0]["function"]["arguments"]), {"command": "ls"}
        )
        self.assertEqual(answer["usage"]["completion_tokens"], 2)

    async def test_models_props_and_show(self) -> None:
        """/v1/models names the script's model; /props and /api/show report the window."""
        url = await self.serve(script_of([], model="tiny", context_window=512))
        root = url[: -len("/v1")]
        models = await (await treq.get(f"{url}/models")).json()
        self.assertEqual(models["data"][0]["id"], "tiny")
        props = await (await treq.get(f"{root}/props")).json()
        self.assertEqual(props["default_generation_settings"]["n_ctx"], 512)
        show = await (await treq.post(f"{root}/api/show", json={"model": "tiny"})).json()
        self.assertEqual(show["model_info"]["scripted.context_length"], 512)

    async def test_probes_off_answer_404(self) -> None:
        """With context_probe = none (or no window), the probe endpoints answer 404."""
        url = await self.serve(script_of([], context_window=512, context_probe="none"))
        root = url[: -len("/v1")]
        self.assertEqual((await treq.get(f"{root}/props")).code, 404)
        response = await treq.post(f"{root}/api/show", json={})
        self.assertEqual(response.code, 404)
        await response.content()

    async def test_bad_json_is_400_and_consumes_no_turn(self) -> None:
        """A body that is not a JSON object gets 400 and the turn stays for the next request."""
        url = await self.serve(script_of([{"chunks": ["ok"]}]))
        code, body, _ = await self.post(f"{url}/chat/completions", b"{nope")
        self.assertEqual(code, 400)
        self.assertIn("not a JSON object", json.loads(body)["error"]["message"])
        code, body, _ = await self.post(f"{url}/chat/completions", {"messages": []})
        self.assertEqual(json.loads(body)["choices"][0]["message"]["content"], "ok")

    async def test_exhausted_and_status_faults(self) -> None:
        """A status turn answers that status; past the end the server answers 500."""
        url = await self.serve(script_of([{"status": 429, "error": "slow down"}]))
        code, body, _ = await self.post(f"{url}/chat/completions", {"stream": True})
        self.assertEqual(code, 429)
        self.assertEqual(json.loads(body)["error"]["message"], "slow down")
        code, body, _ = await self.post(f"{url}/chat/completions", {"stream": True})
        self.assertEqual(code, 500)
        self.assertIn("script exhausted after 1 turns", json.loads(body)["error"]["message"])

    async def test_loop(self) -> None:
        """A looping script serves its turns again and again."""
        url = await self.serve(script_of([{"chunks": ["a"]}, {"chunks": ["b"]}], loop=True))
        texts = []
        for _ in range(3):
            _, body, _ = await self.post(f"{url}/chat/completions", {})
            texts.append(json.loads(body)["choices"][0]["message"]["content"])
        self.assertEqual(texts, ["a", "b", "a"])

    async def test_unknown_path_is_404(self) -> None:
        """Unknown endpoints answer 404 with a JSON error."""
        url = await self.serve(script_of([]))
        code, body, _ = await self.post(f"{url}/completions", {})
        self.assertEqual(code, 404)
        self.assertIn("no such endpoint", json.loads(body)["error"]["message"])


class _LineReader(ProcessProtocol):
    def __init__(self) -> None:
        self.first_line: Deferred[str] = Deferred()
        self.ended: Deferred[None] = Deferred()
        self._out = b""

    def outReceived(self, data: bytes) -> None:
        self._out += data
        if b"\n" in self._out and not self.first_line.called:
            self.first_line.callback(self._out.split(b"\n")[0].decode())

    def processEnded(self, reason: Failure) -> None:
        if not self.first_line.called:
            self.first_line.errback(reason)
        self.ended.callback(None)


@pytest.mark.process
class CommandLineTests(TestCase):
    """``python -m acpkit.testing.modelserver SCRIPT`` serves the script."""

    async def test_serves_and_prints_url(self) -> None:
        """The process prints its base URL on stdout and answers on it."""
        directory = Path(self.mktemp())
        directory.mkdir()
        script = directory / "s.json"
        script.write_text(json.dumps({"model": "cli-model", "turn": []}), encoding="utf-8")
        protocol = _LineReader()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        process = reactor.spawnProcess(
            protocol,
            sys.executable,
            [sys.executable, "-m", "acpkit.testing.modelserver", str(script)],
            env=env,
            path=str(ROOT),
        )
        try:
            url = await protocol.first_line
            self.assertRegex(url, r"^http://127\.0\.0\.1:\d+/v1$")
            models = await (await treq.get(f"{url}/models")).json()
            self.assertEqual(models["data"][0]["id"], "cli-model")
        finally:
            process.signalProcess("TERM")
            await protocol.ended


class MainTests(SynchronousTestCase):
    """main() refuses bad scripts before serving."""

    def test_bad_script_exit_status(self) -> None:
        """An invalid script is reported on stderr with exit status 2."""
        path = Path(self.mktemp())
        path.write_text('[[turn]]\nchunk = ["x"]\n', encoding="utf-8")
        errors = io.StringIO()
        with redirect_stderr(errors):
            self.assertEqual(main([str(path)]), 2)
        self.assertIn("turn[0].chunk", errors.getvalue())
