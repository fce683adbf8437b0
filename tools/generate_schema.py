"""Generate acpkit's protocol models from the vendored ACP and MCP JSON schemas.

Writes ``acpkit/schema.py`` and ``acpkit/unstable.py`` (ACP v1, ``acpkit/schemas/v1``) and
``acpkit/mcp/schema.py`` (MCP, ``acpkit/schemas/mcp/<revision>``).

``acpkit/unstable.py`` is a delta over ``acpkit/schema.py``: every definition of
``schema.unstable.json`` whose code is the same as its ``schema.json`` namesake (documentation
aside) and that refers only to such definitions is imported from ``acpkit.schema``, so
``unstable.X is schema.X``; the others (changed, new, or referring to one of those, directly
or through other definitions) are defined in ``acpkit/unstable.py``.

Usage::

    python tools/generate_schema.py           # rewrite the three modules
    python tools/generate_schema.py --check   # exit 1 if a committed module drifted

The output is deterministic and already in ``ruff format`` style. The mapping rules
(documented in ``docs/reference/codec.md``):

- object ``$defs`` become ``@attrs.frozen(kw_only=True)`` classes, snake_case attributes;
- string enums become :class:`acpkit.schema.OpenStrEnum` subclasses (unknown values tolerated);
- tagged unions become type aliases over one class per tag plus an ``Unknown<Union>`` class;
- untagged unions become type aliases, decoded by the rules in ``acpkit.codec``;
- plain aliases (``SessionId``) become ``TypeAlias`` of the builtin type.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import keyword
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = ROOT / "acpkit" / "schemas" / "v1"
MCP_SCHEMA_DIR = ROOT / "acpkit" / "schemas" / "mcp"
MCP_REVISION = "2025-11-25"
"""The vendored MCP schema revision ``acpkit/mcp/schema.py`` is generated from."""
MCP_MODULE = "mcp/schema.py"

# Tagged-union variant class names: (union, tag) -> class name.
VARIANT_NAMES: dict[tuple[str, str], str] = {
    ("SessionUpdate", "user_message_chunk"): "UserMessageChunk",
    ("SessionUpdate", "agent_message_chunk"): "AgentMessageChunk",
    ("SessionUpdate", "agent_thought_chunk"): "AgentThoughtChunk",
    ("SessionUpdate", "tool_call"): "ToolCallStart",
    ("SessionUpdate", "tool_call_update"): "ToolCallProgress",
    ("SessionUpdate", "plan"): "AgentPlanUpdate",
    ("SessionUpdate", "available_commands_update"): "AvailableCommandsUpdate",
    ("SessionUpdate", "current_mode_update"): "CurrentModeUpdate",
    ("SessionUpdate", "config_option_update"): "ConfigOptionUpdate",
    ("SessionUpdate", "session_info_update"): "SessionInfoUpdate",
    ("SessionUpdate", "usage_update"): "UsageUpdate",
    ("SessionUpdate", "notice"): "NoticeUpdate",
    ("SessionUpdate", "compaction_update"): "CompactionUpdate",
    ("SessionUpdate", "compaction_summary_chunk"): "CompactionSummaryChunk",
    ("SessionUpdate", "plan_update"): "PlanUpdate",
    ("SessionUpdate", "session_message_chunk"): "SessionMessageChunk",
    ("SessionUpdate", "subagent_update"): "SubagentUpdate",
    ("ContentBlock", "text"): "TextContentBlock",
    ("ContentBlock", "image"): "ImageContentBlock",
    ("ContentBlock", "audio"): "AudioContentBlock",
    ("ContentBlock", "resource_link"): "ResourceLinkContentBlock",
    ("ContentBlock", "resource"): "EmbeddedResourceContentBlock",
    ("ToolCallContent", "content"): "ContentToolCallContent",
    ("ToolCallContent", "diff"): "FileEditToolCallContent",
    ("ToolCallContent", "terminal"): "TerminalToolCallContent",
    ("RequestPermissionOutcome", "cancelled"): "CancelledPermissionOutcome",
    ("RequestPermissionOutcome", "selected"): "SelectedPermissionOutcome",
    ("McpServer", "http"): "HttpMcpServer",
    ("McpServer", "sse"): "SseMcpServer",
    ("McpServer", "acp"): "AcpMcpServer",
    ("AuthMethod", "terminal"): "TerminalAuthMethod",
    ("ElicitationPropertySchema", "string"): "StringPropertySchemaVariant",
    ("ElicitationPropertySchema", "number"): "NumberPropertySchemaVariant",
    ("ElicitationPropertySchema", "integer"): "IntegerPropertySchemaVariant",
    ("ElicitationPropertySchema", "boolean"): "BooleanPropertySchemaVariant",
    ("ElicitationPropertySchema", "array"): "MultiSelectPropertySchemaVariant",
    ("MultiSelectItems", "string"): "StringMultiSelectItemsVariant",
}

# Fields where JSON ``null`` means something different from "absent": modelled as
# ``T | None | AbsentType`` with default ``ABSENT``; ``None`` is encoded as ``null``.
NULL_MEANINGFUL: frozenset[tuple[str, str]] = frozenset(
    {
        ("Diff", "oldText"),
        ("SessionInfoUpdate", "title"),
        ("SessionInfoUpdate", "updatedAt"),
    }
)

PRIMITIVES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool"}


def snake(name: str) -> str:
    """``mimeType`` -> ``mime_type``; ``_meta`` -> ``meta``; keywords get a trailing ``_``."""
    if name == "_meta":
        return "meta"
    out = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()
    if keyword.iskeyword(out):
        out += "_"
    return out


def pascal(tag: str) -> str:
    """``resource_link`` -> ``ResourceLink``."""
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[_\-/ ]+", tag) if p)


def camel_of(py: str) -> str:
    """Inverse of :func:`snake` for names the codec derives (``mime_type`` -> ``mimeType``)."""
    if py == "meta":
        return "_meta"
    py = py.rstrip("_")
    head, *rest = py.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def ref_name(s: dict[str, Any]) -> str | None:
    """The ``$defs`` name a (possibly ``allOf``-wrapped) reference points at."""
    if "$ref" in s:
        return str(s["$ref"]).rsplit("/", 1)[-1]
    all_of = s.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0]:
        return str(all_of[0]["$ref"]).rsplit("/", 1)[-1]
    return None


def doc_text(text: str | None) -> str:
    """A description made safe for a triple-quoted docstring."""
    text = (text or "").strip().replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    if text.endswith('"'):
        text += " "
    return text


@dataclass
class Field:
    """One attribute of a generated class."""

    py: str
    wire: str
    type_expr: str
    required: bool
    default: str | None
    doc: str
    on_error: bool = False
    skip_invalid: bool = False
    on_null: bool = False


@dataclass
class ClassDef:
    """A generated attrs class."""

    name: str
    doc: str
    fields: list[Field]
    tag: tuple[str, str] | None = None
    base: str | None = None


@dataclass
class EnumDef:
    """A generated open enum."""

    name: str
    doc: str
    members: list[tuple[str, str | int, str]]
    is_int: bool
    open: bool


@dataclass
class UnknownDef:
    """An ``Unknown<Union>`` class keeping the raw dict of an unrecognised variant."""

    name: str
    union: str
    tag_key: str


@dataclass
class AliasDef:
    """A generated type alias."""

    name: str
    doc: str
    expr: str
    untagged_rule: str | None = None


@dataclass
class Model:
    """Everything generated for one schema file."""

    items: list[Any] = field(default_factory=list)
    names: set[str] = field(default_factory=set)
    methods: list[tuple[str, str, str, str, str | None]] = field(default_factory=list)


class Generator:
    """Turns one schema document into a :class:`Model`."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.defs: dict[str, dict[str, Any]] = schema["$defs"]
        self.model = Model()
        # payload def -> (tag key, tag value) when the variant class IS the payload class
        self.tag_on_payload: dict[str, tuple[str, str]] = {}
        self.pending_variants: list[ClassDef | UnknownDef] = []
        self.envelopes = {n for n, d in self.defs.items() if d.get("x-docs-ignore")}

    # ---------------------------------------------------------------- types
    def type_of(self, s: dict[str, Any]) -> str:
        """Python type expression for a property schema."""
        name = ref_name(s)
        if name is not None:
            return name
        for key in ("anyOf", "oneOf"):
            alts = s.get(key)
            if isinstance(alts, list):
                parts = [self.type_of(a) for a in alts]
                return " | ".join(dict.fromkeys(parts))
        t = s.get("type")
        if isinstance(t, list):
            parts = [self.type_of({**s, "type": one}) for one in t]
            return " | ".join(dict.fromkeys(parts))
        if t == "null":
            return "None"
        if t in PRIMITIVES:
            return PRIMITIVES[t]
        if t == "array":
            items = s.get("items")
            return f"list[{self.type_of(items) if isinstance(items, dict) else 'Any'}]"
        if t == "object":
            ap = s.get("additionalProperties")
            if isinstance(ap, dict) and ap:
                return f"dict[str, {self.type_of(ap)}]"
            return "dict[str, Any]"
        return "Any"

    # --------------------------------------------------------------- fields
    def fields_of(self, owner: str, s: dict[str, Any], force_optional: bool = False) -> list[Field]:
        """Fields of an object schema (own properties, plus merged mixin alternatives)."""
        required = set(s.get("required", []))
        out: list[Field] = []
        for wire, ps in s.get("properties", {}).items():
            if wire in ("params", "result") and (owner in self.envelopes):
                # JSON-RPC envelopes: the payload type depends on the method (acpkit.jsonrpc)
                ps = {"description": ps.get("description", "")}
            out.append(self.make_field(owner, wire, ps, wire in required and not force_optional))
        return out

    def make_field(self, owner: str, wire: str, ps: dict[str, Any], required: bool) -> Field:
        """One field from a property schema."""
        py = snake(wire)
        type_expr = self.type_of(ps)
        default: str | None = None
        if (owner, wire) in NULL_MEANINGFUL:
            if "None" not in type_expr.split(" | "):
                type_expr += " | None"
            type_expr += " | AbsentType"
            default = "ABSENT"
            required = False
        elif not required:
            if "default" in ps:
                default = self.default_expr(ps["default"], type_expr)
            else:
                if type_expr != "Any" and "None" not in type_expr.split(" | "):
                    type_expr += " | None"
                default = "None"
        return Field(
            py=py,
            wire=wire,
            type_expr=type_expr,
            required=default is None,
            default=default,
            doc=(ps.get("description") or "").strip(),
            on_error=bool(ps.get("x-deserialize-default-on-error")),
            skip_invalid=bool(ps.get("x-deserialize-skip-invalid-items")),
            on_null=bool(ps.get("x-deserialize-default-on-null")),
        )

    def default_expr(self, value: Any, type_expr: str) -> str:
        """Python default expression for a schema ``default``."""
        if isinstance(value, bool):
            return repr(value)
        if value == [] and type_expr.startswith("list["):
            return "attrs.Factory(list)"
        if isinstance(value, dict) and type_expr.startswith("dict["):
            return "attrs.Factory(dict)"
        if isinstance(value, dict):
            return f"attrs.Factory({type_expr})"
        if isinstance(value, str):
            enum = self.defs.get(type_expr)
            if enum is not None:
                return f"{type_expr}({value!r})"
            return repr(value)
        return repr(value)

    # ------------------------------------------------------------- analysis
    @staticmethod
    def const_tag(alt: dict[str, Any]) -> tuple[str, str] | None:
        """``(key, value)`` when an alternative is tagged by a string const property."""
        for key, ps in alt.get("properties", {}).items():
            if isinstance(ps, dict) and "const" in ps and isinstance(ps["const"], str):
                if key in alt.get("required", []):
                    return key, ps["const"]
        return None

    @staticmethod
    def is_other(alt: dict[str, Any]) -> bool:
        """The catch-all ``other`` alternative of an open union."""
        return alt.get("title") == "other" or "not" in alt

    def enum_of(self, name: str, s: dict[str, Any]) -> EnumDef | None:
        """An enum when every alternative is a const (plus an optional ``other``)."""
        alts = s.get("oneOf") or s.get("anyOf")
        if not isinstance(alts, list) or "properties" in s:
            return None
        members: list[tuple[str, str | int, str]] = []
        is_open = False
        kinds: set[str] = set()
        for alt in alts:
            if "const" in alt:
                value = alt["const"]
                kinds.add(type(value).__name__)
                label = alt.get("title") if isinstance(value, int) else value
                members.append((enum_member(str(label)), value, alt.get("description", "")))
            elif alt.get("type") in ("string", "integer") and set(alt) <= {
                "title",
                "description",
                "type",
                "format",
            }:
                is_open = True
            else:
                return None
        if not members or len(kinds) != 1:
            return None
        return EnumDef(name, s.get("description", ""), members, kinds == {"int"}, is_open)

    # ------------------------------------------------------------- emitters
    def run(self) -> Model:
        """Analyse every ``$defs`` entry."""
        # First pass: find tagged unions whose variant takes the payload's own name.
        for name, s in self.defs.items():
            alts = s.get("oneOf") or s.get("anyOf")
            if "properties" in s or not isinstance(alts, list):
                continue
            for alt in alts:
                tag = self.const_tag(alt)
                payload = ref_name(alt)
                if tag and payload and self.variant_name(name, tag[1]) == payload:
                    self.tag_on_payload[payload] = tag
                elif tag and payload is None and len(alt.get("properties", {})) == 1:
                    pass
        for name, s in self.defs.items():
            self.handle(name, s)
        self.model.items.extend(self.pending_variants)
        self.collect_methods()
        return self.model

    def add(self, item: Any) -> None:
        """Record one generated item."""
        self.model.items.append(item)
        self.model.names.add(item.name)

    def handle(self, name: str, s: dict[str, Any]) -> None:
        """Generate the Python counterpart of one ``$defs`` entry."""
        doc = s.get("description", "")
        enum = self.enum_of(name, s)
        if enum is not None:
            self.add(enum)
            return
        alts = s.get("oneOf") or s.get("anyOf")
        if s.get("type") == "object" or "properties" in s:
            own = set(s.get("properties", {}))
            tags = [self.const_tag(a) for a in alts] if isinstance(alts, list) else []
            if isinstance(alts, list) and any(tags) and not any(t and t[0] in own for t in tags):
                self.tagged_with_base(name, s, alts)
                return
            fields = self.fields_of(name, s)
            if isinstance(alts, list):
                # untagged mixin alternatives (elicitation scopes, config values)
                seen = {f.wire for f in fields}
                for alt in alts:
                    sub = self.resolve(alt)
                    for extra in self.fields_of(name, sub, force_optional=True):
                        if extra.wire not in seen:
                            if extra.type_expr == "RequestId | None":
                                extra.type_expr = "RequestId | AbsentType"
                                extra.default = "ABSENT"
                            seen.add(extra.wire)
                            fields.append(extra)
            self.add(ClassDef(name, doc, fields, tag=self.tag_on_payload.get(name)))
            return
        if isinstance(alts, list):
            tags = [self.const_tag(a) for a in alts]
            if any(tags):
                self.tagged_union(name, s, alts)
                return
            members = []
            for alt in alts:
                if ref_name(alt) is None and alt.get("type") == "object":
                    cls_name = name + pascal(alt.get("title", "Variant"))
                    self.pending_variants.append(
                        ClassDef(cls_name, alt.get("description", ""), self.fields_of(name, alt))
                    )
                    members.append(cls_name)
                else:
                    members.append(self.type_of(alt))
            expr = " | ".join(dict.fromkeys(members))
            self.add(AliasDef(name, doc, expr, untagged_rule="untagged"))
            return
        self.add(AliasDef(name, doc, self.type_of(s)))

    def resolve(self, alt: dict[str, Any]) -> dict[str, Any]:
        """The object schema an alternative stands for (following one ``$ref``)."""
        name = ref_name(alt)
        return self.defs[name] if name else alt

    def tagged_union(self, name: str, s: dict[str, Any], alts: list[dict[str, Any]]) -> None:
        """A discriminated union of payload classes."""
        members: list[str] = []
        tag_key = next(t for t in (self.const_tag(a) for a in alts) if t)[0]
        for alt in alts:
            tag = self.const_tag(alt)
            payload = ref_name(alt)
            if tag is None:
                if self.is_other(alt):
                    continue
                # untagged fallback variant (stdio MCP server, agent auth method, ...)
                members.append(payload or "Any")
                continue
            cls_name = self.variant_name(name, tag[1])
            if payload == cls_name:
                members.append(cls_name)
                continue
            if payload is not None:
                variant = ClassDef(
                    cls_name,
                    self.defs[payload].get("description", "") or alt.get("description", ""),
                    [],
                    tag=tag,
                    base=payload,
                )
            else:
                variant = ClassDef(
                    cls_name,
                    alt.get("description", ""),
                    [f for f in self.fields_of(name, alt) if f.wire != tag[0]],
                    tag=tag,
                )
            self.pending_variants.append(variant)
            members.append(cls_name)
        unknown = self.unknown_name(name)
        self.pending_variants.append(UnknownDef(unknown, name, tag_key))
        members.append(unknown)
        self.add(AliasDef(name, s.get("description", ""), " | ".join(members)))

    def variant_name(self, union: str, tag: str) -> str:
        """Class name of the variant of *union* tagged *tag* (table, else ``<Tag><Union>``)."""
        return VARIANT_NAMES.get((union, tag), pascal(tag) + union)

    def unknown_name(self, union: str) -> str:
        """``Unknown<Union>``, or ``<Union>Other`` when a ``$defs`` entry already has that name."""
        name = "Unknown" + union
        return union + "Other" if name in self.defs else name

    def tagged_with_base(self, name: str, s: dict[str, Any], alts: list[dict[str, Any]]) -> None:
        """An object with common fields and tagged alternatives (flattened per tag)."""
        base_fields = self.fields_of(name, {**s, "anyOf": None, "oneOf": None})
        members: list[str] = []
        tag_key = next(t for t in (self.const_tag(a) for a in alts) if t)[0]
        for alt in alts:
            tag = self.const_tag(alt)
            if tag is None:
                if self.is_other(alt):
                    continue
                fallback = name + pascal(alt.get("title", "Default"))
                base_wires = {b.wire for b in base_fields}
                fields = base_fields + [
                    f for f in self.fields_of(name, alt) if f.wire not in base_wires
                ]
                fields = sorted(fields, key=lambda f: f.default is not None)
                doc = alt.get("description", "") or s.get("description", "")
                self.pending_variants.append(ClassDef(fallback, doc, fields))
                members.append(fallback)
                continue
            cls_name = VARIANT_NAMES.get((name, tag[1]), name + pascal(tag[1]))
            payload = ref_name(alt)
            extra: list[Field] = []
            if payload is not None:
                sub = self.defs[payload]
                extra = self.fields_of(payload, sub)
                seen = {f.wire for f in extra}
                for sub_alt in sub.get("anyOf") or []:
                    for mixin in self.fields_of(payload, self.resolve(sub_alt), True):
                        if mixin.wire not in seen:
                            if mixin.type_expr == "RequestId | None":
                                mixin.type_expr = "RequestId | AbsentType"
                                mixin.default = "ABSENT"
                            seen.add(mixin.wire)
                            extra.append(mixin)
            else:
                extra = [f for f in self.fields_of(name, alt) if f.wire != tag[0]]
            fields = base_fields + [f for f in extra if f.wire not in {b.wire for b in base_fields}]
            fields = sorted(fields, key=lambda f: f.default is not None)
            doc = alt.get("description", "") or s.get("description", "")
            self.pending_variants.append(ClassDef(cls_name, doc, fields, tag=tag))
            members.append(cls_name)
        unknown = self.unknown_name(name)
        self.pending_variants.append(UnknownDef(unknown, name, tag_key))
        members.append(unknown)
        self.add(AliasDef(name, s.get("description", ""), " | ".join(members)))

    def collect_methods(self) -> None:
        """The method table from ``x-method`` / ``x-side``."""
        by_method: dict[str, dict[str, str]] = {}
        sides: dict[str, str] = {}
        for name, s in self.defs.items():
            method = s.get("x-method")
            if not method:
                continue
            sides[method] = s.get("x-side", "")
            kind = "result" if name.endswith("Response") else "params"
            by_method.setdefault(method, {})[kind] = name
        for method in sorted(by_method):
            entry = by_method[method]
            params = entry.get("params")
            if params is None:
                continue
            result = entry.get("result")
            kind = "request" if result else "notification"
            self.model.methods.append((method, sides[method], kind, params, result))


