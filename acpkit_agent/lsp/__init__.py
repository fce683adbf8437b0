"""
bob's language-server client: configured servers (:mod:`acpkit_agent.lsp_config`)
started on first use per workspace root, spoken to with :mod:`lsprotocol` types on
acpkit's JSON-RPC engine over ``Content-Length`` framing.

The API the ``lsp`` tool uses::

    servers = LanguageServers(config.lsp_servers, reactor)
    server = await servers.server_for(path, root=session_cwd)   # NoLanguageServer
    server.sync(path, text)                                     # didOpen / didChange
    locations = await server.request(
        "textDocument/definition",
        lsp.DefinitionParams(text_document=lsp.TextDocumentIdentifier(uri=path_to_uri(path)),
                             position=lsp.Position(line=3, character=4)),
    )                                                           # lsprotocol result types
    problems = await server.diagnostics(path, timeout=5.0)      # list[lsp.Diagnostic]
    await servers.shutdown_all()                                # at bob's exit

- :class:`LanguageServers` ``(configs, reactor)``: ``server_for(path, root)`` fires with
  a :class:`LanguageServer` or fails with :class:`NoLanguageServer`;
  ``shutdown_all()``; ``config_for(path, root)`` (no start); ``running()``.
- :class:`LanguageServer`: ``name``, ``root``, ``capabilities``
  (``lsp.ServerCapabilities``), ``sync(path, text)``, ``request(method, params)``,
  ``notify(method, params)``, ``diagnostics(path, timeout=)``, ``closed``,
  ``end_reason``, ``when_closed()``, ``version(path)``.
- Failures are :class:`LanguageServerError` subclasses whose ``str`` is one line:
  :class:`NoLanguageServer`, :class:`LanguageServerCrashed`,
  :class:`LanguageServerTimeout`, :class:`LanguageServerRequestError` (``code``,
  ``message``); cancelling a request's Deferred sends ``$/cancelRequest``.
- :func:`path_to_uri` / :func:`uri_to_path`; positions are UTF-16 code units.
"""

from __future__ import annotations

from acpkit_agent.lsp.capabilities import client_capabilities
from acpkit_agent.lsp.client import DEFAULT_REQUEST_TIMEOUT, LanguageServer, converter, result_type
from acpkit_agent.lsp.errors import (
    LanguageServerCrashed,
    LanguageServerError,
    LanguageServerRequestError,
    LanguageServerTimeout,
    NoLanguageServer,
)
from acpkit_agent.lsp.languages import language_id
from acpkit_agent.lsp.servers import (
    DEFAULT_SHUTDOWN_GRACE,
    DEFAULT_START_TIMEOUT,
    LanguageServers,
    ServerProcess,
    Spawner,
)
from acpkit_agent.lsp.uris import path_to_uri, uri_to_path

__all__ = [
    "DEFAULT_REQUEST_TIMEOUT",
    "DEFAULT_SHUTDOWN_GRACE",
    "DEFAULT_START_TIMEOUT",
    "LanguageServer",
    "LanguageServerCrashed",
    "LanguageServerError",
    "LanguageServerRequestError",
    "LanguageServerTimeout",
    "LanguageServers",
    "NoLanguageServer",
    "ServerProcess",
    "Spawner",
    "client_capabilities",
    "converter",
    "language_id",
    "path_to_uri",
    "result_type",
    "uri_to_path",
]
