"""The echo engine: the offline default, not a language model."""

from __future__ import annotations

from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from acpkit_agent.engines import IEngine, make_engine
from acpkit_agent.engines.base import ModelReply, ToolSpec
from acpkit_agent.engines.echo import ECHO_CONTEXT_WINDOW, EchoEngine, parse_directives

OBJECT = {"type": "object"}
ALL_TOOLS = [
    ToolSpec(name, name, OBJECT) for name in ("bash", "read_file", "write_file", "edit_file")
]


class Sink:
    """A StreamSink that keeps the text deltas."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.reasonings: list[str] = []

    def text(self, delta: str) -> None:
        self.texts.append(delta)

    def reasoning(self, delta: str) -> None:
        self.reasonings.append(delta)


class EchoEngineTests(SynchronousTestCase):
    """Directives become tool calls; tool results are summarised; plain text is echoed."""

    def complete(
        self, messages: list[dict[str, Any]], tools: list[ToolSpec] = ALL_TOOLS
    ) -> tuple[ModelReply, Sink]:
        sink = Sink()
        reply = self.successResultOf(EchoEngine().complete(messages, tools, sink))
        return reply, sink

    def test_description_says_it_is_not_a_model(self) -> None:
        """The banner line says the engine is offline and not a language model."""
        engine = make_engine("echo", {})
        self.assertTrue(IEngine.providedBy(engine))
        self.assertEqual(engine.name, "echo")
        self.assertIn("not a language model", engine.description)

    def test_plain_text_is_echoed_in_chunks(self) -> None:
        """A message without directives is echoed in several chunks, whitespace preserved."""
        text = "hello   there,\n  how are you doing today?  "
        reply, sink = self.complete([{"role": "user", "content": text}])
        self.assertGreater(len(sink.texts), 1)
        self.assertEqual("".join(sink.texts), reply.text)
        self.assertTrue(reply.text.endswith(text))
        self.assertEqual((reply.tool_calls, reply.finish_reason), ((), "stop"))

    def test_each_directive_becomes_a_tool_call(self) -> None:
        """run/read/write/edit lines become bash/read_file/write_file/edit_file calls, in order."""
        text = "\n".join(
            [
                "please do this:",
                "run: ls -la  /tmp",
                "read: src/app.py",
                r"write: notes.txt first line\nsecond line",
                "edit: src/app.py old_name() -> new_name()",
            ]
        )
        reply, _ = self.complete([{"role": "user", "content": text}])
        calls = [(call.name, dict(call.arguments)) for call in reply.tool_calls]
        self.assertEqual(
            calls,
            [
                ("bash", {"command": "ls -la  /tmp"}),
                ("read_file", {"path": "src/app.py"}),
                ("write_file", {"path": "notes.txt", "content": "first line\nsecond line"}),
                (
                    "edit_file",
                    {"path": "src/app.py", "old_text": "old_name()", "new_text": "new_name()"},
                ),
            ],
        )
        self.assertEqual(reply.finish_reason, "tool_calls")
        self.assertEqual(len({call.id for call in reply.tool_calls}), 4)
        self.assertTrue(all(call.error is None for call in reply.tool_calls))
        self.assertEqual(reply.as_message()["tool_calls"][0]["function"]["name"], "bash")

    def test_directives_for_tools_not_offered_are_ignored(self) -> None:
        """A directive whose tool is not offered makes no call and says so."""
        reply, _ = self.complete(
            [{"role": "user", "content": "run: rm -rf /\nread: a.txt"}],
            tools=[ToolSpec("read_file", "", OBJECT)],
        )
        self.assertEqual([call.name for call in reply.tool_calls], ["read_file"])
        self.assertIn("bash is not offered", reply.text)

    def test_malformed_edit_is_explained(self) -> None:
        """An edit without '->' makes no call and the reply explains the form."""
        reply, _ = self.complete([{"role": "user", "content": "edit: a.txt just words"}])
        self.assertEqual(reply.tool_calls, ())
        self.assertIn("PATH OLD -> NEW", reply.text)

    def test_summary_after_tool_results(self) -> None:
        """When the history ends with tool results, the reply summarises them without calls."""
        reply, _ = self.complete([{"role": "user", "content": "run: seq 10\nread: a"}])
        history: list[dict[str, Any]] = [
            {"role": "user", "content": "run: seq 10\nread: a"},
            reply.as_message(),
        ]
        first, second = reply.tool_calls
        history.append(
            {"role": "tool", "tool_call_id": first.id, "content": "\n".join(map(str, range(1, 11)))}
        )
        history.append({"role": "tool", "tool_call_id": second.id, "content": ""})
        summary, sink = self.complete(history)
        self.assertEqual(summary.tool_calls, ())
        self.assertEqual("".join(sink.texts), summary.text)
        self.assertIn("2 tool result(s)", summary.text)
        self.assertIn("- bash: 1\n  2\n  3\n  … (7 more line(s))", summary.text)
        self.assertIn("- read_file: (no output)", summary.text)

    def test_usage_approximates_characters_over_four(self) -> None:
        """Usage is reported, about one token per four characters."""
        reply, _ = self.complete([{"role": "user", "content": "x" * 400}])
        assert reply.usage is not None
        self.assertEqual(reply.usage.input_tokens, 100)
        self.assertEqual(reply.usage.output_tokens, (len(reply.text) + 3) // 4)

    def test_content_parts_are_read(self) -> None:
        """A user message whose content is a list of text parts is understood."""
        reply, _ = self.complete(
            [{"role": "user", "content": [{"type": "text", "text": "run: pwd"}]}]
        )
        self.assertEqual(reply.tool_calls[0].arguments, {"command": "pwd"})

    def test_context_window(self) -> None:
        """The window is the documented fixed number, or the setting."""
        self.assertEqual(self.successResultOf(EchoEngine().context_window()), ECHO_CONTEXT_WINDOW)
        engine = make_engine("echo", {"context_window": 999})
        self.assertEqual(self.successResultOf(engine.context_window()), 999)

    def test_settings_validation(self) -> None:
        """Unknown settings are ValueErrors naming the key."""
        with self.assertRaises(ValueError) as caught:
            make_engine("echo", {"model": "x"})
        self.assertIn("model", str(caught.exception))

    def test_parse_directives_ignores_other_lines(self) -> None:
        """Lines that are not directives are ignored; an empty directive is explained."""
        self.assertEqual(
            parse_directives("hello\nrunning: x\n  run: echo hi  "),
            [("bash", {"command": "echo hi"})],
        )
        self.assertEqual(parse_directives("read:"), ["`read:` needs an argument"])
