"""
The module paths of the 0.1.0 release keep working for one minor release.

Each module that moved when the layers became packages is still importable at its old
path, and every public name it defined in 0.1.0 (its ``__all__`` and its other public
top-level names, type variables aside) is the very object now defined at the new home.
The one-line modules left at the old paths say where the code went and until which
release they stay.
"""

from __future__ import annotations

import importlib
import importlib.util

import pytest

#: Release until which (excluded) the old paths are kept.
UNTIL = "0.3.0"

#: Old module path -> {a new home: the public names it defined in 0.1.0 that live there}.
MOVED: dict[str, dict[str, list[str]]] = {
    "acpkit.codec": {
        "acpkit.codec": [
            "DecodeError",
            "converter",
            "decode",
            "decode_json",
            "encode",
            "encode_json",
            "wire_name",
        ]
    },
    "acpkit.connection": {
        "acpkit.connection.agent": ["Agent", "AgentConnection"],
        "acpkit.connection.client": ["MAX_EARLY_UPDATES", "Client", "ClientConnection"],
        "acpkit.connection.role": ["is_implemented", "unimplemented"],
        "acpkit.connection.versions": [
            "LATEST_PROTOCOL_VERSION",
            "SUPPORTED_PROTOCOL_VERSIONS",
            "ProtocolVersionError",
            "negotiate_version",
        ],
    },
    "acpkit.endpoints": {
        "acpkit.io": [
            "AgentAddress",
            "AgentExited",
            "AgentNotFoundError",
            "AgentProcess",
            "AgentTransport",
            "connect",
            "process_group_argv",
            "serve",
            "serve_stdio",
            "spawn_agent",
        ],
        "acpkit.io.spawn": ["PIPE_DRAIN_TIMEOUT", "STDERR_LINE_CAP", "STDOUT_EOF_GRACE"],
    },
    "acpkit.framing": {
        "acpkit.framing": [
            "DEFAULT_MAX_LENGTH",
            "IFramedMessageReceiver",
            "IMessageSender",
            "LineTracer",
            "NDJSONProtocol",
            "OVERSIZED_HEAD",
        ]
    },
    "acpkit.framing_headers": {
        "acpkit.framing.content_length": [
            "DEFAULT_MAX_HEADER_LENGTH",
            "ContentLengthProtocol",
            "HeaderError",
            "parse_headers",
        ]
    },
    "acpkit.jsonrpc": {
        "acpkit.jsonrpc": [
            "CANCEL_REQUEST",
            "CancelledResult",
            "DEFAULT_MAX_BUFFERED_OUTPUT",
            "InboundRequest",
            "JSONRPCEngine",
            "JSONRPCProtocol",
            "JUNK_LINE_KEPT",
            "MethodRegistry",
            "NotificationHandler",
            "RequestHandler",
            "RequestId",
            "encode_message",
        ]
    },
    "acpkit.process_groups": {
        "acpkit.io.process_groups": [
            "SHUTDOWN_GRACE",
            "ChildGroups",
            "child_groups",
            "group_has_live_members",
            "group_members",
            "kill_group",
        ]
    },
    "acpkit.rpc_cancel": {
        "acpkit.jsonrpc.cancel": [
            "ACP_CANCELLATION",
            "LSP_CANCELLATION",
            "MCP_CANCELLATION",
            "ICancellationPolicy",
            "NotificationCancellation",
        ]
    },
    "acpkit.rpc_classify": {
        "acpkit.jsonrpc.classify": [
            "Event",
            "HugeInt",
            "Invalid",
            "Notification",
            "Request",
            "RequestId",
            "Response",
            "Unparsable",
            "classify",
            "decode_message",
            "encode_message",
            "error_message",
            "is_valid_id",
            "parse_decimal_id",
            "result_message",
        ]
    },
    "acpkit.rpc_content_length": {
        "acpkit.jsonrpc.content_length": ["ContentLengthJSONRPCProtocol"]
    },
    "acpkit.rpc_dispatch": {
        "acpkit.jsonrpc.dispatch": ["CancelledResult", "InboundDispatcher", "InboundRequest"]
    },
    "acpkit.rpc_outgoing": {
        "acpkit.jsonrpc.outgoing": ["FORGOTTEN_IDS", "OutgoingRequest", "OutgoingRequests"]
    },
    "acpkit.trace": {
        "acpkit.trace.recording": [
            "RECEIVED",
            "SENT",
            "TRACE_VARIABLE",
            "TraceFile",
            "Tracer",
            "format_record",
            "format_timestamp",
            "open_trace_file",
            "tracer_from_environment",
        ],
        "acpkit.trace.records": [
            "MalformedTraceLine",
            "TraceRecord",
            "parse_record",
            "pretty_record",
            "read_trace",
        ],
        "acpkit.trace.replay": ["replay"],
        "acpkit.trace.cli": ["main"],
    },
}

#: The old paths left as modules of their own (a package of the same name needs none).
SHIMS = sorted(
    old
    for old in MOVED
    if (spec := importlib.util.find_spec(old)) is not None
    and spec.submodule_search_locations is None
)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_path_gives_the_same_objects(old: str) -> None:
    """Each 0.1.0 module path imports, and each name of its 0.1.0 ``__all__`` is the
    object defined at its new home."""
    old_module = importlib.import_module(old)
    for new, names in MOVED[old].items():
        new_module = importlib.import_module(new)
        for name in names:
            assert getattr(old_module, name) is getattr(new_module, name), (old, name)


@pytest.mark.parametrize("old", SHIMS)
def test_old_module_says_where_it_moved_and_until_when(old: str) -> None:
    """A module left at an old path names the new module and the release that drops it."""
    doc = importlib.import_module(old).__doc__ or ""
    assert any(f":mod:`{new}`" in doc for new in MOVED[old]), doc
    assert UNTIL in doc, doc
