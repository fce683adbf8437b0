"""
The module the ``acp-agent`` twistd plugin loads: it checks that the ``agent`` extra is
installed, saying in one line how to install it instead of failing deep in an import
(exit 2), then gives twistd :mod:`acpkit_agent.tap`'s ``Options`` and ``makeService``,
imported with :func:`acpkit_client.startup.startup_imports`.
"""

from __future__ import annotations

from acpkit_client.launch import exit_on_missing_extra
from acpkit_client.startup import startup_imports

exit_on_missing_extra("acp-agent", "agent")

# bob's modules, imported without the cyclic garbage collector, then frozen (see
# startup_imports): twistd imports this module once, in bob's process, before it starts.
with startup_imports():
    from acpkit_agent.tap import Options, makeService

__all__ = ["Options", "makeService"]
