"""Moved to :mod:`acpkit.jsonrpc.dispatch`; this path works until 0.3.0."""

from acpkit.jsonrpc.dispatch import *  # noqa: F403
