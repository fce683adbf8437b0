"""``acpkit-client``: the reference client's command line.

``acpkit-client ask [-v] [--agent NAME] [--cwd DIR] [--allow|--deny] [--handshake-timeout S]
[--timeout S] PROMPT`` runs one prompt on one agent of the project's agents file and
streams the whole answer to stdout (no size cap: it writes to a pipe, not a window); tool
calls and the plan go to stderr.  Without a sub-command, ``acpkit-client [--cwd DIR]
[--log FILE]`` opens the terminal UI (``acpkit_client.tui``).  ``--version`` prints the
version.

Time limits: the agent must answer ``initialize`` and ``session/new`` within
``--handshake-timeout`` seconds (default 30); ``--timeout`` limits the turn (from
``session/prompt`` to its answer; default: no limit).  Either one passing prints one line
naming what was not answered, stops the agent and exits 124.

Exit status of ``ask``:

====  =========================================================================
0     the turn ended with ``end_turn``
1     the agent failed: could not start, refused the handshake, answered the prompt
      with an error, or died
2     usage error (bad options)
3     configuration error: an agents file was refused, or no such agent
4     the agent refused (``stopReason: "refusal"``)
5     the turn stopped early (``max_tokens`` or ``max_turn_requests``)
6     the agent ended the turn ``cancelled`` by itself (nobody asked it to)
124   timed out: no answer to ``initialize`` or ``session/new`` within
      ``--handshake-timeout``, or the turn did not end within ``--timeout``
130   interrupted by the user's Ctrl-C (``SIGINT``)
143   terminated by ``SIGTERM``
====  =========================================================================

Permissions: when stdin is a terminal the user is asked (by number), shown the tool call
as the agent announced it; otherwise ``--allow`` chooses the agent's ``allow_once``
option and ``--deny`` (the default) a reject option.  Form elicitations are asked on the
terminal (``elicitation.form`` is announced then), field by field; without a terminal
nothing is announced and an elicitation is declined.

Signals (:mod:`acpkit_client.interrupts`): the first ``SIGINT`` or ``SIGTERM`` sends
``session/cancel`` and gives the agent ``--cancel-timeout`` seconds (default 5) to end
the turn, then stops the agent: stdin closed, then its whole process group ended.  A
second signal skips the waiting and kills the process group at once.  Either way the
agent and everything it started are gone when ``ask`` exits, with 130 or 143 (after the
first signal, whatever the turn's end).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import IO, Any

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.interfaces import IReadDescriptor
from twisted.logger import (
    FilteringLogObserver,
    LogLevel,
    LogLevelFilterPredicate,
    globalLogBeginner,
    textFileLogObserver,
)
from twisted.python.failure import Failure
from zope.interface import implementer

from acpkit import __version__, schema
from acpkit_client.agents import DEFAULT_HANDSHAKE_TIMEOUT, AgentStartError, HandshakeTimeout
from acpkit_client.config import AgentEntry, AgentsConfig, load_agents
from acpkit_client.conversation import Entry, EntryKind, MessageEntry, PlanEntry, ToolCallEntry
from acpkit_client.forms import EMPTY, FormField, describe_field, parse_answer
from acpkit_client.interfaces import IConversationObserver, IFormPrompt, IPermissionPrompt
from acpkit_client.interrupts import DEFAULT_CANCEL_WAIT, AskInterrupts
from acpkit_client.options import seconds
from acpkit_client.permissions import (
    PermissionPolicy,
    PolicyPermissionPrompt,
    describe_tool_call,
)
from acpkit_client.project_files import list_project_files
from acpkit_client.prompt import unlisted_mentions, unresolved_mentions
from acpkit_client.session import AgentWindow, TurnError
from acpkit_client.startup import startup_imports

__all__ = [
    "EXIT_AGENT_FAILED",
    "EXIT_CANCELLED",
    "EXIT_CANCELLED_BY_AGENT",
    "EXIT_CONFIG",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_STOPPED_EARLY",
    "EXIT_TERMINATED",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "AskPrinter",
    "TerminalPermissionPrompt",
    "ask",
    "main",
    "permission_prompt_text",
]

EXIT_OK = 0
EXIT_AGENT_FAILED = 1
EXIT_USAGE = 2
EXIT_CONFIG = 3
EXIT_REFUSED = 4
EXIT_STOPPED_EARLY = 5
EXIT_CANCELLED_BY_AGENT = 6
EXIT_TIMEOUT = 124
#: 128 + SIGINT: the user's Ctrl-C.
EXIT_CANCELLED = 130
#: 128 + SIGTERM.
EXIT_TERMINATED = 143


#: The sub-commands; anything else starts the terminal UI.
_SUBCOMMANDS = ("ask",)


_DESCRIPTION = """\
The acpkit reference ACP client.

