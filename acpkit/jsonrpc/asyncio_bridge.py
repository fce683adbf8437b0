"""
``async def`` handlers on the asyncio reactor: asyncio awaitables and Deferreds together.

On Twisted's default reactor a coroutine handler runs as
``Deferred.fromCoroutine(coro)``: it may await Deferreds, and nothing of asyncio (no
event loop runs: ``await asyncio.sleep(1)`` raises "no running event loop").

On the asyncio reactor (``twistd --reactor asyncio``, ``asyncioreactor.install()``,
``acpkit.run_agent(..., reactor="asyncio")``) an event loop runs, and
:func:`coroutine_deferred` runs each coroutine as an **asyncio task** instead, so that
asyncio libraries (``asyncio.sleep``, ``httpx``, the ``openai`` SDK, anything needing
``asyncio.current_task()``) work in it.  The coroutine may still await Deferreds in the
same body: the task is driven through a small bridge that turns each Deferred the
coroutine waits on into a future of the loop.

.. list-table::
   :header-rows: 1
   :widths: 3 3 3

   * -
     - default reactor
     - asyncio reactor
   * - a coroutine handler runs as
     - ``Deferred.fromCoroutine``
     - an asyncio task
   * - ``await <Deferred>`` in it
     - yes
     - yes (bridged)
   * - ``await <asyncio awaitable>`` in it
     - no: "no running event loop"
     - yes
   * - a cancelled handler sees, at its ``await``
     - Twisted's ``CancelledError``
     - ``asyncio.CancelledError``
   * - the answer of a cancelled request
     - ``cancelled`` (prompt), else -32800
     - the same
   * - acpkit's Deferreds (``conn.…``) in tasks of your own (``gather``…)
     - (no tasks)
     - awaitable

Cancelling the handler's Deferred (``session/cancel``, ``$/cancel_request``) cancels the
task; the Deferred it was awaiting, if any, is cancelled too, as ``fromCoroutine``
does.  The request is answered once the task has ended, with what it ended with; a
task that ends with ``asyncio.CancelledError`` counts as cancelled (Twisted's
``CancelledError``), so the answer is the one a cancelled request gets today.

"Asyncio mode" means: an asyncio event loop is running in this thread when the handler
is called, which on Twisted is exactly "the reactor is the asyncio reactor".
"""

from __future__ import annotations

import asyncio
import inspect
from abc import get_cache_token
from collections.abc import Awaitable, Coroutine, Generator
from contextvars import copy_context
from types import CoroutineType, GeneratorType
from typing import Any, TypeVar

from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.python.failure import Failure

from acpkit.compat import running_asyncio_loop

__all__ = [
    "as_deferred",
    "coroutine_deferred",
    "is_async",
    "running_loop",
    "settle_now",
    "task_awaitable",
]

T = TypeVar("T")

#: Tasks started here, held until they end (the loop keeps only weak references).
_tasks: set[asyncio.Task[Any]] = set()


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The asyncio event loop running in this thread (the asyncio reactor's), or None."""
    loop: asyncio.AbstractEventLoop | None = running_asyncio_loop()
    return loop


def coroutine_deferred(coro: Coroutine[Any, Any, T]) -> Deferred[T]:
    """
    Run ``coro`` and return a Deferred of its result: as an asyncio task when an asyncio
    loop runs (see the module docstring), else with ``Deferred.fromCoroutine``.
    """
    loop = running_loop()
    if loop is None:
        return Deferred.fromCoroutine(coro)
    task: asyncio.Task[T] = loop.create_task(_Bridge(coro, loop))
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)
    d = Deferred.fromFuture(task)
    d.addErrback(_as_twisted_cancel)
    return d


def as_deferred(value: Any) -> Deferred[Any]:
    """
    What a handler returned, as a Deferred: a Deferred as it is, a coroutine run by
    :func:`coroutine_deferred`, any other awaitable awaited the same way, anything else
    a fired Deferred of that value.
    """
    if isinstance(value, Deferred):
        return value
    if inspect.iscoroutine(value):
        return coroutine_deferred(value)
    if inspect.isawaitable(value):
        return coroutine_deferred(_awaited(value))
    return succeed(value)


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


#: Types whose instances were found not to be awaitable (``is_async``), valid while the
#: ABC cache token is ``_sync_token[0]`` (an ``Awaitable.register`` changes it).
_sync_types: set[type] = set()
_sync_token: list[object] = [get_cache_token()]
#: At most this many types are remembered.
_SYNC_TYPES_KEPT = 1024


def is_async(value: Any) -> bool:
    """
    True when what a handler returned is to be waited on: a Deferred, a coroutine or
    another awaitable (``inspect.isawaitable``).  The answer for a type whose instances
    are not awaitable is remembered (until an ABC registration changes the answer), so
    that a plain value costs a set lookup rather than three ``isinstance`` checks.
    """
    kind = type(value)
    if kind is CoroutineType:
        return True
    if kind in _sync_types and value.__class__ is kind and _sync_token[0] == get_cache_token():
        return False
    if isinstance(value, Deferred) or inspect.isawaitable(value):
        return True
    if kind is not GeneratorType and value.__class__ is kind:
        token = get_cache_token()
        if _sync_token[0] != token:
            _sync_types.clear()
            _sync_token[0] = token
        if len(_sync_types) < _SYNC_TYPES_KEPT:
            _sync_types.add(kind)
    return False


