"""Moved to :mod:`acpkit.framing.content_length` (and :mod:`acpkit.framing`) until 0.3.0."""

from acpkit.framing.content_length import *  # noqa: F403
