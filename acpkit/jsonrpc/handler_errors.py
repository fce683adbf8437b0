"""
What a request handler's unexpected exception becomes: the log line on this side and the
``-32603 Internal error`` the peer receives.

By default the answer carries no detail of the exception (its text may hold paths, keys,
user data).  The development switch puts the exception's type and message in the
error's ``data`` (``{"exception": "ValueError", "message": "..."}``): the environment
variable ``ACPKIT_DEBUG_ERRORS=1`` (read when the error happens), or
``error_details = True`` on the engine (``run_agent(..., debug_errors=True)``).

One mistake is explained whatever the switch: awaiting an asyncio library (``httpx``,
``asyncio.sleep``, the ``openai`` SDK...) in a handler while Twisted's default reactor
runs, which fails with "no running event loop" or an unknown-async-library error.  Its
answer's ``data`` holds ``{"hint": ASYNCIO_HINT}`` (no text of the exception), and the
log line says it too.
"""

from __future__ import annotations

import os
from typing import Any

from acpkit.errors import InternalError

__all__ = [
    "ASYNCIO_HINT",
    "DEBUG_ERRORS_VARIABLE",
    "debug_errors_from_env",
    "describe_exception",
    "internal_error_for",
    "is_asyncio_on_default_reactor",
]

#: The environment variable of the development switch (``1``, ``true``, ``yes``: on).
DEBUG_ERRORS_VARIABLE = "ACPKIT_DEBUG_ERRORS"

#: The explanation of the asyncio-on-the-default-reactor mistake, for logs and ``data``.
ASYNCIO_HINT = (
    "the handler awaited an asyncio library while Twisted's default reactor runs (no "
    "asyncio event loop): run the agent on the asyncio reactor, "
    'run_agent(..., reactor="asyncio") or twistd --reactor asyncio '
    "(docs: how-to/use-asyncio-libraries)"
)

#: Longest exception message put in ``data`` (the rest is cut, with an ellipsis).
MAX_MESSAGE = 2000


def debug_errors_from_env(environ: Any = None) -> bool:
    """Whether ``ACPKIT_DEBUG_ERRORS`` asks for exception details in errors."""
    value = (os.environ if environ is None else environ).get(DEBUG_ERRORS_VARIABLE, "")
    return str(value).strip().lower() in {"1", "true", "yes", "on"}


def is_asyncio_on_default_reactor(error: BaseException) -> bool:
    """True for what awaiting an asyncio library outside an asyncio event loop raises."""
    from acpkit.jsonrpc.asyncio_bridge import running_loop

    if running_loop() is not None:
        return False
    text = str(error)
    if isinstance(error, RuntimeError) and (
        "no running event loop" in text or "no current event loop" in text
    ):
        return True
    # sniffio (httpx, anyio): "unknown async library, or not in async context"
    return type(error).__name__ == "AsyncLibraryNotFoundError"


def describe_exception(error: BaseException) -> str:
    """``ValueError: the message`` (the type alone when the message is empty)."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def internal_error_for(error: BaseException, *, details: bool | None = None) -> InternalError:
    """
    The ``-32603`` answer for a handler's unexpected ``error``: with the exception's type
    and message in ``data`` when ``details`` (None: ``ACPKIT_DEBUG_ERRORS`` decides), with
    the asyncio hint when it is that mistake.
    """
    if details is None:
        details = debug_errors_from_env()
    data: dict[str, Any] = {}
    if details:
        message = str(error)
        if len(message) > MAX_MESSAGE:
            message = message[: MAX_MESSAGE - 1] + "…"
        data["exception"] = type(error).__name__
        data["message"] = message
    if is_asyncio_on_default_reactor(error):
        data["hint"] = ASYNCIO_HINT
    return InternalError(data=data or None)
