"""Tests for the file tools (read_file, write_file, edit_file) and DiskFileAccess."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any
from unittest import mock

import attrs
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer
from zope.interface.verify import verifyObject

from acpkit_agent.tools import builtin_tools
from acpkit_agent.tools.base import (
    Diff,
    DiskFileAccess,
    IFileAccess,
    ToolContext,
    ToolResult,
    resolve_path,
)
from acpkit_agent.tools.files import (
    EditFileTool,
    ReadFileTool,
    WriteFileTool,
    count_occurrences,
)
from acpkit_agent.tools.plan import PlanState


@implementer(IFileAccess)
@attrs.define
class MemoryFiles:
    """An in-memory IFileAccess that records calls and can fail on demand."""

    files: dict[str, str] = attrs.field(factory=dict)
    read_error: Exception | None = None
    write_error: Exception | None = None
    pending: Deferred[str] | None = None
    calls: list[tuple[Any, ...]] = attrs.field(factory=list)

    def read_text(
        self, path: str, line: int | None = None, limit: int | None = None
    ) -> Deferred[str]:
        """Read from the dict (whole file, or the requested lines)."""
        self.calls.append(("read", path, line, limit))
        if self.pending is not None:
            return self.pending
        if self.read_error is not None:
            return fail(self.read_error)
        if path not in self.files:
            return fail(FileNotFoundError(2, "No such file or directory", path))
        lines = self.files[path].splitlines(keepends=True)
        start = (line or 1) - 1
        end = None if limit is None else start + limit
        return succeed("".join(lines[start:end]))

    def write_text(self, path: str, content: str) -> Deferred[None]:
        """Store into the dict."""
        self.calls.append(("write", path, content))
        if self.write_error is not None:
            return fail(self.write_error)
        self.files[path] = content
        return succeed(None)


def context(cwd: str, files: Any) -> ToolContext:
    """A context on a fake clock (file tools need no reactor)."""
    return ToolContext(
        cwd=cwd, files=files, reactor=Clock(), plan=PlanState(), send_plan=lambda e: None
    )


def temp_dir(case: SynchronousTestCase) -> str:
    """A fresh absolute temporary directory, removed after the test (keeps the tree clean)."""
    path = os.path.realpath(tempfile.mkdtemp(prefix="acpkit-tools-"))
    case.addCleanup(shutil.rmtree, path, True)
    return path


class PathTests(SynchronousTestCase):
    """Path resolution and tool metadata."""

    def test_resolve_path(self) -> None:
        """Relative paths join the cwd, `~` expands to the home, all are normalised."""
        with mock.patch.dict(os.environ, {"HOME": "/home/bob"}):
            self.assertEqual(resolve_path("a/../b.txt", "/work"), "/work/b.txt")
            self.assertEqual(resolve_path("/etc//hosts", "/work"), "/etc/hosts")
            self.assertEqual(resolve_path("~/notes.md", "/work"), "/home/bob/notes.md")
            self.assertEqual(resolve_path("./x", "/work/"), "/work/x")

    def test_metadata(self) -> None:
        """Kinds, titles, locations and permissions follow the seed's tables."""
        tools = builtin_tools()
        expected = {"read_file": ("read", False), "write_file": ("edit", True)}
        expected["edit_file"] = ("edit", True)
        for name, (kind, permission) in expected.items():
            tool = tools[name]
            self.assertEqual(tool.kind, kind)
            self.assertEqual(tool.title({"path": "src/a.py"}), f"{name}: src/a.py")
            self.assertEqual(tool.locations({"path": "src/a.py"}, "/w"), ["/w/src/a.py"])
            self.assertEqual(tool.locations({}, "/w"), [])
            self.assertEqual(tool.needs_permission({"path": "a"}), permission)

    def test_builtin_tools(self) -> None:
        """builtin_tools gives the built-in tools keyed by name, each with a JSON object schema."""
        tools = builtin_tools()
        self.assertLessEqual(
            {"bash", "edit_file", "fetch_content", "plan", "read_file", "write_file", "read_skill"},
            set(tools),
        )
        for name, tool in tools.items():
            self.assertEqual(tool.name, name)
            self.assertEqual(tool.parameters["type"], "object")
            self.assertTrue(tool.description)
        self.assertIsNot(builtin_tools()["plan"], tools["plan"])

    def test_disk_access_provides_interface(self) -> None:
        """DiskFileAccess provides IFileAccess."""
        self.assertTrue(verifyObject(IFileAccess, DiskFileAccess()))


