"""
Client capabilities and the services behind them (file system, terminals, elicitation,
notices, compaction), and the paths the agent sends.

- CAP-001, CAP-002, CAP-003: every fs/*, terminal/*, elicitation/* request, against the
  client's capabilities
- CAP-004: every notice / compaction_* update, against session.notices / session.compaction
- TERMINAL-001: terminal/output, wait_for_exit, kill, release of a terminal not live
- TERMINAL-002, TERMINAL-005: at a turn's end: its terminals released (killed ones too)
- TERMINAL-003: a tool call embedding a terminal not live
- TERMINAL-004: terminal/create's cwd
- ELICIT-001..006, ELICIT-008: every elicitation/create and elicitation/complete
- NOTICE-001, NOTICE-002: every notice, compaction_update, compaction_summary_chunk
- PATH-001, FS-001: every path and line the agent sends (fs, tool calls, permission requests,
  session/list)
- SESSION-009, SESSION-010: the same paths against the session's roots and the spawn directory

ELICIT-007 and the stimuli (services offered, the spawn directory) are probes.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import attrs

from acpkit.conformance.checks.base import Family, describe, is_absolute, is_within, strings_under
from acpkit.conformance.checks.state import AnswerContext, UpdateContext

__all__ = [
    "CapabilityChecks",
    "form_schema_problem",
    "url_is_plain_http",
    "url_secret_problem",
]

_PRIMITIVE_TYPES = frozenset({"string", "number", "integer", "boolean"})
_TERMINAL_USES = frozenset(
    {"terminal/output", "terminal/wait_for_exit", "terminal/kill", "terminal/release"}
)
_URL_IN_TEXT = re.compile(r"https?://\S", re.IGNORECASE)
_SECRET_PARAMETERS = frozenset(
    {
        "password",
        "passwd",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "api_key",
        "apikey",
        "api-key",
        "secret",
        "client_secret",
    }
)
_TEXT_KEYS = frozenset({"title", "description"})
#: Form fields that ask for a secret the sentence of ELICIT-008 names (exact names).
SECRET_FIELDS = frozenset(
    {
        "password",
        "passwd",
        "api_key",
        "apikey",
        "api-key",
        "token",
        "access_token",
        "refresh_token",
        "secret",
        "client_secret",
        "private_key",
        "recovery_code",
        "recovery_codes",
        "card_number",
        "cvv",
        "cvc",
        "pin",
    }
)
_FINAL_COMPACTION = frozenset({"completed", "failed", "cancelled"})


def form_schema_problem(requested: Any) -> str | None:
    """
    ``None`` when ``requested`` is a flat object schema of primitive properties (string,
    number, integer, boolean, or an array of string options) whose ``required`` names are
    among its properties; else what is wrong with it (ELICIT-001).
    """
    if not isinstance(requested, dict):
        return f"requestedSchema is {type(requested).__name__}, not an object schema"
    if requested.get("type", "object") != "object":
        return f"requestedSchema has type {requested.get('type')!r}, not 'object'"
    properties = requested.get("properties", {})
    if not isinstance(properties, dict):
        return "requestedSchema.properties is not an object"
    for name, prop in properties.items():
        kind = prop.get("type") if isinstance(prop, dict) else None
        if kind in _PRIMITIVE_TYPES:
            continue
        if kind == "array":
            items = prop.get("items")
            if isinstance(items, dict) and (
                items.get("type") == "string" or "enum" in items or "anyOf" in items
            ):
                continue
            return f"requestedSchema.properties.{name} is an array whose items are not strings"
        return f"requestedSchema.properties.{name} has type {kind!r}, not a primitive type"
    required = requested.get("required")
    if required is not None:
        if not isinstance(required, list):
            return "requestedSchema.required is not a list"
        missing = [r for r in required if r not in properties]
        if missing:
            return f"requestedSchema.required names unknown properties {missing!r}"
    return None


def url_secret_problem(url: str) -> str | None:
    """ELICIT-005: credentials in a URL (a userinfo part, a secret-named parameter)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if "@" in parts.netloc:
        return "has a userinfo part (user:password@host)"
    for source in (parts.query, parts.fragment):
        for name, _ in parse_qsl(source, keep_blank_values=True):
            if name.lower() in _SECRET_PARAMETERS:
                return f"has a parameter named {name!r}"
    return None


