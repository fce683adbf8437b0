"""Moved to :mod:`acpkit.io.process_groups`; this path works until 0.3.0."""

from acpkit.io.process_groups import *  # noqa: F403
