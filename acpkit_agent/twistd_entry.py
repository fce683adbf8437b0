"""
The module the ``acp-agent`` twistd plugin loads: it checks that the ``agent`` extra is
installed, saying in one line how to install it instead of failing deep in an import
(exit 2), then gives twistd :mod:`acpkit_agent.tap`'s ``Options`` and ``makeService``.
"""

from __future__ import annotations

from acpkit_client.launch import exit_on_missing_extra

exit_on_missing_extra("acp-agent", "agent")

from acpkit_agent.tap import Options, makeService  # noqa: E402  (after the check)

__all__ = ["Options", "makeService"]
