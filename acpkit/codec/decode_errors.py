"""
Decode errors and their JSON paths: :class:`DecodeError` (what :func:`acpkit.codec.decode`
raises), the error the hooks raise beneath it (:class:`Invalid`), and the reading of
cattrs' exception groups into a path such as ``$.update.content.type``.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
from cattrs.errors import (
    AttributeValidationNote,
    BaseValidationError,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationNote,
)

from acpkit.codec.wire import NONE, TAG, wire_name

_MAX_SNIPPET = 60


class DecodeError(ValueError):
    """Input that does not decode to the requested type. ``str()`` is ``"<path>: <message>"``."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message[:300]
        super().__init__(f"{path}: {self.message}")


class Invalid(Exception):
    """Raised by our hooks; ``path`` holds the wire keys/indexes below the hook, innermost
    first (cattrs' notes add the attribute above it)."""

    def __init__(self, message: str, path: list[str | int] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path: list[str | int] = path if path is not None else []


def snippet(value: object) -> str:
    """A short, bounded rendering of an offending value."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > _MAX_SNIPPET:
        text = text[:_MAX_SNIPPET] + "..."
    return text


JSON_TYPE = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
    NONE: "null",
}


def type_error(expected: str, value: object) -> Invalid:
    got = JSON_TYPE.get(type(value), type(value).__name__)
    return Invalid(f"expected {expected}, got {got} {snippet(value)}")


def render_path(path: list[str | int]) -> str:
    """``$.a.b[0]`` from outermost-first parts."""
    out = "$"
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += "." + (part if len(part) <= _MAX_SNIPPET else part[:_MAX_SNIPPET] + "...")
    return out


def at(error: Exception, part: str | int) -> Exception:
    """``error`` one level down: under list index / dict key ``part``."""
    if isinstance(error, Invalid):
        error.path.append(part)
        return error
    path, message = locate(error)
    return Invalid(message, [*reversed(path), part])


def wire_key(cls: Any, attribute: str) -> str:
    cls = getattr(cls, "__wrapped__", cls)
    if attribute == TAG:
        return str(cls.__acp_tag__[0])
    for a in attrs.fields(cls):
        if a.name == attribute:
            return wire_name(a)
    return attribute


def locate(error: BaseException) -> tuple[list[str | int], str]:
    """The JSON path (outermost first) and message of the first error cattrs collected.

    An unknown field comes first (today's order), then the attributes in class order.
    """
    path: list[str | int] = []
    while True:
        if isinstance(error, ClassValidationError):
            group = list(error.exceptions)
            extra = [e for e in group if isinstance(e, ForbiddenExtraKeysError)]
            inner = extra[0] if extra else group[0]
            for note in getattr(inner, "__notes__", ()):
                if isinstance(note, AttributeValidationNote):
                    path.append(wire_key(error.cl, note.name))
                    break
            if isinstance(inner, KeyError) and not isinstance(inner, BaseValidationError):
                return path, "missing required field"
            error = inner
            continue
        if isinstance(error, BaseValidationError):  # an iterable's group
            inner = error.exceptions[0]
            for note in getattr(inner, "__notes__", ()):
                if isinstance(note, IterableValidationNote):
                    path.append(note.index)
                    break
            error = inner
            continue
        if isinstance(error, ForbiddenExtraKeysError):
            return [*path, sorted(error.extra_fields)[0]], "unknown field"
        if isinstance(error, Invalid):
            return [*path, *reversed(error.path)], error.message
        return path, f"{type(error).__name__}: {error}"[:200]
