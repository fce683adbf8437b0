"""
The receive path: one whole message in, its effect out.

:class:`MessageReader` decodes each message once, classifies it
(:mod:`acpkit.jsonrpc.classify`) and does what it calls for: a request goes to the
dispatcher (:mod:`acpkit.jsonrpc.dispatch`) with its handler, a notification to its
handler (or cancels a request, when it is the dialect's cancel notification), a response
fires the pending request it answers (:mod:`acpkit.jsonrpc.outgoing`), and anything
invalid is answered with the precise error the engine's docstring lists (Error replies,
Oversized lines, Messages nested too deep).  It counts what it could not deliver.

It writes and logs through its host, a :class:`ReaderHost`: the engine
(:class:`acpkit.jsonrpc.JSONRPCEngine`), which calls :meth:`MessageReader.process_message`
in wire order.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

from twisted.logger import Logger

from acpkit.errors import (
    InternalError,
    InvalidParams,
    InvalidRequest,
    MessageTooLarge,
    MethodNotFound,
    ParseError,
    RPCError,
    clip,
)
from acpkit.jsonrpc.asyncio_bridge import as_deferred
from acpkit.jsonrpc.cancel import ICancellationPolicy
from acpkit.jsonrpc.classify import (
    HugeInt,
    Invalid,
    Notification,
    Request,
    RequestId,
    Response,
    TooDeep,
    Unparsable,
    classify,
    decode_message,
    encode_message,
    is_plain_request,
    is_valid_id,
)
from acpkit.jsonrpc.dispatch import InboundDispatcher, InboundRequest
from acpkit.jsonrpc.outgoing import OutgoingRequest, OutgoingRequests
from acpkit.jsonrpc.oversized import scan_head
from acpkit.jsonrpc.registry import MethodRegistry

__all__ = ["JUNK_LINE_KEPT", "MessageReader", "ReaderHost"]

#: How many bytes of the first junk line (not a JSON object) are kept for diagnostics.
JUNK_LINE_KEPT = 1024


class ReaderHost(Protocol):
    """What a :class:`MessageReader` needs from its engine: the engine provides it."""

    #: The peer's name, in log lines.
    name: str
    #: The methods this side handles.
    registry: MethodRegistry

    @property
    def log(self) -> Logger:
        """Where what is refused or dropped is logged."""

    @property
    def cancellation(self) -> ICancellationPolicy:
        """The dialect's cancellation: its notification cancels an inbound request."""

    @property
    def MAX_LENGTH(self) -> int:
        """The largest message read (a longer one arrives as its head)."""

    @property
    def written_while_paused(self) -> int:
        """Bytes written since the peer stopped reading (said when a request is refused)."""

    def write(self, line: bytes, /) -> bool:
        """Write one message (False when not connected)."""

    @property
    def replace_invalid_utf8(self) -> bool:
        """Whether a message that is not UTF-8 is read with U+FFFD for each bad byte."""


