"""Prompt assembly: the typed line becomes text blocks and one block per ``@`` mention.

An ``@path`` at the start of a word (see :mod:`acpkit_client.completion`) is a mention
when the path is exactly a known project file (the ``@`` list's files), or else when it
is a file on the disk under the project root (an ignored file, say; closing punctuation
that ends the word is left out).  Each mention becomes, IN PLACE of the name:

- a ``resource`` block (the file's ``uri``, ``mimeType`` and whole ``text``, read like
  ``fs/read_text_file`` reads it: from the open modified buffer, else the disk) when the
  agent declared ``promptCapabilities.embeddedContext``;
- a ``resource_link`` block (``uri``, ``name``, ``mimeType``) otherwise, or when the file
  could not be read.

The words around stay text blocks: ``explique @docs/README.md s'il te plaît`` is three
blocks.  Commands (``/web ...``) are text.

A mention's ``mimeType`` comes from its name (:func:`guess_mime_type`); a name that
says nothing (``notes.cfg``, ``LICENSE``) gets ``text/plain`` when the file's first
bytes are UTF-8 text without NUL bytes (:func:`mention_mime_type`), and no type otherwise.

A mention of a file that is on the disk but not in the ``@`` list (which holds what git
sees: an ignored ``.env``, say) is an *unlisted mention* (:func:`unlisted_mentions`):
the terminal UI does not send it at once but says that the whole file would go to the
agent, and sends it if ``Enter`` is pressed again; ``ask`` says so on stderr.

An ``@word`` that names no file stays text.  When it *looks like a path* (it holds a
``/``, or it ends with an extension or is a file name that :func:`guess_mime_type`
knows) it is an *unresolved mention* (:func:`unresolved_mentions`): the terminal UI does
not send the prompt but says so, and sends it as typed if ``Enter`` is pressed again.
"""

from __future__ import annotations

import codecs
import functools
import mimetypes
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

from twisted.logger import Logger

from acpkit import schema
from acpkit_client.completion import (
    CLOSING_PUNCTUATION,
    MentionSpan,
    find_mentions,
    mention_words,
    split_prompt,
)
from acpkit_client.fs import DiskBufferProvider
from acpkit_client.interfaces import IBufferProvider

__all__ = [
    "SOURCE_MIME_TYPES",
    "build_prompt",
    "guess_mime_type",
    "looks_like_path",
    "mention_block",
    "mention_mime_type",
    "resolve_mentions",
    "unlisted_mentions",
    "unresolved_mentions",
]

log = Logger()

#: Types of source and text files that the standard ``mimetypes`` table lacks or gets
#: wrong for a project (``.ts`` is MPEG transport stream there).  Looked up first, by
#: lower-case extension; whole file names (``Dockerfile``) are in :data:`SOURCE_FILE_NAMES`.
SOURCE_MIME_TYPES: dict[str, str] = {
    ".c": "text/x-c",
    ".cc": "text/x-c++",
    ".cjs": "text/javascript",
    ".clj": "text/x-clojure",
    ".cpp": "text/x-c++",
    ".cs": "text/x-csharp",
    ".cxx": "text/x-c++",
    ".dart": "text/x-dart",
    ".diff": "text/x-diff",
    ".el": "text/x-emacs-lisp",
    ".erl": "text/x-erlang",
    ".ex": "text/x-elixir",
    ".exs": "text/x-elixir",
    ".fs": "text/x-fsharp",
    ".go": "text/x-go",
    ".gradle": "text/x-groovy",
    ".graphql": "application/graphql",
    ".groovy": "text/x-groovy",
    ".h": "text/x-c",
    ".hh": "text/x-c++",
    ".hpp": "text/x-c++",
    ".hs": "text/x-haskell",
    ".ini": "text/plain",
    ".java": "text/x-java",
    ".jl": "text/x-julia",
    ".js": "text/javascript",
    ".json": "application/json",
    ".jsonc": "application/json",
    ".jsx": "text/jsx",
    ".kt": "text/x-kotlin",
    ".kts": "text/x-kotlin",
    ".lua": "text/x-lua",
    ".markdown": "text/markdown",
    ".md": "text/markdown",
    ".mjs": "text/javascript",
    ".ml": "text/x-ocaml",
    ".mli": "text/x-ocaml",
    ".nim": "text/x-nim",
    ".patch": "text/x-diff",
    ".php": "text/x-php",
    ".pl": "text/x-perl",
    ".pm": "text/x-perl",
    ".proto": "text/x-protobuf",
    ".ps1": "text/x-powershell",
    ".py": "text/x-python",
    ".pyi": "text/x-python",
    ".r": "text/x-r",
    ".rb": "text/x-ruby",
    ".rs": "text/x-rust",
    ".rst": "text/x-rst",
    ".scala": "text/x-scala",
    ".scss": "text/x-scss",
    ".sh": "text/x-shellscript",
    ".sql": "application/sql",
    ".svelte": "text/x-svelte",
    ".swift": "text/x-swift",
    ".tex": "text/x-tex",
    ".tf": "text/x-terraform",
    ".toml": "application/toml",
    ".ts": "text/x-typescript",
    ".tsx": "text/x-tsx",
    ".vue": "text/x-vue",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".zig": "text/x-zig",
    ".zsh": "text/x-shellscript",
}

