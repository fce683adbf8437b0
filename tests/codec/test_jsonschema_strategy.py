"""Tests for acpkit.testing.jsonschema: JSON generated from (the ACP) JSON schemas."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from acpkit.testing.jsonschema import (
    SchemaError,
    for_definition,
    from_schema,
    is_valid,
    load_schema,
)
from tests.helpers import FIND_LIMIT, examples

PER_DEFINITION = settings(
    max_examples=examples(1 / 12), suppress_health_check=[HealthCheck.too_slow]
)
UNIT = settings(max_examples=examples(1), suppress_health_check=[HealthCheck.too_slow])
SEARCH = settings(max_examples=FIND_LIMIT, database=None, phases=[Phase.generate])


@functools.cache
def _validator(name: str, unstable: bool) -> jsonschema.Draft202012Validator:
    defs = dict(load_schema(unstable=unstable)["$defs"])
    return jsonschema.Draft202012Validator({"$defs": defs, "$ref": f"#/$defs/{name}"})


def _assert_valid(schema: Mapping[str, Any], value: Any) -> None:
    errors = list(jsonschema.Draft202012Validator(dict(schema)).iter_errors(value))
    assert not errors, f"{value!r}: {errors[0].message}"


def _all_definitions() -> list[Any]:
    return [
        pytest.param(name, unstable, id=f"{'unstable' if unstable else 'stable'}-{name}")
        for unstable in (False, True)
        for name in load_schema(unstable=unstable)["$defs"]
    ]


# ----------------------------------------------------------------------------------------
# The ACP schemas themselves
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "unstable"), _all_definitions())
@PER_DEFINITION
@given(data=st.data())
def test_every_definition_generates_valid_json(name: str, unstable: bool, data: Any) -> None:
    """Every $def of the stable and unstable schema yields values that jsonschema accepts."""
    value = data.draw(for_definition(name, unstable=unstable))
    errors = list(_validator(name, unstable).iter_errors(value))
    assert not errors, errors[0].message
    assert is_valid(load_schema(unstable=unstable)["$defs"][name], value, _defs(unstable))


@functools.cache
def _defs(unstable: bool) -> Mapping[str, Any]:
    defs: Mapping[str, Any] = load_schema(unstable=unstable)["$defs"]
    return defs


@pytest.mark.parametrize("unstable", [False, True], ids=["stable", "unstable"])
@settings(max_examples=examples(1 / 4), suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_whole_schema_generates_valid_messages(unstable: bool, data: Any) -> None:
    """The root schema (any ACP message) generates JSON-RPC messages valid against it."""
    schema = load_schema(unstable=unstable)
    message = data.draw(_root_strategy(unstable))
    errors = list(_root_validator(unstable).iter_errors(message))
    assert not errors, errors[0].message
    assert message["jsonrpc"] == "2.0"
    assert is_valid(dict(schema), message, schema["$defs"])


@functools.cache
def _root_strategy(unstable: bool) -> st.SearchStrategy[Any]:
    return from_schema(load_schema(unstable=unstable))


@functools.cache
def _root_validator(unstable: bool) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(dict(load_schema(unstable=unstable)))


@pytest.mark.parametrize("unstable", [False, True], ids=["stable", "unstable"])
@UNIT
@given(data=st.data())
def test_without_unknown_keys_objects_hold_only_declared_keys(unstable: bool, data: Any) -> None:
    """With unknown_keys=False a record (here a prompt request) has only its declared keys."""
    value = data.draw(for_definition("PromptRequest", unstable=unstable, unknown_keys=False))
    assert set(value) <= {"sessionId", "prompt", "messageId", "_meta"}
    assert {"sessionId", "prompt"} <= set(value)
    for block in value["prompt"]:
        declared = set(_defs(unstable)[_content_def(block["type"])]["properties"]) | {"type"}
        assert set(block) <= declared


def _content_def(tag: str) -> str:
    return {
        "text": "TextContent",
        "image": "ImageContent",
        "audio": "AudioContent",
        "resource_link": "ResourceLink",
        "resource": "EmbeddedResource",
    }[tag]


def test_unknown_keys_are_generated_by_default() -> None:
    """By default records sometimes carry keys the schema does not declare."""
    declared = set(_defs(False)["PromptRequest"]["properties"])
    found = find(
        for_definition("PromptRequest"), lambda v: bool(set(v) - declared), settings=SEARCH
    )
    assert set(found) - declared


def test_meta_is_a_free_form_object_even_without_unknown_keys() -> None:
    """`_meta` gets arbitrary keys even when unknown record keys are turned off."""
    strategy = for_definition("PromptRequest", unknown_keys=False)
    found = find(strategy, lambda v: bool(v.get("_meta")), settings=SEARCH)
    assert isinstance(found["_meta"], dict) and found["_meta"]


def _has_key_value(key: str, value: Any) -> Callable[[Any], bool]:
    def check(candidate: Any) -> bool:
        return bool(candidate[key] == value)

    return check


def test_tagged_union_covers_every_tag() -> None:
    """SessionUpdate generation reaches every sessionUpdate tag of the stable schema."""
    tags = {
        b["properties"]["sessionUpdate"]["const"] for b in _defs(False)["SessionUpdate"]["oneOf"]
    }
    strategy = for_definition("SessionUpdate")
    for tag in tags:
        found = find(strategy, _has_key_value("sessionUpdate", tag), settings=SEARCH)
        assert found["sessionUpdate"] == tag


def test_load_schema_is_cached_and_read_only() -> None:
    """load_schema reads the packaged files once and returns a read-only mapping."""
    stable = load_schema()
    assert stable is load_schema()
    assert len(stable["$defs"]) == 178
    assert len(load_schema(unstable=True)["$defs"]) > len(stable["$defs"])
    with pytest.raises(TypeError):
        stable["title"] = "changed"  # type: ignore[index]


def test_unknown_definition_name_is_a_key_error() -> None:
    """for_definition names the missing definition."""
    with pytest.raises(KeyError, match="NoSuchThing"):
        for_definition("NoSuchThing")


# ----------------------------------------------------------------------------------------
# Unsupported schemas fail loudly at construction time
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "where", "what"),
    [
        ({"type": "string", "pattern": "^a"}, "#/pattern", "unsupported JSON Schema keyword"),
        (
            {"type": "object", "properties": {"a": {"type": "array", "maxItems": 2}}},
            "#/properties/a/maxItems",
            "'maxItems'",
        ),
        (
            {"$defs": {"Unused": {"patternProperties": {}}}, "type": "null"},
            "#/$defs/Unused/patternProperties",
            "'patternProperties'",
        ),
        ({"not": {"if": {"type": "null"}}}, "#/not/if", "'if'"),
        ({"type": "string", "format": "date-time"}, "#/format", "unsupported format"),
        ({"type": "string", "format": "int32"}, "#/format", "needs type 'integer'"),
        ({"type": "object", "unevaluatedProperties": False}, "#/unevaluatedProperties", "true"),
        ({"$ref": "other.json#/x"}, "#/$ref", "#/$defs/<Name>"),
        ({"$ref": "#/$defs/Missing", "$defs": {}}, "#/$ref", "unknown definition 'Missing'"),
        ({"type": "text"}, "#/type", "bad type"),
        ({"anyOf": []}, "#/anyOf", "non-empty array"),
        (
            {
                "oneOf": [
                    {"type": "object", "properties": {"k": {"const": "a"}}, "required": ["k"]},
                    {"type": "object", "properties": {"k": {"type": "string"}}},
                ],
                "discriminator": {"propertyName": "k"},
            },
            "#/discriminator",
            "distinct const for 'k'",
        ),
    ],
)
def test_unsupported_schema_raises_at_construction(
    schema: dict[str, Any], where: str, what: str
) -> None:
    """A keyword, format, ref or discriminator outside the subset raises SchemaError early."""
    with pytest.raises(SchemaError) as raised:
        from_schema(schema)
    assert raised.value.path == where
    assert what in raised.value.message
    assert str(raised.value).startswith(where)


def test_ref_cycle_without_structure_is_an_error() -> None:
    """A definition that is its own allOf (no value in between) is rejected, not looped on."""
    schema = {"$defs": {"A": {"type": "object", "allOf": [{"$ref": "#/$defs/A"}]}}}
    with pytest.raises(SchemaError, match="cycle"):
        from_schema({"$ref": "#/$defs/A", **schema})


# ----------------------------------------------------------------------------------------
# Keyword semantics on small hand-written schemas
# ----------------------------------------------------------------------------------------

ONE_OF_OVERLAP = {
    "oneOf": [
        {"type": "integer", "minimum": 0, "maximum": 20},
        {"type": "integer", "minimum": 10, "maximum": 30},
    ]
}


@UNIT
@given(from_schema(ONE_OF_OVERLAP))
def test_one_of_values_match_exactly_one_branch(value: int) -> None:
    """Untagged oneOf never yields a value in the overlap of two branches."""
    assert 0 <= value < 10 or 20 < value <= 30
    _assert_valid(ONE_OF_OVERLAP, value)


TAGGED = {
    "type": "object",
    "properties": {"id": {"type": "string"}},
    "required": ["id"],
    "oneOf": [
        {
            "type": "object",
            "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
            "required": ["kind", "x"],
        },
        {
            "type": "object",
            "properties": {"kind": {"const": "b"}, "y": {"type": "boolean"}},
            "required": ["kind"],
        },
    ],
    "discriminator": {"propertyName": "kind"},
}


@UNIT
@given(from_schema(TAGGED))
def test_discriminated_one_of_merges_siblings_and_picks_one_tag(value: dict[str, Any]) -> None:
    """A tagged oneOf with sibling properties yields the sibling keys plus one branch's keys."""
    assert isinstance(value["id"], str)
    assert value["kind"] in ("a", "b")
    if value["kind"] == "a":
        assert isinstance(value["x"], int) and not isinstance(value["x"], bool)
    _assert_valid(TAGGED, value)


