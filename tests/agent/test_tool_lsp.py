"""
The ``lsp`` tool against a fake of the language-server client (``acpkit_agent.lsp``):
positions (1-based for the model, 0-based UTF-16 for LSP, non-ASCII lines), file sync
through ``ctx.files``, the formatting of each action's answer, the permission attributes,
and applying a rename's ``WorkspaceEdit`` through a client's file system.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from lsprotocol import types as lsp
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock
from zope.interface import implementer

from acpkit import schema
from acpkit_agent.config import AgentConfig
from acpkit_agent.lsp.errors import (
    LanguageServerCrashed,
    LanguageServerRequestError,
    NoLanguageServer,
)
from acpkit_agent.tools.base import IFileAccess, ToolContext, ToolResult
from acpkit_agent.tools.lsp import ACTIONS, LspTool
from acpkit_agent.tools.lsp_positions import (
    UTF8,
    UTF16,
    EditError,
    LineIndex,
    PlainEdit,
    apply_text_edits,
    code_units,
    column_of,
)
from acpkit_agent.tools.lsp_results import path_of_uri, uri_of_path
from acpkit_agent.tools.plan import PlanState
from acpkit_agent.turn import call_kind
from tests.fixtures.agent.harness import make_harness, scripted

# -- fakes --------------------------------------------------------------------------------


@implementer(IFileAccess)
@attrs.define
class MemoryFiles:
    """A client's file system in memory (what an editor holds, unsaved buffers included)."""

    files: dict[str, str] = attrs.field(factory=dict)
    reads: list[str] = attrs.field(factory=list)
    writes: list[str] = attrs.field(factory=list)
    refuse_writes: set[str] = attrs.field(factory=set)

    def read_text(
        self, path: str, line: int | None = None, limit: int | None = None
    ) -> Deferred[str]:
        self.reads.append(path)
        if path not in self.files:
            return fail(FileNotFoundError(2, "No such file or directory", path))
        return succeed(self.files[path])

    def write_text(self, path: str, content: str) -> Deferred[None]:
        if path in self.refuse_writes:
            return fail(PermissionError(13, "Permission denied", path))
        self.writes.append(path)
        self.files[path] = content
        return succeed(None)


Handler = Callable[[Any], Any]


@attrs.define
class FakeServer:
    """A language server answering each method with a function of the params."""

    root: str
    handlers: dict[str, Handler] = attrs.field(factory=dict)
    capabilities: lsp.ServerCapabilities = attrs.field(
        factory=lambda: lsp.ServerCapabilities(
            definition_provider=True,
            references_provider=True,
            hover_provider=True,
            document_symbol_provider=True,
            workspace_symbol_provider=True,
            rename_provider=lsp.RenameOptions(prepare_provider=True),
        )
    )
    name: str = "fakels"
    published: dict[str, list[lsp.Diagnostic]] = attrs.field(factory=dict)
    synced: list[tuple[str, str]] = attrs.field(factory=list)
    requests: list[tuple[str, Any]] = attrs.field(factory=list)
    events: list[str] = attrs.field(factory=list)

    def sync(self, path: str, text: str) -> None:
        self.synced.append((path, text))
        self.events.append(f"sync {path}")

    def request(self, method: str, params: Any) -> Deferred[Any]:
        self.requests.append((method, params))
        self.events.append(method)
        handler = self.handlers.get(method)
        if handler is None:
            return fail(LanguageServerRequestError(f"{method}: not handled", -32601, "nope"))
        try:
            answer = handler(params)
        except Exception as error:
            return fail(error)
        return answer if isinstance(answer, Deferred) else succeed(answer)

    def diagnostics(self, path: str, *, timeout: float) -> Deferred[list[lsp.Diagnostic]]:
        return succeed(self.published.get(path, []))


@attrs.define
class FakeServers:
    """``LanguageServers`` handing out one fake server, or failing like a missing one."""

    server: FakeServer | None
    error: Exception | None = None
    asked: list[tuple[str, str]] = attrs.field(factory=list)

    def server_for(self, path: str, root: str) -> Deferred[Any]:
        self.asked.append((path, root))
        if self.error is not None:
            return fail(self.error)
        return succeed(self.server)


def context(cwd: Path, files: IFileAccess) -> ToolContext:
    return ToolContext(
        cwd=str(cwd), files=files, reactor=Clock(), plan=PlanState(), send_plan=lambda _: None
    )


def run(tool: LspTool, ctx: ToolContext, **args: Any) -> ToolResult:
    results: list[Any] = []
    tool.run(ctx, args).addBoth(results.append)
    assert results, "the fake answers synchronously: the call should be over"
    result = results[0]
    assert isinstance(result, ToolResult), result
    return result


def rng(line: int, start: int, end: int | None = None, end_line: int | None = None) -> lsp.Range:
    return lsp.Range(
        start=lsp.Position(line=line, character=start),
        end=lsp.Position(
            line=line if end_line is None else end_line, character=start if end is None else end
        ),
    )


