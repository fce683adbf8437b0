"""
Permission requests (``session/request_permission``) before tools that need one, when
``yolo = false``.

=====================  =================  ============================================
option id              kind               effect
=====================  =================  ============================================
``allow``              ``allow_once``     run the tool
``allow_always``       ``allow_always``   run it, and stop asking for this tool name in
                                          the session
``reject``             ``reject_once``    do not run it; the model receives
                                          ``[command rejected by the user]`` (bash) or
                                          ``[<tool> rejected by the user]``
``never``              ``reject_always``  do not run it, and refuse every later call of
                                          this tool name in the session without asking
=====================  =================  ============================================

A transport error, an unknown option or the ``cancelled`` outcome count as a refusal.
"""

from __future__ import annotations

from twisted.internet.defer import CancelledError
from twisted.logger import Logger

from acpkit import schema
from acpkit.connection import AgentConnection
from acpkit_agent.session import Session

__all__ = ["PERMISSION_OPTIONS", "ask_permission", "rejection_message"]

_log = Logger()

PERMISSION_OPTIONS: tuple[schema.PermissionOption, ...] = (
    schema.PermissionOption(
        option_id="allow", name="Allow", kind=schema.PermissionOptionKind.ALLOW_ONCE
    ),
    schema.PermissionOption(
        option_id="allow_always",
        name="Always allow",
        kind=schema.PermissionOptionKind.ALLOW_ALWAYS,
    ),
    schema.PermissionOption(
        option_id="reject", name="Reject", kind=schema.PermissionOptionKind.REJECT_ONCE
    ),
    schema.PermissionOption(
        option_id="never", name="Never", kind=schema.PermissionOptionKind.REJECT_ALWAYS
    ),
)
"""The four options of every request, in order."""


def rejection_message(tool_name: str) -> str:
    """What the model receives when the user refused the call."""
    if tool_name == "bash":
        return "[command rejected by the user]"
    return f"[{tool_name} rejected by the user]"


async def ask_permission(
    conn: AgentConnection, session: Session, tool_name: str, tool_call: schema.ToolCallUpdate
) -> bool:
    """
    Whether the user allows this call: a remembered answer for ``tool_name``, else the
    client's answer to a ``session/request_permission`` (remembered when "always"/"never").

    ``conn`` is the :class:`acpkit.connection.AgentConnection`.  Cancelling the caller
    cancels the request (the :class:`CancelledError` propagates).
    """
    remembered = session.remembered.get(tool_name)
    if remembered is not None:
        return remembered
    request = schema.RequestPermissionRequest(
        session_id=session.id, tool_call=tool_call, options=list(PERMISSION_OPTIONS)
    )
    try:
        response = await conn.request_permission(request)
    except CancelledError:
        raise
    except Exception as error:
        _log.warn(
            "[acp] session {sid}: permission request for {tool} failed ({error}): refused",
            sid=session.id,
            tool=tool_name,
            error=str(error) or type(error).__name__,
        )
        return False
    outcome = response.outcome
    if not isinstance(outcome, schema.SelectedPermissionOutcome):
        return False
    choice = outcome.option_id
    if choice == "allow_always":
        session.remembered[tool_name] = True
    elif choice == "never":
        session.remembered[tool_name] = False
    return choice in ("allow", "allow_always")
