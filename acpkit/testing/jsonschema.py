"""
Hypothesis strategies that generate JSON values from the ACP JSON schemas.

``hypothesis-jsonschema`` does not work with current Hypothesis releases, so acpkit ships
its own generator for the subset of JSON Schema (draft 2020-12) that the ACP schemas use:

- ``type`` (one name or a list, including ``"null"``), ``const``, ``enum``;
- ``$ref`` to ``#/$defs/<Name>`` (recursion is bounded, see ``max_recursion``);
- ``properties``, ``required``, ``additionalProperties`` (``true``, ``false`` or a schema),
  ``unevaluatedProperties: true``;
- ``allOf`` (merged), ``anyOf``, ``oneOf`` (exactly one branch: tagged unions use their
  ``discriminator`` / ``const`` tags, other unions filter with a validator), ``not``;
- ``items``, ``minLength``, ``minimum``, ``maximum``, and the ``format`` values
  ``int8``...``int64``, ``uint8``...``uint64``, ``float``, ``double`` and ``uri``;
- annotations (``title``, ``description``, ``default``, ``examples``, ``x-*``...) are ignored.

Any other keyword raises `SchemaError` when the strategy is built, so that a schema update
that starts using a new keyword fails loudly instead of producing invalid data.

Public API: `load_schema`, `for_definition`, `from_schema`, `is_valid`, `SchemaError`.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import resources
from types import MappingProxyType
from typing import Any, Final

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

__all__ = [
    "SchemaError",
    "for_definition",
    "from_schema",
    "is_valid",
    "load_schema",
]

_Schema = Mapping[str, Any]

_ANNOTATIONS: Final = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$schema",
    }
)
_SUPPORTED: Final = frozenset(
    {
        "type",
        "$ref",
        "$defs",
        "properties",
        "required",
        "additionalProperties",
        "unevaluatedProperties",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "discriminator",
        "const",
        "enum",
        "items",
        "format",
        "minimum",
        "maximum",
        "minLength",
    }
)
_TYPES: Final = ("null", "boolean", "integer", "number", "string", "array", "object")
_INTEGER_FORMATS: Final[Mapping[str, tuple[int, int]]] = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
}
_NUMBER_FORMATS: Final = frozenset({"float", "double"})
_STRING_FORMATS: Final = frozenset({"uri"})
_REF_PREFIX: Final = "#/$defs/"

#: Characters that JSON encoders and line framing get wrong most often.
_TRICKY_CHARACTERS: Final = '"\\/\n\r\t\b\f\x00\x1f\x7f\u2028\u2029\u0085\u200b\ufeffé中😀'

_MAX_ITEMS: Final = 4
_MAX_EXTRA_KEYS: Final = 2
_MAX_STRING: Final = 12


class SchemaError(ValueError):
    """
    The schema uses something this generator does not support, or contradicts itself.

    ``path`` is a JSON-pointer-like location of the offending keyword.
    """

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path or '#'}: {message}")
        self.path = path
        self.message = message


# --------------------------------------------------------------------------------------
# Loading the vendored schemas
# --------------------------------------------------------------------------------------


@functools.cache
def load_schema(*, unstable: bool = False) -> Mapping[str, Any]:
    """
    Return the vendored ACP v1 JSON schema (``schema.unstable.json`` when ``unstable``).

    Read once from the ``acpkit`` package data and cached; the top level is read-only.
    """
    name = "schema.unstable.json" if unstable else "schema.json"
    text = resources.files("acpkit").joinpath("schemas", "v1", name).read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return MappingProxyType(loaded)


# --------------------------------------------------------------------------------------
# Keyword checking (done once, over the whole schema, at construction time)
# --------------------------------------------------------------------------------------


def _check_schema(schema: Any, path: str, defs: Mapping[str, Any]) -> None:
    """Raise `SchemaError` for the first keyword or value outside the supported subset."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, Mapping):
        raise SchemaError(path, f"a schema must be an object or a boolean, not {schema!r}")
    for key, value in schema.items():
        where = f"{path}/{key}"
        if key in _ANNOTATIONS or key.startswith("x-"):
            continue
        if key not in _SUPPORTED:
            raise SchemaError(where, f"unsupported JSON Schema keyword {key!r}")
        if key in ("properties", "$defs"):
            if not isinstance(value, Mapping):
                raise SchemaError(where, "must be an object")
            for name, sub in value.items():
                _check_schema(sub, f"{where}/{name}", defs)
        elif key in ("allOf", "anyOf", "oneOf"):
            if not isinstance(value, list) or not value:
                raise SchemaError(where, "must be a non-empty array of schemas")
            for index, sub in enumerate(value):
                _check_schema(sub, f"{where}/{index}", defs)
        elif key in ("not", "items", "additionalProperties"):
            _check_schema(value, where, defs)
        elif key == "unevaluatedProperties":
            if value is not True:
                raise SchemaError(where, "only 'unevaluatedProperties: true' is supported")
        elif key == "$ref":
            _ref_name(value, defs, where)
        elif key == "type":
            names = [value] if isinstance(value, str) else value
            if not isinstance(names, list) or not names or any(n not in _TYPES for n in names):
                raise SchemaError(where, f"bad type {value!r}")
        elif key == "required":
            if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
                raise SchemaError(where, "must be an array of property names")
        elif key == "enum":
            if not isinstance(value, list) or not value:
                raise SchemaError(where, "must be a non-empty array")
        elif key in ("minimum", "maximum"):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise SchemaError(where, "must be a number")
        elif key == "minLength":
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SchemaError(where, "must be a non-negative integer")
        elif key == "format":
            _check_format(schema, value, where)
        elif key == "discriminator":
            _check_discriminator(schema, value, where, defs)


