"""
What both typed connections share (:class:`Role`): decoding inbound params into
models, dispatch to the handler, encoding results, typed outbound calls, the
connection's lifetime, back-pressure and extension methods; and the
:func:`unimplemented` marker for handler methods a side does not provide.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from types import FunctionType, MethodType
from typing import Any, ClassVar, Generic, TypeVar, cast

import attrs
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.error import ConnectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure

from acpkit import codec, schema
from acpkit.errors import AgentExited, ConnectionLost, InvalidParams, MethodNotFound
from acpkit.framing import LineTracer
from acpkit.jsonrpc import InboundRequest, JSONRPCProtocol
from acpkit.jsonrpc.abc_answers import ABCAnswers
from acpkit.jsonrpc.asyncio_bridge import as_deferred, is_async, settle_now, task_awaitable
from acpkit.jsonrpc.registry import NotificationMethod, RequestMethod

__all__ = ["Role", "is_implemented", "session_id_of", "unimplemented"]


def _in_params(path: str) -> str:
    """A decoder path (``$.cwd``, ``$[0]``, ``$``) as a path into the request."""
    if path == "$":
        return "$.params"
    if path.startswith("$"):
        return "$.params" + path[1:]
    return path


def _clean_close(reason: Failure) -> bool:
    """Whether a connection ended cleanly: EOF or our close, or an agent's exit status 0."""
    if reason.check(ConnectionDone):
        return True
    value = reason.value
    return isinstance(value, AgentExited) and value.exit_code == 0 and value.signal is None


def session_id_of(params: object) -> str | None:
    """The ``sessionId`` of raw params, when there is a string one."""
    if type(params) is dict or isinstance(params, Mapping):  # (a dict without the ABC)
        sid = params.get("sessionId")
        if type(sid) is str or isinstance(sid, str):
            return sid
    return None


_UNIMPLEMENTED = "__acpkit_unimplemented__"

#: ``isinstance(value, Mapping)`` without the ABC's Python-level call for a known type.
_is_mapping = ABCAnswers(Mapping)

F = TypeVar("F", bound=Callable[..., Any])


def unimplemented(fn: F) -> F:
    """
    Mark a handler method as not provided: its requests are answered ``-32601``
    (method not found) before their params are decoded, so a malformed call of a
    method the peer does not implement is never reported as ``-32602``.  The optional
    methods of :class:`Agent` and :class:`Client` are marked; a handler that provides a
    method only in some configurations can bind the base stub on the instance
    (``self.load_session = super().load_session``) when it does not.
    """
    setattr(fn, _UNIMPLEMENTED, True)
    return fn


def is_implemented(fn: object) -> bool:
    """Whether ``fn`` (a handler's attribute, or ``None``) is a provided method."""
    if type(fn) is MethodType:
        func = fn.__func__
        if type(func) is FunctionType:
            # What getattr finds through the bound method, without the AttributeError it
            # raises and catches inside when the mark is absent (once per request).
            return not func.__dict__.get(_UNIMPLEMENTED, False)
    return fn is not None and not getattr(fn, _UNIMPLEMENTED, False)


#: Each role class's request and notification method names, made once.
_HANDLED_NAMES: dict[type[Any], tuple[frozenset[str], frozenset[str]]] = {}


def _handled_names(role: type[Role[Any]]) -> tuple[frozenset[str], frozenset[str]]:
    """The request and the notification methods ``role`` handles."""
    names = _HANDLED_NAMES.get(role)
    if names is None:
        handled = role._handled.values()
        names = _HANDLED_NAMES[role] = (
            frozenset(m.name for m in handled if m.kind == "request"),
            frozenset(m.name for m in handled if m.kind != "request"),
        )
    return names


def _all_fields_optional(cls: Any) -> bool:
    """Whether ``cls`` (an attrs params class) can be built with no arguments."""
    if not attrs.has(cls):
        return False
    return all(f.default is not attrs.NOTHING for f in attrs.fields(cls))


H = TypeVar("H")

#: A typed connection's step after a handler: ``step(result, request, params)`` returns
#: the result to answer with (``result`` may be a ``Failure``; see ``Role``).
AfterStep = Callable[[Any, InboundRequest, Any], Any]


