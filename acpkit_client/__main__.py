"""``python -m acpkit_client``: the same as the ``acpkit-client`` command."""

import sys

from acpkit_client.cli import main

sys.exit(main())
