"""
One convention for ``data.path`` in -32602 answers: a JSONPath from the request, so
``$.params.cwd`` whether the decoder or a handler found the problem.
"""

from __future__ import annotations

from typing import Any

import pytest

from acpkit import schema
from acpkit.connection import Agent, Client
from acpkit.errors import InvalidParams, RPCError
from acpkit.testing.pair import connected_pair


class _CheckingAgent(Agent):
    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(protocol_version=1)

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        if not params.cwd.startswith("/"):
            raise InvalidParams("$.params.cwd", "must be absolute")
        return schema.NewSessionResponse(session_id="s1")


def _error(params: Any) -> RPCError:
    pair = connected_pair(_CheckingAgent(), Client())
    pair.result(pair.client.initialize())
    with pytest.raises(RPCError) as caught:
        pair.result(pair.client.protocol.request("session/new", params))
    return caught.value


@pytest.mark.parametrize(
    ("params", "path"),
    [
        ({"cwd": 42, "mcpServers": []}, "$.params.cwd"),  # the decoder
        ({"cwd": "rel", "mcpServers": []}, "$.params.cwd"),  # the handler
        ({"mcpServers": []}, "$.params.cwd"),  # a missing field
        ({"cwd": "/", "mcpServers": [{"name": 1}]}, "$.params.mcpServers[0]"),
    ],
)
def test_data_path_starts_at_the_request(params: Any, path: str) -> None:
    """Decoder and handler errors both name the value from the request: ``$.params...``."""
    error = _error(params)
    assert error.code == -32602
    assert isinstance(error.data, dict)
    assert error.data["path"].startswith(path)
    assert error.message.startswith(f"Invalid params: {error.data['path']}: ")
