from twisted.application.service import ServiceMaker

echoAgent = ServiceMaker("echo-agent", "echo_agent_tap", "The tutorial's echo agent.", "echo-agent")
