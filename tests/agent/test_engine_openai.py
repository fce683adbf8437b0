"""The openai engine against a real loopback ScriptedModelServer, and its SSE parser."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import reactor
from twisted.internet.defer import CancelledError, Deferred
from twisted.trial.unittest import SynchronousTestCase, TestCase
from zope.interface.verify import verifyObject

from acpkit.testing.modelserver import ScriptedModelServer
from acpkit.testing.script import Script, script_of
from acpkit_agent.engines import IEngine, make_engine
from acpkit_agent.engines.base import EngineError, ModelReply, ToolSpec
from acpkit_agent.engines.openai import OpenAIEngine, SSEParser

HELLO = [{"role": "user", "content": "hello"}]
BASH = ToolSpec(
    name="bash",
    description="Run a command",
    parameters={"type": "object", "properties": {"command": {"type": "string"}}},
)


class RecordingSink:
    """A StreamSink that keeps every delta."""

    def __init__(self, on_text: Any = None) -> None:
        self.texts: list[str] = []
        self.reasonings: list[str] = []
        self._on_text = on_text

    def text(self, delta: str) -> None:
        self.texts.append(delta)
        if self._on_text is not None:
            self._on_text(delta)

    def reasoning(self, delta: str) -> None:
        self.reasonings.append(delta)


class ServerTestCase(TestCase):
    """Starts a ScriptedModelServer per test on the real reactor."""

    server: ScriptedModelServer

    async def serve(self, script: Script) -> OpenAIEngine:
        """Start a server playing ``script`` (as ``self.server``); an engine aimed at it."""
        self.server = ScriptedModelServer(script, reactor=reactor)
        url = await self.server.start()
        self.addCleanup(self.server.stop)
        return OpenAIEngine(reactor=reactor, base_url=url, api_key="sekrit", timeout=20)

    async def complete(
        self,
        engine: OpenAIEngine,
        sink: RecordingSink | None = None,
        messages: Sequence[Mapping[str, Any]] = HELLO,
        tools: Sequence[ToolSpec] = (),
    ) -> ModelReply:
        return await engine.complete(messages, tools, sink or RecordingSink())

    async def failure_of(self, engine: OpenAIEngine) -> str:
        try:
            await self.complete(engine)
        except EngineError as error:
            return error.message
        self.fail("the call did not fail")


class StreamingTests(ServerTestCase):
    """Streamed answers: text, reasoning, tool calls, usage."""

    async def test_text_and_reasoning_streamed_with_whitespace(self) -> None:
        """Text and reasoning deltas reach the sink in order, whitespace kept, and the reply
        joins them; the request is streamed with usage and carries the API key."""
        engine = await self.serve(
            script_of(
                [{"chunks": ["  Hello", ",\n world ", "\t!"], "reasoning": ["Let me ", "think"]}]
            )
        )
        sink = RecordingSink()
        reply = await self.complete(engine, sink, tools=[BASH])
        self.assertEqual(sink.texts, ["  Hello", ",\n world ", "\t!"])
        self.assertEqual(sink.reasonings, ["Let me ", "think"])
        self.assertEqual(reply.text, "  Hello,\n world \t!")
        self.assertEqual(reply.reasoning, "Let me think")
        self.assertEqual(reply.finish_reason, "stop")
        self.assertEqual(reply.tool_calls, ())
        body = self.server.requests[0]
        self.assertIs(body["stream"], True)
        self.assertEqual(body["stream_options"], {"include_usage": True})
        self.assertEqual(body["messages"], HELLO)
        self.assertEqual(body["tools"], [BASH.as_openai()])
        self.assertEqual(self.server.request_headers[0]["authorization"], "Bearer sekrit")

    async def test_chunk_boundaries_inside_lines_and_utf8(self) -> None:
        """A stream written 3 bytes at a time (cutting SSE lines and UTF-8 sequences) gives
        the same text as written whole."""
        text = ["héllo wörld ", "日本語 ", "emoji 🎉 done"]
        engine = await self.serve(script_of([{"chunks": text, "split_bytes": 3, "delay": 0.0005}]))
        sink = RecordingSink()
        reply = await self.complete(engine, sink)
        self.assertEqual(reply.text, "".join(text))
        self.assertEqual(sink.texts, text)

    async def test_tool_calls_split_over_many_deltas(self) -> None:
        """Tool calls whose arguments come in many fragments are assembled by index."""
        arguments = {"command": "ls -la /tmp && echo 'done — ok'", "timeout": 30}
        engine = await self.serve(
            script_of(
                [
                    {
                        "chunks": ["Running."],
                        "tool_calls": [
                            {"name": "bash", "arguments": arguments, "fragments": 17},
                            {"name": "read_file", "arguments": {"path": "/a"}, "id": "x9"},
                        ],
                    }
                ]
            )
        )
        reply = await self.complete(engine, tools=[BASH])
        self.assertEqual(reply.finish_reason, "tool_calls")
        first, second = reply.tool_calls
        self.assertEqual(
            (first.id, first.name, dict(first.arguments)), ("call_1_1", "bash", arguments)
        )
        self.assertIsNone(first.error)
        self.assertEqual(
            (second.id, second.name, dict(second.arguments)), ("x9", "read_file", {"path": "/a"})
        )
        message = reply.as_message()
        self.assertEqual(message["content"], "Running.")
        self.assertEqual(json.loads(message["tool_calls"][0]["function"]["arguments"]), arguments)

    async def test_unparsable_tool_arguments_are_reported(self) -> None:
        """Arguments that are not a JSON object give arguments {} and an error text."""
        engine = await self.serve(
            script_of([{"tool_calls": [{"name": "bash", "arguments": '{"command": "ls'}]}])
        )
        reply = await self.complete(engine)
        (call,) = reply.tool_calls
        self.assertEqual(call.arguments, {})
        self.assertEqual(call.raw_arguments, '{"command": "ls')
        self.assertIn("not valid JSON", call.error or "")
        self.assertEqual(reply.as_message()["tool_calls"][0]["function"]["arguments"], "{}")

    async def test_usage_with_cached_and_reasoning_tokens(self) -> None:
        """The usage chunk is read, cached and reasoning token details included."""
        engine = await self.serve(
            script_of(
                [
                    {
                        "chunks": ["ok"],
                        "usage": {"input": 100, "output": 20, "cached": 64, "reasoning": 7},
                    }
                ]
            )
        )
        reply = await self.complete(engine)
        assert reply.usage is not None
        self.assertEqual(reply.usage.input_tokens, 100)
        self.assertEqual(reply.usage.output_tokens, 20)
        self.assertEqual(reply.usage.cached_read_tokens, 64)
        self.assertEqual(reply.usage.thought_tokens, 7)
        self.assertEqual(reply.usage.total_tokens, 120)

    async def test_no_usage_when_server_reports_none(self) -> None:
        """Without a usage chunk the reply's usage is None."""
        engine = await self.serve(script_of([{"chunks": ["ok"]}]))
        reply = await self.complete(engine)
        self.assertIsNone(reply.usage)

    async def test_model_learned_from_the_server(self) -> None:
        """Without a configured model the first id of /v1/models is sent, asked only once."""
        engine = await self.serve(script_of([{"chunks": ["a"]}, {"chunks": ["b"]}], model="tiny"))
        await self.complete(engine)
        await self.complete(engine)
        self.assertEqual([body["model"] for body in self.server.requests], ["tiny", "tiny"])
        self.assertEqual(engine.description, f"openai ({engine.base_url}, tiny)")

    async def test_cancel_while_learning_the_model(self) -> None:
        """Cancelling before the model id is known fails with CancelledError, no request made."""
        engine = await self.serve(script_of([{"chunks": ["a"]}]))
        call = engine.complete(HELLO, [], RecordingSink())
        call.cancel()
        try:
            await call
        except CancelledError:
            pass
        else:
            self.fail("the call was not cancelled")
        self.assertEqual(self.server.requests, [])

    async def test_history_messages_keep_only_known_keys(self) -> None:
        """Agent-private keys of history messages are not sent to the server."""
        engine = await self.serve(script_of([{"chunks": ["ok"]}]))
        history: list[dict[str, Any]] = [
            {"role": "system", "content": "be brief", "_compact": True},
            {"role": "assistant", "content": "", "reasoning_content": "r", "tool_calls": []},
            {"role": "tool", "tool_call_id": "c1", "content": "out", "_meta": {}},
        ]
        await self.complete(engine, messages=history)
        self.assertEqual(
            self.server.requests[0]["messages"],
            [
                {"role": "system", "content": "be brief"},
                {"role": "assistant", "content": "", "reasoning_content": "r", "tool_calls": []},
                {"role": "tool", "tool_call_id": "c1", "content": "out"},
            ],
        )