def location(path: str, line: int, character: int) -> lsp.Location:
    return lsp.Location(uri=uri_of_path(path), range=rng(line, character, character + 1))


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, MemoryFiles, FakeServer, LspTool]:
    files = MemoryFiles()
    server = FakeServer(root=str(tmp_path))
    return tmp_path, files, server, LspTool(FakeServers(server))


# -- positions ----------------------------------------------------------------------------


def test_code_units_and_columns_in_each_encoding() -> None:
    """é is 1 UTF-16 unit and 2 UTF-8 bytes; U+1D538 is 2 UTF-16 units, 4 bytes; both ways."""
    line = "a = 'é\U0001d538' + b"
    assert code_units("a = 'é", UTF16) == 6
    assert code_units("a = 'é\U0001d538", UTF16) == 8
    assert code_units("a = 'é\U0001d538", UTF8) == 11
    b = line.index("b")
    assert LineIndex.of(line).lsp_character(0, b, UTF16) == b + 1
    assert LineIndex.of(line).lsp_character(0, b, UTF8) == b + 1 + 3
    assert column_of(line, b + 1, UTF16) == b
    assert column_of(line, b + 4, UTF8) == b
    assert column_of(line, 999, UTF16) == len(line)


def test_lines_end_at_lf_crlf_and_cr_only() -> None:
    """LSP lines end at \\n, \\r\\n and \\r; a form feed or U+2028 is inside a line."""
    index = LineIndex.of("one\r\ntwo\rthree\x0cstill\u2028three\nfour")
    assert [index.line(n) for n in range(index.line_count)] == [
        "one",
        "two",
        "three\x0cstill\u2028three",
        "four",
    ]
    assert index.offset(1, 0) == 5
    assert index.offset(9, 0) == len(index.text)


@given(
    st.text(alphabet="ab\n\U0001d538é", max_size=30),
    st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 5), st.text(alphabet="xy\n", max_size=3)),
        max_size=5,
    ),
)
def test_edits_equal_applying_them_one_by_one_from_the_end(
    text: str, raw: list[tuple[int, int, str]]
) -> None:
    """Non-overlapping edits given as UTF-16 positions equal slicing them in from the end."""
    spans: list[tuple[int, int, str]] = []
    cursor = 0
    for gap, length, new in raw:
        start = min(cursor + gap, len(text))
        end = min(start + length, len(text))
        spans.append((start, end, new))
        cursor = end
    index = LineIndex.of(text)

    def position(offset: int) -> tuple[int, int]:
        line = max(n for n, s in enumerate(index.starts) if s <= offset)
        return line, code_units(text[index.starts[line] : offset])

    edits = [PlainEdit(*position(start), *position(end), new) for start, end, new in spans]
    expected = text
    for start, end, new in reversed(spans):
        expected = expected[:start] + new + expected[end:]
    assert apply_text_edits(text, edits) == expected
    if len({start for start, _, _ in spans}) == len(spans):  # order is free then
        assert apply_text_edits(text, list(reversed(edits))) == expected


def test_inserts_at_one_position_keep_their_order_and_overlaps_are_refused() -> None:
    """Two inserts at one position come out in the order given; overlapping edits raise."""
    text = "héllo wörld\n"
    inserts = [PlainEdit(0, 0, 0, 0, "A"), PlainEdit(0, 0, 0, 0, "B"), PlainEdit(0, 6, 0, 11, "W")]
    assert apply_text_edits(text, inserts) == "ABhéllo W\n"
    with pytest.raises(EditError, match="overlap"):
        apply_text_edits(text, [PlainEdit(0, 0, 0, 4, "x"), PlainEdit(0, 2, 0, 6, "y")])
    with pytest.raises(EditError, match="before it starts"):
        apply_text_edits(text, [PlainEdit(0, 4, 0, 1, "x")])


def test_uris_round_trip_with_spaces_and_non_ascii(tmp_path: Path) -> None:
    """file:// URIs are percent-encoded and decoded back to the same path."""
    path = str(tmp_path / "dir with space" / "é.py")
    uri = uri_of_path(path)
    assert " " not in uri and "%20" in uri
    assert path_of_uri(uri) == path
    assert path_of_uri("untitled:Untitled-1") is None


# -- attributes ---------------------------------------------------------------------------


