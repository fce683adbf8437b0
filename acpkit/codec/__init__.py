"""The one codec: JSON-able builtins <-> the generated models of :mod:`acpkit.schema`,
:mod:`acpkit.unstable` and :mod:`acpkit.mcp.schema` (MCP, loaded only when imported),
built on cattrs.

Contract (others code against it)::

    decode(cls, obj, *, strict=False) -> instance of cls      # raises DecodeError
    encode(value) -> JSON-able builtins                       # None fields omitted
                                                              # raises EncodeError (a wrong type)
    decode_json(cls, data, *, strict=False), encode_json(value) -> bytes
    loads(data) -> builtins, dumps(obj) -> bytes              # orjson, json fallbacks
    wire_tag(value) -> str | None                             # a variant's wire tag
    converter: cattrs.Converter                               # the lenient converter
    get_converter(converter=None) -> cattrs.Converter         # our hooks on yours

How it is built: :func:`get_converter` registers hook factories on a
:class:`cattrs.Converter`. Each model class gets cattrs' own generated functions,
``make_dict_structure_fn_from_attrs`` / ``make_dict_unstructure_fn_from_attrs``, with one
``cattrs.override`` per attribute: ``rename=`` the camelCase wire key, ``omit_if_default=``
for the fields whose default is ``None`` or ``ABSENT``, and the field's ``struct_hook`` /
``unstruct_hook``. Strict mode is the same hooks on a converter made with
``forbid_extra_keys=True``. ``converter`` and the strict one use ``detailed_validation``,
and the cattrs exception groups (``ClassValidationError`` with
``AttributeValidationNote``) are turned into a :class:`DecodeError` with a JSON path.
cattrs registers the generated source in :mod:`linecache`, so tracebacks inside them
show their lines.

For speed, two things beside cattrs' defaults. Lenient :func:`decode` first runs a
converter without detailed validation and decodes again with ``converter`` only when
that fails (for the error's path). That first converter's class hooks are not cattrs'
generated functions but one generated function per class (:mod:`acpkit.codec.fast`) that reads
each key, checks a JSON primitive inline or calls the attribute's hook (the same hooks as
the other converters), and fills a new instance through the class's slot-compatible twin
(``slot_twin``); the other converters' cattrs functions call a constructor that stores the
slots directly (``constructor``: attrs' frozen ``__init__`` goes through
``object.__setattr__``). Measured (benchmarks/bench_codec.py), cattrs' generated function
(a ``res`` dict, then ``cls(..., **res)``) and the slot setters were three quarters of
decode()'s time, and kept the three-block prompt at 1.5x the ``json.loads`` floor;
fused, it is below the floor. Both fast-path pieces are checked against the detailed
converters (tests/codec/test_codec_fast_checks.py). The three converters are made on first
use.

Rules, and the small hooks cattrs cannot express by itself (each is a cattrs hook or an
override's hook, never a step beside the converter):

- camelCase on the wire, ``_meta`` <-> ``meta`` (explicit ``wire`` metadata where the
  name cannot be derived): ``override(rename=...)``. Optional fields that are ``None``
  are omitted on encode (``omit_if_default``); required fields are always written
  (``RequestId`` may be ``null``).
- Null-meaningful fields (``Diff.old_text``, ``SessionInfoUpdate.title`` /
  ``updated_at``, the ``request_id`` scope of elicitations) default to
  :data:`acpkit.schema.ABSENT`: ``ABSENT`` is omitted, ``None`` is written as ``null``.
- On encode, each attribute's Python type is checked (:mod:`acpkit.codec.encoders`): a
  wrong one (``NewSessionResponse(session_id=1)``) raises :class:`EncodeError` naming the
  model, the field and its wire key, instead of reaching the wire.
- JSON types are checked, not coerced (cattrs' default ``str`` hook would turn ``3`` into
  ``"3"``): small per-field hooks for ``str``/``int``/``float``/``bool``/objects. A
  ``null`` optional field decodes to its default (a per-field hook where the default is
  not ``None``).
- Tagged unions (a structure hook factory): one dict lookup on the wire tag; a missing
  tag selects the untagged fallback variant where the schema has one (stdio MCP server,
  agent auth method, titled multi-select items, value-id config value); an unknown tag
  decodes to ``Unknown<Union>(raw=...)`` in lenient mode and is an error in strict mode.
  cattrs' tagged-union strategy needs a tag on every variant and writes it last; ours
  writes it first and keeps unknown variants raw. The tag is one more attribute given to
  cattrs' generators (``TAG_FIELD``): read from the class and written first on encode;
  in strict mode read from the wire when present and checked, so that
  ``forbid_extra_keys`` knows the key.
- Untagged unions (same factory): classes are chosen by the required keys only one of
  them has (``text``/``blob``, ``result``/``error``); ``list[A] | list[B]`` by the first
  item; ``A | list[A]`` (MCP sampling content) by JSON type, object or array; primitive
  unions by JSON type (bool before int, int before float).
- Lenient mode (default): unknown fields are ignored, unknown enum values are kept
  (``OpenStrEnum``; an enum hook factory), ``x-deserialize-default-on-error`` fields fall
  back to their default when invalid and ``x-deserialize-skip-invalid-items`` lists drop
  invalid items (per-field hooks: cattrs has no per-field "default on error").
  Missing required fields and wrong types elsewhere raise :class:`DecodeError`.
- Strict mode reports unknown fields, unknown tags, unknown values of closed enums,
  wrong types and missing required fields, with a JSON path.

Hooks are generated lazily, on first use of each class, so importing this module is cheap.
orjson (:mod:`acpkit.jsonrpc.jsonbytes`) does bytes <-> builtins.

=================================  =====================================================
module                             its job
=================================  =====================================================
:mod:`acpkit.codec.converters`     the three converters, :func:`decode`, :func:`encode`
                                   and their JSON-text forms
:mod:`acpkit.codec.hooks`          the cattrs hook factories (:func:`get_converter`)
:mod:`acpkit.codec.unions`         tagged and untagged unions
:mod:`acpkit.codec.fast`           the generated fast path: fused class hooks, slot
                                   twins, slot constructors
:mod:`acpkit.codec.encoders`       the generated class encoders, which check each
                                   attribute's type (:class:`EncodeError`)
:mod:`acpkit.codec.primitives`     the small hooks: JSON primitives, nulls, defaults
:mod:`acpkit.codec.wire`           wire keys and tags; which types are the models'
:mod:`acpkit.codec.decode_errors`  :class:`DecodeError` and the JSON paths of errors
=================================  =====================================================
"""

from __future__ import annotations

from typing import Any

import cattrs

from acpkit.codec.converters import decode, decode_json, encode, encode_json, hooks
from acpkit.codec.decode_errors import DecodeError
from acpkit.codec.encoders import EncodeError
from acpkit.codec.fast import constructor, slot_twin
from acpkit.codec.hooks import get_converter
from acpkit.codec.wire import wire_name, wire_tag
from acpkit.jsonrpc.jsonbytes import dumps, loads

__all__ = [
    "DecodeError",
    "EncodeError",
    "converter",
    "decode",
    "decode_json",
    "dumps",
    "encode",
    "encode_json",
    "get_converter",
    "loads",
    "wire_name",
    "wire_tag",
]

# Reached by the fast path's own tests (tests/codec/test_codec_fast_checks.py,
# tests/codec/test_codec_cattrs.py) under the names they had when the codec was one module.
_hooks = hooks
_twin = slot_twin
_constructor = constructor

converter: cattrs.Converter
"""The lenient converter: ``converter.structure(obj, cls)`` == ``decode(cls, obj)``, with
cattrs' detailed validation (its errors name the attribute). Made on first access."""


def __getattr__(name: str) -> Any:
    if name == "converter":
        return hooks("lenient").conv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
