"""
Hooks (seed 000: the ``🪝`` lines and the "denied by a hook" row of the session/update
table): ``[[hooks.*]]`` configuration, and real hook processes run by a turn — deny,
replace, the event on stdin, the session cwd, and the fail-open cases (failing, slow,
garbage, missing).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import reactor
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.logger import globalLogPublisher
from twisted.trial.unittest import TestCase

from acpkit_agent.config import AgentConfig, ConfigError, parse_config
from acpkit_agent.hooks import HookCommand, parse_hooks
from tests.fixtures.agent.harness import Harness, LogLines
from tests.fixtures.agent_b.clients import call, make_b_harness
from tests.fixtures.agent_b.real import process_gone, pumping, script
from tests.helpers import wait_until

# -- configuration ----------------------------------------------------------------------


def test_config_hooks_parsed() -> None:
    """[[hooks.preToolCall]] and [[hooks.postAsk]] become HookCommands (timeout default 10)."""
    config = parse_config(
        {
            "hooks": {
                "preToolCall": [{"command": "./guard.sh", "args": ["-v"], "timeout": 2}],
                "postAsk": [{"command": "censor"}],
            }
        },
        "/p/agent.toml",
    )
    assert config.hooks == {
        "preToolCall": (HookCommand("./guard.sh", ("-v",), 2.0),),
        "postAsk": (HookCommand("censor", (), 10.0),),
    }
    assert AgentConfig().hooks == {}


@pytest.mark.parametrize(
    ("hooks", "message"),
    [
        ({"preToolcall": []}, "/p/a.toml: hooks.preToolcall is not a key this file has"),
        ({"postAsk": {"command": "x"}}, "hooks.postAsk must be an array of tables"),
        ({"postAsk": [{"args": []}]}, "hooks.postAsk[1].command must be a non-empty string"),
        ({"postAsk": [{"command": " "}]}, "hooks.postAsk[1].command must be a non-empty string"),
        ({"postAsk": [{"command": "x", "args": "-v"}]}, "hooks.postAsk[1].args must be a list"),
        ({"postAsk": [{"command": "x", "args": [1]}]}, "hooks.postAsk[1].args must be a list"),
        (
            {"preToolCall": [{"command": "x"}, {"command": "y", "timeout": 0}]},
            "hooks.preToolCall[2].timeout must be a positive number of seconds, not 0",
        ),
        ({"postAsk": [{"command": "x", "timeout": True}]}, "timeout must be a positive number"),
        ({"postAsk": [{"command": "x", "when": 1}]}, "hooks.postAsk[1].when is not a key"),
        ("yes", "hooks must be a table"),
    ],
)
def test_config_hooks_refused(hooks: Any, message: str) -> None:
    """Bad hook configuration is refused, naming the file and the key."""
    with pytest.raises(ConfigError) as raised:
        parse_config({"hooks": hooks}, "/p/a.toml")
    assert str(raised.value).startswith("/p/a.toml: ")
    assert message in str(raised.value)


def test_parse_hooks_empty_table() -> None:
    """An empty [hooks] table configures nothing."""
    assert parse_hooks({}) == {}


# -- real hook processes -----------------------------------------------------------------


DENY = (
    'cat > "$PWD/event.json"\n'
    'printf \'%s\\n\' \'{"decision": "deny", "reason": "no  removals\\nhere"}\'\n'
)


@pytest.mark.process
class HookProcessTests(TestCase):
    """Each test runs a turn on the real reactor with real hook scripts."""

    timeout = 30

    def setUp(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="acpkit-hooks-"))
        self.addCleanup(self._cleanup)
        self.logs = LogLines()
        globalLogPublisher.addObserver(self.logs)
        self.addCleanup(globalLogPublisher.removeObserver, self.logs)

    @property
    def lines(self) -> list[str]:
        return self.logs.lines

    def _cleanup(self) -> None:
        import shutil

        shutil.rmtree(self.dir, ignore_errors=True)

    def hook_lines(self) -> list[str]:
        return [line for line in self.lines if line.startswith("🪝")]

    def harness(
        self, hooks: dict[str, list[HookCommand]], turns: list[dict[str, Any]], *, yolo: bool
    ) -> tuple[Harness, str]:
        config = AgentConfig(yolo=yolo, hooks={k: tuple(v) for k, v in hooks.items()})
        h = make_b_harness(turns, config=config, reactor=reactor)
        sid = h.start(cwd=str(self.dir))
        h.client.updates.clear()
        return h, sid

    def touch_turns(self) -> list[dict[str, Any]]:
        return [
            {"tool_calls": [call("bash", command="touch ran.txt")]},
            {"chunks": ["Done."]},
        ]

    async def run_turn(self, h: Harness, sid: str, text: str = "go") -> Any:
        return await pumping(h.pair, h.prompt(sid, text))

    def test_deny(self) -> Deferred[None]:
        """Deny: tool_call, then failed '… — denied by a hook'; nothing asked, nothing run."""

        async def go() -> None:
            guard = script(self.dir, "guard.sh", DENY)
            h, sid = self.harness(
                {"preToolCall": [HookCommand(guard)]}, self.touch_turns(), yolo=False
            )
            response = await self.run_turn(h, sid)
            self.assertEqual(response.stop_reason, "end_turn")
            self.assertEqual(
                h.client.tool_updates(),
                [
                    {
                        "sessionUpdate": "tool_call",
                        "toolCallId": "call_1",
                        "title": "bash: touch ran.txt",
                        "kind": "execute",
                        "status": "pending",
                        "rawInput": {"command": "touch ran.txt"},
                    },
                    {
                        "sessionUpdate": "tool_call_update",
                        "toolCallId": "call_1",
                        "title": "bash: touch ran.txt — denied by a hook",
                        "status": "failed",
                        "content": [
                            {
                                "type": "content",
                                "content": {
                                    "type": "text",
                                    "text": "[denied by a hook: no removals here]",
                                },
                            }
                        ],
                        "rawOutput": {"output": "[denied by a hook: no removals here]"},
                    },
                ],
            )
            self.assertEqual(h.client.permission_requests, [])
            self.assertFalse((self.dir / "ran.txt").exists())
            history = h.agent.sessions.get(sid).history  # type: ignore[union-attr]
            self.assertIn(
                {
                    "role": "tool",
                    "tool_call_id": history[2]["tool_calls"][0]["id"],
                    "content": "[denied by a hook: no removals here]",
                },
                history,
            )
            event = json.loads((self.dir / "event.json").read_text(encoding="utf-8"))
            self.assertEqual(
                event,
                {
                    "event": "preToolCall",
                    "sessionId": sid,
                    "cwd": str(self.dir),
                    "toolCallId": "call_1",
                    "tool": "bash",
                    "title": "bash: touch ran.txt",
                    "arguments": {"command": "touch ran.txt"},
                },
            )
            self.assertTrue(
                any("bash: touch ran.txt denied by a hook" in line for line in self.lines)
            )

        return ensureDeferred(go())

    def test_allow_then_permission_and_run(self) -> Deferred[None]:
        """A hook answering {} (or nothing) lets the call go on: asked (yolo false), then run."""

        async def go() -> None:
            quiet = script(self.dir, "quiet.sh", "cat >/dev/null\n")
            empty = script(self.dir, "empty.sh", "cat >/dev/null\necho '{}'\n")
            h, sid = self.harness(
                {"preToolCall": [HookCommand(quiet), HookCommand(empty)]},
                self.touch_turns(),
                yolo=False,
            )
            h.client.answers.append("allow")
            await self.run_turn(h, sid)
            self.assertEqual(len(h.client.permission_requests), 1)
            self.assertTrue((self.dir / "ran.txt").exists())
            self.assertEqual(h.client.tool_updates()[-1]["status"], "completed")
            self.assertEqual(self.hook_lines(), [])

        return ensureDeferred(go())

    def test_post_ask_replace(self) -> Deferred[None]:
        """postAsk replaces the final answer: one more chunk, the history, the 🪝 notice."""

        async def go() -> None:
            censor = script(
                self.dir,
                "censor.sh",
                'cat > "$PWD/ask.json"\necho \'{"replace": "The answer is [redacted]."}\'\n',
            )
            turns = [{"chunks": ["The answer ", "is 42."]}]
            h, sid = self.harness({"postAsk": [HookCommand(censor)]}, turns, yolo=True)
            response = await self.run_turn(h, sid, "what is the answer?")
            self.assertEqual(response.stop_reason, "end_turn")
            self.assertEqual(
                [u["content"]["text"] for u in h.client.of_kind("agent_message_chunk")],
                ["The answer ", "is 42.", "\n\n🪝 The answer is [redacted]."],
            )
            history = h.agent.sessions.get(sid).history  # type: ignore[union-attr]
            self.assertEqual(
                history[1:],
                [
                    {"role": "user", "content": "what is the answer?"},
                    {"role": "assistant", "content": "The answer is [redacted]."},
                ],
            )
            event = json.loads((self.dir / "ask.json").read_text(encoding="utf-8"))
            self.assertEqual(
                event,
                {
                    "event": "postAsk",
                    "sessionId": sid,
                    "cwd": str(self.dir),
                    "prompt": "what is the answer?",
                    "answer": "The answer is 42.",
                },
            )
            self.assertEqual(
                self.hook_lines(),
                [f"🪝 postAsk: {censor} replaced the answer (17 → 25 characters)"],
            )

        return ensureDeferred(go())

    def test_post_ask_keep_runs_in_session_cwd(self) -> Deferred[None]:
        """A postAsk hook answering nothing keeps the answer; hooks run in the session cwd."""

        async def go() -> None:
            keep = script(self.dir, "keep.sh", "cat >/dev/null\npwd > where.txt\n")
            h, sid = self.harness(
                {"postAsk": [HookCommand(keep)]}, [{"chunks": ["Hi."]}], yolo=True
            )
            await self.run_turn(h, sid)
            self.assertEqual(h.client.text(), "Hi.")
            where = (self.dir / "where.txt").read_text(encoding="utf-8").strip()
            self.assertEqual(Path(where).resolve(), self.dir.resolve())

        return ensureDeferred(go())

    def test_failing_hook_fails_open(self) -> Deferred[None]:
        """A hook exiting 3 is logged with its stderr; the call runs anyway."""

        async def go() -> None:
            bad = script(self.dir, "bad.sh", "cat >/dev/null\necho boom >&2\nexit 3\n")
            h, sid = self.harness(
                {"preToolCall": [HookCommand(bad)]}, self.touch_turns(), yolo=True
            )
            response = await self.run_turn(h, sid)
            self.assertEqual(response.stop_reason, "end_turn")
            self.assertTrue((self.dir / "ran.txt").exists())
            self.assertEqual(
                self.hook_lines(), [f"🪝 preToolCall hook {bad} failed with exit status 3: boom"]
            )

        return ensureDeferred(go())

    def test_slow_hook_is_killed(self) -> Deferred[None]:
        """A hook over its timeout is killed with what it started; the turn goes on."""

        async def go() -> None:
            slow = script(
                self.dir,
                "slow.sh",
                'echo $$ > "$PWD/slow.pid"\nsleep 30 &\necho $! > "$PWD/child.pid"\nwait\n',
            )
            h, sid = self.harness(
                {"postAsk": [HookCommand(slow, timeout=0.5)]}, [{"chunks": ["Hi."]}], yolo=True
            )
            response = await self.run_turn(h, sid)
            self.assertEqual(response.stop_reason, "end_turn")
            self.assertEqual(h.client.text(), "Hi.")
            self.assertEqual(
                self.hook_lines(), [f"🪝 postAsk hook {slow} timed out after 0.5s: killed"]
            )
            for name in ("slow.pid", "child.pid"):
                pid = int((self.dir / name).read_text(encoding="ascii"))
                self.assertTrue(process_gone(pid), f"{name} {pid} still runs")

        return ensureDeferred(go())

    def test_garbage_hook_fails_open(self) -> Deferred[None]:
        """A hook printing something that is not a JSON object is logged; no effect."""

        async def go() -> None:
            noisy = script(self.dir, "noisy.sh", "cat >/dev/null\necho 'hello, I am a hook'\n")
            listy = script(self.dir, "listy.sh", "cat >/dev/null\necho '[1, 2]'\n")
            weird = script(self.dir, "weird.sh", "cat >/dev/null\necho '{\"decision\": 7}'\n")
            h, sid = self.harness(
                {"preToolCall": [HookCommand(noisy), HookCommand(listy), HookCommand(weird)]},
                self.touch_turns(),
                yolo=True,
            )
            await self.run_turn(h, sid)
            self.assertTrue((self.dir / "ran.txt").exists())
            self.assertEqual(
                self.hook_lines(),
                [
                    f"🪝 preToolCall hook {noisy} printed garbage (not JSON): 'hello, I am a hook'",
                    f"🪝 preToolCall hook {listy} printed garbage (not a JSON object): '[1, 2]'",
                    f"🪝 preToolCall hook {weird} printed garbage (unknown decision 7)",
                ],
            )

        return ensureDeferred(go())

    def test_missing_hook_fails_open(self) -> Deferred[None]:
        """A hook command that does not exist is logged; the turn is not broken."""

        async def go() -> None:
            h, sid = self.harness(
                {"postAsk": [HookCommand("./no-such-hook.sh")]}, [{"chunks": ["Hi."]}], yolo=True
            )
            response = await self.run_turn(h, sid)
            self.assertEqual(response.stop_reason, "end_turn")
            self.assertEqual(
                self.hook_lines(),
                [
                    "🪝 postAsk hook ./no-such-hook.sh cannot run: not found or not executable",
                ],
            )

        return ensureDeferred(go())

    def test_cancel_while_hook_runs(self) -> Deferred[None]:
        """session/cancel during a preToolCall hook kills it; the turn ends cancelled."""

        async def go() -> None:
            slow = script(self.dir, "slow.sh", 'echo $$ > "$PWD/slow.pid"\nexec sleep 30\n')
            h, sid = self.harness(
                {"preToolCall": [HookCommand(slow)]}, self.touch_turns(), yolo=True
            )
            d = pumping(h.pair, h.prompt(sid, "go"))
            pid_file = self.dir / "slow.pid"
            await wait_until(lambda: pid_file.exists() and pid_file.read_text("ascii").strip())
            h.pair.client.cancel(sid)
            response = await d
            self.assertEqual(response.stop_reason, "cancelled")
            self.assertFalse((self.dir / "ran.txt").exists())
            pid = int(pid_file.read_text(encoding="ascii"))
            await wait_until(lambda: process_gone(pid))

        return ensureDeferred(go())


def test_banner_lists_hooks() -> None:
    """The startup banner lists the configured hooks by event; no line without hooks."""
    from acpkit_agent.banner import banner_lines

    config = AgentConfig(
        hooks={
            "postAsk": (HookCommand("censor", ("-q",)),),
            "preToolCall": (HookCommand("./a.sh"), HookCommand("./b.sh")),
        }
    )
    lines = banner_lines(config, "echo", "1", cwd="/nonexistent", home="/nonexistent")
    assert "  hooks:       preToolCall: ./a.sh, ./b.sh; postAsk: censor -q" in lines
    plain = banner_lines(AgentConfig(), "echo", "1", cwd="/nonexistent", home="/nonexistent")
    assert not any(line.startswith("  hooks:") for line in plain)


def test_hook_that_cannot_be_spawned_fails_open() -> None:
    """A reactor that cannot spawn the hook: logged as 'cannot run', the turn goes on."""
    from tests.fixtures.agent.harness import captured_logs

    with captured_logs() as logs:
        config = AgentConfig(hooks={"postAsk": (HookCommand("sh"),)})
        h = make_b_harness([{"chunks": ["Hi."]}], config=config)  # a Clock: no spawnProcess
        sid = h.start(cwd=tempfile.gettempdir())
        result = h.raw_prompt(sid, "go")
    assert result["stopReason"] == "end_turn"
    assert h.client.text() == "Hi."
    [line] = [line for line in logs.lines if line.startswith("🪝")]
    assert line.startswith("🪝 postAsk hook sh cannot run: ")
