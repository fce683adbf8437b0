"""
One owner per saved session (issue 22, item 5): a ``session/load`` on another connection
of the same process takes the session over (the RFD's resume flow), after the turn
running on the old connection is saved; the old connection's later requests on it are
refused with ``-32002`` naming the takeover; across processes (two runtimes here, each
with its own lock file descriptor) a load is refused while the other holds the session.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from acpkit.errors import RPCError
from acpkit_agent import agent as agent_module
from acpkit_agent.attachments import (
    AttachedElsewhere,
    SessionAttachments,
    SessionTakenOver,
    lock_path_for,
)
from tests.fixtures.agent.harness import Harness, captured_logs
from tests.fixtures.agent.owners import Bob, Sent


@pytest.fixture(autouse=True)
def _no_home_skills(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    cwd = tmp_path / "project"
    cwd.mkdir()
    return cwd


def answered(bob: Bob, sent: Sent, *, within: float = 10.0) -> Sent:
    """Advance the clock in steps until ``sent`` is answered."""
    steps = 0
    while not sent.answered:
        assert steps < within * 4, "not answered in time"
        bob.advance(0.25)
        steps += 1
    return sent


def turn(bob: Bob, h: Harness, sid: str, text: str) -> Sent:
    """A prompt, answered."""
    return answered(bob, bob.prompt(h, sid, text))


def assert_taken_over(sent: Sent, sid: str) -> None:
    error = sent.error
    assert isinstance(error, RPCError), sent.value
    assert error.code == -32002
    assert "taken over" in error.message and sid in error.message
    assert error.data == {"sessionId": sid, "reason": "takenOver"}


# -- takeover in one process ------------------------------------------------------------------


def test_a_load_on_another_connection_takes_the_session_over(project: Path) -> None:
    """
    A: new, prompt; B: load, prompt; A: prompt.  A's last prompt is refused with -32002
    naming the takeover, and the file keeps both confirmed turns (it used to keep A's
    last turn and lose B's, silently).
    """
    bob = Bob(project)
    a, b = bob.connect(), bob.connect()
    sid = bob.new(a)
    assert turn(bob, a, sid, "one").stop_reason() == "end_turn"
    answered(bob, bob.load(b, sid)).result()
    assert turn(bob, b, sid, "two").stop_reason() == "end_turn"
    refused = turn(bob, a, sid, "three")
    assert_taken_over(refused, sid)
    assert bob.user_turns(sid) == ["one", "two"]


def test_a_load_waits_for_the_turn_running_on_the_old_connection(project: Path) -> None:
    """
    B loads while A's turn runs: B's load is answered after A's turn, and replays it;
    the file holds it.
    """
    bob = Bob(project, delay=2.0)
    a, b = bob.connect(), bob.connect()
    sid = bob.new(a)
    running = bob.prompt(a, sid, "slow one")
    bob.advance(0.5)
    load = bob.load(b, sid)
    bob.advance(0.5)
    assert not running.answered and not load.answered
    answered(bob, load)
    assert running.stop_reason() == "end_turn"
    load.result()
    replayed = [
        u["content"]["text"]
        for u in b.client.wire_updates()
        if u["sessionUpdate"] in ("user_message_chunk", "agent_message_chunk")
    ]
    assert replayed[:2] == ["slow one", "re: slow one"]
    assert bob.user_turns(sid) == ["slow one"]


def test_a_prompt_queued_behind_the_takeover_is_refused(project: Path) -> None:
    """
    A's turn runs, B's load waits, A's next prompt waits behind it: A's first turn ends
    end_turn and is saved, B loads it, A's next prompt is refused (never run, not saved).
    """
    bob = Bob(project, delay=2.0)
    a, b = bob.connect(), bob.connect()
    sid = bob.new(a)
    first = bob.prompt(a, sid, "first")
    bob.advance(0.5)
    load = bob.load(b, sid)
    second = bob.prompt(a, sid, "second")
    answered(bob, second)
    assert first.stop_reason() == "end_turn"
    load.result()
    assert_taken_over(second, sid)
    assert bob.user_turns(sid) == ["first"]


def test_every_session_request_of_the_old_connection_is_refused(project: Path) -> None:
    """After a takeover, the old connection's prompts and slash commands get -32002."""
    bob = Bob(project)
    a, b = bob.connect(), bob.connect()
    sid = bob.new(a)
    answered(bob, bob.load(b, sid)).result()
    for text in ("hello", "/compact", "/new"):
        assert_taken_over(turn(bob, a, sid, text), sid)
    assert bob.user_turns(sid) == []


def test_a_cancel_from_the_old_connection_does_nothing_to_the_new_owner(project: Path) -> None:
    """session/cancel from the old connection leaves the new owner's running turn alone."""
    bob = Bob(project, delay=2.0)
    a, b = bob.connect(), bob.connect()
    sid = bob.new(a)
    answered(bob, bob.load(b, sid)).result()
    running = bob.prompt(b, sid, "mine")
    bob.advance(0.5)
    bob.cancel(a, sid)
    answered(bob, running)
    assert running.stop_reason() == "end_turn"
    assert bob.user_turns(sid) == ["mine"]


def test_a_load_on_the_connection_that_holds_the_session_is_fine(project: Path) -> None:
    """Loading one's own session again replays it; prompting goes on."""
    bob = Bob(project)
    a = bob.connect()
    sid = bob.new(a)
    turn(bob, a, sid, "one")
    answered(bob, bob.load(a, sid)).result()
    assert turn(bob, a, sid, "two").stop_reason() == "end_turn"
    assert bob.user_turns(sid) == ["one", "two"]


def test_the_old_connection_can_take_the_session_back(project: Path) -> None:
    """A loads again after B took over: A prompts, B is refused; no turn is lost."""
    bob = Bob(project)
    a, b = bob.connect(), bob.connect()
    sid = bob.new(a)
    turn(bob, a, sid, "a1")
    answered(bob, bob.load(b, sid)).result()
    turn(bob, b, sid, "b1")
    answered(bob, bob.load(a, sid)).result()
    assert turn(bob, a, sid, "a2").stop_reason() == "end_turn"
    assert_taken_over(turn(bob, b, sid, "b2"), sid)
    assert bob.user_turns(sid) == ["a1", "b1", "a2"]


def test_the_takeover_is_logged(project: Path) -> None:
    """The load that takes a session over says so in the log."""
    bob = Bob(project)
    a, b = bob.connect(), bob.connect()
    sid = bob.new(a)
    with captured_logs() as logs:
        answered(bob, bob.load(b, sid)).result()
    assert any(f"session {sid}: taken over" in line for line in logs.acp())


def test_a_failed_load_leaves_the_session_with_its_owner(project: Path) -> None:
    """
    B's load of A's session fails (the file is not a session any more): A still holds
    the session and its next turn is saved over the broken file.
    """
    bob = Bob(project)
    a, b = bob.connect(), bob.connect()
    sid = bob.new(a)
    bob.file(sid).write_text("{broken", encoding="utf-8")
    failed = answered(bob, bob.load(b, sid))
    assert isinstance(failed.error, RPCError) and failed.error.code == -32602
    assert turn(bob, a, sid, "still mine").stop_reason() == "end_turn"
    assert bob.user_turns(sid) == ["still mine"]


def test_closing_the_old_connection_leaves_the_new_owner_alone(project: Path) -> None:
    """A's connection ends after B took over: B keeps the session (and its lock)."""
    bob = Bob(project)
    a, b = bob.connect(), bob.connect()
    sid = bob.new(a)
    answered(bob, bob.load(b, sid)).result()
    a.pair.close()
    bob.settle()
    assert turn(bob, b, sid, "b1").stop_reason() == "end_turn"
    other = Bob(project, clock=bob.clock)
    refused = answered(other, other.load(other.connect(), sid))
    assert isinstance(refused.error, RPCError) and refused.error.code == -32002


# -- session/new ------------------------------------------------------------------------------


def test_session_new_never_reuses_an_attached_or_saved_id(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    The id generator gives an id attached to another connection, then one saved on disk:
    session/new skips both (it used to take them, and overwrite the saved file).
    """
    bob = Bob(project)
    a, b = bob.connect(), bob.connect()
    taken = bob.new(a)
    saved = "20260101-000000-0000beef"
    (project / ".acpkit" / "sessions" / f"{saved}.json").write_text("{}", encoding="utf-8")
    ids = iter([taken, saved, "20260101-000000-00000fee"])
    monkeypatch.setattr(agent_module, "new_session_id", lambda: next(ids))
    assert bob.new(b) == "20260101-000000-00000fee"
    assert (project / ".acpkit" / "sessions" / f"{saved}.json").read_text() == "{}"
    assert turn(bob, a, taken, "still a's").stop_reason() == "end_turn"


# -- across processes (two runtimes: two lock file descriptors) -------------------------------


def test_a_load_in_another_process_is_refused_while_the_session_is_held(project: Path) -> None:
    """
    Another process's load of a session a live connection holds is refused with -32002
    naming the holder (pid and host); the holder goes on.  Once its connection ended the
    load succeeds and replays every turn.
    """
    first = Bob(project)
    a = first.connect()
    sid = first.new(a)
    turn(first, a, sid, "one")
    second = Bob(project, clock=first.clock)
    b = second.connect()
    refused = answered(second, second.load(b, sid))
    error = refused.error
    assert isinstance(error, RPCError) and error.code == -32002
    assert "another agent process" in error.message and f"process {os.getpid()}" in error.message
    assert error.data["reason"] == "attachedElsewhere"
    assert turn(first, a, sid, "two").stop_reason() == "end_turn"
    a.pair.close()
    first.settle()
    answered(second, second.load(b, sid)).result()
    assert turn(second, b, sid, "three").stop_reason() == "end_turn"
    assert second.user_turns(sid) == ["one", "two", "three"]


def test_a_closed_connection_releases_its_sessions_once_no_turn_runs(project: Path) -> None:
    """
    A's connection ends while a turn holds the process's turn lock (here another
    connection's; a cancelled turn of A's would still be saving): A's session stays locked
    until the lock is free, so another process never reads a file about to change; then
    the lock file is gone and the other process loads it.
    """
    first = Bob(project, delay=3.0)
    a, c = first.connect(), first.connect()
    sid = first.new(a)
    busy = first.prompt(c, first.new(c), "long")
    first.advance(0.5)
    a.pair.close()
    first.settle()
    lock = lock_path_for(os.path.realpath(first.file(sid)))
    assert os.path.exists(lock)
    second = Bob(project, clock=first.clock)
    b = second.connect()
    early = answered(second, second.load(b, sid))
    assert isinstance(early.error, RPCError) and early.error.code == -32002
    first.advance(3.0)
    assert busy.stop_reason() == "end_turn"
    assert not os.path.exists(lock)
    answered(second, second.load(b, sid)).result()


# -- SessionAttachments -----------------------------------------------------------------------


def test_attachments_lock_file_lifecycle(tmp_path: Path) -> None:
    """
    The first attach creates and locks .<id>.json.lock naming the pid; a takeover in the
    process keeps it; detach by a non-owner does nothing; the owner's detach removes it.
    """
    key = str(tmp_path / "s.json")
    lock = tmp_path / ".s.json.lock"
    attachments = SessionAttachments(pid=4242, host="here")
    one, two = object(), object()
    assert attachments.attach(key, one) is None
    assert lock.read_text().startswith("pid=4242 host=here since=")
    assert attachments.attach(key, two) is one
    assert attachments.attach(key, two) is None
    assert attachments.owner(key) is two
    assert not attachments.detach(key, one)
    assert lock.exists()
    assert attachments.detach(key, two)
    assert not lock.exists() and attachments.owner(key) is None


def test_attachments_of_two_processes_exclude_each_other(tmp_path: Path) -> None:
    """A second SessionAttachments (its own descriptor) cannot attach a held session."""
    key = str(tmp_path / "s.json")
    holder, other = SessionAttachments(pid=1, host="h1"), SessionAttachments()
    holder.attach(key, "conn")
    with pytest.raises(AttachedElsewhere) as caught:
        other.attach(key, "conn2")
    assert "process 1 on h1" in caught.value.holder
    holder.detach(key, "conn")
    assert other.attach(key, "conn2") is None


def test_attachments_refuse_a_symbolic_link_as_lock_file(tmp_path: Path) -> None:
    """A lock path that is a symbolic link is never followed: the attach fails."""
    key = str(tmp_path / "s.json")
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    os.symlink(target, tmp_path / ".s.json.lock")
    with pytest.raises(OSError):
        SessionAttachments().attach(key, "conn")
    assert target.read_text() == "keep"


def test_attachments_in_a_directory_that_cannot_hold_files(tmp_path: Path) -> None:
    """No sessions directory (a file in its way): attached in this process only."""
    (tmp_path / "blocker").write_text("a file")
    key = str(tmp_path / "blocker" / "s.json")
    attachments = SessionAttachments()
    assert attachments.attach(key, "conn") is None
    assert attachments.owner(key) == "conn"
    assert attachments.detach(key, "conn")


def test_a_stale_lock_file_of_a_dead_process_is_taken(tmp_path: Path) -> None:
    """A lock file left by a process that died holds nothing: the attach succeeds."""
    key = str(tmp_path / "s.json")
    (tmp_path / ".s.json.lock").write_text("pid=99999 host=gone since=then\n")
    attachments = SessionAttachments(pid=7, host="me")
    assert attachments.attach(key, "conn") is None
    assert (tmp_path / ".s.json.lock").read_text().startswith("pid=7 host=me")


HOLD = """
import sys, time
from acpkit_agent.attachments import SessionAttachments
a = SessionAttachments()
a.attach(sys.argv[1], "conn")
print("held", flush=True)
time.sleep(120)
"""


@pytest.mark.process
def test_a_killed_process_leaves_no_session_locked(tmp_path: Path) -> None:
    """A process holding a session is SIGKILLed: the kernel releases its lock."""
    key = str(tmp_path / "s.json")
    child = subprocess.Popen([sys.executable, "-c", HOLD, key], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        with pytest.raises(AttachedElsewhere) as caught:
            SessionAttachments().attach(key, "conn")
        assert f"process {child.pid}" in caught.value.holder
        child.kill()
        child.wait(30)
        deadline = time.monotonic() + 10
        attachments = SessionAttachments()
        while True:
            try:
                attachments.attach(key, "conn")
                break
            except AttachedElsewhere:
                assert time.monotonic() < deadline, "the dead process's lock was not released"
                time.sleep(0.05)
        assert attachments.owner(key) == "conn"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(30)


def test_taken_over_error_is_resource_not_found() -> None:
    """SessionTakenOver is -32002 (ACP resource_not_found) with the id and the reason."""
    error = SessionTakenOver("s1")
    assert error.code == -32002
    assert error.to_json()["data"] == {"sessionId": "s1", "reason": "takenOver"}


def test_every_attach_and_detach_is_logged_with_its_connection_and_pid(project: Path) -> None:
    """
    Who held a session when, from the log alone (what the load-balancer test checks
    across processes): ``attached to connection C (pid P)`` on session/new and
    session/load, ``taken over from another connection (C)`` before the new owner's
    line, ``detached from connection C (pid P)`` when a connection ends; each event
    carries ``sid``, ``connection``, ``pid`` and ``session_file`` fields.
    """
    bob = Bob(project)
    a, b = bob.connect(), bob.connect()
    with captured_logs() as logs:
        sid = bob.new(a)
        answered(bob, bob.load(b, sid)).result()
        b.pair.close()
        bob.settle()
    pid = os.getpid()
    events = [e for e in logs.events if e.get("sid") == sid and "session_file" in e]
    kinds = [e["log_format"].split(": ", 1)[1].split(" ", 1)[0] for e in events]
    assert kinds == ["attached", "taken", "attached", "detached"]
    assert all(e["pid"] == pid for e in events)
    assert all(e["session_file"] == os.path.realpath(bob.file(sid)) for e in events)
    first, taken, second, detached = events
    assert taken["connection"] == first["connection"]
    assert detached["connection"] == second["connection"] != first["connection"]
    lines = [line for line in logs.acp() if sid in line]
    assert f"[acp] session {sid}: detached from connection" in lines[-1]
    assert f"(pid {pid})" in lines[-1]
