"""
The agent's configuration file (TOML): where it is looked up, what keys it has, how it is
validated.

Lookup order: the ``--config`` file, then ``<cwd>/.acpkit/agent.toml``, then
``~/.config/acpkit/agent.toml``; with none, every key has its default and the engine is
``echo``.  Validation is strict: an unknown key, a value of the wrong type, an unreadable
file or invalid TOML raises :class:`ConfigError` naming the file and the key, e.g.
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
==========================  ========  ============================  =======================
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from typing import Any

import attrs

from acpkit_agent.hooks import HookCommand, parse_hooks

__all__ = [
    "DEFAULT_TITLE",
    "AgentConfig",
    "ConfigError",
    "config_candidates",
    "find_config",
    "load_config",
    "parse_config",
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
    path: str | None = None
    """The file this came from, None for the defaults."""


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
_TABLES = ("acp", "context", "sessions", "skills", "engine", "hooks")
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


def config_candidates(explicit: str | None, cwd: str, home: str) -> list[str]:
    """The files looked up, in order (the explicit one alone when given)."""
    if explicit is not None:
        return [explicit]
    return [
        os.path.join(cwd, ".acpkit", "agent.toml"),
        os.path.join(home, ".config", "acpkit", "agent.toml"),
    ]


def find_config(explicit: str | None, cwd: str, home: str) -> str | None:
    """The configuration file to use, or None. An explicit file must exist."""
    if explicit is not None:
        return explicit
    for candidate in config_candidates(None, cwd, home):
        if os.path.exists(candidate):
            return candidate
    return None


def load_config(
    explicit: str | None = None, *, cwd: str | None = None, home: str | None = None
) -> AgentConfig:
    """Find, read and validate the configuration; :class:`ConfigError` when it is unusable."""
    cwd = cwd if cwd is not None else os.getcwd()
    home = home if home is not None else os.path.expanduser("~")
    path = find_config(explicit, cwd, home)
    if path is None:
        return AgentConfig()
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
    return parse_config(data, path)
