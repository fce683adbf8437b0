"""The scripted engine and the shared script format (acpkit.testing.script)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.defer import CancelledError
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from acpkit.testing.script import ScriptError, load_script, parse_script, script_of
from acpkit_agent.engines import make_engine
from acpkit_agent.engines.base import EngineError, ToolSpec, Usage
from acpkit_agent.engines.scripted import ScriptedEngine

HELLO = [{"role": "user", "content": "hello"}]

TOML_SCRIPT = """
[[turn]]
chunks = ["Hello", ", world"]
reasoning = ["thinking..."]
usage = { input = 10, output = 5, cached = 2, reasoning = 1 }
[[turn.tool_calls]]
name = "bash"
arguments = { command = "ls" }

[[turn]]
chunks = ["Done."]
"""


class RecordingSink:
    """A StreamSink that keeps every delta in order, tagged."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def text(self, delta: str) -> None:
        self.events.append(("text", delta))

    def reasoning(self, delta: str) -> None:
        self.events.append(("reasoning", delta))


class ScriptedEngineTests(SynchronousTestCase):
    """Deterministic replay of scripted turns."""

    def write(self, name: str, text: str) -> Path:
        path = Path(self.mktemp())
        path.mkdir()
        target = path / name
        target.write_text(text, encoding="utf-8")
        return target

    def test_replays_a_toml_script_turn_by_turn(self) -> None:
        """Each complete() consumes the next turn: deltas, tool calls and usage as written."""
        path = self.write("s.toml", TOML_SCRIPT)
        engine = make_engine("scripted", {"script": str(path)}, reactor=Clock())
        sink = RecordingSink()
        reply = self.successResultOf(engine.complete(HELLO, [], sink))
        self.assertEqual(
            sink.events,
            [("reasoning", "thinking..."), ("text", "Hello"), ("text", ", world")],
        )
        self.assertEqual(reply.text, "Hello, world")
        self.assertEqual(reply.finish_reason, "tool_calls")
        (call,) = reply.tool_calls
        self.assertEqual(
            (call.id, call.name, dict(call.arguments)), ("call_1_1", "bash", {"command": "ls"})
        )
        self.assertEqual(reply.usage, Usage(10, 5, thought_tokens=1, cached_read_tokens=2))
        second = self.successResultOf(engine.complete(HELLO, [], RecordingSink()))
        self.assertEqual((second.text, second.tool_calls, second.usage), ("Done.", (), None))
        self.assertEqual(second.finish_reason, "stop")

    def test_json_script_is_the_same_structure(self) -> None:
        """A JSON script with the same structure plays the same turns."""
        document = {"turn": [{"chunks": ["a", " b"], "tool_calls": [{"name": "x"}]}]}
        path = self.write("s.json", json.dumps(document))
        reply = self.successResultOf(
            ScriptedEngine(load_script(path), clock=Clock()).complete(HELLO, [], RecordingSink())
        )
        self.assertEqual(reply.text, "a b")
        self.assertEqual(reply.tool_calls[0].name, "x")
        self.assertEqual(reply.tool_calls[0].arguments, {})

    def test_exhaustion_fails_clearly(self) -> None:
        """Past the last turn, complete() fails with 'script exhausted after N turns'."""
        engine = ScriptedEngine(script_of([{"chunks": ["1"]}, {"chunks": ["2"]}]), clock=Clock())
        for _ in range(2):
            self.successResultOf(engine.complete(HELLO, [], RecordingSink()))
        failure = self.failureResultOf(engine.complete(HELLO, [], RecordingSink()), EngineError)
        self.assertIn("script exhausted after 2 turns", str(failure.value))

    def test_loop_replays_from_the_start(self) -> None:
        """With loop = true the turns repeat forever."""
        engine = ScriptedEngine(script_of([{"chunks": ["1"]}, {"chunks": ["2"]}], loop=True))
        texts = [
            self.successResultOf(engine.complete(HELLO, [], RecordingSink())).text for _ in range(5)
        ]
        self.assertEqual(texts, ["1", "2", "1", "2", "1"])

    def test_records_what_it_received(self) -> None:
        """Messages and tools of each call are recorded as copies."""
        engine = ScriptedEngine(script_of([{"chunks": ["ok"]}]), clock=Clock())
        messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
        tool = ToolSpec("bash", "run", {"type": "object"})
        self.successResultOf(engine.complete(messages, [tool], RecordingSink()))
        messages[0]["content"] = "changed"
        self.assertEqual(engine.received[0].messages, [{"role": "user", "content": "hi"}])
        self.assertEqual(engine.received[0].tools, (tool,))

    def test_delays_use_the_clock_and_cancel_stops_them(self) -> None:
        """With a delay, deltas come as the clock advances; cancel stops the rest."""
        clock = Clock()
        engine = ScriptedEngine(script_of([{"chunks": ["a", "b", "c"], "delay": 1.0}]), clock=clock)
        sink = RecordingSink()
        call = engine.complete(HELLO, [], sink)
        self.assertEqual(sink.events, [("text", "a")])
        self.assertNoResult(call)
        clock.advance(1.0)
        self.assertEqual(sink.events, [("text", "a"), ("text", "b")])
        call.cancel()
        self.failureResultOf(call, CancelledError)
        self.assertEqual(clock.getDelayedCalls(), [])
        clock.advance(10)
        self.assertEqual(len(sink.events), 2)

    def test_delays_finish_the_turn(self) -> None:
        """Advancing the clock far enough completes a delayed turn."""
        clock = Clock()
        engine = ScriptedEngine(script_of([{"chunks": ["a", "b"], "delay": 0.5}]), clock=clock)
        call = engine.complete(HELLO, [], RecordingSink())
        clock.pump([0.5] * 4)
        self.assertEqual(self.successResultOf(call).text, "ab")

    def test_faults_become_engine_errors(self) -> None:
        """status, garbage, error and cut_after turns fail with one-line EngineErrors."""
        engine = ScriptedEngine(
            script_of(
                [
                    {"status": 503, "error": "loading model"},
                    {"garbage": "<html>"},
                    {"chunks": ["part"], "error": "boom"},
                    {"chunks": ["a", "b", "c"], "cut_after": 1},
                ]
            ),
            clock=Clock(),
        )
        expected = ["HTTP 503: loading model", "garbage", "boom", "closed the stream"]
        for fragment in expected:
            sink = RecordingSink()
            failure = self.failureResultOf(engine.complete(HELLO, [], sink), EngineError)
            self.assertIn(fragment, str(failure.value))
        self.assertEqual(sink.events, [("text", "a")])

    def test_context_window(self) -> None:
        """The window is the setting, else the script's context_window, else 0."""
        script = script_of([], context_window=2048)
        self.assertEqual(self.successResultOf(ScriptedEngine(script).context_window()), 2048)
        engine = ScriptedEngine(script, context_window=100)
        self.assertEqual(self.successResultOf(engine.context_window()), 100)
        self.assertEqual(self.successResultOf(ScriptedEngine(script_of([])).context_window()), 0)

    def test_settings_validation(self) -> None:
        """Missing script, unknown keys and unreadable scripts are ValueErrors."""
        with self.assertRaises(ValueError) as caught:
            make_engine("scripted", {}, reactor=Clock())
        self.assertIn("script", str(caught.exception))
        with self.assertRaises(ValueError) as caught:
            make_engine("scripted", {"script": "x.toml", "loops": True}, reactor=Clock())
        self.assertIn("loops", str(caught.exception))
        with self.assertRaises(ValueError) as caught:
            make_engine("scripted", {"script": "/nonexistent/s.toml"}, reactor=Clock())
        self.assertIn("/nonexistent/s.toml", str(caught.exception))