NOT_TWO = {"type": "integer", "minimum": 0, "maximum": 3, "not": {"const": 2}}


@UNIT
@given(from_schema(NOT_TWO))
def test_not_excludes_matching_values(value: int) -> None:
    """`not` removes exactly the values its schema matches."""
    assert value in (0, 1, 3)


def test_not_keeps_all_other_values() -> None:
    """Every value outside the `not` schema is still reachable."""
    strategy = from_schema(NOT_TWO)
    for wanted in (0, 1, 3):
        assert find(strategy, wanted.__eq__, settings=SEARCH) == wanted


OTHER_BRANCH = {
    "anyOf": [
        {"type": "object", "properties": {"type": {"const": "known"}}, "required": ["type"]},
        {
            "type": "object",
            "properties": {"type": {"type": "string"}},
            "required": ["type"],
            "not": {"properties": {"type": {"const": "known"}}, "required": ["type"]},
            "additionalProperties": True,
        },
    ]
}


@UNIT
@given(from_schema(OTHER_BRANCH))
def test_open_union_other_branch_is_valid(value: dict[str, Any]) -> None:
    """The ACP 'other' pattern (string tag, not a known one) generates valid objects."""
    assert isinstance(value["type"], str)
    _assert_valid(OTHER_BRANCH, value)