def test_kinds_and_permissions_per_action() -> None:
    """Navigation is read/search and never asks; rename is edit, asks, remembered as edit_file."""
    tool = LspTool(FakeServers(None))
    assert tool.name == "lsp" and tool.permission_key == "edit_file"
    kinds = {action: call_kind(tool, {"action": action}) for action in ACTIONS}
    assert kinds == {
        "definition": "search",
        "references": "search",
        "hover": "read",
        "document_symbols": "read",
        "workspace_symbols": "search",
        "diagnostics": "read",
        "rename": "edit",
    }
    assert [a for a in ACTIONS if tool.needs_permission({"action": a})] == ["rename"]
    assert not getattr(tool, "always_asks", False)
    assert tool.title(
        {"action": "rename", "path": "a.py", "line": 3, "symbol": "f", "new_name": "g"}
    ) == ("lsp rename: a.py:3 f → g")
    schema_props = tool.parameters["properties"]
    assert "1-based" in schema_props["line"]["description"]
    assert "1-based" in schema_props["character"]["description"]


# -- navigation ---------------------------------------------------------------------------


def test_definition_converts_positions_both_ways_on_non_ascii_lines(project: Any) -> None:
    """The model's 1-based code-point column becomes 0-based UTF-16, and back in answers."""
    cwd, files, server, tool = project
    main, lib = str(cwd / "main.py"), str(cwd / "pkg" / "lib.py")
    files.files[main] = "import lib\ns = '\U0001d538é' + lib.name\n"
    files.files[lib] = "x = 1\nname = 'é\U0001d538' ; name2 = 2\n"
    server.handlers["textDocument/definition"] = lambda p: [
        location(lib, 1, len("name = 'é\U0001d538' ; ".encode("utf-16-le")) // 2)
    ]
    result = run(
        tool, context(cwd, files), action="definition", path="main.py", line=2, symbol="name"
    )
    method, params = server.requests[0]
    assert method == "textDocument/definition"
    assert params.text_document.uri == uri_of_path(main)
    # "s = '𝔸é' + lib." is 15 code points, 16 UTF-16 units.
    assert params.position == lsp.Position(line=1, character=16)
    assert result.output == (
        "1 definition of main.py:2:16:\npkg/lib.py:2:15: name = 'é\U0001d538' ; name2 = 2"
    )
    assert not result.failed
    assert server.synced[0] == (main, files.files[main])
    assert server.events[:2] == [f"sync {main}", "textDocument/definition"]


def test_character_argument_and_a_utf8_server(project: Any) -> None:
    """'character' is 1-based code points; a server that chose utf-8 gets byte offsets."""
    cwd, files, server, tool = project
    main = str(cwd / "m.py")
    files.files[main] = "é = f(é)\n"
    server.capabilities = attrs.evolve(server.capabilities, position_encoding="utf-8")
    server.handlers["textDocument/hover"] = lambda p: lsp.Hover(
        contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value="```python\nf(x)\n```")
    )
    result = run(tool, context(cwd, files), action="hover", path="m.py", line=1, character=5)
    assert server.requests[0][1].position == lsp.Position(line=0, character=5)
    assert result.output == "```python\nf(x)\n```"


def test_references_list_is_bounded_and_paths_outside_cwd_are_absolute(project: Any) -> None:
    """References: include the declaration; at most max_results lines, then a count."""
    cwd, files, server, tool = project
    tool.max_results = 3
    main = str(cwd / "a.py")
    files.files[main] = "def f(): pass\n" + "f()\n" * 5
    outside = "/usr/lib/python3/x.py"
    server.handlers["textDocument/references"] = lambda p: (
        [location(main, n, 0) for n in range(5)] + [location(outside, 9, 4)]
    )
    result = run(tool, context(cwd, files), action="references", path="a.py", line=1, character=5)
    assert server.requests[0][1].context.include_declaration is True
    assert result.output.splitlines() == [
        "6 references of a.py:1:5:",
        "a.py:1:1: def f(): pass",
        "a.py:2:1: f()",
        "a.py:3:1: f()",
        "[… 3 more not shown]",
    ]


def test_location_links_and_unreadable_targets(project: Any) -> None:
    """LocationLink answers use the target selection; an unreadable file shows no text."""
    cwd, files, server, tool = project
    files.files[str(cwd / "a.py")] = "g()\n"
    server.handlers["textDocument/definition"] = lambda p: [
        lsp.LocationLink(
            target_uri=uri_of_path(str(cwd / "gone.py")),
            target_range=rng(0, 0, 9),
            target_selection_range=rng(3, 4, 5),
        )
    ]
    result = run(tool, context(cwd, files), action="definition", path="a.py", line=1, character=1)
    assert result.output == "1 definition of a.py:1:1:\ngone.py:4:5"


def test_nothing_found_and_no_hover(project: Any) -> None:
    """An empty answer is one plain line, not a failure."""
    cwd, files, server, tool = project
    files.files[str(cwd / "a.py")] = "x\n"
    server.handlers["textDocument/definition"] = lambda p: None
    server.handlers["textDocument/hover"] = lambda p: None
    ctx = context(cwd, files)
    assert run(tool, ctx, action="definition", path="a.py", line=1, character=1).output == (
        "no definition found for a.py:1:1"
    )
    assert run(tool, ctx, action="hover", path="a.py", line=1, character=1).output == (
        "no hover at a.py:1:1"
    )


