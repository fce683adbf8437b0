"""
Form elicitations (``elicitation/create`` in ``form`` mode) read as fields, and the user's
typed answers checked against them.

The agent's ``requestedSchema`` is the restricted JSON Schema of the elicitation RFD: a
flat object of primitive properties.  Each property becomes a :class:`FormField`, and
:func:`parse_answer` turns one typed line into its value, or says why it is not one:

==============================  ===========================================================
property                        a typed answer
==============================  ===========================================================
``string``                      the text (``minLength``, ``maxLength``, ``pattern`` and the
                                formats ``email``, ``uri``, ``date``, ``date-time`` checked)
``string`` with ``enum`` or     a choice's number or its value
``oneOf``
``number``, ``integer``         a number (``minimum``, ``maximum`` checked)
``boolean``                     ``y``/``yes``/``true`` or ``n``/``no``/``false``
``array`` of choices            choices' numbers or values, comma-separated (``minItems``,
                                ``maxItems`` checked)
==============================  ===========================================================

An empty line takes the property's ``default``; without one, an optional property is left
out and a required one is asked again.  A property of another type cannot be answered
(:func:`form_fields` raises :class:`UnsupportedForm`): the form is declined.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import attrs

__all__ = ["EMPTY", "FormField", "UnsupportedForm", "form_fields", "parse_answer"]

#: What :func:`parse_answer` returns for an empty line that leaves the field out.
EMPTY: Any = object()

_KINDS = ("string", "number", "integer", "boolean", "array")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


class UnsupportedForm(ValueError):
    """A form this client cannot ask (a property of a type it does not know)."""


@attrs.frozen
class FormField:
    """One property of the form."""

    name: str
    kind: str
    title: str
    required: bool
    description: str = ""
    #: ``(value, label)`` of each choice (single or multiple selection), else empty.
    choices: tuple[tuple[str, str], ...] = ()
    default: Any = EMPTY
    schema: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def multiple(self) -> bool:
        """Whether several choices may be picked."""
        return self.kind == "array"


def _choices(schema: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    options = schema.get("oneOf") or schema.get("anyOf")
    if isinstance(options, list):
        return tuple(
            (str(o.get("const")), str(o.get("title") or o.get("const")))
            for o in options
            if isinstance(o, dict) and "const" in o
        )
    values = schema.get("enum")
    if isinstance(values, list):
        return tuple((str(v), str(v)) for v in values)
    return ()


def form_fields(requested_schema: Mapping[str, Any]) -> list[FormField]:
    """The fields of a form's ``requestedSchema`` (JSON, as on the wire), in its order."""
    properties = requested_schema.get("properties") or {}
    required = set(requested_schema.get("required") or ())
    fields = []
    for name, schema in properties.items():
        kind = schema.get("type") if isinstance(schema, dict) else None
        if kind not in _KINDS:
            raise UnsupportedForm(f"the field {name!r} has a type this client cannot ask: {kind!r}")
        choices = _choices(schema.get("items") or {}) if kind == "array" else _choices(schema)
        if kind == "array" and not choices:
            raise UnsupportedForm(f"the field {name!r} is a list without choices")
        fields.append(
            FormField(
                name=name,
                kind=kind,
                title=str(schema.get("title") or name),
                required=name in required,
                description=str(schema.get("description") or ""),
                choices=choices,
                default=schema.get("default", EMPTY),
                schema=schema,
            )
        )
    return fields


def _choice(field: FormField, word: str) -> str | None:
    if word.isdigit() and 1 <= int(word) <= len(field.choices):
        return field.choices[int(word) - 1][0]
    for value, label in field.choices:
        if word in (value, label):
            return value
    return None


def _check_string(field: FormField, text: str) -> str | None:
    schema = field.schema
    if isinstance(schema.get("minLength"), int) and len(text) < schema["minLength"]:
        return f"at least {schema['minLength']} characters"
    if isinstance(schema.get("maxLength"), int) and len(text) > schema["maxLength"]:
        return f"at most {schema['maxLength']} characters"
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        try:
            if re.search(pattern, text) is None:
                return f"must match {pattern}"
        except re.error:
            pass  # a pattern Python cannot read is not checked
    form = schema.get("format")
    if form == "email" and not _EMAIL.match(text):
        return "an email address"
    if form == "uri" and not urlsplit(text).scheme:
        return "a URI (scheme:...)"
    if form == "date":
        try:
            datetime.date.fromisoformat(text)
        except ValueError:
            return "a date (YYYY-MM-DD)"
    if form == "date-time":
        try:
            datetime.datetime.fromisoformat(text)
        except ValueError:
            return "a date and time (YYYY-MM-DDTHH:MM:SS)"
    return None


def _number(field: FormField, text: str) -> tuple[Any, str | None]:
    try:
        value: int | float = int(text) if field.kind == "integer" else float(text)
    except ValueError:
        return None, "a whole number" if field.kind == "integer" else "a number"
    low, high = field.schema.get("minimum"), field.schema.get("maximum")
    if isinstance(low, (int, float)) and value < low:
        return None, f"at least {low}"
    if isinstance(high, (int, float)) and value > high:
        return None, f"at most {high}"
    return value, None


def parse_answer(field: FormField, line: str) -> tuple[Any, str | None]:
    """
    ``(value, None)`` for a valid answer (:data:`EMPTY`: leave the field out), or
    ``(None, why)`` when the line is not an answer to ``field``.
    """
    text = line.strip()
    if not text:
        if field.default is not EMPTY:
            return field.default, None
        return (None, "an answer is required") if field.required else (EMPTY, None)
    if field.kind == "boolean":
        lowered = text.lower()
        if lowered in ("y", "yes", "true"):
            return True, None
        if lowered in ("n", "no", "false"):
            return False, None
        return None, "yes or no"
    if field.kind in ("number", "integer"):
        return _number(field, text)
    if field.kind == "array":
        picked: list[str] = []
        for word in (w.strip() for w in text.split(",")):
            value = _choice(field, word) if word else None
            if value is None:
                return None, f"{word!r} is not one of the choices"
            if value not in picked:
                picked.append(value)
        low, high = field.schema.get("minItems"), field.schema.get("maxItems")
        if isinstance(low, int) and len(picked) < low:
            return None, f"at least {low} choices"
        if isinstance(high, int) and len(picked) > high:
            return None, f"at most {high} choices"
        return picked, None
    if field.choices:
        value = _choice(field, text)
        return (value, None) if value is not None else (None, "one of the choices")
    why = _check_string(field, text)
    return (None, why) if why else (text, None)


def describe_field(field: FormField) -> Sequence[str]:
    """The lines that present ``field`` before its answer is read."""
    required = " (required)" if field.required else ""
    lines = [f"  {field.title}{required}"]
    if field.description:
        lines.append(f"    {field.description}")
    for number, (_value, label) in enumerate(field.choices, 1):
        lines.append(f"    {number}. {label}")
    return lines
