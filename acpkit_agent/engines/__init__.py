"""
The reference agent's model engines, chosen by the ``[engine]`` table of its configuration.

- ``openai``: any OpenAI-compatible chat-completions server (llama.cpp ``llama-server``,
  Ollama, vLLM, LM Studio, ...), streamed over HTTP with treq;
- ``scripted``: replays a script of model turns (:mod:`acpkit.testing.script`), for tests;
- ``echo``: the offline default, not a language model: echoes and turns directives into
  tool calls.

The contract is in :mod:`acpkit_agent.engines.base`; :func:`make_engine` builds an engine
from its name and settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twisted.internet.interfaces import IReactorTime

from acpkit_agent.engines.base import (
    EngineError,
    IEngine,
    ModelReply,
    StreamSink,
    ToolCallRequest,
    ToolSpec,
    Usage,
)

__all__ = [
    "ENGINE_NAMES",
    "EngineError",
    "IEngine",
    "ModelReply",
    "StreamSink",
    "ToolCallRequest",
    "ToolSpec",
    "Usage",
    "make_engine",
]

ENGINE_NAMES = ("openai", "scripted", "echo")


def make_engine(name: str, settings: Mapping[str, Any], *, reactor: Any = None) -> IEngine:
    """
    Build the engine ``name`` from its settings table.

    ``reactor`` defaults to the global reactor (the ``openai`` engine needs TCP and time;
    ``scripted`` and ``echo`` only time). Raises ``ValueError`` for an unknown engine name
    or a bad or unknown settings key.
    """
    if reactor is None:
        from twisted.internet import reactor as default_reactor

        reactor = default_reactor
    if name == "openai":
        from acpkit_agent.engines.openai import OpenAIEngine

        return OpenAIEngine.from_settings(settings, reactor=reactor)
    if name == "scripted":
        from acpkit_agent.engines.scripted import ScriptedEngine

        return ScriptedEngine.from_settings(settings, clock=_as_clock(reactor))
    if name == "echo":
        from acpkit_agent.engines.echo import EchoEngine

        return EchoEngine.from_settings(settings)
    raise ValueError(f"unknown engine {name!r} (known: {', '.join(ENGINE_NAMES)})")


def _as_clock(reactor: Any) -> IReactorTime:
    return reactor  # type: ignore[no-any-return]