Without a sub-command it opens the terminal UI in the project:
  acpkit-client [--cwd DIR] [--log FILE] [--handshake-timeout SECONDS]
(--cwd: the project root, default here; --log: also write the log to FILE;
--handshake-timeout: how long an agent has to open its session, default 30).
With "ask" it runs one prompt and prints the answer (acpkit-client ask --help).
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="acpkit-client",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    parser.add_argument("--version", action="version", version=f"%(prog)s (acpkit) {__version__}")
    commands = parser.add_subparsers(dest="command")
    ask_parser = commands.add_parser("ask", help="run one prompt on an agent and print the answer")
    ask_parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,
        help="log to stderr (also accepted before ask)",
    )
    which = ask_parser.add_mutually_exclusive_group()
    which.add_argument("--agent", help="the agent's name (default: the first one)")
    which.add_argument(
        "--url",
        help="a remote agent's URL (http(s):// or ws(s)://) instead of one of the agents file; "
        "a loopback URL's bearer token is read from the file the local agent wrote",
    )
    ask_parser.add_argument(
        "--token-file",
        metavar="FILE",
        help="with --url: a file whose first line is the bearer token to send",
    )
    ask_parser.add_argument("--cwd", help="the project root (default: the current directory)")
    policy = ask_parser.add_mutually_exclusive_group()
    policy.add_argument(
        "--allow",
        dest="policy",
        action="store_const",
        const=PermissionPolicy.ALLOW,
        help="without a terminal, allow each tool call once",
    )
    policy.add_argument(
        "--deny",
        dest="policy",
        action="store_const",
        const=PermissionPolicy.REJECT,
        help="without a terminal, reject each tool call (the default)",
    )
    ask_parser.add_argument(
        "--handshake-timeout",
        type=seconds,
        default=DEFAULT_HANDSHAKE_TIMEOUT,
        metavar="SECONDS",
        help="give up (exit 124) when the agent has not answered initialize and "
        f"session/new within this time (default: {DEFAULT_HANDSHAKE_TIMEOUT:g})",
    )
    ask_parser.add_argument(
        "--timeout",
        type=seconds,
        default=None,
        metavar="SECONDS",
        help="give up (exit 124) when the turn has not ended within this time (default: no limit)",
    )
    ask_parser.add_argument(
        "--cancel-timeout",
        type=seconds,
        default=DEFAULT_CANCEL_WAIT,
        metavar="SECONDS",
        help="after Ctrl-C or SIGTERM, how long the agent has to end the cancelled turn "
        f"before it is stopped (default: {DEFAULT_CANCEL_WAIT:g})",
    )
    ask_parser.add_argument(
        "--mentions-as-text",
        action="store_true",
        help="send an @path that names no file of the project as the words typed "
        "(default: refuse, exit 2)",
    )
    ask_parser.add_argument("prompt", help="the prompt; @path mentions attach project files")
    ask_parser.set_defaults(policy=PermissionPolicy.REJECT)
    return parser


# -- printing ------------------------------------------------------------------------


