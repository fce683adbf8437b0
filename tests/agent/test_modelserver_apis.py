"""
The four APIs of the scripted model server, as the vendors' own client libraries read them.

The server runs on the real reactor on loopback; each SDK call (blocking httpx) runs in a
thread (``deferToThread``) so the reactor keeps serving. ``openai``, ``anthropic`` and
``google-genai`` come from the ``test`` extra.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from typing import Any, TypeVar

import anthropic
import openai
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from openai.types.responses import Response
from treq.client import HTTPClient
from twisted.internet import reactor, task
from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import SynchronousTestCase, TestCase
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.http_headers import Headers

from acpkit.conformance.model import ConformanceModel
from acpkit.testing.modelapi import Adapter, Message, ToolCall, ToolSpec
from acpkit.testing.modelapi.anthropic import Messages
from acpkit.testing.modelapi.gemini import Gemini
from acpkit.testing.modelapi.openai_chat import ChatCompletions
from acpkit.testing.modelapi.openai_responses import Responses
from acpkit.testing.modelserver import ScriptedModelServer
from acpkit.testing.script import Script, script_of
from tests.helpers import examples

T = TypeVar("T")

# The vendors' SDKs send platform.processor() in their headers, and the first call in a
# process runs ``uname -p`` (platform caches the answer). Asked here, at collection, so
# that no test starts that child process: the spawn guard caught it in the first test of
# a worker to build a client.
platform.processor()

SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {"command": {"type": "string"}},
    "required": ["command"],
}
TURN = {
    "chunks": ["Hi", " there", " é"],
    "reasoning": ["hmm", " yes"],
    "usage": {"input": 30, "output": 7, "cached": 4, "reasoning": 2},
    "tool_calls": [{"name": "bash", "arguments": {"command": "ls -l"}, "fragments": 3}],
}
TEXT_TURN = {"chunks": ["Hello", ", world"], "usage": {"input": 5, "output": 2}}


def treq_client() -> HTTPClient:
    """A treq client without persistent connections (trial wants a clean reactor)."""
    return HTTPClient(Agent(reactor, pool=HTTPConnectionPool(reactor, persistent=False)))


class _Served(TestCase):
    """Starts a server per test; runs blocking SDK calls in threads."""

    server: ScriptedModelServer

    async def serve(self, script: Script, server_reactor: Any = None) -> str:
        self.server = ScriptedModelServer(script, reactor=server_reactor or reactor)
        await self.server.start()
        self.addCleanup(self.server.stop)
        return self.server.root_url

    def in_thread(self, call: Callable[[], T]) -> Deferred[T]:
        """Run a blocking SDK call off the reactor thread."""
        return deferToThread(call)

    async def failure_of(
        self, call: Callable[[], object], error: type[BaseException]
    ) -> BaseException:
        """What ``call`` raises off the reactor thread; the test fails unless an ``error``."""
        # assertFailure's Deferred fires with the exception (its annotation says the
        # Deferred's own result type).
        raised: object = await self.assertFailure(self.in_thread(call), error)
        assert isinstance(raised, error)
        return raised

    def openai(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.server.base_url, api_key="sk-test", max_retries=0)

    def anthropic(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.server.root_url, api_key="k", max_retries=0)

    def gemini(self, api_version: str | None = None) -> genai.Client:
        options = genai_types.HttpOptions(base_url=self.server.root_url, api_version=api_version)
        return genai.Client(api_key="gk", http_options=options)


class ChatCompletionsTests(_Served):
    """OpenAI chat completions through the ``openai`` SDK."""

    async def test_streamed_and_whole(self) -> None:
        """Text, tool-call fragments and usage arrive as the SDK assembles them."""
        await self.serve(script_of([TURN, TURN]))
        client = self.openai()
        tools: list[ChatCompletionToolParam] = [
            {"type": "function", "function": {"name": "bash", "parameters": SCHEMA}}
        ]
        messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "go"}]

        def streamed() -> tuple[str, str, Any]:
            text, arguments, usage = "", "", None
            for chunk in client.chat.completions.create(
                model="any",
                messages=messages,
                tools=tools,
                stream=True,
                stream_options={"include_usage": True},
            ):
                usage = chunk.usage or usage
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    for call in choice.delta.tool_calls or []:
                        arguments += (call.function and call.function.arguments) or ""
            return text, arguments, usage

        text, arguments, usage = await self.in_thread(streamed)
        self.assertEqual((text, json.loads(arguments)), ("Hi there é", {"command": "ls -l"}))
        self.assertEqual((usage.prompt_tokens, usage.completion_tokens), (30, 7))
        self.assertEqual(usage.prompt_tokens_details.cached_tokens, 4)
        whole = await self.in_thread(
            lambda: client.chat.completions.create(model="any", messages=messages)
        )
        self.assertEqual(whole.choices[0].finish_reason, "tool_calls")
        call = whole.choices[0].message.tool_calls[0]  # type: ignore[index]
        self.assertEqual((call.function.name, call.id), ("bash", "call_2_1"))  # type: ignore[union-attr]
        self.assertEqual(self.server.request_apis, ["openai-chat", "openai-chat"])
        self.assertEqual(self.server.model_requests[0].tools[0].name, "bash")


class ResponsesTests(_Served):
    """The OpenAI Responses API through the ``openai`` SDK."""

    async def test_whole_response(self) -> None:
        """A non-streamed response has a message, a function call and usage details."""
        await self.serve(script_of([TURN]))
        client = self.openai()
        tools = [{"type": "function", "name": "bash", "description": "d", "parameters": SCHEMA}]
        response = await self.in_thread(
            lambda: client.responses.create(
                model="any",
                instructions="be brief",
                input="go",
                # Without "strict", which the SDK's FunctionToolParam requires: what
                # clients that omit it send.
                tools=tools,  # type: ignore[arg-type]
            )
        )
        self.assertEqual(response.output_text, "Hi there é")
        calls = [item for item in response.output if item.type == "function_call"]
        self.assertEqual(json.loads(calls[0].arguments), {"command": "ls -l"})
        usage = response.usage
        assert usage is not None
        self.assertEqual((usage.input_tokens, usage.output_tokens, usage.total_tokens), (30, 7, 37))
        self.assertEqual(usage.input_tokens_details.cached_tokens, 4)
        self.assertEqual(usage.output_tokens_details.reasoning_tokens, 2)
        neutral = self.server.model_requests[0]
        self.assertEqual((neutral.api, neutral.system), ("openai-responses", "be brief"))
        self.assertEqual(neutral.messages, (Message("user", "go"),))

    async def test_streamed_event_sequence(self) -> None:
        """The stream has the real event sequence, numbered, ending in response.completed."""
        await self.serve(script_of([{**TURN, "reasoning": []}]))
        client = self.openai()

        # (The events' classes live in the SDK's private openai.lib.streaming package.)
        def streamed() -> tuple[list[Any], Response]:
            with client.responses.stream(model="any", input="go") as stream:
                events = list(stream)
                return events, stream.get_final_response()

        events, final = await self.in_thread(streamed)
        kinds = [event.type for event in events]
        self.assertEqual(
            kinds[:6],
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
            ],
        )
        for kind in (
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
        ):
            self.assertIn(kind, kinds)
        self.assertEqual(kinds[-1], "response.completed")
        self.assertEqual([e.sequence_number for e in events], list(range(len(events))))
        self.assertEqual(final.output_text, "Hi there é")
        self.assertEqual(final.usage.input_tokens, 30)  # type: ignore[union-attr]

    def test_input_items_become_neutral_messages(self) -> None:
        """Message, function_call and function_call_output items; function tools only."""
        body = {
            "instructions": "sys",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "ok"}],
                },
                {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "done"},
            ],
            "tools": [
                {"type": "function", "name": "bash", "parameters": SCHEMA},
                {"type": "web_search"},
            ],
            "stream": True,
        }
        neutral = Responses().parse(body, model="m", stream=False)
        self.assertEqual(neutral.system, "sys")
        self.assertTrue(neutral.stream)
        self.assertEqual(
            neutral.messages,
            (
                Message("user", "hi"),
                Message("assistant", "ok", tool_calls=(ToolCall("c1", "bash", {}),)),
                Message("tool", "done", tool_call_id="c1"),
            ),
        )
        self.assertEqual(neutral.tools, (ToolSpec("bash", "", SCHEMA),))


class AnthropicTests(_Served):
    """Anthropic Messages through the ``anthropic`` SDK."""

    async def test_whole_message(self) -> None:
        """A non-streamed message: thinking, text and tool_use blocks, stop_reason, usage."""
        await self.serve(script_of([TURN]))
        client = self.anthropic()
        tools = [{"name": "bash", "description": "run", "input_schema": SCHEMA}]
        message = await self.in_thread(
            lambda: client.messages.create(
                model="claude-any",
                max_tokens=100,
                system=[{"type": "text", "text": "sys"}],
                messages=[{"role": "user", "content": "go"}],
                tools=tools,  # type: ignore[arg-type]
            )
        )
        self.assertEqual(
            [block.type for block in message.content], ["thinking", "text", "tool_use"]
        )
        self.assertEqual(message.content[2].input, {"command": "ls -l"})  # type: ignore[union-attr]
        self.assertEqual(message.stop_reason, "tool_use")
        usage = message.usage
        self.assertEqual((usage.input_tokens, usage.output_tokens), (30, 7))
        self.assertEqual((usage.cache_read_input_tokens, usage.cache_creation_input_tokens), (4, 0))
        neutral = self.server.model_requests[0]
        self.assertEqual((neutral.api, neutral.system), ("anthropic", "sys"))

    async def test_streamed_message(self) -> None:
        """The stream's events assemble into the same message; text and JSON deltas arrive."""
        await self.serve(script_of([TURN, TEXT_TURN]))
        client = self.anthropic()

        def streamed(n: int) -> tuple[list[str], anthropic.types.Message]:
            with client.messages.stream(
                model="claude-any", max_tokens=100, messages=[{"role": "user", "content": "go"}]
            ) as stream:
                kinds: list[str] = [event.type for event in stream]
                return kinds, stream.get_final_message()

        kinds, message = await self.in_thread(lambda: streamed(0))
        self.assertEqual(kinds[0], "message_start")
        self.assertIn("thinking", kinds)
        self.assertIn("input_json", kinds)
        self.assertEqual(message.content[1].text, "Hi there é")  # type: ignore[union-attr]
        self.assertEqual(message.content[2].input, {"command": "ls -l"})  # type: ignore[union-attr]
        self.assertEqual((message.stop_reason, message.usage.output_tokens), ("tool_use", 7))
        kinds, message = await self.in_thread(lambda: streamed(1))
        self.assertEqual(message.stop_reason, "end_turn")
        self.assertEqual(message.content[0].text, "Hello, world")  # type: ignore[union-attr]
        self.assertEqual(message.usage.input_tokens, 5)
        self.assertEqual(self.server.request_apis, ["anthropic", "anthropic"])

    async def test_count_tokens_and_models(self) -> None:
        """count_tokens answers a count without consuming a turn; models lists the model."""
        await self.serve(script_of([], model="tiny"))
        client = self.anthropic()
        count = await self.in_thread(
            lambda: client.messages.count_tokens(
                model="x", messages=[{"role": "user", "content": "hello there"}]
            )
        )
        self.assertGreater(count.input_tokens, 0)
        models = await self.in_thread(lambda: list(client.models.list()))
        self.assertEqual([model.id for model in models], ["tiny"])
        self.assertEqual(self.server.calls, 0)

    def test_blocks_become_neutral_messages(self) -> None:
        """tool_use, tool_result (with is_error) and image blocks; server tools are skipped."""
        body = {
            "system": "sys",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "look"},
                        {"type": "image", "source": {"type": "base64", "data": ""}},
                    ],
                },
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "content": [{"type": "text", "text": "denied"}],
                            "is_error": True,
                        }
                    ],
                },
            ],
            "tools": [
                {"name": "bash", "input_schema": SCHEMA},
                {"type": "web_search_20250305", "name": "web_search"},
            ],
        }
        neutral = Messages().parse(body, model="m", stream=False)
        self.assertEqual(
            neutral.messages,
            (
                Message("user", "look", images=1),
                Message("assistant", "", tool_calls=(ToolCall("t1", "bash", {}),)),
                Message("tool", "denied", tool_call_id="t1", is_error=True),
            ),
        )
        self.assertEqual([tool.name for tool in neutral.tools], ["bash"])


