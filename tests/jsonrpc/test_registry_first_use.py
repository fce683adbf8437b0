"""
Methods resolved on first use (:meth:`MethodRegistry.resolve_on_first_use`): a typed
connection registers none of the ACP methods it handles until a message of that method
arrives, so that a server's idle connections hold no handlers, and the dispatch is the
same as with every method registered up front.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.testing import StringTransport

from acpkit import schema
from acpkit.connection import Agent, AgentConnection, Client, ClientConnection, negotiate_version
from acpkit.jsonrpc import JSONRPCProtocol, MethodRegistry
from acpkit.jsonrpc.registry import NotificationMethod, RequestMethod


def _handler(_req: Any) -> str:
    return "from the resolver"


def test_resolved_once_and_kept() -> None:
    """A resolvable method is resolved when first looked up, once; later lookups get the
    same registration; a name outside the resolvable set never reaches the resolver."""
    asked: list[str] = []

    def resolve(name: str) -> RequestMethod:
        asked.append(name)
        return RequestMethod(_handler, None, False)

    registry = MethodRegistry()
    registry.resolve_on_first_use(frozenset({"a/b"}), resolve, frozenset(), lambda _: None)
    first = registry.request_method("a/b")
    assert first is not None and registry.request_method("a/b") is first
    assert registry.registered() == {"a/b"}
    assert registry.request_method("c/d") is None
    assert registry.notification_method("a/b") is None
    assert asked == ["a/b"]


def test_added_methods_take_precedence() -> None:
    """A method added with add_request / add_notification wins over the resolver, whether
    added before or after the resolver was set."""
    registry = MethodRegistry()
    registry.add_request("x/early", _handler)
    registry.resolve_on_first_use(
        frozenset({"x/early", "x/late"}),
        lambda _: RequestMethod(lambda _req: "resolved", None, False),
        frozenset({"x/note"}),
        lambda _: NotificationMethod(lambda _p, _m: None, False),
    )
    registry.add_request("x/late", _handler)
    registry.add_notification("x/note", lambda _p, _m: "added")
    for name in ("x/early", "x/late"):
        found = registry.request_method(name)
        assert found is not None and found.handler is _handler
    note = registry.notification_method("x/note")
    assert note is not None and note.handler({}, None) == "added"


def test_listed_before_resolution() -> None:
    """request_methods() / notification_methods() list the resolvable methods before any
    is resolved, with those added."""
    registry = MethodRegistry()
    registry.add_request("x/added", _handler)
    registry.resolve_on_first_use(
        frozenset({"x/r"}), lambda _: None, frozenset({"x/n"}), lambda _: None
    )
    assert registry.request_methods() == {"x/added", "x/r"}
    assert registry.notification_methods() == {"x/n"}


class _Agent(Agent):
    def __init__(self, conn: AgentConnection) -> None:
        self.conn = conn

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=negotiate_version(params.protocol_version)
        )


class _Client(Client):
    pass


def test_idle_connection_holds_no_registration() -> None:
    """A typed connection lists every ACP method its side handles, holds the registration
    of none until one arrives, then of that one only; the answer is the usual one."""
    protocol = JSONRPCProtocol(name="test")
    AgentConnection(_Agent, protocol=protocol)
    registry = protocol.registry
    assert registry.request_methods() >= {"initialize", "session/new", "session/prompt"}
    assert "session/cancel" in registry.notification_methods()
    assert registry.registered() == frozenset()
    transport = StringTransport()
    protocol.makeConnection(transport)
    protocol.dataReceived(
        b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'
    )
    answer = json.loads(transport.value())
    assert answer["id"] == 1 and answer["result"]["protocolVersion"] == 1
    assert registry.registered() == {"initialize"}


def test_client_side_resolves_its_own_methods() -> None:
    """The client side resolves the client's methods (session/update, fs, permission),
    not the agent's."""
    protocol = JSONRPCProtocol(name="test")
    ClientConnection(_Client(), protocol=protocol)
    assert "session/request_permission" in protocol.registry.request_methods()
    assert "session/update" in protocol.registry.notification_methods()
    assert protocol.registry.request_method("session/new") is None