@implementer(IConversationObserver)
class AskPrinter:
    """Streams the agent's answer to ``out``; tool calls and the plan to ``err``."""

    def __init__(self, out: IO[str], err: IO[str]) -> None:
        self.out = out
        self.err = err
        self._written: dict[int, int] = {}
        self._statuses: dict[int, str] = {}
        self._last_char = "\n"
        self._any_answer = False

    def _answer(self, entry: MessageEntry) -> None:
        key = id(entry)
        start = self._written.get(key)
        if start is None:
            start = 0
            if self._any_answer:
                self._write_out("\n" if self._last_char == "\n" else "\n\n")
        delta = entry.body.since(start)
        self._written[key] = entry.body.length
        if delta:
            self._any_answer = True
            self._write_out(delta)

    def _write_out(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()
        self._last_char = text[-1]

    def _tool(self, entry: ToolCallEntry) -> None:
        if self._statuses.get(id(entry)) == entry.status:
            return
        self._statuses[id(entry)] = entry.status
        self.err.write(f"[tool] {entry.heading}\n")
        self.err.flush()

    def _plan(self, entry: PlanEntry) -> None:
        self.err.write("[plan]\n")
        for item in entry.items:
            self.err.write(f"  [{item.status}] {item.content}\n")
        self.err.flush()

    def entry_added(self, entry: Entry) -> None:
        """Show a new entry."""
        self.entry_changed(entry)

    def entry_changed(self, entry: Entry) -> None:
        """Show what changed in an entry."""
        if isinstance(entry, MessageEntry) and entry.kind is EntryKind.AGENT:
            self._answer(entry)
        elif isinstance(entry, ToolCallEntry):
            self._tool(entry)
        elif isinstance(entry, PlanEntry):
            self._plan(entry)

    def commands_changed(self, commands: Any) -> None:
        """Commands are not shown by ``ask``."""

    def usage_changed(self, usage: Any) -> None:
        """Usage is not shown by ``ask``."""

    def turn_changed(self, running: bool) -> None:
        """Nothing to show."""

    def finish(self) -> None:
        """End the answer with a newline."""
        if self._any_answer and self._last_char != "\n":
            self._write_out("\n")


# -- asking on the terminal ------------------------------------------------------------


@implementer(IReadDescriptor)
class _LineReader:
    """Reads lines from a terminal file descriptor through the reactor, one at a time."""

    def __init__(self, reactor: Any, fd: int) -> None:
        self.reactor = reactor
        self.fd = fd
        self._buffer = b""
        self._waiting: Deferred[str | None] | None = None

    def fileno(self) -> int:
        return self.fd

    def logPrefix(self) -> str:
        return "terminal"

    def connectionLost(self, reason: Failure) -> None:
        self._fire(None)

    def doRead(self) -> None:
        try:
            data = os.read(self.fd, 4096)
        except OSError:
            data = b""
        if not data:
            self._fire(None)
            return
        self._buffer += data
        if b"\n" in self._buffer:
            line, _, self._buffer = self._buffer.partition(b"\n")
            self._fire(line.decode("utf-8", errors="replace"))

    def _fire(self, line: str | None) -> None:
        self.reactor.removeReader(self)
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            waiting.callback(line)

    def read_line(self) -> Deferred[str | None]:
        """The next line (without its newline), or None at end of input."""

        def cancel(d: Deferred[str | None]) -> None:
            self.reactor.removeReader(self)
            self._waiting = None

        d: Deferred[str | None] = Deferred(cancel)
        self._waiting = d
        self.reactor.addReader(self)
        return d


#: At most this many lines of a command, diff or content are shown in a terminal prompt.
PROMPT_DETAIL_LINES = 40

#: Labels whose text is shown as an indented block under the label.
_BLOCK_LABELS = ("command", "diff", "content")


def _printable(text: str) -> str:
    """``text`` with control characters (escape sequences...) made visible, tabs and
    newlines kept: what an agent sends cannot rewrite the prompt on the terminal."""
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() or c in "\n\t" else c.encode("unicode_escape").decode("ascii")
        for c in text
    )


