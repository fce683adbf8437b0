"""
:class:`LanguageServer`: one running, initialized language server, as the ``lsp`` tool
uses it.  Messages are :mod:`lsprotocol` types on acpkit's JSON-RPC engine with the
``Content-Length`` framing (:class:`acpkit.jsonrpc.content_length.ContentLengthJSONRPCProtocol`).

========================================  ================================================
the server sends                          bob answers / does
========================================  ================================================
``workspace/configuration``               ``null`` for each item (no settings)
``workspace/workspaceFolders``            the one folder: the session's cwd
``client/registerCapability``,            ``null`` (accepted; bob uses static
``client/unregisterCapability``           capabilities only)
``window/workDoneProgress/create``        ``null``; ``$/progress`` is ignored
``window/showMessageRequest``             ``null`` (no action chosen)
``workspace/applyEdit``                   ``{"applied": false}``: bob applies edits itself
any other request                         -32601 (method not found)
``textDocument/publishDiagnostics``       kept as the file's latest diagnostics
``window/logMessage``, ``showMessage``    logged (``lsp <name>: ...``)
========================================  ================================================

Documents are synchronised with full text only: :meth:`LanguageServer.sync` sends
``didOpen`` (version 1) the first time a path is seen, ``didChange`` with the whole text
and the next version when the text differs from what was last sent, and nothing when it
is the same.  Positions are UTF-16 code units (the LSP default; the only encoding bob
announces).
"""

from __future__ import annotations

import os
import typing
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from cattrs import ClassValidationError
from lsprotocol import types as lsp
from lsprotocol.converters import get_converter
from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from acpkit.errors import ConnectionLost, RequestTimeout, RPCError, clip
from acpkit.jsonrpc import InboundRequest, MethodRegistry
from acpkit.jsonrpc.content_length import ContentLengthJSONRPCProtocol
from acpkit_agent.lsp.errors import (
    LanguageServerCrashed,
    LanguageServerError,
    LanguageServerRequestError,
    LanguageServerTimeout,
)
from acpkit_agent.lsp.languages import language_id
from acpkit_agent.lsp.uris import path_to_uri, uri_to_path

__all__ = ["DEFAULT_REQUEST_TIMEOUT", "LanguageServer", "converter", "result_type"]

_log = Logger(namespace="acpkit_agent.lsp")

#: How long a request may wait for its answer, in seconds, unless told otherwise.
DEFAULT_REQUEST_TIMEOUT = 60.0

#: The lsprotocol converter (camelCase on the wire, unions resolved by shape).
converter = get_converter()

_NO_RESULT = object()


def result_type(method: str) -> Any:
    """
    The lsprotocol type of ``method``'s result (``None``'s type for ``shutdown``), from
    lsprotocol's method table; ``_NO_RESULT`` for a method it does not know (the raw
    JSON result is then returned as it is).
    """
    entry = lsp.METHOD_TO_TYPES.get(method)
    if entry is None or entry[1] is None:
        return _NO_RESULT
    return typing.get_type_hints(entry[1])["result"]


def _one_line(text: str, limit: int = 300) -> str:
    """The first non-empty line of ``text``, clipped."""
    for line in text.splitlines():
        if line.strip():
            return clip(line.strip(), limit)
    return ""


def describe_end(name: str, reason: Failure | None) -> str:
    """One line: how server ``name``'s connection ended (exit status, last stderr line)."""
    value = None if reason is None else reason.value
    exit_code = getattr(value, "exit_code", None)
    sig = getattr(value, "signal", None)
    tail = getattr(value, "stderr_tail", "")
    if sig is not None:
        text = f"language server {name} was killed by signal {sig}"
    elif exit_code is not None:
        text = f"language server {name} exited with status {exit_code}"
    elif value is None:
        text = f"language server {name} closed its output"
    else:
        text = f"language server {name}: connection lost ({_one_line(str(value))})"
    last = _one_line("\n".join(reversed(tail.splitlines()))) if tail else ""
    if last:
        text += f"; its last stderr line: {last}"
    return text


