"""
Errors of the JSON-RPC layer.

Two families:

- :class:`RPCError` and its subclasses travel on the wire as the ``error`` member of a
  response.  A request handler raises one to answer with it; an outgoing request's
  ``Deferred`` fails with one when the peer answered with an error
  (:meth:`RPCError.from_json` picks the subclass by code).
- :class:`ConnectionLost`, :class:`RequestTimeout`, :class:`CapabilityError` and
  :class:`AgentExited` are local: they never go on the wire.

Text taken from the peer (a method name, a reason) is clipped to a few hundred
characters before it is put into a message or ``data``, so an error never echoes a
large piece of peer input back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

__all__ = [
    "HTTP_TRANSPORT_ERROR",
    "AgentExited",
    "AuthRequired",
    "CapabilityError",
    "ConnectionLost",
    "InternalError",
    "InvalidParams",
    "InvalidRequest",
    "MessageTooLarge",
    "MethodNotFound",
    "NotDelivered",
    "ParseError",
    "RPCError",
    "RequestCancelled",
    "RequestTimeout",
    "ResourceNotFound",
    "clip",
]

#: Longest piece of peer-provided text put into an error message or its data.
CLIP_LENGTH = 200

#: Error code of a request that failed in an HTTP transport (JSON-RPC's range for
#: implementation-defined errors); ``data`` holds ``reason`` and, for an HTTP error
#: status, ``status``.  Here, beside the other errors, so that code judging a failure
#: (a reconnecting client) need not load the HTTP machinery to name it.
HTTP_TRANSPORT_ERROR = -32080

_E = TypeVar("_E", bound="RPCError")


def clip(text: str, limit: int = CLIP_LENGTH) -> str:
    """Return ``text`` cut to at most ``limit`` characters (with a marker when cut)."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"...[{len(text) - limit} more characters]"


def _titled(title: str, detail: str | None) -> str:
    return title if not detail else f"{title}: {detail}"