class DiskFileAccessTests(SynchronousTestCase):
    """The local-disk IFileAccess."""

    def setUp(self) -> None:
        self.root = temp_dir(self)

    def test_round_trip_keeps_line_endings(self) -> None:
        """Text written is read back exactly, CRLF and non-ASCII included."""
        path = os.path.join(self.root, "deep", "er", "f.txt")
        text = "ligne é\r\nline 2\rline 3\n"
        self.successResultOf(DiskFileAccess().write_text(path, text))
        self.assertEqual(self.successResultOf(DiskFileAccess().read_text(path)), text)

    def test_line_and_limit(self) -> None:
        """`line` is 1-based and `limit` counts lines."""
        path = os.path.join(self.root, "f.txt")
        self.successResultOf(DiskFileAccess().write_text(path, "a\nb\nc\nd\n"))
        self.assertEqual(self.successResultOf(DiskFileAccess().read_text(path, 2, 2)), "b\nc\n")
        self.assertEqual(self.successResultOf(DiskFileAccess().read_text(path, 3)), "c\nd\n")
        self.assertEqual(self.successResultOf(DiskFileAccess().read_text(path, None, 1)), "a\n")

    def test_missing_file(self) -> None:
        """A missing file fails the read with FileNotFoundError."""
        failure = self.failureResultOf(DiskFileAccess().read_text("/no/such/file"))
        self.assertIsInstance(failure.value, FileNotFoundError)


