"""The echo agent of ``minimal_agent.py``, refusing the relative ``cwd`` the tester found."""

import os

from minimal_agent import EchoAgent

from acpkit import run_agent, schema
from acpkit.connection import AgentConnection
from acpkit.errors import InvalidParams


class CheckedEchoAgent(EchoAgent):
    """Refuses a relative ``cwd`` and prompts for sessions it never created."""

    def __init__(self, conn: AgentConnection) -> None:
        super().__init__(conn)
        self.sessions: set[str] = set()

    def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        if not os.path.isabs(params.cwd):
            raise InvalidParams("$.params.cwd", "must be an absolute path")
        response = super().new_session(params)
        self.sessions.add(response.session_id)
        return response

    async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        if params.session_id not in self.sessions:
            raise InvalidParams("$.params.sessionId", f"no session {params.session_id!r}")
        return await super().prompt(params)


if __name__ == "__main__":
    run_agent(CheckedEchoAgent)
