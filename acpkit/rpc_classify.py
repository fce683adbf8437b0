"""Moved to :mod:`acpkit.jsonrpc.classify`; this path works until 0.3.0."""

from acpkit.jsonrpc.classify import *  # noqa: F403