def test_document_symbols_nested_and_flat(project: Any) -> None:
    """Hierarchical symbols are indented under their parent; columns 1-based code points."""
    cwd, files, server, tool = project
    path = str(cwd / "s.py")
    files.files[path] = "class Café:\n    def ünïcode(self): pass\n"
    method = lsp.DocumentSymbol(
        name="ünïcode",
        kind=lsp.SymbolKind.Method,
        range=rng(1, 4, 27),
        selection_range=rng(1, 8, 15),
        detail="(self)",
    )
    server.handlers["textDocument/documentSymbol"] = lambda p: [
        lsp.DocumentSymbol(
            name="Café",
            kind=lsp.SymbolKind.Class,
            range=rng(0, 0, 1, end_line=1),
            selection_range=rng(0, 6, 10),
            children=[method],
        )
    ]
    result = run(tool, context(cwd, files), action="document_symbols", path="s.py")
    assert result.output == "symbols of s.py:\n1:7 class Café\n  2:9 method ünïcode — (self)"
    server.handlers["textDocument/documentSymbol"] = lambda p: [
        lsp.SymbolInformation(name="Café", kind=lsp.SymbolKind.Class, location=location(path, 0, 6))
    ]
    result = run(tool, context(cwd, files), action="document_symbols", path="s.py")
    assert result.output == "symbols of s.py:\n1:7 class Café"


def test_workspace_symbols_with_a_query(project: Any) -> None:
    """workspace/symbol carries the query; each symbol with kind, container and its line."""
    cwd, files, server, tool = project
    a, b = str(cwd / "a.py"), str(cwd / "b.py")
    files.files[a] = "x\n"
    files.files[b] = "\ndef helper(): pass\n"
    server.handlers["workspace/symbol"] = lambda p: [
        lsp.SymbolInformation(
            name="helper",
            kind=lsp.SymbolKind.Function,
            location=location(b, 1, 4),
            container_name="b",
        ),
        lsp.WorkspaceSymbol(
            name="Helper",
            kind=lsp.SymbolKind.Class,
            location=lsp.LocationUriOnly(uri=uri_of_path(a)),
        ),
    ]
    result = run(tool, context(cwd, files), action="workspace_symbols", path="a.py", query="help")
    assert server.requests[0][1] == lsp.WorkspaceSymbolParams(query="help")
    assert result.output.splitlines() == [
        "2 symbol(s) match 'help':",
        "b.py:2:5: function helper (in b): def helper(): pass",
        "a.py: class Helper",
    ]


def test_diagnostics_sorted_with_severity_and_source(project: Any) -> None:
    """Diagnostics of a file: by position, 1-based, severity, message, [source code]."""
    cwd, files, server, tool = project
    path = str(cwd / "d.py")
    files.files[path] = "import os\nprint(ünknown)\n"
    server.published[path] = [
        lsp.Diagnostic(
            range=rng(1, 6, 13),
            message="undefined name\n'ünknown'",
            severity=lsp.DiagnosticSeverity.Error,
            source="pyflakes",
        ),
        lsp.Diagnostic(
            range=rng(0, 0, 9),
            message="'os' imported but unused",
            severity=lsp.DiagnosticSeverity.Warning,
            source="pyflakes",
            code="F401",
        ),
    ]
    result = run(tool, context(cwd, files), action="diagnostics", path="d.py")
    assert result.output.splitlines() == [
        "2 diagnostic(s) in d.py:",
        "1:1: warning: 'os' imported but unused [pyflakes F401]",
        "2:7: error: undefined name 'ünknown' [pyflakes]",
    ]
    assert server.synced == [(path, files.files[path])]
    files.files[str(cwd / "clean.py")] = "x = 1\n"
    assert run(tool, context(cwd, files), action="diagnostics", path="clean.py").output == (
        "no diagnostics for clean.py"
    )


def test_long_hover_is_cut(project: Any) -> None:
    """An answer longer than max_chars is cut at a line boundary, saying so."""
    cwd, files, server, tool = project
    tool.max_chars = 50
    files.files[str(cwd / "a.py")] = "x\n"
    server.handlers["textDocument/hover"] = lambda p: lsp.Hover(contents=["line\n" * 40])
    output = run(tool, context(cwd, files), action="hover", path="a.py", line=1, character=1).output
    assert output.startswith("line\nline\n") and output.endswith("more characters not shown]")
    assert len(output) < 100


