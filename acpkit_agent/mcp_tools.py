"""
An MCP server's tool as one of bob's tools (:class:`McpTool`), and how its results become
what the model reads and what the client shows (:func:`convert_result`).

=====================  ===============================================================
aspect                 behaviour
=====================  ===============================================================
name                   ``<server>__<tool>`` (:func:`assign_names`): model APIs accept
                       ``^[a-zA-Z0-9_-]{1,64}$``; a name that had to change (another
                       character, longer than 64, already taken) keeps a readable
                       prefix and ends in ``_`` + 8 hex digits of a hash of the server
                       and tool names: the same servers give the same names every run
kind                   ``read`` when the tool's ``annotations.readOnlyHint`` is true,
                       else ``execute`` (the seed's rule for unknown kinds)
description, schema    the tool's ``description`` and ``inputSchema`` as the server
                       lists them (``type: object`` added when missing)
permission             asks when ``yolo = false`` (read-only or not, as the seed's
                       table says), and always when the server has
                       ``permissions = "ask"`` (``always_asks``); answers are
                       remembered per tool name
text                   the model reads the text blocks, joined by newlines
image, audio           the client sees the ACP ``image`` / ``audio`` content; the
                       model reads ``[image: image/png, 1234 bytes]``
resource, link         the client sees ACP ``resource`` / ``resource_link`` content;
                       the model reads a text resource's text after ``[resource URI]``,
                       ``[resource URI: TYPE, N bytes]`` for a binary one and
                       ``[resource link: NAME <URI>]`` for a link
structuredContent      the model reads it as JSON when the result has no text block
``isError``            a failed tool call; the model reads
                       ``[<name> failed: the MCP server reported an error]`` first
size                   the model reads at most :data:`MAX_MODEL_CHARS` characters:
                       head and tail around ``[… N characters omitted …]``; a text
                       shown to the client is cut the same way, and a media payload
                       over :data:`MAX_CLIENT_MEDIA` bytes of base64 is shown as its
                       placeholder
progress               each ``notifications/progress`` becomes a progress line of the
                       running tool call (``message (3/10)``)
cancel                 cancelling the turn cancels the call (the MCP client sends
                       ``notifications/cancelled``); the call fails at once
timeout                a call with no answer and no progress for the server's
                       ``timeout`` seconds is cancelled the same way and fails with
                       ``[<name>: no answer from the MCP server <server> in N s]``
server gone            ``[<name>: the MCP server <server> is not running (<why>)]``
=====================  ===============================================================
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs
from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.python.failure import Failure

from acpkit import schema
from acpkit.errors import RPCError, clip
from acpkit_agent.tools.base import ToolContext, ToolResult, cancellable

if TYPE_CHECKING:
    # the MCP models load with the first MCP server, not at bob's start
    from acpkit.mcp import schema as mcp

__all__ = [
    "MAX_CLIENT_MEDIA",
    "MAX_MODEL_CHARS",
    "MAX_NAME_LENGTH",
    "McpCaller",
    "McpTool",
    "assign_names",
    "convert_result",
    "tool_kind_of",
]

MAX_NAME_LENGTH = 64
"""The longest tool name model APIs accept (OpenAI, Anthropic: ``^[a-zA-Z0-9_-]{1,64}$``)."""
MAX_MODEL_CHARS = 64 * 1024
"""The most characters of one MCP result the model reads (head and tail are kept)."""
MAX_CLIENT_MEDIA = 8 * 1024 * 1024
"""The largest image, audio or blob payload (base64 characters) passed on to the client."""

_INVALID = re.compile(r"[^A-Za-z0-9_-]")
_SUFFIX = 9  # "_" + 8 hex digits
_TITLE_ARGS = 120


class McpCaller(Protocol):
    """The running server a tool calls through (:class:`acpkit_agent.mcp_servers` has it)."""

    name: str
    """The server's name (its ``[mcp.servers.<name>]`` key, or the client's name for it)."""

    def unavailable(self) -> str | None:
        """Why calls cannot be made now (the server failed or stopped), or None."""
        ...

    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any],
        progress: Callable[[float, float | None, str | None], None],
    ) -> Deferred[mcp.CallToolResult]:
        """``tools/call``; cancelling the Deferred cancels the request on the server."""
        ...


# -- names ---------------------------------------------------------------------------


def _hashed(base: str, origin: str) -> str:
    digest = hashlib.sha256(origin.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{base[: MAX_NAME_LENGTH - _SUFFIX]}_{digest}"


def assign_names(pairs: Iterable[tuple[str, str]], taken: Iterable[str] = ()) -> list[str]:
    """
    The model-facing names of ``(server, tool)`` pairs, in order, unique and distinct from
    ``taken`` (the built-in tools).

    ``<server>__<tool>`` when that is already valid, at most 64 characters and free; else
    the same with each other character replaced by ``_``, cut to 55 characters, then ``_``
    and 8 hex digits of the SHA-256 of ``server NUL tool`` (with ``NUL n`` appended, n = 1,
    2, …, in the unlikely case that name is taken too).  Deterministic: the same pairs in
    the same order give the same names.
    """
    used = set(taken)
    names: list[str] = []
    for server, tool in pairs:
        plain = f"{server}__{tool}"
        name = plain
        if _INVALID.search(plain) or len(plain) > MAX_NAME_LENGTH or plain in used or not tool:
            base = _INVALID.sub("_", plain)
            origin = f"{server}\0{tool}"
            name = _hashed(base, origin)
            attempt = 0
            while name in used:
                attempt += 1
                name = _hashed(base, f"{origin}\0{attempt}")
        used.add(name)
        names.append(name)
    return names


def tool_kind_of(tool: mcp.Tool) -> str:
    """``read`` for a tool annotated read-only, else ``execute`` (the seed's unknown kind)."""
    annotations = tool.annotations
    if annotations is not None and annotations.read_only_hint is True:
        return "read"
    return "execute"


# -- results -------------------------------------------------------------------------


def _cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters: head and tail around an omission marker."""
    if len(text) <= limit:
        return text
    head = text[: limit // 2]
    tail = text[len(text) - (limit - limit // 2) :]
    omitted = len(text) - len(head) - len(tail)
    return (
        f"{head}\n[… {omitted} characters omitted: the result was longer than "
        f"{limit} characters …]\n{tail}"
    )


def _decoded_size(data: str) -> int | None:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return None


def _media_placeholder(what: str, mime_type: str | None, data: str) -> str:
    size = _decoded_size(data)
    parts = [mime_type or "unknown type"]
    parts.append(f"{size} bytes" if size is not None else "undecodable base64")
    return f"[{what}: {', '.join(parts)}]"


def _text_content(text: str) -> schema.ContentToolCallContent:
    return schema.ContentToolCallContent(content=schema.TextContentBlock(text=text))


def _block(content: Any) -> schema.ContentToolCallContent:
    return schema.ContentToolCallContent(content=content)


def convert_result(
    result: mcp.CallToolResult, tool_name: str, *, limit: int = MAX_MODEL_CHARS
) -> ToolResult:
    """
    What the model reads (``output``) and what the client sees (``content``) of one
    ``tools/call`` result; ``isError`` makes it a failed result.  See the module table.
    """
    from acpkit.mcp import schema as mcp

    model: list[str] = []
    client: list[Any] = []
    has_text = False
    rich = False
    for block in result.content:
        if isinstance(block, mcp.TextContent):
            has_text = True
            model.append(block.text)
            client.append(_text_content(_cut(block.text, limit)))
        elif isinstance(block, mcp.ImageContent | mcp.AudioContent):
            rich = True
            what = "image" if isinstance(block, mcp.ImageContent) else "audio"
            placeholder = _media_placeholder(what, block.mime_type, block.data)
            model.append(placeholder)
            if len(block.data) > MAX_CLIENT_MEDIA:
                client.append(_text_content(f"{placeholder} (too large to show)"))
            elif what == "image":
                client.append(
                    _block(schema.ImageContentBlock(data=block.data, mime_type=block.mime_type))
                )
            else:
                client.append(
                    _block(schema.AudioContentBlock(data=block.data, mime_type=block.mime_type))
                )
        elif isinstance(block, mcp.ResourceLink):
            rich = True
            about = f" — {block.description}" if block.description else ""
            model.append(f"[resource link: {block.name} <{block.uri}>{about}]")
            client.append(
                _block(
                    schema.ResourceLinkContentBlock(
                        name=block.name,
                        uri=block.uri,
                        title=block.title,
                        description=block.description,
                        mime_type=block.mime_type,
                        size=block.size,
                    )
                )
            )
        elif isinstance(block, mcp.EmbeddedResource):
            rich = True
            model_text, shown = _resource(block.resource, limit)
            model.append(model_text)
            client.append(shown)
        else:
            tag = getattr(block, "tag", None)
            model.append(f"[content of unsupported type {tag!r}]")
            client.append(_text_content(f"[content of unsupported type {tag!r}]"))
    if not has_text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
        model.append(text)
        client.append(_text_content(_cut(text, limit)))
    failed = bool(result.is_error)
    body = "\n".join(model)
    if failed:
        body = f"[{tool_name} failed: the MCP server reported an error]\n{body}".rstrip("\n")
    elif not model:
        body = "[no output]"
    output = _cut(body, limit)
    if failed and client:
        client.insert(0, _text_content(f"[{tool_name} failed: the MCP server reported an error]"))
    # Plain text results are shown as the output itself (cut the same way).
    content = tuple(client) if rich else ()
    return ToolResult(output=output, failed=failed, content=content)


def _resource(
    resource: mcp.TextResourceContents | mcp.BlobResourceContents, limit: int
) -> tuple[str, schema.ContentToolCallContent]:
    from acpkit.mcp import schema as mcp

    if isinstance(resource, mcp.TextResourceContents):
        text = _cut(resource.text, limit)
        shown = schema.EmbeddedResourceContentBlock(
            resource=schema.TextResourceContents(
                uri=resource.uri, text=text, mime_type=resource.mime_type
            )
        )
        return f"[resource {resource.uri}]\n{resource.text}", _block(shown)
    placeholder = _media_placeholder(f"resource {resource.uri}", resource.mime_type, resource.blob)
    if len(resource.blob) > MAX_CLIENT_MEDIA:
        return placeholder, _text_content(f"{placeholder} (too large to show)")
    blob = schema.EmbeddedResourceContentBlock(
        resource=schema.BlobResourceContents(
            uri=resource.uri, blob=resource.blob, mime_type=resource.mime_type
        )
    )
    return placeholder, _block(blob)


def progress_text(progress: float, total: float | None, message: str | None) -> str:
    """A progress notification as one line: ``message (3/10)``, ``3/10``, ``message (3)``."""

    def number(value: float) -> str:
        return str(int(value)) if float(value).is_integer() else f"{value:g}"

    count = number(progress) if total is None else f"{number(progress)}/{number(total)}"
    return f"{message} ({count})" if message else count


# -- the tool ------------------------------------------------------------------------


def _parameters(input_schema: Mapping[str, Any]) -> dict[str, Any]:
    parameters = dict(input_schema)
    parameters.setdefault("type", "object")
    if parameters.get("type") == "object":
        parameters.setdefault("properties", {})
    return parameters


def _describe_error(failure: Failure) -> str:
    error = failure.value
    if isinstance(error, RPCError):
        return f"MCP error {error.code}: {clip(error.message)}"
    text = " ".join(str(error).split()) or type(error).__name__
    return clip(text)


@attrs.define
class McpTool:
    """One tool of one MCP server, offered to the model under :attr:`name`."""

    name: str
    """The model-facing name (:func:`assign_names`)."""
    server: McpCaller
    tool: mcp.Tool
    """The tool as the server listed it."""
    always_asks: bool = False
    """The server has ``permissions = "ask"``: ask even under ``yolo``."""
    timeout: float = 300.0
    """Seconds without an answer or a progress notification before the call is cancelled."""
    limit: int = MAX_MODEL_CHARS

    kind: str = attrs.field(init=False)
    """``read`` or ``execute`` (:func:`tool_kind_of`)."""
    description: str = attrs.field(init=False)
    """The server's description of the tool (a default naming it when it has none)."""
    parameters: Mapping[str, Any] = attrs.field(init=False)
    """The tool's ``inputSchema`` (``type: object`` added when missing)."""

    def __attrs_post_init__(self) -> None:
        self.kind = tool_kind_of(self.tool)
        text = self.tool.description or ""
        if not text.strip():
            text = f"The {self.tool.name} tool of the MCP server {self.server.name}."
        self.description = text
        self.parameters = _parameters(self.tool.input_schema)

    def title(self, args: Mapping[str, Any]) -> str:
        """``<server>: <tool> {"arg": …}`` (the arguments as compact JSON, cut)."""
        head = f"{self.server.name}: {self.tool.name}"
        if not args:
            return head
        try:
            shown = json.dumps(dict(args), ensure_ascii=False, separators=(", ", ": "))
        except (TypeError, ValueError):
            return head
        if len(shown) > _TITLE_ARGS:
            shown = shown[: _TITLE_ARGS - 1] + "…"
        return f"{head} {shown}"

    def locations(self, args: Mapping[str, Any], cwd: str) -> list[str]:
        """MCP tools name no local files."""
        return []

    def needs_permission(self, args: Mapping[str, Any]) -> bool:
        """Every MCP call asks when ``yolo = false`` (the seed's table)."""
        return True

    def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Deferred[ToolResult]:
        """Call the tool; failures are failed results, cancelling cancels the call."""
        why = self.server.unavailable()
        if why is not None:
            return succeed(_not_running(self.name, self.server.name, why))
        return _Call(self, ctx, args).start()


def _not_running(name: str, server: str, why: str) -> ToolResult:
    return ToolResult(
        output=f"[{name}: the MCP server {server} is not running ({why})]", failed=True
    )


class _Call:
    """One running ``tools/call`` with its inactivity timer."""

    def __init__(self, tool: McpTool, ctx: ToolContext, args: Mapping[str, Any]) -> None:
        self.tool = tool
        self.ctx = ctx
        self.timed_out = False
        self.timer: Any = None
        self.pending: Deferred[mcp.CallToolResult] | None = None
        self.args = dict(args)

    def start(self) -> Deferred[ToolResult]:
        tool = self.tool
        self.pending = tool.server.call_tool(tool.tool.name, self.args, self.progress)
        self._arm()
        work: Deferred[ToolResult] = self.pending.addBoth(self.done)
        return cancellable(work)

    def _arm(self) -> None:
        if self.timer is not None and self.timer.active():
            self.timer.cancel()
        self.timer = self.ctx.reactor.callLater(self.tool.timeout, self.expire)

    def progress(self, progress: float, total: float | None, message: str | None) -> None:
        if self.pending is None or self.pending.called:
            return
        self._arm()
        if self.ctx.progress is not None:
            self.ctx.progress(progress_text(progress, total, message))

    def expire(self) -> None:
        self.timer = None
        if self.pending is not None and not self.pending.called:
            self.timed_out = True
            self.pending.cancel()

    def done(self, outcome: mcp.CallToolResult | Failure) -> ToolResult | Failure:
        if self.timer is not None and self.timer.active():
            self.timer.cancel()
        self.timer = None
        tool = self.tool
        if not isinstance(outcome, Failure):
            return convert_result(outcome, tool.name, limit=tool.limit)
        if self.timed_out:
            return ToolResult(
                output=(
                    f"[{tool.name}: no answer from the MCP server {tool.server.name} in "
                    f"{tool.timeout:g} s: the call was cancelled]"
                ),
                failed=True,
            )
        if outcome.check(CancelledError):
            return outcome
        why = tool.server.unavailable()
        if why is not None:
            return _not_running(tool.name, tool.server.name, why)
        return ToolResult(output=f"[{tool.name} failed: {_describe_error(outcome)}]", failed=True)


def tools_of(
    servers: Sequence[tuple[McpCaller, Sequence[mcp.Tool], bool, float]],
    taken: Iterable[str] = (),
) -> dict[str, McpTool]:
    """
    Bob's tools for ``(server, listed tools, always_asks, timeout)`` entries, named in
    order by :func:`assign_names` (``taken``: names already in use).
    """
    flat = [
        (server, tool, asks, timeout) for server, tools, asks, timeout in servers for tool in tools
    ]
    names = assign_names(((s.name, t.name) for s, t, _, _ in flat), taken)
    return {
        name: McpTool(name=name, server=server, tool=tool, always_asks=asks, timeout=timeout)
        for name, (server, tool, asks, timeout) in zip(names, flat, strict=True)
    }
