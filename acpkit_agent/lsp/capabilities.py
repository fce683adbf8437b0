"""
The client capabilities bob announces in ``initialize``: only what
:class:`acpkit_agent.lsp.LanguageServer` and the ``lsp`` tool really handle.

======================================  ==================================================
capability                              what bob does with it
======================================  ==================================================
``textDocument.synchronization``        ``didOpen`` / ``didChange`` (full text), no
                                        ``willSave``, no ``didSave``
``textDocument.publishDiagnostics``     kept per file and version
(``versionSupport``)
``textDocument.diagnostic``             pull diagnostics when the server offers them
``textDocument.hover``                  markdown, then plain text
``textDocument.definition``,            locations (``linkSupport``: ``LocationLink`` too)
``references``
``textDocument.documentSymbol``         hierarchical ``DocumentSymbol`` trees
``workspace.symbol``                    ``SymbolInformation`` / ``WorkspaceSymbol``
``textDocument.rename``                 ``prepareSupport``: ``textDocument/prepareRename``
``workspace.workspaceEdit``             ``documentChanges`` (versioned text edits; no
                                        create/rename/delete file operations)
``workspace.configuration``,            answered (nulls; the root as the one folder)
``workspaceFolders``
``window.workDoneProgress``             ``window/workDoneProgress/create`` accepted,
                                        progress ignored
``general.positionEncodings``           ``utf-16`` only (the LSP default): a position's
                                        ``character`` counts UTF-16 code units
======================================  ==================================================

``workspace.applyEdit`` is not announced: bob applies edits itself (the ``rename``
action asks permission first), so ``workspace/applyEdit`` is answered ``applied: false``.
"""

from __future__ import annotations

from lsprotocol import types as lsp

__all__ = ["client_capabilities"]


def client_capabilities() -> lsp.ClientCapabilities:
    """The capabilities bob sends in ``initialize`` (see the module's table)."""
    symbol_kinds = lsp.ClientSymbolKindOptions(value_set=list(lsp.SymbolKind))
    return lsp.ClientCapabilities(
        general=lsp.GeneralClientCapabilities(
            position_encodings=[lsp.PositionEncodingKind.Utf16],
        ),
        window=lsp.WindowClientCapabilities(work_done_progress=True),
        workspace=lsp.WorkspaceClientCapabilities(
            apply_edit=False,
            workspace_edit=lsp.WorkspaceEditClientCapabilities(
                document_changes=True,
                resource_operations=[],
                failure_handling=lsp.FailureHandlingKind.Abort,
            ),
            symbol=lsp.WorkspaceSymbolClientCapabilities(symbol_kind=symbol_kinds),
            workspace_folders=True,
            configuration=True,
        ),
        text_document=lsp.TextDocumentClientCapabilities(
            synchronization=lsp.TextDocumentSyncClientCapabilities(
                will_save=False, will_save_wait_until=False, did_save=False
            ),
            publish_diagnostics=lsp.PublishDiagnosticsClientCapabilities(
                related_information=True, version_support=True
            ),
            diagnostic=lsp.DiagnosticClientCapabilities(related_document_support=False),
            hover=lsp.HoverClientCapabilities(
                content_format=[lsp.MarkupKind.Markdown, lsp.MarkupKind.PlainText]
            ),
            definition=lsp.DefinitionClientCapabilities(link_support=True),
            references=lsp.ReferenceClientCapabilities(),
            document_symbol=lsp.DocumentSymbolClientCapabilities(
                symbol_kind=symbol_kinds, hierarchical_document_symbol_support=True
            ),
            rename=lsp.RenameClientCapabilities(prepare_support=True),
        ),
    )
