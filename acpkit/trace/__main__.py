"""``python -m acpkit.trace``: see :mod:`acpkit.trace.cli`."""

import sys

from acpkit.trace.cli import main

sys.exit(main())
