"""The startup banner the agent writes to stderr (through the log): who it is and how it runs."""

from __future__ import annotations

from acpkit_agent.config import AgentConfig

__all__ = ["banner_lines"]


def banner_lines(config: AgentConfig, engine_description: str, version: str) -> list[str]:
    """The banner: name and version, engine, configuration file (or "none"), policy."""
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
    ]