class GeminiTests(_Served):
    """The Gemini API through the ``google-genai`` SDK (and raw HTTP for the JSON array)."""

    def config(self) -> genai_types.GenerateContentConfig:
        declaration = genai_types.FunctionDeclaration(
            name="run_shell_command", description="run", parameters_json_schema=SCHEMA
        )
        return genai_types.GenerateContentConfig(
            system_instruction="sys",
            tools=[genai_types.Tool(function_declarations=[declaration])],
        )

    async def test_generate_content(self) -> None:
        """A non-streamed answer: text, a function call with id, usage metadata."""
        await self.serve(script_of([TURN]))
        client = self.gemini()
        response = await self.in_thread(
            lambda: client.models.generate_content(
                model="gemini-any", contents="go", config=self.config()
            )
        )
        self.assertEqual(response.text, "Hi there é")
        (call,) = response.function_calls or []
        self.assertEqual(
            (call.name, call.args, call.id), ("bash", {"command": "ls -l"}, "call_1_1")
        )
        usage = response.usage_metadata
        assert usage is not None
        self.assertEqual((usage.prompt_token_count, usage.candidates_token_count), (30, 7))
        self.assertEqual(response.candidates[0].finish_reason, "STOP")  # type: ignore[index]
        neutral = self.server.model_requests[0]
        self.assertEqual((neutral.api, neutral.system), ("gemini", "sys"))
        self.assertEqual(neutral.tools, (ToolSpec("run_shell_command", "run", SCHEMA),))
        self.assertEqual(self.server.request_headers[0]["x-goog-api-key"], "gk")

    async def test_stream_generate_content_sse(self) -> None:
        """``streamGenerateContent?alt=sse`` chunks carry text pieces, then calls and usage."""
        await self.serve(script_of([TURN]))
        client = self.gemini(api_version="v1")

        def streamed() -> list[genai_types.GenerateContentResponse]:
            return list(
                client.models.generate_content_stream(
                    model="gemini-any", contents="go", config=self.config()
                )
            )

        chunks = await self.in_thread(streamed)
        text = "".join(
            part.text or ""
            for chunk in chunks
            for part in chunk.candidates[0].content.parts  # type: ignore[index, union-attr]
            if not part.thought
        )
        self.assertEqual(text, "Hi there é")
        self.assertEqual(chunks[-1].function_calls[0].args, {"command": "ls -l"})  # type: ignore[index]
        self.assertEqual(chunks[-1].usage_metadata.total_token_count, 39)  # type: ignore[union-attr]
        self.assertTrue(self.server.model_requests[0].stream)

    async def test_json_array_stream_models_and_key_parameter(self) -> None:
        """Without alt=sse the stream is a JSON array; ``?key=`` works; models are listed."""
        root = await self.serve(script_of([TEXT_TURN], model="tiny"))
        client = treq_client()
        url = f"{root}/v1beta/models/whatever:streamGenerateContent?key=k"
        body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
        response = await client.post(url, json=body)
        chunks = json.loads(await response.content())
        self.assertIsInstance(chunks, list)
        parts = [c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks]
        self.assertEqual("".join(parts), "Hello, world")
        self.assertEqual(chunks[-1]["usageMetadata"]["promptTokenCount"], 5)
        models = await (await client.get(f"{root}/v1/models?key=k")).json()
        self.assertEqual(models["models"][0]["name"], "models/tiny")
        gemini = self.gemini()  # kept: a collected genai.Client closes its connections
        listed = await self.in_thread(lambda: [m.name for m in gemini.models.list()])
        self.assertEqual(listed, ["models/tiny"])
        count = await self.in_thread(
            lambda: gemini.models.count_tokens(model="m", contents="hello")
        )
        assert count.total_tokens is not None
        self.assertGreater(count.total_tokens, 0)

    def test_parts_become_neutral_messages(self) -> None:
        """functionCall / functionResponse parts; OpenAPI-style ``parameters`` lower-cased."""
        body = {
            "contents": [
                {"role": "user", "parts": [{"text": "go"}]},
                {
                    "role": "model",
                    "parts": [{"functionCall": {"name": "ls", "args": {}, "id": "f"}}],
                },
                {
                    "role": "user",
                    "parts": [
                        {"functionResponse": {"name": "ls", "id": "f", "response": {"error": "no"}}}
                    ],
                },
            ],
            "systemInstruction": {"parts": [{"text": "sys"}]},
            "tools": [
                {
                    "functionDeclarations": [
                        {
                            "name": "ls",
                            "parameters": {
                                "type": "OBJECT",
                                "properties": {"path": {"type": "STRING"}},
                            },
                        }
                    ]
                }
            ],
        }
        neutral = Gemini().parse(body, model="m", stream=True)
        self.assertEqual(neutral.messages[1].tool_calls, (ToolCall("f", "ls", {}),))
        self.assertEqual(neutral.messages[2].role, "tool")
        self.assertTrue(neutral.messages[2].is_error)
        self.assertEqual(
            neutral.tools[0].parameters,
            {"type": "object", "properties": {"path": {"type": "string"}}},
        )