# -- failures -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        ({"action": "jump", "path": "a.py"}, "'action' must be one of definition, references"),
        ({"action": "definition", "path": "a.py"}, "definition needs 'line' (1-based)"),
        ({"action": "definition", "path": "a.py", "line": 1}, "needs 'character' (1-based) or"),
        ({"action": "hover", "path": "a.py", "line": 9, "character": 1}, "a.py has 1 line(s)"),
        ({"action": "hover", "path": "a.py", "line": 1, "character": 9}, "has 4 character(s)"),
        ({"action": "hover", "path": "a.py", "line": 1, "symbol": "zz"}, "'zz' is not on line 1"),
        ({"action": "rename", "path": "a.py", "line": 1, "character": 1}, "'new_name'"),
        ({"action": "workspace_symbols", "path": "a.py"}, "missing required argument 'query'"),
        ({"action": "hover", "path": "nope.py", "line": 1, "character": 1}, "no such file: nope"),
    ],
)
def test_bad_arguments_are_one_failed_line(
    project: Any, args: dict[str, Any], message: str
) -> None:
    """Bad arguments: a failed result naming the problem; no server is even started."""
    cwd, files, server, tool = project
    files.files[str(cwd / "a.py")] = "f(x)\n"
    result = run(tool, context(cwd, files), **args)
    assert result.failed and message in result.output
    assert result.output.startswith("lsp ") and "\n" not in result.output
    assert tool.servers.asked == [] and server.synced == [] and server.requests == []


def test_no_language_server_is_one_line(tmp_path: Path) -> None:
    """No server configured (or not installed): the client's message, one failed line."""
    tool = LspTool(FakeServers(None, NoLanguageServer("no language server is configured for x.rs")))
    files = MemoryFiles({str(tmp_path / "x.rs"): "fn main() {}\n"})
    result = run(tool, context(tmp_path, files), action="document_symbols", path="x.rs")
    assert result == ToolResult(
        output="lsp document_symbols: no language server is configured for x.rs", failed=True
    )


def test_crash_error_answer_and_missing_capability(project: Any) -> None:
    """A crash or an error answer is the client's one line; an unoffered method says so."""
    cwd, files, server, tool = project
    files.files[str(cwd / "a.py")] = "x\n"

    def crash(params: Any) -> Any:
        raise LanguageServerCrashed("language server fakels exited with status 1")

    server.handlers["textDocument/definition"] = crash
    ctx = context(cwd, files)
    result = run(tool, ctx, action="definition", path="a.py", line=1, character=1)
    assert result.failed
    assert result.output == "lsp definition: language server fakels exited with status 1"
    server.handlers["textDocument/references"] = lambda p: 1 / 0
    result = run(tool, ctx, action="references", path="a.py", line=1, character=1)
    assert result.output == (
        "lsp references: the language server fakels failed during textDocument/references: "
        "division by zero"
    )
    server.capabilities = lsp.ServerCapabilities(hover_provider=False)
    result = run(tool, ctx, action="hover", path="a.py", line=1, character=1)
    assert (
        result.output == "lsp hover: the language server fakels does not offer textDocument/hover"
    )


# -- rename -------------------------------------------------------------------------------


def _rename_project(cwd: Path, files: MemoryFiles, server: FakeServer) -> tuple[str, str]:
    lib, main = str(cwd / "lib.py"), str(cwd / "main.py")
    files.files[lib] = "def grüße():\n    return 1\n"
    files.files[main] = "from lib import grüße\nprint(grüße(), 'é', grüße())\n"
    server.handlers["textDocument/prepareRename"] = lambda p: rng(0, 4, 9)

    def rename(params: lsp.RenameParams) -> lsp.WorkspaceEdit:
        new = params.new_name
        return lsp.WorkspaceEdit(
            document_changes=[
                lsp.TextDocumentEdit(
                    text_document=lsp.OptionalVersionedTextDocumentIdentifier(
                        uri=uri_of_path(lib), version=1
                    ),
                    edits=[lsp.TextEdit(range=rng(0, 4, 9), new_text=new)],
                ),
                lsp.TextDocumentEdit(
                    text_document=lsp.OptionalVersionedTextDocumentIdentifier(
                        uri=uri_of_path(main), version=1
                    ),
                    edits=[
                        lsp.AnnotatedTextEdit(
                            range=rng(1, 20, 25), new_text=new, annotation_id="a"
                        ),
                        lsp.TextEdit(range=rng(1, 6, 11), new_text=new),
                        lsp.TextEdit(range=rng(0, 16, 21), new_text=new),
                    ],
                ),
            ]
        )

    server.handlers["textDocument/rename"] = rename
    return lib, main


