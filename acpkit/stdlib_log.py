"""
Standard-library ``logging`` into ``twisted.logger``: libraries used in handlers (``httpx``,
model SDKs, MCP SDKs) log through :mod:`logging`; without a handler their records reach
stderr through Python's last-resort handler, without a timestamp, and below WARNING not
at all.  :func:`bridge_stdlib_logging` sends them to the Twisted log instead, where the
program's own log goes (with its timestamps and its filter), from a chosen level up.

``run_agent`` and ``run_client`` install the bridge at their ``log_level``; bob
(``twistd -n acp-agent``) at ``info``.

==========================  ======================
``logging`` level            ``twisted.logger`` level
==========================  ======================
DEBUG (and below)            debug
INFO                         info
WARNING                      warn
ERROR                        error
CRITICAL                     critical
==========================  ======================

Each record becomes one event in the namespace of its logger's name (``[httpx#info]``),
its message formatted by ``logging`` (``%`` arguments applied); a record with an
exception carries it as the event's failure (its traceback follows the line).
"""

from __future__ import annotations

import logging

from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure

__all__ = ["TwistedLogHandler", "bridge_stdlib_logging", "stdlib_level", "twisted_level"]

_TO_STDLIB = {
    LogLevel.debug: logging.DEBUG,
    LogLevel.info: logging.INFO,
    LogLevel.warn: logging.WARNING,
    LogLevel.error: logging.ERROR,
    LogLevel.critical: logging.CRITICAL,
}


def stdlib_level(level: LogLevel) -> int:
    """The :mod:`logging` level of a Twisted log level."""
    return _TO_STDLIB[level]


def twisted_level(levelno: int) -> LogLevel:
    """The Twisted log level of a :mod:`logging` level number (the nearest below)."""
    found: LogLevel = LogLevel.debug
    for level, number in _TO_STDLIB.items():
        if levelno >= number:
            found = level
    return found


class TwistedLogHandler(logging.Handler):
    """A :class:`logging.Handler` emitting each record as a ``twisted.logger`` event."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:
            self.handleError(record)
            return
        log = Logger(namespace=record.name)
        level = twisted_level(record.levelno)
        if record.exc_info and record.exc_info[1] is not None:
            _type, value, traceback = record.exc_info
            failure = Failure(value, _type, traceback)
            log.failure("{message}", failure, level=level, message=message)
        else:
            log.emit(level, "{message}", message=message)


def bridge_stdlib_logging(level: LogLevel = LogLevel.info) -> TwistedLogHandler:
    """
    Send :mod:`logging` records from ``level`` up to the Twisted log: a
    :class:`TwistedLogHandler` on the root logger (replacing one installed before, so that
    calling it again only changes the level), and the root logger's level set to
    ``level``.  Returns the handler (``logging.getLogger().removeHandler(h)`` undoes it).
    """
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, TwistedLogHandler)]:
        root.removeHandler(old)
    handler = TwistedLogHandler(stdlib_level(level))
    root.addHandler(handler)
    root.setLevel(stdlib_level(level))
    return handler
