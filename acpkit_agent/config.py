"""
The agent's configuration files (TOML): where they are looked up, how they are layered,
what keys they have, how they are validated.

Two layers, merged key by key (the upper one wins; a table such as ``[context]`` is merged
key by key, but ``[engine]`` and each ``hooks`` event are replaced whole):

1. the *base*: the ``--config`` file when given, else ``~/.config/acpkit/agent.toml``
   when it exists;
2. the *project file* of a directory (:func:`find_project_config`): the nearest
   ``.acpkit/agent.toml`` walking up from that directory, stopping after the repository
   root (the first directory holding ``.git``) or at the filesystem root.

The process's configuration (:func:`load_config`, read at startup) is the ``--config`` file
alone when given, else the base under the project file of the process's cwd.  Each session
has its own (:func:`session_config`): the process's, except that :data:`SESSION_KEYS`
(``yolo``, the hooks, ``context.keepLastTurns``, ``context.compactAt``) come from the base
under the project file of the *session's* cwd.  The other keys are per process (the engine
and ``agentInfo`` exist before any session): a session's project file that sets them
differently is logged, not obeyed.

Validation is strict: an unknown key, a value of the wrong type, an unreadable file or
invalid TOML raises :class:`ConfigError` naming the file and the key, e.g.
``/p/.acpkit/agent.toml: context.keepLastTurn is not a key this file has``.

==========================  ========  ============================  =======================
key                         type      default                       meaning
==========================  ========  ============================  =======================
``acp.name``                string    ``"bob"``                     ``agentInfo.name``
``acp.title``               string    ``"Bob (bash-first agent)"``  ``agentInfo.title``
                                                                    (absent when empty)
``yolo``                    bool      ``true``                      no permission requests
``context.contextWindow``   int >= 0  ``0``                         0: ask the engine
``context.keepLastTurns``   int >= 0  ``4``                         turns ``/compact`` keeps
``context.compactAt``       float     ``0.8``                       fraction of the window
                            (0, 1]                                  that triggers automatic
                                                                    compaction
``sessions.enabled``        bool      ``false``                     persist sessions
``sessions.dir``            string    ``".acpkit/sessions"``        relative to the cwd
``skills.dirs``             list of   ``[]``                        more skill directories
                            strings                                 (relative to the cwd)
``engine.name``             string    ``"echo"``                    ``openai``, ``scripted``,
                                                                    ``echo``
``engine.*``                any                                     the engine's settings,
                                                                    checked by ``make_engine``
``[[hooks.preToolCall]]``,  tables    none                          hooks: ``command``
``[[hooks.postAsk]]``                                               (string), ``args`` (list
                                                                    of strings), ``timeout``
                                                                    (seconds > 0, default 10);
                                                                    see :mod:`.hooks`
``[mcp.servers.<name>]``    tables    none                          MCP servers (per process):
                                                                    ``command``/``args``/
                                                                    ``env``/``cwd`` or ``url``/
                                                                    ``headers``, plus
                                                                    ``permissions``, ``tools``,
                                                                    ``timeout``; see
                                                                    :mod:`.mcp_config`
``mcp.useClientServers``    bool      ``false``                     also connect to the
                                                                    ``mcpServers`` a client
                                                                    passes (per session)
``[lsp.servers.<name>]``    tables    none                          language servers (per
                                                                    process): ``command``,
                                                                    ``args``, ``files``,
                                                                    ``languageId``,
                                                                    ``initializationOptions``,
                                                                    ``env``; see
                                                                    :mod:`.lsp_config`
==========================  ========  ============================  =======================
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from typing import Any

import attrs

from acpkit_agent.hooks import HookCommand, parse_hooks
from acpkit_agent.lsp_config import LspServerConfig, merge_lsp_tables, parse_lsp
from acpkit_agent.mcp_config import (
    McpServerConfig,
    merge_mcp_tables,
    parse_mcp,
    parse_use_client_servers,
)

__all__ = [
    "DEFAULT_TITLE",
    "PROJECT_FILE",
    "SESSION_KEYS",
    "AgentConfig",
    "ConfigError",
    "config_candidates",
    "find_config",
    "find_project_config",
    "load_config",
    "merge_documents",
    "parse_config",
    "read_config_file",
    "session_config",
    "user_config_path",
]

DEFAULT_NAME = "bob"
DEFAULT_TITLE = "Bob (bash-first agent)"


class ConfigError(Exception):
    """A configuration file that cannot be used; the message names the file and the key."""


@attrs.frozen
class AgentConfig:
    """The validated configuration (defaults when there is no file)."""

    name: str = DEFAULT_NAME
    title: str = DEFAULT_TITLE
    yolo: bool = True
    context_window: int = 0
    keep_last_turns: int = 4
    compact_at: float = 0.8
    sessions_enabled: bool = False
    sessions_dir: str = ".acpkit/sessions"
    skills_dirs: tuple[str, ...] = ()
    """More skill directories (``skills.dirs``), after ``<cwd>/.acpkit/skills`` and ``~``'s."""
    engine_name: str = "echo"
    engine_settings: Mapping[str, Any] = attrs.field(factory=dict)
    hooks: Mapping[str, tuple[HookCommand, ...]] = attrs.field(factory=dict)
    """The configured hooks by event (``preToolCall``, ``postAsk``)."""
    mcp_servers: tuple[McpServerConfig, ...] = ()
    """The ``[mcp.servers.<name>]`` tables, validated, in file order (per process)."""
    mcp_use_client_servers: bool = False
    """``mcp.useClientServers``: connect to the ``mcpServers`` of ``session/new`` too."""
    lsp_servers: tuple[LspServerConfig, ...] = ()
    """The ``[lsp.servers.<name>]`` tables, validated, in file order (per process)."""
    path: str | None = None
    """The most specific file this came from (the project file if any), None: defaults."""
    sources: tuple[str, ...] = attrs.field(default=(), eq=False)
    """Every file merged into this configuration, base first (empty: the defaults)."""
    base_path: str | None = attrs.field(default=None, eq=False)
    """The base layer: the ``--config`` file or the user's file (None: none)."""
    project_path: str | None = attrs.field(default=None, eq=False)
    """The project file merged over the base (None: none)."""
    explicit: bool = attrs.field(default=False, eq=False)
    """Whether the base is a ``--config`` file (then the process ignores its cwd's project)."""
    ignored: tuple[str, ...] = attrs.field(default=(), eq=False)
    """Per-process keys a session's project file sets differently (not obeyed)."""

    def describe_sources(self) -> str:
        """The files merged, most specific first (``a over b``), or ``none``."""
        if self.sources:
            return " over ".join(reversed(self.sources))
        return self.path or "none"