def _check_format(schema: _Schema, value: Any, where: str) -> None:
    """Accept only formats whose meaning the generator implements."""
    known = set(_INTEGER_FORMATS) | _NUMBER_FORMATS | _STRING_FORMATS
    if value not in known:
        raise SchemaError(where, f"unsupported format {value!r}")
    types = _declared_types(schema)
    if value in _INTEGER_FORMATS and "integer" not in types:
        raise SchemaError(where, f"format {value!r} needs type 'integer'")
    if value in _NUMBER_FORMATS and "number" not in types:
        raise SchemaError(where, f"format {value!r} needs type 'number'")
    if value in _STRING_FORMATS and "string" not in types:
        raise SchemaError(where, f"format {value!r} needs type 'string'")


def _check_discriminator(schema: _Schema, value: Any, where: str, defs: Mapping[str, Any]) -> None:
    """A discriminator must name a property that pins each ``oneOf`` branch to its own tag."""
    if not isinstance(value, Mapping) or set(value) != {"propertyName"}:
        raise SchemaError(where, "only {'propertyName': ...} discriminators are supported")
    if "oneOf" not in schema:
        raise SchemaError(where, "a discriminator needs a sibling 'oneOf'")
    if not _exclusive_by_tags(schema["oneOf"], value["propertyName"], defs):
        raise SchemaError(
            where,
            f"the oneOf branches do not each pin a distinct const for {value['propertyName']!r}",
        )


def _ref_name(ref: Any, defs: Mapping[str, Any], where: str) -> str:
    """Return the definition name of a ``#/$defs/<Name>`` reference, or raise."""
    if not isinstance(ref, str) or not ref.startswith(_REF_PREFIX):
        raise SchemaError(where, f"only '#/$defs/<Name>' references are supported, not {ref!r}")
    name = ref[len(_REF_PREFIX) :]
    if name not in defs:
        raise SchemaError(where, f"reference to unknown definition {name!r}")
    return name


def _declared_types(schema: _Schema) -> frozenset[str]:
    """The set of JSON types a schema's own ``type`` keyword allows (all when absent)."""
    if "type" not in schema:
        return frozenset(_TYPES)
    value = schema["type"]
    names = {value} if isinstance(value, str) else set(value)
    if "number" in names:
        names.add("integer")
    return frozenset(names)


