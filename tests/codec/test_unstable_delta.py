"""``acpkit.unstable`` is a delta over ``acpkit.schema``: unchanged models are the stable ones."""

from __future__ import annotations

import enum
import re
from typing import Any

import attrs

from acpkit import schema, unstable
from acpkit.codec import decode, encode

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MODULE_PREFIX = re.compile(r"\bacpkit\.(?:schema|unstable)\.")


def _shape(value: Any) -> tuple[Any, ...]:
    """What one generated name is made of, documentation aside, with its module names removed."""
    if isinstance(value, type) and issubclass(value, enum.Enum):
        members = tuple((m.name, m.value) for m in value)
        return ("enum", members, getattr(value, "__acp_open__", None))
    if isinstance(value, type) and attrs.has(value):
        fields = tuple(
            (f.name, f.type, repr(f.default), dict(f.metadata), f.kw_only)
            for f in attrs.fields(value)
        )
        bases = tuple(b.__name__ for b in value.__bases__)
        tags = (getattr(value, "__acp_tag__", None), getattr(value, "__acp_unknown__", None))
        return ("class", fields, bases, tags)
    return ("alias", _MODULE_PREFIX.sub("", repr(value)))


def _references(value: Any, names: set[str]) -> set[str]:
    """The generated names one class or alias refers to (annotations, defaults, bases)."""
    return set(_IDENTIFIER.findall(repr(_shape(value)))) & names


def _model_names() -> set[str]:
    """Every generated model name of ``acpkit.unstable`` (``__all__`` and the classes)."""
    classes = {
        n
        for n, v in vars(unstable).items()
        if isinstance(v, type) and v.__module__ in ("acpkit.schema", "acpkit.unstable")
    }
    exported = {n for n in unstable.__all__ if not n.isupper() or n == "ABSENT"}
    return classes | exported


def _changed_names() -> set[str]:
    """Unstable names that differ from their stable namesake, directly or through a reference.

    Computed from the modules themselves, independently of the generator.
    """
    names = _model_names()
    changed = {
        n
        for n in names
        if not hasattr(schema, n) or _shape(getattr(schema, n)) != _shape(getattr(unstable, n))
    }
    refs = {n: _references(getattr(unstable, n), names) for n in names}
    grew = True
    while grew:
        more = {n for n in names - changed if refs[n] & changed}
        grew = bool(more)
        changed |= more
    return changed


def test_unchanged_models_are_the_stable_objects() -> None:
    """Every unstable name equal to its stable namesake (transitively) IS the stable object;
    every changed one (or one referring to a changed one) is unstable's own definition."""
    changed = _changed_names()
    names = _model_names()
    assert len(names) > 300
    for name in sorted(names):
        if name in changed:
            assert getattr(unstable, name) is not getattr(schema, name, None), name
        else:
            assert getattr(unstable, name) is getattr(schema, name), name


def _same(a: object, b: object) -> bool:
    return a is b


def test_the_known_differences_are_redefined() -> None:
    """The unstable additions to stable models are unstable's own classes and aliases."""
    assert not _same(unstable.PromptResponse, schema.PromptResponse)  # ``usage``
    assert unstable.SessionUpdate != schema.SessionUpdate  # more variants
    assert not _same(unstable.SessionNotification, schema.SessionNotification)  # refers to it
    assert unstable.TextContentBlock is schema.TextContentBlock
    assert unstable.AgentMessageChunk is schema.AgentMessageChunk
    assert unstable.StopReason is schema.StopReason


def test_unstable_decoding_yields_stable_instances_for_unchanged_variants() -> None:
    """A stable update decoded with the unstable models is an instance of the stable classes."""
    wire = {
        "sessionId": "s1",
        "update": {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "hi"},
        },
    }
    note = decode(unstable.SessionNotification, wire)
    assert isinstance(note, unstable.SessionNotification)
    assert isinstance(note.update, schema.AgentMessageChunk)
    assert isinstance(note.update.content, schema.TextContentBlock)
    assert encode(note) == wire


def test_unstable_models_decode_unstable_variants() -> None:
    """``unstable.SessionNotification`` decodes an unstable-only update to its class; the
    stable model keeps it as ``UnknownSessionUpdate``."""
    wire = {
        "sessionId": "s1",
        "update": {"sessionUpdate": "plan_removed", "planId": "p1"},
    }
    assert isinstance(
        decode(unstable.SessionNotification, wire).update, unstable.PlanRemovedSessionUpdate
    )
    assert isinstance(decode(schema.SessionNotification, wire).update, schema.UnknownSessionUpdate)
    response = decode(unstable.PromptResponse, {"stopReason": "end_turn", "usage": None})
    assert response.stop_reason is schema.StopReason.END_TURN
    assert encode(response) == {"stopReason": "end_turn"}