def permission_prompt_text(request: schema.RequestPermissionRequest) -> str:
    """
    What ``ask`` shows on the terminal for a permission request: the tool call (title,
    kind, command or input, files, diff or content: at most :data:`PROMPT_DETAIL_LINES`
    lines each) and the agent's options by number.  Pass the request the session
    completed with what the agent announced (``AgentWindow.permission_request``).
    """
    described = describe_tool_call(request.tool_call)
    title = dict(described).get("tool", request.tool_call.tool_call_id)
    lines = [f"The agent asks permission: {_printable(title)}"]
    for label, text in described:
        if label == "tool":
            continue
        if label not in _BLOCK_LABELS:
            lines.append(f"  {label}: {_printable(text)}")
            continue
        block = _printable(text).split("\n")
        if len(block) == 1 and label == "command":
            lines.append(f"  command: {block[0]}")
            continue
        lines.append(f"  {label}:")
        if len(block) > PROMPT_DETAIL_LINES:
            rest = len(block) - PROMPT_DETAIL_LINES
            block = [*block[:PROMPT_DETAIL_LINES], f"… {rest} more lines"]
        lines.extend(f"    {line}" for line in block)
    for number, option in enumerate(request.options, 1):
        lines.append(f"  {number}. {_printable(option.name)} ({option.kind})")
    return "\n".join(lines) + "\n"


@implementer(IPermissionPrompt)
class TerminalPermissionPrompt:
    """Asks on the terminal: the agent's options by number; empty or EOF means no answer."""

    def __init__(
        self, reactor: Any, err: IO[str], fd: int = 0, *, reader: _LineReader | None = None
    ) -> None:
        self.err = err
        self.reader = reader if reader is not None else _LineReader(reactor, fd)

    async def choose(self, request: schema.RequestPermissionRequest) -> str | None:
        """Show the request (:func:`permission_prompt_text`) and read the user's choice."""
        self.err.write("\n" + permission_prompt_text(request))
        self.err.write("Choose a number (Enter: reject): ")
        self.err.flush()
        line = await self.reader.read_line()
        if line is None:
            return None
        choice = line.strip()
        if choice.isdigit() and 1 <= int(choice) <= len(request.options):
            return request.options[int(choice) - 1].option_id
        for option in request.options:
            if choice == option.option_id:
                return option.option_id
        return None


@implementer(IFormPrompt)
class TerminalFormPrompt:
    """
    Asks a form elicitation on the terminal, field by field (:mod:`acpkit_client.forms`):
    an empty line takes the default, ``-`` declines the whole form, end of input
    cancels it; an answer that does not fit its field is asked again.
    """

    def __init__(
        self, reactor: Any, err: IO[str], fd: int = 0, *, reader: _LineReader | None = None
    ) -> None:
        self.err = err
        self.reader = reader if reader is not None else _LineReader(reactor, fd)

    async def answer(self, message: str, fields: Sequence[FormField]) -> Any:
        """The answers by field name, or ``"decline"`` or ``"cancel"``."""
        self.err.write(f"\nThe agent asks: {_printable(message)}\n")
        self.err.write("(Enter: the default or nothing; -: decline the form)\n")
        answers: dict[str, Any] = {}
        for field in fields:
            for line in describe_field(field):
                self.err.write(_printable(line) + "\n")
            while True:
                default = "" if field.default is EMPTY else f" [{_printable(str(field.default))}]"
                self.err.write(f"  > {default.strip()} " if default else "  > ")
                self.err.flush()
                typed = await self.reader.read_line()
                if typed is None:
                    return "cancel"
                if typed.strip() == "-":
                    return "decline"
                value, why = parse_answer(field, typed)
                if why is None:
                    break
                self.err.write(f"  {why}\n")
            if value is not EMPTY:
                answers[field.name] = value
        return answers


# -- ask ---------------------------------------------------------------------------


def _url_agent(url: str, token_file: str | None, err: IO[str]) -> AgentEntry | None:
    """``ask --url URL [--token-file FILE]``: the remote agent to ask, or None (said why)."""
    from acpkit.remote.connect import check_remote_url

    try:
        check_remote_url(url)
    except ValueError as e:
        err.write(f"acpkit-client: --url: {e}\n")
        return None
    path = None if token_file is None else os.path.abspath(os.path.expanduser(token_file))
    return AgentEntry(name="remote", url=url, token_file=path, source="<command line>")


