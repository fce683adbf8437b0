"""
A log observer for ``twistd --logger tests.lb_logger.observer``: bob's usual plain lines
on stderr, and every event as JSON (``twisted.logger.eventAsJSON``: with its
``log_time`` and its fields) appended to the file ``ACPKIT_TEST_JSON_LOG`` names, one
event per line, written at once (a bob killed with SIGKILL loses nothing it logged).
"""

from __future__ import annotations

import os
from typing import Any

from twisted.logger import ILogObserver, eventAsJSON
from zope.interface import implementer

from acpkit_agent.tap import stderr_observer

#: The environment variable naming the JSON log file.
JSON_LOG = "ACPKIT_TEST_JSON_LOG"


@implementer(ILogObserver)
class _Both:
    def __init__(self, path: str) -> None:
        self._text = stderr_observer()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def __call__(self, event: dict[str, Any]) -> None:
        self._text(event)
        try:
            os.write(self._fd, eventAsJSON(event).encode("utf-8") + b"\n")
        except (OSError, ValueError):
            pass


def observer() -> ILogObserver:
    """The observer twistd installs (``--logger``)."""
    return _Both(os.environ[JSON_LOG])