@UNIT
@given(
    from_schema({"const": {"a": [1, "x"]}}),
    from_schema({"enum": ["a", 3, None]}),
    from_schema({"allOf": [{"enum": ["a", "b", 3]}, {"type": "string"}]}),
)
def test_const_and_enum(const: Any, member: Any, narrowed: Any) -> None:
    """const yields its value, enum one of its members, allOf narrows an enum by type."""
    assert const == {"a": [1, "x"]}
    assert member in ("a", 3, None)
    assert narrowed in ("a", "b")


@pytest.mark.parametrize(
    ("fmt", "low", "high"),
    [
        ("int32", -(2**31), 2**31 - 1),
        ("uint16", 0, 2**16 - 1),
        ("uint32", 0, 2**32 - 1),
        ("int64", -(2**63), 2**63 - 1),
        ("uint64", 0, 2**64 - 1),
    ],
)
def test_integer_formats_reach_their_bounds_and_stay_inside(fmt: str, low: int, high: int) -> None:
    """Integer formats bound generation to their range, both ends included."""
    strategy = from_schema({"type": "integer", "format": fmt})
    assert find(strategy, lambda v: v <= low, settings=SEARCH) == low
    assert find(strategy, lambda v: v >= high, settings=SEARCH) == high

    @UNIT
    @given(strategy)
    def inside(value: int) -> None:
        assert low <= value <= high and isinstance(value, int) and not isinstance(value, bool)

    inside()


MIXED_BOUNDS = {
    "type": ["integer", "null"],
    "format": "uint16",
    "minimum": 1,
    "allOf": [{"maximum": 9}],
}


@UNIT
@given(from_schema(MIXED_BOUNDS), from_schema({"type": "number", "minimum": -1.5, "maximum": 2}))
def test_minimum_and_maximum_combine(integer: int | None, number: float) -> None:
    """minimum/maximum from several places and a format intersect; null stays allowed."""
    assert integer is None or 1 <= integer <= 9
    assert -1.5 <= number <= 2 and not isinstance(number, bool)


@UNIT
@given(
    from_schema({"type": "string", "minLength": 3}),
    from_schema({"type": "string", "format": "uri"}),
)
def test_string_min_length_and_uri(text: str, uri: str) -> None:
    """minLength counts code points; uri values have a scheme and '://'."""
    assert len(text) >= 3
    assert "://" in uri and uri.split("://")[0].isalpha()


@pytest.mark.parametrize("char", ["\u2028", "\u2029", '"', "\\", "\n", "é"])
def test_strings_include_tricky_characters(char: str) -> None:
    """Generated strings include line separators, quotes, backslashes, newlines, non-ASCII."""
    found = find(from_schema({"type": "string"}), lambda s: char in s, settings=SEARCH)
    assert char in found


CLOSED = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
    "required": ["a"],
    "additionalProperties": False,
}


@UNIT
@given(from_schema(CLOSED))
def test_additional_properties_false_allows_only_declared_keys(value: dict[str, Any]) -> None:
    """additionalProperties: false never gets extra keys; required keys are always there."""
    assert "a" in value and set(value) <= {"a", "b"}