class McpGenerator(Generator):
    """The MCP dialect of the schema (``acpkit/schemas/mcp/<revision>/schema.json``).

    Differences from ACP's schema, handled here so that ACP's output is untouched:

    - a tagged union is an ``anyOf`` of plain ``$ref`` whose definitions all carry a
      required string ``const`` under one key with distinct values (``type`` for content
      blocks, ``method`` for requests and notifications): each definition becomes the
      variant class itself, with the tag as its ``__acp_tag__`` ClassVar;
    - string enums are written with ``enum`` (closed: strict decoding rejects others);
    - the method table comes from the ``ClientRequest`` / ``ClientNotification`` (handled
      by the server) and ``ServerRequest`` / ``ServerNotification`` (handled by the client)
      unions; a request ``<X>Request`` answers with ``<X>Result``, else ``EmptyResult``.
    """

    def __init__(self, schema: dict[str, Any]) -> None:
        super().__init__(schema)
        self.ref_unions: dict[str, tuple[str, list[str]]] = {}

    def ref_tagged(self, s: dict[str, Any]) -> tuple[str, list[str]] | None:
        """``(tag key, payload names)`` when a union is tagged inside its ``$ref`` targets."""
        alts = s.get("oneOf") or s.get("anyOf")
        if "properties" in s or not isinstance(alts, list) or not alts:
            return None
        payloads = [ref_name(a) for a in alts]
        if any(p is None for p in payloads):
            return None
        names = [p for p in payloads if p is not None]
        targets = [self.defs[p] for p in names]
        shared = set.intersection(*(set(d.get("required", [])) for d in targets))
        for key in sorted(shared):
            values = [d.get("properties", {}).get(key, {}).get("const") for d in targets]
            if all(isinstance(v, str) for v in values) and len(set(values)) == len(values):
                return key, names
        return None

    def run(self) -> Model:
        """Find the unions tagged inside their targets, then analyse every definition."""
        for name, s in self.defs.items():
            found = self.ref_tagged(s)
            if found is None:
                continue
            key, payloads = found
            self.ref_unions[name] = found
            for payload in payloads:
                tag = (key, str(self.defs[payload]["properties"][key]["const"]))
                previous = self.tag_on_payload.setdefault(payload, tag)
                if previous != tag:
                    raise ValueError(f"{payload} is tagged {previous} and {tag}")
        for name, s in self.defs.items():
            self.handle(name, s)
        self.model.items.extend(self.pending_variants)
        self.collect_methods()
        return self.model

    def enum_of(self, name: str, s: dict[str, Any]) -> EnumDef | None:
        """``{"type": "string", "enum": [...]}`` definitions are closed string enums."""
        values = s.get("enum")
        if isinstance(values, list) and values and all(isinstance(v, str) for v in values):
            members: list[tuple[str, str | int, str]] = [(enum_member(v), v, "") for v in values]
            return EnumDef(name, s.get("description", ""), members, False, False)
        return super().enum_of(name, s)

    def handle(self, name: str, s: dict[str, Any]) -> None:
        """Unions tagged inside their targets: an alias over the payloads and ``Unknown<X>``."""
        found = self.ref_unions.get(name)
        all_of = s.get("allOf")
        if found is None and isinstance(all_of, list) and len(all_of) > 1:
            # ``allOf`` of references (``Result`` + ``Task``): one class with every field
            targets = [self.defs[ref_name(a) or ""] for a in all_of]
            merged: dict[str, Any] = {"description": s.get("description", ""), "type": "object"}
            merged["properties"] = {k: v for t in targets for k, v in t["properties"].items()}
            merged["required"] = [k for t in targets for k in t.get("required", [])]
            super().handle(name, merged)
            return
        if found is None:
            super().handle(name, s)
            return
        key, payloads = found
        unknown = self.unknown_name(name)
        self.pending_variants.append(UnknownDef(unknown, name, key))
        self.add(AliasDef(name, s.get("description", ""), " | ".join([*payloads, unknown])))

    def fields_of(self, owner: str, s: dict[str, Any], force_optional: bool = False) -> list[Field]:
        """A variant's own tag is its ClassVar, not a field."""
        fields = super().fields_of(owner, s, force_optional)
        tag = self.tag_on_payload.get(owner)
        if tag is not None and s is self.defs.get(owner):
            fields = [f for f in fields if f.wire != tag[0]]
        return fields

    def collect_methods(self) -> None:
        """The method table: who handles each method, its params and result definitions."""
        sides = (
            ("ClientRequest", "server"),
            ("ClientNotification", "server"),
            ("ServerRequest", "client"),
            ("ServerNotification", "client"),
        )
        for union, side in sides:
            key, payloads = self.ref_unions[union]
            if key != "method":
                raise ValueError(f"{union} is not tagged by method")
            for payload in payloads:
                props = self.defs[payload]["properties"]
                method = str(props["method"]["const"])
                params = ref_name(props.get("params", {})) or "None"
                result: str | None = None
                kind = "notification"
                if union.endswith("Request"):
                    kind = "request"
                    result = payload.removesuffix("Request") + "Result"
                    if result not in self.defs:
                        result = "EmptyResult"
                self.model.methods.append((method, side, kind, params, result))
        self.model.methods.sort(key=lambda m: (m[1], m[0]))