def _choose_agent(config: AgentsConfig, name: str | None, err: IO[str]) -> Any:
    for error in config.errors:
        err.write(f"acpkit-client: {error}\n")
    if config.errors:
        return None
    if not config.agents:
        err.write("acpkit-client: no agents are configured\n")
        return None
    if name is None:
        return config.agents[0]
    try:
        return config.find(name)
    except KeyError:
        names = ", ".join(repr(entry.name) for entry in config.agents)
        err.write(f"acpkit-client: no agent is called {name!r} (agents: {names})\n")
        return None


_STOP_CODES = {
    "end_turn": EXIT_OK,
    "refusal": EXIT_REFUSED,
    "cancelled": EXIT_CANCELLED_BY_AGENT,
    "max_tokens": EXIT_STOPPED_EARLY,
    "max_turn_requests": EXIT_STOPPED_EARLY,
}


async def ask(
    reactor: Any,
    options: argparse.Namespace,
    out: IO[str],
    err: IO[str],
    interactive: bool,
    *,
    restore_signals: bool = True,
) -> int:
    """
    Run ``acpkit-client ask``; return the exit status (see the module docstring).
    ``restore_signals=False`` leaves ``SIGINT``/``SIGTERM`` ignored afterwards (the
    process is about to exit) instead of putting the previous handlers back.
    """
    root = os.path.abspath(options.cwd or os.getcwd())
    if not os.path.isdir(root):
        err.write(f"acpkit-client: {root} is not a directory\n")
        return EXIT_CONFIG
    unresolved = unresolved_mentions(options.prompt, root)
    if unresolved and not getattr(options, "mentions_as_text", False):
        names = ", ".join(unresolved)
        err.write(
            f"acpkit-client: no such file in the project ({root}): {names}; not sent "
            "(--mentions-as-text sends them as typed)\n"
        )
        return EXIT_USAGE
    _note_unlisted_mentions(options.prompt, root, err)
    url = getattr(options, "url", None)
    token_file = getattr(options, "token_file", None)
    if token_file is not None and url is None:
        err.write("acpkit-client: --token-file goes with --url\n")
        return EXIT_USAGE
    if url is not None:
        entry = _url_agent(url, token_file, err)
        if entry is None:
            return EXIT_USAGE
    else:
        entry = _choose_agent(load_agents(root), options.agent, err)
    if entry is None:
        return EXIT_CONFIG
    prompt: IPermissionPrompt
    forms: IFormPrompt | None = None
    if interactive:
        reader = _LineReader(reactor, 0)
        prompt = TerminalPermissionPrompt(reactor, err, reader=reader)
        forms = TerminalFormPrompt(reactor, err, reader=reader)
    else:
        prompt = PolicyPermissionPrompt(options.policy)
    window = AgentWindow(
        entry,
        root,
        permission_prompt=prompt,
        form_prompt=forms,
        handshake_timeout=getattr(options, "handshake_timeout", DEFAULT_HANDSHAKE_TIMEOUT),
        text_cap=None,
    )
    printer = AskPrinter(out, err)
    window.conversation.subscribe(printer)
    signals = AskInterrupts(
        reactor, window, err, getattr(options, "cancel_timeout", DEFAULT_CANCEL_WAIT)
    )
    turn_limit: float | None = getattr(options, "timeout", None)
    timed_out = False

    def turn_timed_out() -> None:
        nonlocal timed_out
        timed_out = True
        window.abandon_turn()

    printed: set[str] = set()

    def print_notes() -> None:
        window.junk_note()
        for note in window.run.notes:
            if note not in printed:
                printed.add(note)
                err.write(f"acpkit-client: note: {note}\n")

    def print_dropped() -> None:
        dropped = window.dropped_note()
        if dropped is not None:
            err.write(f"acpkit-client: warning: {dropped}\n")

    signals.install()
    timer = None
    try:
        try:
            await window.start(reactor)
        except HandshakeTimeout as e:
            err.write(
                f"acpkit-client: agent {entry.name!r}: {e} (--handshake-timeout); "
                "stopping the agent\n"
            )
            return signals.exit_status or EXIT_TIMEOUT
        except AgentStartError as e:
            if signals.exit_status is not None:
                return signals.exit_status
            err.write(f"acpkit-client: agent {entry.name!r}: {e}\n")
            return EXIT_AGENT_FAILED
        if signals.exit_status is not None:
            return signals.exit_status
        print_notes()
        if turn_limit is not None:
            timer = reactor.callLater(turn_limit, turn_timed_out)
        try:
            stop = await window.send_prompt(options.prompt)
        except TurnError as e:
            printer.finish()
            print_dropped()
            if signals.exit_status is not None:
                return signals.exit_status
            if timed_out:
                err.write(
                    f"acpkit-client: agent {entry.name!r}: no answer to session/prompt within "
                    f"{turn_limit:g} s (--timeout); stopping the agent\n"
                )
                return EXIT_TIMEOUT
            err.write(f"acpkit-client: agent {entry.name!r}: {e}\n")
            return EXIT_AGENT_FAILED
        printer.finish()
        print_notes()
        print_dropped()
        code = _STOP_CODES.get(stop, EXIT_AGENT_FAILED)
        if code != EXIT_OK:
            err.write(f"acpkit-client: the turn ended: {stop}\n")
        if signals.exit_status is not None:
            return signals.exit_status
        if code == EXIT_CANCELLED_BY_AGENT:
            err.write("acpkit-client: the agent cancelled the turn by itself\n")
        return code
    finally:
        if timer is not None and timer.active():
            timer.cancel()
        err.flush()
        # Signals stay handled until the agent is gone: a second one hurries this.
        await window.close()
        signals.finish(restore=restore_signals)