class FaultTests(_Served):
    """Script faults on every API."""

    async def test_status_errors_reach_each_sdk(self) -> None:
        """A ``status`` turn is an HTTP error in each API's error shape, as each SDK raises it."""
        fault = {"status": 429, "error": "slow down"}
        await self.serve(script_of([fault], loop=True))

        def chat() -> None:
            self.openai().chat.completions.create(model="m", messages=[])

        def responses() -> None:
            self.openai().responses.create(model="m", input="x")

        def messages() -> None:
            self.anthropic().messages.create(model="m", max_tokens=1, messages=[])

        gemini_client = self.gemini()

        def gemini() -> None:
            gemini_client.models.generate_content(model="m", contents="x")

        for call, error in [
            (chat, openai.RateLimitError),
            (responses, openai.RateLimitError),
            (messages, anthropic.RateLimitError),
            (gemini, genai_errors.ClientError),
        ]:
            failure = await self.failure_of(call, error)
            self.assertIn("slow down", str(failure))

    async def test_stream_errors_and_cuts(self) -> None:
        """An ``error`` after content is an in-stream error; ``cut_after`` drops the line."""
        turns: list[dict[str, Any]] = [
            {"chunks": ["partial"], "error": "boom"},
            {"chunks": ["a", "b", "c", "d"], "cut_after": 3},
        ]
        await self.serve(script_of(turns))

        def streamed() -> None:
            with self.anthropic().messages.stream(model="m", max_tokens=1, messages=[]) as s:
                s.get_final_message()

        failure = await self.failure_of(streamed, anthropic.APIStatusError)
        self.assertIn("boom", str(failure))
        await self.failure_of(streamed, Exception)

    async def test_delay_uses_the_servers_clock(self) -> None:
        """``delay`` spaces streamed events on the server's clock (a task.Clock here)."""
        clock = task.Clock()

        class Hybrid:
            """Real sockets, fake time."""

            listenTCP = staticmethod(reactor.listenTCP)
            callLater = staticmethod(clock.callLater)

        root = await self.serve(script_of([{"chunks": ["one", "two"], "delay": 30}]), Hybrid())
        client = treq_client()
        response = await client.post(
            f"{root}/v1/messages",
            json={"stream": True, "messages": [{"role": "user", "content": "x"}]},
            headers=Headers({b"anthropic-version": [b"2023-06-01"]}),
        )
        received: list[bytes] = []
        first: Deferred[None] = Deferred()

        def collect(data: bytes) -> None:
            received.append(data)
            if not first.called:
                first.callback(None)

        done = response.collect(collect)
        await first
        self.assertNotIn(b"message_stop", b"".join(received))
        for _ in range(20):
            clock.advance(30)
        await done
        body = b"".join(received)
        self.assertIn(b'"text": "two"', body)
        self.assertIn(b"event: message_stop", body)