CLOSED_MERGE = {
    "allOf": [CLOSED, {"type": "object", "properties": {"c": {"type": "null"}}, "required": ["b"]}]
}


@UNIT
@given(from_schema(CLOSED_MERGE))
def test_all_of_merge_respects_the_closed_side(value: dict[str, Any]) -> None:
    """allOf merges required lists; a property the closed side does not declare never appears."""
    assert set(value) == {"a", "b"}
    _assert_valid(CLOSED_MERGE, value)


def test_all_of_with_a_required_property_the_closed_side_forbids_is_empty() -> None:
    """A conjunction that cannot be satisfied generates nothing rather than invalid data."""
    impossible = {"allOf": [CLOSED, {"type": "object", "required": ["c"]}]}
    assert from_schema(impossible).is_empty


MAP = {"type": "object", "additionalProperties": {"type": "integer", "format": "uint8"}}


@UNIT
@given(from_schema(MAP))
def test_additional_properties_schema_constrains_extra_values(value: dict[str, Any]) -> None:
    """additionalProperties given as a schema constrains every value of a map."""
    assert all(isinstance(v, int) and 0 <= v <= 255 for v in value.values())


def test_maps_get_keys() -> None:
    """Free-form maps are not always empty."""
    assert find(from_schema(MAP), lambda v: len(v) >= 2, settings=SEARCH)


TYPE_LIST = {"type": ["string", "null", "boolean"]}


def test_type_lists_reach_every_type() -> None:
    """A list of types yields values of each listed type."""
    strategy = from_schema(TYPE_LIST)
    assert find(strategy, lambda v: v is None, settings=SEARCH) is None
    assert isinstance(find(strategy, lambda v: isinstance(v, str), settings=SEARCH), str)
    assert isinstance(find(strategy, lambda v: isinstance(v, bool), settings=SEARCH), bool)


@UNIT
@given(from_schema({"type": "array", "items": {"type": "array", "items": {"type": "null"}}}))
def test_arrays_are_small(value: list[Any]) -> None:
    """Lists (and nested lists) hold at most four items by default."""
    assert len(value) <= 4 and all(len(inner) <= 4 for inner in value)


TREE = {
    "$defs": {
        "Tree": {
            "type": "object",
            "properties": {
                "children": {"type": "array", "items": {"$ref": "#/$defs/Tree"}},
                "parent": {"anyOf": [{"$ref": "#/$defs/Tree"}, {"type": "null"}]},
            },
            "required": ["children"],
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/Tree",
}


def _depth(tree: dict[str, Any]) -> int:
    below = [_depth(c) for c in tree["children"]]
    if tree.get("parent"):
        below.append(_depth(tree["parent"]))
    return 1 + max(below, default=0)


@UNIT
@given(from_schema(TREE, max_recursion=2))
def test_recursive_definitions_are_bounded(tree: dict[str, Any]) -> None:
    """Recursive $refs terminate: nesting depth is at most max_recursion + 1."""
    _assert_valid(TREE, tree)
    assert _depth(tree) <= 3


def test_required_self_reference_without_base_case_is_empty() -> None:
    """A type that must contain itself has no finite instance: the strategy is empty."""
    schema = {
        "$defs": {
            "A": {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "required": ["a"]}
        },
        "$ref": "#/$defs/A",
    }
    assert from_schema(schema).is_empty


@UNIT
@given(from_schema({"description": "anything", "x-side": "agent", "title": "Any"}))
def test_annotation_only_schema_yields_any_json(value: Any) -> None:
    """A schema with only annotations accepts (and generates) any JSON value."""
    _assert_valid({}, value)


@pytest.mark.parametrize(
    ("schema", "value", "expected"),
    [
        ({"type": "integer"}, True, False),
        ({"type": "integer"}, 2.0, True),
        ({"const": 1}, True, False),
        ({"const": 1}, 1.0, True),
        ({"enum": [[1, {"a": False}]]}, [1, {"a": False}], True),
        ({"enum": [[1, {"a": False}]]}, [1, {"a": 0}], False),
        ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, 1, False),
        ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, 1.5, True),
        ({"not": {"type": "null"}}, None, False),
        ({"required": ["a"]}, "not an object", True),
        ({"additionalProperties": False, "properties": {"a": True}}, {"a": 1, "b": 2}, False),
        ({"type": "string", "minLength": 2}, "\U0001f600", False),
    ],
)
def test_is_valid_follows_json_schema(schema: dict[str, Any], value: Any, expected: bool) -> None:
    """The filtering validator agrees with jsonschema on JSON-typing corner cases."""
    assert is_valid(schema, value, {}) is expected
    assert jsonschema.Draft202012Validator(schema).is_valid(value) is expected