def test_rename_across_two_files_through_the_client_fs(project: Any) -> None:
    """prepareRename, rename, the WorkspaceEdit written through ctx.files; a diff per file."""
    cwd, files, server, tool = project
    lib, main = _rename_project(cwd, files, server)
    old_main = files.files[main]
    result = run(
        tool,
        context(cwd, files),
        action="rename",
        path="lib.py",
        line=1,
        symbol="grüße",
        new_name="hello",
    )
    assert not result.failed, result.output
    assert [m for m, _ in server.requests] == ["textDocument/prepareRename", "textDocument/rename"]
    assert server.requests[1][1].position == lsp.Position(line=0, character=4)
    assert files.files[lib] == "def hello():\n    return 1\n"
    assert files.files[main] == "from lib import hello\nprint(hello(), 'é', hello())\n"
    assert files.writes == [lib, main]
    assert result.output == (
        "renamed 'grüße' to 'hello': 4 edit(s) in 2 file(s): lib.py (1), main.py (3)"
    )
    assert result.diff is not None and result.diff.path == lib
    assert [(d.path, d.old_text, d.new_text) for d in result.diffs] == [
        (main, old_main, files.files[main])
    ]
    assert server.synced[-2:] == [(lib, files.files[lib]), (main, files.files[main])]


def test_rename_with_changes_map_and_no_prepare(project: Any) -> None:
    """A server without prepareRename and answering with 'changes' is applied the same."""
    cwd, files, server, tool = project
    path = str(cwd / "a.py")
    files.files[path] = "x = 1\nprint(x)\n"
    server.capabilities = lsp.ServerCapabilities(rename_provider=True)
    server.handlers["textDocument/rename"] = lambda p: lsp.WorkspaceEdit(
        changes={
            uri_of_path(path): [
                lsp.TextEdit(range=rng(1, 6, 7), new_text="y"),
                lsp.TextEdit(range=rng(0, 0, 1), new_text="y"),
            ]
        }
    )
    result = run(
        tool, context(cwd, files), action="rename", path="a.py", line=1, character=1, new_name="y"
    )
    assert files.files[path] == "y = 1\nprint(y)\n"
    assert result.output == "renamed 'x' to 'y': 2 edit(s) in 1 file(s): a.py (2)"
    assert [m for m, _ in server.requests] == ["textDocument/rename"]


def test_rename_refused_by_prepare_changes_nothing(project: Any) -> None:
    """prepareRename answering null: nothing renamed, nothing written."""
    cwd, files, server, tool = project
    _rename_project(cwd, files, server)
    server.handlers["textDocument/prepareRename"] = lambda p: None
    result = run(
        tool, context(cwd, files), action="rename", path="lib.py", line=2, character=5, new_name="z"
    )
    assert result.failed
    assert result.output == (
        "lsp rename: nothing that can be renamed at lib.py:2:5; nothing was changed"
    )
    assert files.writes == []


@pytest.mark.parametrize(
    "operation, message",
    [
        (
            lsp.RenameFile(old_uri="file:///P/lib.py", new_uri="file:///P/lib2.py"),
            "the edit would also rename lib.py to lib2.py; bob cannot rename or delete files",
        ),
        (lsp.DeleteFile(uri="file:///P/main.py"), "the edit would also delete main.py"),
    ],
)
def test_file_renames_and_deletes_are_refused_before_any_write(
    project: Any, operation: Any, message: str
) -> None:
    """RenameFile / DeleteFile in documentChanges: refused clearly, no file written."""
    cwd, files, server, tool = project
    _rename_project(cwd, files, server)
    operation = attrs.evolve(
        operation,
        **{
            field: getattr(operation, field).replace("file:///P", Path(cwd).as_uri())
            for field in ("uri", "old_uri", "new_uri")
            if hasattr(operation, field)
        },
    )
    base = server.handlers["textDocument/rename"]
    server.handlers["textDocument/rename"] = lambda p: lsp.WorkspaceEdit(
        document_changes=[*base(p).document_changes, operation]
    )
    result = run(
        tool, context(cwd, files), action="rename", path="lib.py", line=1, character=5, new_name="z"
    )
    assert result.failed and message in result.output
    assert files.writes == []


def test_create_file_and_edits_outside_the_cwd(project: Any) -> None:
    """CreateFile makes an empty file then edits fill it; a file outside cwd is refused."""
    cwd, files, server, tool = project
    path, new = str(cwd / "a.py"), str(cwd / "new.py")
    files.files[path] = "x = 1\n"
    server.capabilities = lsp.ServerCapabilities(rename_provider=True)
    server.handlers["textDocument/rename"] = lambda p: lsp.WorkspaceEdit(
        document_changes=[
            lsp.CreateFile(uri=uri_of_path(new)),
            lsp.TextDocumentEdit(
                text_document=lsp.OptionalVersionedTextDocumentIdentifier(uri=uri_of_path(new)),
                edits=[lsp.TextEdit(range=rng(0, 0), new_text="y = 2\n")],
            ),
        ]
    )
    ctx = context(cwd, files)
    result = run(tool, ctx, action="rename", path="a.py", line=1, character=1, new_name="y")
    assert files.files[new] == "y = 2\n"
    assert result.diff is not None and result.diff.old_text is None
    server.handlers["textDocument/rename"] = lambda p: lsp.WorkspaceEdit(
        changes={"file:///etc/passwd": [lsp.TextEdit(range=rng(0, 0), new_text="x")]}
    )
    result = run(tool, ctx, action="rename", path="a.py", line=1, character=1, new_name="y")
    assert result.failed
    assert f"the edit would change /etc/passwd, outside the session's directory {cwd}" in (
        result.output
    )