class EncodingTests(SynchronousTestCase):
    """Unit checks of the adapters' encoders."""

    def test_chat_stream_matches_the_historic_bytes(self) -> None:
        """The chat adapter keeps the exact chunk layout (role on the first delta)."""
        from acpkit.testing.modelserver import answer_of_turn

        turn = script_of([TURN]).turns[0]
        request = ChatCompletions().parse({"stream": True}, model="scripted", stream=False)
        events = ChatCompletions().stream(answer_of_turn(turn, 1), request, 1)
        first = json.loads(events[0][len(b"data: ") :])
        self.assertEqual(
            first["choices"][0]["delta"], {"role": "assistant", "reasoning_content": "hmm"}
        )
        self.assertEqual(events[-1], b"data: [DONE]\n\n")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
keys = st.sampled_from(
    ["messages", "input", "contents", "tools", "system", "instructions", "systemInstruction"]
)
bodies = st.dictionaries(keys | st.text(max_size=6), json_values, max_size=5)
ADAPTERS: list[Adapter] = [ChatCompletions(), Responses(), Messages(), Gemini()]


class RobustnessTests(SynchronousTestCase):
    """Arbitrary bodies never crash an adapter or the conformance model."""

    @settings(max_examples=examples(10 / 3), deadline=None)
    @given(bodies, st.booleans())
    def test_any_body(self, body: dict[str, Any], stream: bool) -> None:
        """Parsing any JSON object works; the model's answer encodes to valid JSON events."""
        for adapter in ADAPTERS:
            request = adapter.parse(body, model="m", stream=stream)
            answer = ConformanceModel().answer(request, 0)
            for event in adapter.stream(answer, request, 1):
                for line in event.decode("utf-8").split("\n"):
                    if line.startswith("data: ") and line != "data: [DONE]":
                        json.loads(line[len("data: ") :])
            json.loads(adapter.whole(answer, request, 1))

    def test_structured_output_requests_get_valid_json(self) -> None:
        """A side request asking for JSON (Gemini CLI's next-speaker check) gets valid JSON."""
        schema = {
            "type": "OBJECT",
            "properties": {
                "reasoning": {"type": "STRING"},
                "next_speaker": {"type": "STRING", "enum": ["user", "model"]},
            },
            "required": ["reasoning", "next_speaker"],
        }
        body = {
            "contents": [{"role": "user", "parts": [{"text": "who speaks next?"}]}],
            "generationConfig": {"responseMimeType": "application/json", "responseSchema": schema},
        }
        request = Gemini().parse(body, model="m", stream=False)
        answer = ConformanceModel().answer(request, 0)
        self.assertEqual(
            json.loads(answer.text), {"reasoning": "conformance", "next_speaker": "user"}
        )
        chat = ChatCompletions().parse(
            {"response_format": {"type": "json_object"}}, model="m", stream=False
        )
        self.assertEqual(json.loads(ConformanceModel().answer(chat, 0).text), {})


class BadBodyTests(_Served):
    """Bodies the server cannot use are refused with 400 in the API's error shape."""

    async def test_not_json(self) -> None:
        """A body that is not a JSON object is a 400 Anthropic error and consumes no turn."""
        root = await self.serve(script_of([TEXT_TURN]))
        response = await treq_client().post(f"{root}/v1/messages", data=b"[1]")
        self.assertEqual(response.code, 400)
        error = json.loads(await response.content())
        self.assertEqual(error["type"], "error")
        self.assertEqual(self.server.calls, 0)