# key path -> (allowed types, AgentConfig attribute)
_SCALARS: dict[str, tuple[tuple[type, ...], str]] = {
    "acp.name": ((str,), "name"),
    "acp.title": ((str,), "title"),
    "yolo": ((bool,), "yolo"),
    "context.contextWindow": ((int,), "context_window"),
    "context.keepLastTurns": ((int,), "keep_last_turns"),
    "context.compactAt": ((float, int), "compact_at"),
    "sessions.enabled": ((bool,), "sessions_enabled"),
    "sessions.dir": ((str,), "sessions_dir"),
    "skills.dirs": ((list,), "skills_dirs"),
}
_TABLES = ("acp", "context", "sessions", "skills", "engine", "hooks", "mcp", "lsp")
_TYPE_NAMES = {
    str: "a string",
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    list: "a list of strings",
}


def _fail(path: str, message: str) -> ConfigError:
    return ConfigError(f"{path}: {message}")


def _check_type(path: str, key: str, value: Any, kinds: tuple[type, ...]) -> None:
    if isinstance(value, bool) and bool not in kinds:
        ok = False
    else:
        ok = isinstance(value, kinds)
    if not ok:
        wanted = " or ".join(_TYPE_NAMES.get(kind, kind.__name__) for kind in kinds)
        raise _fail(path, f"{key} must be {wanted}, not {value!r}")