class Role(Generic[H]):
    """What both typed connections share: decoding, encoding, dispatch and calls."""

    _log = Logger()

    #: ACP methods this side handles, and their Python names.
    _handled: ClassVar[Mapping[str, schema.Method]]
    _names: ClassVar[Mapping[str, str]]
    #: ACP methods this side sends.
    _sent: ClassVar[Mapping[str, schema.Method]]

    handler: H

    #: Called as ``hook(method, raw_params, error)`` for a notification that could not be
    #: decoded (it is dropped; notifications are never answered).  A client uses it to
    #: count what it could not show.
    on_undecodable_notification: Callable[[str, Any, Exception], None] | None = None

    def __init__(
        self,
        handler: H | Callable[[Any], H],
        *,
        protocol: JSONRPCProtocol | None,
        strict: bool,
        name: str,
        interface: Any,
        tracer: LineTracer | None = None,
    ) -> None:
        self.protocol = protocol if protocol is not None else JSONRPCProtocol(name=name)
        if tracer is not None:
            self.protocol.tracer = tracer
        self.strict = strict
        self._after_steps = self._after_steps_by_method()
        requests, notifications = _handled_names(type(self))
        # Registered on first use: a server's idle connection holds none of them.
        self.protocol.registry.resolve_on_first_use(
            requests, self._request_registration, notifications, self._notification_registration
        )
        if interface.providedBy(handler) or not callable(handler):
            self.handler = cast(H, handler)
        else:
            self.handler = handler(self)

    # -- inbound -------------------------------------------------------------------

    def _request_registration(self, name: str) -> RequestMethod:
        """How the ACP request ``name`` is handled (made when it first arrives)."""
        method = self._handled[name]
        pyname = self._names[name]
        return RequestMethod(
            partial(self._handle_request, method, pyname),
            self._cancelled_result(name),
            # Params may be omitted on the wire when every field of the params class is
            # optional.
            _all_fields_optional(method.params),
        )

    def _notification_registration(self, name: str) -> NotificationMethod:
        """How the ACP notification ``name`` is handled (made when it first arrives)."""
        method = self._handled[name]
        pyname = self._names[name]
        return NotificationMethod(
            lambda params, meta: self._handle_notification(method, pyname, params),
            _all_fields_optional(method.params),
        )

    def _cancelled_result(self, method: str) -> Callable[[InboundRequest], Any] | None:
        """The result a cancelled request of ``method`` answers with (None: -32800)."""
        return None

    def _decode_params(self, method: schema.Method, params: Any) -> Any:
        try:
            return codec.decode(method.params, {} if params is None else params, strict=self.strict)
        except codec.DecodeError as e:
            # The decoder's paths start at the params ($.cwd); an answer's data.path
            # starts at the request, as the handlers' own do ($.params.cwd).
            raise InvalidParams(_in_params(e.path), e.message) from None

    def _check_ready(self, method: schema.Method) -> None:
        """Raise an RPCError when ``method`` may not be called now."""

    def _handle_request(self, method: schema.Method, pyname: str, req: InboundRequest) -> Any:
        self._check_ready(method)
        fn = getattr(self.handler, pyname, None)
        if not is_implemented(fn):
            # Before decoding: a method we lack is -32601 whatever its params are.
            raise MethodNotFound(method.name)
        assert fn is not None
        params = self._decode_params(method, req.params)
        after = self._after_steps.get(method.name)
        result = fn(params)
        if not is_async(result):
            # A synchronous answer: encode and finish it now, without Deferreds.
            result = self._encode_result(result, method)
            return result if after is None else after(result, req, params)
        finished, result = settle_now(result)
        d: Deferred[Any]
        if finished:
            # A coroutine that returned without waiting: no Deferred either, unless
            # encoding fails (the steps then see the Failure, as they would have).
            try:
                result = self._encode_result(result, method)
            except Exception:
                d = fail()
            else:
                return result if after is None else after(result, req, params)
        else:
            d = result
            d.addCallback(self._encode_result, method)
        if after is not None:
            d.addBoth(after, req, params)
        return d

    def _after_steps_by_method(self) -> Mapping[str, AfterStep]:
        """
        The per-method steps (asked once, at construction): each is called with a
        handler's encoded result (or its Failure, when it fails asynchronously), the
        request and its decoded params, and returns the result to pass on.
        """
        return {}

    def _encode_result(self, result: Any, method: schema.Method) -> Any:
        if result is None:
            assert method.result is not None
            try:
                result = method.result()
            except TypeError:
                raise TypeError(
                    f"the {method.name} handler returned None, but its result has required fields"
                ) from None
        if type(result) is method.result:  # the declared model (no Mapping): encode it
            return codec.encode(result)
        if type(result) is dict or _is_mapping(result):
            return result
        return codec.encode(result)

    def _handle_notification(self, method: schema.Method, pyname: str, params: Any) -> Any:
        try:
            self._check_ready(method)
            decoded = self._decode_params(method, params)
        except Exception as e:
            self._log.warn(
                "dropped a {method} notification: {error}", method=method.name, error=str(e)
            )
            hook = self.on_undecodable_notification
            if hook is not None:
                hook(method.name, params, e)
            return None
        return self._deliver_notification(method, pyname, decoded)

    def _deliver_notification(self, method: schema.Method, pyname: str, params: Any) -> Any:
        fn = getattr(self.handler, pyname, None)
        if fn is None:
            return None
        try:
            result = fn(params)
        except Exception:
            self._notification_failed(Failure(), method.name)
            return None
        if result is None:  # a synchronous handler: no Deferred needed
            return None
        d = as_deferred(result)
        d.addErrback(self._notification_failed, method.name)
        return d

    def _notification_failed(self, failure: Failure, method: str) -> None:
        self._log.failure("the {method} notification handler failed", failure, method=method)

    # -- outbound ------------------------------------------------------------------

    def _call(self, method: str, params: object, *, timeout: float | None = None) -> Deferred[Any]:
        spec = self._sent[method]
        assert spec.result is not None
        result_type = spec.result
        d = self.protocol.request(method, codec.encode(params), timeout=timeout)
        d.addCallback(
            lambda raw: codec.decode(result_type, {} if raw is None else raw, strict=self.strict)
        )
        return task_awaitable(d)

    def _notify(self, method: str, params: object) -> Deferred[None]:
        self.protocol.notify(method, codec.encode(params))
        return self.writable()

    # -- lifetime ------------------------------------------------------------------

    def close(self) -> None:
        """
        Close the connection now, keeping what was already written: output already
        written is flushed to the peer first; handlers still running are cancelled and
        pending outgoing requests fail once the transport reports the close.  Closing
        twice, or a connection that is gone, does nothing.
        """
        self.protocol.close()

    @property
    def closed(self) -> Deferred[None]:
        """
        A new Deferred on each access that fires once the connection has ended: with
        ``None`` when it ended cleanly (the peer closed its end, we called
        :meth:`close`, or an agent process exited with status 0), and fails with the
        reason otherwise (an :class:`~acpkit.io.AgentExited` with another status
        or a signal, a broken pipe...).  Already fired once the connection is gone.
        (``protocol.when_closed()`` still fires with the reason, a ``Failure``, for
        callers written before this.)
        """
        reason = self.protocol.closed_reason
        if reason is not None:
            return succeed(None) if _clean_close(reason) else fail(reason)
        d = self.protocol.when_closed()
        d.addErrback(lambda reason: None if _clean_close(reason) else reason)
        return task_awaitable(cast("Deferred[None]", d))

    @property
    def closed_reason(self) -> Failure | None:
        """Why the connection ended (a ``Failure``) once it has, else ``None``."""
        return self.protocol.closed_reason

    # -- back-pressure ---------------------------------------------------------------

    def writable(self) -> Deferred[None]:
        """
        A Deferred that fires now, or once the transport takes more output.

        The transport pauses us when the peer stops reading and its buffer is full (one
        buffer: 64 KiB for pipes and sockets); it resumes us once that buffer is written.
        Code that writes much (a stream of updates) awaits this before each write, so a
        peer that does not read makes it wait instead of buffering without bound.  Every
        notification sender (``session_update()``…) returns this Deferred for its write.
        It fails with :class:`~acpkit.errors.ConnectionLost` when the connection is gone,
        or goes away while we wait: ignore that failure (``addErrback``) or stop writing.
        """
        reason = self.protocol.closed_reason
        if reason is not None:
            return fail(ConnectionLost.because(reason.value))
        return task_awaitable(self.protocol.writable())

    # -- extensions ----------------------------------------------------------------

    def register_extension_request(self, method: str, handler: Callable[[Any], Any]) -> None:
        """Handle the custom request ``method`` (``_vendor/...``) with raw params."""
        self._check_extension_name(method)
        self.protocol.registry.add_request(method, lambda req: handler(req.params))

    def register_extension_notification(self, method: str, handler: Callable[[Any], Any]) -> None:
        """Handle the custom notification ``method`` (``_vendor/...``) with raw params."""
        self._check_extension_name(method)
        self.protocol.registry.add_notification(method, lambda params, meta: handler(params))

    def extension_request(
        self, method: str, params: Any = None, *, timeout: float | None = None
    ) -> Deferred[Any]:
        """Send the custom request ``method`` with raw params; resolves with the raw result."""
        self._check_extension_name(method)
        return task_awaitable(self.protocol.request(method, params, timeout=timeout))

    def extension_notify(self, method: str, params: Any = None) -> Deferred[None]:
        """
        Send the custom notification ``method`` with raw params; returns
        :meth:`writable` (await it when sending many).
        """
        self._check_extension_name(method)
        self.protocol.notify(method, params)
        return self.writable()

    @staticmethod
    def _check_extension_name(method: str) -> None:
        if not method.startswith("_"):
            raise ValueError(f"extension methods start with '_' (got {method!r})")


# ======================================================================================
# The agent side
# ======================================================================================
