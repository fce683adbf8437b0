"""
The console scripts' entry points, which make sure ``acpkit`` is ours before importing it.

The PyPI name ``acpkit`` belongs to an unrelated project that installs its own top-level
``acpkit/`` package (this project is distributed as ``txacpkit``). With both installed, the
``acpkit`` that Python imports may be theirs, or a mix of both, and our commands fail deep
inside an import. `acpkit_owner_problem` finds that out *without importing* ``acpkit``, so
this module lives outside it (``acpkit_client/__init__.py`` imports nothing): each console
script (``acpkit-client``, ``acpkit-conformance``, ``acp-agent``), ``python -m
acpkit_client`` and ``python -m acpkit_agent`` first call it, and on a clash print one line
naming the other distribution and the fix, and exit with `CLASH_EXIT_STATUS` (2).

How ownership is decided, cheaply (no scan of every installed distribution on the way to a
normal start):

1. ``importlib.util.find_spec("acpkit")`` says where the package Python would import lives;
2. the distributions installed in that same ``sys.path`` entry (``*.dist-info`` /
   ``*.egg-info`` beside the package) that claim the top-level name ``acpkit``, by their
   ``top_level.txt`` or, for wheels built without one, their ``RECORD``, are its owners:
   any owner other than ``txacpkit`` is a clash, even beside ours (the files are mixed);
   those directories are read directly, without importing ``importlib.metadata``;
3. with no owner there (a source checkout, an editable install), the package is ours when
   it holds our vendored schema notice (``acpkit/schemas/v1/NOTICE``); otherwise it is
   someone else's, and only then are all distributions scanned to name its owner.

Then each command checks that the extra it needs is installed (``acpkit-client`` the
``client`` extra, ``acpkit-conformance`` the ``conformance`` one, ``acp-agent`` the
``agent`` one; a plain
``pip install txacpkit`` installs only the core): `missing_extra` looks each of the
extra's top-level modules up with ``find_spec`` (nothing is imported), and a missing one
gets one line naming the extra and its install command, exit `MISSING_EXTRA_EXIT_STATUS`.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib import metadata

__all__ = [
    "CLASH_EXIT_STATUS",
    "DISTRIBUTION",
    "EXTRA_MODULES",
    "INTERRUPTED_EXIT_STATUS",
    "MISSING_EXTRA_EXIT_STATUS",
    "acp_agent",
    "acpkit_client",
    "acpkit_conformance",
    "acpkit_owner_problem",
    "exit_on_clash",
    "missing_extra",
]

#: The name of the distribution that provides acpkit, its agent and its client.
DISTRIBUTION = "txacpkit"
#: The exit status of a console script that found another ``acpkit`` package.
CLASH_EXIT_STATUS = 2
#: The exit status of a console script whose extra is not installed.
MISSING_EXTRA_EXIT_STATUS = 2
#: Each extra a command may need, and the top-level modules its distributions provide
#: (setup.cfg's ``[options.extras_require]``; tests/project/test_extras.py keeps them in step).
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "agent": ("treq", "yaml", "lsprotocol"),
    "client": ("urwid", "pygments", "pathspec", "treq", "h2"),
    "conformance": ("hypothesis", "jsonschema"),
}
#: A file only our ``acpkit`` package has (the notice of the vendored ACP schemas).
_OUR_MARKER = Path("schemas", "v1", "NOTICE")


def _normalize(name: str) -> str:
    """A distribution name as PEP 503 compares it."""
    return "-".join(name.replace("_", "-").replace(".", "-").lower().split("-"))


def _claims_acpkit(dist: metadata.Distribution | _InfoDirectory) -> bool:
    """Whether ``dist`` installs the top-level package ``acpkit``."""
    top_level = dist.read_text("top_level.txt")
    if top_level is not None:
        return "acpkit" in top_level.split()
    record = dist.read_text("RECORD") or dist.read_text("installed-files.txt") or ""
    return any(line.replace("\\", "/").startswith("acpkit/") for line in record.splitlines())


def _owners(
    distributions: Iterable[metadata.Distribution | _InfoDirectory],
) -> list[tuple[str, str]]:
    """``(name, version)`` of each distribution of ``distributions`` that claims ``acpkit``."""
    owners = []
    for dist in distributions:
        if _claims_acpkit(dist):
            owners.append((dist.metadata["Name"] or "?", dist.version or "?"))
    return owners


#: The metadata directories of installed distributions (what importlib.metadata finds in a
#: ``sys.path`` entry), by the end of their name, compared in lower case.
_INFO_SUFFIXES = (".dist-info", ".egg-info")


class _InfoDirectory:
    """
    One distribution's metadata directory, read the way :mod:`importlib.metadata` reads
    it, for the few files the check needs: importing ``importlib.metadata`` (and ``email``,
    ``zipfile``, ``csv`` with it) costs every command start 20-30 ms of CPU, more than
    the check itself.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def read_text(self, name: str) -> str | None:
        """The text of the file ``name``, None when it cannot be read (as importlib's)."""
        try:
            return (self.path / name).read_text(encoding="utf-8")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
            return None

    @property
    def metadata(self) -> dict[str, str | None]:
        """``Name`` and ``Version`` from the core metadata's headers (``METADATA``, or an
        egg's ``PKG-INFO``): the first of each, before the first blank line."""
        text = self.read_text("METADATA") or self.read_text("PKG-INFO") or ""
        fields: dict[str, str | None] = {"Name": None, "Version": None}
        for line in text.splitlines():
            if not line.strip():
                break
            key, _, value = line.partition(":")
            if key in fields and fields[key] is None:
                fields[key] = value.strip()
        return fields

    @property
    def version(self) -> str | None:
        return self.metadata["Version"]


