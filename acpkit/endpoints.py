"""Moved to :mod:`acpkit.io` (spawn, stdio, endpoints); this path works until 0.3.0."""

from acpkit.io import *  # noqa: F403
from acpkit.io.spawn import PIPE_DRAIN_TIMEOUT, STDERR_LINE_CAP, STDOUT_EOF_GRACE  # noqa: F401
