from twisted.application.service import ServiceMaker

acpAgent = ServiceMaker(
    "acp-agent", "acpkit_agent.twistd_entry", "The reference ACP agent bob.", "acp-agent"
)
