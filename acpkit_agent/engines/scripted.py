"""
The ``scripted`` engine: replays a script of model turns deterministically.

Each ``complete()`` call consumes the next turn of an :class:`acpkit.testing.script.Script`
(text chunks, reasoning chunks, tool calls, usage, faults). Delays use the given clock, so
tests drive them with ``twisted.internet.task.Clock``. When the sink asks to wait
(back-pressure), the next event is played once it may (then after the turn's delay). When
the script runs out the call fails with ``EngineError("script exhausted after N turns
(...)")``, unless ``loop = true``.

Settings (``[engine]`` table): ``script`` (required: path to a TOML or JSON script),
``context_window`` (int, overrides the script's ``context_window``; default 0).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from acpkit.testing.script import Script, ScriptError, Turn, load_script
from acpkit_agent.engines.base import (
    DeltaAssembler,
    EngineError,
    IEngine,
    ModelReply,
    StreamSink,
    ToolSpec,
    Usage,
    must_wait,
    validate_settings,
)

__all__ = ["ReceivedCall", "ScriptedEngine"]

_SETTINGS: dict[str, tuple[type, ...]] = {"script": (str,), "context_window": (int,)}


@attrs.frozen
class ReceivedCall:
    """What one ``complete()`` call received (deep copies), for assertions in tests."""

    messages: list[dict[str, Any]]
    tools: tuple[ToolSpec, ...]


@implementer(IEngine)
class ScriptedEngine:
    """Plays a :class:`~acpkit.testing.script.Script`, one turn per ``complete()`` call."""

    name = "scripted"
    _log = Logger()

    def __init__(
        self,
        script: Script,
        *,
        clock: IReactorTime | None = None,
        context_window: int | None = None,
    ) -> None:
        if clock is None:
            from twisted.internet import reactor

            clock = reactor
        self.script = script
        self._clock: IReactorTime = clock
        self._window = context_window
        self.calls = 0
        self.received: list[ReceivedCall] = []

    @classmethod
    def from_settings(
        cls, settings: Mapping[str, Any], *, clock: IReactorTime | None = None
    ) -> ScriptedEngine:
        """Build from the ``[engine]`` table; ``ValueError`` for bad settings or script."""
        checked = validate_settings("scripted", settings, _SETTINGS)
        if "script" not in checked:
            raise ValueError("engine 'scripted' needs the setting 'script' (a TOML or JSON path)")
        window = checked.get("context_window")
        if window is not None and window < 0:
            raise ValueError("setting 'context_window' of engine 'scripted' must be >= 0")
        try:
            script = load_script(checked["script"])
        except ScriptError as error:
            raise ValueError(str(error)) from None
        return cls(script, clock=clock, context_window=window)

    @property
    def description(self) -> str:
        """One line for the startup banner."""
        looping = ", looping" if self.script.loop else ""
        count = len(self.script.turns)
        return f"scripted ({self.script.source}: {count} turns{looping}; not a language model)"

    def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[ToolSpec],
        sink: StreamSink,
    ) -> Deferred[ModelReply]:
        """Play the next turn: stream its deltas to ``sink``, resolve with its reply."""
        self.received.append(
            ReceivedCall(messages=[copy.deepcopy(dict(m)) for m in messages], tools=tuple(tools))
        )
        number = self.calls
        self.calls += 1
        turn = self.script.turn_at(number)
        if turn is None:
            return fail(EngineError(self.script.exhausted_message()))
        if turn.status is not None:
            detail = turn.error or turn.body or "scripted HTTP error"
            return fail(EngineError(f"model server answered HTTP {turn.status}: {detail}"))
        if turn.garbage is not None:
            return fail(EngineError(f"model server sent garbage: {turn.garbage[:80]!r}"))
        player = _TurnPlayer(turn, number + 1, sink, self._clock)
        return player.start()

    def context_window(self) -> Deferred[int]:
        """The configured window, else the script's ``context_window``, else 0."""
        if self._window is not None:
            return succeed(self._window)
        return succeed(self.script.context_window or 0)


class _TurnPlayer:
    """
    Feeds one turn's deltas to an assembler, spaced by the turn's delay, each after the
    sink's readiness (back-pressure).
    """

    def __init__(self, turn: Turn, number: int, sink: StreamSink, clock: IReactorTime) -> None:
        self._turn = turn
        self._assembler = DeltaAssembler(sink)
        self._clock = clock
        self._events = turn.deltas(number)
        self._failure: EngineError | None = None
        if turn.cut_after is not None:
            self._events = self._events[: turn.cut_after]
            self._failure = EngineError("model server closed the stream before the model finished")
        elif turn.error is not None:
            self._events = self._events[:-1]
            self._failure = EngineError(f"model server error: {turn.error}")
        self._position = 0
        self._pending: IDelayedCall | None = None
        self._done: Deferred[ModelReply] = Deferred(self._cancel)

    def start(self) -> Deferred[ModelReply]:
        self._step()
        return self._done

    def _cancel(self, _: Deferred[ModelReply]) -> None:
        if self._pending is not None and self._pending.active():
            self._pending.cancel()
        self._pending = None

    def _step(self) -> None:
        """Play the next event (all of them when there is no delay or wait), then finish."""
        self._pending = None
        while self._position < len(self._events):
            delta, finish = self._events[self._position]
            self._position += 1
            try:
                ready = self._assembler.feed_delta(delta)
            except Exception as error:  # a sink that raises must not hang the turn
                self._done.errback(error)
                return
            if finish is not None:
                self._assembler.finish_reason = finish
            if must_wait(ready):
                ready.addBoth(self._sink_ready)
                return
            if self._paced():
                return
        self._finish()

    def _paced(self) -> bool:
        """Schedule the next event after the turn's delay; False: play it now."""
        if self._turn.delay > 0 and self._position < len(self._events):
            self._pending = self._clock.callLater(self._turn.delay, self._step)
            return True
        return False

    def _sink_ready(self, result: object) -> None:
        if self._done.called:  # cancelled while waiting
            return
        if isinstance(result, Failure):
            self._done.errback(result)
        elif not self._paced():
            self._step()

    def _finish(self) -> None:
        if self._failure is not None:
            self._done.errback(self._failure)
            return
        usage = self._turn.usage
        if usage is not None:
            self._assembler.usage = Usage(
                input_tokens=usage.input,
                output_tokens=usage.output,
                thought_tokens=usage.reasoning,
                cached_read_tokens=usage.cached,
            )
        self._done.callback(self._assembler.reply())
