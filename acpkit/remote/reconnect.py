"""
Clients that carry on: a remote connection that, once lost, is made again, and whose
sessions are loaded again (:class:`ResumableConnection`).

Behind a load balancer, the agent instance a connection reached may die, be drained for
a restart, or the balancer may drop the connection; the sessions live on (their files
are shared), so another instance can serve them.  The RFD's resume flow is a new
connection (``initialize``) and a ``session/load`` of each session.

==========================================  =============================================
situation                                   what happens
==========================================  =============================================
the connection ends other than by           :meth:`IReconnectObserver.connection_lost`;
:meth:`ResumableConnection.close` (the      the resume starts at once (see below)
agent died or drained, the balancer or
the network dropped it)
a ``prompt()`` in flight then, or whose     fails at once with :class:`TurnInterrupted`
POST failed on the way (a balancer's        (the suspect connection is closed and
``502``/``503``/``504``, the network)       resumed)
                                            (and ``turn_interrupted`` is told): never
                                            reported as answered, never lost silently;
                                            whether the agent saved it is unknown (the
                                            load's replay shows what was saved)
a request that never reached the agent      sent again once resumed (it cannot run
(:class:`~acpkit.errors.NotDelivered`: a    twice): a drained instance ending the
POST answered ``404``)                      connection just as the next prompt goes
                                            out interrupts nothing
an attempt                                  ``connect()``, ``initialize`` with the first
                                            one's parameters, then ``session/load`` of
                                            every session opened through this object, in
                                            order; each step within ``step_timeout``
an attempt fails: no connection, an         the new connection is closed; the next
``initialize`` refused or lost, a load      attempt follows after a delay growing by
refused ``-32002`` with ``reason:           ``factor`` from ``first_delay`` up to
"attachedElsewhere"`` (another instance     ``max_delay``, shortened at random by up to
still holds the session: its connection     ``jitter`` (clients lost together do not
is ending), a step not answered in time     come back together); ``retrying`` is told
a load refused for another reason (the      that session is dropped (``session_lost``);
session is gone)                            the others are resumed
every session loaded                        ``resumed``; calls made meanwhile go on
``attempts`` attempts failed, or the        ``gave_up``; waiting and later calls fail
agent offers no ``session/load``            with :class:`ReconnectFailed`
calls while the resume runs                 wait for it (``prompt()``, ``new_session()``,
                                            ``load_session()``, :meth:`ready`)
==========================================  =============================================

While a resume's ``session/load`` runs, :attr:`ResumableConnection.replaying` is true:
the ``session_update`` calls the client gets then are the history it already has (a
client showing a conversation skips them).  The first connection (:meth:`open`) is made
with the same retries: a balancer may answer ``503`` while an instance starts.
:func:`acpkit.remote.connect.connect_resumable` makes one for a URL.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import attrs
from twisted.internet.defer import CancelledError, Deferred, TimeoutError
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import Interface, implementer

from acpkit import schema
from acpkit.connection import ClientConnection, ProtocolVersionError
from acpkit.errors import (
    HTTP_TRANSPORT_ERROR,
    ConnectionLost,
    NotDelivered,
    ResourceNotFound,
    RPCError,
)

__all__ = [
    "IReconnectObserver",
    "ReconnectFailed",
    "ReconnectObserver",
    "ResumableConnection",
    "RetryPolicy",
    "TurnInterrupted",
    "attached_elsewhere",
    "gateway_failure",
]

_log = Logger(namespace="acpkit.remote.reconnect")

_T = TypeVar("_T")


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """How many attempts a resume makes, and the delays between them (module docstring)."""

    #: Attempts in all (the first one at once).
    attempts: int = 8
    #: Seconds before the second attempt.
    first_delay: float = 0.25
    #: Each delay is the previous one times this.
    factor: float = 2.0
    #: No delay is longer.
    max_delay: float = 10.0
    #: Each delay is shortened by up to this fraction of itself, at random.
    jitter: float = 0.5
    #: Seconds each step (connect, initialize, one load) may take.
    step_timeout: float = 30.0

    def __attrs_post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be a positive integer")
        for name in ("first_delay", "max_delay", "step_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be a positive number of seconds")
        if not self.factor >= 1:
            raise ValueError("factor must be 1 or more")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be from 0 to less than 1")

    def delay(self, attempt: int, draw: float = 0.0) -> float:
        """
        Seconds to wait before attempt ``attempt`` (2 or more; the first is at once),
        ``draw`` being a random number from 0 to 1.
        """
        if attempt <= 1:
            return 0.0
        base = min(self.max_delay, self.first_delay * self.factor ** (attempt - 2))
        return base * (1 - self.jitter * draw)

    def longest_wait(self) -> float:
        """The seconds all the delays add up to, without jitter (the bound of a resume)."""
        return sum(self.delay(n) for n in range(2, self.attempts + 1))


class TurnInterrupted(Exception):
    """
    The connection was lost while this turn ran: it was not answered, and whether the
    agent saved it is unknown.  ``str()`` says why.
    """

    def __init__(self, session_id: str, reason: str) -> None:
        super().__init__(f"the turn of session {session_id} was interrupted: {reason}")
        self.session_id = session_id
        self.reason = reason


class ReconnectFailed(Exception):
    """The connection could not be made again (or was closed); ``str()`` says why."""


def gateway_failure(error: BaseException) -> bool:
    """
    True for a request whose POST failed on the way (no answer from the agent: the
    network, or a balancer's ``502``, ``503``, ``504``): whether the agent got it is
    unknown, and the connection is suspect.
    """
    if not (isinstance(error, RPCError) and error.code == HTTP_TRANSPORT_ERROR):
        return False
    status = error.data.get("status") if isinstance(error.data, dict) else None
    return status is None or status in (502, 503, 504)


def attached_elsewhere(error: BaseException) -> bool:
    """
    True for a ``session/load`` refused because another agent process still holds the
    session (``-32002`` with ``data.reason`` ``"attachedElsewhere"``): worth retrying.
    """
    return (
        isinstance(error, RPCError)
        and error.code == ResourceNotFound.CODE
        and isinstance(error.data, dict)
        and error.data.get("reason") == "attachedElsewhere"
    )


class IReconnectObserver(Interface):
    """Told what a :class:`ResumableConnection` does, to tell the user."""

    def connection_lost(reason: str) -> None:
        """The connection ended; a resume starts (unless the agent cannot load sessions)."""

    def retrying(attempt: int, attempts: int, delay: float, reason: str) -> None:
        """Attempt ``attempt`` of ``attempts`` follows in ``delay`` s (``reason``: why the
        previous one failed, or why the connection was lost)."""

    def resumed(session_ids: list[str]) -> None:
        """Connected again; these sessions were loaded."""

    def session_lost(session_id: str, reason: str) -> None:
        """This session could not be loaded again (it is gone): dropped."""

    def turn_interrupted(session_id: str, reason: str) -> None:
        """A turn of this session was running when the connection was lost."""

    def gave_up(reason: str) -> None:
        """No more attempts: the connection is not coming back."""


@implementer(IReconnectObserver)
class ReconnectObserver:
    """An :class:`IReconnectObserver` that logs each event (subclass to tell the user)."""

    def connection_lost(self, reason: str) -> None:
        _log.info("connection lost: {reason}", reason=reason)

    def retrying(self, attempt: int, attempts: int, delay: float, reason: str) -> None:
        _log.info(
            "reconnecting: attempt {attempt} of {attempts} in {delay:.2f} s",
            attempt=attempt,
            attempts=attempts,
            delay=delay,
        )

    def resumed(self, session_ids: list[str]) -> None:
        _log.info("reconnected; sessions loaded: {ids}", ids=", ".join(session_ids) or "none")

    def session_lost(self, session_id: str, reason: str) -> None:
        _log.warn(
            "session {sid} could not be loaded again: {reason}", sid=session_id, reason=reason
        )

    def turn_interrupted(self, session_id: str, reason: str) -> None:
        _log.warn(
            "the turn of session {sid} was interrupted: {reason}", sid=session_id, reason=reason
        )

    def gave_up(self, reason: str) -> None:
        _log.error("gave up reconnecting: {reason}", reason=reason)


@attrs.frozen
class _Session:
    """What a ``session/load`` of one session needs again."""

    cwd: str
    mcp_servers: list[Any]


class _Retry(Exception):
    """This attempt failed; another may succeed."""


class _Fatal(Exception):
    """No attempt can succeed."""


def _reason(error: BaseException | Failure | None) -> str:
    """One line saying why, for the observer."""
    if isinstance(error, Failure):
        error = error.value
    if error is None:
        return "the agent closed the connection"
    if isinstance(error, RPCError):
        return f"{error.message} (code {error.code})"
    if isinstance(error, TimeoutError):
        return "no answer in time"
    text = " ".join(str(error).split())
    return text or type(error).__name__


class ResumableConnection:
    """
    A remote connection that comes back when lost (see the module docstring).

    ``connect`` makes a new :class:`~acpkit.connection.ClientConnection` (not
    initialized), e.g. ``lambda: connect_remote(reactor, url, client, headers=...)``;
    ``clock`` times the delays and steps; ``random`` draws the jitter.
    """

    def __init__(
        self,
        connect: Callable[[], Deferred[ClientConnection]],
        *,
        clock: IReactorTime,
        policy: RetryPolicy | None = None,
        observer: IReconnectObserver | None = None,
        random: Callable[[], float] = random.random,
    ) -> None:
        self._connect = connect
        self.clock = clock
        self.policy = policy if policy is not None else RetryPolicy()
        self.observer: IReconnectObserver = (
            observer if observer is not None else ReconnectObserver()
        )
        self._random = random
        #: The connection in use (None while connecting or resuming, and once closed).
        self.connection: ClientConnection | None = None
        #: The first ``initialize`` answer (None before).
        self.initialize_response: schema.InitializeResponse | None = None
        #: True while a resume's ``session/load`` replays a session's history.
        self.replaying = False
        #: How many times the connection was made again.
        self.resumes = 0
        self._initialize: dict[str, Any] = {}
        self._sessions: dict[str, _Session] = {}
        #: True while connecting or resuming.
        self._resuming = False
        self._waiters: list[Deferred[None]] = []
        self._failed: str | None = None
        self._closing = False
        self._sleeping: Deferred[None] | None = None
        #: Which resume is the current one (a resume that ends leaves a newer one be).
        self._generation = 0

    # -- what the caller uses -------------------------------------------------------------

    @property
    def session_ids(self) -> list[str]:
        """The sessions this object resumes, in the order they were opened."""
        return list(self._sessions)

    async def open(
        self,
        params: schema.InitializeRequest | None = None,
        *,
        client_capabilities: schema.ClientCapabilities | None = None,
        client_info: schema.Implementation | None = None,
    ) -> schema.InitializeResponse:
        """Connect and ``initialize`` (with the policy's retries); the agent's answer."""
        if self._resuming or self.connection is not None or self._failed is not None:
            raise RuntimeError("open() was called already")
        self._initialize = {
            "params": params,
            "client_capabilities": client_capabilities,
            "client_info": client_info,
        }
        self._start(None)
        await self.ready()
        assert self.initialize_response is not None
        return self.initialize_response

    def adopt(
        self,
        connection: ClientConnection,
        initialize_response: schema.InitializeResponse,
        params: schema.InitializeRequest | None = None,
        *,
        client_capabilities: schema.ClientCapabilities | None = None,
        client_info: schema.Implementation | None = None,
    ) -> None:
        """
        Take over a connection other code made and initialized (with its own time
        limits, say) instead of :meth:`open`: from now on it is watched and made again
        like one :meth:`open` made, initialized with the same arguments.
        """
        if self._resuming or self.connection is not None or self._failed is not None:
            raise RuntimeError("this resumable connection is open already")
        self._initialize = {
            "params": params,
            "client_capabilities": client_capabilities,
            "client_info": client_info,
        }
        self.initialize_response = initialize_response
        self.connection = connection
        self._watch(connection)

    def track_session(self, session_id: str, cwd: str, mcp_servers: Sequence[Any] = ()) -> None:
        """Resume this session too (opened by other code on the connection)."""
        self._sessions[session_id] = _Session(cwd, list(mcp_servers))

    async def ready(self) -> ClientConnection:
        """The connection, once there is one (waits for a resume); :class:`ReconnectFailed`."""
        while True:
            if self._failed is not None:
                raise ReconnectFailed(self._failed)
            connection = self.connection
            if connection is not None:
                if connection.closed_reason is None:
                    return connection
                self._ended(connection, connection.closed_reason)
                continue
            if not self._resuming:
                raise ReconnectFailed("not connected: call open() first")
            waiter: Deferred[None] = Deferred()
            self._waiters.append(waiter)
            await waiter

    async def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        """``session/new``; the session is resumed after a loss."""
        response = await self._delivered(lambda connection: connection.new_session(params))
        self._sessions[response.session_id] = _Session(params.cwd, list(params.mcp_servers or []))
        return response

    async def load_session(self, params: schema.LoadSessionRequest) -> schema.LoadSessionResponse:
        """``session/load``; the session is resumed after a loss."""
        response = await self._delivered(lambda connection: connection.load_session(params))
        self._sessions[params.session_id] = _Session(params.cwd, list(params.mcp_servers or []))
        return response

    async def prompt(
        self, params: schema.PromptRequest, *, timeout: float | None = None
    ) -> schema.PromptResponse:
        """
        ``session/prompt``; :class:`TurnInterrupted` when the connection is lost while
        the turn may have run.  A prompt that never reached the agent
        (:class:`~acpkit.errors.NotDelivered`) is sent again once resumed.
        """
        holder: list[ClientConnection] = []

        def send(connection: ClientConnection) -> Deferred[schema.PromptResponse]:
            holder[:] = [connection]
            return connection.prompt(params, timeout=timeout)

        try:
            return await self._delivered(send)
        except (ConnectionLost, RPCError) as error:
            if self._closing or isinstance(error, NotDelivered):
                raise
            if isinstance(error, RPCError) and not gateway_failure(error):
                raise  # the agent's own answer
            # The engine fails pending requests before it reports the end (and a
            # balancer's 502 comes before the stream drops): the next call must not go
            # to this connection.
            self._ended(holder[0], error)
            reason = _reason(error)
            self._tell("turn_interrupted", params.session_id, reason)
            raise TurnInterrupted(params.session_id, reason) from None

    async def _delivered(self, send: Callable[[ClientConnection], Deferred[_T]]) -> _T:
        """
        ``send`` on the connection in use; when the request was not delivered (the
        connection was gone), again on the next one, up to the policy's attempts.
        """
        for _ in range(self.policy.attempts):
            connection = await self.ready()
            try:
                return await send(connection)
            except NotDelivered as error:
                if self._closing:
                    raise
                self._ended(connection, error)
        raise ReconnectFailed(
            f"a request was not delivered on {self.policy.attempts} connections in a row"
        )

    def cancel(self, session_id: str) -> None:
        """``session/cancel`` on the connection in use (nothing while there is none)."""
        if self.connection is not None:
            self.connection.cancel(session_id)

    def close(self) -> Deferred[None]:
        """Close for good: no resume; fires once the connection has ended."""
        self._closing = True
        self._failed = self._failed or "the connection was closed"
        if self._sleeping is not None and not self._sleeping.called:
            self._sleeping.cancel()
        connection, self.connection = self.connection, None
        self._wake()
        if connection is None:
            d: Deferred[None] = Deferred()
            d.callback(None)
            return d
        connection.close()
        return connection.closed.addErrback(lambda _: None)

    # -- the resume ---------------------------------------------------------------------------

    def _tell(self, event: str, *args: Any) -> None:
        try:
            getattr(self.observer, event)(*args)
        except Exception:
            _log.failure("reconnect observer {observer!r} failed", observer=self.observer)

    def _watch(self, connection: ClientConnection) -> None:
        connection.closed.addBoth(
            lambda result: self._ended(connection, result if isinstance(result, Failure) else None)
        )

    def _ended(self, connection: ClientConnection, why: BaseException | Failure | None) -> None:
        """
        ``connection`` is gone or unusable (told once, by whoever notices first): close
        it (should it still be open, its instance then lets the session go) and resume.
        """
        if connection is not self.connection or self._closing:
            return
        self.connection = None
        connection.close()
        reason = _reason(why)
        self._tell("connection_lost", reason)
        if not self._sessions or self._can_load():
            self._start(reason)
        else:
            self._give_up(f"{reason}; the agent offers no session/load to resume with")

    def _can_load(self) -> bool:
        response = self.initialize_response
        caps = response.agent_capabilities if response is not None else None
        return bool(caps is not None and caps.load_session)

    def _start(self, reason: str | None) -> None:
        self._generation += 1
        self._resuming = True
        resume = Deferred.fromCoroutine(self._resume(reason, self._generation))
        resume.addErrback(lambda f: _log.failure("resuming the connection", f))

    async def _resume(self, reason: str | None, generation: int) -> None:
        policy = self.policy
        last = reason or "connecting"
        try:
            for attempt in range(1, policy.attempts + 1):
                delay = policy.delay(attempt, self._random())
                if reason is not None or attempt > 1:
                    self._tell("retrying", attempt, policy.attempts, delay, last)
                if delay:
                    await self._sleep(delay)
                if self._closing:
                    return
                try:
                    connection = await self._attempt()
                except _Retry as error:
                    last = str(error)
                    continue
                except _Fatal as error:
                    self._give_up(str(error))
                    return
                if self._closing:
                    connection.close()
                    return
                self.connection = connection
                self._watch(connection)
                if reason is not None:
                    self.resumes += 1
                    self._tell("resumed", self.session_ids)
                return
            self._give_up(f"{policy.attempts} attempts failed; the last: {last}")
        except CancelledError:
            return  # closed while waiting
        finally:
            if generation == self._generation:
                self._resuming = False
                self._wake()

    async def _sleep(self, seconds: float) -> None:
        sleeping: Deferred[None] = Deferred(lambda d: call.cancel() if call.active() else None)
        call = self.clock.callLater(seconds, lambda: sleeping.callback(None))
        self._sleeping = sleeping
        try:
            await sleeping
        finally:
            self._sleeping = None

    def _step(self, d: Deferred[_T]) -> Deferred[_T]:
        return d.addTimeout(self.policy.step_timeout, self.clock)

    async def _attempt(self) -> ClientConnection:
        """One attempt: connect, initialize, load every session; the new connection."""
        connection: ClientConnection | None = None
        try:
            try:
                connection = await self._step(self._connect())
            except ValueError as error:  # a URL or header that can never work
                raise _Fatal(_reason(error)) from None
            try:
                response = await self._step(connection.initialize(**self._initialize))
            except ProtocolVersionError as error:
                raise _Fatal(_reason(error)) from None
            if self.initialize_response is None:
                self.initialize_response = response
            await self._load_all(connection, response)
            return connection
        except (_Retry, _Fatal):
            if connection is not None:
                connection.close()
            raise
        except Exception as error:
            if connection is not None:
                connection.close()
            raise _Retry(_reason(error)) from None

    async def _load_all(
        self, connection: ClientConnection, response: schema.InitializeResponse
    ) -> None:
        if not self._sessions:
            return
        caps = response.agent_capabilities
        if caps is None or not caps.load_session:
            raise _Fatal("the agent offers no session/load to resume the sessions with")
        for session_id, session in list(self._sessions.items()):
            request = schema.LoadSessionRequest(
                session_id=session_id, cwd=session.cwd, mcp_servers=session.mcp_servers
            )
            self.replaying = True
            try:
                await self._step(connection.load_session(request))
            except RPCError as error:
                if attached_elsewhere(error):
                    raise _Retry(f"session {session_id}: {_reason(error)}") from None
                del self._sessions[session_id]
                self._tell("session_lost", session_id, _reason(error))
            finally:
                self.replaying = False

    def _give_up(self, reason: str) -> None:
        self._failed = reason
        self._tell("gave_up", reason)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.callback(None)