class MessageReader:
    """The receive path of one connection (see the module docstring)."""

    def __init__(
        self, host: ReaderHost, dispatch: InboundDispatcher, outgoing: OutgoingRequests
    ) -> None:
        self._host = host
        self._dispatch = dispatch
        self._outgoing = outgoing
        #: Messages discarded undelivered because they are no valid JSON-RPC message.
        self.undecodable_dropped = 0
        #: Messages discarded for being longer than ``MAX_LENGTH``.
        self.oversized_dropped = 0
        #: Messages that were no JSON object at all (junk such as a banner on stdout).
        self.junk_lines = 0
        #: The first of those as received (its first ``JUNK_LINE_KEPT`` bytes), or None.
        self.first_junk_line: bytes | None = None
        #: Messages that were not UTF-8 and were read with each invalid byte replaced by
        #: U+FFFD (only when the host's ``replace_invalid_utf8`` is set).
        self.invalid_utf8_replaced = 0

    def framing_failed(self, reason: str) -> None:
        """The framing cannot find another message: answer -32700 with ``reason``."""
        self.undecodable_dropped += 1
        self.send_error(None, ParseError(reason))

    def process_message(self, line: bytes) -> None:
        decoded = decode_message(line)
        if decoded is None:
            return
        if type(decoded) is Unparsable and decoded.not_utf8 and self._host.replace_invalid_utf8:
            repaired = decode_message(line.decode("utf-8", "replace").encode("utf-8"))
            if repaired is not None and type(repaired) is not Unparsable:
                self.invalid_utf8_replaced += 1
                self._host.log.warn(
                    "{peer}: {detail}: read with replacement characters (U+FFFD)",
                    peer=self._host.name,
                    detail=decoded.detail,
                )
                decoded = repaired
        if type(decoded) is not tuple:
            if type(decoded) is TooDeep:
                self._process_too_deep(decoded)
                return
            assert type(decoded) is Unparsable
            self._host.log.warn("{peer}: {detail}", peer=self._host.name, detail=decoded.detail)
            self._junk(line[3:] if line.startswith(b"\xef\xbb\xbf") else line)
            self.undecodable_dropped += 1
            self.send_error(None, ParseError(decoded.error))
            return
        obj, huge = decoded
        if huge and isinstance(obj, dict) and self._refuse_huge_ints(obj, huge):
            return
        if type(obj) is dict and is_plain_request(obj):
            # The common case, without building classify()'s event (once per request).
            self._process_request(obj["id"], obj["method"], obj.get("params"), obj)
            return
        event = classify(obj)
        kind = type(event)
        if kind is Notification:
            self._process_notification(event)  # type: ignore[arg-type]
        elif kind is Request:
            event_ = cast(Request, event)
            self._process_request(event_.id, event_.method, event_.params, event_.value)
        elif kind is Response:
            self._process_response(event)  # type: ignore[arg-type]
        else:
            self._process_invalid(event, line)  # type: ignore[arg-type]

    def _process_invalid(self, event: Invalid, line: bytes) -> None:
        if event.kind == "notification":
            self._host.log.warn(
                "{peer}: invalid notification dropped: {obj}",
                peer=self._host.name,
                obj=clip(repr(event.value), 200),
            )
            self.undecodable_dropped += 1
            return
        if event.kind != "response":
            if event.junk:
                self._junk(line[3:] if line.startswith(b"\xef\xbb\xbf") else line)
            self._invalid(event.answer_id, event.reason, event.value)
            return
        outgoing, request_id = self._match(event.response_id)
        self._invalid(None, event.reason, event.value)
        if outgoing is not None:
            self._outgoing.fail(request_id, InvalidRequest(event.reason))

    def _process_too_deep(self, deep: TooDeep) -> None:
        """A message nested deeper than the limit (see Messages nested too deep): answer from what
        its envelope shows."""
        self.undecodable_dropped += 1
        members = deep.members
        event = classify(members) if members is not None else None
        reason = deep.reason
        if (
            type(event) is Request
            and deep.member is not None
            and event.id not in self._dispatch.inbound
        ):
            method = event.method
            self._host.log.warn(
                "{peer}: request {method} (id {id}) refused: {reason}",
                peer=self._host.name,
                method=clip(method, 80),
                id=clip(repr(event.id), 80),
                reason=reason,
            )
            error: RPCError
            if self._host.registry.request_method(method) is None:
                error = MethodNotFound(method)
            elif deep.member == "params":
                error = InvalidParams("$.params", reason)
            else:
                error = InvalidRequest(reason)
            self.send_error(event.id, error)
            return
        if members is not None and deep.is_response():
            self._host.log.warn(
                "{peer}: malformed response ({reason})", peer=self._host.name, reason=reason
            )
            problem = f"malformed response: {reason}"
            self.send_error(None, InvalidRequest(problem))
            if "id" in members:
                outgoing, number = self._match(members["id"])
                if outgoing is not None:
                    self._outgoing.fail(number, InvalidRequest(problem))
            return
        self._host.log.warn(
            "{peer}: message not parsed: {reason} (top-level members read: {keys})",
            peer=self._host.name,
            reason=reason,
            keys=clip(", ".join(members or ()), 200) or "none",
        )
        self.send_error(None, ParseError(reason))

    def _junk(self, line: bytes) -> None:
        """Count a line that is not a JSON object; keep the first one."""
        self.junk_lines += 1
        if self.first_junk_line is None:
            self.first_junk_line = line[:JUNK_LINE_KEPT]

    def _refuse_huge_ints(self, obj: dict[str, Any], huge: list[HugeInt]) -> bool:
        """
        Answer a message holding integers too long to represent; False: process it as
        usual (it is invalid for another reason anyway).
        """
        request_id = obj.get("id")
        if isinstance(request_id, HugeInt):
            self._invalid(
                None,
                f"the id is an integer of {request_id.digits} digits, too long to be "
                "echoed exactly; use a string or a shorter integer",
                obj,
            )
            return True
        digits = max(h.digits for h in huge)
        reason = f"an integer of {digits} digits is too long for this peer"
        if "method" in obj:
            if "id" not in obj:
                self._host.log.warn(
                    "{peer}: notification dropped: {reason}", peer=self._host.name, reason=reason
                )
                return True
            if not is_valid_id(request_id) or obj.get("jsonrpc") != "2.0":
                return False
            if not isinstance(obj["method"], str) or request_id in self._dispatch.inbound:
                return False
            if self._host.registry.request_method(obj["method"]) is None:
                return False
            self.send_error(request_id, InvalidParams("$.params", reason))
            return True
        if "result" in obj or "error" in obj:
            outgoing, number = self._match(request_id)
            self._invalid(None, f"malformed response: {reason}", obj)
            if outgoing is not None:
                self._outgoing.fail(number, InvalidRequest(f"malformed response: {reason}"))
            return True
        return False

    def _invalid(self, request_id: RequestId | None, reason: str, obj: object) -> None:
        self.undecodable_dropped += 1
        self._host.log.warn(
            "{peer}: invalid message ({reason}): {obj}",
            peer=self._host.name,
            reason=reason,
            obj=clip(repr(obj), 200),
        )
        self.send_error(request_id, InvalidRequest(reason))

    def send_error(self, request_id: RequestId | None, error: RPCError) -> None:
        self._host.write(
            encode_message({"jsonrpc": "2.0", "id": request_id, "error": error.to_json()})
        )

    def _process_request(
        self, request_id: RequestId, method: str, params: Any, value: dict[str, Any]
    ) -> None:
        """A well-formed request (``value``: the whole message)."""
        dispatch = self._dispatch
        if request_id in dispatch.inbound:
            self._invalid(request_id, "this id belongs to a request still in progress", value)
            return
        registration = self._host.registry.request_method(method)
        if registration is None:
            self._host.log.info(
                "{peer}: unknown method {method}", peer=self._host.name, method=clip(method, 80)
            )
            self.send_error(request_id, MethodNotFound(method))
            return
        if not isinstance(params, dict) and not (params is None and registration.params_optional):
            self.send_error(request_id, InvalidParams("$.params", "must be an object"))
            return
        meta = params.get("_meta") if isinstance(params, dict) else None
        request = InboundRequest(
            request_id,
            method,
            params,
            meta if isinstance(meta, dict) else None,
            protocol=dispatch,
            handler=registration.handler,
            cancelled_result=registration.cancelled_result,
        )
        if dispatch.is_full():
            self._host.log.warn(
                "{peer}: refused {method} (id {id}): {running} running, {queued} queued, "
                "{buffered} bytes written since the peer stopped reading",
                peer=self._host.name,
                method=method,
                id=request_id,
                running=dispatch.running,
                queued=len(dispatch.queue),
                buffered=self._host.written_while_paused,
            )
            self.send_error(request_id, InternalError("too many concurrent requests"))
            return
        dispatch.accept(request)

    def _process_notification(self, event: Notification) -> None:
        method = event.method
        params = event.params
        if method == self._host.cancellation.method:
            self._cancel_inbound(params)
            return
        registration = self._host.registry.notification_method(method)
        if registration is None:
            self._host.log.debug(
                "{peer}: unknown notification {method} ignored",
                peer=self._host.name,
                method=clip(method, 80),
            )
            return
        if not isinstance(params, dict) and not (params is None and registration.params_optional):
            self._host.log.warn(
                "{peer}: notification {method} dropped: params must be an object",
                peer=self._host.name,
                method=method,
            )
            self.undecodable_dropped += 1
            return
        meta = params.get("_meta") if isinstance(params, dict) else None
        try:
            result = registration.handler(params, meta if isinstance(meta, dict) else None)
        except Exception:
            self._host.log.failure(
                "{peer}: notification handler for {method} failed",
                peer=self._host.name,
                method=method,
            )
            return
        if result is None:  # the common case: a synchronous handler, nothing to wait for
            return
        d = as_deferred(result)
        if d.called:
            d.addErrback(
                lambda f: self._host.log.failure(
                    "{peer}: notification handler for {method} failed",
                    f,
                    peer=self._host.name,
                    method=method,
                )
            )
        else:
            self._dispatch.hold(d, method)

    def _cancel_inbound(self, params: object) -> None:
        policy = self._host.cancellation
        request_id = policy.request_id(params)
        if request_id is None:
            self._host.log.warn(
                "{peer}: {method} without a valid request id ignored",
                peer=self._host.name,
                method=policy.method,
            )
            return
        request = self._dispatch.inbound.get(request_id)
        if request is None:
            self._host.log.debug(
                "{peer}: {method} for unknown or answered id {id} ignored",
                peer=self._host.name,
                method=policy.method,
                id=request_id,
            )
            return
        request.cancel()

    def _process_response(self, event: Response) -> None:
        response_id = event.id
        error = event.error
        if response_id is None:
            assert error is not None
            self._null_id_error(error)
            return
        outgoing, request_id = self._match(response_id)
        if outgoing is None:
            if self._outgoing.was_given_up(response_id):
                self._host.log.debug(
                    "{peer}: late response to given-up request {id} dropped",
                    peer=self._host.name,
                    id=response_id,
                )
            else:
                self._host.log.warn(
                    "{peer}: response to unknown id {id} dropped",
                    peer=self._host.name,
                    id=clip(repr(response_id), 80),
                )
            return
        self._outgoing.pop(request_id)
        if error is not None:
            outgoing.deferred.errback(RPCError.from_json(error))
        else:
            outgoing.deferred.callback(event.result)

    def _match(self, response_id: object) -> tuple[OutgoingRequest | None, int]:
        outgoing, number, from_string = self._outgoing.match(response_id)
        if from_string:
            self._host.log.warn(
                "{peer}: response id {id!r} is a string; accepted for request {number}",
                peer=self._host.name,
                id=response_id,
                number=number,
            )
        return outgoing, number

    def _null_id_error(self, error: dict[str, Any]) -> None:
        """
        The peer answered with id ``null``: it could not read one of our lines.

        Work out which of our pending requests it can only be about, and fail it now
        rather than let it wait for an answer that will never come:

        - -32600 with an integer ``data.limit`` (a line too long for the peer): every
          pending request whose line was longer than that limit.  The peer discards
          every such line, so each of them fails whichever line the error was about.
        - -32700 (the peer could not parse a line; our lines are valid JSON, so it cut
          a long one): the single pending request, if there is exactly one and its line
          is the longest we wrote since the previous error with id ``null`` (so it is
          at least as long as the line the error is about, whichever it was).
        - anything else: nothing is failed (logged only).
        """
        failed = self._outgoing.unreadable(error)
        if not failed:
            self._host.log.warn(
                "{peer}: the peer reported an error about a message it could not identify: {error}",
                peer=self._host.name,
                error=clip(repr(error), 300),
            )
            return
        for request_id, outgoing, reason in failed:
            self._host.log.warn(
                "{peer}: request {id} ({method}) failed: the peer could not read it: {error}",
                peer=self._host.name,
                id=request_id,
                method=outgoing.method,
                error=clip(repr(error), 300),
            )
            self._outgoing.give_up(request_id)
            outgoing.deferred.errback(reason)

    def process_oversized(self, head: bytes) -> None:
        limit = self._host.MAX_LENGTH
        self.oversized_dropped += 1
        found = scan_head(head)
        kind = found.kind()
        request_id = found.request_id()
        method = found.method()
        self._host.log.warn(
            "{peer}: discarded an incoming {kind}{method}{id} longer than {limit} bytes "
            "({count} so far; starts {head!r})",
            peer=self._host.name,
            kind="line" if kind == "unknown" else kind,
            method="" if method is None else f" {clip(method, 80)}",
            id="" if request_id is None else f" (id {clip(repr(request_id), 80)})",
            limit=limit,
            count=self.oversized_dropped,
            head=head[:80],
        )
        if request_id is not None and request_id not in self._dispatch.inbound:
            # A request whose id we read: answer that id, so its sender stops waiting.
            self.send_error(request_id, MessageTooLarge(limit))
            return
        self.send_error(None, MessageTooLarge(limit))
        if kind != "response" or "id" not in found.values:
            return
        outgoing, number = self._match(found.values["id"])
        if outgoing is None:
            return
        self._outgoing.pop(number)
        outgoing.deferred.errback(
            MessageTooLarge(
                limit,
                f"the response to request {number} ({outgoing.method}) exceeded the "
                f"{limit}-byte message limit and was discarded",
            )
        )
