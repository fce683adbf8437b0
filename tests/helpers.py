"""
Helpers shared by the tests: one version of each, instead of a copy per file.

- :func:`examples`: a Hypothesis example count relative to the loaded profile.
- :func:`wait_until`: poll a condition of another process on the real reactor.
- :func:`write`: write a file, making its directories; :func:`write_through`: write one
  through the client's ``fs/write_text_file`` handler.
- :func:`connected`: connect a protocol to a fresh transport.
- :func:`refused_port`, :func:`free_port`: loopback ports for tests of connecting.
- :func:`child_env`: our environment with the checkout importable, for child processes.
- :class:`InteropClient`, :func:`start_port_server`: the client side of the interop
  scenario with the official SDKs, and a peer server in a child process.
- :class:`MemoryAgentReactor`: a ``Clock`` whose ``spawnProcess`` starts an in-memory agent
  instead of a process, for tests of what spawns agents (``acpkit-client ask``, the
  terminal UI) with time under the test's control.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, AnyStr, TypeVar, overload

from hypothesis import settings
from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessDone
from twisted.internet.interfaces import (
    IProcessProtocol,
    IProcessTransport,
    IProtocol,
    IReactorProcess,
    ITransport,
)
from twisted.internet.protocol import ProcessProtocol
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from zope.interface import implementer

from acpkit import schema
from acpkit.connection import AgentConnection, Client
from acpkit.interfaces import IAgent
from acpkit.jsonrpc import JSONRPCProtocol

if TYPE_CHECKING:
    from acpkit_client.fs import FileAccess

ROOT = Path(__file__).resolve().parent.parent
"""The checkout (the directory holding ``acpkit/`` and ``tests/``)."""

_Transport = TypeVar("_Transport", bound=ITransport)


# -- Hypothesis ---------------------------------------------------------------------------


def examples(scale: float) -> int:
    """
    ``scale`` times the loaded profile's ``max_examples`` (at least 1), for a test that
    wants more or fewer examples than the others: ``@settings(max_examples=examples(5))``.

    The profiles are in tests/conftest.py; ``ci`` has 60 examples, ``fast`` 15, so
    ``examples(5)`` is 300 in CI and 75 with ``HYPOTHESIS_PROFILE=fast``. Evaluated when
    the test module is imported, after conftest.py has loaded the profile.
    """
    return max(1, round(settings().max_examples * scale))


FIND_LIMIT = 2000
"""How many examples ``hypothesis.find`` may try before it gives up. Not an example count
that the profiles scale: ``find`` stops at the first example that matches, so the limit
is only reached when the strategy cannot produce one (the test's failure)."""


# -- waiting on other processes -------------------------------------------------------------


async def wait_until(
    condition: Callable[[], object], timeout: float = 15.0, interval: float = 0.02
) -> None:
    """
    Check ``condition()`` every ``interval`` seconds of the real reactor until it is
    true; fail with AssertionError once the intervals waited add up to ``timeout``. For
    conditions of other processes (a child gone, a port open); in-process tests use a
    ``Clock`` instead. The intervals, not the wall clock, are counted: on a loaded
    machine each one may last longer, so the wait stretches instead of failing early.
    """
    from twisted.internet import reactor
    from twisted.internet.task import deferLater

    waited = 0.0
    while not condition():
        if waited >= timeout:
            raise AssertionError(f"condition still false after {timeout}s")
        await deferLater(reactor, interval, lambda: None)
        waited += interval


# -- files ----------------------------------------------------------------------------------


def write(path: Path, text: str = "x\n") -> str:
    """Write ``text`` to ``path`` (UTF-8), making its directories; return the path as a
    string."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(path)


def write_through(access: FileAccess, path: str, content: str = "x") -> None:
    """Write ``content`` to ``path`` through the client's ``fs/write_text_file`` handler."""
    access.write_text_file(schema.WriteTextFileRequest(session_id="s", path=path, content=content))


# -- connections ----------------------------------------------------------------------------


@overload
def connected(proto: IProtocol) -> StringTransport: ...


@overload
def connected(proto: IProtocol, transport: _Transport) -> _Transport: ...


def connected(proto: IProtocol, transport: ITransport | None = None) -> ITransport:
    """Connect ``proto`` to ``transport`` (a fresh ``StringTransport`` when omitted) and
    return the transport."""
    chosen = transport if transport is not None else StringTransport()
    proto.makeConnection(chosen)
    return chosen


def refused_port(add_cleanup: Callable[[Callable[[], None]], object]) -> int:
    """
    A loopback TCP port that refuses connections until the test's cleanup: bound but never
    listened on, so nothing else (another xdist worker included) can take it meanwhile.
    ``add_cleanup`` is ``TestCase.addCleanup`` or ``request.addfinalizer``.
    """
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    add_cleanup(sock.close)
    port: int = sock.getsockname()[1]
    return port


def free_port() -> int:
    """
    A loopback TCP port that was free a moment ago (bound to port 0, then released). Racy:
    another process may take it before the caller binds it. Only for a server that cannot
    bind port 0 and say which port it got (e.g. ``mcp-server-everything``'s ``PORT``);
    otherwise bind port 0 and read the port back, or use :func:`refused_port`.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def child_env(**extra: str) -> dict[str, str]:
    """Our environment with the checkout first on ``PYTHONPATH`` (a fixture run as a
    child imports acpkit and ``tests``), plus ``extra``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


# -- the SDK interop scenario ---------------------------------------------------------------


class InteropClient(Client):
    """
    The client of the interop scenario with the official SDKs' agents: allows every
    permission, serves fs from disk, and records the agent's chunks; ``waiting`` fires
    when the agent says ``waiting`` (the turn that is then cancelled).
    """

    def __init__(self) -> None:
        self.chunks: list[str] = []
        self.permissions: list[str] = []
        self.waiting: Deferred[None] = Deferred()

    def session_update(self, params: schema.SessionNotification) -> None:
        update = params.update
        if isinstance(update, schema.AgentMessageChunk) and isinstance(
            update.content, schema.TextContentBlock
        ):
            self.chunks.append(update.content.text)
            if update.content.text == "waiting" and not self.waiting.called:
                self.waiting.callback(None)

    def request_permission(
        self, params: schema.RequestPermissionRequest
    ) -> schema.RequestPermissionResponse:
        self.permissions.append(params.tool_call.title or "")
        return schema.RequestPermissionResponse(
            outcome=schema.SelectedPermissionOutcome(option_id="allow")
        )

    def read_text_file(self, params: schema.ReadTextFileRequest) -> schema.ReadTextFileResponse:
        return schema.ReadTextFileResponse(content=Path(params.path).read_text())

    def write_text_file(self, params: schema.WriteTextFileRequest) -> schema.WriteTextFileResponse:
        Path(params.path).write_text(params.content)
        return schema.WriteTextFileResponse()


class PortReporter(ProcessProtocol):
    """A child server that prints ``PORT <n>`` once it listens (on port 0): ``port`` fires
    with n (or fails with the child's stderr if it exits first); ``ended`` fires when it
    has exited."""

    def __init__(self) -> None:
        self.port: Deferred[int] = Deferred()
        self.ended: Deferred[None] = Deferred()
        self.out = b""
        self.err = b""

    def outReceived(self, data: bytes) -> None:
        self.out += data
        for line in self.out.split(b"\n")[:-1]:
            if line.startswith(b"PORT ") and not self.port.called:
                self.port.callback(int(line.split()[1]))

    def errReceived(self, data: bytes) -> None:
        self.err += data

    def processEnded(self, reason: Failure) -> None:
        if not self.port.called:
            self.port.errback(RuntimeError(f"the server exited: {self.err.decode()[-2000:]}"))
        self.ended.callback(None)


async def start_port_server(
    add_cleanup: Callable[[Callable[[], Deferred[None]]], object],
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
) -> tuple[int, IProcessTransport, PortReporter]:
    """
    Run ``argv`` (a server that binds port 0 and prints ``PORT <n>``) with ``env``
    (default :func:`child_env`), killed at the test's cleanup (``add_cleanup``); its port,
    its process transport and its :class:`PortReporter`.
    """
    from twisted.internet import reactor

    reporter = PortReporter()
    process: IProcessTransport = reactor.spawnProcess(
        reporter, argv[0], list(argv), env=dict(env) if env is not None else child_env()
    )

    def stop() -> Deferred[None]:
        if not reporter.ended.called:
            process.signalProcess("KILL")
        return reporter.ended

    add_cleanup(stop)
    return await reporter.port, process, reporter


# -- agents spawned in memory ---------------------------------------------------------------


class MemoryProcess(StringTransport):
    """
    The process transport :class:`MemoryAgentReactor` gives a spawned "agent": what the
    client writes to its stdin reaches the agent's connection, what the agent writes
    comes back as the child's stdout. Closing stdin, or any signal, ends the process
    (exit status 0) at the next delivery. No pid: nothing outside the test is ever signalled.
    """

    pid = None

    def __init__(self, protocol: IProcessProtocol, agent: AgentConnection | None) -> None:
        super().__init__()
        self.protocol = protocol
        #: The in-memory agent's connection (None: an agent that never writes a byte).
        self.agent = agent
        #: What the agent wrote, not yet delivered.
        self.agent_output = StringTransport()
        #: The signals sent to the process.
        self.signals: list[str] = []
        self.ending = False
        self.ended = False
        if agent is not None:
            agent.protocol.makeConnection(self.agent_output)

    def closeStdin(self) -> None:
        self.loseConnection()

    def loseConnection(self) -> None:
        super().loseConnection()
        self.ending = True

    def signalProcess(self, signalID: Any) -> None:
        self.signals.append(str(signalID))
        self.ending = True

    def pump(self) -> bool:
        """Deliver what each side wrote, and the end; whether anything moved."""
        if self.ended:
            return False
        moved = False
        to_agent = self.value()
        if to_agent:
            self.clear()
            if self.agent is not None:
                self.agent.protocol.dataReceived(to_agent)
            moved = True
        from_agent = self.agent_output.value()
        if from_agent:
            self.agent_output.clear()
            self.protocol.childDataReceived(1, from_agent)
            moved = True
        if self.ending and not moved:
            self.ended = True
            done = Failure(ProcessDone(0))
            if self.agent is not None:
                self.agent.protocol.connectionLost(done)
            for fd in (0, 1, 2):
                self.protocol.childConnectionLost(fd)
            self.protocol.processExited(done)
            self.protocol.processEnded(done)
            moved = True
        return moved


@implementer(IReactorProcess)
class MemoryAgentReactor(Clock):
    """
    A ``Clock`` that spawns in-memory agents: ``spawnProcess`` connects the process
    protocol to ``make_agent(connection)`` (or, with ``make_agent=None``, to an agent that
    never answers). Bytes move on :meth:`deliver` and around each :meth:`advance`.
    Also has what ``acpkit-client ask`` asks of its reactor (``callWhenRunning``,
    ``callFromThread``).
    """

    def __init__(self, make_agent: Callable[[AgentConnection], IAgent] | None = None) -> None:
        super().__init__()
        self.make_agent = make_agent
        #: Every process spawned, in order.
        self.processes: list[MemoryProcess] = []
        #: What was given to ``spawnProcess`` (executable, args, env, path), in order.
        self.spawned: list[dict[str, Any]] = []

    def spawnProcess(
        self,
        processProtocol: IProcessProtocol,
        executable: bytes | str,
        args: Sequence[bytes | str] = (),
        env: Mapping[AnyStr, AnyStr] | None = None,
        path: bytes | str | None = None,
        uid: int | None = None,
        gid: int | None = None,
        usePTY: bool = False,
        childFDs: Mapping[int, int | str] | None = None,
    ) -> Any:  # a MemoryProcess: enough of an IProcessTransport for acpkit's spawn_agent
        self.spawned.append(
            {"executable": executable, "args": list(args), "env": env, "path": path}
        )
        agent = None
        if self.make_agent is not None:
            agent = AgentConnection(
                self.make_agent, protocol=JSONRPCProtocol(clock=self, name="client")
            )
        process = MemoryProcess(processProtocol, agent)
        self.processes.append(process)
        processProtocol.makeConnection(process)  # type: ignore[arg-type]
        return process

    def callWhenRunning(self, f: Callable[..., object], *args: Any, **kwargs: Any) -> None:
        """The reactor is taken as running already: ``f`` is called at the next delivery."""
        self.callLater(0, f, *args, **kwargs)

    def callFromThread(self, f: Callable[..., object], *args: Any, **kwargs: Any) -> None:
        self.callLater(0, f, *args, **kwargs)

    def deliver(self) -> None:
        """Run what is due now and move every process's bytes, until nothing moves."""
        for _ in range(100_000):
            super().advance(0)
            if not any([process.pump() for process in self.processes]):
                return
        raise AssertionError("the in-memory processes are still talking after 100,000 pumps")

    def advance(self, amount: float) -> None:
        """Deliver, move the clock ``amount`` seconds forward, deliver again."""
        self.deliver()
        super().advance(amount)
        self.deliver()


def cancel_autobahn_timers() -> None:
    """
    Cancel the calls Autobahn left on txaio's batched timer (its ping and close-handshake
    timeouts, batched per bucket): once a WebSocket's socket is gone a bucket call can stay
    scheduled for up to 20 s and finds nothing to do when it fires, but trial would count
    it as a dirty reactor. Only those calls: anything else a test leaves is its own fault.
    """
    from twisted.internet import reactor

    for call in reactor.getDelayedCalls():
        func = getattr(call, "func", None)
        if "_BatchedTimer" in getattr(func, "__qualname__", "") and call.active():
            call.cancel()