def enum_member(label: str) -> str:
    """An UPPER_CASE member name for an enum value or title."""
    out = re.sub(r"[^0-9a-zA-Z]+", "_", label).strip("_").upper()
    if not out or out[0].isdigit():
        out = "V_" + out
    return out


# ------------------------------------------------------------------ rendering
def render_doc(text: str, indent: str) -> list[str]:
    """A docstring block."""
    text = doc_text(text) or "(no description in the schema)"
    lines = text.splitlines()
    if len(lines) == 1:
        return [f'{indent}"""{lines[0]}"""']
    out = [f'{indent}"""{lines[0]}']
    out += [(indent + line).rstrip() for line in lines[1:]]
    out.append(f'{indent}"""')
    return out


def render_comment(text: str, indent: str) -> list[str]:
    """Field descriptions as ``#:`` attribute-doc comments."""
    out = []
    for line in text.splitlines():
        out.append(f"{indent}#: {line}".rstrip())
    return out


def render_field(f: Field, indent: str) -> list[str]:
    """One attrs field line (with its doc comment)."""
    meta: dict[str, bool | str] = {}
    if camel_of(f.py) != f.wire:
        meta["wire"] = f.wire
    if f.on_error:
        meta["on_error"] = True
    if f.skip_invalid:
        meta["skip_invalid"] = True
    if f.on_null:
        meta["on_null"] = True
    out = render_comment(f.doc, indent) if f.doc else []
    meta_src = "{" + ", ".join(f'"{k}": {v!r}' for k, v in meta.items()) + "}"
    if f.default is None:
        value = f" = attrs.field(metadata={meta_src})" if meta else ""
    elif meta:
        value = f" = attrs.field(default={f.default}, metadata={meta_src})"
        if f.default.startswith("attrs.Factory("):
            value = f" = attrs.field(factory={f.default[14:-1]}, metadata={meta_src})"
    else:
        value = f" = {f.default}"
    line = f"{indent}{f.py}: {f.type_expr}{value}"
    if len(line) > 100 and meta:
        inner = indent + "    "
        head = f"{indent}{f.py}: {f.type_expr} = attrs.field("
        if f.default is None:
            args = [f"{inner}metadata={meta_src},"]
        elif f.default.startswith("attrs.Factory("):
            args = [f"{inner}factory={f.default[14:-1]},", f"{inner}metadata={meta_src},"]
        else:
            args = [f"{inner}default={f.default},", f"{inner}metadata={meta_src},"]
        out += [head, *args, f"{indent})"]
    else:
        out.append(line)
    return out


