"""``python -m acpkit_agent``: the same as the ``acp-agent`` command (``twistd -n acp-agent``)."""

import sys

from acpkit_client.launch import acp_agent

sys.exit(acp_agent())
