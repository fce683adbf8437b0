"""
Session ownership as a race (issue 22, item 5): Hypothesis interleaves three connections'
``session/new``, ``session/load``, ``session/prompt``, ``session/cancel`` and closes on one
bob runtime, with turns that take time on a :class:`~twisted.internet.task.Clock`.

Whatever the interleaving: every prompt answered ``end_turn`` is in its session's file,
in the order the answers came; the file is a valid session; a prompt refused because the
session was taken over never reaches the file; every answer is one the rules allow; and
once every connection has ended, no session is attached and no lock file is left.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from acpkit.errors import ConnectionLost, RPCError
from tests.fixtures.agent.harness import Harness
from tests.fixtures.agent.owners import Bob, Sent

SLOTS = 3
slots = st.integers(0, SLOTS - 1)
#: Which session a rule uses: most often the newest (index -1, the same one again).
picks = st.one_of(st.just(-1), st.integers(0, 1_000))


class SessionOwners(RuleBasedStateMachine):
    """Three connection slots on one runtime; the sessions they created."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="acpkit-owners-"))
        self.bob = Bob(self.root, delay=1.0)
        self.slots: list[Harness] = [self.bob.connect() for _ in range(SLOTS)]
        self.closed: set[int] = set()
        self.sessions: list[str] = []
        self.prompts: list[tuple[str, str, Sent]] = []
        self.loads: list[Sent] = []
        #: Per session, the texts of the prompts answered end_turn, with the step seen.
        self.confirmed: dict[str, list[tuple[int, str]]] = {}
        self.refused: set[str] = set()
        self.seen: set[int] = set()
        self.step = 0
        self.counter = 0

    def teardown(self) -> None:
        try:
            for _ in range(40):
                if all(sent.answered for _, _, sent in self.prompts):
                    break
                self.bob.advance(1.0)
            self.observe()
            self.files_keep_every_confirmed_turn()
            for index, h in enumerate(self.slots):
                if index not in self.closed:
                    h.pair.close()
            self.bob.settle()
            attachments = getattr(self.bob.runtime, "attachments", ())
            assert len(attachments) == 0
            sessions = self.root / ".acpkit" / "sessions"
            if sessions.exists():
                assert [p.name for p in sessions.iterdir() if p.name.endswith(".lock")] == []
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- rules ----------------------------------------------------------------------------

    @rule(slot=slots)
    def new(self, slot: int) -> None:
        if slot in self.closed:
            return
        self.sessions.append(self.bob.new(self.slots[slot]))

    @precondition(lambda self: bool(self.sessions))
    @rule(slot=slots, pick=picks)
    def load(self, slot: int, pick: int) -> None:
        sid = self.sessions[pick % len(self.sessions)]
        self.loads.append(self.bob.load(self.slots[slot], sid))

    @precondition(lambda self: bool(self.sessions))
    @rule(slot=slots, pick=picks)
    def prompt(self, slot: int, pick: int) -> None:
        sid = self.sessions[pick % len(self.sessions)]
        self.counter += 1
        text = f"turn {self.counter} on {slot}"
        self.prompts.append((sid, text, self.bob.prompt(self.slots[slot], sid, text)))

    @precondition(lambda self: bool(self.sessions))
    @rule(slot=slots, pick=picks)
    def whole_turn(self, slot: int, pick: int) -> None:
        """A prompt, then time until it is answered (one connection at a time)."""
        self.prompt(slot, pick)
        sent = self.prompts[-1][2]
        for _ in range(20):
            if sent.answered:
                break
            self.bob.advance(0.5)

    @precondition(lambda self: bool(self.sessions))
    @rule(slot=slots, pick=picks)
    def cancel(self, slot: int, pick: int) -> None:
        if slot in self.closed:
            return
        self.bob.cancel(self.slots[slot], self.sessions[pick % len(self.sessions)])

    @rule(slot=slots)
    def close(self, slot: int) -> None:
        if slot in self.closed:
            return
        self.closed.add(slot)
        self.slots[slot].pair.close()

    @rule(slot=slots)
    def reconnect(self, slot: int) -> None:
        if slot not in self.closed:
            return
        self.closed.discard(slot)
        self.slots[slot] = self.bob.connect()

    @rule(seconds=st.sampled_from([0.0, 0.25, 0.5, 1.0]))
    def advance(self, seconds: float) -> None:
        self.bob.advance(seconds)

    # -- checks ---------------------------------------------------------------------------

    def observe(self) -> None:
        """Classify the answers that came since the last step."""
        self.step += 1
        for index, (sid, text, sent) in enumerate(self.prompts):
            if index in self.seen or not sent.answered:
                continue
            self.seen.add(index)
            error = sent.error
            if error is None:
                reason = sent.stop_reason()
                assert reason in ("end_turn", "cancelled"), sent.value
                if reason == "end_turn":
                    self.confirmed.setdefault(sid, []).append((self.step, text))
            elif isinstance(error, RPCError) and error.code == -32002:
                assert error.data["reason"] == "takenOver", error
                self.refused.add(text)
            elif isinstance(error, RPCError) and error.code == -32602:
                assert "unknown session" in error.message, error
            else:
                assert isinstance(error, ConnectionLost), repr(error)
        for load in self.loads:
            if load.answered and load.error is not None:
                assert isinstance(load.error, ConnectionLost), repr(load.error)

    @invariant()
    def files_keep_every_confirmed_turn(self) -> None:
        self.observe()
        for sid in self.sessions:
            turns = self.bob.user_turns(sid)  # also: the file is a valid session
            assert not self.refused.intersection(turns), (self.refused, turns)
            confirmed = self.confirmed.get(sid, [])
            for _step, text in confirmed:
                assert text in turns, f"confirmed turn {text!r} lost: file has {turns}"
            for (step_a, text_a), (step_b, text_b) in itertools.pairwise(confirmed):
                if step_a < step_b:
                    assert turns.index(text_a) < turns.index(text_b), (confirmed, turns)


TestSessionOwners = SessionOwners.TestCase