HEADER = '''"""{title}

Generated by tools/generate_schema.py from {source}; DO NOT EDIT.

{body}
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar, Final, Literal, TypeAlias

import attrs
'''

STABLE_RUNTIME = '''

PROTOCOL_VERSION: int = 1
"""The latest ACP protocol version acpkit speaks."""


class AbsentType(enum.Enum):
    """Type of :data:`ABSENT`, the value of a null-meaningful field that is absent on the wire."""

    ABSENT = "ABSENT"

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final = AbsentType.ABSENT
"""Default of the fields where JSON ``null`` carries meaning: the field is not on the wire."""


class OpenStrEnum(enum.StrEnum):
    """A string enum that tolerates values it does not know (forward compatibility)."""

    @classmethod
    def _missing_(cls, value: object) -> Any:
        if not isinstance(value, str):
            return None
        member = str.__new__(cls, value)
        member._name_ = value
        member._value_ = value
        return member

    @property
    def known(self) -> bool:
        """Whether this value is one the schema lists."""
        return self._name_ in type(self).__members__


class OpenIntEnum(enum.IntEnum):
    """An integer enum that tolerates values it does not know (forward compatibility)."""

    @classmethod
    def _missing_(cls, value: object) -> Any:
        if not isinstance(value, int) or isinstance(value, bool):
            return None
        member = int.__new__(cls, value)
        member._name_ = str(value)
        member._value_ = value
        return member

    @property
    def known(self) -> bool:
        """Whether this value is one the schema lists."""
        return self._name_ in type(self).__members__


@attrs.frozen
class Method:
    """One ACP method: its wire name, which side handles it, and its payload classes."""

    name: str
    side: Literal["agent", "client", "protocol", "proxy"]
    kind: Literal["request", "notification"]
    params: Any
    """The params model: a class, or a union alias for methods whose params are a union."""
    result: Any
    """The result model (class or union alias); ``None`` for notifications."""
'''