def _note_unlisted_mentions(text: str, root: str, err: IO[str]) -> None:
    """Say on stderr which mentioned files git ignores (their whole text is sent)."""
    if "@" not in text:
        return
    listing = list_project_files(root)
    if listing.cut:  # a file past the limit is not an ignored one
        return
    for name in unlisted_mentions(text, root, listing.files):
        err.write(
            f"acpkit-client: note: {name} is not in the project's file list (git ignores "
            "it): the whole file is sent to the agent\n"
        )


def _start_logging(verbose: bool) -> None:
    level = LogLevel.info if verbose else LogLevel.error
    observer = FilteringLogObserver(
        textFileLogObserver(sys.stderr),
        [LogLevelFilterPredicate(defaultLogLevel=level)],
    )
    globalLogBeginner.beginLoggingTo([observer], redirectStandardIO=False)


def _wants_terminal_ui(args: Sequence[str]) -> bool:
    """No sub-command (after the global ``-v``), and no request for this parser's help or
    version."""
    rest = [a for a in args if a not in ("-v", "--verbose")]
    return not rest or (
        rest[0] not in _SUBCOMMANDS and rest[0] not in ("-h", "--help", "--version")
    )


def main(argv: Sequence[str] | None = None) -> int:
    """The ``acpkit-client`` entry point; returns (or exits with) the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if _wants_terminal_ui(args):
        from acpkit_client.tui.app import main as terminal_ui

        return terminal_ui([a for a in args if a not in ("-v", "--verbose")])
    parser = _parser()
    try:
        options = parser.parse_args(args)
    except SystemExit as e:
        return int(e.code or 0)
    if options.command is None:
        parser.print_usage(sys.stderr)
        return EXIT_USAGE
    _start_logging(options.verbose)
    with startup_imports():  # the reactor and its TLS support: see startup_imports
        import twisted.internet.reactor  # noqa: F401  (installed here, run by task.react)
        from twisted.internet import task

    def run(reactor: Any) -> Deferred[None]:
        async def go() -> None:
            code = await ask(
                reactor,
                options,
                sys.stdout,
                sys.stderr,
                sys.stdin.isatty(),
                restore_signals=False,
            )
            if code:
                raise SystemExit(code)

        return ensureDeferred(go())

    try:
        task.react(run)
    except SystemExit as e:
        return int(e.code or 0)
    return EXIT_OK