def test_a_write_failing_halfway_says_which_files_changed(project: Any) -> None:
    """The second file cannot be written: the first stays changed (with its diff), both named."""
    cwd, files, server, tool = project
    lib, main = _rename_project(cwd, files, server)
    files.refuse_writes.add(main)
    result = run(
        tool, context(cwd, files), action="rename", path="lib.py", line=1, character=5, new_name="h"
    )
    assert result.failed
    assert result.output == (
        "lsp rename: the rename of 'grüße' to 'h' stopped halfway: cannot write main.py: "
        "Permission denied. Changed: lib.py (1). Not changed: main.py."
    )
    assert result.diff is not None and result.diff.path == lib and result.diffs == ()
    assert files.files[lib].startswith("def h():")


def test_overlapping_edits_change_nothing(project: Any) -> None:
    """A WorkspaceEdit whose edits overlap in one file is refused before any write."""
    cwd, files, server, tool = project
    lib, main = _rename_project(cwd, files, server)
    server.handlers["textDocument/rename"] = lambda p: lsp.WorkspaceEdit(
        changes={
            uri_of_path(lib): [lsp.TextEdit(range=rng(0, 4, 9), new_text="a")],
            uri_of_path(main): [
                lsp.TextEdit(range=rng(0, 0, 10), new_text="a"),
                lsp.TextEdit(range=rng(0, 5, 12), new_text="b"),
            ],
        }
    )
    result = run(
        tool, context(cwd, files), action="rename", path="lib.py", line=1, character=5, new_name="h"
    )
    assert result.failed and "cannot apply the edit to main.py: two edits overlap" in result.output
    assert files.writes == []


# -- in a turn ----------------------------------------------------------------------------


def _turn_harness(turns: list[dict[str, Any]], server: FakeServer) -> Any:
    h = make_harness(scripted({"turn": turns}), config=AgentConfig(yolo=False))
    h.runtime.tools = {**h.runtime.tools, "lsp": LspTool(FakeServers(server))}
    return h


def test_in_a_turn_navigation_never_asks_and_rename_asks_like_edit_file(tmp_path: Path) -> None:
    """
    yolo = false: definition runs without a dialog (kind search); rename asks with the four
    options (kind edit), is applied through the client's fs with two diffs; its "always" is
    remembered under edit_file, so a later edit_file asks nothing.
    """
    server = FakeServer(root=str(tmp_path))
    turns: list[dict[str, Any]] = [
        {
            "tool_calls": [
                {
                    "name": "lsp",
                    "arguments": {
                        "action": "definition",
                        "path": "main.py",
                        "line": 2,
                        "symbol": "grüße",
                    },
                },
                {
                    "name": "lsp",
                    "arguments": {
                        "action": "rename",
                        "path": "lib.py",
                        "line": 1,
                        "symbol": "grüße",
                        "new_name": "hello",
                    },
                },
                {
                    "name": "edit_file",
                    "arguments": {"path": "lib.py", "old_text": "return 1", "new_text": "return 2"},
                },
            ]
        },
        {"chunks": ["done"]},
    ]
    h = _turn_harness(turns, server)
    memory = MemoryFiles()
    lib, main = _rename_project(tmp_path, memory, server)
    h.client.files.update(memory.files)
    server.handlers["textDocument/definition"] = lambda p: [location(lib, 0, 4)]
    h.client.answers = ["allow_always"]
    caps = schema.ClientCapabilities(
        fs=schema.FileSystemCapabilities(read_text_file=True, write_text_file=True)
    )
    sid = h.start(cwd=str(tmp_path), capabilities=caps)
    h.raw_prompt(sid, "rename grüße")
    [request] = h.client.permission_requests
    assert request.tool_call.kind == schema.ToolKind.EDIT
    assert request.tool_call.title == "lsp rename: lib.py:1 grüße → hello"
    assert [o.option_id for o in request.options] == ["allow", "allow_always", "reject", "never"]
    starts = h.client.of_kind("tool_call")
    assert [s["kind"] for s in starts] == ["search", "edit", "edit"]
    ends = [u for u in h.client.tool_updates() if u.get("status") in ("completed", "failed")]
    assert [e["status"] for e in ends] == ["completed", "completed", "completed"]
    assert ends[0]["rawOutput"]["output"].startswith("1 definition of main.py:2:7:")
    diffs = [c for c in ends[1]["content"] if c["type"] == "diff"]
    assert [d["path"] for d in diffs] == [lib, main]
    assert h.client.files[main] == "from lib import hello\nprint(hello(), 'é', hello())\n"
    assert h.client.files[lib] == "def hello():\n    return 2\n"
    assert ("write", lib) in h.client.fs_calls and not (tmp_path / "lib.py").exists()
    session = h.agent.sessions.get(sid)
    assert session is not None and session.remembered == {"edit_file": True}


