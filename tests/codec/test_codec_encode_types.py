"""
Encoding refuses a model whose field holds a value of the wrong Python type: the error
(:class:`acpkit.codec.EncodeError`) names the model, the field and its wire key, and
nothing reaches the wire.  Values of the right type encode as before.
"""

from __future__ import annotations

import enum
import typing
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from acpkit import codec, schema
from acpkit.codec import EncodeError
from acpkit.codec.wire import NONE, strip_optional, union_args, wire_name
from acpkit.connection import Agent, AgentConnection, Client
from acpkit.errors import RPCError
from acpkit.testing.pair import connected_pair
from acpkit.testing.strategies import for_type


def test_new_session_response_with_an_int_session_id_is_refused() -> None:
    """The issue's example: ``NewSessionResponse(session_id=1)`` is an error naming the
    message and the field, not ``{"sessionId":1}``."""
    with pytest.raises(EncodeError) as caught:
        codec.encode(schema.NewSessionResponse(session_id=1))  # type: ignore[arg-type]
    error = caught.value
    assert (error.model, error.field, error.key) == (
        "NewSessionResponse",
        "session_id",
        "sessionId",
    )
    assert "NewSessionResponse.session_id" in str(error) and "expected str, got int" in str(error)
    with pytest.raises(EncodeError):
        codec.encode_json(schema.NewSessionResponse(session_id=1))  # type: ignore[arg-type]


def test_nested_and_optional_fields_are_checked() -> None:
    """A wrong type deep inside (a text block's text) or in an optional field is refused;
    an optional field left at None, a bool where bool is expected, an int where a float
    is, and an open enum's unknown string value encode."""
    bad = schema.SessionNotification(
        session_id="s",
        update=schema.AgentMessageChunk(content=schema.TextContentBlock(text=b"x")),  # type: ignore[arg-type]
    )
    with pytest.raises(EncodeError, match=r"TextContentBlock\.text"):
        codec.encode(bad)
    with pytest.raises(EncodeError, match=r"AgentMessageChunk\.message_id"):
        codec.encode(
            schema.AgentMessageChunk(content=schema.TextContentBlock(text="x"), message_id=3)  # type: ignore[arg-type]
        )
    with pytest.raises(EncodeError, match=r"SessionNotification\.update"):
        codec.encode(schema.SessionNotification(session_id="s", update="hello"))  # type: ignore[arg-type]
    with pytest.raises(EncodeError, match=r"InitializeResponse\.protocol_version"):
        codec.encode(schema.InitializeResponse(protocol_version=True))
    with pytest.raises(EncodeError, match=r"PromptRequest\.prompt"):
        codec.encode(schema.PromptRequest(session_id="s", prompt="hi"))  # type: ignore[arg-type]
    ok = schema.PromptResponse(stop_reason="a_new_reason")  # type: ignore[arg-type]
    assert codec.encode(ok) == {"stopReason": "a_new_reason"}
    assert codec.encode(schema.InitializeResponse(protocol_version=1))["protocolVersion"] == 1


# -- every model, a wrong value in one field ---------------------------------------------

_MODELS = sorted(
    (
        v
        for v in (getattr(schema, n) for n in schema.__all__)
        if isinstance(v, type)
        and attrs.has(v)
        and getattr(v, "__acp_unknown__", None) is None
        # a row of the method tables, not a message
        and v is not schema.Method
    ),
    key=lambda c: c.__name__,
)


def _allowed(tp: Any) -> set[type] | None:
    """The Python types a field accepts (None: anything, not checked)."""
    args = union_args(tp)
    if args is not None:
        found: set[type] = set()
        for a in args:
            more = _allowed(a)
            if more is None:
                return None
            found |= more
        return found
    if tp is NONE or tp is schema.AbsentType:
        return {type(tp) if tp is not NONE else NONE, schema.AbsentType}
    if tp is float:
        return {int, float}
    if tp in (str, int, bool):
        return {tp}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {tp, *(b for b in (str, int) if issubclass(tp, b))}
    if isinstance(tp, type) and attrs.has(tp):
        return {tp}
    origin = typing.get_origin(tp)
    if origin is list:
        return {list, tuple}
    if origin is dict:
        return {dict}
    return None