RUNTIME_NAMES = ("ABSENT", "PROTOCOL_VERSION", "AbsentType", "Method", "OpenIntEnum", "OpenStrEnum")
"""The names ``STABLE_RUNTIME`` defines (``acpkit/unstable.py`` imports them from ``schema``)."""


MCP_RUNTIME = """
from acpkit.schema import OpenStrEnum

MCP_PROTOCOL_VERSION: Final = "{revision}"
\"\"\"The MCP protocol revision these models were generated from (``initialize``).\"\"\"


@attrs.frozen
class Method:
    \"\"\"One MCP method: its wire name, which side handles it, and its payload classes.\"\"\"

    name: str
    side: Literal["client", "server"]
    kind: Literal["request", "notification"]
    params: Any
    \"\"\"The params model (a class or a union alias); ``None`` when the method has none.\"\"\"
    result: Any
    \"\"\"The result model; ``None`` for notifications.\"\"\"
"""


IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def references(item: Any, names: set[str]) -> set[str]:
    """The *names* one generated item's code refers to (field types, defaults, base, alias)."""
    if isinstance(item, ClassDef):
        parts = [item.base or ""]
        parts += [f.type_expr for f in item.fields] + [f.default or "" for f in item.fields]
        text = " ".join(parts)
    elif isinstance(item, AliasDef):
        text = item.expr
    else:
        return set()
    return set(IDENTIFIER.findall(text)) & names


