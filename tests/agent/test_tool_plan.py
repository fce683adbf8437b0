"""Tests for the ``plan`` tool and the session plan."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from acpkit_agent.tools import builtin_tools
from acpkit_agent.tools.base import DiskFileAccess, ToolContext, ToolResult
from acpkit_agent.tools.plan import PRIORITIES, STATUSES, PlanEntry, PlanState, PlanTool


class PlanToolTests(SynchronousTestCase):
    """Each action, its plan update and its text."""

    def setUp(self) -> None:
        self.sent: list[list[PlanEntry]] = []
        self.ctx = ToolContext("/w", DiskFileAccess(), Clock(), PlanState(), self.sent.append)

    def plan(self, **args: Any) -> ToolResult:
        """Run the plan tool with ``args``."""
        return self.successResultOf(PlanTool().run(self.ctx, args))

    def set_three(self) -> None:
        """Set a three-entry plan."""
        self.plan(
            action="set",
            entries=[
                {"content": "Read the code", "priority": "high", "status": "completed"},
                {"content": "Write tests"},
                "Fix the bug",
            ],
        )

    def test_metadata(self) -> None:
        """plan is a `think` tool titled `plan: <action>`; only changes ask permission."""
        tool = builtin_tools()["plan"]
        self.assertEqual(tool.kind, "think")
        self.assertEqual(tool.title({"action": "set"}), "plan: set")
        self.assertEqual(tool.locations({"action": "set"}, "/w"), [])
        for action in ("set", "update", "clear"):
            self.assertTrue(tool.needs_permission({"action": action}))
        self.assertFalse(tool.needs_permission({"action": "show"}))
        self.assertFalse(tool.needs_permission({"action": "dance"}))
        self.assertFalse(tool.needs_permission({}))

    def test_set(self) -> None:
        """`set` replaces the plan, with defaults, sends the complete list and returns the text."""
        self.set_three()
        entries = [
            PlanEntry("Read the code", "high", "completed"),
            PlanEntry("Write tests", "medium", "pending"),
            PlanEntry("Fix the bug", "medium", "pending"),
        ]
        self.assertEqual(self.sent, [entries])
        self.assertEqual(self.ctx.plan.entries, entries)
        self.assertEqual(
            self.plan(action="show").output,
            "Plan (1/3 completed):\n"
            "1. [x] Read the code (high)\n"
            "2. [ ] Write tests (medium)\n"
            "3. [ ] Fix the bug (medium)",
        )

    def test_update_sends_complete_list(self) -> None:
        """`update` changes one entry and sends every entry, not just the changed one."""
        self.set_three()
        result = self.plan(action="update", index=2, status="in_progress", priority="low")
        self.assertEqual(len(self.sent), 2)
        self.assertEqual(
            self.sent[-1],
            [
                PlanEntry("Read the code", "high", "completed"),
                PlanEntry("Write tests", "low", "in_progress"),
                PlanEntry("Fix the bug", "medium", "pending"),
            ],
        )
        self.assertIn("2. [~] Write tests (low)", result.output)
        self.plan(action="update", index=3, content="Fix the off-by-one")
        self.assertEqual(self.sent[-1][2], PlanEntry("Fix the off-by-one"))

    def test_sent_list_is_a_copy(self) -> None:
        """The list given to send_plan is not the live plan (later changes do not alter it)."""
        self.set_three()
        self.plan(action="clear")
        self.assertEqual(len(self.sent[0]), 3)
        self.assertEqual(self.sent[1], [])

    def test_clear_and_show(self) -> None:
        """`clear` empties the plan and sends []; `show` sends nothing."""
        self.set_three()
        self.assertEqual(self.plan(action="clear"), ToolResult("The plan is empty."))
        self.assertEqual(self.sent[-1], [])
        count = len(self.sent)
        self.assertEqual(self.plan(action="show").output, "The plan is empty.")
        self.assertEqual(len(self.sent), count)

    def assertRefused(self, result: ToolResult, message: str) -> None:
        """The call failed with ``message``, nothing was sent, and the plan is shown."""
        self.assertTrue(result.failed)
        first, _, rest = result.output.partition("\n")
        self.assertEqual(first, f"plan: {message}; the plan was not changed")
        self.assertEqual(rest, self.ctx.plan.render())

    def test_bad_action(self) -> None:
        """An unknown or missing action is refused and lists the actions."""
        self.assertRefused(
            self.plan(action="dance"),
            "'action' must be one of set, update, clear, show; got 'dance'",
        )
        self.assertRefused(
            self.plan(), "'action' must be one of set, update, clear, show; got None"
        )
        self.assertEqual(self.sent, [])

    def test_bad_set(self) -> None:
        """`set` without entries, or with an invalid entry, is refused and changes nothing."""
        self.set_three()
        before = list(self.ctx.plan.entries)
        self.assertRefused(
            self.plan(action="set", entries=[]),
            "'set' needs 'entries', a non-empty list of {content, priority?, status?}; use "
            "action 'clear' to empty the plan",
        )
        self.assertRefused(
            self.plan(action="set", entries=[{"content": "ok"}, {"content": ""}]),
            "entry 2: 'content' must be a non-empty string",
        )
        self.assertRefused(
            self.plan(action="set", entries=[{"content": "a", "status": "done"}]),
            "entry 1: 'status' must be one of pending, in_progress, completed; got 'done'",
        )
        self.assertRefused(
            self.plan(action="set", entries=[{"content": "a", "priority": "urgent"}]),
            "entry 1: 'priority' must be one of high, medium, low; got 'urgent'",
        )
        self.assertRefused(
            self.plan(action="set", entries=[3]), "entry 1 must be an object with 'content'"
        )
        self.assertEqual(self.ctx.plan.entries, before)
        self.assertEqual(len(self.sent), 1)

    def test_bad_update(self) -> None:
        """`update` needs a valid index and at least one valid change."""
        self.assertRefused(
            self.plan(action="update", index=1, status="completed"),
            "the plan is empty; use action 'set' first",
        )
        self.set_three()
        self.assertRefused(
            self.plan(action="update", status="completed"),
            "'update' needs 'index', the 1-based number of the entry",
        )
        self.assertRefused(
            self.plan(action="update", index=4, status="completed"),
            "'index' must be between 1 and 3; got 4",
        )
        self.assertRefused(
            self.plan(action="update", index=1),
            "'update' needs at least one of 'status', 'priority', 'content'",
        )
        self.assertRefused(
            self.plan(action="update", index=1, status="done"),
            "'status' must be one of pending, in_progress, completed; got 'done'",
        )
        self.assertEqual(len(self.sent), 1)

    @given(
        st.lists(
            st.tuples(
                st.text(min_size=1).filter(str.strip),
                st.sampled_from(PRIORITIES),
                st.sampled_from(STATUSES),
            ),
            min_size=1,
            max_size=8,
        ),
        st.data(),
    )
    def test_updates_keep_every_entry(self, rows: list[tuple[str, str, str]], data: Any) -> None:
        """After any set then update, the sent list is complete and only the target changed."""
        sent: list[list[PlanEntry]] = []
        ctx = ToolContext("/w", DiskFileAccess(), Clock(), PlanState(), sent.append)
        entries = [{"content": c, "priority": p, "status": s} for c, p, s in rows]
        self.successResultOf(PlanTool().run(ctx, {"action": "set", "entries": entries}))
        index = data.draw(st.integers(min_value=1, max_value=len(rows)))
        status = data.draw(st.sampled_from(STATUSES))
        update = {"action": "update", "index": index, "status": status}
        self.successResultOf(PlanTool().run(ctx, update))
        expected = [PlanEntry(c, p, s) for c, p, s in rows]
        expected[index - 1] = PlanEntry(rows[index - 1][0], rows[index - 1][1], status)
        self.assertEqual(sent[-1], expected)