def settle_now(value: Any) -> tuple[bool, Any]:
    """
    What a handler returned (``is_async(value)`` is true), run as far as it goes now:
    ``(True, result)`` for a coroutine that returned without waiting on anything, else
    ``(False, deferred)``, the Deferred ``as_deferred`` would give.

    On the default reactor ``Deferred.fromCoroutine`` runs a coroutine at once up to its
    first wait; this runs that first step itself, in a copy of the current
    ``contextvars`` context as ``fromCoroutine`` does, so that a coroutine that finishes
    there costs no Deferred.  One that waits goes on in ``fromCoroutine``, in the same
    context; what one raises there is raised in ``fromCoroutine`` too, which makes of it
    what it made before (a failed Deferred).  Under a running asyncio loop
    every coroutine runs as a task (:func:`coroutine_deferred`), never here.
    """
    if type(value) is not CoroutineType or running_loop() is not None:
        return False, as_deferred(value)
    context = copy_context()
    try:
        yielded = context.run(value.send, None)
    except StopIteration as done:
        result = done.value
        if is_async(result) and isinstance(result, Deferred):
            return False, result
        return True, result
    except BaseException as error:
        # fromCoroutine makes of it what it made of it before (a Failure, or the value
        # of Twisted's returnValue).
        return False, context.run(Deferred.fromCoroutine, _raising(error))
    return False, context.run(Deferred.fromCoroutine, _resumed(value, yielded))


def _raising(error: BaseException) -> Generator[Any, Any, Any]:
    """A generator that raises ``error`` as soon as it is run."""
    raise error
    yield  # (a generator)


def _resumed(coro: Coroutine[Any, Any, T], yielded: Any) -> Generator[Any, Any, T]:
    """
    ``coro``, which has run up to its first wait (it yielded ``yielded``), as a
    generator that ``Deferred.fromCoroutine`` drives from there: what is sent or thrown
    into it goes to ``coro`` (``yield from``, entered after its first step).
    """
    while True:
        try:
            sent = yield yielded
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as e:
            try:
                yielded = coro.throw(e)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
        else:
            try:
                yielded = coro.send(sent)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]


def task_awaitable(d: Deferred[T]) -> Deferred[T]:
    """
    ``d``, awaitable from any asyncio task, not only the handler's own (a task of
    ``asyncio.gather``, ``asyncio.create_task``…): a plain Deferred awaited there makes
    the task fail with "Task got bad yield".  Without a running loop, or once ``d`` has
    fired, ``d`` itself.  Cancelling the result cancels ``d``.
    """
    if d.called or running_loop() is None:
        return d
    out: _TaskAwaitableDeferred[T] = _TaskAwaitableDeferred(lambda _: d.cancel())
    d.addBoth(out.callback)
    return out


class _TaskAwaitableDeferred(Deferred[T]):
    """A Deferred whose ``await`` inside an asyncio task waits on a future of the loop."""

    def __await__(self) -> Generator[Any, None, T]:
        loop = running_loop()
        if loop is not None and asyncio.current_task(loop) is not None:
            while not self.called or self.paused:
                yield from _future_of(self, loop)
        return (yield from super().__await__())


def _as_twisted_cancel(failure: Failure) -> Failure:
    """A task that ended with ``asyncio.CancelledError`` was cancelled: say it as Twisted does."""
    if failure.check(asyncio.CancelledError):
        return Failure(CancelledError("the handler's asyncio task was cancelled"))
    return failure


def _ignore_cancel(failure: Failure) -> None:
    failure.trap(CancelledError)


def _future_of(d: Deferred[Any], loop: asyncio.AbstractEventLoop) -> Generator[Any, None, None]:
    """
    Wait, inside a task, until ``d`` has a result (without taking it: the awaiting code
    reads it).  Cancelling the task while it waits cancels ``d``.
    """
    future: asyncio.Future[None] = loop.create_future()

    def fired(result: object) -> object:
        if not future.done():
            future.set_result(None)
        return result

    def done(f: asyncio.Future[None]) -> None:
        if f.cancelled():
            d.cancel()
            d.addErrback(_ignore_cancel)

    d.addBoth(fired)
    future.add_done_callback(done)
    yield from future.__await__()


class _Bridge(Coroutine[Any, Any, T]):
    """
    Drives ``coro`` for an asyncio task: what it yields goes to the task as is, except a
    Deferred (``await deferred``), waited on as a future of the loop.  The task calls
    ``send``/``throw``; ``coro`` never learns the difference.
    """

    def __init__(self, coro: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop) -> None:
        self._coro = coro
        self._loop = loop
        self._waiting: Generator[Any, None, None] | None = None
        # What asyncio shows of the task's coroutine (Task.__repr__, warnings).
        self.__name__ = getattr(coro, "__name__", type(coro).__name__)
        self.__qualname__ = getattr(coro, "__qualname__", self.__name__)

    def send(self, value: Any) -> Any:
        waiting = self._waiting
        if waiting is not None:
            try:
                return next(waiting)
            except StopIteration:
                self._waiting = None
            value = None
        return self._bridged(self._coro.send(value))

    def throw(self, *exc: Any) -> Any:
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            waiting.close()
        return self._bridged(self._coro.throw(*exc))

    def close(self) -> None:
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            waiting.close()
        self._coro.close()

    def _bridged(self, yielded: Any) -> Any:
        if isinstance(yielded, Deferred):
            waiting = _future_of(yielded, self._loop)
            self._waiting = waiting
            return next(waiting)
        return yielded

    def __await__(self) -> Generator[Any, None, T]:
        return self

    def __iter__(self) -> _Bridge[T]:
        return self

    def __next__(self) -> Any:
        return self.send(None)

    def __repr__(self) -> str:
        return f"<acpkit bridge of {self._coro!r}>"
