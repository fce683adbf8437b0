"""Moved to :mod:`acpkit.jsonrpc.cancel`; this path works until 0.3.0."""

from acpkit.jsonrpc.cancel import *  # noqa: F403
