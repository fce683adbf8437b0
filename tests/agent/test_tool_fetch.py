"""Tests for the ``fetch_content`` tool against a real loopback twisted.web server."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from treq.client import HTTPClient
from twisted.internet import reactor
from twisted.internet.address import IPv4Address
from twisted.internet.defer import CancelledError, Deferred, DeferredList, maybeDeferred
from twisted.internet.interfaces import IListeningPort
from twisted.trial.unittest import SynchronousTestCase, TestCase
from twisted.web.client import Agent
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site
from twisted.web.util import Redirect

from acpkit_agent.tools import builtin_tools
from acpkit_agent.tools.base import DiskFileAccess, ToolContext, ToolResult
from acpkit_agent.tools.fetch import FetchContentTool, decode_body, is_binary_type
from acpkit_agent.tools.plan import PlanState

BIG = b"0123456789abcdef" * (128 * 1024)  # 2 MiB


def temp_dir(case: SynchronousTestCase) -> str:
    """A fresh absolute temporary directory, removed after the test (keeps the tree clean)."""
    path = os.path.realpath(tempfile.mkdtemp(prefix="acpkit-tools-"))
    case.addCleanup(shutil.rmtree, path, True)
    return path


class Fixed(Resource):
    """Answers every GET with a fixed status, content type and body."""

    isLeaf = True

    def __init__(self, body: bytes, content_type: str | None, code: int = 200) -> None:
        super().__init__()
        self.body, self.content_type, self.code = body, content_type, code

    def render_GET(self, request: Request) -> bytes:
        """Send the fixed answer."""
        request.setResponseCode(self.code)
        if self.content_type is not None:
            request.setHeader(b"content-type", self.content_type.encode())
        return self.body


class Stalled(Resource):
    """Sends ``first`` (if any) then never finishes; records the requests it holds."""

    isLeaf = True

    def __init__(self, first: bytes) -> None:
        super().__init__()
        self.first = first
        self.finished: list[Deferred[None]] = []

    def render_GET(self, request: Request) -> object:
        """Write the first chunk and keep the request open."""
        request.setHeader(b"content-type", b"text/plain")
        self.finished.append(request.notifyFinish())
        if self.first:
            request.write(self.first)
        return NOT_DONE_YET


def _port_number(port: IListeningPort) -> int:
    """The TCP port a listening port is bound to."""
    host = port.getHost()
    assert isinstance(host, IPv4Address)
    return host.port


class TrackingSite(Site):
    """A Site that remembers its connections so tests can wait until they are closed."""

    def __init__(self, resource: Resource) -> None:
        super().__init__(resource, timeout=None)
        self.lost: list[Deferred[None]] = []
        self.transports: list[Any] = []

    def buildProtocol(self, addr: Any) -> Any:
        """Wrap connectionLost to fire a Deferred."""
        protocol = super().buildProtocol(addr)
        lost: Deferred[None] = Deferred()
        original_lost, original_made = protocol.connectionLost, protocol.makeConnection

        def connection_lost(reason: Any) -> None:
            original_lost(reason)
            lost.callback(None)

        def make_connection(transport: Any) -> None:
            self.transports.append(transport)
            original_made(transport)

        protocol.connectionLost = connection_lost
        protocol.makeConnection = make_connection
        self.lost.append(lost)
        return protocol


class ObservedClient:
    """A real treq HTTPClient whose responses are announced one reactor turn later."""

    def __init__(self) -> None:
        self.client = HTTPClient(Agent(reactor))
        self.responses: Deferred[None] = Deferred()

    def get(self, url: str, **kwargs: Any) -> Deferred[Any]:
        """GET with treq, then fire ``responses`` once the tool has taken the response."""

        def seen(response: Any) -> Any:
            reactor.callLater(0, self.responses.callback, None)
            return response

        return self.client.get(url, **kwargs).addCallback(seen)


class FetchDescriptionTests(SynchronousTestCase):
    """Metadata and helpers."""

    def test_metadata(self) -> None:
        """fetch_content is a `fetch` tool that asks permission only when saving to a file."""
        tool = builtin_tools()["fetch_content"]
        self.assertEqual(tool.kind, "fetch")
        self.assertEqual(tool.title({"url": "https://x.org/"}), "fetch_content: https://x.org/")
        self.assertFalse(tool.needs_permission({"url": "https://x.org/"}))
        self.assertTrue(tool.needs_permission({"url": "https://x.org/", "output": "a.html"}))
        self.assertEqual(tool.locations({"url": "u", "output": "a.html"}, "/w"), ["/w/a.html"])
        self.assertEqual(tool.locations({"url": "u"}, "/w"), [])

    def test_decode_body(self) -> None:
        """Bodies decode with their charset; unknown or absent charsets fall back to UTF-8."""
        self.assertEqual(decode_body("é".encode("latin-1"), "ISO-8859-1"), "é")
        self.assertEqual(decode_body("é".encode(), None), "é")
        self.assertEqual(decode_body("é".encode(), "no-such-charset"), "é")
        self.assertEqual(decode_body(b"\xff", "utf-8"), "\ufffd")

    def test_binary_types(self) -> None:
        """Images and octet streams are binary; text, JSON and unknown types are not."""
        self.assertTrue(is_binary_type("image/png"))
        self.assertTrue(is_binary_type("application/octet-stream"))
        self.assertFalse(is_binary_type("application/json"))
        self.assertFalse(is_binary_type(""))


class FetchArgumentTests(SynchronousTestCase):
    """Bad arguments fail before any request."""

    def fetch(self, **args: Any) -> ToolResult:
        """Run fetch_content with ``args`` (no reactor needed: nothing may be requested)."""
        ctx = ToolContext("/w", DiskFileAccess(), None, PlanState(), lambda e: None)
        return self.successResultOf(FetchContentTool().run(ctx, args))

    def test_bad_urls(self) -> None:
        """Missing, empty, non-HTTP and host-less URLs are refused clearly."""
        self.assertEqual(
            self.fetch(),
            ToolResult("fetch_content: missing required argument 'url' (a string)", True),
        )
        self.assertEqual(self.fetch(url=" ").output, "fetch_content: argument 'url' is empty")
        self.assertEqual(
            self.fetch(url="ftp://x.org/f").output,
            "fetch_content: unsupported URL 'ftp://x.org/f': use an http:// or https:// URL",
        )
        self.assertEqual(
            self.fetch(url="http:///p").output,
            "fetch_content: invalid URL 'http:///p': no host name",
        )
        self.assertTrue(self.fetch(url="https://x.org", output=5).failed)


class FetchServerTests(TestCase):
    """Requests to a loopback twisted.web server."""

    timeout = 20

    def setUp(self) -> None:
        root = Resource()
        root.putChild(
            b"latin", Fixed("Grüße, café".encode("latin-1"), "text/plain; charset=ISO-8859-1")
        )
        root.putChild(b"plain", Fixed("naïve ✓".encode(), "text/html"))
        root.putChild(b"missing", Fixed(b"not here", "text/plain", 404))
        root.putChild(b"broken", Fixed(b"oops", "text/plain", 500))
        root.putChild(b"big", Fixed(BIG, "text/plain"))
        root.putChild(b"png", Fixed(b"\x89PNG\r\n\x1a\n" + bytes(100), "image/png"))
        root.putChild(b"empty", Fixed(b"", "text/plain"))
        root.putChild(b"moved", Redirect(b"/latin"))
        self.stalled = Stalled(b"first chunk\n")
        self.hanging = Stalled(b"")
        root.putChild(b"stalled", self.stalled)
        root.putChild(b"hang", self.hanging)
        self.site = TrackingSite(root)
        # Twisted annotates listenTCP for ServerFactory[a protocol with .factory]; Site's
        # HTTPChannel is one, but its stubs do not say so.
        self.port = reactor.listenTCP(0, self.site, interface="127.0.0.1")  # type: ignore[arg-type]
        self.base = f"http://127.0.0.1:{_port_number(self.port)}"
        self.cwd = temp_dir(self)
        self.ctx = ToolContext(self.cwd, DiskFileAccess(), reactor, PlanState(), lambda e: None)

    async def tearDown(self) -> None:  # type: ignore[override]  # trial awaits it
        """Close the server and wait until every server-side connection is gone."""
        for transport in self.site.transports:
            transport.abortConnection()
        await DeferredList(self.site.lost)
        await maybeDeferred(self.port.stopListening)

    def fetch(self, tool: FetchContentTool | None = None, **args: Any) -> Deferred[ToolResult]:
        """Run fetch_content on the loopback server."""
        return (tool or FetchContentTool()).run(self.ctx, args)

    async def test_charset_decoding(self) -> None:
        """The body is decoded with the Content-Type charset."""
        result = await self.fetch(url=f"{self.base}/latin")
        self.assertEqual(result, ToolResult("Grüße, café"))

    async def test_default_utf8(self) -> None:
        """Without a charset, UTF-8 is assumed."""
        result = await self.fetch(url=f"{self.base}/plain")
        self.assertEqual(result.output, "naïve ✓")

    async def test_redirect_followed(self) -> None:
        """Redirects are followed."""
        result = await self.fetch(url=f"{self.base}/moved")
        self.assertEqual(result.output, "Grüße, café")

    async def test_http_errors(self) -> None:
        """HTTP error statuses are failed results with a one-line explanation."""
        result = await self.fetch(url=f"{self.base}/missing")
        self.assertEqual(
            result, ToolResult(f"fetch_content: HTTP 404 Not Found for {self.base}/missing", True)
        )
        result = await self.fetch(url=f"{self.base}/broken")
        self.assertEqual(
            result.output, f"fetch_content: HTTP 500 Internal Server Error for {self.base}/broken"
        )

    async def test_connection_refused(self) -> None:
        """A refused connection is a failed result saying so."""
        closed = reactor.listenTCP(0, self.site, interface="127.0.0.1")  # type: ignore[arg-type]
        url = f"http://127.0.0.1:{_port_number(closed)}/"
        await maybeDeferred(closed.stopListening)
        result = await self.fetch(url=url)
        self.assertTrue(result.failed)
        self.assertTrue(result.output.startswith(f"fetch_content: cannot fetch {url}: "))
        self.assertIn("refused", result.output.lower())
        self.assertNotIn("\n", result.output)

    async def test_size_cap(self) -> None:
        """A body over the cap is cut there, with a marker, and the download is stopped."""
        result = await self.fetch(url=f"{self.base}/big")
        text, marker = result.output.rsplit("\n", 1)
        self.assertEqual(text.encode(), BIG[: 1024 * 1024])
        self.assertEqual(marker, "[… truncated: only the first 1048576 bytes were downloaded …]")
        self.assertFalse(result.failed)

    async def test_binary_not_shown(self) -> None:
        """Binary content is described, not dumped."""
        result = await self.fetch(url=f"{self.base}/png")
        self.assertEqual(
            result.output, f"[{self.base}/png is binary content (image/png, 108 bytes); not shown]"
        )

    async def test_empty_body(self) -> None:
        """An empty body says so."""
        result = await self.fetch(url=f"{self.base}/empty")
        self.assertEqual(result.output, f"[{self.base}/empty returned an empty body (HTTP 200)]")

    async def test_save_to_output(self) -> None:
        """With `output`, the decoded text is saved (relative to the cwd) and not returned."""
        result = await self.fetch(url=f"{self.base}/latin", output="pages/latin.txt")
        path = f"{self.cwd}/pages/latin.txt"
        self.assertEqual(result.output, f"saved {self.base}/latin to {path} (11 bytes, text/plain)")
        with open(path, encoding="utf-8") as stream:
            self.assertEqual(stream.read(), "Grüße, café")

    async def test_save_too_big(self) -> None:
        """A body over the save cap is not saved at all."""
        tool = FetchContentTool(max_save_bytes=1000)
        result = await self.fetch(tool, url=f"{self.base}/big", output="big.txt")
        self.assertEqual(
            result,
            ToolResult(
                f"fetch_content: {self.base}/big is larger than 1000 bytes; nothing was saved "
                f"to {self.cwd}/big.txt",
                True,
            ),
        )
        self.assertFalse(os.path.exists(f"{self.cwd}/big.txt"))

    async def test_save_binary_refused(self) -> None:
        """Binary content cannot be saved through the text file interface."""
        result = await self.fetch(url=f"{self.base}/png", output="x.png")
        self.assertTrue(result.failed)
        self.assertIn("binary content (image/png)", result.output)
        self.assertFalse(os.path.exists(f"{self.cwd}/x.png"))

    async def test_save_error(self) -> None:
        """A save error is a failed result."""
        os.makedirs(f"{self.cwd}/dir")
        result = await self.fetch(url=f"{self.base}/latin", output="dir")
        self.assertEqual(
            result.output, f"fetch_content: cannot save to {self.cwd}/dir: Is a directory"
        )

    async def test_timeout_waiting_for_headers(self) -> None:
        """A server that never answers gives a timeout result and the request is aborted."""
        result = await self.fetch(FetchContentTool(timeout=0.3), url=f"{self.base}/hang")
        self.assertEqual(
            result,
            ToolResult(
                f"fetch_content: no complete answer from {self.base}/hang within 0.3 s", True
            ),
        )
        self.assertTrue(await _aborted(self.hanging.finished[0]))

    async def test_timeout_mid_body(self) -> None:
        """A body that never ends gives a timeout result and the download is aborted."""
        result = await self.fetch(FetchContentTool(timeout=0.3), url=f"{self.base}/stalled")
        self.assertTrue(result.failed)
        self.assertIn("within 0.3 s", result.output)
        self.assertTrue(await _aborted(self.stalled.finished[0]))

    async def test_cancel_mid_download(self) -> None:
        """Cancelling mid-download fails with CancelledError and closes the connection."""
        client = ObservedClient()
        self.ctx.http_agent = client
        running = self.fetch(url=f"{self.base}/stalled")
        await client.responses
        self.assertFalse(running.called)
        running.cancel()
        self.failureResultOf(running, CancelledError)
        self.assertTrue(await _aborted(self.stalled.finished[0]))

    async def test_cancel_before_answer(self) -> None:
        """Cancelling while waiting for the answer aborts the request."""
        running = self.fetch(url=f"{self.base}/hang")
        while not self.hanging.finished:
            await _next_turn()
        running.cancel()
        self.failureResultOf(running, CancelledError)
        self.assertTrue(await _aborted(self.hanging.finished[0]))


async def _aborted(finished: Deferred[None]) -> bool:
    """Whether a server-side request ended by losing its connection.

    Waits one reactor turn first: the tool's result may be delivered from inside the client
    connection's teardown, where the server side has not been told yet.
    """
    await _next_turn()
    return await finished.addCallbacks(lambda ignored: False, lambda failure: True)


def _next_turn() -> Deferred[None]:
    """A Deferred fired on the next reactor iteration."""
    turn: Deferred[None] = Deferred()
    reactor.callLater(0, turn.callback, None)
    return turn
