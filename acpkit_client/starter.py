"""**Create agents file**: write a starter ``<project>/.acpkit/acp.toml``.

The starter file has the built-in reference agent as its one active entry and, commented
out, an entry for each well-known ACP agent. Removing the ``# `` in front of any block's
lines gives a file that still loads.
"""

from __future__ import annotations

import errno
import os
import sys

from twisted.logger import Logger

from acpkit_client.config import AgentEntry, builtin_reference_agent, project_agents_file

__all__ = ["WELL_KNOWN_AGENTS", "create_agents_file", "starter_text", "toml_string"]

log = Logger()

#: (comment, name, command, args) of each well-known agent offered commented out.
WELL_KNOWN_AGENTS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    (
        "Google's Gemini CLI in ACP mode (npm install -g @google/gemini-cli).",
        "Gemini CLI",
        "gemini",
        ("--acp",),
    ),
    (
        "Claude through Zed's ACP adapter (npm install -g @zed-industries/claude-agent-acp).",
        "Claude",
        "claude-agent-acp",
        (),
    ),
    (
        "OpenAI Codex through Zed's ACP adapter (npm install -g @zed-industries/codex-acp).",
        "Codex",
        "codex-acp",
        (),
    ),
    ("Block's Goose, which speaks ACP with its acp sub-command.", "Goose", "goose", ("acp",)),
    ("OpenCode, which speaks ACP with its acp sub-command.", "OpenCode", "opencode", ("acp",)),
)

_HEADER = """\
# Agents for this project, one [[agent]] block each, in menu order.
# Keys: name and command (required); args, env and cwd (optional).
#   command  looked up in PATH unless it contains a "/"
#   args     passed as they are: no shell, so no quotes, globs or &&
#   env      added over the editor's environment (a name given here wins)
#   cwd      relative to the project root; the project root by default
# An entry here replaces the one with the same name in ~/.config/acpkit/acp.toml.
# To use another agent, remove the "# " in front of each line of its block.
"""

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f"}
_ESCAPES["\r"] = "\\r"


def toml_string(value: str) -> str:
    """Return ``value`` as a TOML basic string (quoted, with the required escapes)."""
    out = ['"']
    for char in value:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _block(entry: AgentEntry) -> list[str]:
    """Return the lines of an ``[[agent]]`` block for ``entry`` (without ``env``/``cwd``)."""
    lines = [
        "[[agent]]",
        f"name    = {toml_string(entry.name)}",
        f"command = {toml_string(entry.command)}",
    ]
    if entry.args:
        lines.append(f"args    = [{', '.join(toml_string(arg) for arg in entry.args)}]")
    return lines


def starter_text(python: str = sys.executable) -> str:
    """Return the text of the starter agents file (the reference agent runs on ``python``)."""
    reference = builtin_reference_agent(python)
    parts = [
        _HEADER,
        "# The reference agent, acpkit's own (twistd -n acp-agent), with its echo engine,",
        "# run by the Python that runs acpkit-client.",
        *_block(reference),
    ]
    for comment, name, command, args in WELL_KNOWN_AGENTS:
        entry = AgentEntry(name=name, command=command, args=args, source="")
        parts.append("")
        parts.append(f"# {comment}")
        parts.extend(f"# {line}" for line in _block(entry))
    return "\n".join(parts) + "\n"


def create_agents_file(project_root: str) -> str:
    """Write the starter ``<project_root>/.acpkit/acp.toml`` and return its path.

    Creates ``.acpkit/`` when needed. Never overwrites: an existing file raises
    ``FileExistsError`` naming it. Other ``OSError``\\ s (permissions, ``.acpkit`` being a
    file...) pass through.
    """
    path = project_agents_file(project_root)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    text = starter_text()
    try:
        stream = open(path, "x", encoding="utf-8")
    except FileExistsError:
        raise FileExistsError(
            errno.EEXIST, "an agents file already exists; not overwriting it", path
        ) from None
    with stream:
        try:
            stream.write(text)
        except BaseException:
            os.unlink(path)
            raise
    log.info("Created agents file {path}", path=path)
    return path