class ReadFileTests(SynchronousTestCase):
    """read_file on disk and through a client IFileAccess."""

    def setUp(self) -> None:
        self.root = temp_dir(self)
        with open(os.path.join(self.root, "a.txt"), "w") as stream:
            stream.write("one\ntwo\nthree\n")
        self.ctx = context(self.root, DiskFileAccess())

    def read(self, tool: ReadFileTool | None = None, **args: Any) -> ToolResult:
        """Run read_file with ``args`` and return its result."""
        return self.successResultOf((tool or ReadFileTool()).run(self.ctx, args))

    def test_relative_path(self) -> None:
        """A relative path is read from the session cwd."""
        self.assertEqual(self.read(path="a.txt"), ToolResult("one\ntwo\nthree\n"))

    def test_absolute_and_home_paths(self) -> None:
        """Absolute paths and `~` paths are read as given."""
        absolute = os.path.join(self.root, "a.txt")
        self.assertEqual(self.read(path=absolute).output, "one\ntwo\nthree\n")
        with mock.patch.dict(os.environ, {"HOME": self.root}):
            self.assertEqual(self.read(path="~/a.txt").output, "one\ntwo\nthree\n")

    def test_line_and_limit(self) -> None:
        """`line` (1-based) and `limit` select lines."""
        self.assertEqual(self.read(path="a.txt", line=2, limit=1).output, "two\n")
        self.assertEqual(self.read(path="a.txt", line=2).output, "two\nthree\n")

    def test_past_the_end(self) -> None:
        """A line past the end says the file is shorter."""
        result = self.read(path="a.txt", line=9)
        self.assertEqual(
            result.output, f"[{self.root}/a.txt has no line 9: it is shorter than that]"
        )
        self.assertFalse(result.failed)

    def test_empty_file(self) -> None:
        """An empty file says so rather than returning nothing."""
        open(os.path.join(self.root, "empty"), "w").close()
        self.assertEqual(self.read(path="empty").output, f"[{self.root}/empty is empty]")

    def test_missing_file(self) -> None:
        """A missing file is a failed result naming the absolute path."""
        result = self.read(path="nope.txt")
        self.assertEqual(result, ToolResult(f"read_file: no such file: {self.root}/nope.txt", True))

    def test_directory(self) -> None:
        """A directory is refused clearly."""
        result = self.read(path=".")
        self.assertEqual(result.output, f"read_file: {self.root} is a directory, not a file")
        self.assertTrue(result.failed)

    def test_not_utf8(self) -> None:
        """A binary file is reported as not UTF-8 text."""
        with open(os.path.join(self.root, "bin"), "wb") as stream:
            stream.write(b"\xff\xfe\x00")
        result = self.read(path="bin")
        self.assertEqual(
            result.output,
            f"read_file: cannot read {self.root}/bin: the file is not valid UTF-8 text",
        )

    def test_bad_arguments(self) -> None:
        """Missing path, bad line or limit are reported by name."""
        self.assertEqual(
            self.read().output, "read_file: missing required argument 'path' (a string)"
        )
        self.assertEqual(self.read(path="").output, "read_file: argument 'path' is empty")
        self.assertEqual(
            self.read(path="a.txt", line=0).output,
            "read_file: argument 'line' must be at least 1, got 0",
        )
        self.assertEqual(
            self.read(path="a.txt", limit="3").output,
            "read_file: argument 'limit' must be an integer, got '3'",
        )
        self.assertTrue(self.read(path="a.txt", line=True).failed)

    def test_size_cap(self) -> None:
        """A long file is cut at a line boundary with a marker telling where to read on."""
        with open(os.path.join(self.root, "big"), "w") as stream:
            stream.writelines(f"line {i:04}\n" for i in range(1, 1001))
        result = self.read(ReadFileTool(max_chars=100), path="big")
        self.assertTrue(result.output.startswith("line 0001\n"))
        shown, marker = result.output.rsplit("\n", 1)[0], result.output.rsplit("\n", 1)[1]
        self.assertEqual(shown.count("\n") + 1, 10)
        self.assertEqual(
            marker,
            f"[… {10000 - 100} more characters not shown; read on with line=11 and a limit …]",
        )

    def test_size_cap_single_long_line(self) -> None:
        """A single line longer than the cap is cut with a marker saying so."""
        with open(os.path.join(self.root, "long"), "w") as stream:
            stream.write("x" * 150)
        result = self.read(ReadFileTool(max_chars=100), path="long")
        self.assertEqual(
            result.output,
            "x" * 100
            + "\n[… 50 more characters not shown: line 1 alone is longer than 100 characters …]",
        )

    def test_goes_through_ctx_files(self) -> None:
        """Reads go through ctx.files with the absolute path, line and limit."""
        files = MemoryFiles({"/w/x.py": "print(1)\n"})
        result = self.successResultOf(
            ReadFileTool().run(context("/w", files), {"path": "x.py", "line": 1, "limit": 5})
        )
        self.assertEqual(result.output, "print(1)\n")
        self.assertEqual(files.calls, [("read", "/w/x.py", 1, 5)])

    def test_client_error(self) -> None:
        """Any error from the client's file system becomes a one-line failed result."""
        files = MemoryFiles(read_error=RuntimeError("Internal error:\n  boom"))
        result = self.successResultOf(ReadFileTool().run(context("/w", files), {"path": "x"}))
        self.assertEqual(
            result, ToolResult("read_file: cannot read /w/x: Internal error: boom", True)
        )

    def test_cancel(self) -> None:
        """Cancelling a read in progress fails the call with CancelledError."""
        files = MemoryFiles(pending=Deferred())
        running = ReadFileTool().run(context("/w", files), {"path": "x"})
        running.cancel()
        self.failureResultOf(running, CancelledError)


