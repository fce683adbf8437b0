"""
bob's language-server client (``acpkit_agent.lsp``) against a fake language server in
memory: the fake is a ``ContentLengthJSONRPCProtocol`` joined to the client's by
``twisted.test.iosim`` and a ``task.Clock``, through the ``spawner`` seam of
``LanguageServers`` (no process).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from lsprotocol import types as lsp
from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.internet.task import Clock
from twisted.logger import ILogObserver, formatEvent, globalLogPublisher
from twisted.python.failure import Failure
from twisted.test.iosim import FakeTransport, IOPump, connect
from zope.interface import implementer

from acpkit.errors import InvalidParams, RPCError
from acpkit.io import AgentExited, AgentNotFoundError
from acpkit.jsonrpc import InboundRequest, MethodRegistry
from acpkit.jsonrpc.content_length import ContentLengthJSONRPCProtocol
from acpkit_agent.lsp import (
    LanguageServer,
    LanguageServerCrashed,
    LanguageServerError,
    LanguageServerRequestError,
    LanguageServers,
    LanguageServerTimeout,
    NoLanguageServer,
    path_to_uri,
)
from acpkit_agent.lsp_config import LspServerConfig

ROOT = "/work/project"
MAIN = os.path.join(ROOT, "main.py")

CAPABILITIES: dict[str, Any] = {
    "textDocumentSync": 1,
    "hoverProvider": True,
    "definitionProvider": True,
    "referencesProvider": True,
    "documentSymbolProvider": True,
    "workspaceSymbolProvider": True,
    "renameProvider": {"prepareProvider": True},
}


def config(**changes: Any) -> LspServerConfig:
    values: dict[str, Any] = {"name": "fake", "command": "fake-ls", "files": ("*.py",)}
    values.update(changes)
    return LspServerConfig(**values)


class FakeServer:
    """A language server in memory: records what it gets, answers as scripted."""

    def __init__(self, clock: Clock, capabilities: dict[str, Any] | None = None) -> None:
        self.registry = MethodRegistry()
        self.protocol = ContentLengthJSONRPCProtocol(self.registry, clock=clock, name="fake")
        #: (kind, method, params) of each message, in order.
        self.received: list[tuple[str, str, Any]] = []
        self.capabilities = CAPABILITIES if capabilities is None else capabilities
        #: method -> handler(params) for requests (a value, or a Deferred).
        self.answers: dict[str, Callable[[Any], Any]] = {
            "initialize": lambda _: {
                "capabilities": self.capabilities,
                "serverInfo": {"name": "fake", "version": "1"},
            },
            "shutdown": lambda _: None,
        }
        for method in (
            "initialize",
            "shutdown",
            "textDocument/definition",
            "textDocument/hover",
            "textDocument/documentSymbol",
            "textDocument/references",
            "textDocument/diagnostic",
            "workspace/symbol",
            "textDocument/rename",
            "bob/unknown",
        ):
            self.registry.add_request(method, self._request, params_optional=True)
        for method in (
            "initialized",
            "exit",
            "textDocument/didOpen",
            "textDocument/didChange",
        ):
            self.registry.add_notification(method, self._notification(method), params_optional=True)

    def _request(self, request: InboundRequest) -> Any:
        self.received.append(("request", request.method, request.params))
        answer = self.answers.get(request.method)
        if answer is None:
            return self.never(request)
        return answer(request.params)

    def never(self, request: InboundRequest) -> Deferred[Any]:
        """An answer that never comes; its cancellation is recorded."""
        return Deferred(lambda _: self.received.append(("cancelled", request.method, request.id)))

    def _notification(self, method: str) -> Callable[[Any, Any], None]:
        def handle(params: Any, meta: Any) -> None:
            self.received.append(("notification", method, params))

        return handle

    def methods(self) -> list[str]:
        return [method for _, method, _ in self.received]


@attrs.define
class FakeProcess:
    """What the spawner returns: records stop/kill."""

    pid: int | None = None
    stopped: int = 0

    def stop(self, grace: float = 2.0) -> Deferred[Any]:
        self.stopped += 1
        return succeed(None)

    def kill(self) -> Deferred[Any]:
        self.stopped += 1
        return succeed(None)


class Harness:
    """``LanguageServers`` whose spawner starts fake servers joined in memory."""

    def __init__(
        self,
        configs: tuple[LspServerConfig, ...] = (),
        *,
        capabilities: dict[str, Any] | None = None,
    ) -> None:
        self.clock = Clock()
        self.capabilities = capabilities
        self.fakes: list[FakeServer] = []
        self.clients: list[ContentLengthJSONRPCProtocol] = []
        self.pumps: list[IOPump] = []
        self.processes: list[FakeProcess] = []
        self.spawned: list[tuple[str, str]] = []
        #: Set to an exception to make the next spawn raise it.
        self.spawn_error: Exception | None = None
        #: Called with the fake before the connection is made (script it).
        self.prepare: Callable[[FakeServer], None] = lambda fake: None
        self.servers = LanguageServers(
            configs or (config(),),
            self.clock,
            spawner=self.spawn,
            request_timeout=30.0,
            start_timeout=10.0,
        )

    def spawn(
        self, cfg: LspServerConfig, root: str, protocol: ContentLengthJSONRPCProtocol
    ) -> FakeProcess:
        if self.spawn_error is not None:
            raise self.spawn_error
        self.spawned.append((cfg.name, root))
        fake = FakeServer(self.clock, self.capabilities)
        self.prepare(fake)
        self.fakes.append(fake)
        self.clients.append(protocol)
        self.pumps.append(
            connect(
                fake.protocol,
                FakeTransport(fake.protocol, isServer=True),
                protocol,
                FakeTransport(protocol, isServer=False),
                clock=self.clock,
            )
        )
        process = FakeProcess(pid=1000 + len(self.processes))
        self.processes.append(process)
        return process

    @property
    def fake(self) -> FakeServer:
        return self.fakes[-1]

    def flush(self) -> None:
        for pump in self.pumps:
            pump.flush()

    def outcome(self, d: Deferred[Any]) -> Any:
        """Move bytes until ``d`` fires; its result (or its Failure)."""
        found: list[Any] = []
        d.addBoth(found.append)
        for _ in range(50):
            if found:
                break
            self.flush()
        assert found, "the Deferred did not fire"
        return found[0]

    def result(self, d: Deferred[Any]) -> Any:
        value = self.outcome(d)
        if isinstance(value, Failure):
            value.raiseException()
        return value

    def failure(self, d: Deferred[Any]) -> BaseException:
        value = self.outcome(d)
        assert isinstance(value, Failure), f"expected a failure, got {value!r}"
        assert value.value is not None
        return value.value

    def server(self, path: str = MAIN, root: str = ROOT) -> LanguageServer:
        server = self.result(self.servers.server_for(path, root))
        assert isinstance(server, LanguageServer)
        return server

    def crash(self, index: int = -1, *, exit_code: int = 1, stderr: str = "") -> None:
        """The fake server's process ends: the client's connection is lost with its status."""
        pump, client, fake = self.pumps[index], self.clients[index], self.fakes[index]
        pump.clientIO.disconnected = pump.serverIO.disconnected = True
        reason = Failure(AgentExited("lsp fake", exit_code, None, stderr))
        fake.protocol.connectionLost(reason)
        client.connectionLost(reason)


# -- starting ------------------------------------------------------------------------


def test_start_sends_initialize_then_initialized_and_keeps_the_capabilities() -> None:
    """
    The first server_for spawns the server in the root, sends ``initialize`` (rootUri,
    one workspace folder, bob's capabilities, the configured initializationOptions),
    then ``initialized``; the answer's capabilities are lsprotocol ServerCapabilities.
    """
    h = Harness((config(initialization_options={"diagnostics": {"enable": True}}),))
    server = h.server()
    assert h.spawned == [("fake", ROOT)]
    assert h.fake.methods() == ["initialize", "initialized"]
    params = h.fake.received[0][2]
    assert params["rootUri"] == "file:///work/project"
    assert params["rootPath"] == ROOT
    assert params["workspaceFolders"] == [{"uri": "file:///work/project", "name": "project"}]
    assert params["processId"] == os.getpid()
    assert params["clientInfo"]["name"] == "bob"
    assert params["initializationOptions"] == {"diagnostics": {"enable": True}}
    text = params["capabilities"]["textDocument"]
    assert text["hover"]["contentFormat"] == ["markdown", "plaintext"]
    assert text["documentSymbol"]["hierarchicalDocumentSymbolSupport"] is True
    assert text["publishDiagnostics"]["versionSupport"] is True
    assert params["capabilities"]["workspace"]["workspaceEdit"]["documentChanges"] is True
    assert params["capabilities"]["workspace"]["applyEdit"] is False
    assert isinstance(server.capabilities, lsp.ServerCapabilities)
    assert server.capabilities.hover_provider is True
    assert server.capabilities.rename_provider == lsp.RenameOptions(prepare_provider=True)
    assert server.server_info == lsp.ServerInfo(name="fake", version="1")
    assert (server.name, server.root, server.pid) == ("fake", ROOT, 1000)


def test_one_process_per_server_and_root_shared_by_concurrent_callers() -> None:
    """Callers asking while a server starts share that start; another root gets its own."""
    h = Harness()
    first = h.servers.server_for("main.py", ROOT)
    second = h.servers.server_for("util.py", ROOT)
    a, b = h.result(first), h.result(second)
    assert a is b
    assert h.result(h.servers.server_for("main.py", ROOT)) is a
    other = h.server(root="/work/other")
    assert other is not a and other.root == "/work/other"
    assert h.spawned == [("fake", ROOT), ("fake", "/work/other")]
    assert h.servers.running() == [a, other]


def test_the_first_server_whose_files_match_serves_the_file() -> None:
    """Servers are tried in the file's order; a pattern with / matches the relative path."""
    h = Harness(
        (
            config(name="docs", files=("docs/*.py",)),
            config(name="python", files=("*.py", "*.pyi")),
        )
    )
    assert h.server("docs/conf.py").name == "docs"
    assert h.server("src/app.py").name == "python"
    assert h.server(os.path.join(ROOT, "stubs/x.pyi")).name == "python"


def test_no_server_configured_for_the_file_is_one_clear_line() -> None:
    """A file no server's ``files`` match: NoLanguageServer naming the file and the fix."""
    h = Harness()
    error = h.failure(h.servers.server_for("README.md", ROOT))
    assert isinstance(error, NoLanguageServer)
    assert str(error) == (
        "no language server is configured for README.md "
        "(agent.toml: [lsp.servers.<name>] with files = [...])"
    )
    assert h.spawned == []


def test_command_not_found_is_one_clear_line_and_nothing_runs() -> None:
    """A command not in PATH: NoLanguageServer ``command "x" not found in PATH``."""
    h = Harness()
    h.spawn_error = AgentNotFoundError('agent command "fake-ls" not found in PATH (/usr/bin)')
    error = h.failure(h.servers.server_for(MAIN, ROOT))
    assert isinstance(error, NoLanguageServer)
    assert str(error) == 'language server fake: command "fake-ls" not found in PATH'


def test_command_not_found_with_the_real_spawner() -> None:
    """The default spawner (spawn_agent) also says it in one line, starting nothing."""
    from twisted.internet import reactor

    servers = LanguageServers([config(command="acpkit-no-such-language-server")], reactor)
    found: list[Any] = []
    servers.server_for(MAIN, ROOT).addBoth(found.append)
    assert isinstance(found[0], Failure)
    assert str(found[0].value) == (
        'language server fake: command "acpkit-no-such-language-server" not found in PATH'
    )


def test_crash_during_start_is_one_line_with_status_and_last_stderr_line() -> None:
    """The server ends before answering initialize: NoLanguageServer, crashed while starting."""
    h = Harness()
    h.prepare = lambda fake: fake.answers.update(initialize=lambda _: Deferred())
    d = h.servers.server_for(MAIN, ROOT)
    h.flush()
    h.crash(stderr="Traceback (most recent call last):\n  ...\nImportError: no module x\n")
    error = h.failure(d)
    assert isinstance(error, NoLanguageServer)
    assert str(error) == (
        "language server fake crashed while starting: exited with status 1; "
        "its last stderr line: ImportError: no module x"
    )


def test_initialize_error_answer_is_a_failed_start() -> None:
    """A server refusing initialize: NoLanguageServer with its error, the process stopped."""
    h = Harness()

    def refuse(params: Any) -> Any:
        raise InvalidParams("bad rootUri")

    h.prepare = lambda fake: fake.answers.update(initialize=refuse)
    error = h.failure(h.servers.server_for(MAIN, ROOT))
    assert isinstance(error, NoLanguageServer)
    assert str(error) == (
        "language server fake could not start: answered initialize with error -32602: "
        "Invalid params: bad rootUri: invalid value"
    )
    assert h.processes[0].stopped == 1


def test_no_answer_to_initialize_in_time_is_a_failed_start() -> None:
    """A server silent after spawning: NoLanguageServer after start_timeout, process stopped."""
    h = Harness()
    h.prepare = lambda fake: fake.answers.pop("initialize", None) and None
    d = h.servers.server_for(MAIN, ROOT)
    h.flush()
    h.clock.advance(9.9)
    assert not d.called
    h.clock.advance(0.1)
    error = h.failure(d)
    assert isinstance(error, NoLanguageServer)
    assert str(error) == (
        "language server fake could not start: did not answer initialize within 10 s"
    )
    assert h.processes[0].stopped == 1


def test_a_capability_lsprotocol_cannot_read_is_dropped_not_fatal() -> None:
    """
    pylsp announces a ``notebookDocumentSync`` that lsprotocol's converter cannot
    structure: that capability is ignored, the others are kept, the server starts.
    """
    caps = dict(
        CAPABILITIES,
        notebookDocumentSync={"notebookSelector": [{"cells": [{"language": "python"}]}]},
    )
    h = Harness(capabilities=caps)
    server = h.server()
    assert server.capabilities.notebook_document_sync is None
    assert server.capabilities.definition_provider is True


# -- documents -----------------------------------------------------------------------


def test_sync_opens_once_changes_with_versions_and_skips_unchanged_text() -> None:
    """didOpen v1 with the languageId; same text: nothing; new text: didChange v2, whole."""
    h = Harness()
    server = h.server()
    server.sync("main.py", "x = 1\n")
    server.sync(MAIN, "x = 1\n")
    server.sync("main.py", "x = 2\n")
    server.sync("main.py", "x = 2\n")
    server.sync("main.py", "x = 3\n")
    h.flush()
    sent = [(m, p) for kind, m, p in h.fake.received if m.startswith("textDocument/did")]
    uri = path_to_uri(MAIN)
    assert sent == [
        (
            "textDocument/didOpen",
            {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": "x = 1\n"}},
        ),
        (
            "textDocument/didChange",
            {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": "x = 2\n"}]},
        ),
        (
            "textDocument/didChange",
            {"textDocument": {"uri": uri, "version": 3}, "contentChanges": [{"text": "x = 3\n"}]},
        ),
    ]
    assert server.version("main.py") == 3


@given(st.lists(st.sampled_from(["", "a", "b\n", "é\r\n"]), min_size=1, max_size=12))
def test_sync_sequences_keep_the_server_in_step(texts: list[str]) -> None:
    """
    For any sequence of synced texts: one didOpen (version 1) then one didChange per
    change of text, versions counting up by one, the server's last text the last synced.
    """
    h = Harness()
    server = h.server()
    for text in texts:
        server.sync(MAIN, text)
    h.flush()
    sent = [(m, p) for _, m, p in h.fake.received if m.startswith("textDocument/did")]
    changes = sum(1 for before, after in itertools.pairwise(texts) if before != after)
    assert [m for m, _ in sent] == ["textDocument/didOpen"] + ["textDocument/didChange"] * changes
    versions = [p["textDocument"]["version"] for _, p in sent]
    assert versions == list(range(1, changes + 2))
    last = sent[-1][1]
    text = last["textDocument"]["text"] if len(sent) == 1 else last["contentChanges"][0]["text"]
    assert text == texts[-1]
    assert server.version(MAIN) == changes + 1


def test_sync_uses_the_configured_language_id() -> None:
    """``languageId`` in the configuration wins over the extension."""
    h = Harness((config(files=("*.tpl",), language_id="jinja"),))
    server = h.server("page.tpl")
    server.sync("page.tpl", "{{ x }}")
    h.flush()
    opened = [p for _, m, p in h.fake.received if m == "textDocument/didOpen"]
    assert opened[0]["textDocument"]["languageId"] == "jinja"


# -- requests ------------------------------------------------------------------------


def position_params(kind: Any, **more: Any) -> Any:
    return kind(
        text_document=lsp.TextDocumentIdentifier(uri=path_to_uri(MAIN)),
        position=lsp.Position(line=2, character=7),
        **more,
    )


RANGE = {"start": {"line": 0, "character": 4}, "end": {"line": 0, "character": 9}}


def test_results_are_structured_to_the_methods_lsprotocol_types() -> None:
    """Params go out camelCase; results come back as lsprotocol instances (None stays None)."""
    h = Harness()
    h.prepare = lambda fake: fake.answers.update(
        {
            "textDocument/definition": lambda _: [
                {"uri": "file:///work/project/util.py", "range": RANGE}
            ],
            "textDocument/hover": lambda _: {
                "contents": {"kind": "markdown", "value": "**greet**"}
            },
            "textDocument/documentSymbol": lambda _: [
                {"name": "greet", "kind": 12, "range": RANGE, "selectionRange": RANGE}
            ],
            "workspace/symbol": lambda _: None,
        }
    )
    server = h.server()
    locations = h.result(
        server.request("textDocument/definition", position_params(lsp.DefinitionParams))
    )
    assert locations == [
        lsp.Location(
            uri="file:///work/project/util.py",
            range=lsp.Range(
                start=lsp.Position(line=0, character=4), end=lsp.Position(line=0, character=9)
            ),
        )
    ]
    sent = h.fake.received[-1]
    assert sent[2] == {
        "textDocument": {"uri": path_to_uri(MAIN)},
        "position": {"line": 2, "character": 7},
    }
    hover = h.result(server.request("textDocument/hover", position_params(lsp.HoverParams)))
    assert hover == lsp.Hover(
        contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value="**greet**")
    )
    symbols = h.result(
        server.request(
            "textDocument/documentSymbol",
            lsp.DocumentSymbolParams(
                text_document=lsp.TextDocumentIdentifier(uri=path_to_uri(MAIN))
            ),
        )
    )
    assert isinstance(symbols[0], lsp.DocumentSymbol) and symbols[0].name == "greet"
    assert (
        h.result(server.request("workspace/symbol", lsp.WorkspaceSymbolParams(query="x"))) is None
    )


def test_a_result_that_is_not_the_protocols_type_is_a_clear_error() -> None:
    """A definition answer lsprotocol cannot read fails with one line naming the method."""
    h = Harness()
    h.prepare = lambda fake: fake.answers.update(
        {"textDocument/definition": lambda _: [{"uri": 3}]}
    )
    server = h.server()
    error = h.failure(
        server.request("textDocument/definition", position_params(lsp.DefinitionParams))
    )
    assert isinstance(error, LanguageServerError)
    assert str(error).startswith(
        "language server fake answered textDocument/definition with a result that is not"
    )
    assert "\n" not in str(error)


def test_an_error_answer_is_a_request_error_with_its_code() -> None:
    """The server's JSON-RPC error becomes LanguageServerRequestError(code, message)."""
    h = Harness()

    def refuse(params: Any) -> Any:
        raise RPCError(-32602, "no symbol at this position")

    h.prepare = lambda fake: fake.answers.update({"textDocument/rename": refuse})
    server = h.server()
    error = h.failure(
        server.request("textDocument/rename", position_params(lsp.RenameParams, new_name="y"))
    )
    assert isinstance(error, LanguageServerRequestError)
    assert error.code == -32602 and error.message == "no symbol at this position"
    assert str(error) == (
        "language server fake answered textDocument/rename with error -32602: "
        "no symbol at this position"
    )


def test_a_method_lsprotocol_does_not_know_gives_the_raw_result() -> None:
    """An extension method's result is returned as JSON."""
    h = Harness()
    h.prepare = lambda fake: fake.answers.update({"bob/unknown": lambda _: {"a": [1]}})
    server = h.server()
    assert h.result(server.request("bob/unknown", None)) == {"a": [1]}


def test_timeout_fails_with_one_line_and_cancels_on_the_server() -> None:
    """No answer in time: LanguageServerTimeout, and ``$/cancelRequest`` for its id."""
    h = Harness()
    server = h.server()
    d = server.request(
        "textDocument/references",
        position_params(
            lsp.ReferenceParams, context=lsp.ReferenceContext(include_declaration=True)
        ),
        timeout=5,
    )
    h.flush()
    h.clock.advance(5)
    error = h.failure(d)
    assert isinstance(error, LanguageServerTimeout)
    assert str(error) == "language server fake did not answer textDocument/references within 5 s"
    h.flush()
    assert h.fake.received[-1][:2] == ("cancelled", "textDocument/references")


def test_cancelling_a_request_sends_cancel_request() -> None:
    """``d.cancel()`` fails it with CancelledError and tells the server."""
    h = Harness()
    server = h.server()
    d = server.request("textDocument/hover", position_params(lsp.HoverParams))
    h.flush()
    d.cancel()
    assert isinstance(h.failure(d), CancelledError)
    h.flush()
    assert h.fake.received[-1][:2] == ("cancelled", "textDocument/hover")


# -- what the server asks ------------------------------------------------------------


def ask(h: Harness, method: str, params: Any) -> Any:
    """The fake asks the client ``method``; the raw answer, or the error."""
    d = h.fake.protocol.request(method, params)
    value = h.outcome(d)
    return value.value if isinstance(value, Failure) else value


def test_server_requests_are_answered_sensibly() -> None:
    """configuration: nulls; registerCapability, progress create: null; applyEdit: refused."""
    h = Harness()
    h.server()
    items = {"items": [{"section": "pylsp"}, {"section": "python"}]}
    assert ask(h, "workspace/configuration", items) == [None, None]
    registration = {"registrations": [{"id": "1", "method": "workspace/didChangeWatchedFiles"}]}
    assert ask(h, "client/registerCapability", registration) is None
    assert ask(h, "client/unregisterCapability", {"unregisterations": []}) is None
    assert ask(h, "window/workDoneProgress/create", {"token": "t"}) is None
    assert ask(h, "window/showMessageRequest", {"type": 1, "message": "?"}) is None
    assert ask(h, "workspace/workspaceFolders", None) == [
        {"uri": "file:///work/project", "name": "project"}
    ]
    edit = ask(h, "workspace/applyEdit", {"edit": {"changes": {}}})
    assert edit["applied"] is False and "bob applies" in edit["failureReason"]
    unknown = ask(h, "workspace/codeLens/refresh", None)
    assert getattr(unknown, "code", None) == -32601


def test_log_and_show_messages_are_logged() -> None:
    """window/logMessage and showMessage go to bob's log with the server's name."""
    h = Harness()
    h.server()
    lines: list[str] = []

    @implementer(ILogObserver)
    def observe(event: Any) -> None:
        if event.get("log_namespace") == "acpkit_agent.lsp":
            lines.append(formatEvent(event))

    globalLogPublisher.addObserver(observe)
    try:
        h.fake.protocol.notify("window/logMessage", {"type": 3, "message": "indexing"})
        h.fake.protocol.notify("window/showMessage", {"type": 1, "message": "broken config"})
        h.flush()
    finally:
        globalLogPublisher.removeObserver(observe)
    assert lines == ["lsp fake: info: indexing", "lsp fake: error: broken config"]


# -- diagnostics ---------------------------------------------------------------------


def publish(h: Harness, version: int | None, message: str) -> None:
    params: dict[str, Any] = {
        "uri": path_to_uri(MAIN),
        "diagnostics": [{"range": RANGE, "message": message, "severity": 1}],
    }
    if version is not None:
        params["version"] = version
    h.fake.protocol.notify("textDocument/publishDiagnostics", params)
    h.flush()


def test_pushed_diagnostics_wait_for_the_current_version() -> None:
    """A publish for an older version does not count; the one for the current one does."""
    h = Harness()
    server = h.server()
    server.sync(MAIN, "x = \n")
    server.sync(MAIN, "x = y\n")
    h.flush()
    d = server.diagnostics(MAIN, timeout=5)
    publish(h, 1, "invalid syntax")
    assert not d.called
    publish(h, 2, "y is not defined")
    found = h.result(d)
    assert [item.message for item in found] == ["y is not defined"]
    assert isinstance(found[0], lsp.Diagnostic)
    # Already there: at once.
    again = server.diagnostics(MAIN, timeout=5)
    assert again.called


def test_pushed_diagnostics_without_a_version_count_for_the_current_text() -> None:
    """A publish without ``version`` is about the latest text sent."""
    h = Harness()
    server = h.server()
    server.sync(MAIN, "x = 1\n")
    server.sync(MAIN, "x = 2\n")
    publish(h, None, "fine")
    assert [item.message for item in h.result(server.diagnostics(MAIN, timeout=5))] == ["fine"]
    server.sync(MAIN, "x = 3\n")
    d = server.diagnostics(MAIN, timeout=5)
    assert not d.called


def test_no_diagnostics_in_time_is_a_timeout() -> None:
    """No publish for the file's version within the bound: LanguageServerTimeout."""
    h = Harness()
    server = h.server()
    server.sync(MAIN, "x = 1\n")
    d = server.diagnostics(MAIN, timeout=3)
    h.clock.advance(2.9)
    assert not d.called
    h.clock.advance(0.2)
    error = h.failure(d)
    assert isinstance(error, LanguageServerTimeout)
    assert str(error) == f"language server fake published no diagnostics for {MAIN} within 3 s"
    assert not h.clock.getDelayedCalls()


def test_pull_diagnostics_when_the_server_offers_them() -> None:
    """With ``diagnosticProvider`` the client asks ``textDocument/diagnostic``."""
    h = Harness(
        capabilities=dict(
            CAPABILITIES,
            diagnosticProvider={"interFileDependencies": False, "workspaceDiagnostics": False},
        )
    )
    h.prepare = lambda fake: fake.answers.update(
        {
            "textDocument/diagnostic": lambda _: {
                "kind": "full",
                "items": [{"range": RANGE, "message": "pulled"}],
            }
        }
    )
    server = h.server()
    server.sync(MAIN, "x\n")
    found = h.result(server.diagnostics(MAIN, timeout=5))
    assert [item.message for item in found] == ["pulled"]
    assert h.fake.received[-1][1:] == (
        "textDocument/diagnostic",
        {"textDocument": {"uri": path_to_uri(MAIN)}},
    )


# -- crashes -------------------------------------------------------------------------


def test_crash_mid_request_fails_it_clearly_and_the_next_call_restarts_once() -> None:
    """
    The process dies while a request waits: the request fails with
    LanguageServerCrashed (status, last stderr line, the method); the next server_for
    starts a new process; after a second crash it is not restarted.
    """
    h = Harness()
    server = h.server()
    d = server.request("textDocument/hover", position_params(lsp.HoverParams))
    waiting = server.diagnostics(MAIN, timeout=30)
    h.flush()
    h.crash(stderr="Traceback (most recent call last):\nRuntimeError: boom\n")
    error = h.failure(d)
    assert isinstance(error, LanguageServerCrashed)
    assert str(error) == (
        "language server fake exited with status 1; its last stderr line: "
        "RuntimeError: boom (during textDocument/hover)"
    )
    assert isinstance(h.failure(waiting), LanguageServerCrashed)
    assert server.closed and server.end_reason is not None
    assert isinstance(h.failure(server.request("textDocument/hover", None)), LanguageServerCrashed)
    assert h.processes[0].stopped >= 1
    assert h.servers.running() == []

    restarted = h.server()
    assert restarted is not server and len(h.spawned) == 2

    h.crash(exit_code=2, stderr="Segmentation fault\n")
    error = h.failure(h.servers.server_for(MAIN, ROOT))
    assert isinstance(error, NoLanguageServer)
    assert str(error) == (
        "language server fake failed 2 times; not restarted (last: exited with status 2; "
        "its last stderr line: Segmentation fault)"
    )
    assert len(h.spawned) == 2


def test_a_restart_from_the_failed_requests_errback_keeps_the_new_process() -> None:
    """
    A caller that asks for the server again from the errback of the request the crash
    failed (the tool does, at once) gets a new server whose process is left running:
    only the dead server's process is stopped.
    """
    h = Harness()
    server = h.server()
    restarted: list[Deferred[LanguageServer]] = []
    d = server.request("textDocument/hover", position_params(lsp.HoverParams))
    d.addErrback(lambda _: restarted.append(h.servers.server_for(MAIN, ROOT)))
    h.flush()
    h.crash()
    new = h.result(restarted[0])
    assert new is not server and not new.closed
    assert [p.stopped for p in h.processes] == [1, 0]
    assert h.servers.running() == [new]


# -- shutdown ------------------------------------------------------------------------


def test_shutdown_all_sends_shutdown_then_exit_then_stops_the_process() -> None:
    """Each live server gets ``shutdown``, ``exit``; its process is stopped; no more starts."""
    h = Harness()
    h.server()
    h.server(root="/work/other")
    d = h.servers.shutdown_all()
    h.flush()
    assert h.result(d) is None
    for fake, process in zip(h.fakes, h.processes, strict=True):
        assert fake.methods()[-2:] == ["shutdown", "exit"]
        assert process.stopped >= 1
    error = h.failure(h.servers.server_for(MAIN, ROOT))
    assert isinstance(error, NoLanguageServer)


def test_shutdown_all_does_not_wait_forever_for_a_silent_server() -> None:
    """A server that never answers shutdown still gets exit after the grace."""
    h = Harness()
    h.prepare = lambda fake: fake.answers.pop("shutdown", None) and None
    h.server()
    d = h.servers.shutdown_all()
    h.flush()
    assert not d.called
    h.clock.advance(h.servers.shutdown_grace)
    h.flush()
    assert h.result(d) is None
    assert [kind for kind, _, _ in h.fake.received[-3:]] == ["request", "cancelled", "notification"]
    assert h.fake.methods()[-3:] == ["shutdown", "shutdown", "exit"]
    assert h.processes[0].stopped == 1


@pytest.mark.parametrize(
    ("path", "language"),
    [("a.py", "python"), ("a.TS", "typescript"), ("Makefile", "plaintext"), ("x.rs", "rust")],
)
def test_language_id_by_extension(path: str, language: str) -> None:
    """The didOpen languageId comes from the extension (plaintext when unknown)."""
    from acpkit_agent.lsp import language_id

    assert language_id(path) == language
