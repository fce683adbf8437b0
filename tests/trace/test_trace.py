"""Tests for acpkit.trace: the ACPKIT_TRACE recorder, reader, printer and replayer."""

from __future__ import annotations

import io
import json
import os
import re
import sys
import tempfile
from collections.abc import Generator
from datetime import UTC, datetime
from typing import Any

import pytest
from twisted.internet import defer, reactor
from twisted.internet.testing import MemoryReactor, StringTransport
from twisted.internet.utils import getProcessOutputAndValue
from twisted.logger import ILogObserver, LogEvent, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase, TestCase
from zope.interface import implementer

from acpkit import trace
from acpkit.framing import NDJSONProtocol
from acpkit.trace import (
    MalformedTraceLine,
    Tracer,
    attach_tracer,
    main,
    open_trace_file,
    read_trace,
    recording,
    replay,
    tracer_from_environment,
)
from tests.helpers import MemoryAgentReactor

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "agent_fixture.py")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORD = re.compile(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z (->|<-) (\S+) (.*)$")
WHEN = datetime(2026, 11, 29, 19, 45, 1, 123456, tzinfo=UTC)


def fresh_path() -> str:
    """A path in a new temporary directory."""
    return os.path.join(tempfile.mkdtemp(), "trace.log")


def warnings_during(test: SynchronousTestCase) -> list[LogEvent]:
    """Collect acpkit.trace log events until the end of ``test``."""
    events: list[LogEvent] = []

    @implementer(ILogObserver)
    def observer(event: LogEvent) -> None:
        if event.get("log_namespace") == "acpkit.trace":
            events.append(event)

    globalLogPublisher.addObserver(observer)
    test.addCleanup(globalLogPublisher.removeObserver, observer)
    return events


class Line(NDJSONProtocol):
    """Keeps received lines."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[bytes] = []

    def lineReceived(self, line: bytes) -> None:
        self.lines.append(line)


class TracerTests(SynchronousTestCase):
    """Writing traces."""

    def test_record_format(self) -> None:
        """Each line is '<UTC timestamp with µs>Z <-> or <-> <name> <line>', one per line."""
        path = fresh_path()
        trace_file = open_trace_file(path)
        assert trace_file is not None
        tracer = Tracer("bob", trace_file, clock=lambda: WHEN)
        tracer.sent(b'{"jsonrpc":"2.0","id":1,"method":"init"}')
        tracer.received(b'{"jsonrpc":"2.0","id":1,"result":{}}')
        with open(path, "rb") as f:
            self.assertEqual(
                f.read(),
                b'2026-11-29T19:45:01.123456Z -> bob {"jsonrpc":"2.0","id":1,"method":"init"}\n'
                b'2026-11-29T19:45:01.123456Z <- bob {"jsonrpc":"2.0","id":1,"result":{}}\n',
            )

    def test_names_with_spaces_are_one_field(self) -> None:
        """A peer name with whitespace is written as one field."""
        trace_file = open_trace_file(fresh_path())
        assert trace_file is not None
        self.assertEqual(Tracer("my agent", trace_file).name, "my_agent")

    def test_protocol_lines_are_traced_and_files_shared(self) -> None:
        """Two connections on one path share one file; both directions are recorded."""
        path = fresh_path()
        env = {"ACPKIT_TRACE": path}
        first = tracer_from_environment("bob", env)
        second = tracer_from_environment("alice", env)
        assert first is not None and second is not None
        self.assertIs(first.file, second.file)
        proto = Line()
        proto.makeConnection(StringTransport())
        proto.tracer = first
        proto.sendLine(b'{"id":0,"method":"initialize"}')
        proto.dataReceived(b'{"id":0,"result":{}}\r\n')
        second.sent(b"{}")
        with open(path, "rb") as f:
            records = [RECORD.match(line) for line in f.read().splitlines()]
        self.assertEqual(
            [(m.group(1), m.group(2), m.group(3)) for m in records if m],
            [
                (b"->", b"bob", b'{"id":0,"method":"initialize"}'),
                (b"<-", b"bob", b'{"id":0,"result":{}}'),
                (b"->", b"alice", b"{}"),
            ],
        )

    def test_attach_tracer_gives_a_traced_protocol_one(self) -> None:
        """attach_tracer gives a traced protocol without a tracer the ACPKIT_TRACE one; a
        protocol that has one keeps it, and without the variable nothing changes."""
        env = {"ACPKIT_TRACE": fresh_path()}
        fresh, kept, untraced = Line(), Line(), Line()
        mine = tracer_from_environment("mine", env)
        kept.tracer = mine
        attach_tracer(fresh, "bob", env)
        attach_tracer(kept, "bob", env)
        attach_tracer(untraced, "bob", {})
        assert isinstance(fresh.tracer, Tracer)
        self.assertEqual(fresh.tracer.name, "bob")
        self.assertIs(kept.tracer, mine)
        self.assertIsNone(untraced.tracer)

    def test_attach_tracer_leaves_other_protocols_alone(self) -> None:
        """A protocol that is not traced (no ITraced) gets no tracer attribute."""
        from twisted.internet.protocol import Protocol

        plain = Protocol()
        attach_tracer(plain, "bob", {"ACPKIT_TRACE": fresh_path()})
        self.assertFalse(hasattr(plain, "tracer"))

    def test_no_variable_no_tracer(self) -> None:
        """Without ACPKIT_TRACE (or with it empty) there is no tracer."""
        self.assertIsNone(tracer_from_environment("bob", {}))
        self.assertIsNone(tracer_from_environment("bob", {"ACPKIT_TRACE": ""}))

    def test_unopenable_file_means_no_trace_and_one_warning(self) -> None:
        """A path that cannot be opened gives no tracer and a single warning."""
        events = warnings_during(self)
        env = {"ACPKIT_TRACE": "/nonexistent-dir-acpkit/trace.log"}
        self.assertIsNone(tracer_from_environment("bob", env))
        self.assertIsNone(tracer_from_environment("alice", env))
        self.assertEqual(len(events), 1)
        self.assertIn("/nonexistent-dir-acpkit/trace.log", events[0]["path"])

    def test_failing_writes_never_raise(self) -> None:
        """Writes that fail (disk full: /dev/full) stop the trace with one warning, no error."""
        if not os.path.exists("/dev/full"):
            self.skipTest("no /dev/full")
        events = warnings_during(self)
        recording._open_files.pop("/dev/full", None)
        tracer = tracer_from_environment("bob", {"ACPKIT_TRACE": "/dev/full"})
        assert tracer is not None
        proto = Line()
        transport = StringTransport()
        proto.makeConnection(transport)
        proto.tracer = tracer
        proto.sendLine(b"{}")
        proto.sendLine(b"[]")
        proto.dataReceived(b"{}\n")
        self.assertEqual(transport.value(), b"{}\n[]\n")
        self.assertEqual(proto.lines, [b"{}"])
        self.assertTrue(tracer.file.broken)
        self.assertEqual(len(events), 1)
        recording._open_files.pop("/dev/full", None)


def write_trace(lines: list[bytes]) -> str:
    """A trace file holding ``lines``."""
    path = fresh_path()
    with open(path, "wb") as f:
        f.write(b"".join(line + b"\n" for line in lines))
    return path


SAMPLE = [
    b'2026-11-29T19:45:01.000001Z -> bob {"jsonrpc":"2.0","id":1,"method":"initialize"}',
    b'2026-11-29T19:45:01.000002Z <- bob {"jsonrpc":"2.0","id":1,"result":{"method":"initialize"}}',
    b'2026-11-29T19:45:01.000003Z -> bob {"jsonrpc":"2.0","method":"note"}',
    b'2026-11-29T19:45:01.000004Z -> bob {"jsonrpc":"2.0","id":"two","method":"ask"}',
    b'2026-11-29T19:45:01.000005Z <- bob {"id":"a1","method":"fs/read","params":{}}',
    b'2026-11-29T19:45:01.000006Z -> bob {"jsonrpc":"2.0","id":"a1","result":"content"}',
    b'2026-11-29T19:45:01.000007Z <- bob {"id":"two","result":{"answer":"content"}}',
    b'2026-11-29T19:45:01.000008Z -> alice {"jsonrpc":"2.0","id":9,"method":"other"}',
    b"2026-11-29T19:45:01.000009Z <- bob not json at all",
]


class ReaderTests(SynchronousTestCase):
    """Reading and printing traces."""

    def test_read_records(self) -> None:
        """read_trace yields timestamp, direction, name, raw message and parsed JSON."""
        records = list(read_trace(write_trace(SAMPLE)))
        self.assertEqual(len(records), len(SAMPLE))
        first = records[0]
        self.assertEqual(first.timestamp, datetime(2026, 11, 29, 19, 45, 1, 1, tzinfo=UTC))
        self.assertEqual((first.direction, first.name, first.sent), ("->", "bob", True))
        self.assertEqual(first.json()["method"], "initialize")
        self.assertEqual(first.line_number, 1)
        self.assertEqual(records[-1].message, b"not json at all")
        self.assertRaises(ValueError, records[-1].json)
        self.assertEqual([r.to_bytes() for r in records], [line + b"\n" for line in SAMPLE])

    def test_malformed_lines_report_their_number(self) -> None:
        """A malformed line raises with its line number, or goes to on_error and reading goes on."""
        path = write_trace(
            [SAMPLE[0], b"garbage", b"2026-13-01T00:00:00.000000Z -> x {}", SAMPLE[1]]
        )
        with self.assertRaises(MalformedTraceLine) as caught:
            list(read_trace(path))
        self.assertEqual(caught.exception.line_number, 2)
        self.assertIn(":2:", str(caught.exception))
        errors: list[MalformedTraceLine] = []
        records = list(read_trace(path, on_error=errors.append))
        self.assertEqual([r.line_number for r in records], [1, 4])
        self.assertEqual([e.line_number for e in errors], [2, 3])
        path = write_trace([b"2026-11-29T19:45:01.000001Z => bob {}"])
        self.assertRaises(MalformedTraceLine, list, read_trace(path))

    def test_print_command(self) -> None:
        """'print FILE' shows each record with a summary and indented JSON."""
        out = io.StringIO()
        self.assertEqual(main(["print", write_trace(SAMPLE)], out=out), 0)
        text = out.getvalue()
        self.assertIn("2026-11-29T19:45:01.000001Z -> bob  request 1 initialize", text)
        self.assertIn('<- bob  response "two"', text)
        self.assertIn("-> bob  notification note", text)
        self.assertIn('        "method": "initialize"', text)
        self.assertIn("<- bob  not JSON\n    not json at all", text)

    def test_print_reports_malformed_lines(self) -> None:
        """'print' reports malformed lines with their number on stderr and exits 1."""
        err = io.StringIO()
        self.patch(sys, "stderr", err)
        out = io.StringIO()
        self.assertEqual(main(["print", write_trace([SAMPLE[0], b"junk"])], out=out), 1)
        self.assertIn(":2:", err.getvalue())
        self.assertIn("request 1 initialize", out.getvalue())

    def test_replay_usage_errors(self) -> None:
        """'replay' without a command, or on a missing file, fails with a message."""
        err = io.StringIO()
        self.patch(sys, "stderr", err)
        self.assertEqual(main(["replay", write_trace(SAMPLE)]), 2)
        self.assertEqual(main(["replay", "/nonexistent/trace", "--", "true"]), 1)
        self.assertIn("/nonexistent/trace", err.getvalue())


class ReplayStartTests(SynchronousTestCase):
    """Replay failing to start."""

    def test_missing_agent_command(self) -> None:
        """A command that does not exist makes the replay fail with status 1, no exception."""
        events = warnings_during(self)
        records = list(read_trace(write_trace(SAMPLE)))
        status = self.successResultOf(
            defer.ensureDeferred(
                replay(reactor, records, "/nonexistent/agent", [], out=io.StringIO())
            )
        )
        self.assertEqual(status, 1)
        self.assertIn("/nonexistent/agent", str(events[-1]["error"]))


@pytest.mark.process
class ReplayTests(TestCase):
    """Replaying a trace against a real agent process."""

    timeout = 30

    def setUp(self) -> None:
        os.environ.pop("ACPKIT_TRACE", None)
        self.patch(os, "environ", dict(os.environ, PYTHONPATH=REPO_ROOT))

    @defer.inlineCallbacks
    def test_replay_waits_for_responses_and_answers_agent_requests(
        self,
    ) -> Generator[defer.Deferred[Any], Any, None]:
        """The first peer's lines are sent in order, each after what preceded it came back."""
        out = io.StringIO()
        records = list(read_trace(write_trace(SAMPLE)))
        status = yield defer.ensureDeferred(
            replay(reactor, records, sys.executable, [FIXTURE, "responder"], out=out, timeout=10)
        )
        self.assertEqual(status, 0)
        got = [RECORD.match(line.encode()) for line in out.getvalue().splitlines()]
        self.assertTrue(all(got))
        flow = [(m.group(1), m.group(2), json.loads(m.group(3))) for m in got if m]
        self.assertTrue(all(name == b"bob" for _, name, _ in flow))
        self.assertEqual(
            [(d, message.get("id"), message.get("method")) for d, _, message in flow],
            [
                (b"->", 1, "initialize"),
                (b"<-", 1, None),
                (b"->", None, "note"),
                (b"->", "two", "ask"),
                (b"<-", "a1", "fs/read"),
                (b"->", "a1", None),
                (b"<-", "two", None),
            ],
        )
        self.assertEqual(flow[-1][2]["result"], {"answer": "content"})

    @defer.inlineCallbacks
    def test_replay_times_out_when_a_response_never_comes(
        self,
    ) -> Generator[defer.Deferred[Any], Any, None]:
        """A request the agent never answers fails the replay (status 1) after the timeout."""
        lines = [
            b'2026-11-29T19:45:01.000001Z -> bob {"jsonrpc":"2.0","id":1,"method":"mute"}',
            b'2026-11-29T19:45:01.000002Z <- bob {"jsonrpc":"2.0","id":1,"result":{}}',
            b'2026-11-29T19:45:01.000003Z -> bob {"jsonrpc":"2.0","id":2,"method":"x"}',
        ]
        out = io.StringIO()
        records = list(read_trace(write_trace(lines)))
        status = yield defer.ensureDeferred(
            replay(reactor, records, sys.executable, [FIXTURE, "responder"], out=out, timeout=0.5)
        )
        self.assertEqual(status, 1)
        self.assertNotIn('"id":2', out.getvalue())
        self.flushLoggedErrors()

    @defer.inlineCallbacks
    def test_replay_command_line(self) -> Generator[defer.Deferred[Any], Any, None]:
        """'python -m acpkit.trace replay FILE -- CMD ARGS' prints the exchange and exits 0."""
        path = write_trace(SAMPLE[:3])
        out, err, code = yield getProcessOutputAndValue(
            sys.executable,
            ["-m", "acpkit.trace", "replay", path, "--", sys.executable, FIXTURE, "responder"],
            env=dict(os.environ),
            path=REPO_ROOT,
        )
        self.assertEqual(code, 0, err)
        lines: list[Any] = out.splitlines()
        self.assertEqual(len(lines), 3)
        self.assertTrue(all(RECORD.match(line) for line in lines))


@pytest.mark.process
class SpawnedTraceTests(TestCase):
    """ACPKIT_TRACE with real processes: spawn_agent and serve_stdio attach tracers."""

    timeout = 30

    @defer.inlineCallbacks
    def test_explicit_env_does_not_pass_the_trace_either(
        self,
    ) -> Generator[defer.Deferred[Any], Any, None]:
        """
        ACPKIT_TRACE in the ``env`` given to spawn_agent (acpkit-client passes its whole
        environment that way) is not passed on: a spawned acpkit agent's traffic is
        traced once, by the parent, under the agent's name (no records named ``client``).
        """
        from acpkit.io import spawn_agent

        path = fresh_path()
        self.patch(os, "environ", dict(os.environ, PYTHONPATH=REPO_ROOT, ACPKIT_TRACE=path))
        proto = Line()
        agent = spawn_agent(
            reactor,
            proto,
            sys.executable,
            [FIXTURE, "echo"],
            name="bob",
            env=dict(os.environ),
        )
        self.addCleanup(agent.stop, 0.5)
        self.assertIsInstance(proto.tracer, Tracer)
        proto.sendLine(b'{"id":1,"method":"ping"}')
        yield agent.stop(grace=5)
        self.assertEqual(proto.lines, [b'{"id":1,"method":"ping"}'])
        seen = sorted((r.direction, r.name) for r in read_trace(path))
        self.assertEqual(seen, [("->", "bob"), ("<-", "bob")])

    @defer.inlineCallbacks
    def test_child_does_not_inherit_the_trace(self) -> Generator[defer.Deferred[Any], Any, None]:
        """By default the child does not inherit ACPKIT_TRACE: each message is traced once."""
        from acpkit.io import spawn_agent

        path = fresh_path()
        self.patch(os, "environ", dict(os.environ, PYTHONPATH=REPO_ROOT, ACPKIT_TRACE=path))
        proto = Line()
        agent = spawn_agent(reactor, proto, sys.executable, [FIXTURE, "echo"], name="bob")
        self.addCleanup(agent.stop, 0.5)
        proto.sendLine(b'{"id":1,"method":"ping"}')
        yield agent.stop(grace=5)
        seen = sorted((r.direction, r.name) for r in read_trace(path))
        self.assertEqual(seen, [("->", "bob"), ("<-", "bob")])


class SpawnEnvironmentTests(SynchronousTestCase):
    """What environment and tracer name spawn_agent gives a child, without a process."""

    def test_trace_variable_never_reaches_the_child(self) -> None:
        """
        ACPKIT_TRACE is removed from the spawned agent's environment, whether inherited
        from ours or given in ``env``; everything else in ``env`` is passed.
        """
        from acpkit.io import spawn_agent

        path = fresh_path()
        self.patch(os, "environ", dict(os.environ, ACPKIT_TRACE=path))
        for env in (None, {"ACPKIT_TRACE": path, "OTHER": "1"}, dict(os.environ)):
            fake = MemoryAgentReactor()
            spawn_agent(fake, Line(), sys.executable, [], env=env, name="bob")
            (call,) = fake.spawned
            self.assertNotIn("ACPKIT_TRACE", call["env"])
            if env is not None and "OTHER" in env:
                self.assertEqual(call["env"]["OTHER"], "1")

    def test_tracers_are_named_after_the_peer(self) -> None:
        """A spawned agent's tracer names the agent; serve_stdio's names its peer "client"."""
        from acpkit.io import serve_stdio, spawn_agent

        path = fresh_path()
        self.patch(os, "environ", dict(os.environ, ACPKIT_TRACE=path))
        proto = Line()
        spawn_agent(MemoryAgentReactor(), proto, sys.executable, [], name="bob")
        assert isinstance(proto.tracer, trace.Tracer)
        self.assertEqual(proto.tracer.name, "bob")
        served = Line()
        read_end, write_end = os.pipe()
        self.addCleanup(os.close, read_end)
        self.addCleanup(os.close, write_end)
        serve_stdio(served, MemoryReactor(), stdin=read_end, stdout=write_end)
        assert isinstance(served.tracer, trace.Tracer)
        self.assertEqual(served.tracer.name, "client")