class ScriptValidationTests(SynchronousTestCase):
    """Strict validation: errors name the file and the key."""

    def assertRejected(self, document: Any, key: str) -> None:
        with self.assertRaises(ScriptError) as caught:
            parse_script(document, source="my.toml")
        message = str(caught.exception)
        self.assertIn("my.toml", message)
        self.assertIn(key, message)

    def test_unknown_keys(self) -> None:
        """Unknown keys at every level are rejected with their path."""
        self.assertRejected({"turns": []}, "turns")
        self.assertRejected({"turn": [{"chunk": ["a"]}]}, "turn[0].chunk")
        self.assertRejected({"turn": [{"usage": {"input": 1, "output": 1, "x": 2}}]}, "usage.x")
        self.assertRejected({"turn": [{"tool_calls": [{"name": "a", "args": {}}]}]}, "args")

    def test_wrong_types_and_values(self) -> None:
        """Wrong types and out-of-range values are rejected with their key."""
        self.assertRejected({"turn": [{"chunks": [1]}]}, "turn[0].chunks")
        self.assertRejected({"turn": [{"usage": {"input": 1}}]}, "turn[0].usage.output")
        self.assertRejected({"turn": [{"status": 200}]}, "turn[0].status")
        self.assertRejected({"turn": [{"delay": -1}]}, "turn[0].delay")
        self.assertRejected({"turn": [{"tool_calls": [{"arguments": {}}]}]}, "name")
        self.assertRejected(
            {"turn": [{"tool_calls": [{"name": "a", "arguments": 3}]}]}, "arguments"
        )
        self.assertRejected({"loop": "yes"}, "loop")
        self.assertRejected({"context_probe": "everything"}, "context_probe")
        self.assertRejected({"turn": {"chunks": []}}, "turn")

    def test_bad_files(self) -> None:
        """Invalid TOML or JSON and missing files raise ScriptError naming the file."""
        base = Path(self.mktemp())
        base.mkdir()
        (base / "bad.toml").write_text("[[turn]\n", encoding="utf-8")
        (base / "bad.json").write_text("{", encoding="utf-8")
        for name in ("bad.toml", "bad.json", "missing.toml"):
            with self.assertRaises(ScriptError) as caught:
                load_script(base / name)
            self.assertIn(name, str(caught.exception))

    @given(
        chunks=st.lists(st.text(), max_size=5),
        reasoning=st.lists(st.text(), max_size=3),
        fragments=st.integers(1, 12),
        arguments=st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=8)),
    )
    def test_deltas_reassemble_to_the_turn(
        self, chunks: list[str], reasoning: list[str], fragments: int, arguments: dict[str, Any]
    ) -> None:
        """Whatever the chunks and fragment counts, replaying a turn gives back its content."""
        script = script_of(
            [
                {
                    "chunks": chunks,
                    "reasoning": reasoning,
                    "tool_calls": [{"name": "t", "arguments": arguments, "fragments": fragments}],
                }
            ]
        )
        reply = self.successResultOf(ScriptedEngine(script).complete(HELLO, [], RecordingSink()))
        self.assertEqual(reply.text, "".join(chunks))
        self.assertEqual(reply.reasoning, "".join(reasoning))
        self.assertEqual(dict(reply.tool_calls[0].arguments), arguments)
