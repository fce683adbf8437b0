"""
acpkit: the Agent Client Protocol on Twisted.

The layers, top to bottom: ``acpkit.framing`` (bytes to lines), ``acpkit.jsonrpc``
(lines to JSON-RPC messages), ``acpkit.schema`` and ``acpkit.codec`` (messages to
typed models), ``acpkit.connection`` (typed agent and client roles) and
``acpkit.endpoints`` (stdio, child processes, Twisted endpoints).
"""

from acpkit._version import __version__

__all__ = ["__version__"]