class FailureTests(ServerTestCase):
    """Every failure becomes a one-line EngineError."""

    async def test_http_500(self) -> None:
        """HTTP 500 gives an EngineError with the status and the server's message."""
        engine = await self.serve(script_of([{"status": 500, "error": "out of memory"}]))
        message = await self.failure_of(engine)
        self.assertIn("HTTP 500", message)
        self.assertIn("out of memory", message)
        self.assertNotIn("\n", message)

    async def test_http_error_with_plain_body(self) -> None:
        """A non-JSON error body appears as a one-line excerpt."""
        engine = await self.serve(
            script_of([{"status": 404, "body": "model\nnot\nfound " + "x" * 500}])
        )
        message = await self.failure_of(engine)
        self.assertIn("HTTP 404", message)
        self.assertIn("model not found", message)
        self.assertLess(len(message), 300)

    async def test_garbage_body(self) -> None:
        """A 200 answer that is not an event stream gives an EngineError."""
        engine = await self.serve(script_of([{"garbage": "<html>Bad gateway</html>\n"}]))
        message = await self.failure_of(engine)
        self.assertIn("not an event stream", message)

    async def test_non_json_event_data(self) -> None:
        """An event whose data is not JSON gives an EngineError."""
        engine = await self.serve(script_of([{"garbage": "data: {oops\n\n"}]))
        message = await self.failure_of(engine)
        self.assertIn("non-JSON", message)

    async def test_error_event_mid_stream(self) -> None:
        """An error object sent inside the stream fails the call with its message."""
        engine = await self.serve(
            script_of([{"chunks": ["partial"], "error": "context length exceeded"}])
        )
        message = await self.failure_of(engine)
        self.assertIn("context length exceeded", message)

    async def test_connection_refused(self) -> None:
        """Nothing listening gives an EngineError saying the connection was refused."""
        server = ScriptedModelServer(script_of([]), reactor=reactor)
        url = await server.start()
        await server.stop()
        engine = OpenAIEngine(reactor=reactor, base_url=url, timeout=20)
        message = await self.failure_of(engine)
        self.assertIn("connection refused", message)
        self.assertIn(url, message)

    async def test_stream_cut_mid_way(self) -> None:
        """A stream whose connection drops before the end gives an EngineError."""
        engine = await self.serve(script_of([{"chunks": ["a", "b", "c", "d"], "cut_after": 2}]))
        sink = RecordingSink()
        try:
            await self.complete(engine, sink)
        except EngineError as error:
            self.assertIn("lost mid-answer", error.message)
        else:
            self.fail("the call did not fail")
        self.assertEqual(sink.texts, ["a", "b"])

    async def test_stream_ending_without_finish(self) -> None:
        """A cleanly ended stream without finish_reason or [DONE] gives an EngineError."""
        chunk = {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]}
        engine = await self.serve(script_of([{"garbage": f"data: {json.dumps(chunk)}\n\n"}]))
        message = await self.failure_of(engine)
        self.assertIn("before the model finished", message)

    async def test_exhausted_script_is_an_http_error(self) -> None:
        """The server's 'script exhausted' answer reaches the engine as an EngineError."""
        engine = await self.serve(script_of([{"chunks": ["one"]}]))
        await self.complete(engine)
        message = await self.failure_of(engine)
        self.assertIn("script exhausted after 1 turns", message)

    async def test_cancel_mid_stream_closes_the_connection(self) -> None:
        """Cancelling the Deferred after the first delta fails it with CancelledError and the
        server sees the client hang up."""
        engine = await self.serve(
            script_of([{"chunks": ["first", "second", "third"], "delay": 60}])
        )
        calls: list[Deferred[ModelReply]] = []
        sink = RecordingSink(on_text=lambda delta: calls[0].cancel())
        call = engine.complete(HELLO, [], sink)
        calls.append(call)
        try:
            await call
        except CancelledError:
            pass
        else:
            self.fail("the call was not cancelled")
        await self.server.wait_for_disconnects(1)
        self.assertEqual(sink.texts, ["first"])
        self.assertEqual(self.server.disconnects, 1)