def shape(item: Any) -> Any:
    """One generated item with its documentation blanked: what its code is made of."""
    if isinstance(item, ClassDef):
        fields = [dataclasses.replace(f, doc="") for f in item.fields]
        return dataclasses.replace(item, doc="", fields=fields)
    if isinstance(item, EnumDef):
        members = [(member, value, "") for member, value, _ in item.members]
        return dataclasses.replace(item, doc="", members=members)
    if isinstance(item, AliasDef):
        return dataclasses.replace(item, doc="")
    return item


def shared_names(stable: Model, unstable: Model) -> frozenset[str]:
    """Names *unstable* can import from the stable module instead of defining again.

    An item is shared when its code equals its stable namesake's (documentation aside: the
    unstable schema's links point at the draft pages) and every item it refers to is shared,
    so that the stable class, resolving its annotations in ``acpkit.schema``, decodes
    exactly as an unstable one would.
    """
    before = {item.name: shape(item) for item in stable.items}
    items = {item.name: item for item in unstable.items}
    names = set(items)
    shared = {name for name, item in items.items() if before.get(name) == shape(item)}
    while True:
        dropped = {name for name in shared if not references(items[name], names) <= shared}
        if not dropped:
            return frozenset(shared)
        shared -= dropped


def public_names(model: Model) -> list[str]:
    """``__all__`` of an ACP module: the runtime names, every generated item, method tables."""
    tables = ["AGENT_METHODS", "CLIENT_METHODS", "PROTOCOL_METHODS"]
    if any(m[1] == "proxy" for m in model.methods):
        tables.append("PROXY_METHODS")
    return sorted({*RUNTIME_NAMES, *(item.name for item in model.items), *tables})


