"""The startup banner the agent writes to stderr (through the log): who it is and how it runs."""

from __future__ import annotations

import os

from acpkit_agent.config import AgentConfig
from acpkit_agent.hooks import hook_banner_lines
from acpkit_agent.skills import SkillLibrary, catalog_banner_lines

__all__ = ["banner_lines"]


def banner_lines(
    config: AgentConfig,
    engine_description: str,
    version: str,
    *,
    cwd: str | None = None,
    home: str | None = None,
) -> list[str]:
    """
    The banner: name and version, engine, configuration file (or "none"), policy, then the
    skills seen from ``cwd`` (default: the process's) and each skill skipped or not announced.
    """
    title = f" — {config.title}" if config.title else ""
    permissions = "yolo (no permission requests)" if config.yolo else "asks before changes"
    window = (
        f"{config.context_window} tokens (configured)"
        if config.context_window
        else "asked from the engine"
    )
    return [
        f"{config.name} {version}{title}",
        f"  engine:      {engine_description}",
        f"  config:      {config.path or 'none'}",
        f"  permissions: {permissions}",
        f"  context:     {window}",
        *hook_banner_lines(config.hooks),
        *catalog_banner_lines(
            SkillLibrary(config.skills_dirs, home).catalog(cwd if cwd is not None else os.getcwd())
        ),
    ]
