"""
One call to run an ACP program: :func:`run_agent` serves an agent on stdin/stdout,
:func:`run_client` starts an agent and runs a client's ``main`` against it.

Both choose and install the reactor (``reactor="asyncio"`` for asyncio libraries in
handlers, see :mod:`acpkit.jsonrpc.asyncio_bridge`), run it until the work is done, and exit
the process with a status that says how it ended:

.. list-table::
   :header-rows: 1
   :widths: 5 3

   * - what happened
     - exit status
   * - agent: the client closed our stdin (EOF) and every request was answered, or the
       agent called ``conn.close()``
     - 0
   * - agent: the connection broke (stdout gone, a signal stopped the reactor)
     - 1, the reason on stderr
   * - client: ``main`` returned
     - 0
   * - client: ``main`` raised ``SystemExit(n)``
     - ``n``
   * - client: ``main`` failed (the agent exited, an error answer, a missing agent
       command...)
     - 1, one line on stderr (a traceback for unexpected errors)
   * - client: a signal stopped the reactor (the agent is stopped first)
     - 1

Warnings and errors of the Twisted log go to stderr (``log_level``); stdout is the
protocol's own.  Under ``twistd`` the reactor belongs to twistd: an application plugin
builds its service with :class:`~acpkit.connection.AgentConnection` and
:func:`~acpkit.io.serve_stdio` instead (``acpkit_agent/tap.py`` does).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import IO, Any, NoReturn

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.error import ReactorNotRunning
from twisted.logger import (
    FilteringLogObserver,
    LogLevel,
    LogLevelFilterPredicate,
    globalLogBeginner,
    textFileLogObserver,
)
from twisted.python.failure import Failure

from acpkit.connection import AgentConnection, AgentSource, ClientConnection, ClientSource
from acpkit.errors import AgentExited, InternalError, RPCError
from acpkit.framing import LineTracer
from acpkit.jsonrpc.asyncio_bridge import coroutine_deferred
from acpkit.stdlib_log import bridge_stdlib_logging

__all__ = ["ReactorChoiceError", "run_agent", "run_client", "select_reactor", "stderr_excerpt"]


class ReactorChoiceError(RuntimeError):
    """The reactor asked for cannot be installed (another one is, or no such name)."""


def select_reactor(choice: str | Any | None = None) -> Any:
    """
    The reactor to run: ``None`` the installed one (Twisted's default if none is);
    a name (``"asyncio"``, ``"epoll"``, ``"select"``... as ``twistd --reactor`` takes)
    installs that reactor, or returns it when it is already installed; a reactor
    object is returned as it is.  Raises :class:`ReactorChoiceError` when another
    reactor is already installed (choose before anything imports
    ``twisted.internet.reactor``) or the name is unknown.
    """
    if choice is not None and not isinstance(choice, str):
        return choice
    if choice is not None:
        _install(choice)
    from twisted.internet import reactor

    return reactor


def _install(name: str) -> None:
    installed = sys.modules.get("twisted.internet.reactor")
    if name == "asyncio":
        module = "twisted.internet.asyncioreactor"
    else:
        from twisted.application.reactors import getReactorTypes

        known = {r.shortName: str(getattr(r, "moduleName", "")) for r in getReactorTypes()}
        if name not in known:
            raise ReactorChoiceError(
                f"no reactor named {name!r} (known: {', '.join(sorted(known))})"
            )
        module = known[name]
    if installed is not None:
        if type(installed).__module__ == module:
            return
        raise ReactorChoiceError(
            f"cannot install the {name} reactor: {type(installed).__module__}."
            f"{type(installed).__name__} is already installed (choose the reactor before "
            "anything imports twisted.internet.reactor)"
        )
    if name == "asyncio":
        from twisted.internet import asyncioreactor

        # A loop of our own: asyncio.get_event_loop() without one is deprecated.
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        asyncioreactor.install(loop)
    else:
        from twisted.application.reactors import installReactor

        installReactor(name)


def _log_to(stream: IO[str] | None, level: LogLevel) -> None:
    """Send the Twisted log, from ``level`` up, to ``stream`` (never stdout's ACP), and
    standard-library ``logging`` records into it (:mod:`acpkit.stdlib_log`)."""
    if stream is None:
        return
    # Libraries log through the standard library: into the same log, at the same level.
    bridge_stdlib_logging(level)
    observer = FilteringLogObserver(
        textFileLogObserver(stream), [LogLevelFilterPredicate(defaultLogLevel=level)]
    )
    globalLogBeginner.beginLoggingTo([observer], redirectStandardIO=False)


def _run_until(reactor: Any, start: Callable[[], Deferred[int]], stopped: str) -> int:
    """
    Run ``reactor`` until the Deferred ``start()`` returns fires with an exit status;
    stop it then (once), and return the status.  When the reactor stops first (a signal,
    a shutdown trigger), the status is 1 and ``stopped`` is written on stderr, whatever
    the work reports while it is torn down.
    """
    status: list[int] = []

    def finish(code: int) -> None:
        if status:  # the reactor was already stopping: its status and line stand
            return
        status.append(code)
        try:
            reactor.stop()
        except ReactorNotRunning:  # already stopping (a signal, a shutdown trigger)
            pass

    def begin() -> None:
        d = maybeDeferred(start)
        d.addErrback(_report, "acpkit")
        d.addCallback(finish)

    def stopping() -> None:
        # The reactor stops before the work is done (a signal, a shutdown trigger): that
        # is status 1 whatever the connection reports while it is torn down (its end can
        # look clean then: stdin closed by the shutdown, not by the peer).
        if not status:
            status.append(1)
            sys.stderr.write(f"{stopped}\n")
            sys.stderr.flush()

    reactor.callWhenRunning(begin)
    reactor.addSystemEventTrigger("before", "shutdown", stopping)
    reactor.run()
    return status[0] if status else 1


def _report(failure: Failure, who: str) -> int:
    """One line on stderr for an expected failure (a traceback otherwise); its status."""
    if isinstance(failure.value, SystemExit):
        code = failure.value.code
        if code is None or isinstance(code, int):
            return code or 0
        sys.stderr.write(f"{code}\n")
        return 1
    if failure.check(OSError, AgentExited, RPCError, ConnectionError) or type(
        failure.value
    ).__module__.startswith(("acpkit.", "twisted.internet.error")):
        data = getattr(failure.value, "data", None) if failure.check(RPCError) else None
        detail = f"; data: {json.dumps(data, default=repr)[:2000]}" if data is not None else ""
        sys.stderr.write(f"{who}: {failure.value}{detail}\n")
    else:
        sys.stderr.write(f"{who}: unexpected error:\n{failure.getTraceback()}")
    sys.stderr.flush()
    return 1


#: How many of the agent's last stderr lines run_client shows when a request fails -32603
#: (more when they begin inside a log entry: see `stderr_excerpt`).
STDERR_LINES_SHOWN = 20


def stderr_excerpt(tail: str, shown: int = STDERR_LINES_SHOWN) -> list[str]:
    """
    The last ``shown`` lines of ``tail`` (an agent's stderr), reaching back to the first
    line of the log entry they begin in: a traceback's indented lines go with the line
    that says what failed (``agent: handler for session/prompt ... raised ValueError``),
    however deep the traceback.
    """
    lines = tail.rstrip("\n").splitlines()
    start = max(0, len(lines) - shown)
    while start > 0 and lines[start][:1] in ("\t", " "):
        start -= 1
    return lines[start:]


def _show_stderr_tail(tail: str, agent_name: str) -> None:
    """Write the agent's last stderr lines (an Internal error's reason, usually)."""
    lines = stderr_excerpt(tail)
    if not lines:
        sys.stderr.write(f"{agent_name} answered Internal error and wrote nothing on stderr\n")
    else:
        sys.stderr.write(f"{agent_name} answered Internal error; its last stderr lines:\n")
        sys.stderr.writelines(f"  {line}\n" for line in lines)
    sys.stderr.flush()


def run_agent(
    agent: AgentSource,
    *,
    reactor: str | Any | None = None,
    tracer: LineTracer | None = None,
    strict: bool = False,
    name: str = "client",
    stdin: int = 0,
    stdout: int = 1,
    log_to: IO[str] | None = sys.stderr,
    log_level: LogLevel = LogLevel.warn,
    debug_errors: bool | None = None,
) -> NoReturn:
    """
    Serve ``agent`` (an :class:`~acpkit.interfaces.IAgent`, or a callable given the
    :class:`~acpkit.connection.AgentConnection` that returns one) on stdin/stdout until
    the connection ends, then exit: 0 when the client closed stdin and every request
    was answered (or the agent called ``conn.close()``), 1 when it broke.

    ``reactor``: see :func:`select_reactor` (``"asyncio"`` to await asyncio libraries
    in handlers).  ``tracer``: record every message (else ``ACPKIT_TRACE`` decides).
    ``strict``: refuse unknown fields in params.  ``name``: the peer's name in logs and
    traces.  ``log_to``/``log_level``: where the Twisted log goes (``None``: nowhere), from
    which level up; standard-library ``logging`` records join it at the same level.
    ``debug_errors``: a development switch: a handler's unexpected exception goes to the
    client with its type and message in the ``-32603`` error's ``data`` (None: the
    ``ACPKIT_DEBUG_ERRORS`` environment variable decides; off by default, as exception
    text may hold secrets).
    """
    chosen = select_reactor(reactor)
    _log_to(log_to, log_level)

    def start() -> Deferred[int]:
        from acpkit.io import serve_stdio

        conn = AgentConnection(agent, strict=strict, name=name, tracer=tracer)
        conn.protocol.error_details = debug_errors
        serve_stdio(conn.protocol, chosen, name=name, stdin=stdin, stdout=stdout)
        d = conn.closed
        d.addCallback(lambda _: 0)
        d.addErrback(lambda f: _report(f, "connection lost"))
        return d  # type: ignore[return-value]

    sys.exit(_run_until(chosen, start, "connection lost: stopped by a signal or a shutdown"))


def run_client(
    main: Callable[[ClientConnection], Awaitable[object] | object],
    command: Sequence[str],
    *,
    client: ClientSource | None = None,
    reactor: str | Any | None = None,
    tracer: LineTracer | None = None,
    strict: bool = False,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    name: str | None = None,
    stop_grace: float = 2.0,
    log_to: IO[str] | None = sys.stderr,
    log_level: LogLevel = LogLevel.warn,
) -> NoReturn:
    """
    Start the agent ``command`` (``[program, *args]``, no shell), connect ``client``
    (an :class:`~acpkit.interfaces.IClient`, a callable given the connection that
    returns one, or ``None``: the base :class:`~acpkit.connection.Client`, which
    ignores updates and rejects permission requests) and run ``main(conn)`` (an
    ``async def`` usually: it calls ``conn.initialize()`` and what follows).  When
    ``main`` ends, the agent's stdin is closed and the agent is given ``stop_grace``
    seconds to exit before its process group is ended; then the process exits: 0 when
    ``main`` returned, ``n`` for ``SystemExit(n)``, 1 (and one line on stderr) when it
    failed or the agent could not start.  Stopped by a signal (SIGINT, SIGTERM), it
    stops the agent the same way, then exits 1.

    When a request fails with ``-32603`` (Internal error) and ``main`` lets it through,
    the agent's last stderr lines (its traceback, usually) are written on stderr before
    the error line, which shows the error's ``data`` too.

    ``reactor``, ``tracer``, ``strict``, ``log_to``, ``log_level``: as for
    :func:`run_agent`.  ``env`` (added over ours), ``cwd`` and ``name`` go to
    :func:`~acpkit.io.spawn_agent`.
    """
    if not command:
        raise ValueError("run_client needs the agent's command")
    chosen = select_reactor(reactor)
    _log_to(log_to, log_level)

    async def session() -> int:
        from acpkit.connection import Client
        from acpkit.io import spawn_agent

        agent_name = name if name is not None else os.path.basename(command[0])
        conn = ClientConnection(
            client if client is not None else Client(),
            strict=strict,
            name=agent_name,
            tracer=tracer,
        )
        agent = spawn_agent(
            chosen, conn.protocol, command[0], command[1:], env=env, cwd=cwd, name=agent_name
        )
        # Stopped by a signal (the reactor shuts down): the agent is stopped first.
        chosen.addSystemEventTrigger("before", "shutdown", agent.stop, stop_grace)
        internal_error = False
        try:
            result = main(conn)
            if isinstance(result, Awaitable):
                await result
        except RPCError as e:
            internal_error = e.code == InternalError.CODE
            raise
        finally:
            await agent.stop(stop_grace)
            if internal_error:
                # The agent failed: its reason is on its stderr (all read once it has
                # ended), which the log shows at info, below the default level.
                _show_stderr_tail(agent.stderr_tail(), agent_name)
        return 0

    def start() -> Deferred[int]:
        d = coroutine_deferred(session())
        d.addErrback(_report, os.path.basename(sys.argv[0]) or "client")
        return d

    who = os.path.basename(sys.argv[0]) or "client"
    sys.exit(_run_until(chosen, start, f"{who}: stopped by a signal; the agent was stopped"))
