"""
acpkit: the Agent Client Protocol on Twisted.

The layers, top to bottom: ``acpkit.framing`` (bytes to lines), ``acpkit.jsonrpc``
(lines to JSON-RPC messages), ``acpkit.schema`` and ``acpkit.codec`` (messages to
typed models), ``acpkit.connection`` (typed agent and client roles) and
``acpkit.io`` (stdio, child processes, Twisted endpoints).

The names most programs need are available from here too (imported on first use, so
``import acpkit`` stays cheap)::

    from acpkit import Agent, AgentConnection, run_agent, schema
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from acpkit._version import __version__

if TYPE_CHECKING:
    from acpkit import builders, codec, schema
    from acpkit.connection import (
        Agent,
        AgentConnection,
        Client,
        ClientConnection,
        ProtocolVersionError,
        negotiate_version,
    )
    from acpkit.errors import (
        AgentExited,
        CapabilityError,
        ConnectionLost,
        InvalidParams,
        MethodNotFound,
        RequestCancelled,
        RPCError,
    )
    from acpkit.interfaces import IAgent, IClient
    from acpkit.io import AgentProcess, connect, serve, serve_stdio, spawn_agent
    from acpkit.jsonrpc import JSONRPCProtocol
    from acpkit.runners import run_agent, run_client
    from acpkit.trace import Tracer

#: Public name → the module that defines it.
_WHERE: dict[str, str] = {
    "builders": "acpkit.builders",
    "codec": "acpkit.codec",
    "schema": "acpkit.schema",
    "Agent": "acpkit.connection",
    "AgentConnection": "acpkit.connection",
    "Client": "acpkit.connection",
    "ClientConnection": "acpkit.connection",
    "ProtocolVersionError": "acpkit.connection",
    "negotiate_version": "acpkit.connection",
    "AgentExited": "acpkit.errors",
    "AgentProcess": "acpkit.io",
    "connect": "acpkit.io",
    "serve": "acpkit.io",
    "serve_stdio": "acpkit.io",
    "spawn_agent": "acpkit.io",
    "CapabilityError": "acpkit.errors",
    "ConnectionLost": "acpkit.errors",
    "InvalidParams": "acpkit.errors",
    "MethodNotFound": "acpkit.errors",
    "RequestCancelled": "acpkit.errors",
    "RPCError": "acpkit.errors",
    "IAgent": "acpkit.interfaces",
    "IClient": "acpkit.interfaces",
    "JSONRPCProtocol": "acpkit.jsonrpc",
    "run_agent": "acpkit.runners",
    "run_client": "acpkit.runners",
    "Tracer": "acpkit.trace",
}

__all__ = [
    "Agent",
    "AgentConnection",
    "AgentExited",
    "AgentProcess",
    "CapabilityError",
    "Client",
    "ClientConnection",
    "ConnectionLost",
    "IAgent",
    "IClient",
    "InvalidParams",
    "JSONRPCProtocol",
    "MethodNotFound",
    "ProtocolVersionError",
    "RPCError",
    "RequestCancelled",
    "Tracer",
    "__version__",
    "builders",
    "codec",
    "connect",
    "negotiate_version",
    "run_agent",
    "run_client",
    "schema",
    "serve",
    "serve_stdio",
    "spawn_agent",
]


def __dir__() -> list[str]:
    """The module's attributes, the lazily imported public names included."""
    return sorted({*globals(), *__all__})


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'acpkit' has no attribute {name!r}")
    module = importlib.import_module(where)
    value = module if where.rsplit(".", 1)[1] == name else getattr(module, name)
    globals()[name] = value
    return value
