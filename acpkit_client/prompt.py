"""Prompt assembly: the typed line becomes text blocks and one block per ``@`` mention.

Each ``@path`` that names a known project file (exactly, see
:func:`acpkit_client.completion.find_mentions`) becomes, IN PLACE of the name:

- a ``resource`` block (the file's ``uri``, ``mimeType`` and whole ``text``, read like
  ``fs/read_text_file`` reads it: from the open modified buffer, else the disk) when the
  agent declared ``promptCapabilities.embeddedContext``;
- a ``resource_link`` block (``uri``, ``name``, ``mimeType``) otherwise, or when the file
  could not be read.

The words around stay text blocks: ``explique @docs/README.md s'il te plaît`` is three
blocks.  An ``@word`` that names no file stays text.  Commands (``/web ...``) are text.
"""

from __future__ import annotations

import mimetypes
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

from twisted.logger import Logger

from acpkit import schema
from acpkit_client.completion import MentionSpan, find_mentions, split_prompt, walk_project
from acpkit_client.fs import DiskBufferProvider
from acpkit_client.interfaces import IBufferProvider

__all__ = ["build_prompt", "guess_mime_type", "mention_block"]

log = Logger()


def guess_mime_type(path: str) -> str | None:
    """The MIME type guessed from the file name, if any."""
    guessed, _ = mimetypes.guess_type(path, strict=False)
    return guessed


def mention_block(
    mention: MentionSpan, project_root: str, embed: bool, buffers: IBufferProvider
) -> Any:
    """The content block for one mention (``resource`` when ``embed`` and readable)."""
    absolute = os.path.normpath(os.path.join(os.path.abspath(project_root), mention.path))
    uri = Path(absolute).as_uri()
    mime = guess_mime_type(absolute)
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


def build_prompt(
    text: str,
    project_root: str,
    files: Collection[str] | None = None,
    agent_capabilities: schema.AgentCapabilities | None = None,
    buffers: IBufferProvider | None = None,
) -> list[Any]:
    """
    The ``session/prompt`` blocks for the typed ``text`` (see the module docstring).

    ``files`` are the known project files relative to ``project_root`` with ``/``
    (default: :func:`walk_project` of the root); ``agent_capabilities`` what the agent
    announced at ``initialize``; ``buffers`` where file text is read (default: the disk).
    """
    known = walk_project(project_root) if files is None else files
    caps = agent_capabilities or schema.AgentCapabilities()
    prompt_caps = caps.prompt_capabilities or schema.PromptCapabilities()
    embed = bool(prompt_caps.embedded_context)
    provider = buffers if buffers is not None else DiskBufferProvider()
    blocks: list[Any] = []
    for piece in split_prompt(text, find_mentions(text, known)):
        if isinstance(piece, str):
            blocks.append(schema.TextContentBlock(text=piece))
        else:
            blocks.append(mention_block(piece, project_root, embed, provider))
    if not blocks:
        blocks.append(schema.TextContentBlock(text=text))
    return blocks