def _pinned_tag(schema: Any, prop: str | None, defs: Mapping[str, Any]) -> tuple[bool, Any]:
    """
    Find the constant a branch pins: its ``const`` (``prop`` None) or ``properties[prop].const``.

    Looks through ``$ref`` and ``allOf`` without descending into other combinators.
    """
    if not isinstance(schema, Mapping):
        return False, None
    if prop is None:
        if "const" in schema:
            return True, schema["const"]
    else:
        sub = schema.get("properties", {}).get(prop)
        if isinstance(sub, Mapping) and "const" in sub and prop in schema.get("required", []):
            return True, sub["const"]
    parts: list[Any] = list(schema.get("allOf", []))
    if "$ref" in schema:
        parts.append(defs[schema["$ref"][len(_REF_PREFIX) :]])
    for part in parts:
        found, tag = _pinned_tag(part, prop, defs)
        if found:
            return True, tag
    return False, None


def _exclusive_by_tags(branches: Sequence[Any], prop: str | None, defs: Mapping[str, Any]) -> bool:
    """True when every branch pins a distinct constant, so at most one can ever match."""
    tags = []
    for branch in branches:
        found, tag = _pinned_tag(branch, prop, defs)
        if not found:
            return False
        tags.append(_canonical(tag))
    return len(set(tags)) == len(tags)


# --------------------------------------------------------------------------------------
# Validation of the supported subset (used to filter `not` and untagged `oneOf`)
# --------------------------------------------------------------------------------------


def _canonical(value: Any) -> str:
    """A key under which JSON-equal values (1 == 1.0, but true != 1) compare equal."""

    def norm(v: Any) -> Any:
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return v
        if isinstance(v, float) and v.is_integer():
            return ["#num", int(v)]
        if isinstance(v, int | float):
            return ["#num", v]
        if isinstance(v, list | tuple):
            return [norm(x) for x in v]
        if isinstance(v, Mapping):
            return {k: norm(x) for k, x in v.items()}
        raise TypeError(f"not a JSON value: {v!r}")

    return json.dumps(norm(value), sort_keys=True)


def _json_equal(left: Any, right: Any) -> bool:
    """JSON equality: numbers by value, booleans distinct from numbers, deep for containers."""
    return _canonical(left) == _canonical(right)


def _has_type(value: Any, name: str) -> bool:
    """Whether ``value`` is an instance of the JSON Schema type ``name``."""
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        if isinstance(value, bool):
            return False
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if name == "number":
        return not isinstance(value, bool) and isinstance(value, int | float)
    if name == "string":
        return isinstance(value, str)
    if name == "array":
        return isinstance(value, list)
    return isinstance(value, dict)


def is_valid(schema: Any, value: Any, defs: Mapping[str, Any]) -> bool:
    """
    Whether ``value`` is valid against ``schema`` (the supported subset; formats ignored).

    ``$ref`` targets are looked up in ``defs``. Annotation-only keywords are ignored, as in
    draft 2020-12; call this only on schemas that passed the keyword check.
    """
    if schema is True:
        return True
    if schema is False:
        return False
    if "type" in schema:
        types = [schema["type"]] if isinstance(schema["type"], str) else schema["type"]
        if not any(_has_type(value, t) for t in types):
            return False
    if "const" in schema and not _json_equal(schema["const"], value):
        return False
    if "enum" in schema and not any(_json_equal(e, value) for e in schema["enum"]):
        return False
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return False
        if "maximum" in schema and value > schema["maximum"]:
            return False
    if isinstance(value, str) and len(value) < schema.get("minLength", 0):
        return False
    if isinstance(value, dict) and not _valid_object(schema, value, defs):
        return False
    if isinstance(value, list) and "items" in schema:
        if not all(is_valid(schema["items"], item, defs) for item in value):
            return False
    if "$ref" in schema and not is_valid(defs[schema["$ref"][len(_REF_PREFIX) :]], value, defs):
        return False
    if "allOf" in schema and not all(is_valid(s, value, defs) for s in schema["allOf"]):
        return False
    if "anyOf" in schema and not any(is_valid(s, value, defs) for s in schema["anyOf"]):
        return False
    if "oneOf" in schema and sum(1 for s in schema["oneOf"] if is_valid(s, value, defs)) != 1:
        return False
    return not ("not" in schema and is_valid(schema["not"], value, defs))


def _valid_object(schema: _Schema, value: dict[str, Any], defs: Mapping[str, Any]) -> bool:
    """Check ``required``, ``properties`` and ``additionalProperties`` on an object."""
    if any(name not in value for name in schema.get("required", ())):
        return False
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        sub = properties.get(key, extra)
        if not is_valid(sub, item, defs):
            return False
    return True


