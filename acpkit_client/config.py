"""The reference client's agents file: where it is, what it holds, what is refused.

Two files, both optional, are read in this order:

1. the user file, ``$ACPKIT_DIR/acp.toml`` when ``ACPKIT_DIR`` is set (and not empty),
   otherwise ``~/.config/acpkit/acp.toml``;
2. the project file, ``<project>/.acpkit/acp.toml`` (no upward search).

Each file holds one ``[[agent]]`` block per agent, in menu order. A file with any problem
is refused *whole* (:class:`AgentsFileError`), never half loaded. Merging works like
``dict.update`` keyed by ``name``: user entries keep their order, a project entry whose
name is already there replaces that user entry *in its position*, and the other project
entries follow in the project file's order. When neither file exists the client offers
the built-in reference agent (:func:`builtin_reference_agent`).

Semantics the spawner keeps (see :meth:`AgentEntry.find_executable`,
:meth:`AgentEntry.child_environment` and :meth:`AgentEntry.resolved_cwd`): ``command`` is
looked up in ``PATH`` unless it contains a path separator; ``args`` are passed as they are,
no shell; ``env`` is added over the client's environment (a name given here wins); ``cwd``
is relative to the project root and defaults to it.

An entry with ``url`` instead of ``command`` is a remote agent (``ws://``, ``wss://``,
``http://``, ``https://``: :func:`acpkit.remote.connect.connect_remote`); its ``headers``
(a table of strings, for example ``Authorization = "Bearer ..."``) go with every request
and are never shown; ``tls`` (a table of ``trust_root``, ``certificate``,
``private_key``: PEM files, relative to the agents file's directory, ``~`` expanded; each
must be a readable PEM file of the right kind when the file is loaded) is what a
``wss://`` or ``https://`` connection trusts and the client certificate it presents
(:class:`acpkit.remote.tls.ClientTLS`); ``http2`` (``"auto"``, the default: HTTP/2 on
``https://`` when the server offers it; ``"prior-knowledge"``: cleartext HTTP/2 on
``http://``; ``"never"``) is for ``http(s)://`` URLs only; ``args`` and ``env`` are for
a command and are refused with a ``url``; ``cwd`` is still the session's ``cwd``.
``token_file`` (a path, relative to the agents file's directory, ``~`` expanded) names a
file whose first line is the bearer token to send (``Authorization: Bearer``), read at
each connection, so the token itself need not be written in the agents file; without
it or an ``Authorization`` header, a loopback URL's token is read from the file a local
bob wrote for that port (:func:`acpkit.remote.tokens.token_for_url`).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import attrs
from twisted.logger import Logger

from acpkit.remote.tls import ClientTLS

if TYPE_CHECKING:
    from acpkit.http2_agent import HTTP2Mode

__all__ = [
    "BUILTIN_SOURCE",
    "AgentEntry",
    "AgentsConfig",
    "AgentsFileError",
    "builtin_reference_agent",
    "load_agents",
    "load_agents_file",
    "project_agents_file",
    "user_agents_file",
]

log = Logger()

#: The ``source`` of an entry that comes from no file.
BUILTIN_SOURCE = "<built-in>"

#: Name of the file, in the user directory and under ``<project>/.acpkit/``.
AGENTS_FILE_NAME = "acp.toml"

#: The keys an ``[[agent]]`` block may have.
AGENT_KEYS = (
    "name",
    "command",
    "url",
    "headers",
    "token_file",
    "tls",
    "http2",
    "args",
    "env",
    "cwd",
)
#: The values of a url agent's ``http2`` key (acpkit.remote.http_client.connect_http).
HTTP2_MODES = ("auto", "prior-knowledge", "never")

#: The keys of a url agent's ``tls`` table (each a PEM file's path).
TLS_KEYS = ("trust_root", "certificate", "private_key")

#: An HTTP header name (RFC 9110 token).
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")

_SEPARATORS = tuple(sep for sep in (os.sep, os.altsep) if sep)


def _frozen_env(value: Mapping[str, str]) -> Mapping[str, str]:
    """Copy ``value`` into a read-only mapping, so that entries stay immutable."""
    return MappingProxyType(dict(value))


def _as_tuple(value: Iterable[str]) -> tuple[str, ...]:
    """Copy ``value`` into a tuple."""
    return tuple(value)


@attrs.frozen(kw_only=True)
class AgentEntry:
    """One ``[[agent]]`` block: how to start (``command``) or reach (``url``) one agent.

    ``cwd`` is kept as written (relative to the project root); ``source`` is the file the
    entry came from, or ``"<built-in>"``.  A remote entry has ``url`` (and ``headers``)
    and an empty ``command``.
    """

    name: str
    command: str = ""
    #: A remote agent's URL (``ws``, ``wss``, ``http`` or ``https``), else None.
    url: str | None = None
    #: Sent with every request to a remote agent; never shown.
    headers: Mapping[str, str] = attrs.field(
        factory=dict, converter=_frozen_env, hash=False, repr=False
    )
    #: A remote agent's bearer token file (``token_file``; an absolute path), else None.
    token_file: str | None = None
    #: A remote agent's TLS settings (``tls`` table; absolute paths), else None.
    tls: ClientTLS | None = None
    #: An ``http(s)://`` agent's HTTP version policy (``HTTP2_MODES``).
    http2: HTTP2Mode = "auto"
    args: tuple[str, ...] = attrs.field(default=(), converter=_as_tuple)
    env: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_env, hash=False)
    cwd: str | None = None
    source: str

    def resolved_cwd(self, project_root: str) -> str:
        """Return the absolute directory the agent starts in (and announces as ``cwd``).

        ``cwd`` is taken relative to ``project_root``; without ``cwd`` it is the project
        root itself. No ``~`` or variable expansion: there is no shell.
        """
        root = os.path.abspath(project_root)
        if self.cwd is None:
            return root
        return os.path.normpath(os.path.join(root, self.cwd))

    def command_line(self) -> str:
        """Return the command and its arguments as one shell-quoted line, for display;
        a remote agent's URL without its query and fragment (they may hold a secret;
        the headers are never shown either)."""
        if self.url is not None:
            return self.url.split("#", 1)[0].split("?", 1)[0]
        return shlex.join([self.command, *self.args])

    def find_executable(
        self, project_root: str, environ: Mapping[str, str] = os.environ
    ) -> str | None:
        """Return the absolute path of the executable to start, or ``None`` if none is found.

        A ``command`` without a path separator is looked up in ``environ["PATH"]``; one
        with a separator is used as a path, relative to :meth:`resolved_cwd`.
        """
        if any(sep in self.command for sep in _SEPARATORS):
            path = os.path.join(self.resolved_cwd(project_root), self.command)
            path = os.path.normpath(path)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
            return None
        found = shutil.which(self.command, path=environ.get("PATH", os.defpath))
        return None if found is None else os.path.abspath(found)

    def launch_files(
        self, project_root: str, environ: Mapping[str, str] = os.environ
    ) -> tuple[str, ...]:
        """Return the files the client reads or runs when it starts this agent.

        A command's executable (:meth:`find_executable`) and each of its ``args`` naming
        an existing file (relative to :meth:`resolved_cwd`); a remote agent's TLS files.
        An agent may not write them through the client (:class:`acpkit_client.fs.FileAccess`).
        """
        files: list[str] = []
        if self.url is None and self.command:
            executable = self.find_executable(project_root, environ)
            if executable is not None:
                files.append(executable)
            cwd = self.resolved_cwd(project_root)
            for arg in self.args:
                candidate = os.path.normpath(os.path.join(cwd, arg))
                if os.path.isfile(candidate):
                    files.append(candidate)
        if self.tls is not None:
            for path in (self.tls.trust_root, self.tls.certificate, self.tls.private_key):
                if path is not None:
                    files.append(str(path))
        return tuple(files)

    def child_environment(self, base: Mapping[str, str] = os.environ) -> dict[str, str]:
        """Return ``base`` with this entry's ``env`` added over it (a name given here wins)."""
        merged = dict(base)
        merged.update(self.env)
        return merged