@attrs.define
class _Document:
    version: int
    text: str


@attrs.define
class _Published:
    """The latest ``publishDiagnostics`` of one file, and the version it counts for."""

    version: int | None
    diagnostics: list[lsp.Diagnostic]


class LanguageServer:
    """
    A started and initialized language server for one workspace root.

    Made by :class:`acpkit_agent.lsp.LanguageServers`; :attr:`capabilities` are the
    server's answer to ``initialize``.  :attr:`closed` turns true when the process ends
    (or its connection does): every pending and later :meth:`request` then fails with
    :class:`LanguageServerCrashed` saying how it ended.
    """

    def __init__(
        self,
        name: str,
        root: str,
        protocol: ContentLengthJSONRPCProtocol,
        clock: IReactorTime,
        *,
        language_id: str | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        #: The configured server's name (``[lsp.servers.<name>]``).
        self.name = name
        #: The workspace root it was started for (the session's cwd), absolute.
        self.root = root
        #: The server's capabilities, from its ``initialize`` answer.
        self.capabilities = lsp.ServerCapabilities()
        #: The ``serverInfo`` of its ``initialize`` answer, if it sent one.
        self.server_info: lsp.ServerInfo | None = None
        #: The server process's id (also its process group's), when known.
        self.pid: int | None = None
        self.request_timeout = request_timeout
        self._protocol = protocol
        self._clock = clock
        self._language_id = language_id
        self._documents: dict[str, _Document] = {}
        self._published: dict[str, _Published] = {}
        self._diagnostic_waiters: dict[str, list[Callable[[], None]]] = {}
        self._end: str | None = None
        self._close_waiters: list[Deferred[str]] = []
        protocol.when_closed().addErrback(self._connection_lost)

    # -- state ------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once the server's connection is gone (it exited, crashed or was stopped)."""
        return self._end is not None or self._protocol.closed_reason is not None

    @property
    def end_reason(self) -> str | None:
        """One line saying how the server ended (None while it runs)."""
        if self._end is None and self._protocol.closed_reason is not None:
            return describe_end(self.name, self._protocol.closed_reason)
        return self._end

    def when_closed(self) -> Deferred[str]:
        """A Deferred firing (never failing) with :attr:`end_reason` once it ended."""
        if self._end is not None:
            return succeed(self._end)
        d: Deferred[str] = Deferred()
        self._close_waiters.append(d)
        return d

    @property
    def protocol(self) -> ContentLengthJSONRPCProtocol:
        """The JSON-RPC connection to the server (for tests and shutdown)."""
        return self._protocol

    def _connection_lost(self, reason: Failure) -> None:
        self._end = describe_end(self.name, reason)
        _log.debug("{end}", end=self._end)
        waiters, self._close_waiters = self._close_waiters, []
        for d in waiters:
            d.callback(self._end)
        for callbacks in list(self._diagnostic_waiters.values()):
            for wake in list(callbacks):
                wake()

    # -- documents --------------------------------------------------------------------

    def _absolute(self, path: str) -> str:
        return os.path.normpath(os.path.join(self.root, path))

    def version(self, path: str) -> int | None:
        """The version of ``path`` last sent to the server (None: never opened)."""
        document = self._documents.get(self._absolute(path))
        return None if document is None else document.version

    def sync(self, path: str, text: str) -> None:
        """
        Make the server see ``text`` as the content of ``path`` (absolute, or relative
        to :attr:`root`): ``didOpen`` the first time, ``didChange`` (whole text, next
        version) when it changed since, nothing when it did not.  Call it before each
        request about a file, with what bob just read.  Does nothing once closed.
        """
        if self.closed:
            return
        full = self._absolute(path)
        uri = path_to_uri(full)
        document = self._documents.get(full)
        if document is None:
            self._documents[full] = _Document(1, text)
            self.notify(
                lsp.TEXT_DOCUMENT_DID_OPEN,
                lsp.DidOpenTextDocumentParams(
                    text_document=lsp.TextDocumentItem(
                        uri=uri,
                        language_id=language_id(full, self._language_id),
                        version=1,
                        text=text,
                    )
                ),
            )
            return
        if document.text == text:
            return
        document.version += 1
        document.text = text
        self.notify(
            lsp.TEXT_DOCUMENT_DID_CHANGE,
            lsp.DidChangeTextDocumentParams(
                text_document=lsp.VersionedTextDocumentIdentifier(
                    uri=uri, version=document.version
                ),
                content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=text)],
            ),
        )

    # -- messages ---------------------------------------------------------------------

    def notify(self, method: str, params: Any = None) -> None:
        """Send a notification; ``params`` an lsprotocol attrs instance (or None)."""
        payload = None if params is None else converter.unstructure(params)
        self._protocol.notify(method, payload)

    def request(
        self, method: str, params: Any = None, *, timeout: float | None = None
    ) -> Deferred[Any]:
        """
        Send request ``method`` with ``params`` (an lsprotocol attrs instance, or None);
        the Deferred fires with the result structured to the method's lsprotocol result
        type (``None`` stays ``None``; a method lsprotocol does not know gives the raw
        JSON).  It fails with :class:`LanguageServerCrashed` when the server ended,
        :class:`LanguageServerTimeout` after ``timeout`` (default
        :attr:`request_timeout`) seconds, :class:`LanguageServerRequestError` for an
        error answer, :class:`LanguageServerError` for a result lsprotocol cannot read.
        ``d.cancel()`` sends ``$/cancelRequest`` and fails it with ``CancelledError``.
        """
        if self.closed:
            return fail(LanguageServerCrashed(self._ended_text(method)))
        payload = None if params is None else converter.unstructure(params)
        wait = self.request_timeout if timeout is None else timeout
        sent = self._protocol.request(method, payload, timeout=wait)

        def structured(raw: Any) -> Any:
            kind = result_type(method)
            if kind is _NO_RESULT or raw is None:
                return raw
            if kind is lsp.InitializeResult and isinstance(raw, dict):
                return self._initialize_result(raw)
            try:
                return converter.structure(raw, kind)
            except (ClassValidationError, ValueError, TypeError, KeyError) as error:
                raise LanguageServerError(
                    f"language server {self.name} answered {method} with a result that is "
                    f"not the protocol's {_type_name(kind)}: {_one_line(str(error))}"
                ) from None

        def failed(failure: Failure) -> Failure:
            error = failure.value
            if isinstance(error, CancelledError):
                return failure
            if isinstance(error, ConnectionLost):
                raise LanguageServerCrashed(self._ended_text(method))
            if isinstance(error, RequestTimeout):
                raise LanguageServerTimeout(
                    f"language server {self.name} did not answer {method} within {wait:g} s"
                )
            if isinstance(error, RPCError):
                raise LanguageServerRequestError(
                    f"language server {self.name} answered {method} with error "
                    f"{error.code}: {_one_line(error.message)}",
                    error.code,
                    error.message,
                )
            return failure

        return sent.addCallbacks(structured, failed)

    def _initialize_result(self, raw: dict[str, Any]) -> lsp.InitializeResult:
        """
        The ``initialize`` answer, keeping every capability lsprotocol can read: its
        converter has no hook for some unions (pylsp's ``notebookDocumentSync`` fails),
        and one capability bob does not use must not make the whole server unusable.
        """
        capabilities = raw.get("capabilities")
        if not isinstance(capabilities, dict):
            raise LanguageServerError(
                f"language server {self.name} answered initialize without capabilities"
            )
        kept: dict[str, Any] = {}
        for key, value in capabilities.items():
            try:
                converter.structure({key: value}, lsp.ServerCapabilities)
            except (ClassValidationError, ValueError, TypeError, KeyError) as error:
                _log.info(
                    "lsp {name}: capability {key} ignored (lsprotocol cannot read it: {error})",
                    name=self.name,
                    key=key,
                    error=_one_line(str(error)),
                )
                continue
            kept[key] = value
        info = raw.get("serverInfo")
        try:
            server_info = None if info is None else converter.structure(info, lsp.ServerInfo)
        except (ClassValidationError, ValueError, TypeError, KeyError):
            server_info = None
        return lsp.InitializeResult(
            capabilities=converter.structure(kept, lsp.ServerCapabilities),
            server_info=server_info,
        )

    def _ended_text(self, method: str) -> str:
        """``<how it ended> (during <method>)``; the connection may still be closing."""
        end = self.end_reason or describe_end(self.name, None)
        return f"{end} (during {method})"

    # -- diagnostics ------------------------------------------------------------------

    def diagnostics(self, path: str, *, timeout: float) -> Deferred[list[lsp.Diagnostic]]:
        """
        The diagnostics of ``path`` (:meth:`sync` it first) as the server sees its
        current version:

        - with pull diagnostics (the server's ``diagnosticProvider``): the items of a
          ``textDocument/diagnostic`` request (``timeout`` bounds it);
        - else the latest ``textDocument/publishDiagnostics`` for the file's current
          version (one without a version counts for the version current when it
          arrived), waiting for it at most ``timeout`` seconds, then failing with
          :class:`LanguageServerTimeout`.
        """
        full = self._absolute(path)
        uri = path_to_uri(full)
        if self.capabilities.diagnostic_provider is not None:
            params = lsp.DocumentDiagnosticParams(text_document=lsp.TextDocumentIdentifier(uri=uri))
            d = self.request(lsp.TEXT_DOCUMENT_DIAGNOSTIC, params, timeout=timeout)
            return d.addCallback(self._pulled, path)
        return self._wait_published(full, uri, timeout)

    def _pulled(self, report: Any, path: str) -> list[lsp.Diagnostic]:
        if isinstance(
            report, lsp.RelatedFullDocumentDiagnosticReport | lsp.FullDocumentDiagnosticReport
        ):
            return list(report.items)
        if isinstance(
            report,
            lsp.RelatedUnchangedDocumentDiagnosticReport | lsp.UnchangedDocumentDiagnosticReport,
        ):
            # We never send previousResultId, so "unchanged" is not expected: it can
            # only mean the last published list.
            published = self._published.get(path_to_uri(self._absolute(path)))
            return [] if published is None else list(published.diagnostics)
        raise LanguageServerError(
            f"language server {self.name} answered textDocument/diagnostic with "
            f"an unexpected report: {clip(repr(report), 200)}"
        )

    def _current(self, full: str, uri: str) -> list[lsp.Diagnostic] | None:
        published = self._published.get(uri)
        document = self._documents.get(full)
        if published is None:
            return None
        if document is None or published.version == document.version:
            return list(published.diagnostics)
        return None

    def _wait_published(
        self, full: str, uri: str, timeout: float
    ) -> Deferred[list[lsp.Diagnostic]]:
        found = self._current(full, uri)
        if found is not None:
            return succeed(found)
        if self.closed:
            return fail(LanguageServerCrashed(self._ended_text(lsp.TEXT_DOCUMENT_DIAGNOSTIC)))
        result: Deferred[list[lsp.Diagnostic]] = Deferred(lambda _: forget())
        waiters = self._diagnostic_waiters.setdefault(uri, [])
        timer: IDelayedCall | None = None

        def forget() -> None:
            if wake in waiters:
                waiters.remove(wake)
            if not waiters:
                self._diagnostic_waiters.pop(uri, None)
            if timer is not None and timer.active():
                timer.cancel()

        def wake() -> None:
            if result.called:
                return
            found = self._current(full, uri)
            if found is not None:
                forget()
                result.callback(found)
            elif self.closed:
                forget()
                result.errback(
                    LanguageServerCrashed(self._ended_text("textDocument/publishDiagnostics"))
                )

        def expire() -> None:
            forget()
            if not result.called:
                result.errback(
                    LanguageServerTimeout(
                        f"language server {self.name} published no diagnostics for "
                        f"{full} within {timeout:g} s"
                    )
                )

        waiters.append(wake)
        timer = self._clock.callLater(timeout, expire)
        return result

    def _diagnostics_published(self, params: Mapping[str, Any], meta: Any) -> None:
        try:
            published = converter.structure(params, lsp.PublishDiagnosticsParams)
        except (ClassValidationError, ValueError, TypeError, KeyError) as error:
            _log.warn(
                "lsp {name}: unreadable publishDiagnostics: {error}",
                name=self.name,
                error=_one_line(str(error)),
            )
            return
        version = published.version
        if version is None:
            # No version: it is about the text the server has now, our latest.
            try:
                document = self._documents.get(uri_to_path(published.uri))
            except ValueError:
                document = None
            version = None if document is None else document.version
        self._published[published.uri] = _Published(version, list(published.diagnostics))
        for wake in list(self._diagnostic_waiters.get(published.uri, ())):
            wake()

    # -- what the server asks ---------------------------------------------------------

    def register(self, registry: MethodRegistry) -> None:
        """Add the handlers of the server's requests and notifications to ``registry``."""
        registry.add_request(lsp.WORKSPACE_CONFIGURATION, self._configuration)
        registry.add_request(lsp.WORKSPACE_WORKSPACE_FOLDERS, self._folders, params_optional=True)
        for method in (
            lsp.CLIENT_REGISTER_CAPABILITY,
            lsp.CLIENT_UNREGISTER_CAPABILITY,
            lsp.WINDOW_WORK_DONE_PROGRESS_CREATE,
            lsp.WINDOW_SHOW_MESSAGE_REQUEST,
        ):
            registry.add_request(method, _null, params_optional=True)
        registry.add_request(lsp.WORKSPACE_APPLY_EDIT, _refuse_edit)
        registry.add_notification(
            lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS, self._diagnostics_published
        )
        registry.add_notification(lsp.WINDOW_LOG_MESSAGE, self._message)
        registry.add_notification(lsp.WINDOW_SHOW_MESSAGE, self._message)
        for method in (lsp.PROGRESS, lsp.TELEMETRY_EVENT, lsp.LOG_TRACE):
            registry.add_notification(method, _ignore, params_optional=True)

    def _configuration(self, request: InboundRequest) -> list[None]:
        items = request.params.get("items") if isinstance(request.params, dict) else None
        return [None] * (len(items) if isinstance(items, list) else 0)

    def _folders(self, request: InboundRequest) -> list[dict[str, str]]:
        return [{"uri": path_to_uri(self.root), "name": os.path.basename(self.root) or self.root}]

    def _message(self, params: Mapping[str, Any], meta: Any) -> None:
        kind = params.get("type")
        text = params.get("message")
        _log.info(
            "lsp {name}: {severity}: {text}",
            name=self.name,
            severity=_MESSAGE_TYPES.get(kind, "log") if isinstance(kind, int) else "log",
            text=clip(str(text), 2000),
        )


_MESSAGE_TYPES = {1: "error", 2: "warning", 3: "info", 4: "log", 5: "debug"}


def _type_name(kind: Any) -> str:
    return getattr(kind, "__name__", None) or str(kind).replace("lsprotocol.types.", "")


def _null(request: InboundRequest) -> None:
    return None


def _ignore(params: Any, meta: Any) -> None:
    return None


def _refuse_edit(request: InboundRequest) -> dict[str, Any]:
    return {
        "applied": False,
        "failureReason": "bob applies workspace edits itself (after asking permission)",
    }