def url_is_plain_http(url: str) -> bool:
    """ELICIT-006: an http:// URL to a host other than the loopback."""
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
    except ValueError:
        return False
    if parts.scheme.lower() != "http":
        return False
    loopback = host in ("localhost", "::1") or host.endswith(".localhost")
    return not (loopback or host.startswith("127."))


@attrs.define
class _Terminal:
    """A terminal the client created for the agent."""

    session_id: str | None
    turn_key: str | None
    released: bool = False
    killed: bool = False


class CapabilityChecks(Family):
    """See the module docstring."""

    rules = (
        "CAP-001",
        "CAP-002",
        "CAP-003",
        "CAP-004",
        "TERMINAL-001",
        "TERMINAL-002",
        "TERMINAL-003",
        "TERMINAL-004",
        "TERMINAL-005",
        "ELICIT-001",
        "ELICIT-002",
        "ELICIT-003",
        "ELICIT-004",
        "ELICIT-005",
        "ELICIT-006",
        "ELICIT-008",
        "NOTICE-001",
        "NOTICE-002",
        "PATH-001",
        "FS-001",
        "SESSION-009",
        "SESSION-010",
    )

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.terminals: dict[str, _Terminal] = {}
        self._url_elicitations: set[str] = set()
        #: url-mode elicitationIds not completed, declined or ended with their turn yet, with
        #: the request key of the turn that started them
        self._outstanding_urls: dict[str, str | None] = {}
        #: per session, each compaction's last status
        self._compactions: dict[str, dict[str, str]] = {}

    # -- the client's answers --------------------------------------------------------------

    def client_answered(self, request: dict[str, Any], response: dict[str, Any]) -> None:
        """Learn the terminals the client created and the elicitations it refused."""
        method = request.get("method")
        params = request.get("params")
        if not isinstance(params, dict):
            return
        result = response.get("result")
        session_id = params.get("sessionId")
        if method == "elicitation/create":
            if not (isinstance(result, dict) and result.get("action") == "accept"):
                self._outstanding_urls.pop(str(params.get("elicitationId")), None)
        elif method == "terminal/create":
            if isinstance(result, dict) and isinstance(result.get("terminalId"), str):
                turn = self.state.turn_of(session_id) if isinstance(session_id, str) else None
                self.terminals[result["terminalId"]] = _Terminal(
                    session_id if isinstance(session_id, str) else None,
                    turn.request_key if turn is not None else None,
                )

    # -- the agent's requests and notifications ------------------------------------------

    def agent_message(
        self, method: str, params: dict[str, Any], raw_params: Any, is_request: bool, index: int
    ) -> None:
        self._capability(method, params, index)
        session_id = params.get("sessionId") if isinstance(params.get("sessionId"), str) else None
        if method in ("fs/read_text_file", "fs/write_text_file"):
            path = params.get("path")
            self._path(path, f"{method} params.path", index)
            if method == "fs/read_text_file":
                self._line(params.get("line"), f"{method} params.line", index)
            self._where(session_id, path, f"{method} params.path", index, boundary=True)
        elif method == "terminal/create":
            cwd = params.get("cwd")
            if isinstance(cwd, str):
                if is_absolute(cwd):
                    self.ok("TERMINAL-004")
                else:
                    self.violation(
                        "TERMINAL-004", f"terminal/create params.cwd {cwd!r} is not absolute", index
                    )
                self._where(session_id, cwd, "terminal/create params.cwd", index, boundary=True)
        elif method in _TERMINAL_USES:
            self._terminal_use(method, params, index)
        elif method == "session/request_permission":
            tool = params.get("toolCall")
            if isinstance(tool, dict):
                where = "session/request_permission params.toolCall"
                self._tool_fields(session_id, tool, where, False, index)
        elif method == "elicitation/create":
            self._elicitation(params, index)
            self._elicitation_content(params, index)
        elif method == "elicitation/complete":
            self._elicitation_complete(params, index)

    def _capability(self, method: str, params: dict[str, Any], index: int) -> None:
        """CAP-001 / 002 / 003: no service the client did not advertise."""
        if method.startswith("fs/"):
            flag = {"fs/read_text_file": "readTextFile", "fs/write_text_file": "writeTextFile"}
            needed = flag.get(method)
            if needed is None or self.capability("fs", needed) is not True:
                self.violation(
                    "CAP-001",
                    f"agent called {method} but clientCapabilities.fs.{needed or '?'} "
                    "was not advertised",
                    index,
                )
            else:
                self.ok("CAP-001")
        elif method.startswith("terminal/"):
            if self.capability("terminal") is not True:
                self.violation(
                    "CAP-002",
                    f"agent called {method} but clientCapabilities.terminal was not advertised",
                    index,
                )
            else:
                self.ok("CAP-002")
        elif method.startswith("elicitation/"):
            mode = params.get("mode")
            advertised = self.capability("elicitation")
            if not isinstance(advertised, dict) or (
                isinstance(mode, str) and advertised.get(mode) is None
            ):
                self.violation(
                    "CAP-003",
                    f"agent called {method} (mode {mode!r}) but clientCapabilities.elicitation"
                    f"{'.' + mode if isinstance(mode, str) else ''} was not advertised",
                    index,
                )
            else:
                self.ok("CAP-003")

    def _terminal_use(self, method: str, params: dict[str, Any], index: int) -> None:
        """TERMINAL-001: only live terminals."""
        terminal_id = params.get("terminalId")
        terminal = self.terminals.get(terminal_id) if isinstance(terminal_id, str) else None
        if terminal is None:
            self.violation(
                "TERMINAL-001",
                f"{method} for terminal {terminal_id!r}, which the client never created",
                index,
            )
        elif terminal.released:
            self.violation(
                "TERMINAL-001", f"{method} for terminal {terminal_id!r} after its release", index
            )
        else:
            self.ok("TERMINAL-001")
            if method == "terminal/release":
                terminal.released = True
            elif method == "terminal/kill":
                terminal.killed = True

    def _elicitation(self, params: dict[str, Any], index: int) -> None:
        """ELICIT-001 (well-formed) and ELICIT-003 (url ids unique among outstanding)."""
        mode = params.get("mode")
        if mode == "form":
            problem = form_schema_problem(params.get("requestedSchema"))
        elif mode == "url":
            elicitation_id = params.get("elicitationId")
            url = params.get("url")
            if not isinstance(elicitation_id, str) or not isinstance(url, str) or ":" not in url:
                problem = f"url elicitation needs an elicitationId and a url, got {params!r}"[:300]
            else:
                problem = None
                self._url_elicitations.add(elicitation_id)
                if elicitation_id in self._outstanding_urls:
                    self.violation(
                        "ELICIT-003",
                        f"url elicitation/create reuses elicitationId {elicitation_id!r}, which "
                        "an earlier url elicitation still outstanding (not completed) has",
                        index,
                    )
                else:
                    self.ok("ELICIT-003")
                    session_id = params.get("sessionId")
                    turn = self.state.turn_of(session_id) if isinstance(session_id, str) else None
                    self._outstanding_urls[elicitation_id] = (
                        turn.request_key if turn is not None else None
                    )
        else:
            return  # a custom or future mode: CAP-003 and the schema judge it
        if problem is None:
            self.ok("ELICIT-001")
        else:
            self.violation("ELICIT-001", f"elicitation/create ({mode}): {problem}", index)

    def _elicitation_complete(self, params: dict[str, Any], index: int) -> None:
        """ELICIT-002: complete only a url elicitation the agent started."""
        elicitation_id = params.get("elicitationId")
        if isinstance(elicitation_id, str) and elicitation_id in self._url_elicitations:
            self.ok("ELICIT-002")
            self._outstanding_urls.pop(elicitation_id, None)
        else:
            self.violation(
                "ELICIT-002",
                f"elicitation/complete for {elicitation_id!r}, which no url-mode "
                "elicitation/create started",
                index,
            )

    def _elicitation_content(self, params: dict[str, Any], index: int) -> None:
        """ELICIT-004 (form: no clickable URL), ELICIT-005 / 006 (url: no secrets, HTTPS)."""
        mode = params.get("mode")
        if mode == "form":
            texts = [params.get("message")]
            texts += list(strings_under(params.get("requestedSchema"), _TEXT_KEYS))
            found = [t for t in texts if isinstance(t, str) and _URL_IN_TEXT.search(t)]
            if found:
                self.violation(
                    "ELICIT-004",
                    f"form-mode elicitation/create has a URL in its text: {describe(found[0])}",
                    index,
                )
            else:
                self.ok("ELICIT-004")
            requested = params.get("requestedSchema")
            properties = requested.get("properties") if isinstance(requested, dict) else None
            names = list(properties) if isinstance(properties, dict) else []
            secrets = [n for n in names if n.lower() in SECRET_FIELDS]
            if secrets:
                self.violation(
                    "ELICIT-008",
                    f"form-mode elicitation/create asks for the secret field(s) {secrets}: "
                    "secrets go through url mode",
                    index,
                )
            else:
                self.ok("ELICIT-008")
        elif mode == "url" and isinstance(params.get("url"), str):
            url = str(params["url"])
            problem = url_secret_problem(url)
            if problem is not None:
                self.violation(
                    "ELICIT-005", f"url-mode elicitation/create url {url!r} {problem}", index
                )
            else:
                self.ok("ELICIT-005")
            if url_is_plain_http(url):
                self.violation(
                    "ELICIT-006",
                    f"url-mode elicitation/create url {url!r} is plain http to a host other "
                    "than the loopback",
                    index,
                )
            else:
                self.ok("ELICIT-006")

    # -- session updates --------------------------------------------------------------------

    def session_update(self, context: UpdateContext, index: int) -> None:
        kind, update = context.kind, context.update
        if kind == "notice" or (kind is not None and kind.startswith("compaction_")):
            capability = "notices" if kind == "notice" else "compaction"
            if self.capability("session", capability) is None:
                self.violation(
                    "CAP-004",
                    f"session/update {kind} sent but clientCapabilities.session.{capability} "
                    "was not advertised",
                    index,
                )
            else:
                self.ok("CAP-004")
                if kind == "notice":
                    self._notice(update, index)
                elif kind in ("compaction_update", "compaction_summary_chunk"):
                    self._compaction(context.session_id, kind, update, index)
        if kind in ("tool_call", "tool_call_update"):
            where = f"session/update {kind}"
            self._tool_fields(context.session_id, update, where, context.replay is not None, index)

    def _notice(self, update: dict[str, Any], index: int) -> None:
        """NOTICE-001: a severity and a non-empty title."""
        title = update.get("title")
        severity = update.get("severity")
        if isinstance(severity, str) and isinstance(title, str) and title:
            self.ok("NOTICE-001")
        else:
            self.violation(
                "NOTICE-001",
                f"notice needs a severity and a non-empty title, got severity={severity!r} "
                f"title={title!r}",
                index,
            )

    def _compaction(self, session_id: str, kind: str, update: dict[str, Any], index: int) -> None:
        """NOTICE-002: well-formed, and a compactionId not reused for a new compaction."""
        compaction_id = update.get("compactionId")
        if kind == "compaction_update":
            status = update.get("status")
            good = isinstance(compaction_id, str) and isinstance(status, str)
            needs = "compactionId and status"
        else:
            status = None
            good = isinstance(compaction_id, str) and isinstance(update.get("content"), dict)
            needs = "compactionId and one content block"
        if not good:
            self.violation("NOTICE-002", f"{kind} needs {needs}", index)
            return
        seen = self._compactions.setdefault(session_id, {})
        before = seen.get(str(compaction_id))
        if before in _FINAL_COMPACTION and status == "in_progress":
            self.violation(
                "NOTICE-002",
                f"compaction_update starts compaction {compaction_id!r} again (in_progress) "
                f"after it ended {before}: the id is unique within the session",
                index,
            )
        else:
            self.ok("NOTICE-002")
        if isinstance(status, str):
            seen[str(compaction_id)] = status
        else:
            seen.setdefault(str(compaction_id), "in_progress")

    # -- paths --------------------------------------------------------------------------------

    def _path(self, path: Any, where: str, index: int) -> None:
        """PATH-001: a file path the agent sends is absolute."""
        if not isinstance(path, str):
            return
        if is_absolute(path):
            self.ok("PATH-001")
        else:
            self.violation("PATH-001", f"{where} is the relative path {path!r}", index)

    def _line(self, line: Any, where: str, index: int) -> None:
        """FS-001: line numbers are 1-based."""
        if not isinstance(line, int) or isinstance(line, bool):
            return
        if line >= 1:
            self.ok("FS-001")
        else:
            self.violation(
                "FS-001",
                f"{where} is {line}; line numbers are 1-based (the first line is 1)",
                index,
            )

    def _where(
        self, session_id: str | None, path: Any, where: str, index: int, *, boundary: bool
    ) -> None:
        """SESSION-009 (not the spawn directory) and SESSION-010 (within the session roots)."""
        if session_id is None or not isinstance(path, str) or not is_absolute(path):
            return
        session = self.state.sessions.get(session_id)
        if session is None or not session.roots:
            return
        inside = is_within(path, session.roots)
        spawn_dir = self.state.spawn_dir
        if spawn_dir is not None:
            if not inside and is_within(path, [spawn_dir]):
                self.violation(
                    "SESSION-009",
                    f"{where} {path!r} is under the directory the agent was spawned in "
                    f"({spawn_dir}), not under the session's cwd {session.cwd!r}",
                    index,
                )
            else:
                self.ok("SESSION-009")
        if not boundary:
            return
        named = self.state.prompt_paths.get(session_id, set())
        if inside or (named and is_within(path, list(named))):
            self.ok("SESSION-010")
        else:
            self.violation(
                "SESSION-010",
                f"{where} {path!r} is outside the session's roots ({', '.join(session.roots)})",
                index,
            )

    def _tool_fields(
        self, session_id: str | None, body: dict[str, Any], where: str, replay: bool, index: int
    ) -> None:
        """A tool call's locations and content: PATH-001, FS-001, TERMINAL-003, SESSION-009/010."""
        locations = body.get("locations")
        for position, location in enumerate(locations if isinstance(locations, list) else []):
            if not isinstance(location, dict):
                continue
            here = f"{where}.locations[{position}]"
            self._path(location.get("path"), f"{here}.path", index)
            self._line(location.get("line"), f"{here}.line", index)
            self._where(session_id, location.get("path"), f"{here}.path", index, boundary=False)
        content = body.get("content")
        for position, item in enumerate(content if isinstance(content, list) else []):
            if not isinstance(item, dict):
                continue
            here = f"{where}.content[{position}]"
            if item.get("type") == "diff":
                path = item.get("path")
                self._path(path, f"{here}.path (diff)", index)
                self._where(session_id, path, f"{here}.path (diff)", index, boundary=True)
            elif item.get("type") == "terminal" and not replay:
                self._embedded_terminal(item.get("terminalId"), here, index)

    def _embedded_terminal(self, terminal_id: Any, where: str, index: int) -> None:
        """TERMINAL-003: a terminal is embedded only while it is live."""
        terminal = self.terminals.get(terminal_id) if isinstance(terminal_id, str) else None
        if terminal is None:
            self.violation(
                "TERMINAL-003",
                f"{where} embeds terminal {terminal_id!r}, which the client never created",
                index,
            )
        elif terminal.released:
            self.violation(
                "TERMINAL-003",
                f"{where} embeds terminal {terminal_id!r} after the agent's terminal/release "
                "for it",
                index,
            )
        else:
            self.ok("TERMINAL-003")

    # -- the agent's answers ------------------------------------------------------------------

    def response(self, context: AnswerContext, index: int) -> None:
        result = context.result
        if context.method == "session/list" and isinstance(result, dict):
            sessions = result.get("sessions")
            for position, info in enumerate(sessions if isinstance(sessions, list) else []):
                if not isinstance(info, dict):
                    continue
                here = f"session/list result.sessions[{position}]"
                self._path(info.get("cwd"), f"{here}.cwd", index)
                extra = info.get("additionalDirectories")
                for number, directory in enumerate(extra if isinstance(extra, list) else []):
                    self._path(directory, f"{here}.additionalDirectories[{number}]", index)
        elif context.method == "session/prompt" and context.turn is not None:
            # a url elicitation started by this turn is no longer outstanding once the turn
            # ended (elicitation/complete is only a MAY)
            for elicitation_id, owner in list(self._outstanding_urls.items()):
                if owner == context.key:
                    del self._outstanding_urls[elicitation_id]
            if isinstance(result, dict):
                self._terminals_released(context.key, index)

    def _terminals_released(self, turn_key: str, index: int) -> None:
        """TERMINAL-002 / 005: the turn's terminals are released by its end."""
        created = {
            terminal_id: terminal
            for terminal_id, terminal in self.terminals.items()
            if terminal.turn_key == turn_key
        }
        live = sorted(t for t, terminal in created.items() if not terminal.released)
        for terminal_id in (t for t, terminal in created.items() if terminal.killed):
            if terminal_id in live:
                self.violation(
                    "TERMINAL-005",
                    f"terminal {terminal_id!r} was killed (terminal/kill) but never released "
                    "by the end of the turn",
                    index,
                )
            else:
                self.ok("TERMINAL-005")
        if live:
            self.violation(
                "TERMINAL-002",
                f"turn ended with terminals never released: {', '.join(live)}",
                index,
            )
        elif created:
            self.ok("TERMINAL-002")