#: Types of files known by their whole name rather than an extension.
SOURCE_FILE_NAMES: dict[str, str] = {
    "Dockerfile": "text/x-dockerfile",
    "Makefile": "text/x-makefile",
    "GNUmakefile": "text/x-makefile",
    "CMakeLists.txt": "text/x-cmake",
}


@functools.cache
def _standard_types() -> mimetypes.MimeTypes:
    """
    The standard table alone (Python's built-in defaults, not the machine's
    ``/etc/mime.types``), so that a file gets the same type on every machine.  Made on
    first use: making it reads the machine's tables (``mimetypes.init``), which a prompt
    without attachments (``acpkit-client ask``) does not need.
    """
    return mimetypes.MimeTypes()


def guess_mime_type(path: str) -> str | None:
    """
    The MIME type of ``path`` from its name: :data:`SOURCE_FILE_NAMES`, then
    :data:`SOURCE_MIME_TYPES` by extension, then the standard :mod:`mimetypes` table;
    None when none knows it.
    """
    name = os.path.basename(path)
    if name in SOURCE_FILE_NAMES:
        return SOURCE_FILE_NAMES[name]
    extension = os.path.splitext(name)[1].lower()
    if extension in SOURCE_MIME_TYPES:
        return SOURCE_MIME_TYPES[extension]
    guessed, _ = _standard_types().guess_type(name, strict=False)
    return guessed


#: How many first bytes of a file of unknown type are read to tell text from binary.
TEXT_SNIFF_BYTES = 8192


def _looks_like_text(path: str) -> bool:
    """Whether the file's first bytes are UTF-8 text (no NUL; a cut character is fine)."""
    try:
        with open(path, "rb") as stream:
            head = stream.read(TEXT_SNIFF_BYTES)
    except OSError:
        return False
    if b"\0" in head:
        return False
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return False
    return True


def mention_mime_type(path: str) -> str | None:
    """
    The ``mimeType`` of a mentioned file: :func:`guess_mime_type` by its name, else
    ``text/plain`` when its content is text, else None.
    """
    return guess_mime_type(path) or ("text/plain" if _looks_like_text(path) else None)


def mention_block(
    mention: MentionSpan, project_root: str, embed: bool, buffers: IBufferProvider
) -> Any:
    """The content block for one mention (``resource`` when ``embed`` and readable)."""
    absolute = os.path.normpath(os.path.join(os.path.abspath(project_root), mention.path))
    uri = Path(absolute).as_uri()
    mime = mention_mime_type(absolute)
    if embed:
        try:
            text = buffers.read_text(absolute)
        except (OSError, UnicodeDecodeError) as e:
            log.info("sending a link to {path}: cannot read it ({error})", path=absolute, error=e)
        else:
            return schema.EmbeddedResourceContentBlock(
                resource=schema.TextResourceContents(
                    uri=uri, mime_type=mime or "text/plain", text=text
                )
            )
    return schema.ResourceLinkContentBlock(
        uri=uri, name=os.path.basename(mention.path), mime_type=mime
    )