class WriteFileTests(SynchronousTestCase):
    """write_file."""

    def setUp(self) -> None:
        self.root = temp_dir(self)
        self.ctx = context(self.root, DiskFileAccess())

    def write(self, **args: Any) -> ToolResult:
        """Run write_file with ``args``."""
        return self.successResultOf(WriteFileTool().run(self.ctx, args))

    def test_new_file_in_new_directories(self) -> None:
        """A new file (and its directories) is created; the diff has no old text."""
        result = self.write(path="src/pkg/new.py", content="x = 1\n")
        path = f"{self.root}/src/pkg/new.py"
        self.assertEqual(result.diff, Diff(path, None, "x = 1\n"))
        self.assertEqual(result.output, f"created {path} (1 lines, 6 characters)")
        with open(path) as stream:
            self.assertEqual(stream.read(), "x = 1\n")

    def test_overwrite(self) -> None:
        """Overwriting keeps the old text in the diff."""
        self.write(path="f.txt", content="old\n")
        result = self.write(path="f.txt", content="new\nnewer\n")
        self.assertEqual(result.diff, Diff(f"{self.root}/f.txt", "old\n", "new\nnewer\n"))
        self.assertFalse(result.failed)

    def test_home_path(self) -> None:
        """`~` paths are written under the home directory."""
        with mock.patch.dict(os.environ, {"HOME": self.root}):
            result = self.write(path="~/h.txt", content="hi")
        self.assertEqual(result.diff, Diff(f"{self.root}/h.txt", None, "hi"))

    def test_bad_arguments(self) -> None:
        """A missing or non-string content is refused and nothing is written."""
        result = self.write(path="f.txt")
        self.assertEqual(
            result, ToolResult("write_file: missing required argument 'content' (a string)", True)
        )
        self.assertTrue(self.write(path="f.txt", content=3).failed)
        self.assertFalse(os.path.exists(f"{self.root}/f.txt"))

    def test_directory_target(self) -> None:
        """Writing onto a directory fails without touching anything."""
        os.makedirs(f"{self.root}/d")
        result = self.write(path="d", content="x")
        self.assertEqual(
            result.output,
            f"write_file: {self.root}/d is a directory, not a file; nothing was written",
        )

    def test_write_error(self) -> None:
        """A write error from ctx.files is a failed result."""
        files = MemoryFiles(write_error=PermissionError(13, "Permission denied"))
        result = self.successResultOf(
            WriteFileTool().run(context("/w", files), {"path": "x", "content": "y"})
        )
        self.assertEqual(result, ToolResult("write_file: permission denied writing /w/x", True))

    def test_goes_through_ctx_files(self) -> None:
        """The old text is read, then the new one written, through ctx.files."""
        files = MemoryFiles({"/w/x": "a"})
        self.successResultOf(
            WriteFileTool().run(context("/w", files), {"path": "x", "content": "b"})
        )
        self.assertEqual(files.calls, [("read", "/w/x", None, None), ("write", "/w/x", "b")])

    def test_cancel_before_write(self) -> None:
        """Cancelling while the old text is being read fails with CancelledError; no write."""
        files = MemoryFiles(pending=Deferred())
        running = WriteFileTool().run(context("/w", files), {"path": "x", "content": "y"})
        running.cancel()
        self.failureResultOf(running, CancelledError)
        self.assertEqual(files.calls, [("read", "/w/x", None, None)])