class AgentsFileError(Exception):
    """An agents file that is refused whole; ``str()`` is the message shown to the user.

    The message always reads ``reading <path>: <reason>``, for example
    ``reading /home/u/.config/acpkit/acp.toml: agent 1 has no name``.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"reading {path}: {reason}")
        #: The file that was refused.
        self.path = path
        #: What is wrong with it, without the ``reading <path>:`` prefix.
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.reason))


@attrs.frozen(kw_only=True)
class AgentsConfig:
    """The merged result of reading both agents files."""

    #: The agents, in menu order (see the module docstring for the merge rule).
    agents: tuple[AgentEntry, ...]
    #: The files that were read and loaded, in reading order.
    files_read: tuple[str, ...]
    #: The files that exist but were refused whole.
    errors: tuple[AgentsFileError, ...]
    #: True when no agents file exists at all: ``agents`` is then the built-in reference agent.
    builtin_default: bool
    #: Refused files whose entries of the previous load were kept (see :func:`load_agents`).
    kept: tuple[str, ...] = ()

    def find(self, name: str) -> AgentEntry:
        """Return the agent called ``name``; raise ``KeyError`` if there is none."""
        for agent in self.agents:
            if agent.name == name:
                return agent
        raise KeyError(name)


def user_agents_file(environ: Mapping[str, str] = os.environ) -> str:
    """Return the path of the user agents file.

    ``$ACPKIT_DIR/acp.toml`` when ``ACPKIT_DIR`` is set and not empty, otherwise
    ``~/.config/acpkit/acp.toml`` (``~`` from ``environ["HOME"]`` when set).
    """
    directory = environ.get("ACPKIT_DIR", "")
    if not directory:
        home = environ.get("HOME") or os.path.expanduser("~")
        directory = os.path.join(home, ".config", "acpkit")
    return os.path.abspath(os.path.join(directory, AGENTS_FILE_NAME))


def project_agents_file(project_root: str) -> str:
    """Return the path of the project agents file, ``<project_root>/.acpkit/acp.toml``."""
    return os.path.join(os.path.abspath(project_root), ".acpkit", AGENTS_FILE_NAME)


_TOML_POSITION = re.compile(r"^(?P<message>.*) \(at line (?P<line>\d+), column (?P<column>\d+)\)$")
_TOML_AT_END = re.compile(r"^(?P<message>.*) \(at end of document\)$")


def _toml_error_reason(error: tomllib.TOMLDecodeError, text: str) -> str:
    """Turn a ``tomllib`` error into ``invalid TOML at line L, column C: <what>``."""
    message = str(error.args[0]) if error.args else str(error)
    matched = _TOML_POSITION.match(message)
    if matched:
        line, column = matched["line"], matched["column"]
        message = matched["message"]
    else:
        at_end = _TOML_AT_END.match(message)
        if at_end:
            message = at_end["message"]
        line = str(text.count("\n") + 1)
        column = str(len(text) - (text.rfind("\n") + 1) + 1)
    return f"invalid TOML at line {line}, column {column}: {message}"


def _read_text(path: str) -> str:
    """Read ``path`` as UTF-8, turning every failure but a missing file into an error."""
    try:
        with open(path, "rb") as stream:
            data = stream.read()
    except FileNotFoundError:
        raise
    except OSError as error:
        raise AgentsFileError(path, error.strerror or str(error)) from error
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        before = data[: error.start]
        line = before.count(b"\n") + 1
        column = error.start - (before.rfind(b"\n") + 1) + 1
        raise AgentsFileError(
            path, f"not UTF-8 text: invalid byte at line {line}, column {column}"
        ) from error


def _parse_agent(path: str, index: int, block: object) -> AgentEntry:
    """Check one ``[[agent]]`` block (``index`` is 1-based) and build its entry."""
    if not isinstance(block, dict):
        raise AgentsFileError(path, f"agent {index} must be an [[agent]] table")
    for key in block:
        if key not in AGENT_KEYS:
            raise AgentsFileError(path, f"agent.{key} is not a key this file has")
    name = block.get("name")
    if name is None or name == "":
        raise AgentsFileError(path, f"agent {index} has no name")
    if not isinstance(name, str):
        raise AgentsFileError(path, f"agent {index}: name must be a string")
    label = f"agent {_quote(name)}"
    if any(key in block for key in ("url", "headers", "token_file", "tls", "http2")):
        return _parse_remote_agent(path, label, name, block)
    command = block.get("command")
    if command is None or command == "":
        raise AgentsFileError(path, f"{label} has no command")
    if not isinstance(command, str):
        raise AgentsFileError(path, f"{label}: command must be a string")
    args = block.get("args", [])
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise AgentsFileError(path, f"{label}: args must be a list of strings")
    env = block.get("env", {})
    if not isinstance(env, dict):
        raise AgentsFileError(path, f"{label}: env must be a table of strings")
    for variable, value in env.items():
        if not isinstance(value, str):
            raise AgentsFileError(path, f"{label}: env.{variable} must be a string")
    cwd = block.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise AgentsFileError(path, f"{label}: cwd must be a string")
    return AgentEntry(name=name, command=command, args=args, env=env, cwd=cwd, source=path)


def _parse_remote_agent(path: str, label: str, name: str, block: dict[str, Any]) -> AgentEntry:
    """Check a block with ``url`` (or ``headers``) and build its remote entry."""
    from acpkit.remote.connect import check_remote_url

    if "command" in block:
        raise AgentsFileError(path, f"{label}: give command or url, not both")
    url = block.get("url")
    if url is None or url == "":
        needing = next(key for key in ("headers", "token_file", "tls", "http2") if key in block)
        raise AgentsFileError(path, f"{label}: {needing} needs a url")
    if not isinstance(url, str):
        raise AgentsFileError(path, f"{label}: url must be a string")
    try:
        check_remote_url(url)
    except ValueError as e:
        raise AgentsFileError(path, f"{label}: url: {e}") from None
    for key in ("args", "env"):
        if key in block:
            raise AgentsFileError(
                path, f"{label}: {key} is for a command; an agent with a url has none"
            )
    headers = block.get("headers", {})
    if not isinstance(headers, dict):
        raise AgentsFileError(path, f"{label}: headers must be a table of strings")
    for header, value in headers.items():
        if not _HEADER_NAME.fullmatch(header):
            raise AgentsFileError(path, f"{label}: headers.{header} is not an HTTP header name")
        if not isinstance(value, str):
            raise AgentsFileError(path, f"{label}: headers.{header} must be a string")
        if any(c in value for c in "\r\n\x00") or any(ord(c) > 0xFF for c in value):
            # The value is never shown: it may be a token.
            raise AgentsFileError(
                path,
                f"{label}: headers.{header} holds a line break, NUL or a character "
                "outside Latin-1 (not allowed in an HTTP header)",
            )
    token_file = block.get("token_file")
    if token_file is not None:
        if not isinstance(token_file, str) or not token_file:
            raise AgentsFileError(path, f"{label}: token_file must be a file path (a string)")
        if any(name.lower() == "authorization" for name in headers):
            raise AgentsFileError(
                path, f"{label}: give token_file or headers.Authorization, not both"
            )
        given = Path(token_file).expanduser()
        token_file = str(given if given.is_absolute() else Path(path).parent / given)
    tls = _parse_tls(path, label, block.get("tls"))
    http2 = block.get("http2", "auto")
    if http2 not in HTTP2_MODES:
        raise AgentsFileError(
            path, f"{label}: http2 must be one of {', '.join(map(repr, HTTP2_MODES))}"
        )
    if "http2" in block and not url.lower().startswith("http"):
        raise AgentsFileError(path, f"{label}: http2 is for http:// and https:// urls")
    cwd = block.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise AgentsFileError(path, f"{label}: cwd must be a string")
    return AgentEntry(
        name=name,
        url=url,
        headers=headers,
        token_file=token_file,
        tls=tls,
        http2=http2,
        cwd=cwd,
        source=path,
    )


def _parse_tls(path: str, label: str, table: object) -> ClientTLS | None:
    """
    Check a url agent's ``tls`` table: known keys, strings naming readable PEM files
    (relative to the agents file's directory, ``~`` expanded) of the right kind.
    """
    if table is None:
        return None
    if not isinstance(table, dict):
        raise AgentsFileError(path, f"{label}: tls must be a table of file paths")
    files: dict[str, Path] = {}
    for key, value in table.items():
        if key not in TLS_KEYS:
            raise AgentsFileError(
                path, f"{label}: tls.{key} is not a key (trust_root, certificate, private_key)"
            )
        if not isinstance(value, str) or not value:
            raise AgentsFileError(path, f"{label}: tls.{key} must be a file path (a string)")
        given = Path(value).expanduser()
        files[key] = given if given.is_absolute() else Path(path).parent / given
    if "private_key" in files and "certificate" not in files:
        raise AgentsFileError(path, f"{label}: tls.private_key needs tls.certificate")
    checks = [("trust_root", ClientTLS(trust_root=files.get("trust_root")))]
    if "certificate" in files:
        client = ClientTLS(certificate=files["certificate"], private_key=files.get("private_key"))
        checks.append(("certificate", client))
    for key, settings in checks:
        try:
            settings.check()
        except ValueError as e:
            if key == "certificate" and "private_key" in files and "private key" in str(e):
                key = "private_key"
            raise AgentsFileError(path, f"{label}: tls.{key}: {e}") from None
        except ImportError as e:  # pragma: no cover - pyOpenSSL comes with the remote extra
            raise AgentsFileError(path, f"{label}: tls: {e}") from None
    return ClientTLS(**files)


def _quote(name: str) -> str:
    """Quote an agent name the way the messages show it: ``"Bob"``."""
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_agents_text(path: str, text: str) -> tuple[AgentEntry, ...]:
    """Parse the text of an agents file read from ``path``; raise :class:`AgentsFileError`."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise AgentsFileError(path, _toml_error_reason(error, text)) from error
    for key in document:
        if key != "agent":
            raise AgentsFileError(path, f"{key} is not a key this file has")
    blocks = document.get("agent", [])
    if not isinstance(blocks, list):
        raise AgentsFileError(path, "agent must be written as [[agent]] blocks")
    entries: list[AgentEntry] = []
    seen: set[str] = set()
    for index, block in enumerate(blocks, start=1):
        entry = _parse_agent(path, index, block)
        if entry.name in seen:
            raise AgentsFileError(path, f"two agents are called {_quote(entry.name)}")
        seen.add(entry.name)
        entries.append(entry)
    return tuple(entries)


def load_agents_file(path: str) -> tuple[AgentEntry, ...]:
    """Read and check one agents file, returning its entries in file order.

    Raises :class:`AgentsFileError` when the file is refused (invalid TOML, a wrong or
    unknown key, a missing name or command, a duplicate name, not UTF-8, unreadable,
    a directory...). ``FileNotFoundError`` passes through: a missing file is not an error.
    """
    return parse_agents_text(path, _read_text(path))


def builtin_reference_agent(python: str = sys.executable) -> AgentEntry:
    """Return the built-in entry that runs the reference agent with its echo engine.

    It is ``twistd -n acp-agent --engine echo`` through ``python``. ``python -m twisted``
    is the ``twist`` runner, which has no ``-n`` and logs to stdout by default, and
    ``twisted.scripts.twistd`` has no ``__main__``; so the entry calls twistd's ``run()``
    with ``-c``, which keeps twistd's option handling (the plugin's own fixes for the pid
    file and stderr logging) exactly as on the command line.
    """
    return AgentEntry(
        name="Bob (reference agent)",
        command=python,
        args=(
            "-c",
            "from twisted.scripts.twistd import run; run()",
            "-n",
            "acp-agent",
            "--engine",
            "echo",
        ),
        source=BUILTIN_SOURCE,
    )


def _merge(files: Iterable[tuple[AgentEntry, ...]]) -> tuple[AgentEntry, ...]:
    """Merge entries by name: later files replace earlier entries in place, new ones follow."""
    merged: dict[str, AgentEntry] = {}
    for entries in files:
        for entry in entries:
            merged[entry.name] = entry
    return tuple(merged.values())


def _previous_entries(previous: AgentsConfig | None, path: str) -> tuple[AgentEntry, ...] | None:
    """The entries ``path`` gave ``previous`` (None when it gave none: not loaded then)."""
    if previous is None or (path not in previous.files_read and path not in previous.kept):
        return None
    return tuple(entry for entry in previous.agents if entry.source == path)


def load_agents(
    project_root: str,
    environ: Mapping[str, str] = os.environ,
    previous: AgentsConfig | None = None,
) -> AgentsConfig:
    """Read the user file, then the project file, and merge them.

    A missing file is skipped; a refused one is recorded in ``errors`` and contributes
    nothing. When neither file exists, ``builtin_default`` is true and ``agents`` is the
    built-in reference agent alone. (An existing file with no ``[[agent]]`` block, or a
    refused one, counts as existing: the menu then shows what the files say, and
    **Agent status** shows why.)

    ``previous`` is the result of an earlier load, for a reload: a file refused now that
    loaded then keeps the entries it gave then (listed in ``kept``), so that a bad edit
    loses nothing while it is being fixed. The same file named twice (``ACPKIT_DIR`` set
    to the project's ``.acpkit``) is read once.
    """
    loaded: list[tuple[AgentEntry, ...]] = []
    files_read: list[str] = []
    errors: list[AgentsFileError] = []
    kept: list[str] = []
    seen: set[str] = set()
    for path in (user_agents_file(environ), project_agents_file(project_root)):
        # ACPKIT_DIR may be the project's own .acpkit: the same file is read once.
        real = os.path.realpath(path)
        if real in seen:
            continue
        seen.add(real)
        try:
            entries = load_agents_file(path)
        except FileNotFoundError:
            continue
        except AgentsFileError as error:
            log.warn("Agents file refused: {error}", error=str(error))
            errors.append(error)
            before = _previous_entries(previous, path)
            if before is not None:
                kept.append(path)
                loaded.append(before)
            continue
        files_read.append(path)
        loaded.append(entries)
    builtin_default = not files_read and not errors
    agents = (builtin_reference_agent(),) if builtin_default else _merge(loaded)
    return AgentsConfig(
        agents=agents,
        files_read=tuple(files_read),
        errors=tuple(errors),
        builtin_default=builtin_default,
        kept=tuple(kept),
    )