def render_all(names: list[str]) -> str:
    """The ``__all__`` list of a module."""
    return "\n__all__ = [\n" + "".join(f'    "{name}",\n' for name in names) + "]"


def render_reexports(names: frozenset[str]) -> str:
    """The import of the stable names ``acpkit/unstable.py`` shares with ``acpkit/schema.py``."""
    body = "".join(f"    {name},\n" for name in sorted(names))
    return "\nfrom acpkit.schema import (\n" + body + ")"


def ordered(items: list[Any]) -> list[Any]:
    """Enums, then classes, then aliases, each group ordered so definitions precede uses."""
    names = {item.name for item in items}

    def deps(item: Any) -> set[str]:
        if isinstance(item, ClassDef):
            found = {item.base} if item.base else set()
            for f in item.fields:
                if f.default:
                    found |= set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", f.default)) & names
            return found
        if isinstance(item, AliasDef):
            return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", item.expr)) & names
        return set()

    rank = {EnumDef: 0, UnknownDef: 1, ClassDef: 1, AliasDef: 2}
    out: list[Any] = []
    done: set[str] = set()
    by_name = {item.name: item for item in items}

    def visit(item: Any, stack: tuple[str, ...] = ()) -> None:
        if item.name in done or item.name in stack:
            return
        for dep in sorted(deps(item)):
            if rank[type(by_name[dep])] == rank[type(item)]:
                visit(by_name[dep], (*stack, item.name))
        done.add(item.name)
        out.append(item)

    for group in (0, 1, 2):
        for item in items:
            if rank[type(item)] == group:
                visit(item)
    return out


def render(
    model: Model,
    title: str,
    source: str,
    stable: bool,
    mcp_revision: str | None = None,
    shared: frozenset[str] = frozenset(),
) -> str:
    """The Python source of one generated module (an MCP one when *mcp_revision* is given).

    *shared* names (unstable module only) are imported from ``acpkit.schema``, not defined.
    """
    table = []
    for item in model.items:
        if isinstance(item, ClassDef) and item.tag is not None:
            owner = next(
                (
                    a.name
                    for a in model.items
                    if isinstance(a, AliasDef) and item.name in a.expr.split(" | ")
                ),
                "?",
            )
            wire = f"{item.tag[0]}={item.tag[1]!r}"
            table.append(f"    {owner:<30} {wire:<42} {item.name}")
    body = (
        "Tagged-union variant classes (union, wire tag, class); the tag is a ClassVar\n"
        "``__acp_tag__``, never a constructor argument. An unknown tag decodes to\n"
        "``Unknown<Union>`` keeping the raw dict.\n\n" + "\n".join(sorted(table))
    )
    out = [HEADER.format(title=title, source=source, body=body).rstrip("\n")]
    if stable:
        out.append(render_all(public_names(model)))
        out.append(STABLE_RUNTIME.rstrip("\n"))
    elif mcp_revision is not None:
        out.append(MCP_RUNTIME.replace("{revision}", mcp_revision).rstrip("\n"))
    else:
        out[-1] = out[-1] + "\n" + render_reexports(shared | frozenset(RUNTIME_NAMES))
        out.append(render_all(public_names(model)))
    for item in ordered([item for item in model.items if item.name not in shared]):
        out.append("")
        out.append("")
        if isinstance(item, EnumDef):
            base = "OpenIntEnum" if item.is_int else "OpenStrEnum"
            out.append(f"class {item.name}({base}):")
            out += render_doc(item.doc, "    ")
            out.append("")
            out.append(f"    __acp_open__: ClassVar[bool] = {item.open}")
            for member, value, mdoc in item.members:
                out.append("")
                out.append(f"    {member} = {value!r}")
                if mdoc:
                    out += render_doc(mdoc, "    ")
        elif isinstance(item, AliasDef):
            out.append(f"{item.name}: TypeAlias = {item.expr}")
            if len(out[-1]) > 100:
                parts = item.expr.split(" | ")
                out[-1] = f"{item.name}: TypeAlias = ("
                out += [f"    {parts[0]}"] + [f"    | {p}" for p in parts[1:]] + [")"]
            out += render_doc(item.doc, "")
        elif isinstance(item, UnknownDef):
            out.append("@attrs.frozen(weakref_slot=False)")
            out.append(f"class {item.name}:")
            out += render_doc(
                f"A ``{item.union}`` variant this version of acpkit does not know.\n\n"
                "``raw`` is the whole JSON object as received; it is re-encoded unchanged.",
                "    ",
            )
            out.append("")
            out.append(f"    __acp_unknown__: ClassVar[str] = {item.tag_key!r}")
            out.append("")
            out.append("    raw: dict[str, Any]")
            out.append("")
            out.append("    @property")
            out.append("    def tag(self) -> Any:")
            out.append('        """The unrecognised tag value."""')
            out.append("        return self.raw.get(self.__acp_unknown__)")
        else:
            out.append("@attrs.frozen(kw_only=True, weakref_slot=False)")
            out.append(f"class {item.name}{'(' + item.base + ')' if item.base else ''}:")
            out += render_doc(item.doc, "    ")
            if item.tag is not None:
                out.append("")
                out.append(f"    __acp_tag__: ClassVar[tuple[str, str]] = {item.tag!r}")
            for f in item.fields:
                out.append("")
                out += render_field(f, "    ")
    if mcp_revision is not None:
        return ruff_format("\n".join(out + render_mcp_methods(model)) + "\n")
    # method table
    for side, var in (
        ("agent", "AGENT"),
        ("client", "CLIENT"),
        ("protocol", "PROTOCOL"),
        ("proxy", "PROXY"),
    ):
        entries = [m for m in model.methods if m[1] == side]
        if side == "proxy" and not entries:
            continue
        out.append("")
        out.append("")
        out.append(f"{var}_METHODS: dict[str, Method] = {{")
        for name, mside, kind, params, result in entries:
            out.append(f'    "{name}": Method(')
            out.append(f'        name="{name}",')
            out.append(f'        side="{mside}",')
            out.append(f'        kind="{kind}",')
            out.append(f"        params={params},")
            out.append(f"        result={result},")
            out.append("    ),")
        out.append("}")
        out += render_doc(f"Methods handled by the {side} side, by wire name.", "")
    return ruff_format("\n".join(out) + "\n")


