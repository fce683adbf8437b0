"""Permission policies and answers."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer

from acpkit import schema
from acpkit_client.interfaces import IPermissionPrompt
from acpkit_client.permissions import (
    PermissionPolicy,
    PolicyPermissionPrompt,
    answer_permission,
)


def request(*kinds: str) -> schema.RequestPermissionRequest:
    return schema.RequestPermissionRequest(
        session_id="s",
        tool_call=schema.ToolCallUpdate(tool_call_id="t", title="rm -rf build"),
        options=[
            schema.PermissionOption(
                option_id=f"id-{kind}", name=kind, kind=schema.PermissionOptionKind(kind)
            )
            for kind in kinds
        ],
    )


@implementer(IPermissionPrompt)
class Fixed:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def choose(self, request: Any) -> Any:
        return self.answer


ALL = ("allow_always", "allow_once", "reject_always", "reject_once")


class PermissionTests(SynchronousTestCase):
    def outcome(self, req: schema.RequestPermissionRequest, prompt: Any) -> Any:
        return self.successResultOf(answer_permission(req, prompt)).outcome

    def test_default_policy_rejects_once(self) -> None:
        """The default policy chooses reject_once, never an allow option."""
        outcome = self.outcome(request(*ALL), PolicyPermissionPrompt())
        self.assertEqual(outcome, schema.SelectedPermissionOutcome(option_id="id-reject_once"))

    def test_reject_falls_back_to_reject_always(self) -> None:
        """Without reject_once, the reject policy chooses reject_always."""
        outcome = self.outcome(request("allow_once", "reject_always"), PolicyPermissionPrompt())
        self.assertEqual(outcome, schema.SelectedPermissionOutcome(option_id="id-reject_always"))

    def test_allow_policy_chooses_allow_once(self) -> None:
        """The explicit allow policy chooses allow_once (not allow_always)."""
        prompt = PolicyPermissionPrompt(PermissionPolicy.ALLOW)
        outcome = self.outcome(request(*ALL), prompt)
        self.assertEqual(outcome, schema.SelectedPermissionOutcome(option_id="id-allow_once"))

    def test_allow_policy_without_allow_once_rejects(self) -> None:
        """With only allow_always offered, allow policy gives no answer, which rejects."""
        prompt = PolicyPermissionPrompt(PermissionPolicy.ALLOW)
        outcome = self.outcome(request("allow_always", "reject_once"), prompt)
        self.assertEqual(outcome, schema.SelectedPermissionOutcome(option_id="id-reject_once"))

    def test_no_answer_and_unknown_ids_reject(self) -> None:
        """None, or an id that is not among the options, chooses a reject option."""
        for answer in (None, "made-up", 3):
            outcome = self.outcome(request(*ALL), Fixed(answer))
            self.assertEqual(outcome, schema.SelectedPermissionOutcome(option_id="id-reject_once"))

    def test_no_reject_option_and_no_answer_is_cancelled(self) -> None:
        """When the agent offers no reject option, no answer is the cancelled outcome."""
        outcome = self.outcome(request("allow_once"), Fixed(None))
        self.assertIsInstance(outcome, schema.CancelledPermissionOutcome)

    def test_prompt_may_answer_later(self) -> None:
        """A prompt returning a Deferred is waited for; its chosen option is selected."""
        pending: Deferred[str] = Deferred()
        d = answer_permission(request(*ALL), Fixed(pending))
        self.assertNoResult(d)
        pending.callback("id-allow_always")
        self.assertEqual(
            self.successResultOf(d).outcome,
            schema.SelectedPermissionOutcome(option_id="id-allow_always"),
        )
        self.assertEqual(
            self.successResultOf(answer_permission(request(*ALL), Fixed(succeed(None)))).outcome,
            schema.SelectedPermissionOutcome(option_id="id-reject_once"),
        )

    def test_cancelling_the_answer_cancels_the_prompt(self) -> None:
        """Cancelling the answer (a cancelled turn) cancels the prompt's pending Deferred."""
        cancelled: list[bool] = []
        pending: Deferred[str] = Deferred(lambda d: cancelled.append(True))
        d = answer_permission(request(*ALL), Fixed(pending))
        d.cancel()
        self.failureResultOf(d)
        self.assertEqual(cancelled, [True])
