"""
``acp-agent`` and ``python -m acpkit_agent``: bob as one command, the way editors start an
agent.

It runs exactly what ``twistd -n acp-agent ARGS`` runs (twistd's own runner, the plugin's
:class:`acpkit_agent.tap.Options` and service): stdout carries only ACP frames, the log
goes to stderr, no pid file is written (DESIGN.md, decision 8).  twistd's own options
(``--logfile``, ``--pidfile``, ``--reactor``...) are not offered: ``twistd -n acp-agent``
is there for those.  The console script reaches :func:`main` through
:func:`acpkit_client.launch.acp_agent`, which first checks that the ``acpkit`` package is
ours and that the ``agent`` extra is installed (one line naming the extra, exit 2).

The arguments are checked first with the plugin's options, so that ``--help`` reads
``Usage: acp-agent ...`` and a bad option is one line on stderr (``acp-agent: <why>
(acp-agent --help lists the options)``, exit 2) instead of twistd's whole usage on stdout,
the agent's frame channel.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from twisted.python import usage

from acpkit_agent.tap import Options

__all__ = ["USAGE_EXIT_STATUS", "CommandOptions", "main"]

#: The exit status of a bad command line.
USAGE_EXIT_STATUS = 2


class CommandOptions(Options):
    """The plugin's options, whose help names the ``acp-agent`` command."""

    synopsis = f"Usage: acp-agent {Options.synopsis}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run bob as ``twistd -n acp-agent ARGV`` would; return the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        CommandOptions().parseOptions(args)  # --help and --version exit here
    except usage.error as error:
        print(f"acp-agent: {error} (acp-agent --help lists the options)", file=sys.stderr)
        return USAGE_EXIT_STATUS
    from twisted.scripts.twistd import run

    sys.argv = ["acp-agent", "--nodaemon", "acp-agent", *args]
    run()
    return 0