def _info_directories(directory: Path) -> list[_InfoDirectory]:
    """The distributions installed in the ``sys.path`` entry ``directory``."""
    try:
        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
    except OSError:
        return []
    return [
        _InfoDirectory(Path(entry.path))
        for entry in entries
        if entry.name.lower().endswith(_INFO_SUFFIXES) and entry.is_dir()
    ]


def _foreign_owners(package: Path) -> list[tuple[str, str]] | None:
    """
    ``None`` when the package directory ``package`` is ours; otherwise the other
    distributions that own it (an empty list when none does).
    """
    ours = _normalize(DISTRIBUTION)
    beside = _owners(_info_directories(package.parent))
    if beside:
        return [owner for owner in beside if _normalize(owner[0]) != ours] or None
    if (package / _OUR_MARKER).is_file():
        return None  # our source checkout, or our editable install
    # someone else's package: only now is every installed distribution read, to name it
    from importlib import metadata

    return [owner for owner in _owners(metadata.distributions()) if _normalize(owner[0]) != ours]


def acpkit_owner_problem() -> str | None:
    """
    ``None`` when the ``acpkit`` package Python would import is txacpkit's; otherwise the
    one-line explanation (which other distribution owns it, and how to fix it). Never
    imports ``acpkit``.
    """
    spec = importlib.util.find_spec("acpkit")
    if spec is None:
        return (
            f"the acpkit package is missing: reinstall {DISTRIBUTION} "
            f"(python -m pip install --force-reinstall {DISTRIBUTION})"
        )
    locations = list(spec.submodule_search_locations or [])
    package = Path(locations[0] if locations else os.path.dirname(spec.origin or "."))
    others = _foreign_owners(package)
    if others is None:
        return None
    imported = f"the 'acpkit' package Python imports ({package})"
    separately = f"or install {DISTRIBUTION} in a separate virtual environment"
    if not others:
        return (
            f"{imported} is not {DISTRIBUTION}'s (this command's) and no installed "
            f"distribution owns it: remove it from sys.path (PYTHONPATH, the current "
            f"directory), {separately}"
        )
    names = " and ".join(f"'{name}' {version}" for name, version in others)
    return (
        f"{imported} belongs to the distribution {names}, an unrelated project with the same "
        f"package name, not to {DISTRIBUTION} (this command's): uninstall it, then reinstall "
        f"{DISTRIBUTION}, whose files it may have overwritten (python -m pip uninstall "
        f"{others[0][0]}; python -m pip install --force-reinstall --no-deps {DISTRIBUTION}), "
        f"{separately}"
    )


def exit_on_clash(command: str) -> None:
    """Print the clash in one line on stderr and exit `CLASH_EXIT_STATUS`, if there is one."""
    problem = acpkit_owner_problem()
    if problem is not None:
        print(f"{command}: cannot start: {problem}", file=sys.stderr)
        raise SystemExit(CLASH_EXIT_STATUS)


def _importable(module: str) -> bool:
    """Whether a top-level ``module`` can be found (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a finder that refuses it
        return False


def missing_extra(command: str, extra: str) -> str | None:
    """
    ``None`` when every module of ``extra`` can be imported; otherwise the one line that
    says ``command`` needs that extra and how to install it. Imports nothing.
    """
    missing = [name for name in EXTRA_MODULES[extra] if not _importable(name)]
    if not missing:
        return None
    return (
        f"{command} needs the '{extra}' extra ({', '.join(missing)} missing): "
        f"python -m pip install '{DISTRIBUTION}[{extra}]'"
    )


def exit_on_missing_extra(command: str, extra: str) -> None:
    """Print `missing_extra`'s line on stderr and exit, if the extra is missing."""
    problem = missing_extra(command, extra)
    if problem is not None:
        print(problem, file=sys.stderr)
        raise SystemExit(MISSING_EXTRA_EXIT_STATUS)


#: The exit status of a command interrupted (Ctrl-C) before it could handle it: 128 + SIGINT.
INTERRUPTED_EXIT_STATUS = 130


def _run(command: str, extra: str, load: Callable[[], Callable[[], int]]) -> int:
    """
    Check, import and run ``command``.  A Ctrl-C that arrives before the command handles
    signals (while its modules are still importing, say) ends it with one line and
    status :data:`INTERRUPTED_EXIT_STATUS`, not a traceback from importlib.
    """
    exit_on_clash(command)
    exit_on_missing_extra(command, extra)
    from acpkit_client.startup import startup_imports  # after the checks, like the command

    try:
        with startup_imports():
            main = load()
        return main()
    except KeyboardInterrupt:
        print(f"\n{command}: interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT_STATUS


def acpkit_client() -> int:
    """The ``acpkit-client`` console script."""

    def load() -> Callable[[], int]:
        from acpkit_client.cli import main

        return main

    return _run("acpkit-client", "client", load)


def acp_agent() -> int:
    """The ``acp-agent`` console script (and ``python -m acpkit_agent``): bob."""

    def load() -> Callable[[], int]:
        from acpkit_agent.cli import main

        return main

    return _run("acp-agent", "agent", load)


def acpkit_conformance() -> int:
    """The ``acpkit-conformance`` console script."""

    def load() -> Callable[[], int]:
        from acpkit.conformance.cli import main

        return main

    return _run("acpkit-conformance", "conformance", load)
