"""fs/read_text_file and fs/write_text_file handlers."""

from __future__ import annotations

from pathlib import Path

import pytest

from acpkit import schema
from acpkit.errors import InvalidParams, ResourceNotFound
from acpkit_client.fs import FileAccess, OverlayBufferProvider, select_lines
from tests.helpers import write_through


def read(access: FileAccess, path: str, line: int | None = None, limit: int | None = None) -> str:
    request = schema.ReadTextFileRequest(session_id="s", path=path, line=line, limit=limit)
    return access.read_text_file(request).content


@pytest.fixture
def root(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "five.txt").write_text("1\n2\n3\n4\n5\n", encoding="utf-8")
    return project


def test_line_and_limit(root: Path) -> None:
    """line is 1-based and limit a maximum number of lines."""
    access = FileAccess([str(root)])
    path = str(root / "five.txt")
    assert read(access, path) == "1\n2\n3\n4\n5\n"
    assert read(access, path, line=2, limit=2) == "2\n3\n"
    assert read(access, path, line=4) == "4\n5\n"
    assert read(access, path, limit=1) == "1\n"
    assert read(access, path, line=9) == ""
    assert select_lines("a\r\nb", 2, None) == "b"


def test_bad_line_and_limit_are_refused(root: Path) -> None:
    """line 0 and a negative limit are -32602."""
    access = FileAccess([str(root)])
    with pytest.raises(InvalidParams):
        read(access, str(root / "five.txt"), line=0)
    with pytest.raises(InvalidParams):
        read(access, str(root / "five.txt"), limit=-1)


def test_relative_path_is_refused(root: Path) -> None:
    """A relative path is -32602 naming the path."""
    access = FileAccess([str(root)])
    with pytest.raises(InvalidParams) as info:
        read(access, "five.txt")
    assert "absolute" in str(info.value) and info.value.code == -32602
    with pytest.raises(InvalidParams):
        write_through(access, "new.txt", "x")


def test_a_nul_character_in_the_path_is_invalid_params(root: Path) -> None:
    """
    A path holding a NUL byte is -32602 at data.path $.params.path, read or write, also
    when paths outside the roots are allowed (it was a ValueError: -32603 and a traceback).
    """
    for access in (FileAccess([str(root)]), FileAccess([str(root)], allow_outside_roots=True)):
        for name, content in (("five\0.txt", None), ("new\0.txt", "x")):
            with pytest.raises(InvalidParams) as info:
                if content is None:
                    read(access, str(root / name))
                else:
                    write_through(access, str(root / name), content)
            assert info.value.code == -32602
            assert info.value.data["path"] == "$.params.path"
            assert "NUL character" in info.value.data["reason"]
    assert not (root / "new").exists()


def test_outside_root_is_refused_unless_widened(root: Path, tmp_path: Path) -> None:
    """Reads and writes outside the roots are refused; the setting widens it."""
    outside = tmp_path / "secret.txt"
    outside.write_text("secret", encoding="utf-8")
    access = FileAccess([str(root)])
    with pytest.raises(InvalidParams) as info:
        read(access, str(outside))
    assert "outside" in str(info.value)
    with pytest.raises(InvalidParams):
        read(access, str(root / ".." / "secret.txt"))
    with pytest.raises(InvalidParams):
        write_through(access, str(tmp_path / "evil.txt"), "x")
    assert not (tmp_path / "evil.txt").exists()
    wide = FileAccess([str(root)], allow_outside_roots=True)
    assert read(wide, str(outside)) == "secret"


def test_symlink_escaping_the_root_is_refused(root: Path, tmp_path: Path) -> None:
    """A link inside the project that points outside it does not open the outside."""
    (tmp_path / "secret.txt").write_text("secret", encoding="utf-8")
    (root / "link.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(InvalidParams):
        read(FileAccess([str(root)]), str(root / "link.txt"))


def test_additional_root(root: Path, tmp_path: Path) -> None:
    """A session cwd or additional directory added as a root is allowed."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.txt").write_text("a", encoding="utf-8")
    access = FileAccess([str(root)])
    access.add_root(str(other))
    assert read(access, str(other / "a.txt")) == "a"


def test_missing_file_is_resource_not_found(root: Path) -> None:
    """A missing file is -32002 with its URI."""
    with pytest.raises(ResourceNotFound) as info:
        read(FileAccess([str(root)]), str(root / "nope.txt"))
    assert info.value.code == -32002
    assert info.value.data == {"uri": (root / "nope.txt").as_uri()}


def test_directory_and_binary_are_clear_errors(root: Path) -> None:
    """Reading a directory or a non-UTF-8 file is a -32602 that says which."""
    (root / "bin").write_bytes(b"\xff\xfe")
    access = FileAccess([str(root)])
    with pytest.raises(InvalidParams, match="directory"):
        read(access, str(root))
    with pytest.raises(InvalidParams, match="UTF-8"):
        read(access, str(root / "bin"))


def test_write_creates_file_and_parents(root: Path) -> None:
    """Writing creates a missing file (and its missing directories) and replaces text."""
    access = FileAccess([str(root)])
    target = root / "sub" / "new.txt"
    write_through(access, str(target), "hello\n")
    assert target.read_text(encoding="utf-8") == "hello\n"
    write_through(access, str(target), "again")
    assert target.read_text(encoding="utf-8") == "again"


def test_buffers_first(root: Path) -> None:
    """Reads see the open modified buffer; writes go into an open buffer, not the disk."""
    path = str(root / "five.txt")
    buffers = OverlayBufferProvider({path: ("edited\n", True)})
    access = FileAccess([str(root)], buffers)
    assert read(access, path) == "edited\n"
    write_through(access, path, "from agent\n")
    assert buffers.open_buffers[path] == ("from agent\n", True)
    assert (root / "five.txt").read_text(encoding="utf-8") == "1\n2\n3\n4\n5\n"
