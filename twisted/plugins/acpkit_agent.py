from twisted.application.service import ServiceMaker

acpAgent = ServiceMaker(
    "acp-agent", "acpkit_agent.tap", "The reference ACP agent bob.", "acp-agent"
)
