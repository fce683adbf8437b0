"""``twistd -n echo-agent``: the options and the service of the tutorial's echo agent."""

import sys
from typing import cast

from minimal_agent import EchoAgent
from twisted.application.service import Service
from twisted.internet import reactor as global_reactor
from twisted.internet.base import ReactorBase
from twisted.logger import FileLogObserver, textFileLogObserver
from twisted.python import usage

from acpkit.connection import AgentConnection
from acpkit.io import serve_stdio

# Typed as a reactor on every Twisted version (older ones type the module itself); as the
# reactors' base class, not the IReactorCore interface, so that plain mypy and pyright (no
# zope plugin) can call its methods.
reactor = cast(ReactorBase, global_reactor)


def stderr_observer() -> FileLogObserver:
    """twistd's log goes to stderr: stdout carries ACP messages only."""
    return textFileLogObserver(sys.stderr)


class Options(usage.Options):
    """``twistd echo-agent`` has no options of its own."""

    def postOptions(self) -> None:
        # Unless the user chose otherwise: no twistd.pid, and log to stderr, not stdout.
        twistd = self.parent  # twistd's own options
        assert twistd is not None
        if twistd["pidfile"] == "twistd.pid":
            twistd["pidfile"] = ""
        if twistd["logger"] is None and twistd["logfile"] is None:
            twistd["logger"] = f"{__name__}.stderr_observer"


class EchoAgentService(Service):
    """Serves one EchoAgent on stdin/stdout; the reactor stops when stdin closes."""

    def startService(self) -> None:
        super().startService()
        conn = AgentConnection(EchoAgent)
        conn.closed.addBoth(lambda _: reactor.stop())  # stdin closed: exit
        serve_stdio(conn.protocol)


def makeService(options: Options) -> Service:
    """What twistd runs."""
    return EchoAgentService()
