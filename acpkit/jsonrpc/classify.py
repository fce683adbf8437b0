"""
The pure core of JSON-RPC 2.0: bytes to a JSON value, a JSON value to a typed event.

No I/O, no state, no logging (in the style of h11): :func:`decode_message` turns one
framed message (bytes) into a JSON value (or an :class:`Unparsable`, or a
:class:`TooDeep` for text nested deeper than
:data:`~acpkit.jsonrpc.jsonbytes.MAX_NESTING_DEPTH`), and :func:`classify` turns any JSON value
into exactly one of

==============================  ====================================================
event                           when
==============================  ====================================================
:class:`Request`                an object with ``method`` and ``id``, a valid id
                                (integer or string), ``"jsonrpc": "2.0"`` and a
                                string method
:class:`Notification`           an object with ``method`` and no ``id``,
                                ``"jsonrpc": "2.0"`` and a string method
:class:`Response`               an object without ``method`` with ``result`` xor
                                ``error`` (an object with an integer ``code``), a
                                valid id, or id ``null`` with an ``error``
:class:`Invalid`                anything else, with the reason, the id to answer
                                with (``None`` for id ``null``), whether it may be
                                answered at all (never for a notification) and, for
                                a malformed response, the id it carried
==============================  ====================================================

:func:`classify` never raises, whatever the value (see ``tests/jsonrpc/test_rpc_classify.py``).
The engine (:mod:`acpkit.jsonrpc`) adds what needs state: registered methods, ids in
progress, pending outgoing requests.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from acpkit.errors import RPCError, clip
from acpkit.jsonrpc.jsonbytes import (
    MAX_NESTING_DEPTH,
    NOT_PARSED,
    TOO_DEEP,
    dumps_or_none,
    loads_or_not_parsed,
    nesting_exceeds,
)

__all__ = [
    "Event",
    "HugeInt",
    "Invalid",
    "Notification",
    "Request",
    "RequestId",
    "Response",
    "TooDeep",
    "Unparsable",
    "classify",
    "decode_message",
    "encode_message",
    "error_message",
    "is_plain_request",
    "is_valid_id",
    "parse_decimal_id",
    "read_envelope",
    "result_message",
]

#: A JSON-RPC request id as acpkit accepts it.
RequestId = int | str

_BOM: Final = b"\xef\xbb\xbf"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# One encoder and one decoder, built once: json.dumps/json.loads with non-default
# arguments build a new one on every call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_ASCII_ENCODER = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False)
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_RAW_DECODE = _DECODER.raw_decode
_DECIMAL_ID = re.compile(r"-?(0|[1-9][0-9]*)")


def encode_message(obj: Any) -> bytes:
    """
    Serialise one message as compact UTF-8 JSON without newlines.

    ``ensure_ascii=False`` for compactness; text with lone surrogates (which UTF-8
    cannot carry) falls back to ``ensure_ascii=True``.  Raises ``TypeError`` or
    ``ValueError`` (NaN, infinities) for what is not JSON, and
    :class:`~acpkit.jsonrpc.jsonbytes.NestingTooDeep` (a ``ValueError``) for a message nested
    deeper than :data:`~acpkit.jsonrpc.jsonbytes.MAX_NESTING_DEPTH`: no peer of ours would read
    it, and nothing here recurses past that.
    """
    fast = dumps_or_none(obj)  # orjson, when its bytes are the encoder's (jsonbytes)
    if fast is not None:
        return fast
    text = _ENCODER.encode(obj)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _ASCII_ENCODER.encode(obj).encode("ascii")


def error_message(request_id: RequestId | None, error: RPCError) -> dict[str, Any]:
    """The error response to ``request_id`` (``None``: id ``null``)."""
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_json()}


def result_message(request_id: RequestId, result: Any) -> dict[str, Any]:
    """The success response to ``request_id``."""
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def is_valid_id(value: object) -> bool:
    """True for an integer (not a bool) or a string: the ids acpkit accepts."""
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, str)


def parse_decimal_id(value: str) -> int | None:
    """The integer a string id spells in plain decimal (``"7"``), else None."""
    return int(value) if _DECIMAL_ID.fullmatch(value) else None


class HugeInt:
    """
    An integer literal with more digits than Python converts (``sys.int_info``'s
    ``default_max_str_digits``): valid JSON, but no value this side (or, in practice, any
    peer) can hold and echo exactly.
    """

    __slots__ = ("digits",)

    def __init__(self, literal: str) -> None:
        self.digits = len(literal) - literal.startswith("-")

    def __repr__(self) -> str:
        return f"<integer of {self.digits} digits>"


def _decode_with_huge_ints(text: str) -> tuple[Any, list[HugeInt]]:
    """
    Decode ``text`` with integers too long for ``int()`` kept as :class:`HugeInt`.

    Only used once the fast decoder refused a message: a custom ``parse_int`` slows
    every integer down.
    """
    found: list[HugeInt] = []

    def parse_int(literal: str) -> Any:
        try:
            return int(literal)
        except ValueError:
            huge = HugeInt(literal)
            found.append(huge)
            return huge

    decoder = json.JSONDecoder(parse_constant=_reject_constant, parse_int=parse_int)
    return decoder.decode(text), found


class Unparsable:
    """A message that is not UTF-8 or not JSON: answered -32700 with id ``null``."""

    __slots__ = ("detail", "error", "not_utf8")

    def __init__(self, detail: str, error_text: str, *, not_utf8: bool = False) -> None:
        #: What to log.
        self.detail = detail
        #: The text of the -32700 error.
        self.error = error_text
        #: Whether the bytes are not UTF-8 (rather than not JSON).
        self.not_utf8 = not_utf8

    def __repr__(self) -> str:
        return f"Unparsable({self.detail!r})"


class TooDeep:
    """
    A message nested deeper than :data:`~acpkit.jsonrpc.jsonbytes.MAX_NESTING_DEPTH` arrays and
    objects: not parsed past its first top-level member that is (see "Nesting depth" in
    :mod:`acpkit.jsonrpc` for the answer).

    ``members``: the top-level members read before that one (``None``: the message is
    not an object, an array nested too deep for instance); ``member``: its name
    (``None`` when the message is not an object, or no member could be told apart).
    The members read are shallow and whole: ``classify(members)`` shows the envelope
    (encoders write ``jsonrpc``, ``id`` and ``method`` before ``params``).
    """

    __slots__ = ("member", "members")

    def __init__(self, members: dict[str, Any] | None, member: str | None) -> None:
        self.members = members
        self.member = member

    def is_response(self) -> bool:
        """True when it reads as a response: ``result`` or ``error`` read or too deep,
        no ``method``."""
        members = self.members
        return (
            members is not None
            and "method" not in members
            and (self.member in ("result", "error") or "result" in members or "error" in members)
        )

    @property
    def reason(self) -> str:
        """What to say about it (in a log line and an error message)."""
        where = "the message" if self.member is None else f"its {clip(self.member, 40)!r} member"
        return f"{where} is nested deeper than {MAX_NESTING_DEPTH} levels of arrays and objects"

    def __repr__(self) -> str:
        return f"TooDeep({self.member!r}, keys={list(self.members or ())!r})"


def _skip_space(text: str, pos: int) -> int:
    n = len(text)
    while pos < n and text[pos] in " \t\r\n":
        pos += 1
    return pos


def read_envelope(text: str) -> TooDeep:
    """
    The top-level members of a JSON text nested too deep, read up to the first member
    that is (or cannot be read): a :class:`TooDeep`.

    Each member is decoded on its own (C speed): one that nests deeper than the limit
    (``RecursionError`` from :mod:`json`, or a value :func:`nesting_exceeds` refuses)
    ends the scan; the rest of the text is not read.  No recursion here; the cost is at
    most one decode of the text.
    """
    pos = _skip_space(text, 0)
    if not text.startswith("{", pos):
        return TooDeep(None, None)
    members: dict[str, Any] = {}
    pos += 1
    while True:
        pos = _skip_space(text, pos)
        if not text.startswith('"', pos):
            return TooDeep(members, None)
        try:
            key, pos = _RAW_DECODE(text, pos)
        except ValueError:
            return TooDeep(members, None)
        pos = _skip_space(text, pos)
        if not text.startswith(":", pos):
            return TooDeep(members, None)
        pos = _skip_space(text, pos + 1)
        try:
            value, pos = _RAW_DECODE(text, pos)
        except (ValueError, RecursionError):
            return TooDeep(members, key)
        if nesting_exceeds(value, MAX_NESTING_DEPTH - 1):  # one level is the message's
            return TooDeep(members, key)
        members[key] = value
        pos = _skip_space(text, pos)
        if not text.startswith(",", pos):
            return TooDeep(members, None)
        pos += 1


_NO_HUGE: Final[list[HugeInt]] = []


def decode_message(data: bytes) -> tuple[Any, list[HugeInt]] | Unparsable | TooDeep | None:
    """
    Decode one framed message: ``None`` for a blank one (ignored), an
    :class:`Unparsable`, a :class:`TooDeep` (nested deeper than
    :data:`~acpkit.jsonrpc.jsonbytes.MAX_NESTING_DEPTH`, whatever the depth), or the JSON value
    and the integers too long to convert (:class:`HugeInt`, found in it; usually none).
    A leading UTF-8 BOM is skipped.  Never raises.
    """
    if not data or data.isspace():  # (strip() would copy every message)
        return None
    if data.startswith(_BOM):
        data = data[len(_BOM) :]
    fast = loads_or_not_parsed(data)  # orjson, when it reads what json would (jsonbytes)
    if fast is not NOT_PARSED:
        if fast is TOO_DEEP:
            return read_envelope(data.decode("utf-8"))  # (orjson read it: valid UTF-8)
        return fast, _NO_HUGE
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return Unparsable(
            f"invalid UTF-8 line: {e}", f"invalid UTF-8 at byte {e.start}", not_utf8=True
        )
    try:
        # raw_decode skips decode()'s two whitespace regex matches; anything it does
        # not take whole (surrounding whitespace, an error) goes through decode().
        obj, end = _RAW_DECODE(text)
        if end == len(text):
            return _unless_too_deep(text, obj, _NO_HUGE)
    except RecursionError:
        return read_envelope(text)
    except ValueError:
        pass
    try:
        return _unless_too_deep(text, _DECODER.decode(text), _NO_HUGE)
    except RecursionError:
        return read_envelope(text)
    except ValueError as e:
        if type(e) is ValueError:
            # Not a syntax error: an integer too long for int() (valid JSON) or NaN.
            try:
                return _unless_too_deep(text, *_decode_with_huge_ints(text))
            except RecursionError:
                return read_envelope(text)
            except ValueError:
                pass
        return Unparsable(f"not JSON ({e}): {clip(text, 80)!r}", str(e))


def _unless_too_deep(
    text: str, obj: Any, huge: list[HugeInt]
) -> tuple[Any, list[HugeInt]] | TooDeep:
    """What :mod:`json` read, unless it nests deeper than the limit (json reads up to
    the recursion limit, less the stack in use)."""
    if len(text) > 2 * MAX_NESTING_DEPTH + 1 and nesting_exceeds(obj):
        return read_envelope(text)
    return obj, huge


class Request:
    """A well-formed request (its params are not checked: that needs the method)."""

    __slots__ = ("id", "method", "params", "value")

    def __init__(self, request_id: RequestId, method: str, params: Any, value: Any) -> None:
        self.id = request_id
        self.method = method
        #: ``params`` as received (``None`` when absent).
        self.params = params
        #: The whole message as decoded.
        self.value = value

    def __repr__(self) -> str:
        return f"Request({self.id!r}, {self.method!r})"


class Notification:
    """A well-formed notification."""

    __slots__ = ("method", "params")

    def __init__(self, method: str, params: Any) -> None:
        self.method = method
        #: ``params`` as received (``None`` when absent).
        self.params = params

    def __repr__(self) -> str:
        return f"Notification({self.method!r})"


class Response:
    """
    A well-formed response: ``error`` is ``None`` for a result.  ``id`` is ``None``
    only for an error the peer could not attach to a request (id ``null``).
    """

    __slots__ = ("error", "id", "result")

    def __init__(self, response_id: RequestId | None, result: Any, error: dict[str, Any] | None):
        self.id = response_id
        self.result = result
        self.error = error

    def __repr__(self) -> str:
        return f"Response({self.id!r}, error={self.error is not None})"


class Invalid:
    """
    A JSON value that is no valid message.

    ``kind`` is what it looked like: ``"request"``, ``"notification"``, ``"response"``
    or ``"message"`` (not an object, a batch, or an object that is no envelope).
    ``answer`` is False for notifications (never answered); else the answer is -32600
    with ``answer_id`` (``None``: id ``null``).  ``response_id`` is the id a malformed
    response carried (it names one of OUR requests, so it is never echoed).  ``junk``:
    not a JSON object at all (a banner, a stray print).
    """

    __slots__ = ("answer", "answer_id", "junk", "kind", "reason", "response_id", "value")

    def __init__(
        self,
        kind: str,
        reason: str,
        value: Any,
        *,
        answer_id: RequestId | None = None,
        answer: bool = True,
        response_id: object = None,
        junk: bool = False,
    ) -> None:
        self.kind = kind
        self.reason = reason
        self.value = value
        self.answer_id = answer_id
        self.answer = answer
        self.response_id = response_id
        self.junk = junk

    def __repr__(self) -> str:
        return f"Invalid({self.kind!r}, {self.reason!r}, answer_id={self.answer_id!r})"


Event = Request | Notification | Response | Invalid


def is_plain_request(obj: dict[str, Any]) -> bool:
    """
    Whether ``obj`` is a request :func:`classify` accepts, in its common form: a
    ``str`` method, an ``int`` or ``str`` id and ``"jsonrpc": "2.0"``.  A reader that
    needs no :class:`Request` event may take such a message as it is (once per request);
    False leaves ``obj`` to :func:`classify`, which says what it is.
    """
    if "method" not in obj or "id" not in obj:
        return False
    id_kind = type(obj["id"])
    return (
        (id_kind is int or id_kind is str)
        and type(obj["method"]) is str
        and obj.get("jsonrpc") == "2.0"
    )


def classify(obj: Any) -> Event:
    """Classify one decoded JSON value (never raises)."""
    if type(obj) is not dict:
        if isinstance(obj, list):
            return Invalid("message", "batches are not supported", obj)
        if not isinstance(obj, dict):
            return Invalid("message", "a message must be a JSON object", obj, junk=True)
    if "method" in obj:
        method = obj["method"]
        if "id" in obj:
            request_id = obj["id"]
            kind = type(request_id)
            if kind is not int and kind is not str and not is_valid_id(request_id):
                return Invalid("request", "the id must be a string or an integer", obj)
            if obj.get("jsonrpc") != "2.0":
                return Invalid(
                    "request", 'the "jsonrpc" member must be "2.0"', obj, answer_id=request_id
                )
            if not isinstance(method, str):
                return Invalid("request", "the method must be a string", obj, answer_id=request_id)
            return Request(request_id, method, obj.get("params"), obj)
        if obj.get("jsonrpc") != "2.0" or not isinstance(method, str):
            return Invalid("notification", "invalid notification", obj, answer=False)
        return Notification(method, obj.get("params"))
    if "result" in obj or "error" in obj:
        return _classify_response(obj)
    return Invalid("message", "not a request, notification or response", obj)


def _classify_response(obj: dict[str, Any]) -> Response | Invalid:
    response_id = obj.get("id", None)
    has_result, has_error = "result" in obj, "error" in obj
    error = obj.get("error")
    problem: str
    if "id" not in obj:
        problem = "a response must have an id"
    elif obj.get("jsonrpc") != "2.0":
        problem = 'the "jsonrpc" member must be "2.0"'
    elif has_result and has_error:
        problem = "a response must not have both result and error"
    elif has_error and not (
        isinstance(error, dict)
        and isinstance(error.get("code"), int)
        and not isinstance(error.get("code"), bool)
    ):
        problem = "the error must be an object with an integer code"
    elif response_id is None and has_error:
        return Response(None, None, error)
    elif not is_valid_id(response_id):
        problem = "the id must be a string or an integer"
    else:
        if has_error:
            return Response(response_id, None, error)
        return Response(response_id, obj["result"], None)
    # Never echo the id: it names one of OUR requests, not one of the peer's.
    return Invalid("response", f"malformed response: {problem}", obj, response_id=response_id)
