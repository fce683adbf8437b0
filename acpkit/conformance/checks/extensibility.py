"""
Extensibility: custom fields, ``_meta``, custom methods and how they are advertised.

- EXT-001: every spec-typed object the agent sends (params, results, error objects): no key
  its type does not define but ``_meta``
- EXT-002: every ``_meta`` object: the W3C trace-context keys hold trace context
- EXT-003: every ``_`` method the agent calls: its capabilities' ``_meta`` advertises
  extensions
- EXT-004: every method the agent calls: defined by the schema, a ``$/`` notification (the
  schema's protocol-level namespace; a ``$/`` request is not), or starting with ``_``

An object whose discriminator (``type``, ``sessionUpdate``...) has a value no variant of its
type defines is a variant the schema does not know (a newer spec's, a draft's): it is noted,
not judged by EXT-001, since its keys are that variant's, not custom fields of a known type.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any

import attrs
from jsonschema import Draft202012Validator

from acpkit.conformance.checks.base import Family, describe, metas
from acpkit.conformance.checks.state import AnswerContext
from acpkit.testing.jsonschema import load_schema

__all__ = ["CustomFields", "ExtensibilityChecks", "custom_fields", "known_methods"]

_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?")


@attrs.define
class _Collected:
    """What the schema says about one JSON object (or array): its keys and sub-schemas."""

    keys: set[str] = attrs.field(factory=set)
    sub: dict[str, list[Any]] = attrs.field(factory=dict)
    items: list[Any] = attrs.field(factory=list)
    #: additionalProperties / patternProperties allow any key
    open: bool = False
    #: the value's discriminator names a variant the union does not define ("type='x'")
    unknown_variant: str | None = None


@attrs.frozen
class FieldProblems:
    """What `CustomFields.problems` found in one value."""

    #: custom keys at the root of spec types (EXT-001 violations)
    custom: list[str]
    #: keys only schema.unstable.json defines
    unstable: list[str]
    #: objects of a variant the schema does not define (path and discriminator)
    unknown_variants: list[str]


class CustomFields:
    """
    EXT-001: keys at the root of spec-typed objects that the type does not define.

    The value is walked together with its ``$defs`` definition: ``$ref`` is followed,
    ``allOf`` branches are merged, and of a ``oneOf`` / ``anyOf`` every branch the value is
    valid against is merged (a union: a key any matching branch defines is known). An object
    whose schema allows additional properties (``_meta``, maps) is not judged, nor one whose
    union no branch matches (SCHEMA-001 reports that), nor one of an unknown variant, nor a
    schema without properties.
    """

    def __init__(self, stable: Mapping[str, Any], unstable: Mapping[str, Any]) -> None:
        self._roots = (stable["$defs"], unstable["$defs"])
        #: (schema, id(node)) -> (node, its validator); the node is kept so its id stays its own
        self._validators: dict[tuple[int, int], tuple[Any, Draft202012Validator]] = {}

    def _valid(self, which: int, node: Any, value: Any) -> bool:
        cache_key = (which, id(node))
        cached = self._validators.get(cache_key)
        if cached is None or cached[0] is not node:
            cached = (node, Draft202012Validator({**node, "$defs": self._roots[which]}))
            self._validators[cache_key] = cached
        return bool(cached[1].is_valid(value))

    def _resolve(self, which: int, node: Any) -> Any:
        for _ in range(20):
            if not isinstance(node, Mapping) or "$ref" not in node:
                return node
            ref = str(node["$ref"])
            if not ref.startswith("#/$defs/"):
                return None
            node = self._roots[which].get(ref.removeprefix("#/$defs/"))
        return None

    def _tags(self, which: int, branch: Any, depth: int = 0) -> dict[str, Any]:
        """The properties a union branch fixes with ``const`` (its discriminators)."""
        node = self._resolve(which, branch)
        if not isinstance(node, Mapping) or depth > 5:
            return {}
        tags = {
            name: sub["const"]
            for name, sub in (node.get("properties") or {}).items()
            if isinstance(sub, Mapping) and "const" in sub
        }
        for part in node.get("allOf", ()):
            tags.update(self._tags(which, part, depth + 1))
        if "$ref" in branch and isinstance(branch, Mapping) and len(branch) > 1:
            tags.update(self._tags(which, {k: v for k, v in branch.items() if k != "$ref"}))
        return tags

    def _unknown_variant(self, which: int, branches: list[Any], value: Any) -> str | None:
        """``"p='x'"`` when ``value``'s discriminator ``p`` matches no branch's constant."""
        if not isinstance(value, dict):
            return None
        known: dict[str, set[Any]] = {}
        for branch in branches:
            for name, constant in self._tags(which, branch).items():
                known.setdefault(name, set()).add(constant)
        for name, constants in known.items():
            tag = value.get(name)
            if isinstance(tag, str) and tag not in constants:
                return f"{name}={tag!r}"
        return None

    def _collect(self, which: int, node: Any, value: Any, out: _Collected, depth: int) -> bool:
        if depth > 30:
            return False
        if isinstance(node, Mapping) and "$ref" in node and len(node) > 1:
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return self._collect(which, {"$ref": node["$ref"]}, value, out, depth + 1) and (
                self._collect(which, rest, value, out, depth + 1)
            )
        node = self._resolve(which, node)
        if not isinstance(node, Mapping):
            return node is not None
        properties = node.get("properties")
        if isinstance(properties, Mapping):
            out.keys |= set(properties)
            for name, sub in properties.items():
                out.sub.setdefault(name, []).append(sub)
        extra = node.get("additionalProperties")
        if (extra is not None and extra is not False) or "patternProperties" in node:
            out.open = True
        if "items" in node:
            out.items.append(node["items"])
        for branch in node.get("allOf", ()):
            if not self._collect(which, branch, value, out, depth + 1):
                return False
        for combinator in ("oneOf", "anyOf"):
            branches = node.get(combinator)
            if not branches:
                continue
            variant = self._unknown_variant(which, list(branches), value)
            if variant is not None:
                out.unknown_variant = variant
                return False
            valid = [b for b in branches if self._valid(which, b, value)]
            if not valid:
                return False
            for branch in valid:
                if not self._collect(which, branch, value, out, depth + 1):
                    return False
        return True

    def _walk(
        self,
        which: int,
        node: Any,
        value: Any,
        path: str,
        found: tuple[set[str], set[str], set[str]],
        depth: int = 0,
    ) -> None:
        extras, unknown, variants = found
        if depth > 40 or not isinstance(value, dict | list):
            return
        info = _Collected()
        if not self._collect(which, node, value, info, 0):
            if info.unknown_variant:
                variants.add(f"{path} ({info.unknown_variant})")
            else:
                unknown.add(path)
            return
        if isinstance(value, list):
            for position, element in enumerate(value):
                for item in info.items:
                    self._walk(which, item, element, f"{path}[{position}]", found, depth + 1)
            return
        if info.keys and not info.open:
            extras.update(f"{path}.{k}" for k in value if k not in info.keys and k != "_meta")
        for name, child in value.items():
            if name == "_meta":
                continue
            for sub in info.sub.get(name, ()):
                self._walk(which, sub, child, f"{path}.{name}", found, depth + 1)

    def problems(self, definition: str, value: Any, where: str) -> FieldProblems:
        """The custom keys of ``value`` (typed by ``$defs[definition]``), the keys only
        ``schema.unstable.json`` defines, and the objects of a variant it does not know."""
        stable: tuple[set[str], set[str], set[str]] = (set(), set(), set())
        self._walk(0, {"$ref": f"#/$defs/{definition}"}, value, where, stable)
        if not stable[0] and not stable[2]:
            return FieldProblems([], [], [])
        unstable: tuple[set[str], set[str], set[str]] = (set(), set(), set())
        if definition in self._roots[1]:
            self._walk(1, {"$ref": f"#/$defs/{definition}"}, value, where, unstable)
        # a key the unstable walk did not call custom is known there (or could not be judged
        # there, behind a branch only the unstable schema has): not a violation; a variant
        # only the unstable schema defines is its business, not an unknown one
        return FieldProblems(
            sorted(stable[0] & unstable[0]),
            sorted(stable[0] - unstable[0]),
            sorted(stable[2] & unstable[2]),
        )


@cache
def custom_fields() -> CustomFields:
    """One `CustomFields` for the vendored schemas."""
    return CustomFields(load_schema(), load_schema(unstable=True))


@cache
def known_methods() -> frozenset[str]:
    """Every method either bundled schema defines."""
    methods = set()
    for schema in (load_schema(), load_schema(unstable=True)):
        for definition in schema["$defs"].values():
            method = definition.get("x-method")
            if isinstance(method, str):
                methods.add(method)
    return frozenset(methods)


class ExtensibilityChecks(Family):
    """See the module docstring."""

    rules = ("EXT-001", "EXT-002", "EXT-003", "EXT-004")

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        #: the agent's initialize result (EXT-003 reads its capabilities' _meta)
        self._init_result: dict[str, Any] | None = None

    def agent_message(
        self, method: str, params: dict[str, Any], raw_params: Any, is_request: bool, index: int
    ) -> None:
        self._method_name(method, is_request, index)
        validator = self.judge.validator
        definition = validator.definition_for("client", method, "params")
        if definition is None and method.startswith("$/"):
            definition = validator.definition_for("protocol", method, "params")
        self._custom(definition, raw_params, f"{method} params", index)
        self._trace_context(raw_params, f"{method} params", index)

    def response(self, context: AnswerContext, index: int) -> None:
        error = context.message.get("error")
        if isinstance(error, dict):
            # the JSON-RPC error object is a spec type too (schema.json: Error)
            self._custom("Error", error, f"the error answering {context.method}", index)
            return
        if "error" in context.message:
            return
        result = context.result
        if context.method == "initialize" and isinstance(result, dict):
            self._init_result = result
        definition = self.judge.validator.definition_for("agent", context.method, "result")
        self._custom(definition, result, f"{context.method} result", index)
        self._trace_context(result, f"{context.method} result", index)

    def _method_name(self, method: str, is_request: bool, index: int) -> None:
        """EXT-004 (methods outside the spec start with _) and EXT-003 (and are advertised)."""
        if method.startswith("_"):
            self.ok("EXT-004")
            if self._init_result is None:
                return
            caps = self._init_result.get("agentCapabilities")
            meta = caps.get("_meta") if isinstance(caps, dict) else None
            if meta is None:
                self.violation(
                    "EXT-003",
                    f"the agent sent the extension method {method!r} but its initialize "
                    "result's agentCapabilities has no _meta advertising extensions",
                    index,
                )
            else:
                self.ok("EXT-003")
        elif method in known_methods() or (method.startswith("$/") and not is_request):
            # schema.json, Protocol Level: "Notifications whose methods start with '$/' are
            # messages which are protocol implementation dependent" (notifications only)
            self.ok("EXT-004")
        else:
            self.violation(
                "EXT-004",
                f"the agent sent {method!r}, a method the ACP schema does not define, without "
                "the _ prefix of custom methods",
                index,
            )

    def _custom(self, definition: str | None, value: Any, where: str, index: int) -> None:
        """EXT-001: no custom keys at the root of spec-typed objects."""
        if definition is None or not isinstance(value, dict):
            return
        found = custom_fields().problems(definition, value, where)
        if found.unstable:
            self.judge.note(
                f"{where}: key(s) {', '.join(found.unstable)} are defined only by the unstable "
                "schema (schema.unstable.json): not judged by EXT-001"
            )
        if found.unknown_variants:
            self.judge.note(
                f"{where}: {', '.join(found.unknown_variants)}: a variant neither bundled schema "
                "defines (a newer or draft spec's?): its keys are not judged by EXT-001"
            )
        if found.custom:
            self.violation(
                "EXT-001",
                f"{where} has custom field(s) at the root of spec types: "
                f"{', '.join(found.custom)} (not properties of their type; extensions belong in "
                "_meta)",
                index,
            )
        else:
            self.ok("EXT-001")

    def _trace_context(self, value: Any, where: str, index: int) -> None:
        """EXT-002: the W3C trace-context keys of every _meta object."""
        for path, meta in metas(value, where):
            problems = []
            traceparent = meta.get("traceparent")
            if "traceparent" in meta and not (
                isinstance(traceparent, str) and _TRACEPARENT.fullmatch(traceparent)
            ):
                problems.append(f"traceparent={describe(traceparent, 80)}")
            for name in ("tracestate", "baggage"):
                if name in meta and not isinstance(meta[name], str):
                    problems.append(f"{name}={describe(meta[name], 80)}")
            if problems:
                self.violation(
                    "EXT-002",
                    f"{path} uses the W3C trace-context key(s) for something else: "
                    f"{', '.join(problems)} (traceparent must be 00-<32 hex>-<16 hex>-<2 hex>, "
                    "tracestate and baggage strings)",
                    index,
                )
            else:
                self.ok("EXT-002")
