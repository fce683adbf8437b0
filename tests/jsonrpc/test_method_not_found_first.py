"""
Method not found comes first: a request for a method the handler does not implement is
answered -32601 before its params are decoded, so malformed params never turn it into
-32602 (the typed connection layer, and bob on top of it).
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from acpkit import schema
from acpkit.connection import Agent, Client, is_implemented, unimplemented
from acpkit.errors import RPCError
from acpkit.testing.pair import connected_pair
from acpkit_agent.config import AgentConfig
from tests.fixtures.agent.harness import make_harness


class _MinimalAgent(Agent):
    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(protocol_version=1)

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id="s1")


def _code(pair: Any, method: str, params: Any) -> int:
    with pytest.raises(RPCError) as caught:
        pair.result(pair.client.protocol.request(method, params))
    return caught.value.code


MALFORMED = [{}, {"sessionId": 5}, {"sessionId": "s1", "modeId": ["x"]}]


@pytest.mark.parametrize("params", MALFORMED)
def test_unimplemented_method_with_malformed_params_is_method_not_found(params: Any) -> None:
    """An Agent subclass without set_mode answers -32601 to any params, malformed or not."""
    pair = connected_pair(_MinimalAgent(), Client())
    pair.result(pair.client.initialize())
    assert _code(pair, "session/set_mode", params) == -32601


def test_implemented_method_with_malformed_params_is_still_invalid_params() -> None:
    """A method the handler does implement still answers -32602 naming the path."""
    pair = connected_pair(_MinimalAgent(), Client())
    pair.result(pair.client.initialize())
    assert _code(pair, "session/new", {"cwd": 3, "mcpServers": []}) == -32602


def test_a_handler_can_mark_its_own_method_unimplemented() -> None:
    """``@unimplemented`` on an override makes it -32601 too; an override without it is used."""

    class Marked(_MinimalAgent):
        @unimplemented
        def set_mode(self, params: schema.SetSessionModeRequest) -> Any:
            raise AssertionError("never called")

    assert not is_implemented(Marked().set_mode)
    assert not is_implemented(None)
    assert is_implemented(_MinimalAgent().new_session)
    pair = connected_pair(Marked(), Client())
    pair.result(pair.client.initialize())
    assert _code(pair, "session/set_mode", {"sessionId": "s1", "modeId": "m"}) == -32601


def test_client_stubs_answer_method_not_found_before_decoding() -> None:
    """The Client base's fs stubs answer -32601 to an agent's malformed fs request too."""
    pair = connected_pair(_MinimalAgent(), Client())
    pair.result(pair.client.initialize())
    with pytest.raises(RPCError) as caught:
        pair.result(pair.agent.protocol.request("fs/read_text_file", {"path": 1}))
    assert caught.value.code == -32601


@pytest.mark.parametrize("params", MALFORMED)
def test_bob_set_mode_with_malformed_params_is_method_not_found(params: Any) -> None:
    """bob has no modes: session/set_mode answers -32601 whatever its params."""
    h = make_harness()
    h.start()
    assert _code(h.pair, "session/set_mode", params) == -32601


@pytest.mark.parametrize("params", [{}, {"sessionId": 1}, {"sessionId": "x", "cwd": None}])
def test_bob_load_with_sessions_disabled_and_malformed_params_is_method_not_found(
    params: Any,
) -> None:
    """With sessions disabled (the default) bob's session/load is -32601 for any params."""
    h = make_harness(config=AgentConfig())
    h.start()
    assert not h.runtime.config.sessions_enabled
    assert _code(h.pair, "session/load", params) == -32601


def test_is_implemented_agrees_with_the_mark_on_every_kind_of_callable() -> None:
    """is_implemented reads the mark the same way getattr finds it, whatever the handler's
    attribute is: a bound method (marked or not, of the base's stub bound on the instance,
    a wrapped one, a classmethod), a plain function or lambda, a partial, None."""

    def marked_function() -> None:
        pass

    unimplemented(marked_function)

    class Handler(Agent):
        @classmethod
        def made(cls) -> None:
            pass

        @functools.wraps(Agent.set_mode)
        def wrapped(self, *args: Any) -> None:
            pass

    handler = Handler()
    handler.load_session = Agent().load_session  # type: ignore[method-assign]
    candidates: list[object] = [
        handler.new_session,
        handler.set_mode,
        handler.load_session,
        handler.made,
        handler.wrapped,
        marked_function,
        lambda params: None,
        functools.partial(marked_function),
        None,
    ]
    for fn in candidates:
        expected = fn is not None and not getattr(fn, "__acpkit_unimplemented__", False)
        assert is_implemented(fn) is expected, fn
    assert not is_implemented(handler.wrapped)  # functools.wraps copied the mark
    assert not is_implemented(handler.load_session)
