"""
An agent that edits a file through the client: it reads it with ``fs/read_text_file``,
asks the user's permission, then writes it with ``fs/write_text_file``.

Prompt it with a file name relative to the session's directory, e.g. ``notes.txt``:
it proposes to upper-case that file.
"""

import itertools
import os

from acpkit import run_agent, schema
from acpkit.connection import Agent, AgentConnection, negotiate_version
from acpkit.errors import RPCError

ALLOW, REJECT = "allow", "reject"


class UpperCaseAgent(Agent):
    """Upper-cases the file named by the prompt, with the user's permission."""

    def __init__(self, conn: AgentConnection) -> None:
        self.conn = conn
        self.cwds: dict[str, str] = {}  # session id -> its directory
        self.numbers = itertools.count(1)

    def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=negotiate_version(params.protocol_version),
            agent_info=schema.Implementation(name="upper-case", version="1.0"),
        )

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        session_id = f"upper-{next(self.numbers)}"
        self.cwds[session_id] = params.cwd
        return schema.NewSessionResponse(session_id=session_id)

    async def say(self, session_id: str, text: str) -> None:
        chunk = schema.AgentMessageChunk(content=schema.TextContentBlock(text=text))
        await self.conn.session_update(session_id, chunk)

    async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        sid = params.session_id
        name = "".join(b.text for b in params.prompt if isinstance(b, schema.TextContentBlock))
        path = os.path.join(self.cwds[sid], name.strip())
        fs = self.conn.client_capabilities.fs if self.conn.client_capabilities else None
        if fs is None or not (fs.read_text_file and fs.write_text_file):
            await self.say(sid, "This client does not let agents read and write files.")
            return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)
        try:
            read = await self.conn.read_text_file(
                schema.ReadTextFileRequest(session_id=sid, path=path)
            )
        except RPCError as error:  # e.g. -32002: no such file
            await self.say(sid, f"I cannot read {path}: {error}")
            return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)
        new_text = read.content.upper()
        diff = schema.FileEditToolCallContent(path=path, old_text=read.content, new_text=new_text)
        await self.conn.session_update(
            sid,
            schema.ToolCallStart(
                tool_call_id="call_1",
                title=f"upper-case {name}",
                kind=schema.ToolKind.EDIT,
                status=schema.ToolCallStatus.PENDING,
                content=[diff],
                locations=[schema.ToolCallLocation(path=path)],
            ),
        )
        answer = await self.conn.request_permission(
            schema.RequestPermissionRequest(
                session_id=sid,
                tool_call=schema.ToolCallUpdate(tool_call_id="call_1"),
                options=[
                    schema.PermissionOption(
                        option_id=ALLOW, name="Allow", kind=schema.PermissionOptionKind.ALLOW_ONCE
                    ),
                    schema.PermissionOption(
                        option_id=REJECT,
                        name="Reject",
                        kind=schema.PermissionOptionKind.REJECT_ONCE,
                    ),
                ],
            )
        )
        outcome = answer.outcome
        if not (
            isinstance(outcome, schema.SelectedPermissionOutcome) and outcome.option_id == ALLOW
        ):
            await self.conn.session_update(
                sid,
                schema.ToolCallProgress(tool_call_id="call_1", status=schema.ToolCallStatus.FAILED),
            )
            await self.say(sid, f"{name} left unchanged.")
            return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)
        await self.conn.write_text_file(
            schema.WriteTextFileRequest(session_id=sid, path=path, content=new_text)
        )
        await self.conn.session_update(
            sid,
            schema.ToolCallProgress(tool_call_id="call_1", status=schema.ToolCallStatus.COMPLETED),
        )
        await self.say(sid, f"{name} is now upper-case.")
        return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)


if __name__ == "__main__":
    run_agent(UpperCaseAgent)
