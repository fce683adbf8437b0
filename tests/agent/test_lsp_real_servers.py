"""
bob's language-server client against real language servers from the registries
(``.ci/install-real-agents``: python-lsp-server and jedi-language-server from PyPI,
pyright from npm) on a small fixture project: ``util.py`` defines ``greet``,
``main.py`` imports and calls it.

Each action the ``lsp`` tool offers (definition, references, hover, document symbols,
workspace symbols, diagnostics, rename) gets the server's real answer as lsprotocol
types; a server killed mid-request fails that request clearly and is restarted; after
``shutdown_all`` no server process is left.  A missing peer skips (fails under
``ACPKIT_REAL_AGENTS_REQUIRED=1``).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar

import pytest
from lsprotocol import types as lsp
from twisted.internet import reactor
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.trial.unittest import TestCase

from acpkit.io.process_groups import ChildGroups, group_has_live_members
from acpkit_agent.lsp import (
    LanguageServer,
    LanguageServerCrashed,
    LanguageServers,
    NoLanguageServer,
    path_to_uri,
    uri_to_path,
)
from acpkit_agent.lsp_config import LspServerConfig
from tests.real_peers import JEDI_LS, PYLSP, PYRIGHT_LS, require_peer

pytestmark = [pytest.mark.real_agent, pytest.mark.process]

UTIL = '''def greet(name: str) -> str:
    """Say hello to someone."""
    return "hello " + name


class Greeter:
    def welcome(self) -> str:
        return greet("you")
'''

MAIN = """from util import greet