class RPCError(Exception):
    """
    An error that travels on the wire: ``{"code": ..., "message": ..., "data": ...}``.

    ``RPCError(code, message, data)`` builds any error; the subclasses below have
    convenient constructors for the codes JSON-RPC and ACP define.
    """

    #: The code this class stands for (subclasses); ``RPCError`` itself takes any code.
    CODE: ClassVar[int] = -32603
    #: The standard message of the code.
    TITLE: ClassVar[str] = "Error"

    code: int
    message: str
    data: Any

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def __str__(self) -> str:
        return f"{self.message} (code {self.code})"

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(code={self.code!r}, message={self.message!r}, data={self.data!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RPCError):
            return NotImplemented
        return (self.code, self.message, self.data) == (other.code, other.message, other.data)

    def __hash__(self) -> int:
        return hash((self.code, self.message))

    def to_json(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` object (``data`` only when it is not ``None``)."""
        obj: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            obj["data"] = self.data
        return obj

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> RPCError:
        """
        Build the error a peer sent, as the subclass registered for its code.

        Tolerant: a missing or non-string message becomes the code's standard title, a
        non-integer code becomes -32603.  Code, message and data are kept as received.
        """
        code = obj.get("code")
        if not isinstance(code, int) or isinstance(code, bool):
            code = InternalError.CODE
        target = _BY_CODE.get(code, RPCError)
        message = obj.get("message")
        if not isinstance(message, str):
            message = target.TITLE if target is not RPCError else "Error"
        data = obj.get("data")
        limit = data.get("limit") if isinstance(data, Mapping) else None
        if target is InvalidRequest and isinstance(limit, int) and not isinstance(limit, bool):
            # -32600 with an integer data.limit: the peer's "line too long" error.
            too_large = MessageTooLarge._from_parts(code, message, data)
            too_large.limit = limit
            return too_large
        return target._from_parts(code, message, data)

    @classmethod
    def _from_parts(cls: type[_E], code: int, message: str, data: Any) -> _E:
        """Make an instance of ``cls`` without its convenience constructor."""
        error = cls.__new__(cls)
        RPCError.__init__(error, code, message, data)
        return error


class ParseError(RPCError):
    """-32700: the line is not valid UTF-8 JSON."""

    CODE = -32700
    TITLE = "Parse error"

    def __init__(self, reason: str | None = None) -> None:
        data = None if reason is None else {"reason": clip(reason)}
        super().__init__(self.CODE, _titled(self.TITLE, reason and clip(reason)), data)


class InvalidRequest(RPCError):
    """-32600: valid JSON but not a valid JSON-RPC 2.0 message."""

    CODE = -32600
    TITLE = "Invalid request"

    def __init__(self, reason: str | None = None, data: Any = None) -> None:
        if data is None and reason is not None:
            data = {"reason": clip(reason)}
        super().__init__(self.CODE, _titled(self.TITLE, reason and clip(reason)), data)


class MessageTooLarge(InvalidRequest):
    """
    -32600: a line was longer than the accepted limit (``data == {"limit": N}``).

    Sent to the peer for an oversized line (with the request's id when the line's head
    shows one, else with id ``null``), and used locally to fail our request whose line
    or response was too long.  :meth:`RPCError.from_json` gives this class for a -32600
    error whose ``data.limit`` is an integer.
    """

    limit: int

    def __init__(self, limit: int, message: str | None = None) -> None:
        if message is None:
            message = f"Message too large: lines are limited to {limit} bytes"
        RPCError.__init__(self, self.CODE, message, {"limit": limit})
        self.limit = limit


class MethodNotFound(RPCError):
    """-32601: no handler for the method (``data == {"method": name}``)."""

    CODE = -32601
    TITLE = "Method not found"

    def __init__(self, method: str) -> None:
        name = clip(method)
        super().__init__(self.CODE, _titled(self.TITLE, name), {"method": name})


class InvalidParams(RPCError):
    """
    -32602: the params do not fit the method.

    ``data == {"path": "$.params...", "reason": reason}``: ``path`` is a JSONPath to the
    offending value.
    """

    CODE = -32602
    TITLE = "Invalid params"

    def __init__(self, path: str = "$.params", reason: str = "invalid value") -> None:
        path, reason = clip(path), clip(reason)
        super().__init__(
            self.CODE, f"{self.TITLE}: {path}: {reason}", {"path": path, "reason": reason}
        )


class InternalError(RPCError):
    """-32603: the request could not be handled (details are logged, not sent)."""

    CODE = -32603
    TITLE = "Internal error"

    def __init__(self, reason: str | None = None, data: Any = None) -> None:
        super().__init__(self.CODE, _titled(self.TITLE, reason and clip(reason)), data)


class AuthRequired(RPCError):
    """-32000: ACP ``auth_required``; the reason goes in ``data`` (``{"reason": ...}``)."""

    CODE = -32000
    TITLE = "Authentication required"

    def __init__(self, reason: str | None = None, data: Any = None) -> None:
        if data is None and reason is not None:
            data = {"reason": clip(reason)}
        super().__init__(self.CODE, self.TITLE, data)


class ResourceNotFound(RPCError):
    """-32002: ACP ``resource_not_found`` (``data == {"uri": uri}`` when given)."""

    CODE = -32002
    TITLE = "Resource not found"

    def __init__(self, uri: str | None = None, data: Any = None) -> None:
        if data is None and uri is not None:
            data = {"uri": clip(uri)}
        super().__init__(self.CODE, _titled(self.TITLE, uri and clip(uri)), data)


class RequestCancelled(RPCError):
    """-32800: the request was cancelled (``$/cancel_request``, or shutdown)."""

    CODE = -32800
    TITLE = "Request cancelled"

    def __init__(self, reason: str | None = None) -> None:
        data = None if reason is None else {"reason": clip(reason)}
        super().__init__(self.CODE, self.TITLE, data)


_BY_CODE: dict[int, type[RPCError]] = {
    cls.CODE: cls
    for cls in (
        ParseError,
        InvalidRequest,
        MethodNotFound,
        InvalidParams,
        InternalError,
        AuthRequired,
        ResourceNotFound,
        RequestCancelled,
    )
}


class ConnectionLost(Exception):
    """
    The connection ended before the request was answered.

    ``str()`` says why: it includes the text of the ``connectionLost`` reason (for a
    child agent, its exit status and stderr tail).
    """

    def __init__(self, why: str = "connection lost") -> None:
        super().__init__(why)
        self.why = why

    @classmethod
    def because(cls, reason: object) -> ConnectionLost:
        """``ConnectionLost`` whose text is ``connection lost: <str(reason)>``."""
        return cls(f"connection lost: {reason}")


class NotDelivered(ConnectionLost):
    """
    The connection ended, and this request certainly never reached the peer: its
    transport knows (a Streamable HTTP POST answered ``404``: no agent there knows the
    connection).  Sending it again on a new connection cannot make it run twice.
    """


class RequestTimeout(Exception):
    """No response arrived in time (``$/cancel_request`` was sent to the peer)."""

    def __init__(self, method: str, request_id: int | str, timeout: float) -> None:
        super().__init__(f"request {request_id} ({method}) got no response within {timeout:g} s")
        self.method = method
        self.request_id = request_id
        self.timeout = timeout


class CapabilityError(Exception):
    """A local refusal to call a method the peer did not advertise."""

    def __init__(self, method: str, capability: str | None = None) -> None:
        if capability is None:
            text = f"the peer does not support {method}"
        else:
            text = f"the peer did not advertise {capability}, so {method} cannot be called"
        super().__init__(text)
        self.method = method
        self.capability = capability


class AgentExited(Exception):
    """
    An agent process ended; the value of the Failure given to ``connectionLost`` by
    :func:`acpkit.io.spawn_agent`'s transport.

    ``exit_code`` is ``None`` when the process was killed by ``signal``.  ``kind`` is
    what the process is (``spawn_agent``'s ``kind``: ``"agent"``, ``"MCP server"``...).
    """

    def __init__(
        self,
        name: str,
        exit_code: int | None,
        signal: int | None,
        stderr_tail: str,
        kind: str = "agent",
    ) -> None:
        super().__init__(name, exit_code, signal, stderr_tail)
        self.name = name
        self.exit_code = exit_code
        self.signal = signal
        self.stderr_tail = stderr_tail
        self.kind = kind

    @property
    def summary(self) -> str:
        """One line: what ended and how, without the stderr lines."""
        if self.signal is not None:
            how = f"was killed by signal {self.signal}"
        else:
            how = f"exited with status {self.exit_code}"
        return f'{self.kind} "{self.name}" {how}'

    def __str__(self) -> str:
        text = self.summary
        if self.stderr_tail:
            text += f"; last stderr lines:\n{self.stderr_tail}"
        return text