def parse_config(data: Mapping[str, Any], path: str) -> AgentConfig:
    """Validate a decoded TOML document; ``path`` names it in errors."""
    values: dict[str, Any] = {}
    for top, value in data.items():
        if top in _TABLES:
            if not isinstance(value, dict):
                raise _fail(path, f"{top} must be a table, not {value!r}")
            if top == "engine":
                continue
            if top == "hooks":
                try:
                    values["hooks"] = parse_hooks(value)
                except ValueError as error:
                    raise _fail(path, str(error)) from None
                continue
            if top == "mcp":
                try:
                    values["mcp_servers"] = parse_mcp(value)
                    values["mcp_use_client_servers"] = parse_use_client_servers(value)
                except ValueError as error:
                    raise _fail(path, str(error)) from None
                continue
            if top == "lsp":
                try:
                    values["lsp_servers"] = parse_lsp(value)
                except ValueError as error:
                    raise _fail(path, str(error)) from None
                continue
            for key, inner in value.items():
                full = f"{top}.{key}"
                if full not in _SCALARS:
                    raise _fail(path, f"{full} is not a key this file has")
                kinds, attr = _SCALARS[full]
                _check_type(path, full, inner, kinds)
                values[attr] = inner
        elif top in _SCALARS:
            kinds, attr = _SCALARS[top]
            _check_type(path, top, value, kinds)
            values[attr] = value
        else:
            raise _fail(path, f"{top} is not a key this file has")
    if values.get("context_window", 0) < 0:
        raise _fail(path, "context.contextWindow must be >= 0 (0 asks the engine)")
    if values.get("keep_last_turns", 0) < 0:
        raise _fail(path, "context.keepLastTurns must be >= 0")
    compact_at = float(values.get("compact_at", 0.8))
    if not 0 < compact_at <= 1:
        raise _fail(path, f"context.compactAt must be in (0, 1], not {compact_at!r}")
    values["compact_at"] = compact_at
    if "name" in values and not values["name"].strip():
        raise _fail(path, "acp.name must not be empty")
    if "sessions_dir" in values and not values["sessions_dir"].strip():
        raise _fail(path, "sessions.dir must not be empty")
    if "skills_dirs" in values:
        for item in values["skills_dirs"]:
            if not isinstance(item, str) or not item.strip():
                raise _fail(path, f"skills.dirs must hold non-empty strings, not {item!r}")
        values["skills_dirs"] = tuple(values["skills_dirs"])
    engine = dict(data.get("engine", {}))
    name = engine.pop("name", "echo")
    if not isinstance(name, str):
        raise _fail(path, f"engine.name must be a string, not {name!r}")
    return AgentConfig(**values, engine_name=name, engine_settings=engine, path=path)


PROJECT_FILE = os.path.join(".acpkit", "agent.toml")
"""A project's configuration file, relative to the project's directory."""

SESSION_KEYS: dict[str, str] = {
    "yolo": "yolo",
    "hooks": "hooks",
    "context.keepLastTurns": "keep_last_turns",
    "context.compactAt": "compact_at",
}
"""The keys each session takes from its own cwd's project file -> AgentConfig attribute."""

_PROCESS_KEYS: dict[str, str] = {
    "acp.name": "name",
    "acp.title": "title",
    "context.contextWindow": "context_window",
    "sessions.enabled": "sessions_enabled",
    "sessions.dir": "sessions_dir",
    "skills.dirs": "skills_dirs",
    "engine": "engine_name",
    "mcp": "mcp_servers",
    "mcp.useClientServers": "mcp_use_client_servers",
    "lsp": "lsp_servers",
}


