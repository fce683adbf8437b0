"""``python -m acpkit.conformance [options] -- AGENT_COMMAND [ARGS…]``."""

import sys

from acpkit.conformance.cli import main

if __name__ == "__main__":
    sys.exit(main())
