"""
``ask_agent`` against real agent processes (a small acpkit fixture agent, and bob itself):
the answer, a relayed elicitation (to a client with and without form support), a relayed
permission request, a cancel mid-question (the asked agent's process is gone afterwards),
unknown names, and the permission ``ask_agent`` needs when ``yolo = false``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import reactor
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.trial.unittest import TestCase

from acpkit import codec
from acpkit_agent.config import AgentConfig
from acpkit_agent.engines.scripted import ScriptedEngine
from acpkit_agent.tools.ask_agent import AskAgentTool
from tests.fixtures.agent.harness import Harness, RecordingClient
from tests.fixtures.agent_b.clients import FORM_CAPABILITIES, ElicitingClient, call, make_b_harness
from tests.fixtures.agent_b.real import process_gone, pumping
from tests.helpers import wait_until

REPO = Path(__file__).resolve().parent.parent.parent
ASKED = REPO / "tests" / "fixtures" / "agent_b" / "asked_agent.py"


def tool_result(h: Harness) -> str:
    """What the model received for the last tool call."""
    engine = h.runtime.engine
    assert isinstance(engine, ScriptedEngine)
    messages = engine.received[-1].messages
    content: str = [m for m in messages if m["role"] == "tool"][-1]["content"]
    return content


def ask_turns(agent: str, question: str) -> list[dict[str, Any]]:
    return [
        {"tool_calls": [call("ask_agent", agent=agent, question=question)]},
        {"chunks": ["ok"]},
    ]


def test_title_and_permission_metadata() -> None:
    """Title names the agent and the question; kind other; permission always needed."""
    tool = AskAgentTool()
    assert tool.kind == "other"
    assert (
        tool.title({"agent": "bob", "question": "what  is\n2+2?"}) == "ask_agent: bob: what is 2+2?"
    )
    assert tool.title({}) == "ask_agent"
    assert tool.needs_permission({"agent": "bob", "question": "x"})


def test_rejected_when_not_yolo() -> None:
    """yolo = false: ask_agent asks permission first; rejected, no agent is started."""
    h = make_b_harness(
        ask_turns("nobody", "hi"),
        config=AgentConfig(yolo=False),
        extra_tools={"ask_agent": AskAgentTool(environ={"PATH": os.defpath})},
    )
    sid = h.start()
    h.client.answers.append("reject")
    h.raw_prompt(sid, "go")
    assert len(h.client.permission_requests) == 1
    assert (
        codec.encode(h.client.permission_requests[0].tool_call)["title"] == "ask_agent: nobody: hi"
    )
    assert tool_result(h) == "[ask_agent rejected by the user]"


@pytest.mark.process
class AskAgentProcessTests(TestCase):
    """Each test asks a real agent process from an in-memory bob on the real reactor."""

    timeout = 60

    def setUp(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="acpkit-ask-agent-"))
        self.addCleanup(shutil.rmtree, self.dir, True)
        (self.dir / "user").mkdir()
        (self.dir / ".acpkit").mkdir()
        (self.dir / ".acpkit" / "acp.toml").write_text(
            f'[[agent]]\nname = "asked"\ncommand = "{sys.executable}"\nargs = ["{ASKED}"]\n'
            f'env = {{ PYTHONPATH = "{REPO}" }}\n',
            encoding="utf-8",
        )
        self.env = dict(os.environ, ACPKIT_DIR=str(self.dir / "user"), PYTHONPATH=str(REPO))

    def harness(
        self, question: str, *, client: RecordingClient | None = None, agent: str = "asked"
    ) -> tuple[Harness, str]:
        tool = AskAgentTool(environ=self.env, stop_grace=5.0)
        h = make_b_harness(
            ask_turns(agent, question),
            client=client,
            extra_tools={"ask_agent": tool},
            reactor=reactor,
        )
        forms = isinstance(client, ElicitingClient)
        sid = h.start(cwd=str(self.dir), capabilities=FORM_CAPABILITIES if forms else None)
        h.client.updates.clear()
        return h, sid

    def asked_pid(self) -> int:
        return int((self.dir / "asked.pid").read_text(encoding="ascii"))

    def test_answer_and_process_stopped(self) -> Deferred[None]:
        """The asked agent's answer is the tool result; its process is gone afterwards."""

        async def go() -> None:
            h, sid = self.harness("what is 2+2?")
            response = await pumping(h.pair, h.prompt(sid, "ask it"))
            self.assertEqual(response.stop_reason, "end_turn")
            self.assertEqual(tool_result(h), "answer: what is 2+2?")
            updates = h.client.tool_updates()
            self.assertEqual(updates[0]["title"], "ask_agent: asked: what is 2+2?")
            self.assertEqual(updates[0]["kind"], "other")
            self.assertEqual(updates[-1]["status"], "completed")
            self.assertTrue(process_gone(self.asked_pid()))

        return ensureDeferred(go())

    def test_relayed_elicitation(self) -> Deferred[None]:
        """The asked agent's form reaches our client as elicitation/create on our tool call."""

        async def go() -> None:
            client = ElicitingClient()
            client.elicitation_answers.append({"action": "accept", "content": {"name": "Ada"}})
            h, sid = self.harness("elicit", client=client)
            await pumping(h.pair, h.prompt(sid, "ask it"))
            self.assertEqual(
                client.elicitations,
                [
                    {
                        "sessionId": sid,
                        "toolCallId": "call_1",
                        "mode": "form",
                        "message": "asked: Your name?",
                        "requestedSchema": {
                            "type": "object",
                            "properties": {"name": {"type": "string", "title": "Name"}},
                            "required": ["name"],
                        },
                        "_meta": {
                            "acpkit.elicitationScope": {"sessionId": sid, "toolCallId": "call_1"},
                            "acpkit.relayedFrom": {
                                "agent": "asked",
                                "sessionId": "asked-1",
                                "toolCallId": "asked_call_1",
                            },
                        },
                    }
                ],
            )
            self.assertEqual(tool_result(h), 'elicited: accept {"name": "Ada"}')

        return ensureDeferred(go())

    def test_elicitation_refused_without_forms(self) -> Deferred[None]:
        """Our client cannot show forms: the asked agent's elicitation gets an error."""

        async def go() -> None:
            h, sid = self.harness("elicit")
            await pumping(h.pair, h.prompt(sid, "ask it"))
            self.assertTrue(tool_result(h).startswith("elicitation refused: "))
            self.assertIn("cannot show forms", tool_result(h))

        return ensureDeferred(go())

    def test_relayed_permission(self) -> Deferred[None]:
        """The asked agent's permission request is relayed with its options; our answer returns."""

        async def go() -> None:
            client = RecordingClient()
            client.answers.append("yes")
            h, sid = self.harness("permission", client=client)
            await pumping(h.pair, h.prompt(sid, "ask it"))
            self.assertEqual(
                [codec.encode(r) for r in client.permission_requests],
                [
                    {
                        "sessionId": sid,
                        "toolCall": {"toolCallId": "call_1", "title": "asked: rm -rf /"},
                        "options": [
                            {"optionId": "yes", "name": "Yes", "kind": "allow_once"},
                            {"optionId": "no", "name": "No", "kind": "reject_once"},
                        ],
                    }
                ],
            )
            self.assertEqual(
                tool_result(h), 'permission: {"outcome": "selected", "optionId": "yes"}'
            )

        return ensureDeferred(go())

    def test_cancel_mid_question(self) -> Deferred[None]:
        """session/cancel while the asked agent works: cancelled turn, its process gone."""

        async def go() -> None:
            h, sid = self.harness("hang")
            d = pumping(h.pair, h.prompt(sid, "ask it"))
            await wait_until((self.dir / "hanging").exists)
            pid = self.asked_pid()
            h.pair.client.cancel(sid)
            response = await d
            self.assertEqual(response.stop_reason, "cancelled")
            self.assertTrue(process_gone(pid))
            last = h.client.tool_updates()[-1]
            self.assertEqual(last["status"], "failed")
            self.assertEqual(last["rawOutput"], {"output": "[tool call cancelled by the user]"})

        return ensureDeferred(go())

    def test_cancel_while_relayed_form_is_open(self) -> Deferred[None]:
        """Cancel while our client shows the asked agent's form: the form request is cancelled."""

        async def go() -> None:
            client = ElicitingClient()
            h, sid = self.harness("elicit", client=client)
            d = pumping(h.pair, h.prompt(sid, "ask it"))
            await wait_until(lambda: bool(client.held_elicitations))
            pid = self.asked_pid()
            h.pair.client.cancel(sid)
            response = await d
            self.assertEqual(response.stop_reason, "cancelled")
            self.assertTrue(process_gone(pid))
            await pumping(
                h.pair, ensureDeferred(wait_until(lambda: client.held_elicitations[0].called))
            )

        return ensureDeferred(go())

    def test_unknown_agent(self) -> Deferred[None]:
        """An unknown name: the call fails and lists the agents; nothing is started."""

        async def go() -> None:
            h, sid = self.harness("hi", agent="nobody")
            await pumping(h.pair, h.prompt(sid, "ask it"))
            self.assertEqual(
                tool_result(h), "[ask_agent: no agent named 'nobody' (the agents are 'asked')]"
            )
            self.assertFalse((self.dir / "asked.pid").exists())

        return ensureDeferred(go())

    def test_bob_asks_back_through_a_relayed_form(self) -> Deferred[None]:
        """A real bob (scripted engine, postAsk hook) asked by ask_agent: its ask_user form
        reaches our client, and its hook-replaced answer comes back."""

        async def go() -> None:
            script_path = self.dir / "script.json"
            script_path.write_text(
                json.dumps(
                    {
                        "turn": [
                            {
                                "tool_calls": [
                                    call(
                                        "ask_user",
                                        questions=[
                                            {
                                                "question": "Colour?",
                                                "type": "choice",
                                                "options": ["red", "blue"],
                                            }
                                        ],
                                    )
                                ]
                            },
                            {"chunks": ["ok"]},
                        ]
                    }
                ),
                encoding="utf-8",
            )
            hook = self.dir / "shout.sh"
            hook.write_text('#!/bin/sh\ncat >/dev/null\necho \'{"replace": "OK!"}\'\n')
            hook.chmod(0o755)
            config = self.dir / "bob.toml"
            config.write_text(
                f'[engine]\nname = "scripted"\nscript = "{script_path}"\n\n'
                '[[hooks.postAsk]]\ncommand = "./shout.sh"\n',
                encoding="utf-8",
            )
            (self.dir / ".acpkit" / "acp.toml").write_text(
                f'[[agent]]\nname = "bob2"\ncommand = "{sys.executable}"\n'
                'args = ["-c", "from twisted.scripts.twistd import run; run()", "-n", '
                f'"acp-agent", "--config", "{config}"]\n'
                f'env = {{ PYTHONPATH = "{REPO}" }}\n',
                encoding="utf-8",
            )
            client = ElicitingClient()
            client.elicitation_answers.append({"action": "accept", "content": {"q1": "blue"}})
            h, sid = self.harness("pick a colour", client=client, agent="bob2")
            await pumping(h.pair, h.prompt(sid, "ask bob2"))
            [relayed] = client.elicitations
            self.assertEqual(relayed["message"], "bob2: Colour?")
            self.assertEqual(relayed["toolCallId"], "call_1")
            self.assertEqual(
                relayed["requestedSchema"]["properties"]["q1"]["enum"], ["red", "blue"]
            )
            self.assertEqual(relayed["_meta"]["acpkit.relayedFrom"]["agent"], "bob2")
            self.assertEqual(tool_result(h), "ok\n\n🪝 OK!")

        return ensureDeferred(go())

    def test_ask_bob_itself(self) -> Deferred[None]:
        """Without agents files the built-in reference agent (bob, echo engine) is asked."""

        async def go() -> None:
            (self.dir / ".acpkit" / "acp.toml").unlink()
            h, sid = self.harness("hello bob", agent="Bob (reference agent)")
            await pumping(h.pair, h.prompt(sid, "ask it"))
            self.assertIn("hello bob", tool_result(h))
            self.assertEqual(h.client.tool_updates()[-1]["status"], "completed")

        return ensureDeferred(go())
