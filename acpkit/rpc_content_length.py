"""Moved to :mod:`acpkit.jsonrpc.content_length`; this path works until 0.3.0."""

from acpkit.jsonrpc.content_length import *  # noqa: F403
