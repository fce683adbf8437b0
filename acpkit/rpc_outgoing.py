"""Moved to :mod:`acpkit.jsonrpc.outgoing`; this path works until 0.3.0."""

from acpkit.jsonrpc.outgoing import *  # noqa: F403
