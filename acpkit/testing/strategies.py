"""Hypothesis strategies for every generated ACP model class (stable and unstable).

``for_type(tp)`` gives a strategy of valid instances for a model class, a union alias
(``ContentBlock``, ``SessionUpdate``...) or any field type; the instances encode to JSON
that validates against the official schema. Shortcuts: :func:`content_block`,
:func:`session_update`, :func:`session_notification`, :func:`tool_call_content`,
:func:`unknown_variant`.

Example::

    from hypothesis import given
    from acpkit.testing import strategies

    @given(strategies.session_update())
    def test_renders(update): ...
"""

from __future__ import annotations

import enum
import functools
import types
import typing
from typing import Any, Union, get_args, get_origin

import attrs
from hypothesis import strategies as st

from acpkit import schema
from acpkit.schema import ABSENT, AbsentType

__all__ = [
    "content_block",
    "for_type",
    "json_values",
    "session_notification",
    "session_update",
    "tool_call_content",
    "unknown_variant",
]

_text = st.text(max_size=12)
_ints = st.integers(min_value=0, max_value=65535)
_floats = st.floats(allow_nan=False, allow_infinity=False, width=32)

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | _ints | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=6,
)
"""Small arbitrary JSON values."""

_json_objects = st.dictionaries(_text, json_values, max_size=3)

# Field-level constraints the Python types cannot express: (class name, field) -> strategy.
_FIELD_OVERRIDES: dict[tuple[str, str], st.SearchStrategy[Any]] = {
    ("Notice", "title"): st.text(min_size=1, max_size=12),
    ("NoticeUpdate", "title"): st.text(min_size=1, max_size=12),
    # unstable proxy envelopes: params are one of two proxy payloads or null
    ("ProxyRequest", "params"): st.none(),
    ("ProxyNotification", "params"): st.none(),
}


def _union_args(tp: Any) -> tuple[Any, ...] | None:
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        return get_args(tp)
    return None


def _hints(cls: type) -> dict[str, Any]:
    module = __import__(cls.__module__, fromlist=["_"])
    return typing.get_type_hints(cls, globalns=vars(module))


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and attrs.has(tp)


def _has_scope(cls: type) -> bool:
    names = {f.name for f in attrs.fields(cls)}
    return {"session_id", "request_id"} <= names and bool(
        names & {"requested_schema", "elicitation_id"}
    )


@functools.cache
def for_type(tp: Any, unknown: bool = False) -> st.SearchStrategy[Any]:
    """A strategy of valid values of ``tp`` (model class, union alias or field type).

    With ``unknown=True``, tagged unions also produce ``Unknown<Union>`` values (which do
    not validate against closed schema unions but must round-trip unchanged).
    """
    if tp is str:
        return _text
    if tp is int:
        return _ints
    if tp is float:
        return _floats
    if tp is bool:
        return st.booleans()
    if tp is Any or tp is object:
        return json_values
    if tp is type(None):
        return st.none()
    if tp is AbsentType:
        return st.just(ABSENT)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return st.sampled_from(list(tp))
    origin = get_origin(tp)
    if origin is list:
        return st.lists(for_type(get_args(tp)[0], unknown), max_size=3)
    if origin is dict:
        value_type = get_args(tp)[1]
        if value_type is Any:
            return _json_objects
        return st.dictionaries(_text, for_type(value_type, unknown), max_size=2)
    args = _union_args(tp)
    if args is not None:
        members = [a for a in args if unknown or getattr(a, "__acp_unknown__", None) is None]
        return st.one_of([for_type(a, unknown) for a in members])
    if _is_model(tp):
        if getattr(tp, "__acp_unknown__", None) is not None:
            return unknown_variant(tp)
        return st.deferred(lambda: _model_strategy(tp, unknown))
    raise TypeError(f"no strategy for {tp!r}")


def _model_strategy(cls: type, unknown: bool) -> st.SearchStrategy[Any]:
    hints = _hints(cls)
    kwargs: dict[str, st.SearchStrategy[Any]] = {}
    for f in attrs.fields(cls):
        override = _FIELD_OVERRIDES.get((cls.__name__, f.name))
        strategy = override if override is not None else for_type(hints[f.name], unknown)
        if f.default is not attrs.NOTHING and AbsentType not in (get_args(hints[f.name]) or ()):
            # optional: sometimes absent (None or the default)
            default = f.default
            factory = getattr(default, "factory", None)
            absent = st.builds(factory) if factory is not None else st.just(default)
            strategy = st.one_of(absent, strategy)
        kwargs[f.name] = strategy
    if _has_scope(cls):
        # elicitations are tied to exactly one of a session or a request
        session = st.fixed_dictionaries(
            {"session_id": _text, "tool_call_id": st.none() | _text, "request_id": st.just(ABSENT)}
        )
        request = st.fixed_dictionaries(
            {
                "session_id": st.none(),
                "tool_call_id": st.none(),
                "request_id": for_type(schema.RequestId),
            }
        )
        rest = {
            k: v for k, v in kwargs.items() if k not in ("session_id", "tool_call_id", "request_id")
        }
        return st.tuples(st.fixed_dictionaries(rest), session | request).map(
            lambda pair: cls(**pair[0], **pair[1])
        )
    return st.builds(cls, **kwargs)


def unknown_variant(cls: type) -> st.SearchStrategy[Any]:
    """``Unknown<Union>`` values whose tag no known variant uses, with extra JSON fields."""
    key = cls.__acp_unknown__  # type: ignore[attr-defined]
    tags = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=3, max_size=10).map(
        lambda t: "x_" + t
    )
    return st.builds(
        lambda tag, extra: cls(raw={**extra, key: tag}),
        tags,
        st.dictionaries(st.sampled_from(["a", "b", "payload"]), json_values, max_size=2),
    )


def content_block(unknown: bool = False) -> st.SearchStrategy[Any]:
    """Any ``ContentBlock`` variant."""
    return for_type(schema.ContentBlock, unknown)


def session_update(unknown: bool = False) -> st.SearchStrategy[Any]:
    """Any ``SessionUpdate`` variant."""
    return for_type(schema.SessionUpdate, unknown)


def session_notification(unknown: bool = False) -> st.SearchStrategy[Any]:
    """``SessionNotification`` (the ``session/update`` params)."""
    return for_type(schema.SessionNotification, unknown)


def tool_call_content(unknown: bool = False) -> st.SearchStrategy[Any]:
    """Any ``ToolCallContent`` variant."""
    return for_type(schema.ToolCallContent, unknown)