#: Wrong values of several Python types; one is chosen whose type the field refuses.
_WRONG: list[object] = [7, 2.5, True, "text", b"bytes", ["x"], {"k": 1}, object()]


def _wrong_for(field: attrs.Attribute[Any], tp: Any) -> list[object]:
    allowed = _allowed(tp)
    if allowed is None:
        return []
    if field.default is None:
        allowed = allowed | {NONE}
    return [
        w
        for w in _WRONG
        if not any(
            isinstance(w, a) and not (isinstance(w, bool) and a in (int, float)) for a in allowed
        )
    ]


@st.composite
def _model_with_a_wrong_field(draw: st.DrawFn) -> tuple[Any, str]:
    cls = draw(st.sampled_from(_MODELS))
    hints = typing.get_type_hints(cls, globalns=vars(schema))
    candidates = [
        (f, w) for f in attrs.fields(cls) for w in _wrong_for(f, strip_optional(hints[f.name]))
    ]
    if not candidates:
        return draw(_model_with_a_wrong_field())
    field, wrong = draw(st.sampled_from(candidates))
    value = draw(for_type(cls))
    return attrs.evolve(value, **{field.alias: wrong}), field.name


@given(_model_with_a_wrong_field())
def test_every_model_refuses_a_wrong_type_in_any_field(case: tuple[Any, str]) -> None:
    """For any model of the schema, a valid value with one field replaced by a value of a
    type the field does not accept is refused at encode, the error naming the model and
    that field (and its wire key)."""
    value, name = case
    with pytest.raises(EncodeError) as caught:
        codec.encode(value)
    assert caught.value.model == type(value).__name__
    assert caught.value.field == name
    field = attrs.fields_dict(type(value))[name]
    assert caught.value.key == wire_name(field)


@given(st.sampled_from(_MODELS).flatmap(lambda cls: for_type(cls)))
def test_valid_values_still_encode_and_round_trip(value: Any) -> None:
    """Valid values of every model encode (the checks refuse nothing right) and decode
    back equal."""
    assert codec.decode(type(value), codec.loads(codec.encode_json(value))) == value


# -- on a connection ---------------------------------------------------------------------


class _WrongTypeAgent(Agent):
    def __init__(self, conn: AgentConnection) -> None:
        self.conn = conn

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(protocol_version=params.protocol_version)

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id=1)  # type: ignore[arg-type]


def test_a_handler_returning_a_wrong_type_answers_an_error_not_the_value() -> None:
    """An agent whose handler returns ``NewSessionResponse(session_id=1)`` answers the
    request with an error: the client never sees ``"sessionId": 1``."""
    p = connected_pair(_WrongTypeAgent, Client())
    p.result(p.client.initialize())
    result = p.client.new_session(schema.NewSessionRequest(cwd="/", mcp_servers=[]))
    with pytest.raises(RPCError) as caught:
        p.result(result)
    assert caught.value.code == -32603
    assert b'"sessionId":1' not in p.agent_transport.value()


def test_a_request_with_a_wrong_type_fails_before_it_is_sent() -> None:
    """A client calling ``new_session`` with a wrong-typed field gets the EncodeError at
    the call; nothing is written."""
    p = connected_pair(_WrongTypeAgent, Client())
    p.result(p.client.initialize())
    sent = p.client_transport.value()
    with pytest.raises(EncodeError, match=r"NewSessionRequest\.cwd"):
        p.result(p.client.new_session(schema.NewSessionRequest(cwd=5, mcp_servers=[])))  # type: ignore[arg-type]
    assert p.client_transport.value() == sent


def test_a_bool_is_not_a_request_id() -> None:
    """A field typed ``int | str`` (a request id) refuses ``True``: bool is an int only to
    Python's isinstance (Hypothesis found it)."""
    from acpkit import schema
    from acpkit.codec import EncodeError, encode

    message = schema.CreateElicitationRequestForm(
        message="",
        requested_schema=schema.ElicitationSchema(properties={}),
        request_id=True,
    )
    with pytest.raises(EncodeError) as caught:
        encode(message)
    assert "request_id" in str(caught.value)