class ContextWindowTests(ServerTestCase):
    """context_window(): configured, probed via /props or /api/show, else 0."""

    async def test_configured_value_wins(self) -> None:
        """A configured context_window is returned without asking the server."""
        engine = make_engine(
            "openai", {"base_url": "http://127.0.0.1:9/v1", "context_window": 1234}, reactor=reactor
        )
        self.assertEqual(await engine.context_window(), 1234)

    async def test_probe_llama_cpp_props(self) -> None:
        """The window is read from llama.cpp's /props."""
        engine = await self.serve(script_of([], context_window=8192, context_probe="props"))
        self.assertEqual(await engine.context_window(), 8192)

    async def test_probe_ollama_api_show(self) -> None:
        """The window is read from Ollama's /api/show when /props does not answer."""
        engine = await self.serve(script_of([], context_window=4096, context_probe="ollama"))
        self.assertEqual(await engine.context_window(), 4096)

    async def test_probe_vllm_models(self) -> None:
        """The window is read from vLLM's max_model_len in /v1/models as a last resort."""
        engine = await self.serve(script_of([], context_window=2048, context_probe="vllm"))
        self.assertEqual(await engine.context_window(), 2048)

    async def test_zero_when_nothing_answers(self) -> None:
        """With neither probe answering the window is 0."""
        engine = await self.serve(script_of([], context_window=4096, context_probe="none"))
        self.assertEqual(await engine.context_window(), 0)

    async def test_zero_when_server_is_down(self) -> None:
        """With no server at all the probe gives 0 and does not fail."""
        server = ScriptedModelServer(script_of([]), reactor=reactor)
        url = await server.start()
        await server.stop()
        engine = OpenAIEngine(reactor=reactor, base_url=url, timeout=20)
        self.assertEqual(await engine.context_window(), 0)