# --------------------------------------------------------------------------------------
# Leaf strategies
# --------------------------------------------------------------------------------------


@functools.cache
def _strings(min_size: int = 0, max_size: int = _MAX_STRING) -> SearchStrategy[str]:
    """Text that mixes tricky characters (quotes, U+2028, newlines, astral) with any UTF-8."""
    # Joined from single characters: st.text() would fold this one_of into one character
    # class and the tricky characters would (almost) never be drawn.
    characters = st.one_of(
        st.sampled_from(_TRICKY_CHARACTERS),
        st.characters(codec="utf-8"),
    )
    return st.lists(characters, min_size=min_size, max_size=max(max_size, min_size)).map("".join)


@functools.cache
def _uris() -> SearchStrategy[str]:
    """Absolute URIs (scheme, authority, path), the ``format: uri`` values."""
    segment = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-._~", min_size=1, max_size=8)
    return st.builds(
        lambda scheme, host, path: f"{scheme}://{host}/{'/'.join(path)}",
        st.sampled_from(["https", "http", "file", "ws"]),
        st.sampled_from(["example.com", "localhost", "127.0.0.1:8080", ""]),
        st.lists(segment, max_size=3),
    )


@functools.cache
def _json_scalars() -> SearchStrategy[Any]:
    """Any JSON scalar."""
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**64 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        _strings(),
    )


@functools.cache
def _json_values() -> SearchStrategy[Any]:
    """Any JSON value, kept small."""
    return st.recursive(
        _json_scalars(),
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.dictionaries(_strings(max_size=6), children, max_size=3),
        ),
        max_leaves=6,
    )


# --------------------------------------------------------------------------------------
# The compiler: schema -> strategy
# --------------------------------------------------------------------------------------


class _Alternative:
    """One disjunct of a schema: all of ``atoms`` hold and none of ``excluded`` matches."""

    __slots__ = ("atoms", "excluded")

    def __init__(self, atoms: tuple[_Schema, ...], excluded: tuple[Any, ...]) -> None:
        self.atoms = atoms
        self.excluded = excluded

    def join(self, other: _Alternative) -> _Alternative:
        """Both alternatives at once."""
        return _Alternative(self.atoms + other.atoms, self.excluded + other.excluded)


_LOCAL_KEYWORDS: Final = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "unevaluatedProperties",
        "const",
        "enum",
        "items",
        "format",
        "minimum",
        "maximum",
        "minLength",
    }
)


def _significant(schema: _Schema) -> frozenset[str]:
    """The keywords of ``schema`` that constrain values (annotations dropped)."""
    return frozenset(
        k for k in schema if k not in _ANNOTATIONS and not k.startswith("x-") and k != "$defs"
    )


