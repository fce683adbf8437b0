"""``python -m acpkit_client``: the same as the ``acpkit-client`` command."""

import sys

from acpkit_client.launch import acpkit_client

sys.exit(acpkit_client())