def _project_file(project_root: str, path: str) -> bool:
    """Whether ``path`` is a regular file under ``project_root`` (never outside it)."""
    root = os.path.abspath(project_root)
    absolute = os.path.normpath(os.path.join(root, path))
    inside = absolute.startswith(root.rstrip(os.sep) + os.sep)
    return inside and os.path.isfile(absolute)


def looks_like_path(word: str) -> bool:
    """Whether an ``@word`` that names no file was meant as one (see the module docstring):
    ``@src/app.tsx`` and ``@README.md`` do, ``@property`` and ``@john.doe`` do not."""
    return "/" in word or guess_mime_type(word) is not None


def resolve_mentions(
    text: str, project_root: str, files: Collection[str] | None = None
) -> tuple[list[MentionSpan], list[str]]:
    """
    The mentions of ``text`` (known ``files`` first, then files on the disk), in text
    order, and its unresolved mentions (``@word`` as typed, closing punctuation left out).
    """
    spans = find_mentions(text, files or ())
    covered = {span.start for span in spans}
    unresolved: list[str] = []
    for start, word in mention_words(text):
        if start in covered:
            continue
        candidate = word
        while candidate:
            if _project_file(project_root, candidate):
                spans.append(
                    MentionSpan(start=start, end=start + 1 + len(candidate), path=candidate)
                )
                break
            if candidate[-1] not in CLOSING_PUNCTUATION:
                candidate = ""
                break
            candidate = candidate[:-1]
        else:
            candidate = ""
        if not candidate:
            bare = word.rstrip("".join(CLOSING_PUNCTUATION))
            if bare and looks_like_path(bare):
                unresolved.append(f"@{bare}")
    spans.sort(key=lambda span: span.start)
    return spans, unresolved


def unresolved_mentions(
    text: str, project_root: str, files: Collection[str] | None = None
) -> list[str]:
    """The ``@word``\\ s of ``text`` that look like paths but name no file of the project."""
    return resolve_mentions(text, project_root, files)[1]


def unlisted_mentions(text: str, project_root: str, files: Collection[str]) -> list[str]:
    """
    The mentions of ``text`` (``@path``) that name a file on the disk that is not among
    ``files`` (the ``@`` list: what git sees), such as an ignored ``.env``.
    """
    listed = set(files)
    spans, _ = resolve_mentions(text, project_root, files)
    unlisted: list[str] = []
    for span in spans:
        if span.path not in listed and f"@{span.path}" not in unlisted:
            unlisted.append(f"@{span.path}")
    return unlisted


def build_prompt(
    text: str,
    project_root: str,
    files: Collection[str] | None = None,
    agent_capabilities: schema.AgentCapabilities | None = None,
    buffers: IBufferProvider | None = None,
) -> list[Any]:
    """
    The ``session/prompt`` blocks for the typed ``text`` (see the module docstring).

    ``files`` are the known project files relative to ``project_root`` with ``/`` (the
    ``@`` list's; without them a mention is looked up on the disk only);
    ``agent_capabilities`` what the agent announced at ``initialize``; ``buffers`` where
    file text is read (default: the disk).  Unresolved mentions are sent as text.
    """
    mentions, _ = resolve_mentions(text, project_root, files)
    caps = agent_capabilities or schema.AgentCapabilities()
    prompt_caps = caps.prompt_capabilities or schema.PromptCapabilities()
    embed = bool(prompt_caps.embedded_context)
    provider = buffers if buffers is not None else DiskBufferProvider()
    blocks: list[Any] = []
    for piece in split_prompt(text, mentions):
        if isinstance(piece, str):
            blocks.append(schema.TextContentBlock(text=piece))
        else:
            blocks.append(mention_block(piece, project_root, embed, provider))
    if not blocks:
        blocks.append(schema.TextContentBlock(text=text))
    return blocks