class _Compiler:
    """Turns schemas into strategies, sharing one strategy per definition."""

    def __init__(
        self,
        defs: Mapping[str, Any],
        *,
        unknown_keys: bool,
        max_items: int,
        max_recursion: int,
    ) -> None:
        self._defs = defs
        self._unknown_keys = unknown_keys
        self._max_items = max_items
        self._max_recursion = max_recursion
        self._by_definition: dict[tuple[str, int], SearchStrategy[Any]] = {}
        self._checked = False

    def check(self) -> None:
        """Check every definition's keywords once."""
        if not self._checked:
            for name, sub in self._defs.items():
                _check_schema(sub, f"#/$defs/{name}", self._defs)
            self._checked = True

    def _matches(self, schema: Any, value: Any) -> bool:
        return is_valid(schema, value, self._defs)

    def _excluding(
        self, strategy: SearchStrategy[Any], excluded: Sequence[Any]
    ) -> SearchStrategy[Any]:
        """``strategy`` minus the values that match any of ``excluded``."""
        if not excluded:
            return strategy
        return strategy.filter(lambda v: not any(self._matches(s, v) for s in excluded))

    # -- entry points ------------------------------------------------------------------

    def definition(self, name: str, stack: tuple[str, ...] = ()) -> SearchStrategy[Any]:
        """The strategy for ``$defs[name]``; bounded when ``name`` recurses into itself."""
        depth = stack.count(name)
        if depth > self._max_recursion:
            return st.nothing()
        key = (name, depth)
        if key not in self._by_definition:
            self._by_definition[key] = self.compile(self._defs[name], (*stack, name))
        return self._by_definition[key]

    def compile(self, schema: Any, stack: tuple[str, ...]) -> SearchStrategy[Any]:
        """The strategy for any (already checked) schema."""
        if schema is True:
            return _json_values()
        if schema is False:
            return st.nothing()
        keys = _significant(schema)
        if not keys:
            return _json_values()
        if keys == {"$ref"}:
            return self.definition(schema["$ref"][len(_REF_PREFIX) :], stack)
        if keys == {"allOf"} and len(schema["allOf"]) == 1:
            return self.compile(schema["allOf"][0], stack)
        if keys == {"anyOf"}:
            return st.one_of([self.compile(b, stack) for b in schema["anyOf"]])
        if keys <= {"oneOf", "discriminator"}:
            branches = schema["oneOf"]
            parts = [self.compile(b, stack) for b in branches]
            if not self._exclusive(schema):
                parts = [
                    self._excluding(part, branches[:i] + branches[i + 1 :])
                    for i, part in enumerate(parts)
                ]
            return st.one_of(parts)
        expanded: list[str] = []
        alternatives = self._expand(schema, stack, (), expanded)
        inner = (*stack, *expanded)
        return st.one_of([self._alternative(alt, inner) for alt in alternatives])

    def _exclusive(self, schema: _Schema) -> bool:
        """Whether a ``oneOf``'s branches can never match together (tagged unions)."""
        branches = schema["oneOf"]
        if "discriminator" in schema:
            return True  # checked by _check_discriminator
        return _exclusive_by_tags(branches, None, self._defs)

    # -- disjunctive normal form ---------------------------------------------------------

    def _expand(
        self,
        schema: Any,
        stack: tuple[str, ...],
        level: tuple[str, ...],
        expanded: list[str],
    ) -> list[_Alternative]:
        """Rewrite ``schema`` as a list of alternatives, inlining refs and combinators."""
        if schema is True:
            return [_Alternative((), ())]
        if schema is False:
            return []
        local = {k: v for k, v in schema.items() if k in _LOCAL_KEYWORDS}
        alternatives = [_Alternative((local,) if local else (), ())]
        if "not" in schema:
            alternatives = [alt.join(_Alternative((), (schema["not"],))) for alt in alternatives]
        if "$ref" in schema:
            name = schema["$ref"][len(_REF_PREFIX) :]
            if name in level:
                raise SchemaError(_REF_PREFIX + name, "$ref cycle without an enclosing value")
            if (*stack, *expanded).count(name) > self._max_recursion:
                return []
            expanded.append(name)
            target = self._expand(self._defs[name], stack, (*level, name), expanded)
            alternatives = _product(alternatives, target)
        for branch in schema.get("allOf", ()):
            alternatives = _product(alternatives, self._expand(branch, stack, level, expanded))
        if "anyOf" in schema:
            options = [
                alt
                for branch in schema["anyOf"]
                for alt in self._expand(branch, stack, level, expanded)
            ]
            alternatives = _product(alternatives, options)
        if "oneOf" in schema:
            branches = schema["oneOf"]
            exclusive = self._exclusive(schema)
            options = []
            for index, branch in enumerate(branches):
                others = () if exclusive else tuple(branches[:index] + branches[index + 1 :])
                for alt in self._expand(branch, stack, level, expanded):
                    options.append(alt.join(_Alternative((), others)))
            alternatives = _product(alternatives, options)
        return alternatives

    # -- one alternative -------------------------------------------------------------------

    def _alternative(self, alt: _Alternative, stack: tuple[str, ...]) -> SearchStrategy[Any]:
        atoms = alt.atoms
        fixed = self._fixed_values(atoms)
        if fixed is not None:
            strategy: SearchStrategy[Any] = st.sampled_from(fixed) if fixed else st.nothing()
            return self._excluding(strategy, alt.excluded)
        types = frozenset(_TYPES)
        for atom in atoms:
            types &= _declared_types(atom)
        if "number" in types:
            types -= {"integer"}
        builders: dict[str, Callable[[], SearchStrategy[Any]]] = {
            "null": st.none,
            "boolean": st.booleans,
            "integer": lambda: self._integers(atoms),
            "number": lambda: self._numbers(atoms),
            "string": lambda: self._text(atoms),
            "array": lambda: self._arrays(atoms, stack),
            "object": lambda: self._objects(atoms, stack),
        }
        parts = [builders[name]() for name in _TYPES if name in types]
        return self._excluding(st.one_of(parts), alt.excluded)

    def _fixed_values(self, atoms: Sequence[_Schema]) -> list[Any] | None:
        """For ``const``/``enum`` atoms, the allowed values that satisfy every atom."""
        candidates: list[Any] | None = None
        for atom in atoms:
            if "const" in atom:
                candidates = [atom["const"]]
                break
            if "enum" in atom and candidates is None:
                candidates = list(atom["enum"])
        if candidates is None:
            return None
        return [c for c in candidates if all(self._matches(a, c) for a in atoms)]

    def _integers(self, atoms: Sequence[_Schema]) -> SearchStrategy[int]:
        low, high = _bounds(atoms, "integer")
        if low is not None:
            low = math.ceil(low)
        if high is not None:
            high = math.floor(high)
        if low is not None and high is not None and low > high:
            return st.nothing()
        return st.integers(min_value=low, max_value=high)

    def _numbers(self, atoms: Sequence[_Schema]) -> SearchStrategy[Any]:
        low, high = _bounds(atoms, "number")
        if low is not None and high is not None and low > high:
            return st.nothing()
        single = any(a.get("format") == "float" for a in atoms)
        floats = st.floats(
            min_value=low,
            max_value=high,
            allow_nan=False,
            allow_infinity=False,
            width=32 if single else 64,
        )
        int_low = None if low is None else math.ceil(low)
        int_high = None if high is None else math.floor(high)
        if int_low is not None and int_high is not None and int_low > int_high:
            return floats
        if int_low is None:
            int_low = -(2**53)
        if int_high is None:
            int_high = 2**53
        return st.one_of(floats, st.integers(min_value=int_low, max_value=int_high))

    def _text(self, atoms: Sequence[_Schema]) -> SearchStrategy[str]:
        min_size = max((a.get("minLength", 0) for a in atoms), default=0)
        if any(a.get("format") == "uri" for a in atoms if "string" in _declared_types(a)):
            return _uris().filter(lambda s: len(s) >= min_size)
        return _strings(min_size=min_size)

    def _conjunction(self, schemas: Sequence[Any], stack: tuple[str, ...]) -> SearchStrategy[Any]:
        if not schemas:
            return _json_values()
        if len(schemas) == 1:
            return self.compile(schemas[0], stack)
        return self.compile({"allOf": list(schemas)}, stack)

    def _arrays(self, atoms: Sequence[_Schema], stack: tuple[str, ...]) -> SearchStrategy[Any]:
        items = [a["items"] for a in atoms if "items" in a]
        elements = self._conjunction(items, stack)
        if elements.is_empty:
            return st.just([])
        return st.lists(elements, max_size=self._max_items)

    def _objects(self, atoms: Sequence[_Schema], stack: tuple[str, ...]) -> SearchStrategy[Any]:
        names: list[str] = []
        for atom in atoms:
            names.extend(n for n in atom.get("properties", {}) if n not in names)
        required = {n for atom in atoms for n in atom.get("required", ())}
        names.extend(sorted(required - set(names)))
        closed = False
        extra_schemas: list[Any] = []
        for atom in atoms:
            extra = atom.get("additionalProperties", True)
            if extra is False:
                closed = True
            elif extra is not True:
                extra_schemas.append(extra)
        fields: dict[str, SearchStrategy[Any]] = {}
        optional: dict[str, SearchStrategy[Any]] = {}
        for name in names:
            schemas: list[Any] = []
            forbidden = False
            for atom in atoms:
                properties = atom.get("properties", {})
                if name in properties:
                    schemas.append(properties[name])
                elif atom.get("additionalProperties", True) is False:
                    forbidden = True
                elif atom.get("additionalProperties", True) is not True:
                    schemas.append(atom["additionalProperties"])
            if forbidden:
                if name in required:
                    return st.nothing()
                continue
            value = self._conjunction(schemas, stack)
            if name in required:
                if value.is_empty:
                    return st.nothing()
                fields[name] = value
            elif not value.is_empty:
                optional[name] = value
        base = st.fixed_dictionaries(fields, optional=optional)
        # A map (``_meta``, ``env``...) declares no properties but says what extra keys hold;
        # any other object is a record, which gets unknown keys only when asked for.
        is_map = not names and any("additionalProperties" in atom for atom in atoms)
        if closed or not (is_map or self._unknown_keys):
            return base
        values = self._conjunction(extra_schemas, stack)
        declared = frozenset(names)
        keys = _strings(max_size=8).filter(lambda k: k not in declared)
        extras = st.dictionaries(keys, values, max_size=3 if is_map else _MAX_EXTRA_KEYS)
        return st.tuples(base, extras).map(lambda pair: {**pair[1], **pair[0]})