class SettingsTests(SynchronousTestCase):
    """make_engine('openai', ...) validates its settings."""

    def test_unknown_key(self) -> None:
        """An unknown key is a ValueError naming it."""
        with self.assertRaises(ValueError) as caught:
            make_engine("openai", {"base_uri": "http://x/v1"}, reactor=reactor)
        self.assertIn("base_uri", str(caught.exception))

    def test_bad_types_and_values(self) -> None:
        """Wrong types and out-of-range values are ValueErrors naming the key."""
        cases: list[tuple[dict[str, Any], str]] = [
            ({"temperature": "hot"}, "temperature"),
            ({"max_tokens": 0}, "max_tokens"),
            ({"timeout": -1}, "timeout"),
            ({"context_window": True}, "context_window"),
            ({"base_url": "localhost:8080"}, "base_url"),
        ]
        for settings, key in cases:
            with self.assertRaises(ValueError) as caught:
                make_engine("openai", settings, reactor=reactor)
            self.assertIn(key, str(caught.exception))

    def test_defaults_from_environment(self) -> None:
        """base_url and api_key default to OPENAI_BASE_URL and OPENAI_API_KEY."""
        self.patch(os, "environ", {"OPENAI_BASE_URL": "http://h:1/v1/"})
        engine = make_engine("openai", {"model": "m", "temperature": 1}, reactor=reactor)
        assert isinstance(engine, OpenAIEngine)
        self.assertEqual(engine.base_url, "http://h:1/v1")
        self.assertEqual(engine.description, "openai (http://h:1/v1, m)")
        body = engine.request_body(HELLO, [])
        self.assertEqual((body["model"], body["temperature"]), ("m", 1))

    def test_engines_provide_the_interface(self) -> None:
        """Every engine make_engine builds verifies against IEngine."""
        directory = Path(self.mktemp())
        directory.mkdir()
        (directory / "s.toml").write_text("[[turn]]\nchunks = ['x']\n", encoding="utf-8")
        for name, settings in [
            ("openai", {}),
            ("scripted", {"script": str(directory / "s.toml")}),
            ("echo", {}),
        ]:
            engine = make_engine(name, settings, reactor=reactor)
            self.assertTrue(verifyObject(IEngine, engine))
            self.assertEqual(engine.name, name)
            self.assertIsInstance(engine.description, str)

    def test_unknown_engine(self) -> None:
        """An unknown engine name is a ValueError listing the known ones."""
        with self.assertRaises(ValueError) as caught:
            make_engine("gpt", {})
        self.assertIn("openai", str(caught.exception))


def _events(stream: bytes, cuts: list[int]) -> list[str]:
    seen: list[str] = []
    parser = SSEParser(seen.append)
    start = 0
    for cut in [*sorted(set(cuts)), len(stream)]:
        parser.feed(stream[start:cut])
        start = max(start, cut)
    parser.finish()
    return seen


class SSEParserTests(SynchronousTestCase):
    """The SSE parser is independent of how the body is cut into reads."""

    @given(
        payloads=st.lists(
            st.text(alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\r\n")),
            max_size=6,
        ),
        data=st.data(),
        crlf=st.booleans(),
    )
    def test_any_cut_points(self, payloads: list[str], data: st.DataObject, crlf: bool) -> None:
        """Events come out the same whatever the read boundaries and line endings."""
        end = b"\r\n" if crlf else b"\n"
        stream = b"".join(
            b": comment" + end + b"data: " + p.encode("utf-8") + end + end for p in payloads
        )
        cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=10))
        self.assertEqual(_events(stream, cuts), payloads)

    def test_multi_line_data_and_ignored_fields(self) -> None:
        """data lines of one event join with newlines; event/id/retry are ignored."""
        stream = b"event: x\nid: 1\nretry: 5\ndata: a\ndata:b\n\n"
        self.assertEqual(_events(stream, []), ["a\nb"])

    def test_garbage_line(self) -> None:
        """A line that is not an SSE field raises EngineError."""
        parser = SSEParser(lambda data: None)
        with self.assertRaises(EngineError):
            parser.feed(b"<!DOCTYPE html>\n")