def user_config_path(home: str) -> str:
    """The user's configuration file: ``<home>/.config/acpkit/agent.toml``."""
    return os.path.join(home, ".config", "acpkit", "agent.toml")


def find_project_config(start: str) -> str | None:
    """
    The project file that applies to directory ``start``: the first
    ``<dir>/.acpkit/agent.toml`` that is a file, for ``dir`` = ``start`` and then each
    parent; the walk ends after a directory holding ``.git`` (the repository root: a
    repository's sessions never take an enclosing directory's file) or at the root.
    """
    directory = os.path.abspath(start)
    while True:
        candidate = os.path.join(directory, PROJECT_FILE)
        if os.path.isfile(candidate):
            return candidate
        if os.path.exists(os.path.join(directory, ".git")):
            return None
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def config_candidates(explicit: str | None, cwd: str, home: str) -> list[str]:
    """The files the process looks for, base first (the explicit one alone when given)."""
    if explicit is not None:
        return [explicit]
    project = find_project_config(cwd) or os.path.join(os.path.abspath(cwd), PROJECT_FILE)
    return [user_config_path(home), project]


def find_config(explicit: str | None, cwd: str, home: str) -> str | None:
    """The most specific configuration file the process uses, or None."""
    found = [path for path in config_candidates(explicit, cwd, home) if os.path.exists(path)]
    if explicit is not None:
        return explicit
    return found[-1] if found else None