def render_mcp_methods(model: Model) -> list[str]:
    """``MCP_SERVER_METHODS`` and ``MCP_CLIENT_METHODS``: methods by the side that handles them."""
    out: list[str] = []
    for side, sender in (("server", "client"), ("client", "server")):
        out += ["", "", f"MCP_{side.upper()}_METHODS: dict[str, Method] = {{"]
        for name, mside, kind, params, result in model.methods:
            if mside != side:
                continue
            out.append(f'    "{name}": Method(')
            out.append(f'        name="{name}",')
            out.append(f'        side="{mside}",')
            out.append(f'        kind="{kind}",')
            out.append(f"        params={params},")
            out.append(f"        result={result},")
            out.append("    ),")
        out.append("}")
        out += render_doc(
            f"Methods an MCP {side} handles (the {sender} sends them), by wire name.", ""
        )
    return out


def ruff_format(source: str) -> str:
    """Format generated source with ``ruff format`` (found beside the interpreter or on PATH)."""
    ruff = Path(sys.executable).with_name("ruff")
    exe = str(ruff) if ruff.exists() else (shutil.which("ruff") or "ruff")
    done = subprocess.run(
        [exe, "format", "--line-length", "100", "--stdin-filename", "generated.py", "-"],
        input=source.encode("utf-8"),
        capture_output=True,
        check=True,
    )
    return done.stdout.decode("utf-8")


def load_model(schema_path: Path) -> Model:
    """The generated items of one ACP schema file."""
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    return Generator(schema).run()


def generate(schema_path: Path, title: str, stable: bool) -> str:
    """Generate one module's source from one schema file.

    The unstable module (``stable=False``) is generated as a delta over the stable one,
    ``schema.json`` beside *schema_path* (see :func:`shared_names`).
    """
    model = load_model(schema_path)
    source = f"acpkit/schemas/v1/{schema_path.name}"
    if stable:
        return render(model, title, source, stable)
    shared = shared_names(load_model(schema_path.with_name("schema.json")), model)
    return render(model, title, source, stable, shared=shared)


def generate_mcp(revision: str = MCP_REVISION) -> str:
    """Generate ``acpkit/mcp/schema.py`` from the vendored MCP schema of *revision*."""
    schema_path = MCP_SCHEMA_DIR / revision / "schema.json"
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    model = McpGenerator(schema).run()
    source = schema_path.relative_to(ROOT).as_posix()
    title = f"MCP {revision} protocol models."
    return render(model, title, source, False, mcp_revision=revision)


def generate_all(out_dir: Path) -> list[Path]:
    """Write ``schema.py``, ``unstable.py`` and ``mcp/schema.py`` into *out_dir*.

    Returns the paths written.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = [
        ("schema.json", "schema.py", "ACP v1 stable protocol models.", True),
        (
            "schema.unstable.json",
            "unstable.py",
            "ACP v1 unstable protocol models (superset).",
            False,
        ),
    ]
    written = []
    for src, dst, title, stable in jobs:
        path = out_dir / dst
        path.write_text(generate(SCHEMA_DIR / src, title, stable), encoding="utf-8")
        written.append(path)
    mcp_path = out_dir / MCP_MODULE
    mcp_path.parent.mkdir(parents=True, exist_ok=True)
    mcp_path.write_text(generate_mcp(), encoding="utf-8")
    written.append(mcp_path)
    return written


def drift(package_dir: Path = ROOT / "acpkit") -> list[str]:
    """Names of the committed generated modules that differ from a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate_all(Path(tmp))
        changed = []
        for p in fresh:
            name = p.relative_to(tmp).as_posix()
            committed = package_dir / name
            if not committed.exists() or p.read_text(encoding="utf-8") != committed.read_text(
                encoding="utf-8"
            ):
                changed.append(name)
        return changed


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if committed output drifted")
    args = parser.parse_args(argv)
    if args.check:
        changed = drift()
        for name in changed:
            sys.stderr.write(f"acpkit/{name} is out of date; run tools/generate_schema.py\n")
        return 1 if changed else 0
    generate_all(ROOT / "acpkit")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
