"""
I/O: the transports a protocol is connected to, and the rules of every listener.

====================================  ===============================================
module                                its job
====================================  ===============================================
:mod:`acpkit.io.stdio`                this process's stdin and stdout
                                      (:func:`serve_stdio`, an agent's side)
:mod:`acpkit.io.spawn`                an agent as a child process (:func:`spawn_agent`,
                                      a client's side): its pipes, its stderr, its end
:mod:`acpkit.io.held_writes`          what a protocol writes while it processes a read,
                                      written once at its end (both transports above)
:mod:`acpkit.io.process_groups`       process groups: start a program as a group
                                      leader, signal a group, end the groups left at
                                      exit
:mod:`acpkit.io.endpoints`            Twisted endpoint strings (:func:`serve`,
                                      :func:`connect`)
:mod:`acpkit.io.bind_policy`          what a listener may bind to, and with which
                                      authentication
:mod:`acpkit.io.admission`            caps and deadlines for the connections a
                                      listener accepts
:mod:`acpkit.io.tls_server`           a listener that requires TLS client certificates
:mod:`acpkit.io.pem`                  PEM certificates and keys, read and checked
====================================  ===============================================

Every function here works with any :class:`~twisted.internet.interfaces.IProtocol`;
the framings and the JSON-RPC protocols additionally get half-close handling and, when
``ACPKIT_TRACE`` is set, a tracer.  The names below are importable from here.
"""

from __future__ import annotations

from acpkit.errors import AgentExited
from acpkit.io.admission import AdmissionLimits
from acpkit.io.bind_policy import ClientAuthError, InsecureBindError
from acpkit.io.endpoints import connect, serve
from acpkit.io.process_groups import process_group_argv
from acpkit.io.spawn import (
    AgentAddress,
    AgentNotFoundError,
    AgentProcess,
    AgentTransport,
    spawn_agent,
)
from acpkit.io.stdio import serve_stdio

__all__ = [
    "AdmissionLimits",
    "AgentAddress",
    "AgentExited",
    "AgentNotFoundError",
    "AgentProcess",
    "AgentTransport",
    "ClientAuthError",
    "InsecureBindError",
    "connect",
    "process_group_argv",
    "serve",
    "serve_stdio",
    "spawn_agent",
]