def read_config_file(path: str) -> dict[str, Any]:
    """
    The validated TOML document of one file; :class:`ConfigError` naming the file when it
    cannot be read, is not TOML or has a bad key.
    """
    try:
        with open(path, "rb") as stream:
            data = tomllib.load(stream)
    except FileNotFoundError:
        raise _fail(path, "no such file") from None
    except IsADirectoryError:
        raise _fail(path, "is a directory, not a file") from None
    except OSError as error:
        raise _fail(path, f"cannot be read ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise _fail(path, "is not valid UTF-8") from None
    except tomllib.TOMLDecodeError as error:
        raise _fail(path, f"invalid TOML: {error}") from None
    parse_config(data, path)
    return data


def merge_documents(lower: Mapping[str, Any], upper: Mapping[str, Any]) -> dict[str, Any]:
    """
    ``upper`` over ``lower``: tables are merged key by key, except ``[engine]`` (another
    engine's settings would not fit) which ``upper`` replaces whole; each ``hooks`` event
    (a list) is replaced whole too, and so is each server of ``[mcp.servers]`` (merged by
    name).
    """
    merged: dict[str, Any] = dict(lower)
    for key, value in upper.items():
        below = merged.get(key)
        if key == "mcp" and isinstance(value, dict) and isinstance(below, dict):
            merged[key] = merge_mcp_tables(below, value)
        elif key == "lsp" and isinstance(value, dict) and isinstance(below, dict):
            merged[key] = merge_lsp_tables(below, value)
        elif key != "engine" and isinstance(value, dict) and isinstance(below, dict):
            merged[key] = {**below, **value}
        else:
            merged[key] = value
    return merged


def _layered(
    base: str | None, project: str | None, *, explicit: bool, docs: Mapping[str, Any]
) -> AgentConfig:
    sources = tuple(path for path in (base, project) if path is not None)
    if not sources:
        return AgentConfig()
    document: dict[str, Any] = {}
    for path in sources:
        document = merge_documents(document, docs[path])
    config = parse_config(document, sources[-1])
    return attrs.evolve(
        config, sources=sources, base_path=base, project_path=project, explicit=explicit
    )


def load_config(
    explicit: str | None = None, *, cwd: str | None = None, home: str | None = None
) -> AgentConfig:
    """
    The process's configuration: the ``explicit`` (``--config``) file alone, else the
    user's file under the project file of ``cwd`` (default: the process's), each optional;
    :class:`ConfigError` when one is unusable.
    """
    cwd = cwd if cwd is not None else os.getcwd()
    home = home if home is not None else os.path.expanduser("~")
    if explicit is not None:
        return _layered(explicit, None, explicit=True, docs={explicit: read_config_file(explicit)})
    user = user_config_path(home)
    base = user if os.path.exists(user) else None
    project = find_project_config(cwd)
    docs = {path: read_config_file(path) for path in (base, project) if path is not None}
    return _layered(base, project, explicit=False, docs=docs)


def _session_keys_set(document: Mapping[str, Any]) -> list[str]:
    keys = ["yolo"] if "yolo" in document else []
    if "hooks" in document:
        keys.append("hooks")
    context = document.get("context")
    if isinstance(context, dict):
        keys += [f"context.{key}" for key in ("keepLastTurns", "compactAt") if key in context]
    return keys


def _project_hooks(
    hooks: Mapping[str, tuple[HookCommand, ...]], project: str, cwd: str
) -> dict[str, tuple[HookCommand, ...]]:
    """A parent project's hook paths (``a/b``) made absolute against that project."""
    root = os.path.dirname(os.path.dirname(project))
    if os.path.normpath(root) == os.path.normpath(cwd):
        return dict(hooks)
    return {
        event: tuple(
            attrs.evolve(hook, command=os.path.join(root, hook.command))
            if "/" in hook.command and not os.path.isabs(os.path.expanduser(hook.command))
            else hook
            for hook in commands
        )
        for event, commands in hooks.items()
    }


def session_config(process: AgentConfig, cwd: str) -> AgentConfig:
    """
    The configuration of a session whose cwd is ``cwd``: ``process`` with the
    :data:`SESSION_KEYS` of the base under the project file of ``cwd``.  Per-process keys
    that this project file sets to another value are listed in ``ignored``.  A project
    file (or base) that cannot be used raises :class:`ConfigError` naming it.

    When ``cwd``'s project file is the process's own (or neither has one), this is
    ``process`` itself: nothing is read again.
    """
    project = find_project_config(cwd)
    if project == process.project_path:
        return process
    docs: dict[str, Any] = {}
    if project is not None:
        docs[project] = read_config_file(project)
    base = process.base_path
    if process.project_path is None:
        # the process has no project layer: its own values are the base (this also keeps
        # a configuration built in code, without files)
        below = process
    elif base is not None:
        docs[base] = read_config_file(base)
        below = _layered(base, None, explicit=process.explicit, docs=docs)
    else:
        below = AgentConfig()
    values: dict[str, Any] = {attr: getattr(below, attr) for attr in SESSION_KEYS.values()}
    ignored: list[str] = []
    if project is not None:
        document = docs[project]
        parsed = parse_config(document, project)
        for key in _session_keys_set(document):
            attr = SESSION_KEYS[key]
            values[attr] = getattr(parsed, attr)
        if "hooks" in document:
            values["hooks"] = {**below.hooks, **_project_hooks(parsed.hooks, project, cwd)}
        ignored = _differing_process_keys(document, parsed, process)
    sources = tuple(path for path in (base, project) if path is not None)
    return attrs.evolve(
        process,
        **values,
        path=sources[-1] if sources else None,
        sources=sources,
        project_path=project,
        ignored=tuple(ignored),
    )


def _differing_process_keys(
    document: Mapping[str, Any], parsed: AgentConfig, process: AgentConfig
) -> list[str]:
    ignored = []
    for key, attr in _PROCESS_KEYS.items():
        top, _, inner = key.partition(".")
        table = document.get(top)
        present = top in document if not inner else isinstance(table, dict) and inner in table
        if key == "engine":
            differs = parsed.engine_name != process.engine_name or dict(
                parsed.engine_settings
            ) != dict(process.engine_settings)
        else:
            differs = getattr(parsed, attr) != getattr(process, attr)
        if present and differs:
            ignored.append(key)
    return ignored