class EditFileTests(SynchronousTestCase):
    """edit_file."""

    def setUp(self) -> None:
        self.files = MemoryFiles({"/w/a.py": "def f():\n    return 1\n\ndef g():\n    return 1\n"})
        self.ctx = context("/w", self.files)
        self.before = dict(self.files.files)

    def edit(self, **args: Any) -> ToolResult:
        """Run edit_file with ``args``."""
        return self.successResultOf(EditFileTool().run(self.ctx, args))

    def assertRefused(self, result: ToolResult, message: str) -> None:
        """The edit failed with ``message`` and the file is unchanged."""
        self.assertEqual(result, ToolResult(f"{message}; the file was not changed", True))
        self.assertEqual(self.files.files, self.before)
        self.assertFalse([call for call in self.files.calls if call[0] == "write"])

    def test_unique_replacement(self) -> None:
        """A unique old_text is replaced; the diff covers the whole file."""
        old = "def g():\n    return 1\n"
        result = self.edit(path="a.py", old_text=old, new_text="def g():\n    return 2\n")
        new = "def f():\n    return 1\n\ndef g():\n    return 2\n"
        self.assertEqual(result.diff, Diff("/w/a.py", self.before["/w/a.py"], new))
        self.assertEqual(self.files.files["/w/a.py"], new)
        self.assertEqual(
            result.output, "edited /w/a.py: replaced 2 line(s) at line 4 with 2 line(s)"
        )

    def test_several_matches(self) -> None:
        """An old_text found several times is refused with the count and advice."""
        self.assertRefused(
            self.edit(path="a.py", old_text="return 1", new_text="return 2"),
            "edit_file: old_text matches 2 times in /w/a.py; include more surrounding lines to "
            "make it unique",
        )

    def test_not_found(self) -> None:
        """An old_text not in the file is refused with advice to copy it exactly."""
        self.assertRefused(
            self.edit(path="a.py", old_text="return 3", new_text="x"),
            "edit_file: old_text was not found in /w/a.py; read the file again and copy the "
            "exact text to replace (whitespace and indentation included)",
        )

    def test_overlapping_matches_count(self) -> None:
        """Overlapping occurrences count as several matches."""
        self.files.files["/w/b"] = "aaa"
        self.before = dict(self.files.files)
        self.assertRefused(
            self.edit(path="b", old_text="aa", new_text="b"),
            "edit_file: old_text matches 2 times in /w/b; include more surrounding lines to "
            "make it unique",
        )

    def test_missing_file(self) -> None:
        """Editing a missing file suggests write_file."""
        self.assertRefused(
            self.edit(path="new.py", old_text="a", new_text="b"),
            "edit_file: no such file: /w/new.py; use write_file to create it",
        )

    def test_empty_and_identical(self) -> None:
        """Empty old_text and old_text == new_text are refused."""
        self.assertRefused(
            self.edit(path="a.py", old_text="", new_text="b"),
            "edit_file: 'old_text' is empty; to create a file use write_file",
        )
        self.assertRefused(
            self.edit(path="a.py", old_text="f", new_text="f"),
            "edit_file: 'old_text' and 'new_text' are identical; nothing to change",
        )

    def test_missing_argument(self) -> None:
        """A missing new_text is reported by name."""
        result = self.edit(path="a.py", old_text="f")
        self.assertEqual(
            result, ToolResult("edit_file: missing required argument 'new_text' (a string)", True)
        )

    def test_read_error(self) -> None:
        """An unreadable file is refused."""
        self.files.read_error = PermissionError(13, "Permission denied")
        self.assertRefused(
            self.edit(path="a.py", old_text="f", new_text="h"),
            "edit_file: permission denied reading /w/a.py",
        )

    def test_on_disk_with_crlf(self) -> None:
        """On disk, an edit keeps the file's CRLF line endings."""
        root = temp_dir(self)
        with open(f"{root}/c.txt", "w", newline="") as stream:
            stream.write("a\r\nb\r\n")
        ctx = context(root, DiskFileAccess())
        args = {"path": "c.txt", "old_text": "b\r\n", "new_text": "c\r\n"}
        result = self.successResultOf(EditFileTool().run(ctx, args))
        self.assertFalse(result.failed)
        with open(f"{root}/c.txt", "rb") as stream:
            self.assertEqual(stream.read(), b"a\r\nc\r\n")

    @given(st.text(alphabet="ab", max_size=12), st.text(alphabet="ab", min_size=1, max_size=3))
    def test_count_occurrences(self, text: str, needle: str) -> None:
        """count_occurrences counts every start position where the needle matches."""
        expected = sum(text.startswith(needle, i) for i in range(len(text)))
        self.assertEqual(count_occurrences(text, needle), expected)
