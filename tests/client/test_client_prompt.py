"""Prompt assembly with ``@`` mentions against a temporary project tree."""

from __future__ import annotations

from pathlib import Path

from acpkit import schema
from acpkit_client.fs import OverlayBufferProvider
from acpkit_client.prompt import build_prompt

EMBED = schema.AgentCapabilities(
    prompt_capabilities=schema.PromptCapabilities(embedded_context=True)
)


def project(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "README.md").write_text("# Read me\n", encoding="utf-8")
    (tmp_path / "main.go").write_text("package main\n", encoding="utf-8")
    (tmp_path / "blob.bin").write_bytes(b"\xff\xfe\x00")
    return tmp_path


def test_mention_becomes_resource_in_place(tmp_path: Path) -> None:
    """With embeddedContext, a mention becomes a resource block between two text blocks."""
    root = project(tmp_path)
    blocks = build_prompt("explique @docs/README.md s'il te plaît", str(root), None, EMBED)
    assert len(blocks) == 3
    assert blocks[0] == schema.TextContentBlock(text="explique ")
    assert blocks[2] == schema.TextContentBlock(text=" s'il te plaît")
    resource = blocks[1]
    assert isinstance(resource, schema.EmbeddedResourceContentBlock)
    assert isinstance(resource.resource, schema.TextResourceContents)
    assert resource.resource.uri == (root / "docs" / "README.md").as_uri()
    assert resource.resource.text == "# Read me\n"
    assert resource.resource.mime_type == "text/markdown"


def test_without_embedded_context_a_link_is_sent(tmp_path: Path) -> None:
    """Without embeddedContext, a mention becomes a resource_link (uri, name, mimeType)."""
    root = project(tmp_path)
    blocks = build_prompt("see @docs/README.md", str(root), None, schema.AgentCapabilities())
    assert blocks[1] == schema.ResourceLinkContentBlock(
        uri=(root / "docs" / "README.md").as_uri(), name="README.md", mime_type="text/markdown"
    )


def test_unreadable_file_falls_back_to_a_link(tmp_path: Path) -> None:
    """A file that cannot be read as text is sent as a resource_link even with embedding."""
    root = project(tmp_path)
    blocks = build_prompt("@blob.bin", str(root), None, EMBED)
    assert len(blocks) == 1
    assert isinstance(blocks[0], schema.ResourceLinkContentBlock)
    assert blocks[0].name == "blob.bin"


def test_open_modified_buffer_is_read(tmp_path: Path) -> None:
    """The embedded text comes from the open, modified buffer rather than the disk."""
    root = project(tmp_path)
    path = str(root / "main.go")
    buffers = OverlayBufferProvider({path: ("package edited\n", True)})
    blocks = build_prompt("@main.go", str(root), None, EMBED, buffers)
    assert blocks[0].resource.text == "package edited\n"
    unmodified = OverlayBufferProvider({path: ("stale\n", False)})
    blocks = build_prompt("@main.go", str(root), None, EMBED, unmodified)
    assert blocks[0].resource.text == "package main\n"


def test_unknown_at_words_stay_text(tmp_path: Path) -> None:
    """An @word naming no file (an e-mail, @main.gopher) stays text: one text block."""
    root = project(tmp_path)
    text = "mail bob@example.com about @main.gopher and @nothing"
    blocks = build_prompt(text, str(root), None, EMBED)
    assert blocks == [schema.TextContentBlock(text=text)]


def test_known_files_can_be_given(tmp_path: Path) -> None:
    """The given known files (the list the @ completion showed) are mentions, and so is a
    file on the disk that the list does not hold (ignored, or past the list's limit)."""
    root = project(tmp_path)
    blocks = build_prompt("@main.go @docs/README.md", str(root), ["main.go"], EMBED)
    assert isinstance(blocks[0], schema.EmbeddedResourceContentBlock)
    assert blocks[1] == schema.TextContentBlock(text=" ")
    assert isinstance(blocks[2], schema.EmbeddedResourceContentBlock)
    assert blocks[2].resource.uri.endswith("/docs/README.md")


def test_commands_are_text(tmp_path: Path) -> None:
    """A /command line is sent as one text block."""
    blocks = build_prompt("/web agent client protocol", str(tmp_path), None, EMBED)
    assert blocks == [schema.TextContentBlock(text="/web agent client protocol")]


def test_source_files_get_a_mime_type(tmp_path: Path) -> None:
    """resource_link and resource blocks carry a mimeType for common source files: the
    source table first (.go, .rs, .ts is TypeScript, not MPEG), then Python's mimetypes."""
    from acpkit_client.prompt import guess_mime_type

    root = project(tmp_path)
    blocks = build_prompt("@main.go", str(root), None, schema.AgentCapabilities())
    assert blocks[0] == schema.ResourceLinkContentBlock(
        uri=(root / "main.go").as_uri(), name="main.go", mime_type="text/x-go"
    )
    embedded = build_prompt("@main.go", str(root), None, EMBED)[0]
    assert embedded.resource.mime_type == "text/x-go"
    expected = {
        "a.go": "text/x-go",
        "lib.rs": "text/x-rust",
        "App.ts": "text/x-typescript",
        "Button.tsx": "text/x-tsx",
        "view.jsx": "text/jsx",
        "tool.py": "text/x-python",
        "app.rb": "text/x-ruby",
        "Main.kt": "text/x-kotlin",
        "main.swift": "text/x-swift",
        "pyproject.toml": "application/toml",
        "ci.yaml": "application/yaml",
        "ci.yml": "application/yaml",
        "README.md": "text/markdown",
        "SHOUT.GO": "text/x-go",
        "Dockerfile": "text/x-dockerfile",
        "index.html": "text/html",
        "logo.png": "image/png",
        "notes.txt": "text/plain",
    }
    assert {name: guess_mime_type(f"/p/src/{name}") for name in expected} == expected
    assert guess_mime_type("/p/LICENSE") is None