def _bounds(atoms: Iterable[_Schema], kind: str) -> tuple[float | None, float | None]:
    """The tightest ``minimum``/``maximum`` and format range over atoms allowing ``kind``."""
    low: float | None = None
    high: float | None = None
    for atom in atoms:
        limits: list[tuple[float | None, float | None]] = []
        if "minimum" in atom or "maximum" in atom:
            limits.append((atom.get("minimum"), atom.get("maximum")))
        fmt = atom.get("format")
        if kind == "integer" and isinstance(fmt, str) and fmt in _INTEGER_FORMATS:
            limits.append(_INTEGER_FORMATS[fmt])
        for lo, hi in limits:
            if lo is not None:
                low = lo if low is None else max(low, lo)
            if hi is not None:
                high = hi if high is None else min(high, hi)
    return low, high


def _product(left: list[_Alternative], right: list[_Alternative]) -> list[_Alternative]:
    """Every alternative of ``left`` joined with every alternative of ``right``."""
    return [a.join(b) for a, b in itertools.product(left, right)]


# --------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------


def from_schema(
    schema: Mapping[str, Any],
    *,
    defs: Mapping[str, Any] | None = None,
    unknown_keys: bool = True,
    max_items: int = _MAX_ITEMS,
    max_recursion: int = 2,
) -> SearchStrategy[Any]:
    """
    A strategy for JSON values valid against ``schema``.

    ``$ref: "#/$defs/<Name>"`` resolves in ``defs`` (default: ``schema["$defs"]``).
    ``unknown_keys`` adds a few unknown keys to records (objects that do not forbid them);
    maps, i.e. objects that declare no properties but an ``additionalProperties`` (such as
    ``_meta``), always get arbitrary keys. Arrays hold at
    most ``max_items`` items; a definition may recurse into itself ``max_recursion`` times.

    Raises `SchemaError` right away if the schema (or any definition) uses a keyword
    outside the supported subset.
    """
    definitions: Mapping[str, Any] = schema.get("$defs", {}) if defs is None else defs
    compiler = _Compiler(
        definitions,
        unknown_keys=unknown_keys,
        max_items=max_items,
        max_recursion=max_recursion,
    )
    compiler.check()
    _check_schema(schema, "#", definitions)
    return compiler.compile(schema, ())


@functools.cache
def _shared_compiler(unstable: bool, unknown_keys: bool) -> _Compiler:
    compiler = _Compiler(
        load_schema(unstable=unstable)["$defs"],
        unknown_keys=unknown_keys,
        max_items=_MAX_ITEMS,
        max_recursion=2,
    )
    compiler.check()
    return compiler


def for_definition(
    name: str, *, unstable: bool = False, unknown_keys: bool = True
) -> SearchStrategy[Any]:
    """
    A strategy for JSON values valid against ``$defs[name]`` of the vendored ACP schema.

    ``unstable`` selects ``schema.unstable.json``; ``unknown_keys`` as in `from_schema`.
    Raises `KeyError` for an unknown definition name.
    """
    compiler = _shared_compiler(unstable, unknown_keys)
    if name not in load_schema(unstable=unstable)["$defs"]:
        raise KeyError(f"no definition {name!r} in the ACP schema")
    return compiler.definition(name)