def test_in_a_turn_a_missing_server_fails_one_call_and_the_turn_goes_on(tmp_path: Path) -> None:
    """No language server: the lsp call fails with one line; read_file still works after it."""
    (tmp_path / "a.py").write_text("x = 1\n")
    turns = [
        {
            "tool_calls": [
                {"name": "lsp", "arguments": {"action": "diagnostics", "path": "a.py"}},
                {"name": "read_file", "arguments": {"path": "a.py"}},
            ]
        },
        {"chunks": ["ok"]},
    ]
    h = make_harness(scripted({"turn": turns}))
    missing = NoLanguageServer("language server pylsp: command 'pylsp' not found")
    h.runtime.tools = {**h.runtime.tools, "lsp": LspTool(FakeServers(None, missing))}
    sid = h.start(cwd=str(tmp_path))
    assert h.raw_prompt(sid, "check")["stopReason"] == "end_turn"
    ends = [u for u in h.client.tool_updates() if u.get("status") in ("completed", "failed")]
    assert [e["status"] for e in ends] == ["failed", "completed"]
    assert ends[0]["rawOutput"]["output"] == (
        "lsp diagnostics: language server pylsp: command 'pylsp' not found"
    )
    assert ends[1]["rawOutput"]["output"] == "x = 1\n"


def test_a_replayed_lsp_call_keeps_its_kind() -> None:
    """session/load replays an lsp rename with kind edit (the per-call kind, not the tool's)."""
    from acpkit_agent.replay import _tool_call

    tool = LspTool(FakeServers(None))
    call = {
        "id": "m1",
        "function": {"name": "lsp", "arguments": '{"action": "rename", "path": "a.py"}'},
    }
    start = _tool_call(call, "call_1", {}, {"lsp": tool}, "/tmp")
    assert start.kind == schema.ToolKind.EDIT


def test_bob_offers_lsp_only_when_a_server_is_configured() -> None:
    """
    Without [lsp.servers] bob has no lsp tool; with one, lsp runs on bob's LanguageServers,
    nothing started yet; stopping them at exit fires at once when none runs.
    """
    from acpkit_agent.lsp import LanguageServers
    from acpkit_agent.lsp_config import LspServerConfig
    from acpkit_agent.tap import build_runtime, stop_language_servers

    clock = Clock()
    plain = build_runtime(AgentConfig(), clock)
    assert "lsp" not in plain.tools
    assert stop_language_servers(plain).called
    server = LspServerConfig(name="py", command="pylsp", files=("*.py",))
    runtime = build_runtime(AgentConfig(lsp_servers=(server,)), clock)
    tool = runtime.tools["lsp"]
    assert isinstance(tool, LspTool) and isinstance(tool.servers, LanguageServers)
    assert tool.servers.running() == []
    assert "lsp" in {spec.name for spec in runtime.tool_specs()}
    assert stop_language_servers(runtime).called


def test_cancelling_a_call_cancels_the_request(project: Any) -> None:
    """Cancelling the running call fails it with CancelledError and cancels the request."""
    from twisted.internet.defer import CancelledError

    cwd, files, server, tool = project
    files.files[str(cwd / "a.py")] = "x\n"
    cancelled: list[bool] = []
    pending: Deferred[Any] = Deferred(lambda d: cancelled.append(True))
    server.handlers["textDocument/hover"] = lambda p: pending
    running = tool.run(
        context(cwd, files), {"action": "hover", "path": "a.py", "line": 1, "character": 1}
    )
    outcome: list[Any] = []
    running.addBoth(outcome.append)
    assert outcome == []
    running.cancel()
    assert cancelled == [True]
    assert len(outcome) == 1 and outcome[0].check(CancelledError)


def test_banner_names_the_language_servers() -> None:
    """The banner has one lsp line naming each server and its files; none without servers."""
    from acpkit_agent.banner import banner_lines
    from acpkit_agent.lsp_config import LspServerConfig

    servers = (
        LspServerConfig(name="pylsp", command="pylsp", files=("*.py",)),
        LspServerConfig(name="ts", command="tsls", files=("*.ts", "*.tsx")),
    )
    lines = banner_lines(
        AgentConfig(lsp_servers=servers), "echo", "1", cwd="/nonexistent", home="/nonexistent"
    )
    assert [line for line in lines if "lsp:" in line] == [
        "  lsp:         pylsp (*.py), ts (*.ts, *.tsx); started on first use"
    ]
    plain = banner_lines(AgentConfig(), "echo", "1", cwd="/nonexistent", home="/nonexistent")
    assert not any("lsp:" in line for line in plain)
