"""The echo agent of ``minimal_agent.py``, refusing the relative ``cwd`` the tester found."""

import os
import sys

from minimal_agent import EchoAgent
from twisted.internet import reactor

from acpkit import schema
from acpkit.connection import AgentConnection
from acpkit.endpoints import serve_stdio
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
    conn = AgentConnection(CheckedEchoAgent)
    conn.protocol.when_closed().addBoth(lambda _: reactor.stop())
    serve_stdio(conn.protocol)
    reactor.run()
    sys.exit(0)