print(greet("bob"))
"""

#: A syntax error on line 2 (what jedi reports).
BROKEN = """x = 1
def f(:
    pass
"""

#: A name that is not defined (what pyright reports; a parse error would hide it).
UNDEFINED = """x = 1
print(undefined_name)
"""

#: Where ``greet`` is called in main.py (0-based line 2, on the "g").
CALL = lsp.Position(line=2, character=6)


def process_gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1].startswith("Z")
    except FileNotFoundError:
        return True


def locations(result: Any) -> list[tuple[str, int]]:
    """(file name, line) of each Location/LocationLink of a definition/references result."""
    items = result if isinstance(result, list | tuple) else [result]
    found = []
    for item in items:
        if isinstance(item, lsp.LocationLink):
            found.append(
                (os.path.basename(uri_to_path(item.target_uri)), item.target_range.start.line)
            )
        else:
            found.append((os.path.basename(uri_to_path(item.uri)), item.range.start.line))
    return sorted(found)


def hover_text(hover: lsp.Hover) -> str:
    contents = hover.contents
    if isinstance(contents, lsp.MarkupContent):
        return contents.value
    if isinstance(contents, str):
        return contents
    if isinstance(contents, lsp.MarkedStringWithLanguage):
        return contents.value
    return "\n".join(c if isinstance(c, str) else c.value for c in contents)


def edited_files(edit: lsp.WorkspaceEdit) -> dict[str, list[lsp.TextEdit]]:
    """File name -> its text edits, from ``changes`` or ``documentChanges``."""
    found: dict[str, list[Any]] = {}
    for uri, edits in (edit.changes or {}).items():
        found.setdefault(os.path.basename(uri_to_path(uri)), []).extend(edits)
    for change in edit.document_changes or ():
        assert isinstance(change, lsp.TextDocumentEdit), change
        name = os.path.basename(uri_to_path(change.text_document.uri))
        found.setdefault(name, []).extend(change.edits)
    return found


def apply(text: str, edits: list[Any]) -> str:
    """``text`` with LSP text edits applied (ASCII text: UTF-16 units are characters)."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(position: lsp.Position) -> int:
        return starts[min(position.line, len(lines))] + position.character

    for item in sorted(edits, key=lambda e: offset(e.range.start), reverse=True):
        text = text[: offset(item.range.start)] + item.new_text + text[offset(item.range.end) :]
    return text


class _RealServer:
    """The tests, run against one real server (subclasses name it)."""

    name: ClassVar[str]
    peer: ClassVar[str]
    args: ClassVar[tuple[str, ...]] = ()
    #: The file with an error the server reports, and a substring of that diagnostic.
    broken_file: ClassVar[str] = "broken.py"
    broken_message: ClassVar[str | None]

    mktemp: Callable[[], str]
    addCleanup: Callable[..., None]

    def setUp(self) -> None:
        command = require_peer(self.peer)
        self.root = os.path.abspath(self.mktemp())
        os.makedirs(self.root)
        for name, text in (
            ("util.py", UTIL),
            ("main.py", MAIN),
            ("broken.py", BROKEN),
            ("undefined.py", UNDEFINED),
        ):
            with open(os.path.join(self.root, name), "w", encoding="utf-8") as stream:
                stream.write(text)
        self.groups = ChildGroups()
        # jedi (under both servers) writes its cache under HOME: a temporary one, not ours.
        home = os.path.abspath(self.mktemp())
        os.makedirs(home)
        env = {"HOME": home, "XDG_CACHE_HOME": os.path.join(home, ".cache")}
        config = LspServerConfig(
            name=self.name, command=command, args=self.args, files=("*.py",), env=env
        )
        self.servers = LanguageServers(
            [config],
            reactor,
            groups=self.groups,
            start_timeout=60,
            request_timeout=60,
        )
        self.addCleanup(self.servers.shutdown_all)

    def path(self, name: str) -> str:
        return os.path.join(self.root, name)

    def doc(self, name: str) -> lsp.TextDocumentIdentifier:
        return lsp.TextDocumentIdentifier(uri=path_to_uri(self.path(name)))

    async def started(self, *names: str) -> LanguageServer:
        """The server for main.py, with ``names`` (default: the two modules) synced."""
        server = await self.servers.server_for("main.py", self.root)
        for name in names or ("util.py", "main.py"):
            with open(self.path(name), encoding="utf-8") as stream:
                server.sync(name, stream.read())
        return server

    def go(self, body: Callable[[], Coroutine[Any, Any, None]]) -> Deferred[None]:
        return ensureDeferred(body())

    # -- navigation -------------------------------------------------------------------

    def test_definition_references_and_hover(self) -> Deferred[None]:
        """Definition of a call goes to util.py; references span both files; hover shows it."""

        async def body() -> None:
            server = await self.started()
            at_call = lsp.TextDocumentPositionParams(
                text_document=self.doc("main.py"), position=CALL
            )
            definition = await server.request(
                "textDocument/definition",
                lsp.DefinitionParams(text_document=at_call.text_document, position=CALL),
            )
            assert locations(definition) == [("util.py", 0)], definition
            references = await server.request(
                "textDocument/references",
                lsp.ReferenceParams(
                    text_document=at_call.text_document,
                    position=CALL,
                    context=lsp.ReferenceContext(include_declaration=True),
                ),
            )
            assert set(locations(references)) >= {
                ("main.py", 0),
                ("main.py", 2),
                ("util.py", 0),
                ("util.py", 7),
            }, references
            hover = await server.request(
                "textDocument/hover",
                lsp.HoverParams(text_document=at_call.text_document, position=CALL),
            )
            assert isinstance(hover, lsp.Hover)
            text = hover_text(hover)
            assert "greet" in text and "Say hello to someone." in text, text

        return self.go(body)

    def test_document_and_workspace_symbols(self) -> Deferred[None]:
        """util.py's symbols are greet and Greeter (with welcome); workspace symbols find greet."""

        async def body() -> None:
            server = await self.started()
            symbols = await server.request(
                "textDocument/documentSymbol",
                lsp.DocumentSymbolParams(text_document=self.doc("util.py")),
            )
            names = set()
            for symbol in symbols:
                names.add(symbol.name)
                for child in getattr(symbol, "children", None) or ():
                    names.add(child.name)
            assert {"greet", "Greeter", "welcome"} <= names, symbols
            if not server.capabilities.workspace_symbol_provider:
                # python-lsp-server offers no workspace symbols: the tool says so.
                assert self.name == "pylsp"
                return
            found = await server.request(
                "workspace/symbol", lsp.WorkspaceSymbolParams(query="greet")
            )
            assert any(
                item.name == "greet" and uri_to_path(item.location.uri) == self.path("util.py")
                for item in found
            ), found

        return self.go(body)

    def test_diagnostics_for_a_file_with_an_error(self) -> Deferred[None]:
        """The diagnostics of a file with an error name it (pylsp without linters: none)."""

        async def body() -> None:
            server = await self.started(self.broken_file)
            found = await server.diagnostics(self.broken_file, timeout=30)
            assert all(isinstance(item, lsp.Diagnostic) for item in found)
            if self.broken_message is None:
                # python-lsp-server as installed has no linter plugin (no pyflakes):
                # it publishes an empty list, which bob waits for and returns.
                assert found == [], found
                return
            assert any(self.broken_message in item.message for item in found), found
            # A fix is seen: the diagnostics follow the new version.
            server.sync(self.broken_file, "x = 1\n")
            fixed = await server.diagnostics(self.broken_file, timeout=30)
            assert not any(self.broken_message in item.message for item in fixed), fixed

        return self.go(body)

    def test_rename_across_two_files(self) -> Deferred[None]:
        """Renaming greet returns a WorkspaceEdit touching both files; applied, both agree."""

        async def body() -> None:
            server = await self.started()
            edit = await server.request(
                "textDocument/rename",
                lsp.RenameParams(
                    text_document=self.doc("main.py"), position=CALL, new_name="salute"
                ),
            )
            assert isinstance(edit, lsp.WorkspaceEdit)
            files = edited_files(edit)
            assert set(files) == {"main.py", "util.py"}, edit
            main = apply(MAIN, files["main.py"])
            util = apply(UTIL, files["util.py"])
            assert main == MAIN.replace("greet", "salute"), main
            assert util == UTIL.replace("greet", "salute"), util

        return self.go(body)

    # -- crashes and shutdown ---------------------------------------------------------

    def test_killed_mid_request(self) -> Deferred[None]:
        """
        A server killed while a request waits: that request fails with
        LanguageServerCrashed (signal 9, the method); the next server_for starts a new one.
        """

        async def body() -> None:
            server = await self.started()
            pid = server.pid
            assert pid is not None
            # Stopped first, so it cannot answer before it is killed.
            os.kill(pid, signal.SIGSTOP)
            pending = server.request(
                "textDocument/hover",
                lsp.HoverParams(text_document=self.doc("main.py"), position=CALL),
            )
            os.killpg(pid, signal.SIGKILL)
            try:
                await pending
            except LanguageServerCrashed as error:
                text = str(error)
            else:
                raise AssertionError("the request did not fail")
            assert text.startswith(f"language server {self.name} was killed by signal 9"), text
            assert text.endswith("(during textDocument/hover)") and "\n" not in text, text
            assert server.closed
            again = await self.started()
            assert again is not server and again.pid != pid
            definition = await again.request(
                "textDocument/definition",
                lsp.DefinitionParams(text_document=self.doc("main.py"), position=CALL),
            )
            assert locations(definition) == [("util.py", 0)]

        return self.go(body)

    def test_shutdown_all_leaves_no_process(self) -> Deferred[None]:
        """After shutdown_all the server and its process group are gone."""

        async def body() -> None:
            server = await self.started()
            pid = server.pid
            assert pid is not None and group_has_live_members(pid)
            await self.servers.shutdown_all()
            assert server.closed
            assert process_gone(pid)
            assert not group_has_live_members(pid)
            with pytest.raises(NoLanguageServer):
                await self.servers.server_for("main.py", self.root)

        return self.go(body)


class PylspTests(_RealServer, TestCase):
    """python-lsp-server (PyPI), without linter plugins."""

    name = "pylsp"
    peer = PYLSP
    broken_message = None


class JediLanguageServerTests(_RealServer, TestCase):
    """jedi-language-server (PyPI): syntax errors."""

    name = "jedi"
    peer = JEDI_LS
    broken_message = "SyntaxError"


class PyrightTests(_RealServer, TestCase):
    """pyright's language server (npm)."""

    name = "pyright"
    peer = PYRIGHT_LS
    args = ("--stdio",)
    broken_file = "undefined.py"
    broken_message = '"undefined_name" is not defined'


def test_a_server_that_is_not_installed_is_one_clear_line() -> None:
    """A configured command that does not exist: NoLanguageServer in one line, nothing runs."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    servers = LanguageServers(
        [
            LspServerConfig(
                name="ghost", command="/nonexistent/bin/ghost-language-server", files=("*.py",)
            )
        ],
        reactor,
        groups=ChildGroups(),
    )
    found: list[Any] = []
    servers.server_for("x.py", root).addBoth(found.append)
    error = found[0].value
    assert isinstance(error, NoLanguageServer)
    assert str(error) == (
        'language server ghost: command "/nonexistent/bin/ghost-language-server" does not exist'
    )
